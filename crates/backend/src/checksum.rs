//! The checksum layer: a crc32c per slot, kept in memory, checked on every read.
//!
//! Wraps any [`Backend`]. A write records the crc32c of each page *before* it reaches the
//! inner backend, so a write that fails, tears or is lost leaves a checksum that the old
//! bytes do not match: the next read of that slot is [`Error::Checksum`], never wrong data.
//! A slot never written (or discarded) reads as zeros and carries the crc32c of a zero
//! page.
//!
//! Cost: 4 bytes per slot (1 MiB per GiB of swap), one crc32c per page written and read
//! (hardware crc32c: a few hundred ns per 4 KiB).
//!
//! Concurrency: the crc of a slot is an atomic; the caller never reads and writes the same
//! slot at once (the swap cache serialises that), so no lock is needed.

use crate::{check_range, check_request, Backend, Error, ForkStep, PAGE_SIZE};
use std::sync::atomic::{AtomicU32, Ordering};

counters::table! {
    /// The live counters of one checksum layer.
    pub(crate) struct ChecksumCounters;
    /// Counters of one checksum layer (in the stats file as `checksum_*`).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct ChecksumStats {
        prefix "checksum_";
        counters {
            /// Pages verified on read.
            verified_pages,
            /// Reads that found a mismatch (each returned an error).
            mismatches,
        }
    }
}

/// A backend with a crc32c per slot.
pub struct ChecksumBackend<B: Backend> {
    inner: B,
    /// crc32c of the last data written to each slot.
    crcs: Box<[AtomicU32]>,
    zero_crc: u32,
    stats: ChecksumCounters,
}

impl<B: Backend> ChecksumBackend<B> {
    /// Wraps `inner`; all slots start as zero pages.
    ///
    /// Context: allocates 4 bytes per slot.
    pub fn new(inner: B) -> Self {
        let zero_crc = crc32c::crc32c(&[0u8; PAGE_SIZE]);
        let crcs = (0..inner.nr_pages()).map(|_| AtomicU32::new(zero_crc)).collect();
        ChecksumBackend { inner, crcs, zero_crc, stats: ChecksumCounters::new() }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The counters now.
    pub fn stats(&self) -> ChecksumStats {
        let mut stats = ChecksumStats::default();
        self.stats.snapshot_into(&mut stats);
        stats
    }
}

impl<B: Backend + std::fmt::Debug> std::fmt::Debug for ChecksumBackend<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChecksumBackend")
            .field("inner", &self.inner)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<B: Backend> Backend for ChecksumBackend<B> {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        check_request(offset, data.len(), self.nr_pages())?;
        for (i, page) in data.chunks_exact(PAGE_SIZE).enumerate() {
            self.crcs[offset as usize + i].store(crc32c::crc32c(page), Ordering::Relaxed);
        }
        self.inner.write(offset, data)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        check_request(offset, buf.len(), self.nr_pages())?;
        self.inner.read(offset, buf)?;
        for (i, page) in buf.chunks_exact(PAGE_SIZE).enumerate() {
            let slot = offset + i as u64;
            let expected = self.crcs[slot as usize].load(Ordering::Relaxed);
            let got = crc32c::crc32c(page);
            if got != expected {
                self.stats.mismatches.fetch_add(1, Ordering::Relaxed);
                return Err(Error::Checksum { offset: slot, expected, got });
            }
        }
        self.stats.verified_pages.fetch_add(buf.len() as u64 / PAGE_SIZE as u64, Ordering::Relaxed);
        Ok(())
    }

    fn discard(&self, offset: u64, nr: u64) -> Result<(), Error> {
        check_range(offset, nr, self.nr_pages())?;
        // The inner backend may keep the old bytes if the discard fails; the recorded crc
        // must then stay the old one. Record zero only after a successful discard.
        self.inner.discard(offset, nr)?;
        for slot in offset..offset + nr {
            self.crcs[slot as usize].store(self.zero_crc, Ordering::Relaxed);
        }
        Ok(())
    }

    fn is_synchronous(&self) -> bool {
        self.inner.is_synchronous()
    }

    fn nr_pages(&self) -> u64 {
        self.inner.nr_pages()
    }

    fn fork(&self, step: ForkStep) {
        self.inner.fork(step);
    }

    fn out_of_space(&self) -> bool {
        self.inner.out_of_space()
    }

    fn counters(&self, out: &mut dyn FnMut(&'static str, u64)) {
        self.inner.counters(out);
        self.stats.each(out);
    }
}
