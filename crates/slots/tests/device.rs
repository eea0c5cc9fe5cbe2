//! Named edge cases of the swap device: setup errors, the slot lifecycle, counts past the
//! in-slot maximum, the free hook, cache-only reclaim, discard, the two policies.

use backend::{Backend, FaultBackend, FaultKind, FaultPlan, MemoryBackend, PAGE_SIZE};
use parking_lot::Mutex;
use slots::{
    AllocPolicy, ClusterFlag, Error, ListId, SlotFreeHook, SwapDevice, SwapDeviceOptions,
    SwapDevices, SwapEntry, SwapType, MAX_SWAPFILES, SWAPFILE_CLUSTER,
};
use std::sync::{Arc, OnceLock, Weak};

fn ty0() -> SwapType {
    SwapType::new(0).unwrap()
}

fn device(clusters: u64, policy: AllocPolicy) -> SwapDevice {
    let backend = Arc::new(MemoryBackend::new(clusters * SWAPFILE_CLUSTER as u64));
    let options = SwapDeviceOptions { policy, discard: false };
    SwapDevice::new(ty0(), backend, options, None).unwrap()
}

/// Records every `slots_freed` call.
#[derive(Default)]
struct Recorder {
    freed: Mutex<Vec<(u64, u32)>>,
}

impl SlotFreeHook for Recorder {
    fn slots_freed(&self, first: SwapEntry, nr: u32) {
        self.freed.lock().push((first.offset(), nr));
    }
}

#[test]
fn device_smaller_than_a_cluster_is_refused() {
    let backend = Arc::new(MemoryBackend::new(SWAPFILE_CLUSTER as u64 - 1));
    let result = SwapDevice::new(ty0(), backend, SwapDeviceOptions::default(), None);
    assert!(matches!(result, Err(Error::TooSmall { nr_slots: 511, min_slots: 512 })));
}

#[test]
fn too_many_devices_is_an_error() {
    let devices = SwapDevices::new();
    for _ in 0..MAX_SWAPFILES {
        let backend = Arc::new(MemoryBackend::new(SWAPFILE_CLUSTER as u64));
        devices.add(backend, SwapDeviceOptions::default(), None).unwrap();
    }
    let backend = Arc::new(MemoryBackend::new(SWAPFILE_CLUSTER as u64));
    let err = devices.add(backend, SwapDeviceOptions::default(), None);
    assert!(matches!(err, Err(Error::TooManyDevices { max: 32 })));
    let ty = SwapType::new(7).unwrap();
    assert!(devices.remove(ty).is_some());
    let backend = Arc::new(MemoryBackend::new(SWAPFILE_CLUSTER as u64));
    let si = devices.add(backend, SwapDeviceOptions::default(), None).unwrap();
    assert_eq!(si.swap_type(), ty);
    let entry = SwapEntry::new(ty, 3);
    assert_eq!(devices.device_of(entry).unwrap().swap_type(), ty);
}

#[test]
fn alloc_returns_aligned_cache_pinned_slots_and_never_the_header() {
    let si = device(4, AllocPolicy::Current);
    for order in 0..=9 {
        let entry = si.alloc(order).unwrap();
        assert_eq!(entry.offset() % (1 << order), 0, "order {order} alignment");
        assert_ne!(entry.offset(), 0);
        assert!(si.is_cache_pinned(entry).unwrap());
        assert_eq!(si.count(entry).unwrap(), 0);
        si.check_invariants();
        si.put_cache(entry, 1 << order).unwrap();
        si.check_invariants();
    }
    let header = SwapEntry::new(ty0(), 0);
    assert!(matches!(si.dup(header, 1), Err(Error::BadSlot { .. })));
    assert!(matches!(si.try_pin_cache(header), Err(Error::BadSlot { .. })));
}

#[test]
fn counts_of_thousands_go_to_the_extend_table_and_back() {
    let si = device(2, AllocPolicy::Current);
    let entry = si.alloc(2).unwrap();
    for _ in 0..5000 {
        si.dup(entry, 4).unwrap();
    }
    si.check_invariants();
    assert_eq!(si.count(entry.add(3)).unwrap(), 5000);
    si.put_cache(entry, 4).unwrap();
    for left in (0..5000).rev() {
        si.put(entry, 4).unwrap();
        if left % 997 == 0 {
            si.check_invariants();
        }
    }
    assert_eq!(si.inuse_pages(), 0);
    assert!(matches!(si.put(entry, 1), Err(Error::SlotFree { .. })));
    si.check_invariants();
    assert_eq!(si.stats().counters().extend_tables, 1);
}

#[test]
fn slot_lifecycle_errors_say_why() {
    let si = device(2, AllocPolicy::Current);
    let entry = si.alloc(0).unwrap();
    assert!(matches!(si.put(entry, 1), Err(Error::CountUnderflow { .. })));
    assert!(matches!(si.try_pin_cache(entry), Err(Error::CacheBusy { .. })));
    si.dup(entry, 1).unwrap();
    si.put_cache(entry, 1).unwrap();
    assert!(matches!(si.put_cache(entry, 1), Err(Error::NotCached { .. })));
    si.try_pin_cache(entry).unwrap(); // zswap writeback pins an in-use slot
    si.put(entry, 1).unwrap(); // cache-only now
    assert_eq!(si.inuse_pages(), 1);
    si.put_cache(entry, 1).unwrap();
    assert!(matches!(si.try_pin_cache(entry), Err(Error::SlotFree { .. })));
    assert!(matches!(si.dup(entry, 1), Err(Error::SlotFree { .. })));
    let other = SwapEntry::new(SwapType::new(1).unwrap(), 5);
    assert!(matches!(si.dup(other, 1), Err(Error::WrongDevice { .. })));
    let end = SwapEntry::new(ty0(), 1023);
    assert!(matches!(si.dup(end, 2), Err(Error::OutOfRange { .. })));
    let cross = SwapEntry::new(ty0(), 511);
    assert!(matches!(si.dup(cross, 2), Err(Error::CrossesCluster { .. })));
    assert!(matches!(si.alloc(10), Err(Error::BadOrder { order: 10 })));
    si.check_invariants();
}

#[test]
fn a_failed_dup_changes_nothing() {
    let si = device(2, AllocPolicy::Current);
    let entry = si.alloc(1).unwrap();
    si.put_cache(entry.add(1), 1).unwrap(); // second slot free now
    assert!(matches!(si.dup(entry, 2), Err(Error::SlotFree { .. })));
    assert_eq!(si.count(entry).unwrap(), 0, "the first slot must not have been counted");
    si.check_invariants();
}

#[test]
fn free_hook_hears_every_freed_run_before_reuse() {
    let hook = Arc::new(Recorder::default());
    let backend = Arc::new(MemoryBackend::new(2 * SWAPFILE_CLUSTER as u64));
    let hook_dyn: Arc<dyn SlotFreeHook> = hook.clone();
    let si = SwapDevice::new(ty0(), backend, SwapDeviceOptions::default(), Some(hook_dyn)).unwrap();
    let entry = si.alloc(3).unwrap(); // 8 slots
    si.dup(entry, 8).unwrap();
    si.put_cache(entry, 8).unwrap();
    si.dup(entry.add(2), 1).unwrap(); // slot 2 keeps two references
    si.put(entry, 8).unwrap(); // frees 0..2 and 3..8; slot 2 stays
    let first = entry.offset();
    assert_eq!(*hook.freed.lock(), [(first, 2), (first + 3, 5)]);
    si.put(entry.add(2), 1).unwrap();
    assert_eq!(hook.freed.lock().last(), Some(&(first + 2, 1)));
    si.check_invariants();
}

#[test]
fn order_9_needs_a_free_cluster_and_counts_its_fallback() {
    let si = device(2, AllocPolicy::Current); // cluster 0 holds the header
    let big = si.alloc(9).unwrap();
    assert_eq!(big.offset(), 512);
    assert!(matches!(si.alloc(9), Err(Error::NoSpace { order: 9 })));
    assert_eq!(si.stats().swpout_fallback(9), 1);
    assert_eq!(si.stats().swpout(9), 1);
    assert_eq!(si.cluster_state(1).flag, ClusterFlag::Full);
    si.put_cache(big, 512).unwrap();
    assert_eq!(si.cluster_state(1).flag, ClusterFlag::Free);
    si.check_invariants();
}

#[test]
fn filling_the_device_then_freeing_everything_restores_the_lists() {
    let si = device(3, AllocPolicy::Current);
    let mut entries = Vec::new();
    while let Ok(entry) = si.alloc(0) {
        entries.push(entry);
    }
    assert_eq!(entries.len() as u64, si.total_slots());
    assert!(si.is_half_full());
    assert_eq!(si.stats().counters().alloc_fail, 1);
    si.check_invariants();
    for entry in entries {
        si.put_cache(entry, 1).unwrap();
    }
    si.check_invariants();
    assert_eq!(si.list_members(ListId::Free), [1, 2]);
    assert_eq!(si.list_members(ListId::Nonfull(0)), [0]);
}

#[test]
fn current_policy_prefers_nonfull_legacy_takes_a_free_cluster() {
    // The header cluster sits on nonfull[0] from setup.
    let current = device(4, AllocPolicy::Current);
    assert_eq!(current.alloc(0).unwrap().offset(), 1);
    let legacy = device(4, AllocPolicy::Legacy);
    assert_eq!(legacy.alloc(0).unwrap().offset(), 512);
}

#[test]
fn order_0_steals_from_clusters_of_other_orders() {
    let si = device(2, AllocPolicy::Current);
    let header_cluster: Vec<_> = (0..511).map(|_| si.alloc(0).unwrap()).collect();
    assert_eq!(si.cluster_state(0).flag, ClusterFlag::Full);
    let small = si.alloc(2).unwrap(); // cluster 1 now serves order 2
    assert_eq!(si.cluster_state(1).order, 2);
    let stolen = si.alloc(0).unwrap();
    assert_eq!(stolen.offset() / 512, 1);
    assert_eq!(si.stats().counters().alloc_steal, 1);
    si.check_invariants();
    drop((header_cluster, small));
}

/// A hook that reclaims cache-only slots by dropping their pin, as the engine would.
struct Reclaimer {
    si: OnceLock<Weak<SwapDevice>>,
    calls: Mutex<Vec<(u64, u32)>>,
}

impl SlotFreeHook for Reclaimer {
    fn slots_freed(&self, _first: SwapEntry, _nr: u32) {}

    fn try_reclaim_cache(&self, first: SwapEntry, nr: u32) -> bool {
        self.calls.lock().push((first.offset(), nr));
        let si = self.si.get().and_then(Weak::upgrade).expect("device alive");
        si.put_cache(first, nr).is_ok()
    }
}

#[test]
fn cache_only_slots_are_reclaimed_when_more_than_half_full() {
    let hook = Arc::new(Reclaimer { si: OnceLock::new(), calls: Mutex::new(Vec::new()) });
    let backend = Arc::new(MemoryBackend::new(2 * SWAPFILE_CLUSTER as u64));
    let hook_dyn: Arc<dyn SlotFreeHook> = hook.clone();
    let opts = SwapDeviceOptions::default();
    let si = Arc::new(SwapDevice::new(ty0(), backend, opts, Some(hook_dyn)).unwrap());
    hook.si.set(Arc::downgrade(&si)).unwrap();
    // Fill half the device with cache-only slots (allocated, never referenced).
    let half = si.total_slots() / 2;
    for _ in 0..half {
        si.alloc(0).unwrap();
    }
    assert!(!si.is_half_full());
    assert!(hook.calls.lock().is_empty(), "no reclaim below half full");
    for _ in half..si.total_slots() {
        si.alloc(0).unwrap();
    }
    assert_eq!(si.inuse_pages(), si.total_slots());
    // Full device, all cache-only. As in 6.18, the reclaim of a full cluster comes after
    // the nonfull and free lists were tried, so the first pass fails; the cluster it
    // reclaimed waits on nonfull[0], and the order-0 retry (the device is no longer full)
    // takes a slot from it.
    let entry = si.alloc(0).unwrap();
    assert_eq!(*hook.calls.lock(), [(1, 511)], "one full cluster reclaimed, header skipped");
    assert_eq!(entry.offset(), 1);
    assert_eq!(si.stats().counters().alloc_retry, 1);
    assert!(si.is_cache_pinned(entry).unwrap());
    si.check_invariants();
}

#[test]
fn discard_punches_the_freed_cluster_and_errors_are_returned_and_counted() {
    let memory = MemoryBackend::new(3 * SWAPFILE_CLUSTER as u64);
    let faulty = Arc::new(FaultBackend::new(memory));
    let opts = SwapDeviceOptions { policy: AllocPolicy::Current, discard: true };
    let backend: Arc<dyn Backend> = faulty.clone();
    let si = SwapDevice::new(ty0(), backend, opts, None).unwrap();
    let entry = si.alloc(9).unwrap();
    assert_eq!(entry.offset(), 512);
    faulty.write(entry.offset(), &vec![1u8; 512 * PAGE_SIZE]).unwrap();
    assert_eq!(faulty.inner().resident_pages(), 512);
    si.put_cache(entry, 512).unwrap();
    assert_eq!(faulty.inner().resident_pages(), 0, "the cluster's pages were discarded");
    assert_eq!(si.cluster_state(1).flag, ClusterFlag::Free);
    // A failing discard: the put completes, the error comes back and is counted.
    let entry = si.alloc(9).unwrap();
    faulty.arm(FaultPlan { kind: FaultKind::FailDiscard, nth: 1, every: false });
    assert!(matches!(si.put_cache(entry, 512), Err(Error::Backend(_))));
    assert_eq!(si.stats().counters().discard_errors, 1);
    assert_eq!(si.inuse_pages(), 0);
    si.check_invariants();
    assert!(si.alloc(9).is_ok(), "the cluster is reusable after a failed discard");
}

#[test]
fn range_pin_is_all_or_nothing() {
    let si = device(2, AllocPolicy::Current);
    let entry = si.alloc(2).unwrap();
    si.dup(entry, 4).unwrap();
    si.put_cache(entry, 4).unwrap();
    // One slot of the four is pinned already: the range pin changes nothing.
    si.try_pin_cache(entry.add(2)).unwrap();
    assert!(matches!(si.try_pin_cache_range(entry, 4), Err(Error::CacheBusy { .. })));
    assert!(!si.is_cache_pinned(entry).unwrap());
    si.put_cache(entry.add(2), 1).unwrap();
    // A slot with count 0 refuses too.
    si.put(entry.add(3), 1).unwrap();
    assert!(matches!(si.try_pin_cache_range(entry, 4), Err(Error::SlotFree { .. })));
    assert!(!si.is_cache_pinned(entry.add(1)).unwrap());
    si.try_pin_cache_range(entry, 3).unwrap();
    assert!((0..3).all(|i| si.is_cache_pinned(entry.add(i)).unwrap()));
    si.check_invariants();
}

#[test]
fn as_cpu_gives_each_cpu_its_own_cluster_hint() {
    let si = device(4, AllocPolicy::Current);
    let cluster = |e: SwapEntry| e.offset() / SWAPFILE_CLUSTER as u64;
    let a0 = slots::as_cpu(0, || si.alloc(0)).unwrap();
    let b0 = slots::as_cpu(1, || si.alloc(0)).unwrap();
    let a1 = slots::as_cpu(0, || si.alloc(0)).unwrap();
    let b1 = slots::as_cpu(1, || si.alloc(0)).unwrap();
    // CPU 1 found CPU 0's cluster on the nonfull list ("prefer nonfull over free"), then
    // each CPU goes on from its own hint: consecutive slots per CPU.
    assert_eq!(a1.offset(), a0.offset() + 1, "CPU 0 continues from its hint");
    assert_eq!(cluster(b1), cluster(b0), "CPU 1 continues in its cluster");
    assert_eq!(b1.offset(), b0.offset() + 1);
    si.check_invariants();
}
