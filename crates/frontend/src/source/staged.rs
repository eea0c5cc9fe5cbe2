//! Staged pages: what a refused take leaves in staging, held for the engine.
//!
//! Why a take can leave pages out of the program is the source's essay (**Take refused**).
//! Here: the undo that puts them back, or, when it cannot, hands them to the engine as
//! staged pages (`SourceError::Staged`), and the three ways the engine settles each one:
//! put back ([`UffdSource::unstage`]), discarded ([`UffdSource::drop_staged`]), copied for
//! a forked child ([`UffdSource::read_staged`]). The engine owns their state; the source
//! only keeps their places: a held slot stays allocated, holding its page or empty (a page
//! the undo did put back, or a hole), until the engine settles it, so no other take can be
//! given that slot meanwhile.
//!
//! A place is a lane and a slot: `StageLoc(lane << 32 | slot)`; page `i` of a take staged
//! at its run's first slot is `i` slots on, in the same lane.
//!
//! Context: the engine settles a page under its page-table lock, so once only; each call
//! takes that page's lane lock.

use super::{add, lock, Home, Lane, UffdSource, PAGE, UNDO_TRIES};
use engine::{SourceError, StageLoc};
use std::sync::atomic::Ordering::Relaxed;
use uffd::staging::{SlotIndex, SlotRun};
use uffd::types::MoveMode;
use uffd::{Error, Uffd};

/// The place of `slot` of lane `lane`.
fn place(lane: usize, slot: SlotIndex) -> StageLoc {
    StageLoc(((lane as u64) << 32) | u64::from(slot.0))
}

/// The lane and slot of a place.
fn lane_slot(at: StageLoc) -> (usize, SlotIndex) {
    ((at.0 >> 32) as usize, SlotIndex(at.0 as u32))
}

impl UffdSource {
    /// Moves the first `done_pages` of a refused take back into the region and frees the
    /// rest of the run. `None` if they all went back (or none had left); else they stay
    /// held, and the error to give the engine says where (the source's essay).
    pub(super) fn undo(
        &self,
        home: &Home,
        lane_index: usize,
        lane: &mut Lane,
        run: SlotRun,
        addr: u64,
        done_pages: usize,
    ) -> Option<SourceError> {
        let done = done_pages as u32;
        let rest = SlotRun { first: SlotIndex(run.first.0 + done), pages: run.pages - done };
        if rest.pages > 0 {
            lane.staging.free(rest);
        }
        if done == 0 {
            return None;
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
                    return None;
                }
                Err(Error::Again { .. }) => uffd::sys::process::sched_yield(),
                // Any other answer: what is left in staging stays held.
                Err(_) => break,
            }
        }
        lane.held += done;
        add(&self.counters.staged_pages, u64::from(done));
        Some(SourceError::Staged { at: place(lane_index, moved.first), pages: done })
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

    /// See [`engine::PageSource::unstage`]. Nothing moves while an event is read and not yet
    /// applied ([`crate::fence`]): `addr` may then be stale (a REMAP), or a FORK not yet
    /// given the page.
    pub(super) fn unstage_page(&self, at: StageLoc, addr: u64) -> Result<(), SourceError> {
        let home = self.home();
        let (lane_index, slot) = lane_slot(at);
        let Some(_pass) = self.fence.try_enter() else { return Err(SourceError::Retry) };
        let mut lane = lock(&home.lanes.lanes[lane_index]);
        let one = SlotRun { first: slot, pages: 1 };
        if !lane.staging.is_present(slot) {
            self.settle(&mut lane, one, false);
            return Ok(());
        }
        match lane.staging.move_in(&home.uffd, one, addr as usize, MoveMode::NONE) {
            Ok(_) => {
                self.settle(&mut lane, one, false);
                add(&self.counters.unstaged_pages, 1);
                Ok(())
            }
            Err(Error::Again { .. }) => Err(SourceError::Retry),
            // A page is present there (filled meanwhile): it is the newer, ours goes.
            Err(Error::Exists { .. }) => {
                self.settle(&mut lane, one, true);
                self.release(&home.lanes, &mut lane, one);
                Ok(())
            }
            Err(error) => Err(super::source_error(error)),
        }
    }

    /// See [`engine::PageSource::drop_staged`].
    pub(super) fn drop_staged_page(&self, at: StageLoc) {
        let home = self.home();
        let (lane_index, slot) = lane_slot(at);
        let mut lane = lock(&home.lanes.lanes[lane_index]);
        let one = SlotRun { first: slot, pages: 1 };
        let present = lane.staging.is_present(slot);
        self.settle(&mut lane, one, present);
        if present {
            self.release(&home.lanes, &mut lane, one);
        }
    }

    /// See [`engine::PageSource::read_staged`].
    pub(super) fn read_staged_page(&self, at: StageLoc, out: &mut [u8]) -> bool {
        let home = self.home();
        let (lane_index, slot) = lane_slot(at);
        let lane = lock(&home.lanes.lanes[lane_index]);
        if !lane.staging.is_present(slot) {
            return false;
        }
        lane.staging.load(slot, out);
        true
    }

    /// A held slot settled: no longer held; freed now if `has_page` is false (the caller
    /// releases it otherwise, its page to the lane's next drain).
    fn settle(&self, lane: &mut Lane, one: SlotRun, has_page: bool) {
        lane.held = lane.held.saturating_sub(1);
        if !has_page {
            lane.staging.free(one);
        }
    }
}
