//! The engine: the layers composed, and the registry of regions.
//!
//! ```text
//!   Engine ── Core ──┬─ regions (RwLock): per address space (mm), start → Region (its page
//!                    │   source, its page table behind its PTL); and id → Region
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

mod backends;
mod budget;
mod fork;
mod invariants;

use backends::{make_backend, wrap_backend};

use crate::budget::{Budget, Pressure};
use crate::config::{BackendConfig, EngineConfig};
use crate::hooks::PageOutHook;
use crate::lru::{Lru, RegionId};
use crate::page_source::PageSource;
use crate::region::{MmId, Pte, Region};
use crate::stats::{Gauges, Polled, Stats, StatsSnapshot};
use crate::storage::{SlotHook, Storage};
use crate::swap_cache::{Outcome, SwapCache};
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering, RwLock};
use crate::workingset::WorkingsetClock;
use crate::zeromap::ZeroMap;
use crate::{Error, PAGE_SIZE};
use backend::{Backend, ChecksumBackend, CryptBackend, FileBackend, FileOptions, MemoryBackend};
use slots::{SwapDevice, SwapDeviceOptions, SwapEntry, SwapType};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use zswap::Zswap;

/// The regions of one address space, by start address.
#[derive(Debug)]
pub(crate) struct Mm {
    pub(crate) source: Arc<dyn PageSource>,
    /// Resident folios are tracked and evicted (false for a forked child).
    pub(crate) managed: bool,
    pub(crate) by_start: BTreeMap<u64, Arc<Region>>,
}

impl Mm {
    /// The region containing `addr`.
    pub(crate) fn find(&self, addr: u64) -> Option<&Arc<Region>> {
        let (_, region) = self.by_start.range(..=addr).next_back()?;
        (addr < region.end()).then_some(region)
    }

    /// The regions intersecting `[addr, end)`.
    pub(crate) fn intersecting(&self, addr: u64, end: u64) -> Vec<Arc<Region>> {
        let first = self.find(addr).map_or(addr, |r| r.start());
        self.by_start.range(first..end).map(|(_, r)| r.clone()).collect()
    }
}

/// Every address space's regions, and every region by id.
#[derive(Debug, Default)]
pub(crate) struct Regions {
    pub(crate) mms: HashMap<MmId, Mm>,
    pub(crate) by_id: HashMap<RegionId, Arc<Region>>,
    next_region: u32,
    next_mm: u32,
}

/// Everything the engine's threads share.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) config: EngineConfig,
    pub(crate) regions: RwLock<Regions>,
    pub(crate) lru: Lru,
    pub(crate) budget: Budget,
    pub(crate) workingset: WorkingsetClock,
    pub(crate) stats: Stats,
    pub(crate) swap_cache: Arc<SwapCache>,
    pub(crate) storage: Storage,
    /// Folios in the swap cache (the kernel's nr_swapcached).
    pub(crate) nr_swapcached: AtomicU64,
    /// Pages of [`Pte::ZeroMapped`] entries (the `zero_mapped_pages` gauge).
    pub(crate) zero_mapped_pages: AtomicU64,
    /// Pages out of the program, held by the page source, and where (`staged.rs`).
    pub(crate) staged: crate::staged::StagedPages,
    /// Wakes the background reclaimer ([`crate::quiesce::Doorbell`]).
    pub(crate) kswapd_bell: crate::quiesce::Doorbell,
    /// Held by the background reclaimer for each pass, and by `check_invariants` so it
    /// checks a quiescent engine. Taken before any other engine lock.
    pub(crate) kswapd_running: Mutex<()>,
    /// The background reclaimer's thread id, once it runs (0 before, or without one).
    pub(crate) kswapd_tid: std::sync::atomic::AtomicI32,
    pub(crate) shutdown: AtomicBool,
    /// The program locked all its memory ([`Engine::set_all_locked`]): reclaim takes
    /// nothing.
    pub(crate) all_locked: AtomicBool,
    /// Stops the engine's own reclaim for a fork ([`crate::quiesce`]).
    pub(crate) fork_pause: crate::quiesce::ForkPause,
    /// References kept on slots for forked children ([`Engine::hold_for_child`]), by hold.
    /// A leaf lock.
    pub(crate) holds: std::sync::Mutex<Holds>,
    /// Told of every page-out once set ([`Engine::set_page_out_hook`]). Set once; read
    /// without a lock.
    pub(crate) page_out_hook: std::sync::OnceLock<Arc<dyn PageOutHook>>,
}

/// The references kept for forked children: each hold's slots, as `(first slot, pages)`.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    next: u64,
    by_id: HashMap<u64, Vec<(SwapEntry, u32)>>,
}

/// A forked child's references on its parent's slots ([`Engine::hold_for_child`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HoldId(u64);

/// Runs of pages: `(first page index, pages)`.
type PageRuns = Vec<(u64, u64)>;

/// Address ranges `(start, end)`, in address order.
pub type AddrRanges = Vec<(u64, u64)>;

/// The engine (see the crate documentation).
#[derive(Debug)]
pub struct Engine {
    pub(crate) core: Arc<Core>,
    /// The background reclaimer, if configured (a forked child starts its own:
    /// [`Engine::after_fork_in_child`]).
    kswapd: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for dyn PageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageSource")
    }
}

/// Where the program's lock over all its memory stands ([`Engine::set_all_locked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllLocked {
    /// `mlockall(MCL_CURRENT)` is running: the kernel faults in every page of the program
    /// to lock it. Reclaim waits, as it will for the locked pages: a page it took out
    /// meanwhile would be faulted back by the same call, and each of those faults would
    /// reclaim again, scanning locked pages it cannot take. Not counted: the call may fail.
    Locking,
    /// The call returned: every page is locked (counted in `all_locked`).
    Locked,
    /// `munlockall`, or the call failed: reclaim runs again.
    Unlocked,
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
        let zswap = match config.zswap_config() {
            Some(zswap_config) => {
                let pool = Zswap::with_faults(zswap_config, nr_slots, config.zswap_faults.clone())
                    .map_err(|e| Error::Config(format!("compressed pool: {e}")))?;
                Some(Arc::new(pool))
            }
            None => None,
        };
        let hook = Arc::new(SlotHook { zeromap: zeromap.clone(), zswap: zswap.clone() });
        let options =
            SwapDeviceOptions { policy: config.swap.policy, discard: config.swap.discard };
        let ty = SwapType::new(0).expect("type 0 exists");
        let device = SwapDevice::new(ty, backend, options, Some(hook))
            .map_err(|e| Error::Config(format!("swap device: {e}")))?;
        let mut regions = Regions { next_mm: 1, ..Regions::default() };
        regions.mms.insert(MmId::DEFAULT, Mm { source, managed: true, by_start: BTreeMap::new() });
        let core = Arc::new(Core {
            regions: RwLock::new(regions),
            lru: Lru::new(),
            budget,
            workingset: WorkingsetClock::default(),
            stats: Stats::default(),
            swap_cache,
            storage: Storage { device: Arc::new(device), zeromap, zswap },
            nr_swapcached: AtomicU64::new(0),
            zero_mapped_pages: AtomicU64::new(0),
            staged: crate::staged::StagedPages::default(),
            kswapd_bell: crate::quiesce::Doorbell::default(),
            kswapd_running: Mutex::new(()),
            kswapd_tid: std::sync::atomic::AtomicI32::new(0),
            shutdown: AtomicBool::new(false),
            all_locked: AtomicBool::new(false),
            fork_pause: crate::quiesce::ForkPause::default(),
            holds: std::sync::Mutex::new(Holds::default()),
            page_out_hook: std::sync::OnceLock::new(),
            config,
        });
        let kswapd = core.spawn_reclaimer()?;
        Ok(Engine { core, kswapd: std::sync::Mutex::new(kswapd) })
    }

    /// Manages `len` bytes at `start` (page aligned; all pages untouched so far) in the
    /// engine's own address space. A range inside the holes of one region (pages the
    /// program unmapped while the rest of the region lives on) fills them: that region
    /// manages it again, and its id is returned.
    ///
    /// # Errors
    /// [`Error::BadRegion`] for an empty, unaligned or overlapping range.
    pub fn add_region(&self, start: u64, len: u64) -> Result<RegionId, Error> {
        self.core.add_region(MmId::DEFAULT, start, len)
    }

    /// As [`Engine::add_region`], in address space `mm`.
    ///
    /// # Errors
    /// [`Error::BadRegion`]; [`Error::NoSuchMm`].
    pub fn add_region_in(&self, mm: MmId, start: u64, len: u64) -> Result<RegionId, Error> {
        self.core.add_region(mm, start, len)
    }

    /// Manages `len` bytes at `start` of which some pages are already mapped, as a range a
    /// program used before it was managed (the LD_PRELOAD shim adopting a heap) has them:
    /// `present` lists runs `(first page index in the region, pages)` (PAGEMAP_SCAN
    /// `PAGE_IS_PRESENT` says which). Those pages become resident order-0 folios, charged
    /// and on the inactive list, so reclaim can evict them; the other pages are untouched.
    /// The caller registers the range for faults before it lists the present pages (so no
    /// page appears unseen in between; a fault meanwhile waits, as no region serves the
    /// range yet, or it lies in a hole), and keeps the program from dropping a listed page
    /// until this returns (a page listed but missing would be served as resident and never
    /// faulted in). A range inside the holes of one region fills them, as
    /// [`Engine::add_region`] does.
    ///
    /// # Errors
    /// [`Error::BadRegion`] for a bad range, an overlap, or a run outside the region
    /// (nothing is added then).
    ///
    /// Context: takes the regions lock, then the region's page-table lock; allocates; may
    /// wake the background reclaimer.
    pub fn add_region_populated(
        &self,
        start: u64,
        len: u64,
        present: &[(u64, u64)],
    ) -> Result<RegionId, Error> {
        let pages = len / PAGE_SIZE as u64;
        if present.iter().any(|&(first, n)| first.checked_add(n).is_none_or(|end| end > pages)) {
            return Err(Error::BadRegion { start, len, why: "a present run outside the region" });
        }
        let id = self.core.add_region(MmId::DEFAULT, start, len)?;
        if let Some(region) = self.core.region_by_id(id) {
            // A filled hole's runs are from `start`, inside an older region.
            let base = region.index_of(start);
            let runs: PageRuns = present.iter().map(|&(first, n)| (base + first, n)).collect();
            self.core.adopt_runs(&region, &runs, false);
        }
        Ok(id)
    }

    /// Adopts pages already mapped in `[start, start + len)`, a range inside one existing
    /// region of the engine's own address space (a region wider than the mappings it holds,
    /// as the LD_PRELOAD shim lays them out): `present` lists runs `(first page index from
    /// start, pages)`. Listed pages with no page-table entry become resident order-0
    /// folios, charged and on the inactive list; pages the engine already tracks are left
    /// alone. The same contract as [`Engine::add_region_populated`]: register the range
    /// for faults before listing its pages, and keep the program from dropping a listed
    /// page unseen. Returns pages adopted.
    ///
    /// # Errors
    /// [`Error::OutsideRegions`] if no region holds the whole range; [`Error::BadRegion`]
    /// for a run outside it (nothing is adopted then).
    ///
    /// Context: takes the regions lock (read), then the region's page-table lock;
    /// allocates; may wake the background reclaimer.
    pub fn adopt_populated(
        &self,
        start: u64,
        len: u64,
        present: &[(u64, u64)],
    ) -> Result<u64, Error> {
        let (region, runs) = self.runs_in_region(start, len, present)?;
        Ok(self.core.adopt_runs(&region, &runs, false))
    }

    /// Adopts pages of `[start, start + len)` (inside one region of the engine's own
    /// address space) that the caller found mapped to the shared zero page and
    /// write-protected through the page source ([`PageSource::protects_zero`]): `zero`
    /// lists runs `(first page index from start, pages)`. Listed pages with no page-table
    /// entry become zero-page entries, uncharged; the others are left alone. The contract
    /// of [`Engine::adopt_populated`], and the protection must be in place before the
    /// listing (a page written before it holds data). Returns pages adopted.
    ///
    /// # Errors
    /// As [`Engine::adopt_populated`]; [`Error::BadRegion`] if the region's source does not
    /// protect zero pages.
    ///
    /// Context: as [`Engine::adopt_populated`].
    pub fn adopt_zero_mapped(
        &self,
        start: u64,
        len: u64,
        zero: &[(u64, u64)],
    ) -> Result<u64, Error> {
        let (region, runs) = self.runs_in_region(start, len, zero)?;
        if !region.source().protects_zero() {
            return Err(Error::BadRegion {
                start,
                len,
                why: "its page source protects no zero page",
            });
        }
        Ok(self.core.adopt_runs(&region, &runs, true))
    }

    /// The region holding `[start, start + len)`, and `runs` (page runs from `start`) as
    /// page indexes of that region.
    fn runs_in_region(
        &self,
        start: u64,
        len: u64,
        runs: &[(u64, u64)],
    ) -> Result<(Arc<Region>, PageRuns), Error> {
        let region = self.core.region_of(MmId::DEFAULT, start)?;
        let end = start.checked_add(len).ok_or(Error::OutsideRegions { addr: start })?;
        if end > region.end() || !start.is_multiple_of(PAGE_SIZE as u64) {
            return Err(Error::OutsideRegions { addr: end.saturating_sub(1) });
        }
        let pages = len / PAGE_SIZE as u64;
        if runs.iter().any(|&(first, n)| first.checked_add(n).is_none_or(|end| end > pages)) {
            return Err(Error::BadRegion { start, len, why: "a present run outside the range" });
        }
        let base = region.index_of(start);
        Ok((region, runs.iter().map(|&(first, n)| (base + first, n)).collect()))
    }

    /// Rewrites the pool's stored object for the page at `addr` of `mm` with `mutate` (same
    /// length): fault injection for tests and the simulator, a bit flip in the pool's
    /// memory. Returns whether the page is swapped to an entry the pool holds.
    ///
    /// Context: takes the regions lock (read), the page-table lock, then zswap's tree and
    /// class locks inside it.
    pub fn corrupt_pool_page(&self, mm: MmId, addr: u64, mutate: impl FnOnce(&mut [u8])) -> bool {
        let Ok(region) = self.core.region_of(mm, addr) else { return false };
        let index = region.index_of(addr);
        let pt = region.lock_span(index);
        let Some(entry) = pt.lookup(index).and_then(|found| found.swap_entry_of(index)) else {
            return false;
        };
        let Some(zswap) = &self.core.storage.zswap else { return false };
        zswap.corrupt_object(entry, mutate)
    }

    /// The swapped pages of address space `mm`, as runs `(address, pages)` in address
    /// order: what a forked child would read from this engine's swap (the LD_PRELOAD shim
    /// maps them into a child whose parent is about to exit).
    ///
    /// Context: takes the regions lock (read), then each region's page-table lock in turn;
    /// allocates.
    pub fn swapped_ranges(&self, mm: MmId) -> Vec<(u64, u64)> {
        self.ranges_where(mm, |pte| matches!(pte, Pte::Swap(_)))
    }

    /// The runs of pages of address space `mm` mapped to the zero page, write-protected
    /// and uncharged ([`Pte::ZeroMapped`]), as `(address, pages)`: a forked child protects
    /// them again (its page tables lost the protection with the fork).
    ///
    /// Context: as [`Engine::swapped_ranges`].
    pub fn zero_mapped_ranges(&self, mm: MmId) -> Vec<(u64, u64)> {
        self.ranges_where(mm, |pte| matches!(pte, Pte::ZeroMapped))
    }

    fn ranges_where(&self, mm: MmId, keep: impl Fn(&Pte) -> bool) -> Vec<(u64, u64)> {
        let regions: Vec<Arc<Region>> = {
            let regions = self.core.regions.read();
            let Some(space) = regions.mms.get(&mm) else { return Vec::new() };
            space.by_start.values().cloned().collect()
        };
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for region in regions {
            let found = region.lock().entries(0, region.nr_pages() - 1);
            for f in found.into_iter().filter(|f| keep(&f.pte)) {
                let (addr, pages) = (region.addr_of(f.first), 1u64 << f.order);
                match runs.last_mut() {
                    Some((a, n)) if *a + *n * PAGE_SIZE as u64 == addr => *n += pages,
                    _ => runs.push((addr, pages)),
                }
            }
        }
        runs
    }

    /// The regions of address space `mm` without their holes, as `(start, end)` in address
    /// order: what the engine manages now.
    ///
    /// Context: takes the regions lock (read), and each region's holes lock in turn;
    /// allocates.
    pub fn region_ranges(&self, mm: MmId) -> Vec<(u64, u64)> {
        self.region_layout(mm).0
    }

    /// The regions of address space `mm` as [`Engine::region_ranges`], and their holes
    /// (parts the program unmapped while the rest lives on), each in address order. The
    /// LD_PRELOAD shim compares them with /proc/self/maps to find mappings to adopt: a new
    /// one inside a hole fills it ([`Engine::add_region`]), one beside a region is a region
    /// of its own.
    ///
    /// Context: as [`Engine::region_ranges`].
    pub fn region_layout(&self, mm: MmId) -> (AddrRanges, AddrRanges) {
        let regions = self.core.regions.read();
        let (mut live, mut holes) = (Vec::new(), Vec::new());
        if let Some(space) = regions.mms.get(&mm) {
            space.by_start.values().for_each(|r| r.layout(&mut live, &mut holes));
        }
        (live, holes)
    }

    /// Handles a fault at `addr` in the engine's own address space (see
    /// [`Core::handle_fault`]).
    ///
    /// # Errors
    /// [`Error::OutsideRegions`]; [`Error::SwapIn`] when the data could not be read back
    /// (the page was poisoned: the access fails instead of seeing wrong data).
    pub fn handle_fault(&self, addr: u64, write: bool) -> Result<FaultOutcome, Error> {
        self.core.handle_fault(MmId::DEFAULT, addr, write)
    }

    /// As [`Engine::handle_fault`], in address space `mm`.
    ///
    /// # Errors
    /// As [`Engine::handle_fault`], and [`Error::NoSuchMm`].
    pub fn handle_fault_in(&self, mm: MmId, addr: u64, write: bool) -> Result<FaultOutcome, Error> {
        self.core.handle_fault(mm, addr, write)
    }

    /// Handles a write-protect fault at `addr` in address space `mm`: a write to a zero
    /// page the engine mapped write-protected ([`PageSource::protects_zero`]). The page's
    /// entry becomes a resident folio, charged to the budget (direct reclaim makes room
    /// first), and its protection is lifted so the write goes through. A protected page
    /// the engine does not keep as a zero page (a forked child's) is only unprotected.
    ///
    /// # Errors
    /// [`Error::OutsideRegions`], [`Error::NoSuchMm`]; [`Error::Source`] when the
    /// protection could not be lifted.
    pub fn handle_wp_fault_in(&self, mm: MmId, addr: u64) -> Result<FaultOutcome, Error> {
        self.core.handle_wp_fault(mm, addr)
    }

    /// A fault of either kind in address space `mm`: a write-protect fault
    /// ([`Engine::handle_wp_fault_in`]) when `wp`, else a missing page's
    /// ([`Engine::handle_fault_in`], a write when `write`).
    ///
    /// # Errors
    /// As the call it makes.
    pub fn handle_access_in(
        &self,
        mm: MmId,
        addr: u64,
        write: bool,
        wp: bool,
    ) -> Result<FaultOutcome, Error> {
        if wp {
            self.core.handle_wp_fault(mm, addr)
        } else {
            self.core.handle_fault(mm, addr, write)
        }
    }

    /// An address space is gone (the process exited or exec'd): drop its regions and the
    /// swap references they held.
    pub fn exit_mm(&self, mm: MmId) {
        self.core.exit_mm(mm);
    }

    /// Reclaims until the free budget reaches the high watermark or nothing more can go
    /// (what the background reclaimer does). Returns pages reclaimed.
    pub fn reclaim(&self) -> u64 {
        let Some(_busy) = self.core.fork_pause.enter() else { return 0 };
        let reclaimed = self.core.reclaim_to(Pressure::None, false);
        self.core.shrink_pool();
        reclaimed
    }

    /// The background reclaimer's thread id, once it runs (`None` before, or without one):
    /// the uffd handler keeps it off the CPU of the thread whose faults it serves
    /// (`frontend::HandlerOptions::follow`).
    pub fn reclaimer_tid(&self) -> Option<u32> {
        let tid = self.core.kswapd_tid.load(std::sync::atomic::Ordering::Acquire);
        u32::try_from(tid).ok().filter(|&tid| tid != 0)
    }

    /// Sets the hook told of every page-out from now on (hooks.rs essay). Once per engine.
    ///
    /// # Errors
    /// [`Error::Config`] if a hook is already set (it stays).
    pub fn set_page_out_hook(&self, hook: Arc<dyn PageOutHook>) -> Result<(), Error> {
        self.core
            .page_out_hook
            .set(hook)
            .map_err(|_| Error::Config("a page-out hook is already set".into()))
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
        self.core.remove_range(MmId::DEFAULT, addr, len, false);
    }

    /// As [`Engine::remove`], in address space `mm`.
    pub fn remove_in(&self, mm: MmId, addr: u64, len: u64) {
        self.core.remove_range(mm, addr, len, false);
    }

    /// Drops the page at `addr` of `mm` if the engine holds it resident and `missing`, asked
    /// under the page table's lock, says the page is not in the program (the kernel has it
    /// neither present nor swapped, nor is it out on purpose): the program dropped it
    /// unseen, and it reads as zeros from now on. Returns whether it was dropped.
    ///
    /// Why under the lock: a page is missing from the program while a page-out has it
    /// out too, and a page-out takes it only under this lock. Asked outside it, the
    /// answer can be about a page that was resident when the caller looked and out by the
    /// time it asked: dropping the entry then drops a page-out's swap entry, and the page
    /// reads back as zeros.
    ///
    /// Context: takes the lock of the page's span; `missing` runs under it (it must take
    /// no engine lock and never fault on managed memory).
    pub fn drop_if_missing(&self, mm: MmId, addr: u64, missing: impl FnOnce() -> bool) -> bool {
        self.core.drop_if_missing(mm, addr, missing)
    }

    /// `[addr, addr + len)` was unmapped (UFFD_EVENT_UNMAP): as [`Engine::remove`], and
    /// regions wholly inside the range are forgotten.
    pub fn unmap(&self, addr: u64, len: u64) {
        self.unmap_in(MmId::DEFAULT, addr, len);
    }

    /// As [`Engine::unmap`], in address space `mm`.
    pub fn unmap_in(&self, mm: MmId, addr: u64, len: u64) {
        self.core.remove_range(mm, addr, len, true);
        self.core.forget_regions_within(mm, addr, len);
    }

    /// `[from, from + len)` moved to `[to, to + len)` (mremap, UFFD_EVENT_REMAP): the pages'
    /// bookkeeping moves with them; the destination becomes (part of) a managed region. The
    /// destination may lie in the source's own region (disjoint from the source range).
    /// Whatever the engine tracked at the destination is dropped first, as
    /// [`Engine::remove`] drops it (mremap replaces the destination's pages).
    ///
    /// # Errors
    /// [`Error::BadRegion`] if the source is not inside one region, or the destination
    /// overlaps another region.
    pub fn remap(&self, mm: MmId, from: u64, to: u64, len: u64) -> Result<(), Error> {
        let end = from.checked_add(len).ok_or(Error::OutsideRegions { addr: from })?;
        let pieces: Vec<(u64, u64)> = {
            let regions = self.core.regions.read();
            let Some(space) = regions.mms.get(&mm) else {
                return Err(Error::NoSuchMm { mm: mm.0 });
            };
            space
                .intersecting(from, end)
                .iter()
                .map(|r| (r.start().max(from), r.end().min(end)))
                .filter(|(s, e)| s < e)
                .collect()
        };
        if pieces.len() <= 1 {
            return self.core.remap(mm, from, to, len);
        }
        // A mapping that grew in place is several adjacent regions (the LD_PRELOAD shim
        // adopts the growth as one): each moves by the same distance.
        for (start, piece_end) in pieces {
            self.core.remap(mm, start, to + (start - from), piece_end - start)?;
        }
        Ok(())
    }

    /// Makes the swap device forget every thread's cluster hint, so the next allocation
    /// scans its clusters from the start and reuses the first free slot: tests and the
    /// simulator use it to make a freed slot come back (the ABA races).
    #[doc(hidden)]
    pub fn forget_cluster_hints(&self) {
        self.core.storage.device.forget_cluster_hints();
    }

    /// Refaults of pages that had been active before they were evicted, so far (the
    /// `workingset_restore_anon` counter): a fault handler reads it around a fault to tell
    /// thrashing from a first refault ([`crate::workingset`]).
    ///
    /// Context: one relaxed load; any thread.
    pub fn thrash_refaults(&self) -> u64 {
        self.core.stats.counters.workingset_restore_anon.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A snapshot of every counter and gauge.
    ///
    /// Context: takes the pool's class locks in turn (its compressed bytes); for reports,
    /// not for a loop that polls.
    pub fn stats(&self) -> StatsSnapshot {
        self.core.stats_snapshot()
    }

    /// The swap device backend's own counters by name (the crypt layer's, a far tier's),
    /// handed to `out` one by one ([`Backend::counters`]).
    ///
    /// Context: reads atomics; any thread.
    pub fn backend_counters(&self, out: &mut dyn FnMut(&'static str, u64)) {
        self.core.storage.device.backend().counters(out);
    }

    /// The counters and the gauges that take no lock, for a caller that polls (`uswap
    /// run`'s members report every 50 ms); [`Engine::stats`] takes the regions' and the
    /// pool's locks in turn.
    ///
    /// Context: lock-free; any thread.
    pub fn polled(&self) -> Polled {
        let core = &self.core;
        Polled {
            counters: core.stats.snapshot(Gauges::default()).counters,
            resident_pages: core.budget.resident_bytes() / PAGE_SIZE as u64,
            swap_inuse_pages: core.storage.device.inuse_pages(),
            pool_bytes: core.storage.pool_bytes(),
            pool_stored_pages: core.storage.zswap.as_ref().map_or(0, |z| z.stored_pages()),
        }
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

    /// Runs `f` while the background reclaimer is between passes (it holds no page taken
    /// from the program): for checks of the page source's own state in tests. Direct
    /// reclaim on a fault path is not paused.
    pub fn with_reclaim_paused<R>(&self, f: impl FnOnce() -> R) -> R {
        let _quiet = self.core.kswapd_running.lock();
        f()
    }

    /// The swap device (a forked child gives it a backend of its own).
    pub fn swap_device(&self) -> &Arc<SwapDevice> {
        &self.core.storage.device
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.core.shutdown.store(true, Ordering::Release);
        self.core.kswapd_bell.ring();
        let handle = self.kswapd.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(handle) = handle {
            // A panicking reclaimer already reported itself; nothing more to do here.
            let _ = handle.join();
        }
    }
}

impl Core {
    /// The region of address space `mm` containing `addr`.
    ///
    /// # Errors
    /// [`Error::OutsideRegions`], [`Error::NoSuchMm`].
    pub(crate) fn region_of(&self, mm: MmId, addr: u64) -> Result<Arc<Region>, Error> {
        let regions = self.regions.read();
        let space = regions.mms.get(&mm).ok_or(Error::NoSuchMm { mm: mm.0 })?;
        space.find(addr).cloned().ok_or(Error::OutsideRegions { addr })
    }

    /// The region a fault at `addr` of `mm` is served in: none in a hole (a part the program
    /// unmapped). The program may map there again; until that mapping is adopted
    /// ([`Engine::add_region`] fills the hole) a fault on it is not the engine's, as on any
    /// mapping not yet adopted: served then, its page would be the engine's, in a range
    /// the shim unregisters again if the adoption fails.
    pub(crate) fn fault_region(&self, mm: MmId, addr: u64) -> Result<Arc<Region>, Error> {
        let region = self.region_of(mm, addr)?;
        if region.overlaps_hole(region.index_of(addr), 1) {
            return Err(Error::OutsideRegions { addr });
        }
        Ok(region)
    }

    /// Adds a region to address space `mm`.
    pub(crate) fn add_region(&self, mm: MmId, start: u64, len: u64) -> Result<RegionId, Error> {
        let mut regions = self.regions.write();
        let id = RegionId(regions.next_region);
        let space = regions.mms.get(&mm).ok_or(Error::NoSuchMm { mm: mm.0 })?;
        let region =
            Arc::new(Region::new(id, mm, space.source.clone(), space.managed, start, len)?);
        let end = region.end();
        let overlapping = space.intersecting(start, end);
        if let [old] = overlapping.as_slice() {
            // Mapped again where the program unmapped part of a region that lives on (its
            // holes): the region takes the range back, which the shim's scan would
            // otherwise have left unmanaged for as long as the region lives.
            if start >= old.start() && end <= old.end() {
                let (first, last) = (old.index_of(start), old.index_of(end - 1) + 1);
                if old.holes_cover(first, last) {
                    old.fill_hole(first, last);
                    return Ok(old.id());
                }
            }
        }
        if !overlapping.is_empty() {
            return Err(Error::BadRegion { start, len, why: "overlaps a managed region" });
        }
        regions.next_region += 1;
        let space = regions.mms.get_mut(&mm).expect("checked above");
        space.by_start.insert(start, region.clone());
        regions.by_id.insert(id, region);
        Ok(id)
    }

    /// A new address space (a forked child's).
    pub(crate) fn add_mm(&self, source: Arc<dyn PageSource>, managed: bool) -> MmId {
        let mut regions = self.regions.write();
        let mm = MmId(regions.next_mm);
        regions.next_mm += 1;
        regions.mms.insert(mm, Mm { source, managed, by_start: BTreeMap::new() });
        mm
    }

    /// Makes the pages of `runs` in `region` that have no page-table entry order-0 entries:
    /// resident folios, charged (see [`Engine::add_region_populated`]), or zero-page
    /// entries if `zero_mapped` (see [`Engine::adopt_zero_mapped`]). Returns pages adopted.
    pub(crate) fn adopt_runs(
        &self,
        region: &Region,
        runs: &[(u64, u64)],
        zero_mapped: bool,
    ) -> u64 {
        let mut adopted = 0;
        {
            let mut pt = region.lock();
            for index in runs.iter().flat_map(|&(first, n)| first..first + n) {
                if pt.lookup(index).is_none() {
                    self.set_mapped(&mut pt, region, index, 0, zero_mapped, false);
                    adopted += 1;
                }
            }
        }
        if !zero_mapped {
            self.wake_kswapd_if_short();
        }
        adopted
    }

    /// The region with id `id`, if still managed.
    pub(crate) fn region_by_id(&self, id: RegionId) -> Option<Arc<Region>> {
        self.regions.read().by_id.get(&id).cloned()
    }

    /// Bytes the compressed pool charges to the budget: all it holds, or, when it is a pool
    /// of its own beside the budget (`ZswapSettings::separate_bytes`), its metadata alone
    /// (index, entries, LRU: the engine's bookkeeping, charged like the rest of it); its
    /// pages of compressed data are then [`Engine::beside_bytes`].
    pub(crate) fn pool_charge(&self) -> u64 {
        let total = self.storage.pool_bytes();
        if self.pool_is_beside() {
            // Two lock-free reads: a store between them must not underflow.
            total.saturating_sub(self.storage.pool_data_bytes())
        } else {
            total
        }
    }

    /// What the budget charges now ([`Engine::charged_bytes`]). Lock-free.
    pub(crate) fn charged_bytes(&self) -> u64 {
        self.budget.used(self.pool_charge())
    }

    /// XArray node memory of every region's page table (each region's lock taken in turn).
    fn pagetable_bytes(&self) -> u64 {
        let regions: Vec<Arc<Region>> = self.regions.read().by_id.values().cloned().collect();
        regions.iter().map(|region| region.lock().memory_bytes() as u64).sum()
    }

    /// Starts the background reclaimer if the configuration asks for one.
    fn spawn_reclaimer(self: &Arc<Core>) -> Result<Option<std::thread::JoinHandle<()>>, Error> {
        if !self.config.background_reclaim {
            return Ok(None);
        }
        let core = self.clone();
        let handle = std::thread::Builder::new()
            .name("uswap-kswapd".into())
            .spawn(move || {
                let tid = rustix::thread::gettid().as_raw_nonzero().get();
                core.kswapd_tid.store(tid, std::sync::atomic::Ordering::Release);
                core.place_reclaimer();
                core.kswapd();
            })
            .map_err(|e| Error::Config(format!("cannot start the reclaimer thread: {e}")))?;
        Ok(Some(handle))
    }

    /// Is the pool one of its own beside the budget?
    pub(crate) fn pool_is_beside(&self) -> bool {
        self.config.zswap.as_ref().is_some_and(|settings| settings.separate_bytes.is_some())
    }

    pub(crate) fn stats_snapshot(&self) -> StatsSnapshot {
        let counts = self.lru.counts();
        let pool_bytes = self.storage.pool_bytes();
        let gauges = Gauges {
            resident_pages: self.budget.resident_bytes() / PAGE_SIZE as u64,
            swapcache_bytes: self.budget.swapcache_bytes(),
            nr_swapcached: self.nr_swapcached.load(Ordering::Relaxed),
            swapcache_node_bytes: self.swap_cache.memory_bytes() as u64,
            pagetable_node_bytes: self.pagetable_bytes(),
            lru_bytes: self.lru.memory_bytes() as u64,
            pool_bytes,
            pool_stored_pages: self.storage.zswap.as_ref().map_or(0, |z| z.stored_pages()),
            swap_inuse_pages: self.storage.device.inuse_pages(),
            zeromap_pages: self.storage.zeromap.count(),
            zero_mapped_pages: self.zero_mapped_pages.load(Ordering::Relaxed),
            staged_pages: self.staged.count(),
            budget_bytes: self.budget.budget_bytes(),
            used_bytes: self.charged_bytes(),
            used_bytes_peak: self.budget.peak_bytes(),
            outside_bytes: self.budget.outside_bytes(),
            reserve_bytes: self.budget.reserve_bytes(),
            nr_active_anon: counts.active_pages,
            nr_inactive_anon: counts.inactive_pages,
        };
        let mut snapshot = self.stats.snapshot(gauges);
        snapshot.pool = self.storage.zswap.as_ref().map(|z| z.stats());
        snapshot
    }
}
