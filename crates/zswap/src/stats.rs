//! Counters: every one of the kernel's zswap debugfs files (reference/kernel-swap.md
//! §4.7), under the same names, plus one counter for each rejection, fallback and
//! writeback outcome the kernel folds together.
//!
//! Not here, because they mean nothing in uswap: `reject_kmemcache_fail` (an entry is a
//! Rust allocation, which aborts rather than fails) and `duplicate_entry` (a store over an
//! existing entry is the normal redirty case, counted in `replaced_entries`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of a pool's counters and sizes. Counters only grow; sizes are gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZswapStats {
    // ---- the kernel's debugfs names ----
    /// Stores refused because the pool was at or over its limit.
    pub pool_limit_hit: u64,
    /// Writeback attempts that did not write an entry back (pin refused, entry gone or
    /// replaced, decompression or device write failed): the sum of the `writeback_*`
    /// failure counters below.
    pub reject_reclaim_fail: u64,
    /// Compressor failures on pages that were then rejected ([`crate::Incompressible::Reject`]).
    pub reject_compress_fail: u64,
    /// Pages that did not compress below the huge-class size and were rejected.
    pub reject_compress_poor: u64,
    /// Stores refused because the pool allocator (or the LRU's node table) had no memory.
    pub reject_alloc_fail: u64,
    /// Objects that failed to decompress (on load or writeback); each was kept.
    pub decompress_fail: u64,
    /// Entries written back to the swap device.
    pub written_back_pages: u64,
    /// Bytes the pool holds: [`ZswapStats::pool_bytes`] + [`ZswapStats::metadata_bytes`].
    pub pool_total_size: u64,
    /// Entries stored now.
    pub stored_pages: u64,
    /// Bytes of compressed data those entries hold (zram's `compr_data_size`): against
    /// `stored_pages` the compression ratio, against the pool's pages its fragmentation.
    pub compressed_bytes: u64,
    /// Of `stored_pages`, those stored raw (4096 bytes).
    pub stored_incompressible_pages: u64,

    // ---- uswap's own ----
    /// Stores refused while under the limit but not yet back under the accept threshold
    /// (the hysteresis; the kernel refuses these without a counter).
    pub reject_accept_threshold: u64,
    /// Compressor failures on pages then stored raw (a fallback).
    pub compress_fail_stored_raw: u64,
    /// Successful stores (vmstat `zswpout`).
    pub zswpout: u64,
    /// Loads that filled a page (vmstat `zswpin`).
    pub zswpin: u64,
    /// Loads that found no entry.
    pub load_misses: u64,
    /// Entries dropped by a load because loads are exclusive.
    pub exclusive_loads: u64,
    /// Raw pages a folio load read in runs lying back to back in the pool, each run with
    /// one copy (the pool's `pages_read_joined`).
    pub raw_pages_loaded_joined: u64,
    /// Entries dropped by `invalidate`.
    pub invalidated: u64,
    /// Older entries dropped because a store to their slot failed.
    pub failed_store_invalidated: u64,
    /// Older entries replaced by a successful store to their slot.
    pub replaced_entries: u64,
    /// Referenced entries spared by writeback (cleared and rotated: the second chance).
    pub writeback_second_chance: u64,
    /// Writeback stopped: the target refused the pin while the entry was still stored (a
    /// swap-in holds the slot: the warm end of the LRU).
    pub writeback_warm_stop: u64,
    /// Writeback skipped an entry that was invalidated (slot freed) before its pin.
    pub writeback_skipped_freed: u64,
    /// Writeback found another entry (or none) in the tree after pinning.
    pub writeback_raced: u64,
    /// Writeback could not decompress the entry (also in `decompress_fail`).
    pub writeback_decompress_fail: u64,
    /// The device write failed; the entry was kept.
    pub writeback_write_fail: u64,
    /// Bytes held by the pool allocator (zspage pages and its metadata).
    pub pool_bytes: u64,
    /// Bytes of zswap's own structures: index nodes, entries, LRU chunks.
    pub metadata_bytes: u64,
    /// The pool limit.
    pub max_pool_bytes: u64,
    /// The accept threshold, in bytes.
    pub accept_threshold_bytes: u64,
    /// Whether the pool is refusing stores (over the limit, or not yet back under the
    /// accept threshold).
    pub is_full: bool,
}

impl ZswapStats {
    /// Every counter as `(name, value)`, in declaration order (booleans as 0 or 1), for
    /// vmstat-style text.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("pool_limit_hit", self.pool_limit_hit),
            ("reject_reclaim_fail", self.reject_reclaim_fail),
            ("reject_compress_fail", self.reject_compress_fail),
            ("reject_compress_poor", self.reject_compress_poor),
            ("reject_alloc_fail", self.reject_alloc_fail),
            ("decompress_fail", self.decompress_fail),
            ("written_back_pages", self.written_back_pages),
            ("pool_total_size", self.pool_total_size),
            ("stored_pages", self.stored_pages),
            ("compressed_bytes", self.compressed_bytes),
            ("stored_incompressible_pages", self.stored_incompressible_pages),
            ("reject_accept_threshold", self.reject_accept_threshold),
            ("compress_fail_stored_raw", self.compress_fail_stored_raw),
            ("zswpout", self.zswpout),
            ("zswpin", self.zswpin),
            ("load_misses", self.load_misses),
            ("exclusive_loads", self.exclusive_loads),
            ("raw_pages_loaded_joined", self.raw_pages_loaded_joined),
            ("invalidated", self.invalidated),
            ("failed_store_invalidated", self.failed_store_invalidated),
            ("replaced_entries", self.replaced_entries),
            ("writeback_second_chance", self.writeback_second_chance),
            ("writeback_warm_stop", self.writeback_warm_stop),
            ("writeback_skipped_freed", self.writeback_skipped_freed),
            ("writeback_raced", self.writeback_raced),
            ("writeback_decompress_fail", self.writeback_decompress_fail),
            ("writeback_write_fail", self.writeback_write_fail),
            ("pool_bytes", self.pool_bytes),
            ("metadata_bytes", self.metadata_bytes),
            ("max_pool_bytes", self.max_pool_bytes),
            ("accept_threshold_bytes", self.accept_threshold_bytes),
            ("is_full", u64::from(self.is_full)),
        ]
    }
}

/// The live counters. Relaxed atomics: statistics, not synchronisation; `stored_pages` and
/// `stored_incompressible_pages` change under the tree lock of the entry concerned, so
/// with every tree locked they are exact.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) pool_limit_hit: AtomicU64,
    pub(crate) reject_compress_fail: AtomicU64,
    pub(crate) reject_compress_poor: AtomicU64,
    pub(crate) reject_alloc_fail: AtomicU64,
    pub(crate) decompress_fail: AtomicU64,
    pub(crate) written_back_pages: AtomicU64,
    pub(crate) stored_pages: AtomicU64,
    pub(crate) stored_incompressible_pages: AtomicU64,
    pub(crate) reject_accept_threshold: AtomicU64,
    pub(crate) compress_fail_stored_raw: AtomicU64,
    pub(crate) zswpout: AtomicU64,
    pub(crate) zswpin: AtomicU64,
    pub(crate) load_misses: AtomicU64,
    pub(crate) exclusive_loads: AtomicU64,
    pub(crate) invalidated: AtomicU64,
    pub(crate) failed_store_invalidated: AtomicU64,
    pub(crate) replaced_entries: AtomicU64,
    pub(crate) writeback_second_chance: AtomicU64,
    pub(crate) writeback_warm_stop: AtomicU64,
    pub(crate) writeback_skipped_freed: AtomicU64,
    pub(crate) writeback_raced: AtomicU64,
    pub(crate) writeback_decompress_fail: AtomicU64,
    pub(crate) writeback_write_fail: AtomicU64,
}

/// Adds one.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

impl Counters {
    /// Fills the counter fields of `stats` (the sizes are the caller's).
    pub(crate) fn snapshot(&self, stats: &mut ZswapStats) {
        let get = |c: &AtomicU64| c.load(Relaxed);
        stats.pool_limit_hit = get(&self.pool_limit_hit);
        stats.reject_compress_fail = get(&self.reject_compress_fail);
        stats.reject_compress_poor = get(&self.reject_compress_poor);
        stats.reject_alloc_fail = get(&self.reject_alloc_fail);
        stats.decompress_fail = get(&self.decompress_fail);
        stats.written_back_pages = get(&self.written_back_pages);
        stats.stored_pages = get(&self.stored_pages);
        stats.stored_incompressible_pages = get(&self.stored_incompressible_pages);
        stats.reject_accept_threshold = get(&self.reject_accept_threshold);
        stats.compress_fail_stored_raw = get(&self.compress_fail_stored_raw);
        stats.zswpout = get(&self.zswpout);
        stats.zswpin = get(&self.zswpin);
        stats.load_misses = get(&self.load_misses);
        stats.exclusive_loads = get(&self.exclusive_loads);
        stats.invalidated = get(&self.invalidated);
        stats.failed_store_invalidated = get(&self.failed_store_invalidated);
        stats.replaced_entries = get(&self.replaced_entries);
        stats.writeback_second_chance = get(&self.writeback_second_chance);
        stats.writeback_warm_stop = get(&self.writeback_warm_stop);
        stats.writeback_skipped_freed = get(&self.writeback_skipped_freed);
        stats.writeback_raced = get(&self.writeback_raced);
        stats.writeback_decompress_fail = get(&self.writeback_decompress_fail);
        stats.writeback_write_fail = get(&self.writeback_write_fail);
        stats.reject_reclaim_fail = stats.writeback_warm_stop
            + stats.writeback_skipped_freed
            + stats.writeback_raced
            + stats.writeback_decompress_fail
            + stats.writeback_write_fail;
    }
}
