//! The system calls of this crate, each the bare call (`syscall(2)`), never libc's wrapper:
//! in a process `uswap run` manages, `close`, `dup2`, `dup3`, `fcntl`, `closefrom` and
//! `close_range` are the shim's interposers, which call into this crate; going through
//! them from here would recurse. No allocation; async-signal-safe.

#![allow(unsafe_code)]

use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// An errno value.
pub type Errno = i32;

/// What names an open file: its device and inode (`fstat`). Every userfaultfd has an inode
/// of its own (Linux 5.12 on: a secure anonymous inode); a swap file, a /proc file and a
/// trace file are regular inodes; every eventfd shares one anonymous inode, so an eventfd's
/// identity tells it from other kinds of file only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Identity {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// The calling thread's errno.
pub fn errno() -> Errno {
    // SAFETY: the calling thread's errno location is always valid.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's errno.
pub fn set_errno(value: Errno) {
    // SAFETY: the calling thread's errno location is always valid.
    unsafe { *libc::__errno_location() = value };
}

fn result(ret: libc::c_long) -> Result<libc::c_long, Errno> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// `fstat(fd)`'s device and inode.
pub fn identity(fd: RawFd) -> Result<Identity, Errno> {
    // SAFETY: a zeroed `stat` is plain data, written by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live, writable `stat` for the call.
    result(unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st) })?;
    Ok(Identity { dev: st.st_dev, ino: st.st_ino })
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, min)`: a copy at the lowest free number at least `min`.
pub fn dup_at_least(fd: RawFd, min: RawFd, cloexec: bool) -> Result<RawFd, Errno> {
    let cmd = if cloexec { libc::F_DUPFD_CLOEXEC } else { libc::F_DUPFD };
    // SAFETY: fcntl with integer arguments touches no memory of ours.
    result(unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, min) }).map(|fd| fd as RawFd)
}

/// `dup3(old, new, flags)` (`flags`: 0 or `O_CLOEXEC`).
pub fn dup3(old: RawFd, new: RawFd, flags: i32) -> Result<RawFd, Errno> {
    // SAFETY: dup3 with integer arguments touches no memory of ours.
    result(unsafe { libc::syscall(libc::SYS_dup3, old, new, flags) }).map(|fd| fd as RawFd)
}

/// `close(fd)`.
pub fn close(fd: RawFd) -> Result<(), Errno> {
    // SAFETY: close takes an integer; the caller owns what it closes.
    result(unsafe { libc::syscall(libc::SYS_close, fd) }).map(drop)
}

/// `close_range(first, last, flags)`.
pub fn close_range(first: u32, last: u32, flags: u32) -> Result<(), Errno> {
    // SAFETY: close_range takes integers; the caller owns what it closes.
    result(unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) }).map(drop)
}

/// Whether `fd` is open (`fcntl(F_GETFD)`).
pub fn is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD reads the descriptor's flags only.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFD) >= 0 }
}

/// The soft `RLIMIT_NOFILE` (`prlimit64` of this process).
pub fn nofile_soft() -> u64 {
    let mut limit = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
    let none: *const libc::rlimit64 = std::ptr::null();
    let which = libc::RLIMIT_NOFILE;
    // SAFETY: `limit` is a live, writable rlimit64; the new limit is null (not set).
    let ret = unsafe { libc::syscall(libc::SYS_prlimit64, 0, which, none, &mut limit) };
    if ret < 0 {
        1024
    } else {
        limit.rlim_cur
    }
}

/// `pread(fd, buf, offset)`.
pub fn pread(fd: RawFd, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
    // SAFETY: `buf` is live and writable for its length.
    let ret = unsafe { libc::syscall(libc::SYS_pread64, fd, buf.as_mut_ptr(), buf.len(), offset) };
    result(ret).map(|n| n as usize)
}

/// `openat(AT_FDCWD, path, flags | O_CLOEXEC, mode)`.
pub fn open(path: &std::ffi::CStr, flags: i32, mode: u32) -> Result<OwnedFd, Errno> {
    let (at, flags) = (libc::AT_FDCWD, flags | libc::O_CLOEXEC);
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_openat, at, path.as_ptr(), flags, mode) };
    let fd = result(ret)? as RawFd;
    // SAFETY: a new descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// This process's id.
pub fn getpid() -> i32 {
    // SAFETY: getpid has no arguments.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// The calling thread's id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// `write(fd, buf)`.
pub fn write(fd: RawFd, buf: &[u8]) -> Result<usize, Errno> {
    // SAFETY: `buf` is live and readable for its length.
    result(unsafe { libc::syscall(libc::SYS_write, fd, buf.as_ptr(), buf.len()) })
        .map(|n| n as usize)
}

/// Gives up the CPU once (in a wait for another thread's short system call).
pub fn yield_now() {
    // SAFETY: sched_yield has no arguments.
    unsafe { libc::syscall(libc::SYS_sched_yield) };
}

/// Writes `line` to standard error (a short write is not retried).
pub fn write_stderr(line: &[u8]) {
    // SAFETY: writes `line.len()` initialized bytes from a live slice.
    unsafe { libc::syscall(libc::SYS_write, 2, line.as_ptr(), line.len()) };
}

/// Runs `f` with `fd` borrowed.
///
/// # Safety
/// `fd` stays open, and this descriptor's, until `f` returns (the registry's guard holds
/// it so: crate essay).
pub unsafe fn with_borrowed<R>(fd: RawFd, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
    // SAFETY: the caller's contract; the borrow does not outlive `f`.
    f(unsafe { BorrowedFd::borrow_raw(fd) })
}
