//! `uswap bench zswap`: the compressed pool's store and load paths against the compressor
//! alone, and the pool's memory overhead, per compressor, on the page corpus.
//!
//! One run, per compressor (lz4, zstd:1, zstd:3, none), on one corpus (zswap::corpus, seed
//! 1; 32768 pages, `--quick` 1024):
//!
//! 1. **Store**, interleaved page by page with the **raw compressor** on the same page, so
//!    both see the same machine at the same moment (these machines are shared and noisy),
//!    the one going first alternating (the second finds the page warm in the cache):
//!    `Compressor::compress` into a reused buffer, then `Zswap::store` of the page (limit
//!    check, compression, pool allocation and copy, index and LRU insertion). Each call is
//!    timed with `Instant` (hdrhistogram, ns; ~30-50 ns of timer cost in both). A first,
//!    cold pass grows a new pool into fresh memory; the pool is emptied and the timed, warm
//!    pass stores into its recycled memory (malloc trimming held off meanwhile).
//! 2. **Load**, in a seeded random order of the pages (as swap-ins come), interleaved the
//!    same way: `Compressor::decompress` of the object, then `Zswap::load` of the slot
//!    (index lookup, decompression straight out of the pool), checked against the page;
//!    then again in slot order (objects in memory order, the prefetcher's best case:
//!    `load_in_order_*`). Each page stored compressed is then loaded and decoded once more
//!    at once (`load_hot_*`, `raw_decompress_hot_*`: every line in the cache), which
//!    separates zswap's own instructions from the memory misses of a cold load. The
//!    load/raw ratio is taken on the pages stored compressed (the raw decompressor has
//!    nothing to do for a page stored raw; for `none`, whose decoder is a copy, on every
//!    page); `load_all` covers every page. The raw decompressor reads its objects from
//!    memory advised for huge pages, as the pool's pages are (zpool's page arena), so the
//!    two sides pay the same TLB costs and the ratio measures zswap's own work.
//! 3. **Pool overhead**: a seeded random half of the slots is invalidated, the pool
//!    compacted; `pool_overhead` = the pool allocator's bytes (`ZsPool::total_bytes`: pages
//!    held and the allocator's metadata) / the sum of the live objects' lengths (compressed
//!    bytes, or 4096 for a page stored raw). `zswap_overhead` adds zswap's own structures
//!    (index nodes, entries, LRU chunks: `Zswap::total_bytes`, what the budget is charged).
//!    `naive_overhead` is the same frees on one `Vec<u8>` per lz4 object, measured as
//!    malloc sees it (`uswap bench zpool` explains the method; its code is reused here).
//!
//! Targets (lz4, zstd:1, zstd:3): store p50 within 1.2x of the raw compressor's p50, load
//! p50 within 1.25x of the raw decompressor's; lz4 pool overhead at most 1.10 and below the
//! naive heap's. `none` is reported but not judged: its "compressor" is one 4 KiB copy,
//! against which any index and allocator cost is a large multiple.

use super::heap;
use super::zpool::{naive_phase, victims, Objects, FREE_PERCENT, SEED};
use super::CommonOpts;
use crate::report::{format_figure, Report, Target};
use hdrhistogram::Histogram;
use slots::{SwapEntry, SwapType};
use std::hint::black_box;
use std::time::Instant;
use zswap::compress::{
    Compressor, CompressorConfig, CompressorKind, COMPRESS_OUT_BYTES, PAGE_SIZE,
};
use zswap::corpus::{Corpus, SplitMix64};
use zswap::{Error, Zswap, ZswapConfig};

/// The compressors measured, with their JSON prefixes.
const CODECS: [(&str, &str); 4] =
    [("lz4", "lz4"), ("zstd:1", "zstd1"), ("zstd:3", "zstd3"), ("none", "none")];

/// Histograms of one compressor's run, ns per page.
struct Timings {
    raw_compress: Histogram<u64>,
    /// Stores into a warm pool (its memory recycled from an earlier pass).
    store: Histogram<u64>,
    /// The raw compressor beside the first, cold pass.
    raw_compress_cold: Histogram<u64>,
    /// Stores into a new pool growing into fresh memory.
    store_cold: Histogram<u64>,
    /// Loads in a seeded random order, as swap-ins come (no prefetcher helps either side).
    random: LoadTimings,
    /// Loads in slot order (objects in memory order: the prefetcher's best case).
    in_order: LoadTimings,
}

/// Histograms of one load pass, ns per page.
struct LoadTimings {
    raw_decompress: Histogram<u64>,
    /// Loads of the pages stored compressed (the same pages as `raw_decompress`).
    load: Histogram<u64>,
    /// Loads of every page.
    load_all: Histogram<u64>,
    /// The same page loaded and decoded again at once (every line in the cache): what
    /// zswap's own instructions add over the decoder, without the memory misses.
    load_hot: Histogram<u64>,
    raw_decompress_hot: Histogram<u64>,
}

impl LoadTimings {
    fn new() -> anyhow::Result<Self> {
        Ok(LoadTimings {
            raw_decompress: histogram()?,
            load: histogram()?,
            load_all: histogram()?,
            load_hot: histogram()?,
            raw_decompress_hot: histogram()?,
        })
    }
}

/// One compressor's figures.
struct CodecFigures {
    timings: Timings,
    /// Minor page faults per store, cold and warm pass.
    faults_per_store_cold: f64,
    faults_per_store: f64,
    ratio: f64,
    stored_raw: u64,
    live_bytes: u64,
    pool_bytes: u64,
    zswap_bytes: u64,
    /// The lz4 objects, for the naive heap (only kept for lz4).
    objects: Option<Objects>,
}

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 10_000_000_000, 3)?)
}

fn slot(i: usize) -> anyhow::Result<SwapEntry> {
    let ty = SwapType::new(0).ok_or_else(|| anyhow::anyhow!("swap type 0"))?;
    Ok(SwapEntry::new(ty, i as u64 + 1))
}

fn ns_since(start: Instant) -> u64 {
    start.elapsed().as_nanos().max(1) as u64
}

/// The raw compressor and the pool of one run, and what each page became.
struct Bench<'a> {
    name: &'a str,
    corpus: &'a Corpus,
    raw: Compressor,
    zswap: Zswap,
    out: Vec<u8>,
    /// The raw compressor's object of each page (the page itself when incompressible).
    objects: Objects,
    /// What the pool stores per page: the object's length, or 4096 stored raw.
    lengths: Vec<usize>,
}

impl<'a> Bench<'a> {
    fn new(name: &'a str, corpus: &'a Corpus) -> anyhow::Result<Self> {
        let compressor_config = CompressorConfig::new(name.parse()?);
        let raw = Compressor::with_config(compressor_config.clone())?;
        let pages = corpus.len();
        // A budget ten times the corpus (and 64 MiB): the 20% pool limit, twice the
        // corpus, is never reached here.
        let budget_bytes = 10 * (pages * PAGE_SIZE) as u64 + (64 << 20);
        let config = ZswapConfig::new(compressor_config, budget_bytes);
        let zswap = Zswap::new(config, pages as u64 + 1)?;
        let out = vec![0u8; COMPRESS_OUT_BYTES];
        let (objects, lengths) = (Objects::with_capacity(pages), Vec::with_capacity(pages));
        Ok(Bench { name, corpus, raw, zswap, out, objects, lengths })
    }

    /// Compresses every page once, untimed, and records its object and what the pool
    /// will store for it (before the timed passes, so their fault counts are the pool's).
    fn prepare(&mut self) -> anyhow::Result<()> {
        let huge_bytes = self.zswap.zpool().huge_class_size();
        for page in self.corpus.pages() {
            let object: &[u8] = match self.raw.compress(page, &mut self.out) {
                Ok(len) => &self.out[..len],
                Err(Error::Incompressible { .. }) => &page[..],
                Err(other) => return Err(other.into()),
            };
            let stored_len = if object.len() < huge_bytes { object.len() } else { PAGE_SIZE };
            self.lengths.push(stored_len);
            self.objects.push(object);
        }
        // The raw decompressor reads its objects from huge-page memory, as the pool's
        // pages are (zpool's page arena): the load/raw ratio then compares zswap's own
        // work, not page sizes.
        self.objects.move_to_huge_pages()
    }

    /// Stores every page, interleaved with the raw compressor; returns minor page faults
    /// per store.
    fn store_pass(
        &mut self,
        raw_ns: &mut Histogram<u64>,
        store_ns: &mut Histogram<u64>,
    ) -> anyhow::Result<f64> {
        // Faults are counted over the pass (a getrusage call beside each store would
        // disturb the caches it is timed with); the raw compressor, writing into one
        // reused buffer, takes none.
        let faults_before = heap::minor_faults();
        for (i, page) in self.corpus.pages().iter().enumerate() {
            // Which of the two goes first alternates: the second finds the page (and the
            // codec's tables) warm in the cache.
            for raw_first in [i % 2 == 0, i % 2 == 1] {
                let start = Instant::now();
                if raw_first {
                    let result = self.raw.compress(black_box(page), &mut self.out);
                    raw_ns.record(ns_since(start))?;
                    black_box(result.ok());
                } else {
                    let stored = self.zswap.store(slot(i)?, black_box(page));
                    store_ns.record(ns_since(start))?;
                    anyhow::ensure!(stored.is_ok(), "{}: page {i} refused", self.name);
                }
            }
        }
        let faults = heap::minor_faults() - faults_before;
        Ok(faults as f64 / self.corpus.len() as f64)
    }

    /// Loads every page in `order`, interleaved with the raw decompressor, each checked.
    fn load_pass(&self, order: &[usize], timings: &mut LoadTimings) -> anyhow::Result<()> {
        let (mut back, mut loaded) = ([0u8; PAGE_SIZE], [0u8; PAGE_SIZE]);
        // The pages the raw decompressor decodes: those stored compressed (for `none`,
        // whose decoder is a copy, every page).
        let identity = self.raw.kind() == CompressorKind::None;
        for &i in order {
            let page = self.corpus.page(i);
            let decoded = identity || self.lengths[i] < PAGE_SIZE;
            let mut hit = false;
            for raw_first in [i % 2 == 0, i % 2 == 1] {
                let start = Instant::now();
                if raw_first && decoded {
                    self.raw.decompress(black_box(self.objects.get(i)), &mut back)?;
                    timings.raw_decompress.record(ns_since(start))?;
                    anyhow::ensure!(back == *page, "{}: raw decode of {i} differs", self.name);
                } else if !raw_first {
                    hit = self.zswap.load(slot(i)?, &mut loaded)?;
                    let ns = ns_since(start);
                    timings.load_all.record(ns)?;
                    if decoded {
                        timings.load.record(ns)?;
                    }
                }
            }
            anyhow::ensure!(hit && loaded == *page, "{}: load of page {i} differs", self.name);
            if decoded {
                let start = Instant::now();
                self.zswap.load(slot(i)?, &mut loaded)?;
                timings.load_hot.record(ns_since(start))?;
                let start = Instant::now();
                self.raw.decompress(black_box(self.objects.get(i)), &mut back)?;
                timings.raw_decompress_hot.record(ns_since(start))?;
            }
        }
        Ok(())
    }

    /// Drops every entry and compacts: the pool's memory goes back to malloc, which (with
    /// trimming held off) keeps it for the next pass.
    fn empty(&self) -> anyhow::Result<()> {
        for i in 0..self.corpus.len() {
            self.zswap.invalidate(slot(i)?);
        }
        self.zswap.compact();
        Ok(())
    }
}

/// `0..count` in a seeded random order (Fisher-Yates).
fn shuffled(count: usize) -> Vec<usize> {
    let mut rng = SplitMix64::new(SEED ^ 0x10ad);
    let mut order: Vec<usize> = (0..count).collect();
    for i in (1..count).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
}

/// Runs one compressor: a cold store pass into a new pool, a warm one into the recycled
/// pool, interleaved load timings, then the overhead phase.
fn run_codec(name: &str, corpus: &Corpus, victims: &[bool]) -> anyhow::Result<CodecFigures> {
    let mut bench = Bench::new(name, corpus)?;
    let mut timings = Timings {
        raw_compress: histogram()?,
        store: histogram()?,
        raw_compress_cold: histogram()?,
        store_cold: histogram()?,
        random: LoadTimings::new()?,
        in_order: LoadTimings::new()?,
    };
    bench.prepare()?;
    let keep = heap::KeepFreedMemory::new();
    let faults_per_store_cold =
        bench.store_pass(&mut timings.raw_compress_cold, &mut timings.store_cold)?;
    bench.empty()?;
    let faults_per_store = bench.store_pass(&mut timings.raw_compress, &mut timings.store)?;
    drop(keep);
    bench.load_pass(&shuffled(corpus.len()), &mut timings.random)?;
    let in_order: Vec<usize> = (0..corpus.len()).collect();
    bench.load_pass(&in_order, &mut timings.in_order)?;
    let stats = bench.zswap.stats();
    let stored_bytes: usize = bench.lengths.iter().sum();
    let ratio = (corpus.len() * PAGE_SIZE) as f64 / stored_bytes as f64;
    let (live_bytes, pool_bytes, zswap_bytes) =
        overhead_phase(&bench.zswap, &bench.lengths, victims)?;
    Ok(CodecFigures {
        timings,
        faults_per_store_cold,
        faults_per_store,
        ratio,
        stored_raw: stats.stored_incompressible_pages,
        live_bytes,
        pool_bytes,
        zswap_bytes,
        objects: (name == "lz4").then_some(bench.objects),
    })
}

/// Invalidates the victims, compacts, checks the survivors; returns live object bytes, the
/// allocator's bytes and zswap's total bytes.
fn overhead_phase(
    zswap: &Zswap,
    lengths: &[usize],
    victims: &[bool],
) -> anyhow::Result<(u64, u64, u64)> {
    let mut live_bytes = 0u64;
    for (i, &length) in lengths.iter().enumerate() {
        if victims[i] {
            zswap.invalidate(slot(i)?);
        } else {
            live_bytes += length as u64;
        }
    }
    zswap.compact();
    zswap.check_invariants();
    let mut page = [0u8; PAGE_SIZE];
    for (i, _) in victims.iter().enumerate().filter(|(_, v)| !**v) {
        anyhow::ensure!(zswap.load(slot(i)?, &mut page)?, "page {i} lost by compaction");
    }
    Ok((live_bytes, zswap.zpool().total_bytes(), zswap.total_bytes()))
}

/// Runs the benchmark.
///
/// # Errors
/// A compressor or pool that cannot be set up, a refused store, or a page that did not
/// come back as stored.
pub fn run(common: &CommonOpts) -> anyhow::Result<Report> {
    let pages = if common.quick { 1024 } else { 32768 };
    let corpus = Corpus::generate(SEED, pages);
    let victims = victims(pages);
    let mut report = Report::new("zswap");
    report.field("pages", pages);
    let mut rows = Vec::new();
    for (name, prefix) in CODECS {
        let figures = run_codec(name, &corpus, &victims)?;
        record(&mut report, prefix, &figures);
        rows.push((name, prefix, figures));
    }
    let lz4_objects = rows[0].2.objects.as_ref();
    let lz4_objects = lz4_objects.ok_or_else(|| anyhow::anyhow!("lz4 objects kept"))?;
    let naive = naive_phase(lz4_objects, &victims)?;
    tables(&mut report, &rows, naive.held, naive.live_chunks);
    Ok(report)
}

fn p(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    histogram.value_at_quantile(quantile) as f64
}

/// The JSON fields and targets of one compressor.
fn record(report: &mut Report, prefix: &str, f: &CodecFigures) {
    let t = &f.timings;
    let fields = [
        ("store_ns_p50", p(&t.store, 0.5)),
        ("store_ns_p99", p(&t.store, 0.99)),
        ("store_cold_ns_p50", p(&t.store_cold, 0.5)),
        ("store_cold_ns_p99", p(&t.store_cold, 0.99)),
        ("raw_compress_cold_ns_p50", p(&t.raw_compress_cold, 0.5)),
        ("store_cold_faults_per_page", f.faults_per_store_cold),
        ("store_faults_per_page", f.faults_per_store),
        ("load_ns_p50", p(&t.random.load, 0.5)),
        ("load_ns_p99", p(&t.random.load, 0.99)),
        ("load_all_ns_p50", p(&t.random.load_all, 0.5)),
        ("load_in_order_ns_p50", p(&t.in_order.load, 0.5)),
        ("load_hot_ns_p50", p(&t.random.load_hot, 0.5)),
        ("raw_decompress_hot_ns_p50", p(&t.random.raw_decompress_hot, 0.5)),
        ("raw_decompress_in_order_ns_p50", p(&t.in_order.raw_decompress, 0.5)),
        ("raw_compress_ns_p50", p(&t.raw_compress, 0.5)),
        ("raw_compress_ns_p99", p(&t.raw_compress, 0.99)),
        ("raw_decompress_ns_p50", p(&t.random.raw_decompress, 0.5)),
        ("raw_decompress_ns_p99", p(&t.random.raw_decompress, 0.99)),
        ("ratio", f.ratio),
        ("stored_incompressible_pages", f.stored_raw as f64),
        ("zswap_overhead", f.zswap_bytes as f64 / f.live_bytes as f64),
    ];
    for (name, value) in fields {
        report.field(&format!("{prefix}_{name}"), value);
    }
    let store_over_raw = p(&t.store, 0.5) / p(&t.raw_compress, 0.5);
    let cold_over_raw = p(&t.store_cold, 0.5) / p(&t.raw_compress_cold, 0.5);
    report.field(&format!("{prefix}_store_cold_over_raw"), cold_over_raw);
    let load_over_raw = p(&t.random.load, 0.5) / p(&t.random.raw_decompress, 0.5);
    let in_order = p(&t.in_order.load, 0.5) / p(&t.in_order.raw_decompress, 0.5);
    report.field(&format!("{prefix}_load_in_order_over_raw"), in_order);
    if prefix == "none" {
        report.field("none_store_over_raw", store_over_raw);
        report.field("none_load_over_raw", load_over_raw);
    } else {
        report.judged(&format!("{prefix}_store_over_raw"), store_over_raw, Target::AtMost(1.2));
        report.judged(&format!("{prefix}_load_over_raw"), load_over_raw, Target::AtMost(1.25));
    }
    let overhead = f.pool_bytes as f64 / f.live_bytes as f64;
    if prefix == "lz4" {
        report.judged("pool_overhead", overhead, Target::AtMost(1.10));
    } else {
        report.field(&format!("{prefix}_pool_overhead"), overhead);
    }
}

type Row<'a> = (&'a str, &'a str, CodecFigures);

fn tables(report: &mut Report, rows: &[Row<'_>], naive_held: usize, naive_live: usize) {
    time_tables(report, rows);
    memory_tables(report, rows, naive_held, naive_live);
    notes(report);
}

fn time_tables(report: &mut Report, rows: &[Row<'_>]) {
    let header = [
        "compressor",
        "raw comp p50",
        "store p50",
        "store/raw",
        "raw dec p50",
        "load p50",
        "load/raw",
        "in order",
        "store p99",
        "load p99",
    ];
    let table =
        report.table("Through zswap against the compressor alone (ns per 4 KiB page)", &header);
    for (name, _, f) in rows {
        let t = &f.timings;
        table.row([
            name.to_string(),
            format_figure(p(&t.raw_compress, 0.5)),
            format_figure(p(&t.store, 0.5)),
            format_figure(p(&t.store, 0.5) / p(&t.raw_compress, 0.5)),
            format_figure(p(&t.random.raw_decompress, 0.5)),
            format_figure(p(&t.random.load, 0.5)),
            format_figure(p(&t.random.load, 0.5) / p(&t.random.raw_decompress, 0.5)),
            format_figure(p(&t.in_order.load, 0.5) / p(&t.in_order.raw_decompress, 0.5)),
            format_figure(p(&t.store, 0.99)),
            format_figure(p(&t.random.load, 0.99)),
        ]);
    }
    let header =
        ["compressor", "raw comp p50", "cold store p50", "cold/raw", "faults/store", "warm faults"];
    let table = report.table("Stores into a new pool growing into fresh memory (ns)", &header);
    for (name, _, f) in rows {
        let t = &f.timings;
        table.row([
            name.to_string(),
            format_figure(p(&t.raw_compress_cold, 0.5)),
            format_figure(p(&t.store_cold, 0.5)),
            format_figure(p(&t.store_cold, 0.5) / p(&t.raw_compress_cold, 0.5)),
            format_figure(f.faults_per_store_cold),
            format_figure(f.faults_per_store),
        ]);
    }
}

fn memory_tables(report: &mut Report, rows: &[Row<'_>], naive_held: usize, naive_live: usize) {
    let header = ["compressor", "ratio", "stored raw", "live bytes", "pool", "zswap total"];
    let title = "Memory after invalidating half at random and compacting (bytes / live bytes)";
    let table = report.table(title, &header);
    for (name, _, f) in rows {
        let live = f.live_bytes as f64;
        table.row([
            name.to_string(),
            format_figure(f.ratio),
            f.stored_raw.to_string(),
            f.live_bytes.to_string(),
            format_figure(f.pool_bytes as f64 / live),
            format_figure(f.zswap_bytes as f64 / live),
        ]);
    }
    let lz4 = &rows[0].2;
    let live = lz4.live_bytes as f64;
    let pool_overhead = lz4.pool_bytes as f64 / live;
    let naive_overhead = naive_held as f64 / live;
    let table = report.table(
        "lz4 objects: pool against a heap allocation per object",
        &["allocator", "bytes", "overhead"],
    );
    table.row([
        "zswap's pool (zpool)".into(),
        lz4.pool_bytes.to_string(),
        format_figure(pool_overhead),
    ]);
    table.row([
        "zswap, all structures".into(),
        lz4.zswap_bytes.to_string(),
        format_figure(lz4.zswap_bytes as f64 / live),
    ]);
    table.row([
        "Vec<u8> per object, held by malloc".into(),
        naive_held.to_string(),
        format_figure(naive_overhead),
    ]);
    table.row([
        "Vec<u8> per object, live chunks only".into(),
        naive_live.to_string(),
        format_figure(naive_live as f64 / live),
    ]);
    report.field("naive_overhead", naive_overhead);
    report.field("naive_live_overhead", naive_live as f64 / live);
    report.judged("pool_over_naive", pool_overhead / naive_overhead, Target::AtMost(1.0));
}

fn notes(report: &mut Report) {
    report.note(format!(
        "corpus seed {SEED}; store and load interleaved page by page with the raw \
         compressor; {FREE_PERCENT}% of slots invalidated at random before compaction"
    ));
    report.note(
        "store figures are from a second pass into the pool's recycled memory (the first \
         pass emptied, malloc trimming held off); the cold pass grows a new pool into fresh \
         memory, where a first touch is a page fault (one per 2 MiB chunk where the kernel \
         gives a huge page) the kernel's zswap never takes",
    );
    report.note(
        "load/raw is over the pages stored compressed, in a seeded random order (as \
         swap-ins come); 'in order' is the same in slot order, where the prefetcher walks \
         both sides' objects in memory order; a page stored raw loads as one copy \
         (load_all_ns_p50 covers every page); the raw side's objects sit in huge-page \
         memory, as the pool's pages do",
    );
}
