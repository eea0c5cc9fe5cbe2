//! uswap's kernel interface: userfaultfd, PAGEMAP_SCAN and the mm syscalls.
//!
//! This is the only crate of the project that makes memory-management system calls. The
//! frontend above (crate `frontend`) decides, with the engine, *what* to evict and *where* a
//! page's data lives; this crate moves pages in and out of a process through the kernel,
//! and reports what happened:
//!
//! ```text
//!   frontend (fault handler, page source, fork, SIGBUS delivery) -> engine
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
//! What is here, each a safe wrapper of one kernel interface, usable alone (the tests under
//! `tests/`, `uswap bench uffd`):
//!
//! ```text
//!   Uffd / UffdBuilder (uffd)      one userfaultfd: register, resolve, read events
//!   Event, RangeEvent (event)      a uffd message, typed; a range change in it
//!   Staging (staging)              registered page slots, the far end of every UFFDIO_MOVE
//!   PageMap (pagemap)              PAGEMAP_SCAN of an address space
//!   Mapping, MemStatus (mm)        owned anonymous memory, madvise, /proc/self/status
//!   SigbusResolver (sigbus)        the process-wide SIGBUS handler's armed ranges
//!   probe (probe)                  what this kernel and process allow, and what to do
//!   Error, Op (error)              the kernel's answers, typed
//!   sys                            the raw calls: the only unsafe code of the crate
//! ```
//!
//! Design rules:
//! - No policy and no engine: this crate depends on no layer of uswap but the descriptor
//!   registry (`fds`). What to do with a fault, when to evict, how a fork is carried over,
//!   is the frontend's.
//! - `unsafe` lives in the leaf module [`sys`] only; everything else is safe Rust with
//!   `#![deny(unsafe_code)]`. The ABI is hand-written (the system headers are Linux 6.1 and
//!   lack MOVE, POISON, WP_ASYNC and PAGEMAP_SCAN) and checked at compile time. A raw call
//!   whose soundness rests on a caller's invariant (a MOVE out of memory the caller lends
//!   out, a byte view of managed memory, a SIGBUS dispatcher's context) stays an
//!   `unsafe fn` here, with its contract; the caller's `SAFETY` comment says why it holds.
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

#![deny(unsafe_code)]

pub mod error;
pub mod event;
pub mod mm;
pub mod pagemap;
pub mod probe;
pub mod sigbus;
pub mod staging;
pub mod sys;
pub mod types;
mod uffd;

pub use error::{Error, Op};
pub use event::{Event, RangeEvent};
pub use mm::{Advice, Mapping, MemStatus, Prot};
pub use pagemap::{Categories, PageMap, PageRegion, ScanArgs, ScanResult};
pub use probe::{probe, Probe};
pub use sigbus::{SigbusFault, SigbusResolver};
pub use staging::{SlotIndex, SlotRun, Staging, StagingStats};
pub use sys::Errno;
pub use types::{CopyMode, Features, Ioctls, KernelVersion, MoveMode, Range, RegisterMode, Wake};
pub use uffd::{Uffd, UffdBuilder, Via, READ_BATCH};

/// The base page size this project is built for (x86-64). [`probe()`] checks the running
/// system agrees.
pub const PAGE_SIZE: usize = 4096;

#[cfg(not(target_os = "linux"))]
compile_error!("uswap's uffd layer is Linux-only: userfaultfd is a Linux system call");
