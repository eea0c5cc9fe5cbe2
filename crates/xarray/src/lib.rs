//! A radix tree of 64-slot nodes keyed by `u64`, after the kernel's `lib/xarray.c`.
//!
//! The swap cache, the region page tables and the zswap index of uswap all map a page index
//! (a swap offset, a page number) to either an owned item (a folio, a pool entry) or a small
//! integer (a shadow, a swap entry). The XArray does this with one machine word per slot, in
//! nodes of 64 slots, walked 6 index bits per level:
//!
//! ```text
//!   head -> node shift 12 ---- slot 0 -> node shift 6 ---- slot 0 -> leaf shift 0: 64 entries
//!                         \                            \-- slot 8..15: one order-9 entry
//!                          \-- slot 1: order-12 entry        (canonical + 7 siblings)
//! ```
//!
//! What it offers (the kernel's words in brackets):
//! - load, store, insert, erase, compare-and-exchange (`xa_load`, `xa_store`, `xa_insert`,
//!   `xa_erase`, `xa_cmpxchg`) on value entries and owned items ([`Entry`], [`EntryRef`]);
//! - **multi-index entries**: one entry of order `o` covering `2^o` aligned indices, stored as
//!   one canonical slot plus siblings at the level where it fits (`XA_STATE_ORDER`);
//!   [`XArray::get_order`], [`XArray::split`] (`xa_get_order`, `xas_split`);
//! - a [`Cursor`] (`xa_state`) for the one-walk folio add of the swap cache;
//! - three [`Mark`]s per entry, searched through per-node bitmaps (`xa_find_marked`);
//! - iteration over a range, an entry count, and memory accounting
//!   ([`XArray::node_count`], [`XArray::memory_bytes`]);
//! - [`XArray::check_invariants`], called after every operation by the tests.
//!
//! # Semantics
//!
//! - A multi-index entry counts once in [`XArray::len`], and iteration yields it once, with
//!   its first index and order.
//! - Storing over a range replaces every entry inside it (each is handed back to the caller;
//!   see [`XArray::store_order_with`]). Storing where a *larger* entry covers part of the
//!   range is refused with [`Error::Covered`] and changes nothing: split first (the kernel
//!   requires the same).
//! - Erasing any index of a multi-index entry erases the whole entry (the kernel: "storing
//!   NULL into any index of a multi-index entry ... dissolves the tie").
//! - Replacing an entry keeps its marks; a store over several entries keeps the union of
//!   their marks (the kernel's `xas_squash_marks`); a split copies the marks to every piece;
//!   erase clears them.
//! - Bad input (misaligned range, order above 63, a split to a larger order, a value above
//!   2^63 - 1) is an error value, never a panic, and leaves the tree unchanged.
//!
//! # Concurrency
//!
//! Reads take `&self`, writes `&mut self`: the caller wraps the array in its own lock (the
//! kernel's `xa_lock`), exactly like the kernel's `__xa_*` functions that "assume xa_lock
//! held on entry". The array is `Send`/`Sync` when its owner type is, and a reader can never
//! see a torn state because the borrow checker forbids reading during a write. Lock-free
//! readers (the kernel's RCU walk) are not provided.
//!
//! # Memory
//!
//! A node is 544 bytes: 64 slots of 8 bytes and a 32-byte header. A full leaf holds 64
//! entries, so a dense array costs ~8.6 bytes per entry plus the arena's id table (8 bytes per
//! node). Empty nodes are freed on erase and the tree height shrinks when it can, like the
//! kernel's `xas_delete_node` / `xas_shrink`.
//!
//! # Errors, panics, allocation
//!
//! Operating conditions are values: every refusal is an [`Error`] (a [`Refused`] carrying
//! the caller's entry back for stores), counted in [`Stats`]. A panic means a broken
//! invariant — a bug in this crate — never bad input. Stores allocate at most one node per
//! level on their path (10); a split at most [`XArray::split_nodes_needed`] nodes, bounded
//! by [`MAX_SPLIT_ORDERS`]. A caller that must not allocate under its lock sizes a
//! [`NodeReserve`] first (`NodeReserve::for_split`), allocates it outside the lock, and
//! hands it over with [`XArray::refill`]; the split then takes its nodes from there.
//!
//! # Unsafe
//!
//! Two leaf modules allow `unsafe`: `entry` (the [`Owner`] pointer round trips and the
//! borrowed view of an item) and `node` (turning an owned slot word back into an owned
//! entry). Tree walks name nodes by arena id, so they need none. Every block carries a
//! `// SAFETY:` reason; `check_invariants` and the model test's live-item count check the
//! ownership the reasons rely on (each item dropped exactly once).
//!
//! Conventions in this crate: `xa` is an array, `xas` a cursor, `off` a slot offset inside a
//! node, `id` a node's name in the arena, `index` a key.

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod array;
mod check;
mod cursor;
mod entry;
mod error;
mod find;
mod node;
mod split;
mod tree;

pub use array::{Stats, XArray};
pub use cursor::Cursor;
pub use entry::{Entry, EntryRef, NoItem, NoItems, Owner, MAX_VALUE};
pub use error::{Error, Refused};
pub use find::Iter;
pub use node::NodeReserve;

/// The largest order of an entry: an order-63 entry covers half the key space.
pub const MAX_ORDER: u32 = 63;

/// A split may make at most `2^MAX_SPLIT_ORDERS` pieces of one entry (4096: two node levels,
/// at most 65 nodes per slot of the entry, ~35 KiB; a 2 MiB folio split to pages needs 8).
pub const MAX_SPLIT_ORDERS: u32 = 12;

/// One of the three marks every entry carries (the kernel's `XA_MARK_0..2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mark {
    /// The first mark.
    M0 = 0,
    /// The second mark.
    M1 = 1,
    /// The third mark.
    M2 = 2,
}

impl Mark {
    /// All marks, in order.
    pub const ALL: [Mark; 3] = [Mark::M0, Mark::M1, Mark::M2];

    pub(crate) fn bit(self) -> usize {
        self as usize
    }
}
