//! Nodes: 64 slot words, a small header, and the arena that owns them.
//!
//! ```text
//!   Node (544 bytes)                                   shift 6: each slot covers 64 indices
//!   +-------+--------+-------+-----------+--------+
//!   | shift | offset | count | nr_values | parent |   offset: our slot in the parent
//!   +-------+--------+-------+-----------+--------+
//!   | marks[0..3]: one u64 bitmap per mark          |   bit k: slot k (or its subtree) marked
//!   +-----------------------------------------------+
//!   | slots[0..64]: one word each (entry.rs)        |
//!   +-----------------------------------------------+
//!     slot 0   slot 1  ...  slot 8   slot 9 ... slot 15  ...
//!     node     empty        item     sib(8) ... sib(8)       <- an order-9 entry at shift 6
//! ```
//!
//! A node at shift `s` covers `64 << s` indices; slot `k` covers `[base + k << s,
//! base + (k + 1) << s)`. A multi-index entry of order `o` lives in the node whose shift is
//! `o` rounded down to a multiple of 6, in `2^(o - s)` slots: the canonical slot holds the
//! entry, the others hold sibling entries naming the canonical offset.
//!
//! Invariants kept by the methods here (checked by `check_invariants`):
//! - `count` is the number of non-empty slots (entries, siblings, nodes);
//! - `nr_values` is the number of slots occupied by value entries (canonical and sibling
//!   slots of a value): `count == nr_values` says the node holds only values (the kernel uses
//!   this to find nodes full of shadows);
//! - a mark bit is set only on a canonical entry slot, or on a node slot whose child has
//!   that mark set somewhere;
//! - item words are owned by the node: they enter as [`RawEntry`] and leave as one, and a node
//!   dropped with items in it drops them.
//!
//! Nodes live in [`Nodes`], an arena of boxed nodes named by `u32` ids. A freed node's memory
//! goes back to the allocator at once (like the kernel's slab free); its id is reused.
//!
//! This is a leaf module: `unsafe` is allowed here, only to turn owned slot words back into
//! [`RawEntry`] tokens and to borrow items.

#![allow(unsafe_code)]

use crate::entry::{self, EntryRef, Owner, RawEntry, Word, EMPTY};
use std::marker::PhantomData;

/// Bits of the index consumed per level.
pub(crate) const CHUNK_SHIFT: u32 = 6;
/// Slots per node: 64, one u64 mark bitmap covers a node.
pub(crate) const CHUNK_SIZE: usize = 1 << CHUNK_SHIFT;
/// Marks per entry (the kernel's XA_MARK_0..2).
pub(crate) const MARK_COUNT: usize = 3;
/// The largest shift a node has: 60 + 6 bits covers all 64 index bits.
pub(crate) const MAX_SHIFT: u32 = 60;

/// A node's name in the arena.
pub(crate) type NodeId = u32;
/// The parent of the root.
pub(crate) const NO_PARENT: NodeId = NodeId::MAX;

const _: () = assert!(CHUNK_SIZE == 64, "mark bitmaps are one u64 per node");
const _: () = assert!(MAX_SHIFT.is_multiple_of(CHUNK_SHIFT) && MAX_SHIFT + CHUNK_SHIFT >= 64);
// 64 slots x 8 B + 32 B header: the figure the 12 bytes per dense entry target rests on
// (a full leaf holds 64 entries: 544 / 64 = 8.5 B each, plus ~1/63 for the levels above).
const _: () = assert!(std::mem::size_of::<Node<Box<u64>>>() == 544, "node layout changed");

/// What a slot holds, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Empty,
    /// A canonical entry (item or value).
    Entry,
    /// A sibling of the entry at this canonical offset.
    Sibling(usize),
    Node(NodeId),
}

/// One node of the tree. Fields other than the slots are maintained by the tree code (shift,
/// offset, parent) or by the slot methods below (count, nr_values, marks of entries).
pub(crate) struct Node<P: Owner> {
    pub(crate) shift: u8,
    pub(crate) offset: u8,
    count: u8,
    nr_values: u8,
    pub(crate) parent: NodeId,
    marks: [u64; MARK_COUNT],
    slots: [Word; CHUNK_SIZE],
    _owner: PhantomData<P>,
}

impl<P: Owner> Node<P> {
    fn new(shift: u32, parent: NodeId, offset: usize) -> Box<Self> {
        assert!(shift <= MAX_SHIFT && shift.is_multiple_of(CHUNK_SHIFT), "bad node shift {shift}");
        assert!(offset < CHUNK_SIZE);
        Box::new(Node {
            shift: shift as u8,
            offset: offset as u8,
            count: 0,
            nr_values: 0,
            parent,
            marks: [0; MARK_COUNT],
            slots: [EMPTY; CHUNK_SIZE],
            _owner: PhantomData,
        })
    }

    /// Makes a spare (empty) node ready for a new place in the tree.
    fn reset(&mut self, shift: u32, parent: NodeId, offset: usize) {
        assert!(shift <= MAX_SHIFT && shift.is_multiple_of(CHUNK_SHIFT), "bad node shift {shift}");
        assert!(offset < CHUNK_SIZE);
        assert_eq!(self.count, 0, "a spare node holds slots");
        assert!(self.marks.iter().all(|&bits| bits == 0), "a spare node holds marks");
        debug_assert!(self.slots.iter().all(|&w| w == EMPTY));
        self.shift = shift as u8;
        self.offset = offset as u8;
        self.parent = parent;
    }

    #[inline]
    pub(crate) fn shift(&self) -> u32 {
        u32::from(self.shift)
    }

    #[inline]
    pub(crate) fn count(&self) -> usize {
        usize::from(self.count)
    }

    #[inline]
    pub(crate) fn nr_values(&self) -> usize {
        usize::from(self.nr_values)
    }

    /// The raw word (read only: ownership never leaves through here).
    #[inline]
    pub(crate) fn word(&self, off: usize) -> Word {
        self.slots[off]
    }

    #[inline]
    pub(crate) fn slot(&self, off: usize) -> Slot {
        let word = self.slots[off];
        if word == EMPTY {
            Slot::Empty
        } else if entry::is_node(word) {
            Slot::Node(entry::node_id(word))
        } else if entry::is_sibling(word) {
            Slot::Sibling(entry::sibling_offset(word))
        } else {
            Slot::Entry
        }
    }

    /// How many slots the canonical entry at `off` spans (1 + its siblings), a power of two.
    pub(crate) fn span(&self, off: usize) -> usize {
        debug_assert_eq!(self.slot(off), Slot::Entry);
        let sibling = entry::mk_sibling(off);
        let mut span = 1;
        while off + span < CHUNK_SIZE && self.slots[off + span] == sibling {
            span += 1;
        }
        span
    }

    /// A view of the canonical entry at `off`, borrowed from the node.
    #[inline]
    pub(crate) fn entry_ref(&self, off: usize) -> EntryRef<'_, P::Target> {
        let word = self.slots[off];
        assert!(entry::is_entry(word), "slot {off} holds no entry");
        // SAFETY: `word` is an entry word owned by this node (type invariant: entry words enter
        // only through `store_span`), and it stays owned while `&self` is borrowed, because
        // only `&mut self` methods take it out.
        unsafe { entry::entry_ref(word) }
    }

    /// Stores `entry` at canonical slot `off` with `span - 1` siblings after it.
    ///
    /// # Panics
    /// If any slot in the span is occupied (the caller empties the span first), or the span
    /// is not a power of two aligned within the node.
    pub(crate) fn store_span(&mut self, off: usize, span: usize, entry: RawEntry<P>) {
        assert!(span.is_power_of_two() && off.is_multiple_of(span) && off + span <= CHUNK_SIZE);
        assert!(self.slots[off..off + span].iter().all(|&w| w == EMPTY), "span occupied");
        let value = entry::is_value(entry.word());
        self.slots[off] = entry.into_word();
        for slot in &mut self.slots[off + 1..off + span] {
            *slot = entry::mk_sibling(off);
        }
        self.count += span as u8;
        if value {
            self.nr_values += span as u8;
        }
        debug_assert!(self.marks_at(off) == 0, "a fresh span starts unmarked");
    }

    /// Takes the canonical entry at `off` out with its siblings and marks.
    ///
    /// Returns the entry, its span in slots, and its marks as a bitmask (bit m: mark m).
    pub(crate) fn take_span(&mut self, off: usize) -> (RawEntry<P>, usize, u8) {
        assert_eq!(self.slot(off), Slot::Entry, "slot {off} holds no entry");
        let span = self.span(off);
        let marks = self.marks_at(off);
        let word = std::mem::replace(&mut self.slots[off], EMPTY);
        for slot in &mut self.slots[off + 1..off + span] {
            *slot = EMPTY;
        }
        self.count -= span as u8;
        if entry::is_value(word) {
            self.nr_values -= span as u8;
        }
        for mark in 0..MARK_COUNT {
            self.marks[mark] &= !(1 << off);
        }
        // SAFETY: the word was owned by this slot, which now holds EMPTY: ownership moves to
        // the token exactly once.
        (unsafe { RawEntry::from_word(word) }, span, marks)
    }

    /// Links a child node into the empty slot `off`.
    pub(crate) fn put_child(&mut self, off: usize, child: NodeId) {
        assert_eq!(self.slot(off), Slot::Empty, "slot {off} occupied");
        assert!(self.shift > 0, "a leaf has no children");
        self.slots[off] = entry::mk_node(child);
        self.count += 1;
    }

    /// Unlinks the child node at `off` (and clears its mark bits).
    pub(crate) fn clear_child(&mut self, off: usize) {
        assert!(matches!(self.slot(off), Slot::Node(_)), "slot {off} holds no node");
        self.slots[off] = EMPTY;
        self.count -= 1;
        for mark in 0..MARK_COUNT {
            self.marks[mark] &= !(1 << off);
        }
    }

    #[inline]
    pub(crate) fn mark_bits(&self, mark: usize) -> u64 {
        self.marks[mark]
    }

    /// The marks of slot `off` as a bitmask (bit m: mark m).
    pub(crate) fn marks_at(&self, off: usize) -> u8 {
        (0..MARK_COUNT).fold(0, |acc, m| acc | (((self.marks[m] >> off) as u8 & 1) << m))
    }

    pub(crate) fn set_mark_bit(&mut self, off: usize, mark: usize) {
        debug_assert!(matches!(self.slot(off), Slot::Entry | Slot::Node(_)));
        self.marks[mark] |= 1 << off;
    }

    pub(crate) fn clear_mark_bit(&mut self, off: usize, mark: usize) {
        self.marks[mark] &= !(1 << off);
    }

    /// Sets the marks in `mask` (bit m: mark m) on slot `off`.
    pub(crate) fn set_marks_at(&mut self, off: usize, mask: u8) {
        for mark in 0..MARK_COUNT {
            if mask & (1 << mark) != 0 {
                self.set_mark_bit(off, mark);
            }
        }
    }

    /// The first slot at or after `off` that holds a node or a canonical entry.
    pub(crate) fn next_occupied(&self, off: usize) -> Option<usize> {
        (off..CHUNK_SIZE).find(|&o| {
            let word = self.slots[o];
            word != EMPTY && !entry::is_sibling(word)
        })
    }
}

impl<P: Owner> Drop for Node<P> {
    fn drop(&mut self) {
        // Only a whole array's drop frees a node that still holds entries; the tree code
        // empties nodes before freeing them.
        for off in 0..CHUNK_SIZE {
            if self.slot(off) == Slot::Entry {
                drop(self.take_span(off).0);
            }
        }
    }
}

/// Empty nodes allocated ahead of time, outside the caller's lock, for a later split or
/// store to use without allocating them under it (the kernel's `xas_split_alloc` and
/// `xas_nomem` shape). Give them to the array with [`XArray::refill`](crate::XArray::refill).
pub struct NodeReserve<P: Owner> {
    // Boxed: each node is its own allocation, moved into the tree as is.
    #[allow(clippy::vec_box)]
    nodes: Vec<Box<Node<P>>>,
}

impl<P: Owner> NodeReserve<P> {
    /// `count` empty nodes. Context: allocates (call it before taking the lock).
    pub fn new(count: usize) -> Self {
        NodeReserve { nodes: (0..count).map(|_| Node::new(0, NO_PARENT, 0)).collect() }
    }

    /// The nodes splitting an order-`order` entry into order `new_order` needs.
    pub fn for_split(order: u32, new_order: u32) -> Self {
        Self::new(crate::XArray::<P>::split_nodes_needed(order, new_order))
    }

    /// Nodes held.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Holds no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

impl<P: Owner> std::fmt::Debug for NodeReserve<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeReserve").field("nodes", &self.nodes.len()).finish()
    }
}

/// The arena of nodes: boxed nodes by id, a free-id list, the live count, and spare empty
/// nodes given by a [`NodeReserve`].
pub(crate) struct Nodes<P: Owner> {
    table: Vec<Option<Box<Node<P>>>>,
    free: Vec<NodeId>,
    live: usize,
    // Boxed: spares came from a `NodeReserve` and go into `table` without a copy.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Node<P>>>,
}

impl<P: Owner> Nodes<P> {
    pub(crate) const fn new() -> Self {
        Nodes { table: Vec::new(), free: Vec::new(), live: 0, spare: Vec::new() }
    }

    /// Takes a reserve's nodes as spares, and grows the id table so that placing them needs
    /// no reallocation. Context: allocates only to grow the id table (amortized doubling).
    pub(crate) fn refill(&mut self, reserve: NodeReserve<P>) {
        if self.spare.is_empty() {
            self.spare = reserve.nodes;
        } else {
            self.spare.extend(reserve.nodes);
        }
        let needed = self.spare.len().saturating_sub(self.free.len());
        self.table.reserve(needed);
    }

    /// Spare nodes held.
    pub(crate) fn spare(&self) -> usize {
        self.spare.len()
    }

    /// A node for the tree: a spare one if any (returns true), else a new one.
    /// Context: allocates when no spare is left.
    pub(crate) fn alloc(&mut self, shift: u32, parent: NodeId, offset: usize) -> (NodeId, bool) {
        let (node, from_spare) = match self.spare.pop() {
            Some(mut node) => {
                node.reset(shift, parent, offset);
                (node, true)
            }
            None => (Node::new(shift, parent, offset), false),
        };
        let id = self.place(node);
        (id, from_spare)
    }

    fn place(&mut self, node: Box<Node<P>>) -> NodeId {
        self.live += 1;
        if let Some(id) = self.free.pop() {
            let slot = &mut self.table[id as usize];
            assert!(slot.is_none(), "free id {id} in use");
            *slot = Some(node);
            return id;
        }
        let id = self.table.len();
        assert!(id < NO_PARENT as usize, "node ids exhausted");
        self.table.push(Some(node));
        id as NodeId
    }

    /// Frees an empty node.
    ///
    /// # Panics
    /// If the node still holds anything: entries must be taken out first.
    pub(crate) fn free(&mut self, id: NodeId) {
        let node = self.table[id as usize].take();
        let Some(node) = node else { panic!("xarray: freeing free node {id}") };
        assert_eq!(node.count, 0, "freeing a node that is not empty");
        self.live -= 1;
        self.free.push(id);
    }

    #[inline]
    pub(crate) fn get(&self, id: NodeId) -> &Node<P> {
        match &self.table[id as usize] {
            Some(node) => node,
            None => panic!("xarray: dangling node id {id}"),
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: NodeId) -> &mut Node<P> {
        match &mut self.table[id as usize] {
            Some(node) => node,
            None => panic!("xarray: dangling node id {id}"),
        }
    }

    /// Nodes allocated now.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Bytes of the id table, the free list and the spare nodes (the arena's overhead).
    pub(crate) fn overhead_bytes(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<Option<Box<Node<P>>>>()
            + self.free.capacity() * std::mem::size_of::<NodeId>()
            + self.spare.capacity() * std::mem::size_of::<Box<Node<P>>>()
            + self.spare.len() * std::mem::size_of::<Node<P>>()
    }

    /// Ids that are allocated, for `check_invariants`.
    pub(crate) fn live_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.table.iter().enumerate().filter(|(_, n)| n.is_some()).map(|(id, _)| id as NodeId)
    }

    /// The free list agrees with the table.
    pub(crate) fn check(&self) {
        let vacant = self.table.iter().filter(|n| n.is_none()).count();
        assert_eq!(vacant, self.free.len(), "free list disagrees with the table");
        assert_eq!(self.table.len() - vacant, self.live, "live count disagrees");
        for &id in &self.free {
            assert!(self.table[id as usize].is_none(), "free id {id} is in use");
        }
        for node in &self.spare {
            assert_eq!(node.count, 0, "a spare node holds slots");
        }
    }
}
