//! Fault injection: a wrapper backend that fails, tears or loses chosen operations.
//!
//! The layers above (engine, zswap writeback, the simulator) must prove they lose nothing
//! when storage misbehaves. [`FaultBackend`] wraps any backend and, for each
//! [`FaultKind`], can be armed to hit the Nth next matching operation, or every Nth:
//!
//! | kind | what the caller sees | what the storage holds |
//! |---|---|---|
//! | `FailWrite` | `Err(Injected)` | unchanged |
//! | `TornWrite` | `Ok` | first half of the first page written, rest unchanged |
//! | `LostWrite` | `Ok` | unchanged |
//! | `FailRead` | `Err(Injected)` | unchanged |
//! | `CorruptRead` | `Ok`, one bit flipped in the buffer | unchanged |
//! | `FailDiscard` | `Err(Injected)` | unchanged |
//!
//! Torn, lost and corrupt operations are silent on purpose: only a checksum layer above
//! (or the simulator's checker) can catch them. Counters record every injected fault.
//!
//! Locks: one small mutex per kind, held to decide whether this operation faults.

use crate::{Backend, Error, ForkStep, PAGE_SIZE};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What to do to an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// A write returns an error and writes nothing.
    FailWrite,
    /// A write writes only the first half of its first page and reports success.
    TornWrite,
    /// A write writes nothing and reports success.
    LostWrite,
    /// A read returns an error.
    FailRead,
    /// A read succeeds with one bit flipped.
    CorruptRead,
    /// A discard returns an error and discards nothing.
    FailDiscard,
}

const KINDS: usize = 6;

impl FaultKind {
    fn index(self) -> usize {
        self as usize
    }
}

/// When a fault fires: on the `nth` next operation it applies to (1 = the very next), and
/// then, if `every` is set, on every `nth` one after that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPlan {
    /// The fault.
    pub kind: FaultKind,
    /// Which upcoming matching operation faults (at least 1).
    pub nth: u64,
    /// Keep firing every `nth` operation (otherwise once).
    pub every: bool,
}

#[derive(Debug, Clone, Copy)]
struct Armed {
    countdown: u64,
    plan: FaultPlan,
}

/// Counters of a fault backend.
#[derive(Debug, Default)]
pub struct FaultStats {
    /// Faults injected, indexed like [`FaultKind`]'s variants.
    pub injected: [AtomicU64; KINDS],
}

impl FaultStats {
    /// Faults of `kind` injected so far.
    pub fn injected(&self, kind: FaultKind) -> u64 {
        self.injected[kind.index()].load(Ordering::Relaxed)
    }
}

/// A backend that misbehaves on request.
pub struct FaultBackend<B: Backend> {
    inner: B,
    /// One slot per kind; each behind its own lock.
    armed: [Mutex<Option<Armed>>; KINDS],
    stats: FaultStats,
}

impl<B: Backend> FaultBackend<B> {
    /// Wraps `inner`; nothing is armed.
    pub fn new(inner: B) -> Self {
        FaultBackend { inner, armed: Default::default(), stats: FaultStats::default() }
    }

    /// Arms a fault (replacing any plan of the same kind). `plan.nth == 0` disarms it.
    pub fn arm(&self, plan: FaultPlan) {
        let armed = (plan.nth > 0).then_some(Armed { countdown: plan.nth, plan });
        *self.armed[plan.kind.index()].lock() = armed;
    }

    /// Disarms every fault.
    pub fn disarm_all(&self) {
        for slot in &self.armed {
            *slot.lock() = None;
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The counters.
    pub fn stats(&self) -> &FaultStats {
        &self.stats
    }

    /// Does this operation of `kind` fault? Counts it if so.
    fn fires(&self, kind: FaultKind) -> bool {
        let mut slot = self.armed[kind.index()].lock();
        let Some(armed) = slot.as_mut() else { return false };
        armed.countdown -= 1;
        if armed.countdown > 0 {
            return false;
        }
        if armed.plan.every {
            armed.countdown = armed.plan.nth;
        } else {
            *slot = None;
        }
        self.stats.injected[kind.index()].fetch_add(1, Ordering::Relaxed);
        true
    }
}

impl<B: Backend + std::fmt::Debug> std::fmt::Debug for FaultBackend<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultBackend")
            .field("inner", &self.inner)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<B: Backend> Backend for FaultBackend<B> {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        crate::check_request(offset, data.len(), self.nr_pages())?;
        if self.fires(FaultKind::FailWrite) {
            return Err(Error::Injected { op: "write", offset });
        }
        if self.fires(FaultKind::LostWrite) {
            return Ok(());
        }
        if self.fires(FaultKind::TornWrite) {
            let mut page = vec![0u8; PAGE_SIZE];
            self.inner.read(offset, &mut page)?;
            page[..PAGE_SIZE / 2].copy_from_slice(&data[..PAGE_SIZE / 2]);
            return self.inner.write(offset, &page);
        }
        self.inner.write(offset, data)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        crate::check_request(offset, buf.len(), self.nr_pages())?;
        if self.fires(FaultKind::FailRead) {
            return Err(Error::Injected { op: "read", offset });
        }
        self.inner.read(offset, buf)?;
        if self.fires(FaultKind::CorruptRead) {
            buf[buf.len() / 2] ^= 0x10;
        }
        Ok(())
    }

    fn discard(&self, offset: u64, nr: u64) -> Result<(), Error> {
        crate::check_range(offset, nr, self.nr_pages())?;
        if self.fires(FaultKind::FailDiscard) {
            return Err(Error::Injected { op: "discard", offset });
        }
        self.inner.discard(offset, nr)
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
    }
}
