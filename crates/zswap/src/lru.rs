//! The pool's LRU: a doubly linked list of its entries, newest at the head, coldest at the
//! tail, with a referenced bit per entry for a second chance (mm/zswap.c's
//! shrinker). Writeback takes entries from the tail.
//!
//! The kernel links its `zswap_entry`s intrusively. Here an entry is named by its swap
//! slot, and the links live in a table indexed by slot: a slot holds at most one entry, so
//! the slot is the entry's name, and the index (`tree`) holds the entry's pool handle and
//! nothing else. The table comes in chunks of [`LRU_CHUNK_SLOTS`] slots, each allocated
//! the first time a slot of its range is stored (with no lock held) and kept:
//!
//! ```text
//!   chunks: [slots 0 .. 1023][none][slots 2048 .. 3071] ...   (a chunk: links + bits)
//!   links:  slot -> (prev slot, next slot)      head ⇄ ... ⇄ tail: the linked slots
//!   bits:   slot -> referenced
//! ```
//!
//! Cost: 8 bytes of links and one bit per slot of every chunk in use, 8,320 bytes a chunk:
//! 8 bytes a stored page where the slots in use are dense, more where random page-ins left
//! them sparse. A node of its own per entry (with the handle, the length, the slot and a
//! prefetch hint in it) would cost 40 bytes; a `zswap_entry` costs the kernel 56
//! (`/sys/kernel/slab/zswap_entry/object_size` on Linux 6.18).
//!
//! A slot is linked exactly while its tree holds an entry for it: both change together,
//! under the tree lock and then the LRU lock (`zswap`). Links and the head, tail and
//! length change only under the LRU lock; the chunk table is fixed at setup (one slot per
//! 1024 device slots), each of its slots set once, so a chunk is found without any lock.
//! The referenced bits are atomics: set by loads (under a tree lock), cleared by writeback
//! (under the LRU lock); a hint, so neither waits for the other.
//!
//! Invariants (checked by [`LruList::check`]): the list from head to tail visits `len`
//! slots, each once, each slot's `prev` naming the one before it; the chunk bytes count
//! the chunks allocated.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// A swap slot of the device, as the list names it (offsets are below 2^31).
pub(crate) type Slot = u32;

/// No slot (end of the list).
pub(crate) const NIL: Slot = Slot::MAX;

const _: () = assert!(slots::MAX_SLOTS < NIL as u64, "every offset is a slot, none is NIL");

/// Slots per chunk.
pub(crate) const LRU_CHUNK_SLOTS: usize = 1024;

/// One slot's links.
#[derive(Debug)]
struct Links {
    prev: AtomicU32,
    next: AtomicU32,
}

/// The links and referenced bits of [`LRU_CHUNK_SLOTS`] slots.
#[derive(Debug)]
struct Chunk {
    links: [Links; LRU_CHUNK_SLOTS],
    referenced: [AtomicU64; LRU_CHUNK_SLOTS / 64],
}

impl Chunk {
    /// A chunk of unlinked slots, on the heap (too large to build on a thread's stack).
    fn new() -> Box<Chunk> {
        let links =
            std::array::from_fn(|_| Links { prev: AtomicU32::new(NIL), next: AtomicU32::new(NIL) });
        Box::new(Chunk { links, referenced: std::array::from_fn(|_| AtomicU64::new(0)) })
    }
}

/// Bytes one chunk holds.
pub(crate) const CHUNK_BYTES: usize = std::mem::size_of::<Chunk>();

const _: () = assert!(CHUNK_BYTES == LRU_CHUNK_SLOTS * 8 + LRU_CHUNK_SLOTS / 8);

/// The list's ends and length. Every field is guarded by the mutex in [`LruList`].
pub(crate) struct Lru {
    /// The newest entry.
    head: Slot,
    /// The coldest entry.
    tail: Slot,
    len: u64,
}

/// The link table, the LRU lock and the counts.
pub(crate) struct LruList {
    /// The chunk table: fixed length, each slot set once, read without a lock.
    chunks: Box<[OnceLock<Box<Chunk>>]>,
    /// Lock order: after a tree lock, before a zpool class lock (crate essay).
    pub(crate) list: Mutex<Lru>,
    /// Bytes of the chunks allocated (for the pool's accounting).
    pub(crate) chunk_bytes: AtomicU64,
}

impl LruList {
    /// An empty list for a device of `nr_slots` slots. Allocates only the chunk table (16
    /// bytes per 1024 slots).
    pub(crate) fn new(nr_slots: u64) -> Self {
        let chunks = (nr_slots as usize).div_ceil(LRU_CHUNK_SLOTS);
        LruList {
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
            list: Mutex::new(Lru { head: NIL, tail: NIL, len: 0 }),
            chunk_bytes: AtomicU64::new(0),
        }
    }

    /// Bytes of the chunk table itself.
    pub(crate) fn table_bytes(&self) -> usize {
        self.chunks.len() * std::mem::size_of::<OnceLock<Box<Chunk>>>()
    }

    /// Makes sure `slot`'s chunk exists, for a store about to link it.
    ///
    /// # Panics
    /// If `slot` is beyond the device (a caller bug).
    ///
    /// Context: allocates the chunk (8 KiB) the first time its range is stored; takes no
    /// lock of this crate, so call it before taking a tree lock.
    pub(crate) fn prepare(&self, slot: Slot) {
        let cell = &self.chunks[slot as usize / LRU_CHUNK_SLOTS];
        if cell.get().is_none() {
            let mut made = false;
            cell.get_or_init(|| {
                made = true;
                Chunk::new()
            });
            if made {
                self.chunk_bytes.fetch_add(CHUNK_BYTES as u64, Relaxed);
            }
        }
    }

    fn chunk(&self, slot: Slot) -> &Chunk {
        let chunk = self.chunks[slot as usize / LRU_CHUNK_SLOTS].get();
        chunk.unwrap_or_else(|| panic!("LRU slot {slot} of a chunk never prepared"))
    }

    fn links(&self, slot: Slot) -> &Links {
        &self.chunk(slot).links[slot as usize % LRU_CHUNK_SLOTS]
    }

    /// `slot`'s referenced bit: its word and its mask.
    fn bit(&self, slot: Slot) -> (&AtomicU64, u64) {
        let at = slot as usize % LRU_CHUNK_SLOTS;
        (&self.chunk(slot).referenced[at / 64], 1 << (at % 64))
    }

    /// Links `slot` at the head (newest end); its referenced bit is left as it is (a store
    /// sets it: [`LruList::mark_referenced`]). `list` is this list's locked state.
    ///
    /// # Panics
    /// If `slot` is linked already (a bug), or its chunk was never prepared.
    pub(crate) fn push_head(&self, list: &mut Lru, slot: Slot) {
        assert!(!self.is_linked(list, slot), "LRU slot {slot} linked twice");
        let old_head = list.head;
        let links = self.links(slot);
        links.prev.store(NIL, Relaxed);
        links.next.store(old_head, Relaxed);
        if old_head == NIL {
            list.tail = slot;
        } else {
            self.links(old_head).prev.store(slot, Relaxed);
        }
        list.head = slot;
        list.len += 1;
    }

    /// Unlinks `slot`. `list` is this list's locked state.
    ///
    /// # Panics
    /// If `slot` is not linked (a bug).
    pub(crate) fn remove(&self, list: &mut Lru, slot: Slot) {
        assert!(self.is_linked(list, slot), "LRU slot {slot} is not linked");
        let links = self.links(slot);
        let (prev, next) = (links.prev.load(Relaxed), links.next.load(Relaxed));
        if prev == NIL {
            list.head = next;
        } else {
            self.links(prev).next.store(next, Relaxed);
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.links(next).prev.store(prev, Relaxed);
        }
        links.prev.store(NIL, Relaxed);
        links.next.store(NIL, Relaxed);
        list.len -= 1;
    }

    /// Whether `slot` is in the list: it has a neighbour, or it is the only entry. A slot
    /// whose chunk was never prepared never was.
    fn is_linked(&self, list: &Lru, slot: Slot) -> bool {
        if self.chunks[slot as usize / LRU_CHUNK_SLOTS].get().is_none() {
            return false;
        }
        let links = self.links(slot);
        links.prev.load(Relaxed) != NIL || links.next.load(Relaxed) != NIL || list.head == slot
    }

    /// The coldest entry's slot, if any.
    pub(crate) fn tail(&self, list: &Lru) -> Option<Slot> {
        (list.tail != NIL).then_some(list.tail)
    }

    /// Moves the coldest entry to the head (a second chance, or a writeback candidate
    /// rotated before the lock is dropped, as the kernel does). Its referenced bit is left
    /// as it is.
    pub(crate) fn rotate_tail(&self, list: &mut Lru) {
        let slot = list.tail;
        if slot != NIL && slot != list.head {
            self.remove(list, slot);
            self.push_head(list, slot);
        }
    }

    /// The linked slots from head (newest) to tail (coldest).
    pub(crate) fn iter<'a>(&'a self, list: &'a Lru) -> impl Iterator<Item = Slot> + 'a {
        let mut at = list.head;
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let slot = at;
            at = self.links(slot).next.load(Relaxed);
            Some(slot)
        })
    }

    /// Sets `slot`'s referenced bit (a load used the entry).
    pub(crate) fn mark_referenced(&self, slot: Slot) {
        let (word, mask) = self.bit(slot);
        if word.load(Relaxed) & mask == 0 {
            word.fetch_or(mask, Relaxed);
        }
    }

    pub(crate) fn is_referenced(&self, slot: Slot) -> bool {
        let (word, mask) = self.bit(slot);
        word.load(Relaxed) & mask != 0
    }

    /// Clears `slot`'s referenced bit; returns whether it was set.
    pub(crate) fn test_and_clear_referenced(&self, slot: Slot) -> bool {
        let (word, mask) = self.bit(slot);
        word.fetch_and(!mask, Relaxed) & mask != 0
    }

    /// Asserts the list invariants (module essay) and returns the linked slots from head
    /// to tail. `list` is this list's locked state.
    ///
    /// # Panics
    /// On a broken invariant.
    pub(crate) fn check(&self, list: &Lru) -> Vec<Slot> {
        let mut linked = Vec::with_capacity(list.len as usize);
        let (mut prev, mut at) = (NIL, list.head);
        while at != NIL {
            assert!((linked.len() as u64) < list.len + 1, "LRU list has a cycle");
            let links = self.links(at);
            assert_eq!(links.prev.load(Relaxed), prev, "LRU slot {at}: prev link");
            linked.push(at);
            prev = at;
            at = links.next.load(Relaxed);
        }
        assert_eq!(prev, list.tail, "LRU tail");
        assert_eq!(linked.len() as u64, list.len, "LRU length");
        let (bytes, chunks) = self.settled_chunk_bytes();
        assert_eq!(bytes, (chunks * CHUNK_BYTES) as u64, "LRU chunk bytes");
        linked
    }

    /// The chunk bytes counted and the chunks made, read when they agree. A store makes its
    /// chunk with no lock held ([`LruList::prepare`]) and counts its bytes just after, so a
    /// check running beside stores can see a chunk whose bytes are not counted yet: it
    /// reads again (up to 10,000 times) until no chunk is in flight, and a real mismatch (a
    /// chunk counted twice, or never) still shows. The zswap stress test checks while it
    /// stores, and so meets chunks in flight.
    pub(crate) fn settled_chunk_bytes(&self) -> (u64, usize) {
        let read = || {
            let before = self.chunk_bytes.load(Relaxed);
            let chunks = self.chunks.iter().filter(|c| c.get().is_some()).count();
            (before, chunks, self.chunk_bytes.load(Relaxed))
        };
        for _ in 0..10_000 {
            let (before, chunks, after) = read();
            if before == after && before == (chunks * CHUNK_BYTES) as u64 {
                return (before, chunks);
            }
            std::thread::yield_now();
        }
        let (bytes, chunks, _) = read();
        (bytes, chunks)
    }
}

impl Lru {
    /// Entries linked.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(lru: &LruList) -> Vec<Slot> {
        lru.check(&lru.list.lock())
    }

    #[test]
    fn slots_link_at_the_head_and_leave_from_anywhere() {
        let lru = LruList::new(4096);
        for slot in [5, 2000, 7] {
            lru.prepare(slot);
            lru.push_head(&mut lru.list.lock(), slot);
        }
        assert_eq!(order(&lru), [7, 2000, 5]);
        assert_eq!(lru.chunk_bytes.load(Relaxed), 2 * CHUNK_BYTES as u64, "two chunks");
        lru.remove(&mut lru.list.lock(), 2000);
        assert_eq!(order(&lru), [7, 5]);
        lru.remove(&mut lru.list.lock(), 5);
        lru.remove(&mut lru.list.lock(), 7);
        assert_eq!(order(&lru), Vec::<Slot>::new());
        lru.push_head(&mut lru.list.lock(), 5);
        assert_eq!(order(&lru), [5], "a slot links again once unlinked");
    }

    #[test]
    fn the_tail_rotates_keeping_its_bit() {
        let lru = LruList::new(1024);
        for slot in [1, 2, 3] {
            lru.prepare(slot);
            lru.push_head(&mut lru.list.lock(), slot);
        }
        lru.mark_referenced(2);
        assert!(!lru.test_and_clear_referenced(1), "linking sets no bit");
        lru.rotate_tail(&mut lru.list.lock());
        assert_eq!(order(&lru), [1, 3, 2]);
        assert!(!lru.is_referenced(1), "rotating does not give a second chance");
        lru.rotate_tail(&mut lru.list.lock());
        assert!(lru.is_referenced(2), "nor take one away");
        assert_eq!(lru.tail(&lru.list.lock()), Some(3));
    }

    #[test]
    #[should_panic(expected = "linked twice")]
    fn linking_a_linked_slot_is_a_bug() {
        let lru = LruList::new(1024);
        lru.prepare(9);
        lru.push_head(&mut lru.list.lock(), 9);
        lru.push_head(&mut lru.list.lock(), 9);
    }
}
