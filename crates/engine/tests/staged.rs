//! Staged pages (the page source's rule 5): a take refused part way whose pages the source
//! keeps. The engine owns them from then on: a fault on one puts it back, the reader's pass
//! after events puts back the rest, a REMOVE discards them, a REMAP moves them, a fork
//! copies them into the child. Every page reads back what was last written, or zeros where
//! the program dropped it.

mod common;

use common::{addr, check_pages, content, setup, PAGE};
use engine::mem_source::MemorySource;
use engine::region::MmId;
use engine::{EngineConfig, PageSource};
use std::sync::Arc;

const PAGES: u64 = 64;

fn config(folio_order: u32) -> EngineConfig {
    EngineConfig {
        budget_bytes: 1 << 30,
        background_reclaim: false,
        zswap: None,
        folio_order,
        ..EngineConfig::default()
    }
}

/// An engine whose pages `0..PAGES` hold version 1, with `takes` page-outs of `pages` pages
/// each from page 0 on refused part way and staged.
fn staged(folio_order: u32, takes: u64) -> (engine::Engine, Arc<MemorySource>) {
    let (engine, source) = setup(config(folio_order), PAGES);
    for page in 0..PAGES {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    source.inject_take_staged(takes);
    let folio = 1u64 << folio_order;
    for take in 0..takes {
        let at = addr(take * folio);
        assert_eq!(engine.pageout(at, folio * PAGE as u64).unwrap(), 0, "take {take}");
    }
    engine.check_invariants();
    (engine, source)
}

fn staged_pages(engine: &engine::Engine) -> u64 {
    engine.stats().gauges.staged_pages
}

#[test]
fn a_fault_on_a_staged_page_puts_it_back() {
    for order in [0, 4] {
        let (engine, source) = staged(order, 2);
        let expected = if order == 0 { 2 } else { 16 };
        assert_eq!(staged_pages(&engine), expected, "order {order}");
        assert_eq!(source.held_pages() as u64, expected);
        assert!(engine.has_staged());
        check_pages(&engine, &source, 0..PAGES, 1);
        assert_eq!(staged_pages(&engine), 0);
        assert_eq!(source.held_pages(), 0, "every place settled");
        let counters = engine.stats().counters;
        assert_eq!((counters.pages_staged, counters.pages_unstaged), (expected, expected));
        engine.check_invariants();
        // Back on the lists: reclaim takes them again.
        assert_eq!(engine.pageout(addr(0), PAGES * PAGE as u64).unwrap(), PAGES);
        check_pages(&engine, &source, 0..PAGES, 1);
        engine.check_invariants();
    }
}

#[test]
fn unstage_all_waits_out_a_retry_then_puts_every_page_back() {
    let (engine, source) = staged(0, 8);
    source.inject_unstage_retries(1);
    assert_eq!(engine.unstage_all(), 0, "an event unread: nothing goes back yet");
    assert_eq!(staged_pages(&engine), 8);
    engine.hold_staged(true);
    assert_eq!(engine.unstage_all(), 0, "held");
    engine.hold_staged(false);
    assert_eq!(engine.unstage_all(), 8);
    assert!(!engine.has_staged());
    engine.check_invariants();
    check_pages(&engine, &source, 0..PAGES, 1);
}

#[test]
fn a_staged_page_the_program_drops_is_discarded_and_reads_zeros() {
    let (engine, source) = staged(0, 4);
    let charged = engine.charged_bytes();
    engine.remove(addr(0), 2 * PAGE as u64);
    assert_eq!(staged_pages(&engine), 2);
    assert_eq!(source.held_pages(), 2);
    assert_eq!(engine.stats().counters.staged_dropped, 2);
    assert_eq!(engine.charged_bytes(), charged - 2 * PAGE as u64, "their charge went");
    engine.check_invariants();
    check_pages(&engine, &source, 0..2, 0);
    check_pages(&engine, &source, 2..PAGES, 1);
    engine.check_invariants();
}

#[test]
fn a_staged_page_follows_a_remap() {
    let (engine, source) = staged(0, 4);
    // Pages 0..4 are all staged (missing in memory): the kernel's move of them moves
    // nothing into pages 40..44, whose own pages it drops; the engine moves their entries.
    source.remap(addr(0), addr(40), 4 * PAGE as u64);
    engine.remap(MmId::DEFAULT, addr(0), addr(40), 4 * PAGE as u64).unwrap();
    engine.check_invariants();
    let mut buf = vec![0u8; PAGE];
    for page in 0..4 {
        source.read(&engine, addr(40 + page), &mut buf).unwrap();
        assert!(buf == content(page, 1), "page {page}, now at {}", 40 + page);
    }
    assert_eq!(staged_pages(&engine), 0);
    engine.check_invariants();
}

/// A fork the engine is told of: the child's memory has the staged pages missing, so the
/// engine copies them in from the source's hold as it copies the page tables.
#[test]
fn a_child_forked_with_staged_pages_gets_their_data() {
    let (engine, source) = staged(0, 4);
    let child_source = Arc::new(source.fork());
    let child_dyn: Arc<dyn PageSource> = child_source.clone();
    let child = engine.fork(MmId::DEFAULT, child_dyn).unwrap();
    assert_eq!(engine.stats().counters.staged_to_children, 4);
    let mut buf = vec![0u8; PAGE];
    for page in 0..PAGES {
        assert!(child_source.read_present(addr(page), &mut buf), "page {page} present");
        assert!(buf == content(page, 1), "the child's page {page}");
    }
    engine.exit_mm(child);
    check_pages(&engine, &source, 0..PAGES, 1);
    engine.check_invariants();
}

/// A fork the engine is not told of (the shim's): the parent copies the staged pages' data
/// out before the fork, and the child, whose copy of the engine has them staged, maps them
/// and makes them resident. Here the same engine plays the child's copy.
#[test]
fn a_copy_of_the_staged_pages_makes_them_resident_in_a_child() {
    let (engine, source) = staged(0, 4);
    let copy = engine.staged_for_child();
    assert_eq!(copy.len(), 4);
    engine.restore_staged_in_child(&copy);
    assert!(!engine.has_staged());
    let mut buf = vec![0u8; PAGE];
    for page in 0..PAGES {
        assert!(source.read_present(addr(page), &mut buf), "page {page} present");
        assert!(buf == content(page, 1), "page {page}");
    }
    engine.check_invariants();
}
