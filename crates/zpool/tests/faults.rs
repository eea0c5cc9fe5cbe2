//! Fault injection: the allocation-failure hook makes `malloc` fail; every failure is
//! counted and the pool loses nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zpool::{AllocAttempt, Error, PoolConfig, ZsPool, PAGE_SIZE};

/// A deterministic source of failures: every zspage allocation whose sequence number is
/// divisible by `every` fails.
fn every_nth(every: u64, calls: Arc<AtomicU64>) -> zpool::AllocFailHook {
    Arc::new(move |_attempt: &AllocAttempt| {
        calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(every)
    })
}

#[test]
fn injected_failures_are_counted_and_lose_nothing() {
    let calls = Arc::new(AtomicU64::new(0));
    let config = PoolConfig::with_max_bytes(16 << 20).fail_hook(every_nth(3, Arc::clone(&calls)));
    let pool = ZsPool::new(config).expect("config");
    let mut live: HashMap<zpool::Handle, Vec<u8>> = HashMap::new();
    let mut failures = 0u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..3000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = 1 + (x % 4096) as usize;
        if x.is_multiple_of(5) && !live.is_empty() {
            let handle = *live.keys().next().expect("live");
            pool.free(handle);
            live.remove(&handle);
        } else {
            match pool.malloc(size) {
                Ok(handle) => {
                    let data = vec![(i % 251) as u8; size];
                    pool.write(handle, &data);
                    live.insert(handle, data);
                }
                Err(Error::AllocFail { size: s, pages }) => {
                    assert_eq!(s, size);
                    assert!(pages >= 1);
                    failures += 1;
                }
                Err(other) => panic!("unexpected {other}"),
            }
        }
        pool.check_invariants();
    }
    let counters = pool.counters();
    assert!(failures > 10, "the hook fired {failures} times");
    assert_eq!(counters.alloc_fail, failures);
    assert_eq!(counters.alloc_fail_injected, failures);
    assert_eq!(counters.zspages_allocated + failures, calls.load(Ordering::Relaxed));
    let mut buf = vec![0u8; PAGE_SIZE];
    for (&handle, data) in &live {
        let n = pool.read(handle, &mut buf);
        assert_eq!(&buf[..n], &data[..]);
    }
    assert_eq!(pool.stats().objects, live.len());
}

#[test]
fn hook_sees_the_attempt_and_runs_only_when_a_zspage_is_needed() {
    let seen = Arc::new(parking_lot_free::Seen::default());
    let hook = {
        let seen = Arc::clone(&seen);
        Arc::new(move |attempt: &AllocAttempt| {
            seen.record(*attempt);
            true
        })
    };
    let pool = ZsPool::new(PoolConfig::with_max_bytes(1 << 20).fail_hook(hook)).expect("config");
    assert_eq!(pool.malloc(2000), Err(Error::AllocFail { size: 2000, pages: 1 }));
    let attempts = seen.take();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].size_bytes, 2000);
    assert_eq!(Some(attempts[0].class), pool.classes().class_of_size(2000));
    assert_eq!(pool.pages_held(), 0);
    pool.check_invariants();
}

/// A tiny recorder without extra dependencies.
mod parking_lot_free {
    use std::sync::Mutex;
    use zpool::AllocAttempt;

    #[derive(Default)]
    pub struct Seen(Mutex<Vec<AllocAttempt>>);

    impl Seen {
        pub fn record(&self, attempt: AllocAttempt) {
            self.0.lock().expect("poisoned").push(attempt);
        }
        pub fn take(&self) -> Vec<AllocAttempt> {
            std::mem::take(&mut *self.0.lock().expect("poisoned"))
        }
    }
}
