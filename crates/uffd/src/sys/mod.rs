//! The syscall boundary: the one place in uswap where `unsafe` meets the kernel.
//!
//! Everything above this module is safe Rust. Everything here is small: a struct is filled,
//! one syscall is made, its result is turned into `Result<_, Errno>`. No policy, no retries,
//! no allocation (the SIGBUS handler in [`signal`] runs in signal context and must not).
//!
//! ```text
//!   uffd::Uffd, uffd::mm::Mapping, uffd::pagemap, uffd::sigbus      (safe API, policy)
//!   ------------------------------------------------------------------------------
//!   sys::call    ioctl(UFFDIO_*), userfaultfd(2), read(2), poll(2), PAGEMAP_SCAN
//!   sys::mem     mmap, munmap, madvise, mremap, mprotect, volatile loads and stores
//!   sys::mapping Mapping: owned anonymous memory, volatile/atomic access only
//!   sys::moves   UFFDIO_MOVE: the raw (unsafe) form and the safe Mapping-sourced forms
//!   sys::signal  sigaction(SIGBUS), the handler's lock-free table, SigbusResolver
//!   sys::forking the hold pipe, the forking thread's signal mask, glibc's stdio list
//!   sys::process pthread_atfork, getpid, sched_yield, CPU affinity and policy, byte views
//!                of managed regions
//!   sys::abi     constants, #[repr(C)] structs, ioctl numbers, compile-time asserts
//! ```
//!
//! Which raw calls are `unsafe fn`: those that can change memory that safe Rust may hold
//! references to (`UFFDIO_MOVE` takes the page *out* of its source; `madvise(DONTNEED)`,
//! `munmap`, `mremap`, `mprotect` on a caller-chosen address) and the raw loads and stores.
//! The populate-only ioctls (`COPY`, `ZEROPAGE`, `POISON`, `WAKE`, `WRITEPROTECT`) are safe:
//! the kernel accepts a destination only inside a range registered with this uffd, and only
//! where no page is mapped yet (else `EEXIST`), so no memory that Rust code could have read
//! changes under it; their source is read by the kernel (`copy_from_user`), which turns a
//! bad address into `EFAULT`, never into undefined behaviour here.
//!
//! Conventions in this module: `fd` is a userfaultfd unless named otherwise; every length is
//! in bytes; `SAFETY:` reasons are numbered when there are several.

#![allow(unsafe_code)]

pub mod abi;
pub mod call;
pub mod forking;
pub mod mapping;
pub mod mem;
pub mod moves;
pub mod process;
pub mod signal;

pub use abi::*;

/// An errno value from a failed syscall.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current errno.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// The symbolic name of the common values ("EAGAIN"), or "errno N".
    pub fn name(self) -> &'static str {
        match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::ESRCH => "ESRCH",
            libc::EINTR => "EINTR",
            libc::EBADF => "EBADF",
            libc::EAGAIN => "EAGAIN",
            libc::ENOMEM => "ENOMEM",
            libc::EACCES => "EACCES",
            libc::EFAULT => "EFAULT",
            libc::EBUSY => "EBUSY",
            libc::EEXIST => "EEXIST",
            libc::EINVAL => "EINVAL",
            libc::ENFILE => "ENFILE",
            libc::EMFILE => "EMFILE",
            libc::ENOTTY => "ENOTTY",
            libc::ENOSPC => "ENOSPC",
            libc::ENOSYS => "ENOSYS",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            _ => "errno",
        }
    }
}

impl core::fmt::Debug for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let text = std::io::Error::from_raw_os_error(self.0);
        write!(f, "{} ({text})", self.name())
    }
}

/// Turns a `-1`-means-error return value into a `Result`.
fn check(ret: libc::c_long) -> Result<libc::c_long, Errno> {
    if ret == -1 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}
