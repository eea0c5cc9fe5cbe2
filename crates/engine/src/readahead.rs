//! Swap readahead: after a fault that continues a walk, the swapped pages after it are read
//! and mapped too, down to the min watermark (fault.rs, step 3).

use crate::engine::{Core, FaultOutcome};
use crate::fault::{Step, SwapIn, PAGE};
use crate::region::{Found, Pte, Region};
use crate::stats::Stats;
use crate::swap_cache::{AddOrGet, Folio};

impl Core {
    /// Reads and maps the swapped pages after a fault at `index`, up to a window that
    /// grows while faults come in sequence and shrinks when they do not (the kernel's
    /// `__swapin_nr_pages`). Readahead never reclaims itself: it stops when the free budget
    /// would fall below the min watermark, and the next fault's `make_room` reclaims. Not
    /// at low: a full budget sits there (the reclaimer refills only to high, one step
    /// above), so readahead would hardly run under pressure (docs/benchmarks.md,
    /// "Readahead down to the min watermark").
    ///
    /// The window counts pages of the region, as the kernel's `swap_vma_readahead` counts
    /// page-table entries: pages already mapped, or never touched, are passed over, not an
    /// end (random access leaves resident pages scattered, and a walk through them would
    /// read ahead only a few pages a fault). A fault right after
    /// the window, or after mapped pages that follow it, counts as the walk going on.
    pub(crate) fn readahead(&self, region: &Region, index: u64) {
        let max = u64::from(self.config.readahead_max_pages);
        if max == 0 {
            return;
        }
        let window = {
            let mut ra = region.readahead.lock();
            let sequential = ra.next == index && index > 0;
            if sequential {
                Stats::add(&self.stats.counters.swap_ra_hit, u64::from(ra.window));
            }
            let window = if sequential {
                (u64::from(ra.window) * 2).clamp(2, max)
            } else {
                u64::from(ra.window) / 2
            };
            ra.window = window as u32;
            ra.next = index + window + 1;
            window
        };
        let end = (index + window).min(region.nr_pages().saturating_sub(1));
        for index in index + 1..=end {
            if self.readahead_one(region, index) == Ahead::Stop {
                return;
            }
        }
        // Where the walk will fault next: past the window and any mapped pages after it.
        let mut next = end + 1;
        while next < region.nr_pages() && next <= end + max && self.is_mapped(region, next) {
            next += 1;
        }
        if next > end + 1 {
            let mut ra = region.readahead.lock();
            if ra.next == end + 1 {
                ra.next = next;
            }
        }
    }

    /// After a fault on a zero-map page at `index` (order 0), once that page is mapped and
    /// its thread woken: maps the zero page over the other zero-map pages of its aligned
    /// block of 2^`folio_order` pages, the large folio it was most likely paged out in, so
    /// that their reads do not fault one by one. They go in write-protected and uncharged,
    /// so no budget check: a write makes a page resident as any zero page's does. Only where
    /// the source protects zero pages (charged, they would push out pages that hold data).
    /// Each page goes in on its own (a folio, a map and a protect call): batching a run is
    /// left undone.
    pub(crate) fn zero_around(&self, region: &Region, index: u64) {
        let block = 1u64 << self.config.folio_order;
        if block == 1 || !crate::fault::protects_zero(region) {
            return;
        }
        let first = index & !(block - 1);
        let end = (first + block).min(region.nr_pages());
        for neighbour in (first..end).filter(|&i| i != index) {
            if self.swapin_one(region, neighbour, true) == Ahead::Read {
                Stats::add(&self.stats.counters.zero_around, 1);
            }
        }
    }

    /// Swaps in one page for readahead if it is swapped, order 0, nobody is on it, and the
    /// budget has room above min; passes over a page that is mapped or untouched.
    fn readahead_one(&self, region: &Region, index: u64) -> Ahead {
        use crate::budget::Pressure;
        if self.budget.pressure(self.pool_charge(), 2 * PAGE) >= Pressure::BelowMin {
            return Ahead::Stop;
        }
        self.swapin_one(region, index, false)
    }

    /// Swaps in page `index` without a fault if it is swapped, order 0 (and, if
    /// `zero_only`, a zero-map page), and nobody is on it.
    fn swapin_one(&self, region: &Region, index: u64, zero_only: bool) -> Ahead {
        let found = region.lock_span(index).lookup(index);
        let (first, entry) = match found {
            Some(Found { order: 0, pte: Pte::Swap(entry), first }) => (first, entry),
            None => return Ahead::Passed,
            Some(found) if found.pte.is_mapped() => return Ahead::Passed,
            // A large swapped folio: its own fault takes it whole.
            Some(_) => return Ahead::Stop,
        };
        if zero_only && !self.storage.zeromap.test(entry.offset()) {
            return Ahead::Passed;
        }
        let folio = Folio::new_locked(entry.offset(), 0);
        let device = &self.storage.device;
        let pin = || device.try_pin_cache_range(entry, 1).is_ok();
        match self.cache_folio(&folio, pin) {
            AddOrGet::Added(shadow) => {
                Stats::add(&self.stats.counters.swap_ra, 1);
                let at = SwapIn { region, first, order: 0, entry };
                let mapped = self.swapin_read_and_map(at, &folio, shadow, false);
                if matches!(mapped, Ok(Step::Done(FaultOutcome::Mapped))) {
                    Ahead::Read
                } else {
                    Ahead::Stop
                }
            }
            // Someone else is reading or writing it: leave it to them.
            AddOrGet::Exists(_) | AddOrGet::Conflict | AddOrGet::Stale => Ahead::Stop,
        }
    }
}

/// What readahead did with one page of its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ahead {
    /// Swapped in and mapped.
    Read,
    /// Nothing to read there (mapped, or never touched): on to the next page.
    Passed,
    /// The window ends here (no room, a page in flight, a large folio, a failure).
    Stop,
}
