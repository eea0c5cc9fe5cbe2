//! The program's `sigaction` and `signal`, interposed for SIGBUS delivery (`uswap run
//! --delivery sigbus`, docs/RUN.md "Fault delivery").
//!
//! Under SIGBUS delivery the uffd crate's SIGBUS handler resolves the program's faults. A
//! program that installs a SIGBUS handler of its own (a server's crash reporter: redis
//! does) would replace it, and its next fault would be reported as a crash. So while SIGBUS
//! delivery is on, a SIGBUS disposition the program sets is recorded as the program's own
//! (`uffd::sigbus::set_program_action`) instead of installed: the uffd crate's handler
//! stays, resolves what is the engine's, and passes every other SIGBUS on to the program's
//! handler (or the default action). The program reads back what it set. Other signals, and
//! every call with the handler delivery, go to libc unchanged.
//!
//! Nor may SIGBUS be blocked: a fault's SIGBUS in a thread that blocks it kills the process
//! (jemalloc starts its background threads with every signal blocked, and redis at 1 GiB
//! died so). So the interposed `pthread_sigmask` and `sigprocmask` leave SIGBUS out of a
//! set that blocks, while SIGBUS delivery is on.
//!
//! Not seen: these calls made through the raw system call, and a program's `sa_mask` for
//! SIGBUS (its handler runs with this crate's handler's mask when chained).

#![allow(unsafe_code)]

use libc::{c_int, sighandler_t};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

static SIGACTION: AtomicUsize = AtomicUsize::new(0);

/// Fails as libc would without the function (it always has these).
fn missing() -> c_int {
    crate::io::set_errno(libc::ENOSYS);
    -1
}
static SIGNAL: AtomicUsize = AtomicUsize::new(0);

fn sigbus_recorded(signum: c_int) -> bool {
    signum == libc::SIGBUS && crate::io::SIGBUS_DELIVERY.load(SeqCst)
}

/// `sigaction(2)` (module essay).
///
/// # Safety
/// The caller's contract is sigaction's own.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    signum: c_int,
    act: *const libc::sigaction,
    oldact: *mut libc::sigaction,
) -> c_int {
    if sigbus_recorded(signum) {
        let previous = if act.is_null() {
            uffd::sigbus::program_action()
        } else {
            // SAFETY: the caller's contract: a non-null `act` points to a sigaction.
            let act = unsafe { &*act };
            uffd::sigbus::set_program_action(act.sa_sigaction, act.sa_flags)
        };
        if !oldact.is_null() {
            // SAFETY: the caller's contract: a non-null `oldact` points to a writable
            // sigaction; a zeroed one is a valid value (empty mask, no flags).
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                old.sa_sigaction = previous.0;
                old.sa_flags = previous.1;
                *oldact = old;
            }
        }
        return 0;
    }
    type F = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
    let f = crate::io::next(&SIGACTION, b"sigaction\0");
    if f == 0 {
        return missing();
    }
    // SAFETY: `f` is libc's sigaction (its C type is `F`), with the caller's arguments.
    unsafe { std::mem::transmute::<usize, F>(f)(signum, act, oldact) }
}

/// `signal(2)` (module essay).
///
/// # Safety
/// The caller's contract is signal's own.
#[no_mangle]
pub unsafe extern "C" fn signal(signum: c_int, handler: sighandler_t) -> sighandler_t {
    if sigbus_recorded(signum) {
        // glibc's signal() installs with SA_RESTART and without SA_SIGINFO.
        return uffd::sigbus::set_program_action(handler, libc::SA_RESTART).0;
    }
    type F = unsafe extern "C" fn(c_int, sighandler_t) -> sighandler_t;
    let f = crate::io::next(&SIGNAL, b"signal\0");
    if f == 0 {
        missing();
        return libc::SIG_ERR;
    }
    // SAFETY: `f` is libc's signal (its C type is `F`), with the caller's arguments.
    unsafe { std::mem::transmute::<usize, F>(f)(signum, handler) }
}

static PTHREAD_SIGMASK: AtomicUsize = AtomicUsize::new(0);
static SIGPROCMASK: AtomicUsize = AtomicUsize::new(0);

type MaskFn = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

/// Calls libc's `name` with `set`, minus SIGBUS when it blocks under SIGBUS delivery.
///
/// # Safety
/// The caller's contract is the call's own.
unsafe fn masked(
    slot: &AtomicUsize,
    name: &[u8],
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let f = crate::io::next(slot, name);
    if f == 0 {
        return missing();
    }
    // SAFETY: `f` is libc's function of this name, whose C type is `MaskFn`.
    let real = unsafe { std::mem::transmute::<usize, MaskFn>(f) };
    let blocks = how == libc::SIG_BLOCK || how == libc::SIG_SETMASK;
    if set.is_null() || !blocks || !sigbus_recorded(libc::SIGBUS) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real(how, set, old) };
    }
    // SAFETY: a non-null `set` points to a sigset (the caller's contract); the copy is ours.
    let mut without = unsafe { *set };
    // SAFETY: `without` is a valid sigset.
    unsafe { libc::sigdelset(&mut without, libc::SIGBUS) };
    // SAFETY: the caller's `how` and `old`, and a valid set.
    unsafe { real(how, &without, old) }
}

/// `pthread_sigmask(3)` (module essay).
///
/// # Safety
/// The caller's contract is pthread_sigmask's own.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { masked(&PTHREAD_SIGMASK, b"pthread_sigmask\0", how, set, old) }
}

/// `sigprocmask(2)` (module essay).
///
/// # Safety
/// The caller's contract is sigprocmask's own.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { masked(&SIGPROCMASK, b"sigprocmask\0", how, set, old) }
}
