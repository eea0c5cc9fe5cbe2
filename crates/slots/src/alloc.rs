//! The cluster allocator: 2^order contiguous, aligned slots, in Linux 6.18's order
//! (`cluster_alloc_swap_entry`, mm/swapfile.c), or in the legacy order for comparison.
//!
//! Conventions: as in cluster.rs (`si`, `ci`, `idx`, `offset`, `ci_off`).
//!
//! # Where an allocation looks, in order
//!
//! | step | [`AllocPolicy::Current`] (6.18) | [`AllocPolicy::Legacy`] (6.12 .. 6.17) |
//! |---|---|---|
//! | 1 | the thread's hint for this order | the thread's hint for this order |
//! | 2 | discard device: one free cluster | one free cluster |
//! | 3 | every `nonfull[order]` cluster | device half full: reclaim one full cluster |
//! | 4 | no discard: one free cluster | every `nonfull[order]` cluster |
//! | 5 | device half full: reclaim one full cluster | every `frag[order]` cluster |
//! | 6 | **one** `frag[order]` cluster | |
//! | 7 | pending discards: run them, back to 2 | pending discards: run them, back to 2 |
//! | 8 | order > 0: fail (caller splits, `swpout_fallback`) | same |
//! | 9 | order 0: steal from `frag[o]`, `nonfull[o]`, o = 1..=9 | same |
//!
//! Steps 3 to 6 skip order 9 (`PMD_ORDER`): a 2 MiB folio needs a wholly free cluster.
//! Why 6.18 changed (T3, "prefer nonfull over free", "scan only one fragment cluster"):
//! taking a free cluster while nonfull ones of the same order exist burns free clusters,
//! which large orders need; and scanning the whole frag list mostly fails for large orders
//! while holding the list lock. Scanning one frag cluster still rotates the list, so
//! cache-only slots stranded there get reclaimed.
//!
//! # The per-thread cluster hint (the kernel's per-CPU cluster)
//!
//! User space has no cheap "current CPU", so the hint is a small striped array per device:
//! each thread gets a stripe number once (thread-local counter) and uses stripe
//! `number % NR_STRIPES`. A stripe holds, per order, the next offset to try. Hints are
//! plain atomics with no lock: a stale or shared hint is harmless because the cluster is
//! re-validated under its lock (`cluster_is_usable`) before anything is taken from it.
//! Stripes are cache-line aligned so two threads' hints never share a line.
//!
//! # Cache-only reclaim
//!
//! When the device is more than half full ([`SwapDevice::is_half_full`]), a window whose
//! slots are free or cache-only (pinned by the swap cache with count 0) is a candidate:
//! the allocator drops the cluster lock, asks [`crate::SlotFreeHook::try_reclaim_cache`]
//! for each run of cache-only slots, retakes the lock and re-checks everything (the
//! cluster may have been freed, or taken by another order, meanwhile).

use crate::cluster::{
    cluster_index, cluster_is_free, cluster_is_full, cluster_is_usable, cluster_offset,
    ClusterFlag, ListId, SWAP_HAS_CACHE,
};
use crate::device::{AllocPolicy, Ci, SwapDevice};
use crate::stats::SwapDeviceStats;
use crate::sync::{AtomicU32, Ordering};
use crate::{Error, SwapEntry, MAX_ORDER, SWAPFILE_CLUSTER, SWAP_NR_ORDERS};

/// "No hint": slot 0 is the header and is never allocated (`SWAP_NEXT_INVALID`).
const SWAP_NEXT_INVALID: u32 = 0;

/// Stripes of hints per device: enough that the threads of a 2..16-CPU machine rarely
/// share one (each stripe is 128 bytes: 2 KiB per device).
#[cfg(not(loom))]
const NR_STRIPES: usize = 16;
#[cfg(loom)]
const NR_STRIPES: usize = 1;

/// How many times a failed pass may run pending discards and start again.
const DISCARD_RETRIES: usize = 2;

/// How many times a failed order-0 pass starts again while the device is not full.
///
/// A deviation from 6.18, modelled by the loom test `reclaim_unlock_races_with_free`: the
/// slow path visits the lists one after another, so a cluster freed into `nonfull[0]`
/// after that list was scanned, and taken off `frag[0]` before that one was, is missed
/// and order 0 fails with free slots on the device. The kernel scans with preemption off
/// and retries at the device-list level; here a bounded retry, counted in `alloc_retry`.
const ORDER0_RETRIES: usize = 2;

/// One stripe: the next offset to try, per order.
#[repr(align(128))]
pub(crate) struct Stripe {
    next: [AtomicU32; SWAP_NR_ORDERS],
}

/// The per-thread cluster hints of one device.
pub(crate) struct PerCpuClusters {
    stripes: Box<[Stripe]>,
}

impl PerCpuClusters {
    pub(crate) fn new() -> Self {
        let stripe = || Stripe { next: std::array::from_fn(|_| AtomicU32::new(SWAP_NEXT_INVALID)) };
        PerCpuClusters { stripes: (0..NR_STRIPES).map(|_| stripe()).collect() }
    }

    fn forget(&self) {
        for stripe in &self.stripes {
            for next in &stripe.next {
                next.store(SWAP_NEXT_INVALID, Ordering::Relaxed);
            }
        }
    }

    fn this_thread(&self) -> &Stripe {
        &self.stripes[thread_stripe()]
    }
}

#[cfg(not(loom))]
thread_local! {
    /// The stripe [`as_cpu`] lends this thread, if any.
    static LENT_STRIPE: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

#[cfg(not(loom))]
fn thread_stripe() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    if let Some(lent) = LENT_STRIPE.with(std::cell::Cell::get) {
        return lent;
    }
    STRIPE.with(|s| *s % NR_STRIPES)
}

/// Runs `f` with this thread's allocations using the cluster hints of "CPU" `cpu`
/// (`cpu % 16`, the stripes of the module essay), then restores the thread's own.
///
/// One thread can so play the many CPUs of a machine, deterministically: the benchmarks'
/// fragmentation run and the simulator model the kernel's per-CPU clusters of a
/// 16-CPU machine with it (a single hint, as one thread has, never strands partly used
/// clusters the way many CPUs do, and the two policies differ exactly there).
///
/// Context: sets a thread-local; nests (the inner CPU wins until it returns).
#[cfg(not(loom))]
pub fn as_cpu<R>(cpu: usize, f: impl FnOnce() -> R) -> R {
    let before = LENT_STRIPE.with(|lent| lent.replace(Some(cpu % NR_STRIPES)));
    let result = f();
    LENT_STRIPE.with(|lent| lent.set(before));
    result
}

#[cfg(loom)]
fn thread_stripe() -> usize {
    0 // loom needs every execution to be deterministic
}

/// What a window of slots holds.
enum Scan {
    /// Every slot is free.
    Free,
    /// Free or cache-only slots, and cache-only ones may be reclaimed.
    NeedReclaim,
    /// Something in use.
    Busy,
}

/// Runs of cache-only slots in a cluster, collected under the lock and reclaimed after
/// dropping it. At most one run per two slots, so the array never overflows.
struct Runs {
    runs: [(u16, u16); SWAPFILE_CLUSTER / 2],
    len: usize,
}

impl Runs {
    fn collect(ci: &crate::cluster::Cluster, from: usize, nr: usize) -> Runs {
        let mut runs = Runs { runs: [(0, 0); SWAPFILE_CLUSTER / 2], len: 0 };
        let mut start = None;
        for ci_off in from..=from + nr {
            let cache_only = ci_off < from + nr && ci.slot_is_cache_only(ci_off);
            match (cache_only, start) {
                (true, None) => start = Some(ci_off),
                (false, Some(s)) => {
                    runs.runs[runs.len] = (s as u16, (ci_off - s) as u16);
                    runs.len += 1;
                    start = None;
                }
                _ => {}
            }
        }
        runs
    }

    fn iter(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.runs[..self.len].iter().map(|&(s, n)| (usize::from(s), u32::from(n)))
    }
}

impl SwapDevice {
    /// Allocates 2^`order` contiguous, naturally aligned slots, returned *cache-pinned*
    /// (`SWAP_HAS_CACHE`, count 0): the swap cache owns them until `dup` / `put_cache`.
    ///
    /// # Errors
    /// [`Error::BadOrder`] above `MAX_ORDER`; [`Error::NoSpace`] when no such slots exist
    /// (for order > 0 counted in `swpout_fallback[order]`: the caller splits the folio);
    /// [`Error::Backend`] if running pending discards failed (nothing was allocated; the
    /// discarded clusters are free for the next call).
    ///
    /// Context: takes cluster locks and the list lock, one cluster at a time; calls the
    /// reclaim hook with no lock held when the device is more than half full; may block on
    /// a discard. Never allocates memory.
    pub fn alloc(&self, order: u32) -> Result<SwapEntry, Error> {
        if order > MAX_ORDER {
            self.reject_alloc();
            return Err(Error::BadOrder { order });
        }
        match self.cluster_alloc_swap_entry(order)? {
            Some(offset) => {
                SwapDeviceStats::inc(&self.stats.swpout[order as usize]);
                Ok(SwapEntry::new(self.ty, offset))
            }
            None if order > 0 => {
                SwapDeviceStats::inc(&self.stats.swpout_fallback[order as usize]);
                Err(Error::NoSpace { order })
            }
            None => {
                SwapDeviceStats::inc(&self.stats.live.alloc_fail);
                Err(Error::NoSpace { order })
            }
        }
    }

    fn reject_alloc(&self) {
        SwapDeviceStats::inc(&self.stats.live.rejects);
    }

    /// Asks the reclaim hook for the cache-only slots of up to `inuse / 512` full
    /// clusters (the kernel's `swap_reclaim_work`, for a background thread).
    ///
    /// Context: takes the list lock and cluster locks; calls the hook with none held.
    pub fn reclaim_full_clusters(&self) {
        self.swap_reclaim_full_clusters(true);
    }

    /// Forgets every thread's cluster hint, so the next allocation of each order takes the
    /// slow path (tests and the simulator use it to reach a chosen state).
    pub fn forget_cluster_hints(&self) {
        self.percpu.forget();
    }

    /// `cluster_alloc_swap_entry`: the fast path, then the policy's slow path.
    fn cluster_alloc_swap_entry(&self, order: u32) -> Result<Option<u64>, Error> {
        if let Some(found) = self.swap_alloc_fast(order) {
            SwapDeviceStats::inc(&self.stats.live.alloc_fast);
            return Ok(Some(found));
        }
        for _ in 0..=ORDER0_RETRIES {
            if let found @ Some(_) = self.alloc_slow(order)? {
                return Ok(found);
            }
            if order > 0 {
                return Ok(None);
            }
            if let found @ Some(_) = self.alloc_steal_order0() {
                SwapDeviceStats::inc(&self.stats.live.alloc_steal);
                return Ok(found);
            }
            if self.inuse_pages() >= self.pages {
                break; // really full
            }
            SwapDeviceStats::inc(&self.stats.live.alloc_retry);
        }
        Ok(None)
    }

    /// The policy's slow path, running pending discards and starting again when that
    /// gave clusters back.
    fn alloc_slow(&self, order: u32) -> Result<Option<u64>, Error> {
        for _ in 0..=DISCARD_RETRIES {
            let found = match self.options.policy {
                AllocPolicy::Current => self.alloc_slow_current(order),
                AllocPolicy::Legacy => self.alloc_slow_legacy(order),
            };
            if found.is_some() {
                return Ok(found);
            }
            if !(self.options.discard && self.swap_do_scheduled_discard()?) {
                break;
            }
        }
        Ok(None)
    }

    /// `swap_alloc_fast`: scan on from the thread's hint, if the cluster still serves
    /// this order. Context: takes the hinted cluster's lock.
    fn swap_alloc_fast(&self, order: u32) -> Option<u64> {
        let hint = self.percpu.this_thread().next[order as usize].load(Ordering::Relaxed);
        if hint == SWAP_NEXT_INVALID || u64::from(hint) >= self.max {
            return None;
        }
        let idx = cluster_index(u64::from(hint));
        let ci = self.lock_cluster(idx);
        if !cluster_is_usable(&ci, order) {
            return None;
        }
        let offset = if cluster_is_free(&ci) { cluster_offset(idx) } else { u64::from(hint) };
        self.alloc_swap_scan_cluster(idx, ci, offset, order)
    }

    /// Steps 2..6 of 6.18 (module table). Context: list lock and cluster locks.
    fn alloc_slow_current(&self, order: u32) -> Option<u64> {
        let o = order as u8;
        if self.options.discard {
            if let found @ Some(_) = self.alloc_swap_scan_list(ListId::Free, order, false) {
                return found;
            }
        }
        if order < MAX_ORDER {
            if let found @ Some(_) = self.alloc_swap_scan_list(ListId::Nonfull(o), order, true) {
                return found;
            }
        }
        if !self.options.discard {
            if let found @ Some(_) = self.alloc_swap_scan_list(ListId::Free, order, false) {
                return found;
            }
        }
        if self.is_half_full() {
            self.swap_reclaim_full_clusters(false);
        }
        if order < MAX_ORDER {
            // Scan only one fragment cluster: order 0 surely succeeds there, and a large
            // order failing is not critical (the caller splits).
            return self.alloc_swap_scan_list(ListId::Frag(o), order, false);
        }
        None
    }

    /// Steps 2..5 of the legacy policy (module table). Context: as above.
    fn alloc_slow_legacy(&self, order: u32) -> Option<u64> {
        let o = order as u8;
        if let found @ Some(_) = self.alloc_swap_scan_list(ListId::Free, order, false) {
            return found;
        }
        if self.is_half_full() {
            self.swap_reclaim_full_clusters(false);
        }
        if order >= MAX_ORDER {
            return None;
        }
        // Nonfull clusters that fail move to the frag list: count them, so the frag scan
        // below does not scan them twice.
        let mut frags = 0;
        for _ in 0..self.nr_clusters {
            let Some((idx, ci)) = self.isolate_lock_cluster(ListId::Nonfull(o), ClusterFlag::None)
            else {
                break;
            };
            SwapDeviceStats::inc(&self.stats.live.cluster_scans);
            if let found @ Some(_) =
                self.alloc_swap_scan_cluster(idx, ci, cluster_offset(idx), order)
            {
                return found;
            }
            frags += 1;
        }
        let frags_existing = self.lists.lock().len(ListId::Frag(o));
        while frags < frags_existing {
            let (idx, ci) = self.isolate_lock_cluster(ListId::Frag(o), ClusterFlag::None)?;
            SwapDeviceStats::inc(&self.stats.live.cluster_scans);
            if let found @ Some(_) =
                self.alloc_swap_scan_cluster(idx, ci, cluster_offset(idx), order)
            {
                return found;
            }
            frags += 1;
        }
        None
    }

    /// Step 9: order 0 takes a slot from clusters serving other orders. Every such
    /// cluster has a free slot, but reclaim may race, so scan whole lists.
    fn alloc_steal_order0(&self) -> Option<u64> {
        for o in 1..SWAP_NR_ORDERS as u8 {
            for list in [ListId::Frag(o), ListId::Nonfull(o)] {
                if let found @ Some(_) = self.alloc_swap_scan_list(list, 0, true) {
                    return found;
                }
            }
        }
        None
    }

    /// `alloc_swap_scan_list`: isolates the first cluster of `list` (or every one, with
    /// `scan_all`) and scans it. Bounded by the number of clusters, since failed clusters
    /// may come back to the same list.
    fn alloc_swap_scan_list(&self, list: ListId, order: u32, scan_all: bool) -> Option<u64> {
        for _ in 0..self.nr_clusters {
            let (idx, ci) = self.isolate_lock_cluster(list, ClusterFlag::None)?;
            SwapDeviceStats::inc(&self.stats.live.cluster_scans);
            if let found @ Some(_) =
                self.alloc_swap_scan_cluster(idx, ci, cluster_offset(idx), order)
            {
                return found;
            }
            if !scan_all {
                break;
            }
        }
        None
    }

    /// `alloc_swap_scan_cluster`: looks for an aligned window of 2^order free slots from
    /// `offset` to the end of the cluster, takes the first, relocates the cluster by its
    /// new count and stores the thread's next hint for this order.
    ///
    /// Context: `ci` locked on entry (isolated or via the hint); dropped and retaken around
    /// cache-only reclaim; unlocked on return.
    fn alloc_swap_scan_cluster(
        &self,
        idx: u32,
        ci: Ci<'_>,
        offset: u64,
        order: u32,
    ) -> Option<u64> {
        let nr = 1u64 << order;
        let start = cluster_offset(idx);
        let end = (start + SWAPFILE_CLUSTER as u64).min(self.max);
        let mut ci = ci;
        let mut found = None;
        let mut next = SWAP_NEXT_INVALID;
        if end - start >= nr && u64::from(ci.count) + nr <= SWAPFILE_CLUSTER as u64 {
            let mut offset = offset.max(start).next_multiple_of(nr);
            while offset + nr <= end {
                match self.cluster_scan_range(&ci, offset, nr) {
                    Scan::Busy => {
                        offset += nr;
                        continue;
                    }
                    Scan::Free => {}
                    Scan::NeedReclaim => {
                        let reclaimed;
                        (ci, reclaimed) = self.cluster_reclaim_range(idx, ci, offset, nr);
                        // Re-validate after the unlock: freed, or taken by another order?
                        if !cluster_is_usable(&ci, order) {
                            break;
                        }
                        if cluster_is_free(&ci) && offset != start {
                            offset = start;
                            continue;
                        }
                        if !reclaimed {
                            offset += nr;
                            continue;
                        }
                    }
                }
                self.cluster_alloc_range(&mut ci, offset, order);
                found = Some(offset);
                if !cluster_is_full(&ci) && offset + nr < end {
                    next = (offset + nr) as u32;
                }
                break;
            }
        }
        self.relocate_cluster(idx, &mut ci);
        drop(ci);
        self.percpu.this_thread().next[order as usize].store(next, Ordering::Relaxed);
        found
    }

    /// `cluster_scan_range`: what the window `offset .. offset + nr` holds. Cache-only
    /// slots count as reclaimable only when the device is more than half full and a hook
    /// can reclaim them. Context: `ci` locked.
    fn cluster_scan_range(&self, ci: &crate::cluster::Cluster, offset: u64, nr: u64) -> Scan {
        let ci_off = (offset % SWAPFILE_CLUSTER as u64) as usize;
        let mut need_reclaim = false;
        for &byte in &ci.map[ci_off..ci_off + nr as usize] {
            match byte {
                0 => {}
                SWAP_HAS_CACHE if self.hook.is_some() && self.is_half_full() => need_reclaim = true,
                _ => return Scan::Busy,
            }
        }
        if need_reclaim {
            Scan::NeedReclaim
        } else {
            Scan::Free
        }
    }

    /// `cluster_reclaim_range`: drops the cluster lock, asks the hook to reclaim each run
    /// of cache-only slots in the window (stopping at the first refusal), retakes the lock
    /// and reports whether the whole window is free now.
    fn cluster_reclaim_range<'a>(
        &'a self,
        idx: u32,
        ci: Ci<'a>,
        offset: u64,
        nr: u64,
    ) -> (Ci<'a>, bool) {
        let ci_off = (offset % SWAPFILE_CLUSTER as u64) as usize;
        let runs = Runs::collect(&ci, ci_off, nr as usize);
        drop(ci);
        if let Some(hook) = &self.hook {
            for (run_off, run_nr) in runs.iter() {
                SwapDeviceStats::inc(&self.stats.live.reclaim_calls);
                let first = SwapEntry::new(self.ty, cluster_offset(idx) + run_off as u64);
                if !hook.try_reclaim_cache(first, run_nr) {
                    break;
                }
                SwapDeviceStats::inc(&self.stats.live.reclaim_success);
            }
        }
        let ci = self.lock_cluster(idx);
        let free = ci.map[ci_off..ci_off + nr as usize].iter().all(|&b| b == 0);
        (ci, free)
    }

    /// `cluster_alloc_range`: marks the window cache-pinned and accounts it. The first
    /// allocation into an empty cluster sets the cluster's order. Context: `ci` locked.
    fn cluster_alloc_range(&self, ci: &mut crate::cluster::Cluster, offset: u64, order: u32) {
        let nr = 1usize << order;
        let ci_off = (offset % SWAPFILE_CLUSTER as u64) as usize;
        if cluster_is_free(ci) {
            ci.order = order as u8;
        }
        for byte in &mut ci.map[ci_off..ci_off + nr] {
            debug_assert_eq!(*byte, 0);
            *byte = SWAP_HAS_CACHE;
        }
        ci.count += nr as u16;
        self.inuse_pages.fetch_add(nr as u64, Ordering::Relaxed);
    }

    /// `swap_reclaim_full_clusters`: isolates full clusters (one, or with `force` up to
    /// `inuse / 512`) and asks the hook for their cache-only slots, rotating the list.
    ///
    /// Context: list lock and cluster locks; the hook runs with none held.
    fn swap_reclaim_full_clusters(&self, force: bool) {
        let Some(hook) = &self.hook else { return };
        let mut to_scan = if force { self.inuse_pages() / SWAPFILE_CLUSTER as u64 } else { 1 };
        for _ in 0..self.nr_clusters {
            let Some((idx, ci)) = self.isolate_lock_cluster(ListId::Full, ClusterFlag::None) else {
                break;
            };
            to_scan = to_scan.saturating_sub(1);
            let runs = Runs::collect(&ci, 0, SWAPFILE_CLUSTER);
            drop(ci);
            for (run_off, run_nr) in runs.iter() {
                SwapDeviceStats::inc(&self.stats.live.reclaim_calls);
                let first = SwapEntry::new(self.ty, cluster_offset(idx) + run_off as u64);
                if hook.try_reclaim_cache(first, run_nr) {
                    SwapDeviceStats::inc(&self.stats.live.reclaim_success);
                }
            }
            let mut ci = self.lock_cluster(idx);
            // Freeing meanwhile may have moved it already; otherwise put it back by count.
            if ci.flags == ClusterFlag::None {
                self.relocate_cluster(idx, &mut ci);
            }
            drop(ci);
            if to_scan == 0 {
                break;
            }
        }
    }
}
