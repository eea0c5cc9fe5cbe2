//! The program's `fread` and `fwrite` (and their `_unlocked` names), interposed for SIGBUS
//! delivery (`uswap run --delivery sigbus`, docs/RUN.md "Fault delivery").
//!
//! A large `fread` or `fwrite` bypasses the stream's buffer: glibc reads into, or writes
//! from, the program's own buffer with a system call of its own, which no wrapper of
//! crates/preload/src/io.rs sees. Under SIGBUS delivery that call fails with EFAULT where
//! the buffer is not resident, and a fresh buffer never is (the page was never touched):
//! `fread` of 4 MiB into a new `malloc` block returned 4,080 bytes and set the stream's
//! error (by hand, before these wrappers). So each wrapper calls glibc's function for the
//! bytes (`size` 1, `size * n` of them: what glibc's own computes, so the stream is left
//! the same), and while it stops short with the stream's error set and errno EFAULT, brings
//! in the first managed pages of the rest of the buffer ([`crate::io::bring_in_after_efault`]),
//! clears the error and goes on from where it stopped: glibc counts exactly the bytes it
//! moved. Rounds in a row without progress are paced and bounded as the other calls'
//! ([`crate::io::Retry`]).
//!
//! With handler delivery each wrapper is glibc's function and one atomic load.

#![allow(unsafe_code)]

use crate::io::{bring_in_after_efault, efault_under_sigbus, next, SIGBUS_DELIVERY};
use crate::io::{Retry, EFAULT};
use libc::{c_void, size_t, FILE};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};

/// glibc's `fread`/`fwrite` type (`fwrite`'s buffer is `const`: the same ABI).
type Transfer = unsafe extern "C" fn(*mut c_void, size_t, size_t, *mut FILE) -> size_t;

/// One interposed transfer (module essay): `real` is glibc's function; `kernel_writes` for
/// a read.
///
/// # Safety
/// `real` is a function of type [`Transfer`]; the rest is the caller's contract with it.
unsafe fn transfer(
    real: usize,
    ptr: *mut c_void,
    size: size_t,
    n: size_t,
    stream: *mut FILE,
    kernel_writes: bool,
) -> size_t {
    // SAFETY: the caller's contract.
    let f = unsafe { std::mem::transmute::<usize, Transfer>(real) };
    let total = size.checked_mul(n).unwrap_or(0);
    if total == 0 || !SIGBUS_DELIVERY.load(SeqCst) {
        // SAFETY: the caller's arguments, to glibc's function.
        return unsafe { f(ptr, size, n, stream) };
    }
    let (base, mut done, mut retry) = (ptr as usize, 0usize, Retry::default());
    loop {
        // SAFETY: the rest of the caller's buffer, whole bytes of it.
        let got = unsafe { f((base + done) as *mut c_void, 1, total - done, stream) };
        done = (done + got).min(total);
        // SAFETY: `stream` is the caller's open stream.
        if done == total || unsafe { libc::ferror(stream) } == 0 || !efault_under_sigbus() {
            break;
        }
        if got > 0 {
            retry = Retry::default();
        }
        if !retry.again() {
            EFAULT.failed.fetch_add(1, Relaxed);
            break;
        }
        let rest = (base + done, total - done);
        if !bring_in_after_efault(&|each| each(rest.0, rest.1), kernel_writes) {
            break; // not managed memory: the program's own EFAULT, left as glibc set it
        }
        // SAFETY: as above; the error was ours, and the stream goes on where it stopped.
        unsafe { libc::clearerr(stream) };
        EFAULT.retries.fetch_add(1, Relaxed);
    }
    done / size
}

/// Defines an interposed transfer named `$name` (glibc's of that name, found once).
macro_rules! stdio_interposed {
    ($(#[$doc:meta])* fn $name:ident(ptr: $ptr:ty); kernel_writes: $write:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The caller's contract is the call's own.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ptr: $ptr,
            size: size_t,
            n: size_t,
            stream: *mut FILE,
        ) -> size_t {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let real = next(&NEXT, concat!(stringify!($name), "\0").as_bytes());
            if real == 0 {
                return 0;
            }
            // SAFETY: `real` is glibc's function of this name, a `Transfer`; the caller's
            // arguments.
            unsafe { transfer(real, ptr as *mut c_void, size, n, stream, $write) }
        }
    };
}

stdio_interposed! {
    /// `fread(3)` (module essay).
    fn fread(ptr: *mut c_void); kernel_writes: true
}

stdio_interposed! {
    /// `fread_unlocked(3)` (module essay).
    fn fread_unlocked(ptr: *mut c_void); kernel_writes: true
}

stdio_interposed! {
    /// `fwrite(3)` (module essay).
    fn fwrite(ptr: *const c_void); kernel_writes: false
}

stdio_interposed! {
    /// `fwrite_unlocked(3)` (module essay).
    fn fwrite_unlocked(ptr: *const c_void); kernel_writes: false
}
