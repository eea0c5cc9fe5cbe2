//! The system calls of the fork protocol (the frontend's `fork` module): the child's hold
//! pipe, the forking thread's signal mask, and glibc's list of stdio streams.

use super::{check, Errno};
use std::os::fd::{FromRawFd, OwnedFd};

/// `pipe2(O_CLOEXEC)`: `(read end, write end)`.
pub fn pipe() -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into a live array of two.
    check(libc::c_long::from(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }))?;
    // SAFETY: both descriptors were just made and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A thread's signal mask, as [`block_async_signals`] found it.
#[derive(Clone, Copy)]
pub struct SignalMask(libc::sigset_t);

impl std::fmt::Debug for SignalMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignalMask")
    }
}

/// Blocks every signal but those a fault raises (SIGBUS, SIGSEGV, SIGILL, SIGFPE, SIGTRAP:
/// a blocked one would kill the thread that faults) on the calling thread; returns the
/// mask it had.
pub fn block_async_signals() -> SignalMask {
    // SAFETY: sigset_t is plain data; the calls fill and read live sets.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        for sync in [libc::SIGBUS, libc::SIGSEGV, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP] {
            libc::sigdelset(&mut all, sync);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        SignalMask(old)
    }
}

/// Puts back a mask [`block_async_signals`] returned.
pub fn restore_signals(mask: &SignalMask) {
    // SAFETY: `mask.0` is a set pthread_sigmask filled.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &mask.0, std::ptr::null_mut()) };
}

/// glibc's `struct _IO_FILE` up to the fields its fork reads (x86-64; the layout is the
/// public one of `<bits/types/struct_FILE.h>`).
#[repr(C)]
struct IoFile {
    flags: libc::c_int,
    _pointers: [*mut libc::c_char; 11],
    _markers: *mut libc::c_void,
    chain: *mut IoFile,
    _fileno: libc::c_int,
    _flags2: libc::c_int,
    _old_offset: libc::off_t,
    _cur_column: libc::c_ushort,
    _vtable_offset: libc::c_schar,
    _shortbuf: [libc::c_char; 1],
    lock: *mut libc::c_void,
}

const _: () = assert!(std::mem::offset_of!(IoFile, chain) == 0x68);
const _: () = assert!(std::mem::offset_of!(IoFile, lock) == 0x88);

/// The size of `struct _IO_FILE_plus` (the FILE and its vtable pointer), and of glibc's
/// `_IO_lock_t`.
const FILE_PLUS_BYTES: usize = 0xe0;
const LOCK_BYTES: usize = 16;

extern "C" {
    static mut _IO_list_all: *mut IoFile;
    fn _IO_list_lock();
    fn _IO_list_unlock();
}

/// Reads every byte range glibc's `fork()` writes in the child before any fork handler
/// runs there: each stdio stream's `FILE` and its lock (`fresetlockfiles`). They live in
/// the program's heap, which may be managed: a page of them paged out would be missing
/// in the child until the child's handler registers its own uffd, and glibc would write
/// the lock into a page of zeros. Read here, in the parent, while faults are still served
/// and reclaim is paused, they are resident when the fork copies them. Returns the streams
/// read.
///
/// Context: the forking thread, in the prepare handler; takes glibc's stream-list lock.
pub fn touch_stdio_files() -> usize {
    let mut streams = 0;
    // SAFETY: (1) the list is walked under glibc's own list lock, as its fork walks it;
    // (2) each node is a live FILE of at least FILE_PLUS_BYTES, and `lock` points to a
    // live `_IO_lock_t` (glibc's own invariant, read by its fork the same way); (3) the
    // loads are volatile reads of bytes that exist, and change nothing.
    unsafe {
        _IO_list_lock();
        let mut file = std::ptr::addr_of!(_IO_list_all).read();
        while !file.is_null() && streams < 1 << 20 {
            let base = file.cast::<u8>();
            std::ptr::read_volatile(base);
            std::ptr::read_volatile(base.add(FILE_PLUS_BYTES - 1));
            let lock = std::ptr::addr_of!((*file).lock).read_volatile().cast::<u8>();
            if !lock.is_null() {
                std::ptr::read_volatile(lock);
                std::ptr::read_volatile(lock.add(LOCK_BYTES - 1));
            }
            file = std::ptr::addr_of!((*file).chain).read_volatile();
            streams += 1;
        }
        _IO_list_unlock();
    }
    streams
}

/// `close(2)` of a descriptor number this process holds but no object owns (a forked
/// child's copies of its parent's descriptors, whose owners belong to threads that do not
/// exist in the child).
pub fn close_raw(fd: i32) -> Result<(), Errno> {
    // SAFETY: closes a number; the caller says nothing else owns it.
    check(libc::c_long::from(unsafe { libc::close(fd) })).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stdio_list_holds_at_least_the_three_standard_streams() {
        assert!(touch_stdio_files() >= 3);
    }

    #[test]
    fn async_signals_are_blocked_and_faults_are_not() {
        let old = block_async_signals();
        // SAFETY: reads the calling thread's mask into a live set.
        let now = unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
            now
        };
        // SAFETY: sigismember reads a set pthread_sigmask filled.
        let (term, bus) = unsafe {
            (libc::sigismember(&now, libc::SIGTERM), libc::sigismember(&now, libc::SIGBUS))
        };
        restore_signals(&old);
        assert_eq!((term, bus), (1, 0));
    }
}
