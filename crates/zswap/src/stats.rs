//! Counters: every one of the kernel's zswap debugfs files (`/sys/kernel/debug/zswap`), under the
//! same names, plus one counter for each rejection, fallback and writeback outcome the kernel folds
//! together.
//!
//! Not here, because they mean nothing in uswap: `reject_kmemcache_fail` (an entry is a
//! Rust allocation, which aborts rather than fails) and `duplicate_entry` (a store over an
//! existing entry is the normal redirty case, counted in `replaced_entries`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

counters::table! {
    /// The live counters. Relaxed atomics: statistics, not synchronisation; `stored_pages`
    /// and `stored_incompressible_pages` change under the tree lock of the entry concerned,
    /// so with every tree locked they are exact.
    pub(crate) struct Counters;
    /// A snapshot of a pool's counters and sizes. Counters only grow; sizes are gauges.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct ZswapStats {
        counters {
            /// Stores refused because the pool was at or over its limit.
            pool_limit_hit,
            /// Compressor failures on pages that were then rejected
            /// ([`crate::Incompressible::Reject`]).
            reject_compress_fail,
            /// Pages that did not compress below the huge-class size and were rejected.
            reject_compress_poor,
            /// Stores refused because the pool allocator (or the LRU's node table) had no memory.
            reject_alloc_fail,
            /// Objects that failed to decompress (on load or writeback); each was kept.
            decompress_fail,
            /// Entries written back to the swap device.
            written_back_pages,
            /// Entries stored now.
            stored_pages,
            /// Of `stored_pages`, those stored raw (4096 bytes).
            stored_incompressible_pages,
            /// Stores refused while under the limit but not yet back under the accept threshold
            /// (the hysteresis; the kernel refuses these without a counter).
            reject_accept_threshold,
            /// Compressor failures on pages then stored raw (a fallback).
            compress_fail_stored_raw,
            /// Successful stores (vmstat `zswpout`).
            zswpout,
            /// Loads that filled a page (vmstat `zswpin`).
            zswpin,
            /// Loads that found no entry.
            load_misses,
            /// Entries dropped by a load because loads are exclusive.
            exclusive_loads,
            /// Entries dropped by `invalidate`.
            invalidated,
            /// Older entries dropped because a store to their slot failed.
            failed_store_invalidated,
            /// Older entries replaced by a successful store to their slot.
            replaced_entries,
            /// Referenced entries spared by writeback (cleared and rotated: the second chance).
            writeback_second_chance,
            /// Writeback stopped: the target refused the pin while the entry was still stored (a
            /// swap-in holds the slot: the warm end of the LRU).
            writeback_warm_stop,
            /// Writeback skipped an entry that was invalidated (slot freed) before its pin.
            writeback_skipped_freed,
            /// Writeback found another entry (or none) in the tree after pinning.
            writeback_raced,
            /// Writeback could not decompress the entry (also in `decompress_fail`).
            writeback_decompress_fail,
            /// The device write failed; the entry was kept.
            writeback_write_fail,
        }
        gauges {
            /// Writeback attempts that did not write an entry back (pin refused, entry gone or
            /// replaced, decompression or device write failed): the sum of the `writeback_*`
            /// failure counters below.
            reject_reclaim_fail: u64,
            /// Bytes the pool holds: [`ZswapStats::pool_bytes`] + [`ZswapStats::metadata_bytes`].
            pool_total_size: u64,
            /// Bytes of compressed data those entries hold (zram's `compr_data_size`): against
            /// `stored_pages` the compression ratio, against the pool's pages its fragmentation.
            compressed_bytes: u64,
            /// Raw pages a folio load read in runs lying back to back in the pool, each run with
            /// one copy (the pool's `pages_read_joined`).
            raw_pages_loaded_joined: u64,
            /// Bytes held by the pool allocator (zspage pages and its metadata).
            pool_bytes: u64,
            /// Bytes of zswap's own structures: index nodes, entries, LRU chunks.
            metadata_bytes: u64,
            /// The pool limit.
            max_pool_bytes: u64,
            /// The accept threshold, in bytes.
            accept_threshold_bytes: u64,
            /// Whether the pool is refusing stores (over the limit, or not yet back under the
            /// accept threshold).
            is_full: bool,
        }
    }
}

/// Adds one.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}
