//! Handles: the indirect names of pool objects.
//!
//! A handle never says where an object is; it names a slot in its class's handle table,
//! and the slot says where the object is now. Compaction moves an object by rewriting the
//! slot under the class lock, so every holder of the handle follows the move for free.
//!
//! Encoding, one `u64`, never zero and never with bit 63 set (so it fits in an XArray value
//! entry, which keeps 63 bits):
//!
//! ```text
//!   63  62 ........... 40  39 ...... 32  31 ................. 0
//!   [0] [ generation, 23 bits, != 0 ]    [ class index ]      [ slot in the class's table ]
//! ```
//!
//! The generation is bumped each time a slot is freed, so a stale handle (used after its
//! `free`) is caught by an assertion instead of reading another object's bytes.

use crate::class::ClassIndex;
use std::num::NonZeroU64;

const SLOT_BITS: u32 = 32;
const CLASS_BITS: u32 = 8;
const GENERATION_SHIFT: u32 = SLOT_BITS + CLASS_BITS;
const GENERATION_BITS: u32 = 23;

/// The largest generation; generations run 1..=`GENERATION_MAX` and wrap to 1.
pub(crate) const GENERATION_MAX: u32 = (1 << GENERATION_BITS) - 1;

const _: () = assert!(GENERATION_SHIFT + GENERATION_BITS == 63);

/// An indirect reference to one pool object. Copy it freely; use it from any thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(NonZeroU64);

impl Handle {
    /// Builds a handle from its parts.
    ///
    /// # Panics
    /// If `generation` is 0 or above [`GENERATION_MAX`] (a bug in the pool).
    pub(crate) fn new(class: ClassIndex, slot: u32, generation: u32) -> Self {
        assert!(generation != 0 && generation <= GENERATION_MAX, "generation {generation}");
        let raw = (u64::from(generation) << GENERATION_SHIFT)
            | (u64::from(class.0) << SLOT_BITS)
            | u64::from(slot);
        match NonZeroU64::new(raw) {
            Some(raw) => Handle(raw),
            None => unreachable!("the generation is never zero"),
        }
    }

    /// The class the object lives in; it never changes.
    pub fn class(self) -> ClassIndex {
        ClassIndex((self.0.get() >> SLOT_BITS) as u8)
    }

    pub(crate) fn slot(self) -> u32 {
        self.0.get() as u32
    }

    pub(crate) fn generation(self) -> u32 {
        (self.0.get() >> GENERATION_SHIFT) as u32
    }

    /// The raw encoding, to store a handle in an index (below 2^63, never zero).
    pub fn to_raw(self) -> u64 {
        self.0.get()
    }

    /// A handle back from [`Handle::to_raw`]; `None` for a value no handle encodes to.
    /// A well-formed but stale value is caught later, by the pool's generation check.
    pub fn from_raw(raw: u64) -> Option<Self> {
        let generation = raw >> GENERATION_SHIFT;
        if generation == 0 || generation > u64::from(GENERATION_MAX) {
            return None;
        }
        NonZeroU64::new(raw).map(Handle)
    }
}

/// The next generation of a slot after a free.
pub(crate) fn next_generation(generation: u32) -> u32 {
    if generation >= GENERATION_MAX {
        1
    } else {
        generation + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let h = Handle::new(ClassIndex(200), 0xdead_beef, GENERATION_MAX);
        assert_eq!(h.class(), ClassIndex(200));
        assert_eq!(h.slot(), 0xdead_beef);
        assert_eq!(h.generation(), GENERATION_MAX);
        assert!(h.to_raw() < 1 << 63);
        assert_eq!(Handle::from_raw(h.to_raw()), Some(h));
    }

    #[test]
    fn malformed_raw_values_are_refused() {
        assert_eq!(Handle::from_raw(0), None);
        assert_eq!(Handle::from_raw(12345), None); // generation 0
        assert_eq!(Handle::from_raw(1 << 63), None); // bit 63
    }

    #[test]
    fn generations_wrap_past_zero() {
        assert_eq!(next_generation(1), 2);
        assert_eq!(next_generation(GENERATION_MAX), 1);
    }
}
