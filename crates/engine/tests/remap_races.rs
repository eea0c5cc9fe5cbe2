//! mremap against reclaim, and mremap onto pages the engine still tracks.
//!
//! The races are made deterministic by the page source: reclaim asks it whether a folio was
//! referenced after isolating the folio and with no lock held, which is exactly where the
//! background reclaimer meets the handler thread's REMAP in `uswap run`. [`RemapDuringReclaim`]
//! runs one planned remap at that moment, when reclaim tests a chosen address.

mod common;

use common::{addr, content, PAGE};
use engine::budget::Watermarks;
use engine::mem_source::MemorySource;
use engine::region::MmId;
use engine::{Engine, EngineConfig, Mapped, PageSource, SourceError, Taken};
use std::sync::{Arc, Mutex, OnceLock, Weak};

const MM: MmId = MmId::DEFAULT;

/// A remap planned for the moment reclaim tests `at` for references.
#[derive(Debug, Clone, Copy)]
struct Plan {
    at: u64,
    from: u64,
    to: u64,
    len: u64,
}

/// Simulated memory that runs a planned remap (memory and engine, as the kernel and its
/// REMAP event do) from inside reclaim's referenced test.
struct RemapDuringReclaim {
    memory: Arc<MemorySource>,
    engine: OnceLock<Weak<Engine>>,
    plan: Mutex<Option<Plan>>,
}

impl PageSource for RemapDuringReclaim {
    fn take_each(&self, addr: u64, dst: &mut [&mut [u8]]) -> Result<Taken, SourceError> {
        self.memory.take_each(addr, dst)
    }

    fn map(&self, addr: u64, data: &[u8]) -> Result<Mapped, SourceError> {
        self.memory.map(addr, data)
    }

    fn map_zero(&self, addr: u64, len: u64) -> Result<Mapped, SourceError> {
        self.memory.map_zero(addr, len)
    }

    fn poison(&self, addr: u64, len: u64) -> Result<(), SourceError> {
        self.memory.poison(addr, len)
    }

    fn wake(&self, addr: u64, len: u64) {
        self.memory.wake(addr, len);
    }

    fn test_and_clear_referenced(&self, addr: u64, len: u64) -> Option<bool> {
        let due = {
            let mut plan = self.plan.lock().unwrap();
            if plan.is_some_and(|p| p.at == addr) {
                plan.take()
            } else {
                None
            }
        };
        if let Some(Plan { from, to, len, .. }) = due {
            let engine = self.engine.get().and_then(Weak::upgrade).expect("engine alive");
            self.memory.remap(from, to, len);
            engine.remap(MM, from, to, len).expect("planned remap");
        }
        self.memory.test_and_clear_referenced(addr, len)
    }
}

/// An engine of `budget` pages whose reclaim runs while free budget is under `high` pages
/// (a few resident folios are enough to start it when `high` is most of the budget), over
/// 256 pages of memory and no region yet. No pool: page-outs go to the device.
fn engine(folio_order: u32, budget: u64, high: u64) -> (Arc<Engine>, Arc<RemapDuringReclaim>) {
    let page = PAGE as u64;
    let config = EngineConfig {
        budget_bytes: budget * page,
        watermarks: Some(Watermarks {
            min_bytes: page,
            low_bytes: 2 * page,
            high_bytes: high * page,
        }),
        folio_order,
        readahead_max_pages: 0,
        zswap: None,
        background_reclaim: false,
        ..EngineConfig::default()
    };
    let memory = Arc::new(MemorySource::new(common::BASE, 256));
    let source =
        Arc::new(RemapDuringReclaim { memory, engine: OnceLock::new(), plan: Mutex::new(None) });
    let dyn_source: Arc<dyn PageSource> = source.clone();
    let engine = Arc::new(Engine::new(config, dyn_source).unwrap());
    source.engine.set(Arc::downgrade(&engine)).unwrap();
    (engine, source)
}

fn write(engine: &Engine, source: &RemapDuringReclaim, pages: std::ops::Range<u64>) {
    for page in pages {
        source.memory.write(engine, addr(page), &content(page, 1)).unwrap();
    }
    // Accesses set referenced bits; clear them so reclaim does not give second chances.
    source.memory.test_and_clear_referenced(source.memory.base(), source.memory.len_bytes());
}

/// Reads `pages` (at `at + i`) and checks each holds `content(first + i, 1)`.
fn check_moved(engine: &Engine, source: &RemapDuringReclaim, at: u64, first: u64, n: u64) {
    let mut buf = vec![0u8; PAGE];
    for i in 0..n {
        source.memory.read(engine, addr(at + i), &mut buf).unwrap();
        assert!(buf == content(first + i, 1), "page {} (was {})", at + i, first + i);
    }
}

// postmortem: `uswap run --budget 256M -- python3` (1 GiB of bytes objects) panicked on the
// handler thread: "a resident entry has a live record" (move_entries' set_owner, in a
// remap). The list's pointer array, a whole region, had been moved by an earlier REMAP to a
// new region (the old one forgotten) while the background reclaimer held its folios
// isolated. Reclaim then looked the folio's region up by the owner it had copied at
// isolation, found no region, and freed the LRU record, though the page table at the new
// place still said Resident(id). The next remap of the array hit the dead record. Reclaim
// now reads where an isolated folio lives from its record (remap updates it under the PTL).
#[test]
fn reclaim_finds_a_folio_a_remap_moved_to_another_region() {
    let (engine, source) = engine(2, 16, 12);
    engine.add_region(addr(0), 8 * PAGE as u64).unwrap(); // A
    engine.add_region(addr(16), 4 * PAGE as u64).unwrap(); // B: one folio
    write(&engine, &source, 0..4);
    write(&engine, &source, 16..20);
    // A's folio is the coldest: reclaim tests it first, with B's folio isolated too.
    let len = 4 * PAGE as u64;
    *source.plan.lock().unwrap() = Some(Plan { at: addr(0), from: addr(16), to: addr(40), len });
    engine.reclaim();
    assert!(source.plan.lock().unwrap().is_none(), "the remap ran");
    engine.check_invariants();
    assert_eq!(engine.stats().counters.pageout_moved, 1, "B's folio was found where it went");
    // The array moves again (what panicked), then everything reads back.
    source.memory.remap(addr(40), addr(64), len);
    engine.remap(MM, addr(40), addr(64), len).unwrap();
    engine.check_invariants();
    check_moved(&engine, &source, 64, 16, 4);
    check_moved(&engine, &source, 0, 0, 4);
    engine.check_invariants();
}

// postmortem: found with the test above. A remap that moves a folio while reclaim is paging
// it out (after reclaim located it, before it took the PTL) makes the page-out find another
// entry at the folio's old place; it backed off without putting the folio back on a list,
// so the folio stayed isolated for good: never reclaimable again, `pageout` refused it, and
// `check_invariants` found "folios left isolated".
#[test]
fn a_folio_moved_during_its_page_out_goes_back_on_a_list() {
    let (engine, source) = engine(0, 16, 12);
    engine.add_region(addr(0), 16 * PAGE as u64).unwrap();
    write(&engine, &source, 0..8);
    // Page 2 moves (within its region) right when reclaim tests it.
    let plan = Plan { at: addr(2), from: addr(2), to: addr(10), len: PAGE as u64 };
    *source.plan.lock().unwrap() = Some(plan);
    engine.reclaim();
    assert!(source.plan.lock().unwrap().is_none(), "the remap ran");
    engine.check_invariants();
    assert_eq!(engine.stats().counters.pageout_moved, 1);
    assert_eq!(engine.pageout(addr(10), PAGE as u64).unwrap(), 1, "reclaimable again");
    check_moved(&engine, &source, 10, 2, 1);
    for page in [0, 1, 3, 4, 5, 6, 7] {
        check_moved(&engine, &source, page, page, 1);
    }
    engine.check_invariants();
}

// postmortem: with the race above fixed, a remap within one region still overwrote the
// entries at its destination (`PageTable::set` replaces silently): a resident folio's LRU
// record and charge, and a swapped folio's slot references, leaked. mremap replaces what
// the destination held (the kernel unmaps it first); the engine now releases it as a
// REMOVE would.
#[test]
fn remap_releases_what_its_destination_held() {
    let (engine, source) = engine(2, 64, 3);
    engine.add_region(addr(0), 64 * PAGE as u64).unwrap();
    write(&engine, &source, 0..8);
    write(&engine, &source, 16..24);
    assert_eq!(engine.pageout(addr(20), 4 * PAGE as u64).unwrap(), 4);
    // Pages 0..8 onto 16..24: a resident folio and a swapped one are replaced.
    let len = 8 * PAGE as u64;
    source.memory.remap(addr(0), addr(16), len);
    engine.remap(MM, addr(0), addr(16), len).unwrap();
    engine.check_invariants();
    assert_eq!(engine.stats().counters.remap_dest_released, 8);
    check_moved(&engine, &source, 16, 0, 8);
    engine.check_invariants();
}

// postmortem: a remap destination cutting a large folio (the destination's own edge inside
// it) panicked in the page-table store ("covered by a larger entry"): only the source's
// edges were split. The destination's edges are split now, so the pages outside keep
// their data.
#[test]
fn remap_onto_part_of_a_large_folio_keeps_the_rest() {
    let (engine, source) = engine(2, 64, 3);
    engine.add_region(addr(0), 64 * PAGE as u64).unwrap();
    engine.add_region(addr(128), 8 * PAGE as u64).unwrap(); // another region
    write(&engine, &source, 0..4);
    write(&engine, &source, 16..24);
    write(&engine, &source, 128..136);
    assert_eq!(engine.pageout(addr(20), 4 * PAGE as u64).unwrap(), 4);
    // Pages 0..4 onto 18..22: half of a resident folio, half of a swapped one.
    let len = 4 * PAGE as u64;
    source.memory.remap(addr(0), addr(18), len);
    engine.remap(MM, addr(0), addr(18), len).unwrap();
    engine.check_invariants();
    assert_eq!(engine.stats().counters.remap_dest_released, 4);
    check_moved(&engine, &source, 18, 0, 4);
    check_moved(&engine, &source, 16, 16, 2);
    check_moved(&engine, &source, 22, 22, 2);
    // From another region onto part of the first: the same. Pages 130..134 onto 9..13,
    // where the folio at 8..12 (untouched, so empty) and nothing else lies; then 128..130
    // onto 16..18 (resident again after the reads above).
    source.memory.remap(addr(130), addr(9), len);
    engine.remap(MM, addr(130), addr(9), len).unwrap();
    source.memory.remap(addr(128), addr(16), 2 * PAGE as u64);
    engine.remap(MM, addr(128), addr(16), 2 * PAGE as u64).unwrap();
    engine.check_invariants();
    check_moved(&engine, &source, 9, 130, 4);
    check_moved(&engine, &source, 16, 128, 2);
    check_moved(&engine, &source, 18, 0, 4);
    check_moved(&engine, &source, 22, 22, 2);
    check_moved(&engine, &source, 134, 134, 2);
    assert_eq!(engine.stats().counters.remap_dest_released, 6);
    engine.check_invariants();
}
