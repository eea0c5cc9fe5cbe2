//! The write-behind buffer: pages written to the far tier wait here until the flusher has
//! stored every copy.
//!
//! ```text
//!   write ── put_all(slot.., seqs, pages) ──> by_slot[slot] = { index, seq, queued }
//!                                             pages[index]; queue: slots for the flusher
//!   flusher ── take_batch ── (store the copies) ── table.add_holders ── commit_all(batch)
//!   read ── get(slot, seq): the staged page of that very write, or nothing
//! ```
//!
//! Why: the pool writes back one page per call and must know the page is safe when the
//! call returns. A round trip to two servers per page would bound writeback by the network's
//! latency (tens of µs a page); staged, a page costs a copy, and the flusher sends pipelined
//! batches. The page is safe in the buffer: it is process memory, read back from here until
//! its copies are committed, and never dropped while no server takes it.
//!
//! Bound: `capacity` pages, allocated at set-up. `put` of a new slot into a full buffer
//! waits for room at most the request timeout, then fails (the caller keeps the page).
//! A rewrite of a slot already staged reuses its page.
//!
//! Lock: one mutex; held for a write's pages (a folio: 16 copies of 4 KiB at order 4) or a
//! batch's commits at most, so that a batch wakes the writers once, not once per page.
//! Never held while the network is used.

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

const PAGE: usize = crate::PAGE_SIZE;

#[derive(Debug, Clone, Copy)]
struct Entry {
    index: usize,
    seq: u64,
    /// In the queue (not taken by the flusher since its last write).
    queued: bool,
    /// A flusher is storing one of its writes: no other flusher takes the slot until that
    /// one is committed or given back, so an older write's store never lands after a newer
    /// one's.
    in_flight: bool,
}

#[derive(Debug)]
struct Inner {
    pages: Box<[u8]>,
    free: Vec<usize>,
    by_slot: HashMap<u64, Entry>,
    queue: VecDeque<u64>,
    shutdown: bool,
}

/// The buffer (module essay).
#[derive(Debug)]
pub(crate) struct Staging {
    inner: Mutex<Inner>,
    /// Signalled when a page leaves (room for a waiting `put`, or an empty buffer).
    room: Condvar,
    /// Signalled when a page is queued (work for the flusher).
    work: Condvar,
}

/// A page taken for flushing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    pub(crate) slot: u64,
    pub(crate) seq: u64,
}

impl Staging {
    /// A buffer of `capacity` pages.
    ///
    /// Context: allocates `capacity` pages and the index.
    pub(crate) fn new(capacity: usize) -> Staging {
        let inner = Inner {
            pages: vec![0u8; capacity * PAGE].into_boxed_slice(),
            free: (0..capacity).rev().collect(),
            by_slot: HashMap::with_capacity(capacity),
            queue: VecDeque::with_capacity(capacity),
            shutdown: false,
        };
        Staging { inner: Mutex::new(inner), room: Condvar::new(), work: Condvar::new() }
    }

    /// Stages write `seq` of `slot`. Waits for room at most `timeout`.
    ///
    /// # Errors
    /// `Err(())` when the buffer stayed full (no server takes writes).
    #[cfg(test)]
    pub(crate) fn put(
        &self,
        slot: u64,
        seq: u64,
        page: &[u8],
        timeout: Duration,
    ) -> Result<(), ()> {
        self.put_all(slot, page, &[seq], timeout).map_err(|_| ())
    }

    /// Stages the pages of `data` at slots `first ..` as writes `seqs` under one lock (a
    /// folio's pages, one wake-up of a flusher). Waits for room at most `timeout` in all.
    ///
    /// # Errors
    /// The first slot not staged, when the buffer stayed full (no server takes writes): the
    /// pages before it are staged.
    pub(crate) fn put_all(
        &self,
        first: u64,
        data: &[u8],
        seqs: &[u64],
        timeout: Duration,
    ) -> Result<(), u64> {
        let deadline = Instant::now() + timeout;
        let mut inner = self.inner.lock();
        let mut result = Ok(());
        for (i, (page, &seq)) in data.chunks_exact(PAGE).zip(seqs).enumerate() {
            let slot = first + i as u64;
            let Some(index) = self.room_for(&mut inner, slot, deadline) else {
                result = Err(slot);
                break;
            };
            inner.pages[index * PAGE..(index + 1) * PAGE].copy_from_slice(page);
            let (queued, in_flight) =
                inner.by_slot.get(&slot).map_or((false, false), |e| (e.queued, e.in_flight));
            if !queued {
                inner.queue.push_back(slot);
            }
            inner.by_slot.insert(slot, Entry { index, seq, queued: true, in_flight });
        }
        drop(inner);
        self.work.notify_one();
        result
    }

    /// The page `slot` is staged in: its own if staged already, else a free one, waiting
    /// for one until `deadline`; `None` if none came.
    fn room_for(
        &self,
        inner: &mut parking_lot::MutexGuard<'_, Inner>,
        slot: u64,
        deadline: Instant,
    ) -> Option<usize> {
        if let Some(entry) = inner.by_slot.get(&slot) {
            return Some(entry.index);
        }
        loop {
            if let Some(index) = inner.free.pop() {
                return Some(index);
            }
            if self.room.wait_until(inner, deadline).timed_out() {
                return None;
            }
            // The slot may have been staged by nobody else meanwhile (the caller owns it),
            // so only the free list can have changed.
        }
    }

    /// Copies the staged page of write `seq` of `slot` into `out`; false if it is not here.
    pub(crate) fn get(&self, slot: u64, seq: u64, out: &mut [u8]) -> bool {
        let inner = self.inner.lock();
        match inner.by_slot.get(&slot) {
            Some(e) if e.seq == seq => {
                out.copy_from_slice(&inner.pages[e.index * PAGE..(e.index + 1) * PAGE]);
                true
            }
            _ => false,
        }
    }

    /// Drops `slot`'s staged page, whatever its write (discard).
    pub(crate) fn remove(&self, slot: u64) {
        let mut inner = self.inner.lock();
        if let Some(entry) = inner.by_slot.remove(&slot) {
            inner.free.push(entry.index);
            drop(inner);
            self.room.notify_all();
        }
    }

    /// Takes up to `max` queued pages, copying them to `pages` (one page each, in order)
    /// and their identities to `taken`. Waits at most `wait` for the first, unless `paused`
    /// (src/rest.rs; checked under the lock [`Staging::wake_flushers`] wakes under).
    pub(crate) fn take_batch(
        &self,
        max: usize,
        wait: Duration,
        paused: &dyn Fn() -> bool,
        taken: &mut Vec<Taken>,
        pages: &mut Vec<u8>,
    ) {
        taken.clear();
        pages.clear();
        let mut inner = self.inner.lock();
        if inner.queue.is_empty() && !inner.shutdown && !paused() {
            self.work.wait_for(&mut inner, wait);
        }
        // Each slot queued is looked at once per call: one in flight goes back to the end.
        for _ in 0..inner.queue.len() {
            if taken.len() >= max {
                break;
            }
            let Some(slot) = inner.queue.pop_front() else { break };
            let Some(entry) = inner.by_slot.get_mut(&slot) else { continue };
            if entry.in_flight {
                inner.queue.push_back(slot);
                continue;
            }
            entry.queued = false;
            entry.in_flight = true;
            let (index, seq) = (entry.index, entry.seq);
            taken.push(Taken { slot, seq });
            pages.extend_from_slice(&inner.pages[index * PAGE..(index + 1) * PAGE]);
        }
    }

    /// The copies of write `seq` of `slot` are all stored (and committed in the table):
    /// its page leaves, unless the slot was written again meanwhile.
    #[cfg(test)]
    pub(crate) fn commit(&self, slot: u64, seq: u64) {
        self.commit_all(&[Taken { slot, seq }]);
    }

    /// [`Staging::commit`] of a batch's stored writes: one lock, and one wake-up of the
    /// writers waiting for room (not one per page: a full buffer's writer would be woken,
    /// find one page of room, and sleep again, for every page of every batch).
    pub(crate) fn commit_all(&self, stored: &[Taken]) {
        let mut inner = self.inner.lock();
        let mut freed = false;
        for &Taken { slot, seq } in stored {
            let Some(entry) = inner.by_slot.get_mut(&slot) else { continue };
            entry.in_flight = false;
            let entry = *entry;
            if entry.seq == seq && !entry.queued {
                inner.by_slot.remove(&slot);
                inner.free.push(entry.index);
                freed = true;
            }
        }
        drop(inner);
        if freed {
            self.room.notify_all();
        }
    }

    /// The copies of write `seq` of `slot` could not all be stored: queue it again (unless a
    /// newer write is queued already).
    pub(crate) fn retry(&self, slot: u64, seq: u64) {
        let mut inner = self.inner.lock();
        if let Some(entry) = inner.by_slot.get_mut(&slot) {
            entry.in_flight = false;
            if entry.seq == seq && !entry.queued {
                entry.queued = true;
                inner.queue.push_back(slot);
            }
        }
    }

    /// Pages staged now.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().by_slot.len()
    }

    /// Waits until nothing is staged, at most `timeout`; true if so.
    pub(crate) fn wait_empty(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut inner = self.inner.lock();
        while !inner.by_slot.is_empty() {
            if self.room.wait_until(&mut inner, deadline).timed_out() {
                return inner.by_slot.is_empty();
            }
        }
        true
    }

    /// Wakes the flushers waiting for work, under the lock their wait checks its condition
    /// under (a pause for a fork: none sleeps through it).
    pub(crate) fn wake_flushers(&self) {
        let _inner = self.inner.lock();
        self.work.notify_all();
    }

    /// Wakes the flusher for good.
    pub(crate) fn shutdown(&self) {
        self.inner.lock().shutdown = true;
        self.work.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_wait_until_committed_and_rewrites_win() {
        let s = Staging::new(2);
        let t = Duration::from_millis(10);
        s.put(1, 10, &[1u8; PAGE], t).unwrap();
        s.put(2, 11, &[2u8; PAGE], t).unwrap();
        assert!(s.put(3, 12, &[3u8; PAGE], t).is_err(), "full");
        let (mut taken, mut pages) = (vec![], vec![]);
        s.take_batch(8, t, &|| false, &mut taken, &mut pages);
        assert_eq!(taken.len(), 2);
        assert_eq!(pages[PAGE], 2);
        s.put(1, 13, &[9u8; PAGE], t).unwrap(); // rewritten while in flight
        s.take_batch(8, t, &|| false, &mut taken, &mut pages);
        assert!(taken.is_empty(), "a slot in flight is not taken again");
        s.commit(1, 10);
        let mut out = vec![0u8; PAGE];
        assert!(s.get(1, 13, &mut out) && out[0] == 9, "the newer write stays");
        assert!(!s.get(1, 10, &mut out), "the older one is not served");
        s.commit(2, 11);
        assert_eq!(s.len(), 1);
        s.take_batch(8, t, &|| false, &mut taken, &mut pages);
        assert_eq!((taken.len(), pages[0]), (1, 9));
        s.retry(1, 13);
        s.take_batch(8, t, &|| false, &mut taken, &mut pages);
        assert_eq!(taken.len(), 1, "a failed flush is queued again");
        s.commit(1, 13);
        assert!(s.wait_empty(t));
    }
}
