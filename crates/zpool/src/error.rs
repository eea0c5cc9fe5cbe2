//! The crate's one error type. Every variant is an operating condition the caller handles
//! (zswap rejects the page and writes it to the backend); bugs are assertions instead.

use std::fmt;

/// Why a pool operation failed. Each variant has its own counter in [`crate::Counters`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Memory for a new zspage could not be had: the system allocator refused, or the
    /// allocation-failure hook said so. Nothing was changed.
    AllocFail {
        /// The requested object size.
        size: usize,
        /// Pages the new zspage needed.
        pages: usize,
    },
    /// A new zspage would take the pool past its page limit. Nothing was changed.
    PoolFull {
        /// The requested object size.
        size: usize,
        /// The pool's limit, in pages.
        limit_pages: usize,
    },
    /// The requested size is 0 or larger than a page.
    InvalidSize {
        /// The requested size.
        size: usize,
    },
    /// A configuration value is out of range (at pool creation).
    InvalidConfig {
        /// The setting.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The largest accepted value.
        max: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::AllocFail { size, pages } => {
                write!(f, "could not allocate a {pages}-page zspage for a {size}-byte object")
            }
            Error::PoolFull { size, limit_pages } => {
                write!(f, "pool full ({limit_pages} pages) storing a {size}-byte object")
            }
            Error::InvalidSize { size } => write!(f, "object size {size} is not in 1..=4096"),
            Error::InvalidConfig { what, value, max } => {
                write!(f, "pool setting {what} = {value} is out of range (at most {max})")
            }
        }
    }
}

impl std::error::Error for Error {}
