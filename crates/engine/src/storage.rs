//! Where a swapped-out folio's data goes, tier by tier: the zero map, the compressed pool,
//! the swap device's backend (ARCHITECTURE.md, page-out step 5 and page-in step 3).
//!
//! Write order, per folio: a zero check of each page (the last word of each first); all
//! zero → set the zero-map bits and store nothing. Otherwise clear the bits *first* (a
//! stale bit must never survive a non-zero write), then offer every non-zero page to the
//! pool; if the pool takes them all, set the zero pages' bits, done; if it refuses any,
//! drop the pages it took (a failed store invalidates every older copy) and write the whole
//! folio to the backend.
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
use crate::{MAX_ORDER, PAGE_SIZE};
use slots::{SlotFreeHook, SwapDevice, SwapEntry};
use std::sync::Arc;
use zswap::{Reject, Zswap};

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
    /// The compressed pool, if configured.
    pub(crate) zswap: Option<Arc<Zswap>>,
}

/// What a write told the caller besides where the data went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct WriteNotes {
    /// The pool refused a page because it is at its limit: writeback should make room.
    pub(crate) pool_full: bool,
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
        notes: &mut WriteNotes,
    ) -> Result<Tier, String> {
        let nr = (data.len() / PAGE_SIZE) as u64;
        let c = &stats.counters;
        // One bit a page, in words of 64: a folio has at most 2^MAX_ORDER pages.
        let mut zero = [0u64; (1 << MAX_ORDER) / 64];
        for (i, page) in data.chunks(PAGE_SIZE).enumerate() {
            if is_zero_filled(page) {
                zero[i / 64] |= 1 << (i % 64);
            }
        }
        let is_zero = |i: u64| zero[i as usize / 64] & (1 << (i % 64)) != 0;
        let zeros = zero.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
        if zeros == nr {
            self.zeromap.set(first.offset(), nr);
            Stats::add(&c.swpout_zero, nr);
            return Ok(Tier::Zero);
        }
        self.zeromap.clear(first.offset(), nr);
        if self.pool_write(first, data, &is_zero, notes) {
            // The zero pages of a large folio cost a bit each, not a pool entry, and read
            // back as the zero page where the folio is read back a page at a time.
            for i in (0..nr).filter(|&i| is_zero(i)) {
                self.zeromap.set(first.offset() + i, 1);
            }
            Stats::add(&c.swpout_zero, zeros);
            Stats::add(&c.zswpout, nr - zeros);
            return Ok(Tier::Pool);
        }
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

    /// Offers every page of the folio but the zero ones to the pool; all or nothing. A
    /// refusal drops the pages already stored (a failed store invalidates every older copy:
    /// the pool's copies of this folio must never outlive the device copy about to be
    /// written).
    fn pool_write(
        &self,
        first: SwapEntry,
        data: &[u8],
        is_zero: &dyn Fn(u64) -> bool,
        notes: &mut WriteNotes,
    ) -> bool {
        let Some(zswap) = &self.zswap else { return false };
        for (i, page) in data.chunks(PAGE_SIZE).enumerate() {
            let i = i as u64;
            if is_zero(i) {
                continue;
            }
            let page: &[u8; PAGE_SIZE] = page.try_into().expect("whole pages");
            if let Err(reject) = zswap.store(first.add(i), page) {
                notes.pool_full |= reject == Reject::PoolLimit;
                for stored in (0..i).filter(|&j| !is_zero(j)) {
                    zswap.invalidate(first.add(stored));
                }
                return false;
            }
        }
        true
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
                self.read_stored(first.add(page), bytes, stats)?;
            }
            page += run;
        }
        Ok(all_zero)
    }

    /// Reads non-zero pages: each from the pool if it holds it, runs of the rest from the
    /// device in one request each.
    fn read_stored(&self, first: SwapEntry, buf: &mut [u8], stats: &Stats) -> Result<(), String> {
        let c = &stats.counters;
        let nr = buf.len() / PAGE_SIZE;
        if nr > 1 && self.pool_read_folio(first, buf, stats)? {
            return Ok(());
        }
        let mut device_run: Option<usize> = None; // first page of a pending device run
        for i in 0..=nr {
            let in_pool = i < nr
                && self.pool_read(
                    first.add(i as u64),
                    &mut buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE],
                    stats,
                )?;
            let on_device = i < nr && !in_pool;
            match (device_run, on_device) {
                (None, true) => device_run = Some(i),
                (Some(start), false) => {
                    let slot = first.offset() + start as u64;
                    let bytes = &mut buf[start * PAGE_SIZE..i * PAGE_SIZE];
                    if let Err(error) = self.device.backend().read(slot, bytes) {
                        Stats::add(&c.swpin_error, (i - start) as u64);
                        return Err(format!("swap device read at slot {slot}: {error}"));
                    }
                    Stats::add(&c.pswpin, (i - start) as u64);
                    device_run = None;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Loads one page from the pool; `false` if the pool does not hold it (a zero page, a
    /// page on the device: zero pages are never stored).
    pub(crate) fn pool_read(
        &self,
        entry: SwapEntry,
        page: &mut [u8],
        stats: &Stats,
    ) -> Result<bool, String> {
        let Some(zswap) = &self.zswap else { return Ok(false) };
        let page: &mut [u8; PAGE_SIZE] = page.try_into().expect("one page");
        match zswap.load(entry, page) {
            Ok(true) => {
                Stats::add(&stats.counters.zswpin, 1);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(error) => {
                Stats::add(&stats.counters.swpin_error, 1);
                Err(format!("pool load of slot {}: {error}", entry.offset()))
            }
        }
    }

    /// Loads a folio's pages from the pool, slot `first + i` into page `i` of `folio`, if it
    /// holds every one (one look-up and a few class locks for all: `Zswap::load_folio`);
    /// `false` reads none.
    pub(crate) fn pool_read_folio(
        &self,
        first: SwapEntry,
        folio: &mut [u8],
        stats: &Stats,
    ) -> Result<bool, String> {
        let Some(zswap) = &self.zswap else { return Ok(false) };
        let nr = folio.len() / PAGE_SIZE;
        match zswap.load_folio(first, folio) {
            Ok(true) => {
                Stats::add(&stats.counters.zswpin, nr as u64);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(error) => {
                Stats::add(&stats.counters.swpin_error, 1);
                Err(format!("pool load of slots {}+{nr}: {error}", first.offset()))
            }
        }
    }

    /// Are the `nr` slots from `first` of one kind but for zero pages (all zero, or every
    /// other one in the pool, or every other one on the device), so a large folio can be
    /// read back as one? A folio the pool took leaves its zero pages in the zero map.
    pub(crate) fn uniform(&self, first: SwapEntry, nr: u64) -> bool {
        let mut zeros = 0;
        let mut slot = first.offset();
        while slot < first.offset() + nr {
            let (run, zero) = self.zeromap.batch(slot, first.offset() + nr - slot);
            zeros += if zero { run } else { 0 };
            slot += run;
        }
        let Some(zswap) = &self.zswap else { return true };
        let in_pool = zswap.count_range(first, nr);
        in_pool == 0 || in_pool + zeros == nr
    }

    /// Bytes the pool holds (its resident pages, the free ones it keeps included, and its
    /// metadata): what the budget charges for it.
    pub(crate) fn pool_bytes(&self) -> u64 {
        self.zswap.as_ref().map_or(0, |z| z.memory_bytes())
    }

    /// Bytes of the pool's pages of compressed objects alone (no metadata, none of the
    /// free pages its allocator keeps): what a pool beside the budget leaves uncharged.
    pub(crate) fn pool_data_bytes(&self) -> u64 {
        self.zswap.as_ref().map_or(0, |z| z.data_bytes())
    }
}

/// Hears from the swap device about freed slots (see the module documentation).
pub(crate) struct SlotHook {
    pub(crate) zeromap: Arc<ZeroMap>,
    pub(crate) zswap: Option<Arc<Zswap>>,
}

impl std::fmt::Debug for SlotHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotHook").finish_non_exhaustive()
    }
}

impl SlotFreeHook for SlotHook {
    fn slots_freed(&self, first: SwapEntry, nr: u32) {
        self.zeromap.clear(first.offset(), u64::from(nr));
        if let Some(zswap) = &self.zswap {
            // Only the owner of the last copy drops it: the count reached zero, so no page
            // table refers to these slots any more and the pool's copies are dead.
            zswap.invalidate_range(first, u64::from(nr));
        }
    }
}
