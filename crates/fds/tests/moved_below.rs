//! A descriptor of ours moved below every number the registry ever held is still ours.
//!
//! The band full (a program's files in every free number of it), a dup onto ours moves ours
//! a step down, under the lowest number registered until then. The program's `close` of
//! that number found it not ours (a close below the lowest registered number, with no
//! placement in flight, passes by) and closed the engine's file. A test binary of its own:
//! the registry is the process's.

use fds::{program, Fd, Kind};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

mod common;
use common::{identity, is_open, raw_dup3, tmpfile};

static KIND: Kind = Kind { what: "test file", if_lost: "the test sees it", keep: false };

/// The top of the band: the soft limit, at most the ceiling.
fn band_top() -> RawFd {
    // SAFETY: rlimit is plain data written by getrlimit.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    limit.rlim_cur.min(fds::CEILING as u64) as RawFd
}

#[test]
fn a_descriptor_moved_below_every_registered_number_is_still_ours() {
    let (own, own_path) = tmpfile("own");
    let fd = Fd::place(OwnedFd::from(own), &KIND);
    let expected = (fd.identity().dev, fd.identity().ino);
    let (top, n) = (band_top(), fd.number());
    assert!(n >= top - fds::STEP && n < top, "{n} placed in the band under {top}");
    let (mine, mine_path) = tmpfile("program");
    let fillers: Vec<RawFd> = (top - fds::STEP..top)
        .filter(|&k| !is_open(k))
        .map(|k| raw_dup3(mine.as_raw_fd(), k))
        .collect();
    assert!(fillers.iter().all(|&k| k >= 0), "the band filled");
    assert_eq!(program::dup_onto(n, || raw_dup3(mine.as_raw_fd(), n)), n);
    let moved = fd.number();
    assert!(moved < top - fds::STEP, "ours moved a step down, to {moved}");
    assert!(program::close(moved), "the program's close of ours, moved low, is taken");
    assert_eq!(identity(moved), Some(expected), "ours still open, and its own file");
    assert!(fd.checked(|_| ()).is_ok());
    for k in fillers.into_iter().chain([n]) {
        // SAFETY: the program's own copies, each closed once.
        unsafe { libc::close(k) };
    }
    drop(fd);
    let _ = std::fs::remove_file(own_path);
    let _ = std::fs::remove_file(mine_path);
}
