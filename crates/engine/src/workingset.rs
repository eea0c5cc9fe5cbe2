//! Workingset detection for anonymous memory: shadows, the non-resident age, and the refault
//! distance (mm/workingset.c).
//!
//! When a folio is evicted, the swap cache keeps a *shadow* where the folio was: the value of
//! the non-resident age clock at eviction and whether the folio was active. The clock ticks
//! once per page evicted or activated, so when the page faults back in,
//!
//! ```text
//! refault distance = age now - age at eviction
//! ```
//!
//! is the number of pages that were pushed through the lists while this page was out: had
//! the resident set been larger by `distance` pages, the page would not have been evicted.
//! If that is no more than the workingset size, the page belongs to the workingset: it
//! starts on the active list (`workingset_activate_anon`). If the shadow says the folio had
//! been on the active list (the LRU keeps that when it is deactivated, as the kernel's
//! `PG_workingset`), the refault is thrashing (`workingset_restore_anon`): a page known to be
//! used was pushed out. A first refault of a page evicted from the inactive list is not: it
//! is how a source without access bits learns that a page is used.
//!
//! The workingset size is the caller's. The kernel's, for anonymous pages, is the active
//! list, which scanning fills with pages whose access bits are set. The engine passes the
//! whole LRU (active and inactive): a page source without access bits (userfaultfd) never
//! activates a page by scanning, so the active list would stay empty and no refault would
//! ever be activated.
//!
//! Shadow encoding (an XArray value entry, at most 63 bits):
//!
//! ```text
//!  62                                           1   0
//! +----------------------------------------------+---+
//! |        eviction age (62 bits, wrapping)      | W |   W = folio was ever active
//! +----------------------------------------------+---+
//! ```
//!
//! 62 bits of age never wrap in practice (2^62 page evictions), so the kernel's
//! `bucket_order` coarsening is not needed; distances are still computed modulo 2^62.

use crate::sync::{AtomicU64, Ordering};

const AGE_BITS: u32 = 62;
const AGE_MASK: u64 = (1 << AGE_BITS) - 1;

// A shadow must fit an XArray value entry (63 bits).
const _: () = assert!(AGE_BITS < 63);

/// What an evicted folio leaves in the swap cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shadow {
    /// The non-resident age at eviction (62 bits).
    pub age: u64,
    /// The folio had been on the active list since it was mapped, when it was evicted.
    pub workingset: bool,
}

impl Shadow {
    /// The value-entry encoding.
    pub fn to_value(self) -> u64 {
        ((self.age & AGE_MASK) << 1) | u64::from(self.workingset)
    }

    /// Decodes a value entry written by [`Shadow::to_value`].
    pub fn from_value(value: u64) -> Shadow {
        Shadow { age: (value >> 1) & AGE_MASK, workingset: value & 1 == 1 }
    }
}

/// The outcome of a refault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refault {
    /// Pages evicted or activated since this page was evicted.
    pub distance: u64,
    /// The page is part of the workingset: start it on the active list.
    pub activate: bool,
    /// It had been active before it was evicted: the workingset is thrashing.
    pub restore: bool,
}

/// The non-resident age clock (the kernel's `lruvec->nonresident_age`).
///
/// Context: lock-free; any thread.
#[derive(Debug, Default)]
pub struct WorkingsetClock {
    nonresident_age: AtomicU64,
}

impl WorkingsetClock {
    /// Ticks the clock by `nr_pages` (evicted or activated pages).
    pub fn age(&self, nr_pages: u64) {
        self.nonresident_age.fetch_add(nr_pages, Ordering::Relaxed);
    }

    /// The shadow of a folio being evicted now.
    pub fn eviction(&self, workingset: bool) -> Shadow {
        Shadow { age: self.nonresident_age.load(Ordering::Relaxed) & AGE_MASK, workingset }
    }

    /// Judges a refault of a page that left `shadow`, given the workingset size in pages
    /// (the engine passes the whole LRU; see the module documentation).
    pub fn refault(&self, shadow: Shadow, workingset_pages: u64) -> Refault {
        let now = self.nonresident_age.load(Ordering::Relaxed) & AGE_MASK;
        let distance = now.wrapping_sub(shadow.age) & AGE_MASK;
        let activate = distance <= workingset_pages;
        Refault { distance, activate, restore: activate && shadow.workingset }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn shadow_round_trips_and_fits_a_value_entry() {
        for age in [0, 1, AGE_MASK, 12345] {
            for workingset in [false, true] {
                let shadow = Shadow { age, workingset };
                let value = shadow.to_value();
                assert!(value < 1 << 63);
                assert_eq!(Shadow::from_value(value), shadow);
            }
        }
    }

    #[test]
    fn refault_within_the_workingset_size_activates() {
        let clock = WorkingsetClock::default();
        let shadow = clock.eviction(false);
        clock.age(10);
        let near = clock.refault(shadow, 10);
        assert_eq!(near, Refault { distance: 10, activate: true, restore: false });
        let far = clock.refault(shadow, 9);
        assert!(!far.activate && !far.restore);
        let active_shadow = Shadow { workingset: true, ..shadow };
        assert!(clock.refault(active_shadow, 100).restore);
    }

    #[test]
    fn distance_wraps_modulo_the_age_bits() {
        let clock = WorkingsetClock::default();
        clock.age(AGE_MASK); // now = 2^62 - 1
        let shadow = clock.eviction(false);
        clock.age(3); // wraps to 2
        assert_eq!(clock.refault(shadow, 0).distance, 3);
    }
}
