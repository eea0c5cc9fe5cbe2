//! The page arena: the pool's base pages, carved from 2 MiB chunks the kernel can map with
//! one huge page.
//!
//! Why: a zswap load walks handle table → zspage → object bytes, and on a cold load each
//! step is a cache miss and, with 4 KiB pages scattered over the heap, a TLB miss too; in
//! a virtual machine a TLB miss is a two-dimensional page walk. The kernel's zsmalloc never
//! pays that: its pages live in the direct map, mapped with 1 GiB or 2 MiB entries. Here
//! the pool's pages come from 2 MiB-aligned chunks advised `MADV_HUGEPAGE`, so a whole
//! chunk's pages share one TLB entry (measured: `uswap bench zswap`, docs/benchmarks.md).
//! That pays from a few thousand pages on (the TLB's reach with 4 KiB pages), and a huge
//! page is resident whole from its first touch: so only a pool with [`HUGE_FROM_PAGES`]
//! (16 MiB) in use gets huge chunks; the chunks of a smaller one are advised
//! `MADV_NOHUGEPAGE` and start wholly released (a new chunk is released with one
//! `MADV_DONTNEED`, so its pages read as zeros), each page resident only once handed
//! out. A chunk is shaped so whenever it starts from empty, new or kept ([`shape`]).
//!
//! ```text
//!   chunk (2 MiB, aligned, from the global allocator, MADV_HUGEPAGE from 16 MiB in use)
//!   [p0 used][p1 free, resident][p2 used][p3 free, released] ... [p511 used]
//!   free bitmap:      0 1 0 1 ...        released bitmap: 0 0 0 1 ...
//!   partial set: (free pages / 32 rounded up, chunk number): allocation takes a fullest chunk
//! ```
//!
//! Policy:
//! - **allocate** from the fullest chunk that has a free page (so sparse chunks drain and
//!   can be given back), a resident free page before a released one (no page fault); a new
//!   chunk only when no chunk has a free page;
//! - **free** marks the page free and resident. A chunk whose every page is free is
//!   released whole (one `MADV_DONTNEED`: its memory goes back to the kernel) and kept, up
//!   to [`EMPTY_CHUNKS_MAX`] of them, as address space for the next chunk the pool needs;
//!   past that it goes back to the global allocator. Why: a pool draining as pages come back
//!   in empties chunk after chunk, and handing each back to glibc costs a `munmap`, twice a
//!   `MADV_DONTNEED`'s time (`bench/probes/chunk_free.c`, docs/benchmarks.md), and the next
//!   chunk the pool needs a fresh allocation and huge-page advice again. The resident free
//!   pages of 4 KiB chunks are bounded: past
//!   [`max(64, in use / 8)`](resident_free_limit), runs of them are released to the kernel
//!   (`MADV_DONTNEED`: the memory comes back, the next use faults in a zeroed page) down
//!   to half that bound, so a stream of frees (a pool draining as pages come back in)
//!   costs one `madvise` per run of pages, not one per page. A huge chunk's free pages are
//!   never released one by one, only with the whole chunk (below);
//! - **trim** ([`PageArena::trim`], called by the pool's compaction, the way a pool under
//!   pressure gives memory back) releases every resident free page of a 4 KiB chunk.
//!
//! Why a huge chunk is all or nothing: `MADV_DONTNEED` on part of a huge page splits its
//! mapping and unmaps the pages, but the kernel frees none of them: the huge page stays
//! allocated whole (on its deferred-split list) until all of it is released, or until
//! memory runs short system-wide. The resident set drops, the memory does not, and a
//! released page handed out again faults in a new 4 KiB page beside the old one, which
//! the huge page still holds (`bench/probes/thp_partial.c`: 511 of every 512 pages
//! released, RssAnon 0 and the memory cgroup still charged the whole 128 MiB;
//! docs/benchmarks.md). So a huge chunk's free pages stay resident and counted, and its
//! memory goes back when the chunk empties, with one `MADV_DONTNEED` of the whole chunk.
//!
//! Chunks come from the process's global allocator, not from `mmap`: under `uswap run` that
//! is the shim's private arena, which the shim keeps out of the managed set; a mapping of
//! our own would appear in /proc/self/maps like the program's memory.
//!
//! Memory: every page that holds memory, in use or free and resident
//! ([`PageArena::resident_pages`], published lock-free), is the pool's to account for: it is
//! in the process's resident set, and a budget on that set must count it
//! ([`crate::ZsPool::memory_bytes`]). The kernel's figure, the pages zspages hold, is the
//! pool's size for its limits ([`crate::ZsPool::total_bytes`]). A huge chunk is counted
//! whole, as the kernel holds it.
//!
//! Invariants ([`PageArena::check_invariants`]): every chunk's free count equals its free
//! bitmap's population; released pages are free, and a huge chunk has none (its free pages
//! are counted in `pages_free_huge`); a chunk is in the partial set exactly when
//! it has a free page, under its current count; a wholly free chunk is wholly released, and
//! there are `chunks_empty` of them, at most [`EMPTY_CHUNKS_MAX`]; the counters equal the
//! sums over chunks, and the published resident count their sum.
//!
//! Lock: one mutex, a leaf, held for bitmap updates, to allocate a chunk (rare: once per
//! 512 pages, and its huge-page advice with it) and across every release
//! (`MADV_DONTNEED`), so no page is handed out while the kernel is zeroing it. A wholly
//! free chunk goes back to the allocator after the lock is dropped.

#![allow(unsafe_code)]

use crate::PAGE_SIZE;
use parking_lot::Mutex;
use std::alloc::Layout;
use std::collections::{BTreeMap, BTreeSet};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of one chunk: one x86-64 huge page.
pub const CHUNK_BYTES: usize = 2 << 20;

/// Base pages per chunk.
pub const CHUNK_PAGES: usize = CHUNK_BYTES / PAGE_SIZE;

/// Wholly free chunks kept (released: address space only, no memory), 64 MiB of it.
pub const EMPTY_CHUNKS_MAX: u64 = 32;

const WORDS: usize = CHUNK_PAGES / 64;

/// One base page of a zspage, owned exclusively. Its memory belongs to the arena that
/// handed it out and stays valid until the arena is dropped; give it back with
/// [`PageArena::free`] (a page dropped instead stays allocated until then, and the pool's
/// invariants count it as lost).
pub(crate) struct PoolPage(NonNull<[u8; PAGE_SIZE]>);

// SAFETY: a PoolPage is the only handle to its 4 KiB of memory (the arena hands each page
// out once until it is freed), like a Box<[u8; 4096]>, so moving it to or sharing it with
// another thread is as safe as for that Box.
unsafe impl Send for PoolPage {}
// SAFETY: as above: `&PoolPage` only gives `&[u8; 4096]`.
unsafe impl Sync for PoolPage {}

impl PoolPage {
    fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

/// Whether page `b` comes right after page `a` in the same chunk (so [`join`] takes them).
pub(crate) fn follows(a: &PoolPage, b: &PoolPage) -> bool {
    b.addr() == a.addr() + PAGE_SIZE && b.addr() & (CHUNK_BYTES - 1) != 0
}

/// The bytes of `pages` as one slice, when they lie back to back in address order within
/// one chunk (one allocation): a run of whole-page objects read with one copy instead of
/// one a page. `None` otherwise, or for no pages.
///
/// Why: the cold copy of 16 pages back to back as one 64 KiB `memcpy` costs 163-166 ns a
/// page, as 16 copies of 4 KiB 212-218, from scattered pages 299-307
/// (`bench/probes/folio_copy.c`; docs/benchmarks.md, "Probes").
pub(crate) fn join<'a>(pages: &[&'a PoolPage]) -> Option<&'a [u8]> {
    let first = pages.first()?;
    let (start, chunk) = (first.addr(), first.addr() & !(CHUNK_BYTES - 1));
    let adjacent = pages.iter().enumerate().all(|(i, page)| page.addr() == start + i * PAGE_SIZE);
    let end = start + pages.len() * PAGE_SIZE - 1;
    if !adjacent || end & !(CHUNK_BYTES - 1) != chunk {
        return None;
    }
    // SAFETY: the range is exactly the pages of `pages`, one after the other in one chunk,
    // which is one allocation (so one pointer, derived from the chunk's, may span them).
    // Each page is valid and initialized (as in `Deref`), and shared-borrowed for 'a
    // through `pages`: no `&mut` to any of them can exist meanwhile, so a shared slice
    // over all of them aliases nothing it must not.
    Some(unsafe { std::slice::from_raw_parts(first.0.as_ptr().cast::<u8>(), end + 1 - start) })
}

impl std::ops::Deref for PoolPage {
    type Target = [u8; PAGE_SIZE];

    fn deref(&self) -> &[u8; PAGE_SIZE] {
        // SAFETY: the page is valid, initialized (chunks are allocated zeroed; a released
        // page reads back as zeros) and owned by this PoolPage alone while it lives.
        unsafe { self.0.as_ref() }
    }
}

impl std::ops::DerefMut for PoolPage {
    fn deref_mut(&mut self) -> &mut [u8; PAGE_SIZE] {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { self.0.as_mut() }
    }
}

impl std::fmt::Debug for PoolPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PoolPage({:#x})", self.addr())
    }
}

/// One chunk's state.
#[derive(Debug)]
struct Chunk {
    /// Bit set: the page is free.
    free: [u64; WORDS],
    /// Bit set: the page is free and released to the kernel (`MADV_DONTNEED`).
    released: [u64; WORDS],
    free_pages: u16,
    /// Shaped for a huge page when it last started from empty ([`shape`]);
    /// false once emptied and released.
    huge: bool,
    /// The chunk's number, in the order chunks were taken from the global allocator:
    /// choices between chunks follow it, never their addresses, which the global allocator
    /// hands out in an order of its own (the simulator replays a seed to the same digest).
    seq: u64,
}

impl Chunk {
    /// Wholly free and released: no page holds memory (a new chunk is released whole
    /// first: [`new_chunk`]).
    fn new(seq: u64) -> Self {
        Chunk {
            free: [u64::MAX; WORDS],
            released: [u64::MAX; WORDS],
            free_pages: CHUNK_PAGES as u16,
            huge: false,
            seq,
        }
    }

    /// A free page, resident ones first; its index and whether it was released.
    fn pick(&self) -> Option<(usize, bool)> {
        let resident = (0..WORDS).find_map(|w| {
            let bits = self.free[w] & !self.released[w];
            (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize)
        });
        if let Some(page) = resident {
            return Some((page, false));
        }
        let any = (0..WORDS).find_map(|w| {
            (self.free[w] != 0).then(|| w * 64 + self.free[w].trailing_zeros() as usize)
        });
        any.map(|page| (page, true))
    }
}

fn bit(page: usize) -> (usize, u64) {
    (page / 64, 1u64 << (page % 64))
}

/// Arena figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Chunks held (the empty ones included).
    pub chunks: u64,
    /// Chunks held wholly free and released, for reuse (module essay).
    pub chunks_empty: u64,
    /// Chunks in use that started as a huge page (module essay); an emptied one is not.
    pub chunks_huge: u64,
    /// Pages handed out.
    pub pages_in_use: u64,
    /// Free pages still holding memory.
    pub pages_free_resident: u64,
    /// Of those, the free pages of huge chunks, which are never released one by one (module
    /// essay): the part of `pages_free_resident` a release cannot give back.
    pub pages_free_huge: u64,
    /// Free pages given back to the kernel (address space only).
    pub pages_released: u64,
    /// Chunks taken from and given back to the global allocator, over the arena's life.
    pub chunks_allocated: u64,
    /// Chunks given back.
    pub chunks_freed: u64,
    /// Chunk allocations the global allocator refused.
    pub chunk_alloc_fail: u64,
    /// Pages released by `MADV_DONTNEED` (at free past the bound, or by `trim`).
    pub pages_madvised: u64,
    /// `madvise` calls that failed (the page stays resident; counted, harmless).
    pub madvise_fail: u64,
}

#[derive(Debug, Default)]
struct ArenaState {
    /// Chunks by base address.
    chunks: BTreeMap<usize, Chunk>,
    /// Chunks' bases by number ([`Chunk::seq`]).
    by_seq: BTreeMap<u64, usize>,
    /// The next chunk's number.
    next_seq: u64,
    /// (bucket of its free pages, number) of every chunk with a free page ([`bucket`]).
    partial: BTreeSet<(u16, u64)>,
    stats: ArenaStats,
}

/// Free pages per bucket of the partial set.
const BUCKET_PAGES: u16 = 32;

/// A chunk's key in the partial set: its free pages rounded up to a bucket (0: none free,
/// not listed). Allocation takes from the lowest bucket, so from one of the fullest chunks;
/// a free or an allocation re-keys a chunk only when it crosses a bucket edge (one in 32),
/// not at every page.
fn bucket(free_pages: u16) -> u16 {
    free_pages.div_ceil(BUCKET_PAGES)
}

impl ArenaState {
    /// Re-keys chunk number `seq` in the partial set for a change of its free pages.
    fn set_free_count(&mut self, seq: u64, old: u16, new: u16) {
        let (old, new) = (bucket(old), bucket(new));
        if old == new {
            return;
        }
        if old > 0 {
            self.partial.remove(&(old, seq));
        }
        if new > 0 {
            self.partial.insert((new, seq));
        }
    }
}

/// The pool's page allocator (module essay). `Send + Sync`.
#[derive(Debug, Default)]
pub(crate) struct PageArena {
    state: Mutex<ArenaState>,
    /// Pages holding memory (in use, or free and resident), published under the lock after
    /// every change, for lock-free readers (the budget's charge).
    resident_pages: AtomicU64,
}

fn chunk_layout() -> Layout {
    match Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES) {
        Ok(layout) => layout,
        Err(_) => unreachable!("2 MiB is a valid size and power-of-two alignment"),
    }
}

/// Pages in use from which a new chunk is a huge page (module essay): 16 MiB. Below it a
/// chunk is mapped with 4 KiB pages, each resident only once handed out, so a small pool
/// holds no more memory than it uses (a fresh huge chunk would hold 2 MiB at once, all of
/// a 16 MiB budget's slack). A huge chunk's free pages stay resident until the whole
/// chunk is free (module essay).
pub const HUGE_FROM_PAGES: u64 = 8 * CHUNK_PAGES as u64;

/// Free pages of 4 KiB chunks kept resident at most before a freed page is released at
/// once: an eighth of the pages in use, at least 64 (256 KiB). A huge chunk's free pages
/// are not counted here: they are never released one by one (module essay).
fn resident_free_limit(stats: &ArenaStats) -> u64 {
    64.max(stats.pages_in_use / 8)
}

/// Free pages a release could give back: the resident free pages of 4 KiB chunks.
fn releasable(stats: &ArenaStats) -> u64 {
    stats.pages_free_resident - stats.pages_free_huge
}

impl PageArena {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A page (zeroed if never used before; else holding old bytes), or `None` when the
    /// global allocator refuses a chunk.
    ///
    /// Context: takes the arena lock; may allocate and advise a 2 MiB chunk under it (once
    /// per 512 pages).
    pub(crate) fn alloc(&self) -> Option<PoolPage> {
        let mut state = self.state.lock();
        let base = match state.partial.first() {
            Some(&(_, seq)) => *state.by_seq.get(&seq)?,
            None => new_chunk(&mut state)?,
        };
        let ArenaState { chunks, stats, .. } = &mut *state;
        let chunk = chunks.get_mut(&base)?;
        let was_empty =
            chunk.free_pages == CHUNK_PAGES as u16 && chunk.released == [u64::MAX; WORDS];
        if was_empty {
            shape(chunk, stats, base);
        }
        let (page, released) = chunk.pick()?;
        let (word, mask) = bit(page);
        chunk.free[word] &= !mask;
        chunk.released[word] &= !mask;
        let (old, huge, seq) = (chunk.free_pages, chunk.huge, chunk.seq);
        chunk.free_pages -= 1;
        state.set_free_count(seq, old, old - 1);
        state.stats.chunks_empty -= u64::from(was_empty);
        state.stats.pages_in_use += 1;
        state.stats.pages_free_huge -= u64::from(huge);
        if released {
            state.stats.pages_released -= 1;
        } else {
            state.stats.pages_free_resident -= 1;
        }
        self.publish(&state);
        let ptr = (base + page * PAGE_SIZE) as *mut [u8; PAGE_SIZE];
        NonNull::new(ptr).map(PoolPage)
    }

    fn publish(&self, state: &ArenaState) {
        let resident = state.stats.pages_in_use + state.stats.pages_free_resident;
        self.resident_pages.store(resident, Ordering::Relaxed);
    }

    /// Pages holding memory: in use, or free and still resident. Lock-free; exact when no
    /// call is running.
    pub(crate) fn resident_pages(&self) -> u64 {
        self.resident_pages.load(Ordering::Relaxed)
    }
}

/// Allocates a chunk, releases it whole (`MADV_DONTNEED`: whatever the allocator left in
/// it goes, every page reads as zeros and none is resident) and lists it, wholly free and
/// released, as a kept empty chunk; its base. [`PageArena::alloc`] shapes it before its
/// first page goes out.
fn new_chunk(state: &mut ArenaState) -> Option<usize> {
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc(chunk_layout()) };
    if ptr.is_null() {
        state.stats.chunk_alloc_fail += 1;
        return None;
    }
    let base = ptr as usize;
    if !dont_need(base, CHUNK_BYTES) {
        // No page may be handed out with bytes nobody initialized.
        state.stats.madvise_fail += 1;
        // SAFETY: the chunk is ours and CHUNK_BYTES long; nothing points into it yet.
        unsafe { std::ptr::write_bytes(ptr, 0, CHUNK_BYTES) };
    }
    let seq = state.next_seq;
    state.next_seq += 1;
    state.chunks.insert(base, Chunk::new(seq));
    state.by_seq.insert(seq, base);
    state.partial.insert((bucket(CHUNK_PAGES as u16), seq));
    state.stats.chunks += 1;
    state.stats.chunks_allocated += 1;
    state.stats.chunks_empty += 1;
    state.stats.pages_released += CHUNK_PAGES as u64;
    Some(base)
}

/// Shapes wholly free, released chunk `chunk` at `base` for its next use, under the
/// arena lock: from [`HUGE_FROM_PAGES`] in use it is advised for a huge page and zeroed
/// whole (one fault, and every page resident: the huge page would be, from any first
/// touch); below, it is advised against one, each page resident only once handed out. A
/// kept chunk is shaped again each time it starts over, as the pool's size is then.
fn shape(chunk: &mut Chunk, stats: &mut ArenaStats, base: usize) {
    let huge = stats.pages_in_use >= HUGE_FROM_PAGES;
    if huge {
        // Advised before the first touch, so the zeroing below faults in one huge page.
        advise(base, rustix::mm::Advice::LinuxHugepage);
        // SAFETY: the chunk is ours, CHUNK_BYTES long, and wholly free: no PoolPage
        // points into it.
        unsafe { std::ptr::write_bytes(base as *mut u8, 0, CHUNK_BYTES) };
        chunk.released = [0; WORDS];
        stats.pages_released -= CHUNK_PAGES as u64;
        stats.pages_free_resident += CHUNK_PAGES as u64;
        stats.pages_free_huge += CHUNK_PAGES as u64;
    } else {
        // Under THP "always" the kernel would fault in the whole 2 MiB at the first touch.
        advise(base, rustix::mm::Advice::LinuxNoHugepage);
    }
    chunk.huge = huge;
    stats.chunks_huge += u64::from(huge);
}

impl PageArena {
    /// Gives a page back.
    ///
    /// # Panics
    /// If the page is not this arena's, or is free already (a double free).
    ///
    /// Context: takes the arena lock; may release pages under it (`madvise`), or free a
    /// chunk after dropping it.
    pub(crate) fn free(&self, page: PoolPage) {
        self.free_all(std::iter::once(page));
    }

    /// Gives pages back under one lock (a zspage's pages: up to 4).
    ///
    /// # Panics
    /// As [`PageArena::free`].
    ///
    /// Context: as [`PageArena::free`]; wholly free chunks go back after the lock is dropped.
    pub(crate) fn free_all(&self, pages: impl Iterator<Item = PoolPage>) {
        let mut empty = [0usize; 4];
        let mut nr_empty = 0;
        {
            let mut state = self.state.lock();
            for page in pages {
                match Self::free_locked(&mut state, page) {
                    Some(base) if nr_empty < empty.len() => {
                        empty[nr_empty] = base;
                        nr_empty += 1;
                    }
                    // More emptied chunks than the list holds (a caller freeing many pages
                    // at once): give this one back now, under the lock. Correct, if slower.
                    Some(base) => give_back(base),
                    None => {}
                }
            }
            let limit = resident_free_limit(&state.stats);
            if releasable(&state.stats) > limit {
                Self::release_down_to(&mut state, limit / 2);
            }
            self.publish(&state);
        }
        for &base in &empty[..nr_empty] {
            give_back(base);
        }
    }

    /// Marks `page` free under the lock. A chunk left wholly free is kept released (module
    /// essay) or, past [`EMPTY_CHUNKS_MAX`] or if the kernel refuses the release, unlisted:
    /// then its base is returned, for the caller to give back after unlocking.
    fn free_locked(state: &mut ArenaState, page: PoolPage) -> Option<usize> {
        let addr = page.addr();
        let base = addr & !(CHUNK_BYTES - 1);
        let index = (addr - base) / PAGE_SIZE;
        let (word, mask) = bit(index);
        let chunk = state.chunks.get_mut(&base);
        let chunk = chunk.unwrap_or_else(|| panic!("page {addr:#x} is not the arena's"));
        assert!(chunk.free[word] & mask == 0, "page {addr:#x} freed twice");
        chunk.free[word] |= mask;
        let (old, seq) = (chunk.free_pages, chunk.seq);
        chunk.free_pages += 1;
        state.stats.pages_free_huge += u64::from(chunk.huge);
        state.stats.pages_in_use -= 1;
        state.set_free_count(seq, old, old + 1);
        state.stats.pages_free_resident += 1;
        if old + 1 < CHUNK_PAGES as u16 {
            return None;
        }
        if state.stats.chunks_empty < EMPTY_CHUNKS_MAX && Self::release_chunk(state, base) {
            state.stats.chunks_empty += 1;
            return None;
        }
        let (released, huge) =
            state.chunks.remove(&base).map_or((0, false), |c| (popcount(&c.released), c.huge));
        state.stats.chunks_huge -= u64::from(huge);
        state.stats.pages_free_huge -= if huge { CHUNK_PAGES as u64 } else { 0 };
        state.by_seq.remove(&seq);
        state.set_free_count(seq, CHUNK_PAGES as u16, 0);
        state.stats.chunks -= 1;
        state.stats.chunks_freed += 1;
        state.stats.pages_released -= released;
        state.stats.pages_free_resident -= CHUNK_PAGES as u64 - released;
        Some(base)
    }

    /// Releases every page of wholly free chunk `base` with one `madvise`, under the lock
    /// (as [`PageArena::release_locked`]); whether the kernel agreed.
    fn release_chunk(state: &mut ArenaState, base: usize) -> bool {
        let Some(chunk) = state.chunks.get_mut(&base) else { return false };
        let resident = CHUNK_PAGES as u64 - popcount(&chunk.released);
        if resident > 0 && !dont_need(base, CHUNK_BYTES) {
            state.stats.madvise_fail += 1;
            return false;
        }
        chunk.released = [u64::MAX; WORDS];
        if std::mem::take(&mut chunk.huge) {
            state.stats.chunks_huge -= 1;
            state.stats.pages_free_huge -= CHUNK_PAGES as u64;
        }
        state.stats.pages_free_resident -= resident;
        state.stats.pages_released += resident;
        state.stats.pages_madvised += resident;
        true
    }

    /// Releases runs of resident free pages of 4 KiB chunks until at most `target` remain
    /// (or `madvise` refuses: counted, the rest stay resident); returns how many pages it
    /// released.
    fn release_down_to(state: &mut ArenaState, target: u64) -> usize {
        let mut released = 0;
        while releasable(&state.stats) > target {
            let Some((base, first, count)) = first_resident_run(state) else { break };
            let before = state.stats.pages_released;
            Self::release_locked(state, base, first, count);
            if state.stats.pages_released == before {
                break;
            }
            released += count;
        }
        released
    }

    /// Releases `count` free, resident pages of chunk `base` from `first` on, under the
    /// lock: a page must not be handed out while its `MADV_DONTNEED` is in flight, or the
    /// kernel would zero the new owner's bytes (the regression test
    /// `a_page_is_never_handed_out_while_being_released`).
    fn release_locked(state: &mut ArenaState, base: usize, first: usize, count: usize) {
        let Some(chunk) = state.chunks.get_mut(&base) else { return };
        if !dont_need(base + first * PAGE_SIZE, count * PAGE_SIZE) {
            state.stats.madvise_fail += 1;
            return;
        }
        for page in first..first + count {
            let (word, mask) = bit(page);
            chunk.released[word] |= mask;
        }
        state.stats.pages_free_resident -= count as u64;
        state.stats.pages_released += count as u64;
        state.stats.pages_madvised += count as u64;
    }

    /// Releases every resident free page of a 4 KiB chunk to the kernel (a huge chunk's go
    /// back only with the whole chunk); returns how many.
    ///
    /// Context: takes the arena lock and releases every run under it (no page may be
    /// handed out while the kernel zeroes it).
    pub(crate) fn trim(&self) -> usize {
        let mut state = self.state.lock();
        let released = Self::release_down_to(&mut state, 0);
        self.publish(&state);
        released
    }

    pub(crate) fn stats(&self) -> ArenaStats {
        self.state.lock().stats
    }

    /// Asserts the module essay's invariants.
    pub(crate) fn check_invariants(&self) {
        let state = self.state.lock();
        let (mut free, mut released, mut empty, mut huge) = (0u64, 0u64, 0u64, 0u64);
        let mut free_huge = 0u64;
        for (&base, chunk) in &state.chunks {
            let count = popcount(&chunk.free);
            assert_eq!(u64::from(chunk.free_pages), count, "chunk {base:#x} free count");
            if count == CHUNK_PAGES as u64 {
                empty += 1;
                assert_eq!(popcount(&chunk.released), count, "empty chunk {base:#x} resident");
            }
            for w in 0..WORDS {
                assert_eq!(chunk.released[w] & !chunk.free[w], 0, "released page in use");
            }
            let listed = state.partial.contains(&(bucket(chunk.free_pages), chunk.seq));
            assert_eq!(state.by_seq.get(&chunk.seq), Some(&base), "chunk {base:#x} number");
            assert_eq!(listed, count > 0, "chunk {base:#x} partial listing");
            free += count;
            released += popcount(&chunk.released);
            huge += u64::from(chunk.huge);
            if chunk.huge {
                assert_eq!(popcount(&chunk.released), 0, "huge chunk {base:#x} partly released");
                free_huge += count;
            }
        }
        assert_eq!(state.partial.len(), state.chunks.iter().filter(|c| c.1.free_pages > 0).count());
        assert_eq!(state.by_seq.len(), state.chunks.len(), "numbered chunks");
        let stats = state.stats;
        assert_eq!(stats.chunks, state.chunks.len() as u64, "chunk count");
        assert_eq!(stats.chunks_empty, empty, "empty chunk count");
        assert_eq!(stats.chunks_huge, huge, "huge chunk count");
        assert!(empty <= EMPTY_CHUNKS_MAX, "{empty} empty chunks held");
        assert_eq!(stats.pages_released, released, "released pages");
        assert_eq!(stats.pages_free_resident, free - released, "resident free pages");
        assert_eq!(stats.pages_free_huge, free_huge, "free pages of huge chunks");
        let total = state.chunks.len() as u64 * CHUNK_PAGES as u64;
        assert_eq!(stats.pages_in_use, total - free, "pages in use");
        let resident = stats.pages_in_use + stats.pages_free_resident;
        assert_eq!(self.resident_pages(), resident, "published resident pages");
    }
}

impl Drop for PageArena {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        // The arena is going away, and the pool that owns it drops its pages (which never
        // touch their memory on drop) before or with it: no PoolPage is used again.
        state.chunks.keys().for_each(|&base| give_back(base));
    }
}

/// Gives chunk `base` back to the global allocator, unused and unlisted (`free_locked`
/// unlisted it, or the arena is dropped): first advised against huge pages and released
/// whole, so the allocator gets address space only. Why not leave that to the allocator:
/// the shim's arena releases a freed block but its first page (which keeps the free-list
/// link), and on a huge page that releases nothing (module essay), while the link's write
/// into a released, huge-advised chunk would fault in a whole huge page.
fn give_back(base: usize) {
    advise(base, rustix::mm::Advice::LinuxNoHugepage);
    // Refused: the memory stays the allocator's to deal with, as before; harmless.
    let _refused = dont_need(base, CHUNK_BYTES);
    // SAFETY: `base` came from `alloc` with this layout, and no PoolPage points into it
    // (the caller's contract above); it is given back once (it is no longer listed).
    unsafe { std::alloc::dealloc(base as *mut u8, chunk_layout()) };
}

/// Asks the CPU to start loading the cache line holding `value`'s first byte (a hint:
/// nothing is read, nothing can fault). Here because this is the crate's one module that
/// may use `unsafe`.
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing and cannot fault.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

fn popcount(bits: &[u64; WORDS]) -> u64 {
    bits.iter().map(|w| u64::from(w.count_ones())).sum()
}

/// The first run of free, resident pages in any 4 KiB chunk (a huge chunk's are never
/// released one by one): (base, first page, length). Scans 64 pages a word.
fn first_resident_run(state: &ArenaState) -> Option<(usize, usize, usize)> {
    let chunks = state.by_seq.values().filter_map(|base| Some((*base, state.chunks.get(base)?)));
    for (base, chunk) in chunks.filter(|(_, chunk)| !chunk.huge) {
        let resident = |w: usize| chunk.free[w] & !chunk.released[w];
        let Some(w) = (0..WORDS).find(|&w| resident(w) != 0) else { continue };
        let first = w * 64 + resident(w).trailing_zeros() as usize;
        // The run goes on while the bits stay set: through this word, then whole words.
        let mut end = first;
        while end < CHUNK_PAGES {
            let rest = resident(end / 64) >> (end % 64);
            let ones = rest.trailing_ones() as usize;
            end += ones;
            if ones == 0 || !end.is_multiple_of(64) {
                break;
            }
        }
        return Some((base, first, end - first));
    }
    None
}

/// Asks for or against huge pages over a chunk. Failure (no THP in this kernel) is
/// harmless.
fn advise(base: usize, advice: rustix::mm::Advice) {
    // SAFETY: the chunk is ours, allocated and 2 MiB long; the advice changes no contents.
    let result = unsafe { rustix::mm::madvise(base as *mut _, CHUNK_BYTES, advice) };
    let _no_thp_is_fine = result;
}

/// Releases `len` bytes of free pages at `addr`; whether the kernel agreed.
fn dont_need(addr: usize, len: usize) -> bool {
    let advice = rustix::mm::Advice::LinuxDontNeed;
    // SAFETY: the pages are free arena pages, released under the lock or in a chunk no
    // longer listed: no PoolPage points at them, and the next `alloc` of one treats it as
    // fresh (the kernel gives back zeros). The memory stays allocated to us (only its
    // contents go).
    unsafe { rustix::mm::madvise(addr as *mut _, len, advice) }.is_ok()
}

#[cfg(test)]
mod tests;
