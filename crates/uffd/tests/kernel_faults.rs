//! Kernel behaviour: faults taken in kernel mode (a system call that writes into a missing
//! page), which `uswap run` meets whenever an unmodified program read(2)s into its heap.
//!
//! | uffd | read(2) into a missing registered page |
//! |---|---|
//! | full (root, CAP_SYS_PTRACE, /dev/userfaultfd, sysctl) | faults, waits, is served, completes |
//! | `UFFD_USER_MODE_ONLY` | fails with EFAULT; no message |
//! | `UFFD_FEATURE_SIGBUS` | fails with EFAULT; no signal (tests/sigbus.rs) |

mod common;

use common::{builder_or_skip, pattern, uffd_or_skip, Handler};
use std::sync::Arc;
use std::time::Duration;
use uffd::{CopyMode, Event, Features, Mapping, RegisterMode, Uffd, PAGE_SIZE};

/// A pipe holding `data`; returns (read end, write end).
fn pipe_with(data: &[u8]) -> (i32, i32) {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is two live ints for the new descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: write(2) from a live buffer of `data.len()` bytes to our pipe.
    let wrote = unsafe { libc::write(fds[1], data.as_ptr().cast(), data.len()) };
    assert_eq!(wrote, data.len() as isize);
    (fds[0], fds[1])
}

/// read(2) of `len` bytes into `region` at `offset`; returns (result, errno).
fn read_into(fd: i32, region: &Mapping, offset: usize, len: usize) -> (isize, i32) {
    assert!(offset + len <= region.len_bytes());
    // SAFETY: the destination lies inside `region`, a live mapping no Rust reference covers.
    let got = unsafe { libc::read(fd, (region.addr() + offset) as *mut _, len) };
    (got, std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

fn close(fds: (i32, i32)) {
    // SAFETY: closing two descriptors this test owns.
    unsafe {
        libc::close(fds.0);
        libc::close(fds.1);
    }
}

fn copy_pattern_handler(uffd: &Arc<Uffd>) -> Handler {
    Handler::spawn(
        Arc::clone(uffd),
        Box::new(|u, e| {
            let Event::PageFault { addr, .. } = *e else { unreachable!() };
            u.copy(addr, &pattern(60), CopyMode::NONE).unwrap();
        }),
    )
}

/// Fact: a uffd that traps kernel faults turns a read(2) into a missing page into a fault
/// message (a write fault); the syscall waits, and completes once the page is copied in.
#[test]
fn a_full_uffd_serves_a_syscall_into_a_missing_page() {
    let Some(uffd) = uffd_or_skip(Features::NONE) else { return };
    assert!(!uffd.is_user_mode_only());
    let uffd = Arc::new(uffd);
    let handler = copy_pattern_handler(&uffd);
    let region = Mapping::anonymous(PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let fds = pipe_with(b"sixteen bytes!!!");
    assert_eq!(read_into(fds.0, &region, 8, 16).0, 16);
    close(fds);
    let mut page = vec![0u8; PAGE_SIZE];
    region.load(0, &mut page);
    let mut expected = pattern(60);
    expected[8..24].copy_from_slice(b"sixteen bytes!!!");
    assert!(page == expected, "the page was served, then the syscall wrote into it");
    let Event::PageFault { addr, write, .. } = handler.next() else { panic!() };
    assert_eq!((addr, write), (region.addr(), true));
}

/// Fact: a user-mode-only uffd (no privilege needed) fails that same read(2) with EFAULT
/// and sees no message; an access from user space still faults and is served.
#[test]
fn a_user_mode_only_uffd_fails_a_syscall_into_a_missing_page_with_efault() {
    let builder = Uffd::builder().user_mode_only(true);
    let Some(uffd) = builder_or_skip(builder, Features::NONE) else { return };
    assert!(uffd.is_user_mode_only());
    let uffd = Arc::new(uffd);
    let handler = copy_pattern_handler(&uffd);
    let region = Mapping::anonymous(PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let fds = pipe_with(b"sixteen bytes!!!");
    assert_eq!(read_into(fds.0, &region, 8, 16), (-1, libc::EFAULT));
    close(fds);
    assert!(handler.events.recv_timeout(Duration::from_millis(100)).is_err(), "no message");
    assert_eq!(region.load_u64(0), u64::from_ne_bytes(pattern(60)[..8].try_into().unwrap()));
    let Event::PageFault { addr, write, .. } = handler.next() else { panic!() };
    assert_eq!((addr, write), (region.addr(), false));
}

/// Fact: a uffd from `/dev/userfaultfd` + `USERFAULTFD_IOC_NEW` (6.1) works like one from
/// the syscall, kernel-mode faults included (access to the node is the permission).
#[test]
fn a_dev_node_uffd_serves_kernel_faults_too() {
    let builder = Uffd::builder().via(uffd::Via::DevNode);
    let Some(uffd) = builder_or_skip(builder, Features::MOVE) else { return };
    assert_eq!(uffd.via(), uffd::Via::DevNode);
    assert!(uffd.features().contains(Features::MOVE));
    let uffd = Arc::new(uffd);
    let handler = copy_pattern_handler(&uffd);
    let region = Mapping::anonymous(PAGE_SIZE).unwrap();
    uffd.register(region.range(), RegisterMode::MISSING).unwrap();
    let fds = pipe_with(b"0123456789abcdef");
    assert_eq!(read_into(fds.0, &region, 0, 16).0, 16);
    close(fds);
    assert_eq!(&region.load_u64(0).to_ne_bytes(), b"01234567");
    assert!(matches!(handler.next(), Event::PageFault { write: true, .. }));
}
