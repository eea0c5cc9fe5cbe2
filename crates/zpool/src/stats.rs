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

/// A snapshot of the pool's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Successful `malloc` calls.
    pub mallocs: u64,
    /// `free` calls.
    pub frees: u64,
    /// `malloc` refused because memory for a zspage could not be had (real or injected).
    pub alloc_fail: u64,
    /// Of `alloc_fail`, the refusals that came from the allocation-failure hook.
    pub alloc_fail_injected: u64,
    /// `malloc` refused because the pool was at its page limit.
    pub pool_full: u64,
    /// `malloc` refused because the size was 0 or over a page.
    pub invalid_size: u64,
    /// zspages allocated.
    pub zspages_allocated: u64,
    /// zspages freed (emptied by `free` or by compaction).
    pub zspages_freed: u64,
    /// A zspage allocated outside the lock that was not needed once the lock was taken
    /// again (another thread made room meanwhile); it is freed at once.
    pub zspages_spare: u64,
    /// `compact` calls.
    pub compactions: u64,
    /// Objects moved by compaction.
    pub objects_moved: u64,
    /// zspages freed by compaction.
    pub zspages_compacted: u64,
    /// Whole-page objects (raw pages) read by `read_each` in runs of two or more lying
    /// back to back, each run with one copy.
    pub pages_read_joined: u64,
}

/// The live counters (relaxed atomics: they are statistics, not synchronisation).
#[derive(Debug, Default)]
pub(crate) struct LiveCounters {
    pub(crate) mallocs: AtomicU64,
    pub(crate) frees: AtomicU64,
    pub(crate) alloc_fail: AtomicU64,
    pub(crate) alloc_fail_injected: AtomicU64,
    pub(crate) pool_full: AtomicU64,
    pub(crate) invalid_size: AtomicU64,
    pub(crate) zspages_allocated: AtomicU64,
    pub(crate) zspages_freed: AtomicU64,
    pub(crate) zspages_spare: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) objects_moved: AtomicU64,
    pub(crate) zspages_compacted: AtomicU64,
    pub(crate) pages_read_joined: AtomicU64,
}

/// Bumps a counter by one.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

impl LiveCounters {
    pub(crate) fn snapshot(&self) -> Counters {
        Counters {
            mallocs: self.mallocs.load(Relaxed),
            frees: self.frees.load(Relaxed),
            alloc_fail: self.alloc_fail.load(Relaxed),
            alloc_fail_injected: self.alloc_fail_injected.load(Relaxed),
            pool_full: self.pool_full.load(Relaxed),
            invalid_size: self.invalid_size.load(Relaxed),
            zspages_allocated: self.zspages_allocated.load(Relaxed),
            zspages_freed: self.zspages_freed.load(Relaxed),
            zspages_spare: self.zspages_spare.load(Relaxed),
            compactions: self.compactions.load(Relaxed),
            objects_moved: self.objects_moved.load(Relaxed),
            zspages_compacted: self.zspages_compacted.load(Relaxed),
            pages_read_joined: self.pages_read_joined.load(Relaxed),
        }
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
