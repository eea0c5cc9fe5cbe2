//! `uswap bench zpool`: the compressors and the pool allocator on the page corpus.
//!
//! One run, on one corpus (zswap::corpus, seed 1; 32768 pages, `--quick` 1024):
//!
//! 1. **Raw compressors** (lz4, zstd:1, zstd:3, none), each alone, no pool: every page is
//!    compressed into a reused buffer and timed (hdrhistogram, ns per page, `Instant`
//!    around the call, ~20-40 ns of timer cost included), then every stored object is
//!    decompressed, timed and compared with its page. Ratio = page bytes / stored bytes,
//!    where a page that does not compress below 4096 bytes is stored raw (4096), as zswap
//!    would. Incompressible pages are not in the decompression figures (nothing to decode).
//! 2. **Pool overhead** per compressor: every object is stored in a fresh `ZsPool`
//!    (malloc + write), a seeded random half is freed, then the pool is compacted.
//!    `pool_overhead` = `ZsPool::total_bytes()` / the sum of the live objects' lengths
//!    (pages held by zspages plus the pool's metadata; see the zpool crate essay).
//! 3. **Naive heap** (lz4 objects): the same stores as one `Vec<u8>` each (exact length)
//!    and the same frees, in a fresh thread (a fresh glibc arena); `naive_overhead` = the
//!    growth of what malloc holds (`mallinfo2` arena + mmapped bytes: live chunks, headers
//!    and the holes the frees leave) / the live bytes. `naive_live_overhead` counts the
//!    live chunks only (`malloc_usable_size` + header): the heap's best case, as if every
//!    hole were reused. The pool is measured the same way too (`pool_heap_overhead`): pages
//!    it frees go back to malloc, which keeps them for the next zspage.

use super::heap;
use super::CommonOpts;
use crate::report::{format_figure, Report, Target};
use hdrhistogram::Histogram;
use std::hint::black_box;
use std::time::Instant;
use zpool::{PoolConfig, ZsPool};
use zswap::compress::{Compressor, CompressorKind, COMPRESS_OUT_BYTES, PAGE_SIZE};
use zswap::corpus::{Corpus, SplitMix64};
use zswap::Error;

pub(super) const SEED: u64 = 1;
pub(super) const FREE_PERCENT: u64 = 50;

/// The compressors measured, with their JSON prefixes.
const CODECS: [(&str, &str); 4] =
    [("lz4", "lz4"), ("zstd:1", "zstd1"), ("zstd:3", "zstd3"), ("none", "none")];

/// Compressed objects of the corpus, back to back (a page that did not compress is raw).
pub(super) struct Objects {
    bytes: Vec<u8>,
    /// The same bytes moved into huge-page memory, once `move_to_huge_pages` ran.
    huge: Option<super::heap::HugeBytes>,
    ends: Vec<usize>,
}

impl Objects {
    /// No objects, room for `count`.
    pub(super) fn with_capacity(count: usize) -> Self {
        Objects { bytes: Vec::new(), huge: None, ends: Vec::with_capacity(count) }
    }

    /// Moves the objects into memory advised for huge pages, as zpool's pages are.
    ///
    /// # Errors
    /// When the mapping is refused.
    pub(super) fn move_to_huge_pages(&mut self) -> anyhow::Result<()> {
        self.huge = Some(super::heap::HugeBytes::copy_of(&self.bytes)?);
        self.bytes = Vec::new();
        Ok(())
    }

    /// Appends one object.
    pub(super) fn push(&mut self, object: &[u8]) {
        assert!(self.huge.is_none(), "objects appended after the move to huge pages");
        self.bytes.extend_from_slice(object);
        self.ends.push(self.bytes.len());
    }

    pub(super) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        let bytes = self.huge.as_deref().unwrap_or(&self.bytes);
        &bytes[start..self.ends[i]]
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }
}

/// One compressor's raw figures.
struct CodecRun {
    compress_ns: Histogram<u64>,
    decompress_ns: Histogram<u64>,
    stored_bytes: usize,
    incompressible: usize,
    objects: Objects,
}

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 10_000_000_000, 3)?)
}

fn run_codec(kind: CompressorKind, corpus: &Corpus) -> anyhow::Result<CodecRun> {
    let compressor = Compressor::new(kind)?;
    let mut out = vec![0u8; COMPRESS_OUT_BYTES];
    let mut run = CodecRun {
        compress_ns: histogram()?,
        decompress_ns: histogram()?,
        stored_bytes: 0,
        incompressible: 0,
        objects: Objects::with_capacity(corpus.len()),
    };
    let mut compressed = Vec::with_capacity(corpus.len());
    for page in corpus.pages() {
        let start = Instant::now();
        let result = compressor.compress(page, &mut out);
        run.compress_ns.record(start.elapsed().as_nanos().max(1) as u64)?;
        let object: &[u8] = match result {
            Ok(len) => &out[..len],
            Err(Error::Incompressible { .. }) => {
                run.incompressible += 1;
                &page[..]
            }
            Err(other) => return Err(other.into()),
        };
        compressed.push(result.is_ok() && kind != CompressorKind::None);
        run.stored_bytes += object.len();
        run.objects.bytes.extend_from_slice(object);
        run.objects.ends.push(run.objects.bytes.len());
    }
    let mut back = [0u8; PAGE_SIZE];
    for (i, page) in corpus.pages().iter().enumerate() {
        if !compressed[i] && kind != CompressorKind::None {
            continue;
        }
        let object = run.objects.get(i);
        let start = Instant::now();
        compressor.decompress(black_box(object), &mut back)?;
        run.decompress_ns.record(start.elapsed().as_nanos().max(1) as u64)?;
        anyhow::ensure!(back == *page, "{kind}: page {i} decompressed to different bytes");
    }
    Ok(run)
}

/// Which objects the random frees take (seeded, the same for every allocator).
pub(super) fn victims(count: usize) -> Vec<bool> {
    let mut rng = SplitMix64::new(SEED ^ 0xf4ee);
    (0..count).map(|_| rng.chance(FREE_PERCENT)).collect()
}

struct PoolFigures {
    all_bytes: usize,
    live_bytes: usize,
    bytes_full: u64,
    bytes_after_free: u64,
    bytes_after_compact: u64,
    heap_held: usize,
    zspages_freed: usize,
    metadata_bytes: usize,
}

/// Stores every object, frees the victims, compacts. Runs in a fresh thread so the heap
/// delta is this pool's alone.
fn pool_phase(objects: &Objects, victims: &[bool]) -> anyhow::Result<PoolFigures> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let heap_before = heap::held_bytes();
                let pool = ZsPool::new(PoolConfig::with_max_bytes(8 << 30))?;
                let mut handles = Vec::with_capacity(objects.len());
                for i in 0..objects.len() {
                    let object = objects.get(i);
                    let handle = pool.malloc(object.len())?;
                    pool.write(handle, object);
                    handles.push(handle);
                }
                let bytes_full = pool.total_bytes();
                let all_bytes = objects.bytes.len();
                let mut live_bytes = 0;
                for (i, &handle) in handles.iter().enumerate() {
                    if victims[i] {
                        pool.free(handle);
                    } else {
                        live_bytes += objects.get(i).len();
                    }
                }
                let bytes_after_free = pool.total_bytes();
                let compact = pool.compact();
                let bytes_after_compact = pool.total_bytes();
                let heap_held = heap::held_bytes().saturating_sub(heap_before);
                verify_pool(&pool, objects, &handles, victims)?;
                let zspages_freed = compact.zspages_freed;
                let metadata_bytes = pool.stats().metadata_bytes;
                Ok(PoolFigures {
                    all_bytes,
                    live_bytes,
                    bytes_full,
                    bytes_after_free,
                    bytes_after_compact,
                    heap_held,
                    zspages_freed,
                    metadata_bytes,
                })
            })
            .join()
            .map_err(|_| anyhow::anyhow!("pool phase panicked"))?
    })
}

fn verify_pool(
    pool: &ZsPool,
    objects: &Objects,
    handles: &[zpool::Handle],
    victims: &[bool],
) -> anyhow::Result<()> {
    pool.check_invariants();
    let mut buf = vec![0u8; PAGE_SIZE];
    for (i, &handle) in handles.iter().enumerate().filter(|(i, _)| !victims[*i]) {
        let n = pool.read(handle, &mut buf);
        anyhow::ensure!(buf[..n] == *objects.get(i), "pool object {i} differs");
    }
    Ok(())
}

pub(super) struct NaiveFigures {
    held_full: usize,
    /// What malloc holds after the frees (live chunks, headers, holes).
    pub(super) held: usize,
    /// The live chunks alone.
    pub(super) live_chunks: usize,
}

/// The same stores and frees as one heap allocation per object, in a fresh thread.
pub(super) fn naive_phase(objects: &Objects, victims: &[bool]) -> anyhow::Result<NaiveFigures> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut boxes: Vec<Vec<u8>> = Vec::with_capacity(objects.len());
                let before = heap::held_bytes();
                for i in 0..objects.len() {
                    boxes.push(objects.get(i).to_vec());
                }
                let held_full = heap::held_bytes().saturating_sub(before);
                for (i, slot) in boxes.iter_mut().enumerate() {
                    if victims[i] {
                        *slot = Vec::new();
                    }
                }
                let held = heap::held_bytes().saturating_sub(before);
                let live_chunks = boxes.iter().map(|b| heap::chunk_bytes(b)).sum();
                NaiveFigures { held_full, held, live_chunks }
            })
            .join()
            .map_err(|_| anyhow::anyhow!("naive heap phase panicked"))
    })
}

/// Runs the benchmark.
///
/// # Errors
/// A compressor that cannot be set up, a pool error, or a page that did not round-trip.
pub fn run(common: &CommonOpts) -> anyhow::Result<Report> {
    let pages = if common.quick { 1024 } else { 32768 };
    let corpus = Corpus::generate(SEED, pages);
    let mut report = Report::new("zpool");
    report.field("pages", pages);
    let victims = victims(pages);
    // The naive heap goes first: its thread must be the first to get a fresh arena.
    let lz4 = run_codec(CompressorKind::Lz4, &corpus)?;
    let naive = naive_phase(&lz4.objects, &victims)?;
    let mut rows = Vec::new();
    for (name, prefix) in CODECS {
        let run = if name == "lz4" { None } else { Some(run_codec(name.parse()?, &corpus)?) };
        let run = run.as_ref().unwrap_or(&lz4);
        let pool = pool_phase(&run.objects, &victims)?;
        rows.push((name, prefix, codec_figures(&mut report, prefix, run, pages), pool));
    }
    tables(&mut report, &rows, &naive);
    Ok(report)
}

/// Compress p50, p99, decompress p50, p99, ratio: recorded as JSON fields.
fn codec_figures(report: &mut Report, prefix: &str, run: &CodecRun, pages: usize) -> [f64; 6] {
    let figures = [
        run.compress_ns.value_at_quantile(0.5) as f64,
        run.compress_ns.value_at_quantile(0.99) as f64,
        run.decompress_ns.value_at_quantile(0.5) as f64,
        run.decompress_ns.value_at_quantile(0.99) as f64,
        (pages * PAGE_SIZE) as f64 / run.stored_bytes as f64,
        run.incompressible as f64,
    ];
    let names = [
        "raw_compress_ns_p50",
        "raw_compress_ns_p99",
        "raw_decompress_ns_p50",
        "raw_decompress_ns_p99",
        "ratio",
        "incompressible_pages",
    ];
    for (name, value) in names.iter().zip(figures) {
        report.field(&format!("{prefix}_{name}"), value);
    }
    figures
}

fn tables(report: &mut Report, rows: &[(&str, &str, [f64; 6], PoolFigures)], naive: &NaiveFigures) {
    let header = ["compressor", "comp p50 ns", "comp p99 ns", "dec p50 ns", "dec p99 ns"];
    let table = report.table("Compressors alone (per 4 KiB page)", &header);
    for (name, _, f, _) in rows {
        table.row([name.to_string()].into_iter().chain(f[..4].iter().map(|v| format_figure(*v))));
    }
    let header = [
        "compressor",
        "ratio",
        "incompressible",
        "live bytes",
        "all live",
        "half freed",
        "compacted",
        "of which metadata",
    ];
    let table = report.table("Pool overhead (pool bytes / live object bytes)", &header);
    for (name, _, f, pool) in rows {
        let live = pool.live_bytes as f64;
        table.row([
            name.to_string(),
            format_figure(f[4]),
            format_figure(f[5]),
            pool.live_bytes.to_string(),
            format_figure(pool.bytes_full as f64 / pool.all_bytes as f64),
            format_figure(pool.bytes_after_free as f64 / live),
            format_figure(pool.bytes_after_compact as f64 / live),
            format_figure(pool.metadata_bytes as f64 / live),
        ]);
    }
    let (_, _, _, lz4_pool) = &rows[0];
    let live = lz4_pool.live_bytes as f64;
    let pool_overhead = lz4_pool.bytes_after_compact as f64 / live;
    let naive_overhead = naive.held as f64 / live;
    let header = ["allocator (lz4 objects)", "bytes held", "overhead"];
    let table = report.table("Pool against a heap allocation per object", &header);
    let pool_heap = lz4_pool.heap_held as f64 / live;
    table.row([
        "zpool, own accounting".into(),
        lz4_pool.bytes_after_compact.to_string(),
        format_figure(pool_overhead),
    ]);
    table.row([
        "zpool, as malloc sees it".into(),
        lz4_pool.heap_held.to_string(),
        format_figure(pool_heap),
    ]);
    table.row([
        "Vec<u8> per object, held by malloc".into(),
        naive.held.to_string(),
        format_figure(naive_overhead),
    ]);
    let naive_live = naive.live_chunks as f64 / live;
    table.row([
        "Vec<u8> per object, live chunks only".into(),
        naive.live_chunks.to_string(),
        format_figure(naive_live),
    ]);
    for (_, prefix, _, pool) in rows {
        let key = if *prefix == "lz4" {
            "pool_overhead".to_string()
        } else {
            format!("{prefix}_pool_overhead")
        };
        let value = pool.bytes_after_compact as f64 / pool.live_bytes as f64;
        if *prefix == "lz4" {
            report.judged(&key, value, Target::AtMost(1.10));
        } else {
            report.field(&key, value);
        }
        report.field(
            &format!("{prefix}_pool_overhead_before_compact"),
            pool.bytes_after_free as f64 / pool.live_bytes as f64,
        );
        report.field(&format!("{prefix}_zspages_compacted"), pool.zspages_freed);
    }
    report.field("naive_overhead", naive_overhead);
    let naive_full = naive.held_full as f64 / lz4_pool.all_bytes as f64;
    report.field("naive_overhead_before_free", naive_full);
    let pool_full = lz4_pool.bytes_full as f64 / lz4_pool.all_bytes as f64;
    report.field("pool_overhead_before_free", pool_full);
    report.note(format!(
        "before any free (every object live): pool {}, Vec<u8> per object {}",
        format_figure(pool_full),
        format_figure(naive_full)
    ));
    report.field("naive_live_overhead", naive_live);
    report.field("pool_heap_overhead", pool_heap);
    report.judged("pool_over_naive", pool_overhead / naive_overhead, Target::AtMost(1.0));
    report.note(format!(
        "corpus seed {SEED}; {FREE_PERCENT}% of objects freed at random before compaction; \
         overhead figures use lz4 objects unless prefixed"
    ));
    report.note(
        "pool heap figure: zspage pages freed by compaction go back to malloc, which keeps \
         them for the next zspage instead of returning them to the kernel",
    );
}
