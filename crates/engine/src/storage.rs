//! Where a swapped-out folio's data goes, tier by tier: the zero map, the compressed pool,
//! the swap device's backend (ARCHITECTURE.md, page-out step 5 and page-in step 3).
//!
//! Write order, per folio: a zero check of the whole folio (the last word of each page
//! first); all zero → set the zero-map bits and store nothing. Otherwise clear the bits
//! *first* (a stale bit must never survive a non-zero write), then offer every page to the
//! pool; if the pool takes them all, done; if it refuses any, drop the pages it took (a
//! failed store invalidates every older copy) and write the folio to the backend.
//!
//! Read order, per page: zero-map bit → zeros; the pool holds it → decompress; else the
//! backend. A failure anywhere is an error for the whole read: the caller never maps a folio
//! of which one page could not be read.
//!
//! When slots are freed (count and cache pin both gone), the swap device calls
//! [`SlotHook::slots_freed`] before the slots can be reused: the hook drops the pool's copy
//! and the zero-map bits. It runs with a cluster lock held, often inside a swap cache shard
//! lock (the swap cache unpins slots under it), so it never touches the swap cache: a
//! freed slot's shadow is dropped by whoever freed the slot, or replaced when the slot is
//! used again.

use crate::stats::Stats;
use crate::zeromap::{is_zero_filled, ZeroMap};
use crate::PAGE_SIZE;
use slots::{SlotFreeHook, SwapDevice, SwapEntry};
use std::sync::Arc;

/// Which tier took a folio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// All zero: only zero-map bits.
    Zero,
    /// Compressed in the pool.
    Pool,
    /// Written to the swap device's backend.
    Device,
}

/// The tiers of one swap device.
pub(crate) struct Storage {
    pub(crate) device: Arc<SwapDevice>,
    pub(crate) zeromap: Arc<ZeroMap>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("swap_type", &self.device.swap_type())
            .field("zero_pages", &self.zeromap.count())
            .finish_non_exhaustive()
    }
}

impl Storage {
    /// Stores a folio's data for its slots `first ..`, tier by tier.
    ///
    /// # Errors
    /// The backend's error text when every tier refused; nothing is then stored and the
    /// zero-map bits are clear.
    ///
    /// Context: may block on backend I/O; takes no engine lock.
    pub(crate) fn write(
        &self,
        first: SwapEntry,
        data: &[u8],
        stats: &Stats,
    ) -> Result<Tier, String> {
        let nr = (data.len() / PAGE_SIZE) as u64;
        let c = &stats.counters;
        if data.chunks(PAGE_SIZE).all(is_zero_filled) {
            self.zeromap.set(first.offset(), nr);
            Stats::add(&c.swpout_zero, nr);
            return Ok(Tier::Zero);
        }
        self.zeromap.clear(first.offset(), nr);
        match self.device.backend().write(first.offset(), data) {
            Ok(()) => {
                Stats::add(&c.pswpout, nr);
                Ok(Tier::Device)
            }
            Err(error) => {
                Stats::add(&c.swpout_error, nr);
                Err(format!("swap device write at slot {}: {error}", first.offset()))
            }
        }
    }

    /// Reads `buf.len() / PAGE_SIZE` pages of slots `first ..` into `buf`; returns whether
    /// they were all zero-map pages.
    ///
    /// # Errors
    /// What failed; `buf` must then not be used.
    ///
    /// Context: may block on backend I/O; takes no engine lock.
    pub(crate) fn read(
        &self,
        first: SwapEntry,
        buf: &mut [u8],
        stats: &Stats,
    ) -> Result<bool, String> {
        let nr = (buf.len() / PAGE_SIZE) as u64;
        let c = &stats.counters;
        let mut all_zero = true;
        let mut page = 0;
        while page < nr {
            let slot = first.offset() + page;
            let (run, zero) = self.zeromap.batch(slot, nr - page);
            let bytes = &mut buf[(page as usize) * PAGE_SIZE..((page + run) as usize) * PAGE_SIZE];
            if zero {
                bytes.fill(0);
                Stats::add(&c.swpin_zero, run);
            } else {
                all_zero = false;
                if let Err(error) = self.device.backend().read(slot, bytes) {
                    Stats::add(&c.swpin_error, run);
                    return Err(format!("swap device read at slot {slot}: {error}"));
                }
                Stats::add(&c.pswpin, run);
            }
            page += run;
        }
        Ok(all_zero)
    }

    /// Are the `nr` slots from `first` all of one kind (all zero, all pool, or all device),
    /// so a large folio can be read back as one?
    pub(crate) fn uniform(&self, first: SwapEntry, nr: u64) -> bool {
        self.zeromap.batch(first.offset(), nr).0 == nr
    }
}

/// Hears from the swap device about freed slots (see the module documentation).
#[derive(Debug)]
pub(crate) struct SlotHook {
    pub(crate) zeromap: Arc<ZeroMap>,
}

impl SlotFreeHook for SlotHook {
    fn slots_freed(&self, first: SwapEntry, nr: u32) {
        self.zeromap.clear(first.offset(), u64::from(nr));
    }
}
