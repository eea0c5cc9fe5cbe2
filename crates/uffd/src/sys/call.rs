//! Raw userfaultfd and PAGEMAP_SCAN calls: one syscall each, errno out.
//!
//! The resolving ioctls (`COPY`, `ZEROPAGE`, `MOVE`, `POISON`, `CONTINUE`) report twice: the
//! ioctl's return value (0, or -1 with errno) and an out-field of the argument (bytes done, or
//! a negated errno). Partial progress comes back as `EAGAIN` with the out-field positive. The
//! callers here get both: `Err(errno)` and the struct they passed, whose out-field they read.
//! The out-field is zeroed before each call, because on some paths (`mmap_changing` checked
//! before the argument is read) the kernel returns `EAGAIN` without writing it.

use super::abi::*;
use super::{check, Errno};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `ioctl(fd, request, arg)` with a pointer argument.
///
/// # Safety
/// `arg` must point to a live, properly aligned value of the type `request` encodes, valid
/// for reads and (for `_IOR`/`_IOWR` requests) writes of its whole size.
unsafe fn ioctl_ptr<T>(fd: BorrowedFd<'_>, request: u64, arg: *mut T) -> Result<i64, Errno> {
    // SAFETY: the caller guarantees `arg` matches `request`; `fd` is a live descriptor for
    // the duration of the call because it is borrowed.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), request as libc::Ioctl, arg) };
    check(libc::c_long::from(ret))
}

/// `userfaultfd(2)`: a new uffd for the calling process's mm.
///
/// `flags`: `O_CLOEXEC`, `O_NONBLOCK`, `UFFD_USER_MODE_ONLY`.
pub fn userfaultfd(flags: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: userfaultfd(2) takes one integer and touches no user memory.
    let ret = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    let fd = check(ret)?;
    // SAFETY: on success the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `open("/dev/userfaultfd", O_RDWR | O_CLOEXEC)` (6.1).
pub fn open_dev_userfaultfd() -> Result<OwnedFd, Errno> {
    let path = c"/dev/userfaultfd";
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let ret = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    let fd = check(libc::c_long::from(ret))?;
    // SAFETY: on success the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `ioctl(dev, USERFAULTFD_IOC_NEW, flags)`: a new uffd from `/dev/userfaultfd`, which may
/// trap kernel-mode faults whatever `vm.unprivileged_userfaultfd` says.
pub fn dev_new(dev: BorrowedFd<'_>, flags: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: USERFAULTFD_IOC_NEW is `_IO`: its argument is an integer, not a pointer.
    let ret = unsafe {
        libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as libc::Ioctl, flags as libc::c_ulong)
    };
    let fd = check(libc::c_long::from(ret))?;
    // SAFETY: on success the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `UFFDIO_API`: the handshake; allowed once per uffd.
pub fn api(fd: BorrowedFd<'_>, arg: &mut uffdio_api) -> Result<(), Errno> {
    // SAFETY: `arg` is a live `uffdio_api`, the type UFFDIO_API encodes.
    unsafe { ioctl_ptr(fd, UFFDIO_API, arg) }.map(drop)
}

/// `UFFDIO_REGISTER`.
pub fn register(fd: BorrowedFd<'_>, arg: &mut uffdio_register) -> Result<(), Errno> {
    // SAFETY: `arg` is a live `uffdio_register`, the type UFFDIO_REGISTER encodes.
    unsafe { ioctl_ptr(fd, UFFDIO_REGISTER, arg) }.map(drop)
}

/// `UFFDIO_UNREGISTER`.
pub fn unregister(fd: BorrowedFd<'_>, range: uffdio_range) -> Result<(), Errno> {
    let mut arg = range;
    // SAFETY: `arg` is a live `uffdio_range`, the type UFFDIO_UNREGISTER encodes.
    unsafe { ioctl_ptr(fd, UFFDIO_UNREGISTER, &mut arg) }.map(drop)
}

/// `UFFDIO_WAKE`: wake the faulting threads waiting in `range`.
pub fn wake(fd: BorrowedFd<'_>, range: uffdio_range) -> Result<(), Errno> {
    let mut arg = range;
    // SAFETY: `arg` is a live `uffdio_range`, the type UFFDIO_WAKE encodes.
    unsafe { ioctl_ptr(fd, UFFDIO_WAKE, &mut arg) }.map(drop)
}

/// `UFFDIO_COPY`: allocate pages at `dst`, fill them from `src`. Safe: see the module essay
/// of `sys` (populate-only; the kernel reads `src`).
pub fn copy(fd: BorrowedFd<'_>, arg: &mut uffdio_copy) -> Result<(), Errno> {
    arg.copy = 0;
    // SAFETY: `arg` is a live `uffdio_copy`, the type UFFDIO_COPY encodes.
    unsafe { ioctl_ptr(fd, UFFDIO_COPY, arg) }.map(drop)
}

/// `UFFDIO_ZEROPAGE`: map the shared zero page over a missing range.
pub fn zeropage(fd: BorrowedFd<'_>, arg: &mut uffdio_zeropage) -> Result<(), Errno> {
    arg.zeropage = 0;
    // SAFETY: `arg` is a live `uffdio_zeropage`, the type UFFDIO_ZEROPAGE encodes.
    unsafe { ioctl_ptr(fd, UFFDIO_ZEROPAGE, arg) }.map(drop)
}

/// `UFFDIO_MOVE` (6.8): remap the pages at `src` to `dst`; `src` becomes a hole.
///
/// # Safety
/// The source range loses its pages: a later read there sees zeros (or faults, if it is
/// registered). No live Rust reference may cover `[arg.src, arg.src + arg.len)` in this
/// process's memory, unless the uffd belongs to another mm.
pub unsafe fn move_pages(fd: BorrowedFd<'_>, arg: &mut uffdio_move) -> Result<(), Errno> {
    arg.r#move = 0;
    // SAFETY: `arg` is a live `uffdio_move`, the type UFFDIO_MOVE encodes; the effect on
    // the source memory is the caller's contract.
    unsafe { ioctl_ptr(fd, UFFDIO_MOVE, arg) }.map(drop)
}

/// `UFFDIO_WRITEPROTECT`: set or clear uffd write protection over a range.
pub fn writeprotect(fd: BorrowedFd<'_>, arg: &mut uffdio_writeprotect) -> Result<(), Errno> {
    // SAFETY: `arg` is a live `uffdio_writeprotect`, the type UFFDIO_WRITEPROTECT encodes.
    unsafe { ioctl_ptr(fd, UFFDIO_WRITEPROTECT, arg) }.map(drop)
}

/// `UFFDIO_POISON` (6.6): install poison markers over a missing range (access = SIGBUS).
pub fn poison(fd: BorrowedFd<'_>, arg: &mut uffdio_poison) -> Result<(), Errno> {
    arg.updated = 0;
    // SAFETY: `arg` is a live `uffdio_poison`, the type UFFDIO_POISON encodes.
    unsafe { ioctl_ptr(fd, UFFDIO_POISON, arg) }.map(drop)
}

/// `UFFDIO_CONTINUE`: map existing page-cache pages (minor faults; shmem / hugetlbfs only).
pub fn continue_minor(fd: BorrowedFd<'_>, arg: &mut uffdio_continue) -> Result<(), Errno> {
    arg.mapped = 0;
    // SAFETY: `arg` is a live `uffdio_continue`, the type UFFDIO_CONTINUE encodes.
    unsafe { ioctl_ptr(fd, UFFDIO_CONTINUE, arg) }.map(drop)
}

/// `read(2)` of whole messages into `buf`; returns how many were read.
///
/// On a non-blocking uffd with nothing pending this is `Err(EAGAIN)`. The kernel returns as
/// many pending messages as fit (faults first, then events) and blocks only for the first.
pub fn read_msgs(fd: BorrowedFd<'_>, buf: &mut [uffd_msg]) -> Result<usize, Errno> {
    let bytes = core::mem::size_of_val(buf);
    // SAFETY: `buf` is a live, writable buffer of exactly `bytes` bytes; `uffd_msg` is plain
    // old data, so any bytes the kernel writes form valid values.
    let ret = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), bytes) };
    let n = check(ret as libc::c_long)? as usize;
    debug_assert_eq!(n % core::mem::size_of::<uffd_msg>(), 0, "uffd read a partial message");
    Ok(n / core::mem::size_of::<uffd_msg>())
}

/// `poll(2)` for readability with a timeout in milliseconds (-1 = forever).
/// `Ok(true)` when readable (or hung up / in error: a read will say which).
pub fn poll_in(fd: BorrowedFd<'_>, timeout_ms: i32) -> Result<bool, Errno> {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: `pfd` is one live pollfd and the count says 1.
    let ret = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    Ok(check(libc::c_long::from(ret))? > 0)
}

/// [`poll_in`] of a raw number (a registered descriptor's, polled without its guard).
pub fn poll_in_raw(fd: i32, timeout_ms: i32) -> Result<bool, Errno> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: `pfd` is one live pollfd and the count says 1; a number that is not open is
    // reported in `revents` (POLLNVAL), not undefined.
    let ret = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    Ok(check(libc::c_long::from(ret))? > 0)
}

/// `poll(2)` over several descriptors (each `events` set by the caller); returns how many
/// have `revents` set. EINTR is returned as is (the caller loops).
pub fn poll_many(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize, Errno> {
    // SAFETY: `fds` is a live, writable slice of pollfds and the count is its length.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    Ok(check(libc::c_long::from(ret))? as usize)
}

/// `eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)`: a counter descriptor to wake a thread in
/// `poll`.
pub fn eventfd() -> Result<OwnedFd, Errno> {
    // SAFETY: eventfd takes two integers and touches no user memory.
    let ret = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    let fd = check(libc::c_long::from(ret))?;
    // SAFETY: on success the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Adds 1 to an eventfd (wakes its poller). Async-signal-safe; never blocks (a full counter
/// already wakes the poller).
pub fn eventfd_signal(fd: BorrowedFd<'_>) {
    let one = 1u64;
    // SAFETY: write(2) of 8 live bytes, the size an eventfd expects.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
}

/// Resets an eventfd's counter (reads it); nothing happens if it is zero.
pub fn eventfd_drain(fd: BorrowedFd<'_>) {
    let mut value = 0u64;
    // SAFETY: read(2) into 8 live, writable bytes, the size an eventfd returns.
    let _ = unsafe { libc::read(fd.as_raw_fd(), (&raw mut value).cast(), 8) };
}

/// `PAGEMAP_SCAN` on a `/proc/<pid>/pagemap` descriptor; the kernel writes at most
/// `out.len()` regions. Returns how many it wrote; `arg.walk_end` says where it stopped.
pub fn pagemap_scan(
    pagemap: BorrowedFd<'_>,
    arg: &mut pm_scan_arg,
    out: &mut [page_region],
) -> Result<usize, Errno> {
    arg.size = core::mem::size_of::<pm_scan_arg>() as u64;
    arg.vec = out.as_mut_ptr() as u64;
    arg.vec_len = out.len() as u64;
    // SAFETY: (1) `arg` is a live `pm_scan_arg`, the type PAGEMAP_SCAN encodes; (2) `vec`
    // and `vec_len` describe `out`, which is live and writable for the whole call, and
    // `page_region` is plain old data.
    let n = unsafe { ioctl_ptr(pagemap, PAGEMAP_SCAN, arg) }?;
    debug_assert!(n >= 0 && n as usize <= out.len());
    Ok(n as usize)
}

/// A message decoded from the union, before it becomes a safe `Event`.
#[derive(Debug)]
pub enum RawEvent {
    PageFault {
        flags: u64,
        address: u64,
        ptid: u32,
    },
    /// The child's uffd, now owned.
    Fork {
        ufd: OwnedFd,
    },
    Remap {
        from: u64,
        to: u64,
        len: u64,
    },
    Remove {
        start: u64,
        end: u64,
    },
    Unmap {
        start: u64,
        end: u64,
    },
    Unknown {
        event: u8,
    },
}

/// Reads the live member of `msg.arg`, as `msg.event` names it, and consumes the message
/// (its `event` becomes 0), so a FORK message's descriptor is taken into ownership once.
pub fn decode_msg(msg: &mut uffd_msg) -> RawEvent {
    let event = core::mem::replace(&mut msg.event, 0);
    // SAFETY (for each arm): the kernel writes the union member that `event` names and zeroes
    // the rest (msg_init memsets the message); every member is plain integers, so any bit
    // pattern is a valid value.
    match event {
        UFFD_EVENT_PAGEFAULT => {
            // SAFETY: see the match.
            let pf = unsafe { msg.arg.pagefault };
            RawEvent::PageFault { flags: pf.flags, address: pf.address, ptid: pf.ptid }
        }
        UFFD_EVENT_FORK => {
            // SAFETY: (1) see the match; (2) the kernel installed `ufd` in our fd table for
            // this message (resolve_userfault_fork) and gives it to the one reader of the
            // message; the message is consumed above, so ownership is taken once.
            let ufd = unsafe { OwnedFd::from_raw_fd(msg.arg.fork.ufd as i32) };
            RawEvent::Fork { ufd }
        }
        UFFD_EVENT_REMAP => {
            // SAFETY: see the match.
            let r = unsafe { msg.arg.remap };
            RawEvent::Remap { from: r.from, to: r.to, len: r.len }
        }
        UFFD_EVENT_REMOVE => {
            // SAFETY: see the match.
            let r = unsafe { msg.arg.remove };
            RawEvent::Remove { start: r.start, end: r.end }
        }
        UFFD_EVENT_UNMAP => {
            // SAFETY: see the match; UNMAP uses the `remove` member.
            let r = unsafe { msg.arg.remove };
            RawEvent::Unmap { start: r.start, end: r.end }
        }
        event => RawEvent::Unknown { event },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_reads_the_member_the_event_names() {
        let mut msg = uffd_msg::ZERO;
        msg.event = UFFD_EVENT_REMAP;
        msg.arg = uffd_msg_arg { remap: uffd_remap { from: 0x1000, to: 0x5000, len: 0x2000 } };
        let e = decode_msg(&mut msg);
        assert!(matches!(e, RawEvent::Remap { from: 0x1000, to: 0x5000, len: 0x2000 }), "{e:?}");
        // Consumed: a second decode sees no event.
        assert!(matches!(decode_msg(&mut msg), RawEvent::Unknown { event: 0 }));
        msg.event = UFFD_EVENT_UNMAP;
        msg.arg = uffd_msg_arg { remove: uffd_remove { start: 0x1000, end: 0x3000 } };
        let e = decode_msg(&mut msg);
        assert!(matches!(e, RawEvent::Unmap { start: 0x1000, end: 0x3000 }), "{e:?}");
        msg.event = 0x77;
        assert!(matches!(decode_msg(&mut msg), RawEvent::Unknown { event: 0x77 }));
    }
}
