//! A budget cut at once, under an outside charge that leaves little room: the charge comes
//! down under the new budget, through the pool's writeback once nothing resident is left
//! to page out, and every page reads back its data.

mod common;

use common::{addr, check_pages, content, setup, PAGE};
use engine::EngineConfig;
use std::time::{Duration, Instant};

const PAGE_BYTES: u64 = PAGE as u64;
/// The region: 32 MiB, written under 16 MiB, then cut to 4 MiB.
const PAGES: u64 = 8192;

/// The budget of a forked child given its first share: the pool full of entries stored
/// since its last writeback pass (every one referenced), within its new limit after the
/// first passes, and the outside charge taking nine tenths of the budget. What the budget
/// lacks is then in the pool alone: a shrinker that stopped at the pool's own limit, or
/// at a pass that only cleared referenced bits, left the charge over the budget for good,
/// and each page a fault brought in was the reclaimer's next victim.
#[test]
fn a_budget_cut_under_an_outside_charge_is_met_by_the_pools_writeback() {
    for background_reclaim in [true, false] {
        let config = EngineConfig {
            budget_bytes: 4096 * PAGE_BYTES,
            background_reclaim,
            zswap: Some(engine::config::ZswapSettings::default()),
            ..EngineConfig::default()
        };
        let (engine, source) = setup(config, PAGES);
        for page in 0..PAGES {
            source.write(&engine, addr(page), &content(page, 1)).unwrap();
        }
        let pool = engine.stats().gauges.pool_bytes;
        assert!(pool > 512 * PAGE_BYTES, "{background_reclaim}: the pool holds {pool} bytes");
        let budget = 1024 * PAGE_BYTES;
        engine.set_outside_room(budget / 10);
        engine.set_budget(budget).unwrap();
        engine.set_outside_charge(budget);
        let deadline = Instant::now() + Duration::from_secs(20);
        // Without a reclaimer, each fault's direct reclaim does the work: read pages.
        let mut buf = vec![0u8; PAGE];
        let mut next = 0;
        while engine.charged_bytes() > budget {
            assert!(
                Instant::now() < deadline,
                "{background_reclaim}: still {} charged of {budget}: {:?}",
                engine.charged_bytes(),
                engine.stats().gauges
            );
            if background_reclaim {
                std::thread::sleep(Duration::from_millis(1));
            } else {
                source.read(&engine, addr(next % PAGES), &mut buf).unwrap();
                assert_eq!(buf, content(next % PAGES, 1), "page {next}");
                next += 1;
            }
        }
        assert!(engine.stats().counters.zswpwb > 0, "{background_reclaim}");
        check_pages(&engine, &source, 0..PAGES, 1);
        engine.check_invariants();
    }
}
