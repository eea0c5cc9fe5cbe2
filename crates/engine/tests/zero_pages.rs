//! Zero pages inside large folios that hold data too: the pool stores the data pages only,
//! and the zero pages are zero-map bits, read back as zeros whether the folio comes back
//! whole or a page at a time.

mod common;

use common::{addr, check_pages, content, setup_with, PAGE};
use engine::mem_source::MemorySource;
use engine::EngineConfig;

/// The data page of every four (the rest zero), as a program's half-used heap chunks are.
fn version(page: u64) -> u64 {
    u64::from(page.is_multiple_of(4))
}

/// A workload that writes 90% zero pages in order, then reads them at random, made a
/// pool entry of every zero page that shared a 64 KiB folio with data: each read of one
/// was a decompression, and it came back charged, pushing a page out (four times the
/// kernel's page-ins, whose zero map is per page at its default 4 KiB folios).
#[test]
fn a_large_folio_stores_its_zero_pages_as_bits_and_reads_them_back() {
    const PAGES: u64 = 4096;
    // A pool beside the budget with room for every page: no folio goes to the device,
    // which takes a folio whole, zero pages and all.
    let separate_bytes = Some(PAGES * PAGE as u64);
    let zswap = Some(engine::config::ZswapSettings { separate_bytes, ..Default::default() });
    let large_folios = engine::LargeFolios::Sequential;
    let config = EngineConfig { folio_order: 4, large_folios, zswap, ..common_config(256) };
    let source = MemorySource::new(common::BASE, PAGES).with_protected_zero();
    let (engine, source) = setup_with(source, config, PAGES);
    for page in 0..PAGES {
        source.write(&engine, addr(page), &content(page, version(page))).unwrap();
    }
    let stats = engine.stats();
    let c = &stats.counters;
    let pages_out: u64 = stats.per_order.swpout.iter().enumerate().map(|(o, n)| n << o).sum();
    assert!(stats.per_order.swpout[4] > 200, "64 KiB page-outs: {:?}", stats.per_order.swpout);
    assert_eq!(
        (c.swpout_zero, c.zswpout),
        (pages_out / 4 * 3, pages_out / 4),
        "{}",
        stats.to_vmstat()
    );
    assert_eq!(stats.gauges.zeromap_pages, c.swpout_zero);
    // A walk reads the first half back a folio at a time, zeros and data together.
    check_pages_by_version(&engine, &source, 0..PAGES / 2);
    let stats = engine.stats();
    assert!(stats.per_order.swpin[4] > 50, "64 KiB page-ins: {:?}", stats.per_order.swpin);
    // Scattered reads take the second half a page at a time; a fault on a zero page maps
    // the zero page over the other zero pages of its old folio too.
    let before = stats.counters;
    for i in 0..PAGES / 2 {
        // Every page of the half once, 613 pages (an odd step) from the one before.
        let page = PAGES / 2 + i * 613 % (PAGES / 2);
        check_pages_by_version(&engine, &source, page..page + 1);
    }
    let c = engine.stats().counters;
    let (faults, around) = (c.pgfault - before.pgfault, c.zero_around - before.zero_around);
    // 512 data pages and 1,536 zero pages: without the zero pages around, a fault on
    // every page touched.
    assert!(around > 1000 && faults < 1000, "{faults} faults, {around} around");
    check_pages_by_version(&engine, &source, 0..PAGES);
    engine.check_invariants();
}

fn common_config(budget_pages: u64) -> EngineConfig {
    let budget_bytes = budget_pages * PAGE as u64;
    EngineConfig { budget_bytes, background_reclaim: false, ..EngineConfig::default() }
}

fn check_pages_by_version(
    engine: &engine::Engine,
    source: &engine::mem_source::MemorySource,
    pages: std::ops::Range<u64>,
) {
    for page in pages {
        check_pages(engine, source, page..page + 1, version(page));
    }
}
