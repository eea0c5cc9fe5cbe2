//! Search: the next entry in a range, optionally carrying a mark (`xas_find`,
//! `xas_find_marked`), the iterators built on it, and the mark operations.
//!
//! Marks live in one u64 bitmap per mark per node. On a leaf-level slot the bit belongs to
//! the canonical slot of an entry; on a slot that points to a child it says "some entry
//! below is marked". So a marked search skips every subtree whose bit is clear, and setting
//! or clearing a mark walks up only while the summary bits change.
//!
//! A search from `start` first looks at the entry covering `start` (which may begin before
//! it: a multi-index entry is reported with its own first index), then scans forward: within
//! a node, to the next occupied (or marked) slot; past a node's end, up to the parent's next
//! slot; into a child, down. Each step is O(1) except the climbs, so iterating `n` entries
//! costs O(n + nodes visited). An iterator whose next slot holds an entry (a dense run, such
//! as a folio's slots) takes it without a search: a walk of 16 dense entries costs 71 ns (the
//! criterion bench `xarray_iter_range_16_dense_64k`, docs/benchmarks.md).

use crate::entry::EntryRef;
use crate::node::{NodeId, Slot, CHUNK_SHIFT, CHUNK_SIZE, NO_PARENT};
use crate::tree::{covers, mask, node_base, offset_in, Place};
use crate::{Mark, Owner, XArray};
use std::ops::RangeInclusive;

impl<P: Owner> XArray<P> {
    /// The first entry intersecting `[start, end]`, carrying `mark` if given.
    pub(crate) fn find_next(&self, start: u64, end: u64, mark: Option<usize>) -> Option<Place> {
        if start > end {
            return None;
        }
        let mut start = start;
        if let Some(place) = self.locate(start) {
            let bits = mark.map(|m| self.nodes.get(place.node).mark_bits(m));
            if bits.is_none_or(|bits| (bits >> place.off) & 1 == 1) {
                return Some(place);
            }
            if place.last() >= end {
                return None;
            }
            // The entry after this one starts exactly at its end: entries are disjoint.
            start = place.last() + 1;
        }
        self.scan(start, end, mark)
    }

    /// The first entry whose first index lies in `[start, end]`, given that no entry covers
    /// `start` from before it.
    fn scan(&self, start: u64, end: u64, mark: Option<usize>) -> Option<Place> {
        let id = self.head?;
        let shift = self.nodes.get(id).shift();
        if !covers(shift, start) {
            return None;
        }
        self.scan_from(id, offset_in(start, shift), start, end, mark)
    }

    /// The first entry whose first index lies in `(last, end]`, where an entry ending at
    /// `last` had its last slot at `next_off - 1` of node `id`: the search goes on from that
    /// node instead of walking down from the root, so a run of entries costs one walk per
    /// node, not one per entry (a folio's slots, say). Node `id` must still be in the tree.
    pub(crate) fn scan_after(
        &self,
        id: NodeId,
        next_off: usize,
        last: u64,
        end: u64,
        mark: Option<usize>,
    ) -> Option<Place> {
        let start = last.checked_add(1).filter(|&start| start <= end)?;
        let (id, off, index) =
            if next_off < CHUNK_SIZE { (id, next_off, start) } else { self.climb(id, last)? };
        if index > end {
            return None;
        }
        self.scan_from(id, off, index, end, mark)
    }

    /// [`XArray::scan`] from slot `off` of node `id`, which holds `index` (the lowest index
    /// still to look at).
    fn scan_from(
        &self,
        mut id: NodeId,
        mut off: usize,
        start: u64,
        end: u64,
        mark: Option<usize>,
    ) -> Option<Place> {
        let mut index = start;
        loop {
            let node = self.nodes.get(id);
            let shift = node.shift();
            let found = match mark {
                Some(m) => {
                    let bits = node.mark_bits(m) & (u64::MAX << off);
                    (bits != 0).then(|| bits.trailing_zeros() as usize)
                }
                None => node.next_occupied(off),
            };
            let Some(at) = found else {
                (id, off, index) = self.climb(id, index)?;
                if index > end {
                    return None;
                }
                continue;
            };
            if at > off {
                index = node_base(index, shift) + ((at as u64) << shift);
                if index > end {
                    return None;
                }
            }
            match node.slot(at) {
                Slot::Node(child) => {
                    id = child;
                    off = offset_in(index, shift - CHUNK_SHIFT);
                }
                Slot::Entry => {
                    let first = node_base(index, shift) + ((at as u64) << shift);
                    debug_assert!(first >= start, "scan met an entry covering its start");
                    let order = shift + node.span(at).trailing_zeros();
                    return Some(Place { node: id, off: at, first, order });
                }
                slot => panic!("xarray: scan stopped on {slot:?}"),
            }
        }
    }

    /// From the end of node `id` (which contains `index`), up to the first ancestor with a
    /// slot after ours: returns that ancestor, the slot, and the slot's first index.
    fn climb(&self, mut id: NodeId, index: u64) -> Option<(NodeId, usize, u64)> {
        loop {
            let node = self.nodes.get(id);
            if node.parent == NO_PARENT {
                return None;
            }
            let next = usize::from(node.offset) + 1;
            id = node.parent;
            if next < CHUNK_SIZE {
                let shift = self.nodes.get(id).shift();
                return Some((id, next, node_base(index, shift) + ((next as u64) << shift)));
            }
        }
    }

    /// Every entry intersecting `range`, in index order, each once as `(first_index, order,
    /// entry)` (a multi-index entry may begin before `range.start()`).
    pub fn iter_range(&self, range: RangeInclusive<u64>) -> Iter<'_, P> {
        let (start, end) = range.into_inner();
        Iter { xa: self, next: (start <= end).then_some(start), end, mark: None, after: None }
    }

    /// Every entry, in index order.
    pub fn iter(&self) -> Iter<'_, P> {
        self.iter_range(0..=u64::MAX)
    }

    /// Every entry carrying `mark` that intersects `range`, in index order.
    pub fn iter_marked(&self, range: RangeInclusive<u64>, mark: Mark) -> Iter<'_, P> {
        let (start, end) = range.into_inner();
        let next = (start <= end).then_some(start);
        Iter { xa: self, next, end, mark: Some(mark.bit()), after: None }
    }

    /// The first entry carrying `mark` that intersects `[start, end]` (`xa_find` with a mark).
    pub fn find_marked(
        &self,
        start: u64,
        end: u64,
        mark: Mark,
    ) -> Option<(u64, u32, EntryRef<'_, P::Target>)> {
        let place = self.find_next(start, end, Some(mark.bit()))?;
        Some((place.first, place.order, self.nodes.get(place.node).entry_ref(place.off)))
    }

    /// The first entry intersecting `[start, end]`.
    pub fn find(&self, start: u64, end: u64) -> Option<(u64, u32, EntryRef<'_, P::Target>)> {
        let place = self.find_next(start, end, None)?;
        Some((place.first, place.order, self.nodes.get(place.node).entry_ref(place.off)))
    }

    /// Sets `mark` on the entry covering `index`. Returns false (and does nothing) if there
    /// is none.
    pub fn set_mark(&mut self, index: u64, mark: Mark) -> bool {
        let Some(place) = self.locate(index) else { return false };
        self.nodes.get_mut(place.node).set_mark_bit(place.off, mark.bit());
        self.fix_marks_up(place.node);
        true
    }

    /// Clears `mark` on the entry covering `index`. Returns false if there is no entry.
    pub fn clear_mark(&mut self, index: u64, mark: Mark) -> bool {
        let Some(place) = self.locate(index) else { return false };
        self.nodes.get_mut(place.node).clear_mark_bit(place.off, mark.bit());
        self.fix_marks_up(place.node);
        true
    }

    /// Does the entry covering `index` carry `mark`? False if there is no entry.
    pub fn get_mark(&self, index: u64, mark: Mark) -> bool {
        self.locate(index).is_some_and(|place| {
            (self.nodes.get(place.node).mark_bits(mark.bit()) >> place.off) & 1 == 1
        })
    }
}

/// An iterator over the entries of a range: `(first_index, order, entry)`.
pub struct Iter<'a, P: Owner> {
    xa: &'a XArray<P>,
    next: Option<u64>,
    end: u64,
    mark: Option<usize>,
    /// Where the last entry ended: its node and the slot after it (the search goes on from
    /// there: [`XArray::scan_after`]).
    after: Option<(NodeId, usize)>,
}

impl<'a, P: Owner> Iterator for Iter<'a, P> {
    type Item = (u64, u32, EntryRef<'a, P::Target>);

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.next?;
        if let (Some((id, off @ 0..CHUNK_SIZE)), None) = (self.after, self.mark) {
            // The slot right after the last entry begins at `start` (`scan_after`'s
            // contract): when it holds an entry, that is the next one, no scan needed (a
            // dense run: a folio's slots).
            let node = self.xa.nodes.get(id);
            if node.slot(off) == Slot::Entry {
                let span = node.span(off);
                let order = node.shift() + span.trailing_zeros();
                let last = start + mask(order);
                self.next = last.checked_add(1).filter(|&next| next <= self.end);
                self.after = Some((id, off + span));
                return Some((start, order, node.entry_ref(off)));
            }
        }
        let found = match self.after {
            Some((id, next_off)) => {
                self.xa.scan_after(id, next_off, start - 1, self.end, self.mark)
            }
            None => self.xa.find_next(start, self.end, self.mark),
        };
        let Some(place) = found else {
            self.next = None;
            return None;
        };
        self.next = place.last().checked_add(1).filter(|&next| next <= self.end);
        let node = self.xa.nodes.get(place.node);
        self.after = Some((place.node, place.off + node.span(place.off)));
        Some((place.first, place.order, node.entry_ref(place.off)))
    }
}
