//! The shim's own registry of Rust's thread-local destructors: the function std calls,
//! inside the shim, where it would call glibc's `__cxa_thread_atexit_impl` (build.rs links
//! the name to [`uswap_shim_thread_atexit`]; the program's own C++ runtime still finds
//! glibc's).
//!
//! Why: a thread-local with a destructor (the pool's compression buffer, parking_lot's per-thread
//! parking data, std's own) is registered at its first use on a thread, and both of std's ways to
//! register reach glibc's `malloc`: glibc's function `calloc`s, and std's fallback list is a `Vec`
//! on the `System` allocator. The program's heap is managed memory, so that `malloc` may fault. On
//! the handler thread that is a fault on itself; under SIGBUS delivery, in a program thread's first
//! registration, the fault's handler needed a thread-local of its own while std's list was
//! borrowed, and std aborted the process ("the System allocator may not use TLS with destructors":
//! a new thread's first `malloc` faulting in glibc's arena set-up, as the idle-threads test shows).
//! Here a registration takes a node from the shim's arena, never managed, and touches nothing else,
//! so it neither faults nor calls `malloc`, in a signal handler as anywhere.
//!
//! The destructors run when the thread exits, last registered first (as glibc runs them),
//! from one pthread key's destructor; a destructor that registers another has it run in the
//! same pass. As with std's own list, the main thread's run only if it ends by
//! `pthread_exit`.

#![allow(unsafe_code)]

use libc::{c_int, c_void};
use std::cell::Cell;
use std::sync::OnceLock;

/// One registered destructor.
struct Node {
    dtor: unsafe extern "C" fn(*mut u8),
    arg: *mut u8,
    next: *mut Node,
}

thread_local! {
    /// The calling thread's destructors, newest first (no destructor of its own: a const
    /// initializer and a plain pointer, so this thread-local needs no registration).
    static HEAD: Cell<*mut Node> = const { Cell::new(std::ptr::null_mut()) };
}

/// The pthread key whose destructor runs a thread's list (created by [`init`] at the
/// shim's start, so a registration inside a signal handler never creates it).
static KEY: OnceLock<Option<libc::pthread_key_t>> = OnceLock::new();

/// Creates the key. Called at the shim's start; later callers find it made.
pub fn init() -> Option<libc::pthread_key_t> {
    *KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is written by the call; `run_all` has the destructor's type.
        (unsafe { libc::pthread_key_create(&mut key, Some(run_all)) } == 0).then_some(key)
    })
}

/// std's registration call inside the shim (`__cxa_thread_atexit_impl`'s signature; the
/// DSO handle is not needed: the shim is never unloaded). Returns 0, or -1 when no key could
/// be made (std then aborts, as it does on glibc's failure).
///
/// # Safety
/// `dtor(arg)` must be sound to call once when the calling thread exits.
#[no_mangle]
pub unsafe extern "C" fn uswap_shim_thread_atexit(
    dtor: unsafe extern "C" fn(*mut u8),
    arg: *mut u8,
    _dso: *mut u8,
) -> c_int {
    let Some(key) = init() else { return -1 };
    let node = Box::into_raw(Box::new(Node { dtor, arg, next: HEAD.with(Cell::get) }));
    HEAD.with(|head| head.set(node));
    // A non-null value, so the key's destructor runs at this thread's exit. The key was
    // made at the shim's start, among a process's first: below glibc's 32 keys kept in the
    // thread's descriptor, so setting it allocates nothing.
    // SAFETY: a key made by `init`; the value is only a marker.
    unsafe { libc::pthread_setspecific(key, std::ptr::dangling_mut::<c_void>()) };
    0
}

/// The key's destructor: runs the exiting thread's destructors, newest first, until none
/// is left (one may register another).
extern "C" fn run_all(_marker: *mut c_void) {
    loop {
        let mut node = HEAD.with(|head| head.replace(std::ptr::null_mut()));
        if node.is_null() {
            return;
        }
        while !node.is_null() {
            // SAFETY: every node came from `Box::into_raw` in the registration and is
            // taken off the list (above) before it is freed here, once.
            let taken = unsafe { Box::from_raw(node) };
            node = taken.next;
            // SAFETY: the registration's contract: called once, at this thread's exit.
            unsafe { (taken.dtor)(taken.arg) };
        }
    }
}
