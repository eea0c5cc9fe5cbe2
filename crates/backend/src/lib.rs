//! Backends: where a swap device's page data lives.
//!
//! A swap device (crate `slots`) hands out *slots*; a backend stores one page per slot. The
//! engine writes a folio's pages to the backend at the folio's first slot and reads them
//! back at swap-in; zswap writeback writes one page. When a whole cluster of slots becomes
//! free, the device *discards* it so the storage comes back (a file punches a hole).
//!
//! ```text
//!   slot:      0        1        2        3     ...   nr_pages-1
//!   bytes:  [header][ page ][ page ][ page ]  ...  [ page ]      offset * PAGE_SIZE
//! ```
//!
//! Offsets and counts here are in **slots** (pages), never bytes: `write(offset, data)`
//! writes `data.len() / PAGE_SIZE` pages starting at slot `offset`.
//!
//! Backends:
//! - [`MemoryBackend`]: synchronous, like brd / zram without compression: one lazily
//!   allocated page per slot, dropped on discard.
//! - [`FileBackend`]: a sparse file, created 0600 with `O_EXCL` and unlinked right after
//!   opening (unless asked to keep it), so nobody else can read swapped data; `pread` /
//!   `pwrite` (faster than `O_DIRECT`, and io_uring batches are no faster:
//!   docs/benchmarks.md); discard punches a hole (`fallocate(PUNCH_HOLE)`).
//! - [`ChecksumBackend`]: wraps any backend with a crc32c per slot, kept in memory and
//!   checked on every read: a mismatch is [`Error::Checksum`], never wrong data.
//! - [`CryptBackend`]: wraps any backend and seals every page with AES-256-GCM under a
//!   key made for the run, bound to its slot; a page that does not authenticate is
//!   [`Error::Authentication`], never data. Subsumes the checksum layer.
//! - [`FaultBackend`]: wraps any backend and fails, tears or loses chosen reads and writes,
//!   with counters, so the layers above can prove they lose nothing.
//! - [`OverlayBackend`]: a forked child's device over the one it inherited: its own
//!   writes go to a backend of its own, inherited slots are read from the parent's until
//!   the child writes them.
//!
//! A file may share a disk quota with other files ([`quota`]): the footprint of a whole
//! process tree's swap files bounded by one size.
//!
//! Invariants every backend keeps:
//! - a read returns the bytes of the last completed write of that slot, or an error; never
//!   other bytes (a slot never written, or discarded since, reads as zeros);
//! - an out-of-range or non-page-sized request is an error before any I/O;
//! - every error is returned and counted, never swallowed.

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod checksum;
mod crypt;
mod error;
mod fault;
mod file;
mod memory;
mod overlay;
pub mod quota;

pub use checksum::{ChecksumBackend, ChecksumStats};
pub use crypt::{CryptBackend, CryptStats, CHUNK_SLOTS, SEAL_BYTES};
pub use error::Error;
pub use fault::{FaultBackend, FaultKind, FaultPlan, FaultStats};
pub use file::{FileBackend, FileOptions, FileStats};
pub use memory::MemoryBackend;
pub use overlay::OverlayBackend;
pub use quota::{LocalQuota, SpaceQuota};

/// Bytes in one page, and so in one slot (x86-64 base page).
pub const PAGE_SIZE: usize = 4096;

/// Where a swap device's page data lives.
///
/// Offsets are slot numbers; buffers hold whole pages. Implementations are `Send + Sync`
/// and take their own locks: callers may read and write different slots from many
/// threads at once. Reading and writing the *same* slot at once is the caller's bug (the
/// swap cache serialises it); a backend then returns one of the two versions or an error.
pub trait Backend: Send + Sync {
    /// Writes `data.len() / PAGE_SIZE` whole pages starting at slot `offset` (contiguous
    /// slots).
    ///
    /// # Errors
    /// [`Error::NotPageSized`] if `data` is empty or not whole pages, [`Error::OutOfRange`]
    /// past the end, [`Error::Io`] (or [`Error::Injected`]) when the write failed: the
    /// slots' contents are then undefined until written again.
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error>;

    /// Reads `buf.len() / PAGE_SIZE` whole pages starting at slot `offset`.
    ///
    /// # Errors
    /// As [`Backend::write`], plus [`Error::Checksum`] from a checksumming wrapper and
    /// [`Error::Authentication`] from an encrypting one. On any
    /// error the contents of `buf` are unspecified and must not be used.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error>;

    /// The data of slots `offset .. offset + nr` is no longer needed (a file punches a
    /// hole, memory drops the pages). Later reads return zeros.
    ///
    /// # Errors
    /// [`Error::OutOfRange`]; [`Error::Io`] if the hole could not be punched (the data is
    /// then still there, which is harmless: freed slots are written before they are read).
    fn discard(&self, offset: u64, nr: u64) -> Result<(), Error>;

    /// True for memory-like backends (the engine frees the swap cache entry eagerly, as the
    /// kernel does for `SWP_SYNCHRONOUS_IO` devices).
    fn is_synchronous(&self) -> bool;

    /// Number of slots (pages) the backend holds.
    fn nr_pages(&self) -> u64;

    /// True while writes are refused for lack of space (a file backend created with
    /// `keep_free_bytes` on a disk nearly full): page-out should not try the device, whose
    /// every write would fail. Looked up afresh now and then while it says so.
    fn out_of_space(&self) -> bool {
        false
    }

    /// Hands `out` each of this backend's counters (and its inner backend's, for a
    /// wrapper) by name, for the stats file (`uswap stat`). Default: none.
    ///
    /// Context: reads atomics; may be called from any thread at any time.
    fn counters(&self, out: &mut dyn FnMut(&'static str, u64)) {
        let _ = out;
    }

    /// A step of a fork of the process ([`ForkStep`]); a wrapper passes it on to what it
    /// wraps. Default: nothing (a file's `pread` at an offset is safe on a descriptor the
    /// child shares with its parent).
    fn fork(&self, step: ForkStep) {
        let _ = step;
    }
}

/// The steps of a fork a backend hears of ([`Backend::fork`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkStep {
    /// Before the fork, once the engine writes to it no more (its reclaim paused): a
    /// backend with threads of its own brings them to rest, so that the child's copy holds
    /// no lock one of them held and the child's reads find every page where its copy says.
    /// Bounded in time.
    Prepare,
    /// After the fork, in the parent: what `Prepare` stopped goes on. (Also in the child,
    /// on its own device, where the inherited backend's copy stays as `Inherited` left it.)
    Resume,
    /// In a forked child, on its only thread: this is the backend it inherited, which it
    /// only reads from now on (the overlay's lower backend). Reads that need state of the
    /// parent's the child does not have (threads, connections shared with the parent) use
    /// the child's own from here, or fail, never touching the parent's.
    Inherited,
}

/// Checks a request against a backend of `nr_pages` slots; returns the number of pages.
///
/// # Errors
/// [`Error::NotPageSized`], [`Error::OutOfRange`].
pub fn check_request(offset: u64, len_bytes: usize, nr_pages: u64) -> Result<u64, Error> {
    if len_bytes == 0 || !len_bytes.is_multiple_of(PAGE_SIZE) {
        return Err(Error::NotPageSized { len_bytes });
    }
    let nr = (len_bytes / PAGE_SIZE) as u64;
    check_range(offset, nr, nr_pages)?;
    Ok(nr)
}

/// Checks that slots `offset .. offset + nr` lie inside a backend of `nr_pages` slots.
///
/// # Errors
/// [`Error::OutOfRange`].
pub fn check_range(offset: u64, nr: u64, nr_pages: u64) -> Result<(), Error> {
    match offset.checked_add(nr) {
        Some(end) if nr > 0 && end <= nr_pages => Ok(()),
        _ => Err(Error::OutOfRange { offset, nr, nr_pages }),
    }
}
