//! The system calls of membership: the control socket and the shared swap-space counter.
//!
//! Every call is the raw system call (`libc::syscall`), never libc's wrapper: the shim
//! interposes `send`, `recv` and `mmap` itself (their wrappers find libc's with `dlsym`,
//! which may allocate), and these calls run in a forked child's single thread too
//! (`rejoin_after_fork`), where nothing may allocate or take a lock. Errors are errno
//! values.
//!
//! The control socket is made in one place ([`connect`]), so that a registry of the
//! shim's own descriptors has one call to follow. [`task_ids`] lists this process's
//! threads for the engine's CPU time in the report, without `opendir` (which mallocs).

#![allow(unsafe_code)]

use libc::c_long;
use runstat::proto::QUOTA_FILE_BYTES;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::SeqCst};

/// errno of the last failed call.
fn errno() -> i32 {
    // SAFETY: the calling thread's errno location is always valid.
    unsafe { *libc::__errno_location() }
}

/// A system call's result as `Ok(value)` or `Err(errno)`.
fn checked(result: c_long) -> Result<usize, i32> {
    if result < 0 {
        Err(errno())
    } else {
        Ok(result as usize)
    }
}

/// A Unix socket address for `path` (no NUL in it), or `None` when it is too long.
fn socket_address(path: &[u8]) -> Option<libc::sockaddr_un> {
    // SAFETY: sockaddr_un is plain data; all zeros is a valid (empty) address.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if path.len() >= address.sun_path.len() || path.contains(&0) {
        return None;
    }
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (slot, &byte) in address.sun_path.iter_mut().zip(path) {
        *slot = byte as libc::c_char;
    }
    Some(address)
}

/// Whether `path` fits a Unix socket address.
pub fn fits_socket_address(path: &[u8]) -> bool {
    socket_address(path).is_some()
}

/// Connects a new stream socket (close-on-exec) to the Unix socket at `path`; its
/// descriptor. Send and receive time out after `timeout_ms`.
///
/// # Errors
/// errno: `ENAMETOOLONG` for a path too long, `ENOENT` or `ECONNREFUSED` when no broker
/// listens there.
pub fn connect(path: &[u8], timeout_ms: u64) -> Result<i32, i32> {
    let address = socket_address(path).ok_or(libc::ENAMETOOLONG)?;
    let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    // SAFETY: socket(2) with integer arguments.
    let fd = checked(unsafe { libc::syscall(libc::SYS_socket, libc::AF_UNIX, kind, 0) })? as i32;
    let timeout = libc::timeval {
        tv_sec: (timeout_ms / 1000) as libc::time_t,
        tv_usec: ((timeout_ms % 1000) * 1000) as libc::suseconds_t,
    };
    for option in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: `timeout` is a live timeval of the size passed.
        unsafe {
            libc::syscall(
                libc::SYS_setsockopt,
                fd,
                libc::SOL_SOCKET,
                option,
                &timeout as *const libc::timeval,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    let address_ptr = &address as *const libc::sockaddr_un;
    // SAFETY: `address` is a live sockaddr_un of the length passed.
    let connected = unsafe { libc::syscall(libc::SYS_connect, fd, address_ptr, len) };
    if let Err(e) = checked(connected) {
        close(fd);
        return Err(e);
    }
    Ok(fd)
}

/// Sends all of `bytes`; `wait`: block (up to the socket's timeout) rather than give up
/// on a full socket buffer. Never raises SIGPIPE (a broker gone is `EPIPE`).
///
/// # Errors
/// errno (`EAGAIN` without `wait` when the buffer is full; `EPIPE` when the broker is
/// gone).
pub fn send(fd: i32, bytes: &[u8], wait: bool) -> Result<(), i32> {
    let flags = libc::MSG_NOSIGNAL | if wait { 0 } else { libc::MSG_DONTWAIT };
    let mut done = 0;
    while done < bytes.len() {
        let rest = &bytes[done..];
        // SAFETY: sends from a live buffer of the length passed; no address.
        let sent = unsafe {
            libc::syscall(libc::SYS_sendto, fd, rest.as_ptr(), rest.len(), flags, 0usize, 0usize)
        };
        match checked(sent) {
            Ok(n) => done += n,
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Receives into `buf`; `wait`: block up to the socket's timeout. `Ok(0)`: the broker
/// closed the connection.
///
/// # Errors
/// errno (`EAGAIN` when nothing is there, or the wait timed out).
pub fn recv(fd: i32, buf: &mut [u8], wait: bool) -> Result<usize, i32> {
    let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
    loop {
        // SAFETY: receives into a live buffer of the length passed; no address.
        let got = unsafe {
            libc::syscall(
                libc::SYS_recvfrom,
                fd,
                buf.as_mut_ptr(),
                buf.len(),
                flags,
                0usize,
                0usize,
            )
        };
        match checked(got) {
            Err(libc::EINTR) => {}
            other => return other,
        }
    }
}

/// Closes `fd` (this process's descriptor only: a connection another process shares
/// stays open there).
pub fn close(fd: i32) {
    // SAFETY: close(2) of a descriptor this module opened.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// The inode of the file `fd` refers to (a socket's is unique while it lives), `None` for
/// a descriptor that is closed.
pub fn inode(fd: i32) -> Option<u64> {
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat(2) into a live stat buffer.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    checked(r).ok().map(|_| st.st_ino)
}

/// This process's pid.
pub fn getpid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// Registers `child` to run in the child of every `fork()`.
pub fn atfork_child(child: extern "C" fn()) {
    // SAFETY: registers a function pointer with static lifetime.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// The swap-space counter file's mapping (`map_counter`), never unmapped.
static COUNTER: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

/// Maps the swap-space counter file at `path` (NUL-free) shared and writable, once per
/// process (a forked child keeps its parent's mapping); the descriptor is closed again at
/// once.
///
/// # Errors
/// errno of the open or the mmap; `ENAMETOOLONG` for a path over 4095 bytes.
pub fn map_counter(path: &[u8]) -> Result<(), i32> {
    if !COUNTER.load(SeqCst).is_null() {
        return Ok(());
    }
    let mut name = [0u8; 4096];
    if path.len() >= name.len() || path.contains(&0) {
        return Err(libc::ENAMETOOLONG);
    }
    name[..path.len()].copy_from_slice(path);
    let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: `name` is NUL-terminated (zeroed past the path).
    let fd = checked(unsafe {
        libc::syscall(libc::SYS_openat, libc::AT_FDCWD, name.as_ptr(), flags, 0)
    })? as i32;
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let len = QUOTA_FILE_BYTES;
    let shared = libc::MAP_SHARED;
    // SAFETY: a new shared mapping of a file this call opened; nothing is replaced.
    let mapped = unsafe { libc::syscall(libc::SYS_mmap, 0usize, len, prot, shared, fd, 0usize) };
    close(fd);
    let at = checked(mapped)? as *mut u8;
    if COUNTER.compare_exchange(std::ptr::null_mut(), at, SeqCst, SeqCst).is_err() {
        // SAFETY: unmaps the mapping this call made, which nothing else saw.
        unsafe { libc::syscall(libc::SYS_munmap, at, len) };
    }
    Ok(())
}

/// Word `index` of the counter file, once mapped (`None` before, or past its end).
pub fn counter_word(index: usize) -> Option<&'static AtomicU64> {
    let base = COUNTER.load(SeqCst);
    if base.is_null() || index >= QUOTA_FILE_BYTES / 8 {
        return None;
    }
    // SAFETY: `base` maps QUOTA_FILE_BYTES (`map_counter`) and is never unmapped; `index`
    // is inside it; a mapping starts on a page, so the word is 8-aligned; other processes
    // change it only through atomics. (A file shorter than the mapping would SIGBUS: the
    // broker makes it whole before any member starts.)
    Some(unsafe { AtomicU64::from_ptr(base.cast::<u64>().add(index)) })
}

/// This process's thread ids, at most `out.len()`, from /proc/self/task read with
/// `getdents64` into a stack buffer (`opendir` would call glibc's malloc); how many.
pub fn task_ids(out: &mut [u32]) -> usize {
    let path = b"/proc/self/task\0";
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: `path` is NUL-terminated.
    let Ok(fd) = checked(unsafe {
        libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags, 0)
    }) else {
        return 0;
    };
    let mut buf = [0u8; 4096];
    let mut n = 0;
    loop {
        // SAFETY: reads directory entries into a live buffer of the length passed.
        let got = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        let Ok(len) = checked(got) else { break };
        if len == 0 {
            break;
        }
        // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name (NUL-ended).
        let mut at = 0;
        while at + 19 < len && n < out.len() {
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let name = &buf[at + 19..(at + reclen).min(len)];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if let Some(id) = std::str::from_utf8(name).ok().and_then(|t| t.parse().ok()) {
                out[n] = id;
                n += 1;
            }
            if reclen == 0 {
                break;
            }
            at += reclen;
        }
    }
    close(fd as i32);
    n
}
