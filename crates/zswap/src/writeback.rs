//! Writeback: moving the coldest entries out of the pool to the swap device, by the
//! kernel's protocol (`zswap_writeback_entry` in mm/zswap.c).
//!
//! ```text
//!   LRU lock:  tail slot ── referenced? ── yes: clear the bit, rotate to head (2nd try)
//!                                └──────── no: take its slot, rotate to head, unlock
//!   target.pin(swpentry) ── None: slot still stored? yes → a swap-in holds the slot:
//!        │                                       stop (the warm end of the LRU)
//!        │                                  no  → it was invalidated: skip it
//!        └─ Some(pin)
//!   tree lock: the slot still has an entry? no → unpin, skip
//!              note its object (the handle), copy the object out, unlock
//!   decompress (no lock) ── error → count, keep the entry, unpin(written = false)
//!   target.write(pin, page) ── error → count, keep the entry, unpin(written = false)
//!   tree lock: erase the entry if it is still the same one; LRU lock: unlink; unlock
//!   free the object; count written_back_pages; target.unpin(pin, written = true)
//! ```
//!
//! Why each step:
//! - The candidate is rotated before the LRU lock is dropped (as the kernel does), so a
//!   concurrent writeback does not pick it again, and an entry that fails stays at the
//!   warm end instead of blocking the tail.
//! - Nothing of the entry is read between the LRU unlock and the pin: the slot may be
//!   invalidated, freed and reused meanwhile. The pin makes the slot stable (no store,
//!   invalidate or load of it can run while the target holds it), so the entry the tree
//!   holds after pinning is the slot's data; its handle (with the handle's generation) is
//!   the entry's identity from then on, checked again before the erase.
//! - The entry is erased only after the device write succeeded: until then the pool holds
//!   the only copy. `unpin(written = true)` comes after the erase, so a swap-in that waited
//!   on the pin finds the data on the device and not in the pool.
//! - No zswap lock is held while the target is called: the target takes the engine's swap
//!   cache and device locks, which the engine may hold while calling into zswap.
//!
//! Bound: one call looks at most at `2 * max_pages` LRU entries.

use crate::compress::PAGE_SIZE;
use crate::entry::EntryData;
use crate::stats::bump;
use crate::zswap::Zswap;
use slots::SwapEntry;

/// An opaque token the target hands out with a pin and gets back with write and unpin
/// (for instance an index into its own table of pinned folios).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WritebackPin(pub u64);

/// The swap device side of writeback, implemented by the engine over its swap cache (the
/// tests implement it with a simple map).
pub trait WritebackTarget: Send + Sync {
    /// Pins `entry`'s slot through the swap cache (inserts a locked folio and takes the
    /// device's cache pin). `None`: the slot is already in the swap cache (a swap-in is in
    /// flight: writeback stops, it has reached the warm end) or it is free (the entry is
    /// being invalidated: writeback skips it).
    fn pin(&self, entry: SwapEntry) -> Option<WritebackPin>;

    /// Writes the decompressed page to the device at the entry's slot (and makes it
    /// visible to swap-ins waiting on the pin).
    ///
    /// # Errors
    /// What failed; the pool keeps its copy.
    fn write(&self, pin: &WritebackPin, page: &[u8; PAGE_SIZE]) -> Result<(), String>;

    /// Releases the pin; `written` says whether the pool's copy was erased (the data now
    /// lives on the device only).
    fn unpin(&self, pin: WritebackPin, written: bool);
}

/// What one writeback pass did ([`Zswap::writeback_pass`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Entries written back to the device (and erased from the pool).
    pub written: u64,
    /// Referenced entries given a second chance: their bit cleared, rotated to the head.
    pub spared: u64,
}

/// What happened to one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Written,
    Failed,
    WarmStop,
}

/// Buffers of one writeback call, allocated once per call with no lock held.
struct Buffers {
    object: Box<[u8]>,
    page: Box<[u8; PAGE_SIZE]>,
}

impl Zswap {
    /// Writes back up to `max_pages` cold entries (LRU tail, second chance) to the device
    /// through `target`, following the protocol of the module essay; returns how many
    /// were written back. Used by the engine's reclaimer when the pool is full, and to
    /// shrink the pool.
    ///
    /// Failures are counted (`writeback_*`, summed in `reject_reclaim_fail`) and lose
    /// nothing: a failed entry stays in the pool.
    ///
    /// Context: takes the LRU lock, then the tree lock (a class lock inside), one at a
    /// time; holds no lock while calling `target`; allocates two page buffers per call.
    /// Looks at most at `2 * max_pages` entries.
    pub fn writeback(&self, target: &dyn WritebackTarget, max_pages: u64) -> u64 {
        self.writeback_pass(target, max_pages).written
    }

    /// [`Zswap::writeback`], saying also how many entries it spared (their referenced bit
    /// cleared, rotated): a pass that wrote nothing but spared some still made progress,
    /// since the next pass finds those entries cold. The kernel's `shrink_worker` goes on
    /// after such a pass too; one that stopped there left a pool full of entries stored
    /// since its last pass, every one referenced, full for good.
    pub fn writeback_pass(&self, target: &dyn WritebackTarget, max_pages: u64) -> Pass {
        let mut buffers =
            Buffers { object: vec![0u8; PAGE_SIZE].into_boxed_slice(), page: Box::new([0; 4096]) };
        let scan_limit = max_pages.saturating_mul(2);
        let (mut pass, mut scanned) = (Pass::default(), 0);
        while pass.written < max_pages && scanned < scan_limit {
            scanned += 1;
            let Some(candidate) = self.writeback_candidate() else {
                break; // The LRU is empty.
            };
            let Some(candidate) = candidate else {
                pass.spared += 1; // It had its referenced bit.
                continue;
            };
            match self.writeback_entry(target, candidate, &mut buffers) {
                Outcome::Written => pass.written += 1,
                Outcome::Failed => {}
                Outcome::WarmStop => break,
            }
        }
        pass
    }

    /// Takes the LRU tail: `None` if the LRU is empty, `Some(None)` if it was referenced
    /// (bit cleared, rotated), `Some(Some(entry))` for a candidate (rotated too): its
    /// slot's entry, of which nothing more is known until the slot is pinned.
    ///
    /// Context: takes the LRU lock alone.
    fn writeback_candidate(&self) -> Option<Option<SwapEntry>> {
        let mut list = self.lru.list.lock();
        let tail = self.lru.tail(&list)?;
        let candidate = if self.lru.test_and_clear_referenced(tail) {
            bump(&self.counters.writeback_second_chance);
            None
        } else {
            Some(self.entry_of(tail))
        };
        self.lru.rotate_tail(&mut list);
        Some(candidate)
    }

    fn writeback_entry(
        &self,
        target: &dyn WritebackTarget,
        candidate: SwapEntry,
        buffers: &mut Buffers,
    ) -> Outcome {
        let Some(pin) = target.pin(candidate) else {
            if self.contains(candidate) {
                bump(&self.counters.writeback_warm_stop);
                return Outcome::WarmStop;
            }
            bump(&self.counters.writeback_skipped_freed);
            return Outcome::Failed;
        };
        let outcome = self.writeback_pinned(target, &pin, candidate, buffers);
        target.unpin(pin, outcome == Outcome::Written);
        outcome
    }

    fn writeback_pinned(
        &self,
        target: &dyn WritebackTarget,
        pin: &WritebackPin,
        candidate: SwapEntry,
        buffers: &mut Buffers,
    ) -> Outcome {
        let Some((entry, length)) = self.copy_if_held(candidate, buffers) else {
            bump(&self.counters.writeback_raced);
            return Outcome::Failed;
        };
        if self.decode(length, &buffers.object, &mut buffers.page).is_err() {
            bump(&self.counters.writeback_decompress_fail);
            return Outcome::Failed;
        }
        if target.write(pin, &buffers.page).is_err() {
            bump(&self.counters.writeback_write_fail);
            return Outcome::Failed;
        }
        if !self.erase(candidate, Some(entry.handle)) {
            // The pin should have kept the slot's entry; the device copy is then older
            // than what the pool holds, and loads find the pool's first.
            bump(&self.counters.writeback_raced);
            return Outcome::Failed;
        }
        bump(&self.counters.written_back_pages);
        Outcome::Written
    }

    /// Under the tree lock: if the tree holds an entry for `candidate`'s slot, copies its
    /// object out (a raw page straight into the page buffer) and returns the entry and the
    /// object's length.
    fn copy_if_held(
        &self,
        candidate: SwapEntry,
        buffers: &mut Buffers,
    ) -> Option<(EntryData, usize)> {
        let (tree, key) = self.trees.lock(candidate.offset());
        let entry = self.find(&tree, key, candidate)?;
        let length = if entry.raw {
            self.pool.read(entry.handle, &mut buffers.page[..])
        } else {
            self.pool.read(entry.handle, &mut buffers.object)
        };
        Some((entry, length))
    }
}
