//! `uswap-workload`: a memory workload that verifies every page it reads.
//!
//! The yardstick of uswap is the kernel's own swap on the same machine (docs/ARCHITECTURE.md,
//! "The kernel as the yardstick"): the same program runs under a memory cgroup with zram or
//! zswap, and under `uswap run`, at the same budget. This crate is that program. It is a
//! normal, dynamically linked process: it allocates its working set with `calloc` (so an
//! `LD_PRELOAD` shim can take it over), fills it with contents that compress like a real
//! heap ([`content`]), touches it in one of four patterns ([`pattern`]), times every touch,
//! and checks that every page read back holds the last contents written to it. A mismatch
//! is counted and makes the exit status non-zero: the benchmark is also a data-safety test.
//!
//! ```text
//!   main.rs   options -> run::Config ---> run::run ---> run::Report (one JSON line)
//!                                           |
//!            arena (calloc, volatile touches, getrusage)   <- the only unsafe module
//!            content (page = f(seed, page, version))       <- verification oracle
//!            pattern + zipf + rng (which page next)
//! ```
//!
//! The library part is also used by the `uswap` harness: [`size::parse_size`] for its
//! options and [`run::Report`] to read the workload's JSON.

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod arena;
pub mod content;
pub mod pattern;
pub mod rng;
pub mod run;
pub mod size;
pub mod zipf;

pub use pattern::Pattern;
pub use run::{Config, Report};

/// Everything that can go wrong in this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkloadError {
    /// A size on the command line could not be read.
    BadSize { text: String },
    /// An option out of range.
    BadOption { what: String },
    /// The working set could not be allocated.
    OutOfMemory { bytes: u64 },
}

impl std::fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkloadError::BadSize { text } => {
                write!(f, "bad size {text:?} (expected e.g. 4096, 64K, 256M, 1G)")
            }
            WorkloadError::BadOption { what } => write!(f, "bad option: {what}"),
            WorkloadError::OutOfMemory { bytes } => {
                write!(f, "cannot allocate a working set of {bytes} bytes")
            }
        }
    }
}

impl std::error::Error for WorkloadError {}
