//! The one error type of the backend crate: every variant carries what a log line needs.

use std::fmt;
use std::path::PathBuf;

/// Everything a backend can refuse or fail at.
#[derive(Debug)]
pub enum Error {
    /// The operating system failed the operation (`op` is "read", "write", "discard", ...).
    Io {
        /// The operation that failed.
        op: &'static str,
        /// First slot of the request.
        offset: u64,
        /// What the system said.
        source: std::io::Error,
    },
    /// A read returned data whose crc32c does not match the one recorded at write time.
    Checksum {
        /// The slot whose data is wrong.
        offset: u64,
        /// crc32c recorded when the slot was written.
        expected: u32,
        /// crc32c of what was read.
        got: u32,
    },
    /// A page read back does not authenticate under the crypt layer's key: tampered, torn,
    /// stale, or another slot's.
    Authentication {
        /// The slot whose data failed.
        offset: u64,
    },
    /// A remote tier could not serve the request: no server returned a good copy of the
    /// page (read), or none took it in time (write).
    Unavailable {
        /// The tier ("far tier (memcached)").
        tier: &'static str,
        /// The operation.
        op: &'static str,
        /// The slot.
        offset: u64,
        /// What was tried and what each server said.
        why: String,
    },
    /// A request reaches past the end of the backend (or is empty).
    OutOfRange {
        /// First slot of the request.
        offset: u64,
        /// Number of slots asked for.
        nr: u64,
        /// Slots the backend holds.
        nr_pages: u64,
    },
    /// A buffer that is not a whole number of pages.
    NotPageSized {
        /// Its length.
        len_bytes: usize,
    },
    /// Setup: the swap file path exists already (it is never overwritten).
    Exists {
        /// The path.
        path: PathBuf,
    },
    /// Setup: the file system has less free space than the swap file needs.
    NoSpace {
        /// Where the file would go.
        path: PathBuf,
        /// Size asked for.
        needed_bytes: u64,
        /// Free space (statvfs `f_bavail * f_frsize`).
        available_bytes: u64,
    },
    /// Setup: a size that is not a positive whole number of pages.
    BadSize {
        /// Size asked for.
        size_bytes: u64,
    },
    /// Setup: creating, sizing or unlinking the file failed (permissions, missing
    /// directory, ...).
    Setup {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A fault injected on purpose by [`crate::FaultBackend`].
    Injected {
        /// The operation that was failed.
        op: &'static str,
        /// First slot of the request.
        offset: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, offset, source } => write!(f, "{op} at slot {offset}: {source}"),
            Error::Checksum { offset, expected, got } => write!(
                f,
                "checksum mismatch at slot {offset}: expected {expected:#010x}, got {got:#010x}"
            ),
            Error::Authentication { offset } => {
                write!(f, "page at slot {offset} failed to authenticate (AES-GCM)")
            }
            Error::Unavailable { tier, op, offset, why } => {
                write!(f, "{tier}: {op} of slot {offset} failed: {why}")
            }
            Error::OutOfRange { offset, nr, nr_pages } => {
                write!(f, "slots {offset}..+{nr} outside a backend of {nr_pages} slots")
            }
            Error::NotPageSized { len_bytes } => {
                write!(f, "buffer of {len_bytes} bytes is not a whole number of pages")
            }
            Error::Exists { path } => {
                write!(f, "swap file {} exists already (refusing to overwrite)", path.display())
            }
            Error::NoSpace { path, needed_bytes, available_bytes } => write!(
                f,
                "not enough disk space for {}: need {needed_bytes} bytes, {available_bytes} free",
                path.display()
            ),
            Error::BadSize { size_bytes } => {
                write!(f, "swap size {size_bytes} bytes is not a positive number of pages")
            }
            Error::Setup { what, path, source } => {
                write!(f, "cannot {what} swap file {}: {source}", path.display())
            }
            Error::Injected { op, offset } => write!(f, "injected {op} fault at slot {offset}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::Setup { source, .. } => Some(source),
            _ => None,
        }
    }
}
