//! The page-in path (ARCHITECTURE.md, "Page-in"), in order:
//!
//! 1. A fault arrives for an address; find its region (else [`Error::OutsideRegions`]).
//! 2. Under the PTL, read the page table: no entry → first touch; resident or a zero-page
//!    entry → spurious (someone mapped it; wake the faulter); swapped → swap-in. A read
//!    that maps the zero page maps it write-protected and uncharged when the source can
//!    (a zero-page entry); the first write to it comes as a write-protect fault
//!    ([`Core::handle_wp_fault`]), which makes the entry a resident folio first.
//! 3. Swap-in: choose the folio (the whole large folio when its slots are of one kind, else
//!    split the page-table entry and take one page, counted in `swpin_fallback`); make room
//!    in the budget; `add_or_get` in the swap cache. The winner pins the slots, reads the
//!    data (zero map → pool → device) and unlocks the folio; a loser waits on that folio.
//! 4. A shadow found at insertion is a refault: its distance decides activation.
//! 5. Map under the PTL, after re-validating that the page table still holds the same swap
//!    entry and that the folio is still in the swap cache for it (the slot may have been
//!    freed and reused while no lock was held: the seed's ABA race, and its variant where
//!    the slot comes back to the same page). A read of an all-zero folio maps the shared zero
//!    page.
//! 6. Drop the page-table reference (`put`); whoever mapped from the folio deletes it from
//!    the swap cache, which unpins and, at count 0, frees the slots (and their pool copies).
//!
//! **In place.** When the page source can write its pages in place
//! ([`crate::PageSource::fills_in_place`]: simulated memory) and the pool holds the data,
//! the winner skips the folio's buffer: under the PTL, after the same re-validation, it
//! reads the pool straight into the pages being mapped (the kernel decompresses into the
//! folio it maps: one copy, not two). The folio stays locked meanwhile and then unlocks
//! *Abandoned*, holding no data: a waiter looks again and finds the page resident, or (a
//! forked child sharing the slot) the slot still referenced and its pool copy intact, since
//! loads are not exclusive and the slot is freed only when the folio is deleted.
//!
//! Every step that finds the world changed returns [`Step::Again`] and the fault starts
//! over from step 2, at most [`MAX_FAULT_PASSES`] times.

use crate::config::LargeFolios;
use crate::engine::{Core, FaultOutcome};
use crate::lru::FolioOwner;
use crate::page_source::{Mapped, SourceError};
use crate::region::{Found, MmId, PageTable, Pte, Region};
use crate::stats::Stats;
use crate::swap_cache::{AddOrGet, Folio, Outcome, Unlock};
use crate::sync::Ordering;
use crate::workingset::Shadow;
use crate::{Error, MAX_ORDER, PAGE_SIZE};
use slots::SwapEntry;
use std::sync::Arc;

/// How many times a fault re-reads the page table after losing a race before it lets the
/// access retry instead (it faults again if the page is still missing).
pub(crate) const MAX_FAULT_PASSES: u32 = 8;

/// Zeros as large as the largest folio, for first-touch writes. Never written, so it stays
/// the kernel's shared zero page and costs no memory.
static ZERO_FOLIO: [u8; PAGE_SIZE << MAX_ORDER] = [0; PAGE_SIZE << MAX_ORDER];

/// What a page-in's pages become in a managed region's page table.
#[derive(Debug, Clone, Copy)]
struct MapAs {
    /// The zero page was mapped write-protected: a zero-page entry, uncharged.
    zero_mapped: bool,
    /// Else a resident folio, put on the active list if set.
    activate: bool,
    /// The caller holds the folio caching the slots, locked (see [`Core::finish_map`]).
    own_locked: bool,
}

/// The pages a swap-in is about, carried down its paths as the kernel carries a fault's
/// context in `struct vm_fault`: the region, the folio's first page and order, and the swap
/// entry of its first slot. Chosen once ([`Core::swapin_range`]); every later step
/// re-validates it under the page-table lock.
#[derive(Clone, Copy)]
pub(crate) struct SwapIn<'a> {
    pub(crate) region: &'a Region,
    pub(crate) first: u64,
    pub(crate) order: u32,
    pub(crate) entry: SwapEntry,
}

impl SwapIn<'_> {
    /// The page-table entry that still refers to these slots.
    fn found(&self) -> Found {
        Found { first: self.first, order: self.order, pte: Pte::Swap(self.entry) }
    }

    /// The pages' address and length in bytes.
    fn span(&self) -> (u64, u64) {
        (self.region.addr_of(self.first), bytes_of(self.order))
    }
}

/// A step of the fault: done, or look again.
pub(crate) enum Step {
    Done(FaultOutcome),
    Again,
}

pub(crate) const PAGE: u64 = PAGE_SIZE as u64;

fn bytes_of(order: u32) -> u64 {
    PAGE << order
}

/// Does a zero page mapped in `region` go in write-protected and uncharged (a managed
/// region whose page source can protect it)?
pub(crate) fn protects_zero(region: &Region) -> bool {
    region.managed() && region.source().protects_zero()
}

/// Maps the zero page over `len` bytes at `addr` of `region`, write-protected if `protect`.
/// Returns what the source did and whether the pages make a zero-page entry: only if it
/// mapped them now, protected (pages that were all present already are not known to be
/// zero, and are kept as resident).
fn map_zero_page(
    region: &Region,
    addr: u64,
    len: u64,
    protect: bool,
) -> Result<(Mapped, bool), SourceError> {
    if protect {
        let mapped = region.source().map_zero_protected(addr, len)?;
        Ok((mapped, mapped == Mapped::Done))
    } else {
        region.source().map_zero(addr, len).map(|mapped| (mapped, false))
    }
}

impl Core {
    /// Handles a fault at `addr` (see the module documentation).
    ///
    /// # Errors
    /// [`Error::OutsideRegions`]; [`Error::SwapIn`] when the data could not be read (the
    /// page was poisoned); [`Error::Source`] when the page source failed for good.
    ///
    /// Context: takes region, swap cache and device locks in turn; may block on a folio
    /// another thread is reading or writing, on backend I/O, and on direct reclaim.
    pub(crate) fn handle_fault(
        &self,
        mm: MmId,
        addr: u64,
        write: bool,
    ) -> Result<FaultOutcome, Error> {
        Stats::add(&self.stats.counters.pgfault, 1);
        let region = self.fault_region(mm, addr)?;
        let index = region.index_of(addr);
        for _ in 0..MAX_FAULT_PASSES {
            let found = region.lock_span(index).lookup(index);
            let step = match found {
                None => self.first_touch(&region, index, write)?,
                Some(Found { pte: Pte::Staged(_), .. }) => {
                    match self.unstage(&region, index, None, true) {
                        Ok(true) => Step::Done(FaultOutcome::Mapped),
                        Ok(false) => Step::Again,
                        Err(error) => self.source_failed(error)?,
                    }
                }
                Some(found) if found.pte.is_mapped() => {
                    Stats::add(&self.stats.counters.pgfault_spurious, 1);
                    region.source().wake(region.addr_of(index), PAGE);
                    Step::Done(FaultOutcome::Spurious)
                }
                Some(found) => self.swap_in(&region, index, found, write)?,
            };
            if let Step::Done(outcome) = step {
                return Ok(outcome);
            }
        }
        // Lost every race: let the access run again; it faults again if still missing.
        region.source().wake(region.addr_of(index), PAGE);
        Ok(FaultOutcome::Spurious)
    }

    /// Maps a page (or a folio of the configured order) that was never touched: the zero
    /// page for a read, zeroed memory for a write. In an unmanaged region (a forked child)
    /// the page is mapped and forgotten.
    fn first_touch(&self, region: &Region, index: u64, write: bool) -> Result<Step, Error> {
        let order = if region.managed() && self.wants_large(&region.touch_next, index) {
            self.config.folio_order
        } else {
            0
        };
        // A read maps the zero page, uncharged if the source can write-protect it.
        let protect = !write && protects_zero(region);
        if region.managed() && !protect {
            self.make_room(bytes_of(order));
        }
        let mut pt = region.lock_span(index);
        if pt.lookup(index).is_some() {
            return Ok(Step::Again);
        }
        let aligned = index & !((1u64 << order) - 1);
        let (first, order) = if order > 0
            && pt.range_is_empty(aligned, order)
            && !region.splits_mapping(aligned, 1 << order)
        {
            (aligned, order)
        } else {
            (index, 0)
        };
        let (addr, len) = (region.addr_of(first), bytes_of(order));
        let mapped = if write {
            region.source().map(addr, &ZERO_FOLIO[..len as usize]).map(|mapped| (mapped, false))
        } else {
            map_zero_page(region, addr, len, protect)
        };
        let zero_mapped = match mapped {
            Ok((_, zero_mapped)) => zero_mapped,
            Err(error) => return self.source_failed(error),
        };
        Stats::add(&self.stats.counters.pgfault_first_touch, 1);
        self.note_folio_end(&region.touch_next, first + (1 << order));
        if region.managed() {
            self.set_mapped(&mut pt, region, first, order, zero_mapped, false);
        }
        Ok(Step::Done(FaultOutcome::Mapped))
    }

    /// Records pages `[first, first + 2^order)` of a managed region as mapped, under the
    /// PTL: a zero-page entry, uncharged, if `zero_mapped` (the source mapped the zero page
    /// write-protected); else a resident folio, on the LRU and charged.
    pub(crate) fn set_mapped(
        &self,
        pt: &mut PageTable<'_>,
        region: &Region,
        first: u64,
        order: u32,
        zero_mapped: bool,
        activate: bool,
    ) {
        if zero_mapped {
            pt.set(first, order, Pte::ZeroMapped);
            Stats::add(&self.stats.counters.zero_mapped, 1 << order);
            self.zero_mapped_pages.fetch_add(1 << order, Ordering::Relaxed);
        } else {
            let id =
                self.lru.add(FolioOwner { region: region.id(), index: first, order }, activate);
            pt.set(first, order, Pte::Resident(id));
            self.budget.charge_resident(bytes_of(order));
        }
    }

    /// A write to a write-protected page at `addr` (see
    /// [`crate::Engine::handle_wp_fault_in`]): a zero-page entry becomes a resident folio,
    /// charged, then the protection of its pages is lifted, and the write goes through
    /// (allocating, as the kernel's copy-on-write of the zero page does). Any other page
    /// is only unprotected: lifting a protection changes no data.
    ///
    /// # Errors
    /// [`Error::OutsideRegions`]; [`Error::Source`] when the protection could not be lifted.
    ///
    /// Context: may reclaim (direct) before taking the PTL.
    pub(crate) fn handle_wp_fault(&self, mm: MmId, addr: u64) -> Result<FaultOutcome, Error> {
        Stats::add(&self.stats.counters.pgfault, 1);
        Stats::add(&self.stats.counters.pgfault_wp, 1);
        let region = self.fault_region(mm, addr)?;
        let index = region.index_of(addr);
        let zero = region.lock_span(index).lookup(index).filter(|f| f.pte == Pte::ZeroMapped);
        if let Some(found) = zero {
            self.make_room(bytes_of(found.order));
        }
        let mut pt = region.lock_span(index);
        let (first, order) = match pt.lookup(index) {
            Some(Found { first, order, pte: Pte::ZeroMapped }) => {
                // A large entry becomes resident whole only under the large-folio policy
                // (a write continuing a sequential run, or always); else only the written
                // page does, as the kernel copies one page on a write to the zero page,
                // and the rest stay zero pages, uncharged.
                let (first, order) = if order > 0 && !self.wants_large(&region.touch_next, index) {
                    pt.split(first, 0, |_, _| Pte::ZeroMapped);
                    (index, 0)
                } else {
                    (first, order)
                };
                self.note_folio_end(&region.touch_next, first + (1 << order));
                self.zero_mapped_pages.fetch_sub(1 << order, Ordering::Relaxed);
                Stats::add(&self.stats.counters.zero_mapped_written, 1 << order);
                self.set_mapped(&mut pt, &region, first, order, false, false);
                (first, order)
            }
            _ => (index, 0),
        };
        match region.source().unprotect(region.addr_of(first), bytes_of(order)) {
            Ok(()) => Ok(FaultOutcome::Mapped),
            Err(error) => match self.source_failed(error)? {
                Step::Done(outcome) => Ok(outcome),
                Step::Again => unreachable!("a source failure is an outcome"),
            },
        }
    }

    /// Turns a page-source failure into the fault's outcome.
    fn source_failed(&self, error: SourceError) -> Result<Step, Error> {
        match error {
            SourceError::Retry | SourceError::Staged { .. } => Ok(Step::Done(FaultOutcome::Retry)),
            SourceError::Gone => Ok(Step::Done(FaultOutcome::Gone)),
            SourceError::Failed(why) => {
                Stats::add(&self.stats.counters.map_error, 1);
                Err(Error::Source(why))
            }
        }
    }

    /// Steps 3-6 for a swapped page.
    fn swap_in(
        &self,
        region: &Region,
        index: u64,
        found: Found,
        write: bool,
    ) -> Result<Step, Error> {
        let Some(at) = self.swapin_range(region, index, &found) else {
            return Ok(Step::Again);
        };
        let (order, entry) = (at.order, at.entry);
        self.make_room(if region.managed() { 2 } else { 1 } * bytes_of(order));
        let folio = Folio::new_locked(entry.offset(), order);
        let device = &self.storage.device;
        let pin = || device.try_pin_cache_range(entry, 1 << order).is_ok();
        match self.cache_folio(&folio, pin) {
            AddOrGet::Added(shadow) => {
                // Read ahead before mapping the faulting page, whose map wakes the faulting
                // thread: woken first, a thread walking through memory ran into the window
                // page by page while it was being read, a fault and two switches a page.
                // A zero page's neighbours go in after it, the faulting thread woken: a
                // scattered reader has no use for them at once.
                let mut zero_around = false;
                if order == 0 && region.managed() {
                    self.readahead(region, index);
                    zero_around = self.storage.zeromap.test(entry.offset());
                }
                let in_place = (region.managed() && region.source().fills_in_place())
                    .then(|| self.swapin_in_place(at, &folio, shadow))
                    .flatten();
                let step =
                    in_place.unwrap_or_else(|| self.swapin_read_and_map(at, &folio, shadow, write));
                if zero_around {
                    self.zero_around(region, index);
                }
                step
            }
            AddOrGet::Exists(existing) => self.swapin_wait_and_map(at, &existing, write),
            AddOrGet::Conflict => {
                // Part of the large folio is in flight on its own: take this page alone.
                Stats::add_order(&self.stats.per_order.swpin_fallback, order, 1);
                self.split_swap_entry(region, &found);
                Ok(Step::Again)
            }
            AddOrGet::Stale => {
                Stats::add(&self.stats.counters.swapin_raced, 1);
                Ok(Step::Again)
            }
        }
    }

    /// Chooses what to swap in for a fault at `index`: the whole large folio when its slots
    /// are of one kind, else one page (splitting the page-table entry). `None` if the entry
    /// changed meanwhile.
    fn swapin_range<'a>(
        &self,
        region: &'a Region,
        index: u64,
        found: &Found,
    ) -> Option<SwapIn<'a>> {
        let Pte::Swap(entry) = found.pte else { return None };
        if found.order == 0 {
            self.note_folio_end(&region.swapin_next, found.first + 1);
            return Some(SwapIn { region, first: found.first, order: 0, entry });
        }
        if self.config.large_swapin
            && self.wants_large(&region.swapin_next, index)
            && self.storage.uniform(entry, 1 << found.order)
        {
            self.note_folio_end(&region.swapin_next, found.first + (1 << found.order));
            return Some(SwapIn { region, first: found.first, order: found.order, entry });
        }
        self.note_folio_end(&region.swapin_next, index + 1);
        Stats::add_order(&self.stats.per_order.swpin_fallback, found.order, 1);
        if !self.split_swap_entry(region, found) {
            return None;
        }
        Some(SwapIn { region, first: index, order: 0, entry: found.swap_entry_of(index)? })
    }

    /// Whether a fault at `index` takes a large folio under the policy
    /// ([`crate::LargeFolios`]), given where the last one of its kind ended (`next`):
    /// always, or only within one folio forward of it. A hint read without a lock: racing
    /// faults at worst choose the other size, which is correct either way.
    fn wants_large(&self, next: &std::sync::atomic::AtomicU64, index: u64) -> bool {
        match self.config.large_folios {
            LargeFolios::Always => true,
            LargeFolios::Sequential => {
                let next = next.load(Ordering::Relaxed);
                index >= next && index - next < 1 << self.config.folio_order
            }
        }
    }

    /// Records where a fault's folio ended, for the next [`Core::wants_large`]. Only the
    /// sequential policy reads it: under `Always` the fault path writes no shared line.
    fn note_folio_end(&self, next: &std::sync::atomic::AtomicU64, end: u64) {
        if self.config.large_folios == LargeFolios::Sequential {
            next.store(end, Ordering::Relaxed);
        }
    }

    /// Splits a swapped multi-index entry into order-0 entries, if it is still there.
    fn split_swap_entry(&self, region: &Region, found: &Found) -> bool {
        let mut pt = region.lock_span(found.first);
        if pt.lookup(found.first) != Some(*found) {
            return false;
        }
        pt.split(found.first, 0, |first, old| {
            Pte::Swap(old.swap_entry_of(first).expect("a swapped entry"))
        });
        true
    }

    /// The winner of `add_or_get`: read the data, unlock the folio, map it, delete it.
    pub(crate) fn swapin_read_and_map(
        &self,
        at: SwapIn<'_>,
        folio: &Arc<Folio>,
        shadow: Option<Shadow>,
        write: bool,
    ) -> Result<Step, Error> {
        let entry = at.entry;
        let bytes = folio.len_bytes() as u64;
        Stats::add(&self.stats.counters.pgmajfault, 1);
        self.budget.charge_swapcache(bytes);
        folio.charge();
        let read = folio.with_data_mut(|data| self.storage.read(entry, data, &self.stats));
        let zero = read.as_ref().is_ok_and(|all_zero| *all_zero);
        folio.unlock(match &read {
            Ok(zero) => Unlock::Uptodate { zero: *zero },
            Err(why) => Unlock::Failed(why.clone()),
        });
        let step = match read {
            Ok(_) => {
                let activate = shadow.is_some_and(|s| self.refault(s, at.order));
                self.map_from_folio(at, folio, zero && !write, activate)
            }
            Err(why) => self.fail_swapin(at, why),
        };
        self.delete_folio(folio, None);
        step
    }

    /// The winner of `add_or_get`, for a source that fills in place (module documentation,
    /// "In place"): under the PTL, read the pool straight into the pages; then delete the
    /// folio, which holds no data, and unlock it Abandoned. `None` when the pool does not
    /// hold the data (a zero page, a page on the device): nothing was done, the folio is
    /// still locked, and the caller reads it the usual way (no device I/O under the PTL).
    fn swapin_in_place(
        &self,
        at: SwapIn<'_>,
        folio: &Arc<Folio>,
        shadow: Option<Shadow>,
    ) -> Option<Result<Step, Error>> {
        let (region, order, entry) = (at.region, at.order, at.entry);
        let mut pt = region.lock_span(at.first);
        // As in `map_from_folio`; our locked folio pins the slots, so the pool's copy is the
        // slot's current data for as long as the page table still refers to it.
        let step = if pt.lookup(at.first) != Some(at.found()) {
            Stats::add(&self.stats.counters.swapin_raced, 1);
            Ok(Step::Again)
        } else {
            let (mut failed, mut missed) = (None, false);
            let (addr, len) = at.span();
            let mapped = region.source().map_with(addr, len, &mut |folio| match self
                .storage
                .pool_read_folio(entry, folio, &self.stats)
            {
                Ok(held) => {
                    missed = !held;
                    held
                }
                Err(why) => {
                    failed = Some(why);
                    false
                }
            });
            if missed {
                return None;
            }
            Stats::add(&self.stats.counters.pgmajfault, 1);
            if let Some(why) = failed {
                drop(pt);
                folio.unlock(Unlock::Failed(why.clone()));
                let result = self.fail_swapin(at, why);
                self.delete_folio(folio, None);
                return Some(result);
            }
            match mapped {
                Ok(mapped) => {
                    let activate = shadow.is_some_and(|s| self.refault(s, order));
                    let mapped = mapped.expect("a refused page is a miss or a failure");
                    let how = MapAs { zero_mapped: false, activate, own_locked: true };
                    Ok(self.finish_map(&mut pt, at, mapped, how))
                }
                Err(error) => self.source_failed(error),
            }
        };
        drop(pt);
        self.delete_folio(folio, None);
        folio.unlock(Unlock::Abandoned);
        Some(step)
    }

    /// A loser of `add_or_get`: wait for the folio, then map from it.
    fn swapin_wait_and_map(
        &self,
        at: SwapIn<'_>,
        folio: &Arc<Folio>,
        write: bool,
    ) -> Result<Step, Error> {
        let (result, waited) = folio.wait_unlocked();
        if waited {
            Stats::add(&self.stats.counters.swapcache_wait, 1);
        }
        let step = match result {
            Outcome::Uptodate { zero } => self.map_from_folio(at, folio, zero && !write, false),
            Outcome::Failed(why) => self.fail_swapin(at, why.to_string()),
            // Its owner gave up before it held data; the data is where it was: look again.
            Outcome::Abandoned => Ok(Step::Again),
        };
        // The folio's owner deletes it (a page-in after mapping, a page-out leaving a
        // shadow), except a failed page-out's: that folio may hold the only copy, so it
        // goes only once no page refers to its slots. A waiter deletes nothing else: after
        // a map retry, or with a forked child still referring to the slots, deleting it
        // lost the data (simulator finding E).
        self.release_if_unreferenced(folio);
        step
    }

    /// Drops page-table references to the `nr` slots from `entry` (the kernel's
    /// `swap_free`), then deletes any folio still caching them once nothing refers to its
    /// slots (the kernel's `free_swap_and_cache`): a folio a failed page-out left as the
    /// only copy of its data lives exactly as long as some page still needs it.
    ///
    /// Context: may hold a PTL (PTL → shard → cluster).
    pub(crate) fn put_entry(&self, entry: SwapEntry, nr: u32) {
        self.device_op(self.storage.device.put(entry, nr), "put", entry);
        for folio in self.swap_cache.folios_in(entry.offset(), u64::from(nr)) {
            self.release_if_unreferenced(&folio);
        }
    }

    /// Deletes `folio` if its I/O is over and no page table refers to any of its slots.
    /// Returns whether it did. Context: as [`Core::put_entry`].
    pub(crate) fn release_if_unreferenced(&self, folio: &Arc<Folio>) -> bool {
        if folio.is_locked() {
            return false; // its owner decides
        }
        let device = &self.storage.device;
        let first = SwapEntry::new(device.swap_type(), folio.first_slot());
        // A count of 0 cannot rise again: only a reference can be duplicated (fork).
        let referenced =
            (0..1u64 << folio.order()).any(|i| device.count(first.add(i)).is_ok_and(|c| c > 0));
        if referenced || !self.delete_folio(folio, None) {
            return false;
        }
        Stats::add(&self.stats.counters.swapcache_released, 1);
        true
    }

    /// Checks the result of a slot operation that cannot fail while the page tables and
    /// the swap cache are consistent. A failed discard of a freed cluster is the one
    /// operating condition: the operation itself completed; count it and go on.
    ///
    /// # Panics
    /// On any other error: the engine's bookkeeping is broken.
    pub(crate) fn device_op(&self, result: Result<(), slots::Error>, what: &str, entry: SwapEntry) {
        match result {
            Ok(()) => {}
            Err(slots::Error::Backend(_)) => Stats::add(&self.stats.counters.swap_discard_error, 1),
            Err(error) => panic!("{what} of {entry:?} refused by the swap device: {error}"),
        }
    }

    /// Adds `folio` to the swap cache unless its slots hold one already (or `pin` refuses),
    /// and counts it there: [`Core::delete_folio`] uncounts it.
    pub(crate) fn cache_folio(&self, folio: &Arc<Folio>, pin: impl FnOnce() -> bool) -> AddOrGet {
        let added = self.swap_cache.add_or_get(folio, pin);
        if matches!(added, AddOrGet::Added(_)) {
            self.nr_swapcached.fetch_add(1, Ordering::Relaxed);
        }
        added
    }

    /// As [`Core::cache_folio`], for slots fresh from the allocator: any shadow there is
    /// from an earlier use, and no folio can be.
    pub(crate) fn cache_new_folio(&self, folio: &Arc<Folio>) {
        let _stale_shadow = self.swap_cache.add_new(folio);
        self.nr_swapcached.fetch_add(1, Ordering::Relaxed);
    }

    /// Deletes a folio from the swap cache if it is still there, leaving `shadow` (or
    /// nothing), unpinning its slots in the same critical section, and uncharging it.
    /// Returns whether this call deleted it.
    pub(crate) fn delete_folio(&self, folio: &Arc<Folio>, shadow: Option<Shadow>) -> bool {
        let device = &self.storage.device;
        let first = SwapEntry::new(device.swap_type(), folio.first_slot());
        let nr = 1u32 << folio.order();
        let deleted = self.swap_cache.delete(folio, shadow, || {
            self.device_op(device.put_cache(first, nr), "unpin", first);
        });
        if deleted {
            // Whoever deletes the folio drops its charge, if it carries one.
            self.nr_swapcached.fetch_sub(1, Ordering::Relaxed);
            if folio.take_charge() {
                self.budget.uncharge_swapcache(folio.len_bytes() as u64);
            }
        }
        deleted
    }

    /// Step 4: a refault of an evicted page. Returns whether to activate it.
    fn refault(&self, shadow: Shadow, order: u32) -> bool {
        let c = &self.stats.counters;
        // The whole LRU, not the active list alone (workingset.rs: without access bits
        // nothing is activated by scanning, and an empty active list activates nothing).
        let counts = self.lru.counts();
        let refault = self.workingset.refault(shadow, counts.active_pages + counts.inactive_pages);
        Stats::add(&c.workingset_refault_anon, 1 << order);
        if refault.activate {
            Stats::add(&c.workingset_activate_anon, 1 << order);
            self.workingset.age(1 << order);
        }
        if refault.restore {
            Stats::add(&c.workingset_restore_anon, 1 << order);
        }
        refault.activate
    }

    /// Step 5: under the PTL, re-validate and map `at`'s pages from `folio`.
    pub(crate) fn map_from_folio(
        &self,
        at: SwapIn<'_>,
        folio: &Folio,
        zero_page: bool,
        activate: bool,
    ) -> Result<Step, Error> {
        let (region, entry) = (at.region, at.entry);
        let mut pt = region.lock_span(at.first);
        if !self.maps_from(&pt, &at, folio) {
            Stats::add(&self.stats.counters.swapin_raced, 1);
            return Ok(Step::Again);
        }
        let (addr, len) = at.span();
        let mapped = if zero_page {
            map_zero_page(region, addr, len, protects_zero(region))
        } else {
            let skip = ((entry.offset() - folio.first_slot()) * PAGE) as usize;
            let data = |data: &[u8]| region.source().map(addr, &data[skip..skip + len as usize]);
            folio.with_data(data).map(|mapped| (mapped, false))
        };
        match mapped {
            Ok((mapped, zero_mapped)) => {
                let how = MapAs { zero_mapped, activate, own_locked: false };
                Ok(self.finish_map(&mut pt, at, mapped, how))
            }
            Err(error) => self.source_failed(error),
        }
    }

    /// Step 5's re-validation, under the PTL: the page table still refers to `at.entry` at
    /// `at.first`, and `folio` is still the swap cache's folio for it. While the PTL is held
    /// the page table's reference keeps the slot from being freed, so a folio still in the
    /// cache holds the slot's current data. A folio deleted meanwhile may be a previous life
    /// of a reused slot (the ABA race): never map from it.
    pub(crate) fn maps_from(&self, pt: &PageTable<'_>, at: &SwapIn<'_>, folio: &Folio) -> bool {
        let same_entry = pt.lookup(at.first) == Some(at.found());
        same_entry && (crate::hooks::skip_revalidation() || self.swap_cache.contains(folio))
    }

    /// Step 5's bookkeeping under the PTL, once `at`'s pages are mapped: the page
    /// table and the LRU take the folio (a forked child's page is the kernel's from now
    /// on), the budget its bytes, and the page table's reference to the slots is dropped.
    /// `AlreadyPresent` (someone mapped first) is counted and what is there stays.
    ///
    /// `how.own_locked`: the caller holds, locked, the one folio caching these slots (the
    /// in-place page-in) and deletes it next, so dropping the reference needs no look for
    /// cached folios to release: [`Core::put_entry`] would find only that one, and a locked
    /// folio is its owner's to delete.
    fn finish_map(
        &self,
        pt: &mut PageTable<'_>,
        at: SwapIn<'_>,
        mapped: Mapped,
        how: MapAs,
    ) -> Step {
        let SwapIn { region, first, order, entry } = at;
        let MapAs { zero_mapped, activate, own_locked } = how;
        if mapped == Mapped::AlreadyPresent {
            Stats::add(&self.stats.counters.map_error, 1);
        }
        if region.managed() {
            self.set_mapped(pt, region, first, order, zero_mapped, activate);
        } else {
            // A forked child's page: served, then the kernel's like any other child page.
            pt.erase(first);
        }
        if own_locked {
            self.device_op(self.storage.device.put(entry, 1 << order), "put", entry);
        } else {
            self.put_entry(entry, 1 << order);
        }
        Stats::add_order(&self.stats.per_order.swpin, order, 1);
        Step::Done(FaultOutcome::Mapped)
    }

    /// The data of `at`'s pages could not be read:
    /// poison the pages so the access fails loudly, and report. The swap entries stay (a
    /// later retry may read them). Re-validated under the PTL like any step after an
    /// unlock: only pages still referring to the slots are poisoned. A page the program
    /// dropped meanwhile (or whose entry moved) is left alone; poisoning it left a present
    /// page with no entry, and a later large first touch over it mapped nothing yet marked
    /// the folio resident: its accesses faulted for ever (simulator finding G). If no page
    /// still refers to the slots, the fault looks again.
    fn fail_swapin(&self, at: SwapIn<'_>, why: String) -> Result<Step, Error> {
        let SwapIn { region, first, order, entry } = at;
        let pt = region.lock_span(first);
        let mut poisoned = 0;
        for index in first..first + (1u64 << order) {
            let current = pt.lookup(index).and_then(|found| found.swap_entry_of(index));
            if current == Some(entry.add(index - first)) {
                // If poisoning fails too, the faulting thread stays blocked until the range
                // goes away; the error below is still reported to the frontend, which must
                // not retry.
                let _ = region.source().poison(region.addr_of(index), PAGE);
                poisoned += 1;
            }
        }
        if poisoned == 0 {
            return Ok(Step::Again);
        }
        Err(Error::SwapIn { addr: region.addr_of(first), why })
    }

    /// Whether page `index` is mapped (resident, or the zero page): a fault will not come
    /// there.
    pub(crate) fn is_mapped(&self, region: &Region, index: u64) -> bool {
        region.lock_span(index).lookup(index).is_some_and(|found| found.pte.is_mapped())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem_source::MemorySource;
    use crate::{Engine, EngineConfig};

    const BASE: u64 = 1 << 30;

    fn engine() -> (Engine, Arc<MemorySource>) {
        let source = Arc::new(MemorySource::new(BASE, 64));
        let dyn_source: Arc<dyn crate::PageSource> = source.clone();
        let config =
            EngineConfig { budget_bytes: 1 << 20, background_reclaim: false, ..Default::default() };
        let engine = Engine::new(config, dyn_source).unwrap();
        engine.add_region(BASE, 64 * PAGE).unwrap();
        (engine, source)
    }

    // postmortem: the stress test (order-2 folios, pages of one folio owned by different
    // threads) read a page's old version after it had been overwritten with zeros. A fault
    // waited on folio F for slot E; another thread mapped F, freed E, wrote new data, and
    // reclaim paged the folio out again *to the same slot E*. The waiter woke, found the page
    // table saying Swap(E) again, and mapped F's stale data. Re-validating the page-table
    // entry is not enough after a slot can come back to the same page: the folio must still
    // be the swap cache's folio for the entry (the kernel's folio_matches_swap_entry).
    #[test]
    fn a_folio_no_longer_in_the_swap_cache_is_never_mapped() {
        let (engine, source) = engine();
        let data = vec![7u8; PAGE_SIZE];
        source.write(&engine, BASE, &data).unwrap();
        assert_eq!(engine.pageout(BASE, PAGE).unwrap(), 1);
        let core = &engine.core;
        let region = core.region_of(crate::region::MmId::DEFAULT, BASE).unwrap();
        let found = region.lock().lookup(0).unwrap();
        let Pte::Swap(entry) = found.pte else { panic!("page not swapped: {found:?}") };
        // A folio for the same entry that the swap cache does not hold: an earlier life.
        let stale = Folio::new_locked(entry.offset(), 0);
        stale.with_data_mut(|d| d.fill(0xee));
        stale.unlock(Unlock::Uptodate { zero: false });
        let at = SwapIn { region: &region, first: 0, order: 0, entry };
        let step = core.map_from_folio(at, &stale, false, false).unwrap();
        assert!(matches!(step, Step::Again), "a stale folio was mapped");
        let mut buf = vec![0u8; PAGE_SIZE];
        source.read(&engine, BASE, &mut buf).unwrap();
        assert_eq!(buf, data);
        engine.check_invariants();
    }
}

#[cfg(all(test, not(loom)))]
mod large_folio_policy {
    use super::*;
    use crate::mem_source::MemorySource;
    use crate::{Engine, EngineConfig, LargeFolios};

    const BASE: u64 = 1 << 30;
    const PAGES: u64 = 256;

    fn engine(policy: LargeFolios) -> (Engine, Arc<MemorySource>) {
        let source = Arc::new(MemorySource::new(BASE, PAGES));
        let dyn_source: Arc<dyn crate::PageSource> = source.clone();
        let config = EngineConfig {
            budget_bytes: 4 << 20,
            folio_order: 4,
            large_folios: policy,
            readahead_max_pages: 0,
            background_reclaim: false,
            ..Default::default()
        };
        let engine = Engine::new(config, dyn_source).unwrap();
        engine.add_region(BASE, PAGES * PAGE).unwrap();
        (engine, source)
    }

    fn page(index: u64) -> Vec<u8> {
        vec![(index % 251) as u8 + 1; PAGE_SIZE]
    }

    /// Scattered pages (none within a folio forward of the one before), then pages 128..256
    /// in order: under `Sequential` the scattered ones take one page each and the walk takes
    /// whole folios; `Always` takes a folio everywhere. Every page reads back.
    fn touch(engine: &Engine, source: &MemorySource) -> Vec<u64> {
        let scattered = [100u64, 3, 77, 40, 21, 60];
        for &index in &scattered {
            source.write(engine, BASE + index * PAGE, &page(index)).unwrap();
        }
        for index in 128..PAGES {
            source.write(engine, BASE + index * PAGE, &page(index)).unwrap();
        }
        scattered.to_vec()
    }

    fn check(engine: &Engine, source: &MemorySource, indices: impl Iterator<Item = u64>) {
        let mut buf = vec![0u8; PAGE_SIZE];
        for index in indices {
            source.read(engine, BASE + index * PAGE, &mut buf).unwrap();
            assert_eq!(buf, page(index), "page {index}");
        }
    }

    #[test]
    fn sequential_takes_large_folios_only_while_faults_walk_forward() {
        let (engine, source) = engine(LargeFolios::Sequential);
        let scattered = touch(&engine, &source);
        let first_touches = engine.stats().counters.pgfault_first_touch;
        // Six scattered pages one by one; the walk from 128: page 128 follows nothing (one
        // page), 129..143 do not start an untouched aligned folio (one page each), then
        // 144, 160, ..., 240 whole (7 folios).
        assert_eq!(first_touches, 6 + 16 + 7, "first touches");
        check(&engine, &source, scattered.iter().copied().chain(128..PAGES));

        // Page out everything, then fault the scattered pages back: their large folios
        // are split, one page each. Then walk 144..256: 144 follows nothing, so its folio
        // is split and goes page by page; 160, 176, ..., 240 come back whole (6 folios).
        assert_eq!(engine.pageout(BASE, PAGES * PAGE).unwrap(), 6 + 128);
        let before = engine.stats();
        check(&engine, &source, scattered.iter().copied());
        let after = engine.stats();
        assert_eq!(after.per_order.swpin[0] - before.per_order.swpin[0], 6, "one page each");
        assert_eq!(after.per_order.swpin[4], before.per_order.swpin[4], "no folio taken whole");
        check(&engine, &source, 144..PAGES);
        let walked = engine.stats();
        assert_eq!(walked.per_order.swpin[4] - after.per_order.swpin[4], 6, "the walk's folios");
        assert_eq!(walked.per_order.swpin[0] - after.per_order.swpin[0], 16, "144..160");
        engine.check_invariants();
    }

    #[test]
    fn always_takes_a_large_folio_wherever_the_aligned_range_is_untouched() {
        let (engine, source) = engine(LargeFolios::Always);
        let scattered = touch(&engine, &source);
        // 100 → folio 96..112, 3 → 0..16, 77 → 64..80, 40 → 32..48, 21 → 16..32,
        // 60 → 48..64; the walk: 8 folios.
        assert_eq!(engine.stats().counters.pgfault_first_touch, 6 + 8);
        check(&engine, &source, scattered.iter().copied().chain(128..PAGES));
        engine.check_invariants();
    }
}
