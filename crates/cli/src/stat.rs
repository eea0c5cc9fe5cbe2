//! `uswap stat PID`: the live figures of a program running under `uswap run`.
//!
//! The shim rewrites `<run dir>/live-<pid>` every second (runstat's stats file); the run
//! directory is in the program's environment (`USWAP_RUN_DIR`, read from
//! /proc/PID/environ). PID may also be `uswap run`'s own: its managed child is found
//! through /proc/PID/task/PID/children.

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
    if let Some(dir) = run_dir_of(pid)? {
        return Ok((pid, dir));
    }
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
        if let Some(dir) = run_dir_of(child)? {
            return Ok((child, dir));
        }
    }
    bail!(
        "pid {pid} is not a program run by uswap run (no {} in its environment)",
        runstat::env::RUN_DIR
    )
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
