//! The handler's control block, shared between the handler thread, its owner, the fork
//! hooks and the SIGBUS dispatcher; and the fork gate, which keeps every resolution made
//! outside the handler thread from changing the engine between a fork's prepare and the
//! fork.

use super::children::Hold;
use super::{Counters, HandlerStats, HOLDS_MAX};
use crate::source::lock;
use crate::Error;
use engine::HoldId;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use uffd::sys::{call, process};

/// The registry's name for the handler's eventfd.
static WAKE: fds::Kind = fds::Kind {
    what: "fault handler's eventfd",
    if_lost: "the handler is woken by its poll timeout instead (at most 100 ms)",
    keep: false,
};

/// The fork gate: SIGBUS-mode resolution and `Region` unmapping run outside the handler
/// thread, and would change the engine between the fork's prepare and the fork. They pass
/// [`Gate::enter`], which waits while a fork is in progress, unless the caller is the
/// forking thread itself (its own faults, in glibc's fork, are served).
#[derive(Debug, Default)]
pub struct Gate {
    forking: AtomicU32,
    /// The thread that closed the gate (0: none).
    forker: AtomicU32,
    inside: AtomicU32,
}

/// Inside the gate; leaving on drop.
#[derive(Debug)]
pub struct GatePass<'a>(&'a Gate);

impl Gate {
    /// Waits while a fork is in progress (unless this thread is forking), then enters.
    /// Async-signal-safe (atomics and `sched_yield` only).
    pub fn enter(&self) -> GatePass<'_> {
        let me = process::gettid();
        loop {
            while self.forking.load(SeqCst) > 0 && self.forker.load(SeqCst) != me {
                process::sched_yield();
            }
            self.inside.fetch_add(1, SeqCst);
            if self.forking.load(SeqCst) == 0 || self.forker.load(SeqCst) == me {
                return GatePass(self);
            }
            self.inside.fetch_sub(1, SeqCst);
        }
    }

    /// Closes the gate for a fork on this thread and waits for those inside to leave.
    pub(crate) fn close(&self) {
        self.forker.store(process::gettid(), SeqCst);
        self.forking.fetch_add(1, SeqCst);
        while self.inside.load(SeqCst) > 0 {
            process::sched_yield();
        }
    }

    /// Opens it again.
    pub(crate) fn open(&self) {
        self.forker.store(0, SeqCst);
        self.forking.fetch_sub(1, SeqCst);
    }
}

impl Drop for GatePass<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, SeqCst);
    }
}

/// What the fork hooks and the owner see of the handler thread.
#[derive(Debug, Default)]
pub(super) struct State {
    /// The thread is in fork mode.
    pub(super) forking: bool,
    /// Incremented after every normal-mode processing pass.
    pub(super) epoch: u64,
    /// The thread has ended.
    pub(super) stopped: bool,
}

/// Shared between the handler thread, its owner and the fork hooks.
#[derive(Debug)]
pub struct Control {
    pub(super) wake: fds::Fd,
    pub(super) stop: AtomicBool,
    pub(super) fork_requests: AtomicU32,
    /// The forking thread, whose faults fork mode serves.
    pub(super) fork_tid: AtomicU32,
    pub(super) state: Mutex<State>,
    pub(super) changed: Condvar,
    /// The fork gate.
    pub gate: Gate,
    pub(super) counters: Counters,
    /// Children's references, added by the fork's parent handler and released by this
    /// thread.
    pub(super) holds: Mutex<Vec<Hold>>,
    pub(super) holds_changed: AtomicBool,
    /// Holds this thread releases at its next pass (a forked child's copies of its
    /// parent's holds for its other children: [`Control::release_later`]).
    pub(super) releases: Mutex<Vec<HoldId>>,
    /// The handler thread's id (0 until it runs).
    pub(super) tid: AtomicU32,
    /// The process that made the handler.
    pub pid: i32,
}

impl Control {
    /// A control block for a handler about to start ([`Handler::spawn_on`]).
    ///
    /// # Errors
    /// The eventfd's.
    pub(crate) fn create() -> Result<Arc<Control>, Error> {
        Ok(Arc::new(Control::new()?))
    }

    fn new() -> Result<Control, Error> {
        let wake = call::eventfd().map_err(|e| uffd::Error::os(uffd::Op::Eventfd, e))?;
        let wake = fds::Fd::place(wake, &WAKE);
        Ok(Control {
            wake,
            stop: AtomicBool::new(false),
            fork_requests: AtomicU32::new(0),
            fork_tid: AtomicU32::new(0),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            gate: Gate::default(),
            counters: Counters::default(),
            holds: Mutex::new(Vec::with_capacity(HOLDS_MAX)),
            holds_changed: AtomicBool::new(false),
            releases: Mutex::new(Vec::new()),
            tid: AtomicU32::new(0),
            pid: process::getpid(),
        })
    }

    /// Waits until the handler thread has made two full passes (read its messages, applied
    /// their events to the engine, given the hooks their turn) after this call, waking it
    /// at once. Under SIGBUS delivery a fault that finds no region may be in a range the
    /// engine has not caught up with: one mremap'd, whose REMAP event the handler has read
    /// (the mremap caller waits for that) but not yet applied, or one registered by an
    /// adoption still in progress on the handler thread. After two passes both are done.
    /// Returns at once on the handler thread itself or in another process: false then,
    /// there being nothing to wait for; else true, once the passes are made, the thread
    /// stopped, or `timeout` went by.
    ///
    /// Context: usable in a SIGBUS handler (a futex-based mutex and condvar, which the
    /// interrupted program code never holds).
    pub fn wait_passes(&self, timeout: Duration) -> bool {
        if !self.in_owner() || self.tid.load(SeqCst) == process::gettid() {
            return false;
        }
        let before = lock(&self.state).epoch;
        self.wake_and_wait(timeout, |s| s.epoch < before + 2);
        true
    }

    /// Wakes the handler thread and waits until `done()` holds at the end of one of its
    /// passes (the embedder's [`Hooks::work`] makes it so), the thread stops, or `timeout`
    /// goes by; returns whether `done()` held. Returns false at once where no pass can
    /// come: on the handler thread itself, in another process, and while a fork holds it.
    ///
    /// Context: a program thread; usable in a SIGBUS handler, as [`Control::wait_passes`].
    pub fn wait_for(&self, timeout: Duration, done: impl Fn() -> bool) -> bool {
        if !self.in_owner()
            || self.tid.load(SeqCst) == process::gettid()
            || self.fork_requests.load(SeqCst) > 0
        {
            return false;
        }
        self.wake_and_wait(timeout, |_| !done());
        done()
    }

    /// Wakes the handler thread, then waits while `waiting` holds after its passes, until
    /// it stops or `timeout` goes by.
    fn wake_and_wait(&self, timeout: Duration, waiting: impl Fn(&State) -> bool) {
        self.signal();
        let state = lock(&self.state);
        let _state = self
            .changed
            .wait_timeout_while(state, timeout, |s| !s.stopped && waiting(s))
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }

    pub(super) fn signal(&self) {
        // Checked: the write must never land in a file of the program's at this number.
        let _ = self.wake.checked(call::eventfd_signal);
    }

    /// Wakes the handler thread (to give [`Hooks::work`] a turn). Async-signal-safe: one
    /// eventfd write.
    pub fn wake(&self) {
        self.signal();
    }

    /// Whether this is the process that made the handler.
    pub fn in_owner(&self) -> bool {
        process::getpid() == self.pid
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> HandlerStats {
        let mut stats = HandlerStats::default();
        self.counters.snapshot_into(&mut stats);
        stats
    }
}
