//! The system calls the harness needs that std does not offer: process rusage on wait,
//! joining a cgroup between fork and exec, signals, an exclusive lock, `fallocate`.
//!
//! This is the only module of the harness with `unsafe`; each use is a single libc call
//! with its contract written beside it.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT / SIGTERM; the harness polls it and tears down.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the SIGINT and SIGTERM handlers that set the interrupted flag instead of
/// killing the harness, so every guard gets to restore the machine.
///
/// # Errors
/// The `sigaction` error.
pub fn install_interrupt_handler() -> io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero sigaction is valid (empty mask, no flags) before we fill it.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: action is a valid sigaction whose handler only stores an atomic; the old
        // action is not needed (null).
        let rc = unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Was SIGINT or SIGTERM received?
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Makes the child of `command` join the cgroup whose `cgroup.procs` (or `tasks`) file is
/// open as `procs`, between fork and exec: the program is charged from its first page.
/// Writing "0" to that file moves the writing process itself (v1 and v2 alike).
pub fn join_cgroup_before_exec(command: &mut Command, procs: OwnedFd) {
    let fd = procs.as_raw_fd();
    // Kept open in the parent until the closure (and so the command) drops.
    let hold = procs;
    // SAFETY: the closure runs in the forked child before exec and calls only write(2),
    // which is async-signal-safe; it allocates nothing and touches no lock. The fd stays
    // open because `hold` lives inside the closure, which the Command owns.
    unsafe {
        command.pre_exec(move || {
            let _keep = &hold;
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            if written == 1 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
}

/// How a waited-for child ended, with its resource usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The exit code, or 128 + signal number when killed by a signal.
    pub code: i32,
    pub major_faults: u64,
    pub minor_faults: u64,
    /// `ru_maxrss`: the child's peak resident set, bytes.
    pub max_rss_bytes: u64,
    /// `ru_utime` and `ru_stime`, microseconds: the child's CPU time and that of every
    /// descendant it (or a descendant) waited for, so a whole process tree's once all of
    /// it was reaped (make waits for its jobs; `uswap run`, a subreaper, for orphans).
    pub user_us: u64,
    pub sys_us: u64,
}

/// A `timeval` in microseconds.
fn micros(time: libc::timeval) -> u64 {
    (time.tv_sec.max(0) as u64) * 1_000_000 + time.tv_usec.max(0) as u64
}

/// Reaps `pid` if it has exited (`wait4(WNOHANG)`), returning its exit and rusage.
///
/// # Errors
/// The `wait4` error (ECHILD when `pid` is not our child or was already reaped).
pub fn try_wait(pid: u32) -> io::Result<Option<Exit>> {
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: status and usage are valid writable locations; WNOHANG makes it non-blocking.
    let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    match rc {
        0 => Ok(None),
        r if r < 0 => Err(io::Error::last_os_error()),
        _ => {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            };
            Ok(Some(Exit {
                code,
                major_faults: usage.ru_majflt as u64,
                minor_faults: usage.ru_minflt as u64,
                max_rss_bytes: usage.ru_maxrss as u64 * 1024,
                user_us: micros(usage.ru_utime),
                sys_us: micros(usage.ru_stime),
            }))
        }
    }
}

/// Sends `signal` to `pid`; an already-gone process is not an error.
pub fn kill(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill has no memory-safety preconditions; errors (ESRCH) are ignored on
        // purpose: the process may have exited already.
        unsafe { libc::kill(pid, signal) };
    }
}

/// SIGKILL and SIGTERM, re-exported so callers need not name libc.
pub const SIGKILL: libc::c_int = libc::SIGKILL;
pub const SIGTERM: libc::c_int = libc::SIGTERM;

/// Takes an exclusive, non-blocking `flock` on `file`: `Ok(false)` when another process
/// holds it. The lock lives as long as the file stays open.
///
/// # Errors
/// Any `flock` error other than "would block".
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: the fd is valid for the life of `file`; flock has no memory preconditions.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(error)
    }
}

/// Allocates `len` bytes of real blocks for `file` (a swap file may have no holes).
///
/// # Errors
/// The `posix_fallocate` error (e.g. ENOSPC, or EOPNOTSUPP on some filesystems).
pub fn allocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: the fd is valid for the life of `file`; offset and length are in range.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// The effective user id (the kernel side needs root).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `cachestat(2)` (Linux 6.5): the same number on x86_64 and aarch64 (the generic table);
/// the libc crate in use does not name it.
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Pages of `file` in the page cache (dirty and under writeback included), from
/// `cachestat(2)` over the whole file.
///
/// # Errors
/// The syscall's error (`ENOSYS` before Linux 6.5).
pub fn cached_pages(file: &File) -> io::Result<u64> {
    let range = CachestatRange { off: 0, len: 0 }; // len 0: to the end of the file
    let mut stat = Cachestat::default();
    // SAFETY: the fd is open for the call's duration; `range` and `stat` are valid,
    // properly laid out (repr(C), the kernel's field order) and live across the call.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.nr_cache)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of /proc/<pid>/stat's CPU
/// times; `None` if the system does not say.
pub fn clock_ticks_per_s() -> Option<u64> {
    // SAFETY: sysconf takes a constant and touches no memory of ours.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0)
}
