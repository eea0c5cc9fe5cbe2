//! Profiling harness for the page-in path: pages a region out to a raw pool, then faults it
//! back in, `ROUNDS` times. Run under a profiler:
//! `cargo build --release -p engine --example pagein_profile` then
//! `valgrind --tool=callgrind target/release/examples/pagein_profile`.
//! To profile only the page-ins with perf: `mkfifo /tmp/ctl; PERF_CTL=/tmp/ctl perf record
//! --control fifo:/tmp/ctl -D -1 ... target/release/examples/pagein_profile` (the harness
//! enables the profiler around the faults and disables it around the page-outs).
//! It also counts the allocator's calls per folio paged out and in.
//!
//! Pages hold one repeated byte by default; `CORPUS=1` fills them from the zswap corpus
//! instead (as `uswap bench engine` does: a page-in then reads a cold page, not one line
//! over and over), and `EACH=1` pages out one folio per call (as the benchmark does)
//! instead of the whole region in one call. `VERIFY=1` reads each folio's first page back
//! after its fault and checks it, as the benchmark does between its timed faults.

use engine::config::ZswapSettings;
use engine::mem_source::MemorySource;
use engine::{Engine, EngineConfig, PageSource, SwapConfig};
use std::sync::Arc;
use zswap::compress::CompressorKind;

const PAGE: u64 = 4096;

/// Counts allocations and frees, to report them per page-in.
struct Counting;
static ALLOCS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static FREES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; the counters are atomics.
unsafe impl std::alloc::GlobalAlloc for Counting {
    /// # Safety
    /// As `GlobalAlloc::alloc`.
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }

    /// # Safety
    /// As `GlobalAlloc::dealloc`.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        FREES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    /// # Safety
    /// As `GlobalAlloc::realloc`.
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        FREES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn counts() -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    (ALLOCS.load(Relaxed), FREES.load(Relaxed))
}
const BASE: u64 = 0x7e00_0000_0000;

fn main() {
    let pages: u64 = std::env::var("PAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(4096);
    let rounds: u32 = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let order: u32 = std::env::var("ORDER").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let source = Arc::new(MemorySource::new(BASE, pages));
    let dyn_source: Arc<dyn PageSource> = source.clone();
    let config = EngineConfig {
        budget_bytes: 4 * pages * PAGE,
        readahead_max_pages: 0,
        folio_order: order,
        background_reclaim: false,
        swap: SwapConfig { size_bytes: 2 * pages * PAGE, ..SwapConfig::default() },
        zswap: Some(ZswapSettings {
            compressor: CompressorKind::None,
            max_pool_percent: 100,
            ..ZswapSettings::default()
        }),
        ..EngineConfig::default()
    };
    let engine = Engine::new(config, dyn_source).expect("engine");
    engine.add_region(BASE, pages * PAGE).expect("region");
    let corpus = zswap::corpus::Corpus::generate(1, pages as usize);
    let varied = std::env::var_os("CORPUS").is_some();
    let each = std::env::var_os("EACH").is_some();
    let verify = std::env::var_os("VERIFY").is_some();
    let mut check = vec![0u8; PAGE as usize];
    let data = vec![7u8; PAGE as usize];
    for page in 0..pages {
        let d = if varied { corpus.page(page as usize) } else { &data[..] };
        source.write(&engine, BASE + page * PAGE, d).expect("write");
    }
    let mut perf = std::env::var_os("PERF_CTL").map(|path| {
        std::fs::OpenOptions::new().write(true).open(path).expect("PERF_CTL: the control fifo")
    });
    let mut control = |command: &str| {
        if let Some(fifo) = perf.as_mut() {
            use std::io::Write;
            fifo.write_all(command.as_bytes()).expect("perf control");
        }
    };
    let (mut out_ns, mut in_ns) = (0u128, 0u128);
    let (mut in_allocs, mut in_frees, mut out_allocs, mut out_frees) = (0, 0, 0, 0);
    let mut faults = 0;
    let mut best_in = f64::MAX;
    for _ in 0..rounds {
        let (a, f) = counts();
        let start = std::time::Instant::now();
        if each {
            for page in (0..pages).step_by(1 << order) {
                engine.pageout(BASE + page * PAGE, PAGE << order).expect("pageout");
            }
        } else {
            engine.pageout(BASE, pages * PAGE).expect("pageout");
        }
        out_ns += start.elapsed().as_nanos();
        let (a2, f2) = counts();
        (out_allocs, out_frees) = (out_allocs + a2 - a, out_frees + f2 - f);
        control("enable\n");
        let (a, f) = counts();
        let start = std::time::Instant::now();
        for page in (0..pages).step_by(1 << order) {
            engine.handle_fault(BASE + page * PAGE, false).expect("fault");
            faults += 1;
            if verify {
                source.read(&engine, BASE + page * PAGE, &mut check).expect("read");
                let expected = if varied { corpus.page(page as usize) } else { &data[..] };
                assert_eq!(&check[..], expected, "page {page} came back wrong");
            }
        }
        let round = start.elapsed().as_nanos();
        in_ns += round;
        best_in = best_in.min(round as f64 / (pages >> order) as f64);
        let (a2, f2) = counts();
        (in_allocs, in_frees) = (in_allocs + a2 - a, in_frees + f2 - f);
        control("disable\n");
    }
    println!(
        "{faults} faults: {:.0} ns per page-out, {:.0} ns per page-in (per folio)",
        out_ns as f64 / f64::from(faults),
        in_ns as f64 / f64::from(faults)
    );
    println!("best round: {best_in:.0} ns per page-in (per folio)");
    let per = |n: u64| n as f64 / f64::from(faults);
    println!(
        "per folio: page-out {:.2} allocs {:.2} frees, page-in {:.2} allocs {:.2} frees",
        per(out_allocs),
        per(out_frees),
        per(in_allocs),
        per(in_frees)
    );
}
