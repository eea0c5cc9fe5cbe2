//! A disk quota shared by several swap files: the on-disk footprint of a whole process
//! tree bounded by one size (`uswap run --swap-size`), each process writing its own file.
//!
//! A swap file is sparse: it takes disk blocks only where slots were written. The file
//! backend counts its footprint in chunks of [`QUOTA_CHUNK_PAGES`] slots (2 MiB, a swap
//! cluster): the first write into a chunk reserves the chunk's bytes from the quota, and
//! the reservation lasts until the chunk is discarded whole (a punched hole) or the
//! backend is dropped. A write that needs a chunk the quota cannot give is refused as a
//! full disk would refuse it (`ENOSPC`, counted in `FileStats::refused_quota`); the engine
//! then keeps those pages in the pool or in memory, as it does on a disk low on space.
//!
//! ```text
//!   file:   |chunk 0 |chunk 1 |chunk 2 |chunk 3 | ...     one bit each in `ChunkSet`
//!   bits:       1        0        1        0               1: reserved from the quota
//!   write(slots in chunk 1): quota.reserve(2 MiB)? set bit 1, write : refuse, ENOSPC
//! ```
//!
//! The quota itself is the embedder's ([`SpaceQuota`]): `uswap run`'s is a counter in a
//! file the tree's processes map shared (crates/preload/src/member/quota.rs).
//!
//! Context: lock-free; a chunk's bit is set after its reservation succeeds, and two
//! writers racing into one new chunk both reserve, the loser giving its reservation back.

use crate::PAGE_SIZE;
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots per chunk of the quota: 512 (2 MiB), the swap device's cluster.
pub const QUOTA_CHUNK_PAGES: u64 = 512;

/// Bytes per chunk.
pub const QUOTA_CHUNK_BYTES: u64 = QUOTA_CHUNK_PAGES * PAGE_SIZE as u64;

/// Disk space shared by several backends (module essay).
pub trait SpaceQuota: Send + Sync + std::fmt::Debug {
    /// Takes `bytes` from the quota; false (nothing taken) when that would pass its limit.
    ///
    /// Context: any thread, under the engine's reclaim; must not block.
    fn reserve(&self, bytes: u64) -> bool;

    /// Gives back `bytes` taken by [`SpaceQuota::reserve`].
    fn release(&self, bytes: u64);

    /// Whether `bytes` could be reserved now (a look: nothing is taken).
    fn available(&self, bytes: u64) -> bool;
}

/// Which chunks of one file hold a reservation (module essay).
#[derive(Debug)]
pub struct ChunkSet {
    words: Box<[AtomicU64]>,
}

impl ChunkSet {
    /// No chunk reserved, for a file of `nr_pages` slots.
    pub fn new(nr_pages: u64) -> ChunkSet {
        let chunks = nr_pages.div_ceil(QUOTA_CHUNK_PAGES);
        ChunkSet { words: (0..chunks.div_ceil(64)).map(|_| AtomicU64::new(0)).collect() }
    }

    fn bit(chunk: u64) -> (usize, u64) {
        ((chunk / 64) as usize, 1 << (chunk % 64))
    }

    fn is_set(&self, chunk: u64) -> bool {
        let (word, bit) = Self::bit(chunk);
        self.words[word].load(Ordering::Acquire) & bit != 0
    }

    /// Makes sure every chunk of slots `offset .. offset + nr` holds a reservation,
    /// reserving those that do not from `quota`; false (and nothing new kept) when the
    /// quota cannot give one.
    pub fn cover(&self, quota: &dyn SpaceQuota, offset: u64, nr: u64) -> bool {
        let (first, last) = (offset / QUOTA_CHUNK_PAGES, (offset + nr - 1) / QUOTA_CHUNK_PAGES);
        for chunk in first..=last {
            if self.is_set(chunk) {
                continue;
            }
            if !quota.reserve(QUOTA_CHUNK_BYTES) {
                return false; // chunks reserved before this one stay: they are written next
            }
            let (word, bit) = Self::bit(chunk);
            if self.words[word].fetch_or(bit, Ordering::AcqRel) & bit != 0 {
                quota.release(QUOTA_CHUNK_BYTES); // another writer reserved it meanwhile
            }
        }
        true
    }

    /// Gives back the reservations of the chunks wholly inside slots `offset .. offset +
    /// nr` (discarded: the file holds no blocks there any more).
    pub fn uncover(&self, quota: &dyn SpaceQuota, offset: u64, nr: u64) {
        let first = offset.div_ceil(QUOTA_CHUNK_PAGES);
        let end = (offset + nr) / QUOTA_CHUNK_PAGES;
        for chunk in first..end {
            let (word, bit) = Self::bit(chunk);
            if self.words[word].fetch_and(!bit, Ordering::AcqRel) & bit != 0 {
                quota.release(QUOTA_CHUNK_BYTES);
            }
        }
    }

    /// Gives back every reservation (the file is going away).
    pub fn release_all(&self, quota: &dyn SpaceQuota) {
        for word in self.words.iter() {
            let bits = word.swap(0, Ordering::AcqRel);
            quota.release(u64::from(bits.count_ones()) * QUOTA_CHUNK_BYTES);
        }
    }

    /// Bytes reserved now.
    pub fn reserved_bytes(&self) -> u64 {
        let bits: u32 = self.words.iter().map(|w| w.load(Ordering::Relaxed).count_ones()).sum();
        u64::from(bits) * QUOTA_CHUNK_BYTES
    }
}

/// A quota in this process's memory: a limit and a counter (tests, and embedders whose
/// backends share one address space).
#[derive(Debug)]
pub struct LocalQuota {
    limit_bytes: u64,
    used_bytes: AtomicU64,
}

impl LocalQuota {
    /// A quota of `limit_bytes`, none used.
    pub fn new(limit_bytes: u64) -> LocalQuota {
        LocalQuota { limit_bytes, used_bytes: AtomicU64::new(0) }
    }

    /// Bytes reserved now.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }
}

impl SpaceQuota for LocalQuota {
    fn reserve(&self, bytes: u64) -> bool {
        let limit = self.limit_bytes;
        self.used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= limit)
            })
            .is_ok()
    }

    fn release(&self, bytes: u64) {
        let before = self.used_bytes.fetch_sub(bytes, Ordering::AcqRel);
        assert!(before >= bytes, "quota released more than it gave: {before} - {bytes}");
    }

    fn available(&self, bytes: u64) -> bool {
        self.used_bytes().saturating_add(bytes) <= self.limit_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_reserved_once_and_given_back() {
        let quota = LocalQuota::new(3 * QUOTA_CHUNK_BYTES);
        let set = ChunkSet::new(10 * QUOTA_CHUNK_PAGES);
        assert!(set.cover(&quota, 0, 1));
        assert!(set.cover(&quota, 511, 1), "the same chunk");
        assert_eq!(quota.used_bytes(), QUOTA_CHUNK_BYTES);
        assert!(set.cover(&quota, 511, 2), "a write across two chunks takes the second");
        assert!(set.cover(&quota, 4 * QUOTA_CHUNK_PAGES, 16));
        assert!(!set.cover(&quota, 8 * QUOTA_CHUNK_PAGES, 1), "the quota is used up");
        assert!(!quota.available(1));
        assert_eq!(set.reserved_bytes(), 3 * QUOTA_CHUNK_BYTES);
        set.uncover(&quota, 1, QUOTA_CHUNK_PAGES);
        assert_eq!(quota.used_bytes(), 3 * QUOTA_CHUNK_BYTES, "no whole chunk discarded");
        set.uncover(&quota, 0, 2 * QUOTA_CHUNK_PAGES);
        assert_eq!(quota.used_bytes(), QUOTA_CHUNK_BYTES);
        assert!(set.cover(&quota, 8 * QUOTA_CHUNK_PAGES, 1));
        set.release_all(&quota);
        assert_eq!(quota.used_bytes(), 0);
        assert_eq!(set.reserved_bytes(), 0);
    }

    #[test]
    fn racing_writers_into_one_new_chunk_keep_one_reservation() {
        let quota = std::sync::Arc::new(LocalQuota::new(64 * QUOTA_CHUNK_BYTES));
        let set = std::sync::Arc::new(ChunkSet::new(64 * QUOTA_CHUNK_PAGES));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (quota, set) = (quota.clone(), set.clone());
                std::thread::spawn(move || {
                    for chunk in 0..64 {
                        assert!(set.cover(&*quota, chunk * QUOTA_CHUNK_PAGES + t, 1));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(quota.used_bytes(), 64 * QUOTA_CHUNK_BYTES);
        assert_eq!(set.reserved_bytes(), quota.used_bytes());
    }
}
