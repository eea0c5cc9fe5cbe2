//! Links zswap's test binaries with `__cxa_thread_atexit_impl` defined as 0, so std keeps
//! thread-local destructors in its own list instead of glibc's, whose registration
//! `calloc`s at every first use; std's list allocates at a thread's first registration
//! (room for four), which tests/zstd_malloc.rs makes before it counts. (The LD_PRELOAD
//! shim goes further and links the name to a registry of its own: preload's src/tls.rs.)
//!
//! Why the tests need it: tests/zstd_malloc.rs counts every `malloc` a compressing thread
//! makes, and one `.ci/run` failed with "a worker called malloc" (1 call). The likeliest
//! source: a worker that first waits on the compressor's context stack (parking_lot) makes
//! its per-thread parking data, a thread-local with a destructor, and glibc's registration
//! of that `calloc`s, as preload/build.rs found on the handler thread. That call is std's,
//! not zstd's, and the shim, where zstd runs on engine threads, never makes it. A reading,
//! not a reproduction: 40 runs of the old test binary beside two busy loops passed.

fn main() {
    println!("cargo:rustc-link-arg-tests=-Wl,--defsym=__cxa_thread_atexit_impl=0");
    println!("cargo:rerun-if-changed=build.rs");
}
