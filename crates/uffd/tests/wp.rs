//! Kernel behaviour: write protection, synchronous (eviction by write-protect + copy +
//! MADV_DONTNEED) and asynchronous (dirty tracking with WP_ASYNC + PAGEMAP_SCAN).

mod common;

use common::{pattern, uffd_or_skip, Handler};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use uffd::{
    Advice, Categories, CopyMode, Event, Features, Mapping, PageMap, Range, RangeEvent,
    RegisterMode, ScanArgs, Wake, PAGE_SIZE,
};

/// Fact: a write to a page mapped with COPY_MODE_WP is reported as a WP fault (write and wp
/// flags set) and waits; clearing the protection resolves it; reads never fault.
#[test]
fn a_write_to_a_protected_page_waits_for_unprotect() {
    let Some(uffd) = uffd_or_skip(Features::PAGEFAULT_FLAG_WP) else { return };
    let uffd = Arc::new(uffd);
    let handler = Handler::spawn(
        Arc::clone(&uffd),
        Box::new(|u, e| {
            let Event::PageFault { addr, wp: true, .. } = *e else { panic!("{e:?}") };
            u.writeprotect(Range::page_of(addr), false, Wake::Wake).unwrap();
        }),
    );
    let region = Mapping::anonymous(2 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING | RegisterMode::WP).unwrap();
    uffd.copy(region.addr(), &pattern(4), CopyMode::WP).unwrap();
    assert_eq!(region.load_u64(8), u64::from_ne_bytes(pattern(4)[8..16].try_into().unwrap()));
    region.store_u64(8, 99);
    assert_eq!(region.load_u64(8), 99);
    let Event::PageFault { addr, write, wp, .. } = handler.next() else { panic!() };
    assert_eq!((addr, write, wp), (region.addr(), true, true));
}

/// Fact: eviction by write-protect, copy, MADV_DONTNEED works under a concurrent writer (no
/// write lost), and the drop is a hole like a MOVE. But with EVENT_REMOVE enabled (needed to
/// see the program's own madvise) each eviction's MADV_DONTNEED also sends REMOVE, and the
/// evicting thread waits until the reader takes it: the engine must tell its own REMOVEs
/// from the program's, and must not evict from the reading thread.
#[test]
fn wp_copy_drop_evicts_without_losing_writes_and_sends_remove() {
    let features = Features::PAGEFAULT_FLAG_WP | Features::EVENT_REMOVE;
    let Some(uffd) = uffd_or_skip(features) else { return };
    let uffd = Arc::new(uffd);
    // Faults (WP or missing) are resolved by the evictor's copy-back, which wakes the range.
    let handler = Handler::spawn(Arc::clone(&uffd), Box::new(|_, _| {}));
    let region = Arc::new(Mapping::anonymous(PAGE_SIZE).unwrap());
    uffd.register(region.range(), RegisterMode::MISSING | RegisterMode::WP).unwrap();
    uffd.copy(region.addr(), &[0u8; PAGE_SIZE], CopyMode::NONE).unwrap();
    // The writer goes on until the evictor has cycled MIN_CYCLES times (bounded by 20 s).
    const MIN_CYCLES: u64 = 200;
    let done = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicU64::new(0));
    let writer = {
        let (region, done, cycles) = (Arc::clone(&region), Arc::clone(&done), Arc::clone(&cycles));
        std::thread::spawn(move || {
            let word = region.atomic_u64(0);
            let started = std::time::Instant::now();
            let mut i = 0;
            while cycles.load(Ordering::Relaxed) < MIN_CYCLES
                && started.elapsed() < std::time::Duration::from_secs(20)
            {
                i += 1;
                word.store(i, Ordering::SeqCst);
                assert_eq!(word.load(Ordering::SeqCst), i, "write {i} read back");
            }
            done.store(true, Ordering::SeqCst);
            i
        })
    };
    let page = Range::page_of(region.addr());
    let mut copy = vec![0u8; PAGE_SIZE];
    let mut seen = 0u64;
    let evict_and_restore = |copy: &mut Vec<u8>| -> u64 {
        uffd.writeprotect(page, true, Wake::Wake).unwrap();
        region.load(0, copy);
        region.advise(0, PAGE_SIZE, Advice::DontNeed).unwrap();
        let value = u64::from_ne_bytes(copy[..8].try_into().unwrap());
        uffd.copy(page.start(), copy, CopyMode::NONE).unwrap();
        value
    };
    while !done.load(Ordering::SeqCst) {
        let value = evict_and_restore(&mut copy);
        assert!(value >= seen, "went backwards: {value} after {seen}");
        seen = value;
        cycles.fetch_add(1, Ordering::Relaxed);
    }
    let writes = writer.join().unwrap();
    assert_eq!(evict_and_restore(&mut copy), writes, "the last write survived");
    let removes = {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let events: Vec<Event> = handler.events.try_iter().collect();
        events.iter().filter(|e| matches!(e, Event::Range(RangeEvent::Remove { .. }))).count()
    };
    let cycles = cycles.load(Ordering::Relaxed);
    eprintln!("{writes} writes, {cycles} evictions, {removes} REMOVE events");
    assert!(cycles >= MIN_CYCLES, "{cycles} evictions");
    assert_eq!(removes as u64, cycles + 1, "each eviction's MADV_DONTNEED came back as REMOVE");
}

/// Fact: WP_ASYNC + PAGEMAP_SCAN(WRITTEN, WP_MATCHING) reports exactly the pages written
/// since the previous scan, and re-protects them in the same walk; with WP_ASYNC the kernel
/// resolves the write faults itself (no message reaches the handler).
#[test]
fn wp_async_scan_reports_exactly_the_pages_written_since_the_last_scan() {
    let Some(uffd) = uffd_or_skip(Features::WP_ASYNC) else { return };
    let uffd = Arc::new(uffd);
    let _handler = Handler::forward(Arc::clone(&uffd)); // panics on any message
    let region = Mapping::anonymous(16 * PAGE_SIZE).unwrap();
    for i in 0..16 {
        region.store_u64(i * PAGE_SIZE, 1);
    }
    uffd.register(region.range(), RegisterMode::WP).unwrap();
    uffd.writeprotect(region.range(), true, Wake::Wake).unwrap();
    let pagemap = PageMap::open_self().unwrap();
    let written = |pagemap: &PageMap| -> Vec<(usize, usize)> {
        let args = ScanArgs {
            mask: Categories::WRITTEN,
            report: Categories::WRITTEN,
            write_protect: true,
            check_wp_async: true,
            ..ScanArgs::default()
        };
        let runs = pagemap.scan_all(region.range(), &args).unwrap();
        let page = |a: usize| (a - region.addr()) / PAGE_SIZE;
        runs.iter().map(|r| (page(r.start), page(r.end))).collect()
    };
    assert_eq!(written(&pagemap), [], "nothing written since protecting");
    for i in [3, 7, 8, 12, 12] {
        region.store_u64(i * PAGE_SIZE + 16, 2);
    }
    assert_eq!(written(&pagemap), [(3, 4), (7, 9), (12, 13)]);
    assert_eq!(written(&pagemap), [], "the scan re-protected what it reported");
    region.store_u64(PAGE_SIZE, 3);
    assert_eq!(region.load_u64(3 * PAGE_SIZE), 1, "reads do not count");
    assert_eq!(written(&pagemap), [(1, 2)]);
    let allowed = ScanArgs {
        mask: Categories::WPALLOWED,
        report: Categories::WPALLOWED,
        ..ScanArgs::default()
    };
    let runs = pagemap.scan_all(region.range(), &allowed).unwrap();
    assert_eq!((runs.len(), runs[0].start, runs[0].end), (1, region.addr(), region.range().end()));
}
