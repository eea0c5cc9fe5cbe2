//! How often a churning pool still reads a folio's raw pages with one copy: a 128 MiB
//! region of order-4 folios, pool compressor none, half paged out, then 40,000 rounds of
//! one random folio faulted in and another paged out (the steady state of a program over
//! its budget). Prints the raw pages loaded joined (`raw_pages_loaded_joined`) against all
//! pages loaded (`zswpin`), then reads every page back and checks it. docs/benchmarks.md,
//! "One copy for a folio's raw pages".
//! Run: `cargo run --release -p engine --example raw_churn`.

use engine::config::ZswapSettings;
use engine::mem_source::MemorySource;
use engine::{Engine, EngineConfig, PageSource, SwapConfig};
use std::sync::Arc;
use zswap::compress::CompressorKind;
use zswap::corpus::Corpus;
const BASE: u64 = 0x7e00_0000_0000;
fn main() {
    let pages = 32768u64;
    let corpus = Corpus::generate(1, pages as usize);
    let source = Arc::new(MemorySource::new(BASE, pages));
    let dyn_source: Arc<dyn PageSource> = source.clone();
    let bytes = pages * 4096;
    let config = EngineConfig {
        budget_bytes: 2 * bytes + (64 << 20),
        folio_order: 4,
        readahead_max_pages: 0,
        background_reclaim: false,
        swap: SwapConfig { size_bytes: bytes + (4 << 20), ..SwapConfig::default() },
        zswap: Some(ZswapSettings {
            compressor: CompressorKind::None,
            max_pool_percent: 100,
            ..ZswapSettings::default()
        }),
        ..EngineConfig::default()
    };
    let engine = Engine::new(config, dyn_source).unwrap();
    engine.add_region(BASE, bytes).unwrap();
    for p in 0..pages {
        source.write(&engine, BASE + p * 4096, corpus.page(p as usize)).unwrap();
    }
    let fp = 16u64;
    let folios = pages / fp;
    // Half out; then interleave: fault one folio in, page another out.
    for f in 0..folios / 2 {
        engine.pageout(BASE + f * fp * 4096, fp * 4096).unwrap();
    }
    let mut rng = 99u64;
    let mut next = || {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        rng >> 33
    };
    let (mut out, mut inn): (Vec<u64>, Vec<u64>) =
        ((0..folios / 2).collect(), (folios / 2..folios).collect());
    let z0 = engine.stats().pool.unwrap();
    for _ in 0..40000 {
        let i = next() as usize % out.len();
        let f = out.swap_remove(i);
        engine.handle_fault(BASE + f * fp * 4096, false).unwrap();
        inn.push(f);
        let j = next() as usize % inn.len();
        let g = inn.swap_remove(j);
        engine.pageout(BASE + g * fp * 4096, fp * 4096).unwrap();
        out.push(g);
    }
    let z = engine.stats().pool.unwrap();
    let (joined, loaded) =
        (z.raw_pages_loaded_joined - z0.raw_pages_loaded_joined, z.zswpin - z0.zswpin);
    println!("joined {joined} of {loaded} raw pages loaded");
    let mut buf = vec![0u8; 4096];
    for p in 0..pages {
        source.read(&engine, BASE + p * 4096, &mut buf).unwrap();
        assert_eq!(buf, corpus.page(p as usize), "page {p} came back wrong");
    }
    engine.check_invariants();
    println!("every page read back right");
}
