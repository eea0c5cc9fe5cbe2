//! Regions and their page tables.
//!
//! A region is a managed virtual range (the VMA analogue). Its page table is an XArray of
//! value entries keyed by page index in the region, one multi-index entry per folio:
//!
//! ```text
//!   value entry (63 bits):
//!   +----------------------------------------------------------+---+
//!   |  LruId (60 bits): the folio is mapped (resident)          | 1 |
//!   +----------------------------------------------------------+---+
//!   |  swap type (5 bits) | slot offset (56 bits): swapped out  | 0 |
//!   +----------------------------------------------------------+---+
//!   no entry: never touched, or dropped by the program: reads as zeros
//! ```
//!
//! A swapped folio of order `o` is one entry of order `o` whose value names the swap entry
//! of its *first* page; page `i` of it lives at `offset + (i - first)`. Splitting such an
//! entry (a fault that cannot take the whole folio) therefore rewrites each piece's value,
//! as the kernel's shmem does after `xas_split` of a swap entry.
//!
//! The page-table lock (one mutex per region, the kernel's PTL) serialises everything the
//! engine does to a region's pages: a fault re-validates its swap entry and maps the data
//! under it; page-out checks the folio is still resident and takes the pages under it. The
//! page source's calls on a page happen under this lock, so two of them never race on one
//! page. Lock order: PTL → LRU lock; PTL → swap device (cluster locks) → swap cache shard.

use crate::lru::{LruId, RegionId};
use crate::page_source::PageSource;
use crate::sync::{Mutex, MutexGuard};
use crate::{Error, PAGE_SIZE};
use slots::{SwapEntry, SwapType};
use std::sync::Arc;
use xarray::{Entry, NoItems, XArray};

/// What a page-table entry says about its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pte {
    /// Mapped; the folio's LRU record.
    Resident(LruId),
    /// Swapped out; the swap entry of the entry's first page.
    Swap(SwapEntry),
}

const OFFSET_BITS: u32 = 56;

// The swap entry's offset must fit: the slots crate bounds devices far below 2^56 slots.
const _: () = assert!(slots::MAX_SLOTS <= 1 << OFFSET_BITS);

impl Pte {
    /// The value-entry encoding (see the module documentation).
    pub fn to_value(self) -> u64 {
        match self {
            Pte::Resident(id) => (id.to_raw() << 1) | 1,
            Pte::Swap(entry) => {
                let ty = u64::from(entry.swap_type().get());
                ((ty << OFFSET_BITS) | entry.offset()) << 1
            }
        }
    }

    /// Decodes [`Pte::to_value`].
    pub fn from_value(value: u64) -> Pte {
        if value & 1 == 1 {
            Pte::Resident(LruId::from_raw(value >> 1))
        } else {
            let payload = value >> 1;
            let ty = SwapType::new((payload >> OFFSET_BITS) as u8).expect("swap type in range");
            Pte::Swap(SwapEntry::new(ty, payload & ((1 << OFFSET_BITS) - 1)))
        }
    }
}

/// One page-table entry as found: its first page index, its order and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The first page index the entry covers.
    pub first: u64,
    /// log2 of the pages it covers.
    pub order: u32,
    /// What it says.
    pub pte: Pte,
}

impl Found {
    /// The swap entry of page `index` inside a swapped entry.
    pub fn swap_entry_of(&self, index: u64) -> Option<SwapEntry> {
        match self.pte {
            Pte::Swap(entry) => Some(entry.add(index - self.first)),
            Pte::Resident(_) => None,
        }
    }
}

/// Identifies an address space (a process): regions belong to one, and its page source
/// maps and takes pages in it. The engine's own process is [`MmId::DEFAULT`]; a forked
/// child gets its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MmId(pub u32);

impl MmId {
    /// The address space the engine was created for.
    pub const DEFAULT: MmId = MmId(0);
}

/// A managed virtual range.
#[derive(Debug)]
pub struct Region {
    id: RegionId,
    mm: MmId,
    /// Where this region's pages live.
    source: Arc<dyn PageSource>,
    /// Resident folios are tracked, charged and evicted. A forked child's regions are not:
    /// the engine only serves their swapped pages (see `Engine::fork`).
    managed: bool,
    start: u64,
    nr_pages: u64,
    /// The page table, behind the PTL.
    table: Mutex<XArray<NoItems>>,
    /// Readahead state; its own small lock (a leaf).
    pub(crate) readahead: Mutex<Readahead>,
    /// Where the last first touch's folio ended (`LargeFolios::Sequential`). A hint, not
    /// state: std's atomic even under loom (no model needs to interleave at it).
    pub(crate) touch_next: std::sync::atomic::AtomicU64,
    /// Where the last swap-in's folio ended (`LargeFolios::Sequential`), a hint as above.
    pub(crate) swapin_next: std::sync::atomic::AtomicU64,
}

/// Per-region readahead state (the kernel keeps it per VMA in `swap_readahead_info`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Readahead {
    /// The page index right after the last readahead window: a fault there means the
    /// program walked through the window (a hit), a fault elsewhere that it did not.
    pub(crate) next: u64,
    /// Pages read ahead last time.
    pub(crate) window: u32,
}

impl Region {
    /// A region of `len` bytes at `start` in address space `mm`, all pages untouched.
    ///
    /// # Errors
    /// [`Error::BadRegion`] for an empty or unaligned range.
    pub fn new(
        id: RegionId,
        mm: MmId,
        source: Arc<dyn PageSource>,
        managed: bool,
        start: u64,
        len: u64,
    ) -> Result<Region, Error> {
        let page = PAGE_SIZE as u64;
        let why = if len == 0 {
            Some("empty")
        } else if !start.is_multiple_of(page) || !len.is_multiple_of(page) {
            Some("not page aligned")
        } else if start.checked_add(len).is_none() {
            Some("wraps the address space")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::BadRegion { start, len, why });
        }
        Ok(Region {
            id,
            mm,
            source,
            managed,
            start,
            nr_pages: len / page,
            table: Mutex::new(XArray::new()),
            readahead: Mutex::new(Readahead::default()),
            touch_next: std::sync::atomic::AtomicU64::new(0),
            swapin_next: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The region's id.
    pub fn id(&self) -> RegionId {
        self.id
    }

    /// The address space.
    pub fn mm(&self) -> MmId {
        self.mm
    }

    /// The page source of the region's address space.
    pub fn source(&self) -> &dyn PageSource {
        &*self.source
    }

    /// The page source, shared.
    pub fn source_arc(&self) -> &Arc<dyn PageSource> {
        &self.source
    }

    /// Are resident folios tracked and evicted here?
    pub fn managed(&self) -> bool {
        self.managed
    }

    /// The first address.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Pages in the region.
    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    /// One past the last address.
    pub fn end(&self) -> u64 {
        self.start + self.nr_pages * PAGE_SIZE as u64
    }

    /// The address of page `index`.
    pub fn addr_of(&self, index: u64) -> u64 {
        debug_assert!(index < self.nr_pages);
        self.start + index * PAGE_SIZE as u64
    }

    /// The page index of `addr` (which must lie in the region).
    pub fn index_of(&self, addr: u64) -> u64 {
        debug_assert!(addr >= self.start && addr < self.end());
        (addr - self.start) / PAGE_SIZE as u64
    }

    /// Takes the page-table lock.
    ///
    /// Context: blocks while another thread holds it; never held across a wait on a
    /// folio.
    pub fn lock(&self) -> PageTable<'_> {
        PageTable { region: self, xa: self.table.lock() }
    }
}

/// A region's page table, locked: every operation that reads or changes the page table is
/// a method here, so "caller holds the PTL" is a fact of the types.
#[derive(Debug)]
pub struct PageTable<'a> {
    region: &'a Region,
    xa: MutexGuard<'a, XArray<NoItems>>,
}

impl PageTable<'_> {
    /// The region.
    pub fn region(&self) -> &Region {
        self.region
    }

    /// The entry covering page `index`.
    pub fn lookup(&self, index: u64) -> Option<Found> {
        let (first, order, entry) = self.xa.load_order(index)?;
        let value = entry.value().expect("page tables hold value entries only");
        Some(Found { first, order, pte: Pte::from_value(value) })
    }

    /// Is every page of `[first, first + 2^order)` inside the region and without an entry?
    pub fn range_is_empty(&self, first: u64, order: u32) -> bool {
        let last = first + (1 << order) - 1;
        last < self.region.nr_pages && self.xa.iter_range(first..=last).next().is_none()
    }

    /// Sets the entry of `[first, first + 2^order)`, replacing whatever is inside (the
    /// caller has checked what is there). A larger entry covering the range must have been
    /// split first.
    ///
    /// # Panics
    /// On a misaligned range or one covered by a larger entry: both are engine bugs.
    pub fn set(&mut self, first: u64, order: u32, pte: Pte) {
        assert!(first + (1 << order) <= self.region.nr_pages, "entry past the region end");
        if let Err(refused) = self.xa.store_order(first, order, Entry::Value(pte.to_value())) {
            panic!("page table store {first}/{order}: {}", refused.error);
        }
    }

    /// Erases the entry covering `index` (all of it) and returns what it was.
    pub fn erase(&mut self, index: u64) -> Option<Found> {
        let found = self.lookup(index)?;
        self.xa.erase(index);
        Some(found)
    }

    /// Splits the entry covering `index` into entries of `new_order`, fixing each piece's
    /// value with `piece(first_index_of_piece, old)`. Returns the pieces as found after the
    /// split. Does nothing if the entry is not larger than `new_order`.
    ///
    /// Context: may allocate XArray nodes.
    pub fn split(
        &mut self,
        index: u64,
        new_order: u32,
        mut piece: impl FnMut(u64, &Found) -> Pte,
    ) -> Vec<Found> {
        let Some(old) = self.lookup(index) else { return Vec::new() };
        if old.order <= new_order {
            return vec![old];
        }
        if let Err(error) = self.xa.split(old.first, new_order) {
            panic!("page table split {}/{} to {new_order}: {error}", old.first, old.order);
        }
        let mut pieces = Vec::with_capacity(1 << (old.order - new_order));
        for n in 0..(1u64 << (old.order - new_order)) {
            let first = old.first + (n << new_order);
            let pte = piece(first, &old);
            self.set(first, new_order, pte);
            pieces.push(Found { first, order: new_order, pte });
        }
        pieces
    }

    /// Every entry intersecting `[first, last]`, as found.
    pub fn entries(&self, first: u64, last: u64) -> Vec<Found> {
        self.xa
            .iter_range(first..=last)
            .map(|(first, order, entry)| Found {
                first,
                order,
                pte: Pte::from_value(entry.value().expect("value entries only")),
            })
            .collect()
    }

    /// XArray node memory of the page table.
    pub fn memory_bytes(&self) -> usize {
        self.xa.memory_bytes()
    }

    /// Checks the XArray and that every entry lies inside the region.
    ///
    /// # Panics
    /// On any inconsistency.
    pub fn check_invariants(&self) {
        self.xa.check_invariants();
        for (first, order, _) in self.xa.iter() {
            assert!(first + (1 << order) <= self.region.nr_pages, "entry {first}/{order} past end");
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn null_source() -> Arc<dyn PageSource> {
        Arc::new(crate::mem_source::MemorySource::new(0, 1))
    }

    fn entry(offset: u64) -> SwapEntry {
        SwapEntry::new(SwapType::new(3).unwrap(), offset)
    }

    #[test]
    fn pte_encoding_round_trips() {
        for pte in [
            Pte::Swap(entry(0)),
            Pte::Swap(entry(slots::MAX_SLOTS - 1)),
            Pte::Swap(SwapEntry::new(SwapType::new(31).unwrap(), 12345)),
            Pte::Resident(LruId::from_raw(0)),
            Pte::Resident(LruId::from_raw((1 << 60) - 1)),
        ] {
            let value = pte.to_value();
            assert!(value <= xarray::MAX_VALUE, "{pte:?} does not fit a value entry");
            assert_eq!(Pte::from_value(value), pte);
        }
    }

    #[test]
    fn bad_regions_are_refused() {
        for (start, len) in [(0, 0), (1, 4096), (4096, 100), (u64::MAX - 4095, 8192)] {
            assert!(
                Region::new(RegionId(0), MmId::DEFAULT, null_source(), true, start, len).is_err(),
                "{start:#x}+{len}"
            );
        }
    }

    #[test]
    fn split_rewrites_each_piece_swap_entry() {
        let region =
            Region::new(RegionId(0), MmId::DEFAULT, null_source(), true, 1 << 20, 64 * 4096)
                .unwrap();
        let mut pt = region.lock();
        pt.set(16, 4, Pte::Swap(entry(512)));
        assert_eq!(pt.lookup(21).unwrap().swap_entry_of(21), Some(entry(517)));
        let pieces = pt.split(21, 0, |first, old| Pte::Swap(old.swap_entry_of(first).unwrap()));
        assert_eq!(pieces.len(), 16);
        assert_eq!(pt.lookup(21), Some(Found { first: 21, order: 0, pte: Pte::Swap(entry(517)) }));
        assert_eq!(pt.lookup(31).unwrap().pte, Pte::Swap(entry(527)));
        pt.check_invariants();
    }

    #[test]
    fn range_is_empty_sees_the_region_end() {
        let region =
            Region::new(RegionId(0), MmId::DEFAULT, null_source(), true, 0, 20 * 4096).unwrap();
        let mut pt = region.lock();
        assert!(pt.range_is_empty(0, 4));
        assert!(!pt.range_is_empty(16, 4), "past the end");
        pt.set(3, 0, Pte::Resident(LruId::from_raw(5)));
        assert!(!pt.range_is_empty(0, 4));
        assert!(pt.range_is_empty(4, 2));
        assert_eq!(pt.erase(3).map(|f| f.pte), Some(Pte::Resident(LruId::from_raw(5))));
        assert!(pt.range_is_empty(0, 4));
    }
}
