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
//!   |  1 (bit 62, past every swap type) | 0: the zero page      | 0 |
//!   +----------------------------------------------------------+---+
//!   |  1 (bit 62) | 1 (bit 61) | LruId (60 bits): staged         | 0 |
//!   +----------------------------------------------------------+---+
//!   no entry: never touched, or dropped by the program: reads as zeros
//! ```
//!
//! A zero-page entry ([`Pte::ZeroMapped`]) maps the shared zero page write-protected: it
//! holds no memory, so it is charged nothing and is on no LRU; the program's first write
//! to it faults into the engine ([`crate::Engine::handle_wp_fault_in`]), which makes it a
//! resident folio before letting the write through.
//!
//! A staged entry ([`Pte::Staged`]) is an order-0 page a refused take left out of the
//! program, held by the page source (the page source's rule 5): still charged and
//! recorded, off the LRU lists, never taken again; a fault on it, or the event reader after
//! the events it read, puts it back (`staged.rs`).
//!
//! A swapped folio of order `o` is one entry of order `o` whose value names the swap entry
//! of its *first* page; page `i` of it lives at `offset + (i - first)`. Splitting such an
//! entry (a fault that cannot take the whole folio) therefore rewrites each piece's value,
//! as the kernel's shmem does after `xas_split` of a swap entry.
//!
//! The page-table lock (the kernel's PTL) serialises everything the engine does to a page:
//! a fault re-validates its swap entry and maps the data under it; page-out checks the folio
//! is still resident and takes the pages under it. The page source's calls on a page happen
//! under this lock, so two of them never race on one page. The lock is split as the
//! kernel's is (one PTE page, so one lock, per 2 MiB): the table is [`PTL_SPAN_PAGES`]-page
//! spans dealt round-robin to up to [`PTL_SHARDS_MAX`] shards, each an XArray behind its own
//! mutex. Work on one folio locks its span's shard ([`Region::lock_span`]); work on the
//! whole region locks every shard in ascending order ([`Region::lock`]). Without the split,
//! the reclaimer's `UFFDIO_MOVE` (a TLB flush that waits for the program's CPU) held off the
//! fault handler's page-ins anywhere in the region (docs/benchmarks.md, "Split page-table
//! locks"). A shard's key is its span's rank among the shard's spans, times the span, plus
//! the page's place in the span, so aligned folios stay aligned and each tree stays dense.
//! Lock order: shards in ascending order; PTL → LRU lock; PTL → swap device (cluster locks)
//! → swap cache shard.

use crate::lru::{LruId, RegionId};
use crate::page_source::PageSource;
use crate::sync::{Mutex, MutexGuard};
use crate::{Error, MAX_ORDER, PAGE_SIZE};
use slots::{SwapEntry, SwapType};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use xarray::{Entry, NoItems, XArray};

/// What a page-table entry says about its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pte {
    /// Mapped; the folio's LRU record.
    Resident(LruId),
    /// Swapped out; the swap entry of the entry's first page.
    Swap(SwapEntry),
    /// Mapped to the shared zero page, write-protected (module documentation): no memory,
    /// no charge, no LRU record.
    ZeroMapped,
    /// One page out of the program, held by the page source after a refused take (module
    /// documentation); its record, charged and isolated, and where the source holds it
    /// (the engine's staged list).
    Staged(LruId),
}

/// [`Pte::ZeroMapped`]'s value: bit 62, above a swapped entry's highest bit (5 bits of
/// swap type over 56 of offset, shifted by the tag), with the swapped tag.
const ZERO_MAPPED_VALUE: u64 = 1 << 62;

/// [`Pte::Staged`]'s marker over the zero-page bit: the record's id below it, shifted by the
/// tag.
const STAGED_BIT: u64 = 1 << 61;

/// The 60 bits of an [`LruId`].
const LRU_ID_MASK: u64 = (1 << 60) - 1;

// Every swap type and offset encodes below the zero-page value.
const _: () = assert!(
    (((slots::MAX_SWAPFILES as u64 - 1) << OFFSET_BITS) | ((1 << OFFSET_BITS) - 1)) << 1
        < ZERO_MAPPED_VALUE
);

const OFFSET_BITS: u32 = 56;

// The swap entry's offset must fit: the slots crate bounds devices far below 2^56 slots.
const _: () = assert!(slots::MAX_SLOTS <= 1 << OFFSET_BITS);

impl Pte {
    /// Whether the page is mapped (resident, or the zero page): an access does not fault.
    pub fn is_mapped(&self) -> bool {
        matches!(self, Pte::Resident(_) | Pte::ZeroMapped)
    }

    /// The value-entry encoding (see the module documentation).
    pub fn to_value(self) -> u64 {
        match self {
            Pte::Resident(id) => (id.to_raw() << 1) | 1,
            Pte::Swap(entry) => {
                let ty = u64::from(entry.swap_type().get());
                ((ty << OFFSET_BITS) | entry.offset()) << 1
            }
            Pte::ZeroMapped => ZERO_MAPPED_VALUE,
            Pte::Staged(id) => ZERO_MAPPED_VALUE | STAGED_BIT | ((id.to_raw() & LRU_ID_MASK) << 1),
        }
    }

    /// Decodes [`Pte::to_value`].
    pub fn from_value(value: u64) -> Pte {
        if value & 1 == 1 {
            Pte::Resident(LruId::from_raw(value >> 1))
        } else if value == ZERO_MAPPED_VALUE {
            Pte::ZeroMapped
        } else if value & ZERO_MAPPED_VALUE != 0 {
            Pte::Staged(LruId::from_raw((value >> 1) & LRU_ID_MASK))
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
            Pte::Resident(_) | Pte::ZeroMapped | Pte::Staged(_) => None,
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
    /// The page table, split: shard `s` holds the spans `s, s + n, s + 2n, ...` (module
    /// documentation), each shard behind its own PTL.
    table: Box<[Mutex<XArray<NoItems>>]>,
    /// Readahead state; its own small lock (a leaf).
    pub(crate) readahead: Mutex<Readahead>,
    /// Where the last first touch's folio ended (`LargeFolios::Sequential`). A hint, not
    /// state: std's atomic even under loom (no model needs to interleave at it).
    pub(crate) touch_next: std::sync::atomic::AtomicU64,
    /// Where the last swap-in's folio ended (`LargeFolios::Sequential`), a hint as above.
    pub(crate) swapin_next: std::sync::atomic::AtomicU64,
    /// Holes and seams ([`Layout`]); `irregular` says whether there are any to look at.
    layout: Mutex<Layout>,
    irregular: std::sync::atomic::AtomicBool,
}

/// Where a region is not one mapping: page ranges `[first, end)` the program unmapped
/// while the rest of the region lives on ([`Region::add_hole`]), sorted, merged as they
/// come (no two overlap or touch); and page indexes where a range mapped since begins or
/// ends, sorted ([`Region::fill_hole`]).
#[derive(Debug, Default)]
struct Layout {
    holes: Vec<(u64, u64)>,
    seams: Vec<u64>,
}

impl Layout {
    /// Adds hole `[first, end)`, merged with every hole it overlaps or touches.
    fn add_hole(&mut self, first: u64, end: u64) {
        crate::ranges::insert(&mut self.holes, first, end);
    }

    /// Whether a hole overlaps `[first, first + nr)`.
    fn hole_overlaps(&self, first: u64, nr: u64) -> bool {
        crate::ranges::overlaps(&self.holes, first, first + nr)
    }
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
            table: (0..shard_count(len / page)).map(|_| Mutex::new(XArray::new())).collect(),
            readahead: Mutex::new(Readahead::default()),
            touch_next: std::sync::atomic::AtomicU64::new(0),
            swapin_next: std::sync::atomic::AtomicU64::new(0),
            layout: Mutex::new(Layout::default()),
            irregular: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Pages `[first, end)` were unmapped, and the region lives on around them (an UNMAP
    /// of part of it: a `munmap` of its tail, a `MAP_FIXED` mapping over part of it). No
    /// folio is mapped across them: a resolving ioctl over a range that is not one mapping
    /// fails as if the range were gone, and the access that asked would fault for ever.
    pub(crate) fn add_hole(&self, first: u64, end: u64) {
        if first < end {
            self.layout.lock().add_hole(first, end);
            self.irregular.store(true, Ordering::Release);
        }
    }

    /// Pages `[first, end)` are mapped again (a remap moved pages there, or the program
    /// mapped the range anew): no longer a hole, and a mapping of its own, so its edges are
    /// seams no folio or page-out run crosses ([`Region::splits_mapping`]). Seams stay until
    /// the region goes (the kernel may have merged the mappings since: a seam only costs a
    /// large folio there).
    pub(crate) fn fill_hole(&self, first: u64, end: u64) {
        let mut layout = self.layout.lock();
        let Layout { holes, seams } = &mut *layout;
        crate::ranges::remove(holes, first, end);
        for edge in [first, end] {
            if edge > 0 && edge < self.nr_pages {
                if let Err(at) = seams.binary_search(&edge) {
                    seams.insert(at, edge);
                }
            }
        }
        self.irregular.store(!holes.is_empty() || !seams.is_empty(), Ordering::Release);
    }

    /// Whether every page of `[first, end)` was unmapped ([`Region::add_hole`]) and not
    /// mapped again since.
    pub(crate) fn holes_cover(&self, first: u64, end: u64) -> bool {
        if first >= end || !self.irregular.load(Ordering::Acquire) {
            return first >= end;
        }
        let layout = self.layout.lock();
        // Holes are merged as they come, so one covers the range or none does.
        let at = layout.holes.partition_point(|&(_, e)| e <= first);
        layout.holes.get(at).is_some_and(|&(s, e)| s <= first && e >= end)
    }

    /// The region's extent cut at its holes, as address ranges `(start, end)` in address
    /// order: the live parts (what the engine manages of it now) appended to `live`, the
    /// holes to `holes` (never merged with a neighbour region's: a mapping across the
    /// boundary fills two regions' holes).
    pub(crate) fn layout(&self, live: &mut Vec<(u64, u64)>, holes: &mut Vec<(u64, u64)>) {
        if !self.irregular.load(Ordering::Acquire) {
            live.push((self.start, self.end()));
            return;
        }
        let addr = |index: u64| self.start + index * PAGE_SIZE as u64;
        let mut at = 0;
        for &(s, e) in &self.layout.lock().holes {
            if s > at {
                live.push((addr(at), addr(s)));
            }
            holes.push((addr(s), addr(e)));
            at = e;
        }
        if at < self.nr_pages {
            live.push((addr(at), self.end()));
        }
    }

    /// Whether any page of `[first, first + nr)` was unmapped ([`Region::add_hole`]).
    pub(crate) fn overlaps_hole(&self, first: u64, nr: u64) -> bool {
        self.irregular.load(Ordering::Acquire) && self.layout.lock().hole_overlaps(first, nr)
    }

    /// Whether pages `[first, first + nr)` are not all of one mapping: a hole overlaps
    /// them, or a seam lies between two of them ([`Region::fill_hole`]). A folio there
    /// cannot be mapped whole (the resolving ioctls want one mapping: ENOENT, and the
    /// access would fault for ever), nor its pages taken in one move (EINVAL).
    pub(crate) fn splits_mapping(&self, first: u64, nr: u64) -> bool {
        if !self.irregular.load(Ordering::Acquire) {
            return false;
        }
        let layout = self.layout.lock();
        let seam = layout.seams.partition_point(|&s| s <= first);
        layout.seams.get(seam).is_some_and(|&s| s < first + nr) || layout.hole_overlaps(first, nr)
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

    /// Takes the whole page table: every shard's lock, in ascending order. For work on
    /// many pages (events, fork, the invariant check); a fault or a page-out takes
    /// [`Region::lock_span`].
    ///
    /// Context: blocks while another thread holds any shard; never held across a wait on a
    /// folio.
    pub fn lock(&self) -> PageTable<'_> {
        PageTable { region: self, held: Held::All(self.table.iter().map(|xa| xa.lock()).collect()) }
    }

    /// Takes the lock of the span holding page `index`: the page table of that span's pages
    /// only (a folio never crosses a span). Operations on a page outside it panic.
    ///
    /// Context: as [`Region::lock`]; the caller holds no other lock of this region's table.
    pub fn lock_span(&self, index: u64) -> PageTable<'_> {
        let shard = self.shard_of(index);
        PageTable { region: self, held: Held::One { shard, xa: self.table[shard].lock() } }
    }

    /// Every entry intersecting `[first, last]`, each span's read under that span's lock
    /// alone: no moment sees the whole range, which suits a caller that re-checks each
    /// entry under its own lock later (`MADV_PAGEOUT`).
    pub fn entries_by_span(&self, first: u64, last: u64) -> Vec<Found> {
        span_pieces(first, last)
            .flat_map(|(start, end)| self.lock_span(start).entries(start, end))
            .collect()
    }

    fn shard_of(&self, index: u64) -> usize {
        ((index >> SPAN_SHIFT) & (self.table.len() as u64 - 1)) as usize
    }

    /// Page `index`'s key in its shard.
    fn key_of(&self, index: u64) -> u64 {
        let rank = index >> SPAN_SHIFT >> self.table.len().trailing_zeros();
        (rank << SPAN_SHIFT) | (index & (PTL_SPAN_PAGES - 1))
    }

    /// The page index of `key` in `shard` (the inverse of [`Region::key_of`]).
    fn index_of_key(&self, shard: usize, key: u64) -> u64 {
        let rank = key >> SPAN_SHIFT;
        let span = (rank << self.table.len().trailing_zeros()) | shard as u64;
        (span << SPAN_SHIFT) | (key & (PTL_SPAN_PAGES - 1))
    }
}

const SPAN_SHIFT: u32 = MAX_ORDER;

/// Pages under one page-table lock: 2 MiB, a PTE page's span and the largest folio.
pub const PTL_SPAN_PAGES: u64 = 1 << SPAN_SHIFT;

/// The most page-table locks (and XArrays) a region has; a larger region's spans share them
/// round-robin.
pub const PTL_SHARDS_MAX: u64 = 64;

/// `[first, last]` cut at span boundaries, as `(start, end)` pieces in order.
fn span_pieces(first: u64, last: u64) -> impl Iterator<Item = (u64, u64)> {
    let mut start = first;
    std::iter::from_fn(move || {
        (start <= last).then(|| {
            let piece = (start, last.min(start | (PTL_SPAN_PAGES - 1)));
            start = piece.1 + 1;
            piece
        })
    })
}

/// Shards for a region of `nr_pages`: one per span up to [`PTL_SHARDS_MAX`], rounded up to
/// a power of two so that finding a page's shard is a shift and a mask, not a division.
fn shard_count(nr_pages: u64) -> usize {
    nr_pages.div_ceil(PTL_SPAN_PAGES).clamp(1, PTL_SHARDS_MAX).next_power_of_two() as usize
}

/// The shards a [`PageTable`] holds.
#[derive(Debug)]
enum Held<'a> {
    /// One span's shard, for work on one folio.
    One { shard: usize, xa: MutexGuard<'a, XArray<NoItems>> },
    /// Every shard, in order.
    All(Vec<MutexGuard<'a, XArray<NoItems>>>),
}

/// A region's page table, locked (one span of it, or all): every operation that reads or
/// changes the page table is a method here, so "caller holds the PTL" is a fact of the types.
#[derive(Debug)]
pub struct PageTable<'a> {
    region: &'a Region,
    held: Held<'a>,
}

impl PageTable<'_> {
    /// The region.
    pub fn region(&self) -> &Region {
        self.region
    }

    /// The shard holding page `index`, and the page's key in it.
    ///
    /// # Panics
    /// If this guard does not hold that shard (an engine bug: a lock of the wrong span).
    fn shard(&self, index: u64) -> (&XArray<NoItems>, u64) {
        let shard = self.region.shard_of(index);
        let xa = match &self.held {
            Held::One { shard: held, xa } => {
                assert_eq!(*held, shard, "page {index} lies outside the locked span");
                xa
            }
            Held::All(all) => &all[shard],
        };
        (xa, self.region.key_of(index))
    }

    /// As [`PageTable::shard`], for a change.
    fn shard_mut(&mut self, index: u64) -> (&mut XArray<NoItems>, u64) {
        let (shard, key) = (self.region.shard_of(index), self.region.key_of(index));
        let xa = match &mut self.held {
            Held::One { shard: held, xa } => {
                assert_eq!(*held, shard, "page {index} lies outside the locked span");
                xa
            }
            Held::All(all) => &mut all[shard],
        };
        (xa, key)
    }

    /// The entry covering page `index`.
    pub fn lookup(&self, index: u64) -> Option<Found> {
        let (xa, key) = self.shard(index);
        let (first_key, order, entry) = xa.load_order(key)?;
        let value = entry.value().expect("page tables hold value entries only");
        Some(Found { first: index - (key - first_key), order, pte: Pte::from_value(value) })
    }

    /// Is every page of `[first, first + 2^order)` inside the region and without an entry?
    pub fn range_is_empty(&self, first: u64, order: u32) -> bool {
        let last = first + (1 << order) - 1;
        let (xa, key) = self.shard(first);
        last < self.region.nr_pages && xa.iter_range(key..=key + (last - first)).next().is_none()
    }

    /// Sets the entry of `[first, first + 2^order)`, replacing whatever is inside (the
    /// caller has checked what is there). A larger entry covering the range must have been
    /// split first.
    ///
    /// # Panics
    /// On a misaligned range or one covered by a larger entry: both are engine bugs.
    pub fn set(&mut self, first: u64, order: u32, pte: Pte) {
        assert!(first + (1 << order) <= self.region.nr_pages, "entry past the region end");
        assert!(order <= MAX_ORDER, "entry {first}/{order} larger than a span");
        let (xa, key) = self.shard_mut(first);
        if let Err(refused) = xa.store_order(key, order, Entry::Value(pte.to_value())) {
            panic!("page table store {first}/{order}: {}", refused.error);
        }
    }

    /// Erases the entry covering `index` (all of it) and returns what it was.
    pub fn erase(&mut self, index: u64) -> Option<Found> {
        let found = self.lookup(index)?;
        let (xa, key) = self.shard_mut(index);
        xa.erase(key);
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
        let (xa, key) = self.shard_mut(old.first);
        if let Err(error) = xa.split(key, new_order) {
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

    /// Every entry intersecting `[first, last]`, as found, in page order.
    pub fn entries(&self, first: u64, last: u64) -> Vec<Found> {
        let mut found = Vec::new();
        for (start, end) in span_pieces(first, last) {
            let (xa, key) = self.shard(start);
            found.extend(xa.iter_range(key..=key + (end - start)).map(
                |(first_key, order, entry)| {
                    // An entry starting before `start` starts in the same span.
                    Found {
                        first: start + first_key - key,
                        order,
                        pte: Pte::from_value(entry.value().expect("value entries only")),
                    }
                },
            ));
        }
        found
    }

    /// XArray node memory of the shards held.
    pub fn memory_bytes(&self) -> usize {
        match &self.held {
            Held::One { xa, .. } => xa.memory_bytes(),
            Held::All(all) => all.iter().map(|xa| xa.memory_bytes()).sum(),
        }
    }

    /// Checks each XArray held and that every entry lies inside the region, in its span.
    ///
    /// # Panics
    /// On any inconsistency.
    pub fn check_invariants(&self) {
        let held: Vec<(usize, &XArray<NoItems>)> = match &self.held {
            Held::One { shard, xa } => vec![(*shard, &**xa)],
            Held::All(all) => all.iter().enumerate().map(|(shard, xa)| (shard, &**xa)).collect(),
        };
        for (shard, xa) in held {
            xa.check_invariants();
            for (key, order, _) in xa.iter() {
                let first = self.region.index_of_key(shard, key);
                assert!(
                    first + (1 << order) <= self.region.nr_pages,
                    "entry {first}/{order} past end"
                );
                assert_eq!(self.region.shard_of(first), shard, "entry {first} in shard {shard}");
            }
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
            Pte::ZeroMapped,
            Pte::Staged(LruId::from_raw(0)),
            Pte::Staged(LruId::from_raw((1 << 60) - 1)),
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

    fn region_of_spans(spans: u64) -> Region {
        let len = spans * PTL_SPAN_PAGES * 4096;
        Region::new(RegionId(0), MmId::DEFAULT, null_source(), true, 1 << 30, len).unwrap()
    }

    /// Holes are merged as they come (overlapping, touching, out of order), so the layout,
    /// the cover test and the overlap test read them without sorting; a filled part splits
    /// a hole and leaves seams at its edges.
    #[test]
    fn holes_merge_as_they_come_and_a_fill_leaves_seams() {
        let region = region_of_spans(1); // pages 0..PTL_SPAN_PAGES
        let page = |i: u64| region.start() + i * 4096;
        for (first, end) in [(40, 48), (10, 20), (15, 25), (25, 30), (44, 50)] {
            region.add_hole(first, end);
        }
        let (mut live, mut holes) = (Vec::new(), Vec::new());
        region.layout(&mut live, &mut holes);
        assert_eq!(holes, vec![(page(10), page(30)), (page(40), page(50))]);
        let tail = (page(50), region.end());
        assert_eq!(live, vec![(page(0), page(10)), (page(30), page(40)), tail]);
        assert!(region.holes_cover(12, 28) && !region.holes_cover(28, 42));
        assert!(region.overlaps_hole(29, 1) && !region.overlaps_hole(30, 10));
        region.fill_hole(16, 20);
        assert!(!region.holes_cover(12, 28) && region.holes_cover(20, 30));
        assert!(region.splits_mapping(14, 4), "a hole");
        assert!(region.splits_mapping(19, 2), "the seam at 20");
        assert!(!region.splits_mapping(16, 4), "inside the filled part");
    }

    #[test]
    fn each_page_has_one_place_in_the_split_table() {
        let region = region_of_spans(PTL_SHARDS_MAX * 2 + 5);
        assert_eq!(region.table.len() as u64, PTL_SHARDS_MAX);
        assert_eq!(region_of_spans(5).table.len(), 8);
        let mut seen = std::collections::HashSet::new();
        for index in (0..region.nr_pages()).step_by(37).chain([region.nr_pages() - 1]) {
            let (shard, key) = (region.shard_of(index), region.key_of(index));
            assert_eq!(region.index_of_key(shard, key), index);
            assert!(seen.insert((shard, key)), "page {index} shares its place");
        }
        // Aligned folios stay aligned in their shard's keys.
        assert_eq!(region.key_of(PTL_SPAN_PAGES * (PTL_SHARDS_MAX + 3) + 48) % 16, 0);
        assert_eq!(region_of_spans(1).table.len(), 1);
    }

    #[test]
    fn entries_cross_spans_and_shards_in_page_order() {
        let region = region_of_spans(PTL_SHARDS_MAX + 6);
        let span = PTL_SPAN_PAGES;
        let last = region.nr_pages() - 1;
        let mut pt = region.lock();
        // Spans 1 and 65 share shard 1.
        pt.set(span, MAX_ORDER, Pte::Swap(entry(4096)));
        pt.set((PTL_SHARDS_MAX + 1) * span + 16, 4, Pte::Resident(LruId::from_raw(9)));
        pt.set(last, 0, Pte::Swap(entry(7)));
        pt.set(3, 0, Pte::Resident(LruId::from_raw(1)));
        let all: Vec<(u64, u32)> = pt.entries(0, last).iter().map(|f| (f.first, f.order)).collect();
        let expected =
            vec![(3, 0), (span, MAX_ORDER), ((PTL_SHARDS_MAX + 1) * span + 16, 4), (last, 0)];
        assert_eq!(all, expected);
        // A range starting inside an entry finds the entry with its true first page.
        let inside = pt.entries(span + 100, 2 * span + 10);
        assert_eq!(
            inside,
            vec![Found { first: span, order: MAX_ORDER, pte: Pte::Swap(entry(4096)) }]
        );
        assert_eq!(pt.lookup(span + 511).unwrap().swap_entry_of(span + 511), Some(entry(4607)));
        assert_eq!(pt.lookup((PTL_SHARDS_MAX + 1) * span + 20).unwrap().order, 4);
        assert_eq!(pt.lookup(span - 1), None);
        pt.check_invariants();
        drop(pt);
        let one = region.lock_span(span + 7);
        assert_eq!(one.lookup(span).unwrap().order, MAX_ORDER);
        one.check_invariants();
    }

    #[test]
    fn entries_read_span_by_span_are_the_same_entries() {
        let region = region_of_spans(PTL_SHARDS_MAX + 3);
        let mut pt = region.lock();
        for (first, order) in
            [(0, 0), (500, 2), (512, MAX_ORDER), (64 * 512 + 16, 4), (67 * 512 - 1, 0)]
        {
            pt.set(first, order, Pte::Swap(entry(first)));
        }
        let last = region.nr_pages() - 1;
        let whole = pt.entries(0, last);
        let part = pt.entries(501, 64 * 512 + 20);
        drop(pt);
        assert_eq!(region.entries_by_span(0, last), whole);
        assert_eq!(region.entries_by_span(501, 64 * 512 + 20), part);
        assert_eq!(part.len(), 3, "{part:?}");
    }

    #[test]
    #[should_panic(expected = "outside the locked span")]
    fn a_span_lock_covers_its_span_only() {
        let region = region_of_spans(3);
        let _ = region.lock_span(0).lookup(PTL_SPAN_PAGES);
    }

    #[test]
    fn two_spans_are_locked_at_once() {
        let region = Arc::new(region_of_spans(4));
        let mut held = region.lock_span(0);
        held.set(0, 0, Pte::Swap(entry(1)));
        let (done, finished) = std::sync::mpsc::channel();
        let other = Arc::clone(&region);
        let thread = std::thread::spawn(move || {
            other.lock_span(PTL_SPAN_PAGES).set(PTL_SPAN_PAGES, 0, Pte::Swap(entry(2)));
            done.send(()).unwrap();
        });
        let waited = finished.recv_timeout(std::time::Duration::from_secs(20));
        drop(held);
        thread.join().unwrap();
        assert!(waited.is_ok(), "span 1 waited for span 0's lock");
        assert_eq!(region.lock().entries(0, 4 * PTL_SPAN_PAGES - 1).len(), 2);
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
