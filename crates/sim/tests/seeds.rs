//! A fixed set of seeds, across every generated workload, runs clean: no wrong data, no
//! failed invariant, no deadlock, with every fault site the seeds draw.
//!
//! Each workload is pinned in turn and seeds 0..SEEDS_PER_WORKLOAD run with everything
//! else drawn from the seed (threads, engine configuration, mix, fault sites, scheduler).
//! Seeds that hit an *open* engine bug are listed in `OPEN_ENGINE_BUGS` with the bug they
//! hit; tests/engine_findings.rs replays them (ignored until the engine is fixed). Once a
//! bug is fixed, its seeds come back here.

use sim::{run_seed, Overrides, WorkloadKind};

const SEEDS_PER_WORKLOAD: u64 = 8;

/// (workload, seed, the open engine bug it hits): see tests/engine_findings.rs. None open
/// (A-D fixed in fb4f059, E and F in this branch).
const OPEN_ENGINE_BUGS: [(WorkloadKind, u64, &str); 0] = [];

#[test]
fn fixed_seeds_across_workloads_run_clean() {
    let mut ran = 0;
    for workload in WorkloadKind::DRAWN {
        let pinned = Overrides { workload: Some(workload), ..Overrides::default() };
        for seed in 0..SEEDS_PER_WORKLOAD {
            if OPEN_ENGINE_BUGS.iter().any(|&(w, s, _)| (w, s) == (workload, seed)) {
                continue;
            }
            let report = run_seed(seed, &pinned).expect("valid options");
            assert!(report.passed(), "{}", report.failure_report("--workload ..."));
            assert!(report.ops > 100, "seed {seed} {workload:?} ran {} ops", report.ops);
            assert!(report.reads_checked > 0, "seed {seed} {workload:?} checked no read");
            assert!(report.invariant_checks > 0, "seed {seed} {workload:?}: no quiescent check");
            ran += 1;
        }
    }
    assert_eq!(ran, 5 * SEEDS_PER_WORKLOAD as usize - OPEN_ENGINE_BUGS.len());
}
