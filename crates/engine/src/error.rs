//! The engine's one error type.

use std::fmt;

/// Everything that can go wrong in the engine, with the data to say what.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is unusable (the message names it and says why).
    Config(String),
    /// The page source reported an address that lies in no region.
    OutsideRegions {
        /// The address.
        addr: u64,
    },
    /// A new region overlaps an existing one, or is empty, or is not page aligned.
    BadRegion {
        /// Start of the refused region.
        start: u64,
        /// Its length in bytes.
        len: u64,
        /// Why.
        why: &'static str,
    },
    /// A swap-in could not read the page's data back (I/O error, checksum mismatch,
    /// decompression failure). The faulting access gets an error; no data was mapped.
    SwapIn {
        /// The faulting address.
        addr: u64,
        /// What failed.
        why: String,
    },
    /// The page source failed in a way the engine cannot retry.
    Source(String),
    /// No address space has this id (it exited, or was never forked).
    NoSuchMm {
        /// The id.
        mm: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(why) => write!(f, "configuration: {why}"),
            Error::OutsideRegions { addr } => {
                write!(f, "address {addr:#x} is not in any managed region")
            }
            Error::BadRegion { start, len, why } => {
                write!(f, "region {start:#x}+{len:#x} refused: {why}")
            }
            Error::SwapIn { addr, why } => write!(f, "swap-in at {addr:#x} failed: {why}"),
            Error::Source(why) => write!(f, "page source: {why}"),
            Error::NoSuchMm { mm } => write!(f, "no address space {mm}"),
        }
    }
}

impl std::error::Error for Error {}
