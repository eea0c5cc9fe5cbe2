//! Per-device counters, with the kernel's names where the kernel has one.
//!
//! `swpout[order]` and `swpout_fallback[order]` are the per-size mTHP stats
//! (`hugepages-<size>kB/stats/swpout`, `swpout_fallback`): allocations that succeeded at
//! that order, and order > 0 allocations that failed (the caller splits). Every other
//! rejection or fallback of the device has its own counter too, so that a test or a
//! benchmark can tell which one happened: one line in the table below
//! ([`DeviceCounters`]), the per-order arrays beside it.
//!
//! Plain std atomics, updated with `Relaxed`: they are statistics, never used to decide.

use crate::SWAP_NR_ORDERS;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one swap device: the per-order arrays, and the table of the others.
#[derive(Debug, Default)]
pub struct SwapDeviceStats {
    /// Allocations that succeeded, per order (`swpout`).
    pub swpout: [AtomicU64; SWAP_NR_ORDERS],
    /// Order > 0 allocations that failed, per order (`swpout_fallback`).
    pub swpout_fallback: [AtomicU64; SWAP_NR_ORDERS],
    /// Every other counter.
    pub(crate) live: LiveCounters,
}

counters::table! {
    /// The live counters of one swap device, bar the per-order ones.
    pub(crate) struct LiveCounters;
    /// A snapshot of a swap device's counters, bar the per-order ones.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct DeviceCounters {
        counters {
            /// Order-0 allocations that failed: the device is full.
            alloc_fail,
            /// Allocations served from the thread's cluster hint (the per-CPU fast path).
            alloc_fast,
            /// Order-0 allocations that took a slot from a cluster of another order.
            alloc_steal,
            /// Order-0 passes that failed with free slots left and started again (lists moved
            /// under the allocator's feet).
            alloc_retry,
            /// Clusters isolated and scanned by the slow path.
            cluster_scans,
            /// Clusters skipped by isolation because another thread held their lock (a pass may
            /// then fail although the device has room, as in the kernel; the caller retries).
            isolate_contended,
            /// `try_reclaim_cache` calls made by the allocator (cache-only slots, device half
            /// full).
            reclaim_calls,
            /// Of those, how many the hook reclaimed.
            reclaim_success,
            /// Clusters discarded (hole punched) after becoming free.
            discard_clusters,
            /// Discards the backend failed (the cluster is still reused; the error is returned).
            discard_errors,
            /// Extend tables allocated (a slot's count passed `SWAP_MAP_MAX`).
            extend_tables,
            /// `dup` / `put` / `put_cache` / `try_pin_cache` calls refused (any reason).
            rejects,
            /// `try_pin_cache` refused because the slot was pinned already (`-EEXIST`).
            pin_busy,
            /// `try_pin_cache` refused because the slot was free (`-ENOENT`).
            pin_free,
        }
    }
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

    /// The other counters now.
    pub fn counters(&self) -> DeviceCounters {
        let mut counters = DeviceCounters::default();
        self.live.snapshot_into(&mut counters);
        counters
    }
}
