//! Staged pages: pages a refused take left out of the program, held by the page source.
//!
//! A take moves a folio's pages out of the program one after another; a page the kernel
//! will not move (shared with a forked child, or pinned) stops it part way, and the pages
//! already out go back. While an event is unread the kernel refuses that too, and the page
//! source cannot wait for the reader, which may be waiting for the page-table lock the
//! reclaimer holds. Those pages stay where the source put them (the page source's rule 5),
//! and the engine owns them from then on, as it owns a swapped page:
//!
//! ```text
//!   Resident --take refused, pages held (reclaim)--> Staged
//!   Staged --fault on it, or unstage_all after events--> Resident   (source: unstage)
//!   Staged --REMOVE, UNMAP, exit-----------------------> gone       (source: drop_staged)
//!   Staged --REMAP-------------------------------------> Staged, at the new address
//!   Staged --fork: the child's copy--------------------> Resident in the child, its data
//!                                                         copied in (source: read_staged)
//! ```
//!
//! A staged entry is always order 0 (a large folio is split when its take is refused), so
//! each page is settled on its own. Its LRU record stays, isolated: the page still takes
//! memory (in the source's staging), so it stays charged as resident, and reclaim, which
//! takes only what is on the lists and re-validates `Pte::Resident` under the lock, never
//! meets it. Each page's place in the source is kept here, by record, and is settled
//! exactly once, under the page's page-table lock: whoever finds the entry still staged
//! there settles it.
//!
//! Context: the list's lock is a leaf, taken under the page-table lock.

use crate::engine::Core;
use crate::lru::LruId;
use crate::page_source::{SourceError, StageLoc};
use crate::region::{Found, MmId, PageTable, Pte, Region};
use crate::stats::Stats;
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering};
use crate::PAGE_SIZE;
use std::collections::BTreeMap;

/// Tries of a staged page's copy into a forked child while its address space changes.
const CHILD_MAP_TRIES: u32 = 32;

/// Every staged page's place in its page source, by its record.
#[derive(Debug, Default)]
pub(crate) struct StagedPages {
    /// By the record's raw id: ordered, so a pass over them is the same from run to run.
    places: Mutex<BTreeMap<u64, StageLoc>>,
    /// The list's length, for a check without the lock.
    count: AtomicU64,
    /// Fault injection (tests): while set, [`Core::unstage_all`] puts nothing back.
    hold: AtomicBool,
}

impl StagedPages {
    /// Pages staged now.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn insert(&self, id: LruId, at: StageLoc) {
        let mut places = self.places.lock();
        places.insert(id.to_raw(), at);
        self.count.store(places.len() as u64, Ordering::Relaxed);
    }

    fn remove(&self, id: LruId) -> Option<StageLoc> {
        let mut places = self.places.lock();
        let at = places.remove(&id.to_raw());
        self.count.store(places.len() as u64, Ordering::Relaxed);
        at
    }

    fn get(&self, id: LruId) -> Option<StageLoc> {
        self.places.lock().get(&id.to_raw()).copied()
    }

    fn ids(&self) -> Vec<LruId> {
        self.places.lock().keys().map(|&raw| LruId::from_raw(raw)).collect()
    }

    /// Whether `id` is listed (invariant checks).
    pub(crate) fn contains(&self, id: LruId) -> bool {
        self.places.lock().contains_key(&id.to_raw())
    }

    /// Fault injection for tests: while `hold` is set, staged pages are put back only by a
    /// fault on them.
    pub(crate) fn set_hold(&self, hold: bool) {
        self.hold.store(hold, Ordering::Relaxed);
    }
}

/// A staged page's data, copied for a forked child ([`Core::staged_for_child`]).
pub type StagedCopy = Vec<(u64, Box<[u8]>)>;

impl Core {
    /// Under the PTL, after a take of the pages from `first` refused with `pages` of them
    /// held at `at`: each of `ids` (the records of pages `first..`, each order 0, isolated)
    /// below `pages` becomes staged; the others go back on the lists.
    pub(crate) fn stage(
        &self,
        pt: &mut PageTable<'_>,
        first: u64,
        ids: &[LruId],
        at: StageLoc,
        pages: u32,
    ) {
        for (i, &id) in ids.iter().enumerate() {
            if i < pages as usize {
                pt.set(first + i as u64, 0, Pte::Staged(id));
                self.staged.insert(id, at.page(i as u64));
            } else {
                self.lru.putback(id, false);
            }
        }
        Stats::add(&self.stats.counters.pages_staged, u64::from(pages).min(ids.len() as u64));
    }

    /// Puts the page at `index` of `region` back into the program if it is staged (as
    /// `expected`, if given); whether it did. `active`: the page goes back on the active
    /// list (a fault wanted it), else on the inactive one.
    ///
    /// # Errors
    /// The source's: [`SourceError::Retry`] while the address space changes (it stays
    /// staged, as on any error).
    pub(crate) fn unstage(
        &self,
        region: &Region,
        index: u64,
        expected: Option<LruId>,
        active: bool,
    ) -> Result<bool, SourceError> {
        let mut pt = region.lock_span(index);
        let Some(Found { pte: Pte::Staged(id), .. }) = pt.lookup(index) else { return Ok(false) };
        if expected.is_some_and(|expected| expected != id) {
            return Ok(false);
        }
        let at = self.staged.get(id).expect("a staged entry has a place");
        match region.source().unstage(at, region.addr_of(index)) {
            Ok(()) => {
                self.staged.remove(id);
                pt.set(index, 0, Pte::Resident(id));
                self.lru.putback(id, active);
                Stats::add(&self.stats.counters.pages_unstaged, 1);
                Ok(true)
            }
            Err(error) => {
                if !matches!(error, SourceError::Retry | SourceError::Gone) {
                    Stats::add(&self.stats.counters.unstage_failed, 1);
                }
                Err(error)
            }
        }
    }

    /// Puts back every staged page the source can put back now (the event reader calls it
    /// after applying what it read); stops at the first `Retry` (an event is unread again).
    /// Returns pages put back.
    pub(crate) fn unstage_all(&self) -> u64 {
        if self.staged.count() == 0 || self.staged.hold.load(Ordering::Relaxed) {
            return 0;
        }
        let mut done = 0;
        for id in self.staged.ids() {
            // Where the record says the page is; re-validated under the lock (a remap may
            // move it in between: then it waits for the next pass).
            let Some((owner, _)) = self.lru.get(id) else { continue };
            let Some(region) = self.region_by_id(owner.region) else { continue };
            match self.unstage(&region, owner.index, Some(id), false) {
                Ok(true) => done += 1,
                Ok(false) => {}
                Err(SourceError::Retry) => break,
                Err(_) => {}
            }
        }
        done
    }

    /// Under the PTL, a staged page dropped by the program (`id`'s entry already erased):
    /// its held copy goes. The caller drops the record and its charge.
    pub(crate) fn drop_staged(&self, pt: &PageTable<'_>, id: LruId) {
        if let Some(at) = self.staged.remove(id) {
            pt.region().source().drop_staged(at);
            Stats::add(&self.stats.counters.staged_dropped, 1);
        }
    }

    /// Under both PTLs, a fork's copy of staged page `index` of `parent` into the child,
    /// which has it missing (the kernel copied the page tables without it): copied in from
    /// the source's hold, a few tries while the child's address space changes (its events
    /// are read by the thread that runs this), else poisoned there: never zeros in its
    /// place.
    pub(crate) fn fork_staged(&self, parent: &Region, child: &Region, index: u64, id: LruId) {
        let Some(at) = self.staged.get(id) else { return };
        let mut page = vec![0u8; PAGE_SIZE];
        if !parent.source().read_staged(at, &mut page) {
            return; // back in the program, or a hole: the child's copy has it as it is
        }
        let addr = child.addr_of(index);
        Stats::add(&self.stats.counters.staged_to_children, 1);
        for _ in 0..CHILD_MAP_TRIES {
            match child.source().map(addr, &page) {
                Err(SourceError::Retry) => std::thread::yield_now(),
                Ok(_) => return,
                Err(_) => break,
            }
        }
        Stats::add(&self.stats.counters.staged_child_poisoned, 1);
        let _ = child.source().poison(addr, PAGE_SIZE as u64);
    }

    /// The data of every staged page of the engine's own address space still held, by
    /// address, for a child forked without the engine's knowledge: its copy of the engine
    /// holds them staged, its memory has them missing ([`Core::restore_staged_in_child`]).
    ///
    /// Context: the engine paused for the fork, so nothing stages or unstages meanwhile.
    pub(crate) fn staged_for_child(&self) -> StagedCopy {
        let mut copy = Vec::new();
        for id in self.staged.ids() {
            let Some((owner, _)) = self.lru.get(id) else { continue };
            let Some(region) = self.region_by_id(owner.region) else { continue };
            if region.mm() != MmId::DEFAULT {
                continue;
            }
            let pt = region.lock_span(owner.index);
            if pt.lookup(owner.index).map(|f| f.pte) != Some(Pte::Staged(id)) {
                continue;
            }
            let Some(at) = self.staged.get(id) else { continue };
            let mut page = vec![0u8; PAGE_SIZE].into_boxed_slice();
            if region.source().read_staged(at, &mut page) {
                copy.push((region.addr_of(owner.index), page));
            }
        }
        Stats::add(&self.stats.counters.staged_to_children, copy.len() as u64);
        copy
    }

    /// In a child forked without the engine's knowledge, once its regions are registered
    /// with its own source: the staged pages its copy of the engine inherited become
    /// resident, those `copy` holds data for mapped in first (the others are in its memory
    /// already, or were holes). The parent's places mean nothing here.
    pub(crate) fn restore_staged_in_child(&self, copy: &StagedCopy) {
        for id in self.staged.ids() {
            self.staged.remove(id);
            let Some((owner, _)) = self.lru.get(id) else { continue };
            let Some(region) = self.region_by_id(owner.region) else { continue };
            let mut pt = region.lock_span(owner.index);
            if pt.lookup(owner.index).map(|f| f.pte) != Some(Pte::Staged(id)) {
                continue;
            }
            let addr = region.addr_of(owner.index);
            if let Some((_, data)) = copy.iter().find(|(at, _)| *at == addr) {
                // The child's only thread, before its program runs: nothing changes its
                // address space, and a refusal is for good.
                if region.source().map(addr, data).is_err() {
                    Stats::add(&self.stats.counters.staged_child_poisoned, 1);
                    let _ = region.source().poison(addr, PAGE_SIZE as u64);
                }
            }
            pt.set(owner.index, 0, Pte::Resident(id));
            self.lru.putback(id, false);
        }
    }
}
