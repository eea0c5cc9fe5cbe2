//! Hooks: the page-out hook an embedding program sets (the LD_PRELOAD shim records page-outs
//! in its trace); the deterministic simulator's yield hook; a bug planted on purpose for
//! testing the simulator.
//!
//! **Page-out hook.** [`PageOutHook::paged_out`] is told of every folio paged out, once the
//! page-out is complete (data stored, pages taken from the program, the folio's charge
//! gone), on the thread that reclaimed, with no engine lock held but the background
//! reclaimer's pass lock (`Core::kswapd_running`, which only the reclaimer and
//! `check_invariants` take). It is set once ([`crate::Engine::set_page_out_hook`]); unset,
//! a page-out pays one atomic load for it. It passes only numbers: nothing is allocated to
//! report a page-out.
//!
//! The simulator runs the real engine on several threads but lets only one run at a time,
//! switching at the points where a real engine thread would block: backend I/O (the
//! simulator's backend yields there itself) and waiting on a locked folio (here). With a
//! yield hook set on a thread, [`crate::swap_cache::Folio::wait_unlocked`] calls it in a
//! loop instead of sleeping on the folio's condition variable, so the simulator's scheduler
//! decides who runs next, reproducibly from its seed.
//!
//! The planted bug (debug and loom builds only) skips half of page-in's re-validation after the
//! folio wait — the swap cache membership check whose absence let a stale folio be mapped
//! (see `fault.rs`, the regression test `a_folio_no_longer_in_the_swap_cache_is_never_mapped`).
//! The simulator's test proves it catches that bug within a bounded number of seeds.

use crate::region::MmId;
use crate::storage::Tier;
use std::cell::Cell;

/// Told of every folio the engine pages out (module essay).
pub trait PageOutHook: Send + Sync + std::fmt::Debug {
    /// `len` bytes at `addr` of address space `mm` were paged out to `tier`: a touch of
    /// them faults from now on. A large folio split for want of contiguous slots reports
    /// each page that went.
    ///
    /// Context: the reclaiming thread (the background reclaimer, a faulting thread in
    /// direct reclaim, a caller of [`crate::Engine::pageout`]); no engine lock held except
    /// the reclaimer's pass lock on the reclaimer. Reclaim waits for it: it must be quick,
    /// must not wait for a thread that may be faulting on managed memory, and must not call
    /// back into the engine's fault or reclaim paths.
    fn paged_out(&self, mm: MmId, addr: u64, len: u64, tier: Tier);
}

thread_local! {
    static YIELD: Cell<Option<fn()>> = const { Cell::new(None) };
    static PLANTED_SKIP_REVALIDATION: Cell<bool> = const { Cell::new(false) };
}

/// Sets (or clears) this thread's yield hook.
pub fn set_yield_hook(hook: Option<fn()>) {
    YIELD.with(|y| y.set(hook));
}

/// This thread's yield hook.
pub(crate) fn yield_hook() -> Option<fn()> {
    YIELD.with(Cell::get)
}

/// Plants (or removes) the re-validation bug on this thread. Debug and loom builds only:
/// the bug cannot be compiled into a release build.
#[cfg(any(debug_assertions, loom))]
pub fn plant_skip_revalidation(on: bool) {
    PLANTED_SKIP_REVALIDATION.with(|p| p.set(on));
}

/// Is the planted bug active on this thread?
pub(crate) fn skip_revalidation() -> bool {
    cfg!(any(debug_assertions, loom)) && PLANTED_SKIP_REVALIDATION.with(Cell::get)
}
