//! `libuswap_preload.so`: the LD_PRELOAD shim that `uswap run` loads into a program, so
//! that the program's private anonymous memory (heap, mmaps, allocator arenas, thread
//! stacks) is managed by uswap under a budget, with no change to the program.
//!
//! ```text
//!   program start (ld.so runs .init_array)        the handler thread ("uswap-uffd")
//!   --------------------------------------        ---------------------------------
//!   start: read runstat's USWAP_* variables       reads faults and events, serves them
//!     not uswap run's own child? -> leave,        Hooks::fault: latency histogram, trace
//!       taking the shim out of LD_PRELOAD         Hooks::event: trace
//!     snapshot /proc/self/maps                    Hooks::work, every 15 ms or when woken:
//!     Uswap::builder()...build()  (engine,          scan /proc/self/maps; every managed
//!       handler with the shim's hooks, threads)     candidate not yet a region: register
//!     snapshot again: what appeared is the          it (MISSING), list its present pages
//!       engine's; exclude it, the arena and         (PAGEMAP_SCAN), add_region_populated;
//!       the heap below today's break                rewrite the live stats file
//!     wake the handler: first scan                the program's mmap/mremap (interposed)
//!   program runs                                    wake it at once
//!   exit (.fini_array): serve forked children's
//!     swapped pages into them; final stats file
//! ```
//!
//! **Why the shim never uses glibc's malloc.** The program's heap is managed memory. The
//! handler thread is the only one that can bring an evicted page back: if it called
//! `malloc` and malloc touched an evicted chunk header, it would fault on itself; if it
//! waited for an arena lock held by a program thread that is faulting, it would wait for
//! itself. Either hangs the process. So the shim's Rust code allocates from its own arena
//! ([`arena`], the `#[global_allocator]` of this shared object, which applies to the engine
//! and std inside it), its /proc reads are plain `read(2)` into its own buffers, and its
//! threads are all started before the first range is managed (a thread's stack and TLS are
//! set up by glibc with malloc). Two quieter callers of `malloc` are closed off too: zstd's
//! contexts allocate through Rust's allocator (zswap's `compress/zstd_ctx.rs`), and std's
//! thread-local destructors are registered in the shim's own list ([`tls`]) rather than
//! through glibc's `__cxa_thread_atexit_impl`, which `calloc`s (build.rs). The test suite
//! checks it with an interposed `malloc` that counts the engine threads' calls once
//! `uswap_shim_managing` (exported, shim.rs) says 1.
//!
//! **Discovery and events.** glibc's malloc calls mmap and brk internally (no PLT, so no
//! interposition can see them): the handler rescans /proc/self/maps every [`SCAN_PERIOD`]
//! and at once when the program's own `mmap`/`mremap` calls (interposed) wake it. Managing
//! a range is done on the handler thread, so it is ordered with the kernel's events: an
//! UNMAP of the range is read after the range is a region. The kernel's UNMAP, REMOVE and
//! REMAP events (the handler already serves them) keep the managed set right when the
//! program or glibc unmaps, drops (`MADV_DONTNEED`: malloc trimming) or moves memory;
//! `mmap(MAP_FIXED)` over a managed range is an UNMAP then a new mapping, found by the
//! next scan.
//!
//! **Processes.** fork: before `fork()` returns in the child, the frontend's fork handler
//! gives the child a userfaultfd of its own and its copy of the engine (crates/frontend/
//! src/fork.rs); [`shim::forked_child`] then points discovery, the interposers and the stats
//! file at the child's swap. The parent keeps the slots the child reads until the child
//! exits or execs. exec: the image is gone with its engine; the new image runs the
//! constructor again and starts a fresh engine if the process is still `uswap run`'s child
//! (runstat's env protocol); a grandchild that execs runs unmanaged, the shim removed.

#![deny(unsafe_code)]

mod altstack;
mod fdcalls;
mod files;
mod hooks;
mod interpose;
mod io;
pub mod maps;
pub mod member;
mod shim;
mod signals;
mod stdio;
mod tls;

/// Every Rust allocation of the shim (module essay).
#[global_allocator]
static ARENA: arena::Arena = arena::Arena::new();

/// How often the handler rescans /proc/self/maps when nothing wakes it.
pub const SCAN_PERIOD: std::time::Duration = std::time::Duration::from_millis(10);
