//! The broker's policy over real engines (`sim::tree`): seeds drawn at random pass every
//! check and replay to the same digest, and directed trees show the policy's promises:
//! a refaulting engine gains share from a cold one, an exited engine's share returns, a
//! new process gets a share at once, more floors than budget give each its floor.

use sim::tree::{run_tree, Phase, ProcPlan, TreeOptions, TreeReport, GAIN_TICKS_MAX};

const MIB_PAGES: u64 = 256;

#[test]
fn seeds_pass_and_replay_to_the_same_digest() {
    let mut paged_out = 0;
    for seed in 0..6 {
        let options = TreeOptions::draw(seed);
        let report = run_tree(&options);
        eprintln!("{}", report.summary_line());
        assert!(report.passed(), "seed {seed}: {:?}\n{}", report.failure, options.describe());
        assert!(report.reads_checked > 1000, "{}", report.summary_line());
        paged_out += report.pages_out;
        let again = run_tree(&options);
        assert_eq!(again.digest, report.digest, "seed {seed} replays");
    }
    assert!(paged_out > 10_000, "the seeds put the budget under pressure: {paged_out}");
}

fn tree(budget_mib: u64, ticks: u64, accesses: u64, procs: Vec<ProcPlan>) -> TreeReport {
    let budget_pages = budget_mib * MIB_PAGES;
    let options = TreeOptions { seed: 7, budget_pages, ticks, accesses, procs };
    let report = run_tree(&options);
    eprintln!("{}", report.summary_line());
    assert!(report.passed(), "{:?}\n{}", report.failure, options.describe());
    report
}

fn plan(start: u64, end: u64, mib: u64, phases: &[(u64, Phase)]) -> ProcPlan {
    ProcPlan { start, end, phases: phases.to_vec(), region_pages: mib * MIB_PAGES }
}

/// The share process `index` had at `tick` (0 when it was not live).
fn share(report: &TreeReport, tick: usize, index: usize) -> u64 {
    report.shares[tick].iter().find(|(i, _)| *i == index).map_or(0, |&(_, s)| s)
}

/// Process 0 fills 12 MiB and goes idle; process 1 then fills 22 MiB and walks it in a
/// cycle under a 24 MiB budget: it refaults, and budget moves to it from process 0's cold
/// memory, each time within GAIN_TICKS_MAX ticks, until process 0 is near its floor.
#[test]
fn a_refaulting_engine_gains_share_from_a_cold_one() {
    let scan = Phase::Scan { ws: 22 * MIB_PAGES };
    let report = tree(
        24,
        48,
        800,
        vec![
            plan(0, 48, 12, &[(6, Phase::Grow), (48, Phase::Idle)]),
            plan(8, 48, 22, &[(16, Phase::Grow), (48, scan)]),
        ],
    );
    assert!(report.gains >= 1, "the check applied: {}", report.summary_line());
    assert!(report.slowest_gain_ticks <= GAIN_TICKS_MAX);
    let (idle, scanning) = (share(&report, 46, 0), share(&report, 46, 1));
    assert!(scanning > 3 * idle, "idle {idle}, scanning {scanning}");
    assert!(idle < 6 << 20, "the idle engine is near its 4 MiB floor: {idle}");
}

/// Two processes work over more than the budget; one exits at tick 20, and the other's
/// share takes the whole budget within a tick or two. A process that starts gets a share
/// (at least its floor) at the tick it starts.
#[test]
fn an_exited_engines_share_returns_and_a_new_one_gets_a_share_at_once() {
    let hot = Phase::Hot { ws: 12 * MIB_PAGES };
    let report = tree(
        16,
        40,
        200,
        vec![
            plan(0, 40, 12, &[(6, Phase::Grow), (40, hot)]),
            plan(0, 20, 12, &[(6, Phase::Grow), (20, hot)]),
            plan(30, 40, 4, &[(40, Phase::Grow)]),
        ],
    );
    assert!(share(&report, 15, 0) < 12 << 20, "two share 16 MiB: {}", share(&report, 15, 0));
    assert!(
        share(&report, 22, 0) >= 15 << 20,
        "the leaver's share is back: {}",
        share(&report, 22, 0)
    );
    assert!(share(&report, 30, 2) >= 4 << 20, "the newcomer's floor at once");
    assert_eq!(report.exits, 3);
}

/// Six processes under 16 MiB: their 4 MiB floors pass the budget. Each gets its floor,
/// the run says it was over-committed, and every page still reads back.
#[test]
fn more_floors_than_budget_give_each_its_floor() {
    let hot = Phase::Hot { ws: 3 * MIB_PAGES };
    let procs = (0..6).map(|_| plan(0, 24, 4, &[(4, Phase::Grow), (24, hot)])).collect();
    let report = tree(16, 24, 200, procs);
    assert!(report.overcommitted_ticks > 0);
    assert!(report.shares[10].iter().all(|&(_, s)| s == 4 << 20), "{:?}", report.shares[10]);
}
