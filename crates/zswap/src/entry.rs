//! One stored page: the pool object's handle and length, the swap entry it belongs to, its
//! referenced bit and its LRU node.
//!
//! An entry is shared by two owners, the index (its tree) and the LRU, through an `Arc`:
//! the LRU may hand a writeback candidate out of its lock without the entry being freed
//! under it, and the tree's re-check compares the candidate with what the tree holds by
//! pointer identity. Identity is exact here: the candidate's `Arc` keeps its address alive,
//! so no other entry can appear at that address while the comparison matters (no ABA).
//!
//! Fields are written once, before the entry is published in the tree, except:
//! - `referenced`: set by loads (tree lock held), cleared by writeback (LRU lock held);
//!   a relaxed atomic, since it is a hint;
//! - `lru`: the node id, written by [`crate::lru::Lru::push_head`] and read only under the
//!   LRU lock.

use crate::lru::{NodeId, NIL};
use slots::SwapEntry;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use zpool::{Handle, ObjHint};

/// A stored page.
#[derive(Debug)]
pub(crate) struct ZswapEntry {
    /// The slot this page belongs to.
    pub(crate) swpentry: SwapEntry,
    /// The pool object.
    pub(crate) handle: Handle,
    /// Object length: compressed bytes, or 4096 for a page stored raw.
    pub(crate) length: u32,
    /// Where the object lay when stored: prefetched by a load before it walks the handle.
    pub(crate) hint: ObjHint,
    /// Used since the LRU last looked at it: spared once by writeback.
    referenced: AtomicBool,
    /// The LRU node holding it (LRU lock).
    lru: AtomicU32,
}

impl ZswapEntry {
    pub(crate) fn new(swpentry: SwapEntry, handle: Handle, length: u32, hint: ObjHint) -> Self {
        ZswapEntry {
            swpentry,
            handle,
            length,
            hint,
            // The kernel sets it at store: a new entry survives one LRU pass.
            referenced: AtomicBool::new(true),
            lru: AtomicU32::new(NIL),
        }
    }

    /// Stored raw (the object is the page itself).
    pub(crate) fn is_raw(&self) -> bool {
        self.length as usize == crate::compress::PAGE_SIZE
    }

    pub(crate) fn is_referenced(&self) -> bool {
        self.referenced.load(Relaxed)
    }

    pub(crate) fn mark_referenced(&self) {
        self.referenced.store(true, Relaxed);
    }

    /// Clears the bit; returns whether it was set.
    pub(crate) fn test_and_clear_referenced(&self) -> bool {
        self.referenced.swap(false, Relaxed)
    }

    pub(crate) fn lru(&self) -> NodeId {
        self.lru.load(Relaxed)
    }

    pub(crate) fn set_lru(&self, id: NodeId) {
        self.lru.store(id, Relaxed);
    }
}

/// What one entry costs beyond its pool object: the `Arc` allocation (two counts and the
/// entry). The LRU node is counted with its chunk, the index slot with the tree's nodes.
pub(crate) const ENTRY_BYTES: u64 =
    (2 * std::mem::size_of::<usize>() + std::mem::size_of::<ZswapEntry>()) as u64;
