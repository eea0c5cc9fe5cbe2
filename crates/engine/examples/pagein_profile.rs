//! Profiling harness for the page-in path: pages a region out to a raw pool, then faults it
//! back in, `ROUNDS` times. Run under a profiler:
//! `cargo build --release -p engine --example pagein_profile` then
//! `valgrind --tool=callgrind target/release/examples/pagein_profile`.
//! To profile only the page-ins with perf: `mkfifo /tmp/ctl; PERF_CTL=/tmp/ctl perf record
//! --control fifo:/tmp/ctl -D -1 ... target/release/examples/pagein_profile` (the harness
//! enables the profiler around the faults and disables it around the page-outs).

use engine::config::ZswapSettings;
use engine::mem_source::MemorySource;
use engine::{Engine, EngineConfig, PageSource, SwapConfig};
use std::sync::Arc;
use zswap::compress::CompressorKind;

const PAGE: u64 = 4096;
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
    let data = vec![7u8; PAGE as usize];
    for page in 0..pages {
        source.write(&engine, BASE + page * PAGE, &data).expect("write");
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
    let mut faults = 0;
    for _ in 0..rounds {
        let start = std::time::Instant::now();
        engine.pageout(BASE, pages * PAGE).expect("pageout");
        out_ns += start.elapsed().as_nanos();
        control("enable\n");
        let start = std::time::Instant::now();
        for page in (0..pages).step_by(1 << order) {
            engine.handle_fault(BASE + page * PAGE, false).expect("fault");
            faults += 1;
        }
        in_ns += start.elapsed().as_nanos();
        control("disable\n");
    }
    println!(
        "{faults} faults: {:.0} ns per page-out, {:.0} ns per page-in (per folio)",
        out_ns as f64 / f64::from(faults),
        in_ns as f64 / f64::from(faults)
    );
}
