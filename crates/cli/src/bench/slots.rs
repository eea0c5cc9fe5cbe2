//! `uswap bench slots`: the swap device layer's allocator and backends.
//!
//! Three parts, all on the real code paths of crates `slots` and `backend`:
//!
//! 1. **Throughput**: order-0 and order-4 allocate+free pairs per second, on one thread and
//!    on two threads sharing one device. A thread allocates a batch of 32 folios, then frees
//!    them (`put_cache`: a folio that left the swap cache), as reclaim does in batches. One
//!    "operation" is one allocation *and* its free.
//! 2. **Fragmentation**: a seeded random mix of orders with random lifetimes keeps the
//!    device between 80% and 95% full; an order > 0 that fails is split into order-0
//!    allocations (as the kernel's swap-out does). The same seed runs on the current (6.18)
//!    and the legacy policy; per-order allocations (`swpout`) and fallbacks
//!    (`swpout_fallback`) are reported side by side. Two things make it the kernel's
//!    situation rather than one thread's: each allocation runs as one of 16 CPUs
//!    (`slots::as_cpu`, each with its own cluster hints: many CPUs strand partly used
//!    clusters, one never does), and a tenth of the large folios die slot by slot (swapped
//!    in as small folios, partly unmapped), leaving unaligned holes. Without either, both
//!    policies found every order-4 window (0 fallbacks each: a vacuous comparison).
//! 3. **File I/O**: the file backend (`pwrite` / `pread`) written then read in 4 KiB and
//!    64 KiB requests (MB/s). `O_DIRECT` and io_uring batches were measured here against
//!    it and removed (docs/benchmarks.md).
//!
//! JSON fields: `order0_alloc_free_per_s` (one thread), `order0_alloc_free_per_s_2t`,
//! `order4_alloc_free_per_s`, `order4_alloc_free_per_s_2t`, `fallback_rate_order4_current`,
//! `fallback_rate_order4_legacy`, `fallback_rate_orders1to9_{current,legacy}` and
//! `file_{write,read}_mb_s_{4k,64k}`.

use super::CommonOpts;
use crate::report::{Report, Target};
use backend::{Backend, FileBackend, FileOptions, MemoryBackend, PAGE_SIZE};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slots::{AllocPolicy, SwapDevice, SwapDeviceOptions, SwapEntry, SwapType, SWAPFILE_CLUSTER};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Folios allocated before they are freed again, per thread.
const BATCH: usize = 32;
/// Orders of the fragmentation mix and their weights per mille of folios: mostly 4 KiB
/// pages and 64 KiB mTHP (the kernel-build setup of the 6.18 scan-strategy series), some
/// 8..32 KiB, a few 2 MiB. By slots, order 4 is about two thirds of the traffic.
/// The CPUs the fragmentation run plays (`slots::as_cpu`): each allocation runs as a random
/// one of them, with that CPU's cluster hints, as swap-out on a 16-CPU machine does.
const FRAG_CPUS: usize = 16;

/// The share of large folios whose slots die one by one ([`Death::Piecewise`]).
const PIECEWISE: f64 = 0.1;

const MIX: [(u32, u32); 6] = [(0, 700), (1, 30), (2, 40), (3, 20), (4, 208), (9, 2)];

struct Sizes {
    pairs: u64,
    frag_clusters: u64,
    frag_steps: u64,
    io_bytes: usize,
    repeats: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                pairs: 2_000_000,
                frag_clusters: 32,
                frag_steps: 60_000,
                io_bytes: 8 << 20,
                repeats: 1,
            }
        } else {
            Sizes {
                pairs: 8_000_000,
                frag_clusters: 1024,
                frag_steps: 6_000_000,
                io_bytes: 256 << 20,
                repeats: 5,
            }
        }
    }
}

/// Runs the benchmark.
///
/// # Errors
/// Device or backend setup failures, and I/O errors of the file part.
pub fn run(opts: &CommonOpts) -> anyhow::Result<Report> {
    let sizes = Sizes::new(opts.quick);
    let mut report = Report::new("slots");
    throughput(&mut report, &sizes)?;
    fragmentation(&mut report, opts.quick)?;
    file_io(&mut report, &sizes)?;
    report.note(format!(
        "throughput: best of {} runs; one operation = one allocation and its free, \
         batches of {BATCH}",
        sizes.repeats
    ));
    Ok(report)
}

fn device(clusters: u64, policy: AllocPolicy) -> anyhow::Result<Arc<SwapDevice>> {
    let backend = Arc::new(MemoryBackend::new(clusters * SWAPFILE_CLUSTER as u64));
    let options = SwapDeviceOptions { policy, discard: false };
    let ty = SwapType::new(0).ok_or_else(|| anyhow::anyhow!("type 0"))?;
    Ok(Arc::new(SwapDevice::new(ty, backend, options, None)?))
}

/// `pairs` allocate+free pairs of `order` on one thread, in batches.
fn alloc_free_loop(si: &SwapDevice, order: u32, pairs: u64) -> anyhow::Result<()> {
    let nr = 1u32 << order;
    let mut batch: Vec<SwapEntry> = Vec::with_capacity(BATCH);
    for _ in 0..pairs.div_ceil(BATCH as u64) {
        for _ in 0..BATCH {
            batch.push(si.alloc(order)?);
        }
        for entry in batch.drain(..) {
            si.put_cache(entry, nr)?;
        }
    }
    Ok(())
}

/// Pairs per second with `threads` threads sharing one device (best of `repeats`).
fn pairs_per_s(order: u32, threads: u64, sizes: &Sizes) -> anyhow::Result<f64> {
    let mut best = Duration::MAX;
    let per_thread = sizes.pairs / threads;
    for _ in 0..sizes.repeats {
        let si = device(64, AllocPolicy::Current)?;
        let barrier = Barrier::new(threads as usize);
        let elapsed = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let start = Instant::now();
                        alloc_free_loop(&si, order, per_thread).map(|()| start.elapsed())
                    })
                })
                .collect();
            let mut slowest = Duration::ZERO;
            for handle in handles {
                let took =
                    handle.join().map_err(|_| anyhow::anyhow!("bench thread panicked"))??;
                slowest = slowest.max(took);
            }
            anyhow::Ok(slowest)
        })?;
        si.check_invariants();
        best = best.min(elapsed);
    }
    let done = (per_thread.div_ceil(BATCH as u64) * BATCH as u64 * threads) as f64;
    Ok(done / best.as_secs_f64())
}

fn throughput(report: &mut Report, sizes: &Sizes) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for order in [0u32, 4] {
        let one = pairs_per_s(order, 1, sizes)?;
        let two = pairs_per_s(order, 2, sizes)?;
        rows.push((order, one, two));
        if order == 0 {
            report.judged("order0_alloc_free_per_s", one.round(), Target::AtLeast(10e6));
            report.field("order0_alloc_free_per_s_2t", two.round());
        } else {
            report.field("order4_alloc_free_per_s", one.round());
            report.field("order4_alloc_free_per_s_2t", two.round());
        }
    }
    let table = report.table(
        "Allocate+free throughput (Mops/s, 64-cluster device, memory backend)",
        &["order", "1 thread", "2 threads"],
    );
    for (order, one, two) in rows {
        table.row([order.to_string(), format!("{:.2}", one / 1e6), format!("{:.2}", two / 1e6)]);
    }
    Ok(())
}

/// A live folio of the fragmentation run: when it dies, where, how many slots. Ordered
/// by death time (then place), for the min-heap of live folios.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Live {
    expires: u64,
    entry: SwapEntry,
    nr: u32,
}

/// Per-order allocations and fallbacks of one policy's run.
struct FragResult {
    swpout: [u64; 10],
    fallback: [u64; 10],
    fill_min: f64,
    fill_max: f64,
}

impl FragResult {
    fn fallback_rate(&self, order: usize) -> f64 {
        rate(self.fallback[order], self.swpout[order] + self.fallback[order])
    }

    /// Fallbacks over attempts, all orders above 0 together.
    fn fallback_rate_large(&self) -> f64 {
        let fallback: u64 = self.fallback[1..].iter().sum();
        rate(fallback, fallback + self.swpout[1..].iter().sum::<u64>())
    }
}

fn rate(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn pick_order(rng: &mut SmallRng) -> u32 {
    let mut roll = rng.gen_range(0..1000);
    for (order, weight) in MIX {
        if roll < weight {
            return order;
        }
        roll -= weight;
    }
    0
}

/// When a folio's slots die.
#[derive(Clone, Copy)]
enum Death {
    /// All at `expires`: the folio is swapped in or freed whole.
    Whole,
    /// Each slot at its own time in `now..expires`: the folio's pages are swapped in or
    /// unmapped one by one (a large folio swapped in as small ones, a partial munmap).
    Piecewise { now: u64 },
}

/// Allocates one folio of `order` (split into order 0 on failure, as swap-out does).
fn allocate(
    si: &SwapDevice,
    order: u32,
    (expires, death): (u64, Death),
    rng: &mut SmallRng,
    live: &mut BinaryHeap<Reverse<Live>>,
) -> bool {
    match si.alloc(order) {
        Ok(entry) => match death {
            Death::Whole => live.push(Reverse(Live { entry, nr: 1 << order, expires })),
            Death::Piecewise { now } => {
                for page in 0..1u64 << order {
                    let entry = SwapEntry::new(entry.swap_type(), entry.offset() + page);
                    let expires = rng.gen_range(now + 1..=expires);
                    live.push(Reverse(Live { entry, nr: 1, expires }));
                }
            }
        },
        Err(_) if order > 0 => {
            for _ in 0..1u32 << order {
                match si.alloc(0) {
                    Ok(entry) => live.push(Reverse(Live { entry, nr: 1, expires })),
                    Err(_) => return false,
                }
            }
        }
        Err(_) => return false,
    }
    true
}

fn frag_run(policy: AllocPolicy, sizes: &Sizes, seed: u64) -> anyhow::Result<FragResult> {
    let si = device(sizes.frag_clusters, policy)?;
    let total = si.total_slots() as f64;
    let (low, high) = ((0.80 * total) as u64, (0.95 * total) as u64);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut live: BinaryHeap<Reverse<Live>> = BinaryHeap::new();
    let (mut fill_min, mut fill_max) = (f64::MAX, 0f64);
    // Hysteresis: allocate until the device is 95% full, then let folios die until it
    // is back under 80%, and so on.
    let mut allocating = true;
    let slots_per_step: f64 = MIX.iter().map(|&(o, w)| f64::from(w << o) / 1000.0).sum();
    let long_life = (1.2 / 0.185 * total / slots_per_step) as u64;
    for now in 0..sizes.frag_steps {
        // Random lifetimes: 70% short-lived, 30% long-lived, scaled so that, left alone,
        // the traffic would fill 120% of the device (mean lifetime 0.185 * long_life
        // steps): the hysteresis then holds the fill in the 80..95% band.
        let span = if rng.gen_bool(0.7) { long_life / 10 } else { long_life };
        let life = now + rng.gen_range(1..span);
        let order = pick_order(&mut rng);
        let cpu = rng.gen_range(0..FRAG_CPUS);
        let death = if order > 0 && rng.gen_bool(PIECEWISE) {
            Death::Piecewise { now }
        } else {
            Death::Whole
        };
        let fate = (life, death);
        if allocating && !slots::as_cpu(cpu, || allocate(&si, order, fate, &mut rng, &mut live)) {
            allocating = false; // even order 0 failed: the device is full
        }
        while live.peek().is_some_and(|Reverse(l)| l.expires <= now) {
            if let Some(Reverse(dead)) = live.pop() {
                si.put_cache(dead.entry, dead.nr)?;
            }
        }
        let inuse = si.inuse_pages();
        if inuse >= high {
            allocating = false;
        } else if inuse < low {
            allocating = true;
        }
        if now > sizes.frag_steps / 10 {
            let fill = inuse as f64 / total;
            fill_min = fill_min.min(fill);
            fill_max = fill_max.max(fill);
        }
    }
    si.check_invariants();
    let stats = si.stats();
    Ok(FragResult {
        swpout: std::array::from_fn(|o| stats.swpout(o as u32)),
        fallback: std::array::from_fn(|o| stats.swpout_fallback(o as u32)),
        fill_min,
        fill_max,
    })
}

/// The fragmentation run and its per-order table (also `uswap bench seed-002`).
pub(super) fn fragmentation(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let sizes = &Sizes::new(quick);
    let seed = 0x5107_2025;
    let current = frag_run(AllocPolicy::Current, sizes, seed)?;
    let legacy = frag_run(AllocPolicy::Legacy, sizes, seed)?;
    let title = format!(
        "Fragmentation run ({} clusters, {} steps, seed {seed:#x}): swpout / swpout_fallback",
        sizes.frag_clusters, sizes.frag_steps
    );
    let table = report.table(
        &title,
        &["order", "current swpout", "current fallback", "legacy swpout", "legacy fallback"],
    );
    for (order, _) in MIX {
        let o = order as usize;
        table.row([
            order.to_string(),
            current.swpout[o].to_string(),
            current.fallback[o].to_string(),
            legacy.swpout[o].to_string(),
            legacy.fallback[o].to_string(),
        ]);
    }
    let (cur, leg) = (current.fallback_rate(4), legacy.fallback_rate(4));
    report.field("fallback_rate_order4_legacy", leg);
    report.judged("fallback_rate_order4_current", cur, Target::AtMost(leg / 2.0));
    report.field("fallback_rate_order9_current", current.fallback_rate(9));
    report.field("fallback_rate_order9_legacy", legacy.fallback_rate(9));
    let (cur_all, leg_all) = (current.fallback_rate_large(), legacy.fallback_rate_large());
    report.field("fallback_rate_orders1to9_current", cur_all);
    report.field("fallback_rate_orders1to9_legacy", leg_all);
    if leg == 0.0 {
        report.note(format!(
            "the order-4 target is vacuous in this run: the legacy policy had no order-4 \
             fallback to halve. All orders > 0 together: fallback rate {cur_all:.4} \
             current vs {leg_all:.4} legacy"
        ));
    }
    report.note(format!(
        "fragmentation: device fill kept between {:.0}% and {:.0}% (current), {:.0}% and \
         {:.0}% (legacy); order-4 fallback rate {:.4} current vs {:.4} legacy",
        current.fill_min * 100.0,
        current.fill_max * 100.0,
        legacy.fill_min * 100.0,
        legacy.fill_max * 100.0,
        cur,
        leg
    ));
    Ok(())
}

/// MB/s writing then reading `bytes` through `file` in requests of `chunk` bytes.
fn io_pass(file: &FileBackend, chunk: usize, bytes: usize) -> anyhow::Result<(f64, f64)> {
    let data: Vec<u8> = (0..chunk).map(|i| (i * 131 % 251) as u8 | 1).collect();
    let mut buf = vec![0u8; chunk];
    let pages = (chunk / PAGE_SIZE) as u64;
    let count = (bytes / chunk) as u64;
    let start = Instant::now();
    for i in 0..count {
        file.write(1 + i * pages, &data)?;
    }
    let write = start.elapsed();
    let start = Instant::now();
    for i in 0..count {
        file.read(1 + i * pages, &mut buf)?;
    }
    let read = start.elapsed();
    anyhow::ensure!(buf == data, "read back differs");
    let mb = bytes as f64 / 1e6;
    Ok((mb / write.as_secs_f64(), mb / read.as_secs_f64()))
}

fn file_io(report: &mut Report, sizes: &Sizes) -> anyhow::Result<()> {
    let dir = std::env::var_os("USWAP_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let size = (sizes.io_bytes + 2 * PAGE_SIZE) as u64;
    let mut rows = Vec::new();
    for (label, chunk) in [("4k", PAGE_SIZE), ("64k", 16 * PAGE_SIZE)] {
        let file = FileBackend::create(&dir, size, FileOptions::default())?;
        let (write, read) = io_pass(&file, chunk, sizes.io_bytes)?;
        report.field(&format!("file_write_mb_s_{label}"), write.round());
        report.field(&format!("file_read_mb_s_{label}"), read.round());
        rows.push((label, write, read));
    }
    let title = format!(
        "File backend, {} MiB written then read, one thread (MB/s) in {}",
        sizes.io_bytes >> 20,
        dir.display()
    );
    let table = report.table(&title, &["request", "write", "read"]);
    for (label, write, read) in rows {
        table.row([label.to_string(), format!("{write:.0}"), format!("{read:.0}")]);
    }
    Ok(())
}
