//! What the program does to its own memory, as the page source reports it: dropping pages
//! (`MADV_DONTNEED`, the userfaultfd REMOVE event), unmapping them (UNMAP).
//!
//! Dropped pages read as zeros from then on, so their bookkeeping goes: a resident folio's
//! LRU record and budget charge, a swapped folio's page-table references (which frees its
//! slots, their pool copies and zero-map bits once nothing else refers to them), and the
//! shadows those slots held. A large folio cut by the range is split first, so the pages
//! outside keep theirs.
//!
//! Races with work in flight resolve through the page table: a swap-in or page-out that
//! re-validates under the PTL after the entry went finds it gone and backs off, and the
//! slots it still pins are freed when it drops its swap cache folio.

use crate::engine::Core;
use crate::region::{Found, PageTable, Pte, Region};
use crate::stats::Stats;
use crate::PAGE_SIZE;
use slots::SwapEntry;

const PAGE: u64 = PAGE_SIZE as u64;

impl Core {
    /// Drops the bookkeeping of every page in `[addr, addr + len)` (see the module docs).
    pub(crate) fn remove_range(&self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        let regions: Vec<_> = {
            let regions = self.regions.read();
            regions
                .by_start
                .values()
                .filter(|r| r.start() < end && addr < r.end())
                .cloned()
                .collect()
        };
        for region in regions {
            let first = region.index_of(addr.max(region.start()));
            let last = region.index_of(end.min(region.end()) - 1);
            let freed = self.remove_pages(&region, first, last);
            for (entry, nr) in freed {
                self.swap_cache.clear_shadows(entry.offset(), nr);
            }
        }
    }

    /// Under the PTL, drops the entries of pages `first..=last`; returns the swap entries
    /// whose references it dropped (their shadows go after the lock is released).
    fn remove_pages(&self, region: &Region, first: u64, last: u64) -> Vec<(SwapEntry, u64)> {
        let mut pt = region.lock();
        self.split_edges(&mut pt, first, last);
        let mut freed = Vec::new();
        let mut pages = 0;
        for found in pt.entries(first, last) {
            pt.erase(found.first);
            let nr = 1u64 << found.order;
            pages += nr;
            match found.pte {
                Pte::Resident(id) => {
                    if self.lru.remove(id).is_some() {
                        self.budget.uncharge_resident(nr * PAGE);
                    }
                }
                Pte::Swap(entry) => {
                    if let Err(error) = self.storage.device.put(entry, nr as u32) {
                        panic!("page table held {entry:?} but the device refused the put: {error}");
                    }
                    freed.push((entry, nr));
                }
            }
        }
        Stats::add(&self.stats.counters.pages_removed, pages);
        freed
    }

    /// Splits to order 0 any entry that sticks out of `[first, last]`.
    fn split_edges(&self, pt: &mut PageTable<'_>, first: u64, last: u64) {
        for found in pt.entries(first, last) {
            let end = found.first + (1 << found.order) - 1;
            if found.first >= first && end <= last {
                continue;
            }
            self.split_entry(pt, &found);
        }
    }

    /// Splits one entry to order 0: a resident folio's LRU record with it.
    pub(crate) fn split_entry(&self, pt: &mut PageTable<'_>, found: &Found) {
        match found.pte {
            Pte::Swap(_) => {
                pt.split(found.first, 0, |first, old| {
                    Pte::Swap(old.swap_entry_of(first).expect("a swapped entry"))
                });
            }
            Pte::Resident(id) => {
                // A stale id (reclaim took the record) cannot happen: reclaim removes the
                // record only after changing the entry, under this same lock.
                let ids = self.lru.split(id, 0).expect("a resident entry has a live record");
                pt.split(found.first, 0, |first, _| {
                    Pte::Resident(ids[(first - found.first) as usize])
                });
            }
        }
    }

    /// Forgets every region lying wholly inside `[addr, addr + len)` (after its pages were
    /// removed).
    pub(crate) fn forget_regions_within(&self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        let mut regions = self.regions.write();
        let gone: Vec<_> = regions
            .by_start
            .values()
            .filter(|r| r.start() >= addr && r.end() <= end)
            .map(|r| (r.start(), r.id()))
            .collect();
        for (start, id) in gone {
            regions.by_start.remove(&start);
            regions.by_id.remove(&id);
        }
    }
}
