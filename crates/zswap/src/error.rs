//! The crate's one error type, and [`Reject`], why a store was refused.
//!
//! Setup errors (a bad compressor name, level, threshold, pool limit, slot count) are
//! reported once, clearly, when the pool is configured; data errors (a page that does not
//! compress, a corrupt object) are operating conditions, each with its own counter.

use std::fmt;

/// Why a zswap operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The compressor name is not one of `none`, `lz4`, `zstd`, `zstd:LEVEL`.
    UnknownCompressor {
        /// The name as given.
        name: String,
    },
    /// The zstd level is not a number, or outside the accepted range.
    ZstdLevel {
        /// The level as given.
        level: String,
        /// The smallest accepted level.
        min: i32,
        /// The largest accepted level.
        max: i32,
    },
    /// The incompressibility threshold is outside 1..=4096 bytes.
    Threshold {
        /// The threshold as given.
        bytes: usize,
    },
    /// A dictionary was given for a compressor that does not use one (only zstd does).
    DictionaryUnsupported {
        /// The compressor.
        kind: String,
    },
    /// The compression library could not set up a context or a dictionary.
    Setup {
        /// What the library said.
        reason: String,
    },
    /// The page compressed to `compressed_bytes`, not below `threshold_bytes`: zswap
    /// stores it raw or rejects it (the kernel's `reject_compress_poor`).
    Incompressible {
        /// The compressed size (checksum included).
        compressed_bytes: usize,
        /// The threshold it had to be below.
        threshold_bytes: usize,
    },
    /// The compressor failed on this page (the kernel's `reject_compress_fail`).
    CompressFailed {
        /// What the library said.
        reason: String,
    },
    /// The compressed object is malformed: the decoder refused it.
    Corrupt {
        /// What the decoder said.
        reason: String,
    },
    /// The object decoded to the wrong number of bytes (a page is exactly 4096).
    WrongLength {
        /// The decoded length.
        decoded_bytes: usize,
    },
    /// The object decoded, but not to the page that was compressed (checksum mismatch).
    ChecksumMismatch {
        /// The checksum stored with the object.
        stored: u32,
        /// The checksum of what was decoded.
        decoded: u32,
    },
    /// The budget the pool limit is a share of is zero.
    ZeroBudget,
    /// A percentage setting is outside its range.
    Percent {
        /// The setting (`max_pool_percent`, `accept_threshold_percent`).
        what: &'static str,
        /// Its value.
        percent: u32,
        /// The smallest accepted value.
        min: u32,
        /// The largest accepted value.
        max: u32,
    },
    /// The pool limit (budget * max_pool_percent / 100) is too small to hold the pool's own
    /// structures and a few zspages, or larger than the pool allocator can address.
    PoolLimit {
        /// The limit the configuration gives.
        limit_bytes: u64,
        /// The smallest accepted limit.
        min_bytes: u64,
        /// The largest accepted limit.
        max_bytes: u64,
    },
    /// The swap device's slot count is zero or above `slots::MAX_SLOTS`.
    NrSlots {
        /// The count given.
        nr_slots: u64,
        /// The largest accepted count.
        max: u64,
    },
    /// The pool allocator refused its configuration.
    Pool {
        /// What the allocator said.
        reason: String,
    },
}

/// The name the compressor API uses for this crate's error.
pub type CompressError = Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownCompressor { name } => write!(
                f,
                "unknown compressor {name:?}: expected none, lz4, zstd or zstd:LEVEL (1..=3)"
            ),
            Error::ZstdLevel { level, min, max } => {
                write!(f, "zstd level {level:?} is not an integer in {min}..={max}")
            }
            Error::Threshold { bytes } => {
                write!(f, "incompressible threshold {bytes} is not in 1..=4096 bytes")
            }
            Error::DictionaryUnsupported { kind } => {
                write!(f, "compressor {kind} takes no dictionary (only zstd does)")
            }
            Error::Setup { reason } => write!(f, "compressor setup failed: {reason}"),
            Error::Incompressible { compressed_bytes, threshold_bytes } => write!(
                f,
                "page compressed to {compressed_bytes} bytes, not below {threshold_bytes}"
            ),
            Error::CompressFailed { reason } => write!(f, "compression failed: {reason}"),
            Error::Corrupt { reason } => write!(f, "corrupt compressed page: {reason}"),
            Error::WrongLength { decoded_bytes } => {
                write!(f, "compressed page decoded to {decoded_bytes} bytes, not 4096")
            }
            Error::ChecksumMismatch { stored, decoded } => write!(
                f,
                "decoded page checksum {decoded:#010x} differs from the stored {stored:#010x}"
            ),
            Error::ZeroBudget => {
                f.write_str("zswap budget_bytes is 0: the pool limit is a share of it")
            }
            Error::Percent { what, percent, min, max } => {
                write!(f, "zswap {what} = {percent} is not in {min}..={max}")
            }
            Error::PoolLimit { limit_bytes, min_bytes, max_bytes } => write!(
                f,
                "zswap pool limit {limit_bytes} bytes (budget * max_pool_percent / 100) is not \
                 in {min_bytes}..={max_bytes}"
            ),
            Error::NrSlots { nr_slots, max } => {
                write!(f, "zswap over a swap device of {nr_slots} slots: expected 1..={max}")
            }
            Error::Pool { reason } => write!(f, "zswap pool setup failed: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// Why [`crate::Zswap::store`] refused a page. On every refusal the slot holds no pool
/// entry any more (an older one was invalidated) and the caller writes the page to the
/// swap device. Each reason has its own counter in [`crate::ZswapStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// The pool is at its limit, or has not yet shrunk below the accept threshold since it
    /// was (`pool_limit_hit`, `reject_accept_threshold`).
    PoolLimit,
    /// The compressor failed and incompressible pages are rejected (`reject_compress_fail`).
    CompressFail,
    /// The page did not compress below the huge-class size and incompressible pages are
    /// rejected (`reject_compress_poor`).
    CompressPoor,
    /// Memory for the object could not be had (`reject_alloc_fail`).
    AllocFail,
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reject::PoolLimit => "zswap pool limit reached",
            Reject::CompressFail => "compression failed",
            Reject::CompressPoor => "page does not compress",
            Reject::AllocFail => "pool allocation failed",
        })
    }
}

impl std::error::Error for Reject {}
