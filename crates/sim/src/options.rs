//! A run's options, all drawn from its seed (swarm testing), with the command line able to
//! pin any of them.
//!
//! Every option is drawn from the seed's `options` stream in one fixed order, *then* the
//! overrides are applied. So pinning one option never shifts the others: `--seed 7
//! --order 4` is seed 7's run with order 4, everything else as seed 7 drew it. A replay
//! needs the seed and the same overrides, which the failure report prints as a command.
//!
//! The draw (TigerBeetle's `options_swarm`) varies the workload, its operation mix, the
//! engine's configuration and the fault sites from seed to seed, so a thousand seeds cover
//! a thousand different worlds instead of one world a thousand times.

use crate::buggify::{Faults, Site, NR_SITES};
use crate::rng::SimRng;
use crate::sched::SchedMode;
use crate::world::Latency;
use engine::{LargeFolios, PAGE_SIZE};
use slots::{AllocPolicy, SWAPFILE_CLUSTER};
use std::path::PathBuf;
use zswap::{CompressorKind, Incompressible};

/// Which program the simulated threads run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    /// Each thread walks the heap page by page from its own starting point.
    Sequential,
    /// Uniformly random pages.
    Uniform,
    /// Zipf-distributed pages (a hot set and a long tail).
    Zipf,
    /// A hot window that jumps to a new place every phase.
    Phases,
    /// A kernel build: objects of many sizes created, filled, used and unmapped after
    /// random lifetimes, keeping the swap device 80-95% full.
    Kbuild,
    /// The operations of a trace written by `uswap run --record` (or `--write-trace`).
    Replay,
}

impl WorkloadKind {
    /// Every workload the swarm draws from (replay needs a file).
    pub const DRAWN: [WorkloadKind; 5] = [
        WorkloadKind::Sequential,
        WorkloadKind::Uniform,
        WorkloadKind::Zipf,
        WorkloadKind::Phases,
        WorkloadKind::Kbuild,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Sequential => "sequential",
            WorkloadKind::Uniform => "uniform",
            WorkloadKind::Zipf => "zipf",
            WorkloadKind::Phases => "phases",
            WorkloadKind::Kbuild => "kbuild",
            WorkloadKind::Replay => "replay",
        }
    }

    /// The workload named `name`.
    pub fn from_name(name: &str) -> Option<WorkloadKind> {
        [WorkloadKind::Replay].into_iter().chain(Self::DRAWN).find(|w| w.name() == name)
    }
}

/// What the program threads do, in proportions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix {
    /// Accesses that are reads (the rest are writes), percent.
    pub read_percent: u32,
    /// Writes that store an all-zero page, percent.
    pub zero_write_percent: u32,
    /// Operations that page a range out at once (MADV_PAGEOUT), ppm.
    pub pageout_ppm: u32,
    /// Operations that drop a range (MADV_DONTNEED), ppm.
    pub remove_ppm: u32,
    /// Operations that fork a child which reads the parent's pages, ppm.
    pub fork_ppm: u32,
    /// The Zipf exponent.
    pub zipf_theta: f64,
}

/// Everything one run does (see the module documentation).
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The seed everything is drawn from.
    pub seed: u64,
    /// The program.
    pub workload: WorkloadKind,
    /// The trace replayed by [`WorkloadKind::Replay`].
    pub trace: Option<PathBuf>,
    /// Program threads (the reclaimer is one more).
    pub threads: usize,
    /// Operations per program thread.
    pub ops_per_thread: u64,
    /// Pages of the heap region (kbuild and replay make their own regions).
    pub region_pages: u64,
    /// The engine's memory budget, in pages.
    pub budget_pages: u64,
    /// The swap device, in pages (whole clusters).
    pub swap_pages: u64,
    /// The engine's folio order.
    pub folio_order: u32,
    /// The slot allocation policy.
    pub policy: AllocPolicy,
    /// Readahead window, pages (0: off).
    pub readahead_max_pages: u32,
    /// Swap large folios in whole.
    pub large_swapin: bool,
    /// When a fault takes a large folio (drawn after everything else, so a seed's other
    /// options do not depend on it).
    pub large_folios: LargeFolios,
    /// Discard freed clusters.
    pub discard: bool,
    /// crc32c per slot (forced on by silent faults).
    pub checksums: bool,
    /// Pages per reclaim pass.
    pub reclaim_batch_pages: u64,
    /// How the scheduler picks.
    pub sched: SchedMode,
    /// The swap device's latency.
    pub latency: Latency,
    /// The operation mix.
    pub mix: Mix,
    /// Fault sites.
    pub faults: Faults,
    /// Chance (ppm) of checking the engine's invariants at each quiescent point.
    pub check_ppm: u32,
    /// kbuild: how full the swap device is kept, percent.
    pub fill_percent: u32,
    /// The compressed pool's share of the budget, percent (0: no pool).
    pub pool_percent: u32,
    /// The pool's compressor.
    pub compressor: CompressorKind,
    /// What the pool does with a page that does not compress.
    pub incompressible: Incompressible,
    /// A crc32c per compressed object.
    pub pool_checksum: bool,
    /// The pool is one of its own beside the budget, of `pool_percent` of the budget's
    /// size, and not charged to it (`ZswapSettings::separate_bytes`).
    pub pool_separate: bool,
    /// The page source maps zero pages write-protected, and the engine keeps them
    /// uncharged until written (drawn last, with the `protect_lost` site).
    pub protect_zero: bool,
    /// Plant the page-in re-validation bug (debug builds only; the simulator must find it).
    pub planted_bug: bool,
    /// Print every operation as it completes (the op log), to stderr.
    pub verbose: bool,
}

/// How the command line sets fault sites.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FaultChoice {
    /// As the seed draws them.
    #[default]
    Swarm,
    /// None at all.
    None,
    /// Exactly these, at these rates (ppm).
    Sites(Vec<(Site, u32)>),
}

/// Parts of the operation mix pinned on the command line.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MixOverrides {
    /// `--read-percent`.
    pub read_percent: Option<u32>,
    /// `--pageout-ppm`.
    pub pageout_ppm: Option<u32>,
    /// `--remove-ppm`.
    pub remove_ppm: Option<u32>,
    /// `--fork-ppm`.
    pub fork_ppm: Option<u32>,
    /// `--zipf-theta`.
    pub zipf_theta: Option<f64>,
}

/// Options pinned on the command line; `None` keeps the seed's draw.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--workload`.
    pub workload: Option<WorkloadKind>,
    /// `--trace`.
    pub trace: Option<PathBuf>,
    /// `--threads`.
    pub threads: Option<usize>,
    /// `--ops`.
    pub ops_per_thread: Option<u64>,
    /// `--region-pages`.
    pub region_pages: Option<u64>,
    /// `--budget-pages`.
    pub budget_pages: Option<u64>,
    /// `--swap-pages`.
    pub swap_pages: Option<u64>,
    /// `--order`.
    pub folio_order: Option<u32>,
    /// `--policy`.
    pub policy: Option<AllocPolicy>,
    /// `--readahead`.
    pub readahead_max_pages: Option<u32>,
    /// `--sched`.
    pub sched: Option<SchedMode>,
    /// `--faults` / `--fault`.
    pub faults: FaultChoice,
    /// `--check-ppm`.
    pub check_ppm: Option<u32>,
    /// `--fill`.
    pub fill_percent: Option<u32>,
    /// The mix flags.
    pub mix: MixOverrides,
    /// `--pool` (percent of the budget; 0 turns the pool off).
    pub pool_percent: Option<u32>,
    /// `--compressor`.
    pub compressor: Option<CompressorKind>,
    /// `--planted-bug`.
    pub planted_bug: bool,
    /// `--verbose` (changes nothing in the run).
    pub verbose: bool,
}

/// Bounds on what a run may ask for (memory and time).
pub const THREADS_MAX: usize = 8;
/// Most operations per thread.
pub const OPS_MAX: u64 = 1 << 22;
/// Most heap pages (256 MiB of simulated memory).
pub const REGION_PAGES_MAX: u64 = 1 << 16;
/// Most swap pages (256 MiB: the memory backend holds every written slot).
pub const SWAP_PAGES_MAX: u64 = 1 << 16;

const CLUSTER: u64 = SWAPFILE_CLUSTER as u64;

/// The smallest pool zswap accepts, in pages (64 KiB).
const POOL_MIN_PAGES: u64 = 16;

impl SimOptions {
    /// Seed `seed`'s options, with `overrides` applied.
    ///
    /// # Errors
    /// A message naming an override that is out of range or inconsistent.
    pub fn draw(seed: u64, overrides: &Overrides) -> Result<SimOptions, String> {
        let mut o = Self::swarm(seed);
        o.apply(overrides);
        o.derive(overrides);
        o.validate()?;
        Ok(o)
    }

    /// The seed's own draw, before overrides.
    fn swarm(seed: u64) -> SimOptions {
        let mut rng = SimRng::stream(seed, "options");
        let workload = rng.pick(&WorkloadKind::DRAWN);
        let threads = rng.range(2, 4) as usize;
        let ops_per_thread = rng.range(300, 1200);
        let region_pages: u64 = rng.pick(&[512, 1024, 2048, 4096]);
        let folio_order = rng.pick(&[0, 0, 1, 2, 2, 3, 4, 9]);
        let budget_pages = region_pages / rng.pick(&[4, 8, 16]);
        let swap_pages = (region_pages * rng.pick(&[5u64, 8, 10, 15, 20]) / 10).div_ceil(CLUSTER);
        let policy = if rng.percent(50) { AllocPolicy::Current } else { AllocPolicy::Legacy };
        let readahead_max_pages = rng.pick(&[0, 4, 8, 32]);
        let large_swapin = rng.percent(75);
        let discard = rng.percent(25);
        let checksums = rng.percent(25);
        let reclaim_batch_pages = rng.pick(&[4, 8, 32]);
        let sched = match rng.below(10) {
            0..=3 => SchedMode::Random,
            4..=7 => SchedMode::Priority { change_ppm: rng.pick(&[10_000, 50_000, 200_000]) },
            _ => SchedMode::Timed,
        };
        let latency = if rng.percent(80) { Latency::FAST } else { Latency::SLOW };
        let mix = Mix {
            read_percent: rng.pick(&[30, 50, 70, 90]),
            zero_write_percent: rng.pick(&[0, 5, 20]),
            pageout_ppm: rng.pick(&[0, 5_000, 30_000]),
            remove_ppm: rng.pick(&[0, 2_000, 10_000]),
            fork_ppm: rng.pick(&[0, 0, 1_000, 5_000]),
            zipf_theta: rng.pick(&[0.6, 0.9, 0.99, 1.2]),
        };
        let faults = Faults::swarm(&mut rng);
        let fill_percent = rng.range(80, 95) as u32;
        let mut o = SimOptions {
            seed,
            workload,
            trace: None,
            threads,
            ops_per_thread,
            region_pages,
            budget_pages,
            swap_pages: swap_pages * CLUSTER,
            folio_order,
            policy,
            readahead_max_pages,
            large_swapin,
            large_folios: LargeFolios::Always,
            discard,
            checksums,
            reclaim_batch_pages,
            sched,
            latency,
            mix,
            faults,
            check_ppm: 1_000_000,
            fill_percent,
            pool_percent: 0,
            compressor: CompressorKind::Lz4,
            incompressible: Incompressible::StoreRaw,
            pool_checksum: false,
            pool_separate: false,
            protect_zero: false,
            planted_bug: false,
            verbose: false,
        };
        // One world in ten is a hotspot: a few hot pages written, paged out and faulted
        // back by every thread at once, on a swap device that is always full, so a freed
        // slot is reused at once (the shape of the page-in races; see `Overrides::race`).
        if rng.percent(10) {
            o.workload = WorkloadKind::Zipf;
            (o.threads, o.region_pages, o.swap_pages, o.budget_pages) = (4, 1024, 512, 64);
            o.mix.pageout_ppm = 100_000;
            o.mix.zipf_theta = 1.2;
        }
        o.draw_pool(&mut rng);
        o.large_folios =
            if rng.percent(50) { LargeFolios::Sequential } else { LargeFolios::Always };
        // Drawn last, so that no draw before it depends on this option.
        o.pool_separate = rng.percent(25);
        // Then these, for the same reason.
        o.protect_zero = rng.percent(50);
        o.faults.swarm_last(&mut rng);
        o
    }

    /// The pool's options and fault sites, drawn last (see `Faults::swarm_pool`).
    fn draw_pool(&mut self, rng: &mut SimRng) {
        self.pool_percent = rng.pick(&[0, 0, 10, 20, 20, 50]);
        self.compressor = match rng.below(20) {
            0..=13 => CompressorKind::Lz4,
            14..=16 => CompressorKind::Zstd { level: 1 },
            _ => CompressorKind::None,
        };
        self.incompressible =
            if rng.percent(70) { Incompressible::StoreRaw } else { Incompressible::Reject };
        self.pool_checksum = rng.percent(25);
        self.faults.swarm_pool(rng);
    }

    fn apply(&mut self, o: &Overrides) {
        macro_rules! pin {
            ($($field:ident),*) => { $( if let Some(v) = o.$field.clone() { self.$field = v; } )* };
        }
        pin!(workload, threads, ops_per_thread, region_pages, budget_pages, swap_pages);
        pin!(folio_order, policy, readahead_max_pages, sched, check_ppm, fill_percent);
        pin!(pool_percent, compressor);
        let m = &o.mix;
        macro_rules! pin_mix {
            ($($field:ident),*) => { $( if let Some(v) = m.$field { self.mix.$field = v; } )* };
        }
        pin_mix!(read_percent, pageout_ppm, remove_ppm, fork_ppm, zipf_theta);
        if o.trace.is_some() {
            self.trace = o.trace.clone();
            self.workload = WorkloadKind::Replay;
        }
        match &o.faults {
            FaultChoice::Swarm => {}
            FaultChoice::None => self.faults = Faults::none(),
            FaultChoice::Sites(sites) => {
                let mut faults = Faults::with_ppm([0; NR_SITES]);
                for &(site, ppm) in sites {
                    faults.set(site, ppm);
                }
                self.faults = faults;
            }
        }
        self.planted_bug |= o.planted_bug;
        self.verbose |= o.verbose;
    }

    /// Makes the drawn values consistent with each other; a value pinned on the command
    /// line is left as given (the engine refuses it if it cannot work).
    fn derive(&mut self, pinned: &Overrides) {
        // Silent faults are only caught by checksums (the checker then expects loud loss).
        self.checksums |= self.faults.any_silent();
        // A 2 MiB folio needs a region of several of them to be interesting.
        if self.folio_order == 9 && self.region_pages < 2048 && pinned.region_pages.is_none() {
            self.region_pages = 2048;
        }
        // At least eight folios fit in the budget: grow the budget, or, when the budget is
        // pinned, shrink the folio order (unless that is pinned too).
        if pinned.budget_pages.is_none() {
            let folio_pages = 1u64 << self.folio_order;
            self.budget_pages = self.budget_pages.max(8 * folio_pages).max(32);
        } else if pinned.folio_order.is_none() {
            while self.folio_order > 0 && 8 << self.folio_order > self.budget_pages {
                self.folio_order -= 1;
            }
        }
        self.swap_pages = self.swap_pages.div_ceil(CLUSTER).max(1) * CLUSTER;
        // zswap refuses a pool limit under 64 KiB (16 pages): a drawn share that small
        // grows to the smallest that works (or the pool goes, in a budget under 16 pages).
        let min_percent = POOL_MIN_PAGES * 100;
        if self.pool_percent > 0 && pinned.pool_percent.is_none() {
            let needed = min_percent.div_ceil(self.budget_pages.max(1));
            self.pool_percent = if needed > 100 { 0 } else { self.pool_percent.max(needed as u32) };
        }
    }

    fn validate(&self) -> Result<(), String> {
        let checks: [(bool, String); 8] = [
            (self.threads == 0 || self.threads > THREADS_MAX, format!("threads 1..={THREADS_MAX}")),
            (
                self.ops_per_thread == 0 || self.ops_per_thread > OPS_MAX,
                format!("ops 1..={OPS_MAX}"),
            ),
            (
                self.region_pages == 0 || self.region_pages > REGION_PAGES_MAX,
                format!("region pages 1..={REGION_PAGES_MAX}"),
            ),
            (self.swap_pages > SWAP_PAGES_MAX, format!("swap pages at most {SWAP_PAGES_MAX}")),
            (self.folio_order > engine::MAX_ORDER, "folio order 0..=9".into()),
            (
                self.workload == WorkloadKind::Replay && self.trace.is_none(),
                "replay needs --trace".into(),
            ),
            (
                self.fill_percent > 99 || self.mix.read_percent > 100 || self.pool_percent > 100,
                "percent 0..=100 (fill 0..=99)".into(),
            ),
            (
                self.planted_bug && !cfg!(debug_assertions),
                "the planted bug needs a debug build".into(),
            ),
        ];
        match checks.into_iter().find(|(bad, _)| *bad) {
            Some((_, why)) => Err(format!("bad option: {why}")),
            None => Ok(()),
        }
    }

    /// The budget in bytes.
    pub fn budget_bytes(&self) -> u64 {
        self.budget_pages * PAGE_SIZE as u64
    }

    /// One line naming every option, for reports.
    pub fn describe(&self) -> String {
        let m = &self.mix;
        format!(
            "workload={} threads={} ops={} region={}p budget={}p swap={}p order={} policy={:?} \
             readahead={} large_swapin={} large_folios={:?} discard={} checksums={} batch={} \
             sched={} latency={} mix=r{}%/z{}%/po{}/rm{}/fork{}/theta{} pool={}% compressor={} \
             incompressible={:?} pool_checksum={} pool_separate={} protect_zero={} faults={} \
             planted_bug={}",
            self.workload.name(),
            self.threads,
            self.ops_per_thread,
            self.region_pages,
            self.budget_pages,
            self.swap_pages,
            self.folio_order,
            self.policy,
            self.readahead_max_pages,
            self.large_swapin,
            self.large_folios,
            self.discard,
            self.checksums,
            self.reclaim_batch_pages,
            self.sched.describe(),
            if self.latency == Latency::FAST { "fast" } else { "slow" },
            m.read_percent,
            m.zero_write_percent,
            m.pageout_ppm,
            m.remove_ppm,
            m.fork_ppm,
            m.zipf_theta,
            self.pool_percent,
            self.compressor,
            self.incompressible,
            self.pool_checksum,
            self.pool_separate,
            self.protect_zero,
            self.faults.describe(),
            self.planted_bug,
        )
    }
}

impl Overrides {
    /// The `race` preset: the hotspot world tuned to expose page-in races, as the planted
    /// bug test uses it. Four threads hammer a Zipf(1.2) heap of 1024 pages, paging hot
    /// pages out 10% of the time, on a one-cluster swap device that is always full (so a
    /// freed slot is the next one allocated), under a PCT scheduler whose priorities drop
    /// at 20% of switch points (so a waiter can stay off the CPU while its page goes
    /// round). No faults, drops or forks: nothing else happens to the pages.
    pub fn race() -> Overrides {
        Overrides {
            workload: Some(WorkloadKind::Zipf),
            threads: Some(4),
            region_pages: Some(1024),
            swap_pages: Some(512),
            budget_pages: Some(64),
            sched: Some(SchedMode::Priority { change_ppm: 200_000 }),
            faults: FaultChoice::None,
            mix: MixOverrides {
                pageout_ppm: Some(100_000),
                remove_ppm: Some(0),
                fork_ppm: Some(0),
                zipf_theta: Some(1.2),
                read_percent: None,
            },
            ..Overrides::default()
        }
    }

    /// The command-line flags that pin these overrides (for the replay line).
    pub fn to_args(&self) -> String {
        let mut args = Vec::new();
        let mut push = |flag: &str, value: Option<String>| {
            if let Some(v) = value {
                args.push(format!("--{flag} {v}"));
            }
        };
        push(
            "workload",
            self.workload.filter(|w| *w != WorkloadKind::Replay).map(|w| w.name().into()),
        );
        push("trace", self.trace.as_ref().map(|p| p.display().to_string()));
        push("threads", self.threads.map(|v| v.to_string()));
        push("ops", self.ops_per_thread.map(|v| v.to_string()));
        push("region-pages", self.region_pages.map(|v| v.to_string()));
        push("budget-pages", self.budget_pages.map(|v| v.to_string()));
        push("swap-pages", self.swap_pages.map(|v| v.to_string()));
        push("order", self.folio_order.map(|v| v.to_string()));
        push("policy", self.policy.map(|p| policy_name(p).into()));
        push("readahead", self.readahead_max_pages.map(|v| v.to_string()));
        push("sched", self.sched.map(sched_arg));
        push("check-ppm", self.check_ppm.map(|v| v.to_string()));
        push("fill", self.fill_percent.map(|v| v.to_string()));
        let m = &self.mix;
        push("read-percent", m.read_percent.map(|v| v.to_string()));
        push("pageout-ppm", m.pageout_ppm.map(|v| v.to_string()));
        push("remove-ppm", m.remove_ppm.map(|v| v.to_string()));
        push("fork-ppm", m.fork_ppm.map(|v| v.to_string()));
        push("zipf-theta", m.zipf_theta.map(|v| v.to_string()));
        push("pool", self.pool_percent.map(|v| v.to_string()));
        push("compressor", self.compressor.map(|c| c.to_string()));
        match &self.faults {
            FaultChoice::Swarm => {}
            FaultChoice::None => args.push("--faults none".into()),
            FaultChoice::Sites(sites) => {
                for (site, ppm) in sites {
                    args.push(format!("--fault {}={}", site.name(), ppm));
                }
            }
        }
        if self.planted_bug {
            args.push("--planted-bug".into());
        }
        args.join(" ")
    }
}

/// The command-line name of a policy.
pub fn policy_name(policy: AllocPolicy) -> &'static str {
    match policy {
        AllocPolicy::Current => "current",
        AllocPolicy::Legacy => "legacy",
    }
}

/// The command-line form of a scheduler mode (`random`, `timed`, `pct:PPM`).
pub fn sched_arg(mode: SchedMode) -> String {
    match mode {
        SchedMode::Random => "random".into(),
        SchedMode::Timed => "timed".into(),
        SchedMode::Priority { change_ppm } => format!("pct:{change_ppm}"),
    }
}

/// Parses a scheduler mode (`random`, `timed`, `pct:PPM`).
///
/// # Errors
/// A message for anything else.
pub fn parse_sched(text: &str) -> Result<SchedMode, String> {
    match text {
        "random" => Ok(SchedMode::Random),
        "timed" => Ok(SchedMode::Timed),
        _ => text
            .strip_prefix("pct:")
            .and_then(|ppm| ppm.parse().ok())
            .map(|change_ppm| SchedMode::Priority { change_ppm })
            .ok_or_else(|| format!("scheduler {text:?}: expected random, timed or pct:PPM")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_options_and_overrides_shift_nothing_else() {
        let a = SimOptions::draw(11, &Overrides::default()).unwrap();
        let b = SimOptions::draw(11, &Overrides::default()).unwrap();
        assert_eq!(a.describe(), b.describe());
        let pinned = Overrides { folio_order: Some(4), ..Overrides::default() };
        let c = SimOptions::draw(11, &pinned).unwrap();
        assert_eq!(c.folio_order, 4);
        assert_eq!((c.workload, c.threads, c.mix), (a.workload, a.threads, a.mix));
    }

    #[test]
    fn silent_faults_force_checksums() {
        for seed in 0..200 {
            let o = SimOptions::draw(seed, &Overrides::default()).unwrap();
            assert!(!o.faults.any_silent() || o.checksums, "seed {seed}");
            assert_eq!(o.swap_pages % CLUSTER, 0);
            assert!(o.budget_pages >= 8 << o.folio_order);
        }
    }

    #[test]
    fn bad_overrides_are_named() {
        let o = Overrides { threads: Some(99), ..Overrides::default() };
        assert!(SimOptions::draw(1, &o).unwrap_err().contains("threads"));
        let o = Overrides { workload: Some(WorkloadKind::Replay), ..Overrides::default() };
        assert!(SimOptions::draw(1, &o).unwrap_err().contains("trace"));
    }

    #[test]
    fn sched_and_override_args_round_trip() {
        for mode in [SchedMode::Random, SchedMode::Timed, SchedMode::Priority { change_ppm: 5 }] {
            assert_eq!(parse_sched(&sched_arg(mode)), Ok(mode));
        }
        let o = Overrides {
            folio_order: Some(2),
            faults: FaultChoice::None,
            planted_bug: true,
            ..Overrides::default()
        };
        assert_eq!(o.to_args(), "--order 2 --faults none --planted-bug");
    }
}
