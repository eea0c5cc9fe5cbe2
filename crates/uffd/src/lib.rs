//! The kernel-facing layer of uswap: userfaultfd, PAGEMAP_SCAN and the mm syscalls.
//!
//! This is the only crate of the project that makes memory-management system calls. The
//! engine above decides *what* to evict and *where* a page's data lives; this crate moves
//! pages in and out of a process through the kernel, and reports what happened:
//!
//! ```text
//!   engine (page-out / page-in, swap cache, reclaim)
//!     |  Uffd::read_events (faults + fork/remap/remove/unmap)
//!     |  Uffd::copy / zeropage / poison / wake         page-in: populate a hole
//!     |  Staging::move_out / move_in  (UFFDIO_MOVE)     page-out / page-in without copy
//!     |  Uffd::writeprotect + Mapping::advise(DontNeed) page-out for shared pages
//!     |  PageMap::scan (PAGEMAP_SCAN)                  what is present / written
//!     |  SigbusResolver                                 resolve in the faulting thread
//!   uffd ----------------------------------------------------------------------------
//!   sys: ioctl(UFFDIO_*), userfaultfd(2), mmap, madvise, mremap, sigaction  (all unsafe here)
//! ```
//!
//! Design rules:
//! - `unsafe` lives in the leaf module [`sys`] only; everything else is safe Rust with
//!   `#![deny(unsafe_code)]`. The ABI is hand-written (the system headers are Linux 6.1 and
//!   lack MOVE, POISON, WP_ASYNC and PAGEMAP_SCAN) and checked at compile time.
//! - Managed memory is never a Rust reference: the kernel changes it under us. It is
//!   reached through [`mm::Mapping`]'s volatile and atomic methods, or by address.
//! - Operations return the kernel's answer typed ([`Error`]): partial progress (EAGAIN with
//!   `done_bytes`), already populated (EEXIST), layout changed (ENOENT), process gone
//!   (ESRCH/ENOSPC), shared source (EBUSY). Nothing is retried behind the caller's back.
//! - Start-up failures say what to do ([`probe()`]): seccomp, missing privilege for
//!   kernel-mode faults, a kernel too old for a feature (named, with the release).
//! - Descriptors are owned: a FORK event carries the child's uffd as an owned [`Uffd`].
//!
//! Facts verified on the development kernel (6.18) and the measured costs are in
//! docs/UFFD.md; the tests under `tests/` are those facts, executable.
//!
//! The frontend, which makes the engine page real process memory, lives here too (it is the
//! only layer that may make mm syscalls):
//!
//! ```text
//!   Uswap / Builder / Region (api)     the library: map, pageout, stats; libuswap.so wraps it
//!     Handler (handler)                one thread: reads every uffd (the process's and its
//!                                      forked children's), events first, faults -> engine
//!     SigbusMode (delivery)            or: the faulting thread resolves its own fault
//!     UffdSource (source)              engine::PageSource: MOVE out via staging, COPY in
//!     Trimmer (trim)                   gives freed heap back when it inflates the RSS
//!   engine::Engine                     decisions and bookkeeping
//! ```

#![deny(unsafe_code)]

mod api;
mod counters;
pub mod delivery;
pub mod error;
pub mod event;
pub mod fence;
mod follow;
mod fork;
pub mod handler;
pub mod idle;
pub mod mm;
pub mod pagemap;
pub mod probe;
pub mod sigbus;
pub mod source;
pub mod staging;
pub mod sys;
pub mod trim;
pub mod types;
mod uffd;

pub use api::{
    Builder, CompressorKind, Incompressible, LargeFolios, Region, Stats, SwapTarget, Uswap,
    REQUIRED_FEATURES,
};
pub use delivery::{bring_in, Delivery, SigbusStats, CATCH_UP_MAX};
pub use error::{Error, Op};
pub use event::Event;
pub use far::FarConfig;
pub use handler::{HandlerOptions, HandlerStats, Hooks, Noted};
pub use mm::{Advice, Mapping, MemStatus, Prot};
pub use pagemap::{Categories, PageMap, PageRegion, ScanArgs, ScanResult};
pub use probe::{probe, Probe};
pub use sigbus::{SigbusFault, SigbusResolver};
pub use source::{SourceStats, UffdSource};
pub use staging::{SlotIndex, SlotRun, Staging, StagingStats};
pub use sys::Errno;
pub use types::{CopyMode, Features, Ioctls, KernelVersion, MoveMode, Range, RegisterMode, Wake};
pub use uffd::{Uffd, UffdBuilder, Via, READ_BATCH};

/// The base page size this project is built for (x86-64). [`probe()`] checks the running
/// system agrees.
pub const PAGE_SIZE: usize = 4096;

#[cfg(not(target_os = "linux"))]
compile_error!("uswap's uffd layer is Linux-only: userfaultfd is a Linux system call");
