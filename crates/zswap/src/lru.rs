//! The pool's entries and its LRU, in one slab: a doubly linked list of entries, newest at
//! the head, coldest at the tail, with a referenced bit per entry for a second chance
//! (reference/kernel-swap.md §4.4). Writeback takes entries from the tail.
//!
//! The kernel links its `zswap_entry`s intrusively. Here each entry *is* a node of a slab
//! (`entry::Node`: the entry's data and its links), named by a `u32` [`NodeId`], in
//! chunks of [`LRU_CHUNK_NODES`]; the index stores node numbers:
//!
//! ```text
//!   chunks: [chunk 0: node 0 .. 1023][chunk 1: node 1024 .. 2047] ...   (never freed)
//!   head ⇄ ... ⇄ tail          linked nodes: entries
//!   free ─► n ─► n ─► NIL      free nodes (through `next`), handle 0
//! ```
//!
//! The chunk table is fixed at setup (one slot per 1024 device slots plus
//! [`SPARE_CHUNKS`]), each slot set once, so a node is found without any lock: a holder of
//! a tree lock reads the entry a tree names while the LRU lock is elsewhere. Links change
//! only under the LRU lock.
//!
//! A store takes a node off the free list ([`LruList::alloc`]) and fills it before it
//! publishes it in a tree; a chunk is allocated with no lock held when none is free, then
//! added under the lock. Chunks are kept at their high-water mark (and counted in the
//! pool's bytes): 40 bytes per entry the pool ever held at once, 2% of the pool limit for
//! objects of ~2 KiB, and never more than one node per device slot plus the spare chunks.
//!
//! Invariants (checked by [`LruList::check`]): the list from head to tail visits `len`
//! linked nodes, each holding an entry; the free list holds `free_len` free nodes; the
//! nodes taken by stores not yet linked (`taken`) make up the rest of the chunks.

use crate::entry::{EntryData, Node};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// A node of the slab.
pub(crate) type NodeId = u32;

/// No node (end of a list).
pub(crate) const NIL: NodeId = NodeId::MAX;

/// Nodes per chunk: 1024 nodes of 40 bytes, 40 KiB a chunk.
pub(crate) const LRU_CHUNK_NODES: usize = 1024;

/// Chunks beyond one node per device slot: a store over a slot that already has an entry
/// holds a second node for a moment, so up to `SPARE_CHUNKS * 1024` such stores may be
/// in flight at once.
pub(crate) const SPARE_CHUNKS: usize = 4;

type Chunk = Box<[Node]>;

/// Bytes one chunk holds.
pub(crate) const CHUNK_BYTES: usize = LRU_CHUNK_NODES * std::mem::size_of::<Node>();

/// The list's links and counts. Every field is guarded by the mutex in [`LruList`].
pub(crate) struct Lru {
    /// Chunks added so far (a prefix of the table).
    nr_chunks: usize,
    free: NodeId,
    free_len: u64,
    /// The newest entry.
    head: NodeId,
    /// The coldest entry.
    tail: NodeId,
    len: u64,
}

/// The slab, the LRU lock and the counts.
pub(crate) struct LruList {
    /// The chunk table: fixed length, each slot set once (under the LRU lock), read
    /// without it.
    chunks: Box<[OnceLock<Chunk>]>,
    /// Lock order: after a tree lock, before a zpool class lock (crate essay).
    pub(crate) list: Mutex<Lru>,
    /// Nodes taken off the free list and not yet linked (stores in flight).
    taken: AtomicU64,
    /// Bytes of the chunks allocated (for the pool's accounting).
    pub(crate) chunk_bytes: AtomicU64,
}

/// Why a node could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LruFull;

impl LruList {
    /// An empty list with a chunk table for `nr_slots` nodes plus the spare chunks.
    /// Allocates only that table (16 bytes per 1024 slots).
    pub(crate) fn new(nr_slots: u64) -> Self {
        let chunks = (nr_slots as usize).div_ceil(LRU_CHUNK_NODES) + SPARE_CHUNKS;
        LruList {
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
            list: Mutex::new(Lru {
                nr_chunks: 0,
                free: NIL,
                free_len: 0,
                head: NIL,
                tail: NIL,
                len: 0,
            }),
            taken: AtomicU64::new(0),
            chunk_bytes: AtomicU64::new(0),
        }
    }

    /// Bytes of the chunk table itself.
    pub(crate) fn table_bytes(&self) -> usize {
        self.chunks.len() * std::mem::size_of::<OnceLock<Chunk>>()
    }

    /// Node `id`, found without a lock.
    ///
    /// # Panics
    /// If `id` is beyond the chunks added (a caller bug).
    pub(crate) fn node(&self, id: NodeId) -> &Node {
        let chunk = self.chunks[id as usize / LRU_CHUNK_NODES].get();
        let chunk = chunk.unwrap_or_else(|| panic!("LRU node {id} of a chunk never added"));
        &chunk[id as usize % LRU_CHUNK_NODES]
    }

    /// Takes a free node, fills it with `data` and returns it, for a store to publish in
    /// a tree and then link with [`LruList::push_head`] (or give back with
    /// [`LruList::cancel`]).
    ///
    /// # Errors
    /// [`LruFull`] if the chunk table is full (more stores in flight than
    /// [`SPARE_CHUNKS`] allows: the store is refused).
    ///
    /// Context: takes the LRU lock; allocates a chunk (40 KiB) with no lock held when no
    /// node is free. Must not be called with a tree lock held.
    pub(crate) fn alloc(&self, data: &EntryData) -> Result<NodeId, LruFull> {
        let id = match self.pop_free() {
            Some(id) => id,
            None => {
                let chunk: Chunk = (0..LRU_CHUNK_NODES).map(|_| Node::free()).collect();
                let mut list = self.list.lock();
                if list.nr_chunks == self.chunks.len() {
                    return Err(LruFull);
                }
                // Added even if another store added one meanwhile: its nodes stay free.
                let number = list.nr_chunks;
                if self.chunks[number].set(chunk).is_err() {
                    unreachable!("chunk {number} set twice under the LRU lock");
                }
                list.nr_chunks += 1;
                self.chunk_bytes.fetch_add(CHUNK_BYTES as u64, Relaxed);
                let base = (number * LRU_CHUNK_NODES) as NodeId;
                for id in (base..base + LRU_CHUNK_NODES as NodeId).rev() {
                    self.push_free(&mut list, id);
                }
                self.take(&mut list)
            }
        };
        self.node(id).fill(data);
        Ok(id)
    }

    fn pop_free(&self) -> Option<NodeId> {
        let mut list = self.list.lock();
        (list.free != NIL).then(|| self.take(&mut list))
    }

    /// Takes the first free node (there is one).
    fn take(&self, list: &mut Lru) -> NodeId {
        let id = list.free;
        list.free = self.node(id).next.load(Relaxed);
        list.free_len -= 1;
        self.taken.fetch_add(1, Relaxed);
        id
    }

    fn push_free(&self, list: &mut Lru, id: NodeId) {
        let node = self.node(id);
        node.clear();
        node.prev.store(NIL, Relaxed);
        node.next.store(list.free, Relaxed);
        list.free = id;
        list.free_len += 1;
    }

    /// Gives back a node [`LruList::alloc`] returned that will not be linked.
    ///
    /// Context: takes the LRU lock.
    pub(crate) fn cancel(&self, id: NodeId) {
        let mut list = self.list.lock();
        self.push_free(&mut list, id);
        self.taken.fetch_sub(1, Relaxed);
    }

    /// Links taken node `id` at the head (newest end). `list` is this list's locked state.
    pub(crate) fn push_head(&self, list: &mut Lru, id: NodeId) {
        self.link_head(list, id);
        list.len += 1;
        self.taken.fetch_sub(1, Relaxed);
    }

    /// Unlinks node `id` and frees it. `list` is this list's locked state.
    ///
    /// # Panics
    /// If the node holds no entry (a bug).
    pub(crate) fn remove(&self, list: &mut Lru, id: NodeId) {
        assert!(self.node(id).is_used(), "LRU node {id} is free");
        self.unlink(list, id);
        self.push_free(list, id);
        list.len -= 1;
    }

    fn link_head(&self, list: &mut Lru, id: NodeId) {
        let old_head = list.head;
        let node = self.node(id);
        node.prev.store(NIL, Relaxed);
        node.next.store(old_head, Relaxed);
        if old_head == NIL {
            list.tail = id;
        } else {
            self.node(old_head).prev.store(id, Relaxed);
        }
        list.head = id;
    }

    fn unlink(&self, list: &mut Lru, id: NodeId) {
        let node = self.node(id);
        let (prev, next) = (node.prev.load(Relaxed), node.next.load(Relaxed));
        if prev == NIL {
            list.head = next;
        } else {
            self.node(prev).next.store(next, Relaxed);
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.node(next).prev.store(prev, Relaxed);
        }
    }

    /// The coldest entry's node, if any.
    pub(crate) fn tail(&self, list: &Lru) -> Option<NodeId> {
        (list.tail != NIL).then_some(list.tail)
    }

    /// Moves the coldest entry to the head (a second chance, or a writeback candidate
    /// rotated before the lock is dropped, as the kernel does).
    pub(crate) fn rotate_tail(&self, list: &mut Lru) {
        let id = list.tail;
        if id != NIL && id != list.head {
            self.unlink(list, id);
            self.link_head(list, id);
        }
    }

    /// The linked nodes from head (newest) to tail (coldest).
    pub(crate) fn iter<'a>(&'a self, list: &'a Lru) -> impl Iterator<Item = NodeId> + 'a {
        let mut at = list.head;
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let id = at;
            at = self.node(id).next.load(Relaxed);
            Some(id)
        })
    }

    /// Asserts the list invariants (module essay) and returns the linked nodes, in a
    /// table by node number. `list` is this list's locked state.
    ///
    /// # Panics
    /// On a broken invariant.
    pub(crate) fn check(&self, list: &Lru) -> Vec<bool> {
        let capacity = (list.nr_chunks * LRU_CHUNK_NODES) as u64;
        let mut linked = vec![false; capacity as usize];
        let (mut count, mut prev, mut at) = (0u64, NIL, list.head);
        while at != NIL {
            assert!(count < capacity, "LRU list has a cycle");
            let node = self.node(at);
            assert_eq!(node.prev.load(Relaxed), prev, "LRU node {at}: prev link");
            assert!(node.is_used(), "linked node {at} free");
            linked[at as usize] = true;
            count += 1;
            prev = at;
            at = node.next.load(Relaxed);
        }
        assert_eq!(prev, list.tail, "LRU tail");
        assert_eq!(count, list.len, "LRU length");
        let (mut free, mut at) = (0u64, list.free);
        while at != NIL {
            assert!(free < capacity, "LRU free list has a cycle");
            assert!(!self.node(at).is_used(), "free LRU node {at} holds an entry");
            free += 1;
            at = self.node(at).next.load(Relaxed);
        }
        assert_eq!(free, list.free_len, "LRU free count");
        let taken = self.taken.load(Relaxed);
        assert_eq!(free + count + taken, capacity, "LRU nodes lost: {taken} taken");
        let chunks = self.chunk_bytes.load(Relaxed);
        assert_eq!(chunks, (list.nr_chunks * CHUNK_BYTES) as u64, "LRU chunk bytes");
        linked
    }
}

impl Lru {
    /// Entries linked.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}
