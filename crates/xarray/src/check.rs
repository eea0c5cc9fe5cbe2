//! `check_invariants`: re-derives every redundant fact of the tree from the slots and
//! compares (the kernel's `XA_NODE_BUG_ON`, TigerBeetle's `verify`). Tests call it after
//! every operation; it costs O(nodes), so production code does not.
//!
//! Checked:
//! - the arena: the free list matches the vacant ids, the live count matches, and every
//!   live node is reachable from the root (no leak) exactly once;
//! - each node: a shift that is a multiple of 6 and at most 60; parent, offset and shift
//!   links agree with the slot pointing to it; not empty; `count` equals its non-empty slots;
//!   `nr_values` equals the slots occupied by values; no child below a leaf;
//! - each entry: its span is a power of two, aligned in the node, made of the canonical slot
//!   and siblings naming it (a sibling anywhere else is an orphan);
//! - marks: never on an empty or sibling slot; on a child slot exactly when the child has
//!   that mark somewhere;
//! - the root: no parent, and not reducible (`xas_shrink` would have removed it);
//! - the entry count.

use crate::entry;
use crate::node::{NodeId, Slot, CHUNK_SHIFT, CHUNK_SIZE, MARK_COUNT, MAX_SHIFT, NO_PARENT};
use crate::{Owner, XArray};

#[derive(Default)]
struct Totals {
    nodes: usize,
    entries: u64,
}

impl<P: Owner> XArray<P> {
    /// Checks every invariant of the tree.
    ///
    /// # Panics
    /// On the first invariant that fails, naming it: that is a bug in this crate.
    ///
    /// Context: read only; O(nodes).
    pub fn check_invariants(&self) {
        self.nodes.check();
        let Some(root) = self.head else {
            assert_eq!(self.nodes.live(), 0, "an empty array holds nodes");
            assert_eq!(self.nr_entries, 0, "an empty array counts entries");
            return;
        };
        let top = self.nodes.get(root);
        assert_eq!(top.parent, NO_PARENT, "the root has a parent");
        assert_eq!(top.offset, 0, "the root has an offset");
        let reducible = top.count() == 1 && matches!(top.slot(0), Slot::Node(_));
        assert!(!reducible, "the root holds only slot 0's child: not shrunk");
        let mut totals = Totals::default();
        self.check_node(root, &mut totals);
        assert_eq!(totals.nodes, self.nodes.live(), "unreachable nodes (leak)");
        assert_eq!(self.nodes.live_ids().count(), totals.nodes, "arena disagrees");
        assert_eq!(totals.entries, self.nr_entries, "entry count");
    }

    /// Checks one node and its subtree; returns which marks it carries.
    fn check_node(&self, id: NodeId, totals: &mut Totals) -> [bool; MARK_COUNT] {
        totals.nodes += 1;
        let node = self.nodes.get(id);
        let shift = node.shift();
        assert!(
            shift.is_multiple_of(CHUNK_SHIFT) && shift <= MAX_SHIFT,
            "node {id}: shift {shift}"
        );
        assert!(node.count() > 0, "node {id} is empty and was not freed");
        let (mut count, mut values) = (0, 0);
        let mut off = 0;
        while off < CHUNK_SIZE {
            match node.slot(off) {
                Slot::Empty => {
                    assert_eq!(node.marks_at(off), 0, "node {id}: marked empty slot {off}");
                    off += 1;
                }
                Slot::Sibling(c) => panic!("node {id}: orphan sibling at {off} naming {c}"),
                Slot::Entry => {
                    let span = node.span(off);
                    assert!(span.is_power_of_two(), "node {id}: span {span} at {off}");
                    assert_eq!(off % span, 0, "node {id}: entry at {off} misaligned");
                    for sibling in off + 1..off + span {
                        assert_eq!(node.marks_at(sibling), 0, "node {id}: marked sibling");
                    }
                    count += span;
                    if entry::is_value(node.word(off)) {
                        values += span;
                    }
                    totals.entries += 1;
                    off += span;
                }
                Slot::Node(child) => {
                    assert!(shift > 0, "node {id}: a leaf with a child");
                    let below = self.nodes.get(child);
                    assert_eq!(below.parent, id, "node {child}: parent link");
                    assert_eq!(usize::from(below.offset), off, "node {child}: offset link");
                    assert_eq!(below.shift(), shift - CHUNK_SHIFT, "node {child}: shift");
                    let marked = self.check_node(child, totals);
                    for (mark, &has) in marked.iter().enumerate() {
                        let bit = (node.mark_bits(mark) >> off) & 1 == 1;
                        assert_eq!(bit, has, "node {id}: mark {mark} at {off} disagrees");
                    }
                    count += 1;
                    off += 1;
                }
            }
        }
        assert_eq!(count, node.count(), "node {id}: count");
        assert_eq!(values, node.nr_values(), "node {id}: nr_values");
        std::array::from_fn(|mark| node.mark_bits(mark) != 0)
    }
}
