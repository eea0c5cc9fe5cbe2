//! The index: one XArray per 64 MiB of swap space, each behind its own lock, as the kernel
//! splits its zswap index (`ZSWAP_ADDRESS_SPACE_SHIFT = 14`: 16384 slots a tree), so
//! stores and loads of distant slots never meet on one lock.
//!
//! ```text
//!   swap offset:   [ tree number (offset >> 14) | index in the tree (offset & 16383) ]
//!   trees:         [Mutex<Tree> 0][Mutex<Tree> 1] ... one per 16384 slots of the device
//!   Tree:          XArray of pool handles (value entries: `entry`) keyed by the index in
//!                  the tree (3 levels)
//! ```
//!
//! Keys are the offset within the tree, not the whole offset, so a tree is at most three
//! levels of 64-slot nodes deep whatever the device size.
//!
//! Accounting: each tree remembers the bytes its XArray held at its last change
//! (`accounted_bytes`); every change under the lock moves the pool-wide metadata total by
//! the difference, so with every tree locked the total is exact.

use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use xarray::{NoItems, XArray};

/// log2 of the slots one tree covers (the kernel's `ZSWAP_ADDRESS_SPACE_SHIFT`).
pub const TREE_SHIFT: u32 = 14;

/// Slots one tree covers: 16384 (64 MiB of 4 KiB pages).
pub const TREE_SLOTS: u64 = 1 << TREE_SHIFT;

/// One tree's state. Lock: the tree's mutex.
pub(crate) struct Tree {
    pub(crate) xa: XArray<NoItems>,
    /// What `xa.memory_bytes()` was at the last sync.
    accounted_bytes: u64,
}

/// A tree and its lock, on its own cache line so neighbouring trees' locks do not share
/// one.
#[repr(align(64))]
pub(crate) struct TreeLock(pub(crate) Mutex<Tree>);

/// Every tree of one device.
pub(crate) struct Trees {
    trees: Box<[TreeLock]>,
    /// Sum over the trees of their accounted XArray bytes.
    pub(crate) bytes: AtomicU64,
}

impl Trees {
    /// Trees for `nr_slots` slots (`nr_slots / 16384` rounded up). Allocates the table
    /// (64 bytes per tree); no XArray node until the first store.
    pub(crate) fn new(nr_slots: u64) -> Self {
        let count = nr_slots.div_ceil(TREE_SLOTS) as usize;
        let trees: Box<[TreeLock]> = (0..count)
            .map(|_| TreeLock(Mutex::new(Tree { xa: XArray::new(), accounted_bytes: 0 })))
            .collect();
        let bytes = trees.iter().map(|t| t.0.lock().sync_bytes()).sum();
        Trees { trees, bytes: AtomicU64::new(bytes) }
    }

    /// Bytes of the tree table itself.
    pub(crate) fn table_bytes(&self) -> u64 {
        (self.trees.len() * std::mem::size_of::<TreeLock>()) as u64
    }

    /// The tree holding `offset` and the key within it.
    ///
    /// # Panics
    /// If `offset` is beyond the device the pool was made for (a caller bug).
    pub(crate) fn locate(&self, offset: u64) -> (&Mutex<Tree>, u64) {
        let tree = self.trees.get((offset >> TREE_SHIFT) as usize);
        let tree = tree.unwrap_or_else(|| panic!("swap offset {offset} beyond the device"));
        (&tree.0, offset & (TREE_SLOTS - 1))
    }

    /// Locks the tree holding `offset`; returns the guard and the key.
    ///
    /// Context: takes that tree's lock (may block on it).
    pub(crate) fn lock(&self, offset: u64) -> (MutexGuard<'_, Tree>, u64) {
        let (tree, key) = self.locate(offset);
        (tree.lock(), key)
    }

    /// Every tree locked, in ascending order (for the invariant check).
    pub(crate) fn lock_all(&self) -> Vec<MutexGuard<'_, Tree>> {
        self.trees.iter().map(|t| t.0.lock()).collect()
    }

    /// Brings the metadata total in step with `tree` after a change. Caller holds its lock.
    pub(crate) fn sync(&self, tree: &mut Tree) {
        let before = tree.accounted_bytes;
        let now = tree.sync_bytes();
        if now >= before {
            self.bytes.fetch_add(now - before, Relaxed);
        } else {
            self.bytes.fetch_sub(before - now, Relaxed);
        }
    }
}

impl Tree {
    /// Records and returns the XArray's bytes now.
    fn sync_bytes(&mut self) -> u64 {
        self.accounted_bytes = self.xa.memory_bytes() as u64;
        self.accounted_bytes
    }

    /// The bytes last recorded (for the invariant check).
    pub(crate) fn accounted_bytes(&self) -> u64 {
        self.accounted_bytes
    }
}
