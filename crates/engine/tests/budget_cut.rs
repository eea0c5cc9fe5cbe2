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
/// first passes, and the outside charge taking four fifths of the budget. What the budget
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
        let budget = 1024 * PAGE_BYTES;
        // The room the outside charge leaves holds the working floor (a sixteenth of the
        // budget) and the pool's fixed bytes, so the charge can come under the budget with
        // the floor resident (in a tenth those two alone may not fit, and reclaim then
        // rightly stops at the floor, over the budget).
        let room = budget / 5;
        let pool = engine.stats().gauges.pool_bytes;
        assert!(pool > 2 * room, "{background_reclaim}: the pool holds {pool} bytes");
        let written_back = engine.stats().counters.zswpwb;
        engine.set_outside_room(room);
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
        // The pool wrote back after the cut, not only while it filled.
        assert!(engine.stats().counters.zswpwb > written_back, "{background_reclaim}");
        check_pages(&engine, &source, 0..PAGES, 1);
        engine.check_invariants();
    }
}

/// An outside charge that fills the budget by itself (all but one page of it): reclaim
/// stops at the working floor instead of paging out the last resident pages. A program
/// that walks 16 pages in turn took a major fault on every access, each fault evicting
/// the page the one before had mapped (a Redis server under `uswap bench compare` made
/// 18 000 faults a second for minutes, its pool's bookkeeping and its libraries taking
/// the whole budget); at the floor the walk's pages stay mapped and the charge runs over
/// the budget by at most the floor. No pool: the charge is the resident pages and the
/// outside charge alone.
#[test]
fn an_outside_charge_filling_the_budget_leaves_a_working_floor() {
    for background_reclaim in [true, false] {
        let budget = 1024 * PAGE_BYTES;
        let config = EngineConfig {
            budget_bytes: budget,
            background_reclaim,
            zswap: None,
            ..EngineConfig::default()
        };
        let (engine, source) = setup(config, PAGES);
        for page in 0..PAGES {
            source.write(&engine, addr(page), &content(page, 1)).unwrap();
        }
        engine.set_outside_room(PAGE_BYTES);
        engine.set_outside_charge(budget);
        let mut buf = vec![0u8; PAGE];
        let walk = 16;
        for turn in 0..10 {
            for page in 0..walk {
                source.read(&engine, addr(page), &mut buf).unwrap();
                assert_eq!(buf, content(page, 1), "{background_reclaim}: turn {turn}, page {page}");
            }
        }
        let stats = engine.stats();
        let faults = stats.counters.pgmajfault;
        assert!(faults <= 2 * walk, "{background_reclaim}: {faults} major faults for {walk} pages");
        assert!(stats.counters.reclaim_floor > 0, "{background_reclaim}: {:?}", stats.counters);
        let floor = budget / 16;
        let over = engine.charged_bytes().saturating_sub(budget);
        assert!(over <= floor + 64 * 1024, "{background_reclaim}: {over} bytes over the budget");
        check_pages(&engine, &source, 0..PAGES, 1);
        engine.check_invariants();
    }
}
