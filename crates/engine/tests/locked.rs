//! A program that locks all its memory (`mlockall`): while the call runs and after it,
//! reclaim takes nothing; the lock is counted once it holds; after `munlockall`, or a call
//! that failed, reclaim brings the charge back under the budget.

mod common;

use common::{addr, check_pages, content, setup, PAGE};
use engine::{AllLocked, EngineConfig};

const PAGE_BYTES: u64 = PAGE as u64;

#[test]
fn reclaim_waits_while_the_program_locks_and_resumes_when_it_unlocks() {
    let budget = 256 * PAGE_BYTES;
    let config = EngineConfig {
        budget_bytes: budget,
        background_reclaim: false,
        zswap: None,
        ..EngineConfig::default()
    };
    let pages = 1024;
    let (engine, source) = setup(config, pages);
    // The call brings in every page: none is taken out while it runs.
    engine.set_all_locked(AllLocked::Locking);
    for page in 0..pages {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let stats = engine.stats();
    assert_eq!(stats.counters.pswpout + stats.counters.swpout_zero, 0, "{:?}", stats.counters);
    assert!(stats.counters.reclaim_locked > 0, "reclaim was tried and stopped");
    assert_eq!(stats.counters.all_locked, 0, "not counted before the call returns");
    assert!(engine.charged_bytes() >= pages * PAGE_BYTES);
    engine.set_all_locked(AllLocked::Locked);
    assert_eq!(engine.stats().counters.all_locked, 1);
    assert_eq!(engine.reclaim(), 0, "locked: nothing goes");
    // Unlocked: the charge comes back under the budget, every page intact.
    engine.set_all_locked(AllLocked::Unlocked);
    assert!(engine.reclaim() > 0);
    assert!(engine.charged_bytes() <= budget, "{} of {budget}", engine.charged_bytes());
    check_pages(&engine, &source, 0..pages, 1);
    engine.check_invariants();
}
