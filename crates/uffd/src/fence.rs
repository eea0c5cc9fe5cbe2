//! The event fence: no page is taken out of the program while an address-space event is
//! read but not yet applied to the engine.
//!
//! Why. `munmap` of a registered range frees the addresses, then sends UNMAP and waits
//! until the handler *reads* it; the kernel refuses `UFFDIO_MOVE` and the resolving ioctls
//! with EAGAIN only until then (`mmap_changing`). Between the read and the engine's
//! `unmap`, the engine still holds the old region, and another thread may already have
//! mapped the same addresses: a new mapping the scan has not adopted, so unregistered, and
//! written. `UFFDIO_MOVE` does not ask its source to be registered, so a reclaimer that
//! took an "old" page then took the new mapping's page, and the program read zeros there
//! (found by `crates/cli/tests/run_programs/mmap_race.c`: threads mapping and unmapping
//! side by side, a range read back as zeros right after it was filled). REMAP leaves its
//! old addresses free in the same way.
//!
//! How. The handler thread *writes* the fence from before it reads a uffd that has a page
//! source until the events read are applied; a take *enters* it around its move, and a
//! take that finds it written says `Retry` at once, never waiting (the taker holds the
//! region's page-table lock, which applying the events needs). Entering checks `writing`
//! after announcing itself in `inside`, and writing waits for `inside` to drain after
//! setting `writing` (both sequentially consistent), so a take either sees the write and
//! backs off, or is waited for before anything is read: every move sees the engine and the
//! kernel agree on the layout, or meets `mmap_changing`.
//!
//! Context: entering is two atomics, usable anywhere (SIGBUS handlers included); writing is
//! the handler thread's, waiting only for takes already inside, which wait for nothing.

use crate::sys::process;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

/// The fence (module essay).
#[derive(Debug, Default)]
pub struct Fence {
    writing: AtomicU32,
    inside: AtomicU32,
}

/// Inside the fence; leaves on drop.
#[derive(Debug)]
pub struct FencePass<'a>(&'a Fence);

impl Fence {
    /// Enters, unless the fence is written: `None` then (the take is retried later).
    pub fn try_enter(&self) -> Option<FencePass<'_>> {
        self.inside.fetch_add(1, SeqCst);
        if self.writing.load(SeqCst) == 0 {
            return Some(FencePass(self));
        }
        self.inside.fetch_sub(1, SeqCst);
        None
    }

    /// Writes the fence: from now on no take enters; returns once those inside have left.
    pub fn write(&self) {
        self.writing.store(1, SeqCst);
        let mut spins = 0u32;
        while self.inside.load(SeqCst) > 0 {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                process::sched_yield();
            }
        }
    }

    /// The events read are applied: takes may enter again.
    pub fn release(&self) {
        self.writing.store(0, SeqCst);
    }
}

impl Drop for FencePass<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Arc;

    #[test]
    fn a_written_fence_refuses_takes_until_released() {
        let fence = Fence::default();
        assert!(fence.try_enter().is_some());
        fence.write();
        assert!(fence.try_enter().is_none());
        fence.release();
        assert!(fence.try_enter().is_some());
    }

    /// Takers and a writer side by side: while the fence is written no taker is inside,
    /// and a write waits for the takers already in. Bounded (a few milliseconds): the
    /// takers yield when refused, so that the test never holds both CPUs of a small machine.
    #[test]
    fn no_take_is_inside_while_the_fence_is_written() {
        let fence = Arc::new(Fence::default());
        let (stop, inside) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let (fence, stop, inside) = (fence.clone(), stop.clone(), inside.clone());
                std::thread::spawn(move || {
                    let mut entered = 0u64;
                    while !stop.load(SeqCst) {
                        match fence.try_enter() {
                            Some(_pass) => {
                                inside.fetch_add(1, SeqCst);
                                entered += 1;
                                std::hint::spin_loop();
                                inside.fetch_sub(1, SeqCst);
                            }
                            None => std::thread::yield_now(),
                        }
                    }
                    entered
                })
            })
            .collect();
        let mut overlaps = 0;
        for _ in 0..2_000 {
            fence.write();
            overlaps += u32::from(inside.load(SeqCst) != 0);
            fence.release();
            std::thread::yield_now();
        }
        stop.store(true, SeqCst);
        let entered: u64 = takers.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(overlaps, 0, "a take was inside a written fence");
        assert!(entered > 0, "no take ever entered");
    }
}
