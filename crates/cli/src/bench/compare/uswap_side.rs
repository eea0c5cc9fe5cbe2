//! The uswap side of `uswap bench compare`: the same workload under `uswap run`.
//!
//! ```text
//!   uswap_available      `uswap run --help` answers?       no -> Skipped (this build lacks it)
//!   execute              every process command is replaced by
//!                          <this uswap> run --budget <budget> --zswap lz4 [--folio-order N
//!                            --large-folios P] [--idle-poll MODE] -- <program> <args>
//!                        (before its stdio is set: the harness sets it on the wrapper)
//!   probe, every 50 ms   VmRSS of the run's process tree (`uswap run` and its descendants,
//!                        from /proc/<pid>/task/*/children): the engine, its pool and its
//!                        threads live inside the program, so this is everything it costs
//!   peak                 max(sampled tree RSS, wait4's ru_maxrss of the tree)
//! ```
//!
//! The kernel side reports a memory cgroup's charge (which counts page cache and kernel
//! memory too) plus zram's pool; the uswap side has no cgroup, so the process tree's
//! resident set is the honest equivalent: every byte uswap holds for the program is in it.
//! The budget is the same number on both sides; how far each side's peak lands from it is
//! the comparison (`uswap run` promises the budget plus its slack, docs/RUN.md).

use super::kernel_side::meminfo_bytes;
use super::outcome::{RunOutcome, Side};
use super::runner::{MemoryProbe, Sample};
use super::workloads::{Placement, RunContext, WorkloadSpec};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The most processes one probe sums (a workload is one or two).
const TREE_MAX: usize = 64;

/// Runs `spec` under `uswap run` with `ctx.budget_bytes` of budget.
///
/// Context: blocks for the whole run (minutes); polls the interrupt flag through the
/// runner, like the kernel side.
pub fn run(spec: &WorkloadSpec, ctx: &RunContext) -> Side {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Side::Failed(format!("where is this uswap binary: {e}")),
    };
    if !uswap_run_available(&exe) {
        return Side::Skipped(format!("{} has no `run` subcommand", exe.display()));
    }
    match run_uswap(&exe, spec, ctx) {
        Ok(outcome) => Side::Ran(Box::new(outcome)),
        Err(error) => Side::Failed(format!("{error:#}")),
    }
}

/// Whether this binary has `uswap run`.
fn uswap_run_available(exe: &Path) -> bool {
    let status = Command::new(exe)
        .args(["run", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    status.is_ok_and(|s| s.success())
}

/// `command` wrapped in `uswap run`: the same program, arguments, environment and
/// directory.
fn wrapped(
    exe: &Path,
    command: &Command,
    budget_bytes: u64,
    folios: Option<&(u32, String)>,
    idle_poll: Option<&str>,
) -> Command {
    let mut wrapper = Command::new(exe);
    wrapper.args(["run", "--budget", &budget_bytes.to_string(), "--zswap", "lz4"]);
    if let Some((order, policy)) = folios {
        wrapper.args(["--folio-order", &order.to_string(), "--large-folios", policy]);
    }
    if let Some(mode) = idle_poll {
        wrapper.args(["--idle-poll", mode]);
    }
    wrapper.arg("--");
    wrapper.arg(command.get_program()).args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapper.env(key, value),
            None => wrapper.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        wrapper.current_dir(dir);
    }
    wrapper
}

fn run_uswap(exe: &Path, spec: &WorkloadSpec, ctx: &RunContext) -> Result<RunOutcome> {
    let exe: PathBuf = exe.to_path_buf();
    let prepare = |command: &mut Command| -> Result<()> {
        *command = wrapped(
            &exe,
            command,
            ctx.budget_bytes,
            ctx.uswap_folios.as_ref(),
            ctx.uswap_idle_poll.as_deref(),
        );
        Ok(())
    };
    let probe = TreeProbe;
    let measured = spec
        .execute(ctx, &Placement { prepare: &prepare, probe: &probe })
        .context("under uswap run")?;
    let sampled = measured.samples.iter().map(|s| s.charged_bytes).max().unwrap_or(0);
    let charged_peak_bytes = sampled.max(measured.max_rss_bytes);
    Ok(RunOutcome {
        charged_peak_bytes,
        store_peak_bytes: 0,
        peak_bytes: charged_peak_bytes,
        compressed_peak_bytes: 0,
        original_peak_bytes: 0,
        kmem_peak_bytes: None,
        measured,
    })
}

/// Samples the resident set of a process tree.
struct TreeProbe;

impl MemoryProbe for TreeProbe {
    fn sample(&self, pid: u32) -> Sample {
        Sample { charged_bytes: tree_rss_bytes(Path::new("/proc"), pid), ..Sample::default() }
    }
}

/// VmRSS of `pid` and its descendants (at most [`TREE_MAX`] processes), in bytes; a
/// process that exits meanwhile counts as 0.
fn tree_rss_bytes(proc_root: &Path, pid: u32) -> u64 {
    let mut pending = vec![pid];
    let (mut total, mut seen) = (0, 0);
    while let Some(pid) = pending.pop() {
        seen += 1;
        if seen > TREE_MAX {
            break;
        }
        let status = std::fs::read_to_string(proc_root.join(format!("{pid}/status")));
        total += status.ok().and_then(|s| meminfo_bytes(&s, "VmRSS")).unwrap_or(0);
        let tasks = std::fs::read_dir(proc_root.join(format!("{pid}/task")));
        for task in tasks.into_iter().flatten().flatten() {
            let children = std::fs::read_to_string(task.path().join("children"));
            let children = children.unwrap_or_default();
            pending.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_sums_its_processes() {
        let root = std::env::temp_dir().join(format!("uswap-tree-{}", std::process::id()));
        for (pid, rss, children) in [(10, 100, "11 12"), (11, 20, ""), (12, 3, "13"), (13, 1, "")] {
            let task = root.join(format!("{pid}/task/{pid}"));
            std::fs::create_dir_all(&task).unwrap();
            let status = format!("Name:\tx\nVmRSS:\t  {rss} kB\nThreads:\t1\n");
            std::fs::write(root.join(format!("{pid}/status")), status).unwrap();
            std::fs::write(task.join("children"), children).unwrap();
        }
        assert_eq!(tree_rss_bytes(&root, 10), 124 * 1024);
        assert_eq!(tree_rss_bytes(&root, 12), 4 * 1024);
        assert_eq!(tree_rss_bytes(&root, 99), 0, "a process gone counts 0");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_wrapper_keeps_program_arguments_and_environment() {
        let mut inner = Command::new("/bin/prog");
        inner.args(["-a", "b"]).env("K", "V").current_dir("/tmp");
        let outer = wrapped(Path::new("/x/uswap"), &inner, 1 << 28, None, None);
        let args: Vec<_> = outer.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            ["run", "--budget", "268435456", "--zswap", "lz4", "--", "/bin/prog", "-a", "b"]
        );
        assert_eq!(outer.get_program(), "/x/uswap");
        let envs: Vec<_> = outer.get_envs().collect();
        assert_eq!(envs, [(std::ffi::OsStr::new("K"), Some(std::ffi::OsStr::new("V")))]);
        assert_eq!(outer.get_current_dir(), Some(Path::new("/tmp")));
        let folios = (0, "always".to_string());
        let outer = wrapped(Path::new("/x/uswap"), &inner, 4096, Some(&folios), Some("off"));
        let args: Vec<_> = outer.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let flags = ["--folio-order", "0", "--large-folios", "always", "--idle-poll", "off", "--"];
        assert_eq!(args[5..12], flags, "{args:?}");
    }
}
