//! The cursor (the kernel's `xa_state`): one range of the array, held under the caller's
//! exclusive lock, on which a sequence of steps runs with nothing in between.
//!
//! The seed patch ("mm/filemap: optimize filemap folio adding") turned the page cache's
//! folio add into one walk: under one lock hold, find the conflicts over the target range,
//! read the order of a shadow found there (`xas_get_order`), split it only when it is larger
//! than the new folio (`xas_split`), and store. The swap cache and the region page tables add
//! folios the same way. A [`Cursor`] borrows the array mutably, so no other reader or writer
//! can come between its steps, and each step is one descent of at most 11 levels.
//!
//! # The one-walk folio add
//!
//! ```
//! use std::sync::Arc;
//! use xarray::{Entry, EntryRef, Error, XArray};
//!
//! struct Folio { id: u64 }
//!
//! /// Adds `folio` (order `order`) at `index`. Fails if any folio is in the range; returns
//! /// the shadow found there (value and order) for the refault logic.
//! fn add_folio(
//!     xa: &mut XArray<Arc<Folio>>,
//!     index: u64,
//!     order: u32,
//!     folio: Arc<Folio>,
//! ) -> Result<Option<(u64, u32)>, Error> {
//!     let mut xas = xa.cursor(index, order)?;
//!     let mut shadow = None;
//!     while let Some((first, found_order, entry)) = xas.next_conflict() {
//!         match entry {
//!             EntryRef::Item(_) => {
//!                 return Err(Error::Occupied { index: first, order: found_order });
//!             }
//!             EntryRef::Value(value) => shadow = shadow.or(Some((value, found_order))),
//!         }
//!     }
//!     if shadow.is_some_and(|(_, found_order)| found_order > order) {
//!         xas.split()?; // the larger shadow becomes shadows of the folio's order
//!     }
//!     xas.store(Entry::Item(folio)).map_err(|refused| refused.error)?;
//!     Ok(shadow)
//! }
//!
//! let mut xa = XArray::new();
//! xa.store_order(512, 9, Entry::Value(77)).unwrap(); // a 2 MiB shadow
//! let shadow = add_folio(&mut xa, 520, 3, Arc::new(Folio { id: 1 })).unwrap();
//! assert_eq!(shadow, Some((77, 9)));
//! assert_eq!(xa.load_order(521).map(|(first, order, _)| (first, order)), Some((520, 3)));
//! assert_eq!(xa.load(512).and_then(|e| e.value()), Some(77)); // the rest stays a shadow
//! assert!(add_folio(&mut xa, 512, 9, Arc::new(Folio { id: 2 })).is_err());
//! xa.check_invariants();
//! ```

use crate::entry::{Entry, EntryRef};
use crate::error::{Error, Refused};
use crate::tree::{check_range, mask};
use crate::{Owner, XArray};

/// A range `[index, index + 2^order)` of an array, with a position for the conflict scan.
///
/// Context: holds `&mut XArray`, i.e. the caller's exclusive lock, for its whole life.
pub struct Cursor<'a, P: Owner> {
    xa: &'a mut XArray<P>,
    index: u64,
    order: u32,
    /// Where the conflict scan resumes; `None` once it has passed the range.
    next: Option<u64>,
}

impl<P: Owner> XArray<P> {
    /// A cursor on `[index, index + 2^order)` (the kernel's `XA_STATE_ORDER`).
    ///
    /// # Errors
    /// [`Error::Misaligned`], [`Error::OrderTooLarge`] (counted).
    pub fn cursor(&mut self, index: u64, order: u32) -> Result<Cursor<'_, P>, Error> {
        self.check_entry(index, order, &Entry::Value(0))?;
        Ok(Cursor { xa: self, index, order, next: Some(index) })
    }
}

impl<P: Owner> Cursor<'_, P> {
    /// First index of the range.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Order of the range.
    pub fn order(&self) -> u32 {
        self.order
    }

    /// Last index of the range.
    pub fn last(&self) -> u64 {
        self.index + mask(self.order)
    }

    /// The array, for reads between steps.
    pub fn array(&self) -> &XArray<P> {
        self.xa
    }

    /// Moves to another range and restarts the conflict scan (`xas_set_order`).
    ///
    /// # Errors
    /// [`Error::Misaligned`], [`Error::OrderTooLarge`]; the cursor is unchanged.
    pub fn set_range(&mut self, index: u64, order: u32) -> Result<(), Error> {
        check_range(index, order)?;
        self.index = index;
        self.order = order;
        self.next = Some(index);
        Ok(())
    }

    /// The entry covering the first index of the range (`xas_load`).
    pub fn load(&self) -> Option<EntryRef<'_, P::Target>> {
        self.xa.load(self.index)
    }

    /// The order of the entry covering the first index (`xas_get_order`).
    pub fn get_order(&self) -> Option<u32> {
        self.xa.get_order(self.index)
    }

    /// The next entry intersecting the range, as `(first_index, order, entry)`
    /// (`xas_find_conflict`). A larger entry covering the range is reported once, with its
    /// own first index and order.
    pub fn next_conflict(&mut self) -> Option<(u64, u32, EntryRef<'_, P::Target>)> {
        let start = self.next?;
        let Some(place) = self.xa.find_next(start, self.last(), None) else {
            self.next = None;
            return None;
        };
        self.next = place.last().checked_add(1).filter(|&next| next <= self.last());
        let entry = self.xa.nodes.get(place.node).entry_ref(place.off);
        Some((place.first, place.order, entry))
    }

    /// Restarts the conflict scan at the first index.
    pub fn reset_conflicts(&mut self) {
        self.next = Some(self.index);
    }

    /// If an entry larger than the range covers it, splits that entry into entries of the
    /// range's order (`xas_split`); otherwise does nothing. Restarts the conflict scan.
    ///
    /// # Errors
    /// [`Error::SplitTooLarge`] when the covering entry is more than `2^MAX_SPLIT_ORDERS`
    /// times larger; the array is unchanged. Context: takes nodes from the spares a
    /// [`NodeReserve`](crate::NodeReserve) gave, else allocates them.
    pub fn split(&mut self) -> Result<(), Error>
    where
        P: Clone,
    {
        self.next = Some(self.index);
        let Some(place) = self.xa.covering_larger(self.index, self.order) else {
            return Ok(());
        };
        self.xa.check_split(place, self.order)?;
        self.xa.split_at(place, self.order);
        Ok(())
    }

    /// Stores `entry` over the range and returns the entry that began at its first index;
    /// other entries inside are dropped (see [`XArray::store_order`]).
    ///
    /// # Errors
    /// [`Error::Covered`] if a larger entry still covers the range (call [`Cursor::split`]
    /// first); [`Error::ValueTooLarge`]. The entry comes back.
    pub fn store(&mut self, entry: Entry<P>) -> Result<Option<Entry<P>>, Refused<P>> {
        self.next = Some(self.index);
        self.xa.store_order(self.index, self.order, entry)
    }

    /// Stores `entry` over the range, handing every replaced entry to `replaced`.
    ///
    /// # Errors
    /// As [`Cursor::store`].
    pub fn store_with(
        &mut self,
        entry: Entry<P>,
        replaced: impl FnMut(u64, u32, Entry<P>),
    ) -> Result<(), Refused<P>> {
        self.next = Some(self.index);
        self.xa.store_order_with(self.index, self.order, entry, replaced)
    }

    /// Erases every entry intersecting the range (whole, even where it reaches outside),
    /// handing each to `erased`. Returns how many.
    pub fn erase(&mut self, erased: impl FnMut(u64, u32, Entry<P>)) -> usize {
        self.next = Some(self.index);
        self.xa.erase_range(self.index..=self.last(), erased)
    }

    /// Replaces the entry covering the first index, keeping its order and marks.
    ///
    /// # Errors
    /// As [`XArray::replace`].
    pub fn replace(&mut self, entry: Entry<P>) -> Result<Entry<P>, Refused<P>> {
        self.xa.replace(self.index, entry)
    }
}
