//! The start-up probe: what this kernel and this process allow, and, for what they do not,
//! an error that says exactly what is wrong and what to do.
//!
//! `uswap run` manages unmodified programs, which make system calls into their heap: a
//! `read(2)` into an evicted buffer is a fault taken in kernel mode. Only a uffd that traps
//! kernel-mode faults can serve it (a user-mode-only uffd makes the syscall fail with
//! EFAULT). So the probe tries, in order, and records every outcome:
//!
//! ```text
//!   userfaultfd(O_CLOEXEC|O_NONBLOCK)            ok -> kernel faults, via syscall
//!     EPERM -> open /dev/userfaultfd + IOC_NEW   ok -> kernel faults, via /dev/userfaultfd
//!   userfaultfd(... | UFFD_USER_MODE_ONLY)       ok -> user faults only (say why not more)
//!   all failed -> classify the errnos:
//!     ENOSYS + seccomp filter        -> Blocked
//!     ENOSYS alone                   -> NotBuilt
//!     EPERM  + seccomp filter        -> Blocked
//!     EPERM, user-only EINVAL (<5.11) -> NoKernelFaultPermission
//!     EPERM  everywhere              -> Denied (a security module)
//!     anything else                  -> Create (the raw errno)
//! ```
//!
//! [`classify`] is a pure function of the recorded outcomes, so every branch is unit-tested
//! with injected errnos; [`probe`] runs it on this machine.

use crate::error::{Error, Op};
use crate::mm::Mapping;
use crate::pagemap::{Categories, PageMap, ScanArgs};
use crate::sys::{self, call, Errno};
use crate::types::{Features, KernelVersion};
use crate::uffd::Via;
use crate::PAGE_SIZE;
use std::os::fd::{AsFd, OwnedFd};

/// The outcome of each way of creating a uffd that was tried (`None`: not tried).
#[derive(Debug, Default, Clone)]
pub struct Attempts {
    /// userfaultfd(2) without `UFFD_USER_MODE_ONLY`.
    pub full: Option<Result<(), Errno>>,
    /// userfaultfd(2) with `UFFD_USER_MODE_ONLY`.
    pub user_only: Option<Result<(), Errno>>,
    /// `/dev/userfaultfd` + `USERFAULTFD_IOC_NEW`.
    pub dev_node: Option<Result<(), Errno>>,
    /// The process runs under a seccomp filter (`Seccomp: 2` in /proc/self/status).
    pub seccomp_filter: bool,
}

impl Attempts {
    pub(crate) fn record_syscall(&mut self, user_mode_only: bool, errno: Errno) {
        if user_mode_only {
            self.user_only = Some(Err(errno));
        } else {
            self.full = Some(Err(errno));
        }
    }

    pub(crate) fn syscall_said(&self, errno: i32) -> bool {
        matches!(self.full, Some(Err(Errno(e))) if e == errno)
            || matches!(self.user_only, Some(Err(Errno(e))) if e == errno)
    }
}

/// What the attempts add up to.
#[derive(Debug)]
pub enum Verdict {
    /// Kernel-mode faults can be trapped; create the uffd this way.
    Full(Via),
    /// Only a user-mode-only uffd can be created; `why` says what kernel faults need.
    UserModeOnly {
        /// The error a caller that needs kernel faults reports.
        why: Error,
    },
    /// No uffd at all.
    Unusable(Error),
}

/// Classifies recorded attempts (module essay's table).
pub fn classify(a: &Attempts) -> Verdict {
    if matches!(a.full, Some(Ok(()))) {
        return Verdict::Full(Via::Syscall);
    }
    if matches!(a.dev_node, Some(Ok(()))) {
        return Verdict::Full(Via::DevNode);
    }
    let full_errno = match (a.full, a.dev_node) {
        (Some(Err(e)), _) | (None, Some(Err(e))) => Some(e),
        _ => None,
    };
    if matches!(a.user_only, Some(Ok(()))) {
        let errno = full_errno.unwrap_or(Errno(libc::EPERM));
        return Verdict::UserModeOnly {
            why: Error::NoKernelFaultPermission { errno, user_mode_only_works: true },
        };
    }
    let user_errno = match a.user_only {
        Some(Err(e)) => Some(e),
        _ => None,
    };
    let Some(errno) = full_errno.or(user_errno) else {
        return Verdict::Unusable(Error::Create { op: Op::Syscall, errno: Errno(0) });
    };
    Verdict::Unusable(match errno.0 {
        libc::ENOSYS if a.seccomp_filter => Error::Blocked { errno },
        libc::ENOSYS => Error::NotBuilt,
        libc::EPERM | libc::EACCES if a.seccomp_filter => Error::Blocked { errno },
        // Before 5.11 there is no user-mode-only uffd (EINVAL): unprivileged use needs the
        // sysctl or a capability, which is exactly what the advice says.
        libc::EPERM if user_errno == Some(Errno(libc::EINVAL)) => {
            Error::NoKernelFaultPermission { errno, user_mode_only_works: false }
        }
        libc::EPERM | libc::EACCES => Error::Denied { errno },
        _ => Error::Create { op: Op::Syscall, errno },
    })
}

/// Whether the calling process has `CAP_SYS_PTRACE` in its effective set (`CapEff`, bit 19,
/// in /proc/self/status).
pub fn cap_sys_ptrace() -> bool {
    const CAP_SYS_PTRACE: u32 = 19;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// Whether the calling process runs under a seccomp filter.
pub fn seccomp_filtered() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Seccomp:")).is_some_and(|mode| mode.trim() == "2")
}

/// What the probe found (see [`probe`]).
#[derive(Debug)]
pub struct Probe {
    /// The running kernel.
    pub running: Option<KernelVersion>,
    /// How to create a uffd that traps as much as this process may.
    pub via: Via,
    /// Kernel-mode faults can be trapped (syscalls into evicted memory wait, not EFAULT).
    pub kernel_faults: bool,
    /// Why kernel-mode faults cannot be trapped, when they cannot.
    pub kernel_faults_denied: Option<Error>,
    /// The features the kernel offers.
    pub features: Features,
    /// PAGEMAP_SCAN works on /proc/self/pagemap.
    pub pagemap_scan: bool,
    /// The process runs under a seccomp filter.
    pub seccomp_filter: bool,
    /// The process has `CAP_SYS_PTRACE` (effective), which `UFFD_FEATURE_EVENT_FORK` needs
    /// (the kernel refuses it otherwise, with EPERM, whatever the uffd's origin).
    pub cap_sys_ptrace: bool,
    /// Every attempt's outcome.
    pub attempts: Attempts,
}

impl Probe {
    /// Checks that every feature of `needed` is offered.
    ///
    /// # Errors
    /// [`Error::KernelTooOld`] naming the first missing feature and the release that added it.
    pub fn require(&self, needed: Features) -> Result<(), Error> {
        match needed.difference(self.features).first() {
            Some((_, feature, since)) => {
                Err(Error::KernelTooOld { feature, since, running: self.running })
            }
            None => Ok(()),
        }
    }

    /// Checks that kernel-mode faults can be trapped.
    ///
    /// # Errors
    /// The reason they cannot ([`Error::NoKernelFaultPermission`] with the fix).
    pub fn require_kernel_faults(&self) -> Result<(), Error> {
        match &self.kernel_faults_denied {
            None => Ok(()),
            Some(Error::NoKernelFaultPermission { errno, user_mode_only_works }) => {
                Err(Error::NoKernelFaultPermission {
                    errno: *errno,
                    user_mode_only_works: *user_mode_only_works,
                })
            }
            Some(_) => Err(Error::NoKernelFaultPermission {
                errno: Errno(libc::EPERM),
                user_mode_only_works: true,
            }),
        }
    }

    /// Checks that PAGEMAP_SCAN works.
    ///
    /// # Errors
    /// [`Error::KernelTooOld`] (PAGEMAP_SCAN came with 6.7).
    pub fn require_pagemap_scan(&self) -> Result<(), Error> {
        if self.pagemap_scan {
            Ok(())
        } else {
            Err(Error::KernelTooOld {
                feature: "PAGEMAP_SCAN",
                since: KernelVersion::new(6, 7),
                running: self.running,
            })
        }
    }

    /// One line for logs: "Linux 6.18, via Syscall, kernel faults: yes, features 0x1ffff".
    pub fn summary(&self) -> String {
        let running = self.running.map_or_else(|| "unknown".to_string(), |v| v.to_string());
        format!(
            "Linux {running}, via {:?}, kernel faults: {}, features {:#x}, PAGEMAP_SCAN: {}, \
             seccomp \
             filter: {}",
            self.via,
            if self.kernel_faults { "yes" } else { "no" },
            self.features.bits(),
            if self.pagemap_scan { "yes" } else { "no" },
            if self.seccomp_filter { "yes" } else { "no" },
        )
    }
}

/// Probes this kernel and process (creates and closes a few uffds; takes well under a
/// millisecond).
///
/// # Errors
/// Only when no uffd can be created at all: [`Error::Blocked`], [`Error::NotBuilt`],
/// [`Error::Denied`], [`Error::NoKernelFaultPermission`] (kernels before 5.11) or
/// [`Error::Create`]; each message says what to do.
///
/// # Panics
/// If the system page size is not [`PAGE_SIZE`] (the whole project assumes 4 KiB pages).
pub fn probe() -> Result<Probe, Error> {
    let page = sys::mem::page_size();
    assert_eq!(page, PAGE_SIZE, "uswap assumes {PAGE_SIZE}-byte pages; this system has {page}");
    let base = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let mut attempts = Attempts { seccomp_filter: seccomp_filtered(), ..Attempts::default() };
    let mut working: Option<OwnedFd> = None;
    let mut keep = |outcome: Result<OwnedFd, Errno>| -> Option<Result<(), Errno>> {
        Some(outcome.map(|fd| {
            working.get_or_insert(fd);
        }))
    };
    attempts.full = keep(call::userfaultfd(base));
    if attempts.syscall_said(libc::EPERM) {
        attempts.dev_node =
            keep(call::open_dev_userfaultfd().and_then(|d| call::dev_new(d.as_fd(), base)));
    }
    attempts.user_only = keep(call::userfaultfd(base | sys::UFFD_USER_MODE_ONLY));
    let (via, kernel_faults_denied) = match classify(&attempts) {
        Verdict::Full(via) => (via, None),
        Verdict::UserModeOnly { why } => (Via::Syscall, Some(why)),
        Verdict::Unusable(error) => return Err(error),
    };
    let fd = working.ok_or(Error::Create { op: Op::Syscall, errno: Errno(0) })?;
    let mut api = sys::uffdio_api { api: sys::UFFD_API, features: 0, ioctls: 0 };
    call::api(fd.as_fd(), &mut api)
        .map_err(|errno| Error::Api { errno, requested: Features::NONE })?;
    Ok(Probe {
        running: KernelVersion::running(),
        via,
        kernel_faults: kernel_faults_denied.is_none(),
        kernel_faults_denied,
        features: Features::from_bits(api.features),
        pagemap_scan: pagemap_scan_works(),
        seccomp_filter: attempts.seccomp_filter,
        cap_sys_ptrace: cap_sys_ptrace(),
        attempts,
    })
}

fn pagemap_scan_works() -> bool {
    let (Ok(map), Ok(pagemap)) = (Mapping::anonymous(PAGE_SIZE), PageMap::open_self()) else {
        return false;
    };
    let args = ScanArgs { report: Categories::PRESENT, ..ScanArgs::default() };
    pagemap.scan(map.range(), &args, &mut Vec::with_capacity(crate::pagemap::SCAN_BATCH)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: Option<Result<(), Errno>> = Some(Ok(()));

    fn err(e: i32) -> Option<Result<(), Errno>> {
        Some(Err(Errno(e)))
    }

    #[test]
    fn root_or_sysctl_gets_kernel_faults_by_syscall() {
        let a = Attempts { full: OK, user_only: OK, ..Attempts::default() };
        assert!(matches!(classify(&a), Verdict::Full(Via::Syscall)));
    }

    #[test]
    fn dev_node_gives_kernel_faults_when_the_syscall_is_refused() {
        let a =
            Attempts { full: err(libc::EPERM), dev_node: OK, user_only: OK, ..Attempts::default() };
        assert!(matches!(classify(&a), Verdict::Full(Via::DevNode)));
    }

    #[test]
    fn unprivileged_user_gets_user_mode_only_and_the_advice() {
        let a = Attempts {
            full: err(libc::EPERM),
            dev_node: err(libc::EACCES),
            user_only: OK,
            ..Attempts::default()
        };
        let Verdict::UserModeOnly { why } = classify(&a) else { panic!("{:?}", classify(&a)) };
        let text = why.to_string();
        assert!(text.contains("root or CAP_SYS_PTRACE"), "{text}");
        assert!(text.contains("/dev/userfaultfd"), "{text}");
        assert!(text.contains("vm.unprivileged_userfaultfd=1"), "{text}");
        assert!(text.contains("EFAULT"), "says what user-mode-only costs: {text}");
    }

    #[test]
    fn seccomp_enosys_is_blocked() {
        let a = Attempts {
            full: err(libc::ENOSYS),
            user_only: err(libc::ENOSYS),
            seccomp_filter: true,
            ..Attempts::default()
        };
        let Verdict::Unusable(e) = classify(&a) else { panic!() };
        assert!(matches!(e, Error::Blocked { errno: Errno(libc::ENOSYS) }), "{e:?}");
        assert!(e.to_string().contains("seccomp"), "{e}");
    }

    #[test]
    fn seccomp_eperm_is_blocked() {
        let a = Attempts {
            full: err(libc::EPERM),
            dev_node: err(libc::ENOENT),
            user_only: err(libc::EPERM),
            seccomp_filter: true,
        };
        let Verdict::Unusable(e) = classify(&a) else { panic!() };
        assert!(matches!(e, Error::Blocked { errno: Errno(libc::EPERM) }), "{e:?}");
    }

    #[test]
    fn enosys_without_filter_is_not_built() {
        let a = Attempts {
            full: err(libc::ENOSYS),
            user_only: err(libc::ENOSYS),
            ..Attempts::default()
        };
        let Verdict::Unusable(e) = classify(&a) else { panic!() };
        assert!(matches!(e, Error::NotBuilt), "{e:?}");
        assert!(e.to_string().contains("CONFIG_USERFAULTFD"), "{e}");
    }

    #[test]
    fn old_kernel_without_user_mode_only_needs_privilege() {
        // 5.2 .. 5.10 with vm.unprivileged_userfaultfd=0: EPERM, and the flag is unknown.
        let a = Attempts {
            full: err(libc::EPERM),
            dev_node: err(libc::ENOENT),
            user_only: err(libc::EINVAL),
            ..Attempts::default()
        };
        let Verdict::Unusable(e) = classify(&a) else { panic!() };
        assert!(
            matches!(e, Error::NoKernelFaultPermission { user_mode_only_works: false, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("vm.unprivileged_userfaultfd=1"), "{e}");
    }

    #[test]
    fn eperm_everywhere_without_filter_is_a_security_module() {
        let a = Attempts {
            full: err(libc::EPERM),
            dev_node: err(libc::EACCES),
            user_only: err(libc::EPERM),
            ..Attempts::default()
        };
        let Verdict::Unusable(e) = classify(&a) else { panic!() };
        assert!(matches!(e, Error::Denied { .. }), "{e:?}");
        assert!(e.to_string().contains("SELinux"), "{e}");
    }

    #[test]
    fn resource_errors_pass_through() {
        let a = Attempts {
            full: err(libc::EMFILE),
            user_only: err(libc::EMFILE),
            ..Attempts::default()
        };
        let Verdict::Unusable(e) = classify(&a) else { panic!() };
        assert!(matches!(e, Error::Create { errno: Errno(libc::EMFILE), .. }), "{e:?}");
    }

    #[test]
    fn require_names_the_feature_and_release() {
        let p = Probe {
            running: Some(KernelVersion::new(6, 6)),
            via: Via::Syscall,
            kernel_faults: true,
            kernel_faults_denied: None,
            features: Features::from_bits(0x7fff), // up to POISON: a 6.6 kernel
            pagemap_scan: false,
            seccomp_filter: false,
            cap_sys_ptrace: true,
            attempts: Attempts::default(),
        };
        assert!(p.require(Features::POISON | Features::SIGBUS).is_ok());
        let e = p.require(Features::MOVE | Features::WP_ASYNC).unwrap_err();
        assert_eq!(
            e.to_string(),
            "UFFD_FEATURE_WP_ASYNC needs Linux 6.7 or later; this kernel is 6.6: \
             run on a newer kernel"
        );
        assert!(p
            .require_pagemap_scan()
            .unwrap_err()
            .to_string()
            .contains("PAGEMAP_SCAN needs Linux 6.7"));
        assert!(p.require_kernel_faults().is_ok());
    }
}
