//! The engine's regions as the program changes them: remaps within and across regions,
//! pages adopted where a range was already populated, and mappings made again inside a
//! region's holes, whose seams no folio or page-out run crosses.

mod common;

use common::{addr, content, setup, PAGE};
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

#[test]
fn remap_moves_resident_and_swapped_pages() {
    let config = EngineConfig { folio_order: 2, ..config(64) };
    let source = std::sync::Arc::new(engine::mem_source::MemorySource::new(common::BASE, 1024));
    let dyn_source: std::sync::Arc<dyn engine::PageSource> = source.clone();
    let engine = engine::Engine::new(config, dyn_source).unwrap();
    engine.add_region(common::BASE, 512 * PAGE as u64).unwrap();
    for page in 0..512 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    // Move pages 101..301 to 601..801: a one-page shift that breaks every 4-page folio.
    let (from, to, len) = (addr(101), addr(601), 200 * PAGE as u64);
    source.remap(from, to, len);
    engine.remap(engine::region::MmId::DEFAULT, from, to, len).unwrap();
    engine.check_invariants();
    let mut buf = vec![0u8; PAGE];
    for page in 0..200 {
        source.read(&engine, addr(601 + page), &mut buf).unwrap();
        assert_eq!(buf, content(101 + page, 1), "moved page {page}");
    }
    for page in (0..101).chain(301..512) {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 1), "page {page} stayed");
    }
    engine.check_invariants();
}

/// A range adopted with pages already mapped (what an LD_PRELOAD shim does with a heap):
/// the listed pages are charged, evicted and served back like any resident page; the
/// others are first touches; a run outside the region is refused.
#[test]
fn a_region_adopted_with_present_pages_pages_them_out_and_back() {
    use engine::mem_source::MemorySource;
    use engine::{Engine, PageSource};
    use std::sync::Arc;
    let source = Arc::new(MemorySource::new(common::BASE, 16));
    // Pages 2..6 were written before the range was managed: mapped, unknown to the engine.
    for page in 2..6 {
        source.map(addr(page), &content(page, 3)).unwrap();
    }
    let dyn_source: Arc<dyn PageSource> = source.clone();
    let engine = Engine::new(config(64), dyn_source).unwrap();
    let len = 16 * PAGE as u64;
    let e = engine.add_region_populated(common::BASE, len, &[(14, 4)]).unwrap_err();
    assert!(matches!(e, Error::BadRegion { .. }), "{e}");
    engine.add_region_populated(common::BASE, len, &[(2, 4)]).unwrap();
    assert_eq!(engine.stats().gauges.resident_pages, 4);
    engine.check_invariants();
    assert_eq!(engine.pageout(common::BASE, len).unwrap(), 4, "the adopted pages go out");
    assert_eq!(source.data_pages(), 0);
    let mut buf = vec![0u8; PAGE];
    for page in 0..16 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        let version = if (2..6).contains(&page) { 3 } else { 0 };
        assert_eq!(buf, content(page, version), "page {page}");
    }
    engine.check_invariants();
}

/// mremap inside one region (the LD_PRELOAD shim manages address windows far wider than
/// the mappings in them): data and swap entries move, the source reads as untouched, and a
/// move onto itself is refused.
#[test]
fn remap_within_one_region_moves_pages() {
    let config = EngineConfig { folio_order: 2, ..config(64) };
    let (engine, source) = setup(config, 1024);
    for page in 0..400 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    let mm = engine::region::MmId::DEFAULT;
    let e = engine.remap(mm, addr(10), addr(20), 100 * PAGE as u64).unwrap_err();
    assert!(matches!(e, Error::BadRegion { .. }), "{e}");
    // Pages 101..301 to 601..801, one page off folio alignment.
    let (from, to, len) = (addr(101), addr(601), 200 * PAGE as u64);
    source.remap(from, to, len);
    engine.remap(mm, from, to, len).unwrap();
    engine.check_invariants();
    let mut buf = vec![0u8; PAGE];
    for page in 0..200 {
        source.read(&engine, addr(601 + page), &mut buf).unwrap();
        assert!(buf == content(101 + page, 1), "moved page {page}");
    }
    for page in (0..101).chain(301..400) {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert!(buf == content(page, 1), "page {page} stayed");
    }
    // The old range is a hole: a fault there is not the engine's (the program's access
    // would be SIGSEGV), until a mapping there is adopted.
    let e = source.read(&engine, addr(150), &mut buf).unwrap_err();
    let outside =
        matches!(e, engine::mem_source::AccessError::Engine(Error::OutsideRegions { .. }));
    assert!(outside, "the old range is no longer the engine's: {e:?}");
    engine.add_region(addr(101), 200 * PAGE as u64).unwrap();
    source.read(&engine, addr(150), &mut buf).unwrap();
    assert!(buf == content(150, 0), "mapped again, the old range reads as untouched");
    engine.check_invariants();
}

/// Pages mapped before a range of an existing region was managed are adopted in place;
/// pages the engine already tracks are left alone; `swapped_ranges` lists what went out.
#[test]
fn present_pages_are_adopted_into_an_existing_region() {
    use engine::PageSource;
    let (engine, source) = setup(config(64), 64);
    source.write(&engine, addr(3), &content(3, 2)).unwrap(); // tracked by the engine
    for page in 8..12 {
        source.map(addr(page), &content(page, 3)).unwrap(); // mapped behind its back
    }
    let len = 16 * PAGE as u64;
    let e = engine.adopt_populated(addr(0), len, &[(14, 4)]).unwrap_err();
    assert!(matches!(e, Error::BadRegion { .. }), "{e}");
    let e = engine.adopt_populated(addr(60), len, &[]).unwrap_err();
    assert!(matches!(e, Error::OutsideRegions { .. }), "{e}");
    assert_eq!(engine.adopt_populated(addr(0), len, &[(3, 1), (8, 4)]).unwrap(), 4);
    assert_eq!(engine.stats().gauges.resident_pages, 5);
    engine.check_invariants();
    engine.pageout(addr(0), len).unwrap();
    let mm = engine::region::MmId::DEFAULT;
    assert_eq!(engine.swapped_ranges(mm), vec![(addr(3), 1), (addr(8), 4)]);
    let end = engine.region_ranges(mm)[0].1;
    assert_eq!(engine.region_ranges(mm), vec![(addr(0), end)]);
    assert!(engine.region_ranges(engine::region::MmId(7)).is_empty());
    let mut buf = vec![0u8; PAGE];
    for page in 0..16 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        let version = match page {
            3 => 2,
            8..12 => 3,
            _ => 0,
        };
        assert!(buf == content(page, version), "page {page}");
    }
    engine.check_invariants();
}

#[test]
fn remap_spanning_adjacent_regions_moves_both() {
    let (engine, source) = setup(config(64), 256);
    engine.unmap(addr(0), 256 * PAGE as u64); // forgets the region
    engine.add_region(addr(0), 16 * PAGE as u64).unwrap();
    engine.add_region(addr(16), 16 * PAGE as u64).unwrap();
    assert_eq!(engine.region_ranges(engine::region::MmId::DEFAULT).len(), 2);
    for page in 0..32 {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    engine.pageout(addr(0), 32 * PAGE as u64).unwrap();
    let (from, to, len) = (addr(8), addr(100), 16 * PAGE as u64);
    source.remap(from, to, len);
    let mm = engine::region::MmId::DEFAULT;
    engine.remap(mm, from, to, len).unwrap();
    engine.check_invariants();
    let mut buf = vec![0u8; PAGE];
    for page in 0..16 {
        source.read(&engine, addr(100 + page), &mut buf).unwrap();
        assert!(buf == content(8 + page, 1), "moved page {page}");
    }
    engine.check_invariants();
}

/// 64 KiB folios on every first touch, under 256 pages.
fn large_folios_always() -> EngineConfig {
    let large_folios = engine::LargeFolios::Always;
    EngineConfig { folio_order: 4, large_folios, ..config(256) }
}

/// A region the program unmapped part of lives on around the hole; a first touch next to
/// the hole maps one page, not a folio reaching into it (through userfaultfd a resolving
/// ioctl across a mapping's end fails as if the range were gone, and the access that asked
/// faulted for ever: `mmap_race.c`'s MAP_FIXED over a shorter range, then the tail
/// unmapped).
#[test]
fn no_folio_is_mapped_across_an_unmapped_part_of_a_region() {
    let (engine, source) = setup(large_folios_always(), 64);
    engine.unmap(addr(56), 8 * PAGE as u64);
    source.write(&engine, addr(48), &content(48, 1)).unwrap();
    assert_eq!(source.data_pages(), 1, "one page, not the folio of pages 48-63");
    source.write(&engine, addr(32), &content(32, 1)).unwrap();
    assert_eq!(source.data_pages(), 17, "a whole folio where no hole is");
    let mut buf = vec![0u8; PAGE];
    source.read(&engine, addr(48), &mut buf).unwrap();
    assert_eq!(buf, content(48, 1));
    engine.check_invariants();
}

/// A range the program maps again inside an unmapped part of a region (a `munmap` of its
/// tail, then an `mmap` the kernel places there) is managed again, by that region: the
/// LD_PRELOAD shim finds it through `region_layout` and adopts it with
/// `add_region_populated`, which fills the hole.
#[test]
fn a_range_mapped_again_in_a_hole_is_managed_by_its_region() {
    use engine::PageSource;
    let (engine, source) = setup(large_folios_always(), 64);
    let mm = engine::region::MmId::DEFAULT;
    let whole = engine.region_ranges(mm);
    engine.unmap(addr(40), 8 * PAGE as u64);
    engine.unmap(addr(56), 8 * PAGE as u64);
    let (live, holes) = engine.region_layout(mm);
    assert_eq!(live, vec![(addr(0), addr(40)), (addr(48), addr(56))]);
    assert_eq!(holes, vec![(addr(40), addr(48)), (addr(56), addr(64))]);
    assert_eq!(engine.region_ranges(mm), live);
    let e = engine.add_region(addr(44), 8 * PAGE as u64).unwrap_err();
    assert!(matches!(e, Error::BadRegion { .. }), "across a hole and a live part: {e}");
    let first = engine.add_region_populated(addr(56), 8 * PAGE as u64, &[]).unwrap();
    source.split_at(addr(56)); // the kernel's new mapping
    let filled = (vec![(addr(0), addr(40)), (addr(48), addr(64))], vec![(addr(40), addr(48))]);
    assert_eq!(engine.region_layout(mm), filled);
    // Page 42 of the new mapping written before it was adopted: present, adopted.
    source.map(addr(42), &content(42, 3)).unwrap();
    let again = engine.add_region_populated(addr(40), 8 * PAGE as u64, &[(2, 1)]).unwrap();
    source.split_at(addr(40));
    source.split_at(addr(48));
    assert_eq!(first, again, "both holes filled by the region that had them");
    assert_eq!(engine.region_layout(mm), (whole, vec![]), "the region whole again");
    assert_eq!(engine.stats().gauges.resident_pages, 1, "the present page adopted, charged");
    assert_eq!(engine.pageout(addr(0), 64 * PAGE as u64).unwrap(), 1, "and paged out");
    // No hole left, but each range mapped again is a mapping of its own: no folio crosses
    // its edges (pages 40, 48 and 56), one inside a mapping is whole.
    source.write(&engine, addr(48), &content(48, 1)).unwrap();
    assert_eq!(source.data_pages(), 1, "one page: the folio of pages 48-63 crosses 56");
    source.write(&engine, addr(16), &content(16, 1)).unwrap();
    assert_eq!(source.data_pages(), 17, "the folio of pages 16-31, in the first mapping");
    let mut buf = vec![0u8; PAGE];
    for (page, version) in [(42, 3), (40, 0), (48, 1), (16, 1)] {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, version), "page {page}");
    }
    assert_eq!(source.refused_across(), 0, "nothing mapped across two mappings");
    engine.check_invariants();
}

/// Cold neighbours paged out as one run (one move) stop at a seam: pages on both sides
/// of the edge of a range mapped again inside a region are two mappings, and a move
/// across them is refused (EINVAL), so the run would go back untaken every time.
#[test]
fn page_out_runs_stop_at_a_seam() {
    let config = EngineConfig { folio_order: 0, ..config(64) };
    let (engine, source) = setup(config, 512);
    // Pages 96..160 unmapped, then mapped again: a mapping of their own.
    engine.unmap(addr(96), 64 * PAGE as u64);
    engine.add_region(addr(96), 64 * PAGE as u64).unwrap();
    source.split_at(addr(96));
    source.split_at(addr(160));
    for round in 1..=2 {
        for page in 0..512 {
            source.write(&engine, addr(page), &content(page, round)).unwrap();
        }
    }
    let mut buf = vec![0u8; PAGE];
    for page in 0..512 {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert!(buf == content(page, 2), "page {page}");
    }
    let runs = engine.stats().counters.pageout_runs;
    assert!(runs > 0, "neighbours went out as runs");
    assert_eq!(source.refused_across(), 0, "no run and no folio across the seams ({runs} runs)");
    engine.check_invariants();
}
