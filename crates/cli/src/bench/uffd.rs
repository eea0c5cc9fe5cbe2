//! `uswap bench uffd`: what a userfaultfd page fault and an eviction cost on this machine,
//! for each way of delivering and resolving them. The frontend's default fault-delivery
//! mode and eviction method are chosen from these figures (docs/UFFD.md).
//!
//! Fault round trip = the latency of the faulting access itself, timed around one load or
//! store by the faulting thread, recorded in an HDR histogram:
//!
//! ```text
//!   (a) poll     handler thread blocked in poll(); resolves with ZEROPAGE / COPY 4 KiB /
//!                COPY 64 KiB (16 pages per fault) / MOVE 4 KiB from pre-filled staging
//!   (b) spin     the same thread, but after each batch it keeps calling non-blocking
//!                read() for a bounded spin budget before going back to poll()
//!   (c) sigbus   UFFD_FEATURE_SIGBUS: the faulting thread's own SIGBUS handler COPYs
//!   (d) kernel   no uffd: the kernel's own first-touch anonymous fault (the yardstick)
//! ```
//!
//! Two more poll/COPY rows pin the threads, to separate the two kinds of wake-up: both on
//! CPU 0 (`poll_samecpu`: a context switch) and on CPUs 0 and 1 (`poll_xcpu`: an
//! inter-processor interrupt, a VM exit when the handler's vCPU is halted).
//!
//! Eviction primitives, per page, one page per call and 16 pages per call:
//! MOVE out to staging (atomic; the page becomes a hole) versus write-protect + copy out +
//! MADV_DONTNEED, the latter also with EVENT_REMOVE enabled, where every MADV_DONTNEED waits
//! for the handler to read its REMOVE event (what an engine that must see the program's own
//! madvise pays). Also the service ioctls alone (no faulting thread): COPY, ZEROPAGE,
//! MOVE in.
//!
//! JSON fields (ns): `handler_poll_copy_p50_ns`, `handler_spin_copy_p50_ns`,
//! `sigbus_copy_p50_ns`, `kernel_anon_fault_p50_ns`, `move_out_ns_per_page`,
//! `wp_copy_drop_ns_per_page`, and the rest of the table under similar names.

use crate::report::{format_figure, Report};
use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use uffd::{
    Advice, CopyMode, Error, Event, Features, Mapping, MoveMode, Range, RegisterMode,
    SigbusResolver, SlotIndex, SlotRun, Staging, Uffd, Wake, PAGE_SIZE,
};

/// Pages per COPY in the 64 KiB variant and per call in the batched evictions.
const BATCH_PAGES: usize = 16;
/// Faults left out of each histogram while caches and the handler warm up.
const WARMUP_FAULTS: usize = 64;

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
struct Config {
    /// Faults (pages touched) per fault-delivery variant.
    faults: usize,
    /// Pages per eviction measurement.
    evict_pages: usize,
    /// How long the spinning handler keeps reading after a batch before it polls again.
    spin_budget: Duration,
}

impl Config {
    fn new(quick: bool) -> Config {
        // 20k faults of ~50 us (poll mode on a VM) = 1 s per variant; --quick: 0.1 s.
        let (faults, evict_pages) = if quick { (2_048, 2_048) } else { (20_480, 16_384) };
        Config { faults, evict_pages, spin_budget: Duration::from_micros(50) }
    }
}

/// Where the handler thread runs relative to the faulting thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Wherever the scheduler puts them.
    Free,
    /// Both pinned to CPU 0: every wake-up is a context switch on one CPU.
    SameCpu,
    /// Faulting thread on CPU 0, handler on CPU 1: every wake-up crosses CPUs (an IPI,
    /// a VM exit when the target vCPU is halted).
    OtherCpu,
}

/// Pins the calling thread to `cpu` (or does nothing for `None`); returns the previous set.
fn pin(cpu: Option<usize>) -> anyhow::Result<Option<rustix::thread::CpuSet>> {
    let Some(cpu) = cpu else { return Ok(None) };
    let before = rustix::thread::sched_getaffinity(None)?;
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(Some(before))
}

/// Undoes [`pin`].
fn unpin(before: Option<rustix::thread::CpuSet>) -> anyhow::Result<()> {
    if let Some(set) = before {
        rustix::thread::sched_setaffinity(None, &set)?;
    }
    Ok(())
}

/// How a handler resolves a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolver {
    ZeroPage,
    Copy4k,
    Copy64k,
    Move4k,
}

impl Resolver {
    fn name(self) -> &'static str {
        match self {
            Resolver::ZeroPage => "zeropage",
            Resolver::Copy4k => "copy",
            Resolver::Copy64k => "copy64k",
            Resolver::Move4k => "move",
        }
    }
}

/// One variant's latencies.
struct Latency {
    hist: Histogram<u64>,
    total: Duration,
    pages: usize,
}

impl Latency {
    fn new() -> anyhow::Result<Latency> {
        let hist = Histogram::new_with_bounds(1, 60_000_000_000, 3).context("histogram bounds")?;
        Ok(Latency { hist, total: Duration::ZERO, pages: 0 })
    }

    fn p(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64
    }

    fn ns_per_page(&self) -> f64 {
        self.total.as_nanos() as f64 / self.pages.max(1) as f64
    }
}

/// Runs the benchmark.
///
/// # Errors
/// userfaultfd unavailable (the probe's message says why), or any syscall failing.
pub fn run(quick: bool) -> anyhow::Result<Report> {
    let probe = uffd::probe().context("probing userfaultfd")?;
    probe.require(Features::MOVE | Features::SIGBUS | Features::EVENT_REMOVE)?;
    let config = Config::new(quick);
    let mut report = Report::new("uffd");
    report.field("faults", config.faults as u64);
    report.field("spin_budget_ns", config.spin_budget.as_nanos() as u64);
    report.field("kernel_faults", probe.kernel_faults);
    // Cross-thread wake-ups cost far more when the other vCPU is idle (halted) than when it
    // is busy: the machine's load is part of every figure here.
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load_1m: f64 = load.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(-1.0);
    report.field("loadavg_1m_at_start", load_1m);

    let mut rows: Vec<(String, String, Latency)> = Vec::new();
    for resolver in [Resolver::ZeroPage, Resolver::Copy4k, Resolver::Copy64k, Resolver::Move4k] {
        let lat = handler_round_trip(&config, resolver, None, Placement::Free)?;
        rows.push(("poll".into(), resolver.name().into(), lat));
    }
    for resolver in [Resolver::Copy4k, Resolver::Move4k] {
        let spin = Some(config.spin_budget);
        let lat = handler_round_trip(&config, resolver, spin, Placement::Free)?;
        rows.push(("spin".into(), resolver.name().into(), lat));
    }
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if cpus >= 2 {
        let placements = [("poll_samecpu", Placement::SameCpu), ("poll_xcpu", Placement::OtherCpu)];
        for (name, placement) in placements {
            let lat = handler_round_trip(&config, Resolver::Copy4k, None, placement)?;
            rows.push((name.into(), "copy".into(), lat));
        }
    }
    rows.push(("sigbus".into(), "copy".into(), sigbus_round_trip(&config)?));
    rows.push(("kernel".into(), "anon_write".into(), kernel_first_touch(&config, true)?));
    rows.push(("kernel".into(), "anon_read".into(), kernel_first_touch(&config, false)?));
    fault_table(&mut report, &rows);

    let evictions = eviction_costs(&config)?;
    eviction_table(&mut report, &evictions);
    report.note(format!(
        "fault latency = the faulting access, timed by the faulting thread; {} faults per \
         row, first {WARMUP_FAULTS} not recorded; spin budget {} us after each batch",
        config.faults,
        config.spin_budget.as_micros()
    ));
    report.note(format!(
        "load average {load_1m} at start; a wake-up costs what the scheduler makes of it: \
         a context switch when the handler runs on the faulting thread's CPU (poll_samecpu), \
         an inter-processor interrupt when it does not (poll_xcpu); compare rows within one run"
    ));
    report.note(
        "copy64k: one UFFDIO_COPY of 16 pages per fault; its p50/p99 are the faulting \
         accesses only, ns/page spreads the whole run over every page touched",
    );
    report.note(
        "kernel-mode faults (a syscall writing into a missing page): served by a poll/spin \
         handler only with a uffd that traps them (root, CAP_SYS_PTRACE, /dev/userfaultfd or \
         vm.unprivileged_userfaultfd=1); EFAULT with UFFD_USER_MODE_ONLY and in SIGBUS mode",
    );
    Ok(report)
}

fn fault_table(report: &mut Report, rows: &[(String, String, Latency)]) {
    let table = report.table(
        "Fault round trip (faulting access latency)",
        &["delivery", "resolve", "p50 ns", "p99 ns", "ns/page"],
    );
    for (delivery, resolve, lat) in rows {
        table.row([
            delivery.clone(),
            resolve.clone(),
            format_figure(lat.p(0.5)),
            format_figure(lat.p(0.99)),
            format_figure(lat.ns_per_page()),
        ]);
    }
    for (delivery, resolve, lat) in rows {
        let key = match (delivery.as_str(), resolve.as_str()) {
            ("sigbus", _) => "sigbus_copy".to_string(),
            ("kernel", "anon_write") => "kernel_anon_fault".to_string(),
            ("kernel", "anon_read") => "kernel_anon_read_fault".to_string(),
            (d, r) => format!("handler_{d}_{r}"),
        };
        report.field(&format!("{key}_p50_ns"), lat.p(0.5));
        report.field(&format!("{key}_p99_ns"), lat.p(0.99));
        report.field(&format!("{key}_ns_per_page"), lat.ns_per_page());
    }
}

/// A region of `pages` pages registered MISSING with a fresh uffd of `features`.
fn registered_region(features: Features, pages: usize) -> anyhow::Result<(Uffd, Mapping)> {
    let uffd = Uffd::open(features)?;
    let region = Mapping::anonymous(pages * PAGE_SIZE)?;
    region.advise(0, region.len_bytes(), Advice::NoHugePage)?;
    uffd.register(region.range(), RegisterMode::MISSING)?;
    Ok((uffd, region))
}

/// Variants (a) and (b): a handler thread resolves, the calling thread faults and times.
fn handler_round_trip(
    config: &Config,
    resolver: Resolver,
    spin: Option<Duration>,
    placement: Placement,
) -> anyhow::Result<Latency> {
    let (faulter_cpu, handler_cpu) = match placement {
        Placement::Free => (None, None),
        Placement::SameCpu => (Some(0), Some(0)),
        Placement::OtherCpu => (Some(0), Some(1)),
    };
    let pages = config.faults;
    let (uffd, region) = registered_region(Features::MOVE, pages)?;
    let mut staging = if resolver == Resolver::Move4k {
        let mut staging = Staging::new(&uffd, pages)?;
        let data = vec![0x5au8; PAGE_SIZE];
        for _ in 0..pages {
            let slot = staging.alloc_page().context("staging slot")?;
            staging.store(slot, &data);
        }
        Some(staging)
    } else {
        None
    };
    let source = vec![0x5au8; BATCH_PAGES * PAGE_SIZE];
    let stop = AtomicBool::new(false);
    let mut lat = Latency::new()?;
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handler = s.spawn(|| {
            pin(handler_cpu)?;
            let mut ctx = HandlerCtx {
                uffd: &uffd,
                region: &region,
                staging: staging.as_mut(),
                source: &source,
            };
            handler_loop(&mut ctx, resolver, spin, &stop)
        });
        let pinned = pin(faulter_cpu)?;
        let started = Instant::now();
        for i in 0..pages {
            let t0 = Instant::now();
            if resolver == Resolver::ZeroPage {
                std::hint::black_box(region.load_u8(i * PAGE_SIZE));
            } else {
                region.store_u8(i * PAGE_SIZE, 1);
            }
            let dt = t0.elapsed();
            let faulting = resolver != Resolver::Copy64k || i % BATCH_PAGES == 0;
            if i >= WARMUP_FAULTS && faulting {
                lat.hist.record(dt.as_nanos() as u64).context("record")?;
            }
        }
        lat.total = started.elapsed();
        lat.pages = pages;
        unpin(pinned)?;
        stop.store(true, Ordering::Release);
        handler.join().map_err(|_| anyhow::anyhow!("handler thread panicked"))?
    })?;
    Ok(lat)
}

struct HandlerCtx<'a> {
    uffd: &'a Uffd,
    region: &'a Mapping,
    staging: Option<&'a mut Staging>,
    source: &'a [u8],
}

/// The handler thread: poll, then drain (and with `spin`, keep reading for the budget).
fn handler_loop(
    ctx: &mut HandlerCtx<'_>,
    resolver: Resolver,
    spin: Option<Duration>,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let mut batch = Vec::with_capacity(uffd::READ_BATCH);
    while !stop.load(Ordering::Acquire) {
        if !ctx.uffd.wait_readable(Some(Duration::from_millis(50)))? {
            continue;
        }
        let mut last = Instant::now();
        loop {
            let n = ctx.uffd.read_events(&mut batch, uffd::READ_BATCH)?;
            for event in batch.drain(..) {
                let Event::PageFault { addr, .. } = event else { bail!("unexpected {event:?}") };
                resolve(ctx, resolver, addr)?;
            }
            if n > 0 {
                last = Instant::now();
                continue;
            }
            match spin {
                Some(budget) if last.elapsed() < budget && !stop.load(Ordering::Relaxed) => {
                    std::hint::spin_loop();
                }
                _ => break,
            }
        }
    }
    Ok(())
}

fn resolve(ctx: &mut HandlerCtx<'_>, resolver: Resolver, addr: usize) -> anyhow::Result<()> {
    let page = addr & !(PAGE_SIZE - 1);
    let index = (page - ctx.region.addr()) / PAGE_SIZE;
    let result = match resolver {
        Resolver::ZeroPage => ctx.uffd.zeropage(Range::page_of(page), Wake::Wake),
        Resolver::Copy4k => ctx.uffd.copy(page, &ctx.source[..PAGE_SIZE], CopyMode::NONE),
        Resolver::Copy64k => {
            let first = index / BATCH_PAGES * BATCH_PAGES;
            let pages = BATCH_PAGES.min(ctx.region.len_bytes() / PAGE_SIZE - first);
            let dst = ctx.region.page_addr(first);
            ctx.uffd.copy(dst, &ctx.source[..pages * PAGE_SIZE], CopyMode::NONE)
        }
        Resolver::Move4k => {
            let staging = ctx.staging.as_deref_mut().context("move needs staging")?;
            let run = SlotRun { first: SlotIndex(index as u32), pages: 1 };
            staging.move_in(ctx.uffd, run, page, MoveMode::NONE)
        }
    };
    match result {
        Ok(_) => Ok(()),
        // Resolved already (a second message for a page of a 64 KiB block): just wake.
        Err(Error::Exists { .. }) => Ok(ctx.uffd.wake(Range::page_of(page))?),
        Err(e) => Err(e.into()),
    }
}

/// Variant (c): SIGBUS mode, COPY from a mirror in the faulting thread's handler.
fn sigbus_round_trip(config: &Config) -> anyhow::Result<Latency> {
    let pages = config.faults;
    let (uffd, region) = registered_region(Features::SIGBUS, pages)?;
    let mirror = Mapping::anonymous(pages * PAGE_SIZE)?;
    mirror.advise(0, mirror.len_bytes(), Advice::PopulateWrite)?;
    let resolver = SigbusResolver::copy_from(&uffd, region.range(), &mirror)?;
    let mut lat = Latency::new()?;
    let started = Instant::now();
    for i in 0..pages {
        let t0 = Instant::now();
        region.store_u8(i * PAGE_SIZE, 1);
        let dt = t0.elapsed();
        if i >= WARMUP_FAULTS {
            lat.hist.record(dt.as_nanos() as u64)?;
        }
    }
    lat.total = started.elapsed();
    lat.pages = pages;
    if resolver.resolved() != pages as u64 || resolver.failed() != 0 {
        bail!("SIGBUS resolver: {} resolved, {} failed", resolver.resolved(), resolver.failed());
    }
    Ok(lat)
}

/// Variant (d): the kernel's own first-touch fault on fresh anonymous memory.
fn kernel_first_touch(config: &Config, write: bool) -> anyhow::Result<Latency> {
    let pages = config.faults;
    let region = Mapping::anonymous(pages * PAGE_SIZE)?;
    region.advise(0, region.len_bytes(), Advice::NoHugePage)?;
    let mut lat = Latency::new()?;
    let started = Instant::now();
    for i in 0..pages {
        let t0 = Instant::now();
        if write {
            region.store_u8(i * PAGE_SIZE, 1);
        } else {
            std::hint::black_box(region.load_u8(i * PAGE_SIZE));
        }
        let dt = t0.elapsed();
        if i >= WARMUP_FAULTS {
            lat.hist.record(dt.as_nanos() as u64)?;
        }
    }
    lat.total = started.elapsed();
    lat.pages = pages;
    Ok(lat)
}

/// ns per page of each eviction / service primitive: (name, single page, 16 pages per call).
type Costs = Vec<(&'static str, f64, Option<f64>)>;

fn eviction_costs(config: &Config) -> anyhow::Result<Costs> {
    let pages = config.evict_pages;
    let mut costs = Costs::new();
    let (move_out, move_in, move_out16) = move_costs(pages)?;
    costs.push(("move_out", move_out, Some(move_out16)));
    let (wp, wp16) = wp_copy_drop_costs(pages, false)?;
    costs.push(("wp_copy_drop", wp, Some(wp16)));
    let (wp_remove, wp_remove16) = wp_copy_drop_costs(pages, true)?;
    costs.push(("wp_copy_drop_remove_event", wp_remove, Some(wp_remove16)));
    costs.push(("move_in", move_in, None));
    let (copy, zeropage) = service_costs(pages)?;
    costs.push(("copy", copy, None));
    costs.push(("zeropage", zeropage, None));
    Ok(costs)
}

fn eviction_table(report: &mut Report, costs: &Costs) {
    let table = report.table(
        "Eviction and service primitives (ns per page, no faulting thread)",
        &["primitive", "1 page/call", "16 pages/call"],
    );
    for (name, single, batch) in costs {
        let batch_cell = batch.map_or_else(|| "-".to_string(), format_figure);
        table.row([name.to_string(), format_figure(*single), batch_cell]);
    }
    for (name, single, batch) in costs {
        report.field(&format!("{name}_ns_per_page"), *single);
        if let Some(b) = batch {
            report.field(&format!("{name}_batch16_ns_per_page"), *b);
        }
    }
}

/// A populated region of `pages` (written before registration, so no fault is taken).
fn populated_region(uffd: &Uffd, pages: usize, mode: RegisterMode) -> anyhow::Result<Mapping> {
    let region = Mapping::anonymous(pages * PAGE_SIZE)?;
    region.advise(0, region.len_bytes(), Advice::NoHugePage)?;
    region.advise(0, region.len_bytes(), Advice::PopulateWrite)?;
    uffd.register(region.range(), mode)?;
    Ok(region)
}

fn per_page(elapsed: Duration, pages: usize) -> f64 {
    elapsed.as_nanos() as f64 / pages.max(1) as f64
}

/// MOVE out one page per call, MOVE back in one page per call, MOVE out 16 per call.
fn move_costs(pages: usize) -> anyhow::Result<(f64, f64, f64)> {
    let pages = pages / BATCH_PAGES * BATCH_PAGES;
    let uffd = Uffd::open(Features::MOVE)?;
    let region = populated_region(&uffd, pages, RegisterMode::MISSING)?;
    let mut staging = Staging::new(&uffd, pages)?;
    let runs: Vec<SlotRun> =
        (0..pages).map(|_| staging.alloc_empty(1).context("slot")).collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    for (i, run) in runs.iter().enumerate() {
        staging.move_out(&uffd, &region, i * PAGE_SIZE, *run, MoveMode::DONTWAKE)?;
    }
    let out = per_page(t0.elapsed(), pages);
    let t0 = Instant::now();
    for (i, run) in runs.iter().enumerate() {
        staging.move_in(&uffd, *run, region.page_addr(i), MoveMode::DONTWAKE)?;
    }
    let back_in = per_page(t0.elapsed(), pages);
    runs.into_iter().for_each(|run| staging.free(run));
    let runs: Vec<SlotRun> = (0..pages / BATCH_PAGES)
        .map(|_| staging.alloc_empty(BATCH_PAGES).context("run"))
        .collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    for (i, run) in runs.iter().enumerate() {
        let offset = i * BATCH_PAGES * PAGE_SIZE;
        staging.move_out(&uffd, &region, offset, *run, MoveMode::DONTWAKE)?;
    }
    let out16 = per_page(t0.elapsed(), pages);
    staging.check_invariants();
    Ok((out, back_in, out16))
}

/// Write-protect, copy out, MADV_DONTNEED: one page per call, then 16. With
/// `remove_event`, the uffd has EVENT_REMOVE and a reader thread takes each REMOVE.
fn wp_copy_drop_costs(pages: usize, remove_event: bool) -> anyhow::Result<(f64, f64)> {
    let pages = pages / BATCH_PAGES * BATCH_PAGES;
    let features = if remove_event {
        Features::PAGEFAULT_FLAG_WP | Features::EVENT_REMOVE
    } else {
        Features::PAGEFAULT_FLAG_WP
    };
    let uffd = Uffd::open(features)?;
    let region = populated_region(&uffd, pages, RegisterMode::MISSING | RegisterMode::WP)?;
    let refill = vec![0x5au8; pages * PAGE_SIZE];
    let mut copy = vec![0u8; BATCH_PAGES * PAGE_SIZE];
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> anyhow::Result<(f64, f64)> {
        let reader = remove_event.then(|| s.spawn(|| drain_events(&uffd, &stop)));
        let mut evict = |first: usize, n: usize| -> anyhow::Result<()> {
            let range = region.sub(first * PAGE_SIZE, n * PAGE_SIZE)?;
            uffd.writeprotect(range, true, Wake::Wake)?;
            region.load(first * PAGE_SIZE, &mut copy[..n * PAGE_SIZE]);
            region.advise(first * PAGE_SIZE, n * PAGE_SIZE, Advice::DontNeed)?;
            Ok(())
        };
        let t0 = Instant::now();
        for i in 0..pages {
            evict(i, 1)?;
        }
        let single = per_page(t0.elapsed(), pages);
        uffd.copy(region.addr(), &refill, CopyMode::DONTWAKE)?;
        let t0 = Instant::now();
        for block in 0..pages / BATCH_PAGES {
            evict(block * BATCH_PAGES, BATCH_PAGES)?;
        }
        let batch = per_page(t0.elapsed(), pages);
        stop.store(true, Ordering::Release);
        if let Some(reader) = reader {
            reader.join().map_err(|_| anyhow::anyhow!("reader panicked"))??;
        }
        Ok((single, batch))
    })
}

/// Reads (and drops) events until stopped: the REMOVE events of our own MADV_DONTNEED.
fn drain_events(uffd: &Uffd, stop: &AtomicBool) -> anyhow::Result<()> {
    let mut batch = Vec::with_capacity(uffd::READ_BATCH);
    while !stop.load(Ordering::Acquire) {
        if uffd.wait_readable(Some(Duration::from_millis(50)))? {
            uffd.read_events(&mut batch, uffd::READ_BATCH)?;
            batch.clear();
        }
    }
    Ok(())
}

/// COPY and ZEROPAGE of one page into a hole with nobody waiting.
fn service_costs(pages: usize) -> anyhow::Result<(f64, f64)> {
    let (uffd, region) = registered_region(Features::NONE, pages)?;
    let source = vec![0x5au8; PAGE_SIZE];
    let t0 = Instant::now();
    for i in 0..pages {
        uffd.copy(region.page_addr(i), &source, CopyMode::DONTWAKE)?;
    }
    let copy = per_page(t0.elapsed(), pages);
    let (uffd, region) = registered_region(Features::NONE, pages)?;
    let t0 = Instant::now();
    for i in 0..pages {
        uffd.zeropage(Range::page_of(region.page_addr(i)), Wake::DontWake)?;
    }
    let zeropage = per_page(t0.elapsed(), pages);
    Ok((copy, zeropage))
}
