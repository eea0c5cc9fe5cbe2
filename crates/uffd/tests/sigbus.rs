//! Kernel behaviour in SIGBUS mode, and of poison markers, which also raise SIGBUS.
//!
//! One process-wide SIGBUS handler serves every test of this binary; each test arms its own
//! range, so they may run in parallel.

mod common;

use common::{pattern, uffd_or_skip};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;
use uffd::sigbus::{SigbusFault, BUS_ADRERR, BUS_MCEERR_AR};
use uffd::{
    Categories, Features, Mapping, PageMap, Range, RegisterMode, ScanArgs, SigbusResolver, Wake,
    PAGE_SIZE,
};

/// Fact: with UFFD_FEATURE_SIGBUS a missing fault raises SIGBUS (BUS_ADRERR) in the
/// faulting thread and queues no message; a handler that COPYs the page and returns lets
/// the access complete with the copied data, in any thread.
#[test]
fn sigbus_mode_resolves_in_the_faulting_thread() {
    let Some(uffd) = uffd_or_skip(Features::SIGBUS) else { return };
    let region = Mapping::anonymous(8 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let mirror = Mapping::anonymous(8 * PAGE_SIZE).unwrap();
    for i in 0..8 {
        mirror.store(i * PAGE_SIZE, &pattern(40 + i as u64));
    }
    let resolver = SigbusResolver::copy_from(&uffd, region.range(), &mirror).unwrap();
    let mut page = vec![0u8; PAGE_SIZE];
    for i in [0usize, 5, 7] {
        region.load(i * PAGE_SIZE, &mut page);
        assert!(page == pattern(40 + i as u64), "page {i} holds the mirror's data");
    }
    std::thread::scope(|s| {
        s.spawn(|| region.store_u64(2 * PAGE_SIZE, 1)); // a write fault, another thread
    });
    assert_eq!(region.load_u64(2 * PAGE_SIZE), 1);
    assert_eq!((resolver.resolved(), resolver.failed()), (4, 0));
    assert!(!uffd.wait_readable(Some(Duration::ZERO)).unwrap(), "no fault message is queued");
}

/// Fact: the zero-page resolver maps the shared zero page from the signal handler.
#[test]
fn sigbus_mode_zeropage() {
    let Some(uffd) = uffd_or_skip(Features::SIGBUS) else { return };
    let region = Mapping::anonymous(4 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let resolver = SigbusResolver::zeropage(&uffd, region.range()).unwrap();
    assert_eq!(region.load_u64(3 * PAGE_SIZE + 8), 0);
    assert_eq!(resolver.resolved(), 1);
    let args =
        ScanArgs { mask: Categories::PFNZERO, report: Categories::PFNZERO, ..ScanArgs::default() };
    let runs = PageMap::open_self().unwrap().scan_all(region.range(), &args).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].start, runs[0].end), (region.page_addr(3), region.range().end()));
}

static POISON_ADDR: AtomicUsize = AtomicUsize::new(0);
static POISON_CODE: AtomicI32 = AtomicI32::new(0);

/// Records the fault and replaces the poisoned page with a fresh anonymous one, so the
/// access can complete (async-signal-safe: atomics and one mmap).
fn record_and_repair(fault: &SigbusFault) -> bool {
    POISON_ADDR.store(fault.addr, Ordering::SeqCst);
    POISON_CODE.store(fault.code, Ordering::SeqCst);
    let page = fault.addr & !(PAGE_SIZE - 1);
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED;
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: the page lies in the test's own region (the hook is armed only there), which
    // is accessed only through Mapping methods; the new page keeps it mapped read-write.
    let got = unsafe { libc::mmap(page as *mut _, PAGE_SIZE, prot, flags, -1, 0) };
    got as usize == page
}

/// Fact: UFFDIO_POISON makes an access to the page raise SIGBUS. On this kernel (6.18) its
/// si_code is BUS_ADRERR, the same as a userfaultfd SIGBUS (older kernels said
/// BUS_MCEERR_AR): a SIGBUS-mode resolver must know from its own state which pages it
/// poisoned. POISON and ZEROPAGE refuse a poisoned page (EEXIST); COPY replaces the marker.
#[test]
fn poison_raises_sigbus_and_only_copy_replaces_it() {
    let Some(uffd) = uffd_or_skip(Features::POISON) else { return };
    let region = Mapping::anonymous(3 * PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let page = Range::page_of(region.page_addr(1));
    assert_eq!(uffd.poison(page, Wake::Wake).unwrap(), PAGE_SIZE);
    assert!(matches!(uffd.poison(page, Wake::Wake), Err(uffd::Error::Exists { .. })));
    assert!(matches!(uffd.zeropage(page, Wake::Wake), Err(uffd::Error::Exists { .. })));
    // SAFETY: `record_and_repair` is async-signal-safe (atomics, one mmap, no allocation).
    let hook = unsafe { SigbusResolver::hook(region.range(), record_and_repair) }.unwrap();
    assert_eq!(region.load_u64(PAGE_SIZE + 16), 0, "the repaired page reads as zero");
    assert_eq!(hook.resolved(), 1);
    assert_eq!(POISON_CODE.load(Ordering::SeqCst), BUS_ADRERR, "6.18: poison says BUS_ADRERR");
    assert_ne!(BUS_ADRERR, BUS_MCEERR_AR);
    assert_eq!(POISON_ADDR.load(Ordering::SeqCst) & !(PAGE_SIZE - 1), page.start());
    drop(hook);
    let other = Range::page_of(region.page_addr(2));
    uffd.poison(other, Wake::Wake).unwrap();
    assert_eq!(uffd.copy(other.start(), &pattern(3), uffd::CopyMode::NONE).unwrap(), PAGE_SIZE);
    let mut back = vec![0u8; PAGE_SIZE];
    region.load(2 * PAGE_SIZE, &mut back);
    assert!(back == pattern(3), "COPY replaced the poison marker");
}

/// The variable that turns the `#[ignore]`d child tests on (they are run by their parent
/// tests in a separate process, whose death by signal is the observation).
const CHILD: &str = "USWAP_SIGBUS_CHILD";

/// Runs the ignored test `name` of this binary in a child process; returns its signal.
fn child_signal(name: &str) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", name, "--test-threads=1"])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    status.signal()
}

/// Fact: a poisoned page kills an unprepared process with SIGBUS, and a SIGBUS-mode
/// ZEROPAGE resolver does not loop on it (ZEROPAGE says EEXIST, mincore says not resident,
/// so the handler gives up and the default action runs).
#[test]
fn poison_kills_even_under_a_zeropage_resolver() {
    if uffd_or_skip(Features::POISON | Features::SIGBUS).is_none() {
        return;
    }
    assert_eq!(child_signal("child_touches_poison_plain"), Some(libc::SIGBUS));
    assert_eq!(child_signal("child_touches_poison_under_resolver"), Some(libc::SIGBUS));
}

fn touch_poison(resolver: bool) {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let uffd = uffd::Uffd::open(Features::POISON | Features::SIGBUS).unwrap();
    let region = Mapping::anonymous(PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    uffd.poison(region.range(), Wake::Wake).unwrap();
    let _armed = resolver.then(|| SigbusResolver::zeropage(&uffd, region.range()).unwrap());
    region.load_u64(0); // dies here with SIGBUS
    std::process::exit(0);
}

#[test]
#[ignore = "run by poison_kills_even_under_a_zeropage_resolver in a child process"]
fn child_touches_poison_plain() {
    touch_poison(false);
}

#[test]
#[ignore = "run by poison_kills_even_under_a_zeropage_resolver in a child process"]
fn child_touches_poison_under_resolver() {
    touch_poison(true);
}

/// Fact: in SIGBUS mode a fault taken in kernel mode (read(2) into a missing page) raises
/// no signal: the syscall fails with EFAULT and consumes nothing (the pipe keeps its data).
#[test]
fn sigbus_mode_fails_a_syscall_into_a_missing_page_with_efault() {
    let Some(uffd) = uffd_or_skip(Features::SIGBUS) else { return };
    let region = Mapping::anonymous(PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let mirror = Mapping::anonymous(PAGE_SIZE).unwrap();
    let resolver = SigbusResolver::copy_from(&uffd, region.range(), &mirror).unwrap();
    let mut pipe = [0i32; 2];
    // SAFETY: `pipe` is two live ints for the new descriptors.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let message = *b"sixteen bytes!!!";
    // SAFETY: write(2) from a live 16-byte buffer to our pipe.
    assert_eq!(unsafe { libc::write(pipe[1], message.as_ptr().cast(), 16) }, 16);
    // SAFETY: the destination lies in `region`, a live mapping no Rust reference covers.
    let got = unsafe { libc::read(pipe[0], (region.addr() + 8) as *mut _, 16) };
    let errno = std::io::Error::last_os_error().raw_os_error();
    assert_eq!((got, errno), (-1, Some(libc::EFAULT)));
    assert_eq!((resolver.resolved(), resolver.failed()), (0, 0), "no SIGBUS was raised");
    let mut back = [0u8; 16];
    // SAFETY: read(2) into a live 16-byte buffer; then close our descriptors.
    unsafe {
        assert_eq!(libc::read(pipe[0], back.as_mut_ptr().cast(), 16), 16);
        libc::close(pipe[0]);
        libc::close(pipe[1]);
    }
    assert_eq!(back, message, "the failed read consumed nothing");
    assert_eq!(region.load_u64(8), 0, "a user access still resolves through SIGBUS");
    assert_eq!(resolver.resolved(), 1);
}
