//! [`Uffd`]: one userfaultfd, created, shaken hands with, and driven by safe methods.
//!
//! Life of a uffd:
//!
//! ```text
//!   create (userfaultfd(2) | /dev/userfaultfd + USERFAULTFD_IOC_NEW), O_CLOEXEC|O_NONBLOCK
//!     -> UFFDIO_API (once: the features are fixed for the fd's life)
//!     -> register ranges -> [read events, resolve faults]* -> unregister
//!     -> close (drop): registered ranges go back to plain memory, waiters are woken
//! ```
//!
//! The fd is always non-blocking (the kernel's `poll` on a blocking uffd reports EPOLLERR):
//! [`Uffd::read_events`] never blocks; [`Uffd::wait_readable`] is the blocking wait.
//!
//! Ownership: a `Uffd` owns its descriptor. A FORK event's child uffd is a new descriptor the
//! kernel installed in *our* fd table; it arrives as an owned `Uffd` inside the event, so it
//! is closed exactly once, when the event (or the `Uffd` moved out of it) is dropped.
//!
//! The descriptor is out of the program's way (crate `fds`): placed at a high number,
//! registered, and used through a guard, so a program that closes every descriptor or dups
//! onto ours leaves it working. Reading messages checks its identity first: a uffd closed or
//! replaced by a direct system call is never read from (the program's file would be).
//!
//! Which methods are `unsafe`: only [`Uffd::move_pages`], whose *source* loses its pages
//! (it and the safe [`Uffd::move_from`] are defined in `sys::moves`). The populating
//! ioctls are safe: the kernel accepts their
//! destination only inside a range registered with this uffd, where no page is mapped yet.
//!
//! Context: every method is one system call (plus, at creation, a throwaway handshake to
//! learn the available features), may be called from any thread concurrently, takes no lock
//! in this crate, and does not allocate, except `read_events` when the output vector lacks
//! capacity.

use crate::error::{Error, Op};
use crate::event::Event;
use crate::probe::{self, Attempts, Verdict};
use crate::sys::{self, call, Errno};
use crate::types::{CopyMode, Features, Ioctls, Range, RegisterMode, Wake};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// How a uffd is (or was) created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// userfaultfd(2), then `/dev/userfaultfd` if the syscall says EPERM.
    Auto,
    /// userfaultfd(2) only.
    Syscall,
    /// `/dev/userfaultfd` + `USERFAULTFD_IOC_NEW` only (6.1).
    DevNode,
    /// Delivered by a FORK event (a child process's uffd).
    Fork,
}

/// The most messages one [`Uffd::read_events`] call reads (64 x 32 B = 2 KiB on the stack).
pub const READ_BATCH: usize = 64;

/// Builds a [`Uffd`]: where it comes from, what it traps, which features it needs.
#[derive(Debug, Clone)]
pub struct UffdBuilder {
    via: Via,
    user_mode_only: bool,
    required: Features,
    wanted: Features,
}

impl Default for UffdBuilder {
    fn default() -> Self {
        UffdBuilder {
            via: Via::Auto,
            user_mode_only: false,
            required: Features::NONE,
            wanted: Features::NONE,
        }
    }
}

impl UffdBuilder {
    /// Where the uffd comes from (default [`Via::Auto`]).
    pub fn via(mut self, via: Via) -> Self {
        self.via = via;
        self
    }

    /// Trap only faults taken in user mode (`UFFD_USER_MODE_ONLY`, 5.11; needs no privilege).
    /// A system call touching a missing page then fails with EFAULT.
    pub fn user_mode_only(mut self, on: bool) -> Self {
        self.user_mode_only = on;
        self
    }

    /// Features the uffd must have; creation fails without them.
    pub fn require(mut self, features: Features) -> Self {
        self.required |= features;
        self
    }

    /// Features to enable if the kernel has them.
    pub fn want(mut self, features: Features) -> Self {
        self.wanted |= features;
        self
    }

    /// Creates the uffd and completes the API handshake.
    ///
    /// # Errors
    /// The environment errors of [`Error`] (blocked, no permission, kernel too old: each
    /// with what to do), or [`Error::Api`] if the kernel refuses the feature set.
    pub fn open(self) -> Result<Uffd, Error> {
        let available = {
            let (probe_fd, _) = self.create()?;
            handshake(probe_fd.as_fd(), Features::NONE)?
        };
        let missing = self.required.difference(available);
        if let Some((_, feature, since)) = missing.first() {
            let running = crate::types::KernelVersion::running();
            return Err(Error::KernelTooOld { feature, since, running });
        }
        let features = self.required | self.wanted.intersection(available);
        let (fd, via) = self.create()?;
        let granted = handshake(fd.as_fd(), features)?;
        debug_assert!(granted.contains(features), "kernel granted {granted:?} < {features:?}");
        let fd = fds::Fd::place(fd, &UFFD);
        Ok(Uffd { fd, features, user_mode_only: self.user_mode_only, via })
    }

    /// Makes the descriptor the builder describes; on failure classifies why.
    fn create(&self) -> Result<(OwnedFd, Via), Error> {
        let base = libc::O_CLOEXEC | libc::O_NONBLOCK;
        let flags = if self.user_mode_only { base | sys::UFFD_USER_MODE_ONLY } else { base };
        let mut attempts = Attempts::default();
        if matches!(self.via, Via::Auto | Via::Syscall) {
            match call::userfaultfd(flags) {
                Ok(fd) => return Ok((fd, Via::Syscall)),
                Err(errno) => attempts.record_syscall(self.user_mode_only, errno),
            }
        }
        let try_dev = match self.via {
            Via::DevNode => true,
            Via::Auto => attempts.syscall_said(libc::EPERM),
            Via::Syscall | Via::Fork => false,
        };
        if try_dev {
            match open_dev(flags) {
                Ok(fd) => return Ok((fd, Via::DevNode)),
                Err(errno) => attempts.dev_node = Some(Err(errno)),
            }
        }
        if !self.user_mode_only && attempts.full.is_some() {
            // Only to say whether a user-mode-only uffd would have worked.
            attempts.user_only = Some(call::userfaultfd(base | sys::UFFD_USER_MODE_ONLY).map(drop));
        }
        attempts.seccomp_filter = probe::seccomp_filtered();
        Err(match probe::classify(&attempts) {
            Verdict::Unusable(error) => error,
            // Kernel faults were asked for and only user-mode faults are allowed.
            Verdict::UserModeOnly { why } => why,
            // Unreachable: a successful attempt returned above.
            Verdict::Full(_) => Error::Create { op: Op::Syscall, errno: Errno(0) },
        })
    }
}

/// `/dev/userfaultfd`, opened once and kept (close-on-exec): access is checked at open,
/// so a forked child, which inherits the descriptor, gets its own uffd through it even if
/// the device has since lost its permission or gone (frontend::fork). An exec'd image opens
/// it again, and is refused then.
static DEVICE: std::sync::OnceLock<OwnedFd> = std::sync::OnceLock::new();

fn open_dev(flags: i32) -> Result<OwnedFd, Errno> {
    let dev = match DEVICE.get() {
        Some(dev) => dev,
        None => {
            let dev = call::open_dev_userfaultfd()?;
            DEVICE.get_or_init(|| dev)
        }
    };
    call::dev_new(dev.as_fd(), flags)
}

/// UFFDIO_API asking for `features`; returns what the kernel reports.
fn handshake(fd: BorrowedFd<'_>, features: Features) -> Result<Features, Error> {
    let mut api = sys::uffdio_api { api: sys::UFFD_API, features: features.bits(), ioctls: 0 };
    call::api(fd, &mut api).map_err(|errno| Error::Api { errno, requested: features })?;
    Ok(Features::from_bits(api.features))
}

/// The registry's name for a uffd, and what its loss costs.
static UFFD: fds::Kind = fds::Kind {
    what: "userfaultfd",
    if_lost: "the memory it serves can no longer be brought back",
    keep: true,
};
/// A forked child's uffd.
static CHILD_UFFD: fds::Kind = fds::Kind {
    what: "userfaultfd of a forked child",
    if_lost: "that child's swapped-out memory can no longer be brought back",
    keep: true,
};

/// One userfaultfd (see the module essay).
#[derive(Debug)]
pub struct Uffd {
    fd: fds::Fd,
    features: Features,
    user_mode_only: bool,
    via: Via,
}

impl Uffd {
    /// A builder (defaults: [`Via::Auto`], kernel faults trapped, no features).
    pub fn builder() -> UffdBuilder {
        UffdBuilder::default()
    }

    /// A uffd with `required` features, trapping kernel-mode faults too.
    ///
    /// # Errors
    /// As [`UffdBuilder::open`].
    pub fn open(required: Features) -> Result<Uffd, Error> {
        Uffd::builder().require(required).open()
    }

    /// The features this kernel offers (one throwaway handshake).
    ///
    /// # Errors
    /// As [`UffdBuilder::open`].
    pub fn available_features() -> Result<Features, Error> {
        let (fd, _) = match UffdBuilder::default().create() {
            Err(Error::NoKernelFaultPermission { .. }) => {
                UffdBuilder::default().user_mode_only(true).create()?
            }
            other => other?,
        };
        handshake(fd.as_fd(), Features::NONE)
    }

    /// A child's uffd from a FORK event: same features and mode as its parent's.
    pub(crate) fn from_fork(fd: OwnedFd, parent: &Uffd) -> Uffd {
        Uffd {
            fd: fds::Fd::place(fd, &CHILD_UFFD),
            features: parent.features,
            user_mode_only: parent.user_mode_only,
            via: Via::Fork,
        }
    }

    /// The features enabled on this uffd.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Whether only user-mode faults are trapped.
    pub fn is_user_mode_only(&self) -> bool {
        self.user_mode_only
    }

    /// How it was created.
    pub fn via(&self) -> Via {
        self.via
    }

    /// Registers `range` for `mode` faults; returns the range ioctls that work there.
    ///
    /// # Errors
    /// [`Error::Register`]: EINVAL (not anonymous/shmem/hugetlbfs, or a mode the memory does
    /// not support), EBUSY (registered with another uffd), EPERM (not writable), ENOMEM.
    pub fn register(&self, range: Range, mode: RegisterMode) -> Result<Ioctls, Error> {
        let mut arg = sys::uffdio_register { range: range.raw(), mode: mode.bits(), ioctls: 0 };
        self.fd
            .with(|fd| call::register(fd, &mut arg))
            .map_err(|errno| Error::Register { range, errno })?;
        Ok(Ioctls::from_bits(arg.ioctls))
    }

    /// Unregisters `range`; threads waiting there are woken (and fault normally).
    ///
    /// # Errors
    /// [`Error::Invalid`] or [`Error::Os`] with the kernel's errno.
    pub fn unregister(&self, range: Range) -> Result<(), Error> {
        self.fd
            .with(|fd| call::unregister(fd, range.raw()))
            .map_err(|e| Error::os(Op::Unregister, e))
    }

    /// Wakes the threads waiting on faults in `range` (after `DONTWAKE` resolves).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad range.
    pub fn wake(&self, range: Range) -> Result<(), Error> {
        self.fd.with(|fd| call::wake(fd, range.raw())).map_err(|e| Error::os(Op::Wake, e))
    }

    /// `UFFDIO_COPY`: maps new pages at `dst` holding `src`; returns `src.len()`.
    ///
    /// # Errors
    /// The resolving errors of [`Error`] (see its table), with the bytes done.
    pub fn copy(&self, dst: usize, src: &[u8], mode: CopyMode) -> Result<usize, Error> {
        self.copy_from(dst, src.as_ptr() as usize, src.len(), mode)
    }

    /// `UFFDIO_COPY` from a source address (the kernel reads it; a bad address is EFAULT).
    ///
    /// # Errors
    /// As [`Uffd::copy`].
    pub fn copy_from(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        mode: CopyMode,
    ) -> Result<usize, Error> {
        let mut arg = sys::uffdio_copy {
            dst: dst as u64,
            src: src as u64,
            len: len as u64,
            mode: mode.bits(),
            copy: 0,
        };
        let result = self.fd.with(|fd| call::copy(fd, &mut arg));
        finish(Op::Copy, result, arg.copy, len)
    }

    /// `UFFDIO_ZEROPAGE`: maps the shared zero page over `range` (no memory until written).
    ///
    /// # Errors
    /// As [`Uffd::copy`].
    pub fn zeropage(&self, range: Range, wake: Wake) -> Result<usize, Error> {
        let mode = if wake == Wake::DontWake { sys::UFFDIO_ZEROPAGE_MODE_DONTWAKE } else { 0 };
        let mut arg = sys::uffdio_zeropage { range: range.raw(), mode, zeropage: 0 };
        let result = self.fd.with(|fd| call::zeropage(fd, &mut arg));
        finish(Op::ZeroPage, result, arg.zeropage, range.len_bytes())
    }

    /// `UFFDIO_WRITEPROTECT`: sets (`protect`) or clears write protection over `range`.
    /// Clearing wakes the writers waiting there unless `DontWake`. Protecting with
    /// `DontWake` is EINVAL in the kernel; this method ignores `wake` when protecting.
    ///
    /// # Errors
    /// [`Error::Again`] while an event is pending, [`Error::Invalid`], [`Error::Os`].
    pub fn writeprotect(&self, range: Range, protect: bool, wake: Wake) -> Result<(), Error> {
        let mode = if protect {
            sys::UFFDIO_WRITEPROTECT_MODE_WP
        } else if wake == Wake::DontWake {
            sys::UFFDIO_WRITEPROTECT_MODE_DONTWAKE
        } else {
            0
        };
        let mut arg = sys::uffdio_writeprotect { range: range.raw(), mode };
        self.fd
            .with(|fd| call::writeprotect(fd, &mut arg))
            .map_err(|errno| Error::resolve(Op::WriteProtect, errno, 0))
    }

    /// `UFFDIO_POISON` (6.6): accesses to `range` raise SIGBUS (`BUS_MCEERR_AR`) until it is
    /// zapped (MADV_DONTNEED) or unmapped. For pages whose data is lost.
    ///
    /// # Errors
    /// As [`Uffd::copy`].
    pub fn poison(&self, range: Range, wake: Wake) -> Result<usize, Error> {
        let mode = if wake == Wake::DontWake { sys::UFFDIO_POISON_MODE_DONTWAKE } else { 0 };
        let mut arg = sys::uffdio_poison { range: range.raw(), mode, updated: 0 };
        let result = self.fd.with(|fd| call::poison(fd, &mut arg));
        finish(Op::Poison, result, arg.updated, range.len_bytes())
    }

    /// Reads up to `max` (at most [`READ_BATCH`]) pending messages without blocking and
    /// appends them to `out` as events; returns how many. `Ok(0)`: nothing pending.
    ///
    /// Non-cooperative events (fork, remap, remove, unmap) hold the process that caused them
    /// until they are read: a handler must keep calling this.
    ///
    /// In-process handlers: a fork() waits for its FORK event *while glibc holds its malloc
    /// locks* (taken by fork before the syscall). The reading thread must therefore not
    /// allocate between waking up and reading (reserve `out`'s capacity up front; be fully
    /// started before anything is registered), or it deadlocks against the fork.
    ///
    /// # Errors
    /// [`Error::Os`] with the errno of read(2) (EINVAL before the handshake is impossible
    /// here; EBADF/EFAULT are bugs); [`Error::DescriptorLost`] when the descriptor was
    /// closed or replaced by a direct system call (nothing is read).
    ///
    /// May allocate: only if `out` lacks capacity for the batch.
    pub fn read_events(&self, out: &mut Vec<Event>, max: usize) -> Result<usize, Error> {
        let mut buf = [sys::uffd_msg::ZERO; READ_BATCH];
        let want = max.clamp(1, READ_BATCH);
        let read = self.fd.checked(|fd| call::read_msgs(fd, &mut buf[..want]));
        let n = match read.map_err(|e| Error::DescriptorLost { what: e.to_string() })? {
            Ok(n) => n,
            Err(Errno(libc::EAGAIN)) => return Ok(0),
            Err(errno) => return Err(Error::os(Op::Read, errno)),
        };
        for msg in &mut buf[..n] {
            out.push(Event::decode(msg, self));
        }
        Ok(n)
    }

    /// Blocks until a message is pending or `timeout` passes (`None`: forever); returns
    /// whether one is pending. EINTR counts as "not yet".
    ///
    /// # Errors
    /// [`Error::Os`] with poll(2)'s errno.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool, Error> {
        let ms = timeout.map_or(-1, |t| i32::try_from(t.as_millis()).unwrap_or(i32::MAX));
        // Unguarded: a blocking wait must not hold up a move; the kernel's poll keeps the
        // file it started on, and a moved number is read through the guard afterwards.
        match call::poll_in_raw(self.fd.number(), ms) {
            Ok(ready) => Ok(ready),
            Err(Errno(libc::EINTR)) => Ok(false),
            Err(errno) => Err(Error::os(Op::Poll, errno)),
        }
    }

    /// The raw descriptor number now (for the SIGBUS resolver's table, and a poll set:
    /// [`fds::generation`] says when a move made it stale).
    pub fn raw_fd(&self) -> i32 {
        self.fd.number()
    }

    /// Whether this uffd is `fd` (the same descriptor number).
    pub fn is_fd(&self, fd: i32) -> bool {
        self.raw_fd() == fd
    }

    /// Runs `f` with the descriptor, in the registry's guard (module essay).
    pub(crate) fn with_fd<R>(&self, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
        self.fd.with(f)
    }

    /// The descriptor's identity (its own inode: a uffd's is unique).
    pub fn identity(&self) -> fds::Identity {
        self.fd.identity()
    }

    /// Whether the descriptor was found closed or replaced behind uswap's back.
    pub fn is_lost(&self) -> bool {
        self.fd.is_lost()
    }
}

/// Turns a resolving ioctl's (result, out-field) into bytes done or a classified error.
pub(crate) fn finish(
    op: Op,
    result: Result<(), Errno>,
    out: i64,
    len: usize,
) -> Result<usize, Error> {
    match result {
        Ok(()) => {
            debug_assert_eq!(out, len as i64, "{op} succeeded with out-field {out}");
            Ok(len)
        }
        Err(errno) => {
            let done_bytes = usize::try_from(out).unwrap_or(0);
            Err(Error::resolve(op, errno, done_bytes))
        }
    }
}
