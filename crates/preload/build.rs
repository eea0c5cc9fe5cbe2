//! Links the shim so that Rust's thread-local destructors never reach glibc's `malloc`.
//!
//! std registers each thread-local with a destructor, at its first use on a thread, through
//! glibc's `__cxa_thread_atexit_impl` if the symbol exists (it is linked weakly), and that
//! function `calloc`s 32 bytes from the calling thread's malloc arena. On an engine thread
//! after set-up that is a `malloc` call the shim forbids (crate essay): found by the
//! test suite's `malloc` checker on the reclaimer (zswap's per-thread compression buffer)
//! and the handler (parking_lot's per-thread parking data, at its first folio wait).
//! Defining the symbol as 0 inside the shim (`--defsym`; local to it, as every symbol the
//! cdylib does not export) makes std take its own fallback: a per-thread list in Rust
//! memory (the shim's arena), run at thread exit by one pthread key's destructor. The
//! program's own C++ runtime still finds glibc's function: nothing outside the shim
//! changes.

fn main() {
    println!("cargo:rustc-link-arg-cdylib=-Wl,--defsym=__cxa_thread_atexit_impl=0");
    println!("cargo:rerun-if-changed=build.rs");
}
