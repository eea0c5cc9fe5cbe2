//! ZsPool: the allocator's public face: malloc, write, read, free, compact, accounting.
//!
//! Paths, in order:
//!
//! - **malloc(size)**: find the class; under its lock, take a slot in the fullest non-full
//!   zspage. If none has room: drop the lock, reserve the pages against the pool limit,
//!   ask the allocation-failure hook, allocate the zspage, take the lock again and allocate
//!   from it (or, if another thread made room meanwhile, from that room, freeing the new
//!   zspage after unlocking). Every refusal leaves the pool as it was and is counted.
//! - **free(handle)**: under the class lock, free the object and its handle slot; a zspage
//!   left empty is taken out and dropped after unlocking.
//! - **read / write(handle)**: under the class lock, copy the object out / in. Holding the
//!   lock for the copy (at most 4 KiB, ~0.1 µs) is what makes a move by compaction
//!   invisible: the copy sees the object wholly at its old place or wholly at its new one.
//! - **compact()**: class by class, rounds of "empty the emptiest zspage into the fullest"
//!   (the kernel's `__zs_compact`), one round per lock hold, freed zspages dropped between.
//!
//! Lock order: a class mutex is a leaf; only `check_invariants` holds several, taken in
//! ascending class index. No other lock exists. The failure hook runs with no lock held.
//!
//! Accounting: `pages_reserved` is taken before a zspage is allocated and given back after
//! it is dropped, so memory actually held never exceeds `max_pages`; `pages_held` and
//! `meta_bytes` change only under a class lock, by the difference between what the class
//! holds now and what it last added (`ZsPool::sync`), so with every class locked they
//! equal the sums over the classes exactly.

use crate::arena::{PageArena, PoolPage};
use crate::class::{ClassIndex, ClassTable};
use crate::error::Error;
use crate::handle::Handle;
use crate::state::ClassState;
use crate::stats::{bump, ClassStats, CompactStats, LiveCounters, PoolStats};
use crate::zspage::ZsPage;
use crate::PAGE_SIZE;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::fmt;
use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The largest pool: 2^24 pages (64 GiB). It keeps every handle-table slot index below
/// 2^31 (128 objects of 32 B per page), which the object slots' tag bit needs.
pub const MAX_POOL_PAGES: usize = 1 << 24;

/// What a zspage allocation is for, as shown to the allocation-failure hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocAttempt {
    /// The class that needs a zspage.
    pub class: ClassIndex,
    /// The object size requested.
    pub size_bytes: usize,
    /// Pages the zspage needs.
    pub pages: usize,
}

/// Fault injection: called before each zspage allocation, with no lock held; returning
/// `true` makes that `malloc` fail with [`Error::AllocFail`] exactly as if the system
/// allocator had refused (counted in `alloc_fail` and `alloc_fail_injected`).
pub type AllocFailHook = Arc<dyn Fn(&AllocAttempt) -> bool + Send + Sync>;

/// How a pool is set up.
#[derive(Clone)]
pub struct PoolConfig {
    /// The most pages all zspages together may hold, 1..=[`MAX_POOL_PAGES`].
    pub max_pages: usize,
    /// Fault injection for tests and the simulator; `None` in production.
    pub alloc_fail_hook: Option<AllocFailHook>,
}

impl PoolConfig {
    /// A pool of at most `max_bytes` of zspage memory (rounded down to pages).
    pub fn with_max_bytes(max_bytes: usize) -> Self {
        PoolConfig { max_pages: max_bytes / PAGE_SIZE, alloc_fail_hook: None }
    }

    /// The same configuration with an allocation-failure hook.
    pub fn fail_hook(mut self, hook: AllocFailHook) -> Self {
        self.alloc_fail_hook = Some(hook);
        self
    }
}

impl fmt::Debug for PoolConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolConfig")
            .field("max_pages", &self.max_pages)
            .field("alloc_fail_hook", &self.alloc_fail_hook.is_some())
            .finish()
    }
}

/// Where an object is (for tests, statistics and the simulator's checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjLocation {
    /// The object's class.
    pub class: ClassIndex,
    /// The zspage's id within the class (ids are reused after a zspage is freed).
    pub zspage: u32,
    /// The object's index in the zspage.
    pub obj: u16,
    /// Its byte offset in the zspage chain.
    pub offset_bytes: usize,
    /// Its requested size.
    pub size_bytes: usize,
    /// Whether it starts in one page of the chain and ends in the next.
    pub straddles: bool,
    /// Whether it is the last object slot of its zspage.
    pub last_in_zspage: bool,
}

/// One size class: its shape (immutable) and its state. Lock: `state`.
struct SizeClass {
    state: Mutex<ClassState>,
}

/// A zsmalloc-like pool. `Send + Sync`: share it by reference or `Arc`.
pub struct ZsPool {
    table: ClassTable,
    /// One per class of `table`, same order. Each mutex is a leaf lock (module essay).
    classes: Box<[SizeClass]>,
    /// The page limit in force ([`ZsPool::set_max_pages`]).
    max_pages: AtomicUsize,
    /// The largest limit ever in force: pages reserved under a larger limit stay reserved
    /// after it shrinks, until freed.
    max_pages_ever: AtomicUsize,
    alloc_fail_hook: Option<AllocFailHook>,
    /// Pages promised to zspages that exist or are being made; bounds real memory.
    pages_reserved: AtomicUsize,
    /// Pages held by live zspages; changed only under a class lock.
    pages_held: AtomicUsize,
    /// Metadata bytes of all classes; changed only under a class lock.
    meta_bytes: AtomicUsize,
    /// The pool structure itself and its class table.
    fixed_meta_bytes: usize,
    /// Pages of freed zspages kept for the next zspage (a leaf lock, held only to push or
    /// pop): a free-then-allocate cycle, the common case when pages come back in and go out
    /// again, then costs neither a malloc nor zeroing a fresh page. At most `SPARE_PAGES_MAX`.
    /// Not counted in `total_bytes` (like the kernel's per-CPU free page lists, which its
    /// pool size leaves out), but in `memory_bytes`: they are memory the process still
    /// holds; [`ZsPool::compact`] gives them back.
    spare: Mutex<Vec<PoolPage>>,
    spare_pages: AtomicUsize,
    /// Where every page comes from and goes back to (its own leaf lock).
    arena: PageArena,
    counters: LiveCounters,
}

/// Spare pages kept at most: 64 pages = 256 KiB (the kernel's per-CPU page lists keep a
/// few hundred KiB per CPU for the same reason), and never more than an eighth of the
/// pool's limit; given back by [`ZsPool::compact`].
const SPARE_PAGES_MAX: usize = 64;

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<ZsPool>();
};

impl ZsPool {
    /// A new, empty pool. Allocates only its class table (a few KiB).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `max_pages` is 0 or above [`MAX_POOL_PAGES`].
    pub fn new(config: PoolConfig) -> Result<Self, Error> {
        if config.max_pages == 0 || config.max_pages > MAX_POOL_PAGES {
            let value = config.max_pages;
            return Err(Error::InvalidConfig { what: "max_pages", value, max: MAX_POOL_PAGES });
        }
        let table = ClassTable::new();
        let classes: Box<[SizeClass]> = table
            .iter()
            .map(|(index, geometry)| SizeClass {
                state: Mutex::new(ClassState::new(index, geometry)),
            })
            .collect();
        let fixed_meta_bytes = size_of::<ZsPool>() + classes.len() * size_of::<SizeClass>();
        Ok(ZsPool {
            table,
            classes,
            max_pages: AtomicUsize::new(config.max_pages),
            max_pages_ever: AtomicUsize::new(config.max_pages),
            alloc_fail_hook: config.alloc_fail_hook,
            pages_reserved: AtomicUsize::new(0),
            pages_held: AtomicUsize::new(0),
            meta_bytes: AtomicUsize::new(0),
            fixed_meta_bytes,
            spare: Mutex::new(Vec::with_capacity(SPARE_PAGES_MAX)),
            spare_pages: AtomicUsize::new(0),
            arena: PageArena::new(),
            counters: LiveCounters::default(),
        })
    }

    /// The class table (shapes of all classes).
    pub fn classes(&self) -> &ClassTable {
        &self.table
    }

    /// The smallest object size stored one per page; zswap treats a page that compresses
    /// to this size or more as incompressible (it would save nothing).
    pub fn huge_class_size(&self) -> usize {
        self.table.huge_class_size()
    }

    /// The pool's page limit.
    pub fn max_pages(&self) -> usize {
        self.max_pages.load(Ordering::Relaxed)
    }

    /// Sets the page limit. A smaller limit refuses new zspages until the pool is under
    /// it; nothing held is dropped.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `max_pages` is 0 or above [`MAX_POOL_PAGES`].
    ///
    /// Context: lock-free.
    pub fn set_max_pages(&self, max_pages: usize) -> Result<(), Error> {
        if max_pages == 0 || max_pages > MAX_POOL_PAGES {
            return Err(Error::InvalidConfig {
                what: "max_pages",
                value: max_pages,
                max: MAX_POOL_PAGES,
            });
        }
        self.max_pages_ever.fetch_max(max_pages, Ordering::Relaxed);
        self.max_pages.store(max_pages, Ordering::Relaxed);
        Ok(())
    }

    /// Allocates an object of `size` bytes (contents unspecified until [`ZsPool::write`]).
    ///
    /// # Errors
    /// [`Error::InvalidSize`] outside 1..=4096; [`Error::PoolFull`] if a new zspage would
    /// pass the page limit; [`Error::AllocFail`] if memory could not be had (or the hook
    /// said so). On every error the pool is unchanged, and the matching counter bumped.
    ///
    /// Context: takes the class lock (twice when a zspage must be added); may allocate a
    /// zspage (1..=8 pages) with no lock held; may block on the class lock.
    pub fn malloc(&self, size: usize) -> Result<Handle, Error> {
        let Some(index) = self.table.class_of_size(size) else {
            bump(&self.counters.invalid_size);
            return Err(Error::InvalidSize { size });
        };
        let class = self.class(index);
        {
            let mut state = class.state.lock();
            if let Some(handle) = state.alloc_in_existing(size) {
                self.sync(&mut state);
                bump(&self.counters.mallocs);
                return Ok(handle);
            }
        }
        let fresh = self.alloc_zspage(index, size)?;
        let (handle, spare) = {
            let mut state = class.state.lock();
            let allocated = state.alloc_with_fresh(fresh, size);
            self.sync(&mut state);
            allocated
        };
        if let Some(spare) = spare {
            bump(&self.counters.zspages_spare);
            self.release_zspage(spare);
        }
        bump(&self.counters.mallocs);
        Ok(handle)
    }

    /// Reserves, checks the hook, and allocates a zspage for class `index`. No lock held.
    fn alloc_zspage(&self, index: ClassIndex, size: usize) -> Result<Box<ZsPage>, Error> {
        let geometry = self.table.geometry(index);
        let pages = geometry.pages_per_zspage;
        if !self.reserve_pages(pages) {
            bump(&self.counters.pool_full);
            return Err(Error::PoolFull { size, limit_pages: self.max_pages() });
        }
        let attempt = AllocAttempt { class: index, size_bytes: size, pages };
        let injected = self.alloc_fail_hook.as_ref().is_some_and(|hook| hook(&attempt));
        let zspage = if injected {
            None
        } else {
            let objs = geometry.objs_per_zspage;
            ZsPage::alloc_from(pages, objs, || self.spare_page(), |page| self.arena.free(page))
        };
        match zspage {
            Some(zspage) => {
                bump(&self.counters.zspages_allocated);
                Ok(zspage)
            }
            None => {
                self.pages_reserved.fetch_sub(pages, Ordering::Relaxed);
                bump(&self.counters.alloc_fail);
                if injected {
                    bump(&self.counters.alloc_fail_injected);
                }
                Err(Error::AllocFail { size, pages })
            }
        }
    }

    fn reserve_pages(&self, pages: usize) -> bool {
        let reserved =
            self.pages_reserved.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                (r + pages <= self.max_pages()).then_some(r + pages)
            });
        reserved.is_ok()
    }

    /// A page for a new zspage: a spare one, or a new one. No lock held.
    fn spare_page(&self) -> Option<PoolPage> {
        let spare = {
            // The count moves under the spare lock, with the list: `check_invariants`
            // compares the two while other threads run (the zswap stress test's
            // maintainer once saw them one apart).
            let mut spare = self.spare.lock();
            let page = spare.pop();
            if page.is_some() {
                self.spare_pages.fetch_sub(1, Ordering::Relaxed);
            }
            page
        };
        spare.or_else(|| self.arena.alloc())
    }

    /// Drops a zspage taken out of its class, keeping up to `SPARE_PAGES_MAX` of its pages
    /// for the next zspage and freeing the rest. No lock held.
    fn release_zspage(&self, zspage: Box<ZsPage>) {
        self.release_zspages([zspage]);
    }

    /// As [`ZsPool::release_zspage`] for several: the spare lock, the arena lock and each
    /// count taken once for all of them.
    fn release_zspages(&self, zspages: impl IntoIterator<Item = Box<ZsPage>>) {
        let (mut nr, mut pages) = (0, 0);
        let mut freed = zspages
            .into_iter()
            .flat_map(|zspage| {
                nr += 1;
                pages += zspage.page_count();
                zspage.into_pages()
            })
            .peekable();
        let keep = SPARE_PAGES_MAX.min(self.max_pages() / 8);
        if self.spare_pages.load(Ordering::Relaxed) < keep {
            let mut spare = self.spare.lock();
            let before = spare.len();
            while spare.len() < keep {
                let Some(page) = freed.next() else { break };
                spare.push(page);
            }
            // Taken from the end, the pages go out in the order they came in: a folio's
            // pages freed together serve the next folio stored in address order, which
            // its page-in reads with one copy (`read_each`). Pushed as they came, they would
            // go out in reverse, and a churning pool's folios would be read page by page
            // (the test `whole_pages_stored_again_from_the_spares_lie_back_to_back`).
            spare[before..].reverse();
            self.spare_pages.fetch_add(spare.len() - before, Ordering::Relaxed);
        }
        if freed.peek().is_some() {
            self.arena.free_all(&mut freed); // outside the spare lock
        }
        drop(freed);
        self.pages_reserved.fetch_sub(pages, Ordering::Relaxed);
        self.counters.zspages_freed.fetch_add(nr, Ordering::Relaxed);
    }

    /// Brings the pool totals in step with what `state` holds now. Caller holds its lock.
    fn sync(&self, state: &mut ClassState) {
        let (pages, meta) = (state.pages(), state.meta_bytes());
        adjust(&self.pages_held, state.accounted_pages, pages);
        adjust(&self.meta_bytes, state.accounted_meta_bytes, meta);
        state.accounted_pages = pages;
        state.accounted_meta_bytes = meta;
    }

    fn class(&self, index: ClassIndex) -> &SizeClass {
        &self.classes[usize::from(index.0)]
    }

    fn class_of(&self, handle: Handle) -> &SizeClass {
        let class = self.classes.get(usize::from(handle.class().0));
        class.unwrap_or_else(|| panic!("handle {handle:?} names no class of this pool"))
    }

    /// Copies `data` into the object; `data.len()` must be the size given to `malloc`.
    ///
    /// # Panics
    /// On a stale handle or a length mismatch (caller bugs).
    ///
    /// Context: takes the class lock for the copy; may block on it.
    pub fn write(&self, handle: Handle, data: &[u8]) {
        self.class_of(handle).state.lock().write(handle, data);
    }

    /// Copies the object into `buf` and returns its size.
    ///
    /// # Panics
    /// On a stale handle, or if `buf` is shorter than the object (caller bugs).
    ///
    /// Context: takes the class lock for the copy; may block on it.
    pub fn read(&self, handle: Handle, buf: &mut [u8]) -> usize {
        self.class_of(handle).state.lock().read(handle, buf)
    }

    /// Calls `reader` with the object's bytes and returns what it returns: in place when
    /// the object lies in one page, else copied into `scratch` first (the zsmalloc
    /// `zs_obj_read_begin` / `_end` pair). Saves [`ZsPool::read`]'s copy for a reader that
    /// only consumes the bytes (a decompressor).
    ///
    /// # Panics
    /// On a stale handle, or if `scratch` is shorter than the object (caller bugs).
    ///
    /// Context: `reader` runs under the class lock (compaction cannot move the object
    /// meanwhile): it must not call into this pool, and should be short (one decompression).
    pub fn read_with<R>(
        &self,
        handle: Handle,
        scratch: &mut [u8],
        reader: impl FnOnce(&[u8]) -> R,
    ) -> R {
        self.class_of(handle).state.lock().read_with(handle, scratch, reader)
    }

    /// As [`ZsPool::read_with`] for every handle in turn, holding one class lock for each
    /// run of consecutive handles of one class (a folio's objects read under a few locks,
    /// not one each): `each(i, n, bytes)` with the bytes of `handles[i..i + n]`. `n` is 1
    /// except for whole-page objects (raw pages) lying back to back in memory, which come
    /// as one slice of `n` pages, to be copied with one `memcpy` ([`crate::arena::join`]: a
    /// folio stored raw is read back at the speed of one large copy). Stops at the first
    /// error and returns it.
    ///
    /// # Panics
    /// As [`ZsPool::read_with`].
    ///
    /// Context: `each` runs under a class lock, as `read_with`'s reader: it must not call
    /// into this pool; a run's lock is held across its objects' `each`.
    pub fn read_each<E>(
        &self,
        handles: &[Handle],
        scratch: &mut [u8],
        mut each: impl FnMut(usize, usize, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut first = 0;
        for run in handles.chunk_by(|a, b| a.class() == b.class()) {
            let state = self.class_of(run[0]).state.lock();
            // Only the class of page-sized objects holds whole pages: the others' objects
            // are read as they always were, with no second look-up.
            let pages_class = state.geometry().size_bytes == PAGE_SIZE;
            // Whole pages found so far and not yet handed out, from handle `pending_from`.
            let mut pending: SmallVec<[&PoolPage; 16]> = SmallVec::new();
            let mut pending_from = first;
            for (i, &handle) in (first..).zip(run) {
                match pages_class.then(|| state.whole_page(handle)).flatten() {
                    Some(page) => {
                        let follows =
                            pending.last().is_some_and(|last| crate::arena::follows(last, page));
                        if !pending.is_empty() && !follows {
                            self.hand_out(&mut pending, pending_from, &mut each)?;
                        }
                        if pending.is_empty() {
                            pending_from = i;
                        }
                        pending.push(page);
                    }
                    None => {
                        if !pending.is_empty() {
                            self.hand_out(&mut pending, pending_from, &mut each)?;
                        }
                        state.read_with(handle, scratch, |bytes| each(i, 1, bytes))?;
                    }
                }
            }
            if !pending.is_empty() {
                self.hand_out(&mut pending, pending_from, &mut each)?;
            }
            first += run.len();
        }
        Ok(())
    }

    /// Hands `pages` (whole-page objects of handles from `from` on, in order) to a
    /// [`ZsPool::read_each`] reader: as one slice when they lie back to back, else one by
    /// one.
    fn hand_out<E>(
        &self,
        pages: &mut SmallVec<[&PoolPage; 16]>,
        from: usize,
        each: &mut impl FnMut(usize, usize, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let joined = crate::arena::join(pages).filter(|_| pages.len() > 1);
        let result = match joined {
            Some(bytes) => {
                let n = pages.len() as u64;
                self.counters.pages_read_joined.fetch_add(n, Ordering::Relaxed);
                each(from, pages.len(), bytes)
            }
            None => {
                (pages.iter().enumerate()).try_for_each(|(k, page)| each(from + k, 1, &page[..]))
            }
        };
        pages.clear();
        result
    }

    /// The object's size, as given to `malloc`.
    ///
    /// # Panics
    /// On a stale handle.
    pub fn object_size(&self, handle: Handle) -> usize {
        self.class_of(handle).state.lock().locate(handle).size
    }

    /// Where the object is now (it may move at the next compaction).
    ///
    /// # Panics
    /// On a stale handle.
    pub fn locate(&self, handle: Handle) -> ObjLocation {
        let state = self.class_of(handle).state.lock();
        let at = state.locate(handle);
        let geometry = state.geometry();
        let offset = state.offset_of(at.obj);
        let last_byte = offset + geometry.size_bytes - 1;
        ObjLocation {
            class: handle.class(),
            zspage: at.zspage,
            obj: at.obj,
            offset_bytes: offset,
            size_bytes: at.size,
            straddles: offset / PAGE_SIZE != (offset + at.size - 1) / PAGE_SIZE,
            last_in_zspage: last_byte + geometry.size_bytes
                >= geometry.pages_per_zspage * PAGE_SIZE,
        }
    }

    /// Frees the object. A zspage left empty is freed at once.
    ///
    /// # Panics
    /// On a stale handle (a double free).
    ///
    /// Context: takes the class lock; may free a zspage after unlocking.
    pub fn free(&self, handle: Handle) {
        self.free_many(std::slice::from_ref(&handle));
    }

    /// Frees the objects of `handles` (a freed folio's pages, say): each class lock taken
    /// once per run of handles of that class, and the zspages left empty released after
    /// unlocking; no allocation for up to 16 of them.
    ///
    /// # Panics
    /// On a stale handle (a double free); the handles before it are freed.
    ///
    /// Context: takes class locks in turn; frees zspages after unlocking.
    pub fn free_many(&self, handles: &[Handle]) {
        let mut emptied: SmallVec<[Box<ZsPage>; 16]> = SmallVec::new();
        for run in handles.chunk_by(|a, b| a.class() == b.class()) {
            let mut state = self.class_of(run[0]).state.lock();
            emptied.extend(run.iter().filter_map(|&handle| state.free(handle)));
            self.sync(&mut state);
        }
        self.counters.frees.fetch_add(handles.len() as u64, Ordering::Relaxed);
        if !emptied.is_empty() {
            self.release_zspages(emptied);
        }
    }

    /// Moves objects out of sparse zspages into fuller ones and frees the emptied zspages,
    /// in every class where the free slots add up to at least one zspage.
    ///
    /// Context: takes each class lock in turn, once per round (a round moves at most one
    /// zspage's objects); frees pages with no lock held. Readers and writers of other
    /// objects proceed between rounds. Bounded: at most `2 * zspages + 1` rounds a class.
    pub fn compact(&self) -> CompactStats {
        let mut stats = CompactStats::default();
        for class in self.classes.iter() {
            let rounds = 2 * class.state.lock().live_zspages() + 1;
            for _ in 0..rounds {
                let round = {
                    let mut state = class.state.lock();
                    let round = state.compact_round();
                    self.sync(&mut state);
                    round
                };
                let Some(round) = round else { break };
                stats.objects_moved += round.moved;
                if let Some(zspage) = round.freed {
                    stats.zspages_freed += 1;
                    stats.pages_freed += zspage.page_count();
                    self.release_zspage(zspage);
                }
            }
        }
        // The spare pages go too: compaction is how a pool under pressure gives memory back.
        let spare = {
            let mut spare = self.spare.lock();
            self.spare_pages.fetch_sub(spare.len(), Ordering::Relaxed);
            std::mem::take(&mut *spare)
        };
        stats.pages_freed += spare.len();
        spare.into_iter().for_each(|page| self.arena.free(page));
        stats.pages_released = self.arena.trim();
        bump(&self.counters.compactions);
        let moved = stats.objects_moved as u64;
        self.counters.objects_moved.fetch_add(moved, Ordering::Relaxed);
        let freed = stats.zspages_freed as u64;
        self.counters.zspages_compacted.fetch_add(freed, Ordering::Relaxed);
        stats
    }

    /// Memory held, in bytes: 4096 per zspage page, plus metadata (module essay of the
    /// crate says exactly what is counted). Lock-free; exact when no operation is running.
    pub fn total_bytes(&self) -> u64 {
        (self.pages_held.load(Ordering::Relaxed) * PAGE_SIZE) as u64 + self.metadata_bytes()
    }

    /// Metadata bytes of every class and of the pool structure. Lock-free.
    fn metadata_bytes(&self) -> u64 {
        (self.meta_bytes.load(Ordering::Relaxed) + self.fixed_meta_bytes) as u64
    }

    /// Memory the pool holds, in bytes: every page of its arena that is resident (in
    /// zspages, spare, or free and kept), plus metadata. What a budget on the process's
    /// resident set charges for it; [`ZsPool::total_bytes`] is the kernel's figure, for
    /// limits. Lock-free; exact when no operation is running.
    pub fn memory_bytes(&self) -> u64 {
        self.arena.resident_pages() * PAGE_SIZE as u64 + self.metadata_bytes()
    }

    /// Bytes of the objects stored, as callers sized them (zram's `compr_data_size`): set
    /// beside [`ZsPool::pages_held`], the pool's fragmentation.
    ///
    /// Context: takes each class lock in turn, briefly (a statistic, not for a hot path).
    pub fn object_bytes(&self) -> u64 {
        self.classes.iter().map(|c| c.state.lock().object_bytes() as u64).sum()
    }

    /// Pages held by zspages. Lock-free.
    pub fn pages_held(&self) -> usize {
        self.pages_held.load(Ordering::Relaxed)
    }

    /// Per-class figures, totals and counters.
    ///
    /// Context: takes each class lock in turn (not all at once).
    pub fn stats(&self) -> PoolStats {
        let classes: Vec<ClassStats> =
            self.classes.iter().map(|c| class_stats(&c.state.lock())).collect();
        let pages = classes.iter().map(|c| c.pages).sum::<usize>();
        let class_meta = classes.iter().map(|c| c.metadata_bytes).sum::<usize>();
        let metadata_bytes = class_meta + self.fixed_meta_bytes;
        PoolStats {
            total_bytes: (pages * PAGE_SIZE + metadata_bytes) as u64,
            pages,
            metadata_bytes,
            objects: classes.iter().map(|c| c.objects).sum(),
            object_bytes: classes.iter().map(|c| c.object_bytes).sum(),
            classes,
            counters: self.counters.snapshot(),
            arena: self.arena.stats(),
        }
    }

    /// The counters alone (lock-free).
    pub fn counters(&self) -> crate::Counters {
        self.counters.snapshot()
    }

    /// Asserts every invariant of every class and the pool totals.
    ///
    /// # Panics
    /// On any broken invariant (a bug).
    ///
    /// Context: takes every class lock, in ascending class order, and holds them all.
    pub fn check_invariants(&self) {
        self.table.check_invariants();
        let states: Vec<_> = self.classes.iter().map(|c| c.state.lock()).collect();
        let (mut pages, mut meta) = (0, 0);
        for state in &states {
            state.check_invariants();
            assert_eq!(state.accounted_pages, state.pages(), "class pages not synced");
            assert_eq!(state.accounted_meta_bytes, state.meta_bytes(), "class meta not synced");
            pages += state.pages();
            meta += state.meta_bytes();
        }
        assert_eq!(self.pages_held.load(Ordering::Relaxed), pages, "pool pages");
        assert_eq!(self.meta_bytes.load(Ordering::Relaxed), meta, "pool metadata");
        let reserved = self.pages_reserved.load(Ordering::Relaxed);
        assert!(reserved >= pages, "{reserved} pages reserved < {pages} held");
        let ever = self.max_pages_ever.load(Ordering::Relaxed);
        assert!(reserved <= ever, "{reserved} pages reserved > the largest limit, {ever}");
        let spare = self.spare.lock().len();
        assert_eq!(self.spare_pages.load(Ordering::Relaxed), spare, "spare page count");
        assert!(spare <= SPARE_PAGES_MAX.min(ever / 8), "{spare} spare pages kept");
        self.arena.check_invariants();
        // Pages between the arena and a zspage being built (another thread's `malloc`)
        // are reserved, not held: with no operation running the two counts meet.
        let in_use = self.arena.stats().pages_in_use as usize;
        assert!(in_use >= pages + spare, "{in_use} arena pages < {pages} held + {spare} spare");
        assert!(in_use <= reserved + spare, "{in_use} arena pages > {reserved} reserved + spare");
    }
}

fn class_stats(state: &ClassState) -> ClassStats {
    let geometry = state.geometry();
    ClassStats {
        index: state.index(),
        geometry,
        zspages: state.live_zspages(),
        pages: state.pages(),
        objects: state.objects(),
        object_bytes: state.object_bytes(),
        metadata_bytes: state.meta_bytes(),
        fullness: state.fullness(),
    }
}

/// Moves `total` by `now - before` (an unsigned difference either way).
fn adjust(total: &AtomicUsize, before: usize, now: usize) {
    if now >= before {
        total.fetch_add(now - before, Ordering::Relaxed);
    } else {
        total.fetch_sub(before - now, Ordering::Relaxed);
    }
}

impl fmt::Debug for ZsPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZsPool")
            .field("classes", &self.classes.len())
            .field("max_pages", &self.max_pages())
            .field("pages_held", &self.pages_held())
            .field("total_bytes", &self.total_bytes())
            .finish()
    }
}
