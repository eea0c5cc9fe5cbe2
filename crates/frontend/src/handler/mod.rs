//! The fault handler: one thread that reads the managed process's uffd and turns its
//! messages into engine calls.
//!
//! ```text
//!            poll(eventfd, uffd, hold pipes of forked children)      (one thread)
//!                 |
//!   read batches ──> pending (pre-allocated) ──> events first, in order:
//!                                                 REMAP  -> engine.remap
//!                                                 REMOVE -> engine.remove
//!                                                 UNMAP  -> engine.unmap
//!                                              then engine.unstage_all, then faults:
//!                                                 engine.handle_access_in(addr, write, wp)
//!                                                 Retry / not yet a region -> retained,
//!                                                 retried after the next read
//!   a hold pipe hangs up (its child exited or exec'd) -> engine.exit_mm(its references)
//! ```
//!
//! Why events before the faults of a batch: the kernel returns faults first, so a fault can
//! sit in front of the event that explains it (mremap's REMAP for a fault at the new
//! address).
//!
//! Why a `Retry` fault is retained and not retried at once: the resolving ioctls say EAGAIN
//! while an event is unread (`mmap_changing`), and it clears only once *this* thread reads
//! that event; spinning on it would wait for itself. Retained faults are retried after the
//! next read, with a short poll timeout as the bound.
//!
//! **Fork mode and children's references** (`children`): at a fork the thread serves
//! only the forking thread's faults until the fork is done, and it keeps a forked child's
//! references to swap slots until the child exits or execs.
//!
//! **Stale resident pages** (`resync`): a spurious fault on a page the engine counts
//! resident and the kernel has not is checked, and the stale entry dropped.
//!
//! **The control block** (`control`): what the owner, the fork hooks and the SIGBUS
//! dispatcher share with the thread, and the fork gate.
//!
//! **The event fence.** From before this thread reads the uffd until the events read are
//! applied, no page is taken out of the address space ([`crate::fence`]): an UNMAP read
//! but not applied leaves the engine holding addresses another thread may already have
//! mapped again, and a move from there would take the new mapping's page. In fork mode the
//! fence is left alone: takes are paused, and the only maps are the forking thread's.
//!
//! **Hooks.** A program that embeds the handler (the LD_PRELOAD shim) passes [`Hooks`]: told
//! of every fault with the time it waited in the handler, of every event, of forks; and
//! given a turn on this thread after each processed batch, where changes to the managed set
//! are ordered with the events (registering a range there cannot race an UNMAP of it).
//!
//! Bounds: [`PENDING_MAX`] buffered messages (each unread message holds one thread of the
//! program, so a few hundred cover any program), [`RETAIN_MAX`] retained faults,
//! [`HOLDS_MAX`] children's hold pipes polled.

mod children;
mod control;
mod resync;

pub use control::{Control, Gate, GatePass};

use crate::source::{lock, UffdSource};
use crate::Error;
use engine::region::MmId;
use engine::{Engine, FaultOutcome, HoldId};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uffd::event::Event;
use uffd::pagemap::PageMap;
use uffd::sys::{call, process};
use uffd::types::Range;
use uffd::{Uffd, READ_BATCH};

/// Messages buffered between reading and processing.
pub const PENDING_MAX: usize = 4096;
/// Faults kept for a retry at most; beyond, the oldest is woken (it faults again).
pub const RETAIN_MAX: usize = 1024;
/// A retained fault that keeps failing this many rounds is woken and forgotten (it faults
/// again if its page is still missing), so one stuck address cannot pin the list.
const RETAIN_ROUNDS_MAX: u32 = 1000;
/// Children's hold pipes polled at once; a fork beyond keeps its references until the
/// process exits (counted, `holds_unpolled`).
pub const HOLDS_MAX: usize = 1024;
/// Turns fork mode's entry spends putting staged pages back (a millisecond each at most);
/// those still out then are carried into the child by copy (crate::fork).
const FORK_UNSTAGE_ROUNDS: u32 = 16;
/// Poll timeout with nothing to retry.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// Poll timeout while faults wait for a retry or staged pages to go back.
const RETRY_POLL: Duration = Duration::from_millis(1);

counters::table! {
    /// Counters of the handler thread.
    pub(crate) struct Counters;
    /// A snapshot of the handler's counters.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct HandlerStats {
        counters {
            /// Batches read.
            reads,
            /// Messages read.
            messages,
            /// Fault messages handled (each retry counts again).
            faults,
            /// Faults retained for a retry (`Retry`, or an address not yet in a region).
            faults_retained,
            /// Retained faults given up on (woken; they fault again if still missing).
            faults_abandoned,
            /// Faults the engine answered with an error (a poisoned page, a failing source).
            fault_errors,
            /// Forks of this process (each through fork mode).
            forks,
            /// Faults of the forking thread served in fork mode.
            fork_faults,
            /// Children's references released (the child's line exited or exec'd).
            holds_released,
            /// Forks whose references could not be polled for release ([`HOLDS_MAX`] children
            /// live): they stay until the process exits.
            holds_unpolled,
            /// REMAP events.
            remaps,
            /// REMOVE events.
            removes,
            /// UNMAP events.
            unmaps,
            /// Messages of an unknown kind (a FORK, were the feature ever asked for).
            unknown_events,
            /// Events the engine refused (e.g. a REMAP across regions).
            event_errors,
            /// Times the buffer was full and reading paused.
            pending_full,
            /// Heap trims (free memory given back to the kernel).
            trims,
            /// Time spent trimming, in nanoseconds.
            trim_ns,
            /// Spurious faults on a page the engine counted resident but the kernel had not: the
            /// page was dropped from the engine and the fault handled again (`resync` essay).
            faults_resynced,
            /// Times the handler moved to the CPU of the thread whose faults it serves, and the
            /// reclaimer off it ([`HandlerOptions::follow`]).
            follow_moves,
            /// Times the two went back to every CPU the process may use (faults from many threads).
            follow_releases,
            /// Placements the kernel refused, or a followed thread whose CPU could not be read.
            follow_failed,
            /// Children whose references are held now (a gauge).
            children_held,
        }
    }
}

/// An event as [`Hooks::event`] sees it, after the engine has: uffd's range change, the
/// only kind handed on (faults are told by [`Hooks::fault`], a fork by [`Hooks::forked`]).
pub use uffd::RangeEvent as Noted;

/// A handled fault, as [`Hooks::fault`] is told of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultReport {
    /// The address space.
    pub mm: MmId,
    /// The faulting address.
    pub addr: usize,
    /// A write fault.
    pub write: bool,
    /// The faulting thread (0 without `UFFD_FEATURE_THREAD_ID`).
    pub thread_id: u32,
    /// How long the thread waited: from the message's read (handler delivery) or the signal
    /// (SIGBUS delivery) to its wake-up.
    pub wait_ns: u64,
    /// The fault brought back a page that had been on the active list before it was
    /// evicted (the engine's `workingset_restore_anon`): a page known to be used was pushed
    /// out, the loss a larger budget saves. A page's first refault after it left the
    /// inactive list is not one: that is how the engine learns, without access bits, that
    /// the page is used.
    pub thrashing: bool,
}

/// What the handler reports to, and asks of, the program that runs it (module essay).
///
/// Context: `fault`, `event` and `work` run on the handler thread, in normal mode (never
/// while a fork is pending), except [`Hooks::fault`] under SIGBUS delivery, which runs in
/// the faulting thread's signal handler. An implementation must not touch managed memory,
/// nor wait for a lock that a thread faulting on managed memory may hold: either would wait
/// for this very thread.
pub trait Hooks: Send + Sync + std::fmt::Debug {
    /// A fault was handled.
    fn fault(&self, fault: &FaultReport) {
        let _ = fault;
    }

    /// An event was processed.
    fn event(&self, mm: MmId, event: Noted) {
        let _ = (mm, event);
    }

    /// A turn on the handler thread after each processed batch. Returns the longest the
    /// handler may wait for messages before the next turn (`None`: no deadline; the handler
    /// still turns at least every 100 ms).
    fn work(&self, engine: &Engine) -> Option<Duration> {
        let _ = engine;
        None
    }

    /// The process forked. In the parent (`child` false), after the fork's parent handler
    /// has let the engine run again; in the child (`child` true), on its only thread, once
    /// its engine runs on its own uffd and threads (crate::fork), before the program's own
    /// child handlers, and before the child's engine reclaims anything: its reclaim stays
    /// paused until this returns, so nothing is written to the child's own swap device
    /// before it (faults are served meanwhile, charged past the budget if need be). The
    /// child may allocate and start threads here; it must not touch managed memory.
    fn forked(&self, engine: &Engine, child: bool) {
        let _ = (engine, child);
    }
}

/// How a handler runs.
#[derive(Debug, Clone)]
pub struct HandlerOptions {
    /// Give freed glibc heap back when it inflates the resident set ([`crate::trim`]).
    /// Off where the engine does not allocate from glibc's heap (the LD_PRELOAD shim, whose
    /// heap is the program's: a trim there would walk managed memory from this thread).
    pub trim: bool,
    /// Check spurious faults against the kernel and drop stale resident pages (`resync`
    /// essay). Default on.
    pub resync: bool,
    /// The embedding program's hooks.
    pub hooks: Option<Arc<dyn Hooks>>,
    /// Keep the handler on the CPU of the thread whose faults it serves, and the engine's
    /// reclaimer on the process's other CPUs (the follower: `crate::follow`). Needs the
    /// faults' thread ids (`UFFD_FEATURE_THREAD_ID`); without them, or on one CPU, it does
    /// nothing. Default off.
    pub follow: bool,
}

impl Default for HandlerOptions {
    fn default() -> Self {
        HandlerOptions { trim: true, resync: true, hooks: None, follow: false }
    }
}

/// A fault waiting for a retry.
#[derive(Debug, Clone, Copy)]
struct Retained {
    addr: usize,
    write: bool,
    /// A write to a write-protected page (a zero page the engine keeps uncharged).
    wp: bool,
    thread_id: u32,
    rounds: u32,
    /// When its message was read.
    read_at: Instant,
}

/// What one fault attempt came to.
enum Attempt {
    Done,
    Retain,
}

/// The handler thread's state (everything allocated before the loop starts).
struct Reader {
    engine: Arc<Engine>,
    control: Arc<Control>,
    uffd: Arc<Uffd>,
    source: Arc<UffdSource>,
    /// The source's event fence is written: events read are not all applied yet
    /// ([`crate::fence`]).
    fenced: bool,
    /// The wake eventfd, the uffd, then the hold pipes (`hold_ids` names theirs).
    pollfds: Vec<libc::pollfd>,
    hold_ids: Vec<HoldId>,
    batch: Vec<Event>,
    /// The descriptor registry's generation when `pollfds` was built.
    pollfds_generation: u64,
    /// Read messages with the time they were read.
    pending: Vec<(Event, Instant)>,
    faults: Vec<Retained>,
    retained: Vec<Retained>,
    trimmer: Option<crate::trim::Trimmer>,
    /// The managed address space's pagemap, for the stale-page check (`None`: off).
    pagemap: Option<PageMap>,
    hooks: Option<Arc<dyn Hooks>>,
    /// The longest the hooks let the handler wait for the next turn.
    work_wait: Option<Duration>,
    /// Places this thread and the reclaimer by the faults served ([`HandlerOptions::follow`]).
    follower: Option<crate::follow::Follower>,
}

/// The handler thread and its control block.
#[derive(Debug)]
pub struct Handler {
    control: Arc<Control>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Handler {
    /// Starts the handler for the managed address space (`uffd`, `source`, engine mm 0) and
    /// returns once its thread is in its loop with every buffer allocated (a thread still
    /// starting up allocates, and must not be the one a fork waits for).
    ///
    /// # Errors
    /// eventfd or thread creation failures.
    pub fn spawn(
        engine: Arc<Engine>,
        uffd: Arc<Uffd>,
        source: Arc<UffdSource>,
    ) -> Result<Handler, Error> {
        Handler::spawn_with(engine, uffd, source, HandlerOptions::default())
    }

    /// As [`Handler::spawn`], with `options`.
    ///
    /// # Errors
    /// As [`Handler::spawn`] (when /proc/self/pagemap cannot be opened, `resync` is off).
    pub fn spawn_with(
        engine: Arc<Engine>,
        uffd: Arc<Uffd>,
        source: Arc<UffdSource>,
        options: HandlerOptions,
    ) -> Result<Handler, Error> {
        Handler::spawn_on(None, engine, uffd, source, options)
    }

    /// As [`Handler::spawn_with`], with a control block made beforehand (`None`: a new
    /// one).
    ///
    /// # Errors
    /// As [`Handler::spawn`].
    pub(crate) fn spawn_on(
        control: Option<Arc<Control>>,
        engine: Arc<Engine>,
        uffd: Arc<Uffd>,
        source: Arc<UffdSource>,
        options: HandlerOptions,
    ) -> Result<Handler, Error> {
        let control = match control {
            Some(control) => control,
            None => Control::create()?,
        };
        let budget_bytes = engine.budget_bytes();
        // A process that changed its uid is not dumpable and may not open its own pagemap
        // (EACCES): it runs without the check rather than not at all.
        let pagemap = if options.resync { PageMap::open_self().ok() } else { None };
        let mut reader = Reader {
            engine,
            control: control.clone(),
            uffd,
            source,
            fenced: false,
            pollfds_generation: 0,
            pollfds: Vec::with_capacity(2 + HOLDS_MAX),
            hold_ids: Vec::with_capacity(HOLDS_MAX),
            batch: Vec::with_capacity(READ_BATCH),
            pending: Vec::with_capacity(PENDING_MAX),
            faults: Vec::with_capacity(PENDING_MAX),
            retained: Vec::with_capacity(RETAIN_MAX),
            trimmer: options.trim.then(|| crate::trim::Trimmer::new(budget_bytes)),
            pagemap,
            hooks: options.hooks,
            work_wait: None,
            follower: if options.follow { crate::follow::Follower::new() } else { None },
        };
        reader.rebuild_pollfds();
        let (ready_tx, ready) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("uswap-uffd".into())
            .spawn(move || {
                reader.control.tid.store(process::gettid(), SeqCst);
                let _ = ready_tx.send(());
                reader.run();
            })
            .map_err(|error| Error::Thread { what: "the fault handler", error })?;
        let _ = ready.recv();
        Ok(Handler { control, thread: Some(thread) })
    }

    /// The control block.
    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }
}

impl Drop for Handler {
    /// Stops the thread and joins it.
    fn drop(&mut self) {
        self.control.stop.store(true, SeqCst);
        self.control.signal();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Reader {
    fn run(&mut self) {
        while !self.control.stop.load(SeqCst) {
            if self.control.fork_requests.load(SeqCst) > 0 {
                self.fork_mode();
                continue;
            }
            let busy = !self.retained.is_empty() || self.engine.has_staged();
            // Messages buffered in fork mode are processed without waiting.
            let timeout = if !self.pending.is_empty() {
                Duration::ZERO
            } else if busy {
                RETRY_POLL
            } else {
                IDLE_POLL
            };
            let timeout = self.work_wait.map_or(timeout, |wait| wait.min(timeout));
            self.poll(timeout);
            self.read(true);
            self.process();
            self.release_holds();
            if let Some(follower) = &mut self.follower {
                let c = &self.control.counters;
                let counters = crate::follow::FollowCounters {
                    moves: &c.follow_moves,
                    releases: &c.follow_releases,
                    failed: &c.follow_failed,
                };
                follower.tick(&self.engine, counters);
            }
            if let Some(hooks) = &self.hooks {
                self.work_wait = hooks.work(&self.engine);
            }
            if let Some(trimmer) = &mut self.trimmer {
                if trimmer.tick(&self.engine) {
                    let c = &self.control.counters;
                    c.trims.store(trimmer.trims, Relaxed);
                    c.trim_ns.store(trimmer.trim_ns, Relaxed);
                }
            }
            let mut state = lock(&self.control.state);
            state.epoch += 1;
            self.control.changed.notify_all();
        }
        let mut state = lock(&self.control.state);
        state.stopped = true;
        self.control.changed.notify_all();
    }

    fn poll(&mut self, timeout: Duration) {
        // A descriptor moved out of a program's way has a new number (crate `fds`).
        let moved = self.pollfds_generation != fds::generation();
        let holds = self.control.holds_changed.load(SeqCst);
        if (holds || moved) && self.control.fork_requests.load(SeqCst) == 0 {
            self.rebuild_pollfds();
        }
        for p in &mut self.pollfds {
            p.revents = 0;
        }
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // EINTR and the like: the loop polls again.
        let _ = call::poll_many(&mut self.pollfds, ms);
        if self.pollfds[0].revents != 0 {
            let _ = self.control.wake.checked(call::eventfd_drain);
        }
    }

    /// Reads one batch from the uffd if `poll` found it readable into `pending` (stops when
    /// `pending` is full; the rest stays in the kernel, holding its threads). With `fence`,
    /// no take runs while what is read is not applied (crate::fence): written for the
    /// read, then held while events wait, else released at once.
    fn read(&mut self, fence: bool) {
        if self.pollfds[1].revents == 0 {
            return;
        }
        let room = PENDING_MAX - self.pending.len();
        if room == 0 {
            self.control.counters.pending_full.fetch_add(1, Relaxed);
            return;
        }
        let fresh = fence && !self.fenced;
        if fresh {
            self.source.fence().write();
        }
        let read = self.uffd.read_events(&mut self.batch, room.min(READ_BATCH));
        if self.uffd.is_lost() {
            // Closed by a direct system call and not taken back (crate fds, said on
            // stderr): the managed memory is the kernel's plain memory now, and a page
            // the engine holds would read as zeros. The program ends here instead.
            process::end_with_sigbus(
                b"uswap: the program's memory can no longer be served: ending it with SIGBUS\n",
            );
        }
        let n = read.unwrap_or(0);
        if fence && self.batch.iter().any(|event| !matches!(event, Event::PageFault { .. })) {
            self.source.fence().hold();
            self.fenced = true;
        } else if fresh {
            self.source.fence().release();
        }
        if n > 0 {
            let c = &self.control.counters;
            c.reads.fetch_add(1, Relaxed);
            c.messages.fetch_add(n as u64, Relaxed);
        }
        let now = Instant::now();
        for event in self.batch.drain(..) {
            self.pending.push((event, now));
        }
    }

    /// Events first, in order; then staged pages back; then faults (the retained ones
    /// first).
    fn process(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        self.faults.clear();
        self.faults.append(&mut self.retained);
        for (event, read_at) in pending.drain(..) {
            match event {
                Event::PageFault { addr, write, wp, thread_id, .. } => {
                    let fault = Retained { addr, write, wp, thread_id, rounds: 0, read_at };
                    self.faults.push(fault);
                }
                other => self.event(other),
            }
        }
        self.pending = pending;
        if self.fenced {
            self.source.fence().release();
            self.fenced = false;
        }
        self.engine.unstage_all();
        let mut faults = std::mem::take(&mut self.faults);
        for fault in faults.drain(..) {
            match self.fault(fault) {
                Attempt::Retain => self.retain(Retained { rounds: fault.rounds + 1, ..fault }),
                Attempt::Done => {
                    if let Some(follower) = &mut self.follower {
                        follower.note(fault.thread_id);
                    }
                }
            }
        }
        self.faults = faults;
    }

    fn retain(&mut self, fault: Retained) {
        self.control.counters.faults_retained.fetch_add(1, Relaxed);
        if fault.rounds >= RETAIN_ROUNDS_MAX || self.retained.len() >= RETAIN_MAX {
            self.control.counters.faults_abandoned.fetch_add(1, Relaxed);
            self.wake(fault.addr);
            return;
        }
        self.retained.push(fault);
    }

    fn wake(&self, addr: usize) {
        let _ = self.uffd.wake(Range::page_of(addr));
    }

    fn fault(&self, fault: Retained) -> Attempt {
        self.control.counters.faults.fetch_add(1, Relaxed);
        let restores = self.engine.thrash_refaults();
        let attempt = self.attempt(fault);
        if let (Attempt::Done, Some(hooks)) = (&attempt, &self.hooks) {
            hooks.fault(&FaultReport {
                mm: MmId::DEFAULT,
                addr: fault.addr,
                write: fault.write,
                thread_id: fault.thread_id,
                wait_ns: fault.read_at.elapsed().as_nanos() as u64,
                // Only a swap-in counts a restore, and this thread resolves its faults one
                // at a time: the count moved for this fault (or a page its readahead
                // brought back). A figure for the budget controller, not for safety.
                thrashing: self.engine.thrash_refaults() != restores,
            });
        }
        attempt
    }

    fn attempt(&self, fault: Retained) -> Attempt {
        let c = &self.control.counters;
        let addr = fault.addr as u64;
        let mut outcome = self.engine.handle_access_in(MmId::DEFAULT, addr, fault.write, fault.wp);
        if !fault.wp && matches!(outcome, Ok(FaultOutcome::Spurious)) && self.resync(fault) {
            outcome = self.engine.handle_fault_in(MmId::DEFAULT, addr, fault.write);
        }
        match outcome {
            Ok(FaultOutcome::Mapped | FaultOutcome::Spurious) => Attempt::Done,
            Ok(FaultOutcome::Retry) => Attempt::Retain,
            Ok(FaultOutcome::Gone) => {
                self.wake(fault.addr);
                Attempt::Done
            }
            // Not yet a region (a REMAP still unread), or a source failure that may pass.
            Err(engine::Error::OutsideRegions { .. } | engine::Error::Source(_)) => Attempt::Retain,
            // The page was poisoned (and its waiter woken): the access fails loudly.
            Err(_) => {
                c.fault_errors.fetch_add(1, Relaxed);
                self.wake(fault.addr);
                Attempt::Done
            }
        }
    }

    fn event(&mut self, event: Event) {
        let c = &self.control.counters;
        match event {
            Event::Range(noted) => {
                if self.follow(noted) {
                    c.event_errors.fetch_add(1, Relaxed);
                }
                if let Some(hooks) = &self.hooks {
                    hooks.event(MmId::DEFAULT, noted);
                }
            }
            Event::PageFault { .. } => {}
            Event::Fork { .. } | Event::Unknown { .. } => {
                c.unknown_events.fetch_add(1, Relaxed);
            }
        }
    }

    /// Has the engine follow a range change; true if it refused it.
    fn follow(&self, noted: Noted) -> bool {
        let c = &self.control.counters;
        let mm = MmId::DEFAULT;
        match noted {
            Noted::Remap { from, to, len_bytes } => {
                c.remaps.fetch_add(1, Relaxed);
                self.engine.remap(mm, from as u64, to as u64, len_bytes as u64).is_err()
            }
            Noted::Remove { start, end } => {
                c.removes.fetch_add(1, Relaxed);
                let len = (end - start) as u64;
                self.engine.remove_in(mm, start as u64, len);
                false
            }
            Noted::Unmap { start, end } => {
                c.unmaps.fetch_add(1, Relaxed);
                let len = (end - start) as u64;
                self.engine.unmap_in(mm, start as u64, len);
                false
            }
        }
    }
}
