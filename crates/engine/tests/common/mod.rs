//! Shared pieces of the engine's integration tests: an engine over simulated memory, and
//! page contents that say which page and which version they are.

#![allow(dead_code)] // each test binary uses a different part

use engine::mem_source::MemorySource;
use engine::{Engine, EngineConfig, PageSource};
use std::sync::Arc;

pub const PAGE: usize = 4096;
pub const BASE: u64 = 0x7f00_0000_0000;

/// An engine with a region of `region_pages` over a fresh memory source.
pub fn setup(config: EngineConfig, region_pages: u64) -> (Engine, Arc<MemorySource>) {
    setup_with(MemorySource::new(BASE, region_pages), config, region_pages)
}

/// As [`setup`], over `source` (made for `BASE` and `region_pages`: one without access
/// bits, say).
pub fn setup_with(
    source: MemorySource,
    config: EngineConfig,
    region_pages: u64,
) -> (Engine, Arc<MemorySource>) {
    let source = Arc::new(source);
    let dyn_source: Arc<dyn PageSource> = source.clone();
    let engine = Engine::new(config, dyn_source).expect("engine");
    engine.add_region(BASE, region_pages * PAGE as u64).expect("region");
    (engine, source)
}

/// Reads every page of `pages` back and checks it holds `content(page, version)`.
pub fn check_pages(
    engine: &Engine,
    source: &MemorySource,
    pages: std::ops::Range<u64>,
    version: u64,
) {
    let mut buf = vec![0u8; PAGE];
    for page in pages {
        source.read(engine, addr(page), &mut buf).expect("read");
        assert_eq!(buf, content(page, version), "page {page}");
    }
}

/// The content of `page` at `version`: mostly compressible, never all zero unless
/// `version` is 0 (version 0 is an all-zero page, to exercise the zero map).
pub fn content(page: u64, version: u64) -> Vec<u8> {
    let mut data = vec![0u8; PAGE];
    if version == 0 {
        return data;
    }
    data[..8].copy_from_slice(&page.to_le_bytes());
    data[8..16].copy_from_slice(&version.to_le_bytes());
    let mut x = page.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version;
    for chunk in data[16..].chunks_mut(8).step_by(3) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = chunk.len();
        chunk.copy_from_slice(&(x % 1000).to_le_bytes()[..n]);
    }
    data
}

pub fn addr(page: u64) -> u64 {
    BASE + page * PAGE as u64
}
