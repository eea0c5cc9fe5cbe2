//! Statistics: per-class shape and occupancy (the kernel's debugfs `classes` file), pool
//! totals, and one counter per event, rejection and fallback.

use crate::class::{ClassGeometry, ClassIndex};
use crate::FULLNESS_GROUPS;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// One size class, as seen under its lock at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassStats {
    /// The class.
    pub index: ClassIndex,
    /// Its shape.
    pub geometry: ClassGeometry,
    /// zspages held.
    pub zspages: usize,
    /// Pages held (`zspages * pages_per_zspage`).
    pub pages: usize,
    /// Objects allocated.
    pub objects: usize,
    /// Sum of the sizes callers asked for (before rounding to the class size).
    pub object_bytes: usize,
    /// Metadata bytes the class holds (handle table, object slots, lists).
    pub metadata_bytes: usize,
    /// zspages per fullness group: empty, 1-9%, 10-19%, .., 90-99%, full.
    pub fullness: [usize; FULLNESS_GROUPS],
}

counters::table! {
    /// The live counters (relaxed atomics: they are statistics, not synchronisation).
    pub(crate) struct LiveCounters;
    /// A snapshot of the pool's counters.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Counters {
        counters {
            /// Successful `malloc` calls.
            mallocs,
            /// `free` calls.
            frees,
            /// `malloc` refused because memory for a zspage could not be had (real or injected).
            alloc_fail,
            /// Of `alloc_fail`, the refusals that came from the allocation-failure hook.
            alloc_fail_injected,
            /// `malloc` refused because the pool was at its page limit.
            pool_full,
            /// `malloc` refused because the size was 0 or over a page.
            invalid_size,
            /// zspages allocated.
            zspages_allocated,
            /// zspages freed (emptied by `free` or by compaction).
            zspages_freed,
            /// A zspage allocated outside the lock that was not needed once the lock was taken
            /// again (another thread made room meanwhile); it is freed at once.
            zspages_spare,
            /// `compact` calls.
            compactions,
            /// Objects moved by compaction.
            objects_moved,
            /// zspages freed by compaction.
            zspages_compacted,
            /// Whole-page objects (raw pages) read by `read_each` in runs of two or more lying
            /// back to back, each run with one copy.
            pages_read_joined,
        }
    }
}

/// Bumps a counter by one.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

impl LiveCounters {
    pub(crate) fn snapshot(&self) -> Counters {
        let mut counters = Counters::default();
        self.snapshot_into(&mut counters);
        counters
    }
}

/// The whole pool at one moment (each class read under its own lock, one after another).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    /// What [`crate::ZsPool::total_bytes`] reports: pages plus metadata.
    pub total_bytes: u64,
    /// Pages held by zspages.
    pub pages: usize,
    /// Metadata bytes (classes' tables and lists, plus the fixed pool structure).
    pub metadata_bytes: usize,
    /// Objects allocated.
    pub objects: usize,
    /// Sum of requested object sizes.
    pub object_bytes: usize,
    /// Every class, smallest first.
    pub classes: Vec<ClassStats>,
    /// The counters.
    pub counters: Counters,
    /// The page arena: chunks, free pages still resident, releases.
    pub arena: crate::ArenaStats,
}

/// What one [`crate::ZsPool::compact`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactStats {
    /// Objects moved to another zspage.
    pub objects_moved: usize,
    /// zspages emptied and freed.
    pub zspages_freed: usize,
    /// Pages given back to the arena.
    pub pages_freed: usize,
    /// Free arena pages given back to the kernel (`MADV_DONTNEED`).
    pub pages_released: usize,
}
