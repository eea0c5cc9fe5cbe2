//! The fault handler: one thread that reads every uffd of the managed process and of its
//! forked children, and turns their messages into engine calls.
//!
//! ```text
//!            poll(eventfd, uffd of mm 0, uffd of child 1, ...)      (one thread)
//!                 |
//!   read batches ──> pending (pre-allocated) ──> events first, in order:
//!                                                 FORK   -> engine.fork, serve the child's uffd
//!                                                 REMAP  -> engine.remap (orphans follow)
//!                                                 REMOVE -> engine.remove (orphans dropped)
//!                                                 UNMAP  -> engine.unmap (orphans dropped)
//!                                              then orphans restored, then faults:
//!                                                 engine.handle_fault_in(mm, addr, write)
//!                                                 Retry / not yet a region -> retained,
//!                                                 retried after the next read
//! ```
//!
//! Why events before the faults of a batch: the kernel returns faults first, so a fault can
//! sit in front of the event that explains it (mremap's REMAP for a fault at the new
//! address; the FORK whose child the fault's swap entry must already be shared with).
//!
//! Why a `Retry` fault is retained and not retried at once: the resolving ioctls say EAGAIN
//! while an event is unread (`mmap_changing`), and it clears only once *this* thread reads
//! that event; spinning on it would wait for itself. Retained faults are retried after the
//! next read, with a short poll timeout as the bound (an `mmap_changing` that ends without
//! an event, as a failed fork does, would otherwise leave them waiting).
//!
//! **Fork.** glibc's fork() takes the malloc locks and then waits in the kernel until this
//! thread reads the FORK event; if this thread allocated meanwhile, it would wait for those
//! locks: deadlock (docs/UFFD.md). So the process's `pthread_atfork` handlers
//! ([`atfork_prepare`], before the malloc locks are taken) put every handler into
//! **read-only mode** and wait until it is there: it only polls and reads into buffers
//! allocated in advance, and processes nothing. The `parent` handler takes it out again and
//! waits until the buffered events (the FORK among them) are processed, so the child's page
//! table is copied before any thread of the parent can change the parent's. A fork that
//! does not go through glibc's fork() (a raw clone without `CLONE_VM`) is not covered.
//!
//! **Children.** The FORK event carries the child's uffd; the child's faults arrive on it and
//! are served from the parent's swap through [`engine::Engine::fork`]'s address space. On
//! 6.18 nothing signals a child's exit on its uffd (no POLLHUP, reads say EAGAIN), but a
//! resolving ioctl into the child says ESRCH once its mm is gone and ENOENT while it lives at
//! an address it has no registered mapping for: every [`CHILD_PROBE_INTERVAL`] the handler
//! probes each child with a `UFFDIO_ZEROPAGE` at its own `MADV_DONTFORK` page, and calls
//! [`engine::Engine::exit_mm`] for the gone (tests/frontend_facts.rs).
//!
//! **Forwarded faults.** Under SIGBUS delivery a child's faults are signals in the child,
//! not messages; its signal handler posts them on a board this thread serves each turn,
//! after telling each new child its number ([`crate::forward`]; the same engine call as a
//! child's fault message, answered through the board instead of a wake).
//!
//! **The gate.** SIGBUS-mode resolution and `Region` unmapping run outside this thread; they
//! would change the parent's page table between the fork and the FORK's processing (a
//! swap-in frees the slot the child still needs). They pass [`Gate::enter`], which waits
//! while a fork is in progress; `atfork_prepare` closes the gate and waits for those inside.
//!
//! **Stale resident pages.** A program that drops a page (`MADV_DONTNEED`) right as the
//! engine learns of it (the zap follows the REMOVE's *reading*, not its processing; or a
//! range adopted with `adopt_populated` while the program drops a listed page) leaves the
//! engine counting a missing page as resident, and every fault on it is answered
//! "spurious": the thread would fault forever. So a spurious fault in the managed address
//! space is checked against the kernel (PAGEMAP_SCAN: neither present nor swapped) and
//! against the orphans (a page in staging is missing on purpose); a page missing for good
//! is dropped from the engine (`remove_in`: it reads as zero, as the program's drop says)
//! and the fault handled again, counted in `faults_resynced`.
//!
//! **The event fence.** From before this thread reads a uffd until the events read are
//! applied, no page is taken out of that address space ([`crate::fence`]): an UNMAP read
//! but not applied leaves the engine holding addresses another thread may already have
//! mapped again, and a move from there would take the new mapping's page.
//!
//! **Hooks.** A program that embeds the handler (the LD_PRELOAD shim) passes [`Hooks`]: told
//! of every fault with the time it waited in the handler, and of every event; and given a
//! turn on this thread after each processed batch, where changes to the managed set are
//! ordered with the events (registering a range there cannot race an UNMAP of it).
//!
//! Bounds: [`PENDING_MAX`] buffered messages (each unread message holds one thread of the
//! program, so a few hundred cover any program), [`RETAIN_MAX`] retained faults.

use crate::error::Error;
use crate::event::Event;
use crate::forward::{Answer, Forward};
use crate::mm::{Advice, Mapping};
use crate::pagemap::{Categories, PageMap, ScanArgs};
use crate::source::{lock, UffdSource};
use crate::sys::{call, process};
use crate::types::{Range, Wake};
use crate::uffd::{Uffd, READ_BATCH};
use crate::PAGE_SIZE;
use engine::region::MmId;
use engine::{Engine, FaultOutcome};

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// Messages buffered between reading and processing (read-only mode buffers only).
pub const PENDING_MAX: usize = 4096;
/// Faults kept for a retry at most; beyond, the oldest is woken (it faults again).
pub const RETAIN_MAX: usize = 1024;
/// A retained fault that keeps failing this many rounds is woken and forgotten (it faults
/// again if its page is still missing), so one stuck address cannot pin the list.
const RETAIN_ROUNDS_MAX: u32 = 1000;
/// How often children are probed for exit.
pub const CHILD_PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// Poll timeout with nothing to retry.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// Poll timeout while faults wait for a retry or orphans wait for a restore.
const RETRY_POLL: Duration = Duration::from_millis(1);

/// The registry's name for the handler's eventfd.
static WAKE: fds::Kind = fds::Kind {
    what: "fault handler's eventfd",
    if_lost: "the handler is woken by its poll timeout instead (at most 100 ms)",
    keep: false,
};

/// Counters of the handler thread.
#[derive(Debug, Default)]
struct Counters {
    reads: AtomicU64,
    messages: AtomicU64,
    faults: AtomicU64,
    faults_retained: AtomicU64,
    faults_abandoned: AtomicU64,
    fault_errors: AtomicU64,
    forks: AtomicU64,
    fork_orphans_given: AtomicU64,
    fork_orphans_failed: AtomicU64,
    remaps: AtomicU64,
    removes: AtomicU64,
    unmaps: AtomicU64,
    unknown_events: AtomicU64,
    event_errors: AtomicU64,
    children_exited: AtomicU64,
    readonly_episodes: AtomicU64,
    pending_full: AtomicU64,
    trims: AtomicU64,
    trim_ns: AtomicU64,
    faults_resynced: AtomicU64,
    faults_forwarded: AtomicU64,
    forward_slots_abandoned: AtomicU64,
    follow: crate::follow::FollowCounters,
}

/// A snapshot of the handler's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandlerStats {
    /// Batches read.
    pub reads: u64,
    /// Messages read.
    pub messages: u64,
    /// Fault messages handled (each retry counts again).
    pub faults: u64,
    /// Faults retained for a retry (`Retry`, or an address not yet in a region).
    pub faults_retained: u64,
    /// Retained faults given up on (woken; they fault again if still missing).
    pub faults_abandoned: u64,
    /// Faults the engine answered with an error (a poisoned page, a failing source).
    pub fault_errors: u64,
    /// FORK events (children served).
    pub forks: u64,
    /// Pages mapped into a forked child that were out of its parent (orphans of a refused
    /// take) when it was forked, or dropped because the child was gone.
    pub fork_orphans_given: u64,
    /// Such pages the child refused otherwise than as gone (its data is lost to it).
    pub fork_orphans_failed: u64,
    /// REMAP events.
    pub remaps: u64,
    /// REMOVE events.
    pub removes: u64,
    /// UNMAP events.
    pub unmaps: u64,
    /// Messages of an unknown kind.
    pub unknown_events: u64,
    /// Events the engine refused (e.g. a REMAP across regions).
    pub event_errors: u64,
    /// Children found gone and released.
    pub children_exited: u64,
    /// Times the handler went read-only for a fork.
    pub readonly_episodes: u64,
    /// Times the buffer was full and reading paused.
    pub pending_full: u64,
    /// Heap trims (free memory given back to the kernel).
    pub trims: u64,
    /// Time spent trimming, in nanoseconds.
    pub trim_ns: u64,
    /// Spurious faults on a page the engine counted resident but the kernel had not: the
    /// page was dropped from the engine and the fault handled again (module essay).
    pub faults_resynced: u64,
    /// Faults of forked children forwarded from their SIGBUS handlers and answered
    /// ([`crate::forward`]).
    pub faults_forwarded: u64,
    /// Board slots freed after their child died holding them (killed while it waited).
    pub forward_slots_abandoned: u64,
    /// Times the handler moved to the CPU of the thread whose faults it serves, and the
    /// reclaimer off it ([`HandlerOptions::follow`]).
    pub follow_moves: u64,
    /// Times the two went back to every CPU the process may use (faults from many threads).
    pub follow_releases: u64,
    /// Placements the kernel refused, or a followed thread whose CPU could not be read.
    pub follow_failed: u64,
    /// Children served now.
    pub children_live: u64,
}

/// The fork gate (module essay).
#[derive(Debug, Default)]
pub struct Gate {
    forking: AtomicU32,
    inside: AtomicU32,
}

/// Inside the gate; leaving on drop.
#[derive(Debug)]
pub struct GatePass<'a>(&'a Gate);

impl Gate {
    /// Waits while a fork is in progress, then enters. Async-signal-safe (atomics and
    /// `sched_yield` only).
    pub fn enter(&self) -> GatePass<'_> {
        loop {
            while self.forking.load(SeqCst) > 0 {
                process::sched_yield();
            }
            self.inside.fetch_add(1, SeqCst);
            if self.forking.load(SeqCst) == 0 {
                return GatePass(self);
            }
            self.inside.fetch_sub(1, SeqCst);
        }
    }

    fn close(&self) {
        self.forking.fetch_add(1, SeqCst);
        while self.inside.load(SeqCst) > 0 {
            process::sched_yield();
        }
    }

    fn open(&self) {
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
struct State {
    /// The thread is in read-only mode.
    readonly: bool,
    /// Incremented after every normal-mode processing pass.
    epoch: u64,
    /// The thread has ended.
    stopped: bool,
}

/// Shared between the handler thread, its owner and the fork hooks.
#[derive(Debug)]
pub struct Control {
    wake: fds::Fd,
    stop: AtomicBool,
    readonly_requests: AtomicU32,
    state: Mutex<State>,
    changed: Condvar,
    /// The fork gate.
    pub gate: Gate,
    counters: Counters,
    children_live: AtomicU64,
    /// The handler thread's id (0 until it runs).
    tid: AtomicU32,
    /// The process that made the handler (a forked child has a copy, and no thread).
    pub pid: i32,
    /// Forked children's faults forwarded here (SIGBUS delivery; `None`: not served).
    forward: Option<Forward>,
}

impl Control {
    fn new(forward: Option<Forward>) -> Result<Control, Error> {
        let wake = call::eventfd().map_err(|e| Error::os(crate::error::Op::Eventfd, e))?;
        let wake = fds::Fd::place(wake, &WAKE);
        Ok(Control {
            wake,
            stop: AtomicBool::new(false),
            readonly_requests: AtomicU32::new(0),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            gate: Gate::default(),
            counters: Counters::default(),
            children_live: AtomicU64::new(0),
            tid: AtomicU32::new(0),
            pid: process::getpid(),
            forward,
        })
    }

    /// In a forked child's SIGBUS handler: forwards the fault at `addr` (a write-protect
    /// fault when `wp`) to this handler (in the parent) and waits for its answer; `None`
    /// where children are not served so.
    pub fn forward_fault(&self, addr: u64, write: bool, wp: bool) -> Option<Answer> {
        let forward = self.forward.as_ref()?;
        // The eventfd only while this process's descriptor is still the owner's (forward.rs).
        let wake = || {
            let ours = process::shares_file_with(self.pid, self.wake.number());
            if ours {
                self.signal();
            }
            ours
        };
        Some(forward.request(self.pid, wake, addr, write, wp))
    }

    /// Waits until the handler thread has made two full passes (read its messages, applied
    /// their events to the engine, given the hooks their turn) after this call, waking it
    /// at once. Under SIGBUS delivery a fault that finds no region may be in a range the
    /// engine has not caught up with: one mremap'd, whose REMAP event the handler has read
    /// (the mremap caller waits for that) but not yet applied, or one registered by an
    /// adoption still in progress on the handler thread. After two passes both are done.
    /// Returns at once on the handler thread itself or in a process without it (a forked
    /// child): false then, there being nothing to wait for; else true, once the passes are
    /// made, the thread stopped, or `timeout` went by.
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
    /// come: on the handler thread itself, in a process without it (a forked child), and
    /// while a fork holds it read-only.
    ///
    /// Context: a program thread; usable in a SIGBUS handler, as [`Control::wait_passes`].
    pub fn wait_for(&self, timeout: Duration, done: impl Fn() -> bool) -> bool {
        if !self.in_owner()
            || self.tid.load(SeqCst) == process::gettid()
            || self.readonly_requests.load(SeqCst) > 0
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

    fn signal(&self) {
        // Checked: the write must never land in a file of the program's at this number.
        let _ = self.wake.checked(call::eventfd_signal);
    }

    /// Wakes the handler thread (to give [`Hooks::work`] a turn). Async-signal-safe: one
    /// eventfd write.
    pub fn wake(&self) {
        self.signal();
    }

    /// Whether this is the process that made the handler (not a forked child's copy).
    pub fn in_owner(&self) -> bool {
        process::getpid() == self.pid
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> HandlerStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Relaxed);
        HandlerStats {
            reads: get(&c.reads),
            messages: get(&c.messages),
            faults: get(&c.faults),
            faults_retained: get(&c.faults_retained),
            faults_abandoned: get(&c.faults_abandoned),
            fault_errors: get(&c.fault_errors),
            forks: get(&c.forks),
            fork_orphans_given: get(&c.fork_orphans_given),
            fork_orphans_failed: get(&c.fork_orphans_failed),
            remaps: get(&c.remaps),
            removes: get(&c.removes),
            unmaps: get(&c.unmaps),
            unknown_events: get(&c.unknown_events),
            event_errors: get(&c.event_errors),
            children_exited: c.children_exited.load(Acquire),
            readonly_episodes: get(&c.readonly_episodes),
            pending_full: get(&c.pending_full),
            trims: get(&c.trims),
            trim_ns: get(&c.trim_ns),
            faults_resynced: get(&c.faults_resynced),
            faults_forwarded: get(&c.faults_forwarded),
            forward_slots_abandoned: get(&c.forward_slots_abandoned),
            follow_moves: get(&c.follow.moves),
            follow_releases: get(&c.follow.releases),
            follow_failed: get(&c.follow.failed),
            children_live: get(&self.children_live),
        }
    }

    /// Fork prepare for this handler: close the gate, then read-only, and wait for it.
    fn prepare(&self) {
        self.gate.close();
        let state = {
            // Counted under the state lock: see `Reader::readonly`.
            let state = lock(&self.state);
            self.readonly_requests.fetch_add(1, SeqCst);
            state
        };
        self.signal();
        let _ready = self
            .changed
            .wait_while(state, |s| !s.readonly && !s.stopped)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }

    /// Fork parent for this handler: leave read-only mode, wait until what was buffered
    /// (the FORK event) is processed, then open the gate.
    fn parent(&self) {
        let before = lock(&self.state).epoch;
        self.readonly_requests.fetch_sub(1, SeqCst);
        self.signal();
        let state = lock(&self.state);
        let _done = self
            .changed
            .wait_while(state, |s| {
                !s.stopped && (s.epoch <= before || self.readonly_requests.load(SeqCst) > 0)
            })
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        drop(_done);
        self.gate.open();
    }
}

/// An event as [`Hooks::event`] sees it, after the engine has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noted {
    /// The address space forked; `child` is the child's address space in the engine.
    Fork {
        /// The child's address space (`None` if the engine refused it).
        child: Option<MmId>,
    },
    /// mremap moved `[from, from + len_bytes)` to `to`.
    Remap {
        /// Old start.
        from: usize,
        /// New start.
        to: usize,
        /// Length moved.
        len_bytes: usize,
    },
    /// `[start, end)` was dropped (MADV_DONTNEED).
    Remove {
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
    },
    /// `[start, end)` was unmapped.
    Unmap {
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
    },
}

/// What the handler reports to, and asks of, the program that runs it (module essay).
///
/// Context: every method runs on the handler thread, in normal mode (never while a fork is
/// pending), except [`Hooks::fault`] under SIGBUS delivery, which runs in the faulting
/// thread's signal handler. An implementation must not touch managed memory, nor wait for a
/// lock that a thread faulting on managed memory may hold: either would wait for this very
/// thread.
pub trait Hooks: Send + Sync + std::fmt::Debug {
    /// A fault of `thread_id` (0 without `UFFD_FEATURE_THREAD_ID`) at `addr` was handled,
    /// `wait_ns` after its message was read.
    fn fault(&self, mm: MmId, addr: usize, write: bool, thread_id: u32, wait_ns: u64) {
        let _ = (mm, addr, write, thread_id, wait_ns);
    }

    /// An event of address space `mm` was processed.
    fn event(&self, mm: MmId, event: Noted) {
        let _ = (mm, event);
    }

    /// A turn on the handler thread after each processed batch; `children` are the forked
    /// address spaces served now. Returns the longest the handler may wait for messages
    /// before the next turn (`None`: no deadline; the handler still turns at least every
    /// 100 ms).
    fn work(&self, engine: &Engine, children: &[MmId]) -> Option<Duration> {
        let _ = (engine, children);
        None
    }
}

/// How a handler runs.
#[derive(Debug, Clone)]
pub struct HandlerOptions {
    /// Give freed glibc heap back when it inflates the resident set ([`crate::trim`]).
    /// Off where the engine does not allocate from glibc's heap (the LD_PRELOAD shim, whose
    /// heap is the program's: a trim there would walk managed memory from this thread).
    pub trim: bool,
    /// Check spurious faults against the kernel and drop stale resident pages (module
    /// essay). Default on.
    pub resync: bool,
    /// The embedding program's hooks.
    pub hooks: Option<Arc<dyn Hooks>>,
    /// Serve forked children's faults forwarded from their SIGBUS handlers (SIGBUS
    /// delivery: [`crate::forward`]). Default off.
    pub forward_children: bool,
    /// Keep the handler on the CPU of the thread whose faults it serves, and the engine's
    /// reclaimer on the process's other CPUs (the follower: `crate::follow`). Needs the
    /// faults' thread ids (`UFFD_FEATURE_THREAD_ID`); without them, or on one CPU, it does
    /// nothing. Default off.
    pub follow: bool,
}

impl Default for HandlerOptions {
    fn default() -> Self {
        HandlerOptions {
            trim: true,
            resync: true,
            hooks: None,
            forward_children: false,
            follow: false,
        }
    }
}

/// One address space the handler serves.
#[derive(Debug)]
struct Served {
    mm: MmId,
    uffd: Arc<Uffd>,
    source: Arc<UffdSource>,
    /// Its source's event fence is written: events read from it are not all applied yet
    /// ([`crate::fence`]).
    fenced: bool,
}

/// A fault waiting for a retry.
#[derive(Debug, Clone, Copy)]
struct Retained {
    mm: MmId,
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
    /// `served[0]` is the managed address space; the rest are forked children.
    served: Vec<Served>,
    pollfds: Vec<libc::pollfd>,
    pollfds_stale: bool,
    /// The descriptor registry's generation when `pollfds` was built.
    pollfds_generation: u64,
    batch: Vec<Event>,
    /// Read messages with the time they were read.
    pending: Vec<(MmId, Event, Instant)>,
    faults: Vec<Retained>,
    retained: Vec<Retained>,
    /// A page no child has (`MADV_DONTFORK`): the exit probe's target.
    probe: Mapping,
    last_probe: Instant,
    trimmer: Option<crate::trim::Trimmer>,
    /// The managed address space's pagemap, for the stale-page check (`None`: off).
    pagemap: Option<PageMap>,
    hooks: Option<Arc<dyn Hooks>>,
    /// The children's address spaces (for [`Hooks::work`]), kept with `served`.
    children: Vec<MmId>,
    /// The longest the hooks let the handler wait for the next turn.
    work_wait: Option<Duration>,
    /// A forwarded fault was left for the next turn (an event unread).
    forwarded_left: bool,
    /// Children not yet told their number (forwarding: [`Reader::introduce`]).
    unintroduced: Vec<MmId>,
    /// Pages a child was forked without, not yet mapped into it ([`Reader::give_orphans`]).
    child_pages: Vec<(MmId, u64, Box<[u8]>)>,
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
    /// starting up allocates, and must not be the one a fork waits for). Registers the fork
    /// hooks (once per process).
    ///
    /// # Errors
    /// eventfd, mmap or thread creation failures; the fork hooks' registration.
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
        let forward =
            if options.forward_children { Some(Forward::new(uffd.clone())?) } else { None };
        let control = Arc::new(Control::new(forward)?);
        let probe = Mapping::anonymous(PAGE_SIZE)?;
        probe.advise(0, PAGE_SIZE, Advice::DontFork)?;
        let budget_bytes = engine.config().budget_bytes;
        // A process that changed its uid is not dumpable and may not open its own pagemap
        // (EACCES): it runs without the check rather than not at all.
        let pagemap = if options.resync { PageMap::open_self().ok() } else { None };
        let mut reader = Reader {
            engine,
            control: control.clone(),
            served: Vec::with_capacity(16),
            pollfds: Vec::with_capacity(17),
            pollfds_stale: true,
            pollfds_generation: 0,
            batch: Vec::with_capacity(READ_BATCH),
            pending: Vec::with_capacity(PENDING_MAX),
            faults: Vec::with_capacity(PENDING_MAX),
            retained: Vec::with_capacity(RETAIN_MAX),
            probe,
            last_probe: Instant::now(),
            trimmer: options.trim.then(|| crate::trim::Trimmer::new(budget_bytes)),
            pagemap,
            hooks: options.hooks,
            children: Vec::with_capacity(16),
            work_wait: None,
            forwarded_left: false,
            unintroduced: Vec::with_capacity(16),
            child_pages: Vec::new(),
            follower: if options.follow { crate::follow::Follower::new() } else { None },
        };
        reader.served.push(Served { mm: MmId::DEFAULT, uffd, source, fenced: false });
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
        register_fork_hooks(&control)?;
        Ok(Handler { control, thread: Some(thread) })
    }

    /// The control block.
    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }
}

impl Drop for Handler {
    /// Stops the thread and joins it; while forked children are still served, the thread is
    /// left running (detached) and ends with the last of them, so a child never loses its
    /// evicted pages to its parent's teardown (it would read them as zeros).
    fn drop(&mut self) {
        self.control.stop.store(true, SeqCst);
        self.control.signal();
        let thread = self.thread.take();
        if self.control.children_live.load(SeqCst) == 0 {
            if let Some(thread) = thread {
                let _ = thread.join();
            }
        }
    }
}

impl Reader {
    fn run(&mut self) {
        // Asked to stop, the thread still serves forked children until the last is gone.
        while !self.control.stop.load(SeqCst) || self.served.len() > 1 {
            if self.control.readonly_requests.load(SeqCst) > 0 {
                self.readonly();
                continue;
            }
            let busy = !self.retained.is_empty()
                || self.forwarded_left
                || self.served.iter().any(|s| s.source.has_orphans());
            // Messages buffered in read-only mode are processed without waiting.
            let timeout = if !self.pending.is_empty() {
                Duration::ZERO
            } else if busy {
                RETRY_POLL
            } else {
                IDLE_POLL
            };
            let timeout = self.work_wait.map_or(timeout, |wait| wait.min(timeout));
            self.poll(timeout);
            self.read_all();
            self.process();
            self.forwarded_left = self.serve_forwarded() || !self.unintroduced.is_empty();
            if let Some(follower) = &mut self.follower {
                follower.tick(&self.engine, &self.control.counters.follow);
            }
            if self.last_probe.elapsed() >= CHILD_PROBE_INTERVAL {
                self.probe_children();
            }
            if let Some(hooks) = &self.hooks {
                self.work_wait = hooks.work(&self.engine, &self.children);
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

    /// Read-only mode for a fork (module essay): restore orphans first (a child must not
    /// inherit their holes), then acknowledge and only read until released.
    fn readonly(&mut self) {
        for _ in 0..RETAIN_ROUNDS_MAX {
            if !self.served[0].source.has_orphans() {
                break;
            }
            self.poll(RETRY_POLL);
            self.read_all();
            self.process();
        }
        // The last allocation: a poll set for every uffd served (a FORK just processed may
        // have added one).
        if self.pollfds_stale {
            self.rebuild_pollfds();
        }
        self.control.counters.readonly_episodes.fetch_add(1, Relaxed);
        {
            let mut state = lock(&self.control.state);
            state.readonly = true;
            self.control.changed.notify_all();
        }
        // From here to the release: no allocation (poll, read into reserved buffers). The
        // exit is decided under the state lock, under which `prepare` counts its request:
        // a request either keeps this loop going or finds `readonly` false and waits for
        // the next acknowledgement, never an acknowledgement about to be withdrawn.
        loop {
            {
                let mut state = lock(&self.control.state);
                let requests = self.control.readonly_requests.load(SeqCst);
                if requests == 0 || self.control.stop.load(SeqCst) {
                    state.readonly = false;
                    self.control.changed.notify_all();
                    return;
                }
            }
            self.poll(Duration::from_millis(10));
            self.read_all();
        }
    }

    fn rebuild_pollfds(&mut self) {
        self.pollfds.clear();
        let fd = |raw| libc::pollfd { fd: raw, events: libc::POLLIN, revents: 0 };
        self.pollfds_generation = fds::generation();
        self.pollfds.push(fd(self.control.wake.number()));
        for served in &self.served {
            self.pollfds.push(fd(served.uffd.raw_fd()));
        }
        self.pollfds_stale = false;
    }

    fn poll(&mut self, timeout: Duration) {
        // A descriptor moved out of a program's way has a new number (crate `fds`).
        if self.pollfds_stale || self.pollfds_generation != fds::generation() {
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

    /// Reads one batch from every uffd `poll` found readable into `pending` (stops when
    /// `pending` is full; the rest stays in the kernel, holding its threads).
    fn read_all(&mut self) {
        for i in 0..self.served.len() {
            if self.pollfds.get(i + 1).is_none_or(|p| p.revents == 0) {
                continue;
            }
            let room = PENDING_MAX - self.pending.len();
            if room == 0 {
                self.control.counters.pending_full.fetch_add(1, Relaxed);
                return;
            }
            let served = &mut self.served[i];
            // No take while what is read here is not applied (crate::fence): written for
            // the read, then held while events wait, else released at once.
            let fresh = !served.fenced;
            if fresh {
                served.source.fence().write();
            }
            let read = served.uffd.read_events(&mut self.batch, room.min(READ_BATCH));
            if served.mm == MmId::DEFAULT && served.uffd.is_lost() {
                // Closed by a direct system call and not taken back (crate fds, said on
                // stderr): the managed memory is the kernel's plain memory now, and a page
                // the engine holds would read as zeros. The program ends here instead.
                process::end_with_sigbus(
                    b"uswap: the program's memory can no longer be served: \
                                           ending it with SIGBUS\n",
                );
            }
            let n = read.unwrap_or(0);
            if self.batch.iter().any(|event| !matches!(event, Event::PageFault { .. })) {
                served.source.fence().hold();
                served.fenced = true;
            } else if fresh {
                served.source.fence().release();
            }
            if n > 0 {
                let c = &self.control.counters;
                c.reads.fetch_add(1, Relaxed);
                c.messages.fetch_add(n as u64, Relaxed);
            }
            let (mm, now) = (served.mm, Instant::now());
            for event in self.batch.drain(..) {
                self.pending.push((mm, event, now));
            }
        }
    }

    /// Events first, in order; then orphans; then faults (the retained ones first).
    fn process(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let mut pending = pending;
        self.faults.clear();
        self.faults.append(&mut self.retained);
        for (mm, event, read_at) in pending.drain(..) {
            match event {
                Event::PageFault { addr, write, wp, thread_id, .. } => {
                    let fault = Retained { mm, addr, write, wp, thread_id, rounds: 0, read_at };
                    self.faults.push(fault);
                }
                other => self.event(mm, other),
            }
        }
        self.pending = pending;
        for served in &mut self.served {
            if served.fenced {
                served.source.fence().release();
                served.fenced = false;
            }
        }
        if !self.child_pages.is_empty() {
            self.give_orphans();
        }
        for served in &self.served {
            served.source.restore_orphans();
        }
        let mut faults = std::mem::take(&mut self.faults);
        for fault in faults.drain(..) {
            match self.fault(fault) {
                Attempt::Retain => self.retain(Retained { rounds: fault.rounds + 1, ..fault }),
                // The program's own threads only: a forked child's are not in /proc/self.
                Attempt::Done if fault.mm == MmId::DEFAULT => {
                    if let Some(follower) = &mut self.follower {
                        follower.note(fault.thread_id);
                    }
                }
                Attempt::Done => {}
            }
        }
        self.faults = faults;
    }

    fn retain(&mut self, fault: Retained) {
        self.control.counters.faults_retained.fetch_add(1, Relaxed);
        if fault.rounds >= RETAIN_ROUNDS_MAX || self.retained.len() >= RETAIN_MAX {
            self.control.counters.faults_abandoned.fetch_add(1, Relaxed);
            self.wake(fault.mm, fault.addr);
            return;
        }
        self.retained.push(fault);
    }

    fn served(&self, mm: MmId) -> Option<&Served> {
        self.served.iter().find(|s| s.mm == mm)
    }

    fn wake(&self, mm: MmId, addr: usize) {
        if let Some(served) = self.served(mm) {
            let _ = served.uffd.wake(Range::page_of(addr));
        }
    }

    fn fault(&self, fault: Retained) -> Attempt {
        self.control.counters.faults.fetch_add(1, Relaxed);
        let attempt = self.attempt(fault);
        if let (Attempt::Done, Some(hooks)) = (&attempt, &self.hooks) {
            let wait_ns = fault.read_at.elapsed().as_nanos() as u64;
            hooks.fault(fault.mm, fault.addr, fault.write, fault.thread_id, wait_ns);
        }
        attempt
    }

    fn attempt(&self, fault: Retained) -> Attempt {
        let c = &self.control.counters;
        let mut outcome =
            self.engine.handle_access_in(fault.mm, fault.addr as u64, fault.write, fault.wp);
        if !fault.wp && matches!(outcome, Ok(FaultOutcome::Spurious)) && self.resync(fault) {
            outcome = self.engine.handle_fault_in(fault.mm, fault.addr as u64, fault.write);
        }
        match outcome {
            Ok(FaultOutcome::Mapped | FaultOutcome::Spurious) => Attempt::Done,
            Ok(FaultOutcome::Retry) => Attempt::Retain,
            Ok(FaultOutcome::Gone) => {
                self.wake(fault.mm, fault.addr);
                Attempt::Done
            }
            // Not yet a region (a REMAP still unread), or a source failure that may pass.
            Err(engine::Error::OutsideRegions { .. } | engine::Error::Source(_)) => Attempt::Retain,
            // The page was poisoned (and its waiter woken): the access fails loudly.
            Err(_) => {
                c.fault_errors.fetch_add(1, Relaxed);
                self.wake(fault.mm, fault.addr);
                Attempt::Done
            }
        }
    }

    /// After a spurious answer in the managed address space: if the kernel has the page
    /// neither present nor swapped and it is no orphan, the engine's resident entry is
    /// stale (module essay): drop it and say so. One PAGEMAP_SCAN of one page.
    fn resync(&self, fault: Retained) -> bool {
        let (Some(pagemap), Some(managed)) = (&self.pagemap, self.served.first()) else {
            return false;
        };
        let page = fault.addr & !(PAGE_SIZE - 1);
        if fault.mm != managed.mm || managed.source.overlaps_orphan(page as u64, PAGE_SIZE as u64) {
            return false;
        }
        let args = ScanArgs {
            anyof: Categories::PRESENT | Categories::SWAPPED,
            report: Categories::PRESENT | Categories::SWAPPED,
            ..ScanArgs::default()
        };
        let mut found = Vec::new();
        let Ok(range) = Range::new(page, PAGE_SIZE) else { return false };
        match pagemap.scan(range, &args, &mut found) {
            Ok(result) if result.regions == 0 => {}
            _ => return false,
        }
        self.engine.remove_in(fault.mm, page as u64, PAGE_SIZE as u64);
        self.control.counters.faults_resynced.fetch_add(1, Relaxed);
        true
    }

    fn event(&mut self, mm: MmId, event: Event) {
        let control = self.control.clone();
        let c = &control.counters;
        let Some(source) = self.served(mm).map(|s| s.source.clone()) else { return };
        let (refused, noted) = match event {
            Event::Fork { child } => {
                c.forks.fetch_add(1, Relaxed);
                let child = self.fork(mm, child);
                (child.is_err(), Some(Noted::Fork { child: child.ok() }))
            }
            Event::Remap { from, to, len_bytes } => {
                c.remaps.fetch_add(1, Relaxed);
                source.remap_orphans(from as u64, to as u64, len_bytes as u64);
                let refused = self.engine.remap(mm, from as u64, to as u64, len_bytes as u64);
                (refused.is_err(), Some(Noted::Remap { from, to, len_bytes }))
            }
            Event::Remove { start, end } => {
                if control.forward.as_ref().is_some_and(|f| f.is_doorbell(start, end)) {
                    return; // a child's ring (crate::forward): its request is served below
                }
                c.removes.fetch_add(1, Relaxed);
                let len = (end - start) as u64;
                source.forget_orphans(start as u64, len);
                self.engine.remove_in(mm, start as u64, len);
                (false, Some(Noted::Remove { start, end }))
            }
            Event::Unmap { start, end } => {
                c.unmaps.fetch_add(1, Relaxed);
                let len = (end - start) as u64;
                source.forget_orphans(start as u64, len);
                self.engine.unmap_in(mm, start as u64, len);
                (false, Some(Noted::Unmap { start, end }))
            }
            Event::PageFault { .. } => (false, None),
            Event::Unknown { .. } => {
                c.unknown_events.fetch_add(1, Relaxed);
                (false, None)
            }
        };
        if refused {
            c.event_errors.fetch_add(1, Relaxed);
        }
        if let (Some(hooks), Some(noted)) = (&self.hooks, noted) {
            hooks.event(mm, noted);
        }
    }

    /// A child of address space `parent`: copy its page table, serve its uffd.
    fn fork(&mut self, parent: MmId, child: Uffd) -> Result<MmId, engine::Error> {
        let uffd = Arc::new(child);
        let source = Arc::new(UffdSource::child(uffd.clone()));
        let mm = self.engine.fork(parent, source.clone())?;
        if let Some(parent) = self.served(parent) {
            let pages = parent.source.orphan_pages();
            self.child_pages.extend(pages.into_iter().map(|(addr, bytes)| (mm, addr, bytes)));
        }
        self.served.push(Served { mm, uffd, source, fenced: false });
        self.give_orphans();
        if self.control.forward.is_some() {
            self.unintroduced.push(mm);
            self.introduce();
        }
        self.children.push(mm);
        self.pollfds_stale = true;
        self.control.children_live.store(self.served.len() as u64 - 1, Relaxed);
        Ok(mm)
    }

    /// Maps into forked children the pages that were orphans of their parent when they
    /// were forked (`UffdSource::orphan_pages`): out of the parent then, so missing in the
    /// child, and counted resident in the parent, so absent from the child's page tables.
    /// A child with an event of its own unread refuses the copy (`Retry`): it gets the page
    /// on a later turn. Present already (the child cannot have written it: it faults on a
    /// missing page until served) or the child gone: nothing to do.
    fn give_orphans(&mut self) {
        let served = &self.served;
        let counters = &self.control.counters;
        self.child_pages.retain(|(mm, addr, bytes)| {
            let Some(child) = served.iter().find(|s| s.mm == *mm) else { return false };
            match engine::PageSource::map(&*child.source, *addr, bytes) {
                Ok(_) | Err(engine::SourceError::Gone) => {
                    counters.fork_orphans_given.fetch_add(1, Relaxed);
                    false
                }
                Err(engine::SourceError::Retry) => true,
                Err(engine::SourceError::Failed(_)) => {
                    counters.fork_orphans_failed.fetch_add(1, Relaxed);
                    false
                }
            }
        });
    }

    /// Tells each child not yet told its number ([`crate::forward`]). A child with an event
    /// of its own in flight (a fork of its own, an munmap) refuses the copy with EAGAIN
    /// until this thread reads that event: it is told on a later turn. A child gone, or a
    /// copy failing otherwise, is not told: its faults go unanswered, and it dies of them
    /// as it would without forwarding.
    fn introduce(&mut self) {
        let Some(forward) = &self.control.forward else { return };
        let served = &self.served;
        self.unintroduced.retain(|&mm| {
            let Some(child) = served.iter().find(|s| s.mm == mm) else { return false };
            matches!(forward.introduce(&child.uffd, u64::from(mm.0)), Err(Error::Again { .. }))
        });
    }

    /// Serves the faults forked children forwarded ([`crate::forward`]); returns whether
    /// one was left for the next turn.
    fn serve_forwarded(&mut self) -> bool {
        if !self.unintroduced.is_empty() {
            self.introduce();
        }
        let control = self.control.clone();
        // Only a child posts on the board.
        let Some(forward) = control.forward.as_ref().filter(|_| self.served.len() > 1) else {
            return false;
        };
        forward.serve(|number, addr, write, wp| {
            let mm = self.served.iter().map(|s| s.mm).find(|mm| u64::from(mm.0) == number);
            let Some(mm) = mm.filter(|&mm| mm != MmId::DEFAULT) else {
                return Some(Answer::Failed);
            };
            let start = Instant::now();
            let answer = match self.engine.handle_access_in(mm, addr, write, wp) {
                Ok(FaultOutcome::Mapped | FaultOutcome::Spurious | FaultOutcome::Gone) => {
                    Answer::Resolved
                }
                Ok(FaultOutcome::Retry) | Err(engine::Error::Source(_)) => return None,
                Err(engine::Error::OutsideRegions { .. }) => Answer::NotMine,
                Err(_) => {
                    control.counters.fault_errors.fetch_add(1, Relaxed);
                    Answer::Failed
                }
            };
            control.counters.faults_forwarded.fetch_add(1, Relaxed);
            if let (Answer::Resolved, Some(hooks)) = (answer, &self.hooks) {
                let ns = start.elapsed().as_nanos() as u64;
                hooks.fault(mm, addr as usize, write, 0, ns);
            }
            Some(answer)
        })
    }

    /// Probes every child (module essay); releases those whose mm is gone, and the board
    /// slots of children that died while forwarding a fault.
    fn probe_children(&mut self) {
        self.last_probe = Instant::now();
        if let Some(forward) = &self.control.forward {
            let freed = forward.free_abandoned() as u64;
            self.control.counters.forward_slots_abandoned.fetch_add(freed, Relaxed);
        }
        let probe = self.probe.range();
        let mut i = 1;
        while i < self.served.len() {
            let gone = matches!(
                self.served[i].uffd.zeropage(probe, Wake::DontWake),
                Err(Error::ProcessGone { .. })
            );
            if gone {
                let served = self.served.remove(i);
                self.children.retain(|&mm| mm != served.mm);
                self.engine.exit_mm(served.mm);
                // Live before exited, published by the release: a reader that sees the
                // exit (`Control::stats` loads it first, acquiring) sees the child
                // gone from the live count and from the engine.
                self.control.children_live.store(self.served.len() as u64 - 1, Relaxed);
                self.control.counters.children_exited.fetch_add(1, Release);
                self.pollfds_stale = true;
            } else {
                i += 1;
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// Fork hooks (process-wide)
// ------------------------------------------------------------------------------------------

/// Every live handler's control block, for the fork hooks.
static CONTROLS: Mutex<Vec<Weak<Control>>> = Mutex::new(Vec::new());

thread_local! {
    /// The controls a fork in progress on this thread prepared (prepare and parent/child run
    /// on the forking thread).
    static FORKING: std::cell::RefCell<Vec<Arc<Control>>> = const {
        std::cell::RefCell::new(Vec::new())
    };
}

fn register_fork_hooks(control: &Arc<Control>) -> Result<(), Error> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    static RESULT: AtomicU32 = AtomicU32::new(0);
    ONCE.call_once(|| {
        if let Err(errno) = process::atfork(atfork_prepare, atfork_parent, atfork_child) {
            RESULT.store(errno.0 as u32, SeqCst);
        }
    });
    match RESULT.load(SeqCst) {
        0 => {}
        errno => {
            let errno = crate::sys::Errno(errno as i32);
            return Err(Error::Os { op: crate::error::Op::Atfork, errno });
        }
    }
    let mut controls = lock(&CONTROLS);
    controls.retain(|weak| weak.strong_count() > 0);
    controls.push(Arc::downgrade(control));
    Ok(())
}

/// `pthread_atfork` prepare: every handler of this process goes read-only (module essay).
/// Runs before glibc takes its malloc locks, so it may allocate.
pub extern "C" fn atfork_prepare() {
    let controls: Vec<Arc<Control>> = {
        let all = lock(&CONTROLS);
        all.iter().filter_map(Weak::upgrade).filter(|c| c.in_owner()).collect()
    };
    for control in &controls {
        control.prepare();
    }
    FORKING.with(|f| f.borrow_mut().extend(controls));
}

/// `pthread_atfork` parent: every handler leaves read-only mode and processes the FORK.
pub extern "C" fn atfork_parent() {
    let controls = FORKING.with(|f| std::mem::take(&mut *f.borrow_mut()));
    for control in &controls {
        control.parent();
    }
}

/// `pthread_atfork` child: the child has no handler thread; its copies of the handlers'
/// state are never used (every entry point checks the process id).
pub extern "C" fn atfork_child() {
    FORKING.with(|f| {
        // The Arcs' counts are the parent's, copied: forget them rather than drop them.
        let controls = std::mem::take(&mut *f.borrow_mut());
        std::mem::forget(controls);
    });
}
