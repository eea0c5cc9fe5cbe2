//! One place for the engine's synchronisation primitives, so loom can model-check the same
//! code (tokio's `src/loom`, crossbeam's `primitive`).
//!
//! Normal builds use parking_lot (no poisoning, small, fast uncontended); `--cfg loom`
//! builds use loom's std-like types behind the same parking_lot-shaped API: `lock()`
//! returns the guard directly and `Condvar::wait` takes the guard by `&mut`.

// Not every primitive is used by every configuration of the crate yet.
#![allow(unused_imports)]

#[cfg(not(loom))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;
/// std's futex-based pair, for the one wait that may be in progress when the process
/// forks (the background reclaimer's sleep): its state lives in the object alone, where
/// parking_lot's waiters are queued in a process-wide table that a forked child inherits
/// with threads that do not exist in it.
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar as StdCondvar, Mutex as StdMutex, MutexGuard as StdMutexGuard};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(loom)]
pub(crate) use loom::sync::{
    Condvar as StdCondvar, Mutex as StdMutex, MutexGuard as StdMutexGuard,
};
#[cfg(loom)]
pub(crate) use loom_shim::{Condvar, Mutex, MutexGuard, RwLock};

#[cfg(loom)]
mod loom_shim {
    /// loom's mutex with parking_lot's shape. Poisoning cannot happen in a model that does
    /// not panic, and a panic fails the model anyway.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    /// loom's reader-writer lock with parking_lot's shape.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            RwLock(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner)
        }

        pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    /// loom's condition variable with parking_lot's `wait(&mut guard)` shape.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }

        pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            // loom's wait consumes the guard; swap a fresh one back in through a raw move.
            take_mut(guard, |g| self.0.wait(g).unwrap_or_else(std::sync::PoisonError::into_inner));
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }

    /// Replaces `*slot` by `f(old)`. `f` must not panic: a panic would leave `*slot` moved
    /// out, so it aborts instead.
    fn take_mut<T>(slot: &mut T, f: impl FnOnce(T) -> T) {
        struct AbortOnPanic;
        impl Drop for AbortOnPanic {
            fn drop(&mut self) {
                std::process::abort();
            }
        }
        let bomb = AbortOnPanic;
        // SAFETY: [1] `slot` is a valid, initialised `&mut T`, so reading it is sound;
        // [2] the value is written back before `slot` is used again, and if `f` panics the
        // bomb aborts the process, so the moved-out value is never observed twice.
        #[allow(unsafe_code)]
        unsafe {
            let old = std::ptr::read(slot);
            std::ptr::write(slot, f(old));
        }
        std::mem::forget(bomb);
    }
}
