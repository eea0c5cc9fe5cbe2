//! Bringing the far tier's threads to rest around a fork.
//!
//! A forked child inherits a copy of everything the parent's threads held and of every
//! queue they waited in, but none of the threads. Two hazards follow for this crate's
//! threads (the flushers and the repairer):
//!
//! - A lock one of them held at the fork (a stripe of the slot table, a server's pool of
//!   connections, the staging buffer) is held forever in the child, whose reads need it.
//! - parking_lot queues its waiters in one process-wide table of thread records that live
//!   in each thread's stack. A thread of the parent waiting in parking_lot at the fork
//!   stays queued in the child's copy of the table; glibc hands that thread's stack to the
//!   child's next new thread, whose own record then lands on the queued one, and the two
//!   queues it is linked into are mixed: a wake-up is lost. The child's new reclaimer slept
//!   forever on a free page-table lock that way, and the child's next fork waited for it
//!   (cli `far::forked_children_read_their_parents_far_pages`).
//!
//! So before a fork ([`backend::ForkStep::Prepare`]) the threads are asked to rest, and
//! the fork waits until every one is here, holding nothing, asleep in std's futex-based
//! condition variable, whose state lives in the object alone:
//!
//! ```text
//!   flusher / repairer, top of their loop         ForkStep::Prepare (forking thread)
//!     paused? -> resting += 1, sleep here           paused = true, wake their waits
//!        until resumed (or shut down)               wait until resting == threads
//!     resting -= 1                                (fork)
//!                                                 parent: resume (paused = false)
//! ```
//!
//! Their waits for work check [`Rest::is_paused`] under their own lock, and the pause wakes
//! them under that lock, so none sleeps through it. The wait is bounded: a thread stuck on a
//! server that does not answer gets the request timeout and more, then the fork goes on,
//! counted (`far_fork_unrested`).
//!
//! Context: std's `Mutex` and `Condvar`; the threads rest holding no other lock.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

#[derive(Debug, Default)]
struct State {
    paused: bool,
    /// Threads asleep here.
    resting: usize,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Rest {
    state: Mutex<State>,
    changed: Condvar,
    /// `state.paused`, readable under other locks.
    paused: AtomicBool,
}

impl Rest {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the threads are asked to rest (a wait for work ends).
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(SeqCst)
    }

    /// A thread at the top of its loop: rests while a pause lasts, unless `shutdown`.
    ///
    /// Context: the caller holds no lock.
    pub(crate) fn rest_while_paused(&self, shutdown: &AtomicBool) {
        if !self.is_paused() {
            return;
        }
        let mut state = self.state();
        state.resting += 1;
        self.changed.notify_all();
        while state.paused && !shutdown.load(SeqCst) {
            state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        state.resting -= 1;
    }

    /// Asks the threads to rest, calls `wake` (which wakes their waits for work under those
    /// waits' locks), and waits until `threads` rest or `deadline` passes. True if they all
    /// rest.
    ///
    /// Context: blocks up to `deadline`.
    pub(crate) fn pause(&self, threads: usize, deadline: Instant, wake: impl Fn()) -> bool {
        let mut state = self.state();
        state.paused = true;
        self.paused.store(true, SeqCst);
        drop(state);
        wake();
        let mut state = self.state();
        while state.resting < threads {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state =
                self.changed.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        true
    }

    /// Ends a pause: the threads go back to work.
    pub(crate) fn resume(&self) {
        let mut state = self.state();
        state.paused = false;
        self.paused.store(false, SeqCst);
        drop(state);
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_pause_waits_until_every_thread_rests_and_resume_lets_them_go() {
        let rest = Arc::new(Rest::default());
        let (shutdown, turns) =
            (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (rest, shutdown, turns) = (rest.clone(), shutdown.clone(), turns.clone());
                std::thread::spawn(move || {
                    while !shutdown.load(SeqCst) {
                        rest.rest_while_paused(&shutdown);
                        turns.store(true, SeqCst);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        assert!(rest.pause(3, deadline, || {}), "every thread rests");
        turns.store(false, SeqCst);
        assert!(!rest.pause(4, Instant::now() + Duration::from_millis(20), || {}), "bounded");
        assert!(!turns.load(SeqCst), "a thread worked during the pause");
        rest.resume();
        while !turns.load(SeqCst) {
            assert!(Instant::now() < deadline, "the threads never went back to work");
            std::thread::yield_now();
        }
        assert!(rest.pause(3, deadline, || {}));
        shutdown.store(true, SeqCst);
        rest.resume();
        for thread in threads {
            thread.join().unwrap();
        }
    }
}
