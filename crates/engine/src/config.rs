//! The engine's configuration, validated once at start: every value that can be wrong is
//! refused here with a message that names it, before anything is set up.

use crate::budget::Watermarks;
use crate::defaults::LIBRARY;
use crate::{Error, MAX_ORDER, PAGE_SIZE};
use backend::Backend;
use slots::AllocPolicy;
use std::path::PathBuf;
use std::sync::Arc;
use zswap::{CompressorKind, Incompressible};

/// Where the swap device keeps page data.
#[derive(Clone)]
pub enum BackendConfig {
    /// In memory, synchronous (like zram without compression, or brd).
    Memory,
    /// A sparse swap file, created 0600 in `dir` (a private temporary file, unlinked right
    /// away unless `keep`), or at `path` exactly (which must not exist).
    File {
        /// Directory for a private swap file; ignored when `path` is given.
        dir: PathBuf,
        /// An exact path for the swap file.
        path: Option<PathBuf>,
        /// Keep the file's name after opening (for inspection); default unlinks it.
        keep: bool,
    },
    /// A backend built by the caller (tests, the simulator's fault-injecting backends).
    Custom(Arc<dyn Backend>),
}

impl std::fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendConfig::Memory => write!(f, "Memory"),
            BackendConfig::File { dir, path, keep } => {
                write!(f, "File {{ dir: {dir:?}, path: {path:?}, keep: {keep} }}")
            }
            BackendConfig::Custom(_) => write!(f, "Custom"),
        }
    }
}

/// The swap device.
#[derive(Debug, Clone)]
pub struct SwapConfig {
    /// Where its data lives.
    pub backend: BackendConfig,
    /// Its size in bytes (rounded down to whole pages; at least one 2 MiB cluster).
    pub size_bytes: u64,
    /// The slot allocation policy (6.18's, or the legacy one for comparisons).
    pub policy: AllocPolicy,
    /// Discard (punch holes in) clusters as they become free.
    pub discard: bool,
    /// Keep a crc32c per slot and check it on every read (ignored with `encrypt`, whose
    /// authentication subsumes it).
    pub checksums: bool,
    /// Seal every page written to the device with AES-256-GCM under a key made for this
    /// run, bound to its slot, and authenticate it on every read (backend's `CryptBackend`).
    pub encrypt: bool,
}

impl Default for SwapConfig {
    fn default() -> Self {
        SwapConfig {
            backend: BackendConfig::Memory,
            size_bytes: 1 << 30,
            policy: AllocPolicy::Current,
            discard: false,
            checksums: false,
            encrypt: false,
        }
    }
}

/// The compressed pool in front of the swap device (zswap).
#[derive(Debug, Clone)]
pub struct ZswapSettings {
    /// The compressor: lz4, zstd (levels 1..=3) or none.
    pub compressor: CompressorKind,
    /// The pool may hold at most this share of the budget, in percent (default 20).
    pub max_pool_percent: u32,
    /// Once full, the pool accepts pages again below this share of its limit (default 90).
    pub accept_threshold_percent: u32,
    /// Pages that do not compress: stored raw (default) or sent to the device at once.
    pub incompressible: Incompressible,
    /// A crc32c per compressed object, checked on every load.
    pub checksum: bool,
    /// A pool of its own beside the budget, of at most this many bytes, instead of a share
    /// of it: the pool's pages of compressed data are then not charged to the budget (zram's
    /// way: a memory cgroup's limit does not count zram's store), while its metadata is,
    /// like the engine's other bookkeeping. `None` (default): the pool is
    /// `max_pool_percent` of the budget and charged to it whole, as zswap is to a cgroup.
    pub separate_bytes: Option<u64>,
}

impl Default for ZswapSettings {
    fn default() -> Self {
        ZswapSettings {
            compressor: LIBRARY.compressor,
            max_pool_percent: LIBRARY.pool_percent,
            accept_threshold_percent: 90,
            incompressible: Incompressible::StoreRaw,
            checksum: false,
            separate_bytes: None,
        }
    }
}

/// When a fault takes a large folio: the policy behind `EngineConfig::large_folios`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LargeFolios {
    /// Every first touch maps a folio of `folio_order` where the aligned range is
    /// untouched, and a swapped large folio comes back whole (the kernel's mTHP
    /// `enabled=always`).
    #[default]
    Always,
    /// Only while the faults walk forward through the region: a first touch, or a swap-in
    /// of a large folio, within one folio after where the last one ended. Elsewhere one
    /// page is mapped and a swapped large folio is split (counted in `swpin_fallback`).
    /// At order 4 one fault then maps 16 pages of memory walked in order, while scattered
    /// touches do not spend a 64 KiB folio of budget (and its page-in) on each 4 KiB used.
    /// The kernel has no such policy; this follows its readahead window instead.
    Sequential,
}

impl LargeFolios {
    /// The policy's name, as `FromStr` reads it: `always` or `sequential`.
    pub fn name(self) -> &'static str {
        match self {
            LargeFolios::Always => "always",
            LargeFolios::Sequential => "sequential",
        }
    }
}

impl std::str::FromStr for LargeFolios {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "always" => Ok(LargeFolios::Always),
            "sequential" => Ok(LargeFolios::Sequential),
            _ => Err(format!("{text}: use always or sequential")),
        }
    }
}

/// Everything the engine needs to start.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Bytes the managed pages may occupy: resident + swap cache + compressed pool.
    pub budget_bytes: u64,
    /// Free-budget levels; `None` derives them from the budget.
    pub watermarks: Option<Watermarks>,
    /// Order of the folios a first touch maps (and that page-out then moves whole):
    /// 0 = 4 KiB, 2 = 16 KiB, 4 = 64 KiB, up to 9 = 2 MiB.
    pub folio_order: u32,
    /// When a fault takes a large folio (of `folio_order`) rather than one page.
    pub large_folios: LargeFolios,
    /// Swap a large folio back in whole when its slots are aligned and of one kind.
    pub large_swapin: bool,
    /// Most pages read (and mapped) ahead of a fault; 0 turns readahead off.
    pub readahead_max_pages: u32,
    /// The swap device.
    pub swap: SwapConfig,
    /// The compressed pool; `None` sends pages straight to the swap device.
    pub zswap: Option<ZswapSettings>,
    /// Fault injection in the pool (tests and the simulator); no hooks by default.
    pub zswap_faults: zswap::FaultHooks,
    /// Run a background reclaimer thread (the kernel's kswapd). Without it, reclaim runs
    /// only on the fault path and when asked ([`crate::Engine::reclaim`]), which is what the
    /// deterministic simulator wants.
    pub background_reclaim: bool,
    /// The CPUs the background reclaimer runs on; empty: wherever the process may run. An
    /// embedder that confines the program to some CPUs may put the reclaimer on others, as
    /// the kernel's kswapd is not confined with the programs it reclaims from.
    pub reclaimer_cpus: Vec<usize>,
    /// Pages one reclaim pass isolates at most (the kernel's SWAP_CLUSTER_MAX is 32).
    pub reclaim_batch_pages: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            budget_bytes: LIBRARY.budget_bytes,
            watermarks: None,
            folio_order: LIBRARY.folio_order,
            large_folios: LIBRARY.large_folios,
            large_swapin: true,
            readahead_max_pages: LIBRARY.readahead_max_pages,
            swap: SwapConfig::default(),
            zswap: Some(ZswapSettings::default()),
            zswap_faults: zswap::FaultHooks::default(),
            background_reclaim: true,
            reclaimer_cpus: Vec::new(),
            reclaim_batch_pages: 32,
        }
    }
}

impl EngineConfig {
    /// Bytes in one folio of the configured order.
    pub fn folio_bytes(&self) -> u64 {
        (PAGE_SIZE as u64) << self.folio_order.min(MAX_ORDER)
    }

    /// The pool's configuration, with the budget it is a share of.
    pub fn zswap_config(&self) -> Option<zswap::ZswapConfig> {
        let settings = self.zswap.as_ref()?;
        let mut compressor = zswap::CompressorConfig::new(settings.compressor);
        compressor.checksum = settings.checksum;
        // Beside the budget, the pool's limit is all of its own size.
        let (limit_of, percent) = match settings.separate_bytes {
            Some(bytes) => (bytes, 100),
            None => (self.budget_bytes, settings.max_pool_percent),
        };
        let mut config = zswap::ZswapConfig::new(compressor, limit_of);
        config.max_pool_percent = percent;
        config.accept_threshold_percent = settings.accept_threshold_percent;
        config.incompressible = settings.incompressible;
        Some(config)
    }

    /// The watermarks in force. The default steps leave room for a 64 KiB folio in flight
    /// and, with a pool, for two zspages (up to 8 pages each) being allocated at once: the
    /// pool grows in zspages, not in objects.
    pub fn watermarks(&self) -> Watermarks {
        self.watermarks_for(self.budget_bytes)
    }

    /// The watermarks for a budget of `budget_bytes` (a budget changed while the engine
    /// runs: `Engine::set_budget`): the configured ones where they fit it, else the
    /// defaults for it.
    pub fn watermarks_for(&self, budget_bytes: u64) -> Watermarks {
        let given = self.watermarks.filter(|wm| wm.validate(budget_bytes).is_ok());
        given.unwrap_or_else(|| {
            let folio = (PAGE_SIZE as u64) << MAX_ORDER.min(4);
            let zspages = if self.zswap.is_some() { 2 * 8 * PAGE_SIZE as u64 } else { 0 };
            Watermarks::default_for(budget_bytes, folio + zspages)
        })
    }

    /// Checks every value; the message of the first bad one says what to change.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<(), Error> {
        if self.folio_order > MAX_ORDER {
            return Err(Error::Config(format!(
                "folio order {} is above the largest, {MAX_ORDER} (2 MiB)",
                self.folio_order
            )));
        }
        if self.budget_bytes < self.folio_bytes() {
            return Err(Error::Config(format!(
                "budget of {} bytes is smaller than one folio ({} bytes at order {})",
                self.budget_bytes,
                self.folio_bytes(),
                self.folio_order
            )));
        }
        if let Some(given) = self.watermarks {
            given.validate(self.budget_bytes)?;
        }
        self.watermarks().validate(self.budget_bytes)?;
        if self.reclaim_batch_pages == 0 {
            return Err(Error::Config("reclaim batch of 0 pages would never reclaim".into()));
        }
        let cluster_bytes = (slots::SWAPFILE_CLUSTER * PAGE_SIZE) as u64;
        if self.swap.size_bytes < cluster_bytes {
            return Err(Error::Config(format!(
                "swap size of {} bytes is smaller than one cluster ({cluster_bytes} bytes)",
                self.swap.size_bytes
            )));
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        EngineConfig::default().validate().unwrap();
    }

    #[test]
    fn bad_values_name_themselves() {
        let cases: [(EngineConfig, &str); 4] = [
            (EngineConfig { folio_order: 10, ..Default::default() }, "folio order 10"),
            (
                EngineConfig { budget_bytes: 32 << 10, folio_order: 4, ..Default::default() },
                "smaller than one folio",
            ),
            (
                EngineConfig {
                    watermarks: Some(Watermarks { min_bytes: 9, low_bytes: 1, high_bytes: 20 }),
                    ..Default::default()
                },
                "watermarks out of order",
            ),
            (
                EngineConfig {
                    swap: SwapConfig { size_bytes: 4096, ..SwapConfig::default() },
                    ..Default::default()
                },
                "smaller than one cluster",
            ),
        ];
        for (config, expected) in cases {
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(expected), "{error:?} should mention {expected:?}");
        }
    }
}
