//! The seed experiments: the measurements the five linux-mm patch series that seeded
//! uswap's design were judged by, repeated on uswap's own code on this machine.
//!
//! - `seed-000` (swap cache as the synchronisation layer, with multi-index entries):
//!   (a) XArray node memory of the swap cache after 2 MiB folios were swapped out, when they
//!   leave one multi-index shadow each (uswap) versus 512 single-index shadows each (the
//!   layout before the series): the seed reports radix node memory −94%; (b) sequential
//!   swap-out and swap-in of zero pages, per page, through the engine (scaled to this
//!   machine: 64 MiB at 4 KiB and 64 KiB folios).
//! - `seed-004` (zswap indexed by an XArray instead of an rbtree): lookup latency and index
//!   memory per entry, the XArray against std's `BTreeMap` (a balanced tree, standing in
//!   for the kernel's rbtree) on the same keys, in the same run.
//!
//! Both run the real structures (the engine over its in-memory page source; the xarray
//! crate), not models of them.

use super::CommonOpts;
use crate::report::{format_figure, Report, Target};
use anyhow::Context;
use engine::mem_source::MemorySource;
use engine::{Engine, EngineConfig, PageSource, SwapConfig};
use hdrhistogram::Histogram;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

const PAGE: u64 = 4096;
const BASE: u64 = 0x7d00_0000_0000;

/// An engine over simulated memory with everything going to a memory swap device.
fn engine(pages: u64, folio_order: u32) -> anyhow::Result<(Engine, Arc<MemorySource>)> {
    let source = Arc::new(MemorySource::new(BASE, pages));
    let dyn_source: Arc<dyn PageSource> = source.clone();
    let config = EngineConfig {
        budget_bytes: 2 * pages * PAGE + (16 << 20),
        folio_order,
        readahead_max_pages: 0,
        background_reclaim: false,
        swap: SwapConfig { size_bytes: pages * PAGE + (8 << 20), ..SwapConfig::default() },
        zswap: None,
        ..EngineConfig::default()
    };
    let engine = Engine::new(config, dyn_source).context("engine")?;
    engine.add_region(BASE, pages * PAGE).context("region")?;
    Ok((engine, source))
}

fn write_all(engine: &Engine, source: &MemorySource, pages: u64, byte: u8) -> anyhow::Result<()> {
    let data = vec![byte; PAGE as usize];
    for page in 0..pages {
        source
            .write(engine, BASE + page * PAGE, &data)
            .map_err(|e| anyhow::anyhow!("write of page {page}: {e:?}"))?;
    }
    Ok(())
}

/// Swap cache node bytes after paging out `folios` 2 MiB of data at `order`.
fn swapcache_bytes_after_pageout(folios: u64, order: u32) -> anyhow::Result<(u64, u64)> {
    let pages = folios * 512;
    let (engine, source) = engine(pages, order)?;
    write_all(&engine, &source, pages, 1)?;
    let out = engine.pageout(BASE, pages * PAGE).context("pageout")?;
    anyhow::ensure!(out == pages, "paged out {out} of {pages} pages");
    let stats = engine.stats();
    anyhow::ensure!(
        stats.per_order.swpout[order as usize] == pages >> order,
        "folios were split: {:?}",
        stats.per_order.swpout_fallback
    );
    engine.check_invariants();
    Ok((stats.gauges.swapcache_node_bytes, pages))
}

/// Sequential page-out then page-in of `pages` zero pages at `order`: ns per page each.
fn zero_round_trip(pages: u64, order: u32) -> anyhow::Result<(f64, f64)> {
    let (engine, source) = engine(pages, order)?;
    write_all(&engine, &source, pages, 0)?;
    let start = Instant::now();
    engine.pageout(BASE, pages * PAGE).context("pageout")?;
    let out_ns = start.elapsed().as_nanos() as f64 / pages as f64;
    let mut buf = vec![1u8; PAGE as usize];
    let start = Instant::now();
    for page in 0..pages {
        source
            .read(&engine, BASE + page * PAGE, &mut buf)
            .map_err(|e| anyhow::anyhow!("read of page {page}: {e:?}"))?;
    }
    let in_ns = start.elapsed().as_nanos() as f64 / pages as f64;
    anyhow::ensure!(buf.iter().all(|b| *b == 0), "a zero page came back non-zero");
    anyhow::ensure!(source.data_pages() == 0, "zero pages read back cost memory");
    anyhow::ensure!(engine.stats().counters.swpin_zero == pages, "not served from the zero map");
    Ok((out_ns, in_ns))
}

/// `uswap bench seed-000`.
///
/// # Errors
/// A setup failure or a wrong result.
pub fn seed_000(opts: &CommonOpts) -> anyhow::Result<Report> {
    let folios = if opts.quick { 8 } else { 64 };
    let mut report = Report::new("seed-000");
    let (multi, pages) = swapcache_bytes_after_pageout(folios, 9)?;
    let (single, _) = swapcache_bytes_after_pageout(folios, 0)?;
    let ratio = multi as f64 / single as f64;
    let table = report.table(
        &format!("Swap cache node memory after swapping out {folios} x 2 MiB ({pages} pages)"),
        &["layout", "node bytes", "bytes per 2 MiB folio"],
    );
    table.row([
        "multi-index (one order-9 shadow)".to_string(),
        multi.to_string(),
        format_figure(multi as f64 / folios as f64),
    ]);
    table.row([
        "single (512 order-0 shadows)".to_string(),
        single.to_string(),
        format_figure(single as f64 / folios as f64),
    ]);
    report.field("multi_index_swapcache_bytes", multi);
    report.field("single_index_swapcache_bytes", single);
    report.judged("swapcache_node_ratio", ratio, Target::AtMost(0.10));
    report.note(format!(
        "node memory {:+.1}% with multi-index entries (the seed reports -94%)",
        (ratio - 1.0) * 100.0
    ));
    let zero_pages = if opts.quick { 4096 } else { 16384 };
    let mut rows = Vec::new();
    for order in [0u32, 4] {
        let (out_ns, in_ns) = zero_round_trip(zero_pages, order)?;
        report.field(&format!("zero_swapout_ns_order{order}"), out_ns);
        report.field(&format!("zero_swapin_ns_order{order}"), in_ns);
        rows.push([format!("{} KiB", 4 << order), format_figure(out_ns), format_figure(in_ns)]);
    }
    let table = report.table(
        &format!("Sequential swap-out and swap-in of {zero_pages} zero pages (ns per page)"),
        &["folio", "swap-out", "swap-in"],
    );
    for row in rows {
        table.row(row);
    }
    report.note("zero pages: nothing stored (zero map), nothing copied back (shared zero page)");
    Ok(report)
}

/// What the index of a zswap entry points to (its size is irrelevant to the index).
struct Entry {
    _handle: u64,
}

fn lookup_ns(mut lookup: impl FnMut(u64) -> bool, keys: &[u64]) -> anyhow::Result<u64> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3)?;
    // Batches of 64 lookups per timing: one lookup is near the timer's own cost.
    for batch in keys.chunks(64) {
        let start = Instant::now();
        for key in batch {
            black_box(lookup(*key));
        }
        hist.record((start.elapsed().as_nanos() as u64 / batch.len() as u64).max(1))?;
    }
    Ok(hist.value_at_quantile(0.5))
}

/// `uswap bench seed-004`.
///
/// # Errors
/// A setup failure.
pub fn seed_004(opts: &CommonOpts) -> anyhow::Result<Report> {
    let entries: u64 = if opts.quick { 65_536 } else { 1 << 20 };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(4);
    // Swap offsets as zswap sees them: a dense run of slots, stored in eviction order.
    let mut keys: Vec<u64> = (1..=entries).collect();
    keys.shuffle(&mut rng);
    let before = super::heap::held_bytes();
    let mut tree = BTreeMap::new();
    for key in &keys {
        tree.insert(*key, Box::new(Entry { _handle: *key }));
    }
    let entry_bytes = entries as usize * (std::mem::size_of::<Entry>().max(16) + 8);
    let tree_bytes = super::heap::held_bytes().saturating_sub(before).saturating_sub(entry_bytes);
    let mut xa: xarray::XArray<Box<Entry>> = xarray::XArray::new();
    for key in &keys {
        xa.store(*key, xarray::Entry::Item(Box::new(Entry { _handle: *key })))
            .map_err(|r| anyhow::anyhow!("store: {}", r.error))?;
    }
    let xa_bytes = xa.memory_bytes();
    keys.shuffle(&mut rng);
    let (mut tree_ns, mut xa_ns) = (u64::MAX, u64::MAX);
    for _ in 0..3 {
        tree_ns = tree_ns.min(lookup_ns(|k| tree.contains_key(&k), &keys)?);
        xa_ns = xa_ns.min(lookup_ns(|k| xa.load(k).is_some(), &keys)?);
    }
    let mut report = Report::new("seed-004");
    let table = report.table(
        &format!("zswap index, {entries} entries keyed by swap offset (lookups in random order)"),
        &["index", "lookup p50 ns", "index bytes", "bytes per entry"],
    );
    let per = |bytes: usize| bytes as f64 / entries as f64;
    table.row([
        "XArray".to_string(),
        xa_ns.to_string(),
        xa_bytes.to_string(),
        format_figure(per(xa_bytes)),
    ]);
    table.row([
        "BTreeMap".to_string(),
        tree_ns.to_string(),
        tree_bytes.to_string(),
        format_figure(per(tree_bytes)),
    ]);
    report.field("xarray_lookup_ns_p50", xa_ns);
    report.field("btree_lookup_ns_p50", tree_ns);
    report.field("xarray_bytes_per_entry", per(xa_bytes));
    report.field("btree_bytes_per_entry", per(tree_bytes));
    report.judged(
        "lookup_ratio_xarray_vs_tree",
        xa_ns as f64 / tree_ns as f64,
        Target::AtMost(1.0),
    );
    report.note(
        "BTreeMap bytes: heap growth (mallinfo2) while building it, minus the entries' own \
         allocations; the kernel's rbtree costs 24 bytes of rb_node per entry inside the entry",
    );
    Ok(report)
}

/// `seed-002`: the cluster scan strategy's large-folio fallback rates, the 6.18 policy
/// against the legacy one, on the fragmentation run of `uswap bench slots` (a random mix of
/// orders 0..=9 with random lifetimes, 16 CPUs' cluster hints, the device held 80-95%
/// full). The seed (commit 9a42aed48421, `make -j96`) went from 17 653 to 0 64 KiB
/// fallbacks and from 12 / 1578 to 1253 / 15 2 MiB swpout / fallback.
///
/// # Errors
/// A device that cannot be made, or an allocator error other than "no space".
pub fn seed_002(opts: &CommonOpts) -> anyhow::Result<Report> {
    let mut report = Report::new("seed-002");
    super::slots::fragmentation(&mut report, opts.quick)?;
    report.note(
        "the seed's kernel-build figures: 64 KiB swpout_fallback 17 653 (legacy) -> 0 (6.18); \
         2 MiB swpout / fallback 12 / 1578 -> 1253 / 15; 512 KiB fallback 2218 -> 4",
    );
    Ok(report)
}

/// Resident memory of one step of [`seed_003`].
struct Step {
    name: &'static str,
    status: uffd::MemStatus,
}

/// One run of the zero-page program: `LEN` bytes written with `byte`, paged out, every
/// byte read back. Returns the steps and the growth of VmRSS over the reads.
fn zero_page_program(byte: u8) -> anyhow::Result<(Vec<Step>, u64)> {
    use frontend::Uswap;
    use uffd::{MemStatus, PAGE_SIZE};
    const LEN: usize = 20 << 20;
    let swap = Uswap::builder().budget_bytes(64 << 20).swap_size_bytes(64 << 20).build()?;
    let mut steps = vec![Step { name: "uswap started", status: MemStatus::read()? }];
    let mut region = swap.map(LEN)?;
    region.as_mut_slice().fill(byte);
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while swap.stats()?.engine.gauges.resident_pages < (LEN / PAGE_SIZE) as u64 {
        anyhow::ensure!(Instant::now() < deadline, "the engine never saw the writes");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    steps.push(Step { name: "20 MiB written", status: MemStatus::read()? });
    let out = region.pageout(0, LEN)?;
    anyhow::ensure!(out == (LEN / PAGE_SIZE) as u64, "paged out {out} pages");
    steps.push(Step { name: "paged out", status: MemStatus::read()? });
    let expected = u64::from(byte) * LEN as u64;
    let sum: u64 = region.as_slice().iter().map(|&b| u64::from(b)).sum();
    anyhow::ensure!(black_box(sum) == expected, "read back {sum}, expected {expected}");
    let read = MemStatus::read()?;
    let growth = read.rss_bytes.saturating_sub(steps[2].status.rss_bytes);
    steps.push(Step { name: "every byte read", status: read });
    region.unmap()?;
    Ok((steps, growth))
}

/// `seed-003`: the seed's zero-page program on the library, in this process: 20 MiB
/// written with zeros, paged out, every byte read back. Zero pages are kept as zero-map
/// bits and a read maps the shared zero page, so the reads cost (almost) nothing; the same
/// program with every byte 1 (pages that must come back as data) is the control that shows
/// the measurement can tell. The seed: 21 268 kB without zero-page mapping, 792 kB with.
///
/// # Errors
/// userfaultfd unavailable (the report says so), or a read-back that differs.
pub fn seed_003(_opts: &CommonOpts) -> anyhow::Result<Report> {
    let mut report = Report::new("seed-003");
    let (zeros, zero_growth) = zero_page_program(0).context("userfaultfd (root or the sysctl)")?;
    let (ones, data_growth) = zero_page_program(1)?;
    let kb = |bytes: u64| (bytes / 1024).to_string();
    let table = report.table(
        "The zero-page program (kB, whole process: this benchmark's binary and engine included)",
        &["step", "zeros VmRSS", "zeros RssAnon", "ones VmRSS", "ones RssAnon"],
    );
    for (z, o) in zeros.iter().zip(&ones) {
        table.row([
            z.name.to_string(),
            kb(z.status.rss_bytes),
            kb(z.status.rss_anon_bytes),
            kb(o.status.rss_bytes),
            kb(o.status.rss_anon_bytes),
        ]);
    }
    report.field("data_reads_growth_kb", (data_growth / 1024) as f64);
    report.judged("zero_reads_growth_kb", (zero_growth / 1024) as f64, Target::AtMost(2048.0));
    report.note(format!(
        "reading 20 MiB of paged-out zero pages grew VmRSS by {} kB; the same 20 MiB of \
         non-zero data by {} kB (the seed: 21 268 kB without zero-page mapping, 792 kB with, \
         for its whole small C process; crates/capi/examples/zero_page.c is that program)",
        zero_growth / 1024,
        data_growth / 1024
    ));
    Ok(report)
}
