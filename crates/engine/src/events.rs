//! What programs do to their memory, as the page source reports it: dropping pages
//! (`MADV_DONTNEED`, the userfaultfd REMOVE event), unmapping them (UNMAP), moving them
//! (mremap, REMAP), forking (FORK) and exiting.
//!
//! Dropped pages read as zeros from then on, so their bookkeeping goes: a resident folio's
//! LRU record and budget charge, a swapped folio's page-table references (which frees its
//! slots, their pool copies and zero-map bits once nothing else refers to them), and the
//! shadows those slots held. A large folio cut by the range is split first, so the pages
//! outside keep theirs.
//!
//! A fork copies the parent's page tables into a new, unmanaged address space: each swapped
//! entry gains a reference (the slots live until both processes drop them), resident pages
//! and zero-page entries are the kernel's copy-on-write business. A remap moves entries
//! between page tables, splitting large folios whose alignment the move would break, and
//! updates each resident folio's LRU record (reclaim finds an isolated folio through it).
//! What the destination held is dropped first, as a remove drops it: mremap replaces the
//! destination's pages, and overwriting the entries leaked their records and slot
//! references.
//!
//! Races with work in flight resolve through the page table: a swap-in or page-out that
//! re-validates under the PTL after the entry went finds it gone and backs off, and the
//! slots it still pins are freed when it drops its swap cache folio.

use crate::engine::Core;
use crate::lru::FolioOwner;
use crate::page_source::PageSource;
use crate::region::{Found, MmId, PageTable, Pte, Region};
use crate::stats::Stats;
use crate::sync::Ordering;
use crate::{Error, PAGE_SIZE};
use slots::SwapEntry;
use std::sync::Arc;

const PAGE: u64 = PAGE_SIZE as u64;

impl Core {
    /// The regions of `mm` intersecting `[addr, end)`.
    fn regions_in(&self, mm: MmId, addr: u64, end: u64) -> Vec<Arc<Region>> {
        let regions = self.regions.read();
        regions.mms.get(&mm).map(|space| space.intersecting(addr, end)).unwrap_or_default()
    }

    /// Drops the bookkeeping of every page of `mm` in `[addr, addr + len)` (see the module
    /// documentation); if the range was `unmapped`, it is a hole of each region that
    /// outlives it ([`Region::add_hole`]).
    pub(crate) fn remove_range(&self, mm: MmId, addr: u64, len: u64, unmapped: bool) {
        let end = addr.saturating_add(len);
        for region in self.regions_in(mm, addr, end) {
            let first = region.index_of(addr.max(region.start()));
            let last = region.index_of(end.min(region.end()) - 1);
            if unmapped {
                region.add_hole(first, last + 1);
            }
            let freed = self.remove_pages(&region, first, last);
            for (entry, nr) in freed {
                self.swap_cache.clear_shadows(entry.offset(), nr);
            }
        }
    }

    /// See [`crate::Engine::drop_if_missing`].
    pub(crate) fn drop_if_missing(
        &self,
        mm: MmId,
        addr: u64,
        missing: impl FnOnce() -> bool,
    ) -> bool {
        let Ok(region) = self.region_of(mm, addr) else { return false };
        let index = region.index_of(addr);
        let freed = {
            let mut pt = region.lock_span(index);
            if !matches!(pt.lookup(index), Some(Found { pte: Pte::Resident(_), .. })) {
                return false;
            }
            if !missing() {
                return false;
            }
            let (freed, pages) = self.release_entries(&mut pt, index, index);
            Stats::add(&self.stats.counters.pages_removed, pages);
            freed
        };
        for (entry, nr) in freed {
            self.swap_cache.clear_shadows(entry.offset(), nr);
        }
        true
    }

    /// Under the PTL, drops the entries of pages `first..=last`; returns the swap entries
    /// whose references it dropped (their shadows go after the lock is released).
    fn remove_pages(&self, region: &Region, first: u64, last: u64) -> Vec<(SwapEntry, u64)> {
        let mut pt = region.lock();
        let (freed, pages) = self.release_entries(&mut pt, first, last);
        Stats::add(&self.stats.counters.pages_removed, pages);
        freed
    }

    /// Drops the entries of pages `first..=last` (a large folio sticking out is split
    /// first): a resident folio's record and charge, a swapped one's slot references, a
    /// zero-page entry's count.
    /// Returns the swap entries whose references went (their shadows are the caller's, once
    /// the lock is released) and the pages dropped. Caller holds the PTL.
    fn release_entries(
        &self,
        pt: &mut PageTable<'_>,
        first: u64,
        last: u64,
    ) -> (Vec<(SwapEntry, u64)>, u64) {
        self.split_edges(pt, first, last);
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
                    self.put_entry(entry, nr as u32);
                    freed.push((entry, nr));
                }
                Pte::ZeroMapped => {
                    self.zero_mapped_pages.fetch_sub(nr, Ordering::Relaxed);
                }
                Pte::Staged(id) => {
                    self.drop_staged(pt, id);
                    if self.lru.remove(id).is_some() {
                        self.budget.uncharge_resident(nr * PAGE);
                    }
                }
            }
        }
        (freed, pages)
    }

    /// Splits to order 0 any entry that sticks out of `[first, last]`.
    fn split_edges(&self, pt: &mut PageTable<'_>, first: u64, last: u64) {
        for found in pt.entries(first, last) {
            let end = found.first + (1 << found.order) - 1;
            if found.first < first || end > last {
                self.split_entry(pt, &found);
            }
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
            Pte::ZeroMapped => {
                pt.split(found.first, 0, |_, _| Pte::ZeroMapped);
            }
            Pte::Staged(_) => {} // always order 0 (`staged.rs`)
            Pte::Resident(id) => {
                // A stale id cannot happen: reclaim removes the record only after changing
                // the entry, under this same lock, and finds a folio a remap moved where
                // its record says it went (reclaim.rs).
                let ids = self.lru.split(id, 0, false).expect("a resident entry has a live record");
                pt.split(found.first, 0, |first, _| {
                    Pte::Resident(ids[(first - found.first) as usize])
                });
            }
        }
    }

    /// Forgets every region of `mm` lying wholly inside `[addr, addr + len)` (after its
    /// pages were removed).
    pub(crate) fn forget_regions_within(&self, mm: MmId, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        let mut regions = self.regions.write();
        let regions = &mut *regions;
        let Some(space) = regions.mms.get_mut(&mm) else { return };
        let gone: Vec<_> = space
            .by_start
            .values()
            .filter(|r| r.start() >= addr && r.end() <= end)
            .map(|r| (r.start(), r.id()))
            .collect();
        for (start, id) in gone {
            space.by_start.remove(&start);
            regions.by_id.remove(&id);
        }
    }

    /// See [`crate::Engine::fork`].
    pub(crate) fn fork(
        &self,
        parent: MmId,
        child_source: Arc<dyn PageSource>,
    ) -> Result<MmId, Error> {
        let parents: Vec<Arc<Region>> = {
            let regions = self.regions.read();
            let space = regions.mms.get(&parent).ok_or(Error::NoSuchMm { mm: parent.0 })?;
            space.by_start.values().cloned().collect()
        };
        let child = self.add_mm(child_source, false);
        for region in parents {
            self.add_region(child, region.start(), region.end() - region.start())?;
            let copy = self.region_of(child, region.start())?;
            self.fork_region(&region, &copy);
        }
        Ok(child)
    }

    /// Copies `parent`'s swapped entries into `child`, adding a reference to each slot.
    /// Lock order: the parent's PTL, then the child's (a new region nobody else can reach
    /// yet).
    fn fork_region(&self, parent: &Region, child: &Region) {
        let pt = parent.lock();
        let mut child_pt = child.lock();
        let mut pages = 0;
        for found in pt.entries(0, parent.nr_pages() - 1) {
            match found.pte {
                Pte::Swap(entry) => {
                    let nr = 1u32 << found.order;
                    if let Err(error) = self.storage.device.dup(entry, nr) {
                        panic!("page table held {entry:?} but the device refused a dup: {error}");
                    }
                    child_pt.set(found.first, found.order, found.pte);
                    pages += u64::from(nr);
                }
                Pte::Staged(id) => self.fork_staged(parent, child, found.first, id),
                Pte::Resident(_) | Pte::ZeroMapped => {}
            }
        }
        Stats::add(&self.stats.counters.fork_dup, pages);
    }

    /// See [`crate::Engine::exit_mm`].
    pub(crate) fn exit_mm(&self, mm: MmId) {
        let regions: Vec<(u64, u64)> = {
            let regions = self.regions.read();
            let Some(space) = regions.mms.get(&mm) else { return };
            space.by_start.values().map(|r| (r.start(), r.end())).collect()
        };
        for (start, end) in regions {
            self.remove_range(mm, start, end - start, false);
            self.forget_regions_within(mm, start, end - start);
        }
        if mm != MmId::DEFAULT {
            self.regions.write().mms.remove(&mm);
        }
    }

    /// See [`crate::Engine::remap`].
    pub(crate) fn remap(&self, mm: MmId, from: u64, to: u64, len: u64) -> Result<(), Error> {
        let source = self.region_of(mm, from)?;
        if len == 0 || from.checked_add(len).is_none_or(|end| end > source.end()) {
            return Err(Error::BadRegion { start: from, len, why: "remap source spans regions" });
        }
        let dest = match self.region_of(mm, to) {
            Ok(region) if to.checked_add(len).is_some_and(|end| end <= region.end()) => region,
            Ok(_) => {
                return Err(Error::BadRegion { start: to, len, why: "remap destination overlaps" })
            }
            Err(_) => {
                self.add_region(mm, to, len)?;
                self.region_of(mm, to)?
            }
        };
        let (first, last) = (source.index_of(from), source.index_of(from + len - 1));
        let shift = dest.index_of(to);
        let released = if Arc::ptr_eq(&source, &dest) {
            // Within one region (a region wider than the mapping moved: the LD_PRELOAD
            // shim's address windows). mremap never moves a range onto itself.
            if shift <= last && first <= shift + (last - first) {
                return Err(Error::BadRegion { start: to, len, why: "remap onto itself" });
            }
            let mut pt = source.lock();
            self.move_entries(&mut pt, None, first, last, shift, dest.id())
        } else {
            // Lock order between two regions: by id (both are only ever taken together
            // here).
            let (mut src_pt, mut dst_pt) = if source.id() < dest.id() {
                let s = source.lock();
                (s, dest.lock())
            } else {
                let d = dest.lock();
                (source.lock(), d)
            };
            self.move_entries(&mut src_pt, Some(&mut dst_pt), first, last, shift, dest.id())
        };
        for (entry, nr) in released {
            self.swap_cache.clear_shadows(entry.offset(), nr);
        }
        let whole = from == source.start() && from + len == source.end();
        if whole {
            self.forget_regions_within(mm, from, len);
        } else {
            source.add_hole(first, last + 1);
        }
        dest.fill_hole(shift, shift + (last - first) + 1);
        Ok(())
    }

    /// Moves the entries of pages `first..=last` of `src` to start at page `shift` of
    /// `dst` (region `dst_id`; `None`: the same page table, the ranges disjoint), splitting
    /// folios the move would cut or misalign. Whatever the destination held goes first, as
    /// a remove would take it (mremap replaces the destination's pages; a large folio cut
    /// by the destination's edge keeps its pages outside): returns the swap entries whose
    /// references went, for the caller to clear their shadows once the locks are released.
    /// Caller holds both PTLs.
    fn move_entries(
        &self,
        src: &mut PageTable<'_>,
        mut dst: Option<&mut PageTable<'_>>,
        first: u64,
        last: u64,
        shift: u64,
        dst_id: crate::lru::RegionId,
    ) -> Vec<(SwapEntry, u64)> {
        let dst_last = shift + (last - first);
        let (released, pages) = match dst.as_deref_mut() {
            Some(dst) => self.release_entries(dst, shift, dst_last),
            None => self.release_entries(src, shift, dst_last),
        };
        Stats::add(&self.stats.counters.remap_dest_released, pages);
        self.split_edges(src, first, last);
        for found in src.entries(first, last) {
            let at = found.first - first + shift;
            if !at.is_multiple_of(1 << found.order) {
                self.split_entry(src, &found);
            }
        }
        // Every entry leaves before any arrives: within one table the ranges are disjoint,
        // but erasing first keeps that from mattering.
        let moved = src.entries(first, last);
        for found in &moved {
            src.erase(found.first);
        }
        for found in moved {
            let at = found.first - first + shift;
            if let Pte::Resident(id) | Pte::Staged(id) = found.pte {
                let owner = FolioOwner { region: dst_id, index: at, order: found.order };
                assert!(self.lru.set_owner(id, owner), "a resident entry has a live record");
            }
            match dst.as_deref_mut() {
                Some(dst) => place(dst, at, &found),
                None => place(src, at, &found),
            }
        }
        released
    }
}

/// Sets a moved entry at page `at` of a destination emptied beforehand.
fn place(pt: &mut PageTable<'_>, at: u64, found: &Found) {
    debug_assert!(pt.range_is_empty(at, found.order), "remap over a live entry");
    pt.set(at, found.order, found.pte);
}
