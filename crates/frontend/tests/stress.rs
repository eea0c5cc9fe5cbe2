//! The checksummed stress test: worker threads write and read random 4 KiB pages and
//! 64 KiB runs of a region several times the budget, while pager threads force evictions
//! (`pageout`) and a sampler reads VmRSS. Every page read is compared with the last version
//! its owner wrote (a page's content is a function of its index and version); at the end
//! there must be zero mismatches, and VmRSS must have stayed within the budget + 10%
//! throughout.
//!
//! Two sizes:
//! - CI (`stress_short`, both delivery modes): 128 MiB region, 32 MiB budget, 3 s. The bound
//!   is on VmRSS *growth* over the process's baseline before the region was mapped: at
//!   32 MiB the test binary's own few MiB would swamp a bound on the absolute figure.
//! - The (`stress_long`, ignored by default): 1 GiB region, 256 MiB budget, 60 s,
//!   bound on the *absolute* VmRSS. Run it with
//!   `cargo test -p frontend --release --test stress -- --ignored --nocapture`; the knobs
//!   `USWAP_STRESS_SECS`, `USWAP_STRESS_REGION_MIB`, `USWAP_STRESS_BUDGET_MIB`,
//!   `USWAP_STRESS_ORDER` and `USWAP_STRESS_SIGBUS=1` change it (docs/TESTING.md).
//!
//! Ownership: the region is cut into 64 KiB chunks, chunk `c` belongs to worker `c % 4`; a
//! worker only writes its own chunks, so the last version of every page is known to exactly
//! one thread. Pagers and the reclaimer touch every page, through the engine.

mod common;

use common::{fill_page, swap_or_skip};
use frontend::{Delivery, Uswap, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uffd::MemStatus;

const WORKERS: usize = 4;
const PAGERS: usize = 2;
const RUN_PAGES: usize = 16; // 64 KiB

#[derive(Debug, Clone, Copy)]
struct Plan {
    region_bytes: usize,
    budget_bytes: u64,
    duration: Duration,
    folio_order: u32,
    delivery: Delivery,
    /// Bound the absolute VmRSS (true) or its growth over the baseline (false).
    absolute_rss: bool,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What the run measured.
#[derive(Debug, Default)]
struct Outcome {
    ops: u64,
    pages_checked: u64,
    mismatches: u64,
    first_mismatch: Option<(usize, u64)>,
    rss_samples: u64,
    rss_max_bytes: u64,
    baseline_bytes: u64,
    /// At the VmRSS maximum: what the engine charged, what the heap held, in use and free.
    at_max: Breakdown,
}

/// Where the resident memory was at one sample.
#[derive(Debug, Default, Clone, Copy)]
struct Breakdown {
    rss_anon_bytes: u64,
    charged_bytes: u64,
    pool_bytes: u64,
    heap_in_use_bytes: u64,
    heap_free_bytes: u64,
}

fn breakdown(swap: &Uswap, status: &MemStatus) -> Breakdown {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let heap = unsafe { libc::mallinfo2() };
    let gauges = swap.stats().unwrap().engine.gauges;
    Breakdown {
        rss_anon_bytes: status.rss_anon_bytes,
        charged_bytes: gauges.used_bytes,
        pool_bytes: gauges.pool_bytes,
        heap_in_use_bytes: (heap.uordblks + heap.hblkhd) as u64,
        heap_free_bytes: heap.fordblks as u64,
    }
}

/// One worker: random pages and runs of its own chunks, writes and checked reads.
fn worker(base: usize, pages: usize, me: usize, seed: u64, stop: &AtomicBool) -> Outcome {
    let chunks: Vec<usize> = (0..pages / RUN_PAGES).filter(|c| c % WORKERS == me).collect();
    let mut version = vec![0u32; pages]; // 0: never written, reads as zeros
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut buf = vec![0u8; PAGE_SIZE];
    let mut outcome = Outcome::default();
    while !stop.load(Relaxed) {
        let r = next();
        let chunk = chunks[(r as usize >> 8) % chunks.len()];
        let first = chunk * RUN_PAGES;
        let (first, count) = if r & 1 == 0 {
            (first + (r as usize >> 4) % RUN_PAGES, 1)
        } else {
            (first, RUN_PAGES)
        };
        let write = r & 2 == 0;
        outcome.ops += 1;
        for (page, version) in version.iter_mut().enumerate().skip(first).take(count) {
            // SAFETY: a page of the live region owned by this worker alone (chunk
            // ownership); other threads never form references into it.
            let bytes = unsafe {
                std::slice::from_raw_parts_mut((base + page * PAGE_SIZE) as *mut u8, PAGE_SIZE)
            };
            if write {
                let v = (outcome.ops as u32).max(1);
                fill_page(&mut buf, page as u64, u64::from(v));
                bytes.copy_from_slice(&buf);
                *version = v;
            } else {
                fill_page(&mut buf, page as u64, u64::from(*version));
                outcome.pages_checked += 1;
                if bytes != buf.as_slice() {
                    outcome.mismatches += 1;
                    outcome.first_mismatch.get_or_insert((page, u64::from(*version)));
                }
            }
        }
    }
    outcome
}

/// VmRSS is the whole process's: one run at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn run(plan: Plan) {
    let _serial = serial();
    let builder = Uswap::builder()
        .budget_bytes(plan.budget_bytes)
        .swap_size_bytes(plan.region_bytes as u64 * 2)
        .folio_order(plan.folio_order)
        .delivery(plan.delivery);
    let Some(swap) = swap_or_skip(builder) else { return };
    let baseline = MemStatus::read().unwrap().rss_bytes;
    let region = swap.map(plan.region_bytes).unwrap();
    let (base, pages) = (region.addr(), region.len() / PAGE_SIZE);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|me| {
            let stop = stop.clone();
            std::thread::spawn(move || worker(base, pages, me, 0x5eed + me as u64 * 7919, &stop))
        })
        .collect();
    let paged = Arc::new(AtomicU64::new(0));
    let pagers: Vec<_> = (0..PAGERS)
        .map(|p| {
            let (stop, swap, paged) = (stop.clone(), swap.clone(), paged.clone());
            std::thread::spawn(move || {
                let window = 1 << 20;
                let mut x = 0x9a9e + p as u64;
                while !stop.load(Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let at = (x >> 20) as usize % (pages * PAGE_SIZE / window) * window;
                    paged.fetch_add(swap.pageout(base + at, window).unwrap(), Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        })
        .collect();
    let mut outcome = Outcome { baseline_bytes: baseline, ..Outcome::default() };
    let started = Instant::now();
    while started.elapsed() < plan.duration {
        let status = MemStatus::read().unwrap();
        if status.rss_bytes > outcome.rss_max_bytes {
            outcome.rss_max_bytes = status.rss_bytes;
            outcome.at_max = breakdown(&swap, &status);
        }
        outcome.rss_samples += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Relaxed);
    for w in workers {
        let o = w.join().expect("worker");
        outcome.ops += o.ops;
        outcome.pages_checked += o.pages_checked;
        outcome.mismatches += o.mismatches;
        outcome.first_mismatch = outcome.first_mismatch.or(o.first_mismatch);
    }
    for p in pagers {
        p.join().expect("pager");
    }
    report(&plan, &outcome, &swap, paged.load(Relaxed), started.elapsed());
    drop(region);
    swap.check_invariants().unwrap();
}

fn report(plan: &Plan, o: &Outcome, swap: &Uswap, paged: u64, took: Duration) {
    let stats = swap.stats().unwrap();
    let c = &stats.engine.counters;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let bound = plan.budget_bytes + plan.budget_bytes / 10;
    let measured =
        if plan.absolute_rss { o.rss_max_bytes } else { o.rss_max_bytes - o.baseline_bytes };
    eprintln!(
        "stress ({}, order {}): {} MiB region, {} MiB budget, {:.1?}: {} ops, {} pages checked, \
         {} mismatches; VmRSS max {:.1} MiB (baseline {:.1} MiB, {} samples), bound {:.1} MiB \
         on the {}; {} pages paged out by the pagers, pgfault {}, pgmajfault {}, pswpout {}, \
         pswpin {}, zswpout {}, zswpin {}, zswpwb {}, swpout_zero {}, used_bytes_peak {:.1} MiB, \
         take_busy {}, map_present {}; at the VmRSS maximum: RssAnon {:.1} MiB, charged \
         {:.1} MiB (pool {:.1} MiB), heap in use {:.1} MiB, heap free but resident <= {:.1} MiB; \
         {} heap trims, {:.1} us each",
        plan.delivery.name(),
        plan.folio_order,
        plan.region_bytes >> 20,
        plan.budget_bytes >> 20,
        took,
        o.ops,
        o.pages_checked,
        o.mismatches,
        mib(o.rss_max_bytes),
        mib(o.baseline_bytes),
        o.rss_samples,
        mib(bound),
        if plan.absolute_rss { "absolute VmRSS" } else { "growth over the baseline" },
        paged,
        c.pgfault,
        c.pgmajfault,
        c.pswpout,
        c.pswpin,
        c.zswpout,
        c.zswpin,
        c.zswpwb,
        c.swpout_zero,
        mib(stats.engine.gauges.used_bytes_peak),
        stats.source.take_busy,
        stats.source.map_present_pages,
        mib(o.at_max.rss_anon_bytes),
        mib(o.at_max.charged_bytes),
        mib(o.at_max.pool_bytes),
        mib(o.at_max.heap_in_use_bytes),
        mib(o.at_max.heap_free_bytes),
        stats.handler.trims,
        stats.handler.trim_ns as f64 / 1e3 / stats.handler.trims.max(1) as f64,
    );
    assert_eq!(o.mismatches, 0, "first mismatch (page, version): {:?}", o.first_mismatch);
    assert!(o.pages_checked > 0 && paged > 0 && c.pgmajfault > 0, "the run exercised swap");
    assert!(
        measured <= bound,
        "VmRSS {:.1} MiB over the bound {:.1} MiB",
        mib(measured),
        mib(bound)
    );
}

/// CI's size. At a 16 MiB budget the bound failed by 0.2-0.4 MiB with 64 KiB folios: about
/// 1.3 MiB of heap the engine does not charge (its page tables, LRU, swap-cache shadows, the
/// pool's index for a 64 MiB region) plus thread stacks is more than 10% of 16 MiB
/// (docs/TESTING.md). At 32 MiB the same overheads fit; the bound itself is unchanged.
fn short(delivery: Delivery) -> Plan {
    Plan {
        region_bytes: 128 << 20,
        budget_bytes: 32 << 20,
        duration: Duration::from_secs(3),
        folio_order: 0,
        delivery,
        absolute_rss: false,
    }
}

#[test]
fn stress_short_handler() {
    run(short(Delivery::Handler));
}

#[test]
fn stress_short_sigbus() {
    run(short(Delivery::Sigbus));
}

#[test]
fn stress_short_large_folios() {
    run(Plan { folio_order: 4, ..short(Delivery::Handler) });
}

/// The run: 1 GiB, 256 MiB budget, 60 s, absolute VmRSS bound (module essay).
#[test]
#[ignore = "long: 60 s and a 1 GiB region; run with --ignored (docs/TESTING.md)"]
fn stress_long() {
    let delivery =
        if env_u64("USWAP_STRESS_SIGBUS", 0) == 1 { Delivery::Sigbus } else { Delivery::Handler };
    run(Plan {
        region_bytes: env_u64("USWAP_STRESS_REGION_MIB", 1024) as usize * (1 << 20),
        budget_bytes: env_u64("USWAP_STRESS_BUDGET_MIB", 256) << 20,
        duration: Duration::from_secs(env_u64("USWAP_STRESS_SECS", 60)),
        folio_order: env_u64("USWAP_STRESS_ORDER", 0) as u32,
        delivery,
        absolute_rss: true,
    });
}
