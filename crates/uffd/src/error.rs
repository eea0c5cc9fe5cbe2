//! The crate's one error type: what the kernel interface can say went wrong.
//!
//! Two families. *Environment* errors come from start-up (the probe, creating a uffd): their
//! message says what is wrong and what to do, because a user reads it once, at start, and
//! must be able to act on it. *Operation* errors come from one syscall on a running uffd:
//! they carry the operation and the data the caller needs to continue, above all the bytes
//! a resolving ioctl did before it stopped (`done_bytes`), since the kernel reports partial
//! progress as `EAGAIN` and the caller retries the remainder.
//!
//! How the kernel's errnos map for the resolving ioctls (fs/userfaultfd.c, mm/userfaultfd.c):
//!
//! | errno | variant | meaning |
//! |---|---|---|
//! | EAGAIN | `Again` | partial (`done_bytes` > 0), or the mm is changing (read events, retry) |
//! | EEXIST | `Exists` | a page is already mapped at the destination (a racer resolved it) |
//! | ENOENT | `NoEntry` | the layout changed (no VMA / not registered), or a MOVE source hole |
//! | ESRCH, ENOSPC | `ProcessGone` | the mm has exited (ENOSPC: the process was being torn down) |
//! | EINVAL | `Invalid` | bad alignment, mode, or a range not registered as this op needs |
//! | EBUSY | `Busy` | MOVE: the source page is shared (after fork) or pinned |
//! | other | `Os` | EFAULT (bad source), ENOMEM, ... |

use crate::sys::Errno;
use crate::types::{Features, KernelVersion, Range};

/// The system call or ioctl an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// userfaultfd(2).
    Syscall,
    /// open("/dev/userfaultfd").
    OpenDev,
    /// USERFAULTFD_IOC_NEW.
    DevNew,
    /// UFFDIO_API.
    Api,
    /// UFFDIO_REGISTER.
    Register,
    /// UFFDIO_UNREGISTER.
    Unregister,
    /// UFFDIO_WAKE.
    Wake,
    /// UFFDIO_COPY.
    Copy,
    /// UFFDIO_ZEROPAGE.
    ZeroPage,
    /// UFFDIO_MOVE.
    Move,
    /// UFFDIO_WRITEPROTECT.
    WriteProtect,
    /// UFFDIO_POISON.
    Poison,
    /// read(2) of uffd messages.
    Read,
    /// poll(2).
    Poll,
    /// PAGEMAP_SCAN.
    PagemapScan,
    /// mmap(2).
    Mmap,
    /// munmap(2).
    Munmap,
    /// madvise(2).
    Madvise,
    /// mremap(2).
    Mremap,
    /// mprotect(2).
    Mprotect,
    /// sigaction(2) for the SIGBUS handler.
    Sigaction,
    /// mincore(2).
    Mincore,
    /// eventfd(2).
    Eventfd,
    /// pthread_atfork(3).
    Atfork,
}

impl core::fmt::Display for Op {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let name = match self {
            Op::Syscall => "userfaultfd(2)",
            Op::OpenDev => "open(/dev/userfaultfd)",
            Op::DevNew => "USERFAULTFD_IOC_NEW",
            Op::Api => "UFFDIO_API",
            Op::Register => "UFFDIO_REGISTER",
            Op::Unregister => "UFFDIO_UNREGISTER",
            Op::Wake => "UFFDIO_WAKE",
            Op::Copy => "UFFDIO_COPY",
            Op::ZeroPage => "UFFDIO_ZEROPAGE",
            Op::Move => "UFFDIO_MOVE",
            Op::WriteProtect => "UFFDIO_WRITEPROTECT",
            Op::Poison => "UFFDIO_POISON",
            Op::Read => "read(uffd)",
            Op::Poll => "poll(uffd)",
            Op::PagemapScan => "PAGEMAP_SCAN",
            Op::Mmap => "mmap",
            Op::Munmap => "munmap",
            Op::Madvise => "madvise",
            Op::Mremap => "mremap",
            Op::Mprotect => "mprotect",
            Op::Sigaction => "sigaction(SIGBUS)",
            Op::Mincore => "mincore",
            Op::Eventfd => "eventfd",
            Op::Atfork => "pthread_atfork",
        };
        f.write_str(name)
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug)]
pub enum Error {
    // --- environment (start-up) ---
    /// userfaultfd(2) is filtered out (seccomp: ENOSYS or EPERM from a filter).
    Blocked { errno: Errno },
    /// The kernel has no userfaultfd at all (ENOSYS without a seccomp filter).
    NotBuilt,
    /// userfaultfd(2) is refused even for user-mode faults, without a seccomp filter: a
    /// security module (SELinux, AppArmor) denies it.
    Denied { errno: Errno },
    /// A uffd exists, but this process may not trap faults taken in kernel mode.
    NoKernelFaultPermission {
        /// The errno of the attempt without `UFFD_USER_MODE_ONLY`.
        errno: Errno,
        /// A user-mode-only uffd can be created (5.11 and later).
        user_mode_only_works: bool,
    },
    /// A needed feature is missing from this kernel.
    KernelTooOld {
        /// The kernel's name for the feature.
        feature: &'static str,
        /// The release that added it.
        since: KernelVersion,
        /// The running release, if known.
        running: Option<KernelVersion>,
    },
    /// UFFDIO_API refused the features asked for.
    Api { errno: Errno, requested: Features },
    /// Creating a uffd failed for a reason the probe does not classify.
    Create { op: Op, errno: Errno },
    /// All SIGBUS resolver slots are in use.
    SigbusSlotsFull,

    // --- operations ---
    /// EAGAIN: `done_bytes` were done; retry the rest (after reading pending events).
    Again { op: Op, done_bytes: usize },
    /// EEXIST: a page is already mapped at the destination.
    Exists { op: Op, done_bytes: usize },
    /// ENOENT: the range is no longer mapped or registered, or a MOVE source hole.
    NoEntry { op: Op, done_bytes: usize },
    /// ESRCH / ENOSPC: the process whose memory this is has exited.
    ProcessGone { op: Op, errno: Errno },
    /// EINVAL: bad range, alignment or mode for this operation.
    Invalid { op: Op },
    /// EBUSY: MOVE found a shared (forked) or pinned source page.
    Busy { op: Op, done_bytes: usize },
    /// Any other errno.
    Os { op: Op, errno: Errno },
    /// A range or address that is not page-aligned, empty or overflowing.
    Misaligned { addr: usize, len_bytes: usize },
    /// A range outside the object it was applied to.
    OutOfBounds { offset: usize, len_bytes: usize, size_bytes: usize },
    /// A register call over a range the kernel refused.
    Register { range: Range, errno: Errno },
    /// Reading a /proc file.
    Proc { path: &'static str, error: std::io::Error },
    /// A descriptor was closed or replaced by a direct system call behind uswap's back
    /// (crate `fds`): nothing was read or written through it.
    DescriptorLost { what: String },
}

impl Error {
    /// Classifies the errno of a resolving ioctl that did `done_bytes` before it stopped.
    pub fn resolve(op: Op, errno: Errno, done_bytes: usize) -> Error {
        match errno.0 {
            libc::EAGAIN => Error::Again { op, done_bytes },
            libc::EEXIST => Error::Exists { op, done_bytes },
            libc::ENOENT => Error::NoEntry { op, done_bytes },
            libc::ESRCH | libc::ENOSPC => Error::ProcessGone { op, errno },
            libc::EINVAL => Error::Invalid { op },
            libc::EBUSY => Error::Busy { op, done_bytes },
            _ => Error::Os { op, errno },
        }
    }

    /// An operation's errno, with no partial progress to report.
    pub fn os(op: Op, errno: Errno) -> Error {
        match errno.0 {
            libc::ESRCH => Error::ProcessGone { op, errno },
            libc::EINVAL => Error::Invalid { op },
            _ => Error::Os { op, errno },
        }
    }

    /// Bytes a resolving ioctl completed before this error (0 if none or not applicable).
    pub fn done_bytes(&self) -> usize {
        match self {
            Error::Again { done_bytes, .. }
            | Error::Exists { done_bytes, .. }
            | Error::NoEntry { done_bytes, .. }
            | Error::Busy { done_bytes, .. } => *done_bytes,
            _ => 0,
        }
    }

    /// The errno behind an operation error, if any.
    pub fn errno(&self) -> Option<Errno> {
        let errno = match self {
            Error::Again { .. } => libc::EAGAIN,
            Error::Exists { .. } => libc::EEXIST,
            Error::NoEntry { .. } => libc::ENOENT,
            Error::Invalid { .. } => libc::EINVAL,
            Error::Busy { .. } => libc::EBUSY,
            Error::ProcessGone { errno, .. }
            | Error::Os { errno, .. }
            | Error::Blocked { errno }
            | Error::Denied { errno }
            | Error::Api { errno, .. }
            | Error::Create { errno, .. }
            | Error::Register { errno, .. }
            | Error::NoKernelFaultPermission { errno, .. } => return Some(*errno),
            _ => return None,
        };
        Some(Errno(errno))
    }
}

/// What to do about missing kernel-fault permission: one sentence, used by the message and
/// by the docs.
pub const KERNEL_FAULT_ADVICE: &str = "trapping faults taken inside system calls needs root or \
     CAP_SYS_PTRACE, read-write access to /dev/userfaultfd, or sysctl \
     vm.unprivileged_userfaultfd=1";

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Blocked { errno } => write!(
                f,
                "userfaultfd(2) is blocked by this process's seccomp filter ({errno}); run \
                 uswap outside the filter (docker/podman: --security-opt seccomp=unconfined, \
                 or a profile that allows userfaultfd)"
            ),
            Error::NotBuilt => write!(
                f,
                "this kernel has no userfaultfd (ENOSYS and no seccomp filter): it was built \
                 without CONFIG_USERFAULTFD or is older than Linux 4.3; use a kernel with \
                 CONFIG_USERFAULTFD=y"
            ),
            Error::Denied { errno } => write!(
                f,
                "userfaultfd(2) is denied even for user-mode faults ({errno}) and no seccomp \
                 filter is active: a security module (SELinux, AppArmor) forbids it; allow \
                 userfaultfd for this program in its policy"
            ),
            Error::NoKernelFaultPermission { errno, user_mode_only_works } => {
                write!(f, "this process may not trap kernel-mode page faults ({errno}): ")?;
                write!(f, "{KERNEL_FAULT_ADVICE}")?;
                if *user_mode_only_works {
                    write!(
                        f,
                        " (a user-mode-only uffd works, but then a system call that touches \
                         an evicted page fails with EFAULT instead of waiting)"
                    )?;
                }
                Ok(())
            }
            Error::KernelTooOld { feature, since, running } => {
                write!(f, "{feature} needs Linux {since} or later")?;
                match running {
                    Some(v) => write!(f, "; this kernel is {v}")?,
                    None => write!(f, "; this kernel does not offer it")?,
                }
                write!(f, ": run on a newer kernel")
            }
            Error::Api { errno, requested } => {
                write!(f, "UFFDIO_API refused features {requested:?} ({errno})")
            }
            Error::Create { op, errno } => write!(f, "{op} failed: {errno}"),
            Error::SigbusSlotsFull => write!(
                f,
                "all {} SIGBUS resolver slots are armed; disarm one first",
                crate::sys::signal::SLOTS
            ),
            Error::Again { op, done_bytes } => {
                write!(f, "{op}: EAGAIN after {done_bytes} bytes (mm changing; retry)")
            }
            Error::Exists { op, done_bytes } => {
                write!(f, "{op}: EEXIST after {done_bytes} bytes (page already mapped)")
            }
            Error::NoEntry { op, done_bytes } => write!(
                f,
                "{op}: ENOENT after {done_bytes} bytes (range unmapped/unregistered or source hole)"
            ),
            Error::ProcessGone { op, errno } => write!(f, "{op}: the process has exited ({errno})"),
            Error::Invalid { op } => write!(f, "{op}: EINVAL (bad range, alignment or mode)"),
            Error::Busy { op, done_bytes } => write!(
                f,
                "{op}: EBUSY after {done_bytes} bytes (source page shared after fork, or pinned)"
            ),
            Error::Os { op, errno } => write!(f, "{op}: {errno}"),
            Error::Misaligned { addr, len_bytes } => write!(
                f,
                "range at {addr:#x} of {len_bytes} bytes is not page-aligned, empty or overflows"
            ),
            Error::OutOfBounds { offset, len_bytes, size_bytes } => write!(
                f,
                "[{offset:#x}, +{len_bytes:#x}) is outside an object of {size_bytes:#x} bytes"
            ),
            Error::Register { range, errno } => write!(f, "UFFDIO_REGISTER {range:?}: {errno}"),
            Error::Proc { path, error } => write!(f, "reading {path}: {error}"),
            Error::DescriptorLost { what } => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_classifies_each_documented_errno() {
        let e = Error::resolve(Op::Copy, Errno(libc::EAGAIN), 8192);
        assert!(matches!(e, Error::Again { op: Op::Copy, done_bytes: 8192 }));
        assert_eq!(e.done_bytes(), 8192);
        assert!(matches!(Error::resolve(Op::Copy, Errno(libc::EEXIST), 0), Error::Exists { .. }));
        assert!(matches!(Error::resolve(Op::Move, Errno(libc::ENOENT), 0), Error::NoEntry { .. }));
        assert!(matches!(
            Error::resolve(Op::Copy, Errno(libc::ESRCH), 0),
            Error::ProcessGone { .. }
        ));
        assert!(matches!(
            Error::resolve(Op::Copy, Errno(libc::ENOSPC), 0),
            Error::ProcessGone { .. }
        ));
        assert!(matches!(Error::resolve(Op::Copy, Errno(libc::EINVAL), 0), Error::Invalid { .. }));
        assert!(matches!(Error::resolve(Op::Move, Errno(libc::EBUSY), 0), Error::Busy { .. }));
        let e = Error::resolve(Op::Copy, Errno(libc::EFAULT), 0);
        assert!(matches!(e, Error::Os { .. }));
        assert_eq!(e.errno(), Some(Errno(libc::EFAULT)));
    }

    #[test]
    fn messages_say_what_to_do() {
        let e = Error::NoKernelFaultPermission {
            errno: Errno(libc::EPERM),
            user_mode_only_works: true,
        };
        let text = e.to_string();
        assert!(text.contains("CAP_SYS_PTRACE"), "{text}");
        assert!(text.contains("/dev/userfaultfd"), "{text}");
        assert!(text.contains("vm.unprivileged_userfaultfd=1"), "{text}");
        let e = Error::KernelTooOld {
            feature: "UFFD_FEATURE_MOVE",
            since: KernelVersion::new(6, 8),
            running: Some(KernelVersion::new(6, 1)),
        };
        assert_eq!(
            e.to_string(),
            "UFFD_FEATURE_MOVE needs Linux 6.8 or later; this kernel is 6.1: run on a newer kernel"
        );
        assert!(Error::Blocked { errno: Errno(libc::ENOSYS) }.to_string().contains("seccomp"));
    }
}
