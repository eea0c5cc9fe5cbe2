//! The privilege ladder: what lets this user trap the page faults `uswap run` must serve.
//!
//! A program's system calls touch its heap (`read(2)` into a buffer that was paged out):
//! those are faults taken in kernel mode, and only a userfaultfd that traps them can serve
//! them. The kernel gives one three ways, found at start-up in this order:
//!
//! ```text
//!   rung 1  userfaultfd(2) traps kernel-mode faults   root or CAP_SYS_PTRACE
//!                                                      (or sysctl vm.unprivileged_userfaultfd=1)
//!   rung 2  /dev/userfaultfd is read-write for us     an administrator's group, once
//!           (USERFAULTFD_IOC_NEW, Linux 6.1)           (contrib/userfaultfd: udev rule + setup)
//!   rung 3  neither                                   `uswap run` refuses, saying how to
//!                                                      reach rung 2; `--delivery sigbus` runs
//! ```
//!
//! Rungs 1 and 2 run the same code: a forked child serves its own faults through a
//! userfaultfd of its own (crates/frontend/src/fork.rs), so `UFFD_FEATURE_EVENT_FORK`, the one
//! feature that needs CAP_SYS_PTRACE whatever the descriptor's origin, is never asked for.
//! `--delivery sigbus` needs no rung: with `UFFD_FEATURE_SIGBUS` a kernel-mode fault is
//! EFAULT at every rung, so a user-mode-only userfaultfd does the same work there.
//!
//! The ladder is a pure function of the uffd crate's probe ([`Ladder::of`]), so each rung's
//! wording is unit-tested with made-up probes; [`Ladder::find`] runs it on this machine.

use anyhow::{anyhow, Result};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use uffd::{Probe, Via};

/// The device node of Linux 6.1's `USERFAULTFD_IOC_NEW`.
pub const DEVICE: &str = "/dev/userfaultfd";
/// The group contrib/userfaultfd's udev rule gives the device to.
pub const GROUP: &str = "userfaultfd";
/// The administrator's one-time set-up, in uswap's source tree.
pub const SETUP: &str = "contrib/userfaultfd/setup-userfaultfd";

/// A rung of the ladder (module essay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    /// userfaultfd(2) traps kernel-mode faults.
    Privileged {
        /// Through the capability (else through the sysctl).
        capability: bool,
    },
    /// `/dev/userfaultfd` gives a userfaultfd that traps kernel-mode faults.
    Device,
    /// Kernel-mode faults cannot be trapped.
    Neither,
}

/// What `/dev/userfaultfd` looks like from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceNode {
    /// No such file (a kernel before 6.1, or a container it was not passed into).
    Missing,
    /// It exists: its mode bits, owner and group (ids).
    Present {
        /// Permission bits (0o600 on a fresh system).
        mode: u32,
        /// Owner uid.
        uid: u32,
        /// Group gid.
        gid: u32,
    },
}

impl DeviceNode {
    /// Looks at [`DEVICE`].
    pub fn look() -> DeviceNode {
        match std::fs::metadata(DEVICE) {
            Ok(meta) => DeviceNode::Present {
                mode: meta.permissions().mode() & 0o7777,
                uid: meta.uid(),
                gid: meta.gid(),
            },
            Err(_) => DeviceNode::Missing,
        }
    }
}

/// The rung found, and what it was found from.
#[derive(Debug)]
pub struct Ladder {
    /// The rung.
    pub rung: Rung,
    /// The device node.
    pub device: DeviceNode,
    /// The probe failed outright (no userfaultfd at all): its message.
    pub unusable: Option<String>,
}

impl Ladder {
    /// The ladder on this machine, for this process.
    pub fn find() -> (Ladder, Option<Probe>) {
        let device = DeviceNode::look();
        match uffd::probe() {
            Ok(probe) => (Ladder::of(&probe, device), Some(probe)),
            Err(e) => (Ladder { rung: Rung::Neither, device, unusable: Some(e.to_string()) }, None),
        }
    }

    /// The rung a probe shows.
    pub fn of(probe: &Probe, device: DeviceNode) -> Ladder {
        let rung = match (probe.kernel_faults, probe.via) {
            (true, Via::DevNode) => Rung::Device,
            (true, _) => Rung::Privileged { capability: probe.cap_sys_ptrace },
            (false, _) => Rung::Neither,
        };
        Ladder { rung, device, unusable: None }
    }

    /// The rung, explained in one line.
    pub fn line(&self) -> String {
        match self.rung {
            Rung::Privileged { capability: true } => "rung 1 of 3: root or CAP_SYS_PTRACE: \
                 userfaultfd(2) traps faults taken inside system calls"
                .to_string(),
            Rung::Privileged { capability: false } => "rung 1 of 3: sysctl \
                 vm.unprivileged_userfaultfd=1: userfaultfd(2) traps faults taken inside \
                 system calls for every user"
                .to_string(),
            Rung::Device => format!(
                "rung 2 of 3: read-write {DEVICE}: a userfaultfd from the device traps faults \
                 taken inside system calls, with no privilege"
            ),
            Rung::Neither => format!(
                "rung 3 of 3: neither root nor CAP_SYS_PTRACE nor \
                 read-write {DEVICE}: faults taken inside system calls cannot be trapped; {}",
                self.how_to_reach_rung_2()
            ),
        }
    }

    /// What gets this user to rung 2, in one sentence.
    pub fn how_to_reach_rung_2(&self) -> String {
        if let Some(why) = &self.unusable {
            return format!("no userfaultfd at all here ({why})");
        }
        match &self.device {
            DeviceNode::Missing => format!(
                "{DEVICE} is missing: it needs Linux 6.1 or later (this is {}); in a container, \
                 start it with --device {DEVICE} (docs/CONTAINERS.md)",
                uffd::KernelVersion::running().map_or("unknown".to_string(), |v| v.to_string())
            ),
            DeviceNode::Present { .. } => format!(
                "to reach rung 2, an administrator runs {SETUP} from uswap's source once (a \
                 udev rule giving group {GROUP} read-write {DEVICE}) and adds you (usermod \
                 -aG {GROUP} $USER, then log in again); `uswap check` shows what is missing"
            ),
        }
    }
}

/// What `uswap run` needs of userfaultfd: the features, PAGEMAP_SCAN, and, under handler
/// delivery, rung 1 or 2 (a program's `read(2)` into an evicted buffer is a kernel-mode
/// fault). Forked children need nothing more: each serves itself, with no
/// `UFFD_FEATURE_EVENT_FORK`.
///
/// # Errors
/// One line: the ladder's rung 3 with the way to rung 2, or the missing feature.
pub fn check_userfaultfd(sigbus: bool) -> Result<()> {
    let (ladder, probe) = Ladder::find();
    let Some(probe) = probe else {
        let why = ladder.unusable.unwrap_or_default();
        return Err(anyhow!("userfaultfd: {why}"));
    };
    let features = if sigbus {
        frontend::REQUIRED_FEATURES | uffd::Features::SIGBUS
    } else {
        frontend::REQUIRED_FEATURES
    };
    probe.require(features).map_err(|e| anyhow!("userfaultfd: {e}"))?;
    if !sigbus && ladder.rung == Rung::Neither {
        return Err(anyhow!("userfaultfd: {}", ladder.line()));
    }
    probe.require_pagemap_scan().map_err(|e| anyhow!("userfaultfd: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use uffd::probe::Attempts;
    use uffd::{Errno, Error, Features, KernelVersion};

    fn probe(via: Via, kernel_faults: bool, cap: bool) -> Probe {
        Probe {
            running: Some(KernelVersion::new(6, 18)),
            via,
            kernel_faults,
            kernel_faults_denied: (!kernel_faults).then_some(Error::NoKernelFaultPermission {
                errno: Errno(libc::EPERM),
                user_mode_only_works: true,
            }),
            features: Features::from_bits(0x1ffff),
            pagemap_scan: true,
            seccomp_filter: false,
            cap_sys_ptrace: cap,
            attempts: Attempts::default(),
        }
    }

    const FRESH: DeviceNode = DeviceNode::Present { mode: 0o600, uid: 0, gid: 0 };

    #[test]
    fn each_rung_is_found_and_said_in_one_line() {
        let root = Ladder::of(&probe(Via::Syscall, true, true), FRESH);
        assert_eq!(root.rung, Rung::Privileged { capability: true });
        assert!(root.line().starts_with("rung 1 of 3: root or CAP_SYS_PTRACE"), "{}", root.line());
        let sysctl = Ladder::of(&probe(Via::Syscall, true, false), FRESH);
        assert!(sysctl.line().contains("vm.unprivileged_userfaultfd=1"), "{}", sysctl.line());
        let device = Ladder::of(&probe(Via::DevNode, true, false), FRESH);
        assert_eq!(device.rung, Rung::Device);
        assert!(device.line().starts_with("rung 2 of 3: read-write /dev/userfaultfd"));
        let neither = Ladder::of(&probe(Via::Syscall, false, false), FRESH);
        assert_eq!(neither.rung, Rung::Neither);
        for ladder in [root, sysctl, device, neither] {
            assert_eq!(ladder.line().lines().count(), 1, "{}", ladder.line());
        }
    }

    #[test]
    fn rung_3_says_exactly_how_to_reach_rung_2() {
        let neither = Ladder::of(&probe(Via::Syscall, false, false), FRESH);
        let line = neither.line();
        assert!(line.starts_with("rung 3 of 3"), "{line}");
        assert!(line.contains(SETUP), "{line}");
        assert!(line.contains("group userfaultfd read-write /dev/userfaultfd"), "{line}");
        assert!(line.contains("usermod -aG userfaultfd"), "{line}");
        let missing = Ladder::of(&probe(Via::Syscall, false, false), DeviceNode::Missing);
        let line = missing.line();
        assert!(line.contains("Linux 6.1 or later"), "{line}");
        assert!(line.contains("--device /dev/userfaultfd"), "{line}");
    }
}
