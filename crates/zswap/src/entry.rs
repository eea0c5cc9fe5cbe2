//! One stored page, as the paths pass it around: its slot and its pool object.
//!
//! Nothing is allocated per page beside the object: the index (`tree`) holds the object's
//! handle as a value entry at the slot's key, the LRU (`lru`) links the slot in a table
//! indexed by slot, and everything else an entry needs is found from those two:
//!
//! ```text
//!   tree (XArray, value entries):  key ─► handle (generation | class | handle slot)
//!   lru (links by slot):           slot ─► prev slot, next slot, referenced bit
//!   the object's length:           the pool's (its handle slot records it)
//!   stored raw:                    the handle's class is the pool's huge class
//!   the swap type:                 the pool's, one device's (`Zswap::swap_type`)
//! ```
//!
//! Why no node per entry: the budget charges this metadata like the rest of the engine's
//! bookkeeping, and every byte of it is a byte of program pages the budget does not hold.
//! An entry costs the index's 8-byte slot and its nodes' share, and 8 bytes of links:
//! 17.3 bytes when the slots are dense, 26.5 in the 1 GiB Zipf run, whose random page-ins
//! leave them sparse (docs/benchmarks.md, `uswap bench compare`). A node of 40 bytes with
//! the handle, the length, the links and a prefetch hint would cost 49-51 bytes an entry.
//! So a load walks handle slot, zspage and object one after the other, with no hint.
//!
//! Identity: a handle carries a generation that changes whenever its handle slot is
//! reused, so an entry erased and replaced at the same key (even by an object in the same
//! handle slot) never passes for the one a writeback read.

use slots::SwapEntry;
use zpool::Handle;

/// An entry's data, read from the index under its tree lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntryData {
    /// The slot this page belongs to.
    pub(crate) swpentry: SwapEntry,
    /// The pool object.
    pub(crate) handle: Handle,
    /// Stored raw (the object is the page itself, in the pool's huge class).
    pub(crate) raw: bool,
}
