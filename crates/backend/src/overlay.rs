//! The overlay: a forked child's swap device, over the one it inherited.
//!
//! A process that forks hands its child a copy of its swap state: page tables, zero map,
//! pool and slot allocator, all copy-on-write. The slots in use at the fork hold data in
//! the parent's backend, which the parent keeps for the child (it holds a reference on
//! each such slot until the child exits or execs, so it never writes them again). From
//! then on both processes allocate from their copies of the same allocator: the same slot
//! number can be handed out twice, once in each. So the child writes to a backend of its
//! own, and reads a slot from the inherited one only until it has written or discarded
//! that slot itself:
//!
//! ```text
//!   write(slot)    -> upper; mark slot as the child's
//!   discard(slot)  -> upper; mark slot as the child's (reads zeros from the upper one)
//!   read(slot)     -> marked ? upper : lower         (runs split where the marks change)
//! ```
//!
//! The lower backend is never written or discarded through an overlay: a discard of a
//! cluster the child freed would otherwise punch a hole in data its parent still reads.
//!
//! Marks: one bit per slot, in chunks allocated on the first mark in them (an 8 GiB
//! device has 2 Mi slots: 256 KiB of bits if every chunk were touched, 4 KiB a chunk).
//!
//! Concurrency: a slot is never read and written at once (the swap cache serialises
//! them, the [`Backend`] contract), so a read sees the mark its last write set; marks are
//! atomics, chunks made once under a `OnceLock`.

use crate::{check_range, check_request, Backend, Error, ForkStep, PAGE_SIZE};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

/// Slots per chunk of marks: 512 words of 64 bits (4 KiB).
const CHUNK_SLOTS: u64 = 512 * 64;

/// A backend over an inherited one (see the module essay).
pub struct OverlayBackend {
    lower: Arc<dyn Backend>,
    upper: Arc<dyn Backend>,
    marks: Box<[OnceLock<Box<[AtomicU64]>>]>,
    nr_pages: u64,
}

impl OverlayBackend {
    /// The child's device: reads fall through to `lower` until a slot is written or
    /// discarded through the overlay; everything is written to `upper`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if the two hold different numbers of slots (slot numbers
    /// would not mean the same in both).
    pub fn new(lower: Arc<dyn Backend>, upper: Arc<dyn Backend>) -> Result<Self, Error> {
        let nr_pages = upper.nr_pages();
        if lower.nr_pages() != nr_pages {
            return Err(Error::OutOfRange { offset: 0, nr: lower.nr_pages(), nr_pages });
        }
        let chunks = nr_pages.div_ceil(CHUNK_SLOTS) as usize;
        let marks = (0..chunks).map(|_| OnceLock::new()).collect();
        Ok(OverlayBackend { lower, upper, marks, nr_pages })
    }

    /// The inherited backend.
    pub fn lower(&self) -> &Arc<dyn Backend> {
        &self.lower
    }

    /// The child's own backend.
    pub fn upper(&self) -> &Arc<dyn Backend> {
        &self.upper
    }

    /// Whether `slot` was written or discarded through the overlay.
    pub fn is_upper(&self, slot: u64) -> bool {
        let Some(chunk) = self.marks[(slot / CHUNK_SLOTS) as usize].get() else { return false };
        let bit = slot % CHUNK_SLOTS;
        chunk[(bit / 64) as usize].load(Relaxed) & (1 << (bit % 64)) != 0
    }

    fn mark(&self, first: u64, nr: u64) {
        for slot in first..first + nr {
            let chunk = self.marks[(slot / CHUNK_SLOTS) as usize]
                .get_or_init(|| (0..CHUNK_SLOTS / 64).map(|_| AtomicU64::new(0)).collect());
            let bit = slot % CHUNK_SLOTS;
            chunk[(bit / 64) as usize].fetch_or(1 << (bit % 64), Relaxed);
        }
    }

    /// Bytes of marks allocated.
    pub fn mark_bytes(&self) -> u64 {
        let chunks = self.marks.iter().filter(|c| c.get().is_some()).count() as u64;
        chunks * CHUNK_SLOTS / 8
    }
}

impl std::fmt::Debug for OverlayBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OverlayBackend")
            .field("nr_pages", &self.nr_pages)
            .field("mark_bytes", &self.mark_bytes())
            .finish_non_exhaustive()
    }
}

impl Backend for OverlayBackend {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        let nr = check_request(offset, data.len(), self.nr_pages)?;
        // Marked first: a failed write leaves the slot's contents undefined (the contract),
        // and they must not fall back to the parent's older data.
        self.mark(offset, nr);
        self.upper.write(offset, data)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let nr = check_request(offset, buf.len(), self.nr_pages)?;
        let mut start = 0;
        while start < nr {
            let upper = self.is_upper(offset + start);
            let mut end = start + 1;
            while end < nr && self.is_upper(offset + end) == upper {
                end += 1;
            }
            let bytes = &mut buf[start as usize * PAGE_SIZE..end as usize * PAGE_SIZE];
            let from = if upper { &self.upper } else { &self.lower };
            from.read(offset + start, bytes)?;
            start = end;
        }
        Ok(())
    }

    fn discard(&self, offset: u64, nr: u64) -> Result<(), Error> {
        check_range(offset, nr, self.nr_pages)?;
        self.mark(offset, nr);
        self.upper.discard(offset, nr)
    }

    fn is_synchronous(&self) -> bool {
        self.upper.is_synchronous()
    }

    fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    fn out_of_space(&self) -> bool {
        self.upper.out_of_space()
    }

    fn counters(&self, out: &mut dyn FnMut(&'static str, u64)) {
        self.upper.counters(out);
    }

    fn fork(&self, step: ForkStep) {
        self.lower.fork(step);
        self.upper.fork(step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    fn page(byte: u8) -> Vec<u8> {
        vec![byte; PAGE_SIZE]
    }

    #[test]
    fn a_slot_reads_the_parents_data_until_the_child_writes_it() {
        let lower: Arc<dyn Backend> = Arc::new(MemoryBackend::new(CHUNK_SLOTS * 2));
        lower.write(7, &page(1)).unwrap();
        lower.write(CHUNK_SLOTS + 3, &page(2)).unwrap();
        let upper: Arc<dyn Backend> = Arc::new(MemoryBackend::new(CHUNK_SLOTS * 2));
        let overlay = OverlayBackend::new(lower.clone(), upper.clone()).unwrap();
        let mut buf = page(0);
        overlay.read(7, &mut buf).unwrap();
        assert_eq!(buf, page(1), "inherited");
        assert_eq!(overlay.mark_bytes(), 0, "no mark before the first write");
        overlay.write(7, &page(3)).unwrap();
        overlay.read(7, &mut buf).unwrap();
        assert_eq!(buf, page(3), "the child's own");
        lower.read(7, &mut buf).unwrap();
        assert_eq!(buf, page(1), "the parent's data is never written through the overlay");
        overlay.discard(CHUNK_SLOTS, 512).unwrap();
        overlay.read(CHUNK_SLOTS + 3, &mut buf).unwrap();
        assert_eq!(buf, page(0), "discarded by the child: zeros, not the parent's");
        lower.read(CHUNK_SLOTS + 3, &mut buf).unwrap();
        assert_eq!(buf, page(2), "nor discarded below");
        assert_eq!(overlay.mark_bytes(), 2 * CHUNK_SLOTS / 8);
    }

    #[test]
    fn a_read_across_marked_and_unmarked_slots_takes_each_from_its_backend() {
        let lower: Arc<dyn Backend> = Arc::new(MemoryBackend::new(CHUNK_SLOTS));
        let upper: Arc<dyn Backend> = Arc::new(MemoryBackend::new(CHUNK_SLOTS));
        for slot in 0..8 {
            lower.write(slot, &page(10 + slot as u8)).unwrap();
        }
        let overlay = OverlayBackend::new(lower, upper).unwrap();
        overlay.write(2, &[page(20), page(21)].concat()).unwrap();
        overlay.write(6, &page(22)).unwrap();
        let mut buf = vec![0u8; 8 * PAGE_SIZE];
        overlay.read(0, &mut buf).unwrap();
        let expected = [10, 11, 20, 21, 14, 15, 22, 17];
        for (i, byte) in expected.iter().enumerate() {
            assert!(buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE].iter().all(|b| b == byte), "slot {i}");
        }
    }

    #[test]
    fn backends_of_different_sizes_are_refused() {
        let lower: Arc<dyn Backend> = Arc::new(MemoryBackend::new(1024));
        let upper: Arc<dyn Backend> = Arc::new(MemoryBackend::new(2048));
        assert!(OverlayBackend::new(lower, upper).is_err());
    }
}
