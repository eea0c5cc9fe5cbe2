//! Hooks for the deterministic simulator, and a bug planted on purpose for testing it.
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

use std::cell::Cell;

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
