//! Fault injection (FoundationDB's BUGGIFY, by hook): the tests and the simulator make the
//! compressor and the allocator fail on purpose, and corrupt stored objects, to show that a
//! failure loses nothing. Production pools have no hooks ([`FaultHooks::default`]).
//!
//! Sites:
//! - `compress_fail`: asked before each page is compressed; `true` makes the compressor
//!   report a failure, handled exactly as a real one (stored raw, or rejected).
//! - `alloc_fail`: handed to the pool allocator ([`zpool::AllocFailHook`]); `true` makes
//!   the zspage allocation fail as if the system allocator had refused.
//! - Device write failures belong to the [`crate::WritebackTarget`], which the test owns.
//! - Corruption: [`crate::Zswap::corrupt_object`] rewrites a stored object in place.

use slots::SwapEntry;
use std::fmt;
use std::sync::Arc;

/// Asked before a page of `entry` is compressed: `true` = fail this compression.
pub type CompressFailHook = Arc<dyn Fn(SwapEntry) -> bool + Send + Sync>;

/// The hooks of one pool. Each is called with no zswap lock held, but `compress_fail` runs
/// inside a store, with this thread's compression buffer borrowed: a hook must not call back
/// into the pool (a store from inside it panics on the buffer's `RefCell`).
#[derive(Clone, Default)]
pub struct FaultHooks {
    /// Compressor failures.
    pub compress_fail: Option<CompressFailHook>,
    /// Allocation failures in the pool allocator.
    pub alloc_fail: Option<zpool::AllocFailHook>,
}

impl fmt::Debug for FaultHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultHooks")
            .field("compress_fail", &self.compress_fail.is_some())
            .field("alloc_fail", &self.alloc_fail.is_some())
            .finish()
    }
}
