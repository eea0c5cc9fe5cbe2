//! The page source's exact semantics on real memory, without the engine: what `take`,
//! `map`, `map_zero` and `poison` do with present pages, holes and unread events
//! (src/source/mod.rs's table).

mod common;

use common::{pattern, uffd_or_skip};
use engine::{Mapped, PageSource, SourceError, Taken};
use frontend::UffdSource;
use std::sync::Arc;
use uffd::{Advice, CopyMode, Event, Features, Mapping, RangeEvent, RegisterMode, PAGE_SIZE};

const FOLIO: usize = 4;

/// A source over a fresh uffd, and a 4-page region registered with it.
fn setup(features: Features) -> Option<(Arc<uffd::Uffd>, UffdSource, Mapping)> {
    let uffd = Arc::new(uffd_or_skip(features | Features::MOVE | Features::POISON)?);
    let source = UffdSource::new(uffd.clone(), FOLIO).unwrap();
    let region = Mapping::anonymous(FOLIO * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    Some((uffd, source, region))
}

fn folio_of(seeds: [u64; FOLIO]) -> Vec<u8> {
    seeds.iter().flat_map(|&s| pattern(s)).collect()
}

fn page(region: &Mapping, i: usize) -> Vec<u8> {
    let mut out = vec![0u8; PAGE_SIZE];
    region.load(i * PAGE_SIZE, &mut out);
    out
}

#[test]
fn map_fills_the_missing_pages_and_keeps_the_present_ones() {
    let Some((uffd, source, region)) = setup(Features::NONE) else { return };
    // Page 2 is present with newer data (a racing writer): the map must not replace it.
    uffd.copy(region.page_addr(2), &pattern(99), CopyMode::NONE).unwrap();
    let data = folio_of([1, 2, 3, 4]);
    assert_eq!(source.map(region.addr() as u64, &data), Ok(Mapped::Done));
    for (i, seed) in [1, 2, 99, 4].into_iter().enumerate() {
        assert!(page(&region, i) == pattern(seed), "page {i}");
    }
    // Everything present now: nothing changes.
    assert_eq!(source.map(region.addr() as u64, &data), Ok(Mapped::AlreadyPresent));
    let stats = source.stats();
    assert_eq!((stats.map_pages, stats.map_present_pages), (3, 1 + FOLIO as u64));
    source.check_invariants();
}

#[test]
fn takes_are_drained_in_batches_and_lose_nothing() {
    let Some((_uffd, source, region)) = setup(Features::NONE) else { return };
    let addr = region.addr() as u64;
    let mut dst = vec![0u8; FOLIO * PAGE_SIZE];
    let rounds = 64u64;
    for round in 0..rounds {
        let data = folio_of([round, round + 1, round + 2, round + 3]);
        assert_eq!(source.map(addr, &data), Ok(Mapped::Done));
        assert_eq!(source.take(addr, &mut dst), Ok(Taken::All));
        assert!(dst == data, "round {round}: the take copied what was mapped");
        source.check_invariants();
    }
    // 256 pages taken: a drain per 32 pages a lane (plus, at most, one a lane for a run
    // split at the end of its staging), not one per take.
    let stats = source.stats();
    assert_eq!((stats.takes, stats.take_pages, stats.drain_failed), (rounds, 4 * rounds, 0));
    assert!(stats.drains >= 4 * rounds / 32 && stats.drains <= 4 * rounds / 32 + 8, "{stats:?}");
}

#[test]
fn map_zero_and_poison_continue_past_present_pages() {
    let Some((uffd, source, region)) = setup(Features::NONE) else { return };
    uffd.copy(region.page_addr(0), &pattern(5), CopyMode::NONE).unwrap();
    let len = (FOLIO * PAGE_SIZE) as u64;
    assert_eq!(source.map_zero(region.addr() as u64, 2 * PAGE_SIZE as u64), Ok(Mapped::Done));
    assert!(page(&region, 0) == pattern(5) && page(&region, 1) == vec![0; PAGE_SIZE]);
    assert_eq!(source.poison(region.addr() as u64, len), Ok(()));
    assert_eq!(source.stats().poisoned_pages, 2, "pages 2 and 3 poisoned, 0 and 1 kept");
    source.check_invariants();
}

#[test]
fn an_unread_event_makes_map_and_take_retry_with_nothing_done() {
    let Some((uffd, source, region)) = setup(Features::EVENT_REMOVE) else { return };
    let other = Mapping::anonymous(PAGE_SIZE).unwrap();
    uffd.register(other.range(), RegisterMode::MISSING).unwrap();
    uffd.copy(region.page_addr(3), &pattern(7), CopyMode::NONE).unwrap();
    // A REMOVE nobody reads yet: its cause waits, and mmap_changing is raised.
    let waiter = std::thread::spawn(move || {
        other.advise(0, PAGE_SIZE, Advice::DontNeed).unwrap();
        other
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    let data = folio_of([1, 2, 3, 4]);
    assert_eq!(source.map(region.addr() as u64, &data), Err(SourceError::Retry));
    let mut dst = vec![0u8; FOLIO * PAGE_SIZE];
    assert_eq!(source.take(region.addr() as u64, &mut dst), Err(SourceError::Retry));
    assert!(page(&region, 3) == pattern(7), "the take left the page where it was");
    let mut events = Vec::with_capacity(uffd::READ_BATCH);
    uffd.read_events(&mut events, uffd::READ_BATCH).unwrap();
    assert!(matches!(events[0], Event::Range(RangeEvent::Remove { .. })));
    drop(waiter.join().unwrap());
    // Read: both work now. The map skips page 3, the take finds it and the rest.
    assert_eq!(source.map(region.addr() as u64, &data), Ok(Mapped::Done));
    let taken = source.take(region.addr() as u64, &mut dst).unwrap();
    assert_eq!(taken, Taken::All);
    assert!(dst[..3 * PAGE_SIZE] == data[..3 * PAGE_SIZE] && dst[3 * PAGE_SIZE..] == pattern(7));
    source.check_invariants();
}

#[test]
fn take_reports_holes_as_zeros() {
    let Some((uffd, source, region)) = setup(Features::NONE) else { return };
    uffd.copy(region.page_addr(0), &pattern(1), CopyMode::NONE).unwrap();
    uffd.copy(region.page_addr(2), &pattern(3), CopyMode::NONE).unwrap();
    let mut dst = vec![0xffu8; FOLIO * PAGE_SIZE];
    assert_eq!(source.take(region.addr() as u64, &mut dst), Ok(Taken::Partial { holes: 2 }));
    assert!(dst[..PAGE_SIZE] == pattern(1) && dst[2 * PAGE_SIZE..3 * PAGE_SIZE] == pattern(3));
    assert!(dst[PAGE_SIZE..2 * PAGE_SIZE].iter().all(|&b| b == 0), "a hole reads as zeros");
    assert!(dst[3 * PAGE_SIZE..].iter().all(|&b| b == 0), "a hole reads as zeros");
    // The pages left: the region is all holes now (a COPY fills every page).
    assert_eq!(source.map(region.addr() as u64, &dst), Ok(Mapped::Done));
    assert_eq!(source.stats().take_holes, 2);
    source.check_invariants();
}

/// A zero page mapped write-protected: reads see zeros; a write faults (write-protect, not
/// missing), and goes through once `unprotect` lifts it. A take moves the written page out
/// like any other.
#[test]
fn a_protected_zero_page_faults_on_the_first_write_only() {
    let Some(uffd) = uffd_or_skip(Features::MOVE | Features::PAGEFAULT_FLAG_WP) else { return };
    let uffd = Arc::new(uffd);
    let source = UffdSource::new(uffd.clone(), FOLIO).unwrap().protecting_zero(true);
    assert!(source.protects_zero());
    assert_eq!(source.register_mode(), RegisterMode::MISSING | RegisterMode::WP);
    let region = Arc::new(Mapping::anonymous(FOLIO * PAGE_SIZE).unwrap());
    uffd.register(region.range(), source.register_mode()).unwrap();
    let addr = region.addr() as u64;
    assert_eq!(source.map_zero_protected(addr, 2 * PAGE_SIZE as u64), Ok(Mapped::Done));
    assert!(page(&region, 1) == vec![0; PAGE_SIZE], "a read does not fault");
    let writer = {
        let region = region.clone();
        std::thread::spawn(move || region.store(PAGE_SIZE, &pattern(3)))
    };
    let mut events = Vec::with_capacity(uffd::READ_BATCH);
    assert!(uffd.wait_readable(Some(std::time::Duration::from_secs(10))).unwrap());
    uffd.read_events(&mut events, uffd::READ_BATCH).unwrap();
    let Event::PageFault { addr: at, write, wp, .. } = events[0] else { panic!("{:?}", events[0]) };
    assert_eq!((at, write, wp), (region.page_addr(1), true, true));
    assert_eq!(source.unprotect(addr + PAGE_SIZE as u64, PAGE_SIZE as u64), Ok(()));
    writer.join().unwrap();
    assert!(page(&region, 1) == pattern(3) && page(&region, 0) == vec![0; PAGE_SIZE]);
    let mut dst = vec![0u8; PAGE_SIZE];
    assert_eq!(source.take(addr + PAGE_SIZE as u64, &mut dst), Ok(Taken::All));
    assert!(dst == pattern(3));
    let stats = source.stats();
    assert_eq!((stats.zero_protected_pages, stats.unprotected_pages), (2, 1));
    assert_eq!(stats.protect_failed, 0);
    // Over present pages nothing is mapped, so nothing is protected.
    assert_eq!(source.map_zero_protected(addr, PAGE_SIZE as u64), Ok(Mapped::AlreadyPresent));
    assert_eq!(source.stats().zero_protected_pages, 2);
    source.check_invariants();
}
