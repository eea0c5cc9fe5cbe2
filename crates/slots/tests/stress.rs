//! Stress: several threads allocate orders 0..=9 and free them through every path (plain
//! `put_cache`, `dup` + `put_cache` + `put`, fork-like extra references), checking that
//! no two live allocations ever overlap and that the free hook hears of every slot
//! exactly once. Afterwards the device must be empty, with every cluster back on the free
//! list, and pass `check_invariants()`.

use backend::MemoryBackend;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slots::{
    AllocPolicy, Error, ListId, SlotFreeHook, SwapDevice, SwapDeviceOptions, SwapEntry, SwapType,
    SWAPFILE_CLUSTER,
};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

const CLUSTERS: u64 = 32;
const THREADS: u64 = 3;
const OPS_PER_THREAD: usize = 20_000;

/// Who owns each slot (0 = nobody), and how many slots the hook saw freed.
struct Owners {
    owner: Vec<AtomicU8>,
    freed: AtomicU64,
}

impl SlotFreeHook for Owners {
    fn slots_freed(&self, first: SwapEntry, nr: u32) {
        for offset in first.offset()..first.offset() + u64::from(nr) {
            let was = self.owner[offset as usize].load(Ordering::Relaxed);
            assert_eq!(was, 0, "slot {offset} freed while still owned by thread {was}");
        }
        self.freed.fetch_add(u64::from(nr), Ordering::Relaxed);
    }
}

fn release(si: &SwapDevice, owners: &Owners, (entry, nr): (SwapEntry, u32), how: u32) {
    for offset in entry.offset()..entry.offset() + u64::from(nr) {
        owners.owner[offset as usize].store(0, Ordering::Relaxed);
    }
    match how % 3 {
        0 => si.put_cache(entry, nr).unwrap(),
        1 => {
            si.dup(entry, nr).unwrap();
            si.put_cache(entry, nr).unwrap();
            si.put(entry, nr).unwrap();
        }
        _ => {
            // A fork: two references, dropped one by one, then the cache pin.
            si.dup(entry, nr).unwrap();
            si.dup(entry, nr).unwrap();
            si.put(entry, nr).unwrap();
            si.put(entry, nr).unwrap();
            si.put_cache(entry, nr).unwrap();
        }
    }
}

fn worker(si: &SwapDevice, owners: &Owners, id: u8, seed: u64) -> (u64, u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut held: Vec<(SwapEntry, u32)> = Vec::new();
    let (mut allocated, mut failed) = (0u64, 0u64);
    for _ in 0..OPS_PER_THREAD {
        if rng.gen_bool(0.55) || held.is_empty() {
            let order = if rng.gen_bool(0.7) { 0 } else { rng.gen_range(1..=9) };
            match si.alloc(order) {
                Ok(entry) => {
                    let nr = 1u32 << order;
                    for offset in entry.offset()..entry.offset() + u64::from(nr) {
                        let was = owners.owner[offset as usize].swap(id, Ordering::Relaxed);
                        assert_eq!(was, 0, "slot {offset} handed to {id} while owned by {was}");
                    }
                    allocated += u64::from(nr);
                    held.push((entry, nr));
                }
                Err(Error::NoSpace { .. }) => failed += 1,
                Err(e) => panic!("alloc: {e}"),
            }
        } else {
            let victim = held.swap_remove(rng.gen_range(0..held.len()));
            release(si, owners, victim, rng.gen());
        }
    }
    for victim in held.drain(..) {
        release(si, owners, victim, rng.gen());
    }
    (allocated, failed)
}

fn stress(policy: AllocPolicy, discard: bool) {
    let slots = CLUSTERS * SWAPFILE_CLUSTER as u64;
    let owners = Arc::new(Owners {
        owner: (0..slots).map(|_| AtomicU8::new(0)).collect(),
        freed: AtomicU64::new(0),
    });
    let hook: Arc<dyn SlotFreeHook> = owners.clone();
    let backend = Arc::new(MemoryBackend::new(slots));
    let options = SwapDeviceOptions { policy, discard };
    let si =
        Arc::new(SwapDevice::new(SwapType::new(0).unwrap(), backend, options, Some(hook)).unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (si, owners) = (Arc::clone(&si), Arc::clone(&owners));
            std::thread::spawn(move || worker(&si, &owners, t as u8 + 1, 0x5eed + t))
        })
        .collect();
    let mut allocated = 0;
    for handle in handles {
        let (a, failed) = handle.join().unwrap();
        allocated += a;
        assert!(a > 0, "a thread allocated nothing ({failed} failures)");
    }
    si.check_invariants();
    assert_eq!(si.inuse_pages(), 0);
    assert_eq!(owners.freed.load(Ordering::Relaxed), allocated, "hook saw every slot once");
    let free = si.list_members(ListId::Free);
    assert_eq!(free.len() as u64, CLUSTERS - 1, "every cluster but the header's is free");
    let swpout: u64 = (0..=9).map(|o| si.stats().swpout(o) << o).sum();
    assert_eq!(swpout, allocated, "swpout counts every allocation");
}

#[test]
fn threads_allocate_and_free_all_orders_current() {
    stress(AllocPolicy::Current, false);
}

#[test]
fn threads_allocate_and_free_all_orders_legacy() {
    stress(AllocPolicy::Legacy, false);
}

#[test]
fn threads_allocate_and_free_all_orders_discard() {
    stress(AllocPolicy::Current, true);
}
