//! [`Staging`]: a registered anonymous range cut into page-sized slots, the far end of every
//! `UFFDIO_MOVE`.
//!
//! `UFFDIO_MOVE` remaps pages within one mm, and only *into* a range registered with the
//! same uffd. Eviction moves a region's page into an empty staging slot (the region's page
//! becomes a hole: the next touch faults); page-in fills a slot (decompress into it) and
//! moves it into the faulting hole. The pages go round without allocation or copy:
//!
//! ```text
//!   region  [ A ][ B ][   ][ D ]            staging  [   ][ b ][   ][ x ]
//!              move_out(B) -> slot 1                      ^ B's page, to compress
//!              move_in(slot 3) -> hole 2      slot 3 held recycled page x, filled with C
//! ```
//!
//! Design:
//! - The range is registered in **WP mode only**: MOVE needs the destination registered
//!   with this uffd, but a WP-only registration traps nothing on a missing page, so touching
//!   an empty slot is an ordinary anonymous fault (no handler involved, no deadlock).
//! - `MADV_NOHUGEPAGE` keeps every slot a base page; `MADV_DONTFORK` keeps staging pages out
//!   of forked children, so they stay exclusive (a shared page makes MOVE fail with EBUSY).
//! - Two bitmaps: `allocated` (slot handed out) and `present` (a page sits in the slot).
//!   Runs (for MOVE-out batches) are found next-fit from a cursor, a scan bounded by the
//!   slot count; allocating in a row costs O(run).
//!
//! Invariants ([`Staging::check_invariants`]): bitmaps are `slots` bits long; no bit past the
//! last slot is set; `present` agrees with the kernel (PAGEMAP_SCAN PRESENT) in tests.
//!
//! Context: `&mut self` methods; the caller serializes (one staging per handler thread).

use crate::error::Error;
use crate::mm::{Advice, Mapping};
use crate::types::{MoveMode, Range, RegisterMode};
use crate::uffd::Uffd;
use crate::PAGE_SIZE;

/// The index of a staging slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotIndex(pub u32);

/// `pages` consecutive slots from `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRun {
    /// The first slot.
    pub first: SlotIndex,
    /// How many slots.
    pub pages: u32,
}

impl SlotRun {
    /// The slot indices of the run.
    pub fn slots(self) -> core::ops::Range<usize> {
        let first = self.first.0 as usize;
        first..first + self.pages as usize
    }
}

/// What staging did, for `uswap stat` and benchmarks (a counter per fallback and refusal).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StagingStats {
    /// Pages moved out of regions into staging.
    pub moved_out_pages: u64,
    /// Pages moved from staging into regions.
    pub moved_in_pages: u64,
    /// Allocation requests refused (no free run long enough).
    pub alloc_refused: u64,
    /// Recycled pages released by [`Staging::trim`].
    pub trimmed_pages: u64,
    /// Pages emptied into a discard area by [`Staging::drain`] (no event).
    pub drained_pages: u64,
}

/// A registered range of page slots (see the module essay).
#[derive(Debug)]
pub struct Staging {
    map: Mapping,
    uffd: fds::Identity,
    slots: usize,
    allocated: Vec<u64>,
    present: Vec<u64>,
    /// Where the next allocation scan starts (next fit).
    cursor: usize,
    stats: StagingStats,
}

fn bit(map: &[u64], i: usize) -> bool {
    map[i / 64] & (1 << (i % 64)) != 0
}

fn set_bit(map: &mut [u64], i: usize, on: bool) {
    if on {
        map[i / 64] |= 1 << (i % 64);
    } else {
        map[i / 64] &= !(1 << (i % 64));
    }
}

impl Staging {
    /// Maps and registers `slots` page slots with `uffd` (which must have `MOVE`).
    ///
    /// # Errors
    /// mmap / madvise errors, [`Error::Register`] (WP registration needs Linux 5.7).
    ///
    /// # Panics
    /// If `slots` is 0 or above `u32::MAX`.
    pub fn new(uffd: &Uffd, slots: usize) -> Result<Staging, Error> {
        assert!(slots > 0 && u32::try_from(slots).is_ok(), "staging of {slots} slots");
        let map = Mapping::anonymous(slots * PAGE_SIZE)?;
        map.advise(0, map.len_bytes(), Advice::NoHugePage)?;
        map.advise(0, map.len_bytes(), Advice::DontFork)?;
        uffd.register(map.range(), RegisterMode::WP)?;
        let words = slots.div_ceil(64);
        Ok(Staging {
            map,
            uffd: uffd.identity(),
            slots,
            allocated: vec![0; words],
            present: vec![0; words],
            cursor: 0,
            stats: StagingStats::default(),
        })
    }

    /// How many slots.
    pub fn capacity(&self) -> usize {
        self.slots
    }

    /// The address of `slot`.
    ///
    /// # Panics
    /// If the slot is out of range.
    pub fn addr(&self, slot: SlotIndex) -> usize {
        self.map.page_addr(slot.0 as usize)
    }

    /// The slots' range (registered with the uffd).
    pub fn range(&self) -> Range {
        self.map.range()
    }

    /// Whether `slot` is allocated.
    pub fn is_allocated(&self, slot: SlotIndex) -> bool {
        bit(&self.allocated, slot.0 as usize)
    }

    /// Whether a page sits in `slot`.
    pub fn is_present(&self, slot: SlotIndex) -> bool {
        bit(&self.present, slot.0 as usize)
    }

    /// Counters.
    pub fn stats(&self) -> StagingStats {
        self.stats
    }

    /// Allocates `pages` consecutive free, empty slots (MOVE-out destinations).
    pub fn alloc_empty(&mut self, pages: usize) -> Option<SlotRun> {
        let run = self.alloc_where(pages, false);
        self.stats.alloc_refused += u64::from(run.is_none());
        run
    }

    /// Allocates one free slot holding a recycled page (a page-in's decompression target);
    /// if none holds a page, an empty one (its first store allocates the page).
    pub fn alloc_page(&mut self) -> Option<SlotIndex> {
        let run = self.alloc_where(1, true).or_else(|| self.alloc_where(1, false));
        self.stats.alloc_refused += u64::from(run.is_none());
        Some(run?.first)
    }

    /// Next fit: scans from the slot after the last allocation, wrapping once, so that
    /// allocating in a row is O(run) and a full scan happens only when staging is nearly
    /// full. A run never wraps around the end.
    fn alloc_where(&mut self, pages: usize, present: bool) -> Option<SlotRun> {
        if pages == 0 || pages > self.slots {
            return None;
        }
        let fits = |s: &Self, i: usize| !bit(&s.allocated, i) && bit(&s.present, i) == present;
        let mut run_start = self.cursor;
        let mut run_len = 0;
        for step in 0..self.slots + pages {
            let i = (self.cursor + step) % self.slots;
            if i == 0 {
                run_len = 0; // runs do not wrap
            }
            if !fits(self, i) {
                run_len = 0;
                continue;
            }
            if run_len == 0 {
                run_start = i;
            }
            run_len += 1;
            if run_len == pages {
                let run = SlotRun { first: SlotIndex(run_start as u32), pages: pages as u32 };
                run.slots().for_each(|s| set_bit(&mut self.allocated, s, true));
                self.cursor = (run_start + pages) % self.slots;
                return Some(run);
            }
        }
        None
    }

    /// Returns slots to the free pool; a slot holding a page keeps it for recycling.
    ///
    /// # Panics
    /// If a slot of the run is not allocated (a double free).
    pub fn free(&mut self, run: SlotRun) {
        for s in run.slots() {
            assert!(bit(&self.allocated, s), "free of unallocated staging slot {s}");
            set_bit(&mut self.allocated, s, false);
        }
    }

    /// Takes the first run of free slots that still hold a page (a take's pages, copied out
    /// and awaiting a drain), marking it allocated: the caller drains it, then frees it.
    pub fn alloc_undrained(&mut self) -> Option<SlotRun> {
        let waiting = |s: &Self, i: usize| !bit(&s.allocated, i) && bit(&s.present, i);
        let start = (0..self.slots).find(|&i| waiting(self, i))?;
        let end = (start..self.slots).find(|&i| !waiting(self, i)).unwrap_or(self.slots);
        let run = SlotRun { first: SlotIndex(start as u32), pages: (end - start) as u32 };
        run.slots().for_each(|i| set_bit(&mut self.allocated, i, true));
        Some(run)
    }

    /// Copies the page in `slot` out.
    ///
    /// # Panics
    /// If the slot is not allocated or holds no page, or `out` is not one page.
    pub fn load(&self, slot: SlotIndex, out: &mut [u8]) {
        self.assert_owned(slot);
        assert!(self.is_present(slot), "load from empty staging slot {slot:?}");
        assert_eq!(out.len(), PAGE_SIZE);
        self.map.load(slot.0 as usize * PAGE_SIZE, out);
    }

    /// Writes a page into `slot` (allocating the page if the slot was empty).
    ///
    /// # Panics
    /// If the slot is not allocated, or `data` is not one page.
    pub fn store(&mut self, slot: SlotIndex, data: &[u8]) {
        self.assert_owned(slot);
        assert_eq!(data.len(), PAGE_SIZE);
        self.map.store(slot.0 as usize * PAGE_SIZE, data);
        set_bit(&mut self.present, slot.0 as usize, true);
    }

    /// Reads the 8 bytes at `offset` of `slot`'s page.
    ///
    /// # Panics
    /// As [`Staging::load`], or a bad offset.
    pub fn load_u64(&self, slot: SlotIndex, offset: usize) -> u64 {
        self.assert_owned(slot);
        assert!(self.is_present(slot) && offset + 8 <= PAGE_SIZE);
        self.map.load_u64(slot.0 as usize * PAGE_SIZE + offset)
    }

    fn assert_owned(&self, slot: SlotIndex) {
        assert!((slot.0 as usize) < self.slots, "staging slot {slot:?} out of range");
        assert!(bit(&self.allocated, slot.0 as usize), "staging slot {slot:?} not allocated");
    }

    /// Moves `run.pages` pages of `src` (from byte `offset`) into the empty slots of `run`
    /// (eviction). The source pages become holes; the next touch there faults.
    ///
    /// # Errors
    /// As [`Uffd::move_pages`]; the slots filled before an error are marked present.
    ///
    /// # Panics
    /// If `run` is not an allocated run of empty slots, or `uffd` is not staging's.
    pub fn move_out(
        &mut self,
        uffd: &Uffd,
        src: &Mapping,
        offset: usize,
        run: SlotRun,
        mode: MoveMode,
    ) -> Result<usize, Error> {
        let dst = self.begin_move(uffd, run, false);
        let result = uffd.move_from(dst, src, offset, run.pages as usize * PAGE_SIZE, mode);
        self.end_move(run, false, &result);
        result
    }

    /// Moves the pages of `run` (all present) to the hole at `dst` in a registered region
    /// (page-in), waking the threads faulting there unless `DONTWAKE`.
    ///
    /// # Errors
    /// As [`Uffd::move_pages`]; the slots emptied before an error are marked empty.
    ///
    /// # Panics
    /// If `run` is not an allocated run of present slots, or `uffd` is not staging's.
    pub fn move_in(
        &mut self,
        uffd: &Uffd,
        run: SlotRun,
        dst: usize,
        mode: MoveMode,
    ) -> Result<usize, Error> {
        self.begin_move(uffd, run, true);
        let offset = run.first.0 as usize * PAGE_SIZE;
        let result = uffd.move_from(dst, &self.map, offset, run.pages as usize * PAGE_SIZE, mode);
        self.end_move(run, true, &result);
        result
    }

    /// Checks a run before a move; returns the address of its first slot.
    pub(crate) fn begin_move(&self, uffd: &Uffd, run: SlotRun, present: bool) -> usize {
        assert_eq!(uffd.identity(), self.uffd, "staging used with another uffd");
        for s in run.slots() {
            assert!(s < self.slots && bit(&self.allocated, s), "slot {s} not allocated");
            assert_eq!(bit(&self.present, s), present, "slot {s}: present must be {present}");
        }
        self.addr(run.first)
    }

    /// Records the pages a move did (all of them, or `done_bytes` of an error).
    pub(crate) fn end_move(&mut self, run: SlotRun, moved_in: bool, result: &Result<usize, Error>) {
        let done = result.as_ref().map_or_else(Error::done_bytes, |n| *n) / PAGE_SIZE;
        let first = run.first.0 as usize;
        (first..first + done).for_each(|s| set_bit(&mut self.present, s, !moved_in));
        if moved_in {
            self.stats.moved_in_pages += done as u64;
        } else {
            self.stats.moved_out_pages += done as u64;
        }
    }

    /// Sets the present bits of `run` from the kernel's page tables (mincore), and returns
    /// how many of its slots hold a page. For after a failed move, whose reported progress
    /// is not the whole truth: on 6.18 a batched `UFFDIO_MOVE` racing a copy-on-write break
    /// of the same range was seen to move one page past the count it returned.
    ///
    /// # Errors
    /// mincore's errno (a bug: the range is ours); the bits are then unchanged.
    ///
    /// # Panics
    /// If a slot of the run is not allocated.
    pub fn sync_present(&mut self, run: SlotRun) -> Result<usize, Error> {
        // Out of `self` for the walk, which reads the rest of it; back whatever the outcome.
        let mut bits = std::mem::take(&mut self.present);
        let mut present = 0;
        let walked = self.kernel_present(run, |slot, holds| {
            set_bit(&mut bits, slot.0 as usize, holds);
            present += usize::from(holds);
        });
        self.present = bits;
        walked.map(|()| present)
    }

    /// Calls `each(slot, holds a page)` for every slot of `run`, in order, as the kernel's
    /// page tables say (mincore), whatever the bitmap says.
    ///
    /// # Errors
    /// mincore's errno (a bug: the range is ours).
    ///
    /// # Panics
    /// If a slot of the run is not allocated.
    pub fn kernel_present(
        &self,
        run: SlotRun,
        mut each: impl FnMut(SlotIndex, bool),
    ) -> Result<(), Error> {
        const CHUNK: usize = 512;
        let mut resident = [0u8; CHUNK];
        let (first, pages) = (run.first.0 as usize, run.pages as usize);
        for start in (first..first + pages).step_by(CHUNK) {
            let n = CHUNK.min(first + pages - start);
            crate::sys::mem::mincore(self.map.page_addr(start), &mut resident[..n])
                .map_err(|e| Error::os(crate::error::Op::Mincore, e))?;
            for (i, &r) in resident[..n].iter().enumerate() {
                let slot = SlotIndex((start + i) as u32);
                self.assert_owned(slot);
                each(slot, r & 1 != 0);
            }
        }
        Ok(())
    }

    /// Copies page `i` of `run` into `out[i]` (`run.pages` buffers of a page) and returns how many
    /// slots held no page. A move with `ALLOW_SRC_HOLES` counts a source hole as moved and
    /// leaves the slot empty, which staging's bitmap cannot tell: the kernel is asked
    /// (mincore), and an empty slot reads as zeros without being touched (touching it would
    /// map the zero page there, and a later MOVE into it would be EEXIST).
    ///
    /// # Errors
    /// mincore's errno (a bug: the range is ours).
    ///
    /// # Panics
    /// If a slot of the run is not allocated, or `out` holds the wrong number of buffers.
    pub fn copy_out(&self, run: SlotRun, out: &mut [&mut [u8]]) -> Result<u32, Error> {
        assert_eq!(out.len(), run.pages as usize, "copy_out buffer count");
        assert!(out.iter().all(|page| page.len() == PAGE_SIZE), "copy_out buffers are pages");
        let mut holes = 0;
        self.kernel_present(run, |slot, holds| {
            let page = &mut *out[(slot.0 - run.first.0) as usize];
            if holds {
                self.map.load(slot.0 as usize * PAGE_SIZE, page);
            } else {
                page.fill(0);
                holes += 1;
            }
        })?;
        Ok(holes)
    }

    /// Empties the slots of `run` without sending an event: moves their pages (and holes)
    /// into `sink` at byte `sink_offset`, a range registered with `via`, then drops them there
    /// (MADV_DONTNEED). `via` must be a uffd without `EVENT_REMOVE`: staging itself is
    /// registered with the event uffd, where MADV_DONTNEED would send a REMOVE and wait for
    /// it to be read (tests/frontend_facts.rs). The slots stay allocated, now empty.
    ///
    /// # Errors
    /// The move's or madvise's error; the slots' state is then unknown and the caller must
    /// not reuse them.
    ///
    /// # Panics
    /// If a slot of the run is not allocated.
    pub fn drain(
        &mut self,
        via: &Uffd,
        run: SlotRun,
        sink: &Mapping,
        sink_offset: usize,
    ) -> Result<(), Error> {
        let len = run.pages as usize * PAGE_SIZE;
        let dst = sink.sub(sink_offset, len)?.start();
        for s in run.slots() {
            self.assert_owned(SlotIndex(s as u32));
        }
        let offset = run.first.0 as usize * PAGE_SIZE;
        via.move_from(dst, &self.map, offset, len, MoveMode::ALLOW_SRC_HOLES)?;
        run.slots().for_each(|s| set_bit(&mut self.present, s, false));
        sink.advise(sink_offset, len, Advice::DontNeed)?;
        self.stats.drained_pages += u64::from(run.pages);
        Ok(())
    }

    /// Marks the free slots the kernel filled behind the bitmap's back as holding a page,
    /// and returns how many: `mlockall(MCL_CURRENT)` brings in every page of every range,
    /// staging's too. A take needs empty slots (a MOVE into a slot holding a page is
    /// EEXIST, which a take reads as its own page already there: another page's data), so
    /// the caller drains them ([`Staging::alloc_undrained`]) before any take.
    ///
    /// # Errors
    /// mincore's errno (a bug: the range is ours); the slots adopted before it stay so
    /// (each does hold a page).
    pub fn adopt_kernel_pages(&mut self) -> Result<usize, Error> {
        const CHUNK: usize = 512;
        let mut resident = [0u8; CHUNK];
        let mut adopted = 0;
        for start in (0..self.slots).step_by(CHUNK) {
            let n = CHUNK.min(self.slots - start);
            crate::sys::mem::mincore(self.map.page_addr(start), &mut resident[..n])
                .map_err(|e| Error::os(crate::error::Op::Mincore, e))?;
            for (slot, &r) in (start..).zip(&resident[..n]) {
                if r & 1 != 0 && !bit(&self.allocated, slot) && !bit(&self.present, slot) {
                    set_bit(&mut self.present, slot, true);
                    adopted += 1;
                }
            }
        }
        Ok(adopted)
    }

    /// Releases the pages held by free slots (MADV_DONTNEED); returns how many.
    ///
    /// # Errors
    /// madvise's errno.
    pub fn trim(&mut self) -> Result<usize, Error> {
        let mut trimmed = 0;
        for s in 0..self.slots {
            if !bit(&self.allocated, s) && bit(&self.present, s) {
                self.map.advise(s * PAGE_SIZE, PAGE_SIZE, Advice::DontNeed)?;
                set_bit(&mut self.present, s, false);
                trimmed += 1;
            }
        }
        self.stats.trimmed_pages += trimmed as u64;
        Ok(trimmed)
    }

    /// Asserts the structure's invariants (module essay).
    ///
    /// # Panics
    /// On a violated invariant.
    pub fn check_invariants(&self) {
        let words = self.slots.div_ceil(64);
        assert_eq!(self.allocated.len(), words);
        assert_eq!(self.present.len(), words);
        if !self.slots.is_multiple_of(64) {
            let tail = !((1u64 << (self.slots % 64)) - 1);
            assert_eq!(self.allocated[words - 1] & tail, 0, "allocated bit past the end");
            assert_eq!(self.present[words - 1] & tail, 0, "present bit past the end");
        }
        assert_eq!(self.map.len_bytes(), self.slots * PAGE_SIZE);
        assert!(self.cursor < self.slots, "cursor {} past {} slots", self.cursor, self.slots);
    }
}
