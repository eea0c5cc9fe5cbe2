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
pub(crate) use loom_lock::MutexGuard;
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

/// A mutex with the two calls the device needs: `lock` and `try_lock`.
#[derive(Debug)]
pub(crate) struct Mutex<T> {
    #[cfg(loom)]
    inner: loom_lock::Mutex<T>,
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        let inner = loom_lock::Mutex::new(value);
        #[cfg(not(loom))]
        let inner = parking_lot::Mutex::new(value);
        Mutex { inner }
    }

    /// Takes the lock. Context: may block.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(loom)]
        let guard = self.inner.lock();
        #[cfg(not(loom))]
        let guard = self.inner.lock();
        guard
    }

    /// Takes the lock if it is free. Context: never blocks.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        #[cfg(loom)]
        let guard = self.inner.try_lock();
        #[cfg(not(loom))]
        let guard = self.inner.try_lock();
        guard
    }
}

/// The loom side of [`Mutex`]. loom 0.7 models `try_lock` as if it could block: when a
/// thread takes a mutex, every other thread whose next operation touches it is marked
/// blocked, try-lockers included, which reports false deadlocks for isolation (list lock
/// held, cluster `try_lock`). So the logical lock here is an atomic flag (`try_lock` is one
/// compare-exchange, `lock` retries with `yield_now`), and the loom mutex inside is only
/// ever taken by the flag's owner, never contended.
#[cfg(loom)]
mod loom_lock {
    use loom::sync::atomic::{AtomicBool, Ordering};
    use std::ops::{Deref, DerefMut};

    #[derive(Debug)]
    pub(crate) struct Mutex<T> {
        locked: AtomicBool,
        data: loom::sync::Mutex<T>,
    }

    pub(crate) struct MutexGuard<'a, T> {
        guard: Option<loom::sync::MutexGuard<'a, T>>,
        locked: &'a AtomicBool,
    }

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex { locked: AtomicBool::new(false), data: loom::sync::Mutex::new(value) }
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            loop {
                if let Some(guard) = self.try_lock() {
                    return guard;
                }
                loom::thread::yield_now();
            }
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            let won =
                self.locked.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed);
            won.ok()?;
            let guard = match self.data.try_lock() {
                Ok(guard) => guard,
                Err(_) => panic!("flag owner found the inner mutex taken"),
            };
            Some(MutexGuard { guard: Some(guard), locked: &self.locked })
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.guard.as_deref().expect("guard present until drop")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.guard.as_deref_mut().expect("guard present until drop")
        }
    }

    impl<T> Drop for MutexGuard<'_, T> {
        fn drop(&mut self) {
            drop(self.guard.take());
            self.locked.store(false, Ordering::Release);
        }
    }
}
