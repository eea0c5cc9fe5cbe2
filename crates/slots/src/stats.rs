//! Per-device counters, with the kernel's names where the kernel has one.
//!
//! `swpout[order]` and `swpout_fallback[order]` are the per-size mTHP stats
//! (`hugepages-<size>kB/stats/swpout`, `swpout_fallback`): allocations that succeeded at
//! that order, and order > 0 allocations that failed (the caller splits). Every other
//! rejection or fallback of the device has its own counter too, so that a test or a
//! benchmark can tell which one happened.
//!
//! Plain std atomics, updated with `Relaxed`: they are statistics, never used to decide.

use crate::SWAP_NR_ORDERS;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one swap device.
#[derive(Debug, Default)]
pub struct SwapDeviceStats {
    /// Allocations that succeeded, per order (`swpout`).
    pub swpout: [AtomicU64; SWAP_NR_ORDERS],
    /// Order > 0 allocations that failed, per order (`swpout_fallback`).
    pub swpout_fallback: [AtomicU64; SWAP_NR_ORDERS],
    /// Order-0 allocations that failed: the device is full.
    pub alloc_fail: AtomicU64,
    /// Allocations served from the thread's cluster hint (the per-CPU fast path).
    pub alloc_fast: AtomicU64,
    /// Order-0 allocations that took a slot from a cluster of another order.
    pub alloc_steal: AtomicU64,
    /// Order-0 passes that failed with free slots left and started again (lists moved
    /// under the allocator's feet).
    pub alloc_retry: AtomicU64,
    /// Clusters isolated and scanned by the slow path.
    pub cluster_scans: AtomicU64,
    /// Clusters skipped by isolation because another thread held their lock (a pass may
    /// then fail although the device has room, as in the kernel; the caller retries).
    pub isolate_contended: AtomicU64,
    /// `try_reclaim_cache` calls made by the allocator (cache-only slots, device half full).
    pub reclaim_calls: AtomicU64,
    /// Of those, how many the hook reclaimed.
    pub reclaim_success: AtomicU64,
    /// Clusters discarded (hole punched) after becoming free.
    pub discard_clusters: AtomicU64,
    /// Discards the backend failed (the cluster is still reused; the error is returned).
    pub discard_errors: AtomicU64,
    /// Extend tables allocated (a slot's count passed `SWAP_MAP_MAX`).
    pub extend_tables: AtomicU64,
    /// `dup` / `put` / `put_cache` / `try_pin_cache` calls refused (any reason).
    pub rejects: AtomicU64,
    /// `try_pin_cache` refused because the slot was pinned already (`-EEXIST`).
    pub pin_busy: AtomicU64,
    /// `try_pin_cache` refused because the slot was free (`-ENOENT`).
    pub pin_free: AtomicU64,
}

impl SwapDeviceStats {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// `swpout` of one order.
    pub fn swpout(&self, order: u32) -> u64 {
        self.swpout[order as usize].load(Ordering::Relaxed)
    }

    /// `swpout_fallback` of one order.
    pub fn swpout_fallback(&self, order: u32) -> u64 {
        self.swpout_fallback[order as usize].load(Ordering::Relaxed)
    }

    /// Reads any counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
