//! uswap's frontend: makes the engine page real process memory, through userfaultfd.
//!
//! The engine (crate `engine`) decides what to evict and where a page's data lives; the
//! kernel interface (crate `uffd`) makes the calls. This crate is the policy between them:
//! which uffd serves which memory, the thread that reads it, how a fault becomes an engine
//! call, how a page leaves and comes back, what a fork does to all of it.
//!
//! ```text
//!   Uswap / Builder / Region (api)     the library: map, pageout, stats; libuswap.so wraps it
//!     Handler (handler)                one thread: reads every uffd (the process's and its
//!                                      forked children's), events first, faults -> engine
//!       control                        the handler's shared block, the fork gate
//!       children                       fork mode, forked children's references
//!       resync                         stale resident pages dropped (PAGEMAP_SCAN check)
//!     SigbusMode (delivery)            or: the faulting thread resolves its own fault
//!     UffdSource (source)              engine::PageSource: MOVE out via staging, COPY in
//!       staged                         pages a refused take left in staging, for the engine
//!       cow                            copy-on-write breaks of pages shared with a child
//!     Fence (fence)                    no take between an event's read and its application
//!     fork                             a forked child's copy becomes a swap of its own
//!     Follower (follow)                the handler on the faulting thread's CPU
//!     Trimmer (trim)                   gives freed heap back when it inflates the RSS
//!     IdlePage (idle)                  idle polling of a page the program shares with us
//!   engine::Engine                     decisions and bookkeeping
//!   uffd::{Uffd, Staging, PageMap, Mapping, SigbusResolver, probe, sys}   the kernel calls
//! ```
//!
//! Design rules:
//! - Every raw system call (the ioctls, mm calls, poll, signals, fork hooks, CPU placement)
//!   goes through crate `uffd`, whose `sys` module is the syscall boundary; this crate
//!   only reads `/proc` files and opens the idle page through `std`.
//! - `#![deny(unsafe_code)]`, allowed in three named leaf modules whose unsafe operations
//!   (calls of `uffd::sys`'s `unsafe fn`s, one raw write) are sound by invariants of this
//!   crate, which the kernel interface cannot check. `api` lends region bytes out as
//!   slices and [`source`] moves pages out of regions and writes a first touch directly:
//!   the engine keeps a region's contents transparent (a page it takes out comes back with
//!   the same bytes on the next access). [`delivery`] arms the SIGBUS dispatcher with a
//!   context it owns, and a dispatcher safe in signal context under its mode's contract.
//!   Each unsafe call has its `SAFETY` comment.
//! - One error type, [`Error`]: the kernel interface's errors forwarded whole
//!   ([`Error::Kernel`]), and the library's own (configuration, swap file, engine, threads,
//!   a forked child's inert copy).
//! - Counters for every failure and fallback, each declared once in a table
//!   (`counters::table!`).

#![deny(unsafe_code)]

mod api;
pub mod delivery;
pub mod error;
pub mod fence;
mod follow;
mod fork;
pub mod handler;
pub mod idle;
pub mod source;
pub mod trim;

pub use api::{
    Builder, CompressorKind, Incompressible, LargeFolios, Region, Stats, SwapTarget, Uswap,
    REQUIRED_FEATURES,
};
pub use delivery::{bring_in, Delivery, SigbusStats, CATCH_UP_MAX};
pub use error::Error;
pub use far::FarConfig;
pub use fork::inject_child_swap_failure;
pub use handler::{FaultReport, HandlerOptions, HandlerStats, Hooks, Noted};
pub use source::{SourceStats, UffdSource};
pub use uffd::PAGE_SIZE;
