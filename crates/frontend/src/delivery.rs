//! Fault delivery: where a managed page's fault is resolved.
//!
//! | mode | who resolves a fault | cost | cannot serve |
//! |---|---|---|---|
//! | [`Delivery::Handler`] | the handler thread, woken by a message | two wake-ups | - |
//! | [`Delivery::Sigbus`] | the faulting thread, in a SIGBUS handler | none | system calls |
//!
//! A forked child runs a swap of its own (crate::fork), with a dispatcher of its own. A
//! write-protect fault (the
//! first write to a write-protected zero page) is a SIGBUS as a missing page's is; the
//! page-fault error code the kernel saves in the signal frame tells them apart (a write to
//! a present page), and the dispatcher calls the engine's write-protect path for it.
//!
//! In both modes the handler thread reads the non-cooperative events (fork, remap, remove,
//! unmap), which must always be read.
//!
//! **When SIGBUS mode is safe.** The signal handler calls into the engine, which takes locks
//! and allocates. That is safe only because the interrupted code is an access to region
//! memory, and region memory is never touched while the faulting thread holds the
//! allocator's or the engine's locks: the engine's own threads never touch region memory,
//! and a program touches it from its own code, not from inside `malloc`. A program that
//! passes region memory to code that holds a lock the engine takes (a custom allocator
//! whose arena is a region, and whose allocator the engine also uses) must use the handler
//! mode. The LD_PRELOAD shim is not such a program although glibc's heap is managed there:
//! its engine allocates from the shim's own arena, never glibc's malloc, so a program
//! thread faulting inside malloc holds no lock the engine takes (docs/RUN.md, "Fault
//! delivery").
//!
//! **What SIGBUS mode cannot do.** A system call whose buffer is an evicted page fails with
//! EFAULT: the kernel does not signal a fault taken in kernel mode. A `vfork` child
//! (`posix_spawn`, `system`) is another process in the same address space, the engine's:
//! its faults are resolved like the owner's (`kcmp(2)` tells the two apart).
//!
//! Unsafe code: the dispatcher's context is a raw pointer to a [`SigbusContext`], valid
//! while the dispatcher is armed (this leaf module owns both ends).

#![allow(unsafe_code)]

use crate::handler::{Control, Hooks};
use crate::Error;
use engine::region::MmId;
use engine::{Engine, FaultOutcome};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use uffd::sigbus::{Dispatch, SigbusFault, SigbusResolver, BUS_ADRERR};
use uffd::sys::process;

/// How faults on managed pages are delivered (module essay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// A handler thread reads fault messages and resolves them.
    Handler,
    /// The faulting thread resolves its own fault in a SIGBUS handler.
    Sigbus,
}

impl Delivery {
    /// The default, chosen from `uswap bench fault` (docs/UFFD.md, "Delivery: the
    /// decision"): the handler thread. SIGBUS mode is faster per fault but breaks system
    /// calls into evicted buffers and forked children.
    pub const DEFAULT: Delivery = Delivery::Handler;

    /// The mode's name as the benchmark and the C API print it.
    pub fn name(self) -> &'static str {
        match self {
            Delivery::Handler => "handler",
            Delivery::Sigbus => "sigbus",
        }
    }
}

/// How long the dispatcher waits for the engine to catch up with a fault outside every
/// region before it calls the fault not its own: the handler turns at least every 100 ms.
pub const CATCH_UP_MAX: std::time::Duration = std::time::Duration::from_millis(250);

/// What the SIGBUS dispatcher needs; lives as long as its arming.
#[derive(Debug)]
pub struct SigbusContext {
    engine: Arc<Engine>,
    control: Arc<Control>,
    /// Told of every fault resolved (as the handler tells them), from the signal handler.
    hooks: Option<Arc<dyn Hooks>>,
    resolved: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
}

/// SIGBUS mode armed for one engine; disarmed (waiting for resolutions in flight) on drop.
#[derive(Debug)]
pub struct SigbusMode {
    resolver: Option<SigbusResolver<'static>>,
    context: Box<SigbusContext>,
}

/// Counters of SIGBUS-mode resolution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SigbusStats {
    /// Faults resolved in the faulting thread.
    pub resolved: u64,
    /// Faults that could not be resolved (the default action ran: the process died).
    pub failed: u64,
    /// Resolutions that had to let the access fault again (an event was unread).
    pub retried: u64,
}

impl SigbusMode {
    /// In a forked child, on its only thread: the dispatcher's slot is the parent's (its
    /// context names the parent's handler), and is freed. The mode itself must then never
    /// be dropped (it would free the slot again): the child forgets the parent's parts.
    pub(crate) fn disarm_in_child(&self) {
        if let Some(resolver) = &self.resolver {
            uffd::sys::signal::free_in_child(resolver.slot_index());
        }
    }

    /// Arms the process-wide SIGBUS handler for `engine`'s regions; `hooks` hears of each
    /// fault resolved, from the faulting thread's signal handler ([`Hooks::fault`], with the
    /// resolution's time as its wait).
    ///
    /// # Errors
    /// sigaction's errno; [`uffd::Error::SigbusSlotsFull`] (as [`Error::Kernel`]).
    pub fn arm(
        engine: Arc<Engine>,
        control: Arc<Control>,
        hooks: Option<Arc<dyn Hooks>>,
    ) -> Result<SigbusMode, Error> {
        let context = Box::new(SigbusContext {
            engine,
            control,
            hooks,
            resolved: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            retried: AtomicU64::new(0),
        });
        let ctx = &*context as *const SigbusContext as usize;
        // SAFETY: (1) `ctx` points into the box owned by the returned value, which drops the
        // resolver (disarming, and waiting for dispatches in flight) before the box; (2)
        // `on_sigbus` is safe in signal context under the module essay's condition, which is
        // this mode's documented contract with the program.
        let resolver = unsafe { SigbusResolver::dispatch(None, on_sigbus, ctx) }?;
        Ok(SigbusMode { resolver: Some(resolver), context })
    }

    /// The counters.
    pub fn stats(&self) -> SigbusStats {
        let c = &self.context;
        SigbusStats {
            resolved: c.resolved.load(Relaxed),
            failed: c.failed.load(Relaxed),
            retried: c.retried.load(Relaxed),
        }
    }
}

impl Drop for SigbusMode {
    fn drop(&mut self) {
        // Disarm first: no dispatch uses the context after this.
        drop(self.resolver.take());
    }
}

/// Brings in the first managed pages of `[addr, addr + len)`, at most `*max_pages` of them
/// (the count is lowered by those brought in), as faults on them would (write faults when
/// `write`: the kernel is to write into them), for a system call that failed with EFAULT
/// under SIGBUS delivery because its buffer was not resident. Only a prefix: a buffer
/// larger than the budget can never be resident at once, and a call that copies a prefix
/// returns a short count, which the program continues from. Returns whether any page of
/// the range is managed (a caller retries only then: an EFAULT outside every region is the
/// program's own).
///
/// Context: the owner process, normal context (not a signal handler); takes the fork gate
/// and the engine's locks, may reclaim. A page may be evicted again before the retry: the
/// caller retries a bounded number of times.
pub fn bring_in(
    engine: &Engine,
    control: &Control,
    addr: u64,
    len: u64,
    write: bool,
    max_pages: &mut u64,
) -> bool {
    const PAGE: u64 = uffd::PAGE_SIZE as u64;
    let (start, end) = (addr & !(PAGE - 1), addr.saturating_add(len));
    let mut ranges = engine.region_ranges(MmId::DEFAULT);
    ranges.sort_unstable();
    let mut managed = false;
    for (region_start, region_end) in ranges {
        let (from, to) = (start.max(region_start), end.min(region_end));
        if from >= to {
            continue;
        }
        managed = true;
        let _pass = control.gate.enter();
        for page in (from..to).step_by(PAGE as usize) {
            if *max_pages == 0 {
                return true;
            }
            *max_pages -= 1;
            // Mapped, already there, gone, or failed (poisoned): the call's retry shows
            // which. An unread event: give its reader a turn first. A page there already
            // may be a write-protected zero page, which a write must first make resident
            // (lifting the protection of any other page changes nothing).
            let mut outcome = engine.handle_fault(page, write);
            if write && matches!(outcome, Ok(FaultOutcome::Spurious)) {
                outcome = engine.handle_wp_fault_in(MmId::DEFAULT, page);
            }
            if let Ok(FaultOutcome::Retry) = outcome {
                process::sched_yield();
            }
        }
    }
    managed
}

/// The dispatcher: resolves a userfaultfd SIGBUS in one of the engine's regions.
fn on_sigbus(ctx: usize, fault: &SigbusFault) -> Dispatch {
    // SAFETY: `ctx` was armed by `SigbusMode::arm` from a live box, which outlives the
    // arming (see there).
    let context = unsafe { &*(ctx as *const SigbusContext) };
    // Another process's copy of the dispatcher: the engine is not there, unless it is a
    // vfork child, in the owner's address space (module essay). A hardware memory error is
    // not ours either.
    if fault.code != BUS_ADRERR {
        return Dispatch::NotMine;
    }
    let addr = fault.addr as u64 & !(uffd::PAGE_SIZE as u64 - 1);
    // A write to a present page: a write-protect fault (a protected zero page's first write).
    let wp = fault.write && fault.present;
    // One look at the pid per fault (a system call), for the child test and the hooks.
    let owner = context.control.in_owner();
    if !owner && !process::shares_memory_with(context.control.pid) {
        return Dispatch::NotMine;
    }
    let start = std::time::Instant::now();
    // Everything this dispatch does with the engine, the source and the hooks is inside
    // the fork gate: no lock of theirs is held across a fork (crate::fork).
    let _pass = context.control.gate.enter();
    let resolve = || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            context.engine.handle_access_in(MmId::DEFAULT, addr, fault.write, wp)
        }))
    };
    let restores = context.engine.thrash_refaults();
    let mut outcome = resolve();
    // Maybe a range the engine has not caught up with: an mremap's, an adoption's (see
    // `Control::wait_passes`), or a grown mapping the embedder adopts at its next scan.
    // Look again after the handler's passes, for as long as a handler turn (with the
    // embedder's scan in it) can take; still outside then, the fault is not ours.
    while matches!(outcome, Ok(Err(engine::Error::OutsideRegions { .. })))
        && start.elapsed() < CATCH_UP_MAX
        && context.control.wait_passes(CATCH_UP_MAX)
    {
        outcome = resolve();
    }
    match outcome {
        Ok(Ok(FaultOutcome::Mapped | FaultOutcome::Gone)) => {
            context.resolved.fetch_add(1, Relaxed);
            // Not from a vfork child: it shares the owner's memory but has descriptors of
            // its own, which it may have closed and reused before its exec (posix_spawn's
            // file actions), and a hook may write a file (the shim's trace).
            if let (Some(hooks), true) = (&context.hooks, owner) {
                hooks.fault(&crate::FaultReport {
                    mm: MmId::DEFAULT,
                    addr: addr as usize,
                    write: fault.write,
                    thread_id: process::gettid(),
                    wait_ns: start.elapsed().as_nanos() as u64,
                    // Approximate when threads fault at once: another's restore may land
                    // between the two reads (a figure for the budget controller only).
                    thrashing: context.engine.thrash_refaults() != restores,
                });
            }
            Dispatch::Resolved
        }
        Ok(Ok(FaultOutcome::Spurious | FaultOutcome::Retry)) => {
            // Mapped by a racer, or an event is unread (the reader will read it), or an
            // staged page could not go back yet: let the access run again.
            context.retried.fetch_add(1, Relaxed);
            context.engine.unstage_all();
            process::sched_yield();
            Dispatch::Resolved
        }
        Ok(Err(engine::Error::OutsideRegions { .. })) => Dispatch::NotMine,
        // A page whose data could not be read (now poisoned), or a panic: die loudly.
        Ok(Err(_)) | Err(_) => {
            context.failed.fetch_add(1, Relaxed);
            Dispatch::Failed
        }
    }
}
