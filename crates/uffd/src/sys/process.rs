//! Process-level calls for the frontend: fork hooks, the process id, yielding, and byte views
//! of managed regions.
//!
//! Managed region memory may be lent out as a Rust slice, unlike staging or test mappings
//! (see `crate::mm`): the engine keeps a region's contents transparent. A page it takes out
//! of the region comes back with the same bytes on the next access (the `PageSource`
//! contract), so, seen from the program, the bytes under a borrow never change except
//! through that borrow. What no safe code may do to a region is discard its pages
//! (`MADV_DONTNEED`) or unmap it while such a borrow lives.

use super::{check, Errno};
use std::time::Duration;

/// `pthread_atfork(prepare, parent, child)`.
///
/// The handlers run on the forking thread: `prepare` before glibc takes its malloc locks,
/// `parent` and `child` after fork returns (in the child, only the forking thread exists).
pub fn atfork(
    prepare: extern "C" fn(),
    parent: extern "C" fn(),
    child: extern "C" fn(),
) -> Result<(), Errno> {
    // SAFETY: the three handlers are plain `extern "C" fn()`s with static lifetime, which
    // is what pthread_atfork stores.
    let ret = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno(ret))
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine (a trace's
/// images count their records' times from one start).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `getpid(2)` (async-signal-safe).
pub fn getpid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// `gettid(2)` (async-signal-safe).
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Whether process `other` shares this process's address space (`kcmp(2)` `KCMP_VM`): a
/// `vfork` or `CLONE_VM` child of it does. False when kcmp cannot tell (not built, or no
/// permission). Async-signal-safe.
pub fn shares_memory_with(other: i32) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp takes two pids, a type and two unused indexes; it reads nothing of ours.
    let ret = unsafe {
        libc::syscall(libc::SYS_kcmp, libc::getpid(), other, KCMP_VM, 0 as libc::c_long, 0)
    };
    ret == 0
}

/// Whether this process's descriptor `fd` and process `other`'s descriptor `fd` are the
/// same open file (`kcmp(2)` `KCMP_FILE`): a forked child's inherited descriptor is, until
/// the child closes it (and maybe opens something else under its number). False when kcmp
/// cannot tell (no permission: Yama's ptrace scope keeps a child from its parent).
/// Async-signal-safe.
pub fn shares_file_with(other: i32, fd: i32) -> bool {
    const KCMP_FILE: libc::c_long = 0;
    let fd = libc::c_long::from(fd);
    // SAFETY: kcmp takes two pids, a type and two descriptor numbers; it reads nothing of
    // ours.
    let ret = unsafe { libc::syscall(libc::SYS_kcmp, libc::getpid(), other, KCMP_FILE, fd, fd) };
    ret == 0
}

/// Writes `line` to standard error with the bare system call (async-signal-safe, and not
/// through any interposed `write`); a short or failed write is not retried.
pub fn write_stderr(line: &[u8]) {
    // SAFETY: writes `line.len()` initialized bytes from a live slice.
    unsafe { libc::syscall(libc::SYS_write, 2, line.as_ptr(), line.len()) };
}

/// Says `line` on stderr and ends the process with SIGBUS, its default action (a core
/// dump), whatever the program set for it; SIGKILL if that has not ended it within a
/// second (every thread blocking SIGBUS).
pub fn end_with_sigbus(line: &[u8]) -> ! {
    write_stderr(line);
    /// The kernel's `struct sigaction` (rt_sigaction): handler, flags, restorer, mask.
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    let default = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
    // SAFETY: (1) rt_sigaction reads a live kernel sigaction of the size given (8-byte
    // mask), SIG_DFL needing no restorer; (2) kill and getpid take integers.
    unsafe {
        libc::syscall(libc::SYS_rt_sigaction, libc::SIGBUS, &default, 0usize, 8usize);
        libc::syscall(libc::SYS_kill, libc::getpid(), libc::SIGBUS);
    }
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_kill, libc::getpid(), libc::SIGKILL) };
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `sched_yield(2)` (async-signal-safe).
pub fn sched_yield() {
    // SAFETY: sched_yield has no preconditions.
    let _ = check(libc::c_long::from(unsafe { libc::sched_yield() }));
}

/// `malloc_trim(0)`: returns the allocator's free memory to the kernel (every arena's
/// free pages, not only the heap's top), so freed folio buffers and pool pages stop
/// counting in the resident set.
///
/// Context: takes each arena's lock in turn; never call it while a fork holds them (the
/// handler's read-only mode).
pub fn malloc_trim() {
    // SAFETY: malloc_trim takes an integer and touches only the allocator's own state.
    let _ = unsafe { libc::malloc_trim(0) };
}

/// The bytes of a managed region.
///
/// # Safety
/// `[addr, addr + len)` is a region managed by a live engine (its contents are kept
/// transparent: module essay) that stays mapped, and is not discarded, for `'a`; no mutable
/// borrow of it exists for `'a`.
pub unsafe fn region_bytes<'a>(addr: usize, len: usize) -> &'a [u8] {
    // SAFETY: the caller's contract; a region is page-aligned and non-empty.
    unsafe { core::slice::from_raw_parts(addr as *const u8, len) }
}

/// The bytes of a managed region, mutably.
///
/// # Safety
/// As [`region_bytes`], and no other borrow of the range exists for `'a`.
pub unsafe fn region_bytes_mut<'a>(addr: usize, len: usize) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) }
}

/// The CPUs this thread may run on (`sched_getaffinity(2)`), in order.
pub fn allowed_cpus() -> Result<Vec<usize>, Errno> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed.
    let ret = unsafe { libc::sched_getaffinity(0, core::mem::size_of_val(&set), &mut set) };
    check(libc::c_long::from(ret))?;
    let max = 8 * core::mem::size_of_val(&set);
    // SAFETY: every `cpu` is below the set's size in bits.
    Ok((0..max).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect())
}

/// Pins this thread to `cpu` (`sched_setaffinity(2)`); EINVAL for a CPU beyond the set.
pub fn pin_to_cpu(cpu: usize) -> Result<(), Errno> {
    set_thread_cpus(0, &[cpu])
}

/// Lets thread `tid` of this process (0: the calling thread) run on `cpus` only
/// (`sched_setaffinity(2)`); EINVAL for a CPU beyond the set, or none at all.
pub fn set_thread_cpus(tid: u32, cpus: &[usize]) -> Result<(), Errno> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    if cpus.is_empty() || cpus.iter().any(|&cpu| cpu >= 8 * core::mem::size_of_val(&set)) {
        return Err(Errno(libc::EINVAL));
    }
    for &cpu in cpus {
        // SAFETY: `cpu` is below the set's size in bits (checked above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    let tid = libc::pid_t::try_from(tid).map_err(|_| Errno(libc::ESRCH))?;
    // SAFETY: `set` is a live cpu_set_t of the size passed.
    let ret = unsafe { libc::sched_setaffinity(tid, core::mem::size_of_val(&set), &set) };
    check(libc::c_long::from(ret)).map(drop)
}

/// The CPU thread `tid` of this process last ran on (field 39 of its
/// `/proc/self/task/TID/stat`); `None` for a thread gone or not this process's. Reads into
/// a stack buffer: no allocation, so it may run on a thread that must not take the
/// program's malloc locks.
pub fn thread_cpu(tid: u32) -> Option<usize> {
    let mut path = [0u8; 48];
    let mut cursor = std::io::Cursor::new(&mut path[..]);
    std::io::Write::write_fmt(&mut cursor, format_args!("/proc/self/task/{tid}/stat\0")).ok()?;
    // SAFETY: `path` holds a NUL-terminated string (written above, the rest zero).
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 1024];
    // SAFETY: `buf` is a live buffer of the length passed; `fd` is ours, closed right after.
    let len = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: `fd` was opened above and is not used again.
    unsafe { libc::close(fd) };
    stat_cpu(buf.get(..usize::try_from(len).ok()?)?)
}

/// Field 39 (`processor`) of a `/proc/PID/stat` line. The second field, the command, is in
/// parentheses and may hold spaces and parentheses: counting starts after the last `)`.
pub fn stat_cpu(stat: &[u8]) -> Option<usize> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // After the command come fields 3, 4, ...: field 39 is the 37th.
    rest.split_ascii_whitespace().nth(36)?.parse().ok()
}

/// Gives this thread nice 19 (`setpriority(2)` on its thread id): the least weight a
/// normal thread has (the scheduler's weight 15 against 1,024 at nice 0).
pub fn set_lowest_nice() -> Result<(), Errno> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    // SAFETY: PRIO_PROCESS with a thread id sets that thread's nice value.
    let ret = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 19) };
    check(libc::c_long::from(ret)).map(drop)
}

/// `futex(FUTEX_WAIT)` on a word that may be shared between processes: sleeps while `word`
/// holds `expected`, until a [`futex_wake_all`]. Returns at once if the word already
/// differs; spurious returns (a signal) happen: the caller checks again.
pub fn futex_wait(word: &core::sync::atomic::AtomicU32, expected: u32) {
    let no_timeout: *const libc::timespec = core::ptr::null();
    // SAFETY: `word` is a live, aligned u32 for the call; a null timeout means none.
    let _ = unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, no_timeout)
    };
}

/// As [`futex_wait`], for at most `timeout`.
pub fn futex_wait_for(word: &core::sync::atomic::AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    let (op, ts): (_, *const libc::timespec) = (libc::FUTEX_WAIT, &ts);
    // SAFETY: `word` is a live, aligned u32 for the call; `ts` is a live timespec.
    let _ = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op, expected, ts) };
}

/// Whether process `pid` exists (`kill(pid, 0)`: not ESRCH).
pub fn exists(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks the process.
    let ret = unsafe { libc::kill(pid, 0) };
    ret == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// `futex(FUTEX_WAKE)`: wakes every waiter on `word` (in any process that maps it).
pub fn futex_wake_all(word: &core::sync::atomic::AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; waking touches no memory.
    let _ = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

#[cfg(test)]
mod stat_tests {
    use super::*;

    #[test]
    fn the_cpu_is_field_39_counted_past_the_command() {
        let line = b"4242 (a (b) c) S 1 4242 4242 0 -1 4194560 128 0 0 0 3 1 0 0 20 0 4 0 \
1000 12345678 300 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(stat_cpu(line), Some(1));
        assert_eq!(stat_cpu(b"4242 (x) S 1 2"), None, "too short");
        assert_eq!(stat_cpu(b"no command"), None);
    }

    #[test]
    fn this_thread_runs_on_a_cpu_it_may_use() {
        let cpu = thread_cpu(gettid()).expect("this thread's stat");
        assert!(allowed_cpus().expect("affinity").contains(&cpu), "cpu {cpu}");
        assert_eq!(thread_cpu(u32::MAX), None, "no such thread");
    }
}
