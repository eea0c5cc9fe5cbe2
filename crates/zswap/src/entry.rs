//! One stored page: the pool object's handle and length, the swap entry it belongs to, its
//! referenced bit, and its LRU links, in one 40-byte node of the LRU's slab (`lru`).
//!
//! The kernel's `zswap_entry` is a slab object of its own, linked into the LRU through an
//! embedded list head and pointed at by the tree. Here the node *is* the entry: the tree
//! holds the node's number as a value entry, and nothing else is allocated per page (the
//! first design, an `Arc` per entry shared by the tree and the LRU, cost 80 bytes of heap
//! beside a 16-byte node: 91-93 bytes per stored page with the index, against about 49
//! now).
//!
//! ```text
//!   tree (XArray, value entries):  key ─► node number
//!   node: prev | next | length, referenced bit, swap type | offset | handle | hint
//! ```
//!
//! Who writes what (every field is an atomic, read and written `Relaxed`; the locks order
//! them):
//! - `prev`, `next`: the LRU lock (linked nodes and the free list alike).
//! - the entry's data (`handle`, `hint`, `offset`, length and swap type): written once by
//!   the store that took the node off the free list, before it publishes the node number
//!   in the tree under the tree lock. Whoever finds the number in the tree under that lock
//!   therefore reads the data the store wrote; a node leaves the tree only under the same
//!   lock, so the data cannot change under a holder of it.
//! - the referenced bit: set by loads (tree lock), cleared by writeback (LRU lock); a
//!   hint, so a single atomic bit operation on the shared word.
//!
//! A writeback candidate leaves the LRU lock as a copy ([`EntryData`]) and is checked
//! again under the tree lock: the tree still names the same node, and the node still holds
//! the same pool handle. A handle carries a generation that changes whenever its slot is
//! reused, so an entry erased and replaced meanwhile (even in the same node, at the same
//! key) never passes for the candidate.

use slots::SwapEntry;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use zpool::{Handle, ObjHint};

/// `meta` bits 0..13: the object's length (1..=4096).
const LENGTH_MASK: u32 = (1 << 13) - 1;
/// `meta` bit 13: used since the LRU last looked at the entry.
const REFERENCED: u32 = 1 << 13;
/// `meta` bits 16..21: the swap type of the entry.
const TYPE_SHIFT: u32 = 16;

const _: () = assert!(crate::compress::PAGE_SIZE as u32 <= LENGTH_MASK);
const _: () = assert!(slots::SWP_TYPE_BITS + TYPE_SHIFT <= 32);
const _: () = assert!(slots::MAX_SLOTS <= 1 << 32, "an offset fits the node's 32 bits");

/// An entry's data, copied out of its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntryData {
    /// The slot this page belongs to.
    pub(crate) swpentry: SwapEntry,
    /// The pool object.
    pub(crate) handle: Handle,
    /// Object length: compressed bytes, or 4096 for a page stored raw.
    pub(crate) length: u32,
    /// Where the object lay when stored: prefetched by a load before it walks the handle.
    pub(crate) hint: ObjHint,
}

impl EntryData {
    /// Stored raw (the object is the page itself).
    pub(crate) fn is_raw(&self) -> bool {
        self.length as usize == crate::compress::PAGE_SIZE
    }
}

/// A node of the LRU's slab: an entry and its links, or a free node (`handle` 0).
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) prev: AtomicU32,
    pub(crate) next: AtomicU32,
    /// Length, referenced bit and swap type (the bit layout above).
    meta: AtomicU32,
    offset: AtomicU32,
    /// The raw handle; 0 while the node is free.
    handle: AtomicU64,
    hint: [AtomicU64; 2],
}

const _: () = assert!(std::mem::size_of::<Node>() == 40, "a node is 40 bytes");

impl Node {
    /// A free node.
    pub(crate) fn free() -> Node {
        Node {
            prev: AtomicU32::new(crate::lru::NIL),
            next: AtomicU32::new(crate::lru::NIL),
            meta: AtomicU32::new(0),
            offset: AtomicU32::new(0),
            handle: AtomicU64::new(0),
            hint: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Writes an entry's data into a node its caller took off the free list. The
    /// referenced bit starts set, as the kernel's does at store: a new entry survives one
    /// LRU pass.
    pub(crate) fn fill(&self, data: &EntryData) {
        debug_assert!(data.length >= 1 && data.length <= LENGTH_MASK);
        let ty = u32::from(data.swpentry.swap_type().get());
        self.meta.store(data.length | REFERENCED | ty << TYPE_SHIFT, Relaxed);
        let offset = u32::try_from(data.swpentry.offset()).expect("offset below MAX_SLOTS");
        self.offset.store(offset, Relaxed);
        let [low, high] = data.hint.to_raw();
        self.hint[0].store(low, Relaxed);
        self.hint[1].store(high, Relaxed);
        self.handle.store(data.handle.to_raw(), Relaxed);
    }

    /// Marks the node free (its entry was erased).
    pub(crate) fn clear(&self) {
        self.handle.store(0, Relaxed);
        self.meta.store(0, Relaxed);
    }

    /// Whether the node holds an entry.
    pub(crate) fn is_used(&self) -> bool {
        self.handle.load(Relaxed) != 0
    }

    /// The entry's data. The caller holds the tree lock of a tree naming this node, or the
    /// LRU lock with the node linked.
    ///
    /// # Panics
    /// If the node is free (a caller bug).
    pub(crate) fn data(&self) -> EntryData {
        let hint = ObjHint::from_raw([self.hint[0].load(Relaxed), self.hint[1].load(Relaxed)]);
        EntryData {
            swpentry: self.swpentry(),
            handle: self.handle(),
            length: self.meta.load(Relaxed) & LENGTH_MASK,
            hint,
        }
    }

    /// The slot the entry belongs to (as [`Node::data`]).
    pub(crate) fn swpentry(&self) -> SwapEntry {
        let meta = self.meta.load(Relaxed);
        let ty = slots::SwapType::new((meta >> TYPE_SHIFT) as u8).expect("a stored swap type");
        SwapEntry::new(ty, u64::from(self.offset.load(Relaxed)))
    }

    /// The entry's pool handle.
    ///
    /// # Panics
    /// If the node is free (a caller bug).
    pub(crate) fn handle(&self) -> Handle {
        let raw = self.handle.load(Relaxed);
        Handle::from_raw(raw).unwrap_or_else(|| panic!("LRU node read while free ({raw:#x})"))
    }

    pub(crate) fn is_referenced(&self) -> bool {
        self.meta.load(Relaxed) & REFERENCED != 0
    }

    pub(crate) fn mark_referenced(&self) {
        if !self.is_referenced() {
            self.meta.fetch_or(REFERENCED, Relaxed);
        }
    }

    /// Clears the bit; returns whether it was set.
    pub(crate) fn test_and_clear_referenced(&self) -> bool {
        self.meta.fetch_and(!REFERENCED, Relaxed) & REFERENCED != 0
    }
}
