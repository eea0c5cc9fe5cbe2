//! Kernel behaviour the frontend (`UffdSource`, the handler) is built on, verified on the
//! running kernel (6.18 on the development machine): how eviction's staging pages are
//! released without events, how a fork-shared page is made movable without touching it from
//! user space, and what a child's uffd says once the child has exited.
//!
//! The tests run one at a time ([`serial`]): a fork() in one test sends a FORK event to
//! every EVENT_FORK uffd of the process.

mod common;

use common::{pattern, uffd_or_skip, Handler};
use std::sync::Arc;
use std::time::Duration;
use uffd::{
    Advice, CopyMode, Error, Event, Features, Mapping, MoveMode, Range, RangeEvent, RegisterMode,
    Staging, Uffd, Wake, PAGE_SIZE,
};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Fact: `MADV_DONTNEED` on a range registered *WP-only* still sends REMOVE (the kernel
/// checks the uffd's features, not the registration mode), and waits for it to be read. So
/// a staging area registered with the event-enabled uffd cannot drop its pages with
/// `MADV_DONTNEED` from the thread that reads events, and costs an event round trip from
/// any other thread: the frontend releases staging pages another way (next test).
#[test]
fn madv_dontneed_on_a_wp_only_range_sends_remove() {
    let _serial = serial();
    let Some(uffd) = uffd_or_skip(Features::EVENT_REMOVE | Features::MOVE) else { return };
    let uffd = Arc::new(uffd);
    let handler = Handler::forward(Arc::clone(&uffd));
    let staging = Mapping::anonymous(2 * PAGE_SIZE).unwrap();
    uffd.register(staging.range(), RegisterMode::WP).unwrap();
    staging.store_u64(0, 7);
    staging.advise(0, PAGE_SIZE, Advice::DontNeed).unwrap();
    let Event::Range(RangeEvent::Remove { start, end }) = handler.next() else {
        panic!("expected REMOVE")
    };
    assert_eq!((start, end), (staging.addr(), staging.addr() + PAGE_SIZE));
}

/// Fact: `UFFDIO_MOVE` checks only that the *destination* is registered with the uffd the
/// ioctl is issued on: a page of a range registered with uffd A moves into a range
/// registered with uffd B through B. And a uffd without EVENT_REMOVE sends nothing when its
/// range is dropped. Together: staging (registered with the event uffd, so eviction's MOVE
/// sees that uffd's `mmap_changing`) empties into a discard area registered with a second,
/// event-less uffd, whose pages are dropped silently.
#[test]
fn move_through_a_second_uffd_then_dropping_there_sends_no_event() {
    let _serial = serial();
    let features = Features::EVENT_REMOVE | Features::MOVE;
    let Some(events) = uffd_or_skip(features) else { return };
    let events = Arc::new(events);
    let handler = Handler::forward(Arc::clone(&events));
    let quiet = Uffd::open(Features::MOVE).unwrap();
    let staging = Mapping::anonymous(PAGE_SIZE).unwrap();
    events.register(staging.range(), RegisterMode::WP).unwrap();
    let discard = Mapping::anonymous(PAGE_SIZE).unwrap();
    quiet.register(discard.range(), RegisterMode::WP).unwrap();
    staging.store(0, &pattern(3));
    let moved = quiet.move_from(discard.addr(), &staging, 0, PAGE_SIZE, MoveMode::NONE).unwrap();
    assert_eq!(moved, PAGE_SIZE);
    let mut page = vec![0u8; PAGE_SIZE];
    discard.load(0, &mut page);
    assert!(page == pattern(3), "the page moved with its data");
    discard.advise(0, PAGE_SIZE, Advice::DontNeed).unwrap();
    assert_eq!(discard.load_u64(0), 0, "dropped");
    // The staging slot is a hole again: a MOVE into it works (EEXIST otherwise).
    let region = Mapping::anonymous(PAGE_SIZE).unwrap();
    events.register(region.range(), RegisterMode::MISSING).unwrap();
    events.copy(region.addr(), &pattern(4), CopyMode::NONE).unwrap();
    events.move_from(staging.addr(), &region, 0, PAGE_SIZE, MoveMode::NONE).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(handler.events.try_recv().is_err(), "no event from the quiet uffd's drop");
}

/// fork(); the child waits for EOF on the pipe `fds`, then `_exit(0)`.
fn fork_waiting_child(fds: [i32; 2]) -> libc::pid_t {
    // SAFETY: the child only close(2)s, read(2)s and `_exit`s, all async-signal-safe.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut byte = 0u8;
        // SAFETY: close of the child's copy of the write end (else EOF never comes), read(2)
        // into one live byte, then `_exit`: async-signal-safe.
        unsafe {
            libc::close(fds[1]);
            libc::read(fds[0], (&raw mut byte).cast(), 1);
            libc::_exit(0);
        }
    }
    pid
}

fn pipe() -> [i32; 2] {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is two live ints for the new descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    fds
}

fn close(fd: i32) {
    // SAFETY: closes a descriptor this test owns.
    unsafe { libc::close(fd) };
}

fn wait(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: `status` is a live int; `pid` is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
}

/// Fact (6.18): nothing tells a uffd that its mm is gone. After the child exits, `poll` on
/// the child's uffd reports nothing (no POLLHUP, no POLLERR), and `read` says EAGAIN. But a
/// resolving ioctl says so: `UFFDIO_ZEROPAGE` at an address the child has no registered
/// mapping for (the parent's `MADV_DONTFORK` staging) is ENOENT while the child lives and
/// ESRCH once its mm is gone. The handler probes its children this way, side-effect free.
#[test]
fn a_childs_uffd_says_esrch_once_the_child_has_exited() {
    let _serial = serial();
    let features = Features::EVENT_FORK | Features::MOVE;
    let Some(uffd) = uffd_or_skip(features) else { return };
    let uffd = Arc::new(uffd);
    let handler = Handler::forward(Arc::clone(&uffd));
    let region = Mapping::anonymous(PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let probe_page = Mapping::anonymous(PAGE_SIZE).unwrap();
    probe_page.advise(0, PAGE_SIZE, Advice::DontFork).unwrap();
    let fds = pipe();
    let pid = fork_waiting_child(fds);
    let Event::Fork { child } = handler.next() else { panic!("expected FORK") };
    let probe = Range::new(probe_page.addr(), PAGE_SIZE).unwrap();
    let alive = child.zeropage(probe, Wake::DontWake).unwrap_err();
    assert!(matches!(alive, Error::NoEntry { .. }), "child alive: {alive:?}");
    close(fds[1]); // EOF: the child exits
    wait(pid);
    close(fds[0]);
    assert!(!child.wait_readable(Some(Duration::from_millis(50))).unwrap(), "no POLLIN/HUP");
    let mut events = Vec::with_capacity(uffd::READ_BATCH);
    assert_eq!(child.read_events(&mut events, uffd::READ_BATCH).unwrap(), 0);
    let gone = child.zeropage(probe, Wake::DontWake).unwrap_err();
    assert!(matches!(gone, Error::ProcessGone { .. }), "child gone: {gone:?}");
    let gone = child.copy(region.addr(), &pattern(1), CopyMode::NONE).unwrap_err();
    assert!(matches!(gone, Error::ProcessGone { .. }), "COPY into the gone child: {gone:?}");
}

/// Fact: `MADV_POPULATE_WRITE` makes a fork-shared page exclusive again (it takes the write
/// fault without writing), after which MOVE takes it; the data is unchanged. Unlike a
/// user-space no-op write, it fails with an error code (ENOMEM) instead of SIGSEGV if the
/// range was unmapped meanwhile, so a thread that may race with the program's munmap can
/// use it.
#[test]
fn populate_write_makes_a_shared_page_movable() {
    let _serial = serial();
    let Some(uffd) = uffd_or_skip(Features::MOVE) else { return };
    let region = Mapping::anonymous(PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    uffd.copy(region.addr(), &pattern(30), CopyMode::NONE).unwrap();
    let mut staging = Staging::new(&uffd, 1).unwrap();
    let fds = pipe();
    let pid = fork_waiting_child(fds);
    let run = staging.alloc_empty(1).unwrap();
    let e = staging.move_out(&uffd, &region, 0, run, MoveMode::NONE).unwrap_err();
    assert!(matches!(e, Error::Busy { done_bytes: 0, .. }), "shared with a live child: {e:?}");
    region.advise(0, PAGE_SIZE, Advice::PopulateWrite).unwrap();
    assert_eq!(staging.move_out(&uffd, &region, 0, run, MoveMode::NONE).unwrap(), PAGE_SIZE);
    let mut page = vec![0u8; PAGE_SIZE];
    staging.load(run.first, &mut page);
    assert!(page == pattern(30), "unchanged");
    close(fds[1]);
    wait(pid);
    close(fds[0]);
    let unmapped = Mapping::anonymous(PAGE_SIZE).unwrap();
    let addr = unmapped.range();
    drop(unmapped);
    // SAFETY: the range is unmapped; populate on it touches nothing of ours.
    let e = unsafe { uffd::mm::advise_raw(addr, Advice::PopulateWrite) }.unwrap_err();
    assert!(matches!(e, Error::Os { errno, .. } if errno.0 == libc::ENOMEM), "{e:?}");
}
