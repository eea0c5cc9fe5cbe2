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
//!
//! `--watch[=SECS]` prints the figures again every SECS seconds (1 by default) until the
//! run ends: on a terminal the screen is redrawn, as watch(1) does; otherwise each report
//! follows the last, headed by the time of day. `--json` prints one JSON object instead
//! (one a line under `--watch`): the tree's figures, every counter added up, and each
//! process with its counters, for scripts.

use crate::run::summary::{self, Files};
use crate::run::view::{ProcState, TreeView};
use anyhow::{bail, Result};
use runstat::{format_size, StatsFile};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Flags of `uswap stat`.
#[derive(Debug, clap::Args)]
pub struct StatArgs {
    /// The pid of any process of the tree (or of `uswap run`).
    pid: u32,
    /// Print every counter of every process, and the broker's figures
    #[arg(long)]
    all: bool,
    /// Print the figures again every SECS seconds (1 by default) until the run ends
    #[arg(
        long,
        value_name = "SECS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1"
    )]
    watch: Option<f64>,
    /// Print one JSON object (one a line with --watch): every figure, for scripts
    #[arg(long)]
    json: bool,
}

/// The shortest --watch interval: the figures change no faster than the shims rewrite
/// their files (every second at most, more often under `--stats-every`).
const WATCH_MIN: Duration = Duration::from_millis(100);

/// Prints the figures, once or until the run ends (`--watch`).
///
/// # Errors
/// The pid is not running under uswap.
pub fn run(args: StatArgs) -> Result<()> {
    let Some((dir, view)) = find(args.pid) else {
        bail!("pid {} is not running under uswap", args.pid);
    };
    let Some(secs) = args.watch else {
        print(&report(&args, &view, &summary::read_files(&dir)));
        return Ok(());
    };
    if !(secs.is_finite() && secs > 0.0) {
        bail!("--watch {secs}: give a number of seconds above 0");
    }
    let every = Duration::from_secs_f64(secs).max(WATCH_MIN);
    let redraw = !args.json && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut view = view;
    loop {
        let text = report(&args, &view, &summary::read_files(&dir));
        if redraw {
            // Home, and clear the screen: the report replaces the last, as watch(1).
            print(&format!("\x1b[H\x1b[2J{text}"));
        } else if args.json {
            print(&text);
        } else {
            print(&format!("at {}\n{text}", crate::run::time_of_day()));
        }
        std::thread::sleep(every);
        match read_view(&dir).filter(|v| still_running(v, args.pid)) {
            Some(next) => view = next,
            None => {
                if !args.json {
                    print(&format!("the run of pid {} ended\n", args.pid));
                }
                return Ok(());
            }
        }
    }
}

/// Writes to stdout; a reader that left (`| head`) ends the watch quietly.
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

/// One report: the lines (with every counter under `--all`), or the JSON object.
fn report(args: &StatArgs, view: &TreeView, files: &Files) -> String {
    if args.json {
        return format!("{}\n", json(view, files));
    }
    let mut out = lines(view, files);
    if args.all {
        out.push("tree".to_string());
        out.extend(view.values.iter().map(|(name, value)| format!("  {name} {value}")));
        for (pid, file) in &files.by_pid {
            out.push(format!("pid {pid}"));
            out.extend(file.values.iter().map(|(name, value)| format!("  {name} {value}")));
        }
    }
    out.join("\n") + "\n"
}

/// Whether the run `view` describes still has `pid` (or its `uswap run` is `pid`).
fn still_running(view: &TreeView, pid: u32) -> bool {
    view.proc(pid).is_some_and(|p| p.state != ProcState::Exited)
        || view.get("broker") == u64::from(pid)
}

/// A stats file's figures as JSON: its counters, and its faults' latency.
fn counters(file: &StatsFile) -> serde_json::Value {
    let mut map: serde_json::Map<String, serde_json::Value> =
        file.values.iter().map(|(name, value)| (name.clone(), (*value).into())).collect();
    map.insert("faults".into(), file.fault_ns.total().into());
    map.insert("fault_ns_p50".into(), file.fault_ns.quantile(0.5).unwrap_or(0).into());
    map.insert("fault_ns_p99".into(), file.fault_ns.quantile(0.99).unwrap_or(0).into());
    serde_json::Value::Object(map)
}

/// The `--json` object (module essay).
fn json(view: &TreeView, files: &Files) -> serde_json::Value {
    let processes: Vec<serde_json::Value> = view
        .procs
        .iter()
        .map(|p| {
            serde_json::json!({
                "pid": p.pid,
                "name": p.name,
                "state": p.state.name(),
                "share_bytes": p.share_bytes,
                "rss_bytes": p.rss_bytes,
                "peak_bytes": p.peak_bytes,
                "unmanaged_why": p.why,
                "counters": files.by_pid.get(&p.pid).map(counters),
            })
        })
        .collect();
    serde_json::json!({
        "broker": view.get("broker"),
        "budget_bytes": view.get("budget_bytes"),
        "budget_source": view.budget_source,
        "now_bytes": view.get("now_bytes"),
        "peak_bytes": view.get("peak_bytes"),
        "tree": view.values,
        "total": counters(&files.total),
        "processes": processes,
    })
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
        still_running(&view, pid).then_some((dir, view))
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
