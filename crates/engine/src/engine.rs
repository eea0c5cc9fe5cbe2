//! The engine: the layers composed, and the registry of regions.
//!
//! ```text
//!   Engine ── Core ──┬─ regions (RwLock): start address → Region (page table behind its PTL)
//!                    ├─ lru (one lock): resident folios, active / inactive
//!                    ├─ budget (atomics), workingset clock (atomic), stats (atomics)
//!                    ├─ swap cache (a lock per 64 MiB of swap)
//!                    ├─ storage: zero map (atomics), swap device (cluster locks, list lock)
//!                    └─ the background reclaimer's wake-up (mutex + condvar)
//! ```
//!
//! Lock order (a lock on the left may be held while taking one on its right, never the
//! reverse): regions → PTL → LRU; PTL → swap device cluster lock → slot free hook (zswap,
//! zero map); PTL → swap cache shard → cluster lock. The LRU lock is a leaf. No engine lock
//! is held while waiting on a folio, reading
//! or writing a backend, or reclaiming.

use crate::budget::{Budget, Pressure};
use crate::config::{BackendConfig, EngineConfig};
use crate::lru::{Lru, RegionId};
use crate::page_source::PageSource;
use crate::region::{Pte, Region};
use crate::stats::{Gauges, Stats, StatsSnapshot};
use crate::storage::{SlotHook, Storage};
use crate::swap_cache::SwapCache;
use crate::sync::{AtomicBool, AtomicU64, Condvar, Mutex, Ordering, RwLock};
use crate::workingset::WorkingsetClock;
use crate::zeromap::ZeroMap;
use crate::{Error, PAGE_SIZE};
use backend::{Backend, ChecksumBackend, FileBackend, FileOptions, MemoryBackend};
use slots::{SwapDevice, SwapDeviceOptions, SwapType};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The regions, by start address and by id.
#[derive(Debug, Default)]
pub(crate) struct Regions {
    pub(crate) by_start: BTreeMap<u64, Arc<Region>>,
    pub(crate) by_id: HashMap<RegionId, Arc<Region>>,
    next_id: u32,
}

impl Regions {
    /// The region containing `addr`.
    pub(crate) fn find(&self, addr: u64) -> Option<&Arc<Region>> {
        let (_, region) = self.by_start.range(..=addr).next_back()?;
        (addr < region.end()).then_some(region)
    }
}

/// Everything the engine's threads share.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) config: EngineConfig,
    pub(crate) source: Arc<dyn PageSource>,
    pub(crate) regions: RwLock<Regions>,
    pub(crate) lru: Lru,
    pub(crate) budget: Budget,
    pub(crate) workingset: WorkingsetClock,
    pub(crate) stats: Stats,
    pub(crate) swap_cache: Arc<SwapCache>,
    pub(crate) storage: Storage,
    /// Folios in the swap cache (the kernel's nr_swapcached).
    pub(crate) nr_swapcached: AtomicU64,
    /// Set to wake the background reclaimer; guarded with `kswapd_wake`.
    pub(crate) kswapd_pending: Mutex<bool>,
    pub(crate) kswapd_wake: Condvar,
    /// Held by the background reclaimer for each pass, and by `check_invariants` so it
    /// checks a quiescent engine. Taken before any other engine lock.
    pub(crate) kswapd_running: Mutex<()>,
    pub(crate) shutdown: AtomicBool,
}

/// The engine (see the crate documentation).
#[derive(Debug)]
pub struct Engine {
    pub(crate) core: Arc<Core>,
    kswapd: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for dyn PageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageSource")
    }
}

/// What a fault did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOutcome {
    /// Data was mapped (a first touch, or a swap-in).
    Mapped,
    /// The page was already mapped (a racing fault served it); the faulting thread was
    /// woken.
    Spurious,
    /// The address space is changing (fork, mremap): the page source asked to retry once
    /// pending events are handled. Nothing changed.
    Retry,
    /// The range is no longer managed (it was unmapped while the fault was handled).
    Gone,
}

fn make_backend(config: &EngineConfig) -> Result<Arc<dyn Backend>, Error> {
    let swap = &config.swap;
    let nr_pages = swap.size_bytes / PAGE_SIZE as u64;
    let size_bytes = nr_pages * PAGE_SIZE as u64;
    let plain: Arc<dyn Backend> = match &swap.backend {
        BackendConfig::Memory => Arc::new(MemoryBackend::new(nr_pages)),
        BackendConfig::File { dir, path, keep } => {
            let at = path.as_ref().unwrap_or(dir);
            let options = FileOptions { keep: *keep };
            let file = FileBackend::create(at, size_bytes, options)
                .map_err(|e| Error::Config(format!("swap file at {}: {e}", at.display())))?;
            Arc::new(file)
        }
        BackendConfig::Custom(backend) => backend.clone(),
    };
    if swap.checksums {
        Ok(Arc::new(ChecksumBackend::new(ArcBackend(plain))))
    } else {
        Ok(plain)
    }
}

/// Lets an `Arc<dyn Backend>` be wrapped by the generic checksum layer.
#[derive(Clone)]
struct ArcBackend(Arc<dyn Backend>);

impl Backend for ArcBackend {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), backend::Error> {
        self.0.write(offset, data)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), backend::Error> {
        self.0.read(offset, buf)
    }
    fn discard(&self, offset: u64, nr: u64) -> Result<(), backend::Error> {
        self.0.discard(offset, nr)
    }
    fn is_synchronous(&self) -> bool {
        self.0.is_synchronous()
    }
    fn nr_pages(&self) -> u64 {
        self.0.nr_pages()
    }
}

impl Engine {
    /// Validates `config`, sets up the swap device and its tiers, and starts the background
    /// reclaimer if configured.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad configuration or a swap device that cannot be set up
    /// (the message says which and why). Nothing is left behind on error.
    ///
    /// Context: allocates the device's metadata; may create a swap file; spawns a thread.
    pub fn new(config: EngineConfig, source: Arc<dyn PageSource>) -> Result<Engine, Error> {
        config.validate()?;
        let budget = Budget::new(config.budget_bytes, config.watermarks())?;
        let backend = make_backend(&config)?;
        let nr_slots = backend.nr_pages();
        let zeromap = Arc::new(ZeroMap::new(nr_slots));
        let swap_cache = Arc::new(SwapCache::new(nr_slots));
        let hook = Arc::new(SlotHook { zeromap: zeromap.clone() });
        let options =
            SwapDeviceOptions { policy: config.swap.policy, discard: config.swap.discard };
        let ty = SwapType::new(0).expect("type 0 exists");
        let device = SwapDevice::new(ty, backend, options, Some(hook))
            .map_err(|e| Error::Config(format!("swap device: {e}")))?;
        let core = Arc::new(Core {
            source,
            regions: RwLock::new(Regions::default()),
            lru: Lru::new(),
            budget,
            workingset: WorkingsetClock::default(),
            stats: Stats::default(),
            swap_cache,
            storage: Storage { device: Arc::new(device), zeromap },
            nr_swapcached: AtomicU64::new(0),
            kswapd_pending: Mutex::new(false),
            kswapd_wake: Condvar::new(),
            kswapd_running: Mutex::new(()),
            shutdown: AtomicBool::new(false),
            config,
        });
        let kswapd = if core.config.background_reclaim {
            let core = core.clone();
            let handle = std::thread::Builder::new()
                .name("uswap-kswapd".into())
                .spawn(move || core.kswapd())
                .map_err(|e| Error::Config(format!("cannot start the reclaimer thread: {e}")))?;
            Some(handle)
        } else {
            None
        };
        Ok(Engine { core, kswapd })
    }

    /// Manages `len` bytes at `start` (page aligned; all pages untouched so far).
    ///
    /// # Errors
    /// [`Error::BadRegion`] for an empty, unaligned or overlapping range.
    pub fn add_region(&self, start: u64, len: u64) -> Result<RegionId, Error> {
        let mut regions = self.core.regions.write();
        let id = RegionId(regions.next_id);
        let region = Arc::new(Region::new(id, start, len)?);
        let overlaps = regions.find(start).is_some()
            || regions.by_start.range(start..region.end()).next().is_some();
        if overlaps {
            return Err(Error::BadRegion { start, len, why: "overlaps a managed region" });
        }
        regions.next_id += 1;
        regions.by_start.insert(start, region.clone());
        regions.by_id.insert(id, region);
        Ok(id)
    }

    /// Handles a fault at `addr` (see [`Core::handle_fault`]).
    ///
    /// # Errors
    /// [`Error::OutsideRegions`]; [`Error::SwapIn`] when the data could not be read back
    /// (the page was poisoned: the access fails instead of seeing wrong data).
    pub fn handle_fault(&self, addr: u64, write: bool) -> Result<FaultOutcome, Error> {
        self.core.handle_fault(addr, write)
    }

    /// Reclaims until the free budget reaches the high watermark or nothing more can go
    /// (what the background reclaimer does). Returns pages reclaimed.
    pub fn reclaim(&self) -> u64 {
        self.core.reclaim_to(Pressure::None, false)
    }

    /// Pages out every resident folio intersecting `[addr, addr + len)` now (MADV_PAGEOUT).
    /// Returns pages paged out.
    ///
    /// # Errors
    /// [`Error::OutsideRegions`] if `addr` is in no region.
    pub fn pageout(&self, addr: u64, len: u64) -> Result<u64, Error> {
        self.core.pageout_range(addr, len)
    }

    /// The program dropped `[addr, addr + len)` (MADV_DONTNEED, UFFD_EVENT_REMOVE): its pages
    /// read as zeros from now on; their swap entries and resident charges go.
    pub fn remove(&self, addr: u64, len: u64) {
        self.core.remove_range(addr, len);
    }

    /// `[addr, addr + len)` was unmapped (UFFD_EVENT_UNMAP): as [`Engine::remove`], and
    /// regions wholly inside the range are forgotten.
    pub fn unmap(&self, addr: u64, len: u64) {
        self.core.remove_range(addr, len);
        self.core.forget_regions_within(addr, len);
    }

    /// A snapshot of every counter and gauge.
    pub fn stats(&self) -> StatsSnapshot {
        self.core.stats_snapshot()
    }

    /// The configuration in force.
    pub fn config(&self) -> &EngineConfig {
        &self.core.config
    }

    /// Checks every structure and the cross-structure accounting. Meant for tests and the
    /// simulator, with no operation in flight.
    ///
    /// # Panics
    /// On any inconsistency, naming it.
    pub fn check_invariants(&self) {
        self.core.check_invariants();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.core.shutdown.store(true, Ordering::Release);
        *self.core.kswapd_pending.lock() = true;
        self.core.kswapd_wake.notify_all();
        if let Some(handle) = self.kswapd.take() {
            // A panicking reclaimer already reported itself; nothing more to do here.
            let _ = handle.join();
        }
    }
}

impl Core {
    /// The region containing `addr`.
    ///
    /// # Errors
    /// [`Error::OutsideRegions`].
    pub(crate) fn region_of(&self, addr: u64) -> Result<Arc<Region>, Error> {
        self.regions.read().find(addr).cloned().ok_or(Error::OutsideRegions { addr })
    }

    /// The region with id `id`, if still managed.
    pub(crate) fn region_by_id(&self, id: RegionId) -> Option<Arc<Region>> {
        self.regions.read().by_id.get(&id).cloned()
    }

    /// Bytes held by the compressed pool (counted against the budget).
    pub(crate) fn pool_bytes(&self) -> u64 {
        0
    }

    pub(crate) fn stats_snapshot(&self) -> StatsSnapshot {
        let counts = self.lru.counts();
        let pool_bytes = self.pool_bytes();
        let gauges = Gauges {
            resident_pages: self.budget.resident_bytes() / PAGE_SIZE as u64,
            swapcache_bytes: self.budget.swapcache_bytes(),
            nr_swapcached: self.nr_swapcached.load(Ordering::Relaxed),
            pool_bytes,
            pool_stored_pages: 0,
            swap_inuse_pages: self.storage.device.inuse_pages(),
            zeromap_pages: self.storage.zeromap.count(),
            budget_bytes: self.budget.budget_bytes(),
            used_bytes: self.budget.used(pool_bytes),
            used_bytes_peak: self.budget.peak_bytes(),
            nr_active_anon: counts.active_pages,
            nr_inactive_anon: counts.inactive_pages,
        };
        self.stats.snapshot(gauges)
    }

    fn check_invariants(&self) {
        let _quiet = self.kswapd_running.lock();
        self.lru.check_invariants();
        self.swap_cache.check_invariants();
        self.storage.zeromap.check_invariants();
        self.storage.device.check_invariants();
        let regions = self.regions.read();
        let (mut resident, mut swapped) = (0u64, 0u64);
        for region in regions.by_start.values() {
            let pt = region.lock();
            pt.check_invariants();
            for found in pt.entries(0, region.nr_pages() - 1) {
                let pages = 1u64 << found.order;
                match found.pte {
                    Pte::Resident(id) => {
                        let (owner, _) =
                            self.lru.get(id).expect("resident entry with a dead LRU id");
                        assert_eq!(
                            (owner.region, owner.index, owner.order),
                            (region.id(), found.first, found.order)
                        );
                        resident += pages;
                    }
                    Pte::Swap(entry) => {
                        for page in 0..pages {
                            let count = self
                                .storage
                                .device
                                .count(entry.add(page))
                                .expect("swap entry on the device");
                            assert!(
                                count >= 1,
                                "swap entry {entry:?}+{page} referenced with count 0"
                            );
                        }
                        swapped += pages;
                    }
                }
            }
        }
        let counts = self.lru.counts();
        assert_eq!(counts.isolated_pages, 0, "folios left isolated");
        assert_eq!(resident, counts.active_pages + counts.inactive_pages, "page tables vs LRU");
        assert_eq!(resident * PAGE_SIZE as u64, self.budget.resident_bytes(), "resident charge");
        assert_eq!(self.budget.swapcache_bytes(), 0, "swap cache charge with nothing in flight");
        assert_eq!(self.swap_cache.counts().0, 0, "folios left in the swap cache");
        assert_eq!(self.storage.device.inuse_pages(), swapped, "slots in use vs swap entries");
    }
}
