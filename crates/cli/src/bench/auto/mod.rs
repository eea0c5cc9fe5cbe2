//! `uswap bench auto`: what `uswap run --budget auto` saves on programs with a cold part,
//! and what it costs them, against the same program unmanaged and against the kernel's
//! way (a Senpai-like loop over a memory cgroup with zram), side by side in one run.
//!
//! ```text
//!   for each round, for each workload (pyservice, redis, pydict, zipf):
//!     unmanaged   the program alone, in a memory cgroup with no limit (measured only)
//!     uswap       `uswap run --budget auto:T -- program`, in such a cgroup too
//!     kernel      senpai::run: zram lz4 swap, the cgroup's limit steered by PSI `some`
//!   per side: mean and peak resident memory (the cgroup's usage sampled every 50 ms, and
//!             zram's pool for the kernel), and the time measure:
//!               services (pyservice, redis): requests answered in the fixed serving
//!                 time; slowdown = unmanaged rate / rate, resident mean over the
//!                 serving time (the service's steady state, after its build)
//!               batch programs (pydict, zipf): wall time; slowdown = time / unmanaged
//!                 time, resident mean over the whole run
//!   report: each workload's median over the rounds of each figure; JSON `workloads`
//! ```
//!
//! The workloads, their programs and the measuring cgroups are `compare`'s (workloads.rs,
//! redis.rs, cgroup.rs, uswap_side.rs, kernel.rs' guards for zram); see there for how each
//! is verified. Without root (no cgroup to measure in, no zram) the uswap side and the
//! unmanaged run are measured by their process tree's resident set and the kernel side is
//! skipped with a note.

mod senpai;

use super::compare::build::{BuildSetup, DEFAULT_SOURCE};
use super::compare::kernel_side::{meminfo_bytes, swap_bytes, KernelEnv};
use super::compare::machine::{self, RealMachine};
use super::compare::outcome::Side;
use super::compare::runner::{MemoryProbe, Sample};
use super::compare::workloads::{
    self, Measured, Placement, RunContext, WorkloadKind, WorkloadSpec,
};
use super::compare::{cgroup, cgroup::MemCgroup, sys, uswap_side};
use crate::bench::CommonOpts;
use crate::report::Report;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use workload::size::{format_size, parse_size};

/// The workloads, in report order.
const ALL: [&str; 4] = ["pyservice", "redis", "pydict", "zipf"];

/// Options of `uswap bench auto`.
#[derive(Debug, Clone, Args)]
pub struct AutoArgs {
    /// Data size of every workload. Default 1G (32M with --quick).
    #[arg(long, value_parser = parse_size_arg)]
    pub size: Option<u64>,
    /// Seconds the two services serve after their build. Default 30 (2 with --quick).
    #[arg(long, value_name = "SECS")]
    pub serve: Option<f64>,
    /// Comma-separated workloads: pyservice,redis,pydict,zipf (default: all).
    #[arg(long)]
    pub workloads: Option<String>,
    /// The loss to faults both controllers aim under, percent of the run (`auto:T`).
    #[arg(long, default_value_t = runstat::auto::DEFAULT_TARGET_PERCENT)]
    pub target: f64,
    /// Rounds; each figure is the median over them.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// The uswap side's compressed pool: a `share` of the budget (run's default, the rest
    /// written to the swap file) or `beside` it, as large as the kernel side's zram device
    /// (everything paged out stays in memory, compressed, as with zram).
    #[arg(long, value_name = "MODE", value_parser = ["share", "beside"], default_value = "share")]
    pub uswap_pool: String,
    /// The uswap side's `--swap-file-cache`. `drop` by default: the memory cgroup the side
    /// is measured in is charged the swap file's pages while they stay in the page cache
    /// (`keep`, run's default), which would count what was paged out to disk as resident.
    #[arg(long, value_name = "MODE", value_parser = ["keep", "drop"], default_value = "drop")]
    pub swap_file_cache: String,
    /// The uswap side's `--folio-order` (run's default when not given).
    #[arg(long, value_name = "N")]
    pub folio_order: Option<u32>,
    /// The uswap side's `--delivery` (run's default when not given): under SIGBUS the
    /// faulting thread serves and times its own fault (docs/RUN.md, "Fault delivery").
    #[arg(long, value_name = "MODE", value_parser = ["handler", "sigbus"])]
    pub delivery: Option<String>,
    /// Skip the kernel side.
    #[arg(long)]
    pub no_kernel: bool,
    /// Seed of every workload's accesses and contents.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Kill a run that takes longer than this many seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout_s: u64,
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

/// One side's run of one workload, reduced to what is reported.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Figures {
    /// Mean resident memory over the measured stretch, and the highest sample.
    mean_bytes: f64,
    peak_bytes: u64,
    /// Requests a second for a service, else wall seconds.
    time: f64,
    verify_errors: u64,
}

/// A workload's round: the three sides.
#[derive(Debug, Clone, Default)]
struct Round {
    unmanaged: Option<Figures>,
    uswap: Option<Figures>,
    kernel: Option<Figures>,
    /// Why a side has no figures.
    notes: Vec<String>,
}

/// Runs the benchmark.
///
/// # Errors
/// Bad options, an interrupt, pages read back wrong (after the report is printed).
pub fn run(args: &AutoArgs, common: &CommonOpts) -> Result<Report> {
    let quick = common.quick;
    let size_bytes = args.size.unwrap_or(if quick { 32 << 20 } else { 1 << 30 });
    let serve_s = args.serve.unwrap_or(if quick { 2.0 } else { 30.0 });
    if !(args.target > 0.0 && args.target <= 100.0) {
        bail!("--target {}: a percentage above 0 and at most 100", args.target);
    }
    let specs = parse(args.workloads.as_deref().unwrap_or(&ALL.join(",")))?;
    sys::install_interrupt_handler().context("install the SIGINT handler")?;
    let scratch = std::env::temp_dir().join(format!("uswap-bench-auto-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("create {scratch:?}"))?;
    let _remove = RemoveOnDrop(scratch.clone());
    // Auto runs no build: the setup only fills the context.
    let build = BuildSetup::new(DEFAULT_SOURCE.into(), &scratch, quick);
    let ctx = RunContext {
        workload_bin: workloads::find_workload_binary(),
        python: workloads::find_python(),
        redis_server: workloads::find_on_path("redis-server"),
        scratch_dir: scratch,
        size_bytes,
        budget_bytes: 0,
        seed: args.seed,
        timeout: Duration::from_secs(args.timeout_s),
        uswap_folios: super::compare::folio_flags(args.folio_order, None)?,
        uswap_idle_poll: None,
        uswap_zero_pages: None,
        uswap_delivery: args.delivery.clone(),
        uswap_pool_bytes: (args.uswap_pool == "beside").then(|| swap_bytes(size_bytes)),
        uswap_swap_file_cache: Some(args.swap_file_cache.clone()),
        uswap_reclaim_cpus: None,
        uswap_budget: Some(format!("auto:{}", args.target)),
        uswap_far: None,
        serve_s,
        build,
    };
    let env = KernelEnv::open(Box::new(RealMachine), machine::Roots::default());
    super::compare::warm_programs(&specs, &ctx);
    let ceiling = senpai::default_ceiling_bytes();
    let mut rounds: Vec<Vec<Round>> = Vec::new();
    let mut index = 0;
    for _ in 0..args.repeat {
        let mut row = Vec::new();
        for spec in &specs {
            index += 1;
            row.push(run_round(spec, &ctx, &env, args, (ceiling, index)));
            if sys::interrupted() {
                bail!("interrupted: zram and the cgroups were restored");
            }
        }
        rounds.push(row);
    }
    let mut report = Report::new("auto");
    describe(&mut report, &ctx, args, &env);
    let bad = fill(&mut report, &specs, &rounds);
    if !bad.is_empty() {
        report.print(common.json);
        bail!("pages read back wrong in: {} (data-safety failure)", bad.join(", "));
    }
    Ok(report)
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn parse(list: &str) -> Result<Vec<WorkloadSpec>> {
    let mut specs = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let kind = match name {
            "pyservice" => WorkloadKind::PyService,
            "redis" => WorkloadKind::RedisZipf,
            "pydict" => WorkloadKind::PyDict,
            "zipf" => WorkloadKind::Synthetic(workload::Pattern::Zipf),
            other => bail!("unknown workload {other:?} (known: {})", ALL.join(",")),
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

/// The three sides of one workload, one after another.
fn run_round(
    spec: &WorkloadSpec,
    ctx: &RunContext,
    env: &Result<KernelEnv>,
    args: &AutoArgs,
    (ceiling, index): (u64, usize),
) -> Round {
    let mut round = Round::default();
    if let Some(why) = spec.missing(ctx) {
        round.notes.push(format!("{}: skipped: {why}", spec.name));
        return round;
    }
    match unmanaged(spec, ctx, env.as_ref().ok(), index) {
        Ok(measured) => round.unmanaged = Some(figures(&measured)),
        Err(e) => round.notes.push(format!("{}: unmanaged run failed: {e:#}", spec.name)),
    }
    match uswap_side::run(spec, ctx, env.as_ref().ok(), index) {
        Side::Ran(outcome) => round.uswap = Some(figures(&outcome.measured)),
        Side::Skipped(why) | Side::Failed(why) => {
            round.notes.push(format!("{}: uswap side: {why}", spec.name));
        }
    }
    match (env, args.no_kernel) {
        (_, true) => {}
        (Err(why), false) => round.notes.push(format!("kernel side skipped: {why:#}")),
        (Ok(env), false) => match senpai::run(env, spec, ctx, (args.target, ceiling), index) {
            Ok((measured, steering)) => {
                round.kernel = Some(figures(&measured));
                if steering.refused > 0 {
                    round.notes.push(format!(
                        "{}: kernel side: {} of {} limit writes refused (EBUSY), lowest limit {}",
                        spec.name,
                        steering.refused,
                        steering.writes,
                        format_size(steering.min_limit_bytes)
                    ));
                }
            }
            Err(e) => round.notes.push(format!("{}: kernel side: {e:#}", spec.name)),
        },
    }
    round
}

/// The program alone, measured in a memory cgroup with no limit (or by its resident set
/// where none can be made).
fn unmanaged(
    spec: &WorkloadSpec,
    ctx: &RunContext,
    env: Option<&KernelEnv>,
    index: usize,
) -> Result<Measured> {
    let group = match env {
        Some(env) => {
            let name = format!("uswap-bench-{}-a{index}", std::process::id());
            Some(MemCgroup::create(env.machine.as_ref(), &env.parent, &name, None)?)
        }
        None => None,
    };
    let probe = AloneProbe { group: group.as_ref() };
    let prepare = |command: &mut Command| -> Result<()> {
        if let Some(group) = &group {
            sys::join_cgroup_before_exec(command, cgroup::open_procs(&group.procs_file())?);
        }
        Ok(())
    };
    spec.execute(ctx, &Placement { prepare: &prepare, probe: &probe })
}

/// The unmanaged run's memory: its cgroup's usage, else its resident set.
struct AloneProbe<'g> {
    group: Option<&'g MemCgroup<'g>>,
}

impl MemoryProbe for AloneProbe<'_> {
    fn sample(&self, pid: u32) -> Sample {
        let charged_bytes = match self.group {
            Some(group) => group.usage_bytes(),
            None => {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status"));
                meminfo_bytes(&status.unwrap_or_default(), "VmRSS").unwrap_or(0)
            }
        };
        Sample { charged_bytes, ..Sample::default() }
    }
}

/// A run's figures (module essay): the mean over the serving time for a service, over
/// the whole run otherwise.
fn figures(measured: &Measured) -> Figures {
    let resident = |s: &Sample| (s.charged_bytes + s.outside_bytes) as f64;
    let (from, to, time) = match measured.service {
        Some(service) => (service.from_s, service.from_s + service.serve_s, service.rate()),
        None => (0.0, f64::MAX, measured.wall_s),
    };
    Figures {
        mean_bytes: time_mean(&measured.samples, from, to, resident),
        peak_bytes: measured.samples.iter().map(resident).fold(0.0, f64::max) as u64,
        time,
        verify_errors: measured.verify_errors,
    }
}

/// The time-weighted mean of `value` over the samples in [from, to] (each sample holding
/// until the next); 0 when none fall in it.
fn time_mean(samples: &[Sample], from: f64, to: f64, value: impl Fn(&Sample) -> f64) -> f64 {
    let (mut sum, mut span) = (0.0, 0.0);
    for pair in samples.windows(2) {
        let (a, b) = (pair[0].t_s.max(from), pair[1].t_s.min(to));
        if b > a {
            sum += value(&pair[0]) * (b - a);
            span += b - a;
        }
    }
    if span > 0.0 {
        sum / span
    } else {
        0.0
    }
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    values.get(values.len().checked_sub(1)? / 2).copied()
}

/// A side's saved fraction (of the mean), saved fraction of the peak, and slowdown against
/// the unmanaged run of the same round.
fn against(side: &Figures, alone: &Figures, service: bool) -> (f64, f64, f64) {
    let saved = 1.0 - side.mean_bytes / alone.mean_bytes.max(1.0);
    let peak_saved = 1.0 - side.peak_bytes as f64 / (alone.peak_bytes.max(1)) as f64;
    let slowdown =
        if service { alone.time / side.time.max(1e-9) } else { side.time / alone.time.max(1e-9) };
    (saved, peak_saved, slowdown)
}

/// The table and JSON; returns the workloads whose pages read back wrong in any round.
fn fill(report: &mut Report, specs: &[WorkloadSpec], rounds: &[Vec<Round>]) -> Vec<String> {
    let (mut bad, mut rows, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    let header = [
        "workload",
        "time measure",
        "unmanaged mean / peak",
        "uswap auto: saved mean / peak, slowdown",
        "kernel Senpai+zram: saved mean / peak, slowdown",
    ];
    let table = report.table("Memory saved and time lost (medians over the rounds)", &header);
    for (i, spec) in specs.iter().enumerate() {
        let service = spec.measure_is_service();
        let runs: Vec<&Round> = rounds.iter().map(|r| &r[i]).collect();
        let errors: u64 = runs
            .iter()
            .flat_map(|r| [r.unmanaged, r.uswap, r.kernel])
            .flatten()
            .map(|f| f.verify_errors)
            .sum();
        if errors > 0 {
            bad.push(spec.name.clone());
        }
        let side = |pick: fn(&Round) -> Option<Figures>| -> Option<(f64, f64, f64)> {
            let each: Vec<(f64, f64, f64)> = runs
                .iter()
                .filter_map(|r| Some(against(&pick(r)?, &r.unmanaged?, service)))
                .collect();
            Some((
                median(each.iter().map(|f| f.0).collect())?,
                median(each.iter().map(|f| f.1).collect())?,
                median(each.iter().map(|f| f.2).collect())?,
            ))
        };
        let alone: Vec<Figures> = runs.iter().filter_map(|r| r.unmanaged).collect();
        let alone_mean = median(alone.iter().map(|f| f.mean_bytes).collect());
        let alone_peak = median(alone.iter().map(|f| f.peak_bytes as f64).collect());
        let alone_time = median(alone.iter().map(|f| f.time).collect());
        let (uswap, kernel) = (side(|r| r.uswap), side(|r| r.kernel));
        let cell = |f: Option<(f64, f64, f64)>| {
            f.map_or("-".to_string(), |(s, p, d)| {
                format!("{:.0}% / {:.0}%, {:.3}x", 100.0 * s, 100.0 * p, d)
            })
        };
        let measure = match (service, alone_time) {
            (true, Some(rate)) => format!("requests/s in {} (unmanaged {rate:.0})", "serving"),
            (false, Some(wall)) => format!("wall time (unmanaged {wall:.1} s)"),
            (_, None) => "-".to_string(),
        };
        let mib = |b: Option<f64>| b.map_or("-".to_string(), |b| format_size(b as u64));
        table.row([
            spec.name.clone(),
            measure,
            format!("{} / {}", mib(alone_mean), mib(alone_peak)),
            cell(uswap),
            cell(kernel),
        ]);
        let each_round: Vec<serde_json::Value> =
            runs.iter().map(|r| round_json(r, service)).collect();
        let time_measure =
            if service { "requests per second while serving" } else { "wall seconds" };
        rows.push(serde_json::json!({
            "name": spec.name,
            "service": service,
            "time_measure": time_measure,
            "saved_fraction": uswap.map(|f| f.0),
            "peak_saved_fraction": uswap.map(|f| f.1),
            "slowdown": uswap.map(|f| f.2),
            "kernel_saved_fraction": kernel.map(|f| f.0),
            "kernel_peak_saved_fraction": kernel.map(|f| f.1),
            "kernel_slowdown": kernel.map(|f| f.2),
            "unmanaged_mean_resident_bytes": alone_mean.map(|b| b as u64),
            "unmanaged_peak_resident_bytes": alone_peak.map(|b| b as u64),
            "unmanaged_time": alone_time,
            "rounds": each_round,
        }));
        for note in runs.iter().flat_map(|r| r.notes.iter()) {
            if !notes.contains(note) {
                notes.push(note.clone());
            }
        }
    }
    for note in notes {
        report.note(note);
    }
    report.field("workloads", serde_json::Value::Array(rows));
    bad
}

fn round_json(round: &Round, service: bool) -> serde_json::Value {
    let side = |f: Option<Figures>| match (f, round.unmanaged) {
        (Some(f), Some(alone)) => {
            let (saved, peak_saved, slowdown) = against(&f, &alone, service);
            serde_json::json!({
                "mean_resident_bytes": f.mean_bytes as u64,
                "peak_resident_bytes": f.peak_bytes,
                "time": f.time,
                "saved_fraction": saved,
                "peak_saved_fraction": peak_saved,
                "slowdown": slowdown,
            })
        }
        _ => serde_json::Value::Null,
    };
    serde_json::json!({
        "unmanaged": round.unmanaged.map(|f| serde_json::json!({
            "mean_resident_bytes": f.mean_bytes as u64,
            "peak_resident_bytes": f.peak_bytes,
            "time": f.time,
        })),
        "uswap": side(round.uswap),
        "kernel": side(round.kernel),
    })
}

impl WorkloadSpec {
    /// Whether the workload is a service, measured by what it serves in a fixed time.
    fn measure_is_service(&self) -> bool {
        matches!(self.kind, WorkloadKind::PyService | WorkloadKind::RedisZipf)
    }
}

fn describe(report: &mut Report, ctx: &RunContext, args: &AutoArgs, env: &Result<KernelEnv>) {
    report.field("size_bytes", ctx.size_bytes);
    report.field("serve_s", ctx.serve_s);
    report.field("target_percent", args.target);
    report.field("repeat", args.repeat);
    report.field("seed", ctx.seed);
    report.field("uswap_pool", args.uswap_pool.clone());
    report.field("uswap_swap_file_cache", args.swap_file_cache.clone());
    if let Some(order) = args.folio_order {
        report.field("uswap_folio_order", order);
    }
    if let Some(delivery) = &args.delivery {
        report.field("uswap_delivery", delivery.clone());
    }
    let table = report.table("Run", &["what", "value"]);
    table.row(["data size per workload".to_string(), format_size(ctx.size_bytes)]);
    table.row(["services serve for".to_string(), format!("{} s", ctx.serve_s)]);
    table.row(["target (both controllers)".to_string(), format!("{}% of the run", args.target)]);
    table.row(["rounds (medians reported)".to_string(), args.repeat.to_string()]);
    let pool = ctx.uswap_pool_bytes.map_or(String::new(), |b| {
        format!(" --pool-size {} (beside the budget, as large as zram's device)", format_size(b))
    });
    let mut order = args.folio_order.map_or(String::new(), |o| format!(" --folio-order {o}"));
    if let Some(delivery) = &args.delivery {
        order.push_str(&format!(" --delivery {delivery}"));
    }
    let side = format!(
        "uswap run --budget auto:{} --swap-file-cache {}{pool}{order}",
        args.target, args.swap_file_cache
    );
    table.row(["uswap side".to_string(), side]);

    let kernel = match (env, args.no_kernel) {
        (_, true) => "skipped (--no-kernel)".to_string(),
        (Err(why), _) => format!("skipped: {why:#}"),
        (Ok(env), _) => match env.parent.version {
            cgroup::CgroupVersion::V1 => {
                "zram lz4; memory.limit_in_bytes steered by /proc/pressure/memory some".into()
            }
            cgroup::CgroupVersion::V2 => {
                "zram lz4; memory.high steered by memory.pressure some".into()
            }
        },
    };
    table.row(["kernel side".to_string(), kernel]);
    report.note(
        "saved = 1 - mean resident / the unmanaged run's mean resident (services: over the \
         serving time; batch programs: the whole run); resident = the memory cgroup's usage \
         (the uswap side's pool and page tables inside it) + zram's pool on the kernel side",
    );
    report.note(
        "slowdown: services, unmanaged requests per second / requests per second (pyservice: \
         requests of 8 records in the service's own loop; redis: GETs in pipelines of 16 from \
         a client thread); batch programs, wall time / unmanaged wall time",
    );
    report.note("this machine is shared with other builds: timings are noisy, compare ratios");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_s: f64, mib: u64) -> Sample {
        Sample { t_s, charged_bytes: mib << 20, ..Sample::default() }
    }

    #[test]
    fn the_mean_is_weighted_by_time_and_cut_to_the_window() {
        let samples = [sample(0.0, 100), sample(1.0, 10), sample(3.0, 40), sample(4.0, 40)];
        let mib = |s: &Sample| (s.charged_bytes >> 20) as f64;
        // 100 for 1 s, 10 for 2 s, 40 for 1 s.
        assert!((time_mean(&samples, 0.0, f64::MAX, mib) - 160.0 / 4.0).abs() < 1e-9);
        // From 2 s to 3.5 s: 10 for 1 s, 40 for 0.5 s.
        assert!((time_mean(&samples, 2.0, 3.5, mib) - 30.0 / 1.5).abs() < 1e-9);
        assert_eq!(time_mean(&samples, 9.0, 10.0, mib), 0.0);
    }

    #[test]
    fn a_service_is_slowed_by_serving_less_and_a_batch_by_taking_longer() {
        let alone = Figures { mean_bytes: 100.0, peak_bytes: 200, time: 1000.0, verify_errors: 0 };
        let side = Figures { mean_bytes: 60.0, peak_bytes: 150, time: 980.0, verify_errors: 0 };
        let (saved, peak_saved, slowdown) = against(&side, &alone, true);
        assert!((saved - 0.4).abs() < 1e-9 && (peak_saved - 0.25).abs() < 1e-9);
        assert!((slowdown - 1000.0 / 980.0).abs() < 1e-9);
        let (_, _, batch) = against(&side, &alone, false);
        assert!((batch - 0.98).abs() < 1e-9);
    }

    #[test]
    fn medians_and_names() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0]), Some(1.0));
        assert_eq!(median(Vec::new()), None);
        let names: Vec<String> =
            parse("zipf, pyservice,zipf").unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["zipf", "pyservice"]);
        assert!(parse("seq").is_err());
        assert!(
            parse(&ALL.join(",")).unwrap().iter().filter(|s| s.measure_is_service()).count() == 2
        );
    }
}
