//! [`Zswap::check_invariants`]: everything that must hold between the index, the LRU, the
//! pool allocator and the counters, checked with every lock held.
//!
//! - Each tree is a valid XArray whose recorded size matches its nodes; it holds only
//!   order-0 value entries, pool handles.
//! - The LRU links exactly the slots the trees hold entries for, each once.
//! - Every entry's object is live in the allocator; it is in the huge class exactly when
//!   it is a page stored raw (4096 bytes); the allocator
//!   holds exactly one object per entry (checked when no store or erase is in flight,
//!   which is always the case between the operations of a single-threaded test) and its
//!   own invariants hold.
//! - `stored_pages` and `stored_incompressible_pages` count the entries and the raw ones;
//!   the metadata total equals the sum of its parts.

use crate::lru::Slot;
use crate::tree::TREE_SHIFT;
use crate::zswap::{into_handle_ref, Zswap};
use std::sync::atomic::Ordering::Relaxed;

impl Zswap {
    /// Asserts every invariant of the pool (module essay).
    ///
    /// # Panics
    /// On any broken invariant (a bug).
    ///
    /// Context: takes every tree lock in ascending order, then the LRU lock, then every
    /// class lock of the allocator; holds them all. May run concurrently with other
    /// operations (they wait).
    pub fn check_invariants(&self) {
        let trees = self.trees.lock_all();
        let list = self.lru.list.lock();
        let mut linked = self.lru.check(&list);
        linked.sort_unstable();
        let mut stored = Vec::with_capacity(linked.len());
        let (mut raw, mut tree_bytes) = (0u64, 0u64);
        for (number, tree) in trees.iter().enumerate() {
            tree.xa.check_invariants();
            let bytes = tree.xa.memory_bytes() as u64;
            assert_eq!(tree.accounted_bytes(), bytes, "tree {number}: bytes not synced");
            tree_bytes += bytes;
            for (key, order, entry) in tree.xa.iter() {
                assert_eq!(order, 0, "tree {number} key {key}: multi-index entry");
                assert!(entry.value().is_some(), "tree {number}: item entry");
                let handle = into_handle_ref(entry);
                let offset = ((number as u64) << TREE_SHIFT) | key;
                assert!(offset < self.nr_slots(), "entry beyond the device");
                let size = self.pool.object_size(handle);
                assert!(size > 0 && size <= crate::compress::PAGE_SIZE, "offset {offset}: size");
                let is_raw = size == crate::compress::PAGE_SIZE;
                assert_eq!(
                    self.is_raw(handle),
                    is_raw,
                    "offset {offset}: raw, or in the huge class"
                );
                stored.push(Slot::try_from(offset).expect("offsets are below MAX_SLOTS"));
                raw += u64::from(is_raw);
            }
        }
        assert_eq!(stored, linked, "the LRU links exactly the slots the index holds");
        let entries = stored.len() as u64;
        assert_eq!(list.len(), entries, "LRU and index hold different counts");
        assert_eq!(self.counters.stored_pages.load(Relaxed), entries, "stored_pages");
        let incompressible = self.counters.stored_incompressible_pages.load(Relaxed);
        assert_eq!(incompressible, raw, "stored_incompressible_pages");
        assert_eq!(self.trees.bytes.load(Relaxed), tree_bytes, "index bytes");
        // The tree bytes hold still (every tree is locked); the LRU's chunk bytes may grow
        // beside the check (`LruList::settled_chunk_bytes`): compare once they have settled.
        let (meta, stats) = loop {
            let (chunk_bytes, _) = self.lru.settled_chunk_bytes();
            let stats = self.stats();
            if self.lru.chunk_bytes.load(Relaxed) == chunk_bytes {
                break (self.fixed_bytes() + tree_bytes + chunk_bytes, stats);
            }
        };
        assert_eq!(stats.metadata_bytes, meta, "metadata bytes");
        self.pool.check_invariants();
        // The allocator holds one object per entry, plus those of stores and erases in
        // flight. Exact when none was in flight while the objects were counted.
        let before = self.unowned_word();
        let objects = self.pool.stats().objects as u64;
        if before == self.unowned_word() && before & u64::from(u32::MAX) == 0 {
            assert_eq!(objects, entries, "pool objects (a leak, or a double owner)");
        }
    }
}
