//! [`Zswap`]: store, load, invalidate, limits and accounting.
//!
//! Paths, in order (mm/zswap.c's `zswap_store` and `zswap_load`):
//!
//! - **store(entry, page)**: check the limit (with hysteresis); compress into this
//!   thread's scratch buffer (a page that does not compress below the huge-class size, or
//!   that the compressor fails on, is stored raw or rejected); allocate the object and
//!   copy it in; make sure the slot's LRU links exist; then under the tree lock store the
//!   handle in the index and, under the LRU lock inside, unlink the entry it replaced and
//!   link the slot at the head, referenced. The replaced entry's object is freed after
//!   unlocking. On any refusal, the
//!   slot's older entry is invalidated (§10 item 3: a stale entry written back later would
//!   overwrite newer data on the device).
//! - **load(entry, page)**: under the tree lock, find the entry's handle and set its
//!   referenced bit; then read the object (a raw page straight into the caller's page, a
//!   compressed one decompressed under the class lock). A decompression failure is
//!   counted and returned; the entry stays. Exclusive loads decompress under the tree
//!   lock and erase the entry in the same hold.
//! - **invalidate(entry)**: under the tree lock erase the entry and unlink it from the LRU;
//!   free the object after unlocking. Takes only zswap's own locks and never waits for
//!   anything else, so the swap device may call it with a cluster lock held.
//!
//! Object lifetime rule: a handle is read only under the tree lock while the tree holds
//! its entry, and freed only after the entry has left the tree. So no path reads a freed
//! object, whatever the caller does concurrently.

use crate::compress::{Compressor, CompressorKind, PAGE_SIZE};
use crate::config::{Incompressible, Limits, ZswapConfig};
use crate::entry::EntryData;
use crate::error::{Error, Reject};
use crate::faults::FaultHooks;
use crate::lru::{LruList, Slot};
use crate::stats::{bump, Counters, ZswapStats};
use crate::tree::{Tree, Trees};
use slots::{SwapEntry, SwapType};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use xarray::{Entry, EntryRef, NoItems};
use zpool::{ClassIndex, Handle, PoolConfig, ZsPool};

thread_local! {
    /// One compression buffer per thread (the kernel's per-CPU `acomp_ctx` buffer): the
    /// compressor's output on store, the object copied out of the pool on load.
    static SCRATCH: RefCell<Box<[u8]>> =
        RefCell::new(vec![0u8; crate::compress::COMPRESS_OUT_BYTES].into_boxed_slice());
}

/// Runs `f` with this thread's compression buffer, or with one on the stack when the
/// thread's is gone or in use: a thread that is exiting has destroyed its thread-locals,
/// and under the shim's SIGBUS delivery such a thread still faults (its last `free`, its
/// thread-local destructors touching swapped memory) and serves the fault itself, here;
/// `with` would panic there ("cannot access a Thread Local Storage value during or after
/// destruction").
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut f = Some(f);
    let done = SCRATCH.try_with(|scratch| {
        let mut scratch = scratch.try_borrow_mut().ok()?;
        f.take().map(|f| f(&mut scratch))
    });
    match (done, f) {
        (Ok(Some(result)), _) => result,
        (_, Some(f)) => f(&mut [0u8; crate::compress::COMPRESS_OUT_BYTES]),
        (_, None) => unreachable!("the buffer's closure ran without a result"),
    }
}

/// A compressed pool in front of one swap device. `Send + Sync`: share it by reference or
/// `Arc`.
///
/// Lock order: a tree lock → the LRU lock → a zpool class lock (and the compressor's
/// context-stack lock, a leaf). At most one tree lock is held at a time, except by
/// [`Zswap::check_invariants`], which takes them all in ascending order first. No lock is
/// held while a [`crate::WritebackTarget`] or a fault hook is called.
pub struct Zswap {
    /// The index; each tree behind its own lock.
    pub(crate) trees: Trees,
    /// The LRU; its own lock.
    pub(crate) lru: LruList,
    /// The objects; a lock per size class inside.
    pub(crate) pool: ZsPool,
    /// The codec; a context-stack lock inside (leaf).
    pub(crate) compressor: Compressor,
    /// The limits in force: `max_pool_bytes` and `accept_bytes`, read whole by the store
    /// path and changed only by [`Zswap::set_budget`].
    max_pool_bytes: AtomicU64,
    accept_bytes: AtomicU64,
    /// The configuration's percentages, to derive the limits from a new budget.
    max_pool_percent: u32,
    accept_threshold_percent: u32,
    incompressible: Incompressible,
    pub(crate) exclusive_load: bool,
    nr_slots: u64,
    /// The class raw pages go to, and only they (a compressed object smaller than its
    /// size is stored compressed, anything larger raw): an entry is raw when its handle
    /// names it.
    huge_class: ClassIndex,
    /// The swap type of the device this pool serves, set by the first store
    /// ([`NO_TYPE`] before): entries carry no type of their own.
    swap_type: AtomicU8,
    /// Set when the pool reaches its limit; cleared when it is back at or under the accept
    /// threshold (no lock: a flag, read and written whole).
    reached_full: AtomicBool,
    /// Bytes of the fixed structures: this struct, the tree table, the LRU chunk table.
    fixed_bytes: u64,
    /// Pool objects no tree entry owns (allocated, not yet published; or erased, not yet
    /// freed) in bits 0..32, and a change count in bits 32..64, so the invariant check can
    /// tell a quiet moment (module `check`).
    unowned: AtomicU64,
    faults: FaultHooks,
    pub(crate) counters: Counters,
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Zswap>();
};

/// `Zswap::swap_type` before the first store.
const NO_TYPE: u8 = u8::MAX;

impl Zswap {
    /// A pool for a swap device of `nr_slots` slots, configured by `config`.
    ///
    /// # Errors
    /// [`Error::ZeroBudget`], [`Error::Percent`], [`Error::PoolLimit`] (a limit under 1
    /// MiB or over 64 GiB), [`Error::NrSlots`], and the compressor's setup errors
    /// ([`Error::ZstdLevel`], [`Error::Threshold`], [`Error::DictionaryUnsupported`],
    /// [`Error::Setup`]).
    ///
    /// Context: allocates the tree table (64 bytes per 64 MiB of device), the LRU chunk
    /// table (8 bytes per 1024 slots) and the allocator's class table.
    pub fn new(config: ZswapConfig, nr_slots: u64) -> Result<Zswap, Error> {
        Self::with_faults(config, nr_slots, FaultHooks::default())
    }

    /// As [`Zswap::new`], with fault-injection hooks (tests and the simulator).
    ///
    /// # Errors
    /// As [`Zswap::new`].
    pub fn with_faults(
        config: ZswapConfig,
        nr_slots: u64,
        faults: FaultHooks,
    ) -> Result<Zswap, Error> {
        let limits = Limits::new(&config)?;
        if nr_slots == 0 || nr_slots > slots::MAX_SLOTS {
            return Err(Error::NrSlots { nr_slots, max: slots::MAX_SLOTS });
        }
        let pool_config = PoolConfig {
            max_pages: limits.zpool_max_pages(),
            alloc_fail_hook: faults.alloc_fail.clone(),
        };
        let pool = ZsPool::new(pool_config).map_err(|e| Error::Pool { reason: e.to_string() })?;
        // A page compressed to the huge-class size or more takes a whole page in the pool:
        // storing it compressed would save nothing and cost a decompression.
        let mut compressor = config.compressor;
        compressor.threshold_bytes = compressor.threshold_bytes.min(pool.huge_class_size());
        let compressor = Compressor::with_config(compressor)?;
        let huge_class = pool.classes().class_of_size(PAGE_SIZE).expect("a page has a class");
        let trees = Trees::new(nr_slots);
        let lru = LruList::new(nr_slots);
        let fixed_bytes =
            (std::mem::size_of::<Zswap>() + lru.table_bytes()) as u64 + trees.table_bytes();
        Ok(Zswap {
            trees,
            lru,
            pool,
            compressor,
            max_pool_bytes: AtomicU64::new(limits.max_pool_bytes),
            accept_bytes: AtomicU64::new(limits.accept_bytes),
            max_pool_percent: config.max_pool_percent,
            accept_threshold_percent: config.accept_threshold_percent,
            incompressible: config.incompressible,
            exclusive_load: config.exclusive_load,
            nr_slots,
            huge_class,
            swap_type: AtomicU8::new(NO_TYPE),
            reached_full: AtomicBool::new(false),
            fixed_bytes,
            unowned: AtomicU64::new(0),
            faults,
            counters: Counters::default(),
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        Limits {
            max_pool_bytes: self.max_pool_bytes.load(Relaxed),
            accept_bytes: self.accept_bytes.load(Relaxed),
        }
    }

    /// Derives the limits from a new budget (the configuration's percentages of it), as
    /// the kernel's zswap follows a memory cgroup whose limit changes: a smaller limit
    /// refuses stores until writeback brings the pool under it; nothing stored is
    /// dropped. Returns the new limits.
    ///
    /// # Errors
    /// As [`Limits::new`] for the new budget; the limits in force are then unchanged.
    ///
    /// Context: lock-free.
    pub fn set_budget(&self, budget_bytes: u64) -> Result<Limits, Error> {
        let limits =
            Limits::of(budget_bytes, self.max_pool_percent, self.accept_threshold_percent)?;
        self.pool
            .set_max_pages(limits.zpool_max_pages())
            .map_err(|e| Error::Pool { reason: e.to_string() })?;
        self.max_pool_bytes.store(limits.max_pool_bytes, Relaxed);
        self.accept_bytes.store(limits.accept_bytes, Relaxed);
        Ok(limits)
    }

    /// The compressor.
    pub fn compressor(&self) -> &Compressor {
        &self.compressor
    }

    /// The pool allocator (for statistics and benchmarks).
    pub fn zpool(&self) -> &ZsPool {
        &self.pool
    }

    /// Slots of the device this pool serves.
    pub fn nr_slots(&self) -> u64 {
        self.nr_slots
    }

    // ---- store -----------------------------------------------------------------------

    /// Compresses and stores one page for `entry`. On any failure, any older entry for the
    /// same slot is invalidated and the reason returned.
    ///
    /// # Errors
    /// [`Reject::PoolLimit`] (over the limit, or not yet back under the accept threshold),
    /// [`Reject::CompressFail`] / [`Reject::CompressPoor`] (only with
    /// [`Incompressible::Reject`]), [`Reject::AllocFail`]. Each is counted.
    ///
    /// # Panics
    /// If `entry`'s offset is beyond the device (a caller bug).
    ///
    /// Context: the caller owns the slot (no store or invalidate of it runs meanwhile).
    /// Takes the tree lock, the LRU lock inside it, and zpool class locks; may allocate a
    /// zspage or an LRU chunk with no lock held; calls the fault hooks with no lock held.
    ///
    /// # Panics
    /// Also if `entry` is of another swap type than the pool's earlier stores (one pool
    /// serves one device).
    pub fn store(&self, entry: SwapEntry, page: &[u8; PAGE_SIZE]) -> Result<(), Reject> {
        self.check_entry(entry);
        let result = self.try_store(entry, page);
        if result.is_err() && self.erase(entry, None) {
            bump(&self.counters.failed_store_invalidated);
        }
        result
    }

    fn try_store(&self, entry: SwapEntry, page: &[u8; PAGE_SIZE]) -> Result<(), Reject> {
        if self.check_limits() {
            return Err(Reject::PoolLimit);
        }
        with_scratch(|scratch| {
            let object = self.compress(entry, page, scratch)?;
            let handle = self.alloc_object(object.len())?;
            self.pool.write(handle, object);
            self.lru.prepare(slot_of(entry));
            self.publish(&EntryData { swpentry: entry, handle, raw: self.is_raw(handle) })
        })
    }

    /// The object to store for `page`: its compressed form in `scratch`, or the page
    /// itself when it is stored raw.
    fn compress<'a>(
        &self,
        entry: SwapEntry,
        page: &'a [u8; PAGE_SIZE],
        scratch: &'a mut [u8],
    ) -> Result<&'a [u8], Reject> {
        if self.compressor.kind() == CompressorKind::None {
            return Ok(&page[..]);
        }
        let injected = self.faults.compress_fail.as_ref().is_some_and(|hook| hook(entry));
        let result = if injected {
            Err(Error::CompressFailed { reason: "injected fault".into() })
        } else {
            self.compressor.compress(page, scratch)
        };
        let store_raw = self.incompressible == Incompressible::StoreRaw;
        match result {
            Ok(len) => Ok(&scratch[..len]),
            Err(Error::Incompressible { .. }) if store_raw => Ok(&page[..]),
            Err(Error::Incompressible { .. }) => {
                bump(&self.counters.reject_compress_poor);
                Err(Reject::CompressPoor)
            }
            Err(_) if store_raw => {
                bump(&self.counters.compress_fail_stored_raw);
                Ok(&page[..])
            }
            Err(_) => {
                bump(&self.counters.reject_compress_fail);
                Err(Reject::CompressFail)
            }
        }
    }

    fn alloc_object(&self, len: usize) -> Result<zpool::Handle, Reject> {
        self.move_unowned(1);
        let result = self.pool.malloc(len);
        if result.is_err() {
            self.move_unowned(-1);
        }
        match result {
            Ok(handle) => Ok(handle),
            Err(zpool::Error::PoolFull { .. }) => {
                bump(&self.counters.pool_limit_hit);
                self.reached_full.store(true, Relaxed);
                Err(Reject::PoolLimit)
            }
            Err(_) => {
                bump(&self.counters.reject_alloc_fail);
                Err(Reject::AllocFail)
            }
        }
    }

    /// Puts `new` (its object written, its slot's LRU links prepared) in its tree and its
    /// slot at the head of the LRU, replacing (and then freeing) the slot's older entry.
    fn publish(&self, new: &EntryData) -> Result<(), Reject> {
        self.check_type(new.swpentry);
        let slot = slot_of(new.swpentry);
        let (mut tree, key) = self.trees.lock(new.swpentry.offset());
        let old = match tree.xa.store(key, Entry::Value(new.handle.to_raw())) {
            Ok(old) => old.map(|old| self.entry_data(new.swpentry, into_handle(old))),
            Err(_refused) => {
                // A store over an empty key may need an XArray node and be refused;
                // handled as an allocation failure.
                drop(tree);
                self.pool.free(new.handle);
                self.move_unowned(-1);
                bump(&self.counters.reject_alloc_fail);
                return Err(Reject::AllocFail);
            }
        };
        self.trees.sync(&mut tree);
        self.count_stored(1, raw_share(new));
        self.move_unowned(-1);
        {
            let mut list = self.lru.list.lock();
            if old.is_some() {
                self.lru.remove(&mut list, slot);
            }
            self.lru.push_head(&mut list, slot);
            // A new entry survives one pass of the LRU, as the kernel's does.
            self.lru.mark_referenced(slot);
        }
        if let Some(old) = &old {
            self.count_gone(1, raw_share(old));
        }
        drop(tree);
        if let Some(old) = old {
            self.pool.free(old.handle);
            self.move_unowned(-1);
            bump(&self.counters.replaced_entries);
        }
        bump(&self.counters.zswpout);
        Ok(())
    }

    /// Whether the object at `handle` is a page stored raw (it is in the huge class).
    pub(crate) fn is_raw(&self, handle: Handle) -> bool {
        handle.class() == self.huge_class
    }

    /// The data of `entry`'s entry, whose object is `handle`.
    pub(crate) fn entry_data(&self, entry: SwapEntry, handle: Handle) -> EntryData {
        EntryData { swpentry: entry, handle, raw: self.is_raw(handle) }
    }

    /// Records the pool's swap type at its first store, and checks every entry against it.
    ///
    /// # Panics
    /// If `entry` is another device's (a caller bug).
    ///
    /// Context: lock-free; a plain load once the type is known (no locked instruction on
    /// the load path).
    pub(crate) fn check_type(&self, entry: SwapEntry) {
        let ty = entry.swap_type().get();
        let mut known = self.swap_type.load(Relaxed);
        if known == NO_TYPE {
            known = match self.swap_type.compare_exchange(NO_TYPE, ty, Relaxed, Relaxed) {
                Ok(_) => ty,
                Err(known) => known,
            };
        }
        assert_eq!(known, ty, "{entry:?}: this pool serves swap type {known}");
    }

    /// The entry of `slot` (a slot the LRU names), with the pool's swap type.
    pub(crate) fn entry_of(&self, slot: Slot) -> SwapEntry {
        let ty = SwapType::new(self.swap_type.load(Relaxed)).expect("a stored swap type");
        SwapEntry::new(ty, u64::from(slot))
    }

    /// Moves the count of unowned objects by `delta` and its change count by `|delta|`.
    fn move_unowned(&self, delta: i64) {
        const CHANGE: u64 = 1 << 32;
        let step = (CHANGE * delta.unsigned_abs()).wrapping_add_signed(delta);
        self.unowned.fetch_add(step, Relaxed);
    }

    /// The unowned-object word (count and change count), for the invariant check.
    pub(crate) fn unowned_word(&self) -> u64 {
        self.unowned.load(Relaxed)
    }

    /// Moves `stored_pages` by `delta` and `stored_incompressible_pages` by `raw` (the raw
    /// entries among them; two's complement adds, so either may be negative). Caller holds
    /// the entries' tree lock.
    fn count_stored(&self, delta: i64, raw: i64) {
        self.counters.stored_pages.fetch_add(delta as u64, Relaxed);
        if raw != 0 {
            self.counters.stored_incompressible_pages.fetch_add(raw as u64, Relaxed);
        }
    }

    /// Counts `n` entries just erased from their tree and the LRU (`raw` of them stored raw)
    /// as no longer stored: their objects are unowned until [`Zswap::release`] or
    /// [`ZsPool::free_many`] frees them. Caller holds the entries' tree lock.
    fn count_gone(&self, n: i64, raw: i64) {
        self.count_stored(-n, -raw);
        self.move_unowned(n);
    }

    // ---- limits ----------------------------------------------------------------------

    /// The store path's limit check (the kernel's `zswap_check_limits`): counts
    /// `pool_limit_hit` at or over the limit, `reject_accept_threshold` while refusing
    /// below it. Returns whether the store must be refused.
    fn check_limits(&self) -> bool {
        let total = self.total_bytes();
        let full = self.update_full(total);
        if total >= self.max_pool_bytes.load(Relaxed) {
            bump(&self.counters.pool_limit_hit);
        } else if full {
            bump(&self.counters.reject_accept_threshold);
        }
        full
    }

    /// Applies the hysteresis to `total` and returns whether the pool is full.
    fn update_full(&self, total: u64) -> bool {
        if total >= self.max_pool_bytes.load(Relaxed) {
            self.reached_full.store(true, Relaxed);
            return true;
        }
        if self.reached_full.load(Relaxed) && total <= self.accept_bytes.load(Relaxed) {
            self.reached_full.store(false, Relaxed);
        }
        self.reached_full.load(Relaxed)
    }

    /// True while the pool is over its limit and has not yet come back under the accept
    /// threshold (hysteresis).
    ///
    /// Context: lock-free.
    pub fn is_full(&self) -> bool {
        self.update_full(self.total_bytes())
    }

    /// The pool's size for its limits (`pool_total_size`): the allocator's zspage pages
    /// and metadata, plus zswap's index nodes, entries, LRU chunks and fixed tables.
    ///
    /// Context: lock-free; exact when no operation is running.
    pub fn total_bytes(&self) -> u64 {
        self.pool.total_bytes() + self.metadata_bytes()
    }

    /// Memory the pool holds, which a budget charges: [`Zswap::total_bytes`] with every
    /// resident page of the allocator's arena in place of its zspage pages (the free pages
    /// it keeps for the next zspage are resident too: `ZsPool::memory_bytes`).
    ///
    /// Context: lock-free; exact when no operation is running.
    pub fn memory_bytes(&self) -> u64 {
        self.pool.memory_bytes() + self.metadata_bytes()
    }

    /// Bytes of the pages that hold compressed objects (the allocator's zspages), without
    /// metadata or the free pages its arena keeps: the store itself, as zram's
    /// `mem_used_total` is. A pool beside the budget leaves this part out of the charge;
    /// the rest of [`Zswap::memory_bytes`] is charged.
    ///
    /// Context: lock-free.
    pub fn data_bytes(&self) -> u64 {
        (self.pool.pages_held() * zpool::PAGE_SIZE) as u64
    }

    fn metadata_bytes(&self) -> u64 {
        self.fixed_bytes + self.trees.bytes.load(Relaxed) + self.lru.chunk_bytes.load(Relaxed)
    }

    /// Entries stored now.
    pub fn stored_pages(&self) -> u64 {
        self.counters.stored_pages.load(Relaxed)
    }

    // ---- invalidate -------------------------------------------------------------------

    /// Drops the entry if present.
    ///
    /// # Panics
    /// If `entry`'s offset is beyond the device (a caller bug).
    ///
    /// Context: called from the swap device's slot-free hook with a cluster lock held:
    /// takes only zswap's own locks (the tree lock, the LRU lock inside it, a class lock
    /// after both are dropped) and never waits for anything else. Frees memory.
    pub fn invalidate(&self, entry: SwapEntry) {
        self.check_entry(entry);
        if self.erase(entry, None) {
            bump(&self.counters.invalidated);
        }
    }

    /// Drops the entries of the `nr` slots from `first` (a freed folio's): the tree lock and
    /// the LRU lock taken once for all of them, the objects freed together after both are
    /// dropped ([`ZsPool::free_many`]); no allocation for a 64 KiB folio's 16.
    /// The slots must lie in one tree (a folio's slots do: at most 512, aligned).
    ///
    /// # Panics
    /// If the range leaves the device or crosses a tree (caller bugs).
    ///
    /// Context: as [`Zswap::invalidate`].
    pub fn invalidate_range(&self, first: SwapEntry, nr: u64) {
        match nr {
            0 => return,
            1 => return self.invalidate(first),
            _ => {}
        }
        self.check_folio_range(first, nr);
        let mut handles: SmallVec<[Handle; 16]> = SmallVec::new();
        {
            let (mut tree, key) = self.trees.lock(first.offset());
            let (mut list, mut nr_raw) = (None, 0);
            // One walk down the index for the folio's slots, not two per slot.
            tree.xa.erase_range(key..=key + nr - 1, |at, _, erased| {
                let entry = self.entry_data(first.add(at - key), into_handle(erased));
                let list = list.get_or_insert_with(|| self.lru.list.lock());
                nr_raw += raw_share(&entry);
                self.lru.remove(list, slot_of(entry.swpentry));
                handles.push(entry.handle);
            });
            if handles.is_empty() {
                return;
            }
            drop(list);
            self.count_gone(handles.len() as i64, nr_raw);
            self.trees.sync(&mut tree);
        }
        self.pool.free_many(&handles);
        self.move_unowned(-(handles.len() as i64));
        self.counters.invalidated.fetch_add(handles.len() as u64, Relaxed);
    }

    /// Erases `entry`'s slot, only if its entry's object is `expected` when one is given
    /// (the identity of an entry: a handle's generation changes whenever its slot is
    /// reused). Returns whether an entry was erased.
    ///
    /// Context: takes the tree lock, then the LRU lock; frees the object after both.
    pub(crate) fn erase(&self, entry: SwapEntry, expected: Option<Handle>) -> bool {
        let (mut tree, key) = self.trees.lock(entry.offset());
        let Some(found) = self.find(&tree, key, entry) else {
            return false;
        };
        if expected.is_some_and(|expected| found.handle != expected) {
            return false;
        }
        let erased = self.erase_locked(&mut tree, key, entry);
        drop(tree);
        erased.map(|erased| self.release(&erased)).is_some()
    }

    /// Erases `key`, `entry`'s, from a locked tree and unlinks its slot from the LRU.
    /// Returns the entry's data, for [`Zswap::release`] after unlocking.
    pub(crate) fn erase_locked(
        &self,
        tree: &mut Tree,
        key: u64,
        entry: SwapEntry,
    ) -> Option<EntryData> {
        let erased = self.entry_data(entry, into_handle(tree.xa.erase(key)?));
        self.trees.sync(tree);
        self.lru.remove(&mut self.lru.list.lock(), slot_of(entry));
        self.count_gone(1, raw_share(&erased));
        Some(erased)
    }

    /// Frees an erased entry's object. No lock held.
    pub(crate) fn release(&self, erased: &EntryData) {
        self.pool.free(erased.handle);
        self.move_unowned(-1);
    }

    /// # Panics
    /// If the `nr` (at least one) slots from `first` leave the device or cross a tree (a
    /// folio's slots never do: at most 512, aligned).
    pub(crate) fn check_folio_range(&self, first: SwapEntry, nr: u64) {
        let last = first.add(nr - 1);
        self.check_entry(last);
        let same_tree = first.offset() >> crate::TREE_SHIFT == last.offset() >> crate::TREE_SHIFT;
        assert!(same_tree, "slots {first:?}+{nr} cross a tree");
    }

    /// # Panics
    /// If `entry` is beyond the device.
    pub(crate) fn check_entry(&self, entry: SwapEntry) {
        assert!(
            entry.offset() < self.nr_slots,
            "{entry:?} beyond a device of {} slots",
            self.nr_slots
        );
    }

    // ---- maintenance -----------------------------------------------------------------

    /// Compacts the pool allocator (moves objects out of sparse zspages and frees them);
    /// returns what it did.
    ///
    /// Context: takes each class lock in turn; readers and writers proceed between rounds.
    pub fn compact(&self) -> zpool::CompactStats {
        self.pool.compact()
    }

    /// Rewrites `entry`'s stored object in place with `mutate` (same length): fault
    /// injection for tests and the simulator (a bit flip in the pool's memory). Returns
    /// whether the slot held an entry.
    ///
    /// Context: takes the tree lock and a class lock inside it; calls `mutate` under both.
    pub fn corrupt_object(&self, entry: SwapEntry, mutate: impl FnOnce(&mut [u8])) -> bool {
        self.check_entry(entry);
        let (tree, key) = self.trees.lock(entry.offset());
        let Some(found) = self.find(&tree, key, entry) else {
            return false;
        };
        let mut object = vec![0u8; self.pool.object_size(found.handle)];
        self.pool.read(found.handle, &mut object);
        mutate(&mut object);
        self.pool.write(found.handle, &object);
        true
    }

    /// A snapshot of the counters (the kernel's debugfs names, and uswap's own) and sizes.
    ///
    /// Context: takes each pool class lock in turn, briefly, for `compressed_bytes`; the
    /// rest is lock-free.
    pub fn stats(&self) -> ZswapStats {
        let mut stats = ZswapStats::default();
        self.counters.snapshot_into(&mut stats);
        stats.reject_reclaim_fail = stats.writeback_warm_stop
            + stats.writeback_skipped_freed
            + stats.writeback_raced
            + stats.writeback_decompress_fail
            + stats.writeback_write_fail;
        stats.pool_bytes = self.pool.total_bytes();
        stats.metadata_bytes = self.metadata_bytes();
        stats.pool_total_size = stats.pool_bytes + stats.metadata_bytes;
        stats.compressed_bytes = self.pool.object_bytes();
        let limits = self.limits();
        stats.max_pool_bytes = limits.max_pool_bytes;
        stats.accept_threshold_bytes = limits.accept_bytes;
        stats.is_full = self.reached_full.load(Relaxed);
        stats.raw_pages_loaded_joined = self.pool.counters().pages_read_joined;
        stats
    }

    /// The LRU from newest to coldest: each entry's slot and referenced bit (for tests,
    /// the simulator and `uswap stat`; the writeback order is the reverse).
    ///
    /// Context: takes the LRU lock; allocates the result under it (a diagnostic, not for a
    /// hot path).
    pub fn lru_order(&self) -> Vec<(SwapEntry, bool)> {
        let list = self.lru.list.lock();
        let entry = |slot| (self.entry_of(slot), self.lru.is_referenced(slot));
        self.lru.iter(&list).map(entry).collect()
    }

    pub(crate) fn fixed_bytes(&self) -> u64 {
        self.fixed_bytes
    }
}

/// The handle an index entry holds.
///
/// # Panics
/// If the value is no handle (the index holds nothing else: a bug).
fn into_handle(entry: Entry<NoItems>) -> Handle {
    match entry {
        Entry::Value(value) => handle_of(value),
        Entry::Item(never) => match never {},
    }
}

/// The handle an index entry holds, borrowed.
pub(crate) fn into_handle_ref(entry: EntryRef<'_, xarray::NoItem>) -> Handle {
    handle_of(entry.value().expect("the zswap index holds no items"))
}

fn handle_of(value: u64) -> Handle {
    Handle::from_raw(value).unwrap_or_else(|| panic!("index value {value:#x} is no handle"))
}

/// The LRU's name for `entry`'s slot.
pub(crate) fn slot_of(entry: SwapEntry) -> Slot {
    Slot::try_from(entry.offset()).expect("offsets are below MAX_SLOTS")
}

impl fmt::Debug for Zswap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Zswap")
            .field("compressor", &self.compressor.kind())
            .field("limits", &self.limits())
            .field("nr_slots", &self.nr_slots)
            .field("stored_pages", &self.stored_pages())
            .field("total_bytes", &self.total_bytes())
            .finish()
    }
}

/// 1 for an entry stored raw, else 0: its share of `stored_incompressible_pages`.
fn raw_share(entry: &EntryData) -> i64 {
    i64::from(entry.raw)
}
