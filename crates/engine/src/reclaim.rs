//! The page-out path and reclaim (ARCHITECTURE.md, "Page-out"), in order:
//!
//! 1. Reclaim isolates cold folios from the inactive tail (the background reclaimer when
//!    free budget drops below the low watermark, until it reaches high; the faulting thread
//!    itself below min). A referenced folio gets a second chance on the active list. Half a
//!    batch comes from the tail; the victims' cold order-0 neighbours fill the rest
//!    (`add_cold_neighbours`), and neighbours go out as runs (`page_out_run`: step 4 for
//!    all of them under one PTL hold with one take, so one TLB flush).
//! 2. Allocate 2^order aligned slots; for order > 0 on failure, count `swpout_fallback`,
//!    split the folio (LRU record and page-table entry) and page the pieces out as order 0.
//! 3. Insert a locked folio in the swap cache for the new slots: racing faults find it.
//! 4. Under the PTL, check the folio is still what was isolated, point the page table at
//!    the swap entry (one reference per slot), and take the pages out of the program
//!    (`PageSource::take`: a writer faults and waits on the folio from now on).
//! 5. Store the data: zero map, pool, or device ([`crate::storage`]).
//! 6. Unlock the folio and replace it in the swap cache by a shadow; its memory is no
//!    longer charged. If every tier refused, the data goes back where it came from.
//! 7. Tell the page-out hook, if one is set (hooks.rs), with no lock held.
//!
//! Reclaim never holds a lock across a page-out; each step takes and releases its own.
//!
//! An isolated folio can move before its page-out: a remap (the handler thread's REMAP)
//! moves its page-table entry and updates its LRU record's owner under the PTLs, and may
//! forget the region it came from. So reclaim reads where the folio lives from its record
//! just before paging it out, never from the snapshot isolation returned, and step 4
//! re-checks under the PTL; a page-out that finds the folio gone from there puts it back on
//! a list (a stale id makes that a no-op). Freeing the record of a folio that had only
//! moved left its new page-table entry naming a dead record (the `uswap run` Python
//! crash, `reclaim_finds_a_folio_a_remap_moved_to_another_region`); leaving it isolated
//! made it unreclaimable for good.

use crate::budget::Pressure;
use crate::engine::Core;
use crate::fault::SwapIn;
use crate::lru::{FolioOwner, LruId};
use crate::page_source::{Mapped, SourceError};
use crate::region::{Found, Pte, Region, PTL_SPAN_PAGES};
use crate::stats::Stats;
use crate::storage::{Tier, WriteNotes};
use crate::swap_cache::{Folio, Unlock};
use crate::sync::Ordering;
use crate::{Error, PAGE_SIZE};
use slots::SwapEntry;
use smallvec::SmallVec;
use std::sync::Arc;

const PAGE: u64 = PAGE_SIZE as u64;

/// A reclaim loop gives up after scanning this many times the resident set without
/// reclaiming anything: every folio was referenced twice over (second chances are progress,
/// they age the lists), or the swap device is full.
const FRUITLESS_SCANS_MAX: u64 = 2;

/// Reclaim looks up where an isolated folio lives at most this many times while remaps
/// keep moving it away between the look-ups (each move is a REMAP event: a handful at most).
const LOCATE_TRIES_MAX: u32 = 4;

/// The most order-0 victims paged out as one run (`page_out_run`): 64 KiB, a large
/// folio's worth.
const RUN_PAGES_MAX: usize = 16;

/// A victim of a reclaim pass: its region, LRU id and where it lives.
type Victim = (Arc<Region>, LruId, FolioOwner);

/// Why a run was not taken together.
enum RunRefused {
    /// A victim is no longer where it was located (dropped, moved, split): nothing was
    /// done; each is paged out alone, which sorts it out.
    Changed,
    /// The page source refused the take: everything was undone, the victims are to go
    /// back on a list.
    Source,
    /// The page source refused the take holding the first victims' pages (`staged.rs`):
    /// those are staged, the others are to go back on a list.
    Staged(u32),
}

/// Why one folio's take did not happen ([`Core::take_pages`]).
enum TakeRefused {
    /// The page table no longer holds the folio where it was located (dropped or moved).
    Moved,
    /// The page source refused; the folio is where it was.
    Source,
    /// The page source refused holding some of its pages: the folio was split and those
    /// pages staged, the rest put back on the lists (`staged.rs`).
    Staged,
}

impl Core {
    /// Wakes the background reclaimer if the budget is below its low watermark.
    pub(crate) fn wake_kswapd_if_short(&self) {
        if self.budget.pressure(self.pool_charge(), 0) >= Pressure::BelowLow && self.can_relieve() {
            self.wake_kswapd();
        }
    }

    /// Whether the background reclaimer can lower the charge: resident pages above the
    /// working floor, or a pool inside the budget to write back. At the floor with the pool
    /// beside the budget (or none), a wake per fault would find nothing to do.
    fn can_relieve(&self) -> bool {
        !self.budget.at_floor() || (self.storage.zswap.is_some() && !self.pool_is_beside())
    }

    /// Wakes the background reclaimer (or, without one, does nothing: faults reclaim
    /// directly). A wake while one is pending costs a lock, no signal.
    pub(crate) fn wake_kswapd(&self) {
        // Paused for a fork, the reclaimer stays asleep (the pause waited for it to be):
        // the resume rings if the budget is short.
        if self.config.background_reclaim && !self.fork_pause.is_paused() {
            self.kswapd_bell.ring();
        }
    }

    /// Before a fault charges `need` bytes: wake the background reclaimer below the low
    /// watermark; below min, reclaim here until the fault fits (the kernel's allocstall).
    pub(crate) fn make_room(&self, need: u64) {
        let pressure = self.budget.pressure(self.pool_charge(), need);
        let relieve = self.can_relieve();
        if pressure >= Pressure::BelowLow && relieve {
            self.wake_kswapd();
        }
        if pressure == Pressure::BelowMin && !relieve {
            // At the working floor with no pool inside the budget: nothing a pass, a
            // writeback or a compaction could give back, so the fault maps over the budget
            // without paying for them.
            Stats::add(&self.stats.counters.reclaim_fail, 1);
            Stats::add(&self.stats.counters.reclaim_floor, 1);
        } else if pressure == Pressure::BelowMin {
            // Paused for a fork: the charge goes over the budget for as long as it lasts.
            let Some(_busy) = self.fork_pause.enter() else {
                Stats::add(&self.stats.counters.reclaim_paused, 1);
                return;
            };
            Stats::add(&self.stats.counters.allocstall, 1);
            self.reclaim_while(true, || {
                self.budget.pressure(self.pool_charge(), need) == Pressure::BelowMin
            });
            if !self.config.background_reclaim {
                // Nobody else will shrink a full pool (the kernel's shrink_worker): do it.
                self.shrink_pool();
            }
            // What is resident could not make the room: the pool holds the charge. The
            // fault waits for the pool's writeback, as the kernel's direct reclaim runs the
            // zswap shrinker (mapped over the budget instead, its page was the reclaimer's
            // next victim, and a system call made again after the fault found it gone every
            // time, for good where the outside charge leaves the pool the only room).
            self.shrink_pool_while(need, Pressure::BelowLow);
            self.compact_pool();
        }
    }

    /// Reclaims while the pressure is above `target`. Returns pages reclaimed.
    pub(crate) fn reclaim_to(&self, target: Pressure, direct: bool) -> u64 {
        self.reclaim_while(direct, || self.budget.pressure(self.pool_charge(), 0) > target)
    }

    fn reclaim_while(&self, direct: bool, mut more: impl FnMut() -> bool) -> u64 {
        let (mut total, mut fruitless) = (0, 0);
        while more() && !self.fork_pause.is_paused() {
            if self.budget.at_floor() {
                Stats::add(&self.stats.counters.reclaim_fail, 1);
                Stats::add(&self.stats.counters.reclaim_floor, 1);
                break;
            }
            if self.all_locked.load(Ordering::SeqCst) {
                Stats::add(&self.stats.counters.reclaim_fail, 1);
                Stats::add(&self.stats.counters.reclaim_locked, 1);
                break;
            }
            if self.swap_full() {
                // Every page-out starts with a slot: none can succeed (the kernel's
                // can_reclaim_anon_pages). Scanning on split every large folio and failed
                // each piece, millions of times in a simulated build with a full device.
                Stats::add(&self.stats.counters.reclaim_fail, 1);
                Stats::add(&self.stats.counters.swap_full, 1);
                break;
            }
            if self.device_out_of_space() && self.storage.zswap.as_ref().is_none_or(|z| z.is_full())
            {
                // Every page-out would take its pages and put them back: millions of
                // failed writes a minute with a full disk and no pool.
                Stats::add(&self.stats.counters.reclaim_fail, 1);
                Stats::add(&self.stats.counters.swap_no_space, 1);
                break;
            }
            let (reclaimed, scanned) = self.reclaim_batch(direct);
            total += reclaimed;
            fruitless = if reclaimed == 0 { fruitless + scanned.max(1) } else { 0 };
            let counts = self.lru.counts();
            let resident = counts.active_pages + counts.inactive_pages + counts.isolated_pages;
            if fruitless > FRUITLESS_SCANS_MAX * resident.max(1) {
                // Nothing resident can go; a sparse pool may still give pages back.
                if self.compact_pool() == 0 {
                    Stats::add(&self.stats.counters.reclaim_fail, 1);
                    break;
                }
                fruitless = 0;
            }
        }
        total
    }

    /// Is every slot of the swap device in use (no page-out can get one)?
    fn swap_full(&self) -> bool {
        let device = &self.storage.device;
        device.inuse_pages() >= device.total_slots()
    }

    /// Does the swap device refuse writes for lack of space?
    fn device_out_of_space(&self) -> bool {
        self.storage.device.backend().out_of_space()
    }

    /// Moves the calling thread (the reclaimer) to [`EngineConfig::reclaimer_cpus`], if
    /// any; counts a refusal (`reclaimer_cpus_failed`: CPUs outside the process's cpuset)
    /// and runs on where it was.
    ///
    /// [`EngineConfig::reclaimer_cpus`]: crate::EngineConfig::reclaimer_cpus
    pub(crate) fn place_reclaimer(&self) {
        let cpus = &self.config.reclaimer_cpus;
        if cpus.is_empty() {
            return;
        }
        let mut set = rustix::thread::CpuSet::new();
        cpus.iter().filter(|&&cpu| cpu < rustix::thread::CpuSet::MAX_CPU).for_each(|&c| set.set(c));
        if rustix::thread::sched_setaffinity(None, &set).is_err() {
            Stats::add(&self.stats.counters.reclaimer_cpus_failed, 1);
        }
    }

    /// The background reclaimer's loop: sleep until woken, then reclaim to the high
    /// watermark.
    pub(crate) fn kswapd(&self) {
        loop {
            self.kswapd_bell.sleep(|| self.shutdown.load(Ordering::Acquire));
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            Stats::add(&self.stats.counters.kswapd_wake, 1);
            // Paused for a fork: the resume wakes this thread again if the budget is short.
            let Some(_busy) = self.fork_pause.enter() else { continue };
            let _running = self.kswapd_running.lock();
            self.reclaim_to(Pressure::None, false);
            self.shrink_pool_while(0, Pressure::BelowHigh);
            self.compact_pool();
        }
    }

    /// While the pool is full, writes its coldest entries back to the swap device until it
    /// is under its accept threshold again (the kernel's `shrink_worker`). Returns pages
    /// written back.
    pub(crate) fn shrink_pool(&self) -> u64 {
        self.shrink_pool_when(&|zswap: &zswap::Zswap| zswap.is_full())
    }

    /// [`Core::shrink_pool`], and then on while the budget's pressure for a charge of
    /// `need` is above `target`: once reclaim has nothing resident left to page out, a pool
    /// within its own limit may still hold what the budget lacks (a budget cut at once,
    /// under an outside charge that leaves the pool the only room), and only writeback gives
    /// it back (the kernel's zswap shrinker, run by a memory cgroup's reclaim).
    pub(crate) fn shrink_pool_while(&self, need: u64, target: Pressure) -> u64 {
        // A pool beside the budget holds none of its charge: writing it back gives the
        // budget nothing, and would send every page on to the disk.
        let beside = self.pool_is_beside();
        let short = |zswap: &zswap::Zswap| {
            zswap.is_full() || (!beside && self.budget.pressure(self.pool_charge(), need) > target)
        };
        self.shrink_pool_when(&short)
    }

    fn shrink_pool_when(&self, more: &dyn Fn(&zswap::Zswap) -> bool) -> u64 {
        let Some(zswap) = &self.storage.zswap else { return 0 };
        if self.device_out_of_space() {
            return 0; // each write back would fail, its entry staying in the pool
        }
        let target = crate::writeback::Target::new(self);
        let batch = self.config.reclaim_batch_pages;
        let (mut total, mut sparing) = (0, 0);
        while more(zswap) && !self.fork_pause.is_paused() {
            let pass = zswap.writeback_pass(&target, batch);
            total += pass.written;
            // A pass that only spared referenced entries cleared their bits: go on, for at
            // most one turn of the LRU (a pass looks at up to twice the batch). A pool
            // whose every entry was stored since the last pass (a budget cut at once, as
            // a forked child's first share) is otherwise never written back.
            let turn = zswap.stored_pages() / (2 * batch).max(1) + 2;
            sparing = if pass.written == 0 { sparing + 1 } else { 0 };
            if pass.written == 0 && (pass.spared == 0 || sparing > turn) {
                break;
            }
        }
        total
    }

    /// Compacts the pool (the kernel's zsmalloc shrinker): frees and swap-ins leave
    /// zspages sparse, and their pages count against the budget. Returns pages freed.
    pub(crate) fn compact_pool(&self) -> u64 {
        let Some(zswap) = &self.storage.zswap else { return 0 };
        let freed = zswap.compact().pages_freed as u64;
        Stats::add(&self.stats.counters.pool_compact_pages, freed);
        freed
    }

    /// One pass: isolate a batch from the inactive tail and page it out. Returns pages
    /// reclaimed and pages scanned.
    fn reclaim_batch(&self, direct: bool) -> (u64, u64) {
        let c = &self.stats.counters;
        let mut batch = Vec::new();
        // Half a batch from the inactive tail; their cold neighbours may fill the rest, so
        // a pass still reclaims at most a batch (a pass that took every neighbour of 32
        // victims emptied a small LRU at once, and refaults then never counted as recent).
        let pages = self.config.reclaim_batch_pages;
        let deactivated = self.lru.isolate(pages.div_ceil(2), &mut batch);
        Stats::add(&c.pgdeactivate, deactivated);
        let scanned: u64 = batch.iter().map(|(_, owner, _)| owner.nr_pages()).sum();
        Stats::add(if direct { &c.pgscan_direct } else { &c.pgscan_kswapd }, scanned);
        let mut victims: Vec<Victim> = Vec::with_capacity(batch.len());
        for (id, isolated_as, referenced) in batch {
            let Some((region, owner)) = self.locate_isolated(id, isolated_as) else { continue };
            let addr = region.addr_of(owner.index);
            let accessed = region.source().test_and_clear_referenced(addr, owner.nr_pages() * PAGE);
            if referenced || accessed == Some(true) {
                self.lru.putback(id, true);
                Stats::add(&c.pgactivate, 1);
                continue;
            }
            victims.push((region, id, owner));
        }
        let taken: u64 = victims.iter().map(|(_, _, owner)| owner.nr_pages()).sum();
        self.add_cold_neighbours(&mut victims, pages.saturating_sub(taken), direct);
        // Neighbours side by side: a walk through memory leaves its pages on the inactive
        // tail in address order, and they go out as runs (`page_out_run`).
        victims.sort_by_key(|(region, _, owner)| (region.id(), owner.index));
        let mut reclaimed = 0;
        let mut rest = &victims[..];
        while let Some((region, id, owner)) = rest.first() {
            let len = run_len(rest);
            reclaimed += if len == 1 {
                self.page_out(region, *id, *owner)
            } else {
                self.page_out_run(region, &rest[..len])
            };
            rest = &rest[len..];
        }
        Stats::add(if direct { &c.pgsteal_direct } else { &c.pgsteal_kswapd }, reclaimed);
        (reclaimed, scanned)
    }

    /// Where isolated folio `id` lives now, and its region. `isolated_as` is where it was
    /// when isolated; a remap may have moved it since (`Lru::set_owner`, under the PTLs),
    /// within its region or to another one, forgetting the old (the handler thread's REMAP
    /// against the background reclaimer, while the folios isolated before it are paged
    /// out). `None` if there is nothing to page out: the folio was dropped or split (its id
    /// is stale), orphaned (its region forgotten with it still tracked: its record and
    /// charge go), or it kept moving (back on a list; a later pass finds it).
    ///
    /// Context: takes the LRU lock and the regions lock in turn, holds neither on return.
    fn locate_isolated(
        &self,
        id: LruId,
        isolated_as: FolioOwner,
    ) -> Option<(Arc<Region>, FolioOwner)> {
        for _ in 0..LOCATE_TRIES_MAX {
            let (owner, _) = self.lru.get(id)?;
            if let Some(region) = self.region_by_id(owner.region) {
                if owner != isolated_as {
                    Stats::add(&self.stats.counters.pageout_moved, 1);
                }
                return Some((region, owner));
            }
            // A remap records the new owner before it forgets the old region: an owner
            // that still names the forgotten region now has no page table to be found in.
            if self.lru.get(id).map(|(now, _)| now) == Some(owner) {
                if self.lru.remove(id).is_some() {
                    self.budget.uncharge_resident(owner.nr_pages() * PAGE);
                }
                return None;
            }
        }
        self.lru.putback(id, false);
        None
    }

    /// Pages out one isolated folio (steps 2-6). Returns pages reclaimed; on any refusal the
    /// folio is back on a list (or gone, if its pages were dropped meanwhile).
    pub(crate) fn page_out(&self, region: &Region, id: LruId, owner: FolioOwner) -> u64 {
        let order = owner.order;
        let entry = match self.storage.device.alloc(order) {
            Ok(entry) => entry,
            Err(slots::Error::NoSpace { .. }) if order > 0 => {
                Stats::add_order(&self.stats.per_order.swpout_fallback, order, 1);
                return self.split_and_page_out(region, id, owner);
            }
            Err(_) => {
                Stats::add(&self.stats.counters.reclaim_fail, 1);
                self.lru.putback(id, false);
                return 0;
            }
        };
        let folio = Folio::new_locked(entry.offset(), order);
        self.cache_new_folio(&folio);
        match self.take_pages(region, id, owner, entry, &folio) {
            Ok(()) => self.store_taken(region, id, owner, entry, &folio),
            Err(refused) => {
                folio.unlock(Unlock::Abandoned);
                self.delete_folio(&folio, None);
                // Still resident where it was (the source refused), or moved by a remap
                // since it was located: back on a list. Dropped or split: the id is stale
                // and nothing happens. Never leave it isolated: nobody else puts it back.
                // Staged: its pieces are settled already.
                let moved = match refused {
                    TakeRefused::Staged => return 0,
                    TakeRefused::Moved => true,
                    TakeRefused::Source => false,
                };
                if self.lru.putback(id, false) && moved {
                    Stats::add(&self.stats.counters.pageout_moved, 1);
                }
                0
            }
        }
    }

    /// Adds to `victims` up to `room` cold neighbours of its order-0 folios: the order-0
    /// folios next to each, on either side within its PTL span and up to a run's length,
    /// that are on the inactive list, unreferenced, and not accessed by the page source's
    /// bits (one that was is activated, as a scan of the tail would). A walk stops at the
    /// first page that is not such a folio. They go out in the victims' runs, one TLB
    /// flush for all: without access bits the inactive list is ordered by fault time only,
    /// and taking cold pages a little before their turn cost no faults where it was
    /// measured (uniform and Zipf, docs/benchmarks.md), while one flush a page was the
    /// reclaimer's largest cost beside compression.
    ///
    /// Context: takes each victim's PTL for its look-ups, then the LRU lock per neighbour.
    fn add_cold_neighbours(&self, victims: &mut Vec<Victim>, room: u64, direct: bool) {
        let mut found = Vec::new();
        for (region, _, owner) in victims.iter().filter(|(_, _, owner)| owner.order == 0) {
            if found.len() as u64 >= room {
                break;
            }
            let span = owner.index / PTL_SPAN_PAGES;
            let mut sides: [SmallVec<[LruId; RUN_PAGES_MAX]>; 2] = Default::default();
            {
                let pt = region.lock_span(owner.index);
                for (side, ids) in sides.iter_mut().enumerate() {
                    for step in 1..RUN_PAGES_MAX as u64 {
                        let index = if side == 0 {
                            owner.index.checked_add(step)
                        } else {
                            owner.index.checked_sub(step)
                        };
                        let Some(index) = index.filter(|&i| i / PTL_SPAN_PAGES == span) else {
                            break;
                        };
                        match pt.lookup(index) {
                            Some(Found { order: 0, pte: Pte::Resident(id), .. }) => ids.push(id),
                            _ => break,
                        }
                    }
                }
            }
            for ids in &sides {
                for &id in ids {
                    if found.len() as u64 >= room {
                        break;
                    }
                    let Some(owner) = self.lru.isolate_cold(id) else { break };
                    if owner.region != region.id() {
                        // A remap moved it away since the look-up: not a neighbour now.
                        self.lru.putback(id, false);
                        break;
                    }
                    let addr = region.addr_of(owner.index);
                    if region.source().test_and_clear_referenced(addr, PAGE) == Some(true) {
                        self.lru.putback(id, true);
                        Stats::add(&self.stats.counters.pgactivate, 1);
                        break;
                    }
                    found.push((Arc::clone(region), id, owner));
                }
            }
        }
        let c = &self.stats.counters;
        Stats::add(if direct { &c.pgscan_direct } else { &c.pgscan_kswapd }, found.len() as u64);
        victims.extend(found);
    }

    /// Pages out a run of order-0 victims at consecutive indices of `region`, in one PTL
    /// span (`run_len`): steps 2-3 for each, step 4 for all of them under one PTL hold with
    /// one take (through userfaultfd one `UFFDIO_MOVE`, so one TLB flush: one a page was the
    /// reclaimer's largest cost, docs/benchmarks.md), then steps 5-7 for each. Returns pages
    /// reclaimed. If anything differs from the one-folio path's expectations the run is
    /// undone and each victim paged out alone.
    fn page_out_run(&self, region: &Region, run: &[Victim]) -> u64 {
        let mut folios: Vec<(SwapEntry, Arc<Folio>)> = Vec::with_capacity(run.len());
        for _ in run {
            let Ok(entry) = self.storage.device.alloc(0) else { break };
            let folio = Folio::new_locked(entry.offset(), 0);
            self.cache_new_folio(&folio);
            folios.push((entry, folio));
        }
        let taken = if folios.len() == run.len() {
            self.take_run(region, run, &folios)
        } else {
            Err(RunRefused::Changed) // out of slots: page_out says so for each
        };
        match taken {
            Ok(()) => {
                Stats::add(&self.stats.counters.pageout_runs, 1);
                Stats::add(&self.stats.counters.pageout_run_pages, run.len() as u64);
                run.iter()
                    .zip(&folios)
                    .map(|((_, id, owner), (entry, folio))| {
                        self.store_taken(region, *id, *owner, *entry, folio)
                    })
                    .sum()
            }
            Err(refused) => {
                for (_, folio) in &folios {
                    folio.unlock(Unlock::Abandoned);
                    self.delete_folio(folio, None);
                }
                match refused {
                    RunRefused::Changed => {
                        run.iter().map(|(_, id, owner)| self.page_out(region, *id, *owner)).sum()
                    }
                    RunRefused::Source => {
                        for (_, id, _) in run {
                            self.lru.putback(*id, false);
                        }
                        0
                    }
                    RunRefused::Staged(staged) => {
                        for (_, id, _) in &run[staged as usize..] {
                            self.lru.putback(*id, false);
                        }
                        0
                    }
                }
            }
        }
    }

    /// Step 4 for a run, under its span's PTL: every victim still resident where it was,
    /// its entry set, then one take straight into the folios (a racing fault finds a
    /// locked folio, and its data once it is unlocked).
    fn take_run(
        &self,
        region: &Region,
        run: &[Victim],
        folios: &[(SwapEntry, Arc<Folio>)],
    ) -> Result<(), RunRefused> {
        let first = run[0].2.index;
        let mut pt = region.lock_span(first);
        let resident = |(_, id, owner): &Victim| Found {
            first: owner.index,
            order: 0,
            pte: Pte::Resident(*id),
        };
        if run.iter().any(|victim| pt.lookup(victim.2.index) != Some(resident(victim))) {
            return Err(RunRefused::Changed);
        }
        for ((_, _, owner), (entry, _)) in run.iter().zip(folios) {
            pt.set(owner.index, 0, Pte::Swap(*entry));
            if let Err(error) = self.storage.device.dup(*entry, 1) {
                panic!("fresh slot {entry:?} refused a reference: {error}");
            }
        }
        // Each page straight into its folio, as one take.
        let mut data: SmallVec<[_; RUN_PAGES_MAX]> =
            folios.iter().map(|(_, folio)| folio.lock_data()).collect();
        let mut pages: SmallVec<[&mut [u8]; RUN_PAGES_MAX]> =
            data.iter_mut().map(|page| &mut page[..]).collect();
        let Err(error) = region.source().take_each(region.addr_of(first), &mut pages) else {
            return Ok(());
        };
        // The pages never left (or are held by the source): undo, under the same lock hold.
        for (victim, (entry, _)) in run.iter().zip(folios) {
            pt.set(victim.2.index, 0, Pte::Resident(victim.1));
            self.device_op(self.storage.device.put(*entry, 1), "undo put", *entry);
        }
        self.count_take_error(&error);
        if let SourceError::Staged { at, pages } = error {
            let pages = pages.min(run.len() as u32);
            let ids: SmallVec<[LruId; RUN_PAGES_MAX]> = run.iter().map(|v| v.1).collect();
            self.stage(&mut pt, first, &ids[..pages as usize], at, pages);
            return Err(RunRefused::Staged(pages));
        }
        Err(RunRefused::Source)
    }

    /// Counts a take the page source refused: a changing layout (`pageout_retry`), or a
    /// failure (`map_error`).
    fn count_take_error(&self, error: &SourceError) {
        let c = &self.stats.counters;
        match error {
            SourceError::Retry | SourceError::Staged { .. } | SourceError::Gone => {
                Stats::add(&c.pageout_retry, 1)
            }
            SourceError::Failed(_) => Stats::add(&c.map_error, 1),
        }
    }

    /// Step 4, under the PTL. An error if the pages were not taken: why, and so what is
    /// left to do with the folio's record.
    fn take_pages(
        &self,
        region: &Region,
        id: LruId,
        owner: FolioOwner,
        entry: SwapEntry,
        folio: &Folio,
    ) -> Result<(), TakeRefused> {
        let (order, nr) = (owner.order, 1u32 << owner.order);
        let mut pt = region.lock_span(owner.index);
        let resident = Found { first: owner.index, order, pte: Pte::Resident(id) };
        if pt.lookup(owner.index) != Some(resident) {
            return Err(TakeRefused::Moved);
        }
        pt.set(owner.index, order, Pte::Swap(entry));
        if let Err(error) = self.storage.device.dup(entry, nr) {
            panic!("fresh slots {entry:?} refused a reference: {error}");
        }
        let addr = region.addr_of(owner.index);
        let taken = folio.with_data_mut(|data| region.source().take(addr, data));
        let Err(error) = taken else { return Ok(()) };
        // The pages never left (or are held by the source): undo, under the same lock hold.
        pt.set(owner.index, order, Pte::Resident(id));
        self.device_op(self.storage.device.put(entry, nr), "undo put", entry);
        self.count_take_error(&error);
        let SourceError::Staged { at, pages } = error else { return Err(TakeRefused::Source) };
        // Staged pages are settled one by one: the folio goes to order 0, its pieces
        // isolated as it is.
        let ids = if order == 0 {
            vec![id]
        } else {
            let ids = self.lru.split(id, 0, true).expect("a resident entry has a live record");
            pt.split(owner.index, 0, |first, _| Pte::Resident(ids[(first - owner.index) as usize]));
            ids
        };
        self.stage(&mut pt, owner.index, &ids, at, pages);
        Err(TakeRefused::Staged)
    }

    /// Steps 5-7: store the taken data and leave a shadow; if no tier takes it, put the
    /// data back. Returns pages reclaimed.
    fn store_taken(
        &self,
        region: &Region,
        id: LruId,
        owner: FolioOwner,
        entry: SwapEntry,
        folio: &Arc<Folio>,
    ) -> u64 {
        let (order, nr) = (owner.order, owner.nr_pages());
        let taken = self.lru.take(id);
        let was_active = taken.is_some();
        // The data moves from the program to the folio: so does its charge.
        self.budget.uncharge_resident(nr * PAGE);
        self.budget.charge_swapcache(nr * PAGE);
        folio.charge();
        // A folio that was ever active leaves a workingset shadow: its refault is
        // thrashing (workingset.rs), the loss `--budget auto` raises the budget for.
        let shadow = self.workingset.eviction(taken.is_some_and(|(_, workingset)| workingset));
        self.workingset.age(nr);
        debug_assert!(was_active, "an isolated folio vanished while its pages were out");
        let mut notes = WriteNotes::default();
        let stored =
            folio.with_data_mut(|data| self.storage.write(entry, data, &self.stats, &mut notes));
        if notes.pool_full {
            self.wake_kswapd();
        }
        match stored {
            Ok(tier) => {
                folio.unlock(Unlock::Uptodate { zero: tier == Tier::Zero });
                let remapped = tier == Tier::Zero && self.remap_zero(region, owner, entry, folio);
                // A folio mapped back left no evicted page to refault: no shadow.
                self.delete_folio(folio, (!remapped).then_some(shadow));
                Stats::add_order(&self.stats.per_order.swpout, order, 1);
                if let Some(hook) = self.page_out_hook.get() {
                    hook.paged_out(region.mm(), region.addr_of(owner.index), nr * PAGE, tier);
                }
                nr
            }
            Err(_) => {
                Stats::add(&self.stats.counters.pageout_fail, 1);
                folio.unlock(Unlock::Uptodate { zero: false });
                self.restore(region, owner, entry, folio);
                0
            }
        }
    }

    /// A folio found all zero goes straight back as the zero page, write-protected, if the
    /// page source can protect it (ARCHITECTURE.md, "Zero pages"): mapped, it costs nothing,
    /// and a read no longer faults it in. Under the PTL, re-validated as a page-in is (the
    /// page table still holds the entry, the folio is still cached for it): a fault that
    /// raced in first, or a page the program dropped, leaves it as it is. Returns whether
    /// it mapped the pages (write-protected, or plainly and charged if the protection
    /// failed); the page table's reference to the slots is dropped then.
    fn remap_zero(
        &self,
        region: &Region,
        owner: FolioOwner,
        entry: SwapEntry,
        folio: &Arc<Folio>,
    ) -> bool {
        if !crate::fault::protects_zero(region) {
            return false;
        }
        let source = region.source();
        let (first, order, nr) = (owner.index, owner.order, owner.nr_pages());
        let mut pt = region.lock_span(first);
        if !self.maps_from(&pt, &SwapIn { region, first, order, entry }, folio) {
            return false;
        }
        let (addr, len) = (region.addr_of(first), nr * PAGE);
        let zero_mapped = match source.map_zero_protected(addr, len) {
            Ok(Mapped::Done) => true,
            Ok(Mapped::AlreadyPresent) => return false,
            // The protection failed, or the mapping part way: what was mapped stays mapped,
            // unprotected, so map the rest plainly and keep the pages as a resident folio,
            // charged, as a fault's retry would; if that fails too, nothing was mapped.
            Err(_) => match source.map_zero(addr, len) {
                Ok(_) => false,
                Err(_) => return false,
            },
        };
        self.set_mapped(&mut pt, region, first, order, zero_mapped, false);
        self.put_entry(entry, nr as u32);
        if zero_mapped {
            Stats::add(&self.stats.counters.zero_remapped, nr);
        }
        true
    }

    /// No tier took the data: map it back from the folio (if a racing fault has not done
    /// so already). The folio holds the only copy: it is deleted only once no page refers
    /// to its slots any more — here, or later by the `put` that drops the last reference
    /// (a racing fault may have split the entry and will map its page from the folio, or
    /// the program may drop the pages). Never before: that lost data (simulator finding C).
    fn restore(&self, region: &Region, owner: FolioOwner, entry: SwapEntry, folio: &Arc<Folio>) {
        // Whatever the outcome, map_from_folio's put released the folio if it could.
        let at = SwapIn { region, first: owner.index, order: owner.order, entry };
        let _ = self.map_from_folio(at, folio, false, false);
        self.release_if_unreferenced(folio);
    }

    /// Page-out found no 2^order contiguous slots: split the folio into order-0 pieces and
    /// page those out. Returns pages reclaimed.
    fn split_and_page_out(&self, region: &Region, id: LruId, owner: FolioOwner) -> u64 {
        let pieces = {
            let mut pt = region.lock_span(owner.index);
            let resident = Found { first: owner.index, order: owner.order, pte: Pte::Resident(id) };
            if pt.lookup(owner.index) != Some(resident) {
                // Moved or dropped since it was located (as in take_pages).
                if self.lru.putback(id, false) {
                    Stats::add(&self.stats.counters.pageout_moved, 1);
                }
                return 0;
            }
            let Some(ids) = self.lru.split(id, 0, true) else { return 0 };
            pt.split(owner.index, 0, |first, _| Pte::Resident(ids[(first - owner.index) as usize]));
            ids
        };
        let mut reclaimed = 0;
        for (n, piece) in pieces.into_iter().enumerate() {
            let owner = FolioOwner { index: owner.index + n as u64, order: 0, ..owner };
            reclaimed += self.page_out(region, piece, owner);
        }
        reclaimed
    }

    /// MADV_PAGEOUT: pages out every resident folio intersecting `[addr, addr + len)`.
    pub(crate) fn pageout_range(&self, addr: u64, len: u64) -> Result<u64, Error> {
        let region = self.region_of(crate::region::MmId::DEFAULT, addr)?;
        let Some(_busy) = self.fork_pause.enter() else { return Ok(0) };
        let first = region.index_of(addr);
        let end = (addr.saturating_add(len)).min(region.end());
        let last = region.index_of(end - 1);
        let entries = region.entries_by_span(first, last);
        let mut reclaimed = 0;
        for found in entries {
            let Pte::Resident(id) = found.pte else { continue };
            if let Some(owner) = self.lru.isolate_one(id) {
                reclaimed += self.page_out(&region, id, owner);
            }
        }
        Ok(reclaimed)
    }
}

/// How many victims from the first make a run: order-0 folios of one region at
/// consecutive indices within one PTL span and one mapping (one move takes a run, and a
/// move across a seam of the region is refused: [`Region::splits_mapping`]), at most
/// [`RUN_PAGES_MAX`].
fn run_len(victims: &[Victim]) -> usize {
    let (region, _, first) = &victims[0];
    if first.order != 0 {
        return 1;
    }
    let span = first.index / PTL_SPAN_PAGES;
    // Looked at page by page only where the longest run would not lie in one mapping.
    let uneven = region.splits_mapping(first.index, RUN_PAGES_MAX as u64);
    let next_of_run = |(k, (other, _, owner)): &(usize, &Victim)| {
        Arc::ptr_eq(other, region)
            && owner.order == 0
            && owner.index == first.index + *k as u64
            && owner.index / PTL_SPAN_PAGES == span
            && !(uneven && region.splits_mapping(first.index, *k as u64 + 1))
    };
    victims.iter().enumerate().take(RUN_PAGES_MAX).take_while(next_of_run).count().max(1)
}
