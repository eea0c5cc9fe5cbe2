//! Kernel behaviour: non-cooperative events (REMOVE, UNMAP, REMAP), how they hold the
//! thread that caused them, and how they make resolving ioctls say EAGAIN until read.

mod common;

use common::{pattern, uffd_or_skip, Handler};
use std::sync::Arc;
use std::time::Duration;
use uffd::{
    Advice, CopyMode, Error, Event, Features, Mapping, Range, RangeEvent, RegisterMode, PAGE_SIZE,
};

/// Fact: MADV_DONTNEED on a registered range sends REMOVE for exactly that range; the
/// range stays registered and its pages are missing again (the next touch faults).
#[test]
fn madv_dontneed_sends_remove_and_the_range_faults_again() {
    let Some(uffd) = uffd_or_skip(Features::EVENT_REMOVE) else { return };
    let uffd = Arc::new(uffd);
    let region = Mapping::anonymous(4 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    uffd.copy(region.page_addr(1), &pattern(1), CopyMode::NONE).unwrap();
    let handler = Handler::spawn(
        Arc::clone(&uffd),
        Box::new(|u, e| {
            let Event::PageFault { addr, .. } = *e else { unreachable!() };
            u.copy(addr, &pattern(77), CopyMode::NONE).unwrap();
        }),
    );
    region.advise(PAGE_SIZE, 2 * PAGE_SIZE, Advice::DontNeed).unwrap();
    let Event::Range(RangeEvent::Remove { start, end }) = handler.next() else {
        panic!("expected REMOVE")
    };
    assert_eq!((start, end), (region.page_addr(1), region.page_addr(3)));
    let mut page = vec![0u8; PAGE_SIZE];
    region.load(PAGE_SIZE, &mut page);
    assert!(page == pattern(77), "the zapped page faulted and was served again");
    assert!(matches!(handler.next(), Event::PageFault { addr, .. } if addr == region.page_addr(1)));
}

/// Fact: munmap of a registered range sends UNMAP with the range.
#[test]
fn munmap_sends_unmap() {
    let Some(uffd) = uffd_or_skip(Features::EVENT_UNMAP) else { return };
    let uffd = Arc::new(uffd);
    let handler = Handler::forward(Arc::clone(&uffd));
    let region = Mapping::anonymous(3 * PAGE_SIZE).unwrap();
    let range = region.range();
    uffd.register(range, RegisterMode::MISSING).unwrap();
    drop(region);
    let Event::Range(RangeEvent::Unmap { start, end }) = handler.next() else {
        panic!("expected UNMAP")
    };
    assert_eq!((start, end), (range.start(), range.end()));
}

/// Fact: mremap of a registered range sends REMAP (from, to, len), then UNMAP of the old
/// range; the registration moves with the pages, so a missing page at the new address
/// faults there.
#[test]
fn mremap_sends_remap_and_the_registration_follows() {
    let features = Features::EVENT_REMAP | Features::EVENT_UNMAP;
    let Some(uffd) = uffd_or_skip(features) else { return };
    let uffd = Arc::new(uffd);
    // The handler is made first so that it outlives the mapping even when an assertion
    // fails (unmapping a registered range waits for its UNMAP to be read).
    let handler = Handler::spawn(
        Arc::clone(&uffd),
        Box::new(|u, e| {
            let Event::PageFault { addr, .. } = *e else { unreachable!() };
            u.copy(addr, &pattern(2), CopyMode::NONE).unwrap();
        }),
    );
    let mut region = Mapping::anonymous(4 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    uffd.copy(region.page_addr(0), &pattern(0), CopyMode::NONE).unwrap();
    let from = region.addr();
    let target = Mapping::reserve(4 * PAGE_SIZE).unwrap();
    let to = target.addr();
    region.move_to(target).unwrap();
    let Event::Range(RangeEvent::Remap { from: f, to: t, len_bytes }) = handler.next() else {
        panic!("expected REMAP")
    };
    assert_eq!((f, t, len_bytes), (from, to, 4 * PAGE_SIZE));
    let mut page = vec![0u8; PAGE_SIZE];
    region.load(0, &mut page);
    assert!(page == pattern(0), "the present page moved with its data");
    region.load(2 * PAGE_SIZE, &mut page);
    assert!(page == pattern(2), "a missing page at the new address faulted and was served");
    // The old range's removal follows as UNMAP: apply REMAP first, and the UNMAP of the old
    // addresses then finds nothing left to drop.
    let Event::Range(RangeEvent::Unmap { start, end }) = handler.next() else {
        panic!("expected UNMAP")
    };
    assert_eq!((start, end), (from, from + 4 * PAGE_SIZE));
    let e = handler.next();
    assert!(matches!(e, Event::PageFault { addr, .. } if addr == to + 2 * PAGE_SIZE), "{e:?}");
    // Unmapping a range registered with EVENT_UNMAP waits for the event to be read: the
    // handler must outlive the mapping (dropping it first would hang this thread).
    let range = region.range();
    drop(region);
    let Event::Range(RangeEvent::Unmap { start, end }) = handler.next() else {
        panic!("expected UNMAP")
    };
    assert_eq!((start, end), (range.start(), range.end()));
}

/// Fact: a non-cooperative event holds the thread that caused it until the event is read,
/// and while it is unread every resolving ioctl fails with EAGAIN (nothing done).
#[test]
fn an_unread_event_blocks_its_cause_and_makes_resolving_ioctls_eagain() {
    let Some(uffd) = uffd_or_skip(Features::EVENT_REMOVE) else { return };
    let region = Arc::new(Mapping::anonymous(4 * PAGE_SIZE).unwrap());
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let zapper = {
        let region = Arc::clone(&region);
        std::thread::spawn(move || region.advise(0, PAGE_SIZE, Advice::DontNeed).unwrap())
    };
    assert!(uffd.wait_readable(Some(Duration::from_secs(10))).unwrap(), "REMOVE pending");
    std::thread::sleep(Duration::from_millis(50));
    assert!(!zapper.is_finished(), "madvise waits for its REMOVE to be read");
    let e = uffd.copy(region.page_addr(2), &pattern(2), CopyMode::NONE).unwrap_err();
    assert!(matches!(e, Error::Again { done_bytes: 0, .. }), "{e:?}");
    let e = uffd.zeropage(Range::page_of(region.page_addr(3)), uffd::Wake::Wake).unwrap_err();
    assert!(matches!(e, Error::Again { done_bytes: 0, .. }), "{e:?}");
    let mut events = Vec::new();
    assert_eq!(uffd.read_events(&mut events, 8).unwrap(), 1);
    assert!(matches!(events[0], Event::Range(RangeEvent::Remove { .. })));
    zapper.join().unwrap();
    uffd.copy(region.page_addr(2), &pattern(2), CopyMode::NONE).unwrap();
}

/// Fact: mmap(MAP_FIXED) over a registered range replaces it with a new, unregistered
/// mapping: an UNMAP event is sent, and the new pages read as zero without a fault.
#[test]
fn mmap_fixed_over_a_registered_range_unregisters_it() {
    let Some(uffd) = uffd_or_skip(Features::EVENT_UNMAP) else { return };
    let uffd = Arc::new(uffd);
    let handler = Handler::forward(Arc::clone(&uffd)); // panics on any fault
    let region = Mapping::anonymous(4 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let at = region.page_addr(1);
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED;
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: the target lies inside `region`, which this test owns and accesses only through
    // its methods; the new mapping keeps the range mapped read-write.
    let got = unsafe { libc::mmap(at as *mut _, 2 * PAGE_SIZE, prot, flags, -1, 0) };
    assert_eq!(got as usize, at);
    let Event::Range(RangeEvent::Unmap { start, end }) = handler.next() else {
        panic!("expected UNMAP")
    };
    assert_eq!((start, end), (at, at + 2 * PAGE_SIZE));
    assert_eq!(region.load_u64(PAGE_SIZE), 0, "no fault: the range is no longer registered");
    assert_eq!(region.load_u64(2 * PAGE_SIZE), 0);
}
