//! The event fence: no page is taken out of the program, or mapped into it, while an
//! address-space event is read but not yet applied to the engine.
//!
//! Maps too because of FORK: a page that went into the parent after the FORK was read and
//! before the engine copied the page tables was missing in the child, and the copy, made
//! from tables that count it resident by then, gives the child nothing for it (it read
//! zeros). A map that meets the fence says `Retry`, as one that meets the kernel's
//! `mmap_changing` does.
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
//! source; a take *enters* it around its move. Entering checks the fence after announcing
//! itself in `inside`, and writing waits for `inside` to drain after setting the state
//! (both sequentially consistent), so a take either sees the write and stays out, or is
//! waited for before anything is read: every move sees the engine and the kernel agree on
//! the layout, or meets `mmap_changing`.
//!
//! Two phases, because most reads return page faults only:
//! - **reading**: from the write until the read returns. If the read brought faults
//!   only, the handler releases the fence at once (an event still unread is guarded by
//!   the kernel's `mmap_changing`). A take that finds this phase waits it out
//!   ([`Fence::enter`]): it needs no lock to end.
//! - **holding**: the read brought an event, and the fence stays written until the events
//!   are applied ([`Fence::hold`]). A take that finds this phase says `Retry` at once,
//!   never waiting: the taker holds the region's page-table lock, which applying the
//!   events needs.
//!
//! Why the phases (measured on the 1 GiB Zipf run under 256 MiB, handler delivery): with
//! one phase, the handler's read of every fault refused the reclaimer's takes, 136,422 of
//! them in the first 8 s, each a page-out run formed and undone (`pgscan_kswapd` 1.0
//! million against 289,251 with no fence at all), and the run served 15% fewer faults in
//! that time (one run each).
//!
//! Context: entering is two atomics, usable anywhere (SIGBUS handlers included), and waits
//! at most [`ENTER_SPINS_MAX`] spins; writing is the handler thread's, waiting only for
//! takes already inside, which wait for nothing.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use uffd::sys::process;

/// The fence is open: takes enter.
const OPEN: u32 = 0;
/// The handler is reading: takes wait (module essay).
const READING: u32 = 1;
/// Events read are not yet applied: takes are refused.
const HOLDING: u32 = 2;

/// The most spins [`Fence::enter`] waits for a read to end (a read is a system call of a
/// few microseconds; the bound covers a handler preempted in the middle of it).
pub const ENTER_SPINS_MAX: u32 = 4096;

/// The fence (module essay).
#[derive(Debug, Default)]
pub struct Fence {
    state: AtomicU32,
    inside: AtomicU32,
}

/// Inside the fence; leaves on drop.
#[derive(Debug)]
pub struct FencePass<'a>(&'a Fence);

impl Fence {
    /// Enters if the fence is open: `None` otherwise.
    pub fn try_enter(&self) -> Option<FencePass<'_>> {
        self.inside.fetch_add(1, SeqCst);
        if self.state.load(SeqCst) == OPEN {
            return Some(FencePass(self));
        }
        self.inside.fetch_sub(1, SeqCst);
        None
    }

    /// Enters, waiting out a read (at most [`ENTER_SPINS_MAX`] spins). `Err(spins)`, the
    /// spins waited, if events are held (then at once: 0) or the read outlasted the wait
    /// (the take is retried later).
    pub fn enter(&self) -> Result<FencePass<'_>, u32> {
        self.enter_observed(|_| ())
    }

    /// [`Fence::enter`], calling `on_spin` with the count before each spin (a test plays
    /// the handler there, so that the read ends at a spin it chooses and not at a time).
    fn enter_observed(&self, mut on_spin: impl FnMut(u32)) -> Result<FencePass<'_>, u32> {
        let mut spins = 0u32;
        loop {
            if let Some(pass) = self.try_enter() {
                return Ok(pass);
            }
            if self.state.load(SeqCst) != READING || spins >= ENTER_SPINS_MAX {
                return Err(spins);
            }
            on_spin(spins);
            spins += 1;
            if spins.is_multiple_of(64) {
                process::sched_yield();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Opens the fence with nobody inside, whatever its state: a forked child's copy, on
    /// its only thread (the state was the parent's reader's, which does not exist here).
    pub fn reset_in_child(&self) {
        self.inside.store(0, SeqCst);
        self.state.store(OPEN, SeqCst);
    }

    /// Writes the fence for a read: from now on no take enters; returns once those inside
    /// have left.
    pub fn write(&self) {
        self.state.store(READING, SeqCst);
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

    /// The read brought events: takes are refused until [`Fence::release`].
    pub fn hold(&self) {
        self.state.store(HOLDING, SeqCst);
    }

    /// Nothing read is left to apply: takes may enter again.
    pub fn release(&self) {
        self.state.store(OPEN, SeqCst);
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
        // A read that outlasts the wait: refused once the spins run out.
        assert_eq!(fence.enter().err(), Some(ENTER_SPINS_MAX));
        fence.hold();
        assert!(fence.try_enter().is_none());
        assert_eq!(fence.enter().err(), Some(0), "a take waited for held events");
        fence.release();
        assert!(fence.try_enter().is_some());
        assert!(fence.enter().is_ok());
    }

    /// A take that meets a read waits it out and enters; one that meets held events is
    /// refused. The read ends at a chosen spin, not after a sleep: a sleeping handler woke
    /// after the taker's spins had run out when other tests loaded both CPUs (CI, a full
    /// `cargo test --workspace`).
    #[test]
    fn a_take_waits_out_a_read_but_not_held_events() {
        let fence = Fence::default();
        fence.write();
        // The read ends with faults only: released while the taker spins.
        let mut spun = 0;
        let pass = fence.enter_observed(|spins| {
            spun = spins;
            if spins == 1000 {
                fence.release();
            }
        });
        assert!(pass.is_ok(), "a take refused for a read that ended in time");
        assert_eq!(spun, 1000, "entered before the read ended");
        drop(pass);

        fence.write();
        fence.hold();
        assert_eq!(fence.enter().err(), Some(0), "a take entered past, or waited for, held events");
    }

    /// The same across threads: a handler thread ends the read once the taker is seen
    /// waiting, so the taker's wait never depends on how soon a sleeper wakes.
    #[test]
    fn a_take_on_another_thread_waits_out_a_read() {
        let fence = Arc::new(Fence::default());
        let waiting = Arc::new(AtomicBool::new(false));
        fence.write();
        let taker = {
            let (fence, waiting) = (fence.clone(), waiting.clone());
            std::thread::spawn(move || {
                let pass = fence.enter_observed(|spins| {
                    waiting.store(true, SeqCst);
                    // Past most of the budget, wait for the handler without spending it.
                    while spins == ENTER_SPINS_MAX / 2 && fence.state.load(SeqCst) == READING {
                        std::thread::yield_now();
                    }
                });
                pass.is_ok()
            })
        };
        // A taker that does not wait ends at once, and the test fails below, not hangs.
        while !waiting.load(SeqCst) && !taker.is_finished() {
            std::thread::yield_now();
        }
        fence.release();
        assert!(taker.join().unwrap(), "a take refused for a read that ended in time");
    }

    /// Takers and a writer side by side: while the fence is written no taker is inside,
    /// and a write waits for the takers already in. Bounded (a few milliseconds): the
    /// takers yield when refused, so that the test never holds both CPUs of a small machine.
    #[test]
    fn no_take_is_inside_while_the_fence_is_written() {
        let fence = Arc::new(Fence::default());
        let (stop, inside) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        // One taker tries once, the other waits out reads.
        let takers: Vec<_> = [false, true]
            .into_iter()
            .map(|waits| {
                let (fence, stop, inside) = (fence.clone(), stop.clone(), inside.clone());
                std::thread::spawn(move || {
                    let mut entered = 0u64;
                    while !stop.load(SeqCst) {
                        let pass = if waits { fence.enter().ok() } else { fence.try_enter() };
                        match pass {
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
