//! Fork mode and forked children's references: the handler thread's part in a fork.
//!
//! **Fork mode.** A forked child carries on with a copy of this process's engine
//! (crate::fork), so at the fork the engine must be at rest. The fork's prepare handler
//! pauses the engine's reclaim and asks this thread into fork mode: it keeps reading (a
//! thread whose fault is unread stays blocked, which is what is wanted) but processes
//! nothing, with one exception: the forking thread's own faults (glibc's fork touches the
//! malloc arenas and stdio streams, which may be paged out). Those it serves completely,
//! waking the forking thread only once the engine has returned, so that thread never
//! reaches the fork while the engine is mid-fault. Everything else read meanwhile waits in
//! reserved buffers (no allocation: a library's engine may allocate from glibc's heap,
//! whose locks the forking thread takes), and is processed when the mode ends.
//!
//! **Children's references.** A child reads the swap slots it inherited until it exits or
//! execs; the parent keeps a reference on each in an address space of references only
//! (`Engine::hold_for_child`), and this thread polls the read end of a pipe whose write end
//! only the child's line of processes holds (close-on-exec): when it hangs up, no process
//! that may read those slots is left, and the references go.
//!
//! Context: the `Control` methods run on the forking thread (the fork's prepare and parent
//! handlers, crate::fork) or in a forked child; the `Reader` methods on the handler thread.

use super::{Control, Reader, FORK_UNSTAGE_ROUNDS, HOLDS_MAX, RETRY_POLL};
use crate::source::lock;
use engine::region::MmId;
use engine::HoldId;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Duration;
use uffd::sys::process;
use uffd::Event;

/// A forked child's references: held until its pipe hangs up.
#[derive(Debug)]
pub(super) struct Hold {
    pub(super) hold: HoldId,
    pub(super) pipe: fds::Fd,
}

impl Control {
    /// Fork prepare: puts the thread into fork mode serving the calling thread's faults,
    /// and waits until it is there (module essay). The caller has closed the gate.
    pub(crate) fn enter_fork_mode(&self) {
        self.counters.forks.fetch_add(1, Relaxed);
        let state = {
            // Counted under the state lock: see `Reader::fork_mode`.
            let state = lock(&self.state);
            self.fork_tid.store(process::gettid(), SeqCst);
            self.fork_requests.fetch_add(1, SeqCst);
            state
        };
        self.signal();
        let _ready = self
            .changed
            .wait_while(state, |s| !s.forking && !s.stopped)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }

    /// Fork parent: out of fork mode, once the thread has left it (what it buffered is
    /// processed from then on, and the next fork's mode is an episode of its own), the
    /// gate open again.
    pub(crate) fn leave_fork_mode(&self) {
        let state = {
            let state = lock(&self.state);
            self.fork_requests.fetch_sub(1, SeqCst);
            state
        };
        self.signal();
        let _left = self
            .changed
            .wait_while(state, |s| s.forking && !s.stopped)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        drop(_left);
        self.gate.open();
    }

    /// Keeps a child's references (`Engine::hold_for_child`) until `pipe`, the read end of
    /// a pipe whose write end only the child's line holds, hangs up. Beyond [`HOLDS_MAX`]
    /// the references stay for the process's life.
    pub(crate) fn add_hold(&self, hold: HoldId, pipe: fds::Fd) {
        let mut holds = lock(&self.holds);
        if holds.len() >= HOLDS_MAX {
            self.counters.holds_unpolled.fetch_add(1, Relaxed);
            std::mem::forget(pipe);
            return;
        }
        holds.push(Hold { hold, pipe });
        self.counters.children_held.store(holds.len() as u64, Relaxed);
        self.holds_changed.store(true, SeqCst);
        drop(holds);
        self.signal();
    }

    /// The fork's references could not be tied to a pipe (no descriptor left): they stay
    /// until the process exits, counted.
    pub(crate) fn keep_hold_for_life(&self) {
        self.counters.holds_unpolled.fetch_add(1, Relaxed);
    }

    /// In a forked child: the wake eventfd is the parent's handler's copy, and its owner
    /// is forgotten with the parent's parts: closed by number.
    pub(crate) fn close_wake_in_child(&self) {
        let _ = uffd::sys::forking::close_raw(self.wake.number());
    }

    /// Releases `holds` on the handler thread, at its next pass (before it starts, for a
    /// control made beforehand).
    pub(crate) fn release_later(&self, holds: Vec<HoldId>) {
        lock(&self.releases).extend(holds);
    }

    /// In a forked child: the parent's hold pipes (read ends of its other children's) are
    /// not this process's to poll: closed.
    pub(crate) fn close_holds_in_child(&self) {
        drop(std::mem::take(&mut *lock(&self.holds)));
    }
}

impl Reader {
    /// Fork mode (module essay): staged pages put back first where they can be (fewer for the
    /// fork to carry over), then acknowledge, then only read, serving the forking thread's
    /// faults, until released.
    pub(super) fn fork_mode(&mut self) {
        for _ in 0..FORK_UNSTAGE_ROUNDS {
            if !self.engine.has_staged() {
                break;
            }
            self.poll(RETRY_POLL);
            self.read(true);
            self.process();
        }
        if self.control.holds_changed.load(SeqCst) {
            self.rebuild_pollfds();
        }
        {
            let mut state = lock(&self.control.state);
            state.forking = true;
            self.control.changed.notify_all();
        }
        // From here to the release: no allocation (poll, read into reserved buffers, and the
        // forking thread's faults, which allocate only as the engine does anywhere). The exit
        // is decided under the state lock, under which `enter_fork_mode` counts its request:
        // a request either keeps this loop going or finds `forking` false and waits for the
        // next acknowledgement, never one about to be withdrawn.
        loop {
            {
                let mut state = lock(&self.control.state);
                let requests = self.control.fork_requests.load(SeqCst);
                if requests == 0 || self.control.stop.load(SeqCst) {
                    state.forking = false;
                    self.control.changed.notify_all();
                    return;
                }
            }
            self.poll(Duration::from_millis(10));
            self.read(false);
            self.serve_forker(self.control.fork_tid.load(SeqCst));
        }
    }

    /// Serves the buffered faults of thread `forker`, each wholly before its wake (module
    /// essay); leaves the rest buffered, in order.
    fn serve_forker(&mut self, forker: u32) {
        let mut pending = std::mem::take(&mut self.pending);
        pending.retain(|(event, _)| {
            let Event::PageFault { addr, write, wp, thread_id, .. } = *event else { return true };
            if thread_id != forker || forker == 0 {
                return true;
            }
            self.source.defer_wakes(true);
            let outcome = self.engine.handle_access_in(MmId::DEFAULT, addr as u64, write, wp);
            self.source.defer_wakes(false);
            self.control.counters.fork_faults.fetch_add(1, Relaxed);
            if outcome.is_err() {
                self.control.counters.fault_errors.fetch_add(1, Relaxed);
            }
            // Mapped, or not (retried, gone, failed): the forking thread faults again if the
            // page is still missing.
            self.wake(addr);
            false
        });
        self.pending = pending;
    }

    pub(super) fn rebuild_pollfds(&mut self) {
        self.control.holds_changed.store(false, SeqCst);
        self.pollfds.clear();
        self.hold_ids.clear();
        let fd = |raw| libc::pollfd { fd: raw, events: libc::POLLIN, revents: 0 };
        self.pollfds_generation = fds::generation();
        self.pollfds.push(fd(self.control.wake.number()));
        self.pollfds.push(fd(self.uffd.raw_fd()));
        for hold in lock(&self.control.holds).iter() {
            self.pollfds.push(fd(hold.pipe.number()));
            self.hold_ids.push(hold.hold);
        }
    }

    /// Releases the references of every child whose hold pipe hung up, and those handed
    /// over by [`Control::release_later`].
    pub(super) fn release_holds(&mut self) {
        let later = std::mem::take(&mut *lock(&self.control.releases));
        for hold in later {
            self.engine.release_hold(hold);
        }
        let mut gone = false;
        for (i, p) in self.pollfds.iter().enumerate().skip(2) {
            if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) == 0 {
                continue;
            }
            let hold = self.hold_ids[i - 2];
            self.engine.release_hold(hold);
            let mut holds = lock(&self.control.holds);
            holds.retain(|h| h.hold != hold);
            self.control.counters.children_held.store(holds.len() as u64, Relaxed);
            self.control.counters.holds_released.fetch_add(1, Relaxed);
            gone = true;
        }
        if gone {
            self.rebuild_pollfds();
        }
    }
}
