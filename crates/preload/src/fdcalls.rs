//! The program's descriptor calls, interposed so that uswap's own descriptors stay out of
//! its way (crate `fds`, whose essay says how): `close`, `closefrom`, `close_range`, `dup2`,
//! `dup3`, and `fcntl` / `fcntl64` with `F_DUPFD` or `F_DUPFD_CLOEXEC`.
//!
//! - `close` of one of uswap's numbers reports success and closes nothing (a program closing
//!   every number it does not know, as daemons and shells do);
//! - `closefrom` and `close_range` close everything in the range but uswap's;
//! - `dup2`, `dup3` onto one of uswap's numbers move uswap's descriptor elsewhere first: the
//!   program gets the number it asked for (a shell's `exec 4>>log`);
//! - `fcntl(F_DUPFD, min)` gives the number it would give without uswap's.
//!
//! Not interposable, and not needed: glibc's own `fclose` closes through an internal
//! function (`_IO_file_close` jumps to `__close_nocancel`, no PLT entry), and a stream on one
//! of uswap's numbers cannot exist (the number is in use, so `fopen` never returns it);
//! `closefrom` calls glibc's `close_range` internally too, so both are interposed. Calls made
//! by the raw system call pass by all of this: the registry's identity checks catch them
//! (crate `fds`).
//!
//! Context: any thread, at any time, also before the shim's constructor (nothing is
//! registered then: every call goes straight to libc); in a forked or vforked child the
//! calls pass by (the registry is the parent's).

#![allow(unsafe_code)]

use crate::io::next;
use libc::{c_int, c_long, c_uint};
use std::sync::atomic::AtomicUsize;

/// Fails as libc would without the function.
fn missing() -> c_int {
    crate::io::set_errno(libc::ENOSYS);
    -1
}

/// libc's function `name`, with its C type `F`, or `None`.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let f = next(&NEXT, concat!($name, "\0").as_bytes());
        // SAFETY: `f` is libc's function of this name, whose C type is `$ty`; 0 is none.
        (f != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(f) })
    }};
}

/// `close(2)` (module essay).
///
/// # Safety
/// The caller's contract is close's own.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fds::program::close(fd) {
        return 0;
    }
    match real!("close", unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: the caller's argument, to libc's close.
        Some(real) => unsafe { real(fd) },
        None => missing(),
    }
}

/// `closefrom(3)` (module essay).
///
/// # Safety
/// The caller's contract is closefrom's own.
#[no_mangle]
pub unsafe extern "C" fn closefrom(first: c_int) {
    if fds::program::close_range(first.max(0) as u32, u32::MAX, 0).is_some() {
        return;
    }
    if let Some(real) = real!("closefrom", unsafe extern "C" fn(c_int)) {
        // SAFETY: the caller's argument, to libc's closefrom.
        unsafe { real(first) };
    }
}

/// `close_range(2)` (module essay).
///
/// # Safety
/// The caller's contract is close_range's own.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if let Some(result) = fds::program::close_range(first, last, flags as u32) {
        return result;
    }
    match real!("close_range", unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int) {
        // SAFETY: the caller's arguments, to libc's close_range.
        Some(real) => unsafe { real(first, last, flags) },
        None => missing(),
    }
}

/// `dup2(2)` (module essay).
///
/// # Safety
/// The caller's contract is dup2's own.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let Some(real) = real!("dup2", unsafe extern "C" fn(c_int, c_int) -> c_int) else {
        return missing();
    };
    // SAFETY: the caller's arguments, to libc's dup2.
    let call = || unsafe { real(old, new) };
    if old == new {
        return call(); // no descriptor changes
    }
    fds::program::dup_onto(new, call)
}

/// `dup3(2)` (module essay).
///
/// # Safety
/// The caller's contract is dup3's own.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let Some(real) = real!("dup3", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) else {
        return missing();
    };
    // SAFETY: the caller's arguments, to libc's dup3.
    let call = || unsafe { real(old, new, flags) };
    if old == new {
        return call(); // EINVAL, as libc says
    }
    fds::program::dup_onto(new, call)
}

/// `fcntl(2)` and `fcntl64`: C declares them variadic. On x86-64 a variadic argument
/// travels in the register a third argument would, so the third parameter reads it (an
/// integer or a pointer, whichever the command takes), and passes it on unchanged.
///
/// # Safety
/// The caller's contract is fcntl's own.
unsafe fn fcntl_with(slot: &AtomicUsize, name: &[u8], fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    let f = next(slot, name);
    if f == 0 {
        return missing();
    }
    type F = unsafe extern "C" fn(c_int, c_int, c_long) -> c_int;
    // SAFETY: `f` is libc's fcntl (or fcntl64), called with the caller's three words.
    let call = || unsafe { std::mem::transmute::<usize, F>(f)(fd, cmd, arg) };
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let min = c_int::try_from(arg).unwrap_or(c_int::MAX);
            fds::program::dup_at_least(fd, min, cmd == libc::F_DUPFD_CLOEXEC, call)
        }
        _ => call(),
    }
}

/// `fcntl(2)` (see [`fcntl_with`]).
///
/// # Safety
/// The caller's contract is fcntl's own.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: the caller's contract.
    unsafe { fcntl_with(&NEXT, b"fcntl\0", fd, cmd, arg) }
}

/// `fcntl64`, glibc's name for the same call (see [`fcntl_with`]).
///
/// # Safety
/// The caller's contract is fcntl's own.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: the caller's contract.
    unsafe { fcntl_with(&NEXT, b"fcntl64\0", fd, cmd, arg) }
}
