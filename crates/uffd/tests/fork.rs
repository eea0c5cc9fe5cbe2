//! Kernel behaviour across fork(): EVENT_FORK delivers the child's uffd; without it the
//! child reads evicted pages as zeros until it registers a uffd of its own; a page shared
//! with a child cannot be MOVEd (EBUSY).
//!
//! The child of a fork() in a multi-threaded test process does little: it reads memory with
//! volatile loads, maybe read(2)s a pipe or makes uffd system calls, and `_exit`s with a
//! code that says what it saw. No locks, no panics in the child.
//!
//! The tests of this file run one at a time ([`serial`]): a fork() in one test would send
//! a FORK event to every EVENT_FORK uffd of the process, including another test's.

mod common;

use common::{pattern, uffd_or_skip, Handler};
use std::sync::Arc;
use uffd::{CopyMode, Error, Event, Features, Mapping, MoveMode, RegisterMode, Staging, PAGE_SIZE};

/// Serializes the tests of this binary (see the file's doc).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Exit codes of the child.
const SAW_EXPECTED: i32 = 0;
const SAW_WRONG: i32 = 1;

/// The first, second and last words of a pattern page (what the child checks).
fn words(seed: u64) -> [u64; 3] {
    let page = pattern(seed);
    let word = |i: usize| u64::from_ne_bytes(page[i * 8..i * 8 + 8].try_into().unwrap());
    [word(0), word(1), word(PAGE_SIZE / 8 - 1)]
}

/// In the child: compares the three words of `page` of `region`, volatile loads only.
fn child_sees(region: &Mapping, page: usize, expected: [u64; 3]) -> bool {
    let base = page * PAGE_SIZE;
    region.load_u64(base) == expected[0]
        && region.load_u64(base + 8) == expected[1]
        && region.load_u64(base + PAGE_SIZE - 8) == expected[2]
}

/// fork(); in the child runs `child` and `_exit`s with its code; in the parent returns the
/// child's pid.
fn fork_child(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child runs only `child`, which by this file's rule is async-signal-safe,
    // and leaves with `_exit` (no destructors, no atexit handlers, no stdio flush).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child();
        // SAFETY: `_exit` is async-signal-safe and ends the child here.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits for `pid`; returns its exit code.
fn exit_code(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `status` is a live int; `pid` is our child.
    let got = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(got, pid);
    assert!(libc::WIFEXITED(status), "child did not exit normally: status {status:#x}");
    libc::WEXITSTATUS(status)
}

/// Fact: with EVENT_FORK the parent's handler receives the child's uffd (fork waits until
/// it is read); the child's copy of the range stays registered, so the child's touch of an
/// evicted page faults on the child's uffd, and a COPY through it (from the parent's
/// memory) serves the child: the child reads the parent's data, never zeros.
#[test]
fn event_fork_hands_over_the_child_uffd_and_copy_serves_the_child() {
    let _serial = serial();
    let Some(uffd) = uffd_or_skip(Features::EVENT_FORK) else { return };
    let uffd = Arc::new(uffd);
    let parent_handler = Handler::forward(Arc::clone(&uffd));
    let region = Mapping::anonymous(2 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    uffd.copy(region.page_addr(0), &pattern(10), CopyMode::NONE).unwrap();
    // Page 1 is "evicted": its data lives only in the parent's swap, here this buffer.
    let swapped = pattern(11);
    let (resident, evicted) = (words(10), words(11));

    let pid = fork_child(|| {
        let ok = child_sees(&region, 0, resident) && child_sees(&region, 1, evicted);
        if ok {
            SAW_EXPECTED
        } else {
            SAW_WRONG
        }
    });
    let Event::Fork { child } = parent_handler.next() else { panic!("expected FORK") };
    assert_eq!(child.features(), uffd.features());
    let child_handler = Handler::spawn(
        Arc::new(child),
        Box::new(move |child_uffd, e| {
            let Event::PageFault { addr, .. } = *e else { unreachable!() };
            child_uffd.copy(addr, &swapped, CopyMode::NONE).unwrap();
        }),
    );
    assert_eq!(exit_code(pid), SAW_EXPECTED, "the child read the parent's data");
    let Event::PageFault { addr, .. } = child_handler.next() else { panic!() };
    assert_eq!(addr, region.page_addr(1), "the child faulted on the evicted page only");
}

/// Fact: without EVENT_FORK the child's copy of a registered range is unregistered: the
/// child reads an evicted page as zeros, silently (why a swap must handle fork).
#[test]
fn without_event_fork_the_child_reads_evicted_pages_as_zeros() {
    let _serial = serial();
    let Some(uffd) = uffd_or_skip(Features::NONE) else { return };
    let region = Mapping::anonymous(2 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    uffd.copy(region.page_addr(0), &pattern(20), CopyMode::NONE).unwrap();
    let resident = words(20);
    let pid = fork_child(|| {
        let zeros = child_sees(&region, 1, [0; 3]);
        if child_sees(&region, 0, resident) && zeros {
            SAW_EXPECTED
        } else {
            SAW_WRONG
        }
    });
    assert_eq!(exit_code(pid), SAW_EXPECTED, "the child saw zeros where the evicted page was");
}

/// Fact: a forked child can register its copy of the range with a uffd of its own (no
/// `EVENT_FORK`, no `CAP_SYS_PTRACE`), resolve its missing pages through it, and move the
/// range from one of its uffds to another (unregister, register): what the swap's fork
/// handler does (docs/ARCHITECTURE.md, "Fork").
#[test]
fn a_child_registers_a_uffd_of_its_own_and_resolves_through_it() {
    let _serial = serial();
    let Some(uffd) = uffd_or_skip(Features::NONE) else { return };
    let region = Mapping::anonymous(2 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    uffd.copy(region.page_addr(0), &pattern(30), CopyMode::NONE).unwrap();
    let (resident, served) = (words(30), words(31));
    let page = pattern(31);
    let pid = fork_child(|| {
        let (Ok(first), Ok(second)) =
            (uffd::Uffd::open(Features::NONE), uffd::Uffd::open(Features::SIGBUS))
        else {
            return 2;
        };
        if first.register(region.range(), RegisterMode::MISSING).is_err()
            || first.unregister(region.range()).is_err()
            || second.register(region.range(), RegisterMode::MISSING).is_err()
        {
            return 3;
        }
        // Registered with `second` now: a COPY through it fills the missing page (it would
        // say ENOENT through a uffd the range is not registered with).
        if second.copy(region.page_addr(1), &page, CopyMode::NONE).is_err()
            || first.copy(region.page_addr(1), &page, CopyMode::NONE).is_ok()
        {
            return 4;
        }
        if child_sees(&region, 0, resident) && child_sees(&region, 1, served) {
            SAW_EXPECTED
        } else {
            SAW_WRONG
        }
    });
    assert_eq!(exit_code(pid), SAW_EXPECTED, "the child served its page through its own uffd");
}

/// Fact: after fork the parent's present pages are shared with the child, and MOVE refuses
/// them with EBUSY, also after the child exited, until the parent writes the page (the
/// write fault makes it exclusive again). An atomic no-op write is such a write: it breaks
/// the sharing without changing data, and MOVE then works (the eviction fallback that
/// needs no write protection).
#[test]
fn move_of_a_page_shared_with_a_child_is_ebusy_until_a_no_op_write() {
    let _serial = serial();
    let Some(uffd) = uffd_or_skip(Features::MOVE) else { return };
    let region = Mapping::anonymous(PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    uffd.copy(region.addr(), &pattern(30), CopyMode::NONE).unwrap();
    let mut staging = Staging::new(&uffd, 1).unwrap();
    let mut pipe = [0i32; 2];
    // SAFETY: `pipe` is two live ints for the new descriptors.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let pid = fork_child(|| {
        let mut byte = 0u8;
        // SAFETY: read(2) into one live byte; async-signal-safe.
        unsafe { libc::read(pipe[0], (&raw mut byte).cast(), 1) };
        SAW_EXPECTED
    });
    let run = staging.alloc_empty(1).unwrap();
    let e = staging.move_out(&uffd, &region, 0, run, MoveMode::NONE).unwrap_err();
    assert!(matches!(e, Error::Busy { done_bytes: 0, .. }), "shared with a live child: {e:?}");
    // SAFETY: write(2) of one live byte to our pipe, then close both ends we own.
    unsafe {
        libc::write(pipe[1], [1u8].as_ptr().cast(), 1);
        libc::close(pipe[0]);
        libc::close(pipe[1]);
    }
    assert_eq!(exit_code(pid), SAW_EXPECTED);
    let e = staging.move_out(&uffd, &region, 0, run, MoveMode::NONE).unwrap_err();
    assert!(matches!(e, Error::Busy { .. }), "still not exclusive after the child exited: {e:?}");
    // An atomic no-op write breaks the copy-on-write sharing without changing a byte, even
    // against a concurrent writer: then MOVE takes the page. postmortem: a first version
    // used `fetch_add(0)`, which LLVM lowers to a fence and a load: no write fault, the
    // page stayed shared, MOVE still said EBUSY. `break_cow` uses `lock cmpxchg`.
    region.break_cow(0);
    assert_eq!(staging.move_out(&uffd, &region, 0, run, MoveMode::NONE).unwrap(), PAGE_SIZE);
    let mut page = vec![0u8; PAGE_SIZE];
    staging.load(run.first, &mut page);
    assert!(page == pattern(30), "the page moved with its data unchanged");
}
