//! `uswap bench far`: the far tier (a memcached cluster) against the local swap file.
//!
//! Three memcached servers on loopback (`memcached -M -m 1024 -t 2`, started here and killed
//! at the end), two copies of each page. An engine on simulated memory (no userfaultfd) with
//! no pool, so every page-out is a write to the device and every page-in a read from it,
//! encryption on for both devices (as `uswap run` runs them). For order 0 and order 4, in
//! one run, the far tier and the swap file side by side:
//!
//! 1. **page-out** of every folio of a region of corpus pages, then (far tier) a wait until
//!    every page is stored on both of its servers: the writeback throughput, MB/s of pages;
//! 2. **page-in**: one read fault per folio (readahead off), timed per fault: p50 and p99
//!    ns per fault, the latency a program's access sees;
//!    With it, the CPU time each page-out cost: this process's threads (engine, crypt,
//!    flushers) and the servers' (memcached's threads), from `/proc/PID/task/*/schedstat`:
//!    on a loaded machine the MB/s follow the share of CPU the run gets, the CPU per page
//!    does not;
//! 3. (far tier, order 0) **server bytes per swapped byte**: the growth of the servers'
//!    `bytes` stat (memcached's accounting of its items) over the bytes paged out.
//!
//! The configurations run in alternation, `ROUNDS` times; the figures are the medians of
//! the rounds'. Targets (on loopback): far page-in p50 at most 60 µs at order
//! 0, writeback at least 500 MB/s, at most 2.05 server bytes per swapped byte.

use super::CommonOpts;
use crate::report::{format_figure, Report, Target};
use anyhow::Context;
use backend::Backend;
use engine::mem_source::MemorySource;
use engine::{BackendConfig, Engine, EngineConfig, PageSource, SwapConfig};
use far::testing::{url, Memcached};
use far::{FarBackend, FarConfig};
use hdrhistogram::Histogram;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zswap::corpus::Corpus;

const PAGE: usize = 4096;
const BASE: u64 = 0x7e00_0000_0000;

/// Rounds per configuration (`--quick`: 1).
const ROUNDS: usize = 3;

/// One configuration's round.
#[derive(Clone, Copy, Default)]
struct Round {
    pagein_p50_ns: f64,
    pagein_p99_ns: f64,
    writeback_mb_s: f64,
    server_bytes_per_byte: f64,
    /// CPU time per page paged out, ours (every thread of this process) and the servers'.
    pageout_cpu_ns_client: f64,
    pageout_cpu_ns_servers: f64,
}

/// The device of a configuration.
enum Device<'a> {
    File,
    Far(&'a [Memcached]),
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn server_bytes(servers: &[Memcached]) -> anyhow::Result<u64> {
    let mut total = 0;
    for server in servers {
        total += server.stat("bytes").context("memcached stats")?;
    }
    Ok(total)
}

/// One round: page out and back in `pages` corpus pages at `order` through `device`.
fn round(corpus: &Corpus, pages: u64, order: u32, device: &Device) -> anyhow::Result<Round> {
    let bytes = pages * PAGE as u64;
    let size_bytes = bytes + (4 << 20);
    let far = match device {
        Device::Far(servers) => {
            let config = FarConfig::parse(&url(servers), 2).context("far config")?;
            Some(Arc::new(FarBackend::connect(config, size_bytes / PAGE as u64)?))
        }
        Device::File => None,
    };
    let backend = match &far {
        Some(far) => BackendConfig::Custom(far.clone() as Arc<dyn Backend>),
        None => BackendConfig::File { dir: std::env::temp_dir(), path: None, keep: false },
    };
    let source = Arc::new(MemorySource::new(BASE, pages));
    let dyn_source: Arc<dyn PageSource> = source.clone();
    let config = EngineConfig {
        budget_bytes: 2 * bytes + (64 << 20),
        folio_order: order,
        readahead_max_pages: 0,
        background_reclaim: false,
        swap: SwapConfig { backend, size_bytes, encrypt: true, ..SwapConfig::default() },
        zswap: None,
        ..EngineConfig::default()
    };
    let engine = Engine::new(config, dyn_source).context("engine")?;
    engine.add_region(BASE, bytes).context("region")?;
    for page in 0..pages {
        source
            .write(&engine, BASE + page * PAGE as u64, corpus.page(page as usize))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    let servers_before = match device {
        Device::Far(servers) => server_bytes(servers)?,
        Device::File => 0,
    };
    let folio_pages = 1u64 << order;
    let folio_bytes = folio_pages * PAGE as u64;
    let servers_cpu = || match device {
        Device::Far(servers) => servers.iter().map(Memcached::cpu_ns).sum(),
        Device::File => 0,
    };
    let cpu_before = (far::testing::cpu_ns(std::process::id()), servers_cpu());
    let start = Instant::now();
    for folio in 0..pages / folio_pages {
        let paged = engine.pageout(BASE + folio * folio_bytes, folio_bytes).context("pageout")?;
        anyhow::ensure!(paged == folio_pages, "folio {folio}: paged out {paged} pages");
    }
    if let Some(far) = &far {
        anyhow::ensure!(far.flush(Duration::from_secs(120)), "the pages reached the servers");
    }
    let writeback_mb_s = bytes as f64 / 1e6 / start.elapsed().as_secs_f64();
    let cpu_per_page = |after: u64, before: u64| after.saturating_sub(before) as f64 / pages as f64;
    let pageout_cpu_ns_client =
        cpu_per_page(far::testing::cpu_ns(std::process::id()), cpu_before.0);
    let pageout_cpu_ns_servers = cpu_per_page(servers_cpu(), cpu_before.1);
    let server_bytes_per_byte = match device {
        Device::Far(servers) => (server_bytes(servers)? - servers_before) as f64 / bytes as f64,
        Device::File => 0.0,
    };
    anyhow::ensure!(engine.stats().counters.pswpout == pages, "every page went to the device");
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let mut buf = vec![0u8; PAGE];
    for folio in 0..pages / folio_pages {
        let addr = BASE + folio * folio_bytes;
        let start = Instant::now();
        engine.handle_fault(addr, false).context("fault")?;
        hist.record((start.elapsed().as_nanos() as u64).max(1))?;
        source.read(&engine, addr, &mut buf).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let first = (folio * folio_pages) as usize;
        anyhow::ensure!(buf == corpus.page(first), "folio {folio} came back wrong");
    }
    if let Some(far) = &far {
        let lost = far.stats().counts().lost_pages;
        anyhow::ensure!(lost == 0, "{lost} pages lost");
    }
    Ok(Round {
        pagein_p50_ns: hist.value_at_quantile(0.5) as f64,
        pagein_p99_ns: hist.value_at_quantile(0.99) as f64,
        writeback_mb_s,
        server_bytes_per_byte,
        pageout_cpu_ns_client,
        pageout_cpu_ns_servers,
    })
}

/// Runs the benchmark.
///
/// # Errors
/// memcached that does not start, a setup failure, or a page that came back wrong.
pub fn run(opts: &CommonOpts) -> anyhow::Result<Report> {
    let mut report = Report::new("far");
    if !Memcached::available() {
        report.note("skipped: memcached is not installed (.ci/setup installs it)");
        return Ok(report);
    }
    let servers: Vec<Memcached> =
        (0..3).map(|_| Memcached::start(1024)).collect::<Result<_, _>>()?;
    let pages: u64 = if opts.quick { 2048 } else { 16384 };
    let rounds = if opts.quick { 1 } else { ROUNDS };
    let corpus = Corpus::generate(1, pages as usize);
    let configs = [(0u32, true), (0, false), (4, true), (4, false)];
    let mut results: Vec<Vec<Round>> = vec![Vec::new(); configs.len()];
    for _ in 0..rounds {
        for (i, &(order, is_far)) in configs.iter().enumerate() {
            let device = if is_far { Device::Far(&servers) } else { Device::File };
            results[i].push(round(&corpus, pages, order, &device)?);
        }
    }
    let pick = |i: usize, f: fn(&Round) -> f64| median(results[i].iter().map(f).collect());
    let table = report.table(
        &format!(
            "Far tier (3 memcached servers on loopback, 2 copies) against the swap file, \
             encrypted, no pool, {pages} pages, median of {rounds} rounds"
        ),
        &[
            "order",
            "device",
            "page-in p50 ns",
            "page-in p99 ns",
            "page-out MB/s",
            "page-out CPU ns/page: ours",
            "servers'",
            "server B/B",
        ],
    );
    for (i, &(order, is_far)) in configs.iter().enumerate() {
        table.row([
            order.to_string(),
            if is_far { "far" } else { "file" }.to_string(),
            format_figure(pick(i, |r| r.pagein_p50_ns)),
            format_figure(pick(i, |r| r.pagein_p99_ns)),
            format!("{:.0}", pick(i, |r| r.writeback_mb_s)),
            format_figure(pick(i, |r| r.pageout_cpu_ns_client)),
            if is_far { format_figure(pick(i, |r| r.pageout_cpu_ns_servers)) } else { "-".into() },
            if is_far {
                format!("{:.3}", pick(i, |r| r.server_bytes_per_byte))
            } else {
                "-".into()
            },
        ]);
    }
    for (i, &(order, is_far)) in configs.iter().enumerate() {
        let device = if is_far { "far" } else { "file" };
        report.field(&format!("{device}_pagein_p50_ns_order{order}"), pick(i, |r| r.pagein_p50_ns));
        report.field(&format!("{device}_pagein_p99_ns_order{order}"), pick(i, |r| r.pagein_p99_ns));
        report.field(&format!("{device}_pageout_mb_s_order{order}"), pick(i, |r| r.writeback_mb_s));
        report.field(
            &format!("{device}_pageout_cpu_ns_per_page_order{order}"),
            pick(i, |r| r.pageout_cpu_ns_client),
        );
        if is_far {
            report.field(
                &format!("far_servers_cpu_ns_per_page_order{order}"),
                pick(i, |r| r.pageout_cpu_ns_servers),
            );
        }
    }
    report.judged(
        "far_pagein_p50_ns_order0",
        pick(0, |r| r.pagein_p50_ns),
        Target::AtMost(60_000.0),
    );
    let writeback = pick(2, |r| r.writeback_mb_s).max(pick(0, |r| r.writeback_mb_s));
    report.judged("writeback_mb_s", writeback, Target::AtLeast(500.0));
    report.judged(
        "server_bytes_per_swapped_byte",
        pick(0, |r| r.server_bytes_per_byte),
        Target::AtMost(2.05),
    );
    report.field("rounds", rounds);
    report.note(
        "page-in: per fault (an order-4 fault brings 16 pages); page-out MB/s: every folio paged \
         out, then (far) until every copy is stored; writeback_mb_s is the better order's",
    );
    Ok(report)
}
