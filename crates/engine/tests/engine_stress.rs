//! Several threads read and write random pages of a region far larger than the budget, with
//! the background reclaimer running; every read is checked against the last write, and the
//! charged memory never passes the budget by more than one folio per thread. Then the same
//! with injected backend failures: errors surface (a poisoned page), wrong data never does.

mod common;

use backend::{Backend, FaultBackend, FaultKind, FaultPlan, MemoryBackend};
use common::{addr, content, setup_with, BASE, PAGE};
use engine::mem_source::{AccessError, MemorySource};
use engine::{BackendConfig, EngineConfig, SwapConfig};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const THREADS: u64 = 4;
const REGION_PAGES: u64 = 8192; // 32 MiB
const BUDGET_PAGES: u64 = 512; // 2 MiB

struct Outcome {
    reads_checked: u64,
    poisoned: u64,
}

/// Runs the workload; each thread owns the pages `p % THREADS == tid`.
fn run(config: EngineConfig, ops_per_thread: u64, seed: u64) -> (Outcome, engine::Engine) {
    run_over(MemorySource::new(BASE, REGION_PAGES), config, ops_per_thread, seed)
}

/// As [`run`], over `source`.
fn run_over(
    source: MemorySource,
    config: EngineConfig,
    ops_per_thread: u64,
    seed: u64,
) -> (Outcome, engine::Engine) {
    let folio_bytes = config.folio_bytes();
    let budget = config.budget_bytes;
    let (engine, source) = setup_with(source, config, REGION_PAGES);
    let engine = Arc::new(engine);
    let over_budget = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (engine, over, stop) = (engine.clone(), over_budget.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let used = engine.stats().gauges.used_bytes;
                over.fetch_max(used.saturating_sub(budget), Ordering::Relaxed);
                std::thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|tid| {
            let (engine, source) = (engine.clone(), source.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ tid);
                let mine: Vec<u64> = (0..REGION_PAGES).filter(|p| p % THREADS == tid).collect();
                // Never-written pages read as zero: version 0 is the all-zero content.
                let mut version = vec![0u64; mine.len()];
                let mut buf = vec![0u8; PAGE];
                let mut outcome = Outcome { reads_checked: 0, poisoned: 0 };
                for op in 0..ops_per_thread {
                    let slot = rng.gen_range(0..mine.len());
                    let page = mine[slot];
                    let result = if rng.gen_bool(0.5) {
                        // Every eighth write stores zeros, to exercise the zero map.
                        let v = if rng.gen_ratio(1, 8) { 0 } else { op + 1 };
                        let r = source.write(&engine, addr(page), &content(page, v));
                        if r.is_ok() {
                            version[slot] = v;
                        }
                        r
                    } else {
                        let r = source.read(&engine, addr(page), &mut buf);
                        if r.is_ok() {
                            let expected = content(page, version[slot]);
                            assert!(
                                buf == expected,
                                "page {page} (seed {seed}): read (page, version) {:?}, \
                                 expected {:?}",
                                head(&buf),
                                head(&expected)
                            );
                            outcome.reads_checked += 1;
                        }
                        r
                    };
                    match result {
                        Ok(()) => {}
                        Err(AccessError::Poisoned { .. }) => {
                            // The data could not be read back: the page is lost, loudly.
                            // Drop it (as the program would after SIGBUS) and start over.
                            outcome.poisoned += 1;
                            source.drop_range(addr(page), PAGE as u64);
                            engine.remove(addr(page), PAGE as u64);
                            version[slot] = 0;
                        }
                        Err(error) => panic!("page {page}: {error:?} (seed {seed})"),
                    }
                }
                outcome
            })
        })
        .collect();
    let mut total = Outcome { reads_checked: 0, poisoned: 0 };
    for worker in workers {
        let o = worker.join().expect("worker");
        total.reads_checked += o.reads_checked;
        total.poisoned += o.poisoned;
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let over = over_budget.load(Ordering::Relaxed);
    assert!(over <= THREADS * folio_bytes, "charged memory passed the budget by {over} bytes");
    let engine = Arc::into_inner(engine).expect("workers are done");
    (total, engine)
}

/// With encryption on, the device's silent faults (torn and lost writes, bits flipped on
/// read) fail to authenticate: the pages are poisoned, never mapped with wrong data, and the
/// crypt layer counts each one.
#[test]
fn encrypted_device_faults_are_poisoned_never_mapped() {
    let faulty = Arc::new(FaultBackend::new(MemoryBackend::new((64 << 20) / PAGE as u64)));
    faulty.arm(FaultPlan { kind: FaultKind::CorruptRead, nth: 97, every: true });
    faulty.arm(FaultPlan { kind: FaultKind::TornWrite, nth: 89, every: true });
    faulty.arm(FaultPlan { kind: FaultKind::LostWrite, nth: 83, every: true });
    let backend: Arc<dyn Backend> = faulty.clone();
    let mut config = config(0, BackendConfig::Custom(backend));
    config.swap.encrypt = true;
    config.zswap = None; // every page out goes through the device
    let (outcome, engine) = run(config, 20_000, 3);
    assert!(faulty.stats().injected(FaultKind::CorruptRead) > 0);
    assert!(faulty.stats().injected(FaultKind::LostWrite) > 0);
    let mut failures = 0;
    engine.backend_counters(&mut |name, value| {
        if name == "crypt_auth_failures" {
            failures = value;
        }
    });
    assert!(failures > 0, "silent faults were caught by authentication");
    assert!(outcome.poisoned > 0, "and reached the program as poisoned pages");
    assert_eq!(engine.stats().counters.swpin_error, failures);
    assert!(outcome.reads_checked > 30_000);
    engine.check_invariants();
}

/// The (page, version) a content page starts with.
fn head(data: &[u8]) -> (u64, u64) {
    let word = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
    (word(0), word(8))
}

fn config(folio_order: u32, backend: BackendConfig) -> EngineConfig {
    EngineConfig {
        budget_bytes: BUDGET_PAGES * PAGE as u64,
        folio_order,
        swap: SwapConfig { backend, size_bytes: 64 << 20, ..SwapConfig::default() },
        ..EngineConfig::default()
    }
}

#[test]
fn threads_read_back_their_last_writes_order0() {
    let (outcome, engine) = run(config(0, BackendConfig::Memory), 20_000, 1);
    assert!(outcome.reads_checked > 30_000);
    assert_eq!(outcome.poisoned, 0);
    let stats = engine.stats();
    assert!(stats.counters.pswpout > 10_000, "it swapped: {:?}", stats.counters);
    engine.check_invariants();
}

#[test]
fn threads_read_back_their_last_writes_order2() {
    let (outcome, engine) = run(config(2, BackendConfig::Memory), 20_000, 2);
    assert!(outcome.reads_checked > 30_000);
    assert_eq!(outcome.poisoned, 0);
    assert!(engine.stats().per_order.swpout[2] > 100);
    engine.check_invariants();
}

/// Zero pages mapped write-protected and uncharged: reads of never-written pages map them,
/// zero folios paged out are mapped back so, and each first write makes a folio resident
/// through a write-protect fault, racing the other threads' faults and the reclaimer.
#[test]
fn threads_read_back_their_last_writes_with_protected_zero_pages() {
    let source = MemorySource::new(BASE, REGION_PAGES).with_protected_zero();
    let (outcome, engine) = run_over(source, config(2, BackendConfig::Memory), 20_000, 4);
    assert!(outcome.reads_checked > 30_000);
    assert_eq!(outcome.poisoned, 0);
    let c = engine.stats().counters;
    assert!(c.zero_mapped > 1000 && c.zero_mapped_written > 100, "{c:?}");
    // Zero folios paged out come straight back as protected zero pages.
    assert!(c.pgfault_wp > 100 && c.zero_remapped > 100, "{c:?}");
    engine.check_invariants();
}

#[test]
fn injected_backend_failures_surface_and_never_corrupt() {
    let faulty = Arc::new(FaultBackend::new(MemoryBackend::new((64 << 20) / PAGE as u64)));
    faulty.arm(FaultPlan { kind: FaultKind::FailRead, nth: 97, every: true });
    faulty.arm(FaultPlan { kind: FaultKind::FailWrite, nth: 89, every: true });
    let backend: Arc<dyn Backend> = faulty.clone();
    // The pool fails too: every 11th compression, every 7th zspage allocation.
    let compressions = Arc::new(AtomicU64::new(0));
    let allocations = Arc::new(AtomicU64::new(0));
    let mut config = config(0, BackendConfig::Custom(backend));
    config.zswap_faults = zswap::FaultHooks {
        compress_fail: Some(Arc::new(move |_| {
            compressions.fetch_add(1, Ordering::Relaxed) % 11 == 10
        })),
        alloc_fail: Some(Arc::new(move |_| allocations.fetch_add(1, Ordering::Relaxed) % 7 == 6)),
    };
    let (outcome, engine) = run(config, 20_000, 3);
    let stats = engine.stats();
    assert!(faulty.stats().injected(FaultKind::FailRead) > 0);
    assert!(faulty.stats().injected(FaultKind::FailWrite) > 0);
    assert!(outcome.poisoned > 0, "failed reads reach the program as poisoned pages");
    assert!(stats.counters.swpin_error > 0 && stats.counters.pageout_fail > 0);
    let pool = stats.pool.expect("a pool");
    assert!(pool.compress_fail_stored_raw > 0, "compressor failures were injected");
    assert!(pool.reject_alloc_fail > 0, "allocation failures were injected");
    assert!(outcome.reads_checked > 30_000);
    engine.check_invariants();
}
