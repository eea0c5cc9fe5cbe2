//! The library's [`Builder`]: every setting of a swap, validated, then started in the
//! order the `api` essay gives; and the [`Settings`] a forked child keeps to start a swap
//! of its own.

use super::{Inner, Parts, Uswap};
use crate::delivery::Delivery;
use crate::handler::HandlerOptions;
use crate::source::UffdSource;
use crate::Error;
use engine::config::ZswapSettings;
use engine::defaults::LIBRARY;
use engine::LargeFolios;
use engine::{BackendConfig, Engine, EngineConfig, SwapConfig};
use std::path::PathBuf;
use std::sync::Arc;
use uffd::probe::Probe;
use uffd::sys::process;
use uffd::types::Features;
use uffd::Uffd;
use uffd::PAGE_SIZE;
use zswap::{CompressorKind, Incompressible};
/// The uffd features every managed process needs: eviction by MOVE, the events a process's
/// own layout changes send, poison. Not `EVENT_FORK`, which needs `CAP_SYS_PTRACE`: a
/// forked child serves itself (crate::fork).
pub const REQUIRED_FEATURES: Features = Features::from_bits(
    Features::MOVE.bits()
        | Features::EVENT_REMAP.bits()
        | Features::EVENT_REMOVE.bits()
        | Features::EVENT_UNMAP.bits()
        | Features::POISON.bits(),
);

/// Where swapped-out data goes when the pool does not keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwapTarget {
    /// A private, unlinked, sparse file in this directory.
    Dir(PathBuf),
    /// A new file at exactly this path (it must not exist).
    File(PathBuf),
    /// Process memory (tests; swapped pages then stay in the resident set).
    Memory,
    /// A far tier: the slots in a memcached cluster (far's `FarBackend`), always encrypted.
    Far(far::FarConfig),
}

/// Builds a [`Uswap`] (see the module essay). Every setter takes and returns the builder.
#[derive(Debug, Clone)]
pub struct Builder {
    budget_bytes: u64,
    folio_order: u32,
    large_folios: LargeFolios,
    delivery: Delivery,
    swap: SwapTarget,
    swap_size_bytes: u64,
    swap_file_uncached: bool,
    swap_file_keep_free: Option<u64>,
    /// A disk quota the swap file shares with other processes' (`backend::quota`).
    swap_quota: Option<Arc<dyn backend::SpaceQuota>>,
    checksums: bool,
    encrypt: bool,
    readahead_max_pages: Option<u32>,
    reclaimer_cpus: Vec<usize>,
    require_kernel_faults: Option<bool>,
    exclude_from_fork: bool,
    /// The compressed pool, `None` for none.
    pool: Option<ZswapSettings>,
    /// How the handler thread runs (hooks of an embedding program, trimming).
    handler: HandlerOptions,
    /// Zero pages mapped write-protected and uncharged; `None`: where the delivery and the
    /// kernel allow it.
    protect_zero: Option<bool>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            budget_bytes: LIBRARY.budget_bytes,
            folio_order: LIBRARY.folio_order,
            large_folios: LIBRARY.large_folios,
            delivery: Delivery::DEFAULT,
            swap: SwapTarget::Dir(std::env::temp_dir()),
            swap_size_bytes: LIBRARY.swap_size_bytes,
            swap_file_uncached: false,
            swap_file_keep_free: None,
            swap_quota: None,
            checksums: false,
            encrypt: LIBRARY.encrypt,
            readahead_max_pages: None,
            reclaimer_cpus: Vec::new(),
            require_kernel_faults: None,
            exclude_from_fork: false,
            pool: Some(ZswapSettings::default()),
            handler: HandlerOptions::default(),
            protect_zero: None,
        }
    }
}

impl Builder {
    /// Bytes the managed pages may occupy: resident pages, swap-cache folios in flight and
    /// the compressed pool (default 256 MiB). At least one folio.
    pub fn budget_bytes(mut self, bytes: u64) -> Self {
        self.budget_bytes = bytes;
        self
    }

    /// The order of the folios a first touch maps and page-out moves whole: 0 = 4 KiB,
    /// 2 = 16 KiB, 4 = 64 KiB, up to 9 (default 0).
    pub fn folio_order(mut self, order: u32) -> Self {
        self.folio_order = order;
        self
    }

    /// When a fault takes a folio of `folio_order` rather than one page (default
    /// [`LargeFolios::Always`]; [`LargeFolios::Sequential`]: only while faults walk forward).
    pub fn large_folios(mut self, policy: LargeFolios) -> Self {
        self.large_folios = policy;
        self
    }

    /// How faults are delivered (default [`Delivery::DEFAULT`]).
    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// A swap file created at `path` (which must not exist) of `size_bytes`, sparse.
    pub fn swap_file(mut self, path: impl Into<PathBuf>, size_bytes: u64) -> Self {
        self.swap = SwapTarget::File(path.into());
        self.swap_size_bytes = size_bytes;
        self
    }

    /// A private (unlinked) swap file in `dir` (default: the temporary directory).
    pub fn swap_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.swap = SwapTarget::Dir(dir.into());
        self
    }

    /// The swap device in a memcached cluster instead of a file (far's crate essay): each
    /// page sealed (encryption is forced on: pages leave the machine) and stored on
    /// `config.replicas` servers; a page no server returns is a SIGBUS on access.
    pub fn far(mut self, config: far::FarConfig) -> Self {
        self.swap = SwapTarget::Far(config);
        self
    }

    /// Swap space in process memory (for tests: it counts in the resident set).
    pub fn swap_in_memory(mut self) -> Self {
        self.swap = SwapTarget::Memory;
        self
    }

    /// The swap device's size (default 4 GiB, sparse: only what is written takes disk).
    pub fn swap_size_bytes(mut self, bytes: u64) -> Self {
        self.swap_size_bytes = bytes;
        self
    }

    /// Keep the swap file's pages out of the page cache (`RWF_DONTCACHE`, Linux 6.14; default
    /// off). Off, everything written to the file stays in memory until the kernel writes it
    /// back and reclaims it, outside the budget; on, a page read back from the file is a
    /// disk read. [`Builder::build`] fails where the kernel or file system cannot.
    pub fn swap_file_uncached(mut self, on: bool) -> Self {
        self.swap_file_uncached = on;
        self
    }

    /// Let the swap file be larger than the free space of its file system, and stop writing
    /// to it while less than `bytes` is free (the writes fail, counted; their pages stay in
    /// the pool or in memory). Default: the whole size must be free when it is created.
    /// The file is sparse, and a pool in front of it holds most pages without writing them.
    pub fn swap_file_keep_free(mut self, bytes: u64) -> Self {
        self.swap_file_keep_free = Some(bytes);
        self
    }

    /// Share a disk quota with other swap files (other processes' `uswap run` members):
    /// every 2 MiB of the swap file takes its bytes from `quota` at its first write, and
    /// writes the quota cannot cover fail as on a full disk (their pages stay in the pool
    /// or in memory). Default: none.
    pub fn swap_quota(mut self, quota: Arc<dyn backend::SpaceQuota>) -> Self {
        self.swap_quota = Some(quota);
        self
    }

    /// Keep and check a crc32c per swap slot (default off).
    pub fn checksums(mut self, on: bool) -> Self {
        self.checksums = on;
        self
    }

    /// Seal every page written to the swap file with AES-256-GCM under a key made for this
    /// run and held only in this process, bound to its slot; a page that does not
    /// authenticate on its way back is an error (SIGBUS on access), never data. Default on
    /// (its cost: docs/RUN.md, "Encryption"). On, [`Builder::checksums`] adds nothing.
    pub fn encrypt(mut self, on: bool) -> Self {
        self.encrypt = on;
        self
    }

    /// Most pages read ahead of a swap-in fault; 0 turns readahead off (default: the
    /// engine's).
    pub fn readahead_max_pages(mut self, pages: u32) -> Self {
        self.readahead_max_pages = Some(pages);
        self
    }

    /// The CPUs the engine's reclaimer thread runs on (default: wherever the process may).
    /// Where the program is confined to some CPUs, the reclaimer on others compresses while
    /// the program runs, and the handler shares the program's CPU (docs/RUN.md, `--cpus`).
    pub fn reclaimer_cpus(mut self, cpus: Vec<usize>) -> Self {
        self.reclaimer_cpus = cpus;
        self
    }

    /// Whether to refuse to start without permission to trap faults taken in kernel mode
    /// (a system call writing into an evicted page). Default: required in handler mode
    /// (without it such a call fails with EFAULT), not in SIGBUS mode (which cannot serve
    /// them anyway).
    pub fn require_kernel_faults(mut self, required: bool) -> Self {
        self.require_kernel_faults = Some(required);
        self
    }

    /// The compressor of the compressed pool (default lz4; zstd levels 1..=3; none stores
    /// pages uncompressed). Parse a name with `"lz4".parse::<CompressorKind>()`.
    pub fn compressor(mut self, kind: CompressorKind) -> Self {
        self.pool.get_or_insert_with(ZswapSettings::default).compressor = kind;
        self
    }

    /// The compressed pool's share of the budget, in percent (default 20): what does not
    /// fit goes to the swap file (written back oldest first).
    pub fn pool_percent(mut self, percent: u32) -> Self {
        self.pool.get_or_insert_with(ZswapSettings::default).max_pool_percent = percent;
        self
    }

    /// A compressed pool of its own beside the budget, of at most `bytes`, instead of a
    /// share of it: its pages of compressed data are not charged to the budget, as a memory
    /// cgroup's limit leaves zram's store out (its bookkeeping is). What the pool cannot
    /// hold goes to the swap file.
    pub fn separate_pool(mut self, bytes: u64) -> Self {
        self.pool.get_or_insert_with(ZswapSettings::default).separate_bytes = Some(bytes);
        self
    }

    /// What the pool does with a page that does not compress: keep it raw (default) or send
    /// it to the swap file at once.
    pub fn incompressible(mut self, what: Incompressible) -> Self {
        self.pool.get_or_insert_with(ZswapSettings::default).incompressible = what;
        self
    }

    /// No compressed pool: evicted pages go straight to the swap file (zero pages still
    /// cost nothing).
    pub fn no_pool(mut self) -> Self {
        self.pool = None;
        self
    }

    /// Keep managed regions out of forked children (`MADV_DONTFORK`: in a child the range
    /// is unmapped, and touching it is SIGSEGV) instead of giving each child a swap of its
    /// own over the state it inherits (crate::fork). Default off.
    pub fn exclude_from_fork(mut self, exclude: bool) -> Self {
        self.exclude_from_fork = exclude;
        self
    }

    /// How the handler thread runs: an embedding program's [`crate::Hooks`], whether it
    /// trims glibc's heap (off where the engine does not allocate from it: the LD_PRELOAD
    /// shim). Default: [`HandlerOptions::default`].
    pub fn handler_options(mut self, options: HandlerOptions) -> Self {
        self.handler = options;
        self
    }

    /// Whether a read of a zero page maps it write-protected and uncharged, the program's
    /// first write then faulting (write-protect) so the engine charges the page before it
    /// exists; else it is charged as resident when mapped, as a budget must never be
    /// exceeded unseen (docs/ARCHITECTURE.md, "Zero pages"). Default: on where the kernel
    /// reports write-protect faults (`UFFD_FEATURE_PAGEFAULT_FLAG_WP`). With
    /// [`Delivery::Sigbus`] the first write is a SIGBUS whose page-fault error code says
    /// "present": the dispatcher serves it as a write-protect fault.
    pub fn protect_zero_pages(mut self, on: bool) -> Self {
        self.protect_zero = Some(on);
        self
    }

    /// Whether zero pages are protected, given what the kernel offers.
    fn protects_zero(&self, features: Features) -> bool {
        self.protect_zero.unwrap_or(features.contains(Features::PAGEFAULT_FLAG_WP))
    }

    /// The uffd features this configuration needs.
    fn features(&self) -> Features {
        let mut features = REQUIRED_FEATURES;
        // A fault's thread: for the follower, and for a recorded trace, which files each
        // fault under its thread (under SIGBUS delivery the faulting thread is the caller).
        features |= match self.delivery {
            Delivery::Sigbus => Features::SIGBUS,
            Delivery::Handler => Features::THREAD_ID,
        };
        if self.protect_zero == Some(true) {
            features |= Features::PAGEFAULT_FLAG_WP;
        }
        features
    }

    /// Whether the handler follows the faulting thread ([`HandlerOptions::follow`]): asked
    /// for, under handler delivery (under SIGBUS delivery the faulting thread serves its own
    /// fault), and with no CPUs given to the reclaimer (those are a placement already).
    fn follows(&self) -> bool {
        self.handler.follow && self.delivery == Delivery::Handler && self.reclaimer_cpus.is_empty()
    }

    /// The engine configuration these settings make.
    fn engine_config(&self, backend: BackendConfig) -> EngineConfig {
        let mut config = EngineConfig {
            budget_bytes: self.budget_bytes,
            folio_order: self.folio_order,
            large_folios: self.large_folios,
            swap: SwapConfig {
                backend,
                size_bytes: self.swap_size_bytes,
                checksums: self.checksums,
                // Pages that leave the machine are always sealed.
                encrypt: self.encrypt || matches!(self.swap, SwapTarget::Far(_)),
                ..SwapConfig::default()
            },
            zswap: self.pool.clone(),
            reclaimer_cpus: self.reclaimer_cpus.clone(),
            ..EngineConfig::default()
        };
        if let Some(pages) = self.readahead_max_pages {
            config.readahead_max_pages = pages;
        }
        config
    }

    /// Validates, probes, and starts everything (module essay).
    ///
    /// # Errors
    /// [`Error::Config`] for a bad value; the probe's environment errors, as [`Error::Kernel`]
    /// ([`uffd::Error::Blocked`], [`uffd::Error::NotBuilt`], [`uffd::Error::Denied`],
    /// [`uffd::Error::NoKernelFaultPermission`], [`uffd::Error::KernelTooOld`]);
    /// [`Error::SwapFile`];
    /// set-up failures of the uffd, the engine or a thread. Nothing is left behind on error.
    ///
    /// Context: spawns three threads; may create a file.
    pub fn build(self) -> Result<Uswap, Error> {
        self.engine_config(BackendConfig::Memory)
            .validate()
            .map_err(|e| Error::Config { what: engine_message(e) })?;
        let probe = uffd::probe()?;
        let kernel_faults = self.check_environment(&probe)?;
        let backend = self.make_backend()?;
        let config = self.engine_config(backend);
        let protect_zero = self.protects_zero(probe.features);
        let settings = Settings {
            features: self.features(),
            user_mode_only: !kernel_faults,
            folio_pages: 1usize << self.folio_order,
            handler: HandlerOptions { follow: self.follows(), ..self.handler.clone() },
            // A forked child's far tier gets the parent's bounded write-behind buffer.
            swap: match &self.swap {
                SwapTarget::Far(config) => SwapTarget::Far(self.far_config(config)),
                other => other.clone(),
            },
            swap_size_bytes: self.swap_size_bytes,
            file_options: backend::FileOptions {
                keep: false,
                uncached: self.swap_file_uncached,
                keep_free_bytes: self.swap_file_keep_free,
                quota: self.swap_quota.clone(),
            },
        };
        let uffd = Arc::new(settings.open_uffd(false)?);
        let source = Arc::new(
            UffdSource::new(uffd.clone(), settings.folio_pages)?.protecting_zero(protect_zero),
        );
        let engine = Arc::new(Engine::new(config, source.clone()).map_err(Error::Engine)?);
        let parts = Parts::start(&settings, self.delivery, engine, source, uffd, None)?;
        let inner = Arc::new(Inner {
            parts: arc_swap::ArcSwapOption::from_pointee(parts),
            settings,
            delivery: self.delivery,
            kernel_faults,
            exclude_from_fork: self.exclude_from_fork,
            probe_summary: probe.summary(),
            pid: std::sync::atomic::AtomicI32::new(process::getpid()),
            fork: std::sync::Mutex::new(None),
        });
        let weak: std::sync::Weak<dyn crate::fork::Forkable> = Arc::downgrade(&inner) as _;
        crate::fork::register(weak)?;
        Ok(Uswap { inner })
    }

    /// Checks the probe against what this configuration needs; returns whether kernel-mode
    /// faults will be trapped.
    ///
    /// # Errors
    /// As [`Error::Kernel`]: [`uffd::Error::KernelTooOld`] naming the first missing feature;
    /// [`uffd::Error::NoKernelFaultPermission`] when they are required and not allowed.
    pub fn check_environment(&self, probe: &Probe) -> Result<bool, Error> {
        probe.require(self.features())?;
        let required = self.require_kernel_faults.unwrap_or(self.delivery == Delivery::Handler);
        if required {
            probe.require_kernel_faults()?;
        }
        Ok(probe.kernel_faults)
    }

    /// `config` with its write-behind buffer bounded by the budget
    /// (`far::staging_pages_for`).
    fn far_config(&self, config: &far::FarConfig) -> far::FarConfig {
        let staging_pages = config.staging_pages.min(far::staging_pages_for(self.budget_bytes));
        far::FarConfig { staging_pages, ..config.clone() }
    }

    fn make_backend(&self) -> Result<BackendConfig, Error> {
        let size_bytes = self.swap_size_bytes / PAGE_SIZE as u64 * PAGE_SIZE as u64;
        let (at, keep) = match &self.swap {
            SwapTarget::Memory => return Ok(BackendConfig::Memory),
            SwapTarget::Far(config) => {
                let nr_pages = size_bytes / PAGE_SIZE as u64;
                let far = far::FarBackend::connect(self.far_config(config), nr_pages)
                    .map_err(|e| Error::Config { what: format!("far tier: {e}") })?;
                return Ok(BackendConfig::Custom(Arc::new(far)));
            }
            SwapTarget::Dir(dir) => (dir.clone(), false),
            SwapTarget::File(path) => (path.clone(), true),
        };
        let options = backend::FileOptions {
            keep,
            uncached: self.swap_file_uncached,
            keep_free_bytes: self.swap_file_keep_free,
            quota: self.swap_quota.clone(),
        };
        let file = swap_file(&at, size_bytes, options)?;
        Ok(BackendConfig::Custom(file))
    }
}

/// A swap file at `at` (a directory: a private file in it; a path: exactly there).
fn swap_file(
    at: &std::path::Path,
    size_bytes: u64,
    options: backend::FileOptions,
) -> Result<Arc<dyn backend::Backend>, Error> {
    let file = backend::FileBackend::create(at, size_bytes, options)
        .map_err(|e| Error::SwapFile { path: at.to_path_buf(), why: e.to_string() })?;
    Ok(Arc::new(file))
}

/// What a forked child needs to start a swap of its own over the state it inherits
/// (crate::fork), kept from the builder.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) features: Features,
    pub(crate) user_mode_only: bool,
    pub(crate) folio_pages: usize,
    pub(crate) handler: HandlerOptions,
    swap: SwapTarget,
    swap_size_bytes: u64,
    file_options: backend::FileOptions,
}

impl Settings {
    /// A uffd with the features this swap needs (`sigbus`: with `UFFD_FEATURE_SIGBUS`, for
    /// a child's start-up).
    pub(crate) fn open_uffd(&self, sigbus: bool) -> Result<Uffd, Error> {
        let features = if sigbus { self.features | Features::SIGBUS } else { self.features };
        Ok(Uffd::builder().user_mode_only(self.user_mode_only).require(features).open()?)
    }

    /// A forked child's own swap device backend: a new private file beside the parent's
    /// (in its directory), memory, or a far tier of its own (a run identity of its own on
    /// the same servers).
    pub(crate) fn own_backend(&self) -> Result<Arc<dyn backend::Backend>, Error> {
        let size_bytes = self.swap_size_bytes / PAGE_SIZE as u64 * PAGE_SIZE as u64;
        let nr_pages = size_bytes / PAGE_SIZE as u64;
        let dir = match &self.swap {
            SwapTarget::Memory => return Ok(Arc::new(backend::MemoryBackend::new(nr_pages))),
            SwapTarget::Far(config) => {
                let far = far::FarBackend::connect(config.clone(), nr_pages)
                    .map_err(|e| Error::Config { what: format!("far tier: {e}") })?;
                return Ok(Arc::new(far));
            }
            SwapTarget::Dir(dir) => dir.clone(),
            SwapTarget::File(path) => {
                path.parent().map_or_else(std::env::temp_dir, std::path::Path::to_path_buf)
            }
        };
        swap_file(&dir, size_bytes, self.file_options.clone())
    }
}

/// The text of an engine configuration error, without its prefix.
fn engine_message(error: engine::Error) -> String {
    match error {
        engine::Error::Config(what) => what,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uffd::probe::Attempts;
    use uffd::types::KernelVersion;
    use uffd::Via;

    fn probe(features: u64, kernel_faults: bool) -> Probe {
        let denied = (!kernel_faults).then_some(uffd::Error::NoKernelFaultPermission {
            errno: uffd::Errno(libc::EPERM),
            user_mode_only_works: true,
        });
        Probe {
            running: Some(KernelVersion::new(6, 6)),
            via: Via::Syscall,
            kernel_faults,
            kernel_faults_denied: denied,
            features: Features::from_bits(features),
            pagemap_scan: false,
            seccomp_filter: false,
            cap_sys_ptrace: true,
            attempts: Attempts::default(),
        }
    }

    #[test]
    fn a_kernel_without_move_is_named_with_its_release() {
        // 6.6 offers everything up to POISON (bit 14), not MOVE (6.8).
        let e = Builder::default().check_environment(&probe(0x7fff, true)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "UFFD_FEATURE_MOVE needs Linux 6.8 or later; this kernel is 6.6: run on a newer kernel"
        );
    }

    #[test]
    fn kernel_faults_are_required_in_handler_mode_unless_waived() {
        let p = probe(0x1ffff, false);
        let e = Builder::default().check_environment(&p).unwrap_err();
        assert!(matches!(e, Error::Kernel(uffd::Error::NoKernelFaultPermission { .. })), "{e}");
        let waived = Builder::default().require_kernel_faults(false);
        assert!(!waived.check_environment(&p).unwrap());
        let sigbus = Builder::default().delivery(Delivery::Sigbus);
        assert!(!sigbus.check_environment(&p).unwrap(), "SIGBUS mode does not need them");
        assert!(Builder::default().check_environment(&probe(0x1ffff, true)).unwrap());
    }

    #[test]
    fn children_need_no_cap_sys_ptrace() {
        let mut p = probe(0x1ffff & !Features::EVENT_FORK.bits(), true);
        p.cap_sys_ptrace = false;
        assert!(Builder::default().check_environment(&p).is_ok(), "no EVENT_FORK asked for");
        assert!(!REQUIRED_FEATURES.contains(Features::EVENT_FORK));
    }

    #[test]
    fn zero_pages_are_protected_where_the_kernel_allows() {
        let all = Features::from_bits(0x1ffff);
        let without_wp = all.difference(Features::PAGEFAULT_FLAG_WP);
        assert!(Builder::default().protects_zero(all));
        assert!(!Builder::default().protects_zero(without_wp), "an old kernel: charged");
        // SIGBUS delivery serves the write-protect fault in the signal handler too.
        assert!(Builder::default().delivery(Delivery::Sigbus).protects_zero(all));
        assert!(!Builder::default().protect_zero_pages(false).protects_zero(all));
        // Asked for, on a kernel without it: refused by the probe, naming the feature.
        let asked = Builder::default().protect_zero_pages(true);
        let e = asked.check_environment(&probe(without_wp.bits(), true)).unwrap_err();
        assert!(e.to_string().contains("UFFD_FEATURE_PAGEFAULT_FLAG_WP"), "{e}");
    }

    #[test]
    fn sigbus_mode_needs_the_sigbus_feature() {
        let without = 0x1ffff & !Features::SIGBUS.bits();
        let sigbus = Builder::default().delivery(Delivery::Sigbus);
        let e = sigbus.check_environment(&probe(without, true)).unwrap_err();
        assert!(e.to_string().contains("UFFD_FEATURE_SIGBUS"), "{e}");
    }
}
