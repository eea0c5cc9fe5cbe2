//! loom models of the races the cluster lists exist for: an allocation isolating a
//! cluster (or dropping its lock to reclaim cache-only slots) while another thread frees
//! slots of the same cluster, so the cluster is moved between lists meanwhile.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p slots --test loom_cluster --release`.

#![cfg(loom)]

use backend::MemoryBackend;
use loom::sync::Arc;
use slots::{SlotFreeHook, SwapDevice, SwapDeviceOptions, SwapEntry, SwapType, SWAPFILE_CLUSTER};
use std::sync::{OnceLock, Weak};

fn device(clusters: u64, hook: Option<std::sync::Arc<dyn SlotFreeHook>>) -> SwapDevice {
    let backend = std::sync::Arc::new(MemoryBackend::new(clusters * SWAPFILE_CLUSTER as u64));
    let ty = SwapType::new(0).unwrap();
    SwapDevice::new(ty, backend, SwapDeviceOptions::default(), hook).unwrap()
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// Thread A isolates cluster 1 from nonfull[1] (slow path) while thread B frees the last
/// slots of the same cluster: B either waits for A's cluster lock, or A's try_lock skips
/// the cluster, or B empties it first and A finds it on the free list.
#[test]
fn isolate_races_with_free() {
    model(|| {
        let si = Arc::new(device(3, None));
        let a = si.alloc(1).unwrap();
        let b = si.alloc(1).unwrap();
        assert_eq!((a.offset(), b.offset()), (512, 514));
        si.put_cache(a, 2).unwrap(); // cluster 1 -> nonfull[1]
        si.forget_cluster_hints();
        let si2 = Arc::clone(&si);
        let freer = loom::thread::spawn(move || si2.put_cache(b, 2).unwrap());
        let got = si.alloc(1);
        freer.join().unwrap();
        si.check_invariants();
        // Cluster 2 is free, so the allocation never fails, contended or not.
        let got = got.unwrap();
        assert_eq!(si.inuse_pages(), 2);
        assert!(si.is_cache_pinned(got).unwrap());
    });
}

/// Reclaims a cache-only slot by dropping its pin, as the engine's hook would.
struct Reclaimer {
    si: OnceLock<Weak<SwapDevice>>,
}

impl SlotFreeHook for Reclaimer {
    fn slots_freed(&self, _first: SwapEntry, _nr: u32) {}

    fn try_reclaim_cache(&self, first: SwapEntry, nr: u32) -> bool {
        let si = self.si.get().and_then(Weak::upgrade).expect("device alive");
        si.put_cache(first, nr).is_ok()
    }
}

/// Thread A scans cluster 0 from frag[0], finds a cache-only slot with the device more
/// than half full, drops the cluster lock to reclaim it; meanwhile thread B frees another
/// slot of cluster 0, which moves the isolated cluster to nonfull[0]. A must re-validate
/// after relocking and leave the cluster on the list its flag names.
#[test]
fn reclaim_unlock_races_with_free() {
    model(|| {
        let hook = std::sync::Arc::new(Reclaimer { si: OnceLock::new() });
        let hook_dyn: std::sync::Arc<dyn SlotFreeHook> = hook.clone();
        let si = std::sync::Arc::new(device(2, Some(hook_dyn)));
        hook.si.set(std::sync::Arc::downgrade(&si)).unwrap();
        let big = si.alloc(9).unwrap(); // cluster 1, in use: not reclaimable
        si.dup(big, 512).unwrap();
        si.put_cache(big, 512).unwrap();
        let x = si.alloc(0).unwrap(); // slot 1: cache-only
        let y = si.alloc(0).unwrap(); // slot 2: one reference
        si.dup(y, 1).unwrap();
        si.put_cache(y, 1).unwrap();
        assert!(si.is_half_full());
        si.forget_cluster_hints();
        let si2 = std::sync::Arc::clone(&si);
        let freer = loom::thread::spawn(move || si2.put(y, 1).unwrap());
        let got = si.alloc(0);
        freer.join().unwrap();
        si.check_invariants();
        match got {
            Ok(got) => {
                assert!(got.offset() == x.offset() || got.offset() == y.offset(), "{got:?}");
                assert_eq!(si.inuse_pages(), 513);
            }
            // Isolation skips a cluster whose lock the freer holds (kernel behaviour): the
            // pass may fail then, and only then. (A cluster moving between the lists the
            // pass visits is covered by the order-0 retry.)
            // postmortem: without the retry, order 0 failed here with slot 2 free.
            Err(slots::Error::NoSpace { order: 0 }) => {
                assert!(si.stats().counters().isolate_contended > 0);
            }
            Err(e) => panic!("{e}"),
        }
    });
}
