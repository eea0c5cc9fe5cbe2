//! The pool's LRU: a doubly linked list of entries, newest at the head, coldest at the
//! tail, with a referenced bit per entry for a second chance (reference/kernel-swap.md
//! §4.4). Writeback takes entries from the tail.
//!
//! The kernel links its `zswap_entry`s intrusively. Here the links live in a slab of
//! nodes, named by a `u32` [`NodeId`], in chunks of [`LRU_CHUNK_NODES`]:
//!
//! ```text
//!   chunks: [chunk 0: node 0 .. 1023][chunk 1: node 1024 .. 2047] ...
//!   node { prev, next, entry: Option<Arc<ZswapEntry>> }
//!   head ⇄ ... ⇄ tail          linked nodes: entry is Some
//!   free ─► n ─► n ─► NIL      free nodes (through `next`): entry is None
//! ```
//!
//! Allocation never happens under the LRU lock: a store first *reserves* a node by moving
//! one count from *spare* (free nodes nobody has claimed) to *claimed*, and only when none
//! is spare does it allocate a chunk with no lock held, then take the lock to add it.
//! Linking under the lock then always finds a free node. The chunk table's capacity is reserved at
//! setup for every slot of the device plus [`SPARE_CHUNKS`], so adding a chunk never
//! reallocates the table either.
//!
//! Chunks are kept at their high-water mark (and counted in the pool's bytes): at most 16
//! bytes per entry the pool ever held at once, under 1% of the pool limit for objects of
//! ~2 KiB, and never more than one node per device slot plus the spare chunks.
//!
//! Invariants (checked by [`LruList::check`]): the list from head to tail visits `len`
//! linked nodes, each with an entry whose `lru` field names the node; the free list holds
//! every other node, `free_len` of them; spare plus claimed nodes equal `free_len`.

use crate::entry::ZswapEntry;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// A node of the slab.
pub(crate) type NodeId = u32;

/// No node (end of a list).
pub(crate) const NIL: NodeId = NodeId::MAX;

/// Nodes per chunk: 1024 nodes of 16 bytes, 16 KiB a chunk.
pub(crate) const LRU_CHUNK_NODES: usize = 1024;

/// Chunks beyond one node per device slot: a store over a slot that already has an entry
/// holds a second node for a moment, so up to `SPARE_CHUNKS * 1024` such stores may be
/// in flight at once.
pub(crate) const SPARE_CHUNKS: usize = 4;

struct Node {
    prev: NodeId,
    next: NodeId,
    entry: Option<Arc<ZswapEntry>>,
}

const NODE_BYTES: usize = std::mem::size_of::<Node>();
const _: () = assert!(NODE_BYTES == 16, "an LRU node is two ids and one pointer");

/// Bytes one chunk holds.
pub(crate) const CHUNK_BYTES: usize = LRU_CHUNK_NODES * NODE_BYTES;

/// The list itself. Every field is guarded by the mutex in [`LruList`].
pub(crate) struct Lru {
    chunks: Vec<Box<[Node]>>,
    free: NodeId,
    free_len: u64,
    /// The newest entry.
    head: NodeId,
    /// The coldest entry.
    tail: NodeId,
    len: u64,
}

/// The LRU lock and the reservation counts.
pub(crate) struct LruList {
    /// Lock order: after a tree lock, before a zpool class lock (crate essay).
    pub(crate) list: Mutex<Lru>,
    /// Two counts in one word, so a reservation moves a node from one to the other in one
    /// atomic step: bits 0..32 `spare` (free nodes nobody has claimed), bits 32..64
    /// `claimed` (reserved, not yet linked). For an observer holding the LRU lock,
    /// `spare + claimed == free_len` always.
    counts: AtomicU64,
    /// Bytes of the chunks allocated (for the pool's accounting).
    pub(crate) chunk_bytes: AtomicU64,
}

/// Why a node could not be reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LruFull;

impl LruList {
    /// An empty list with room in its chunk table for `nr_slots` nodes plus the spare
    /// chunks. Allocates only that table (8 bytes per 1024 slots).
    pub(crate) fn new(nr_slots: u64) -> Self {
        let chunks = (nr_slots as usize).div_ceil(LRU_CHUNK_NODES) + SPARE_CHUNKS;
        LruList {
            list: Mutex::new(Lru {
                chunks: Vec::with_capacity(chunks),
                free: NIL,
                free_len: 0,
                head: NIL,
                tail: NIL,
                len: 0,
            }),
            counts: AtomicU64::new(0),
            chunk_bytes: AtomicU64::new(0),
        }
    }

    /// Bytes of the chunk table itself.
    pub(crate) fn table_bytes(&self) -> usize {
        self.list.lock().chunks.capacity() * std::mem::size_of::<Box<[Node]>>()
    }

    /// Reserves one free node for a later [`Lru::push_head`].
    ///
    /// # Errors
    /// [`LruFull`] if the chunk table is at its capacity (more stores in flight than
    /// [`SPARE_CHUNKS`] allows: the store is refused).
    ///
    /// Context: takes the LRU lock only when a chunk must be added; allocates a chunk
    /// (16 KiB) with no lock held then. Must not be called with a tree lock held.
    pub(crate) fn reserve(&self) -> Result<(), LruFull> {
        let claim = |counts: u64| (counts & SPARE_MASK != 0).then(|| counts - 1 + CLAIMED_ONE);
        if self.counts.fetch_update(Relaxed, Relaxed, claim).is_ok() {
            return Ok(());
        }
        let chunk: Box<[Node]> =
            (0..LRU_CHUNK_NODES).map(|_| Node { prev: NIL, next: NIL, entry: None }).collect();
        let mut list = self.list.lock();
        if list.chunks.len() == list.chunks.capacity() {
            return Err(LruFull);
        }
        list.add_chunk(chunk);
        // One node of the new chunk is ours; the others are spare for everybody.
        self.counts.fetch_add(LRU_CHUNK_NODES as u64 - 1 + CLAIMED_ONE, Relaxed);
        self.chunk_bytes.fetch_add(CHUNK_BYTES as u64, Relaxed);
        Ok(())
    }

    /// Gives back a reservation that will not be used.
    pub(crate) fn cancel(&self) {
        let unclaim = |counts: u64| counts.checked_sub(CLAIMED_ONE).map(|c| c + 1);
        let done = self.counts.fetch_update(Relaxed, Relaxed, unclaim);
        assert!(done.is_ok(), "LRU reservation cancelled twice");
    }

    /// Links `entry` at the head (newest end) in the node the caller reserved, and
    /// records the node in `entry.lru`. `list` is this list's locked state.
    ///
    /// # Panics
    /// If no node is free: the caller did not reserve one (a bug).
    pub(crate) fn push_head(&self, list: &mut Lru, entry: Arc<ZswapEntry>) {
        list.push_head(entry);
        self.counts.fetch_sub(CLAIMED_ONE, Relaxed);
    }

    /// Unlinks `entry`, frees its node, and returns the list's reference to the entry (the
    /// caller drops it after unlocking). `list` is this list's locked state.
    ///
    /// # Panics
    /// If the entry's node does not hold it (a bug).
    pub(crate) fn remove(&self, list: &mut Lru, entry: &ZswapEntry) -> Arc<ZswapEntry> {
        let held = list.remove(entry);
        self.counts.fetch_add(1, Relaxed);
        held
    }

    /// Asserts the list invariants (module essay). `list` is this list's locked state.
    ///
    /// # Panics
    /// On a broken invariant.
    pub(crate) fn check(&self, list: &Lru) {
        let free = list.check();
        let counts = self.counts.load(Relaxed);
        let (spare, claimed) = (counts & SPARE_MASK, counts >> 32);
        assert_eq!(spare + claimed, free, "LRU free nodes: {spare} spare + {claimed} claimed");
        let chunks = self.chunk_bytes.load(Relaxed);
        assert_eq!(chunks, (list.chunks.len() * CHUNK_BYTES) as u64, "LRU chunk bytes");
    }
}

const SPARE_MASK: u64 = (1 << 32) - 1;
const CLAIMED_ONE: u64 = 1 << 32;
const _: () = assert!(slots::MAX_SLOTS + (SPARE_CHUNKS * LRU_CHUNK_NODES) as u64 <= SPARE_MASK);

impl Lru {
    fn add_chunk(&mut self, chunk: Box<[Node]>) {
        let base = (self.chunks.len() * LRU_CHUNK_NODES) as NodeId;
        self.chunks.push(chunk);
        for i in (0..LRU_CHUNK_NODES as NodeId).rev() {
            let id = base + i;
            self.node_mut(id).next = self.free;
            self.free = id;
        }
        self.free_len += LRU_CHUNK_NODES as u64;
    }

    fn node(&self, id: NodeId) -> &Node {
        &self.chunks[id as usize / LRU_CHUNK_NODES][id as usize % LRU_CHUNK_NODES]
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.chunks[id as usize / LRU_CHUNK_NODES][id as usize % LRU_CHUNK_NODES]
    }

    fn push_head(&mut self, entry: Arc<ZswapEntry>) {
        let id = self.free;
        assert!(id != NIL, "LRU push without a reservation");
        self.free = self.node(id).next;
        self.free_len -= 1;
        entry.set_lru(id);
        self.node_mut(id).entry = Some(entry);
        self.link_head(id);
        self.len += 1;
    }

    fn link_head(&mut self, id: NodeId) {
        let old_head = self.head;
        let node = self.node_mut(id);
        node.prev = NIL;
        node.next = old_head;
        if old_head == NIL {
            self.tail = id;
        } else {
            self.node_mut(old_head).prev = id;
        }
        self.head = id;
    }

    fn unlink(&mut self, id: NodeId) {
        let (prev, next) = {
            let node = self.node(id);
            (node.prev, node.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.node_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.node_mut(next).prev = prev;
        }
    }

    fn remove(&mut self, entry: &ZswapEntry) -> Arc<ZswapEntry> {
        let id = entry.lru();
        let held = self.node_mut(id).entry.take();
        let held = held.unwrap_or_else(|| panic!("LRU node {id} is free"));
        assert!(std::ptr::eq(&*held, entry), "LRU node {id} holds another entry");
        self.unlink(id);
        let free = self.free;
        let node = self.node_mut(id);
        node.prev = NIL;
        node.next = free;
        self.free = id;
        self.free_len += 1;
        self.len -= 1;
        held
    }

    /// The coldest entry, if any.
    pub(crate) fn tail(&self) -> Option<&Arc<ZswapEntry>> {
        (self.tail != NIL).then(|| self.node(self.tail).entry.as_ref()).flatten()
    }

    /// Moves the coldest entry to the head (a second chance, or a writeback candidate
    /// rotated before the lock is dropped, as the kernel does).
    pub(crate) fn rotate_tail(&mut self) {
        let id = self.tail;
        if id != NIL && id != self.head {
            self.unlink(id);
            self.link_head(id);
        }
    }

    /// Entries linked.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The entries from head (newest) to tail (coldest).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<ZswapEntry>> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let node = self.node(at);
            at = node.next;
            node.entry.as_ref()
        })
    }

    /// Does `entry`'s node hold `entry`?
    pub(crate) fn holds(&self, entry: &ZswapEntry) -> bool {
        let id = entry.lru();
        id != NIL
            && (id as usize) < self.chunks.len() * LRU_CHUNK_NODES
            && self.node(id).entry.as_ref().is_some_and(|held| std::ptr::eq(&**held, entry))
    }

    /// Asserts the list's own invariants and returns `free_len`.
    fn check(&self) -> u64 {
        let capacity = (self.chunks.len() * LRU_CHUNK_NODES) as u64;
        let (mut count, mut prev, mut at) = (0u64, NIL, self.head);
        while at != NIL {
            assert!(count < capacity, "LRU list has a cycle");
            let node = self.node(at);
            assert_eq!(node.prev, prev, "LRU node {at}: prev link");
            let entry = node.entry.as_ref().unwrap_or_else(|| panic!("linked node {at} free"));
            assert_eq!(entry.lru(), at, "LRU node {at}: entry names another node");
            count += 1;
            prev = at;
            at = node.next;
        }
        assert_eq!(prev, self.tail, "LRU tail");
        assert_eq!(count, self.len, "LRU length");
        let (mut free, mut at) = (0u64, self.free);
        while at != NIL {
            assert!(free < capacity, "LRU free list has a cycle");
            assert!(self.node(at).entry.is_none(), "free LRU node {at} holds an entry");
            free += 1;
            at = self.node(at).next;
        }
        assert_eq!(free, self.free_len, "LRU free count");
        assert_eq!(free + count, capacity, "LRU nodes lost");
        free
    }
}
