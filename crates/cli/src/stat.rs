//! `uswap stat PID`: the live figures of a process tree running under `uswap run`, given
//! the pid of any process of the tree or of `uswap run` itself.
//!
//! The broker rewrites `<run dir>/tree` every second (crates/cli/src/run/view.rs) and each
//! member's shim `<run dir>/live-<pid>` (runstat's stats file). The run directory is found
//! from the process's environment (`USWAP_RUN_DIR` in /proc/PID/environ), or, for
//! `uswap run`'s own pid, by its name (`uswap-run-<pid>-*` in the temporary directory),
//! or, for a program that wrote over its environment (redis's process title takes that
//! memory), by the tree files there that list it. A directory counts only if its tree
//! lists the pid as running: an environment inherited by a process outside the run, or
//! a run that ended, is not enough. Anything else is "pid N is not running under uswap",
//! exit status 1.

use crate::run::summary::{self, Files};
use crate::run::view::{ProcState, TreeView};
use anyhow::{bail, Result};
use runstat::format_size;
use std::path::{Path, PathBuf};

/// Flags of `uswap stat`.
#[derive(Debug, clap::Args)]
pub struct StatArgs {
    /// The pid of any process of the tree (or of `uswap run`).
    pid: u32,
    /// Print every counter of every process, and the broker's figures.
    #[arg(long)]
    all: bool,
}

/// Prints the figures.
///
/// # Errors
/// The pid is not running under uswap.
pub fn run(args: StatArgs) -> Result<()> {
    let Some((dir, view)) = find(args.pid) else {
        bail!("pid {} is not running under uswap", args.pid);
    };
    let files = summary::read_files(&dir);
    for line in lines(&view, &files) {
        println!("{line}");
    }
    if args.all {
        println!("tree");
        for (name, value) in &view.values {
            println!("  {name} {value}");
        }
        for (pid, file) in &files.by_pid {
            println!("pid {pid}");
            for (name, value) in &file.values {
                println!("  {name} {value}");
            }
        }
    }
    Ok(())
}

/// The tree's totals, then a line per process running.
fn lines(view: &TreeView, files: &Files) -> Vec<String> {
    let budget = view.get("budget_bytes");
    let mut out = vec![
        format!(
            "tree of uswap run {}: budget {}, resident now {}, peak {}",
            view.get("broker"),
            format_size(budget),
            format_size(view.get("now_bytes")),
            format_size(view.get("peak_bytes"))
        ),
        summary::paged_out_line(&files.total),
    ];
    if view.get("auto_target_ppm") > 0 {
        // `--budget auto`: why the budget is what it is now.
        out.push(format!("budget {}", view.budget_source));
    }
    for p in view.procs.iter().filter(|p| p.state != ProcState::Exited) {
        let up = files.by_pid.get(&p.pid).map_or(0, |f| f.get("uptime_ms")) as f64 / 1000.0;
        match files.by_pid.get(&p.pid).filter(|_| p.state == ProcState::Member) {
            Some(file) => {
                let line = summary::process_line(p, file);
                let rest = line.split_once(' ').map_or("", |(_, rest)| rest);
                out.push(format!(
                    "pid {}, up {up:.1} s, share {}: {rest}",
                    p.pid,
                    format_size(p.share_bytes)
                ));
            }
            None => out.push(format!(
                "pid {} {}: unmanaged ({}), resident {}",
                p.pid,
                p.name,
                if p.why.is_empty() { "starting" } else { &p.why },
                format_size(p.rss_bytes)
            )),
        }
    }
    out
}

/// The run directory and tree of the run `pid` belongs to (module essay).
fn find(pid: u32) -> Option<(PathBuf, TreeView)> {
    let mut candidates: Vec<PathBuf> = run_dir_of(pid).into_iter().collect();
    let runs = run_dirs();
    let mine = format!("uswap-run-{pid}-");
    candidates.extend(runs.iter().filter(|d| name_of(d).starts_with(&mine)).cloned());
    candidates.extend(runs);
    candidates.into_iter().find_map(|dir| {
        let view = read_view(&dir)?;
        let running = view.proc(pid).is_some_and(|p| p.state != ProcState::Exited);
        (running || view.get("broker") == u64::from(pid)).then_some((dir, view))
    })
}

fn name_of(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default()
}

/// Every run directory in the temporary directory.
fn run_dirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return Vec::new() };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| name_of(p).starts_with("uswap-run-") && p.is_dir())
        .collect()
}

fn read_view(dir: &Path) -> Option<TreeView> {
    let text = std::fs::read_to_string(dir.join(runstat::env::TREE_FILE)).ok()?;
    TreeView::parse(&text).ok()
}

/// `pid`'s run directory, if it is a managed process: from its environment, else the run
/// directory holding its live stats file (module essay).
pub(crate) fn run_dir_for(pid: u32) -> Option<PathBuf> {
    if let Some(dir) = run_dir_of(pid).filter(|d| d.join(format!("live-{pid}")).exists()) {
        return Some(dir);
    }
    run_dirs().into_iter().find(|d| d.join(format!("live-{pid}")).exists())
}

/// The run directory in `pid`'s environment, if it names one that exists.
fn run_dir_of(pid: u32) -> Option<PathBuf> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let key = format!("{}=", runstat::env::RUN_DIR);
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(key.as_bytes()))
        .map(|dir| PathBuf::from(String::from_utf8_lossy(dir).to_string()))
        .filter(|dir| dir.is_dir())
}
