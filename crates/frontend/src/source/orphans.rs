//! Orphans: pages a refused take left in staging, and what becomes of them.
//!
//! Why a take leaves orphans, and how a fork meets them, is the source's essay (**Take
//! refused**). Here: the undo that makes them, their list (`orphans`, mirrored by
//! `orphan_count` for a lock-free check), their restore after the events are applied, and
//! what the program's events do to them (REMOVE and UNMAP drop them, REMAP moves them).
//!
//! Context: an orphan is settled by whoever holds its lane's lock and finds it still
//! listed. Lock order: a lane's lock, then the orphan list's.

use super::{add, lock, Home, Lane, UffdSource, PAGE, UNDO_TRIES};
use std::sync::atomic::Ordering::Relaxed;
use uffd::staging::{SlotIndex, SlotRun};
use uffd::types::MoveMode;
use uffd::{Error, Uffd};

/// A page taken out of the region and not put back: it lives in staging until restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Orphan {
    pub(super) lane: usize,
    pub(super) slot: SlotIndex,
    pub(super) addr: u64,
}

impl UffdSource {
    /// Moves the first `done_pages` of a refused take back into the region; what cannot go
    /// back now becomes orphans (the source's essay). Frees the rest of the run.
    pub(super) fn undo(
        &self,
        home: &Home,
        lane_index: usize,
        lane: &mut Lane,
        run: SlotRun,
        addr: u64,
        done_pages: usize,
    ) {
        let done = done_pages as u32;
        let rest = SlotRun { first: SlotIndex(run.first.0 + done), pages: run.pages - done };
        if rest.pages > 0 {
            lane.staging.free(rest);
        }
        if done == 0 {
            return;
        }
        let moved = SlotRun { first: run.first, pages: done };
        for _ in 0..UNDO_TRIES {
            let injected =
                self.inject_undo_again.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1)).is_ok();
            if injected {
                break;
            }
            match Self::move_back(&home.uffd, lane, moved, addr) {
                Ok(()) => {
                    lane.staging.free(moved);
                    add(&self.counters.undo_pages, u64::from(done));
                    return;
                }
                Err(Error::Again { .. }) => uffd::sys::process::sched_yield(),
                // Any other answer: the pages left in staging are orphans.
                Err(_) => break,
            }
        }
        self.orphan(lane_index, lane, moved, addr);
    }

    /// Moves the pages of `run` still in staging back to `addr..` (holes stay holes), one
    /// page per call so that partial progress is never ambiguous; `Again` only when an event
    /// is unread.
    fn move_back(uffd: &Uffd, lane: &mut Lane, run: SlotRun, addr: u64) -> Result<(), Error> {
        for i in 0..run.pages {
            let slot = SlotIndex(run.first.0 + i);
            if !lane.staging.is_present(slot) {
                continue; // moved back by an earlier, partial attempt
            }
            let one = SlotRun { first: slot, pages: 1 };
            let at = addr as usize + i as usize * PAGE;
            lane.staging.move_in(uffd, one, at, MoveMode::ALLOW_SRC_HOLES)?;
        }
        Ok(())
    }

    /// Records the pages of `moved` still present in staging as orphans of `addr..`; frees
    /// the slots a partial undo did empty.
    fn orphan(&self, lane_index: usize, lane: &mut Lane, moved: SlotRun, addr: u64) {
        let mut orphans = lock(&self.orphans);
        for i in 0..moved.pages {
            let slot = SlotIndex(moved.first.0 + i);
            if lane.staging.is_present(slot) {
                let addr = addr + u64::from(i) * PAGE as u64;
                orphans.push(Orphan { lane: lane_index, slot, addr });
                add(&self.counters.orphaned_pages, 1);
            } else {
                lane.staging.free(SlotRun { first: slot, pages: 1 });
            }
        }
        self.orphan_count.store(orphans.len(), Relaxed);
    }

    /// Whether any orphan lies in `[addr, addr + len)`.
    pub(crate) fn overlaps_orphan(&self, addr: u64, len: u64) -> bool {
        if self.orphan_count.load(Relaxed) == 0 {
            return false;
        }
        lock(&self.orphans).iter().any(|o| o.addr >= addr && o.addr < addr + len)
    }

    /// Whether orphans wait to be restored.
    pub fn has_orphans(&self) -> bool {
        self.orphan_count.load(Relaxed) > 0
    }

    /// The orphan in `lane`'s `slot`, if it is still listed, at the address listed now.
    /// Ask holding that lane's lock: only then does the answer hold until it is released.
    fn listed_orphan(&self, lane: usize, slot: SlotIndex) -> Option<Orphan> {
        lock(&self.orphans).iter().copied().find(|o| o.lane == lane && o.slot == slot)
    }

    /// Takes the orphan in `lane`'s `slot` off the list, if it is listed (and its address
    /// lies in `within`, if given); whether it was. Call it holding that lane's lock.
    fn unlist_orphan(&self, lane: usize, slot: SlotIndex, within: Option<(u64, u64)>) -> bool {
        let mut orphans = lock(&self.orphans);
        let before = orphans.len();
        let inside = |addr: u64| within.is_none_or(|(start, end)| addr >= start && addr < end);
        orphans.retain(|o| !(o.lane == lane && o.slot == slot && inside(o.addr)));
        self.orphan_count.store(orphans.len(), Relaxed);
        orphans.len() < before
    }

    /// Moves orphan pages back into the region (the source's essay); an orphan that still meets
    /// EAGAIN stays for the next call. Returns pages restored. Any thread may call it, at
    /// once with others and with [`UffdSource::forget_orphans`] (the event reader does after
    /// applying what it read; under SIGBUS delivery, a faulting thread whose fault was
    /// retried does too): an orphan is settled by whoever holds its lane's lock and finds it
    /// still listed, so none is settled twice. A second restorer that acted on a stale copy
    /// of the list moved a slot the first had freed: a panic, or, had another take's
    /// refusal made that slot an orphan again meanwhile, that page moved to this orphan's
    /// address and dropped there (`mmap_race` with forks under SIGBUS delivery, about 1 run
    /// in 100 died so). Nothing is restored while an event is read and not yet applied
    /// ([`crate::fence`]): an orphan's address may then be stale (a REMAP).
    ///
    /// Context: takes the fence, lane locks and the orphan list lock; one ioctl per page.
    pub fn restore_orphans(&self) -> usize {
        let home = self.home();
        let lanes = &*home.lanes;
        if !self.has_orphans() || self.inject_hold_orphans.load(Relaxed) {
            return 0;
        }
        let Some(_pass) = self.fence.try_enter() else { return 0 };
        let mut restored = 0;
        let pending: Vec<Orphan> = lock(&self.orphans).clone();
        for candidate in pending {
            let mut lane = lock(&lanes.lanes[candidate.lane]);
            let Some(orphan) = self.listed_orphan(candidate.lane, candidate.slot) else {
                continue; // settled by another thread since the copy
            };
            let run = SlotRun { first: orphan.slot, pages: 1 };
            let back = lane.staging.move_in(&home.uffd, run, orphan.addr as usize, MoveMode::NONE);
            let settled = match back {
                Ok(_) => {
                    restored += 1;
                    add(&self.counters.orphans_restored, 1);
                    lane.staging.free(run);
                    true
                }
                Err(Error::Again { .. }) => false,
                // Present (EEXIST: the page was filled meanwhile, keep it) or gone: drop ours.
                Err(_) => {
                    add(&self.counters.orphans_dropped, 1);
                    self.release(lanes, &mut lane, run);
                    true
                }
            };
            if settled {
                self.unlist_orphan(orphan.lane, orphan.slot, None);
            }
        }
        restored
    }

    /// The orphans' addresses and bytes, for a child forked while they were out of the
    /// program (the source's essay: the child has them missing, and the engine counts them
    /// resident here, so its copy of the page tables gives the child nothing for them).
    /// Call while the fork's event is held, before the orphans can be restored.
    ///
    /// Context: takes lane locks and the orphan list lock.
    pub fn orphan_pages(&self) -> Vec<(u64, Box<[u8]>)> {
        let home = self.home();
        let lanes = &*home.lanes;
        if !self.has_orphans() {
            return Vec::new();
        }
        let pending: Vec<Orphan> = lock(&self.orphans).clone();
        let mut pages = Vec::with_capacity(pending.len());
        for candidate in pending {
            let lane = lock(&lanes.lanes[candidate.lane]);
            let Some(orphan) = self.listed_orphan(candidate.lane, candidate.slot) else {
                continue;
            };
            if lane.staging.is_present(orphan.slot) {
                let mut bytes = vec![0u8; PAGE].into_boxed_slice();
                lane.staging.load(orphan.slot, &mut bytes);
                pages.push((orphan.addr, bytes));
            }
        }
        add(&self.counters.orphans_to_children, pages.len() as u64);
        pages
    }

    /// The program dropped or unmapped `[addr, addr + len)` (REMOVE, UNMAP): orphans there
    /// must never come back. Call before telling the engine.
    pub fn forget_orphans(&self, addr: u64, len: u64) {
        let home = self.home();
        let lanes = &*home.lanes;
        if !self.overlaps_orphan(addr, len) {
            return;
        }
        let gone: Vec<Orphan> = {
            let orphans = lock(&self.orphans);
            orphans.iter().copied().filter(|o| o.addr >= addr && o.addr < addr + len).collect()
        };
        for orphan in gone {
            let mut lane = lock(&lanes.lanes[orphan.lane]);
            // Settled meanwhile by a restorer: its slot is no longer ours (or holds an orphan
            // of a take since, which is forgotten only if it lies in the range too).
            if self.unlist_orphan(orphan.lane, orphan.slot, Some((addr, addr + len))) {
                self.release(lanes, &mut lane, SlotRun { first: orphan.slot, pages: 1 });
                add(&self.counters.orphans_dropped, 1);
            }
        }
    }

    /// The program moved `[from, from + len)` to `to` (REMAP): orphans move with it.
    pub fn remap_orphans(&self, from: u64, to: u64, len: u64) {
        if !self.overlaps_orphan(from, len) {
            return;
        }
        let mut orphans = lock(&self.orphans);
        for orphan in orphans.iter_mut().filter(|o| o.addr >= from && o.addr < from + len) {
            orphan.addr = orphan.addr - from + to;
        }
    }
}
