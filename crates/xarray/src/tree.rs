//! Tree mechanics shared by every operation: index arithmetic, walking to the entry that
//! covers an index, growing the tree to make room (`xas_expand` / `xas_create`), removing an
//! entry with the empty nodes above it (`xas_delete_node`), shrinking the height
//! (`xas_shrink`), and keeping the mark bits of interior nodes in step with their children.
//!
//! Invariants these functions keep (and `check_invariants` re-derives):
//! - the root has no parent; every other node's `parent`/`offset` name the slot that points
//!   to it, and its shift is its parent's minus 6;
//! - no node is empty (an emptied node is freed at once);
//! - the root is not reducible: it does not hold only a child node in slot 0;
//! - an interior slot's mark bit is set exactly when the child has that mark somewhere.

use crate::entry::{self, RawEntry};
use crate::error::Error;
use crate::node::{NodeId, Slot, CHUNK_SHIFT, CHUNK_SIZE, MARK_COUNT, MAX_SHIFT, NO_PARENT};
use crate::{Owner, XArray, MAX_ORDER};

/// Where an entry lives: its node, its canonical slot, its first index and its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) node: NodeId,
    pub(crate) off: usize,
    pub(crate) first: u64,
    pub(crate) order: u32,
}

impl Place {
    /// The last index the entry covers.
    pub(crate) fn last(&self) -> u64 {
        self.first + (mask(self.order))
    }
}

/// `2^order - 1`, for orders 0..=63.
#[inline]
pub(crate) fn mask(order: u32) -> u64 {
    debug_assert!(order <= MAX_ORDER);
    (1u64 << order) - 1
}

/// The slot of `index` in a node at `shift`.
#[inline]
pub(crate) fn offset_in(index: u64, shift: u32) -> usize {
    ((index >> shift) as usize) & (CHUNK_SIZE - 1)
}

/// Does a root at `shift` cover `index`? (A root covers `[0, 64 << shift)`.)
#[inline]
pub(crate) fn covers(shift: u32, index: u64) -> bool {
    shift + CHUNK_SHIFT >= 64 || index >> (shift + CHUNK_SHIFT) == 0
}

/// The first index covered by the node at `shift` on the path of `index`.
#[inline]
pub(crate) fn node_base(index: u64, shift: u32) -> u64 {
    if shift + CHUNK_SHIFT >= 64 {
        0
    } else {
        index & !((1u64 << (shift + CHUNK_SHIFT)) - 1)
    }
}

/// The shift of the node an order-`order` entry lives in.
#[inline]
pub(crate) fn shift_for_order(order: u32) -> u32 {
    order / CHUNK_SHIFT * CHUNK_SHIFT
}

/// The smallest shift whose root covers `index`.
fn min_shift(index: u64) -> u32 {
    let mut shift = 0;
    while !covers(shift, index) {
        shift += CHUNK_SHIFT;
    }
    shift
}

/// Checks a range given by a caller: order at most 63, index aligned to it.
pub(crate) fn check_range(index: u64, order: u32) -> Result<(), Error> {
    if order > MAX_ORDER {
        return Err(Error::OrderTooLarge { order });
    }
    if index & mask(order) != 0 {
        return Err(Error::Misaligned { index, order });
    }
    Ok(())
}

impl<P: Owner> XArray<P> {
    /// The node and canonical slot of the entry covering `index`, if any: the hot path of
    /// every load. The shift is tracked on the way down instead of read from each node, so
    /// a level costs one slot read. Context: read only, no allocation.
    #[inline]
    pub(crate) fn walk(&self, index: u64) -> Option<(NodeId, usize, u32)> {
        let mut id = self.head?;
        let mut node = self.nodes.get(id);
        let mut shift = node.shift();
        if !covers(shift, index) {
            return None;
        }
        loop {
            let off = offset_in(index, shift);
            let word = node.word(off);
            if entry::is_node(word) {
                id = entry::node_id(word);
                node = self.nodes.get(id);
                shift -= CHUNK_SHIFT;
                continue;
            }
            if word == entry::EMPTY {
                return None;
            }
            if entry::is_sibling(word) {
                return Some((id, entry::sibling_offset(word), shift));
            }
            return Some((id, off, shift));
        }
    }

    /// The entry covering `index` with its first index and order. Context: read only.
    pub(crate) fn locate(&self, index: u64) -> Option<Place> {
        let (id, off, shift) = self.walk(index)?;
        let node = self.nodes.get(id);
        let first = node_base(index, shift) + ((off as u64) << shift);
        let order = shift + node.span(off).trailing_zeros();
        Some(Place { node: id, off, first, order })
    }

    /// Is any part of `[index, index + 2^order)` covered by an entry of a larger order?
    /// Returns that entry's place. Context: read only.
    pub(crate) fn covering_larger(&self, index: u64, order: u32) -> Option<Place> {
        let place = self.locate(index)?;
        // Entries are aligned and disjoint, so a larger entry overlapping an aligned range
        // contains its first index.
        (place.order > order).then_some(place)
    }

    /// Makes the path for an order-`order` entry at `index` and returns the node and the
    /// first slot of its span: the check and the creation in one walk.
    ///
    /// Returns the covering entry instead when an entry of a larger order covers part of the
    /// range; then nothing was created. (A larger entry sits on the path above the target
    /// level, or spans the target slot. Both are met before the walk creates a node, because
    /// below a created node everything is empty; and growing the height never precedes one,
    /// because a root lower than the target level holds only smaller entries.)
    ///
    /// Context: allocates nodes.
    pub(crate) fn create_path(&mut self, index: u64, order: u32) -> Result<(NodeId, usize), Place> {
        let target = shift_for_order(order);
        let (mut id, mut created) = match self.head {
            None => {
                let root = self.alloc_node(target.max(min_shift(index)), NO_PARENT, 0);
                self.head = Some(root);
                (root, true)
            }
            Some(root) => {
                let new_root = self.expand(root, index, target);
                (new_root, new_root != root)
            }
        };
        // The shift is tracked on the way down, not read from each node: a node's header
        // and the slot read are different cache lines, and a sparse tree misses on both.
        let mut shift = self.nodes.get(id).shift();
        loop {
            let node = self.nodes.get(id);
            debug_assert_eq!(node.shift(), shift);
            let off = offset_in(index, shift);
            let covering = match node.slot(off) {
                Slot::Sibling(c) if shift > target || c < off => Some(c),
                Slot::Entry if shift > target || node.span(off) > 1 << (order - shift) => Some(off),
                _ => None,
            };
            if let Some(c) = covering {
                assert!(!created, "a covering entry below a created node");
                let first = node_base(index, shift) + ((c as u64) << shift);
                let order = shift + node.span(c).trailing_zeros();
                return Err(Place { node: id, off: c, first, order });
            }
            if shift == target {
                return Ok((id, off));
            }
            assert!(shift > target, "walked below the target level");
            id = match node.slot(off) {
                Slot::Node(child) => child,
                Slot::Empty => {
                    let child = self.alloc_node(shift - CHUNK_SHIFT, id, off);
                    self.nodes.get_mut(id).put_child(off, child);
                    created = true;
                    child
                }
                slot => panic!("xarray: {slot:?} above the target level"),
            };
            shift -= CHUNK_SHIFT;
        }
    }

    /// Adds levels above `root` until the root covers `index` and is at least at `shift`.
    fn expand(&mut self, mut root: NodeId, index: u64, shift: u32) -> NodeId {
        loop {
            let old = self.nodes.get(root);
            let old_shift = old.shift();
            if covers(old_shift, index) && old_shift >= shift {
                return root;
            }
            assert!(old_shift < MAX_SHIFT, "a root at the top shift covers everything");
            let marks: [bool; MARK_COUNT] = std::array::from_fn(|m| old.mark_bits(m) != 0);
            let new_root = self.alloc_node(old_shift + CHUNK_SHIFT, NO_PARENT, 0);
            let top = self.nodes.get_mut(new_root);
            top.put_child(0, root);
            for (mark, &set) in marks.iter().enumerate() {
                if set {
                    top.set_mark_bit(0, mark);
                }
            }
            let old = self.nodes.get_mut(root);
            old.parent = new_root;
            old.offset = 0;
            self.head = Some(new_root);
            root = new_root;
        }
    }

    pub(crate) fn alloc_node(&mut self, shift: u32, parent: NodeId, offset: usize) -> NodeId {
        self.stats.nodes_allocated += 1;
        let (id, from_spare) = self.nodes.alloc(shift, parent, offset);
        if from_spare {
            self.stats.nodes_from_reserve += 1;
        }
        id
    }

    fn free_node(&mut self, id: NodeId) {
        self.stats.nodes_freed += 1;
        self.nodes.free(id);
    }

    /// Takes the entry at `place` out of the tree, then frees the nodes that became empty and
    /// shrinks the tree. Context: frees nodes.
    pub(crate) fn remove_at(&mut self, place: Place) -> RawEntry<P> {
        let (raw, _span, marks) = self.nodes.get_mut(place.node).take_span(place.off);
        self.nr_entries -= 1;
        if marks != 0 {
            self.fix_marks_up(place.node);
        }
        self.delete_if_empty(place.node);
        raw
    }

    /// Frees `id` and its ancestors while they are empty, then shrinks the height.
    pub(crate) fn delete_if_empty(&mut self, mut id: NodeId) {
        loop {
            let node = self.nodes.get(id);
            if node.count() > 0 {
                break;
            }
            let (parent, off) = (node.parent, usize::from(node.offset));
            self.free_node(id);
            if parent == NO_PARENT {
                self.head = None;
                return;
            }
            self.nodes.get_mut(parent).clear_child(off);
            id = parent;
        }
        self.shrink();
    }

    /// While the root holds only a child in slot 0, make the child the root.
    pub(crate) fn shrink(&mut self) {
        while let Some(root) = self.head {
            let node = self.nodes.get(root);
            let Slot::Node(child) = node.slot(0) else { return };
            if node.count() != 1 {
                return;
            }
            self.nodes.get_mut(root).clear_child(0);
            self.free_node(root);
            let new_root = self.nodes.get_mut(child);
            new_root.parent = NO_PARENT;
            new_root.offset = 0;
            self.head = Some(child);
        }
    }

    /// Makes the mark bits of `id`'s ancestors agree with `id` (after bits changed in it).
    pub(crate) fn fix_marks_up(&mut self, id: NodeId) {
        for mark in 0..MARK_COUNT {
            let mut child = id;
            loop {
                let node = self.nodes.get(child);
                let (has, parent, off) =
                    (node.mark_bits(mark) != 0, node.parent, usize::from(node.offset));
                if parent == NO_PARENT {
                    break;
                }
                let above = self.nodes.get_mut(parent);
                if (above.mark_bits(mark) >> off) & 1 == u64::from(has) {
                    break;
                }
                if has {
                    above.set_mark_bit(off, mark);
                } else {
                    above.clear_mark_bit(off, mark);
                }
                child = parent;
            }
        }
    }

    /// Takes every entry out of the subtree at `id` (first index `base`), frees its nodes,
    /// and returns the union of the removed entries' marks. Context: frees nodes.
    pub(crate) fn drain_subtree(
        &mut self,
        id: NodeId,
        base: u64,
        replaced: &mut dyn FnMut(u64, u32, RawEntry<P>),
    ) -> u8 {
        let shift = self.nodes.get(id).shift();
        let mut marks = 0;
        for off in 0..CHUNK_SIZE {
            let first = base + ((off as u64) << shift);
            match self.nodes.get(id).slot(off) {
                Slot::Empty | Slot::Sibling(_) => {}
                Slot::Entry => {
                    let (raw, span, m) = self.nodes.get_mut(id).take_span(off);
                    self.nr_entries -= 1;
                    marks |= m;
                    replaced(first, shift + span.trailing_zeros(), raw);
                }
                Slot::Node(child) => {
                    marks |= self.drain_subtree(child, first, replaced);
                    self.nodes.get_mut(id).clear_child(off);
                }
            }
        }
        self.free_node(id);
        marks
    }
}
