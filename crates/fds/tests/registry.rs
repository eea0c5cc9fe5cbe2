//! The registry against a program's descriptor calls, in one process (the registry is the
//! process's): every scenario runs in order in one test, as a program's calls would.

use fds::{program, Fd, Kind};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

mod common;
use common::{identity, is_open, raw_dup3, tmpfile, TmpPath};

static KIND: Kind = Kind { what: "test file", if_lost: "the test sees it", keep: false };

fn place(tag: &str) -> (Fd, TmpPath) {
    let (file, path) = tmpfile(tag);
    (Fd::place(OwnedFd::from(file), &KIND), path)
}

/// The top of the band: the soft limit, at most the ceiling.
fn band_top() -> i64 {
    // SAFETY: rlimit is plain data written by getrlimit.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (limit.rlim_cur as i64).min(i64::from(fds::CEILING))
}

/// Placed descriptors sit in the band under the soft limit, and are the same files.
fn placed_high(fd: &Fd) {
    let top = band_top();
    let n = i64::from(fd.number());
    assert!(n < top && n >= top - i64::from(fds::STEP), "{n} not in the band under {top}");
    assert_eq!(identity(fd.number()), Some((fd.identity().dev, fd.identity().ino)));
}

/// A close of ours reports success and closes nothing; a range of closes closes every
/// other descriptor in it and none of ours.
fn closes_pass_ours_by(ours: &[&Fd]) {
    for fd in ours {
        assert!(program::close(fd.number()), "close of ours is taken");
        assert!(is_open(fd.number()));
    }
    let (a, _pa) = tmpfile("a");
    let (b, _pb) = tmpfile("b");
    let first = a.as_raw_fd().min(b.as_raw_fd()) as u32;
    // A program file among ours, high up: the highest free number of the band.
    let top = band_top() as i32;
    let beside = (ours[0].number()..top).rev().find(|&n| !is_open(n)).unwrap();
    let high = raw_dup3(a.as_raw_fd(), beside);
    assert_eq!(high, beside);
    assert_eq!(program::close_range(first, u32::MAX, 0), Some(0));
    assert!(!is_open(a.as_raw_fd()) && !is_open(b.as_raw_fd()) && !is_open(beside));
    for fd in ours {
        assert!(is_open(fd.number()), "ours closed by a range");
        assert_eq!(identity(fd.number()), Some((fd.identity().dev, fd.identity().ino)));
    }
    std::mem::forget(a); // closed by the range already
    std::mem::forget(b);
    assert!(program::close(5000) == (ours.iter().any(|f| f.number() == 5000)));
}

/// A dup onto ours moves ours first: the program's file lands there, and no guard ever
/// used the program's file for ours (two threads checking their descriptor's identity in
/// every guard, while the program dups onto it 200 times).
fn dups_move_ours_and_guards_never_see_the_program_s_file(fd: &Fd) {
    let (program_file, _path) = tmpfile("dup");
    let expected = (fd.identity().dev, fd.identity().ino);
    let stop = AtomicBool::new(false);
    let (checks, wrong) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while !stop.load(SeqCst) {
                    // A guard as long as a slow system call: two looks, a pause between.
                    let seen = fd.with(|b| {
                        let first = identity(b.as_raw_fd());
                        for _ in 0..2000 {
                            std::hint::spin_loop();
                        }
                        first.filter(|&f| identity(b.as_raw_fd()) == Some(f))
                    });
                    if seen != Some(expected) {
                        wrong.fetch_add(1, SeqCst);
                    }
                    checks.fetch_add(1, SeqCst);
                }
            });
        }
        let mut numbers = std::collections::BTreeSet::new();
        for _ in 0..200 {
            // Both checkers go round between two moves (so every move meets guards).
            let (seen, deadline) = (checks.load(SeqCst), std::time::Instant::now());
            while checks.load(SeqCst) < seen + 2 {
                assert!(deadline.elapsed() < std::time::Duration::from_secs(10), "no checks");
                std::thread::yield_now();
            }
            let n = fd.number();
            numbers.insert(n);
            let got = program::dup_onto(n, || raw_dup3(program_file.as_raw_fd(), n));
            assert_eq!(got, n, "the program gets the number it asked for");
            assert_ne!(fd.number(), n, "ours moved");
            assert_eq!(identity(n), identity(program_file.as_raw_fd()));
            // The program closes its copy (ours is elsewhere now).
            assert!(!program::close(n));
            // SAFETY: the program's own copy, closed once.
            unsafe { libc::close(n) };
        }
        stop.store(true, SeqCst);
        assert!(numbers.len() > 1);
    });
    assert_eq!(wrong.load(SeqCst), 0, "a guard saw another file");
    assert!(checks.load(SeqCst) >= 400);
    assert!(fds::stats().fields().iter().any(|&(name, n)| name == "fds_moves" && n >= 200));
}

/// `fcntl(F_DUPFD, min)` gives what it would without us: ours at `min` is moved away.
fn dupfd_gives_the_number_it_would_without_us(fd: &Fd) {
    let (file, _path) = tmpfile("dupfd");
    let min = fd.number();
    let got = program::dup_at_least(file.as_raw_fd(), min, true, || {
        // SAFETY: fcntl with integer arguments.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) }
    });
    assert_eq!(got, min, "the lowest number from min, ours moved");
    assert_ne!(fd.number(), min);
    assert_eq!(identity(got), identity(file.as_raw_fd()));
    // SAFETY: the program's copy.
    drop(unsafe { OwnedFd::from_raw_fd(got) });
}

/// A descriptor closed and replaced by raw system calls is lost: never written, said once.
fn a_replaced_descriptor_is_never_written(fd: &Fd) {
    let (file, path) = tmpfile("victim");
    let n = fd.number();
    // SAFETY: a raw close of ours, then the program's file at its number, as a program
    // using syscall(2) would.
    unsafe { libc::syscall(libc::SYS_close, n) };
    assert_eq!(raw_dup3(file.as_raw_fd(), n), n);
    assert!(matches!(fd.checked(|_| ()), Err(fds::Error::Lost { .. })));
    assert!(fd.write_all(b"swap data").is_err());
    assert!(fd.is_lost());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "the program's file was written");
    assert!(fds::stats().fields().iter().any(|&(name, n)| name == "fds_lost" && n == 1));
    let _ = std::fs::remove_file(&path);
}

static KEPT: Kind = Kind { what: "kept test file", if_lost: "the test sees it", keep: true };

/// A kept descriptor closed and replaced by raw system calls is taken back from the
/// keeper: the next checked write goes to its own file, at a new number, and the program's
/// file gets nothing.
fn a_kept_descriptor_is_taken_back(keeper: bool) {
    let (own, own_path) = tmpfile("kept");
    let fd = Fd::place(OwnedFd::from(own), &KEPT);
    // The only reference in the table: the file lives on by the keeper's alone.
    let _ = std::fs::remove_file(&own_path);
    let (file, path) = tmpfile("kept-victim");
    let n = fd.number();
    // SAFETY: as in `a_replaced_descriptor_is_never_written`.
    unsafe { libc::syscall(libc::SYS_close, n) };
    assert_eq!(raw_dup3(file.as_raw_fd(), n), n);
    let written = fd.write_all(b"swap data");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "the program's file was written");
    if !keeper {
        assert!(written.is_err() && fd.is_lost());
        return;
    }
    written.expect("taken back and written");
    assert!(!fd.is_lost());
    assert_ne!(fd.number(), n);
    let mut back = [0u8; 9];
    // SAFETY: pread into a live buffer from our own descriptor.
    let got = fd.with(|b| unsafe { libc::pread(b.as_raw_fd(), back.as_mut_ptr().cast(), 9, 0) });
    assert_eq!((got, &back), (9, b"swap data"), "the data went to its own file");
    assert!(fds::stats().fields().iter().any(|&(name, n)| name == "fds_recovered" && n == 1));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_registry_keeps_its_descriptors_out_of_the_programs_way() {
    let keeper = fds::keep();
    if !keeper {
        eprintln!("no io_uring FIXED_FD_INSTALL here: lost descriptors are not taken back");
    }
    let (one, p1) = place("one");
    let (two, p2) = place("two");
    placed_high(&one);
    placed_high(&two);
    closes_pass_ours_by(&[&one, &two]);
    dups_move_ours_and_guards_never_see_the_program_s_file(&one);
    dupfd_gives_the_number_it_would_without_us(&two);
    let maps = fds::ProcFile::open(c"/proc/self/maps", &KIND).unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    maps.read(&mut a).unwrap();
    maps.read(&mut b).unwrap();
    assert!(a.len() > 100 && b.len() > 100 && a.contains(&b'\n'), "maps read whole twice");
    a_replaced_descriptor_is_never_written(&two);
    a_kept_descriptor_is_taken_back(keeper);
    drop(one);
    drop(two);
    drop((p1, p2));
}
