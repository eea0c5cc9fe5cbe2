//! The workloads of the comparison and how each one is launched and read.
//!
//! | name      | program                                   | verified by              |
//! |-----------|-------------------------------------------|--------------------------|
//! | seq       | `uswap-workload --pattern seq`            | every read, final sweep  |
//! | uniform   | `uswap-workload --pattern uniform`        | every read, final sweep  |
//! | zipf      | `uswap-workload --pattern zipf`           | every read, final sweep  |
//! | zero      | `uswap-workload --pattern zero`           | every read, final sweep  |
//! | pydict    | `python3 bench/workloads/pydict.py`       | every value re-derived   |
//! | redis     | `redis-server` + this harness as client   | every GET compared       |
//! | build     | `make -j2` of Redis's source (`build`)    | every object and program |
//!
//! Every workload but `build` works on `--size` bytes of data (4x the default budget);
//! `build` builds what it builds, under half of its own unmanaged peak (`build`). A workload
//! whose program is missing is skipped with a note naming the package to install
//! (`.ci/setup-bench`). The same [`WorkloadSpec::execute`] runs a workload for the kernel
//! side and for the uswap side: the side supplies a [`Placement`] (how to confine the
//! process, how to read its memory).

use super::build::{self, BuildSetup, Outputs};
use super::redis;
use super::runner::{self, MemoryProbe, Sample};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use workload::Pattern;

/// The pydict script, shipped in the repository and written to the scratch directory at
/// run time (so the harness works from any directory).
const PYDICT_SCRIPT: &str = include_str!("../../../../../bench/workloads/pydict.py");
/// The Python service of `uswap bench auto`, shipped the same way.
const PYSERVICE_SCRIPT: &str = include_str!("../../../../../bench/workloads/pyservice.py");

/// The names `--workloads` accepts, in report order.
pub const ALL_WORKLOADS: [&str; 7] = ["seq", "uniform", "zipf", "zero", "pydict", "redis", "build"];
/// The workloads run when `--workloads` is not given: all but `build`, which sets its own
/// budget and takes minutes (`uswap bench build` runs it).
pub const DEFAULT_WORKLOADS: [&str; 6] = ["seq", "uniform", "zipf", "zero", "pydict", "redis"];

/// What a workload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    Synthetic(Pattern),
    PyDict,
    Redis,
    /// `uswap bench auto`'s Python service: builds `size` of objects, then serves requests
    /// on a Zipf-hot fifth of them for `serve_s` (bench/workloads/pyservice.py).
    PyService,
    /// `uswap bench auto`'s Redis: loaded with `size`, then read Zipf for `serve_s`
    /// (redis.rs, `run_zipf`).
    RedisZipf,
    Build,
}

/// One workload of the comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSpec {
    pub name: String,
    pub kind: WorkloadKind,
}

/// Parses `seq,uniform,pydict`.
///
/// # Errors
/// An unknown name, or an empty list.
pub fn parse_workloads(list: &str) -> Result<Vec<WorkloadSpec>> {
    let mut specs = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let kind = match name {
            "seq" => WorkloadKind::Synthetic(Pattern::Seq),
            "uniform" => WorkloadKind::Synthetic(Pattern::Uniform),
            "zipf" => WorkloadKind::Synthetic(Pattern::Zipf),
            "zero" => WorkloadKind::Synthetic(Pattern::Zero),
            "pydict" => WorkloadKind::PyDict,
            "redis" => WorkloadKind::Redis,
            "build" => WorkloadKind::Build,
            other => bail!("unknown workload {other:?} (known: {})", ALL_WORKLOADS.join(",")),
        };
        if !specs.iter().any(|s: &WorkloadSpec| s.name == name) {
            specs.push(WorkloadSpec { name: name.to_string(), kind });
        }
    }
    if specs.is_empty() {
        bail!("no workload named in {list:?}");
    }
    Ok(specs)
}

/// Everything a run needs to know, the same for both sides.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub workload_bin: Option<PathBuf>,
    pub python: Option<PathBuf>,
    pub redis_server: Option<PathBuf>,
    /// A private directory for scripts, server files and stderr logs.
    pub scratch_dir: PathBuf,
    pub size_bytes: u64,
    pub budget_bytes: u64,
    pub seed: u64,
    /// A run longer than this is killed and reported as failed.
    pub timeout: Duration,
    /// The uswap side's `--folio-order` and `--large-folios` (`uswap run`'s when `None`).
    pub uswap_folios: Option<(u32, String)>,
    /// The uswap side's `--idle-poll` (`uswap run`'s when `None`).
    pub uswap_idle_poll: Option<String>,
    /// The uswap side's `--swap-file-cache`; `None`: run's default.
    pub uswap_swap_file_cache: Option<String>,
    /// The uswap side's `--zero-pages`; `None`: run's default.
    pub uswap_zero_pages: Option<String>,
    /// The uswap side's `--delivery`; `None`: run's default.
    pub uswap_delivery: Option<String>,
    /// The uswap side's `--pool-size` (a pool beside the budget); `None`: run's default, a
    /// share of the budget.
    pub uswap_pool_bytes: Option<u64>,
    /// The uswap side's `--reclaim-cpus`: with `--cpus`, the CPUs left outside it (the
    /// harness confines itself, so `uswap run` cannot see them); `None`: run's default.
    pub uswap_reclaim_cpus: Option<String>,
    /// The uswap side's `--budget` when it is not `budget_bytes` (`auto`).
    pub uswap_budget: Option<String>,
    /// The far configuration's `--far` URL (far_side.rs): set only for that run, whose
    /// swap device is then the memcached servers the harness started, without a pool.
    pub uswap_far: Option<String>,
    /// How long the service workloads serve, seconds.
    pub serve_s: f64,
    /// The build workload's source, tree and reference.
    pub build: BuildSetup,
}

/// `python3 SCRIPT --size SIZE` for one of bench/workloads' scripts, written into the scratch
/// directory with pydict.py beside it (pyservice.py takes its records from there).
fn python_script(ctx: &RunContext, name: &str, text: &str) -> Result<Command> {
    let python = ctx.python.as_ref().context("no python3")?;
    std::fs::write(ctx.scratch_dir.join("pydict.py"), PYDICT_SCRIPT).context("write pydict.py")?;
    let script = ctx.scratch_dir.join(name);
    std::fs::write(&script, text).with_context(|| format!("write {name}"))?;
    let mut command = Command::new(python);
    command.arg(&script).args(["--size", &ctx.size_bytes.to_string()]);
    Ok(command)
}

#[cfg(test)]
impl RunContext {
    /// A context with no programs found, 1 MiB under 256 KiB, everything else defaulted.
    pub fn for_tests() -> Self {
        RunContext {
            workload_bin: None,
            python: None,
            redis_server: None,
            scratch_dir: std::env::temp_dir(),
            size_bytes: 1 << 20,
            budget_bytes: 1 << 18,
            seed: 1,
            timeout: Duration::from_secs(1),
            uswap_folios: None,
            uswap_idle_poll: None,
            uswap_swap_file_cache: None,
            uswap_zero_pages: None,
            uswap_delivery: None,
            uswap_pool_bytes: None,
            uswap_reclaim_cpus: None,
            uswap_budget: None,
            uswap_far: None,
            serve_s: 1.0,
            build: BuildSetup::new("/no/build/source".into(), &std::env::temp_dir(), true),
        }
    }
}

/// How a side confines a workload and reads its memory.
pub struct Placement<'a> {
    /// Called on every process command before spawn and before its stdio is set (join a
    /// cgroup; wrap in `uswap run`, which replaces the command).
    pub prepare: &'a dyn Fn(&mut Command) -> Result<()>,
    pub probe: &'a dyn MemoryProbe,
}

/// What a workload run measured, before the side adds its memory peaks.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub wall_s: f64,
    pub major_faults: u64,
    pub minor_faults: u64,
    pub max_rss_bytes: u64,
    /// CPU time of the reaped process tree (`ru_utime`, `ru_stime`), seconds.
    pub user_s: f64,
    pub sys_s: f64,
    /// Latency proxy figures (the synthetic workloads only).
    pub fault_p50_ns: Option<u64>,
    pub fault_p99_ns: Option<u64>,
    pub slow_accesses: Option<u64>,
    pub latency_cdf: Vec<(f64, u64)>,
    pub verify_errors: u64,
    pub samples: Vec<Sample>,
    /// One line about the run (checksum, entries, keys).
    pub detail: String,
    /// A service workload's measure.
    pub service: Option<Service>,
    /// The build workload: its outputs' checksums.
    pub outputs: Option<Arc<Outputs>>,
}

impl Measured {
    /// The figures every run has of its reaped process tree: wall time, faults, resident
    /// peak, CPU time, and the samples taken while it ran; the workload adds its own.
    pub fn of_tree(wall_s: f64, exit: &super::sys::Exit, samples: Vec<Sample>) -> Measured {
        Measured {
            wall_s,
            major_faults: exit.major_faults,
            minor_faults: exit.minor_faults,
            max_rss_bytes: exit.max_rss_bytes,
            user_s: exit.user_us as f64 / 1e6,
            sys_s: exit.sys_us as f64 / 1e6,
            samples,
            ..Measured::default()
        }
    }
}

/// What a service workload served in its fixed time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Service {
    /// Requests answered.
    pub requests: u64,
    /// The time they were served in, seconds.
    pub serve_s: f64,
    /// When serving began, seconds after the run's start (the harness's clock).
    pub from_s: f64,
    /// Request latency, median and 99th percentile.
    pub p50_ns: u64,
    pub p99_ns: u64,
}

impl Service {
    /// Requests a second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.serve_s.max(1e-9)
    }
}

impl WorkloadSpec {
    /// Why this workload cannot run here, if it cannot.
    pub fn missing(&self, ctx: &RunContext) -> Option<String> {
        match self.kind {
            WorkloadKind::Synthetic(_) if ctx.workload_bin.is_none() => Some(
                "uswap-workload not found beside uswap or on PATH \
                 (cargo build --release -p workload)"
                    .into(),
            ),
            WorkloadKind::PyDict if ctx.python.is_none() => {
                Some("python3 is not installed (.ci/setup-bench)".into())
            }
            WorkloadKind::PyService if ctx.python.is_none() => {
                Some("python3 is not installed (.ci/setup-bench)".into())
            }
            WorkloadKind::Redis | WorkloadKind::RedisZipf if ctx.redis_server.is_none() => {
                Some("redis-server is not installed (.ci/setup-bench)".into())
            }
            WorkloadKind::Build => ctx.build.missing(),
            _ => None,
        }
    }

    /// Runs the workload once, confined and probed by `placement`.
    ///
    /// # Errors
    /// A missing program, a spawn failure, a workload that failed (exit status other
    /// than 0, or 3 for verify errors), unreadable output, an interrupt.
    pub fn execute(&self, ctx: &RunContext, placement: &Placement<'_>) -> Result<Measured> {
        if let Some(why) = self.missing(ctx) {
            bail!("{why}");
        }
        match self.kind {
            WorkloadKind::Synthetic(pattern) => run_synthetic(pattern, ctx, placement),
            WorkloadKind::PyDict => run_pydict(ctx, placement),
            WorkloadKind::Redis => redis::run(ctx, placement),
            WorkloadKind::PyService => run_pyservice(ctx, placement),
            WorkloadKind::RedisZipf => redis::run_zipf(ctx, placement),
            WorkloadKind::Build => build::run(ctx, placement),
        }
    }

    /// The command line that runs this workload (the synthetic and pydict ones); the uswap
    /// side wraps the same command.
    ///
    /// # Errors
    /// A missing program, or the scratch directory is not writable.
    pub fn command(&self, ctx: &RunContext) -> Result<Command> {
        match self.kind {
            WorkloadKind::Synthetic(pattern) => {
                let bin = ctx.workload_bin.as_ref().context("no uswap-workload")?;
                let mut command = Command::new(bin);
                command.args(synthetic_args(pattern, ctx.size_bytes, ctx.seed));
                Ok(command)
            }
            WorkloadKind::PyDict => {
                let mut command = python_script(ctx, "pydict.py", PYDICT_SCRIPT)?;
                command.args(["--seed", &ctx.seed.to_string()]);
                Ok(command)
            }
            WorkloadKind::PyService => {
                let mut command = python_script(ctx, "pyservice.py", PYSERVICE_SCRIPT)?;
                command.args(["--duration", &ctx.serve_s.to_string()]);
                command.args(["--seed", &ctx.seed.to_string()]);
                Ok(command)
            }
            WorkloadKind::Redis | WorkloadKind::RedisZipf => {
                bail!("redis is a server and its client, not one command")
            }
            WorkloadKind::Build => Ok(ctx.build.command()),
        }
    }
}

/// The `uswap-workload` arguments of a pattern.
pub fn synthetic_args(pattern: Pattern, size_bytes: u64, seed: u64) -> Vec<String> {
    let mut args = vec![
        "--size".to_string(),
        size_bytes.to_string(),
        "--pattern".into(),
        pattern.name().into(),
        "--seed".into(),
        seed.to_string(),
        "--json".into(),
    ];
    if pattern == Pattern::Seq {
        args.extend(["--sweeps".into(), "2".into()]);
    }
    args
}

/// Spawns a prepared command with stderr to a log in the scratch directory.
pub(super) fn spawn_measured(
    spec_name: &str,
    mut command: Command,
    ctx: &RunContext,
    placement: &Placement<'_>,
) -> Result<runner::Finished> {
    // Prepared before the stdio is set: the uswap side replaces the command.
    (placement.prepare)(&mut command)?;
    let log = ctx.scratch_dir.join(format!("{spec_name}.stderr"));
    let stderr = std::fs::File::create(&log).with_context(|| format!("create {log:?}"))?;
    command.stderr(Stdio::from(stderr));
    let finished = runner::run_program(command, placement.probe, ctx.timeout)?;
    if finished.exit.code != 0 && finished.exit.code != 3 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        bail!(
            "{spec_name} exited with status {} (137 = killed, e.g. by the OOM killer): {}",
            finished.exit.code,
            failure_excerpt(&text)
        );
    }
    Ok(finished)
}

/// Lines of a log kept at the end of a failure's message: enough to reach above `uswap
/// run`'s summary (up to 10 lines), where a shim that could not start says why.
const FAILURE_TAIL_LINES: usize = 16;
/// Lines naming an error, above that tail, put first (a compiler's `error:` of a build whose
/// summary and make's lines fill the tail).
const FAILURE_ERROR_LINES: usize = 4;

/// What a failed run's stderr says, in one line: the first lines above the tail that name
/// an error, then the tail.
fn failure_excerpt(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail_from = lines.len().saturating_sub(FAILURE_TAIL_LINES);
    let is_error =
        |line: &&&str| ["error", "Error", "fatal", "Killed"].iter().any(|w| line.contains(w));
    let mut shown: Vec<&str> =
        lines[..tail_from].iter().filter(is_error).take(FAILURE_ERROR_LINES).copied().collect();
    if !shown.is_empty() {
        shown.push("...");
    }
    shown.extend(&lines[tail_from..]);
    shown.join(" | ")
}

fn last_line(stdout: &str) -> &str {
    stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("")
}

fn run_synthetic(
    pattern: Pattern,
    ctx: &RunContext,
    placement: &Placement<'_>,
) -> Result<Measured> {
    let spec = WorkloadSpec { name: pattern.name().into(), kind: WorkloadKind::Synthetic(pattern) };
    let finished = spawn_measured(pattern.name(), spec.command(ctx)?, ctx, placement)?;
    let report: workload::Report = serde_json::from_str(last_line(&finished.stdout))
        .with_context(|| format!("uswap-workload printed {:?}", finished.stdout))?;
    Ok(Measured {
        fault_p50_ns: report.fault_p50_ns,
        fault_p99_ns: report.fault_p99_ns,
        slow_accesses: Some(report.slow_accesses),
        latency_cdf: report.latency_cdf,
        verify_errors: report.verify_errors,
        detail: format!(
            "{} accesses: p50 {} ns, {} slow (> {} ns), {} major faults; phases: fill {:.2} s, \
             accesses {:.2} s, verify {:.2} s",
            report.accesses,
            report.access_p50_ns,
            report.slow_accesses,
            report.fault_threshold_ns,
            report.run_major_faults,
            report.fill_s,
            report.run_s,
            report.verify_s
        ),
        ..Measured::of_tree(finished.wall_s, &finished.exit, finished.samples)
    })
}

fn run_pydict(ctx: &RunContext, placement: &Placement<'_>) -> Result<Measured> {
    let spec = WorkloadSpec { name: "pydict".into(), kind: WorkloadKind::PyDict };
    let finished = spawn_measured("pydict", spec.command(ctx)?, ctx, placement)?;
    let report: serde_json::Value = serde_json::from_str(last_line(&finished.stdout))
        .with_context(|| format!("pydict.py printed {:?}", finished.stdout))?;
    let number = |key: &str| report.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0);
    Ok(Measured {
        verify_errors: number("verify_errors"),
        detail: format!("{} entries, checksum {}", number("entries"), number("checksum")),
        ..Measured::of_tree(finished.wall_s, &finished.exit, finished.samples)
    })
}

fn run_pyservice(ctx: &RunContext, placement: &Placement<'_>) -> Result<Measured> {
    let spec = WorkloadSpec { name: "pyservice".into(), kind: WorkloadKind::PyService };
    let finished = spawn_measured("pyservice", spec.command(ctx)?, ctx, placement)?;
    let report: serde_json::Value = serde_json::from_str(last_line(&finished.stdout))
        .with_context(|| format!("pyservice.py printed {:?}", finished.stdout))?;
    let number = |key: &str| report.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let real = |key: &str| report.get(key).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
    let service = Service {
        requests: number("requests"),
        serve_s: real("serve_s"),
        from_s: real("serve_start_unix") - finished.started_unix_s,
        p50_ns: number("request_p50_ns"),
        p99_ns: number("request_p99_ns"),
    };
    Ok(Measured {
        verify_errors: number("verify_errors"),
        detail: format!(
            "{} entries built in {:.1} s; {} requests in {:.1} s, p50 {:.0} us",
            number("entries"),
            real("build_s"),
            service.requests,
            service.serve_s,
            service.p50_ns as f64 / 1e3
        ),
        service: Some(service),
        ..Measured::of_tree(finished.wall_s, &finished.exit, finished.samples)
    })
}

/// Finds `name` on PATH.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `uswap-workload` beside the running `uswap` (the same cargo target directory), else
/// on PATH.
pub fn find_workload_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    // Test binaries live one level down, in target/<profile>/deps.
    for candidate in [dir.join("uswap-workload"), dir.parent()?.join("uswap-workload")] {
        if is_executable(&candidate) {
            return Some(candidate);
        }
    }
    find_on_path("uswap-workload")
}

/// The real python3 executable (pyenv shims resolved), so that the process the harness
/// waits for is the interpreter itself.
pub fn find_python() -> Option<PathBuf> {
    let shim = find_on_path("python3")?;
    let output =
        Command::new(&shim).args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    let real = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    Some(if is_executable(&real) { real } else { shim })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_lists_parse() {
        let specs = parse_workloads("seq, zipf,pydict,seq").unwrap();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["seq", "zipf", "pydict"]);
        assert_eq!(specs[1].kind, WorkloadKind::Synthetic(Pattern::Zipf));
        assert!(parse_workloads("seq,bogus").is_err());
        assert!(parse_workloads(" , ").is_err());
        assert_eq!(parse_workloads(&ALL_WORKLOADS.join(",")).unwrap().len(), 7);
        assert_eq!(parse_workloads("build").unwrap()[0].kind, WorkloadKind::Build);
        assert!(!DEFAULT_WORKLOADS.contains(&"build"), "the build is asked for by name");
    }

    #[test]
    fn synthetic_command_line() {
        let args = synthetic_args(Pattern::Seq, 1 << 30, 7);
        assert_eq!(
            args,
            ["--size", "1073741824", "--pattern", "seq", "--seed", "7", "--json", "--sweeps", "2"]
        );
        assert!(!synthetic_args(Pattern::Zero, 4096, 1).contains(&"--sweeps".to_string()));
    }

    #[test]
    fn a_failure_names_its_errors_above_the_tail() {
        let mut log = vec!["lcode.c: In function 'f':", "lcode.c:9:1: error: expected ';'"];
        let filler: Vec<String> =
            (0..20).map(|i| format!("uswap:   {i} cc1: peak 1 MiB")).collect();
        log.extend(filler.iter().map(String::as_str));
        let excerpt = failure_excerpt(&log.join("\n"));
        assert!(excerpt.starts_with("lcode.c:9:1: error: expected ';' | ... | uswap:   4 cc1"));
        assert!(excerpt.ends_with("uswap:   19 cc1: peak 1 MiB"), "{excerpt}");
        assert_eq!(failure_excerpt("a\nb"), "a | b", "a short log whole");
    }

    #[test]
    fn a_missing_program_is_named() {
        let ctx = RunContext::for_tests();
        let redis = WorkloadSpec { name: "redis".into(), kind: WorkloadKind::Redis };
        assert!(redis.missing(&ctx).unwrap().contains("redis-server"));
        let seq = &parse_workloads("seq").unwrap()[0];
        assert!(seq.missing(&ctx).unwrap().contains("uswap-workload"));
        let build = &parse_workloads("build").unwrap()[0];
        assert!(build.missing(&ctx).unwrap().contains(".ci/setup-bench"));
    }
}
