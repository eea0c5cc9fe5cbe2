//! The `sync` shim: the same code runs on parking_lot and std atomics normally, and on
//! loom's model-checked primitives under `RUSTFLAGS="--cfg loom"` (tests/loom_cluster.rs).
//!
//! Only the primitives that carry the device's synchronisation go through here: the
//! cluster locks, the list lock, `inuse_pages` and the per-thread cluster hints. Pure
//! statistics counters use std atomics directly (loom need not explore them).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

/// A mutex with the two calls the device needs: `lock` and `try_lock`.
#[derive(Debug)]
pub(crate) struct Mutex<T> {
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        let inner = loom::sync::Mutex::new(value);
        #[cfg(not(loom))]
        let inner = parking_lot::Mutex::new(value);
        Mutex { inner }
    }

    /// Takes the lock. Context: may block.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(loom)]
        let guard = match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        #[cfg(not(loom))]
        let guard = self.inner.lock();
        guard
    }

    /// Takes the lock if it is free. Context: never blocks.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        #[cfg(loom)]
        let guard = self.inner.try_lock().ok();
        #[cfg(not(loom))]
        let guard = self.inner.try_lock();
        guard
    }
}
