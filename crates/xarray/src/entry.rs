//! Entries: what one slot word of the XArray holds, and who owns it.
//!
//! # The encoding (one machine word per slot, after `include/linux/xarray.h`)
//!
//! The bottom bits of a slot word say how the rest is read. This is the only place the
//! encoding is written down; every other module asks the helpers below.
//!
//! ```text
//!   bit  63 ............................................ 3   2   1   0
//!        0 ............................................. 0   0   0   0   empty
//!        pointer to an owned item (P::Target, aligned >= 4) ..  0   0   item entry
//!        value v (63 bits) ...................................... 1   value entry, v << 1 | 1
//!        node id (index into the node arena) ......... 0   1   0   internal: node
//!        offset of the canonical slot (0..64) ........ 1   1   0   internal: sibling
//! ```
//!
//! - **Item entries** own one `P` (a `Box<T>`, an `Arc<T>`, ...), turned into a raw pointer by
//!   [`Owner::into_raw`]. The pointee must be aligned to at least 4 so the low two bits are
//!   free; that is asserted at compile time for every `P` the array is used with.
//! - **Value entries** are small integers sharing the slot space (shadows, swap entries), up
//!   to [`MAX_VALUE`] = 2^63 - 1 like the kernel's `xa_mk_value`.
//! - **Internal entries** are never visible to users. A node entry names a child node; nodes
//!   live in an arena owned by the array and are named by a 32-bit id instead of an address,
//!   so the tree walks need no `unsafe` (a stale id is a bug that panics, never a
//!   use-after-free). A sibling entry fills the extra slots of a multi-index entry and holds
//!   the offset of its canonical slot, exactly as the kernel's `xa_mk_sibling`.
//!
//! # Ownership
//!
//! An item word owns its `P`: it is created from an owned [`Entry`] and turned back into one
//! exactly once. [`RawEntry`] is that linear token: it is not `Copy`, it drops its `P` when
//! dropped, and the node module is the only code that turns slot words back into
//! `RawEntry`s. Sibling slots never own anything.
//!
//! This is a leaf module: `unsafe` is allowed here (pointer round trips of [`Owner`]) and
//! nowhere above it.

#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// A slot word (see the module documentation for the encoding).
pub(crate) type Word = usize;

/// The largest value a value entry can hold: 63 bits, like the kernel's `xa_mk_value`.
pub const MAX_VALUE: u64 = (1 << 63) - 1;

// Value entries keep 63 bits and item pointers lose their low 2 bits: this needs 64-bit
// words. The swap code this serves is 64-bit only, as the kernel's large folios are.
const _: () = assert!(usize::BITS == 64, "slot words must be 64 bits");
const _: () = assert!(MAX_VALUE << 1 >> 1 == MAX_VALUE, "a value survives the tag shift");

const TAG_VALUE: Word = 0b1;
const TAG_INTERNAL: Word = 0b10;
const TAG_NODE: Word = 0b010;
const TAG_SIBLING: Word = 0b110;

pub(crate) const EMPTY: Word = 0;

/// Is this word an entry a user stored (item or value), as opposed to empty or internal?
#[inline]
pub(crate) fn is_entry(word: Word) -> bool {
    word != EMPTY && word & 0b11 != TAG_INTERNAL
}

#[inline]
pub(crate) fn is_value(word: Word) -> bool {
    word & TAG_VALUE == TAG_VALUE
}

#[inline]
pub(crate) fn is_item(word: Word) -> bool {
    word != EMPTY && word & 0b11 == 0
}

#[inline]
pub(crate) fn is_node(word: Word) -> bool {
    word & 0b111 == TAG_NODE
}

#[inline]
pub(crate) fn is_sibling(word: Word) -> bool {
    word & 0b111 == TAG_SIBLING
}

#[inline]
pub(crate) fn mk_node(id: u32) -> Word {
    ((id as Word) << 3) | TAG_NODE
}

#[inline]
pub(crate) fn node_id(word: Word) -> u32 {
    debug_assert!(is_node(word));
    (word >> 3) as u32
}

#[inline]
pub(crate) fn mk_sibling(canonical: usize) -> Word {
    debug_assert!(canonical < 64);
    (canonical << 3) | TAG_SIBLING
}

#[inline]
pub(crate) fn sibling_offset(word: Word) -> usize {
    debug_assert!(is_sibling(word));
    word >> 3
}

#[inline]
fn mk_value(value: u64) -> Word {
    assert!(value <= MAX_VALUE, "value entry {value} exceeds 63 bits");
    ((value as Word) << 1) | TAG_VALUE
}

#[inline]
fn value_of(word: Word) -> u64 {
    debug_assert!(is_value(word));
    (word >> 1) as u64
}

/// A pointer-like owner of the items an array stores: `Box<T>`, `Arc<T>`, or [`NoItems`].
///
/// # Safety
///
/// An implementation promises:
/// 1. `into_raw` returns a non-null pointer that is valid for shared reads as
///    `&Self::Target` until `from_raw` is called with it, and nothing mutates the pointee
///    through another path while the owner is in raw form;
/// 2. `from_raw(into_raw(p))` gives back an owner equivalent to `p` (same pointee);
/// 3. moving the raw pointer to another thread is as safe as moving `Self`.
///
/// The array adds the alignment requirement itself, asserted at compile time: an item type
/// aligned to less than 4 does not build.
///
/// ```compile_fail
/// let mut xa = xarray::XArray::<Box<u8>>::new();
/// let _ = xa.store(0, xarray::Entry::Item(Box::new(1u8))); // u8 leaves no tag bits
/// ```
///
/// ```
/// let mut xa = xarray::XArray::<Box<u32>>::new();
/// let _ = xa.store(0, xarray::Entry::Item(Box::new(1u32)));
/// ```
pub unsafe trait Owner: Sized {
    /// What an item entry points to; loads hand out `&Target`.
    type Target;

    /// Gives up ownership, returning the pointer.
    fn into_raw(self) -> *const Self::Target;

    /// Takes ownership back.
    ///
    /// # Safety
    ///
    /// `ptr` came from `into_raw` of this type and has not been taken back since.
    unsafe fn from_raw(ptr: *const Self::Target) -> Self;
}

// SAFETY: (1) `Box::into_raw` gives a non-null, aligned, uniquely owned pointer, valid until
// `Box::from_raw`; the array hands out only shared references to it. (2) `Box::from_raw`
// is the documented inverse. (3) `Box<T>` is `Send` exactly when `T` is.
unsafe impl<T> Owner for Box<T> {
    type Target = T;

    fn into_raw(self) -> *const T {
        Box::into_raw(self)
    }

    /// # Safety
    ///
    /// As [`Owner::from_raw`]: `ptr` came from `into_raw` and is taken back once.
    unsafe fn from_raw(ptr: *const T) -> Self {
        // SAFETY: the caller promises `ptr` came from `Box::into_raw` and is taken back once.
        unsafe { Box::from_raw(ptr.cast_mut()) }
    }
}

// SAFETY: (1) `Arc::into_raw` gives a non-null pointer to the shared value, valid while this
// strong count is held; `Arc` never hands out `&mut T` while other owners exist. (2)
// `Arc::from_raw` is the documented inverse. (3) `Arc<T>` is `Send` when `T: Send + Sync`.
unsafe impl<T> Owner for Arc<T> {
    type Target = T;

    fn into_raw(self) -> *const T {
        Arc::into_raw(self)
    }

    /// # Safety
    ///
    /// As [`Owner::from_raw`]: `ptr` came from `into_raw` and is taken back once.
    unsafe fn from_raw(ptr: *const T) -> Self {
        // SAFETY: the caller promises `ptr` came from `Arc::into_raw` and is taken back once.
        unsafe { Arc::from_raw(ptr) }
    }
}

/// The owner type of an array that holds value entries only (a region's page table): no
/// item can be constructed, so no entry ever allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoItems {}

/// The target of [`NoItems`]: uninhabited, and aligned so the tagging assertion holds.
#[repr(align(8))]
#[derive(Debug)]
pub struct NoItem {
    never: std::convert::Infallible,
}

impl NoItem {
    /// There is no `NoItem`; this proves it to the compiler.
    pub fn absurd(&self) -> ! {
        match self.never {}
    }
}

// SAFETY: `NoItems` is uninhabited, so `into_raw` is never called and no pointer ever
// exists: (1)-(3) hold vacuously.
unsafe impl Owner for NoItems {
    type Target = NoItem;

    fn into_raw(self) -> *const NoItem {
        match self {}
    }

    /// # Safety
    ///
    /// Cannot be met: no pointer of this type is ever made.
    unsafe fn from_raw(_ptr: *const NoItem) -> Self {
        // The contract says `_ptr` came from `into_raw`, which cannot run.
        unreachable!("an array of NoItems never holds an item")
    }
}

/// An owned entry, given to stores and handed back by erases and replacements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry<P> {
    /// A value entry: at most [`MAX_VALUE`].
    Value(u64),
    /// An owned item.
    Item(P),
}

/// A borrowed view of an entry, valid while the array is borrowed.
#[derive(Debug)]
pub enum EntryRef<'a, T> {
    /// A value entry.
    Value(u64),
    /// A shared reference to an item.
    Item(&'a T),
}

impl<T> Clone for EntryRef<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for EntryRef<'_, T> {}

impl<T> PartialEq for EntryRef<'_, T> {
    /// Values compare by value, items by identity (the same pointee), like the kernel's
    /// `xa_cmpxchg`.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (EntryRef::Value(a), EntryRef::Value(b)) => a == b,
            (EntryRef::Item(a), EntryRef::Item(b)) => std::ptr::eq(*a, *b),
            _ => false,
        }
    }
}

impl<T> Eq for EntryRef<'_, T> {}

impl<'a, T> EntryRef<'a, T> {
    /// The value, if this is a value entry.
    pub fn value(self) -> Option<u64> {
        match self {
            EntryRef::Value(v) => Some(v),
            EntryRef::Item(_) => None,
        }
    }

    /// The item, if this is an item entry.
    pub fn item(self) -> Option<&'a T> {
        match self {
            EntryRef::Value(_) => None,
            EntryRef::Item(item) => Some(item),
        }
    }

    /// Does this view show the same entry as the slot word `word` (values by value, items by
    /// pointer identity)?
    pub(crate) fn matches_word(self, word: Word) -> bool {
        match self {
            EntryRef::Value(v) => is_value(word) && value_of(word) == v,
            EntryRef::Item(item) => is_item(word) && std::ptr::eq(item, word as *const T),
        }
    }
}

/// Compile-time check that a target type leaves the low two pointer bits free.
struct Aligned<T>(PhantomData<T>);

impl<T> Aligned<T> {
    const OK: () = assert!(std::mem::align_of::<T>() >= 4, "items must be aligned to >= 4");
}

/// The linear token for one entry in word form: a value word, or an item word that owns its
/// `P`. Dropping it drops the `P`.
pub(crate) struct RawEntry<P: Owner> {
    word: Word,
    _owner: PhantomData<P>,
}

impl<P: Owner> RawEntry<P> {
    /// Encodes an owned entry.
    ///
    /// # Panics
    /// If a value exceeds [`MAX_VALUE`] (callers check first and refuse with an error).
    pub(crate) fn new(entry: Entry<P>) -> Self {
        let () = Aligned::<P::Target>::OK;
        let word = match entry {
            Entry::Value(v) => mk_value(v),
            Entry::Item(p) => p.into_raw() as Word,
        };
        assert!(is_entry(word), "an encoded entry is an item or a value");
        RawEntry { word, _owner: PhantomData }
    }

    /// Takes ownership of a slot word.
    ///
    /// # Safety
    ///
    /// `word` is a value word, or an item word made by [`RawEntry::into_word`] for this `P`
    /// whose ownership the caller hands over (the slot it came from no longer owns it).
    pub(crate) unsafe fn from_word(word: Word) -> Self {
        debug_assert!(is_entry(word));
        RawEntry { word, _owner: PhantomData }
    }

    /// Gives up ownership: the caller stores the word in a slot that now owns it.
    pub(crate) fn into_word(self) -> Word {
        ManuallyDrop::new(self).word
    }

    pub(crate) fn word(&self) -> Word {
        self.word
    }

    /// Decodes back into an owned entry.
    pub(crate) fn into_entry(self) -> Entry<P> {
        let word = self.into_word();
        if is_value(word) {
            Entry::Value(value_of(word))
        } else {
            // SAFETY: `self` owned this item word (type invariant) and `into_word` released
            // it, so ownership passes from the token to the rebuilt `P` exactly once.
            Entry::Item(unsafe { P::from_raw(word as *const P::Target) })
        }
    }

    /// Another token for the same entry: values are copied, items cloned (an `Arc` clone
    /// shares the pointee, as the kernel stores one pointer in every piece of a split).
    pub(crate) fn duplicate(&self) -> Self
    where
        P: Clone,
    {
        if is_value(self.word) {
            return RawEntry { word: self.word, _owner: PhantomData };
        }
        // SAFETY: (1) `self` owns this item word, so the pointer came from `into_raw` and is
        // live; (2) the rebuilt owner is wrapped in `ManuallyDrop`, so ownership stays with
        // `self` and nothing is dropped twice.
        let owner = ManuallyDrop::new(unsafe { P::from_raw(self.word as *const P::Target) });
        let copy: P = (*owner).clone();
        RawEntry::new(Entry::Item(copy))
    }
}

impl<P: Owner> Drop for RawEntry<P> {
    fn drop(&mut self) {
        if is_item(self.word) {
            // SAFETY: the token owns this item word (type invariant) and is being dropped, so
            // this is the single point where the `P` is rebuilt and dropped.
            drop(unsafe { P::from_raw(self.word as *const P::Target) });
        }
    }
}

/// A borrowed view of an entry word.
///
/// # Safety
///
/// `word` is a value word, or an item word whose `P` stays owned (and its target alive and
/// unmodified) for `'a`.
pub(crate) unsafe fn entry_ref<'a, T>(word: Word) -> EntryRef<'a, T> {
    debug_assert!(is_entry(word));
    if is_value(word) {
        EntryRef::Value(value_of(word))
    } else {
        // SAFETY: the caller promises the pointee is owned by a live slot for `'a`, and
        // `Owner` promises such a pointer is valid for shared reads.
        EntryRef::Item(unsafe { &*(word as *const T) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_do_not_overlap() {
        let node = mk_node(12345);
        let sibling = mk_sibling(63);
        let value = mk_value(MAX_VALUE);
        assert!(is_node(node) && !is_sibling(node) && !is_entry(node) && !is_value(node));
        assert!(is_sibling(sibling) && !is_node(sibling) && !is_entry(sibling));
        assert!(is_value(value) && is_entry(value) && !is_item(value) && !is_node(value));
        assert_eq!(node_id(node), 12345);
        assert_eq!(sibling_offset(sibling), 63);
        assert_eq!(value_of(value), MAX_VALUE);
        assert_eq!(value_of(mk_value(0)), 0);
    }

    #[test]
    fn raw_entries_round_trip_and_drop_once() {
        let item = Arc::new(7u32);
        let raw = RawEntry::new(Entry::Item(Arc::clone(&item)));
        assert_eq!(Arc::strong_count(&item), 2);
        let copy = raw.duplicate();
        assert_eq!(Arc::strong_count(&item), 3);
        drop(copy);
        assert_eq!(Arc::strong_count(&item), 2);
        match raw.into_entry() {
            Entry::Item(back) => assert!(Arc::ptr_eq(&back, &item)),
            Entry::Value(_) => panic!("item came back as a value"),
        }
        assert_eq!(Arc::strong_count(&item), 1);
    }
}
