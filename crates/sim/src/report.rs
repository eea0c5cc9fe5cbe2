//! What a run reports: the outcome, the engine's counters at the end, the run's digest,
//! and, on failure, everything needed to replay it.
//!
//! A failure prints as
//!
//! ```text
//!   FAILED seed=17 commit=0123456789ab
//!     wrong data: mm 0 page 0x7f0000003000: read page 0x7f0000003000 v12, expected v15
//!       (written by thread 1 in op #33) [step 1234, thread 2, op #57, t=812 us]
//!     options: workload=uniform threads=3 ops=800 ... faults=read_fail=1% ...
//!     replay:  uswap sim --seed 17 --workload uniform
//! ```
//!
//! The digest folds every executed operation (thread, index, kind, range, result) in the
//! order the scheduler ran them, then every final counter: two runs with the same digest
//! did the same thing, which is what "a seed replays exactly" means.

use crate::buggify::Site;
use crate::failure::{Failure, FailureKind};
use crate::options::SimOptions;
use engine::stats::StatsSnapshot;
use std::time::Duration;

/// The commit the simulator was built from (`-dirty` with uncommitted changes).
pub const COMMIT: &str = env!("USWAP_SIM_COMMIT");

/// What a replayed trace held and what its evictions did (the replay workload only).
///
/// A trace's Evict records (the recording engine's page-outs) replay as `MADV_PAGEOUT` of
/// their range, at their place in their recorded thread's sequence: the replay's engine
/// pages out those folios if it holds them resident then, besides whatever its own budget
/// makes it reclaim. A recorded eviction of a page the replay has not touched (or has
/// already paged out) pages nothing out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayCounts {
    /// The trace's records by kind, in code order (`RecordKind::ALL`).
    pub records: [u64; crate::trace::RecordKind::ALL.len()],
    /// Page-outs replayed (the Evict records within the run's operation limit).
    pub pageouts: u64,
    /// Pages those page-outs took.
    pub pageout_pages: u64,
}

impl ReplayCounts {
    /// Records of `kind` in the trace.
    pub fn records_of(&self, kind: crate::trace::RecordKind) -> u64 {
        self.records[usize::from(kind.code())]
    }

    /// One line: the trace's records by kind, and what its evictions did.
    pub fn describe(&self) -> String {
        use crate::trace::RecordKind as K;
        format!(
            "trace records: fault-read {} fault-write {} evict {} remove {} unmap {} fork {} \
             remap {}; evictions replayed {} (paged out {} pages)",
            self.records_of(K::FaultRead),
            self.records_of(K::FaultWrite),
            self.records_of(K::Evict),
            self.records_of(K::Remove),
            self.records_of(K::Unmap),
            self.records_of(K::Fork),
            self.records_of(K::RemapTo),
            self.pageouts,
            self.pageout_pages
        )
    }
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The options it ran with.
    pub options: SimOptions,
    /// What failed, if anything.
    pub failure: Option<Failure>,
    /// The engine's counters at the end.
    pub stats: Option<StatsSnapshot>,
    /// The fingerprint of the operation log and the final counters.
    pub digest: u64,
    /// Scheduler steps.
    pub steps: u64,
    /// Simulated time, nanoseconds.
    pub sim_time_ns: u64,
    /// Operations executed.
    pub ops: u64,
    /// Quiescent invariant checks run.
    pub invariant_checks: u64,
    /// Reads compared with the model.
    pub reads_checked: u64,
    /// Pages lost loudly (poisoned and dropped).
    pub pages_lost: u64,
    /// Ranges moved (mremap; the kernel build's workload).
    pub remaps: u64,
    /// A replayed trace's records and what its evictions did.
    pub replay: Option<ReplayCounts>,
    /// How full the swap device ran after the warm-up: (mean, max) percent.
    pub swap_fill_percent: (u64, u64),
    /// How often each fault site fired.
    pub faults_fired: Vec<(Site, u64)>,
    /// Wall-clock time of the run.
    pub wall: Duration,
}

impl RunReport {
    /// A run that could not even start.
    pub fn setup_failed(options: &SimOptions, error: String, wall: Duration) -> RunReport {
        let kind = FailureKind::Engine { op: "setup".into(), error };
        RunReport {
            options: options.clone(),
            failure: Some(Failure { kind, thread: None, op: None, step: 0, now_ns: 0 }),
            stats: None,
            digest: 0,
            steps: 0,
            sim_time_ns: 0,
            ops: 0,
            invariant_checks: 0,
            reads_checked: 0,
            pages_lost: 0,
            remaps: 0,
            replay: None,
            swap_fill_percent: (0, 0),
            faults_fired: Vec::new(),
            wall,
        }
    }

    /// Did the run pass?
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// One line: seed, verdict, the main figures.
    pub fn summary_line(&self) -> String {
        let verdict = if self.passed() { "ok" } else { "FAILED" };
        let c = self.stats.as_ref().map(|s| &s.counters);
        format!(
            "seed={} {verdict} workload={} ops={} steps={} reads_checked={} lost={} checks={} \
             remaps={} swpout={} swpin={} zswpout={} zero_mapped={} wp={} faults_fired={} \
             digest={:016x} wall={:.2}s",
            self.options.seed,
            self.options.workload.name(),
            self.ops,
            self.steps,
            self.reads_checked,
            self.pages_lost,
            self.invariant_checks,
            self.remaps,
            c.map_or(0, |c| c.pswpout + c.swpout_zero),
            c.map_or(0, |c| c.pswpin + c.swpin_zero),
            c.map_or(0, |c| c.zswpout),
            c.map_or(0, |c| c.zero_mapped),
            c.map_or(0, |c| c.pgfault_wp),
            self.faults_fired.iter().map(|(_, n)| n).sum::<u64>(),
            self.digest,
            self.wall.as_secs_f64(),
        )
    }

    /// The full failure report (empty for a pass): seed, commit, what, options, replay.
    /// `overrides` are the command-line flags the run was given besides the seed.
    pub fn failure_report(&self, overrides: &str) -> String {
        let Some(failure) = &self.failure else { return String::new() };
        let seed = self.options.seed;
        let extra = if overrides.is_empty() { String::new() } else { format!(" {overrides}") };
        format!(
            "FAILED seed={seed} commit={COMMIT}\n  {failure}\n  options: {}\n  \
             replay:  uswap sim --seed {seed}{extra}\n",
            self.options.describe()
        )
    }

    /// The engine's counters as `name value` lines (vmstat style), and the per-order ones.
    pub fn counters_text(&self) -> String {
        let Some(stats) = &self.stats else { return String::new() };
        let mut out = String::new();
        for (name, value) in stats.counters.fields() {
            out.push_str(&format!("{name} {value}\n"));
        }
        let p = &stats.per_order;
        for order in 0..engine::stats::NR_ORDERS {
            let row = [p.swpout[order], p.swpout_fallback[order], p.swpin[order]];
            if row.iter().any(|&v| v > 0) {
                out.push_str(&format!(
                    "order{order} swpout {} swpout_fallback {} swpin {}\n",
                    row[0], row[1], row[2]
                ));
            }
        }
        out
    }
}
