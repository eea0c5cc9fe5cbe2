//! The slot table: per slot, the write number of its current data and the set of servers
//! holding a good copy of that write.
//!
//! ```text
//!   chunks[slot / 512] ── OnceLock<Box<[Meta; 512]>>   (allocated on the chunk's first write)
//!   Meta { seq: u64 (0: never written or discarded), holders: u32 (bit i: server i) }
//!   stripes[slot % 64] ── Mutex<()>: held to change seq, or holders of a given seq
//! ```
//!
//! Who changes what: `write` sets a new seq and empties holders; the flusher and the
//! repairer add holders for the seq they stored; a read that found a copy bad, and the
//! repairer for a server that went down or came back empty, take holders away. Each change
//! is made under the slot's stripe lock after checking the seq is still the one it is
//! about, so a commit for an older write never lands on a newer one. Reads take no lock:
//! the engine never reads a slot while writing it, and the internal changes only add
//! holders of the current write or take away copies that are gone.
//!
//! Cost: 16 bytes per slot of a chunk ever written (0.4% of the pages), 8 bytes per chunk
//! otherwise.

use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// Slots per chunk: one swap cluster.
pub(crate) const CHUNK_SLOTS: usize = 512;

const STRIPES: usize = 64;

/// One slot's entry.
#[derive(Debug, Default)]
pub(crate) struct Meta {
    seq: AtomicU64,
    holders: AtomicU32,
}

/// A slot's state as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Snapshot {
    pub(crate) seq: u64,
    pub(crate) holders: u32,
}

/// The table (module essay).
#[derive(Debug)]
pub(crate) struct Table {
    chunks: Box<[OnceLock<Box<[Meta]>>]>,
    stripes: [Mutex<()>; STRIPES],
    /// The last write number handed out.
    last_seq: AtomicU64,
}

/// A slot's stripe lock held: changes to its entry.
pub(crate) struct Locked<'a> {
    meta: &'a Meta,
    _guard: MutexGuard<'a, ()>,
}

impl Locked<'_> {
    /// The entry now.
    pub(crate) fn get(&self) -> Snapshot {
        Snapshot { seq: self.meta.seq.load(Relaxed), holders: self.meta.holders.load(Relaxed) }
    }

    /// Adds `servers` to the holders of write `seq`; false if the slot moved on.
    pub(crate) fn add_holders(&self, seq: u64, servers: u32) -> bool {
        if self.meta.seq.load(Relaxed) != seq {
            return false;
        }
        self.meta.holders.fetch_or(servers, Relaxed);
        true
    }

    /// Takes `servers` away from the holders of write `seq`; false if the slot moved on.
    pub(crate) fn remove_holders(&self, seq: u64, servers: u32) -> bool {
        if self.meta.seq.load(Relaxed) != seq {
            return false;
        }
        self.meta.holders.fetch_and(!servers, Relaxed);
        true
    }
}

impl Table {
    /// A table of `nr_pages` slots, none written.
    pub(crate) fn new(nr_pages: u64) -> Table {
        let nr_chunks = nr_pages.div_ceil(CHUNK_SLOTS as u64) as usize;
        Table {
            chunks: (0..nr_chunks).map(|_| OnceLock::new()).collect(),
            stripes: std::array::from_fn(|_| Mutex::new(())),
            last_seq: AtomicU64::new(0),
        }
    }

    fn meta(&self, slot: u64) -> Option<&Meta> {
        let chunk = self.chunks[slot as usize / CHUNK_SLOTS].get()?;
        Some(&chunk[slot as usize % CHUNK_SLOTS])
    }

    /// The entry of `slot` (zeros if its chunk was never written). No lock.
    pub(crate) fn get(&self, slot: u64) -> Snapshot {
        self.meta(slot).map_or_else(Snapshot::default, |m| Snapshot {
            seq: m.seq.load(Relaxed),
            holders: m.holders.load(Relaxed),
        })
    }

    /// `slot`'s entry under its stripe lock, if its chunk exists.
    pub(crate) fn lock(&self, slot: u64) -> Option<Locked<'_>> {
        let meta = self.meta(slot)?;
        Some(Locked { meta, _guard: self.stripes[slot as usize % STRIPES].lock() })
    }

    /// Starts a new write of `slot`: a fresh seq, no holders. Returns the seq.
    ///
    /// Context: may allocate the slot's chunk (16 bytes per slot of it).
    pub(crate) fn begin_write(&self, slot: u64) -> u64 {
        let chunk = self.chunks[slot as usize / CHUNK_SLOTS]
            .get_or_init(|| (0..CHUNK_SLOTS).map(|_| Meta::default()).collect());
        let meta = &chunk[slot as usize % CHUNK_SLOTS];
        let _guard = self.stripes[slot as usize % STRIPES].lock();
        let seq = self.last_seq.fetch_add(1, Relaxed) + 1;
        meta.holders.store(0, Relaxed);
        meta.seq.store(seq, Relaxed);
        seq
    }

    /// Forgets `slot`'s data (discard): it reads as zeros. Returns what it was.
    pub(crate) fn forget(&self, slot: u64) -> Snapshot {
        let Some(locked) = self.lock(slot) else { return Snapshot::default() };
        let old = locked.get();
        locked.meta.seq.store(0, Relaxed);
        locked.meta.holders.store(0, Relaxed);
        old
    }

    /// Calls `each(slot, entry)` for every written slot, chunk by chunk.
    pub(crate) fn for_each_written(&self, mut each: impl FnMut(u64, Snapshot)) {
        for (c, chunk) in self.chunks.iter().enumerate() {
            let Some(chunk) = chunk.get() else { continue };
            for (i, meta) in chunk.iter().enumerate() {
                let seq = meta.seq.load(Relaxed);
                if seq != 0 {
                    let slot = (c * CHUNK_SLOTS + i) as u64;
                    each(slot, Snapshot { seq, holders: meta.holders.load(Relaxed) });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_for_an_older_write_never_land() {
        let t = Table::new(4096);
        assert_eq!(t.get(7), Snapshot::default());
        assert!(t.lock(7).is_none(), "no chunk yet");
        let first = t.begin_write(7);
        let second = t.begin_write(7);
        assert!(second > first);
        let locked = t.lock(7).unwrap();
        assert!(!locked.add_holders(first, 0b11), "the flush of the first write is stale");
        assert!(locked.add_holders(second, 0b101));
        assert!(locked.remove_holders(second, 0b1));
        assert_eq!(locked.get(), Snapshot { seq: second, holders: 0b100 });
        drop(locked);
        let mut seen = vec![];
        t.for_each_written(|slot, s| seen.push((slot, s.holders)));
        assert_eq!(seen, vec![(7, 0b100)]);
        assert_eq!(t.forget(7).holders, 0b100);
        assert_eq!(t.get(7), Snapshot::default());
    }
}
