//! What one (side, workload) run produced, and the sentence when it did not run.

use super::counters::SwapCounters;
use super::runner::Sample;
use super::workloads::Measured;
use runstat::StatsFile;

/// The result of one side (a kernel configuration, or uswap) on one workload.
#[derive(Debug, Clone)]
pub enum Side {
    Ran(Box<RunOutcome>),
    /// Not run here, and why (no root, no zram, package missing, uswap not built yet).
    Skipped(String),
    /// Run, but it failed (the error, with its causes).
    Failed(String),
}

impl Side {
    pub fn outcome(&self) -> Option<&RunOutcome> {
        match self {
            Side::Ran(outcome) => Some(outcome),
            Side::Skipped(_) | Side::Failed(_) => None,
        }
    }
}

/// How a run's charged memory was measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Meter {
    /// A memory cgroup's peak charge (`max_usage_in_bytes` / `memory.peak`): exact, and
    /// the same instrument on both sides.
    #[default]
    Cgroup,
    /// The uswap side where no memory cgroup can be made (not root, no controller): its
    /// process tree's VmRSS + VmPTE, sampled, and its largest process's `ru_maxrss`. It
    /// counts the file pages the run maps, which a cgroup charges only to whoever read them
    /// first.
    TreeRss,
}

impl Meter {
    pub fn key(self) -> &'static str {
        match self {
            Meter::Cgroup => "cgroup",
            Meter::TreeRss => "tree_rss",
        }
    }
}

/// A finished run with its memory figures.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    pub measured: Measured,
    /// How `charged_peak_bytes` was measured.
    pub meter: Meter,
    /// The highest charge of the run's memory (cgroup `max_usage_in_bytes` / `peak`; see
    /// [`Meter`]).
    pub charged_peak_bytes: u64,
    /// Page cache charged to the run's cgroup when it ended (v1 `cache`, v2 `file`): files
    /// it read or wrote first. The harness reads the programs beforehand so a first run
    /// is not charged for loading them; a large figure here says that did not cover
    /// everything.
    pub cache_charged_bytes: Option<u64>,
    /// uswap only: its process tree's highest VmRSS + VmPTE, sampled (file pages
    /// included): the figure `charged_peak_bytes` was before both sides were measured
    /// alike.
    pub tree_rss_peak_bytes: Option<u64>,
    /// Peak memory of the compressed store kept outside the charge (zram `mem_used_max`;
    /// 0 for zswap, whose pool is charged to the cgroup).
    pub store_peak_bytes: u64,
    /// Kernel only: the swap tables its setup allocated outside every cgroup (zram's table,
    /// `swapon`'s maps: kernel_side's documentation), if `/proc/vmallocinfo` could tell.
    /// The uswap side's are in its resident set.
    pub tables_bytes: Option<u64>,
    /// Kernel only: what the swap's own slab caches grew by at their peak (zsmalloc's
    /// handles and zspage descriptors, zswap's entries; kernel_side's documentation),
    /// outside every cgroup, if /sys/kernel/slab could tell. The uswap side's are in its
    /// charge.
    pub slab_bytes: Option<u64>,
    /// `charged_peak_bytes + store_peak_bytes + tables_bytes + slab_bytes`: what the run
    /// cost the machine at most.
    pub peak_bytes: u64,
    /// Highest compressed bytes stored (zram `compr_data_size`, /proc/meminfo `Zswap`).
    pub compressed_peak_bytes: u64,
    /// Highest uncompressed bytes those stood for (`orig_data_size`, `Zswapped`).
    pub original_peak_bytes: u64,
    /// v1 kernel-memory peak of the cgroup (where the zswap pool is charged), if known.
    pub kmem_peak_bytes: Option<u64>,
    /// uswap only: the most the run's swap files held in the page cache (its store), if
    /// `cachestat(2)` could tell.
    pub file_cache_peak_bytes: Option<u64>,
    /// The sampled peak of the anonymous memory charged to the run's cgroup plus the store
    /// outside the charge (zram's pool; uswap's swap file in the page cache): the run's
    /// memory without the page cache of the files it reads and writes, which a limit
    /// reclaims and a cgroup without one keeps. `None` without a cgroup.
    pub anon_peak_bytes: Option<u64>,
    /// The run's swap counters (counters.rs): the kernel's deltas, or uswap's totals.
    pub swap_counters: Option<SwapCounters>,
    /// Kernel only: CPU seconds kswapd spent during the run (not in the tree's rusage).
    pub kswapd_s: Option<f64>,
    /// uswap only: its tree's totals (`uswap run --stats-file`): every counter of every
    /// process added up and the broker's figures (`tree_*`).
    pub totals: Option<StatsFile>,
    /// uswap only: the summary `uswap run` printed (its lines, without the `uswap: `).
    pub summary_lines: Vec<String>,
}

impl RunOutcome {
    /// Uncompressed / compressed at the peak, when anything was stored.
    pub fn compression_ratio(&self) -> Option<f64> {
        (self.compressed_peak_bytes > 0)
            .then(|| self.original_peak_bytes as f64 / self.compressed_peak_bytes as f64)
    }
}

/// The highest sampled anonymous charge plus store outside it ([`RunOutcome::anon_peak_bytes`]).
pub fn anon_peak(samples: &[Sample]) -> u64 {
    let sum = |s: &Sample| s.anon_bytes + s.outside_bytes + s.file_cache_bytes;
    samples.iter().map(sum).max().unwrap_or(0)
}

/// The most compressed bytes the samples saw stored, and the most uncompressed bytes (each
/// its own maximum, as zram's `mm_stat` gives them).
pub fn stored_peaks(samples: &[Sample]) -> (u64, u64) {
    let peak = |figure: fn(&Sample) -> u64| samples.iter().map(figure).max().unwrap_or(0);
    (peak(|s| s.compressed_bytes), peak(|s| s.original_bytes))
}
