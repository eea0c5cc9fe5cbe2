//! Links the shim so that Rust's thread-local destructors never reach glibc's `malloc`.
//!
//! std registers each thread-local with a destructor, at its first use on a thread, through
//! glibc's `__cxa_thread_atexit_impl` if the symbol exists (it is linked weakly), and that
//! function `calloc`s 32 bytes from the calling thread's malloc arena; without the symbol,
//! std keeps its own list, a `Vec` on the `System` allocator, which is glibc's `malloc` too.
//! Either is a `malloc` the shim forbids (crate essay): found by the test suite's `malloc`
//! checker on the reclaimer and the handler, and, under SIGBUS delivery, as a fault inside
//! that `malloc` whose handler registered a thread-local of its own, which std aborts on
//! (src/tls.rs). Defining the symbol inside the shim as the shim's own registry
//! (`--defsym`; local to the shim, as every symbol the cdylib does not export) makes std
//! register there, in the shim's arena. The program's own C++ runtime still finds glibc's
//! function: nothing outside the shim changes.

fn main() {
    println!(
        "cargo:rustc-link-arg-cdylib=-Wl,--defsym=__cxa_thread_atexit_impl=uswap_shim_thread_atexit"
    );
    println!("cargo:rerun-if-changed=build.rs");
}
