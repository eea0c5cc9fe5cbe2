//! Signal stacks for SIGBUS delivery (`uswap run --delivery sigbus`, docs/RUN.md "Fault
//! delivery"): every thread of the program gets an alternate signal stack from the shim's
//! arena, which is never managed.
//!
//! Why: the kernel delivers SIGBUS by writing a signal frame (a few KiB with the vector
//! registers) below the thread's stack pointer. A thread's stack is managed memory like any
//! other, and a thread that slept long (a server's idle worker, a thread in `epoll_wait`)
//! may find the pages under its stack pointer swapped out. Writing the frame there is then
//! itself a fault the kernel cannot deliver, and it kills the process with SIGSEGV: redis
//! at 1 GiB under 256M died so, its core showing a thread whose stack read as garbage.
//! The shim has the uffd crate's SIGBUS handler installed with `SA_ONSTACK`
//! (`uffd::sigbus::run_on_alternate_stacks`), so the frame goes to the alternate stack,
//! always resident.
//!
//! The main thread gets its stack when the shim starts; every other thread when it starts,
//! through the interposed `pthread_create`, which runs the thread's start routine behind a
//! trampoline that sets the stack first. A thread's stack is released when it exits. Not
//! covered: threads made without `pthread_create` (raw `clone`), and a thread that sets its
//! own alternate stack in managed memory.

#![allow(unsafe_code)]

use libc::{c_int, c_void, pthread_attr_t, pthread_t};
use std::alloc::Layout;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// Bytes of each alternate stack: the engine's fault path, direct reclaim and compression
/// included, runs on it (only the pages it touches become resident).
const STACK_BYTES: usize = 256 << 10;

fn layout() -> Layout {
    Layout::from_size_align(STACK_BYTES, 4096).expect("a page-aligned layout")
}

/// The pthread key whose destructor frees a thread's alternate stack when it exits
/// (`pthread_key_create`: C-level, so it runs for threads that end in `pthread_exit` too).
static KEY: std::sync::OnceLock<libc::pthread_key_t> = std::sync::OnceLock::new();

extern "C" fn release(stack: *mut c_void) {
    if stack.is_null() {
        return;
    }
    let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
    // SAFETY: disables this exiting thread's alternate stack (no handler runs on it any
    // more); `stack` came from `alloc` with `layout()` and its key's value is freed once.
    unsafe {
        libc::sigaltstack(&off, std::ptr::null_mut());
        std::alloc::dealloc(stack.cast(), layout());
    }
}

fn key() -> Option<libc::pthread_key_t> {
    let key = KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is written by the call; `release` has the destructor's type.
        if unsafe { libc::pthread_key_create(&mut key, Some(release)) } == 0 {
            key
        } else {
            libc::pthread_key_t::MAX
        }
    });
    (*key != libc::pthread_key_t::MAX).then_some(*key)
}

/// Gives the calling thread an alternate signal stack from the arena, unless it has one
/// of ours already, and unblocks SIGBUS in it.
pub fn install_for_this_thread() {
    // A thread may start with SIGBUS blocked (a mask set by raw system call before it was
    // made): a fault's SIGBUS there would kill the process (crates/preload/src/signals.rs).
    // SAFETY: a sigset made empty, then holding SIGBUS; unblocking changes no memory.
    unsafe {
        let mut bus: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut bus);
        libc::sigaddset(&mut bus, libc::SIGBUS);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &bus, std::ptr::null_mut());
    }
    let Some(key) = key() else { return };
    // SAFETY: a key made by `key()`.
    if !unsafe { libc::pthread_getspecific(key) }.is_null() {
        return;
    }
    // SAFETY: a non-zero layout; the arena's allocation (never managed memory).
    let stack = unsafe { std::alloc::alloc(layout()) };
    if stack.is_null() {
        return;
    }
    let ss = libc::stack_t { ss_sp: stack.cast(), ss_flags: 0, ss_size: STACK_BYTES };
    // SAFETY: `stack` is STACK_BYTES of memory this thread owns until `release` runs.
    let installed = unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) } == 0
        // SAFETY: a key made by `key()`; the value is this thread's own.
        && unsafe { libc::pthread_setspecific(key, stack.cast()) } == 0;
    if !installed {
        release(stack.cast());
    }
}

type StartFn = extern "C" fn(*mut c_void) -> *mut c_void;

/// A thread's start routine and argument, carried through the trampoline.
struct Start {
    routine: StartFn,
    arg: *mut c_void,
}

extern "C" fn trampoline(start: *mut c_void) -> *mut c_void {
    // SAFETY: `start` is the box `pthread_create` leaked for this thread, taken once.
    let start = unsafe { Box::from_raw(start.cast::<Start>()) };
    install_for_this_thread();
    (start.routine)(start.arg)
}

static PTHREAD_CREATE: AtomicUsize = AtomicUsize::new(0);

/// `pthread_create(3)` (module essay).
///
/// # Safety
/// The caller's contract is pthread_create's own.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut pthread_t,
    attr: *const pthread_attr_t,
    routine: StartFn,
    arg: *mut c_void,
) -> c_int {
    type F =
        unsafe extern "C" fn(*mut pthread_t, *const pthread_attr_t, StartFn, *mut c_void) -> c_int;
    let f = crate::io::next(&PTHREAD_CREATE, b"pthread_create\0");
    if f == 0 {
        return libc::ENOSYS;
    }
    // SAFETY: `f` is libc's pthread_create, whose C type is `F`.
    let real = unsafe { std::mem::transmute::<usize, F>(f) };
    if !crate::io::SIGBUS_DELIVERY.load(SeqCst) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real(thread, attr, routine, arg) };
    }
    let start = Box::into_raw(Box::new(Start { routine, arg })).cast::<c_void>();
    // SAFETY: the caller's thread and attributes; the trampoline takes `start` back.
    let ret = unsafe { real(thread, attr, trampoline, start) };
    if ret != 0 {
        // SAFETY: no thread was made, so nothing else took the box.
        drop(unsafe { Box::from_raw(start.cast::<Start>()) });
    }
    ret
}
