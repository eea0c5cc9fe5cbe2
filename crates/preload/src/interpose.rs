//! The program's `mmap`, `mmap64` and `mremap`, interposed: each does the system call
//! itself (no libc state is involved: glibc's own wrappers are the bare call too) and, when
//! the result may be a new private writable anonymous range or a grown one, asks the
//! handler for a scan of /proc/self/maps at once instead of at the next period.
//!
//! Context: these run on any thread of the program, at any time (even before the shim's
//! constructor, from another library's): no allocation, no lock, nothing but two atomics,
//! `getpid` and one eventfd write ([`uffd::handler::Control::wake`], async-signal-safe).
//! In a forked child (another pid) nothing is woken: the parent's handler scans the
//! parent. glibc's malloc calls its internal mmap, which this never sees (the period
//! covers it).

#![allow(unsafe_code)]

use libc::{c_int, c_void, off_t, size_t};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering::SeqCst};
use uffd::handler::Control;

/// A scan was asked for since the last one.
pub static SCAN_REQUESTED: AtomicBool = AtomicBool::new(false);
/// The handler's control block, once running (leaked: lives as long as the process).
static CONTROL: AtomicPtr<Control> = AtomicPtr::new(std::ptr::null_mut());
/// The process that runs the handler.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// Lets the wrappers wake the handler of process `pid`.
pub fn install(control: std::sync::Arc<Control>, pid: i32) {
    OWNER.store(pid, SeqCst);
    CONTROL.store(std::sync::Arc::into_raw(control).cast_mut(), SeqCst);
}

/// The handler's control block once [`install`]ed: in this process, and in a forked child
/// (a copy, which forwards through it: `uffd::bring_in_child`).
pub fn control() -> Option<&'static Control> {
    // SAFETY: `CONTROL` is null or came from `Arc::into_raw` in `install`, never released.
    unsafe { CONTROL.load(SeqCst).as_ref() }
}

/// Asks the handler for a scan now (module essay).
pub fn request_scan() {
    SCAN_REQUESTED.store(true, SeqCst);
    let control = CONTROL.load(SeqCst);
    // SAFETY: getpid has no preconditions.
    if control.is_null() || unsafe { libc::getpid() } != OWNER.load(SeqCst) {
        return;
    }
    // SAFETY: `control` came from `Arc::into_raw` in `install` and is never released.
    unsafe { &*control }.wake();
}

fn maybe_new_anonymous(prot: c_int, flags: c_int) -> bool {
    prot & libc::PROT_WRITE != 0
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & libc::MAP_SHARED == 0
}

/// `mmap(2)` (module essay).
///
/// # Safety
/// The caller's contract is mmap's own.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: the caller's mmap arguments, passed on unchanged.
    let result = unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) };
    if result == -1 {
        return libc::MAP_FAILED;
    }
    if maybe_new_anonymous(prot, flags) {
        request_scan();
    }
    result as *mut c_void
}

/// `mmap64(2)`: the same call on 64-bit Linux.
///
/// # Safety
/// The caller's contract is mmap's own.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: as `mmap`.
    unsafe { mmap(addr, len, prot, flags, fd, offset) }
}

/// `mremap(2)`. C declares it variadic (the new address only with `MREMAP_FIXED`); on
/// x86-64 a variadic argument travels in the register a fifth argument would, so the fifth
/// parameter reads it, and is only passed on when the flag says it was given.
///
/// # Safety
/// The caller's contract is mremap's own.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let fixed = flags & libc::MREMAP_FIXED != 0;
    let target = if fixed { new_addr } else { std::ptr::null_mut() };
    // SAFETY: the caller's mremap arguments, passed on unchanged.
    let result = unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, target) };
    if result == -1 {
        return libc::MAP_FAILED;
    }
    if new_len > old_len {
        request_scan();
    }
    result as *mut c_void
}
