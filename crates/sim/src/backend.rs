//! The simulated swap device: memory storage that takes simulated time, yields to the
//! scheduler while "the I/O is in flight", and fails, tears or loses requests when the
//! run's fault sites fire.
//!
//! ```text
//!   engine ── ChecksumBackend (when the run has silent faults) ── SimBackend ── MemoryBackend
//!                                                                 │ yield (latency)
//!                                                                 │ write_fail / torn / lost
//!                                                                 │ read_fail / corrupt
//!                                                                 └ discard_fail (no yield)
//! ```
//!
//! A write or read yields *before* it completes: the other simulated threads run while the
//! request is in flight, as on a real device. The engine calls the backend with no engine
//! lock held, and the swap cache keeps any other thread off the slots in flight, so the
//! order inside the request does not matter.
//!
//! A discard never yields: the swap device can discard from inside `put` (freeing a whole
//! cluster), which the engine calls under a page-table lock or a swap cache shard lock. A
//! thread parked there would block the running thread on a real lock (see sched.rs).
//!
//! A torn write lands a prefix, in 512-byte sectors: whole pages first, then part of one
//! page, the rest keeps the slots' old bytes, as a power cut mid-request would leave them.

use crate::buggify::Site;
use crate::sched::{yield_point, Yield};
use crate::world::World;
use backend::{check_range, check_request, Backend, Error, MemoryBackend};
use std::sync::Arc;

const SECTOR: usize = 512;

/// The simulated swap device (see the module documentation).
pub struct SimBackend {
    inner: MemoryBackend,
    world: Arc<World>,
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl SimBackend {
    /// A device of `nr_pages` slots in `world`.
    pub fn new(nr_pages: u64, world: Arc<World>) -> SimBackend {
        SimBackend { inner: MemoryBackend::new(nr_pages), world }
    }

    /// Writes the first `bytes` bytes of `data` over the slots, keeping the rest.
    fn write_prefix(&self, offset: u64, data: &[u8], bytes: usize) -> Result<(), Error> {
        let mut merged = vec![0u8; data.len()];
        self.inner.read(offset, &mut merged)?;
        merged[..bytes].copy_from_slice(&data[..bytes]);
        self.inner.write(offset, &merged)
    }
}

impl Backend for SimBackend {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        let pages = check_request(offset, data.len(), self.nr_pages())?;
        yield_point(Yield::Io { latency_ns: self.world.io_latency_ns(true, pages) });
        if self.world.fires(Site::WriteFail) {
            return Err(Error::Injected { op: "write", offset });
        }
        if self.world.fires(Site::WriteLost) {
            return Ok(());
        }
        if self.world.fires(Site::WriteTorn) {
            let sectors = data.len() / SECTOR;
            let landed = self.world.fault_below(sectors as u64) as usize * SECTOR;
            return self.write_prefix(offset, data, landed);
        }
        self.inner.write(offset, data)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let pages = check_request(offset, buf.len(), self.nr_pages())?;
        yield_point(Yield::Io { latency_ns: self.world.io_latency_ns(false, pages) });
        if self.world.fires(Site::ReadFail) {
            return Err(Error::Injected { op: "read", offset });
        }
        self.inner.read(offset, buf)?;
        if self.world.fires(Site::ReadCorrupt) {
            let bit = self.world.fault_below(buf.len() as u64 * 8);
            buf[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        Ok(())
    }

    fn discard(&self, offset: u64, nr: u64) -> Result<(), Error> {
        check_range(offset, nr, self.nr_pages())?;
        if self.world.fires(Site::DiscardFail) {
            return Err(Error::Injected { op: "discard", offset });
        }
        self.inner.discard(offset, nr)
    }

    fn is_synchronous(&self) -> bool {
        true
    }

    fn nr_pages(&self) -> u64 {
        self.inner.nr_pages()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buggify::Faults;
    use crate::world::Latency;
    use backend::PAGE_SIZE;

    fn backend(site: Option<Site>) -> SimBackend {
        let mut faults = Faults::none();
        if let Some(site) = site {
            faults.set(site, 1_000_000);
        }
        SimBackend::new(8, Arc::new(World::new(1, faults, Latency::FAST)))
    }

    #[test]
    fn plain_io_round_trips() {
        let b = backend(None);
        let data = vec![7u8; 2 * PAGE_SIZE];
        b.write(2, &data).unwrap();
        let mut buf = vec![0u8; 2 * PAGE_SIZE];
        b.read(2, &mut buf).unwrap();
        assert_eq!(buf, data);
        b.discard(0, 8).unwrap();
        b.read(2, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0));
    }

    #[test]
    fn each_site_does_what_it_says() {
        let data = vec![9u8; PAGE_SIZE];
        let mut buf = vec![0u8; PAGE_SIZE];
        assert!(backend(Some(Site::WriteFail)).write(1, &data).is_err());
        let lost = backend(Some(Site::WriteLost));
        lost.write(1, &data).unwrap();
        lost.read(1, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0), "a lost write leaves the old bytes");
        let torn = backend(Some(Site::WriteTorn));
        torn.write(1, &data).unwrap();
        torn.read(1, &mut buf).unwrap();
        assert_ne!(buf, data, "a torn write lands at most a strict prefix");
        assert!(backend(Some(Site::ReadFail)).read(1, &mut buf).is_err());
        let corrupt = backend(Some(Site::ReadCorrupt));
        corrupt.write(1, &data).unwrap();
        corrupt.read(1, &mut buf).unwrap();
        assert_eq!(buf.iter().zip(&data).filter(|(a, b)| a != b).count(), 1, "one bit flips");
        assert!(backend(Some(Site::DiscardFail)).discard(0, 1).is_err());
    }
}
