//! Quiescing the engine around a fork.
//!
//! A process that forks hands its child a copy of the engine's memory: page tables, swap
//! cache, LRU, the pool, every count. The child's engine carries on from that copy
//! (docs/ARCHITECTURE.md, "Fork"), so at the instant of the fork the copy must be
//! consistent: no page-out half done (a folio in the swap cache whose data is in neither
//! the program nor the pool), no writeback between its write and its erase, no compaction
//! moving objects. The frontend stops every fault but the forking thread's own; this stops
//! the rest, every reclaim of the engine's own:
//!
//! ```text
//!   reclaimer pass / direct reclaim / pageout()      pause (the forking thread)
//!     busy += 1                                        paused = true
//!     paused? -> busy -= 1, do nothing                 wait until busy == 0
//!     ... page out, write back, compact ...            (fork)
//!     busy -= 1                                      resume: paused = false
//! ```
//!
//! Long loops (reclaim to a watermark, writeback until the pool is under its limit) look
//! at the flag between batches, so a pause waits for at most one batch in flight. While
//! paused, a fault that would reclaim directly charges over the budget instead: the pause
//! lasts as long as a fork, and memory a fork is about to copy must not move.
//!
//! Context: atomics; `pause` yields while it waits.

use crate::sync::{AtomicBool, AtomicU64, Ordering::SeqCst, StdCondvar, StdMutex};

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct ForkPause {
    paused: AtomicBool,
    busy: AtomicU64,
}

/// A reclaim in progress; ends on drop.
#[derive(Debug)]
pub(crate) struct Busy<'a>(&'a ForkPause);

impl ForkPause {
    /// Starts a reclaim, unless the engine is paused.
    pub(crate) fn enter(&self) -> Option<Busy<'_>> {
        self.busy.fetch_add(1, SeqCst);
        if self.paused.load(SeqCst) {
            self.busy.fetch_sub(1, SeqCst);
            return None;
        }
        Some(Busy(self))
    }

    /// Whether a pause is asked for (a loop between batches stops).
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(SeqCst)
    }

    /// Stops new reclaims and waits for those in flight to end.
    pub(crate) fn pause(&self) {
        self.paused.store(true, SeqCst);
        while self.busy.load(SeqCst) > 0 {
            std::thread::yield_now();
        }
    }

    /// Lets reclaim run again.
    pub(crate) fn resume(&self) {
        self.paused.store(false, SeqCst);
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, SeqCst);
    }
}

/// The background reclaimer's doorbell: rung to wake it, and, for a fork, waited on until
/// the reclaimer is asleep in it (the lock released, nothing of the engine held), so that
/// the child's copy of the bell is free and its new reclaimer can sleep in it.
#[derive(Debug, Default)]
pub(crate) struct Doorbell {
    state: StdMutex<Bell>,
    rung: StdCondvar,
}

#[derive(Debug, Default)]
struct Bell {
    pending: bool,
    asleep: bool,
}

impl Doorbell {
    fn bell(&self) -> crate::sync::StdMutexGuard<'_, Bell> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes the sleeper (a ring while one is pending costs the lock only).
    pub(crate) fn ring(&self) {
        let mut bell = self.bell();
        if !bell.pending {
            bell.pending = true;
            self.rung.notify_all();
        }
    }

    /// Sleeps until rung or `stop()` holds; consumes the ring.
    pub(crate) fn sleep(&self, stop: impl Fn() -> bool) {
        let mut bell = self.bell();
        bell.asleep = true;
        while !bell.pending && !stop() {
            bell = self.rung.wait(bell).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        bell.asleep = false;
        bell.pending = false;
    }

    /// Returns once the sleeper is asleep in [`Doorbell::sleep`]: holding the lock and
    /// finding it so means it released the lock to wait.
    pub(crate) fn wait_asleep(&self) {
        loop {
            if self.bell().asleep {
                return;
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_pause_waits_for_reclaims_in_flight_and_refuses_new_ones() {
        let pause = std::sync::Arc::new(ForkPause::default());
        let busy = pause.enter().expect("not paused");
        let ended = std::sync::Arc::new(AtomicBool::new(false));
        let waiter = {
            let (pause, ended) = (pause.clone(), ended.clone());
            std::thread::spawn(move || {
                pause.pause();
                assert!(ended.load(SeqCst), "the pause returned with a reclaim in flight");
            })
        };
        while !pause.is_paused() {
            std::thread::yield_now();
        }
        assert!(pause.enter().is_none(), "a reclaim started while paused");
        ended.store(true, SeqCst);
        drop(busy);
        waiter.join().unwrap();
        pause.resume();
        assert!(pause.enter().is_some());
    }
}
