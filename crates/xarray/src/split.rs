//! Splitting a multi-index entry into entries of a smaller order (the kernel's `xas_split`).
//!
//! An order-`o` entry at shift `s` spans `2^(o - s)` slots. Split to order `n`:
//! - if `n` lives at the same shift (`n >= s`), the span is rewritten in place as
//!   `2^(o - n)` smaller spans;
//! - otherwise every slot of the span becomes a child node, filled (one or two levels down)
//!   with order-`n` entries.
//!
//! ```text
//!   before (shift 6):   | E | s | s | s | s | s | s | s |        one order-9 entry
//!   split to order 7:   | E | s | E | s | E | s | E | s |        four order-7 entries
//!   split to order 0:   | n | n | n | n | n | n | n | n |        8 leaves x 64 entries
//! ```
//!
//! Every piece carries the original's value, or a clone of its owner (an `Arc` clone shares
//! the pointee, as the kernel stores one pointer in every piece), and the original's marks.
//! Allocation: [`XArray::split_nodes_needed`] tells the node count beforehand (8 for a
//! 2 MiB folio split to pages; at most `32 * 65` within `MAX_SPLIT_ORDERS`). The nodes come
//! from the spares a [`NodeReserve`](crate::NodeReserve) gave ([`XArray::refill`]), else
//! from the allocator inside the call.

use crate::entry::RawEntry;
use crate::error::Error;
use crate::node::{NodeId, CHUNK_SHIFT, CHUNK_SIZE};
use crate::tree::{shift_for_order, Place};
use crate::{Owner, XArray, MAX_ORDER, MAX_SPLIT_ORDERS};

impl<P: Owner + Clone> XArray<P> {
    /// Splits the entry covering `index` into entries of order `new_order` covering the
    /// same range. Splitting to the entry's own order does nothing.
    ///
    /// # Errors
    /// [`Error::NotPresent`]; [`Error::SplitToLarger`] if `new_order` exceeds the entry's
    /// order; [`Error::SplitTooLarge`] if the split would make more than
    /// `2^MAX_SPLIT_ORDERS` pieces. The array is unchanged.
    ///
    /// Context: caller holds the lock; takes nodes from the spares, else allocates them
    /// (see [`XArray::split_nodes_needed`], [`XArray::refill`]).
    pub fn split(&mut self, index: u64, new_order: u32) -> Result<(), Error> {
        let Some(place) = self.locate(index) else {
            self.stats.refused_not_present += 1;
            return Err(Error::NotPresent { index });
        };
        self.check_split(place, new_order)?;
        if new_order < place.order {
            self.split_at(place, new_order);
        }
        Ok(())
    }

    pub(crate) fn check_split(&mut self, place: Place, new_order: u32) -> Result<(), Error> {
        let order = place.order;
        if new_order > order || new_order > MAX_ORDER {
            self.stats.refused_split += 1;
            return Err(Error::SplitToLarger { order, new_order });
        }
        if order - new_order > MAX_SPLIT_ORDERS {
            self.stats.refused_split += 1;
            return Err(Error::SplitTooLarge { order, new_order });
        }
        Ok(())
    }

    /// Splits a checked entry.
    pub(crate) fn split_at(&mut self, place: Place, new_order: u32) {
        let shift = self.nodes.get(place.node).shift();
        let new_shift = shift_for_order(new_order);
        let (original, span, marks) = self.nodes.get_mut(place.node).take_span(place.off);
        if new_shift == shift {
            let piece = 1usize << (new_order - shift);
            let node = self.nodes.get_mut(place.node);
            for off in (place.off..place.off + span).step_by(piece) {
                node.store_span(off, piece, original.duplicate());
                node.set_marks_at(off, marks);
            }
        } else {
            for off in place.off..place.off + span {
                let child =
                    self.build(shift - CHUNK_SHIFT, place.node, off, new_order, &original, marks);
                let node = self.nodes.get_mut(place.node);
                node.put_child(off, child);
                node.set_marks_at(off, marks);
            }
        }
        drop(original);
        self.nr_entries += (1u64 << (place.order - new_order)) - 1;
        self.stats.splits += 1;
        // An entry in the root's slot 0 alone has become a child: the root may now shrink.
        self.shrink();
    }

    /// A full node at `shift` holding pieces of `original`, or children that do.
    fn build(
        &mut self,
        shift: u32,
        parent: NodeId,
        offset: usize,
        new_order: u32,
        original: &RawEntry<P>,
        marks: u8,
    ) -> NodeId {
        let id = self.alloc_node(shift, parent, offset);
        let new_shift = shift_for_order(new_order);
        if shift == new_shift {
            let piece = 1usize << (new_order - shift);
            let node = self.nodes.get_mut(id);
            for off in (0..CHUNK_SIZE).step_by(piece) {
                node.store_span(off, piece, original.duplicate());
                node.set_marks_at(off, marks);
            }
        } else {
            for off in 0..CHUNK_SIZE {
                let child = self.build(shift - CHUNK_SHIFT, id, off, new_order, original, marks);
                let node = self.nodes.get_mut(id);
                node.put_child(off, child);
                node.set_marks_at(off, marks);
            }
        }
        id
    }
}

impl<P: Owner> XArray<P> {
    /// How many nodes splitting an order-`order` entry into order `new_order` allocates
    /// (the kernel's `xas_split_alloc` sizing), so a caller can check its budget first.
    pub fn split_nodes_needed(order: u32, new_order: u32) -> usize {
        if new_order >= order || order > MAX_ORDER {
            return 0;
        }
        let shift = shift_for_order(order);
        let new_shift = shift_for_order(new_order);
        let slots = 1usize << (order - shift);
        // Each slot of the entry becomes a subtree with one node per level down to
        // new_shift: 1 + 64 + 64^2 ... nodes.
        let levels = (shift - new_shift) / CHUNK_SHIFT;
        let per_slot: usize = (0..levels).map(|level| CHUNK_SIZE.pow(level)).sum();
        slots * per_slot
    }
}
