//! What reclaim would gain from access information, on the workload's Zipf pattern: the
//! swap-ins of the same access stream with every access seen (the kernel's accessed bits),
//! with writes alone seen (userfaultfd's asynchronous write-protect mode and
//! `PAGEMAP_SCAN`'s written bit could show that much: "writes", a page faulted in counting
//! as referenced, as a page mapped writable would; "writes-wp", not, as a page mapped
//! write-protected would), and with nothing seen (userfaultfd as `uswap run` uses it).
//! In-memory page source, direct reclaim only: deterministic.
//!
//! `cargo run --release -p engine --example access_bits` (environment: PAGES, default
//! 65536 = 256 MiB; BUDGET_PAGES, default a quarter; ACCESSES, default 2 x PAGES; WRITES,
//! the written share in percent, default 25 as the workload's; PATTERN zipf or uniform).

use engine::config::ZswapSettings;
use engine::mem_source::MemorySource;
use engine::{Engine, EngineConfig, PageSource, SwapConfig};
use std::sync::Arc;
use workload::pattern::{PageStream, Pattern};
use workload::rng::SplitMix64;
use zswap::compress::CompressorKind;

const PAGE: u64 = 4096;
const BASE: u64 = 0x7e00_0000_0000;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Swap-ins (pgmajfault) and activations of one run.
fn run(seen: &str, pages: u64, budget_pages: u64, accesses: u64, writes: u64) -> (u64, u64) {
    let mut source = MemorySource::new(BASE, pages);
    source = match seen {
        "all" => source,
        "writes" => source.with_write_bits_only(true),
        "writes-wp" => source.with_write_bits_only(false),
        _ => source.without_access_bits(),
    };
    let source = Arc::new(source);
    let dyn_source: Arc<dyn PageSource> = source.clone();
    let config = EngineConfig {
        budget_bytes: budget_pages * PAGE,
        readahead_max_pages: 0,
        background_reclaim: false,
        swap: SwapConfig { size_bytes: 2 * pages * PAGE, ..SwapConfig::default() },
        zswap: Some(ZswapSettings {
            compressor: CompressorKind::None,
            separate_bytes: Some(2 * pages * PAGE),
            ..ZswapSettings::default()
        }),
        ..EngineConfig::default()
    };
    let engine = Engine::new(config, dyn_source).expect("engine");
    engine.add_region(BASE, pages * PAGE).expect("region");
    let pattern = match std::env::var("PATTERN").as_deref() {
        Ok("uniform") => Pattern::Uniform,
        _ => Pattern::Zipf,
    };
    let mut buf = vec![0u8; PAGE as usize];
    for page in 0..pages {
        buf[..8].copy_from_slice(&page.to_le_bytes());
        source.write(&engine, BASE + page * PAGE, &buf).expect("fill");
    }
    let before = engine.stats().counters;
    let mut stream = PageStream::new(pattern, pages);
    let mut rng = SplitMix64::new(1);
    for _ in 0..accesses {
        let page = stream.next_page(&mut rng);
        let addr = BASE + page * PAGE;
        if rng.below(100) < writes {
            buf[..8].copy_from_slice(&page.to_le_bytes());
            source.write(&engine, addr, &buf).expect("write");
        } else {
            source.read(&engine, addr, &mut buf).expect("read");
            assert_eq!(buf[..8], page.to_le_bytes(), "page {page} read back wrong");
        }
    }
    let after = engine.stats().counters;
    (after.pgmajfault - before.pgmajfault, after.pgactivate - before.pgactivate)
}

fn main() {
    let pages = env("PAGES", 65536);
    let budget_pages = env("BUDGET_PAGES", pages / 4);
    let accesses = env("ACCESSES", 2 * pages);
    let writes = env("WRITES", 25);
    println!("{pages} pages under {budget_pages}, {accesses} accesses, {writes}% writes");
    println!("{:>8} {:>10} {:>10}", "seen", "swap-ins", "activated");
    for seen in ["all", "writes", "writes-wp", "none"] {
        let (swapins, activated) = run(seen, pages, budget_pages, accesses, writes);
        println!("{seen:>8} {swapins:>10} {activated:>10}");
    }
}
