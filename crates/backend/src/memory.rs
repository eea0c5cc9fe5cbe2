//! The memory backend: synchronous page storage, like the kernel's brd (or zram without
//! compression).
//!
//! One slot is one `Mutex<Option<Box<Page>>>`: the page is allocated on first write and
//! dropped on discard, so an idle device costs 16 bytes per slot, not 4 KiB. A read of a
//! slot never written (or discarded since) returns zeros, as a block device does.
//!
//! Locks: one per slot, held only for a `memcpy`; never two at once. A page is allocated
//! *before* its slot lock is taken, and a discarded page is dropped after the lock is
//! released (nothing allocates or frees under a lock).

use crate::{check_range, check_request, Backend, Error, PAGE_SIZE};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

type Page = [u8; PAGE_SIZE];

/// Page storage in memory: synchronous, like brd.
pub struct MemoryBackend {
    /// One entry per slot; each guarded by its own lock.
    slots: Box<[Mutex<Option<Box<Page>>>]>,
    /// Pages currently allocated (a gauge).
    resident_pages: AtomicU64,
}

impl MemoryBackend {
    /// A backend of `nr_pages` slots, all reading as zeros.
    ///
    /// Context: allocates 16 bytes per slot up front; page memory comes on first write.
    pub fn new(nr_pages: u64) -> Self {
        let slots = (0..nr_pages).map(|_| Mutex::new(None)).collect();
        MemoryBackend { slots, resident_pages: AtomicU64::new(0) }
    }

    /// Pages holding data now.
    pub fn resident_pages(&self) -> u64 {
        self.resident_pages.load(Ordering::Relaxed)
    }

    fn slot(&self, offset: u64) -> &Mutex<Option<Box<Page>>> {
        &self.slots[offset as usize]
    }

    fn write_page(&self, offset: u64, data: &[u8]) {
        debug_assert_eq!(data.len(), PAGE_SIZE);
        if let Some(page) = self.slot(offset).lock().as_mut() {
            page.copy_from_slice(data);
            return;
        }
        // First write of this slot: allocate outside the lock, then install (or, if a
        // racing write installed one meanwhile, reuse that and drop ours after unlock).
        let mut fresh = Box::new([0u8; PAGE_SIZE]);
        fresh.copy_from_slice(data);
        let spare = {
            let mut slot = self.slot(offset).lock();
            match slot.as_mut() {
                Some(page) => {
                    page.copy_from_slice(data);
                    Some(fresh)
                }
                None => {
                    *slot = Some(fresh);
                    self.resident_pages.fetch_add(1, Ordering::Relaxed);
                    None
                }
            }
        };
        drop(spare);
    }

    fn read_page(&self, offset: u64, buf: &mut [u8]) {
        match self.slot(offset).lock().as_ref() {
            Some(page) => buf.copy_from_slice(&page[..]),
            None => buf.fill(0),
        }
    }
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("nr_pages", &self.slots.len())
            .field("resident_pages", &self.resident_pages())
            .finish()
    }
}

impl Backend for MemoryBackend {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        check_request(offset, data.len(), self.nr_pages())?;
        for (i, page) in data.chunks_exact(PAGE_SIZE).enumerate() {
            self.write_page(offset + i as u64, page);
        }
        Ok(())
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        check_request(offset, buf.len(), self.nr_pages())?;
        for (i, page) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
            self.read_page(offset + i as u64, page);
        }
        Ok(())
    }

    fn discard(&self, offset: u64, nr: u64) -> Result<(), Error> {
        check_range(offset, nr, self.nr_pages())?;
        for slot in offset..offset + nr {
            let old = self.slot(slot).lock().take();
            if old.is_some() {
                self.resident_pages.fetch_sub(1, Ordering::Relaxed);
            }
            drop(old); // after the lock is released
        }
        Ok(())
    }

    fn is_synchronous(&self) -> bool {
        true
    }

    fn nr_pages(&self) -> u64 {
        self.slots.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_reads_zero_and_discard_forgets() {
        let mem = MemoryBackend::new(8);
        let mut buf = vec![0xAAu8; PAGE_SIZE];
        mem.read(3, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        mem.write(3, &[7u8; PAGE_SIZE * 2]).unwrap();
        assert_eq!(mem.resident_pages(), 2);
        mem.read(4, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 7));
        mem.discard(3, 2).unwrap();
        assert_eq!(mem.resident_pages(), 0);
        mem.read(4, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }

    #[test]
    fn bad_requests_are_refused() {
        let mem = MemoryBackend::new(4);
        assert!(matches!(mem.write(3, &[0u8; PAGE_SIZE * 2]), Err(Error::OutOfRange { .. })));
        assert!(matches!(mem.write(0, &[0u8; 100]), Err(Error::NotPageSized { .. })));
        assert!(matches!(mem.discard(0, 0), Err(Error::OutOfRange { .. })));
        assert!(matches!(mem.discard(u64::MAX, 2), Err(Error::OutOfRange { .. })));
    }
}
