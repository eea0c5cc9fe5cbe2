//! [`Zswap`]'s load path: find the entry, read or decompress its object, and the queries
//! that look an entry up (the module essay of `zswap.rs`, **load**).

use crate::compress::PAGE_SIZE;
use crate::entry::EntryData;
use crate::error::Error;
use crate::stats::bump;
use crate::tree::Tree;
use crate::zswap::{into_handle_ref, slot_of, with_scratch, Zswap};
use slots::SwapEntry;
use smallvec::SmallVec;
use std::sync::atomic::Ordering::Relaxed;
use zpool::Handle;

impl Zswap {
    /// Loads `entry`'s page into `page`.
    ///
    /// Returns `Ok(true)` when the page was filled, `Ok(false)` when the pool holds no
    /// entry for the slot (`page` untouched).
    ///
    /// # Errors
    /// The decompressor's error ([`Error::Corrupt`], [`Error::WrongLength`],
    /// [`Error::ChecksumMismatch`]), counted in `decompress_fail`; the entry is kept and
    /// `page` is zero-filled, never partly decoded.
    ///
    /// # Panics
    /// If `entry`'s offset is beyond the device, or the slot holds an entry of another
    /// device type (caller bugs).
    ///
    /// Context: the caller owns the slot's swap-cache folio, so neither a writeback nor an
    /// invalidation of this entry runs meanwhile and its handle stays live after the tree
    /// lock is dropped (a caller that breaks this gets the pool's stale-handle panic, never
    /// another object's bytes). Takes the tree lock for the lookup only; decompresses under
    /// the class lock, straight from the pool's memory ([`ZsPool::read_with`]).
    pub fn load(&self, entry: SwapEntry, page: &mut [u8; PAGE_SIZE]) -> Result<bool, Error> {
        self.check_entry(entry);
        if self.exclusive_load {
            return self.load_exclusive(entry, page);
        }
        with_scratch(|scratch| {
            let found = {
                let (tree, key) = self.trees.lock(entry.offset());
                let Some(found) = self.find(&tree, key, entry) else {
                    bump(&self.counters.load_misses);
                    return Ok(false);
                };
                self.lru.mark_referenced(slot_of(entry));
                found
            };
            self.read_into(found.handle, found.raw, page, scratch)?;
            bump(&self.counters.zswpin);
            Ok(true)
        })
    }

    /// As [`Zswap::load`] for the `folio.len() / 4096` slots from `first` (a folio's: they
    /// lie in one tree), page `i` into `folio[i * 4096..]`, if the pool holds every one of
    /// them; `Ok(false)` reads none and counts no miss (the caller's page-by-page fallback
    /// counts each, as [`Zswap::load`] does). One tree lock for the look-ups, one class
    /// lock per run of objects in one class ([`ZsPool::read_each`]), one count: page by
    /// page, a load would pay each of these, and every locked instruction after a 4 KiB
    /// copy waits for the copy's stores to drain. Raw pages lying back to back in the pool
    /// are copied with one `memcpy` for all of them (the folio is one buffer for that
    /// reason; [`ZsPool::read_each`]).
    ///
    /// # Errors
    /// As [`Zswap::load`]: the first page that failed to decompress (zero-filled); the
    /// pages after it are not read.
    ///
    /// # Panics
    /// As [`Zswap::load`]; if the slots cross a tree, or the folio is not whole pages.
    ///
    /// Context: as [`Zswap::load`], for every slot.
    pub fn load_folio(&self, first: SwapEntry, folio: &mut [u8]) -> Result<bool, Error> {
        assert_eq!(folio.len() % PAGE_SIZE, 0, "a folio of {} bytes", folio.len());
        let nr = folio.len() / PAGE_SIZE;
        if nr == 0 {
            return Ok(true);
        }
        self.check_folio_range(first, nr as u64);
        if self.exclusive_load {
            // Each load erases its entry: read only once every one is known to be there
            // (the caller's folio keeps them there).
            if self.count_range(first, nr as u64) != nr as u64 {
                return Ok(false);
            }
            for (i, page) in folio.chunks_exact_mut(PAGE_SIZE).enumerate() {
                let page: &mut [u8; PAGE_SIZE] = page.try_into().expect("a page");
                self.load_exclusive(first.add(i as u64), page)?;
            }
            return Ok(true);
        }
        let mut handles: SmallVec<[Handle; 16]> = SmallVec::with_capacity(nr);
        let mut raw: SmallVec<[bool; 16]> = SmallVec::with_capacity(nr);
        {
            let (tree, key) = self.trees.lock(first.offset());
            // One walk down the index for the folio's slots, not one per slot.
            let mut found = tree.xa.iter_range(key..=key + nr as u64 - 1);
            for i in 0..nr as u64 {
                let Some(handle) =
                    found.next().and_then(|(at, _, e)| (at == key + i).then(|| into_handle_ref(e)))
                else {
                    return Ok(false);
                };
                self.lru.mark_referenced(slot_of(first.add(i)));
                handles.push(handle);
                raw.push(self.is_raw(handle));
            }
            self.check_type(first);
        }
        with_scratch(|scratch| {
            self.pool.read_each(&handles, scratch, |i, n, bytes| {
                let pages = &mut folio[i * PAGE_SIZE..(i + n) * PAGE_SIZE];
                // Only a raw page is a whole page in the pool (`new`: the compressor's
                // threshold is below the huge class's size), so `n > 1` is raw pages.
                if raw[i] {
                    pages.copy_from_slice(bytes);
                    return Ok(());
                }
                let page: &mut [u8; PAGE_SIZE] = pages.try_into().expect("one page");
                self.compressor.decompress(bytes, page)
            })
        })
        .inspect_err(|_| bump(&self.counters.decompress_fail))?;
        self.counters.zswpin.fetch_add(nr as u64, Relaxed);
        Ok(true)
    }

    pub(crate) fn load_exclusive(
        &self,
        entry: SwapEntry,
        page: &mut [u8; PAGE_SIZE],
    ) -> Result<bool, Error> {
        with_scratch(|scratch| {
            let (mut tree, key) = self.trees.lock(entry.offset());
            let Some(found) = self.find(&tree, key, entry) else {
                bump(&self.counters.load_misses);
                return Ok(false);
            };
            self.read_into(found.handle, found.raw, page, scratch)?;
            let erased = self.erase_locked(&mut tree, key, entry);
            drop(tree);
            if let Some(erased) = erased {
                self.release(&erased);
            }
            bump(&self.counters.exclusive_loads);
            bump(&self.counters.zswpin);
            Ok(true)
        })
    }

    /// The entry at `key` of a locked tree, `entry`'s slot. Its handle stays the entry's
    /// while the caller holds the tree lock.
    ///
    /// # Panics
    /// If `entry` is another device's than the pool's (a caller bug).
    pub(crate) fn find(&self, tree: &Tree, key: u64, entry: SwapEntry) -> Option<EntryData> {
        let handle = into_handle_ref(tree.xa.load(key)?);
        self.check_type(entry);
        Some(self.entry_data(entry, handle))
    }

    /// Fills `page` from the object at `handle`: a raw page (`raw`) is copied; a compressed
    /// object is decompressed straight out of the pool (in place, or through `scratch` when
    /// it crosses a page edge: [`ZsPool::read_with`]). The class lock is held for the
    /// decompression (compaction cannot move the object); the caller keeps the handle live
    /// (the entry's tree lock, or the slot's swap-cache folio).
    ///
    /// # Errors
    /// The decompressor's, counted in `decompress_fail`; `page` is then zero-filled.
    pub(crate) fn read_into(
        &self,
        handle: Handle,
        raw: bool,
        page: &mut [u8; PAGE_SIZE],
        scratch: &mut [u8],
    ) -> Result<(), Error> {
        if raw {
            self.pool.read(handle, page);
            return Ok(());
        }
        let decoded =
            self.pool.read_with(handle, scratch, |object| self.compressor.decompress(object, page));
        decoded.inspect_err(|_| bump(&self.counters.decompress_fail))
    }

    /// Decodes an object of `length` bytes copied out of the pool into `scratch` into `page`.
    pub(crate) fn decode(
        &self,
        length: usize,
        scratch: &[u8],
        page: &mut [u8; PAGE_SIZE],
    ) -> Result<(), Error> {
        if length == PAGE_SIZE {
            return Ok(()); // Stored raw: already in `page`.
        }
        self.compressor.decompress(&scratch[..length], page).inspect_err(|_| {
            bump(&self.counters.decompress_fail);
        })
    }

    /// Whether the pool holds an entry for `entry`'s slot.
    ///
    /// Context: takes the tree lock.
    pub fn contains(&self, entry: SwapEntry) -> bool {
        self.check_entry(entry);
        let (tree, key) = self.trees.lock(entry.offset());
        tree.xa.load(key).is_some()
    }

    /// How many of the `nr` slots from `first` the pool holds. The slots must lie in one
    /// tree, as a folio's do.
    ///
    /// # Panics
    /// As [`Zswap::invalidate_range`].
    ///
    /// Context: takes the tree lock once.
    pub fn count_range(&self, first: SwapEntry, nr: u64) -> u64 {
        if nr == 0 {
            return 0;
        }
        self.check_folio_range(first, nr);
        let (tree, key) = self.trees.lock(first.offset());
        // One walk down the index, not one per slot (the index holds order-0 entries only).
        tree.xa.iter_range(key..=key + nr - 1).count() as u64
    }
}
