//! The program's `read`, `write`, `pread`, `pwrite` (and their `64` names), `readv`,
//! `writev`, `recv`, `recvfrom`, `recvmsg`, `send`, `sendto` and `sendmsg`, and the fortified
//! `__read_chk`, `__pread_chk`, `__pread64_chk`, `__recv_chk` and `__recvfrom_chk`,
//! interposed for SIGBUS delivery
//! (`uswap run --delivery sigbus`, docs/RUN.md "Fault delivery").
//!
//! Under SIGBUS delivery a fault the kernel takes on the program's behalf (copying a
//! system call's buffer) is not a signal: the call fails with EFAULT. Each wrapper calls
//! libc's own function (found with `dlsym(RTLD_NEXT)`), and when that fails with EFAULT in
//! SIGBUS mode, in the process that runs the engine, brings in the first managed pages of
//! the buffer (at most 256 KiB: [`frontend::bring_in`]) and calls again: [`RETRIES`] times at
//! once, then after waits, for at most [`RETRY_FOR`] ([`Retry`]: reclaim may take a page
//! back between the two, for as long as the process is far over its budget). The call then
//! copies at least that prefix and returns a short count, from which the program goes on
//! (and a next EFAULT brings in the next prefix). Nothing is lost by the first attempt for files,
//! pipes and stream sockets: a call that copied nothing consumed nothing (pipes measured,
//! docs/UFFD.md; the rest from the kernel's code). A datagram received into a swapped
//! buffer is dropped by the kernel on EFAULT (`udp_recvmsg`; not measured here): that is a
//! limit of the mode, as are direct system calls, io_uring, futexes and the refills and
//! flushes of a stdio stream's own buffer, which these wrappers do not see (large `fread`
//! and `fwrite` transfers, which bypass that buffer, have wrappers of their own:
//! crates/preload/src/stdio.rs).
//!
//! With handler delivery (the default) each wrapper is libc's function and one atomic
//! load after it fails.
//!
//! Context: any thread, at any time, also before the shim's constructor: no allocation on
//! the success path; `dlsym` once per function.

#![allow(unsafe_code)]

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Calls made again at once after bringing the buffer in; the ones after them wait first
/// ([`Retry`]).
pub(crate) const RETRIES: u32 = 4;
/// How long a call is made again, at most, while its buffer's pages are taken back before
/// it runs: a budget cut at once (a forked child's first share) keeps reclaim paging out
/// whatever comes in for as long as the pool's writeback takes, tenths of a second.
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(2);
/// The longest wait between two calls.
const RETRY_WAIT_MAX: Duration = Duration::from_millis(10);

/// The pace of one call's retries: [`RETRIES`] at once, then each after a wait that doubles
/// from 50 us up to [`RETRY_WAIT_MAX`], until [`RETRY_FOR`] has passed since the first.
/// Waiting lets reclaim reach the budget, after which a page brought in stays.
#[derive(Debug, Default)]
pub(crate) struct Retry {
    made: u32,
    since: Option<Instant>,
}

impl Retry {
    /// Whether to make the call again, after waiting its turn; false once the time is up.
    pub(crate) fn again(&mut self) -> bool {
        let since = *self.since.get_or_insert_with(Instant::now);
        self.made += 1;
        if self.made <= RETRIES {
            return true;
        }
        if since.elapsed() >= RETRY_FOR {
            return false;
        }
        let doublings = (self.made - RETRIES - 1).min(8);
        std::thread::sleep(Duration::from_micros(50 << doublings).min(RETRY_WAIT_MAX));
        true
    }
}

/// Set when the shim runs with SIGBUS delivery.
pub static SIGBUS_DELIVERY: AtomicBool = AtomicBool::new(false);
counters::table! {
    /// The retry loop's live counters.
    pub struct Efault;
    /// A snapshot of them (in the stats file, `shim_efault_*`).
    #[derive(Debug, Clone, Copy, Default)]
    #[allow(dead_code)]
    pub struct EfaultSnapshot {
        prefix "shim_efault_";
        counters {
            /// Calls made again after their buffer was brought in.
            retries,
            /// Calls that still failed with EFAULT on a managed buffer after every retry.
            failed,
        }
    }
}

/// The retry loop's counters.
pub static EFAULT: Efault = Efault::new();

/// Zeroes the counters (a forked child counts its own).
pub fn reset_counters() {
    EFAULT.reset();
}

/// libc's function `name` (NUL-terminated), cached in `slot`; 0 if there is none.
pub(crate) fn next(slot: &AtomicUsize, name: &[u8]) -> usize {
    let found = slot.load(Relaxed);
    if found != 0 {
        return found;
    }
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT finds the definition after this object's.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    slot.store(found, Relaxed);
    found
}

/// Finds libc's function behind every wrapper the engine's own threads call (the swap
/// file's `pread64`/`pwrite64`, the stats and trace files' `write`, `read` of /proc, a far
/// tier's sockets), by calling each once on descriptor -1 (EBADF, nothing done). From the
/// constructor, before the engine's threads start.
///
/// Why: `dlsym` takes the loader's lock. A program thread that faults on managed memory
/// while it holds that lock (in `dlopen`, running a library's constructor: Python importing
/// a C extension) waits for the handler thread; a handler or reclaimer that called a wrapper
/// for the first time then waited in `dlsym` for the lock that thread holds: a hang (a
/// child Python starting under a small share, its first swap-file write during an import,
/// 2 runs in about 140 of the three-level tree).
pub fn resolve_early() {
    let mut byte = 0u8;
    let buf = std::ptr::addr_of_mut!(byte).cast::<c_void>();
    let iov = iovec { iov_base: buf, iov_len: 0 };
    // SAFETY: every call is on descriptor -1, which the kernel refuses (EBADF) before it
    // reads or writes any buffer; the buffers are live anyway.
    unsafe {
        read(-1, buf, 0);
        write(-1, buf, 0);
        pread(-1, buf, 0, 0);
        pread64(-1, buf, 0, 0);
        pwrite(-1, buf, 0, 0);
        pwrite64(-1, buf, 0, 0);
        readv(-1, &iov, 1);
        writev(-1, &iov, 1);
        send(-1, buf, 0, 0);
        recv(-1, buf, 0, 0);
        sendto(-1, buf, 0, 0, std::ptr::null(), 0);
        recvfrom(-1, buf, 0, 0, std::ptr::null_mut(), std::ptr::null_mut());
        let mut msg: msghdr = std::mem::zeroed();
        sendmsg(-1, &msg, 0);
        recvmsg(-1, &mut msg, 0);
    }
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno location is always valid.
    unsafe { *libc::__errno_location() }
}

pub(crate) fn set_errno(value: c_int) {
    // SAFETY: as `errno`.
    unsafe { *libc::__errno_location() = value };
}

/// Hands each (address, length) of a call's buffers to the function it is given.
pub(crate) type Buffers<'a> = &'a dyn Fn(&mut dyn FnMut(usize, usize));

/// After a call failed with EFAULT: brings in the first managed pages of `buffers` (address,
/// length), at most [`crate::shim::bring_in_pages`] (`write`: the kernel writes into them);
/// when none is managed, lets the engine catch up first (a range registered and not yet
/// adopted, as a grown mremap's). Returns whether any page was managed; errno is EFAULT
/// again on return.
pub(crate) fn bring_in_after_efault(buffers: Buffers<'_>, write: bool) -> bool {
    let bring_in = || {
        let (mut managed, mut pages) = (false, crate::shim::bring_in_pages());
        buffers(&mut |addr, len| {
            managed |= len > 0 && crate::shim::bring_in(addr, len, write, &mut pages);
        });
        managed
    };
    let (mut managed, waited) = (bring_in(), std::time::Instant::now());
    while !managed && waited.elapsed() < frontend::CATCH_UP_MAX {
        if !crate::shim::catch_up(frontend::CATCH_UP_MAX) {
            break; // a forked child, say: no engine to catch up
        }
        managed = bring_in();
    }
    set_errno(libc::EFAULT);
    managed
}

/// Whether the last call failed with EFAULT under SIGBUS delivery (errno EFAULT).
pub(crate) fn efault_under_sigbus() -> bool {
    SIGBUS_DELIVERY.load(SeqCst) && errno() == libc::EFAULT
}

/// Runs `call`, and while it fails with EFAULT under SIGBUS delivery and `buffers` (address,
/// length) hold managed pages, brings them in and runs it again (module essay). `write`:
/// the kernel writes into the buffers (a read-type call).
fn retried(buffers: Buffers<'_>, write: bool, call: &dyn Fn() -> isize) -> isize {
    let (mut result, mut retry) = (call(), Retry::default());
    while result < 0 && efault_under_sigbus() {
        if !retry.again() {
            EFAULT.failed.fetch_add(1, Relaxed);
            set_errno(libc::EFAULT);
            break;
        }
        if !bring_in_after_efault(buffers, write) {
            break;
        }
        EFAULT.retries.fetch_add(1, Relaxed);
        result = call();
    }
    result
}

/// The buffers of an iovec array.
///
/// # Safety
/// `iov` points to `count` readable iovecs (the caller's contract with readv/writev).
unsafe fn each_iovec(iov: *const iovec, count: c_int, f: &mut dyn FnMut(usize, usize)) {
    if iov.is_null() || count <= 0 {
        return;
    }
    // SAFETY: the caller's contract.
    let iovs = unsafe { std::slice::from_raw_parts(iov, count as usize) };
    for v in iovs {
        f(v.iov_base as usize, v.iov_len);
    }
}

/// The buffers of a message header: its iovecs, its address and its control data.
///
/// # Safety
/// `msg` is null or points to a readable `msghdr` whose iovec array holds `msg_iovlen`
/// iovecs (the caller's contract with recvmsg/sendmsg).
unsafe fn each_msghdr(msg: *const msghdr, f: &mut dyn FnMut(usize, usize)) {
    if msg.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let m = unsafe { &*msg };
    // SAFETY: the caller's contract: `msg_iov` holds `msg_iovlen` iovecs.
    unsafe { each_iovec(m.msg_iov, m.msg_iovlen as c_int, f) };
    f(m.msg_name as usize, m.msg_namelen as usize);
    f(m.msg_control as usize, m.msg_controllen);
}

/// Fails as libc would without the function (it always has these).
fn missing() -> isize {
    set_errno(libc::ENOSYS);
    -1
}

/// Defines an interposed call (module essay), under each name given (the `64` names are the
/// same calls on 64-bit Linux): libc's function of that name, found once, made again by
/// [`retried`] with the buffers `each` is handed and `kernel_writes` (whether the kernel
/// writes into them).
macro_rules! interposed {
    ($(#[$doc:meta])* fn $first:ident $(| $rest:ident)+ ($($args:tt)*); $($tail:tt)*) => {
        interposed! { $(#[$doc])* fn $first($($args)*); $($tail)* }
        interposed! { $(#[$doc])* fn $($rest)|+ ($($args)*); $($tail)* }
    };
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?);
     kernel_writes: $write:expr; buffers: |$each:ident| $buffers:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The caller's contract is the call's own.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ssize_t {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            type F = unsafe extern "C" fn($($ty),*) -> ssize_t;
            let f = next(&NEXT, concat!(stringify!($name), "\0").as_bytes());
            if f == 0 {
                return missing();
            }
            let call = || {
                // SAFETY: `f` is libc's function of this name, whose C type is `F`, called
                // with the caller's arguments.
                unsafe { std::mem::transmute::<usize, F>(f)($($arg),*) }
            };
            retried(&|$each: &mut dyn FnMut(usize, usize)| $buffers, $write, &call)
        }
    };
}

interposed! {
    /// `read(2)` (module essay).
    fn read(fd: c_int, buf: *mut c_void, count: size_t);
    kernel_writes: true; buffers: |each| each(buf as usize, count)
}

interposed! {
    /// `write(2)` (module essay).
    fn write(fd: c_int, buf: *const c_void, count: size_t);
    kernel_writes: false; buffers: |each| each(buf as usize, count)
}

interposed! {
    /// `pread(2)` and `pread64` (module essay).
    fn pread | pread64(fd: c_int, buf: *mut c_void, count: size_t, offset: i64);
    kernel_writes: true; buffers: |each| each(buf as usize, count)
}

interposed! {
    /// `pwrite(2)` and `pwrite64` (module essay).
    fn pwrite | pwrite64(fd: c_int, buf: *const c_void, count: size_t, offset: i64);
    kernel_writes: false; buffers: |each| each(buf as usize, count)
}

interposed! {
    /// `readv(2)` (module essay).
    fn readv(fd: c_int, iov: *const iovec, count: c_int);
    // SAFETY: readv's contract: `iov` holds `count` iovecs.
    kernel_writes: true; buffers: |each| unsafe { each_iovec(iov, count, each) }
}

interposed! {
    /// `writev(2)` (module essay).
    fn writev(fd: c_int, iov: *const iovec, count: c_int);
    // SAFETY: writev's contract: `iov` holds `count` iovecs.
    kernel_writes: false; buffers: |each| unsafe { each_iovec(iov, count, each) }
}

interposed! {
    /// `recv(2)` (module essay).
    fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int);
    kernel_writes: true; buffers: |each| each(buf as usize, len)
}

interposed! {
    /// `recvfrom(2)` (module essay).
    fn recvfrom(
        fd: c_int,
        buf: *mut c_void,
        len: size_t,
        flags: c_int,
        addr: *mut sockaddr,
        addr_len: *mut socklen_t,
    );
    kernel_writes: true; buffers: |each| each(buf as usize, len)
}

interposed! {
    /// `send(2)` (module essay).
    fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int);
    kernel_writes: false; buffers: |each| each(buf as usize, len)
}

interposed! {
    /// `sendto(2)` (module essay).
    fn sendto(
        fd: c_int,
        buf: *const c_void,
        len: size_t,
        flags: c_int,
        addr: *const sockaddr,
        addr_len: socklen_t,
    );
    kernel_writes: false; buffers: |each| each(buf as usize, len)
}

interposed! {
    /// `recvmsg(2)` (module essay).
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int);
    // SAFETY: recvmsg's contract: `msg` is a valid message header.
    kernel_writes: true; buffers: |each| unsafe { each_msghdr(msg, each) }
}

interposed! {
    /// `sendmsg(2)` (module essay).
    fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int);
    // SAFETY: sendmsg's contract: `msg` is a valid message header.
    kernel_writes: false; buffers: |each| unsafe { each_msghdr(msg, each) }
}

interposed! {
    /// `__read_chk`, the fortified `read` (`_FORTIFY_SOURCE` with a buffer of known size):
    /// glibc's makes the system call itself, not through `read` (module essay).
    fn __read_chk(fd: c_int, buf: *mut c_void, count: size_t, buf_len: size_t);
    kernel_writes: true; buffers: |each| each(buf as usize, count)
}

interposed! {
    /// `__pread_chk` and `__pread64_chk`, the fortified `pread` and `pread64` (module essay).
    fn __pread_chk | __pread64_chk(
        fd: c_int,
        buf: *mut c_void,
        count: size_t,
        offset: i64,
        buf_len: size_t,
    );
    kernel_writes: true; buffers: |each| each(buf as usize, count)
}

interposed! {
    /// `__recv_chk`, the fortified `recv` (module essay).
    fn __recv_chk(fd: c_int, buf: *mut c_void, len: size_t, buf_len: size_t, flags: c_int);
    kernel_writes: true; buffers: |each| each(buf as usize, len)
}

interposed! {
    /// `__recvfrom_chk`, the fortified `recvfrom` (module essay).
    fn __recvfrom_chk(
        fd: c_int,
        buf: *mut c_void,
        len: size_t,
        buf_len: size_t,
        flags: c_int,
        addr: *mut sockaddr,
        addr_len: *mut socklen_t,
    );
    kernel_writes: true; buffers: |each| each(buf as usize, len)
}
