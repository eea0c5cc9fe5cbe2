//! What one (side, workload) run produced, and the sentence when it did not run.

use super::runner::Sample;
use super::workloads::Measured;

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

/// A finished run with its memory figures.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    pub measured: Measured,
    /// The highest charge of the run's memory (cgroup `max_usage_in_bytes` / `peak`).
    pub charged_peak_bytes: u64,
    /// Peak memory of the compressed store kept outside the charge (zram `mem_used_max`;
    /// 0 for zswap, whose pool is charged to the cgroup).
    pub store_peak_bytes: u64,
    /// Kernel only: the swap tables its setup allocated outside every cgroup (zram's table,
    /// `swapon`'s maps: kernel_side's documentation), if `/proc/vmallocinfo` could tell.
    /// The uswap side's are in its resident set.
    pub tables_bytes: Option<u64>,
    /// `charged_peak_bytes + store_peak_bytes + tables_bytes`: what the run cost the
    /// machine at most.
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
}

impl RunOutcome {
    /// Uncompressed / compressed at the peak, when anything was stored.
    pub fn compression_ratio(&self) -> Option<f64> {
        (self.compressed_peak_bytes > 0)
            .then(|| self.original_peak_bytes as f64 / self.compressed_peak_bytes as f64)
    }
}

/// The most compressed bytes the samples saw stored, and the most uncompressed bytes (each
/// its own maximum, as zram's `mm_stat` gives them).
pub fn stored_peaks(samples: &[Sample]) -> (u64, u64) {
    let peak = |figure: fn(&Sample) -> u64| samples.iter().map(figure).max().unwrap_or(0);
    (peak(|s| s.compressed_bytes), peak(|s| s.original_bytes))
}
