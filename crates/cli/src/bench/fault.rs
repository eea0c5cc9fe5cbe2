//! `uswap bench fault`: what a fault on managed memory costs, end to end through the
//! library (`frontend::Uswap`): the program's access, the delivery, the engine's swap-in, the
//! map. The default delivery mode is chosen from these rows (docs/UFFD.md, "Delivery: the
//! decision").
//!
//! For each delivery mode (handler thread, SIGBUS in the faulting thread), each folio order
//! (0: 4 KiB, 4: 64 KiB mapped by one fault) and each kind of swapped page:
//!
//! ```text
//!   zero   the page was all zero: a zero-map bit; a read maps the shared zero page (zero
//!          pages charged, `protect_zero_pages(false)`: protected, a zero folio paged out
//!          is mapped back at once and its reads never fault, ARCHITECTURE.md "Zero pages")
//!   pool   compressible data (about 3:1) in the compressed pool, lz4
//!   file   incompressible data in the swap file, no pool (read back from the page cache:
//!          the file was just written, so this is the swap-in path without disk latency)
//! ```
//!
//! a region is written, paged out whole, and its folios are read in a random order, one
//! timed read of the first byte per folio, with readahead off (so every folio faults). The
//! kernel's own first-touch anonymous write fault, timed the same way in the same run, is
//! the yardstick.
//!
//! JSON fields: `zero_read_p50_ns`, `pool_lz4_p50_ns`, `pool_lz4_p99_ns` (default mode,
//! order 0), `kernel_anon_fault_p50_ns`, `default_mode`, and per row
//! `<mode>_<kind>_order<o>_p50_ns` / `_p99_ns` / `_faults`; the delivery comparison
//! `sigbus_vs_handler_<kind>_p50_ratio`.

use crate::report::{format_figure, Report};
use anyhow::Context;
use frontend::{Delivery, Uswap};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant};
use uffd::{Mapping, PAGE_SIZE};

/// Faults left out of each histogram while caches and threads warm up.
const WARMUP_FAULTS: usize = 32;

/// What the swapped-out pages held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Zero,
    Pool,
    File,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Zero => "zero",
            Kind::Pool => "pool",
            Kind::File => "file",
        }
    }
}

/// One row's latencies.
struct Row {
    mode: Delivery,
    kind: Kind,
    order: u32,
    hist: Histogram<u64>,
    faults_counted: u64,
}

impl Row {
    fn p(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64
    }

    fn key(&self) -> String {
        format!("{}_{}_order{}", self.mode.name(), self.kind.name(), self.order)
    }
}

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).context("histogram bounds")
}

/// A cheap xorshift for the access order and the incompressible content.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Runs the benchmark.
///
/// # Errors
/// userfaultfd unavailable (the message says why), or the library failing.
pub fn run(quick: bool) -> anyhow::Result<Report> {
    let faults = if quick { 256 } else { 4096 };
    let mut report = Report::new("fault");
    report.field("faults_per_row", faults as u64);
    report.field("default_mode", Delivery::DEFAULT.name());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load_1m: f64 = load.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(-1.0);
    report.field("loadavg_1m_at_start", load_1m);
    let mut rows = Vec::new();
    for mode in [Delivery::Handler, Delivery::Sigbus] {
        for order in [0, 4] {
            for kind in [Kind::Zero, Kind::Pool, Kind::File] {
                rows.push(measure(mode, kind, order, faults)?);
            }
        }
    }
    let kernel = kernel_first_touch(faults)?;
    table(&mut report, &rows, &kernel);
    fields(&mut report, &rows, &kernel);
    report.note(format!(
        "fault latency = the faulting read, timed by the faulting thread; {faults} faults per \
         row in a random folio order, first {WARMUP_FAULTS} not recorded; readahead off; an \
         order-4 fault maps a whole 64 KiB folio (16 pages)"
    ));
    report.note(format!(
        "load average {load_1m} at start; handler-mode figures are two cross-thread wake-ups \
         (docs/UFFD.md: 11-13 us on one vCPU, ~47 us across vCPUs), SIGBUS-mode ones none"
    ));
    report.note(
        "pool: lz4, the pool's default share of the budget (20%), large enough for every page \
         here; file: no pool, so every page is in the swap file",
    );
    Ok(report)
}

/// One row: write, page out, fault every folio back in random order.
fn measure(mode: Delivery, kind: Kind, order: u32, faults: usize) -> anyhow::Result<Row> {
    let folio_pages = 1usize << order;
    let pages = faults * folio_pages;
    let bytes = pages * PAGE_SIZE;
    // The pool holds a fifth of the budget: ten times the data keeps every compressed page
    // in it; the file rows have no pool at all.
    let mut builder = Uswap::builder()
        .budget_bytes((10 * bytes + (16 << 20)) as u64)
        .swap_size_bytes((2 * bytes + (16 << 20)) as u64)
        .folio_order(order)
        .readahead_max_pages(0)
        .protect_zero_pages(false)
        .delivery(mode);
    if kind == Kind::File {
        builder = builder.no_pool();
    }
    let swap =
        builder.build().with_context(|| format!("starting uswap in {} mode", mode.name()))?;
    let mut region = swap.map(bytes)?;
    let mut x = 0x2545_f491_4f6c_dd1d_u64 ^ u64::from(order);
    match kind {
        Kind::Zero => region.as_mut_slice().fill(0),
        Kind::Pool => {
            // One word in three random, the rest small: lz4 compresses it about 3:1.
            for (i, word) in region.as_mut_slice().chunks_exact_mut(8).enumerate() {
                let w = if i % 3 == 0 { xorshift(&mut x) } else { i as u64 % 61 };
                word.copy_from_slice(&w.to_le_bytes());
            }
        }
        Kind::File => {
            for word in region.as_mut_slice().chunks_exact_mut(8) {
                word.copy_from_slice(&xorshift(&mut x).to_le_bytes());
            }
        }
    }
    let paged = settle_and_page_out(&swap, &region, pages)?;
    anyhow::ensure!(paged == pages as u64, "paged out {paged} of {pages} pages");
    let before = swap.stats()?.engine.counters.clone();
    let mut order_of_folios: Vec<usize> = (0..faults).collect();
    for i in (1..faults).rev() {
        order_of_folios.swap(i, xorshift(&mut x) as usize % (i + 1));
    }
    let mut hist = histogram()?;
    let bytes = region.as_slice();
    for (n, &folio) in order_of_folios.iter().enumerate() {
        let at = folio * folio_pages * PAGE_SIZE;
        let t0 = Instant::now();
        // black_box: the load must happen, here, between the two clock reads.
        std::hint::black_box(std::hint::black_box(bytes)[at]);
        let dt = t0.elapsed();
        if n >= WARMUP_FAULTS {
            hist.record(dt.as_nanos() as u64)?;
        }
    }
    let after = swap.stats()?.engine.counters;
    let faults_counted = after.pgmajfault - before.pgmajfault;
    anyhow::ensure!(faults_counted >= faults as u64, "only {faults_counted} swap-in faults");
    // Every page came from the tier the row names.
    let from_tier = match kind {
        Kind::Zero => after.swpin_zero - before.swpin_zero,
        Kind::Pool => after.zswpin - before.zswpin,
        Kind::File => after.pswpin - before.pswpin,
    };
    anyhow::ensure!(from_tier >= pages as u64, "{kind:?}: {from_tier} of {pages} from the tier");
    drop(region);
    Ok(Row { mode, kind, order, hist, faults_counted })
}

/// Waits until the last written page is charged (a fault's map wakes the writer before the
/// handler records the page), then pages everything out.
fn settle_and_page_out(
    swap: &Uswap,
    region: &frontend::Region,
    pages: usize,
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while swap.stats()?.engine.gauges.resident_pages < pages as u64 {
        anyhow::ensure!(Instant::now() < deadline, "pages never became resident");
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(region.pageout(0, region.len())?)
}

/// The kernel's own first-touch write fault on fresh anonymous memory.
fn kernel_first_touch(faults: usize) -> anyhow::Result<Histogram<u64>> {
    let region = Mapping::anonymous(faults * PAGE_SIZE)?;
    region.advise(0, region.len_bytes(), uffd::Advice::NoHugePage)?;
    let mut hist = histogram()?;
    for i in 0..faults {
        let t0 = Instant::now();
        region.store_u8(i * PAGE_SIZE, 1);
        let dt = t0.elapsed();
        if i >= WARMUP_FAULTS {
            hist.record(dt.as_nanos() as u64)?;
        }
    }
    Ok(hist)
}

fn table(report: &mut Report, rows: &[Row], kernel: &Histogram<u64>) {
    let t = report.table(
        "Fault latency on managed memory (faulting read, swapped-out folio)",
        &["delivery", "page", "order", "p50 ns", "p99 ns", "x kernel p50"],
    );
    let kernel_p50 = kernel.value_at_quantile(0.5) as f64;
    for row in rows {
        t.row([
            row.mode.name().to_string(),
            row.kind.name().to_string(),
            row.order.to_string(),
            format_figure(row.p(0.5)),
            format_figure(row.p(0.99)),
            format!("{:.1}", row.p(0.5) / kernel_p50.max(1.0)),
        ]);
    }
    t.row([
        "kernel".to_string(),
        "first touch".to_string(),
        "0".to_string(),
        format_figure(kernel_p50),
        format_figure(kernel.value_at_quantile(0.99) as f64),
        "1.0".to_string(),
    ]);
}

fn fields(report: &mut Report, rows: &[Row], kernel: &Histogram<u64>) {
    for row in rows {
        report.field(&format!("{}_p50_ns", row.key()), row.p(0.5));
        report.field(&format!("{}_p99_ns", row.key()), row.p(0.99));
        report.field(&format!("{}_faults", row.key()), row.faults_counted);
    }
    let find = |mode: Delivery, kind: Kind, order: u32| {
        rows.iter().find(|r| r.mode == mode && r.kind == kind && r.order == order)
    };
    if let Some(zero) = find(Delivery::DEFAULT, Kind::Zero, 0) {
        report.field("zero_read_p50_ns", zero.p(0.5));
        report.field("zero_read_p99_ns", zero.p(0.99));
    }
    if let Some(pool) = find(Delivery::DEFAULT, Kind::Pool, 0) {
        report.field("pool_lz4_p50_ns", pool.p(0.5));
        report.field("pool_lz4_p99_ns", pool.p(0.99));
    }
    for kind in [Kind::Zero, Kind::Pool, Kind::File] {
        if let (Some(handler), Some(sigbus)) =
            (find(Delivery::Handler, kind, 0), find(Delivery::Sigbus, kind, 0))
        {
            let key = format!("sigbus_vs_handler_{}_p50_ratio", kind.name());
            report.field(&key, sigbus.p(0.5) / handler.p(0.5).max(1.0));
        }
    }
    report.field("kernel_anon_fault_p50_ns", kernel.value_at_quantile(0.5) as f64);
    report.field("kernel_anon_fault_p99_ns", kernel.value_at_quantile(0.99) as f64);
}
