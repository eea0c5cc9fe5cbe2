//! Engine statistics, named as the kernel names them (`/proc/vmstat`, the per-size mTHP
//! `stats/` files, `memory.stat`), plus one counter per failure or fallback the kernel has
//! no name for.
//!
//! Counters are relaxed atomics: each is exact on its own, but a snapshot taken while the
//! engine runs is not a consistent cut across counters (neither is `/proc/vmstat`). Read
//! them as a struct ([`Stats::snapshot`]) or as vmstat-style text
//! ([`StatsSnapshot::to_vmstat`]): one `name value` line per counter, per-size counters as
//! `name_<size>kB`.

use crate::sync::{AtomicU64, Ordering};
use crate::MAX_ORDER;

/// Number of folio sizes (orders 0..=MAX_ORDER).
pub const NR_ORDERS: usize = MAX_ORDER as usize + 1;

counters::table! {
    /// The engine's event counters (see the module documentation for their names).
    pub struct Counters;
    /// A copy of [`Counters`] taken at one moment.
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    pub struct CountersSnapshot {
        counters {
            /// Pages read from a swap device (not zswap, not zero pages).
            pswpin,
            /// Pages written to a swap device (not zswap, not zero pages).
            pswpout,
            /// Pages swapped in from the zero map: nothing read.
            swpin_zero,
            /// Pages swapped out as zero pages: nothing stored.
            swpout_zero,
            /// Pages loaded from zswap.
            zswpin,
            /// Pages stored in zswap.
            zswpout,
            /// Pages written back from zswap to the swap device.
            zswpwb,
            /// Pages read ahead around a fault.
            swap_ra,
            /// Read-ahead pages that were used before being evicted again.
            swap_ra_hit,
            /// Swap-ins that found a shadow entry (the page had been evicted).
            workingset_refault_anon,
            /// Refaults within the workingset: the folio starts on the active list.
            workingset_activate_anon,
            /// Refaults of folios that were active when evicted (thrashing).
            workingset_restore_anon,
            /// Faults handled by the engine, of any kind.
            pgfault,
            /// Faults that needed a swap-in.
            pgmajfault,
            /// Faults on pages never touched before (or dropped by the program).
            pgfault_first_touch,
            /// Faults that found the page already mapped (a racing fault served it).
            pgfault_spurious,
            /// Write-protect faults: a write to a zero page mapped write-protected (or to a page
            /// protected that the engine does not keep as one: a forked child's).
            pgfault_wp,
            /// Pages mapped to the shared zero page write-protected, uncharged (a read of a page
            /// never written, or of a zero-map slot), when the page source can protect them.
            zero_mapped,
            /// Of those, pages made resident (charged, on the LRU) by the program's first write.
            zero_mapped_written,
            /// Of `zero_mapped`, pages of folios paged out as zero and mapped straight back so.
            zero_remapped,
            /// Of `zero_mapped`, zero-map pages mapped so around a fault on one of them: the
            /// rest of the zero pages of its old large folio, whose reads then do not fault.
            zero_around,
            /// Faults whose swap entry changed under them (re-validation after an unlock failed).
            swapin_raced,
            /// Faults that waited on a folio another thread was reading or writing.
            swapcache_wait,
            /// Pages scanned by the background reclaimer.
            pgscan_kswapd,
            /// Pages scanned by direct reclaim.
            pgscan_direct,
            /// Pages reclaimed by the background reclaimer.
            pgsteal_kswapd,
            /// Pages reclaimed by direct reclaim.
            pgsteal_direct,
            /// Times a fault had to reclaim before it could map (the kernel's allocstall).
            allocstall,
            /// Times the background reclaimer was woken.
            kswapd_wake,
            /// The background reclaimer could not move to `EngineConfig::reclaimer_cpus` (CPUs
            /// outside the process's cpuset): it runs where the process may.
            reclaimer_cpus_failed,
            /// Reclaim passes that could not free anything (device full, nothing evictable).
            reclaim_fail,
            /// Of those, the ones stopped because every slot of the swap device was in use: the
            /// budget cannot be kept until slots are freed (a larger device is the remedy).
            swap_full,
            /// Of those, the ones stopped because the swap device refused writes for lack of disk
            /// space (`Backend::out_of_space`) and no pool could take the pages instead.
            swap_no_space,
            /// Of those, the ones stopped because the program locked all its memory
            /// (`Engine::set_all_locked`): nothing may be paged out.
            reclaim_locked,
            /// Of those, the ones stopped at the working floor (`Budget::floor_bytes`): what the
            /// budget lacks is charged outside the resident pages (the program's unmanaged memory,
            /// the pool's bookkeeping), and the charge runs over the budget instead of every fault
            /// evicting the page the last one mapped.
            reclaim_floor,
            /// Times the program locked all its memory (`Engine::set_all_locked`): said in the
            /// summary whether or not reclaim ran into it afterwards.
            all_locked,
            /// Folios activated by second chance (referenced while inactive).
            pgactivate,
            /// Folios moved from the active to the inactive list.
            pgdeactivate,
            /// Page-outs abandoned because the page source could not take the pages
            /// (the layout was changing: fork, mremap); the folio stays resident.
            pageout_retry,
            /// Page-outs that failed to store anywhere; the data was put back.
            pageout_fail,
            /// Isolated folios a remap moved before their page-out took them: paged out where they
            /// went, or put back on a list if they moved while being paged out.
            pageout_moved,
            /// Runs of neighbouring order-0 victims taken out of the program together (one
            /// `PageSource::take_each`, so one TLB flush through userfaultfd), and the pages in
            /// them.
            pageout_runs,
            pageout_run_pages,
            /// Swap-in reads that failed (I/O error, checksum, decompression): the access gets an
            /// error, never wrong data.
            swpin_error,
            /// Pages written to the device that failed (the data stays where it was).
            swpout_error,
            /// Page-source map calls that failed for a reason other than a race.
            map_error,
            /// Pages whose swap entries were dropped because the program freed them (REMOVE).
            pages_removed,
            /// Pages a remap found at its destination and released, as a REMOVE would (mremap
            /// replaces what was there: the kernel unmaps it first).
            remap_dest_released,
            /// Swap entries duplicated for a forked child.
            fork_dup,
            /// Pages a refused take left out of the program, held by the page source (the
            /// page source's rule 5): staged.
            pages_staged,
            /// Staged pages put back into the program (by a fault on one, or after events).
            pages_unstaged,
            /// Staged pages discarded: the program dropped or unmapped them while they were
            /// out.
            staged_dropped,
            /// Staged pages copied into a forked child.
            staged_to_children,
            /// Of those, pages the child's source refused: poisoned there (SIGBUS on access,
            /// never zeros).
            staged_child_poisoned,
            /// Attempts to put a staged page back that failed for a reason other than a
            /// changing address space (the page stays staged).
            unstage_failed,
            /// Times the budget was changed while the engine ran (`Engine::set_budget`).
            budget_changes,
            /// Direct reclaims skipped because the engine was paused for a fork (the fault charged
            /// over the budget meanwhile).
            reclaim_paused,
            /// Pool pages given back by compaction (objects moved out of sparse zspages).
            pool_compact_pages,
            /// Discards of freed clusters that failed (harmless: freed slots are written before
            /// they are read; the disk space just was not given back).
            swap_discard_error,
            /// Cached folios deleted because the last reference to their slots went (the kernel's
            /// free_swap_and_cache), e.g. the only copy left by a failed store, once unneeded.
            swapcache_released,
        }
    }
}

/// Per folio size counters (the kernel's `hugepages-<size>kB/stats/`), indexed by order.
#[derive(Debug, Default)]
pub struct PerOrder {
    /// Folios swapped out whole.
    pub swpout: [AtomicU64; NR_ORDERS],
    /// Folios split before swap-out because contiguous slots could not be allocated.
    pub swpout_fallback: [AtomicU64; NR_ORDERS],
    /// Folios swapped in whole.
    pub swpin: [AtomicU64; NR_ORDERS],
    /// Large swap-ins that fell back to a smaller order.
    pub swpin_fallback: [AtomicU64; NR_ORDERS],
    /// Folios stored in zswap whole.
    pub zswpout: [AtomicU64; NR_ORDERS],
}

/// A copy of [`PerOrder`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PerOrderSnapshot {
    /// See [`PerOrder::swpout`].
    pub swpout: [u64; NR_ORDERS],
    /// See [`PerOrder::swpout_fallback`].
    pub swpout_fallback: [u64; NR_ORDERS],
    /// See [`PerOrder::swpin`].
    pub swpin: [u64; NR_ORDERS],
    /// See [`PerOrder::swpin_fallback`].
    pub swpin_fallback: [u64; NR_ORDERS],
    /// See [`PerOrder::zswpout`].
    pub zswpout: [u64; NR_ORDERS],
}

fn load_all(counters: &[AtomicU64; NR_ORDERS]) -> [u64; NR_ORDERS] {
    std::array::from_fn(|order| counters[order].load(Ordering::Relaxed))
}

impl PerOrder {
    fn reset(&self) {
        for counters in
            [&self.swpout, &self.swpout_fallback, &self.swpin, &self.swpin_fallback, &self.zswpout]
        {
            counters.iter().for_each(|c| c.store(0, Ordering::Relaxed));
        }
    }

    fn snapshot(&self) -> PerOrderSnapshot {
        PerOrderSnapshot {
            swpout: load_all(&self.swpout),
            swpout_fallback: load_all(&self.swpout_fallback),
            swpin: load_all(&self.swpin),
            swpin_fallback: load_all(&self.swpin_fallback),
            zswpout: load_all(&self.zswpout),
        }
    }
}

/// Levels that go up and down (the kernel's `nr_*` items and meminfo).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Gauges {
    /// Pages mapped in the regions and charged to the budget.
    pub resident_pages: u64,
    /// Bytes of folio data held by the swap cache (in-flight page-outs and page-ins).
    pub swapcache_bytes: u64,
    /// Folios in the swap cache (the kernel's nr_swapcached).
    pub nr_swapcached: u64,
    /// XArray node memory of the swap cache (folio and shadow entries), in bytes.
    pub swapcache_node_bytes: u64,
    /// XArray node memory of the regions' page tables, in bytes.
    pub pagetable_node_bytes: u64,
    /// Bytes of the LRU's record table.
    pub lru_bytes: u64,
    /// Bytes the compressed pool holds and the budget charges: zswap's pool_total_size,
    /// with the free pages its allocator keeps resident.
    pub pool_bytes: u64,
    /// Pages stored in the compressed pool (zswap's stored_pages).
    pub pool_stored_pages: u64,
    /// Slots in use on all swap devices (the kernel's inuse_pages).
    pub swap_inuse_pages: u64,
    /// Slots whose page was all zero (bits set in the zero map).
    pub zeromap_pages: u64,
    /// Pages mapped to the shared zero page, write-protected and uncharged (no memory).
    pub zero_mapped_pages: u64,
    /// Pages out of the program, held by the page source ([`crate::region::Pte::Staged`]).
    pub staged_pages: u64,
    /// The budget in bytes.
    pub budget_bytes: u64,
    /// Charged bytes: resident + swap cache + pool.
    pub used_bytes: u64,
    /// The most charged bytes seen.
    pub used_bytes_peak: u64,
    /// Memory the embedder counts against the budget outside the engine's pages (part of
    /// `used_bytes`).
    pub outside_bytes: u64,
    /// Extra free budget reclaim keeps for bursts the embedder expects.
    pub reserve_bytes: u64,
    /// Folios on the active list.
    pub nr_active_anon: u64,
    /// Folios on the inactive list.
    pub nr_inactive_anon: u64,
}

/// All of the engine's counters.
#[derive(Debug, Default)]
pub struct Stats {
    /// Event counters.
    pub counters: Counters,
    /// Per folio size counters.
    pub per_order: PerOrder,
}

/// A copy of everything [`Stats`] and the gauges hold.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Event counters.
    pub counters: CountersSnapshot,
    /// Per folio size counters.
    pub per_order: PerOrderSnapshot,
    /// Levels.
    pub gauges: Gauges,
    /// The compressed pool's counters (its debugfs names), if there is a pool.
    pub pool: Option<zswap::ZswapStats>,
}

impl Stats {
    /// Adds `n` to a counter (a helper that keeps call sites short).
    #[inline]
    pub fn add(counter: &counters::Counter, n: u64) {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Adds `n` to the per-order counter for `order`.
    #[inline]
    pub fn add_order(counters: &[AtomicU64; NR_ORDERS], order: u32, n: u64) {
        counters[order as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Sets every event counter to zero (the gauges are the engine's state, not events):
    /// a forked child's engine counts its own events, not its parent's history.
    pub fn reset_events(&self) {
        self.counters.reset();
        self.per_order.reset();
    }

    /// Copies the counters; the caller fills in the gauges.
    pub fn snapshot(&self, gauges: Gauges) -> StatsSnapshot {
        StatsSnapshot {
            counters: {
                let mut counters = CountersSnapshot::default();
                self.counters.snapshot_into(&mut counters);
                counters
            },
            per_order: self.per_order.snapshot(),
            gauges,
            pool: None,
        }
    }
}

/// What a caller that polls reads ([`crate::Engine::polled`]): the counters and the gauges
/// that take no lock.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Polled {
    /// Event counters.
    pub counters: CountersSnapshot,
    /// See [`Gauges::resident_pages`].
    pub resident_pages: u64,
    /// See [`Gauges::swap_inuse_pages`].
    pub swap_inuse_pages: u64,
    /// See [`Gauges::pool_bytes`].
    pub pool_bytes: u64,
    /// See [`Gauges::pool_stored_pages`].
    pub pool_stored_pages: u64,
}

/// The size of a folio of `order` in KiB, as the kernel names its per-size directories.
pub fn order_size_kib(order: usize) -> u64 {
    4u64 << order
}

impl StatsSnapshot {
    /// vmstat-style text: `name value` per line.
    pub fn to_vmstat(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for (name, value) in self.counters.fields() {
            let _ = writeln!(out, "{name} {value}");
        }
        let per_order: [(&str, &[u64; NR_ORDERS]); 5] = [
            ("swpout", &self.per_order.swpout),
            ("swpout_fallback", &self.per_order.swpout_fallback),
            ("swpin", &self.per_order.swpin),
            ("swpin_fallback", &self.per_order.swpin_fallback),
            ("zswpout", &self.per_order.zswpout),
        ];
        for (name, values) in per_order {
            for (order, value) in values.iter().enumerate() {
                let _ = writeln!(out, "{name}_{}kB {value}", order_size_kib(order));
            }
        }
        for (name, value) in self.gauges.fields() {
            let _ = writeln!(out, "{name} {value}");
        }
        if let Some(pool) = &self.pool {
            for (name, value) in pool.fields() {
                let _ = writeln!(out, "zswap_{name} {value}");
            }
        }
        out
    }
}

impl Gauges {
    /// Every gauge as `(name, value)`.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("resident_pages", self.resident_pages),
            ("swapcache_bytes", self.swapcache_bytes),
            ("nr_swapcached", self.nr_swapcached),
            ("swapcache_node_bytes", self.swapcache_node_bytes),
            ("pagetable_node_bytes", self.pagetable_node_bytes),
            ("lru_bytes", self.lru_bytes),
            ("pool_total_size", self.pool_bytes),
            ("stored_pages", self.pool_stored_pages),
            ("swap_inuse_pages", self.swap_inuse_pages),
            ("zeromap_pages", self.zeromap_pages),
            ("zero_mapped_pages", self.zero_mapped_pages),
            ("staged_pages", self.staged_pages),
            ("budget_bytes", self.budget_bytes),
            ("used_bytes", self.used_bytes),
            ("used_bytes_peak", self.used_bytes_peak),
            ("outside_bytes", self.outside_bytes),
            ("reserve_bytes", self.reserve_bytes),
            ("nr_active_anon", self.nr_active_anon),
            ("nr_inactive_anon", self.nr_inactive_anon),
        ]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn vmstat_text_names_every_counter_and_size() {
        let stats = Stats::default();
        Stats::add(&stats.counters.pswpout, 3);
        Stats::add_order(&stats.per_order.swpout_fallback, 4, 2);
        let text = stats.snapshot(Gauges { resident_pages: 7, ..Gauges::default() }).to_vmstat();
        assert!(text.contains("\npswpout 3\n"), "{text}");
        assert!(text.contains("swpout_fallback_64kB 2\n"), "{text}");
        assert!(text.contains("swpin_2048kB 0\n"), "{text}");
        assert!(text.contains("resident_pages 7\n"), "{text}");
        assert!(text.starts_with("pswpin 0\n"), "{text}");
    }
}
