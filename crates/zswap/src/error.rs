//! The crate's one error type. Setup errors (a bad compressor name, level, threshold) are
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
        }
    }
}

impl std::error::Error for Error {}
