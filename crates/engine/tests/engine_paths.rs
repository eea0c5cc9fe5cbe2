//! The page-out and page-in paths on simulated memory: data comes back, zero pages cost
//! nothing, large folios move whole, the budget holds, and bad input is refused.

mod common;

use common::{addr, check_pages, content, setup, setup_with, PAGE};
use engine::budget::Watermarks;
use engine::mem_source::MemorySource;
use engine::{EngineConfig, Error};

/// Pages go straight to the swap device (no pool), so the device path is what is tested.
fn config(budget_pages: u64) -> EngineConfig {
    EngineConfig {
        budget_bytes: budget_pages * PAGE as u64,
        background_reclaim: false,
        zswap: None,
        ..EngineConfig::default()
    }
}

/// With the compressed pool (lz4, 20% of the budget).
fn pool_config(budget_pages: u64) -> EngineConfig {
    EngineConfig { zswap: Some(engine::config::ZswapSettings::default()), ..config(budget_pages) }
}

#[test]
fn pages_beyond_the_budget_come_back() {
    let (engine, source) = setup(config(64), 1024);
    for page in 0..1024 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let stats = engine.stats();
    assert!(stats.counters.pswpout > 900, "pages went out: {}", stats.counters.pswpout);
    assert!(stats.gauges.used_bytes <= 64 * PAGE as u64, "used {}", stats.gauges.used_bytes);
    // The bookkeeping gauges: a page table for 1024 pages (16 leaves of 64 at least), and
    // an LRU record for each resident folio at least.
    let node = stats.gauges.pagetable_node_bytes;
    assert!((16 * 64 * 8..1024 * 64).contains(&node), "page table {node} bytes");
    let lru = stats.gauges.lru_bytes;
    assert!((stats.gauges.resident_pages * 8..1 << 20).contains(&lru), "lru {lru} bytes");
    let mut buf = vec![0u8; PAGE];
    for page in 0..1024 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 1), "page {page}");
    }
    engine.check_invariants();
    let stats = engine.stats();
    assert!(stats.counters.pswpin > 900 || stats.counters.swap_ra > 0);
}

/// A sequential walk through swapped memory under a full budget: readahead maps pages
/// ahead of the faults, it does not wait for the budget to have room above the low
/// watermark (where a full budget never is).
#[test]
fn readahead_runs_under_a_full_budget() {
    let config = EngineConfig { budget_bytes: 512 * PAGE as u64, ..config(512) };
    let (engine, source) = setup(config, 4096);
    for page in 0..4096 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let before = engine.stats().counters;
    let mut buf = vec![0u8; PAGE];
    for page in 0..2048 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 1), "page {page}");
    }
    engine.check_invariants();
    let after = engine.stats().counters;
    let (faults, ahead) = (after.pgfault - before.pgfault, after.swap_ra - before.swap_ra);
    eprintln!("{faults} faults, {ahead} pages read ahead");
    assert!(ahead >= 1024, "{ahead} pages read ahead in a walk over 2048 swapped pages");
    assert!(faults <= 1024, "{faults} faults for 2048 pages");
}

/// A walk through swapped memory with every fourth page resident (as random access
/// leaves it): readahead passes over the mapped pages instead of ending its window at
/// them, and maps its window before the faulting page, whose map is what wakes the
/// faulting thread (woken first, it ran into the window while it was being read).
#[test]
fn readahead_passes_over_mapped_pages_and_maps_the_faulting_page_last() {
    let source = MemorySource::new(common::BASE, 1024).with_map_log();
    let (engine, source) = setup_with(source, config(2048), 1024);
    for page in 0..1024 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    engine.pageout(addr(0), 1024 * PAGE as u64).unwrap();
    let mut buf = vec![0u8; PAGE];
    // Every fourth page back, from the top down: no walk, so no readahead.
    for page in (0..256).rev().map(|i| 4 * i) {
        source.read(&engine, addr(page), &mut buf).unwrap();
    }
    source.take_map_log();
    let before = engine.stats().counters;
    let mut faults_ahead = 0;
    for page in 1..1024 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 1), "page {page}");
        let log = source.take_map_log();
        if let Some((&last, ahead)) = log.split_last() {
            assert_eq!(last, addr(page), "the faulting page is mapped last: {log:x?}");
            assert!(ahead.iter().all(|&a| a > addr(page)), "ahead of the fault: {log:x?}");
            faults_ahead += usize::from(!ahead.is_empty());
        }
    }
    engine.check_invariants();
    let after = engine.stats().counters;
    let (faults, ahead) = (after.pgfault - before.pgfault, after.swap_ra - before.swap_ra);
    eprintln!("{faults} faults ({faults_ahead} reading ahead), {ahead} pages read ahead");
    // 768 swapped pages in the walk; a full window of 8 pages holds 6 of them.
    assert!(faults <= 768 / 5, "{faults} faults for 768 swapped pages");
    assert_eq!(faults + ahead, 768, "every swapped page read once");
}

#[test]
fn zero_pages_are_stored_as_bits_and_read_as_the_zero_page() {
    let (engine, source) = setup(config(64), 512);
    for page in 0..512 {
        source.write(&engine, addr(page), &content(page, 0)).unwrap();
    }
    engine.pageout(addr(0), 512 * PAGE as u64).unwrap();
    let stats = engine.stats();
    assert_eq!(stats.counters.swpout_zero, 512);
    assert_eq!(stats.counters.pswpout, 0, "zero pages never reach the device");
    assert_eq!(source.data_pages(), 0);
    let mut buf = vec![1u8; PAGE];
    for page in 0..512 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert!(buf.iter().all(|b| *b == 0), "page {page}");
    }
    assert_eq!(source.data_pages(), 0, "reads of zero entries map the shared zero page");
    assert_eq!(engine.stats().counters.swpin_zero, 512);
    engine.check_invariants();
}

/// With a source that write-protects zero pages: a read of a page never written, or of a
/// zero-map slot, maps the zero page uncharged; the first write to it is a write-protect
/// fault that makes the folio resident and charged before it lets the write through. A
/// zero-page entry is dropped, moved and left out of a fork like any other, and never
/// reclaimed: it holds nothing.
#[test]
fn zero_pages_read_uncharged_until_written() {
    let source = MemorySource::new(common::BASE, 512).with_protected_zero();
    let config = EngineConfig { folio_order: 2, ..config(256) };
    let (engine, source) = setup_with(source, config, 512);
    let mut buf = vec![1u8; PAGE];
    // 256 pages never written, read: they would fill the budget, none is charged, and
    // reclaim has nothing to take.
    for page in 0..256 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert!(buf.iter().all(|b| *b == 0), "page {page}");
    }
    let stats = engine.stats();
    assert_eq!((stats.gauges.zero_mapped_pages, stats.gauges.used_bytes), (256, 0));
    assert_eq!((stats.counters.zero_mapped, stats.counters.pgscan_direct), (256, 0));
    assert_eq!(source.data_pages(), 0);
    engine.check_invariants();
    // Writes: one write-protect fault per order-2 entry, which becomes resident whole.
    for page in (0..64).step_by(4) {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let stats = engine.stats();
    assert_eq!((stats.counters.pgfault_wp, stats.counters.zero_mapped_written), (16, 64));
    assert_eq!(stats.gauges.zero_mapped_pages, 192);
    assert_eq!(stats.gauges.resident_pages, 64);
    assert_eq!(source.data_pages(), 16, "the kernel allocated the pages written, not the folio");
    engine.check_invariants();
    // Pages written with zeros and paged out go straight back as protected zero pages:
    // stored as zero-map bits, then mapped, so reading them faults nothing.
    for page in 256..512 {
        source.write(&engine, addr(page), &content(page, 0)).unwrap();
    }
    engine.pageout(addr(0), 512 * PAGE as u64).unwrap();
    let faults = engine.stats().counters.pgfault;
    for page in 256..512 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert!(buf.iter().all(|b| *b == 0), "page {page}");
    }
    let stats = engine.stats();
    assert_eq!((stats.counters.pgfault, stats.counters.swpin_zero), (faults, 0));
    assert_eq!((stats.counters.swpout_zero, stats.counters.zero_remapped), (256, 256));
    assert_eq!(stats.gauges.zero_mapped_pages, 192 + 256);
    // The 16 written folios (one page of data each) on the device; the zero ones hold no
    // slot once mapped back.
    assert_eq!((stats.gauges.swap_inuse_pages, stats.gauges.zeromap_pages), (64, 0));
    check_pages(&engine, &source, 0..1, 1);
    // Dropped (the REMOVE event), moved, and left out of a fork.
    source.drop_range(addr(300), 6 * PAGE as u64);
    engine.remove(addr(300), 6 * PAGE as u64);
    assert_eq!(engine.stats().gauges.zero_mapped_pages, 192 + 250);
    let (from, to, len) = (addr(400), addr(100), 8 * PAGE as u64);
    source.remap(from, to, len);
    engine.remap(engine::region::MmId::DEFAULT, from, to, len).unwrap();
    source.write(&engine, addr(101), &content(101, 2)).unwrap();
    check_pages(&engine, &source, 101..102, 2);
    let child = std::sync::Arc::new(source.fork());
    let child_source: std::sync::Arc<dyn engine::PageSource> = child;
    engine.fork(engine::region::MmId::DEFAULT, child_source).unwrap();
    engine.check_invariants();
}

/// Under the sequential large-folio policy, a write into a large zero-page entry makes the
/// whole folio resident only if it continues a sequential run; a write elsewhere makes
/// only its page resident, and the rest of the entry stays uncharged.
#[test]
fn a_scattered_write_to_a_large_zero_page_entry_charges_one_page() {
    let source = MemorySource::new(common::BASE, 64).with_protected_zero();
    let large_folios = engine::LargeFolios::Sequential;
    let config = EngineConfig { folio_order: 2, large_folios, ..config(32) };
    let (engine, source) = setup_with(source, config, 64);
    let mut buf = vec![0u8; PAGE];
    for page in 0..16 {
        source.read(&engine, addr(page), &mut buf).unwrap();
    }
    let stats = engine.stats();
    assert_eq!((stats.counters.pgfault_first_touch, stats.gauges.zero_mapped_pages), (4, 16));
    // Page 5: behind where the run of faults ended (page 16): one page.
    source.write(&engine, addr(5), &content(5, 1)).unwrap();
    let stats = engine.stats();
    assert_eq!((stats.gauges.resident_pages, stats.gauges.zero_mapped_pages), (1, 15));
    // Page 8 continues from page 5's: its whole entry, pages 8-11.
    source.write(&engine, addr(8), &content(8, 1)).unwrap();
    let stats = engine.stats();
    assert_eq!((stats.gauges.resident_pages, stats.gauges.zero_mapped_pages), (5, 11));
    assert_eq!((stats.counters.pgfault_wp, stats.counters.zero_mapped_written), (2, 5));
    check_pages(&engine, &source, 5..6, 1);
    check_pages(&engine, &source, 8..9, 1);
    engine.check_invariants();
}

/// Zero pages a program mapped before its range was managed (the shim's adoption), listed
/// once write-protected: adopted uncharged, and made resident by their first write. A
/// source that cannot protect them is refused.
#[test]
fn zero_pages_found_mapped_are_adopted_uncharged() {
    use engine::PageSource;
    let len = 64 * PAGE as u64;
    let plain = MemorySource::new(common::BASE, 64);
    let (engine, _) = setup_with(plain, config(32), 64);
    let e = engine.adopt_zero_mapped(addr(0), len, &[(0, 8)]).unwrap_err();
    assert!(matches!(e, Error::BadRegion { .. }), "{e}");
    let source = std::sync::Arc::new(MemorySource::new(common::BASE, 64).with_protected_zero());
    assert_eq!(source.map_zero_protected(addr(0), 12 * PAGE as u64), Ok(engine::Mapped::Done));
    let engine = engine::Engine::new(config(32), source.clone()).unwrap();
    engine.add_region_populated(common::BASE, len, &[]).unwrap();
    assert_eq!(engine.adopt_zero_mapped(addr(0), len, &[(0, 8)]).unwrap(), 8);
    assert_eq!(engine.adopt_zero_mapped(addr(0), len, &[(4, 8)]).unwrap(), 4, "new pages only");
    let stats = engine.stats();
    assert_eq!((stats.gauges.zero_mapped_pages, stats.gauges.used_bytes), (12, 0));
    source.write(&engine, addr(3), &content(3, 1)).unwrap();
    check_pages(&engine, &source, 3..4, 1);
    let stats = engine.stats();
    assert_eq!((stats.gauges.zero_mapped_pages, stats.gauges.resident_pages), (11, 1));
    engine.check_invariants();
}

#[test]
fn large_folios_go_out_and_come_back_whole() {
    let config = EngineConfig { folio_order: 4, ..config(256) };
    let (engine, source) = setup(config, 4096);
    for page in 0..4096 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let mut buf = vec![0u8; PAGE];
    for page in 0..4096 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 1), "page {page}");
    }
    let stats = engine.stats();
    assert!(stats.per_order.swpout[4] > 200, "64 KiB page-outs: {:?}", stats.per_order.swpout);
    assert!(stats.per_order.swpin[4] > 200, "64 KiB page-ins: {:?}", stats.per_order.swpin);
    engine.check_invariants();
}

#[test]
fn removed_pages_read_as_zero_and_free_their_slots() {
    let (engine, source) = setup(config(32), 256);
    for page in 0..256 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    source.drop_range(addr(0), 128 * PAGE as u64);
    engine.remove(addr(0), 128 * PAGE as u64);
    engine.check_invariants();
    let mut buf = vec![1u8; PAGE];
    for page in 0..128 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert!(buf.iter().all(|b| *b == 0), "removed page {page} reads zero");
    }
    for page in 128..256 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 1), "kept page {page}");
    }
    engine.check_invariants();
}

#[test]
fn a_take_that_must_retry_keeps_the_page() {
    let (engine, source) = setup(config(32), 64);
    for page in 0..16 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    source.inject_take_retries(3);
    let out = engine.pageout(addr(0), 16 * PAGE as u64).unwrap();
    assert_eq!(out, 13, "three page-outs were refused by the source");
    assert_eq!(engine.stats().counters.pageout_retry, 3);
    engine.check_invariants();
    let mut buf = vec![0u8; PAGE];
    for page in 0..16 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 1));
    }
}

/// The handler's resync (uffd's `Reader::resync`) drops a resident entry whose page the
/// kernel no longer has (the program dropped it unseen). A page-out's page is missing from
/// the program too: asked outside the page-table lock, the question was answered about a
/// page the reclaimer had taken out meanwhile (a take the program's touch had undone, then
/// retaken at once), the resync dropped its swap entry, and the page read back as zeros: a
/// cc1 under `uswap bench build --quick --budget 44M` died on the NULL its line table then
/// held (SIGSEGV at address 0). `Engine::drop_if_missing` asks under the lock, and only of
/// a resident entry.
#[test]
fn a_resync_racing_a_page_out_keeps_the_page() {
    let mm = engine::region::MmId::DEFAULT;
    let (engine, source) = setup(config(32), 64);
    for page in 0..16 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    // The reclaimer won the race: page 3 is out when the resync asks, and missing from
    // the program, as a page-out's page is.
    assert!(engine.pageout(addr(3), PAGE as u64).unwrap() >= 1);
    assert!(!engine.drop_if_missing(mm, addr(3), || true), "a swapped page is kept");
    // A resident page the kernel still has is kept; one it lost is dropped and reads as
    // zeros, as the program's drop says.
    assert!(!engine.drop_if_missing(mm, addr(6), || false));
    source.drop_range(addr(5), PAGE as u64);
    assert!(engine.drop_if_missing(mm, addr(5), || true));
    engine.check_invariants();
    let mut buf = vec![1u8; PAGE];
    for page in 0..16 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        if page == 5 {
            assert!(buf.iter().all(|b| *b == 0), "the dropped page reads as zeros");
        } else {
            assert_eq!(buf, content(page, 1), "page {page}");
        }
    }
    engine.check_invariants();
}

/// A walk through memory leaves its pages on the inactive tail in address order, and
/// reclaim takes them out in runs (one take, so one TLB flush through userfaultfd); a run
/// the source refuses is undone whole. Every page reads back.
#[test]
fn neighbours_go_out_in_runs_and_a_refused_run_keeps_its_pages() {
    let (engine, source) = setup(EngineConfig { folio_order: 0, ..config(64) }, 1024);
    for page in 0..512 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let c = engine.stats().counters;
    assert!(c.pageout_runs > 0, "no run in a sequential fill");
    assert!(
        c.pageout_run_pages * 2 > c.pswpout,
        "{} of {} pages went out in runs",
        c.pageout_run_pages,
        c.pswpout
    );
    assert!(c.pageout_run_pages >= 2 * c.pageout_runs, "a run has two pages at least");
    engine.check_invariants();
    source.inject_take_retries(3);
    for page in 512..1024 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let after = engine.stats().counters;
    assert_eq!(after.pageout_retry - c.pageout_retry, 3, "three takes were refused");
    engine.check_invariants();
    check_pages(&engine, &source, 0..1024, 1);
    engine.check_invariants();
}

/// Pages faulted in a scattered order leave the inactive tail in no address order; their
/// cold neighbours go out with them, in runs, and every page reads back.
#[test]
fn cold_neighbours_of_scattered_victims_go_out_in_runs() {
    // Half the pages fit: a victim's neighbours are often resident, as at 1 GiB under 256
    // MiB (a fifth there).
    let pages = 512;
    let source = MemorySource::new(common::BASE, pages).without_access_bits();
    let (engine, source) =
        setup_with(source, EngineConfig { folio_order: 0, ..config(256) }, pages);
    // 301 is odd: page (i * 301) % 512 visits every page, neighbours far apart in time.
    let scattered = |i: u64| (i * 301) % pages;
    for round in 1..=3 {
        for i in 0..pages {
            let page = scattered(i);
            source.write(&engine, addr(page), &content(page, round)).unwrap();
        }
    }
    let c = engine.stats().counters;
    eprintln!("{} of {} pages out in {} runs", c.pageout_run_pages, c.pswpout, c.pageout_runs);
    assert!(c.pswpout > pages, "pages went out: {}", c.pswpout);
    assert!(
        c.pageout_run_pages * 4 > c.pswpout,
        "{} of {} pages went out in runs though the tail was in no address order",
        c.pageout_run_pages,
        c.pswpout
    );
    engine.check_invariants();
    check_pages(&engine, &source, 0..pages, 3);
    engine.check_invariants();
}

#[test]
fn bad_input_is_refused_with_a_clear_error() {
    let tiny = EngineConfig { budget_bytes: 8192, folio_order: 4, ..config(1) };
    let error =
        engine::Engine::new(tiny, std::sync::Arc::new(engine::mem_source::MemorySource::new(0, 1)));
    assert!(
        matches!(error, Err(Error::Config(ref m)) if m.contains("smaller than one folio")),
        "{error:?}"
    );
    let unordered = EngineConfig {
        watermarks: Some(Watermarks {
            min_bytes: 3 << 20,
            low_bytes: 1 << 20,
            high_bytes: 4 << 20,
        }),
        ..config(4096)
    };
    let error = engine::Engine::new(
        unordered,
        std::sync::Arc::new(engine::mem_source::MemorySource::new(0, 1)),
    );
    assert!(
        matches!(error, Err(Error::Config(ref m)) if m.contains("watermarks out of order")),
        "{error:?}"
    );
    let (engine, _source) = setup(config(64), 16);
    let outside = engine.handle_fault(0x1000, false);
    assert_eq!(outside, Err(Error::OutsideRegions { addr: 0x1000 }));
    assert!(engine.add_region(common::BASE + 4096, 4096).is_err(), "overlap refused");
    engine.check_invariants();
}

#[test]
fn a_forked_child_reads_its_parents_evicted_pages() {
    let (engine, parent) = setup(config(32), 256);
    for page in 0..256 {
        parent.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    assert!(engine.stats().gauges.swap_inuse_pages > 200);
    let child = std::sync::Arc::new(parent.fork());
    let child_source: std::sync::Arc<dyn engine::PageSource> = child.clone();
    let child_mm = engine.fork(engine::region::MmId::DEFAULT, child_source).unwrap();
    engine.check_invariants();
    // The parent moves on: new data everywhere, which frees its own swap entries.
    for page in 0..256 {
        parent.write(&engine, addr(page), &content(page, 2)).unwrap();
    }
    let mut buf = vec![0u8; PAGE];
    for page in 0..256 {
        child_read(&engine, &child, child_mm, page, &mut buf);
        assert_eq!(buf, content(page, 1), "child page {page} sees the data at the fork");
    }
    for page in 0..256 {
        parent.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 2), "parent page {page}");
    }
    engine.check_invariants();
    engine.exit_mm(child_mm);
    engine.check_invariants();
    assert!(engine.stats().counters.fork_dup > 200);
}

/// The child's accesses fault into the engine through the child's address space.
fn child_read(
    engine: &engine::Engine,
    child: &engine::mem_source::MemorySource,
    mm: engine::region::MmId,
    page: u64,
    buf: &mut [u8],
) {
    for _ in 0..10 {
        if child.read_present(addr(page), buf) {
            return;
        }
        engine.handle_fault_in(mm, addr(page), false).unwrap();
    }
    panic!("child page {page} never became present");
}

/// Pages in the pool come back in place (the memory source fills the pages straight from
/// the pool: no folio buffer): a forked child sharing the parent's pool entries reads them
/// after the parent paged its own copies in and moved on, and a corrupted pool object
/// poisons its page, never maps wrong data.
#[test]
fn pool_pages_come_back_in_place_for_parent_and_child_and_corruption_poisons() {
    let pool = engine::config::ZswapSettings { max_pool_percent: 50, ..Default::default() };
    let (engine, parent) = setup(EngineConfig { zswap: Some(pool), ..config(1024) }, 1024);
    for page in 0..1024 {
        parent.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    engine.pageout(addr(0), 1024 * PAGE as u64).unwrap();
    let child = std::sync::Arc::new(parent.fork());
    let child_source: std::sync::Arc<dyn engine::PageSource> = child.clone();
    let child_mm = engine.fork(engine::region::MmId::DEFAULT, child_source).unwrap();
    let mut buf = vec![0u8; PAGE];
    let zswpin = engine.stats().counters.zswpin;
    for page in 0..1024 {
        parent.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 1), "parent page {page}");
        parent.write(&engine, addr(page), &content(page, 2)).unwrap();
    }
    assert!(engine.stats().counters.zswpin > zswpin + 50, "{}", engine.stats().to_vmstat());
    engine.check_invariants();
    for page in 0..1024 {
        child_read(&engine, &child, child_mm, page, &mut buf);
        assert_eq!(buf, content(page, 1), "child page {page} sees the data at the fork");
    }
    engine.exit_mm(child_mm);
    engine.check_invariants();
    // A bit flip in the pool: the page is poisoned, its neighbours are intact.
    let mm = engine::region::MmId::DEFAULT;
    let hit = (0..1024).rev().find(|&page| {
        engine
            .corrupt_pool_page(mm, addr(page), |object| object.iter_mut().for_each(|b| *b ^= 0x5a))
    });
    let hit = hit.expect("some page is in the pool");
    let error = parent.read(&engine, addr(hit), &mut buf).unwrap_err();
    assert!(matches!(error, engine::mem_source::AccessError::Poisoned { .. }), "{error:?}");
    for page in (0..1024).filter(|&p| p != hit) {
        parent.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 2), "parent page {page}");
    }
    assert!(engine.stats().counters.swpin_error > 0);
    engine.check_invariants();
}

/// A pool beside the budget (zram's way): the budget charges the resident pages and the
/// pool's metadata, not its pages of compressed data, so it holds more pages resident than
/// with a pool that is a share of the budget (charged whole). Data comes back either way.
#[test]
fn a_pool_beside_the_budget_is_not_charged_to_it() {
    // Large enough that the pool's fixed tables and LRU chunks are a small part of it.
    let (budget_pages, pages) = (2048, 8192);
    let run = |separate_bytes: Option<u64>| {
        let settings = engine::config::ZswapSettings { separate_bytes, ..Default::default() };
        let (engine, source) =
            setup(EngineConfig { zswap: Some(settings), ..config(budget_pages) }, pages);
        for page in 0..pages {
            source.write(&engine, addr(page), &content(page, 1)).unwrap();
        }
        let stats = engine.stats();
        let g = &stats.gauges;
        let budget = budget_pages * PAGE as u64;
        assert!(g.used_bytes <= budget, "used {}", g.used_bytes);
        assert!(g.used_bytes_peak <= budget, "peak {}", g.used_bytes_peak);
        assert!(g.pool_bytes > 0, "{}", stats.to_vmstat());
        // The charge, exactly (a quiescent engine): the pool's data pages are out of it
        // when beside, and they are what a caller setting the outside charge from the
        // resident set must leave out.
        let beside = engine.beside_bytes();
        if separate_bytes.is_some() {
            assert!(beside > 0 && beside < g.pool_bytes, "{beside} of {}", g.pool_bytes);
        } else {
            assert_eq!(beside, 0);
        }
        let resident = g.resident_pages * PAGE as u64;
        assert_eq!(g.used_bytes, resident + g.swapcache_bytes + g.pool_bytes - beside);
        // `uswap run`'s outside charge from a resident set holding all that and 1 MiB
        // more: the 1 MiB, not the pool's pages too.
        assert_eq!(engine.charge_outside_from_rss(g.used_bytes + beside + (1 << 20)), 1 << 20);
        assert_eq!(engine.outside_charge(), 1 << 20);
        engine.set_outside_charge(0);
        let mut buf = vec![0u8; PAGE];
        for page in 0..pages {
            source.read(&engine, addr(page), &mut buf).unwrap();
            assert_eq!(buf, content(page, 1), "page {page}");
        }
        engine.check_invariants();
        stats
    };
    let beside = run(Some(64 << 20));
    let share = run(None);
    // Beside, the pool took every page out (64 MiB is room for all 8192).
    assert_eq!(beside.counters.pswpout, 0, "{}", beside.to_vmstat());
    // A share (20% of the budget) is charged whole: it leaves fewer pages resident.
    assert!(
        share.gauges.resident_pages + 64 < beside.gauges.resident_pages,
        "share {} beside {}",
        share.gauges.resident_pages,
        beside.gauges.resident_pages
    );
}

/// 1024 pages written through a 64-page budget by a source without access bits.
fn written_without_access_bits() -> (engine::Engine, std::sync::Arc<MemorySource>) {
    let source = MemorySource::new(common::BASE, 1024).without_access_bits();
    let (engine, source) = setup_with(source, config(64), 1024);
    for page in 0..1024 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    (engine, source)
}

/// Reads `page` and checks it holds what [`written_without_access_bits`] wrote.
fn read_checked(engine: &engine::Engine, source: &MemorySource, page: u64) {
    let mut buf = vec![0u8; PAGE];
    source.read(engine, addr(page), &mut buf).unwrap();
    assert_eq!(buf, content(page, 1), "page {page}");
}

/// Refaults activate without access bits. Under userfaultfd reclaim sees no access to a
/// resident page, so none is activated by scanning and the active list stays empty; a
/// page that comes back within a resident set's worth of evictions must still start
/// active (its refault distance measured against the whole LRU, not the empty active
/// list), or reclaim is first in, first out and a hot page goes as soon as a cold one.
#[test]
fn quick_refaults_activate_without_access_bits() {
    let (engine, source) = written_without_access_bits();
    // Eight hot pages read in turn, a cold page between each two: without access bits a hot
    // page is evicted when it reaches the tail, and refaults a few evictions later.
    for round in 0..40 {
        for hot in 0..8 {
            read_checked(&engine, &source, hot);
            read_checked(&engine, &source, 100 + round * 8 + hot);
        }
    }
    engine.check_invariants();
    let c = engine.stats().counters;
    assert_eq!(c.pgactivate, 0, "nothing is activated by scanning without access bits");
    assert!(c.workingset_refault_anon > 0, "{}", engine.stats().to_vmstat());
    assert!(c.workingset_activate_anon > 0, "{}", engine.stats().to_vmstat());
}

/// Thrashing is told from learning (`--budget auto` raises the budget for the one only).
/// Without access bits the engine learns that a page is used when it comes back after an
/// eviction: that first refault is not thrashing, however soon it comes. A page that came
/// back (activated) and is pushed out again keeps its workingset mark through its
/// deactivation, so its next refault is: `workingset_restore_anon`, which the fault
/// handler reads around a fault ([`engine::Engine::thrash_refaults`]).
#[test]
fn a_used_page_pushed_out_again_thrashes_and_a_first_refault_does_not() {
    let (engine, source) = written_without_access_bits();
    // Each page read once, long after its eviction: learning only.
    for page in 100..400 {
        read_checked(&engine, &source, page);
    }
    assert_eq!(engine.thrash_refaults(), 0, "{}", engine.stats().to_vmstat());
    // A hot set of 32 pages, more than half the LRU, read in turn with a cold page after
    // every second one: activated at their first refault, deactivated as the active list
    // outgrows the inactive one, evicted and back again. (A hot set under half the LRU
    // stays active: nothing thrashes.)
    for round in 0..40 {
        for hot in 0..32 {
            read_checked(&engine, &source, hot);
            if hot % 2 == 0 {
                read_checked(&engine, &source, 400 + (round * 32 + hot) % 600);
            }
        }
    }
    engine.check_invariants();
    let c = engine.stats().counters;
    assert!(engine.thrash_refaults() > 0, "{}", engine.stats().to_vmstat());
    assert_eq!(engine.thrash_refaults(), c.workingset_restore_anon);
    assert!(c.workingset_restore_anon < c.workingset_refault_anon);
    assert!(c.pgdeactivate > 0);
}

/// The write-bits-only source (the access_bits example's model of userfaultfd's
/// asynchronous write-protect mode): a read of a resident page sets no referenced bit, a
/// write does, and a fault sets one only when asked to.
#[test]
fn write_bits_only_see_writes_and_optionally_faults() {
    use engine::PageSource;
    for fault_references in [false, true] {
        let source = std::sync::Arc::new(
            engine::mem_source::MemorySource::new(common::BASE, 64)
                .with_write_bits_only(fault_references),
        );
        let dyn_source: std::sync::Arc<dyn PageSource> = source.clone();
        let engine = engine::Engine::new(config(64), dyn_source).unwrap();
        engine.add_region(common::BASE, 64 * PAGE as u64).unwrap();
        let mut buf = vec![0u8; PAGE];
        let bit = |page| source.test_and_clear_referenced(addr(page), PAGE as u64);
        source.read(&engine, addr(0), &mut buf).unwrap(); // faults the page in
        assert_eq!(bit(0), Some(fault_references), "a fault");
        source.read(&engine, addr(0), &mut buf).unwrap();
        assert_eq!(bit(0), Some(false), "a read of a resident page");
        source.write(&engine, addr(0), &content(0, 1)).unwrap();
        assert_eq!(bit(0), Some(true), "a write");
        assert_eq!(bit(0), Some(false), "cleared by the test");
    }
}

#[test]
fn pages_go_through_the_pool_and_come_back() {
    // 4 MiB budget: a pool limit of 819 KiB, well above the pool's own fixed structures.
    let (engine, source) = setup(pool_config(1024), 4096);
    for page in 0..4096 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let stats = engine.stats();
    assert!(stats.counters.zswpout > 500, "pool stores: {}", stats.counters.zswpout);
    assert!(stats.gauges.pool_bytes > 0 && stats.gauges.pool_stored_pages > 0);
    assert!(stats.gauges.used_bytes <= 1024 * PAGE as u64, "pool counts in the budget");
    engine.check_invariants();
    // Newest first: the pool holds the most recently evicted pages (the oldest were written
    // back to the device when it filled).
    let mut buf = vec![0u8; PAGE];
    for page in (0..4096).rev() {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 1), "page {page}");
    }
    let stats = engine.stats();
    assert!(stats.counters.zswpin > 300, "pool loads: {}", stats.to_vmstat());
    engine.check_invariants();
}

#[test]
fn a_full_pool_spills_to_the_device_and_writes_back() {
    // Incompressible pages fill the 20% pool fast; the rest goes to the device, and the
    // reclaimer writes the pool's coldest entries back until it is under its threshold.
    let (engine, source) = setup(pool_config(256), 2048);
    let noise = |page: u64| -> Vec<u8> {
        let mut x = page.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..PAGE)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    for page in 0..2048 {
        source.write(&engine, addr(page), &noise(page)).unwrap();
    }
    engine.reclaim();
    let stats = engine.stats();
    let pool = stats.pool.clone().expect("a pool");
    assert!(pool.pool_limit_hit > 0, "the limit was hit");
    assert!(stats.counters.pswpout > 0, "pages spilled to the device");
    assert!(stats.counters.zswpwb > 0 && pool.written_back_pages > 0, "writeback ran");
    assert!(!pool.is_full, "writeback brought the pool under its threshold");
    let mut buf = vec![0u8; PAGE];
    for page in 0..2048 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, noise(page), "page {page}");
    }
    engine.check_invariants();
}

/// A mapping that grew in place is two adjacent regions; mremap moves it whole, and the
/// REMAP spans both.
// postmortem: `uswap run` of a Python program that built a 1M-element list segfaulted: the
// list's pointer array (a malloc'd mmap chunk) grew in place (the shim adopted the growth
// as a second region), then moved; the REMAP was refused ("source spans regions") and the
// moved swapped pages read as zeros at their new address.
/// What a page-out hook was told.
#[derive(Debug, Default)]
struct PageOuts {
    seen: std::sync::Mutex<Vec<(engine::region::MmId, u64, u64, engine::Tier)>>,
}

impl engine::hooks::PageOutHook for PageOuts {
    fn paged_out(&self, mm: engine::region::MmId, addr: u64, len: u64, tier: engine::Tier) {
        self.seen.lock().unwrap().push((mm, addr, len, tier));
    }
}

/// The page-out hook hears of every folio that went, with its address, length and tier,
/// and of nothing else: its totals per tier are the engine's own counters.
#[test]
fn the_page_out_hook_reports_every_folio_that_went() {
    let config = EngineConfig { folio_order: 2, ..pool_config(256) };
    let (engine, source) = setup(config, 2048);
    let hook = std::sync::Arc::new(PageOuts::default());
    engine.set_page_out_hook(hook.clone()).unwrap();
    let again = engine.set_page_out_hook(hook.clone());
    assert!(matches!(again, Err(Error::Config(_))), "{again:?}");
    for page in 0..2048 {
        let version = u64::from(page % 8 != 0); // some zero pages
        source.write(&engine, addr(page), &content(page, version)).unwrap();
    }
    let asked = engine.pageout(addr(2048 - 64), 64 * PAGE as u64).unwrap(); // the resident tail
    let seen = hook.seen.lock().unwrap().clone();
    let stats = engine.stats();
    let bytes_to = |tier| seen.iter().filter(|s| s.3 == tier).map(|s| s.2).sum::<u64>();
    let pages_out: u64 = stats.per_order.swpout.iter().enumerate().map(|(o, n)| n << o).sum();
    assert_eq!(seen.iter().map(|s| s.2).sum::<u64>(), pages_out * PAGE as u64);
    // The zero pages of a folio the pool took are zero-map bits, not pool entries.
    let (zero, pool) = (stats.counters.swpout_zero, stats.counters.zswpout);
    assert_eq!(
        bytes_to(engine::Tier::Zero) + bytes_to(engine::Tier::Pool),
        (zero + pool) * PAGE as u64
    );
    assert!(bytes_to(engine::Tier::Zero) < zero * PAGE as u64, "no zero page in a pool folio");
    assert_eq!(stats.gauges.zeromap_pages, zero);
    assert!(pages_out > 1500 && asked > 0, "{pages_out} pages out, {asked} asked");
    for &(mm, at, len, _) in &seen {
        assert_eq!(mm, engine::region::MmId::DEFAULT);
        assert!(len.is_power_of_two() && len <= 4 * PAGE as u64 && at % len == 0, "{at:#x}+{len}");
        assert!(at >= addr(0) && at + len <= addr(2048), "{at:#x}");
    }
    engine.check_invariants();
}

/// The background reclaimer moves itself to `reclaimer_cpus` as it starts (read back from
/// /proc, by its thread name); CPUs it may not use are counted, and it runs on.
#[test]
fn the_reclaimer_runs_on_the_cpus_it_is_given() {
    let reclaimer_affinity = || -> Option<String> {
        let tasks = std::fs::read_dir("/proc/self/task").ok()?;
        tasks.flatten().find_map(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            (comm.trim() == "uswap-kswapd").then_some(())?;
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:"))?;
            Some(line.split_whitespace().nth(1)?.to_string())
        })
    };
    let start = |cpus: Vec<usize>| {
        let config = EngineConfig { background_reclaim: true, reclaimer_cpus: cpus, ..config(64) };
        let (engine, _source) = setup(config, 64);
        // The thread places itself as it starts: wait for it (seconds at most).
        for _ in 0..2000 {
            let placed = engine.stats().counters.reclaimer_cpus_failed > 0
                || reclaimer_affinity().is_some_and(|cpus| cpus == "0");
            if placed {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        engine
    };
    let engine = start(vec![0]);
    assert_eq!(reclaimer_affinity().as_deref(), Some("0"));
    assert_eq!(engine.stats().counters.reclaimer_cpus_failed, 0);
    drop(engine);
    // CPU 1023 is no CPU here: refused, counted, and the thread goes on.
    let engine = start(vec![1023]);
    assert_eq!(engine.stats().counters.reclaimer_cpus_failed, 1);
    assert!(reclaimer_affinity().is_some(), "the reclaimer runs on");
}

/// A budget lowered while pages are resident is reclaimed down to (by the background
/// reclaimer, or the next faults without one); raised, the pages stay: the API a broker
/// and `--budget auto` move budget with. Every page reads back its data.
#[test]
fn a_budget_changed_while_running_is_kept_and_data_comes_back() {
    let config = EngineConfig { background_reclaim: true, ..pool_config(1024) };
    let (engine, source) = setup(config, 2048);
    for page in 0..1024 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let before = engine.stats().gauges.used_bytes;
    assert!(before > 512 * PAGE as u64, "filled: {before}");
    engine.set_budget(256 * PAGE as u64).unwrap();
    assert_eq!(engine.budget_bytes(), 256 * PAGE as u64);
    // The reclaimer was woken: wait (bounded) for it to bring the charge under the budget.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while engine.charged_bytes() > 256 * PAGE as u64 {
        assert!(std::time::Instant::now() < deadline, "still {} charged", engine.charged_bytes());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let pool = engine.stats().pool.expect("a pool");
    assert_eq!(pool.max_pool_bytes, 256 * PAGE as u64 / 5, "the pool's share follows");
    check_pages(&engine, &source, 0..1024, 1);
    assert!(engine.stats().gauges.used_bytes_peak > 256 * PAGE as u64);
    engine.set_budget(4096 * PAGE as u64).unwrap();
    let out = engine.stats().counters.pswpout;
    for page in 1024..2048 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    assert_eq!(engine.stats().counters.pswpout, out, "room for all: nothing went out");
    check_pages(&engine, &source, 0..2048, 1);
    assert_eq!(engine.stats().counters.budget_changes, 2);
    engine.check_invariants();
}

#[test]
fn a_budget_below_one_folio_is_refused_and_changes_nothing() {
    let config = EngineConfig { folio_order: 4, ..pool_config(1024) };
    let (engine, _source) = setup(config, 64);
    let error = engine.set_budget(8 * PAGE as u64).unwrap_err();
    assert!(error.to_string().contains("smaller than one folio"), "{error}");
    assert_eq!(engine.budget_bytes(), 1024 * PAGE as u64);
    assert_eq!(engine.stats().counters.budget_changes, 0);
}
