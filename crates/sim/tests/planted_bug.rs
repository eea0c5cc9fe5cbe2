//! The simulator must find a known race: the planted bug (engine::hooks, debug builds)
//! skips page-in's check that a folio is still the swap cache's folio for its entry after
//! waiting on it, the ABA race of the engine's regression test
//! `a_folio_no_longer_in_the_swap_cache_is_never_mapped`. A waiter sleeps on folio F while
//! its page is swapped in; the page is mapped, written, and paged out again to the same
//! slot (freed and reallocated at once on a full device); the waiter wakes, finds the page
//! table pointing at that slot again, and maps F's stale data.
//!
//! Reaching that interleaving needs the baton scheduler to switch inside backend I/O and
//! folio waits, and to keep the waiter off the CPU for a while (the PCT scheduler of the
//! `race` preset). The test asserts the bug is caught within 100 seeds, and that the same
//! seeds pass with the bug off, so the failure is the bug's and nothing else's.

#![cfg(debug_assertions)]

use sim::failure::FailureKind;
use sim::{run_seed, Overrides};

#[test]
fn the_planted_revalidation_bug_is_caught_within_100_seeds() {
    let race = Overrides::race();
    let planted = Overrides { planted_bug: true, ..race.clone() };
    let caught = (0..100u64).find_map(|seed| {
        let report = run_seed(seed, &planted).expect("valid options");
        report.failure.map(|failure| (seed, failure))
    });
    let (first, failure) = caught.expect("the planted bug survived 100 seeds");
    assert!(
        matches!(
            failure.kind,
            FailureKind::WrongData { .. }
                | FailureKind::Invariant { .. }
                | FailureKind::Panic { .. }
        ),
        "seed {first}: unexpected failure {failure}"
    );
    for seed in 0..=first {
        let report = run_seed(seed, &race).expect("valid options");
        assert!(report.passed(), "without the bug: {}", report.failure_report("--preset race"));
    }
}

#[test]
fn the_planted_bug_replays_exactly() {
    let planted = Overrides { planted_bug: true, ..Overrides::race() };
    let seed = (0..100u64)
        .find(|&seed| !run_seed(seed, &planted).expect("valid").passed())
        .expect("caught within 100 seeds");
    let (a, b) =
        (run_seed(seed, &planted).expect("valid"), run_seed(seed, &planted).expect("valid"));
    assert_eq!(a.failure, b.failure, "the same failure at the same step");
    assert_eq!(a.digest, b.digest);
}
