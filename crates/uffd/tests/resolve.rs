//! Kernel behaviour: resolving missing faults (COPY, ZEROPAGE, MOVE) and their errors, on
//! the running kernel. Each test states the fact it proves.

mod common;

use common::{pattern, uffd_or_skip, Handler};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use uffd::{
    Categories, CopyMode, Error, Event, Features, Mapping, MoveMode, PageMap, Range, RegisterMode,
    ScanArgs, Staging, Wake, PAGE_SIZE,
};

/// Which pages of `range` have all of `cats`, as page indices.
fn pages_with(range: Range, cats: Categories) -> Vec<usize> {
    let args = ScanArgs { mask: cats, report: cats, ..ScanArgs::default() };
    let runs = PageMap::open_self().unwrap().scan_all(range, &args).unwrap();
    runs.iter()
        .flat_map(|r| (r.start..r.end).step_by(PAGE_SIZE))
        .map(|a| (a - range.start()) / PAGE_SIZE)
        .collect()
}

#[test]
fn probe_reports_this_machine() {
    let Some(_) = uffd_or_skip(Features::NONE) else { return };
    let probe = uffd::probe().unwrap();
    eprintln!("probe: {}", probe.summary());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(probe.kernel_faults, "root traps kernel-mode faults: {probe:?}");
        probe.require_kernel_faults().unwrap();
    }
    if probe.running >= Some(uffd::KernelVersion::new(6, 8)) {
        probe.require(Features::MOVE | Features::WP_ASYNC | Features::POISON).unwrap();
        probe.require_pagemap_scan().unwrap();
    }
}

/// Fact: a read of a registered missing page waits for the handler; UFFDIO_COPY maps the
/// data and wakes the reader, which sees exactly the copied bytes.
#[test]
fn missing_fault_is_served_by_copy() {
    let Some(uffd) = uffd_or_skip(Features::NONE) else { return };
    let uffd = Arc::new(uffd);
    let region = Mapping::anonymous(4 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let base = region.addr();
    let handler = Handler::spawn(
        Arc::clone(&uffd),
        Box::new(move |u, e| {
            let Event::PageFault { addr, .. } = *e else { unreachable!() };
            let index = (addr - base) / PAGE_SIZE;
            u.copy(addr & !(PAGE_SIZE - 1), &pattern(index as u64), CopyMode::NONE).unwrap();
        }),
    );
    for index in [2usize, 0, 3, 1] {
        let mut page = vec![0u8; PAGE_SIZE];
        region.load(index * PAGE_SIZE, &mut page);
        assert_eq!(page, pattern(index as u64), "page {index}");
    }
    for expected in [2usize, 0, 3, 1] {
        let Event::PageFault { addr, write, wp, minor, .. } = handler.next() else { panic!() };
        assert_eq!(addr, base + expected * PAGE_SIZE);
        assert!(!write && !wp && !minor);
    }
}

/// Fact: UFFDIO_ZEROPAGE maps the shared zero page (PAGEMAP_SCAN says PFNZERO); a later
/// write to it is an ordinary copy-on-write fault that userfaultfd does not see.
#[test]
fn zeropage_maps_the_zero_page_and_writes_are_not_uffd_faults() {
    let Some(uffd) = uffd_or_skip(Features::NONE) else { return };
    let uffd = Arc::new(uffd);
    let region = Mapping::anonymous(8 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let handler = Handler::spawn(
        Arc::clone(&uffd),
        Box::new(|u, e| {
            let Event::PageFault { addr, .. } = *e else { unreachable!() };
            u.zeropage(Range::page_of(addr), Wake::Wake).unwrap();
        }),
    );
    for i in 0..8 {
        assert_eq!(region.load_u64(i * PAGE_SIZE + 64), 0);
    }
    let range = region.range();
    assert_eq!(pages_with(range, Categories::PFNZERO), (0..8).collect::<Vec<_>>());
    region.store_u64(5 * PAGE_SIZE, 7);
    assert_eq!(region.load_u64(5 * PAGE_SIZE), 7);
    assert_eq!(pages_with(range, Categories::PFNZERO), [0, 1, 2, 3, 4, 6, 7]);
    assert_eq!(pages_with(range, Categories::PRESENT).len(), 8);
    for _ in 0..8 {
        assert!(matches!(handler.next(), Event::PageFault { write: false, .. }));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let extra: Vec<_> = handler.events.try_iter().collect();
    assert!(extra.is_empty(), "the write was not a userfault: {extra:?}");
}

/// Fact: one UFFDIO_COPY maps 16 pages (64 KiB) at once; none of them faults afterwards.
#[test]
fn copy_of_64k_in_one_ioctl() {
    let Some(uffd) = uffd_or_skip(Features::NONE) else { return };
    let uffd = Arc::new(uffd);
    let region = Mapping::anonymous(16 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let _handler = Handler::forward(Arc::clone(&uffd)); // panics on any fault
    let data: Vec<u8> = (0..16).flat_map(pattern).collect();
    assert_eq!(uffd.copy(region.addr(), &data, CopyMode::NONE).unwrap(), 16 * PAGE_SIZE);
    assert_eq!(pages_with(region.range(), Categories::PRESENT), (0..16).collect::<Vec<_>>());
    let mut back = vec![0u8; 16 * PAGE_SIZE];
    region.load(0, &mut back);
    assert!(back == data, "the 64 KiB read back equal");
}

/// Fact: COPY onto a present page is EEXIST; a multi-page COPY that meets one stops there
/// with EAGAIN and the bytes done, and the retry at that offset names the EEXIST.
#[test]
fn copy_onto_a_present_page_is_eexist_and_stops_a_batch_with_eagain() {
    let Some(uffd) = uffd_or_skip(Features::NONE) else { return };
    let region = Mapping::anonymous(4 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let page = pattern(9);
    uffd.copy(region.page_addr(2), &page, CopyMode::NONE).unwrap();
    let four: Vec<u8> = (0..4).flat_map(pattern).collect();
    let e = uffd.copy(region.addr(), &four, CopyMode::NONE).unwrap_err();
    assert!(matches!(e, Error::Again { done_bytes, .. } if done_bytes == 2 * PAGE_SIZE), "{e:?}");
    let e = uffd.copy(region.page_addr(2), &four[2 * PAGE_SIZE..], CopyMode::NONE).unwrap_err();
    assert!(matches!(e, Error::Exists { done_bytes: 0, .. }), "{e:?}");
    uffd.copy(region.page_addr(3), &four[3 * PAGE_SIZE..], CopyMode::NONE).unwrap();
    let mut back = vec![0u8; PAGE_SIZE];
    region.load(2 * PAGE_SIZE, &mut back);
    assert!(back == page, "the present page kept its data");
}

/// Fact: MOVE takes a present page out of a region into staging (the region's page becomes
/// missing and the next touch faults), and MOVE puts it back, waking the faulting thread.
#[test]
fn move_takes_a_page_out_and_puts_it_back() {
    let Some(uffd) = uffd_or_skip(Features::MOVE) else { return };
    let uffd = Arc::new(uffd);
    let region = Mapping::anonymous(4 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let staging = Arc::new(Mutex::new(Staging::new(&uffd, 8).unwrap()));
    uffd.copy(region.page_addr(1), &pattern(1), CopyMode::NONE).unwrap();

    let run = staging.lock().unwrap().alloc_empty(1).unwrap();
    let moved = staging.lock().unwrap().move_out(&uffd, &region, PAGE_SIZE, run, MoveMode::NONE);
    assert_eq!(moved.unwrap(), PAGE_SIZE);
    assert_eq!(pages_with(region.range(), Categories::PRESENT), Vec::<usize>::new());
    let mut page = vec![0u8; PAGE_SIZE];
    staging.lock().unwrap().load(run.first, &mut page);
    assert!(page == pattern(1), "staging holds the moved page's data");
    let slot_range = Range::page_of(staging.lock().unwrap().addr(run.first));
    assert_eq!(pages_with(slot_range, Categories::PRESENT), [0]);

    let back = Arc::clone(&staging);
    let handler = Handler::spawn(
        Arc::clone(&uffd),
        Box::new(move |u, e| {
            let Event::PageFault { addr, .. } = *e else { unreachable!() };
            back.lock().unwrap().move_in(u, run, addr, MoveMode::NONE).unwrap();
        }),
    );
    region.load(PAGE_SIZE, &mut page);
    assert!(page == pattern(1), "the page came back with its data");
    assert!(matches!(handler.next(), Event::PageFault { addr, .. } if addr == region.page_addr(1)));
    let mut staging = staging.lock().unwrap();
    assert!(!staging.is_present(run.first));
    assert_eq!(pages_with(slot_range, Categories::PRESENT), Vec::<usize>::new());
    staging.free(run);
    staging.check_invariants();
    assert_eq!((staging.stats().moved_out_pages, staging.stats().moved_in_pages), (1, 1));
}

/// Fact: MOVE's strictness: a source hole is ENOENT (unless ALLOW_SRC_HOLES, which counts
/// it as moved), a populated destination is EEXIST, an unregistered destination is EINVAL.
#[test]
fn move_refuses_holes_populated_and_unregistered_destinations() {
    let Some(uffd) = uffd_or_skip(Features::MOVE) else { return };
    let region = Mapping::anonymous(4 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let src = Mapping::anonymous(2 * PAGE_SIZE).unwrap();
    let e = uffd.move_from(region.addr(), &src, 0, PAGE_SIZE, MoveMode::NONE).unwrap_err();
    assert!(matches!(e, Error::NoEntry { done_bytes: 0, .. }), "hole: {e:?}");
    let n = uffd.move_from(region.addr(), &src, 0, PAGE_SIZE, MoveMode::ALLOW_SRC_HOLES);
    assert_eq!(n.unwrap(), PAGE_SIZE, "a hole counts as moved");
    assert_eq!(pages_with(region.range(), Categories::PRESENT), Vec::<usize>::new());
    src.store_u64(0, 1);
    uffd.copy(region.page_addr(3), &pattern(3), CopyMode::NONE).unwrap();
    let e = uffd.move_from(region.page_addr(3), &src, 0, PAGE_SIZE, MoveMode::NONE).unwrap_err();
    assert!(matches!(e, Error::Exists { .. }), "populated destination: {e:?}");
    let other = Mapping::anonymous(PAGE_SIZE).unwrap();
    let e = uffd.move_from(other.addr(), &src, 0, PAGE_SIZE, MoveMode::NONE).unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "unregistered destination: {e:?}");
    assert_eq!(src.load_u64(0), 1, "failed moves leave the source alone");
}

/// Fact: MOVE is atomic against a concurrent writer. A writer hammers one page (and reads
/// each write back) while this thread moves the page out and back in, again and again. A
/// write lands before the move (and is in the moved page) or faults and waits for the
/// move-in; none is lost, none is read back wrong, values seen in staging only grow.
#[test]
fn a_writer_never_loses_a_write_while_its_page_is_moved() {
    let Some(uffd) = uffd_or_skip(Features::MOVE) else { return };
    let uffd = Arc::new(uffd);
    let region = Arc::new(Mapping::anonymous(PAGE_SIZE).unwrap());
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    uffd.copy(region.addr(), &[0u8; PAGE_SIZE], CopyMode::NONE).unwrap();
    let mut staging = Staging::new(&uffd, 1).unwrap();
    // Faults are resolved by the mover's move-in; the handler only drains and counts them.
    // It counts a lower bound: a fault the move-in wakes before the handler reads it leaves
    // the queue unread.
    let faults = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&faults);
    let handler = Handler::spawn(
        Arc::clone(&uffd),
        Box::new(move |_, _| {
            counted.fetch_add(1, Ordering::Relaxed);
        }),
    );
    // At least WRITES writes, and on until the writer has faulted MIN_FAULTS times on a
    // moved-out page (bounded by 20 s), so the wait path is exercised on every run.
    const WRITES: u64 = 200_000;
    const MIN_FAULTS: u64 = 50;
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (region, done, faults) = (Arc::clone(&region), Arc::clone(&done), Arc::clone(&faults));
        std::thread::spawn(move || {
            let (first, last) = (region.atomic_u64(0), region.atomic_u64(PAGE_SIZE - 8));
            let started = std::time::Instant::now();
            let mut i = 0;
            while i < WRITES
                || (faults.load(Ordering::Relaxed) < MIN_FAULTS
                    && started.elapsed() < std::time::Duration::from_secs(20))
            {
                i += 1;
                first.store(i, Ordering::SeqCst);
                last.store(i, Ordering::SeqCst);
                assert_eq!(first.load(Ordering::SeqCst), i, "write {i} read back");
            }
            done.store(true, Ordering::SeqCst);
            i
        })
    };
    let (mut seen, mut cycles) = (0u64, 0u64);
    let cycle = |staging: &mut Staging| -> (u64, u64) {
        let run = staging.alloc_empty(1).unwrap();
        staging.move_out(&uffd, &region, 0, run, MoveMode::NONE).unwrap();
        let pair = (staging.load_u64(run.first, 0), staging.load_u64(run.first, PAGE_SIZE - 8));
        // Hold the page out a little, as compression would, so the writer faults and waits.
        let held = std::time::Instant::now();
        while held.elapsed() < std::time::Duration::from_micros(20) {
            std::hint::spin_loop();
        }
        staging.move_in(&uffd, run, region.addr(), MoveMode::NONE).unwrap();
        staging.free(run);
        pair
    };
    while !done.load(Ordering::SeqCst) {
        let (first, last) = cycle(&mut staging);
        // The pair is written first-then-last, so a move between the two stores sees
        // first == last + 1; anything else is a lost or torn write.
        assert!(first == last || first == last + 1, "torn page: first {first} last {last}");
        assert!(first >= seen, "went backwards: {first} after {seen}");
        seen = first;
        cycles += 1;
    }
    let writes = writer.join().unwrap();
    assert_eq!(cycle(&mut staging), (writes, writes), "the last write is in the page");
    drop(handler);
    staging.check_invariants();
    let faults = faults.load(Ordering::Relaxed);
    eprintln!("{writes} writes, {cycles} move cycles, {faults} writer faults");
    assert!(faults >= MIN_FAULTS, "the writer faulted on moved-out pages ({faults} times)");
}

/// Fact: staging is registered WP-only: a store into an empty slot is an ordinary anonymous
/// fault (no uffd event, no handler needed), yet MOVE accepts staging as a destination.
#[test]
fn staging_slots_fault_normally_and_recycle() {
    let Some(uffd) = uffd_or_skip(Features::MOVE) else { return };
    let uffd = Arc::new(uffd);
    let _handler = Handler::forward(Arc::clone(&uffd)); // panics on any fault
    let mut staging = Staging::new(&uffd, 70).unwrap();
    let slot = staging.alloc_page().unwrap();
    staging.store(slot, &pattern(5));
    assert!(staging.is_present(slot));
    staging.free(slot_run(slot));
    // The freed slot keeps its page and is handed out again for the next page-in.
    assert_eq!(staging.alloc_page(), Some(slot));
    staging.free(slot_run(slot));
    assert_eq!(staging.trim().unwrap(), 1);
    assert_eq!(pages_with(staging.range(), Categories::PRESENT), Vec::<usize>::new());
    let run = staging.alloc_empty(66).unwrap();
    assert_eq!(staging.alloc_empty(5), None, "only 4 slots left");
    assert_eq!(staging.stats().alloc_refused, 1);
    staging.free(run);
    staging.check_invariants();
}

fn slot_run(first: uffd::SlotIndex) -> uffd::SlotRun {
    uffd::SlotRun { first, pages: 1 }
}

/// Fact: a range belongs to one uffd: registering it with a second one is EBUSY (so MISSING
/// handling, WP_ASYNC dirty tracking and MOVE eviction of a region share one uffd).
#[test]
fn a_range_is_registered_with_one_uffd_only() {
    let Some(first) = uffd_or_skip(Features::NONE) else { return };
    let second = uffd::Uffd::open(Features::NONE).unwrap();
    let region = Mapping::anonymous(2 * PAGE_SIZE).unwrap();
    first.register(region.range(), RegisterMode::MISSING).unwrap();
    let e = second.register(region.range(), RegisterMode::MISSING).unwrap_err();
    assert!(matches!(e, Error::Register { errno: uffd::Errno(libc::EBUSY), .. }), "{e:?}");
    first.unregister(region.range()).unwrap();
    second.register(region.range(), RegisterMode::MISSING).unwrap();
}

/// Fact: one uffd does all three at once: MISSING faults reach the handler, WP_ASYNC write
/// tracking reports written pages via PAGEMAP_SCAN, and MOVE evicts.
#[test]
fn one_uffd_serves_missing_faults_wp_async_tracking_and_move() {
    let Some(uffd) = uffd_or_skip(Features::WP_ASYNC | Features::MOVE) else { return };
    let region = Mapping::anonymous(4 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING | RegisterMode::WP).unwrap();
    let data: Vec<u8> = (0..4).flat_map(pattern).collect();
    uffd.copy(region.addr(), &data, CopyMode::NONE).unwrap();
    uffd.writeprotect(region.range(), true, Wake::Wake).unwrap();
    region.store_u64(2 * PAGE_SIZE, 1); // resolved by the kernel: no handler runs here
    let written = ScanArgs {
        mask: Categories::WRITTEN,
        report: Categories::WRITTEN,
        write_protect: true,
        ..ScanArgs::default()
    };
    let runs = PageMap::open_self().unwrap().scan_all(region.range(), &written).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].start, runs[0].end), (region.page_addr(2), region.page_addr(3)));
    let mut staging = Staging::new(&uffd, 1).unwrap();
    let run = staging.alloc_empty(1).unwrap();
    staging.move_out(&uffd, &region, 2 * PAGE_SIZE, run, MoveMode::NONE).unwrap();
    assert_eq!(staging.load_u64(run.first, 0), 1);
    assert_eq!(pages_with(region.range(), Categories::PRESENT), [0, 1, 3]);
}
