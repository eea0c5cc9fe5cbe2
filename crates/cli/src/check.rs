//! `uswap check`: can `uswap run` work on this machine, for this user, and if not, what is
//! missing.
//!
//! One line per thing `uswap run` needs, each `ok`, `note` (works, with a limit worth
//! knowing) or `MISSING` (with what to do), then the verdict. Exit status 0 when `uswap
//! run` can run here in its default (handler) delivery, 1 when it cannot. Nothing is
//! changed on the machine: the probes open and close a few userfaultfds and one file in
//! the swap directory.

use crate::ladder::{self, DeviceNode, Ladder, Rung};
use anyhow::Result;
use runstat::format_size;
use std::path::{Path, PathBuf};
use uffd::{Features, KernelVersion, Probe};

/// Flags of `uswap check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The directory the swap file would go in (default: $TMPDIR, as `uswap run`).
    #[arg(long, value_name = "DIR")]
    swap_dir: Option<PathBuf>,
}

/// How one finding stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Ok,
    Note,
    Missing,
}

/// One line of the report.
#[derive(Debug)]
struct Finding {
    mark: Mark,
    what: &'static str,
    detail: String,
}

fn finding(mark: Mark, what: &'static str, detail: impl Into<String>) -> Finding {
    Finding { mark, what, detail: detail.into() }
}

/// The oldest kernel with everything `uswap run` requires (UFFDIO_MOVE came last).
const NEEDED_KERNEL: KernelVersion = KernelVersion::new(6, 8);

/// Runs `uswap check`; the exit status.
///
/// # Errors
/// None today: every problem is a finding.
pub fn run(args: CheckArgs) -> Result<i32> {
    let (ladder, probe) = Ladder::find();
    let mut findings = vec![kernel()];
    findings.push(syscall(probe.as_ref()));
    findings.push(device(&ladder.device));
    let rung_mark = if ladder.rung == Rung::Neither { Mark::Missing } else { Mark::Ok };
    findings.push(finding(rung_mark, "privilege", ladder.line()));
    findings.extend(features(probe.as_ref()));
    let swap_dir = args.swap_dir.unwrap_or_else(std::env::temp_dir);
    findings.push(swap_space(&swap_dir));
    findings.push(shim());
    for f in &findings {
        let mark = match f.mark {
            Mark::Ok => "ok",
            Mark::Note => "note",
            Mark::Missing => "MISSING",
        };
        println!("{mark:<8} {:<17} {}", f.what, f.detail);
    }
    let missing = findings.iter().filter(|f| f.mark == Mark::Missing).count();
    if missing == 0 {
        println!("uswap run can run here");
        return Ok(0);
    }
    let sigbus_only = missing == 1 && ladder.rung == Rung::Neither && ladder.unusable.is_none();
    if sigbus_only {
        println!(
            "uswap run cannot run here (1 thing missing): only --delivery sigbus, whose \
             system calls into swapped pages fail with EFAULT and are retried by the shim \
             (docs/RUN.md, \"Fault delivery\")"
        );
    } else {
        println!("uswap run cannot run here ({missing} things missing)");
    }
    Ok(1)
}

/// The shim a run would load, and whether it can be loaded from where it would be.
fn shim() -> Finding {
    match crate::shim::Shim::for_run(&std::env::temp_dir()) {
        Ok(shim) => finding(Mark::Ok, "shim", shim.describe()),
        Err(e) => finding(Mark::Missing, "shim", format!("{e:#}")),
    }
}

fn kernel() -> Finding {
    match KernelVersion::running() {
        Some(v) if v >= NEEDED_KERNEL => finding(Mark::Ok, "kernel", format!("Linux {v}")),
        Some(v) => finding(
            Mark::Missing,
            "kernel",
            format!("Linux {v}: uswap needs {NEEDED_KERNEL} or later (UFFDIO_MOVE)"),
        ),
        None => finding(Mark::Note, "kernel", "release unknown (uname failed)"),
    }
}

/// userfaultfd(2) itself: what it gave, and the sysctl that decides it for non-root.
fn syscall(probe: Option<&Probe>) -> Finding {
    let sysctl = std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd")
        .map_or_else(|_| "unknown".to_string(), |s| s.trim().to_string());
    let Some(probe) = probe else {
        return finding(Mark::Missing, "userfaultfd(2)", "no userfaultfd at all (see below)");
    };
    let seccomp = if probe.seccomp_filter { ", under a seccomp filter" } else { "" };
    match probe.attempts.full {
        Some(Ok(())) => finding(
            Mark::Ok,
            "userfaultfd(2)",
            format!("traps kernel-mode faults (vm.unprivileged_userfaultfd={sysctl}){seccomp}"),
        ),
        Some(Err(errno)) => finding(
            Mark::Note,
            "userfaultfd(2)",
            format!(
                "{errno} for kernel-mode faults (vm.unprivileged_userfaultfd={sysctl}, \
                 CAP_SYS_PTRACE {}){seccomp}",
                if probe.cap_sys_ptrace { "yes" } else { "no" }
            ),
        ),
        None => finding(Mark::Note, "userfaultfd(2)", "not tried"),
    }
}

/// /dev/userfaultfd: its owner, group and mode, and whether this process gets a uffd
/// from it.
fn device(node: &DeviceNode) -> Finding {
    let DeviceNode::Present { mode, uid, gid } = *node else {
        return finding(
            Mark::Note,
            "/dev/userfaultfd",
            format!("missing (Linux 6.1+; in a container: --device {})", ladder::DEVICE),
        );
    };
    let group = group_name(gid).unwrap_or_else(|| gid.to_string());
    let member = if in_group(gid) { "a member" } else { "not a member" };
    // Access is checked at open (USERFAULTFD_IOC_NEW then needs nothing more): the probe's
    // rung says whether the ioctl works.
    let opened = std::fs::OpenOptions::new().read(true).write(true).open(ladder::DEVICE);
    let (mark, result) = match opened {
        Ok(_) => (Mark::Ok, "read-write for this process".to_string()),
        Err(e) => (Mark::Note, format!("not read-write for this process ({e})")),
    };
    finding(
        mark,
        "/dev/userfaultfd",
        format!("mode {mode:04o}, owner uid {uid}, group {group} ({member}); {result}"),
    )
}

/// The features `uswap run` requires, and those its options use.
fn features(probe: Option<&Probe>) -> Vec<Finding> {
    let Some(probe) = probe else { return Vec::new() };
    let mut out = Vec::new();
    out.push(match probe.require(frontend::REQUIRED_FEATURES) {
        Ok(()) => finding(
            Mark::Ok,
            "features",
            "MOVE, POISON, EVENT_REMAP, EVENT_REMOVE, EVENT_UNMAP (required)",
        ),
        Err(e) => finding(Mark::Missing, "features", e.to_string()),
    });
    let optional = [
        (Features::PAGEFAULT_FLAG_WP, "WP", "--zero-pages protected (else: charged)"),
        (Features::SIGBUS, "SIGBUS", "--delivery sigbus"),
        (Features::THREAD_ID, "THREAD_ID", "--handler-placement follow, --record"),
    ];
    for (feature, name, used_by) in optional {
        out.push(if probe.features.contains(feature) {
            finding(Mark::Ok, "feature", format!("{name} ({used_by})"))
        } else {
            finding(Mark::Note, "feature", format!("{name} missing: no {used_by}"))
        });
    }
    out.push(match probe.require_pagemap_scan() {
        Ok(()) => finding(Mark::Ok, "PAGEMAP_SCAN", "works on /proc/self/pagemap"),
        Err(e) => finding(Mark::Missing, "PAGEMAP_SCAN", e.to_string()),
    });
    out
}

/// The swap directory: writable, and its free space against the default swap file.
fn swap_space(dir: &Path) -> Finding {
    let probe_file = dir.join(format!(".uswap-check-{}", std::process::id()));
    let writable = std::fs::File::create(&probe_file).map(drop);
    let _ = std::fs::remove_file(&probe_file);
    if let Err(e) = writable {
        return finding(
            Mark::Missing,
            "swap directory",
            format!("{}: cannot create a file there ({e}); give --swap-file", dir.display()),
        );
    }
    let free = match rustix::fs::statvfs(dir) {
        Ok(stat) => stat.f_bavail.saturating_mul(stat.f_frsize),
        Err(e) => return finding(Mark::Note, "swap directory", format!("{}: {e}", dir.display())),
    };
    let keep = runstat::env::SWAP_FILE_KEEP_FREE_BYTES;
    let mark = if free > keep { Mark::Ok } else { Mark::Note };
    let limit = if free > keep {
        String::new()
    } else {
        format!(": under {}, nothing is written to the swap file", format_size(keep))
    };
    finding(mark, "swap directory", format!("{}: {} free{limit}", dir.display(), format_size(free)))
}

/// The name of group `gid` in /etc/group.
fn group_name(gid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == gid).then(|| name.to_string())
    })
}

/// Whether this process has `gid` as its group or a supplementary one (/proc/self/status).
fn in_group(gid: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> Vec<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|rest| rest.split_whitespace().filter_map(|w| w.parse().ok()).collect())
            .unwrap_or_default()
    };
    field("Gid:").contains(&gid) || field("Groups:").contains(&gid)
}
