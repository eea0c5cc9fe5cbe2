//! The library: a swap for this process's memory.
//!
//! ```text
//!   let swap = Uswap::builder().budget_bytes(256 << 20).swap_file(path, 2 << 30).build()?;
//!   let mut region = swap.map(1 << 30)?;        // anonymous, managed, usable as &mut [u8]
//!   region.as_mut_slice()[..5].copy_from_slice(b"hello");
//!   region.pageout(0, region.len())?;           // evict now (MADV_PAGEOUT)
//!   assert_eq!(&region.as_slice()[..5], b"hello"); // faults, swaps in
//!   println!("{:?}", swap.stats());
//! ```
//!
//! What [`Builder::build`] sets up, in order, refusing bad input before anything is
//! registered: the configuration is validated (budget, folio order, swap size); the kernel is
//! probed ([`uffd::probe()`]: userfaultfd blocked by seccomp, no permission to trap
//! kernel-mode faults, a kernel without a needed feature, each with what to do); the swap file
//! is created; then the event uffd, the page source ([`UffdSource`]), the engine (with its
//! background reclaimer), the handler thread ([`crate::handler`]), the SIGBUS dispatcher in
//! SIGBUS mode, and the copy-on-write breaker thread.
//!
//! Threads: the engine's reclaimer (`uswap-kswapd`), the handler (`uswap-uffd`), the COW
//! breaker (`uswap-cow`), and, for [`Region::pageout`], the caller's.
//!
//! Lifetimes: a [`Region`] keeps its [`Uswap`]'s insides alive; they are torn down when the
//! last of them goes, in the order that keeps every registered range read (a registered
//! range's munmap waits for its UNMAP to be read).
//!
//! Fork: a forked child's copy becomes a swap of the child's own before `fork()` returns in
//! it (crate::fork): its regions are served from the engine state it inherited, through a
//! userfaultfd and threads of its own. With [`Builder::exclude_from_fork`] the regions are
//! not in the child at all, and its copies of these objects are inert: every call says
//! [`Error::ForkedChild`], and dropping them releases nothing of the parent's.
//!
//! Unsafe code: the byte views of a region ([`Region::as_slice`], [`Region::as_mut_slice`]),
//! whose soundness rests on the engine keeping region contents transparent (their `SAFETY`
//! comments); this module is a named leaf allowed to make them.

#![allow(unsafe_code)]

use crate::delivery::{Delivery, SigbusMode, SigbusStats};
use crate::handler::{Control, Handler, HandlerOptions, HandlerStats};
use crate::source::{SourceStats, UffdSource};
use crate::Error;
use engine::config::ZswapSettings;
use engine::defaults::LIBRARY;
use engine::stats::StatsSnapshot;
pub use engine::LargeFolios;
use engine::{BackendConfig, Engine, EngineConfig, SwapConfig, MAX_ORDER};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use uffd::mm::{Advice, Mapping};
use uffd::probe::Probe;
use uffd::sys::process;
use uffd::types::Features;
use uffd::Uffd;
use uffd::PAGE_SIZE;
pub use zswap::{CompressorKind, Incompressible};

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
    /// exceeded unseen (docs/ARCHITECTURE.md, departure 8). Default: on where the kernel
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
            swap: self.swap.clone(),
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

    fn make_backend(&self) -> Result<BackendConfig, Error> {
        let size_bytes = self.swap_size_bytes / PAGE_SIZE as u64 * PAGE_SIZE as u64;
        let (at, keep) = match &self.swap {
            SwapTarget::Memory => return Ok(BackendConfig::Memory),
            SwapTarget::Far(config) => {
                let nr_pages = size_bytes / PAGE_SIZE as u64;
                let far = far::FarBackend::connect(config.clone(), nr_pages)
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

/// The copy-on-write breaker thread ([`UffdSource::break_cow_pending`]).
#[derive(Debug)]
pub(crate) struct Breaker {
    stop: Arc<AtomicBool>,
    source: Arc<UffdSource>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Breaker {
    pub(crate) fn spawn(source: Arc<UffdSource>) -> Result<Breaker, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, work) = (stop.clone(), source.clone());
        let thread = std::thread::Builder::new()
            .name("uswap-cow".into())
            .spawn(move || {
                while !flag.load(SeqCst) {
                    work.break_cow_wait(&flag);
                }
            })
            .map_err(|error| Error::Thread { what: "the copy-on-write breaker", error })?;
        Ok(Breaker { stop, source, thread: Some(thread) })
    }
}

impl Drop for Breaker {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        self.source.wake_cow_breaker();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What an [`Inner`] owns, dropped in field order (see [`Inner`]'s `Drop`).
#[derive(Debug)]
pub(crate) struct Parts {
    /// Disarmed first: no thread resolves faults after this.
    pub(crate) sigbus: Option<SigbusMode>,
    /// Stopped before the handler (its COW breaks may fault and need the handler).
    #[allow(dead_code)] // held for its `Drop`
    pub(crate) breaker: Breaker,
    /// Stopped before the staging is unregistered (it reads the events until then).
    pub(crate) handler: Handler,
    /// Its reclaimer is joined when the last reference goes.
    pub(crate) engine: Arc<Engine>,
    pub(crate) source: Arc<UffdSource>,
    pub(crate) uffd: Arc<Uffd>,
}

impl Parts {
    /// Starts the threads of a swap whose engine, source and uffd exist: the handler, the
    /// SIGBUS dispatcher under SIGBUS delivery, the copy-on-write breaker. `control`: the
    /// handler's control block, made beforehand (a forked child's start-up dispatcher
    /// needs it before the handler thread exists).
    pub(crate) fn start(
        settings: &Settings,
        delivery: Delivery,
        engine: Arc<Engine>,
        source: Arc<UffdSource>,
        uffd: Arc<Uffd>,
        control: Option<Arc<Control>>,
    ) -> Result<Parts, Error> {
        let hooks = settings.handler.hooks.clone();
        let options = settings.handler.clone();
        let handler =
            Handler::spawn_on(control, engine.clone(), uffd.clone(), source.clone(), options)?;
        let sigbus = match delivery {
            Delivery::Sigbus => {
                let control = handler.control().clone();
                Some(SigbusMode::arm(engine.clone(), source.clone(), control, hooks)?)
            }
            Delivery::Handler => None,
        };
        let breaker = Breaker::spawn(source.clone())?;
        Ok(Parts { sigbus, breaker, handler, engine, source, uffd })
    }
}

/// A fork in progress (crate::fork): what prepare made for the parent and child handlers.
#[derive(Debug)]
pub(crate) struct Forking {
    /// The hold pipe: the parent polls the read end, the child's line keeps the write end.
    pub(crate) pipe: Option<(fds::Fd, fds::Fd)>,
    /// Pages out of the program at the fork (orphans), with their data: copied into the
    /// child, which is forked without them.
    pub(crate) orphans: Vec<(u64, Box<[u8]>)>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    /// `Some` while the swap runs in this process; replaced by a forked child's own.
    /// Lock-free: a lock taken by a thread at the instant of a fork would stay taken in
    /// the child.
    pub(crate) parts: arc_swap::ArcSwapOption<Parts>,
    pub(crate) settings: Settings,
    pub(crate) delivery: Delivery,
    kernel_faults: bool,
    pub(crate) exclude_from_fork: bool,
    probe_summary: String,
    /// The process the parts belong to.
    pub(crate) pid: std::sync::atomic::AtomicI32,
    /// A fork in progress on some thread (between its prepare and parent/child handlers).
    pub(crate) fork: std::sync::Mutex<Option<Forking>>,
}

impl Inner {
    fn in_owner(&self) -> bool {
        process::getpid() == self.pid.load(SeqCst)
    }

    pub(crate) fn owner(&self) -> Result<Arc<Parts>, Error> {
        match self.parts.load_full() {
            Some(parts) if self.in_owner() => Ok(parts),
            _ => Err(Error::ForkedChild),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let parts = self.parts.swap(None);
        if !self.in_owner() {
            // An inert copy in a forked child: the parts are the parent's (threads, and
            // locks held by threads that do not exist here): never touched, never dropped.
            std::mem::forget(parts);
        }
    }
}

/// A swap for this process's memory (see the module essay).
#[derive(Debug, Clone)]
pub struct Uswap {
    inner: Arc<Inner>,
}

/// Every counter of a [`Uswap`], at one moment (each part is consistent on its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// The engine's counters and gauges (vmstat names).
    pub engine: StatsSnapshot,
    /// The page source's (takes, maps, refusals).
    pub source: SourceStats,
    /// The handler thread's (messages, events, children).
    pub handler: HandlerStats,
    /// SIGBUS-mode resolution (zero in handler mode).
    pub sigbus: SigbusStats,
}

impl Uswap {
    /// A builder with the defaults.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Maps `len_bytes` (rounded up to pages) of anonymous memory managed by this swap.
    ///
    /// # Errors
    /// [`Error::Config`] for a zero length (nothing is mapped); mmap or registration
    /// errors; [`Error::ForkedChild`].
    ///
    /// Context: may allocate the region's page table lazily; takes the engine's region lock.
    pub fn map(&self, len_bytes: usize) -> Result<Region, Error> {
        let parts = self.inner.owner()?;
        // No call runs across a fork (crate::fork): its locks would be the child's too.
        let _pass = parts.handler.control().gate.enter();
        if len_bytes == 0 {
            return Err(Error::Config { what: "a region of length zero".into() });
        }
        let map = Mapping::anonymous(len_bytes)?;
        // Base pages only: the engine's folios are its own; a transparent huge page would
        // mean 2 MiB faults and moves behind its back.
        map.advise(0, map.len_bytes(), Advice::NoHugePage)?;
        if self.inner.exclude_from_fork {
            map.advise(0, map.len_bytes(), Advice::DontFork)?;
        }
        let range = map.range();
        let (start, len) = (range.start() as u64, range.len_bytes() as u64);
        // The engine knows the region before the kernel can report a fault in it.
        parts.engine.add_region(start, len).map_err(Error::Engine)?;
        if let Err(error) = parts.uffd.register(range, parts.source.register_mode()) {
            parts.engine.unmap(start, len);
            return Err(error.into());
        }
        Ok(Region { inner: self.inner.clone(), map: Some(map), range })
    }

    /// Pages out every resident page of managed memory in `[addr, addr + len)` now (like
    /// `MADV_PAGEOUT`); pages shared with a forked child are unshared first (a copy-on-write
    /// break that changes no data). Returns pages paged out.
    ///
    /// # Errors
    /// [`Error::Engine`] with `OutsideRegions` if `addr` is in no region;
    /// [`Error::ForkedChild`].
    ///
    /// Context: runs page-out on the calling thread (moves, compression, I/O); must not be
    /// called from the thread that resolves faults (it may fault on a shared page).
    pub fn pageout(&self, addr: usize, len: usize) -> Result<u64, Error> {
        let parts = self.inner.owner()?;
        // No call runs across a fork (crate::fork): its locks would be the child's too.
        let _pass = parts.handler.control().gate.enter();
        let (addr, len) = (addr as u64, len as u64);
        let refused = parts.source.stats().take_busy;
        let mut paged = parts.engine.pageout(addr, len).map_err(Error::Engine)?;
        // Refusals (of this call, or counted meanwhile by another thread: a spare pass
        // costs a page-table walk) mean shared pages: unshare what is queued and in flight,
        // then page out again.
        if parts.source.stats().take_busy > refused {
            parts.source.break_cow_pending(Some((addr, len)));
            paged += parts.engine.pageout(addr, len).map_err(Error::Engine)?;
        }
        Ok(paged)
    }

    /// Changes the budget while the swap runs ([`Engine::set_budget`]): a smaller one is
    /// reclaimed down to in the background, a larger one takes effect at once.
    ///
    /// # Errors
    /// [`Error::Engine`] with `Config` for a budget below one folio (nothing changes);
    /// [`Error::ForkedChild`].
    pub fn set_budget(&self, budget_bytes: u64) -> Result<(), Error> {
        let parts = self.inner.owner()?;
        let _pass = parts.handler.control().gate.enter();
        parts.engine.set_budget(budget_bytes).map_err(Error::Engine)
    }

    /// Every counter.
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn stats(&self) -> Result<Stats, Error> {
        let parts = self.inner.owner()?;
        // No call runs across a fork (crate::fork): its locks would be the child's too.
        let _pass = parts.handler.control().gate.enter();
        Ok(Stats {
            engine: parts.engine.stats(),
            source: parts.source.stats(),
            handler: parts.handler.control().stats(),
            sigbus: parts.sigbus.as_ref().map(SigbusMode::stats).unwrap_or_default(),
        })
    }

    /// How faults are delivered.
    pub fn delivery(&self) -> Delivery {
        self.inner.delivery
    }

    /// Whether faults taken in kernel mode (system calls into managed memory) are trapped.
    pub fn traps_kernel_faults(&self) -> bool {
        self.inner.kernel_faults
    }

    /// One line on the kernel and process the probe found.
    pub fn probe_summary(&self) -> &str {
        &self.inner.probe_summary
    }

    /// The engine (tests, benchmarks: configuration, invariants).
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn engine(&self) -> Result<Arc<Engine>, Error> {
        Ok(self.inner.owner()?.engine.clone())
    }

    /// The page source (tests: fault injection, counters).
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn source(&self) -> Result<Arc<UffdSource>, Error> {
        Ok(self.inner.owner()?.source.clone())
    }

    /// Checks the engine's and the page source's invariants, each with the background
    /// reclaimer paused: a page-out it has in flight holds staging slots, which the source's
    /// check would count as leaked. For tests, once the program's own threads are quiet.
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    ///
    /// # Panics
    /// On a violated invariant.
    pub fn check_invariants(&self) -> Result<(), Error> {
        let parts = self.inner.owner()?;
        // No call runs across a fork (crate::fork): its locks would be the child's too.
        let _pass = parts.handler.control().gate.enter();
        parts.engine.check_invariants();
        parts.engine.with_reclaim_paused(|| parts.source.check_invariants());
        Ok(())
    }

    /// The uffd that manages this process's memory: an embedding program registers ranges
    /// it adopts with it ([`Engine::add_region_populated`]), on the handler thread.
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn uffd(&self) -> Result<Arc<Uffd>, Error> {
        Ok(self.inner.owner()?.uffd.clone())
    }

    /// The handler thread's control block ([`Control::wake`], counters).
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn control(&self) -> Result<Arc<Control>, Error> {
        Ok(self.inner.owner()?.handler.control().clone())
    }

    /// The largest folio order the engine accepts.
    pub const MAX_FOLIO_ORDER: u32 = MAX_ORDER;
}

/// A managed anonymous region (see the module essay). Unmapped on drop.
#[derive(Debug)]
pub struct Region {
    inner: Arc<Inner>,
    /// `Some` until unmapped.
    map: Option<Mapping>,
    range: uffd::types::Range,
}

impl Region {
    /// The first byte's address.
    pub fn addr(&self) -> usize {
        self.range.start()
    }

    /// The length in bytes (a page multiple).
    pub fn len(&self) -> usize {
        self.range.len_bytes()
    }

    /// Always false: a region has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// A raw pointer to the first byte (for threads sharing the region, and for C).
    pub fn as_ptr(&self) -> *mut u8 {
        self.range.start() as *mut u8
    }

    /// The region's bytes. Reading a page that is not resident faults and waits while the
    /// engine brings it back.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the region is managed by this engine (transparent), mapped until `self`
        // drops, never discarded by safe code, and `&self` excludes `as_mut_slice`.
        unsafe { uffd::sys::process::region_bytes(self.addr(), self.len()) }
    }

    /// The region's bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` excludes every other borrow.
        unsafe { uffd::sys::process::region_bytes_mut(self.addr(), self.len()) }
    }

    /// Pages out `[offset, offset + len)` of the region now (see [`Uswap::pageout`]).
    ///
    /// # Errors
    /// As [`Uswap::pageout`]; [`uffd::Error::OutOfBounds`] (as [`Error::Kernel`]) for a range
    /// outside the region.
    pub fn pageout(&self, offset: usize, len: usize) -> Result<u64, Error> {
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            let size_bytes = self.len();
            return Err(uffd::Error::OutOfBounds { offset, len_bytes: len, size_bytes }.into());
        }
        Uswap { inner: self.inner.clone() }.pageout(self.addr() + offset, len)
    }

    /// Unmaps the region: its swap entries are dropped, its memory returned.
    ///
    /// # Errors
    /// [`Error::ForkedChild`] (in a child the mapping is left to the child's exit).
    pub fn unmap(mut self) -> Result<(), Error> {
        self.release()
    }

    fn release(&mut self) -> Result<(), Error> {
        let Ok(parts) = self.inner.owner() else {
            // A forked child: the mapping is left to the child's exit (its munmap would
            // wait for the parent's handler to read an UNMAP).
            std::mem::forget(self.map.take());
            return Err(Error::ForkedChild);
        };
        let Some(map) = self.map.take() else { return Ok(()) };
        let range = self.range;
        let (start, len) = (range.start() as u64, range.len_bytes() as u64);
        // Unregistered first: from here an access is an ordinary fault, and munmap sends no
        // UNMAP to wait for. The gate keeps a fork from copying a half-dropped region.
        let _pass = parts.handler.control().gate.enter();
        let unregistered = parts.uffd.unregister(range);
        parts.source.forget_orphans(start, len);
        parts.engine.unmap(start, len);
        drop(map);
        Ok(unregistered?)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = self.release();
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
