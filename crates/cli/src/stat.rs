//! `uswap stat PID`: the live figures of a program running under `uswap run`.
//!
//! The shim rewrites `<run dir>/live-<pid>` every second (runstat's stats file); the run
//! directory is in the program's environment (`USWAP_RUN_DIR`, read from
//! /proc/PID/environ). PID may also be `uswap run`'s own: its managed program is found
//! among its descendants (/proc/PID/task/PID/children, two levels: `uswap run` starts the
//! program through a helper). A program that writes over its environment (redis's process
//! title takes that memory) is found by its live file instead: `uswap-run-<pid of uswap
//! run>-*/live-<pid>` in the temporary directory, `uswap run` being an ancestor.

use anyhow::{anyhow, bail, Result};
use runstat::{StatsFile, Summary};
use std::path::PathBuf;

/// Flags of `uswap stat`.
#[derive(Debug, clap::Args)]
pub struct StatArgs {
    /// The managed program's pid (or `uswap run`'s).
    pid: u32,
    /// Print every counter, not only the summary.
    #[arg(long)]
    all: bool,
}

/// Prints the figures.
///
/// # Errors
/// No such process, or not one run by `uswap run`, or no stats yet.
pub fn run(args: StatArgs) -> Result<()> {
    let (pid, dir) = find(args.pid)?;
    let path = dir.join(format!("live-{pid}"));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow!("no live stats for pid {pid} at {}: {e}", path.display()))?;
    let file = StatsFile::parse(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    println!("pid {pid}, up {:.1} s", file.get("uptime_ms") as f64 / 1000.0);
    for line in Summary::of(&file).to_lines("") {
        println!("{line}");
    }
    if args.all {
        for (name, value) in &file.values {
            println!("{name} {value}");
        }
    }
    Ok(())
}

/// The managed pid and its run directory.
fn find(pid: u32) -> Result<(u32, PathBuf)> {
    let children = |of: u32| -> Vec<u32> {
        let text = std::fs::read_to_string(format!("/proc/{of}/task/{of}/children"));
        text.unwrap_or_default().split_whitespace().filter_map(|c| c.parse().ok()).collect()
    };
    let mut candidates = vec![pid];
    for child in children(pid) {
        candidates.push(child);
        candidates.extend(children(child));
    }
    for &candidate in &candidates {
        // A process gone meanwhile is skipped, unless it is the one asked for.
        match run_dir_of(candidate) {
            Ok(Some(dir)) => return Ok((candidate, dir)),
            Err(e) if candidate == pid => return Err(e),
            _ => {}
        }
    }
    for &candidate in &candidates {
        if let Some(dir) = run_dir_by_live_file(candidate) {
            return Ok((candidate, dir));
        }
    }
    bail!(
        "pid {pid} is not a program run by uswap run (no {} in its environment, and no live \
         stats file of it under {})",
        runstat::env::RUN_DIR,
        std::env::temp_dir().display()
    )
}

/// `pid`'s run directory: from its environment, else from its live file (module essay);
/// `None` for a process not managed (or gone, or not yet started by the shim).
pub(crate) fn run_dir_for(pid: u32) -> Option<PathBuf> {
    run_dir_of(pid).ok().flatten().or_else(|| run_dir_by_live_file(pid))
}

/// The run directory holding `pid`'s live file, found from its ancestors (module essay).
fn run_dir_by_live_file(pid: u32) -> Option<PathBuf> {
    let parent = |of: u32| -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{of}/status")).ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("PPid:"))?;
        line.trim().parse().ok().filter(|&p| p > 1)
    };
    let dirs: Vec<PathBuf> =
        std::fs::read_dir(std::env::temp_dir()).ok()?.flatten().map(|e| e.path()).collect();
    let mut ancestor = parent(pid);
    for _ in 0..4 {
        let prefix = format!("uswap-run-{}-", ancestor?);
        let found = dirs.iter().find(|dir| {
            let name = dir.file_name().map(|n| n.to_string_lossy().to_string());
            name.is_some_and(|n| n.starts_with(&prefix)) && dir.join(format!("live-{pid}")).exists()
        });
        if found.is_some() {
            return found.cloned();
        }
        ancestor = ancestor.and_then(parent);
    }
    None
}

/// The run directory in `pid`'s environment, if `uswap run` started it.
///
/// # Errors
/// The process is gone, or its environment cannot be read.
pub(crate) fn run_dir_of(pid: u32) -> Result<Option<PathBuf>> {
    let environ =
        std::fs::read(format!("/proc/{pid}/environ")).map_err(|e| anyhow!("pid {pid}: {e}"))?;
    let key = format!("{}=", runstat::env::RUN_DIR);
    Ok(environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(key.as_bytes()))
        .map(|dir| PathBuf::from(String::from_utf8_lossy(dir).to_string())))
}
