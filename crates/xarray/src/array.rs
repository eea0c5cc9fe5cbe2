//! The [`XArray`] itself: loads, stores, inserts, erases, replacements, compare-and-exchange,
//! counts and memory accounting.
//!
//! Every writing function follows one shape: check the request without touching the tree
//! (range, value, covering entry), refuse with an [`Error`] if it fails (counted in
//! [`Stats`]; the caller's entry handed back in a [`Refused`]), and only then change the
//! tree. So a refusal never leaves half a change behind.
//!
//! Context for every function here: the caller holds whatever lock guards the array (the
//! kernel's `xa_lock`) — shared for `&self`, exclusive for `&mut self`. Nothing blocks.
//! Stores, inserts and splits may allocate nodes (the global allocator; `Stats` counts
//! them); erases free nodes.

use crate::entry::{Entry, EntryRef, RawEntry, MAX_VALUE};
use crate::error::{Error, Refused};
use crate::node::{NodeId, NodeReserve, Nodes, Slot, NO_PARENT};
use crate::tree::{check_range, node_base, Place};
use crate::Owner;
use std::fmt;
use std::ops::RangeInclusive;

/// A sparse array of `u64` keys to value entries and owned items of type `P`.
///
/// Lock coverage: every field is guarded by the caller's lock on the whole array (shared
/// for reads, exclusive for writes); the array takes no lock itself.
pub struct XArray<P: Owner> {
    /// The root node, or `None` when the array is empty.
    pub(crate) head: Option<NodeId>,
    /// Every node of the tree, by id.
    pub(crate) nodes: Nodes<P>,
    /// Entries stored (a multi-index entry counts once).
    pub(crate) nr_entries: u64,
    /// Event counters.
    pub(crate) stats: Stats,
}

/// Counters of the array's events: one per refusal reason, plus allocation and splits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Nodes ever allocated.
    pub nodes_allocated: u64,
    /// Nodes ever freed.
    pub nodes_freed: u64,
    /// Nodes taken from the spares a [`NodeReserve`] gave (the rest were allocated in the
    /// call: the fallback).
    pub nodes_from_reserve: u64,
    /// Successful splits.
    pub splits: u64,
    /// Refused: index not aligned to the order.
    pub refused_misaligned: u64,
    /// Refused: order above 63.
    pub refused_order: u64,
    /// Refused: value above 2^63 - 1.
    pub refused_value: u64,
    /// Refused: `insert` found an entry.
    pub refused_occupied: u64,
    /// Refused: a larger entry covers part of the range.
    pub refused_covered: u64,
    /// Refused: no entry at the index.
    pub refused_not_present: u64,
    /// Refused: `compare_exchange` found another entry.
    pub refused_mismatch: u64,
    /// Refused: a split to a larger order or to too many pieces.
    pub refused_split: u64,
}

impl<P: Owner> Default for XArray<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Owner> fmt::Debug for XArray<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XArray")
            .field("entries", &self.nr_entries)
            .field("nodes", &self.nodes.live())
            .finish()
    }
}

impl<P: Owner> XArray<P> {
    /// An empty array. Does not allocate.
    pub const fn new() -> Self {
        XArray {
            head: None,
            nodes: Nodes::new(),
            nr_entries: 0,
            stats: Stats {
                nodes_allocated: 0,
                nodes_freed: 0,
                nodes_from_reserve: 0,
                splits: 0,
                refused_misaligned: 0,
                refused_order: 0,
                refused_value: 0,
                refused_occupied: 0,
                refused_covered: 0,
                refused_not_present: 0,
                refused_mismatch: 0,
                refused_split: 0,
            },
        }
    }

    /// The entry at `index` (a multi-index entry is seen at every index it covers).
    #[inline]
    pub fn load(&self, index: u64) -> Option<EntryRef<'_, P::Target>> {
        let (id, off, _) = self.walk(index)?;
        Some(self.nodes.get(id).entry_ref(off))
    }

    /// The entry covering `index` with its first index and order.
    pub fn load_order(&self, index: u64) -> Option<(u64, u32, EntryRef<'_, P::Target>)> {
        let place = self.locate(index)?;
        Some((place.first, place.order, self.nodes.get(place.node).entry_ref(place.off)))
    }

    /// The order of the entry covering `index` (the kernel's `xa_get_order`), or `None` if
    /// there is none.
    pub fn get_order(&self, index: u64) -> Option<u32> {
        self.locate(index).map(|place| place.order)
    }

    /// Stores `entry` at `index` (order 0) and returns the entry it replaced.
    ///
    /// # Errors
    /// [`Error::Covered`] if a multi-index entry covers `index` (split it first, or erase
    /// it); [`Error::ValueTooLarge`]. The entry comes back in the [`Refused`].
    pub fn store(&mut self, index: u64, entry: Entry<P>) -> Result<Option<Entry<P>>, Refused<P>> {
        self.store_order(index, 0, entry)
    }

    /// Stores `entry` over `[index, index + 2^order)` and returns the entry that was at
    /// `index`, if the range held one starting there. Other entries inside the range are
    /// replaced and dropped: use [`XArray::store_order_with`] to receive them.
    ///
    /// # Errors
    /// As [`XArray::store_order_with`].
    pub fn store_order(
        &mut self,
        index: u64,
        order: u32,
        entry: Entry<P>,
    ) -> Result<Option<Entry<P>>, Refused<P>> {
        let mut at_index = None;
        self.store_order_with(index, order, entry, |first, _, old| {
            if first == index {
                at_index = Some(old);
            }
        })?;
        Ok(at_index)
    }

    /// Stores `entry` over `[index, index + 2^order)`, handing every replaced entry to
    /// `replaced(first_index, order, entry)`. The new entry keeps the union of the replaced
    /// entries' marks.
    ///
    /// # Errors
    /// [`Error::Misaligned`], [`Error::OrderTooLarge`], [`Error::ValueTooLarge`], and
    /// [`Error::Covered`] when a larger entry covers part of the range. The array is
    /// unchanged and the entry comes back in the [`Refused`].
    pub fn store_order_with(
        &mut self,
        index: u64,
        order: u32,
        entry: Entry<P>,
        mut replaced: impl FnMut(u64, u32, Entry<P>),
    ) -> Result<(), Refused<P>> {
        if let Err(error) = self.check_entry(index, order, &entry) {
            return Err(Refused::new(error, entry));
        }
        let raw = RawEntry::new(entry);
        self.store_raw(index, order, raw, &mut |first, order, old| {
            replaced(first, order, old.into_entry());
        })
        .map_err(|(error, raw)| Refused::new(error, raw.into_entry()))
    }

    /// Stores `entry` over `[index, index + 2^order)` only if no entry is there.
    ///
    /// # Errors
    /// [`Error::Occupied`] naming the first entry found, and the range errors of
    /// [`XArray::store_order_with`]. The array is unchanged; the entry comes back.
    pub fn insert(&mut self, index: u64, order: u32, entry: Entry<P>) -> Result<(), Refused<P>> {
        if let Err(error) = self.check_entry(index, order, &entry) {
            return Err(Refused::new(error, entry));
        }
        if let Some(place) = self.find_next(index, index + crate::tree::mask(order), None) {
            self.stats.refused_occupied += 1;
            let error = Error::Occupied { index: place.first, order: place.order };
            return Err(Refused::new(error, entry));
        }
        self.store_raw(index, order, RawEntry::new(entry), &mut |_, _, _| {
            unreachable!("insert checked the range is empty")
        })
        .map_err(|(error, raw)| Refused::new(error, raw.into_entry()))
    }

    /// Erases the entry covering `index` — all of it, if it is a multi-index entry (the
    /// kernel's rule: storing nothing into any index dissolves the tie) — and returns it.
    /// Frees the nodes that become empty and shrinks the tree.
    pub fn erase(&mut self, index: u64) -> Option<Entry<P>> {
        let place = self.locate(index)?;
        Some(self.remove_at(place).into_entry())
    }

    /// Erases every entry that intersects `range` (entries reaching outside it are erased
    /// whole), handing each to `erased(first_index, order, entry)`. Returns how many.
    pub fn erase_range(
        &mut self,
        range: RangeInclusive<u64>,
        mut erased: impl FnMut(u64, u32, Entry<P>),
    ) -> usize {
        let (start, end) = range.into_inner();
        let mut count = 0;
        let mut found = self.find_next(start, end, None);
        while let Some(place) = found {
            let node = self.nodes.get(place.node);
            let span = node.span(place.off);
            // The node outlives the removal unless this entry is all it holds, or it is the
            // root, which the shrink after a removal may free.
            let stays = node.count() > span && node.parent != NO_PARENT;
            let raw = self.remove_at(place);
            erased(place.first, place.order, raw.into_entry());
            count += 1;
            found = if stays {
                self.scan_after(place.node, place.off + span, place.last(), end, None)
            } else {
                let next = place.last().checked_add(1).filter(|&next| next <= end);
                next.and_then(|next| self.find_next(next, end, None))
            };
        }
        count
    }

    /// Replaces the entry covering `index` by `entry`, keeping its range, order and marks
    /// (eviction: a folio entry becomes a shadow of the same order). Returns the old entry.
    ///
    /// # Errors
    /// [`Error::NotPresent`] if nothing covers `index`; [`Error::ValueTooLarge`].
    pub fn replace(&mut self, index: u64, entry: Entry<P>) -> Result<Entry<P>, Refused<P>> {
        if let Err(error) = self.check_value(&entry) {
            return Err(Refused::new(error, entry));
        }
        let Some(place) = self.locate(index) else {
            self.stats.refused_not_present += 1;
            return Err(Refused::new(Error::NotPresent { index }, entry));
        };
        Ok(self.replace_at(place, RawEntry::new(entry)).into_entry())
    }

    /// If the entry covering `index` is `current` (values by value, items by pointer
    /// identity; `None` for no entry), replaces it by `new` — same range, order and marks;
    /// `None` erases it — and returns the old entry. With `current == None` and a `new`
    /// entry, stores `new` at `index` with order 0.
    ///
    /// # Errors
    /// [`Error::Mismatch`] if something else is there; [`Error::ValueTooLarge`]. The array
    /// is unchanged and `new` comes back in the [`Refused`].
    pub fn compare_exchange(
        &mut self,
        index: u64,
        current: Option<EntryRef<'_, P::Target>>,
        new: Option<Entry<P>>,
    ) -> Result<Option<Entry<P>>, Refused<P>> {
        if let Some(Err(error)) = new.as_ref().map(|e| self.check_value(e)) {
            return Err(Refused { error, entry: new });
        }
        let place = self.locate(index);
        let found = place.map(|p| self.nodes.get(p.node).word(p.off));
        let matches = match (found, current) {
            (None, None) => true,
            (Some(word), Some(expected)) => expected.matches_word(word),
            _ => false,
        };
        if !matches {
            self.stats.refused_mismatch += 1;
            return Err(Refused { error: Error::Mismatch { index }, entry: new });
        }
        let old = match (place, new) {
            (Some(place), Some(new)) => Some(self.replace_at(place, RawEntry::new(new))),
            (Some(place), None) => Some(self.remove_at(place)),
            (None, Some(new)) => {
                let stored = self.store_raw(index, 0, RawEntry::new(new), &mut |_, _, _| {
                    unreachable!("compare_exchange found the index empty")
                });
                if let Err((error, _raw)) = stored {
                    unreachable!("{error} at an empty index");
                }
                None
            }
            (None, None) => None,
        };
        Ok(old.map(RawEntry::into_entry))
    }

    /// Erases everything, dropping every item; frees every node.
    pub fn clear(&mut self) {
        self.stats.nodes_freed += self.nodes.live() as u64;
        // Dropping the arena drops each node, and each node drops the items it owns.
        self.nodes = Nodes::new();
        self.head = None;
        self.nr_entries = 0;
    }

    /// Entries stored; a multi-index entry counts once.
    pub fn len(&self) -> u64 {
        self.nr_entries
    }

    /// No entry stored (and so no node allocated).
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Nodes allocated now.
    pub fn node_count(&self) -> usize {
        self.nodes.live()
    }

    /// Bytes of the nodes allocated now (`node_count() * 544`).
    pub fn node_bytes(&self) -> usize {
        self.nodes.live() * std::mem::size_of::<crate::node::Node<P>>()
    }

    /// All memory the array holds: its nodes, the arena's id table and free list, and spare
    /// nodes. Items pointed to by item entries are the caller's and not counted.
    pub fn memory_bytes(&self) -> usize {
        self.node_bytes() + self.nodes.overhead_bytes() + std::mem::size_of::<Self>()
    }

    /// Takes the nodes of `reserve` as spares: the next node allocations of stores and
    /// splits use them instead of the allocator (the kernel's `xas_split_alloc`: allocate
    /// before taking the lock, split under it). Spares stay until used or [`XArray::clear`].
    ///
    /// Context: caller holds the lock; allocates only to grow the node id table (amortized
    /// doubling), so that placing the spares in the tree allocates nothing.
    pub fn refill(&mut self, reserve: NodeReserve<P>) {
        self.nodes.refill(reserve);
    }

    /// Spare nodes held (see [`XArray::refill`]).
    pub fn spare_nodes(&self) -> usize {
        self.nodes.spare()
    }

    /// The event counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Range and value checks, counted.
    pub(crate) fn check_entry(
        &mut self,
        index: u64,
        order: u32,
        entry: &Entry<P>,
    ) -> Result<(), Error> {
        if let Err(error) = check_range(index, order) {
            match error {
                Error::OrderTooLarge { .. } => self.stats.refused_order += 1,
                _ => self.stats.refused_misaligned += 1,
            }
            return Err(error);
        }
        self.check_value(entry)
    }

    fn check_value(&mut self, entry: &Entry<P>) -> Result<(), Error> {
        match *entry {
            Entry::Value(value) if value > MAX_VALUE => {
                self.stats.refused_value += 1;
                Err(Error::ValueTooLarge { value })
            }
            _ => Ok(()),
        }
    }

    /// Stores an entry whose range and value are checked, in one walk: makes the path (or
    /// refuses with [`Error::Covered`], giving the entry back, when a larger entry covers
    /// part of the range), hands back what the range held, writes the canonical slot and its
    /// siblings. Context: allocates nodes.
    pub(crate) fn store_raw(
        &mut self,
        index: u64,
        order: u32,
        raw: RawEntry<P>,
        replaced: &mut dyn FnMut(u64, u32, RawEntry<P>),
    ) -> Result<(), (Error, RawEntry<P>)> {
        let (id, off) = match self.create_path(index, order) {
            Ok(path) => path,
            Err(place) => {
                self.stats.refused_covered += 1;
                return Err((Error::Covered { index: place.first, order: place.order }, raw));
            }
        };
        let shift = self.nodes.get(id).shift();
        let span = 1usize << (order - shift);
        let base = node_base(index, shift);
        let mut marks = 0;
        for j in off..off + span {
            let first = base + ((j as u64) << shift);
            match self.nodes.get(id).slot(j) {
                Slot::Empty => {}
                Slot::Sibling(canonical) => {
                    // Siblings of entries inside the range went with their canonical slot.
                    panic!("xarray: entry at slot {canonical} covers the range (unchecked)");
                }
                Slot::Entry => {
                    let (old, old_span, m) = self.nodes.get_mut(id).take_span(j);
                    assert!(j + old_span <= off + span, "a larger entry covers the range");
                    self.nr_entries -= 1;
                    marks |= m;
                    replaced(first, shift + old_span.trailing_zeros(), old);
                }
                Slot::Node(child) => {
                    marks |= self.drain_subtree(child, first, replaced);
                    self.nodes.get_mut(id).clear_child(j);
                }
            }
        }
        let node = self.nodes.get_mut(id);
        node.store_span(off, span, raw);
        node.set_marks_at(off, marks);
        self.nr_entries += 1;
        // Unmarked replaced entries leave every summary bit above as it was.
        if marks != 0 {
            self.fix_marks_up(id);
        }
        Ok(())
    }

    /// Swaps the entry at `place` for `raw`, keeping span and marks.
    pub(crate) fn replace_at(&mut self, place: Place, raw: RawEntry<P>) -> RawEntry<P> {
        let node = self.nodes.get_mut(place.node);
        let (old, span, marks) = node.take_span(place.off);
        node.store_span(place.off, span, raw);
        node.set_marks_at(place.off, marks);
        old
    }
}
