//! Shared helpers of the kernel-behaviour tests: skip-or-require, a handler thread, page
//! patterns.
//!
//! Skipping: a test that needs userfaultfd skips (with the probe's reason printed) only when
//! the process is not root and `USWAP_REQUIRE_UFFD` is unset. As root (as in CI) an
//! unusable userfaultfd is a failure, so these tests cannot silently stop running.
//!
//! The frontend's tests include this file too (`#[path]`), for the same skip rule and page
//! pattern: it may use only what both crates' tests have (uffd, libc, std).

#![allow(dead_code)] // Each test binary uses a different subset.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use uffd::{Event, Features, Uffd, PAGE_SIZE};

/// Whether the environment demands that userfaultfd work.
pub fn required() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    root || std::env::var_os("USWAP_REQUIRE_UFFD").is_some()
}

/// A uffd with `features` (trapping kernel faults), or `None` after printing why the test
/// is skipped.
///
/// # Panics
/// If userfaultfd is unusable and the environment requires it.
pub fn uffd_or_skip(features: Features) -> Option<Uffd> {
    match uffd::probe().and_then(|p| p.require(features).map(|()| p)) {
        Ok(_) => Some(Uffd::open(features).expect("the probe passed but the uffd did not open")),
        Err(e) if !required() => {
            eprintln!("skipping: userfaultfd unavailable: {e}");
            None
        }
        Err(e) => panic!("userfaultfd must work here (root or USWAP_REQUIRE_UFFD): {e}"),
    }
}

/// Like [`uffd_or_skip`] with a builder.
pub fn builder_or_skip(builder: uffd::UffdBuilder, features: Features) -> Option<Uffd> {
    uffd_or_skip(Features::NONE)?;
    match builder.require(features).open() {
        Ok(u) => Some(u),
        Err(e) if !required() => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("uffd must open here: {e}"),
    }
}

/// A page whose every 8-byte word is `seed * 1_000_003 + word index`.
pub fn pattern(seed: u64) -> Vec<u8> {
    (0..PAGE_SIZE as u64 / 8).flat_map(|w| (seed * 1_000_003 + w).to_ne_bytes()).collect()
}

/// How many events a test may leave unreceived before the handler blocks.
const EVENTS_BOUND: usize = 1 << 16;

/// What a fault handler does with one page fault.
pub type Resolve = Box<dyn FnMut(&Uffd, &Event) + Send>;

/// A thread that polls a uffd, resolves page faults with a closure, and forwards every
/// event (faults included, after resolving) to `events`.
///
/// The thread does not allocate while handling events: a fork() in this process holds
/// glibc's malloc locks while it waits for its FORK event to be read, so a reader that
/// allocates on the way (an unbounded channel allocating a block on `send`, a growing Vec)
/// can deadlock against it. Hence a pre-allocated bounded channel, a batch vector with its
/// capacity reserved up front, and `spawn` returns only once the thread is in its loop
/// (a thread still starting up allocates). (postmortem: the first version used
/// `mpsc::channel` and returned at once; the fork test hung one run in three or four.)
pub struct Handler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Every event read, in order.
    pub events: Receiver<Event>,
}

impl Handler {
    /// Starts the thread.
    pub fn spawn(uffd: Arc<Uffd>, mut resolve: Resolve) -> Handler {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, events) = sync_channel(EVENTS_BOUND);
        let flag = Arc::clone(&stop);
        let (ready_tx, ready) = sync_channel(1);
        let thread = std::thread::spawn(move || {
            let mut batch = Vec::with_capacity(uffd::READ_BATCH);
            ready_tx.send(()).expect("spawner waits");
            while !flag.load(Ordering::Acquire) {
                if !uffd.wait_readable(Some(Duration::from_millis(10))).expect("poll") {
                    continue;
                }
                uffd.read_events(&mut batch, uffd::READ_BATCH).expect("read events");
                for event in batch.drain(..) {
                    if matches!(event, Event::PageFault { .. }) {
                        resolve(&uffd, &event);
                    }
                    forward(&tx, event, &flag);
                }
            }
        });
        ready.recv().expect("handler thread started");
        Handler { stop, thread: Some(thread), events }
    }

    /// A handler that only forwards events (for tests that expect no faults).
    pub fn forward(uffd: Arc<Uffd>) -> Handler {
        Handler::spawn(uffd, Box::new(|_, e| panic!("unexpected fault {e:?}")))
    }

    /// The next event within a generous bound.
    pub fn next(&self) -> Event {
        self.events.recv_timeout(Duration::from_secs(10)).expect("an event within 10 s")
    }
}

/// Sends `event` on, waiting while the channel is full, until the handler is told to stop:
/// a test that never reads its events (one that only counts faults) fills the channel,
/// and a plain blocking `send` then never saw the stop, so dropping the handler waited for
/// ever (`a_writer_never_loses_a_write_while_its_page_is_moved` hung a `.ci/run` once: its
/// writer faulted more than the channel holds, and the handler was parked in `send` while
/// the test joined it). No allocation: `try_send` on a bounded channel and a sleep.
fn forward(tx: &SyncSender<Event>, mut event: Event, stop: &AtomicBool) {
    loop {
        match tx.try_send(event) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => return, // gone at the end of a test
            Err(TrySendError::Full(back)) => {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                event = back;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let result = t.join();
            if !std::thread::panicking() {
                result.expect("handler thread panicked");
            }
        }
    }
}
