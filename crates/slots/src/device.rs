//! The swap device: slots in clusters, swap counts, the free path and discard (the
//! kernel's `swap_info_struct` and the entry-management half of mm/swapfile.c, with 7.0
//! swap-table semantics for the cache pin).
//!
//! Conventions: as in cluster.rs (`si`, `ci`, `idx`, `offset`, `ci_off`).
//!
//! # Slot lifecycle (the contract with the engine and zswap)
//!
//! ```text
//!            alloc(order)                     dup               put (count > 0)
//!   free ───────────────> cache-only ──────────────> count 1+ <──────────────┐
//!    ^                  (HAS_CACHE, 0)  <── put ───  (+ HAS_CACHE)   dup ────┘
//!    │                     │      ^                      │ put_cache
//!    │        put_cache    │      │ try_pin_cache        v
//!    └─────────────────────┘      └──────────────── count 1+ (no cache)
//!    └──────────────────── put (last reference, no cache) ─┘
//! ```
//!
//! A slot is free exactly when its count is 0 and it is not cache-pinned. The moment a
//! slot becomes free, still under the cluster lock, the device calls
//! [`SlotFreeHook::slots_freed`], so the engine can drop the zswap entry, the zero-map bit
//! and the shadow *before* the slot can be allocated again (every allocation takes the
//! cluster lock).
//!
//! # Lock order
//!
//! 1. a cluster lock (`cluster_info[idx]`; one at a time, except `check_invariants`,
//!    which takes them all in index order);
//! 2. the list lock (`lists`; `si->lock` in 6.18 protects only the lists);
//! 3. whatever [`SlotFreeHook::slots_freed`] takes (it runs under a cluster lock and must
//!    never call back into the device).
//!
//! [`SlotFreeHook::try_reclaim_cache`] runs with no device lock held. The per-thread
//! cluster hints are atomics (no lock). Isolation holds the list lock and only
//! `try_lock`s clusters, so it never waits against this order. Nothing allocates under a
//! lock: extend tables are allocated after dropping the cluster lock, and dropped after
//! releasing it.

use crate::alloc::PerCpuClusters;
use crate::cluster::{
    cluster_index, cluster_is_discard, cluster_is_free, cluster_is_full, cluster_offset,
    transition_is_legal, Cluster, ClusterFlag, ClusterLists, ExtendTable, ListId, NeedTable,
    SWAP_MAP_BAD,
};
use crate::stats::SwapDeviceStats;
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};
use crate::{Error, SwapEntry, SwapType, SWAPFILE_CLUSTER};
use backend::Backend;
use std::sync::Arc;

/// A locked cluster.
pub(crate) type Ci<'a> = MutexGuard<'a, Cluster>;

/// Largest device: offsets must fit the u32 cluster hints (8 TiB of 4 KiB slots).
pub const MAX_SLOTS: u64 = 1 << 31;

/// What the device tells the layer above about its slots.
///
/// Lock order: `slots_freed` runs with a cluster lock held (cluster lock -> whatever the
/// hook takes) and must never call back into the device. `try_reclaim_cache` runs with no
/// device lock held and may call [`SwapDevice::put_cache`].
pub trait SlotFreeHook: Send + Sync {
    /// Slots `first .. first + nr` just became free (count 0, no cache pin). Called before
    /// they can be allocated again: drop the zswap entry, zero-map bits, shadows.
    fn slots_freed(&self, first: SwapEntry, nr: u32);

    /// The allocator wants cache-only slots `first .. first + nr` back (the device is more
    /// than half full). Remove the cached folio if it is idle and call `put_cache` for its
    /// slots; return whether anything was reclaimed. The allocator re-checks the cluster
    /// afterwards. The default reclaims nothing.
    fn try_reclaim_cache(&self, first: SwapEntry, nr: u32) -> bool {
        let _ = (first, nr);
        false
    }
}

/// The allocation policy of a device, so the two can be compared side by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AllocPolicy {
    /// Linux 6.18: prefer nonfull clusters over free ones, scan only one frag cluster.
    #[default]
    Current,
    /// Linux 6.12 .. 6.17: free clusters first, then every nonfull and frag cluster.
    Legacy,
}

/// How a device is set up.
#[derive(Clone, Copy, Debug, Default)]
pub struct SwapDeviceOptions {
    /// The allocation policy.
    pub policy: AllocPolicy,
    /// Discard each cluster when it becomes free (`SWP_PAGE_DISCARD`): a file punches a
    /// hole so the disk space comes back; allocation then prefers free clusters.
    pub discard: bool,
}

/// One swap device.
///
/// Lock order and the per-field locks: see the module documentation.
pub struct SwapDevice {
    pub(crate) ty: SwapType,
    /// Slots including the header (`si->max`); immutable.
    pub(crate) max: u64,
    /// Usable slots: `max - 1` (`si->pages`); immutable.
    pub(crate) pages: u64,
    pub(crate) nr_clusters: u32,
    pub(crate) options: SwapDeviceOptions,
    /// Per-cluster state, each behind its own lock (`si->cluster_info`).
    pub(crate) cluster_info: Box<[Mutex<Cluster>]>,
    /// The cluster lists, behind the list lock (`si->lock`).
    pub(crate) lists: Mutex<ClusterLists>,
    /// Slots in use, bad slots excluded (`si->inuse_pages`); changed under cluster locks.
    pub(crate) inuse_pages: AtomicU64,
    /// Per-thread cluster hints (no lock: atomics, re-validated under the cluster lock).
    pub(crate) percpu: PerCpuClusters,
    /// Where the pages live; replaced only by [`SwapDevice::replace_backend`] (a forked
    /// child's overlay), so read under a lock that is never contended in practice.
    pub(crate) backend: parking_lot::RwLock<Arc<dyn Backend>>,
    pub(crate) hook: Option<Arc<dyn SlotFreeHook>>,
    pub(crate) stats: SwapDeviceStats,
}

// The engine shares one device between all its threads.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SwapDevice>();
};

/// What a slot operation does to each slot.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SlotOp {
    Dup,
    Put,
    PutCache,
}

impl SwapDevice {
    /// A device of type `ty` over `backend` (one slot per backend page; slot 0 is the
    /// header). `hook` hears about freed slots and is asked to reclaim cache-only ones.
    ///
    /// # Errors
    /// [`Error::TooSmall`] below one cluster (512 slots), [`Error::TooLarge`] above
    /// [`MAX_SLOTS`].
    ///
    /// Context: allocates the cluster array (about 540 bytes per cluster).
    pub fn new(
        ty: SwapType,
        backend: Arc<dyn Backend>,
        options: SwapDeviceOptions,
        hook: Option<Arc<dyn SlotFreeHook>>,
    ) -> Result<SwapDevice, Error> {
        let max = backend.nr_pages();
        let min_slots = SWAPFILE_CLUSTER as u64;
        if max < min_slots {
            return Err(Error::TooSmall { nr_slots: max, min_slots });
        }
        if max > MAX_SLOTS {
            return Err(Error::TooLarge { nr_slots: max, max_slots: MAX_SLOTS });
        }
        let nr_clusters = max.div_ceil(SWAPFILE_CLUSTER as u64) as u32;
        let si = SwapDevice {
            ty,
            max,
            pages: max - 1,
            nr_clusters,
            options,
            cluster_info: (0..nr_clusters).map(|_| Mutex::new(Cluster::new())).collect(),
            lists: Mutex::new(ClusterLists::new(nr_clusters)),
            inuse_pages: AtomicU64::new(0),
            percpu: PerCpuClusters::new(),
            backend: parking_lot::RwLock::new(backend),
            hook,
            stats: SwapDeviceStats::default(),
        };
        si.setup_clusters();
        Ok(si)
    }

    /// Marks the header and the tail past `max` bad and sorts every cluster onto its list:
    /// clusters holding bad slots go to `nonfull[0]`, the rest to `free` (`setup_clusters`).
    fn setup_clusters(&self) {
        let end = u64::from(self.nr_clusters) * SWAPFILE_CLUSTER as u64;
        let bad = std::iter::once(0).chain(self.max..end);
        for offset in bad {
            let mut ci = self.lock_cluster(cluster_index(offset));
            ci.map[(offset % SWAPFILE_CLUSTER as u64) as usize] = SWAP_MAP_BAD;
            ci.count += 1;
        }
        for idx in 0..self.nr_clusters {
            let mut ci = self.lock_cluster(idx);
            let list = if cluster_is_free(&ci) { ListId::Free } else { ListId::Nonfull(0) };
            self.cluster_move(idx, &mut ci, list);
        }
    }

    pub(crate) fn lock_cluster(&self, idx: u32) -> Ci<'_> {
        self.cluster_info[idx as usize].lock()
    }

    /// The slot of `entry .. entry + nr` on this device: its cluster and `ci_off`.
    fn locate(&self, entry: SwapEntry, nr: u32) -> Result<(u32, usize), Error> {
        if entry.swap_type() != self.ty {
            return Err(Error::WrongDevice { entry });
        }
        let offset = entry.offset();
        if nr == 0 || offset + u64::from(nr) > self.max {
            return Err(Error::OutOfRange { entry, nr });
        }
        let idx = cluster_index(offset);
        if cluster_index(offset + u64::from(nr) - 1) != idx {
            return Err(Error::CrossesCluster { entry, nr });
        }
        Ok((idx, (offset % SWAPFILE_CLUSTER as u64) as usize))
    }

    fn entry_at(&self, idx: u32, ci_off: usize) -> SwapEntry {
        SwapEntry::new(self.ty, cluster_offset(idx) + ci_off as u64)
    }

    /// Adds one page-table reference to each of `nr` slots (fork calls it again).
    ///
    /// # Errors
    /// [`Error::SlotFree`] / [`Error::BadSlot`] if a slot is not in use,
    /// [`Error::CountOverflow`] past `u32::MAX`, and the range errors of every slot call
    /// ([`Error::WrongDevice`], [`Error::OutOfRange`], [`Error::CrossesCluster`]). On error
    /// no slot was changed.
    ///
    /// Context: takes the cluster lock; may allocate the cluster's extend table (2 KiB,
    /// with the lock dropped) the first time a count passes 62.
    pub fn dup(&self, entry: SwapEntry, nr: u32) -> Result<(), Error> {
        self.update_slots(entry, nr, SlotOp::Dup)
    }

    /// Drops one page-table reference from each of `nr` slots; slots left with count 0
    /// and no cache pin become free (the free hook runs).
    ///
    /// # Errors
    /// [`Error::CountUnderflow`] if a slot's count is 0, [`Error::SlotFree`],
    /// [`Error::BadSlot`], range errors: then no slot was changed. [`Error::Backend`] if
    /// freeing a whole cluster triggered a discard that failed: the put itself completed.
    ///
    /// Context: takes the cluster lock, then the list lock; may block on a discard.
    pub fn put(&self, entry: SwapEntry, nr: u32) -> Result<(), Error> {
        self.update_slots(entry, nr, SlotOp::Put)
    }

    /// Drops the swap-cache pin of `nr` slots (the folio left the swap cache); slots with
    /// count 0 become free (the free hook runs).
    ///
    /// # Errors
    /// [`Error::NotCached`] if a slot is not pinned, and as [`SwapDevice::put`].
    ///
    /// Context: as [`SwapDevice::put`].
    pub fn put_cache(&self, entry: SwapEntry, nr: u32) -> Result<(), Error> {
        self.update_slots(entry, nr, SlotOp::PutCache)
    }

    /// Pins an in-use slot for the swap cache (zswap writeback's "pin the slot").
    ///
    /// # Errors
    /// As [`SwapDevice::try_pin_cache_range`].
    ///
    /// Context: takes the cluster lock.
    pub fn try_pin_cache(&self, entry: SwapEntry) -> Result<(), Error> {
        self.try_pin_cache_range(entry, 1)
    }

    /// Pins `nr` in-use slots for the swap cache, all or none: the swap cache calls this
    /// under its own lock when it inserts a folio for slots page tables refer to, so that
    /// "a folio is in the swap cache" and "the slots are cache-pinned" change together.
    ///
    /// # Errors
    /// [`Error::CacheBusy`] if any slot is pinned already (another folio owns it, or it was
    /// just allocated; `-EEXIST`), [`Error::SlotFree`] if any slot has count 0 and no pin
    /// (`-ENOENT`: a slot no page table refers to cannot be swapped in), [`Error::BadSlot`],
    /// range errors. On error no
    /// slot was changed.
    ///
    /// Context: takes the cluster lock.
    pub fn try_pin_cache_range(&self, entry: SwapEntry, nr: u32) -> Result<(), Error> {
        let (idx, ci_off) = self.locate(entry, nr).inspect_err(|_| self.reject())?;
        let mut ci = self.lock_cluster(idx);
        let mut refused = None;
        for off in ci_off..ci_off + nr as usize {
            let slot = self.entry_at(idx, off);
            refused = if ci.slot_is_bad(off) {
                Some(Error::BadSlot { entry: slot })
            } else if ci.slot_has_cache(off) {
                SwapDeviceStats::inc(&self.stats.live.pin_busy);
                Some(Error::CacheBusy { entry: slot })
            } else if ci.slot_count(off) == 0 {
                SwapDeviceStats::inc(&self.stats.live.pin_free);
                Some(Error::SlotFree { entry: slot })
            } else {
                None
            };
            if refused.is_some() {
                break;
            }
        }
        if let Some(e) = refused {
            self.reject();
            return Err(e);
        }
        for off in ci_off..ci_off + nr as usize {
            ci.set_slot_cache(off, true);
        }
        Ok(())
    }

    fn reject(&self) {
        SwapDeviceStats::inc(&self.stats.live.rejects);
    }

    /// The common body of `dup`, `put` and `put_cache`: check every slot, then change them
    /// all, then free what became free. Context: takes and may drop the cluster lock once
    /// to allocate an extend table.
    fn update_slots(&self, entry: SwapEntry, nr: u32, op: SlotOp) -> Result<(), Error> {
        let (idx, ci_off) = self.locate(entry, nr).inspect_err(|_| self.reject())?;
        let range = ci_off..ci_off + nr as usize;
        let mut spare: Option<Box<ExtendTable>> = None;
        let mut ci = self.lock_cluster(idx);
        loop {
            match self.check_slots(&ci, idx, range.clone(), op) {
                Err(e) => {
                    self.reject();
                    return Err(e);
                }
                Ok(NeedTable::No) => break,
                Ok(NeedTable::Yes) => {
                    // Never allocate under the cluster lock: drop it, allocate, retake it
                    // and re-check everything (the slots may have changed meanwhile).
                    drop(ci);
                    let table = spare.take().unwrap_or_else(|| Box::new([0; SWAPFILE_CLUSTER]));
                    ci = self.lock_cluster(idx);
                    if ci.extend.is_none() {
                        ci.extend = Some(table);
                        SwapDeviceStats::inc(&self.stats.live.extend_tables);
                    } else {
                        spare = Some(table);
                    }
                }
            }
        }
        let freed_any = self.apply_slots(&mut ci, idx, range, op);
        let (discard_pending, dead_table) = match freed_any {
            true => self.cluster_slots_freed(idx, &mut ci),
            false => (false, None),
        };
        drop(ci);
        drop((spare, dead_table)); // freed after the lock is released
        if discard_pending {
            self.swap_do_scheduled_discard()?;
        }
        Ok(())
    }

    /// Checks that `op` may apply to every slot of `range`. Context: `ci` locked.
    fn check_slots(
        &self,
        ci: &Cluster,
        idx: u32,
        range: std::ops::Range<usize>,
        op: SlotOp,
    ) -> Result<NeedTable, Error> {
        let mut need = NeedTable::No;
        for ci_off in range {
            let entry = self.entry_at(idx, ci_off);
            if ci.slot_is_bad(ci_off) {
                return Err(Error::BadSlot { entry });
            }
            if ci.slot_is_free(ci_off) {
                return Err(Error::SlotFree { entry });
            }
            let count = ci.slot_count(ci_off);
            match op {
                SlotOp::Dup if count == u32::MAX => return Err(Error::CountOverflow { entry }),
                SlotOp::Dup if ci.needs_table(count + 1) == NeedTable::Yes => need = NeedTable::Yes,
                SlotOp::Put if count == 0 => return Err(Error::CountUnderflow { entry }),
                SlotOp::PutCache if !ci.slot_has_cache(ci_off) => {
                    return Err(Error::NotCached { entry })
                }
                _ => {}
            }
        }
        Ok(need)
    }

    /// Applies `op` to every slot of `range` (already checked) and frees, run by run, the
    /// slots left with nothing. Returns whether any slot was freed. Context: `ci` locked.
    fn apply_slots(
        &self,
        ci: &mut Cluster,
        idx: u32,
        range: std::ops::Range<usize>,
        op: SlotOp,
    ) -> bool {
        let mut run_start = None;
        let mut freed_any = false;
        let end = range.end;
        for ci_off in range {
            match op {
                SlotOp::Dup => ci.set_slot_count(ci_off, ci.slot_count(ci_off) + 1),
                SlotOp::Put => ci.set_slot_count(ci_off, ci.slot_count(ci_off) - 1),
                SlotOp::PutCache => ci.set_slot_cache(ci_off, false),
            }
            if ci.slot_is_free(ci_off) {
                run_start.get_or_insert(ci_off);
            } else if let Some(start) = run_start.take() {
                self.swap_range_free(ci, idx, start, ci_off - start);
                freed_any = true;
            }
        }
        if let Some(start) = run_start {
            self.swap_range_free(ci, idx, start, end - start);
            freed_any = true;
        }
        freed_any
    }

    /// Slots `ci_off .. ci_off + nr` became free: tell the hook (under the cluster lock,
    /// before anyone can allocate them), then account them (`swap_range_free`).
    fn swap_range_free(&self, ci: &mut Cluster, idx: u32, ci_off: usize, nr: usize) {
        debug_assert!(ci.map[ci_off..ci_off + nr].iter().all(|&b| b == 0));
        if let Some(hook) = &self.hook {
            hook.slots_freed(self.entry_at(idx, ci_off), nr as u32);
        }
        ci.count -= nr as u16;
        self.inuse_pages.fetch_sub(nr as u64, Ordering::Relaxed);
    }

    /// After freeing slots: the cluster goes to free / discard (count 0) or nonfull.
    /// Returns whether a discard is now pending, and the extend table to drop after
    /// unlocking. Context: `ci` locked; takes the list lock.
    fn cluster_slots_freed(&self, idx: u32, ci: &mut Ci<'_>) -> (bool, Option<Box<ExtendTable>>) {
        if !cluster_is_free(ci) {
            self.partial_free_cluster(idx, ci);
            return (false, None);
        }
        debug_assert_eq!(ci.nr_extended, 0);
        let table = ci.extend.take();
        (self.free_cluster(idx, ci), table)
    }

    /// `cluster_move`: puts cluster `idx` at the tail of `list` and sets the matching flag.
    ///
    /// # Panics
    /// On a transition outside the lifecycle table, or if the flag does not match the
    /// list the cluster is on (the flag <-> list invariant).
    ///
    /// Context: `ci` locked; takes the list lock.
    pub(crate) fn cluster_move(&self, idx: u32, ci: &mut Cluster, list: ListId) {
        let to = list.flag();
        assert!(transition_is_legal(ci.flags, to), "cluster {idx}: {:?} -> {to:?}", ci.flags);
        let mut lists = self.lists.lock();
        let on = lists.list_of(idx);
        assert_eq!(on.map(ListId::flag), on_list_flag(ci.flags), "cluster {idx} flag/list");
        if on.is_some() {
            lists.del(idx);
        }
        lists.add_tail(idx, list);
        ci.flags = to;
    }

    /// `free_cluster`: count reached 0. Returns whether the cluster now waits for discard.
    /// Context: `ci` locked; takes the list lock.
    pub(crate) fn free_cluster(&self, idx: u32, ci: &mut Cluster) -> bool {
        assert!(cluster_is_free(ci), "free_cluster of a used cluster {idx}");
        assert_ne!(ci.flags, ClusterFlag::Free, "cluster {idx} freed twice");
        ci.order = 0;
        if self.options.discard {
            self.cluster_move(idx, ci, ListId::Discard);
            return true;
        }
        self.cluster_move(idx, ci, ListId::Free);
        false
    }

    /// `partial_free_cluster`: slots were freed and some remain: back to
    /// `nonfull[order]`. Context: `ci` locked; takes the list lock.
    pub(crate) fn partial_free_cluster(&self, idx: u32, ci: &mut Cluster) {
        assert!(!cluster_is_free(ci) && !cluster_is_full(ci), "partial free of cluster {idx}");
        if ci.flags != ClusterFlag::Nonfull {
            self.cluster_move(idx, ci, ListId::Nonfull(ci.order));
        }
    }

    /// `relocate_cluster`: after an allocation pass, by count: free, frag or full.
    /// Context: `ci` locked; takes the list lock.
    pub(crate) fn relocate_cluster(&self, idx: u32, ci: &mut Cluster) {
        if cluster_is_discard(ci) {
            return; // a discard cluster stays on (or off) the discard list
        }
        if cluster_is_free(ci) {
            if ci.flags != ClusterFlag::Free {
                self.free_cluster(idx, ci);
            }
        } else if !cluster_is_full(ci) {
            if ci.flags != ClusterFlag::Frag {
                self.cluster_move(idx, ci, ListId::Frag(ci.order));
            }
        } else if ci.flags != ClusterFlag::Full {
            self.cluster_move(idx, ci, ListId::Full);
        }
    }

    /// `isolate_lock_cluster`: takes the first cluster of `list` whose lock is free off
    /// the list, sets its flag to `to` (`None`, or `Discarding` for the discard list) and
    /// returns it locked. May return `None` for a non-empty list whose clusters are all
    /// locked by others.
    ///
    /// Context: takes the list lock, `try_lock`s clusters under it.
    pub(crate) fn isolate_lock_cluster(
        &self,
        list: ListId,
        to: ClusterFlag,
    ) -> Option<(u32, Ci<'_>)> {
        let mut lists = self.lists.lock();
        let mut found = None;
        for idx in lists.iter(list) {
            if let Some(ci) = self.cluster_info[idx as usize].try_lock() {
                found = Some((idx, ci));
                break;
            }
            SwapDeviceStats::inc(&self.stats.live.isolate_contended);
        }
        let (idx, mut ci) = found?;
        assert_eq!(ci.flags, list.flag(), "cluster {idx} on {list:?} with a wrong flag");
        assert!(transition_is_legal(ci.flags, to), "cluster {idx}: isolate to {to:?}");
        lists.del(idx);
        ci.flags = to;
        Some((idx, ci))
    }

    /// Punches the hole of every cluster waiting on the discard list, then frees it
    /// (`swap_do_scheduled_discard`). Returns whether any cluster was discarded.
    ///
    /// # Errors
    /// [`Error::Backend`] with the first discard that failed; the clusters are freed and
    /// reused anyway (their stale data is never read: a slot is written before it is
    /// read), and every failure is counted in `discard_errors`.
    ///
    /// Context: takes the list lock and cluster locks, never during the backend call; may
    /// block (file-system I/O).
    pub fn swap_do_scheduled_discard(&self) -> Result<bool, Error> {
        let mut discarded = false;
        let mut first_error = None;
        for _ in 0..self.nr_clusters {
            let Some((idx, ci)) =
                self.isolate_lock_cluster(ListId::Discard, ClusterFlag::Discarding)
            else {
                break;
            };
            drop(ci);
            let result = self.backend().discard(cluster_offset(idx), SWAPFILE_CLUSTER as u64);
            let mut ci = self.lock_cluster(idx);
            assert_eq!((ci.flags, ci.count), (ClusterFlag::Discarding, 0), "cluster {idx}");
            self.cluster_move(idx, &mut ci, ListId::Free);
            drop(ci);
            discarded = true;
            match result {
                Ok(()) => SwapDeviceStats::inc(&self.stats.live.discard_clusters),
                Err(e) => {
                    SwapDeviceStats::inc(&self.stats.live.discard_errors);
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(Error::Backend(e)),
            None => Ok(discarded),
        }
    }

    /// The swap count of a slot (0 if free or cache-only).
    ///
    /// # Errors
    /// Range errors. Context: takes the cluster lock.
    pub fn count(&self, entry: SwapEntry) -> Result<u32, Error> {
        let (idx, ci_off) = self.locate(entry, 1)?;
        Ok(self.lock_cluster(idx).slot_count(ci_off))
    }

    /// Is the slot pinned by the swap cache?
    ///
    /// # Errors
    /// Range errors. Context: takes the cluster lock.
    pub fn is_cache_pinned(&self, entry: SwapEntry) -> Result<bool, Error> {
        let (idx, ci_off) = self.locate(entry, 1)?;
        Ok(self.lock_cluster(idx).slot_has_cache(ci_off))
    }

    /// Slots in use (`inuse_pages`, as `/proc/swaps` "Used").
    pub fn inuse_pages(&self) -> u64 {
        self.inuse_pages.load(Ordering::Relaxed)
    }

    /// Usable slots (`si->pages`: all but the header).
    pub fn total_slots(&self) -> u64 {
        self.pages
    }

    /// More than half of the slots in use (the kernel's `vm_swap_full()`).
    pub fn is_half_full(&self) -> bool {
        self.inuse_pages() * 2 > self.pages
    }

    /// The device's type number.
    pub fn swap_type(&self) -> SwapType {
        self.ty
    }

    /// Where the pages live.
    ///
    /// Context: takes the backend's read lock for a reference count.
    pub fn backend(&self) -> Arc<dyn Backend> {
        self.backend.read().clone()
    }

    /// Puts `backend` where the pages live from now on: a forked child's overlay over the
    /// backend it inherited (backend's `OverlayBackend`). I/O already under way finishes
    /// on the backend it started on.
    ///
    /// # Errors
    /// [`Error::Backend`] (out of range) when `backend` holds another number of slots.
    pub fn replace_backend(&self, backend: Arc<dyn Backend>) -> Result<(), Error> {
        if backend.nr_pages() != self.max {
            let nr_pages = self.max;
            let error = backend::Error::OutOfRange { offset: 0, nr: backend.nr_pages(), nr_pages };
            return Err(Error::Backend(error));
        }
        *self.backend.write() = backend;
        Ok(())
    }

    /// The counters.
    pub fn stats(&self) -> &SwapDeviceStats {
        &self.stats
    }

    /// The options the device was made with.
    pub fn options(&self) -> SwapDeviceOptions {
        self.options
    }

    /// Number of clusters (the last one may be partial).
    pub fn nr_clusters(&self) -> u32 {
        self.nr_clusters
    }
}

/// The list flag a cluster with flag `flag` is on, if it is on a list at all.
pub(crate) fn on_list_flag(flag: ClusterFlag) -> Option<ClusterFlag> {
    match flag {
        ClusterFlag::None | ClusterFlag::Discarding => None,
        f => Some(f),
    }
}
