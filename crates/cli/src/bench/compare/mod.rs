//! `uswap bench compare`: the same workloads under uswap and under the kernel's own swap,
//! at the same memory budget, side by side in one run (ARCHITECTURE.md, "The kernel as
//! the yardstick").
//!
//! ```text
//!   build only:          warm-up build, then the unmanaged reference: its peak / 2 is the
//!                        build's budget, its outputs what every build is checked against
//!   for each workload (seq, uniform, zipf, zero, pydict, redis, build):
//!       uswap side       uswap_side::run   (`uswap run --budget B -- CMD`; skipped if absent)
//!       uswap far        with --far: far_side::run (the same, `--far` to memcached servers
//!                        started for the run; skipped without memcached)
//!       kernel side      for zram lzo-rle, zram lz4, zswap lz4, zswap lzo-rle:
//!                            set up swap + cgroup(limit = budget), run, sample, tear down
//!   report: per-side table, uswap-vs-kernel table, JSON `workloads`, --plot SVGs
//! ```
//!
//! Modules: `workloads` (what runs and how it is read; `redis` and `build` the real
//! programs), `counters` (swap counters alike on both sides), `runner` (spawn, sample, reap),
//! `kernel` + `cgroup` + `machine` (setup/teardown guards), `kernel_side` (one kernel
//! run), `uswap_side` (the workload under `uswap run`), `far_side` (the same with the swap
//! device in a far tier), `summary` (tables, JSON),
//! `plot` (charts, drawn by `crate::svg`), `sys` (the few raw system calls).
//!
//! Safety of the machine: zram0 and swap are global. Every change is made by a guard
//! that undoes it on drop; SIGINT/SIGTERM only set a flag, the running workload is
//! killed and the guards unwind; one harness at a time holds a lock; a machine where
//! swap is already on is refused. After a run no swap is on and zswap is as it was.

pub(super) mod build;
mod build_report;
pub(super) mod cgroup;
mod counters;
mod far_side;
pub(super) mod kernel;
pub(super) mod kernel_side;
pub(super) mod machine;
pub(super) mod outcome;
mod plot;
pub(super) mod redis;
pub(super) mod runner;
mod summary;
pub(super) mod sys;
pub(super) mod uswap_side;
pub(super) mod workloads;

use crate::bench::CommonOpts;
use crate::report::Report;
use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kernel::KernelConfig;
use kernel_side::KernelEnv;
use outcome::Side;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;
use summary::WorkloadRow;
use workload::size::{format_size, parse_size};
use workloads::{RunContext, WorkloadSpec};

/// Defaults sized for the dev machines (2 cores, 24 GiB): the data is 4x the budget.
const DEFAULT_SIZE: &str = "1G";
const DEFAULT_BUDGET: &str = "256M";
const QUICK_SIZE: &str = "64M";
const QUICK_BUDGET: &str = "16M";
const QUICK_WORKLOADS: &str = "uniform";

/// Options of `uswap bench compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// Memory budget of every run: the cgroup limit (kernel) and `--budget` (uswap).
    /// Default 256M (16M with --quick).
    #[arg(long, value_parser = parse_size_arg)]
    pub budget: Option<u64>,
    /// Data size of every workload. Default 1G (64M with --quick).
    #[arg(long, value_parser = parse_size_arg)]
    pub size: Option<u64>,
    /// Comma-separated workloads: seq,uniform,zipf,zero,pydict,redis,build (default: all
    /// but build; uniform with --quick). `build` is `make -j2` of Redis's source under
    /// half of the build's own unmanaged peak (or --budget), every object file and program
    /// checked against the unmanaged build's; `uswap bench build` runs it alone.
    #[arg(long)]
    pub workloads: Option<String>,
    /// The build workload's source tree, built in a copy (default: where .ci/setup-bench
    /// installs Redis's Debian source).
    #[arg(long, value_name = "DIR", default_value = build::DEFAULT_SOURCE)]
    pub build_src: PathBuf,
    /// Comma-separated kernel configurations: zram-lzo-rle,zram-lz4,zswap-lz4,
    /// zswap-lzo-rle (default: all; zram-lz4 with --quick). A configuration whose
    /// compressor this kernel lacks is skipped with a note.
    #[arg(long)]
    pub configs: Option<String>,
    /// Write SVG charts (latency CDFs, memory over time) into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Seed of every workload's accesses and contents.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Kill a run that takes longer than this many seconds (default 1800; 7200 when the
    /// build workload runs: under uswap at half of its peak it takes most of an hour here).
    #[arg(long)]
    pub timeout_s: Option<u64>,
    /// The uswap side's folio order (`uswap run --folio-order`; default: run's, 4). 0 is
    /// like for like with the kernel's default of 4 KiB anonymous pages (THP off or
    /// madvise, mTHP never).
    #[arg(long, value_name = "N")]
    pub folio_order: Option<u32>,
    /// The uswap side's large-folio policy (`uswap run --large-folios`: always or
    /// sequential; default: run's, sequential).
    #[arg(long, value_name = "POLICY")]
    pub large_folios: Option<String>,
    /// Run both sides' programs on these CPUs only (taskset's list syntax: 0, 0-1): the
    /// harness pins itself, so the uswap side (program and fault handler) and the kernel
    /// side's program inherit the same set. Reclaim is confined on neither side: the
    /// kernel's own threads run anywhere, and uswap's reclaimer runs on the CPUs left
    /// outside the list (`uswap run --reclaim-cpus`). Default: every CPU this process may
    /// use.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// The uswap side's idle polling (`uswap run --idle-poll`: auto, on, off, auto:US,
    /// on:US; default: run's, auto).
    #[arg(long, value_name = "MODE")]
    pub idle_poll: Option<String>,
    /// The uswap side's `--swap-file-cache` (keep or drop; default: run's, keep). Either
    /// way its swap file's pages in the page cache are measured and counted in its peak.
    #[arg(long, value_name = "MODE", value_parser = ["keep", "drop"])]
    pub swap_file_cache: Option<String>,
    /// The uswap side's `--zero-pages` (protected or charged; default: run's, protected).
    #[arg(long, value_name = "MODE", value_parser = ["protected", "charged"])]
    pub zero_pages: Option<String>,
    /// The uswap side's `--delivery` (handler or sigbus; default: run's, handler). SIGBUS
    /// delivery suits the shipped workload program (no fork, its own system calls retried
    /// by the shim), not every program (docs/RUN.md, "Fault delivery").
    #[arg(long, value_name = "MODE", value_parser = ["handler", "sigbus"])]
    pub delivery: Option<String>,
    /// The uswap side's compressed pool: `beside` the budget (`uswap run --pool-size`, as
    /// large as the zram device: its compressed pages are not charged to the budget, as the
    /// cgroup limit leaves zram's store out; like for like with zram) or a `share` of it (run's
    /// default, 20%, charged to the budget: like zswap under a cgroup).
    #[arg(long, value_name = "MODE", value_parser = ["beside", "share"], default_value = "beside")]
    pub uswap_pool: String,
    /// Run every workload N times (each round: every workload, uswap then each kernel
    /// configuration) and report each workload's median round by its ratio against zram
    /// lz4, every round's ratio beside it. On a shared, noisy machine one run settles
    /// nothing. Every round's data is verified.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=50))]
    pub repeat: u32,
    /// Also run the uswap side with its swap device in a far tier, reported beside the
    /// local one (`uswap far`; JSON `uswap_far_*`): for each workload, three `memcached -M`
    /// servers on loopback, each sized to hold a copy of the whole swap device, started for
    /// the run and killed after it; `uswap run --far` with two copies of each page,
    /// `--encrypt on` (the far tier refuses to run without it) and no pool (`--zswap off`):
    /// a pool beside the budget would hold every page and the servers see none, a share of
    /// it would hide part of the traffic, so without one every page past the budget goes to
    /// the servers and the row measures the far tier itself. Skipped with a note where
    /// memcached is not installed.
    #[arg(long)]
    pub far: bool,
}

/// `uswap bench build`: the comparison of the build workload alone, against zram lz4 and
/// zswap (lzo-rle: this kernel's zswap has no lz4) unless `--workloads` and `--configs`
/// say otherwise.
///
/// # Errors
/// As [`run`].
pub fn run_build(args: &CompareArgs, common: &CommonOpts) -> Result<Report> {
    let mut args = args.clone();
    args.workloads.get_or_insert_with(|| "build".into());
    args.configs.get_or_insert_with(|| "zram-lz4,zswap-lzo-rle".into());
    run(&args, common)
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

/// Parses `zram-lz4,zswap-lz4`.
fn parse_configs(list: &str) -> Result<Vec<KernelConfig>> {
    let mut configs = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let config = KernelConfig::ALL
            .into_iter()
            .find(|c| c.key().replace('_', "-") == name || c.key() == name)
            .with_context(|| format!("unknown configuration {name:?}"))?;
        if !configs.contains(&config) {
            configs.push(config);
        }
    }
    if configs.is_empty() {
        bail!("no configuration named in {list:?}");
    }
    Ok(configs)
}

/// The scratch directory, removed when the comparison ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the comparison.
///
/// # Errors
/// Bad options; an interrupt (after teardown); verify errors in any run (after the
/// report is printed, so the figures are not lost).
pub fn run(args: &CompareArgs, common: &CommonOpts) -> Result<Report> {
    let quick = common.quick;
    let pick = |value: Option<u64>, normal: &str, small: &str| -> Result<u64> {
        value.map_or_else(|| Ok(parse_size(if quick { small } else { normal })?), Ok)
    };
    let size_bytes = pick(args.size, DEFAULT_SIZE, QUICK_SIZE)?;
    let budget_bytes = pick(args.budget, DEFAULT_BUDGET, QUICK_BUDGET)?;
    let all_workloads = workloads::DEFAULT_WORKLOADS.join(",");
    let default_workloads = if quick { QUICK_WORKLOADS } else { all_workloads.as_str() };
    let specs = workloads::parse_workloads(args.workloads.as_deref().unwrap_or(default_workloads))?;
    let configs = parse_configs(args.configs.as_deref().unwrap_or(if quick {
        "zram-lz4"
    } else {
        "zram-lzo-rle,zram-lz4,zswap-lz4,zswap-lzo-rle"
    }))?;
    let mut uswap_reclaim_cpus = None;
    if let Some(text) = &args.cpus {
        let cpus = crate::cpus::Cpus::parse(text)?;
        uswap_reclaim_cpus = cpus.others_allowed().map(|c| runstat::cpus::format_list(&c));
        cpus.apply()?;
    }
    sys::install_interrupt_handler().context("install the SIGINT handler")?;
    let scratch = Scratch(std::env::temp_dir().join(format!("uswap-bench-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).with_context(|| format!("create {:?}", scratch.0))?;
    let ctx = RunContext {
        workload_bin: workloads::find_workload_binary(),
        python: workloads::find_python(),
        redis_server: workloads::find_on_path("redis-server"),
        scratch_dir: scratch.0.clone(),
        size_bytes,
        budget_bytes,
        seed: args.seed,
        timeout: Duration::from_secs(args.timeout_s.unwrap_or(default_timeout_s(&specs))),
        uswap_folios: uswap_folios(args)?,
        uswap_idle_poll: uswap_idle_poll(args)?,
        uswap_swap_file_cache: args.swap_file_cache.clone(),
        uswap_zero_pages: args.zero_pages.clone(),
        uswap_delivery: args.delivery.clone(),
        uswap_pool_bytes: (args.uswap_pool == "beside")
            .then(|| kernel_side::swap_bytes(size_bytes)),
        uswap_reclaim_cpus,
        uswap_budget: None,
        uswap_far: None,
        serve_s: 0.0,
        build: build::BuildSetup::new(args.build_src.clone(), &scratch.0, quick),
    };
    let env = KernelEnv::open(Box::new(machine::RealMachine), machine::Roots::default());
    warm_programs(&specs, &ctx);
    let mut ctx = ctx;
    let reference = build::reference_for(&specs, &mut ctx, env.as_ref().ok(), args.budget);
    if sys::interrupted() {
        bail!("interrupted during the unmanaged build: nothing of the machine was changed");
    }
    let repeat = args.repeat as usize;
    let sides = configs.len() + 1 + usize::from(args.far);
    let progress = progress_bar(common.json, repeat * specs.len() * sides);
    let mut rounds = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        rounds.push(run_all(&specs, &configs, &ctx, &env, &reference, &progress, args.far)?);
    }
    progress.finish_and_clear();
    let mut report = Report::new("compare");
    describe(&mut report, &ctx, &configs, &env, args.far);
    build_report::describe(&mut report, &ctx, reference.as_ref());
    report.field("repeat", args.repeat);
    // Data safety is every round's, not only the reported one's.
    let bad: Vec<String> = rounds
        .iter()
        .flatten()
        .filter(|row| verify_errors(row) > 0)
        .map(|r| r.name.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let rows = if repeat > 1 {
        summary::pick_median_rounds(&mut report, rounds)
    } else {
        rounds.pop().unwrap_or_default()
    };
    summary::fill(&mut report, &rows);
    build_report::fill(&mut report, &rows, reference.as_ref().and_then(|r| r.as_ref().ok()));
    if let Some(dir) = &args.plot {
        let results: Vec<plot::WorkloadResults<'_>> = rows.iter().map(plot_results).collect();
        let files = plot::write_all(dir, &results)?;
        report.note(format!("{} charts written to {}", files.len(), dir.display()));
    }
    if !bad.is_empty() {
        report.print(common.json);
        bail!("pages read back wrong in: {} (data-safety failure)", bad.join(", "));
    }
    Ok(report)
}

/// Brings what the runs read from files into the page cache, from the harness, before
/// anything is measured: a memory cgroup charges a page cache page to whoever reads it
/// first, so without this the first run measured (the uswap side) would be charged for
/// loading the programs, their libraries and their modules, and the runs after it not
/// (after `drop_caches` a first run was charged 41 MiB; a Redis run 3.3 MiB, mostly the
/// server's libraries, when only the programs were read). So every program file is read
/// whole (this binary, the shim, the workload programs), then every workload runs once at
/// [`WARM_SIZE`], unconfined and unmeasured. A failure here is left to the measured run to report.
///
/// Context: reads a few tens of MiB through a 64 KiB buffer; runs each workload for a
/// second or two.
pub(super) fn warm_programs(specs: &[WorkloadSpec], ctx: &RunContext) {
    let programs = [
        std::env::current_exe().ok(),
        crate::run::find_shim().ok(),
        ctx.workload_bin.clone(),
        ctx.python.clone(),
        ctx.redis_server.clone(),
    ];
    for path in programs.into_iter().flatten() {
        if let Ok(mut file) = std::fs::File::open(&path) {
            let _ = std::io::copy(&mut file, &mut std::io::sink());
        }
    }
    struct Unmeasured;
    impl runner::MemoryProbe for Unmeasured {
        fn sample(&self, _pid: u32) -> runner::Sample {
            runner::Sample::default()
        }
    }
    let small = RunContext {
        size_bytes: ctx.size_bytes.min(WARM_SIZE),
        serve_s: ctx.serve_s.min(0.2),
        ..ctx.clone()
    };
    let placement = workloads::Placement { prepare: &|_| Ok(()), probe: &Unmeasured };
    // The build warms itself up (build::reference_for).
    let warmed = |spec: &&WorkloadSpec| spec.kind != workloads::WorkloadKind::Build;
    for spec in specs.iter().filter(warmed).filter(|spec| spec.missing(&small).is_none()) {
        let _ = spec.execute(&small, &placement);
    }
}

/// The data size of the warm-up runs ([`warm_programs`]).
const WARM_SIZE: u64 = 16 << 20;

/// The time limit of a run when --timeout-s is not given (its documentation).
fn default_timeout_s(specs: &[WorkloadSpec]) -> u64 {
    let build = specs.iter().any(|spec| spec.kind == workloads::WorkloadKind::Build);
    if build {
        7200
    } else {
        1800
    }
}

/// The uswap side's folio flags, checked here so a typo fails before minutes of runs.
fn uswap_folios(args: &CompareArgs) -> Result<Option<(u32, String)>> {
    folio_flags(args.folio_order, args.large_folios.as_deref())
}

/// A uswap side's `--folio-order` and `--large-folios`, checked (`None`: run's defaults).
pub fn folio_flags(order: Option<u32>, policy: Option<&str>) -> Result<Option<(u32, String)>> {
    if order.is_none() && policy.is_none() {
        return Ok(None);
    }
    let order = order.unwrap_or(4);
    let policy = policy.unwrap_or("sequential");
    let policy = crate::run::check_folios(order, policy)?;
    Ok(Some((order, policy.name().to_string())))
}

/// The uswap side's `--idle-poll`, checked here for the same reason.
fn uswap_idle_poll(args: &CompareArgs) -> Result<Option<String>> {
    let Some(text) = &args.idle_poll else { return Ok(None) };
    let polling: frontend::idle::IdlePolling =
        text.parse().map_err(|e| anyhow::anyhow!("--idle-poll {e}"))?;
    Ok(Some(polling.to_string()))
}

fn verify_errors(row: &WorkloadRow) -> u64 {
    row.sides().filter_map(|(_, side)| side.outcome()).map(|o| o.measured.verify_errors).sum()
}

fn plot_results(row: &WorkloadRow) -> plot::WorkloadResults<'_> {
    plot::WorkloadResults { name: &row.name, sides: row.sides().collect() }
}

fn progress_bar(json: bool, runs: usize) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(runs as u64), ProgressDrawTarget::stderr());
    let style =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Runs every side of every workload.
///
/// # Errors
/// An interrupt (the machine is already restored when it returns).
fn run_all(
    specs: &[WorkloadSpec],
    configs: &[KernelConfig],
    ctx: &RunContext,
    env: &Result<KernelEnv>,
    reference: &Option<Result<build::Reference>>,
    progress: &ProgressBar,
    far: bool,
) -> Result<Vec<WorkloadRow>> {
    let mut rows = Vec::new();
    let mut run_index = 0;
    for spec in specs {
        let ctx = &match build::context_for(spec, ctx, reference.as_ref()) {
            Ok(ctx) => ctx,
            Err(why) => {
                let kernel = configs.iter().map(|&c| (c, Side::Failed(why.clone()))).collect();
                rows.push(WorkloadRow {
                    name: spec.name.clone(),
                    uswap: Side::Failed(why.clone()),
                    far: far.then_some(Side::Failed(why)),
                    kernel,
                });
                progress.inc(configs.len() as u64 + 1 + u64::from(far));
                continue;
            }
        };
        progress.set_message(format!("{} / uswap", spec.name));
        run_index += 1;
        let uswap = match spec.missing(ctx) {
            Some(why) => Side::Skipped(why),
            None => uswap_side::run(spec, ctx, env.as_ref().ok(), run_index),
        };
        progress.inc(1);
        let far = far.then(|| {
            progress.set_message(format!("{} / uswap far", spec.name));
            run_index += 1;
            let side = match spec.missing(ctx) {
                Some(why) => Side::Skipped(why),
                None => far_side::run(spec, ctx, env.as_ref().ok(), run_index),
            };
            progress.inc(1);
            side
        });
        let mut kernel = Vec::new();
        for &config in configs {
            progress.set_message(format!("{} / {}", spec.name, config.label()));
            let side = match (spec.missing(ctx), env) {
                (Some(why), _) => Side::Skipped(why),
                (None, Err(why)) => Side::Skipped(format!("{why:#}")),
                (None, Ok(env)) => {
                    run_index += 1;
                    match kernel_side::run_kernel(env, config, spec, ctx, run_index) {
                        Ok(outcome) => Side::Ran(Box::new(outcome)),
                        Err(error) if error.is::<runner::Interrupted>() || sys::interrupted() => {
                            bail!("interrupted: swap, zram, zswap and the cgroup were restored");
                        }
                        Err(error) if error.is::<kernel::Unsupported>() => {
                            Side::Skipped(format!("{error:#}"))
                        }
                        Err(error) => Side::Failed(format!("{error:#}")),
                    }
                }
            };
            kernel.push((config, side));
            progress.inc(1);
        }
        rows.push(WorkloadRow { name: spec.name.clone(), uswap, far, kernel });
    }
    Ok(rows)
}

/// The run's parameters and the notes every reader needs.
fn describe(
    report: &mut Report,
    ctx: &RunContext,
    configs: &[KernelConfig],
    env: &Result<KernelEnv>,
    far: bool,
) {
    report.field("size_bytes", ctx.size_bytes);
    report.field("uswap_far", far);
    report.field("budget_bytes", ctx.budget_bytes);
    report.field("seed", ctx.seed);
    let cpus = crate::cpus::current();
    report.field("cpus", cpus.clone());
    let keys: Vec<&str> = configs.iter().map(|c| c.key()).collect();
    report.field("kernel_configs", serde_json::json!(keys));
    let table = report.table("Run", &["what", "value"]);
    table.row(["data size per workload", &format_size(ctx.size_bytes)]);
    table.row(["budget (cgroup limit)", &format_size(ctx.budget_bytes)]);
    let labels: Vec<&str> = configs.iter().map(|c| c.label()).collect();
    table.row(["kernel configurations".to_string(), labels.join(", ")]);
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    table.row(["transparent hugepages".to_string(), thp.trim().to_string()]);
    table.row(["CPUs (both sides' programs)".to_string(), cpus]);
    let folios = ctx.uswap_folios.as_ref().map_or_else(
        || "uswap run's default (order 4, sequential)".to_string(),
        |(order, policy)| format!("order {order}, {policy}"),
    );
    table.row(["uswap folios".to_string(), folios]);
    let idle = ctx.uswap_idle_poll.clone().unwrap_or_else(|| "uswap run's default (auto)".into());
    table.row(["uswap idle polling".to_string(), idle]);
    let cache = ctx.uswap_swap_file_cache.clone().unwrap_or_else(|| "run's default (keep)".into());
    table.row(["uswap swap file cache".to_string(), cache]);
    let zero = ctx.uswap_zero_pages.clone().unwrap_or_else(|| "run's default (protected)".into());
    table.row(["uswap zero pages".to_string(), zero]);
    let delivery = ctx.uswap_delivery.clone().unwrap_or_else(|| "run's default (handler)".into());
    table.row(["uswap fault delivery".to_string(), delivery]);
    let pool = ctx.uswap_pool_bytes.map_or_else(
        || "a share of the budget (run's default, 20%)".to_string(),
        |bytes| format!("beside the budget, at most {}", format_size(bytes)),
    );
    table.row(["uswap pool".to_string(), pool]);
    if far {
        table.row(["uswap far tier".to_string(), far_side::describe_line(ctx)]);
    }
    if let Some((order, policy)) = &ctx.uswap_folios {
        report.field("uswap_folio_order", *order);
        report.field("uswap_large_folios", policy.clone());
    }
    if let Some(idle) = &ctx.uswap_idle_poll {
        report.field("uswap_idle_poll", idle.clone());
    }
    if let Some(cache) = &ctx.uswap_swap_file_cache {
        report.field("uswap_swap_file_cache", cache.clone());
    }
    if let Some(zero) = &ctx.uswap_zero_pages {
        report.field("uswap_zero_pages", zero.clone());
    }
    if let Some(delivery) = &ctx.uswap_delivery {
        report.field("uswap_delivery", delivery.clone());
    }
    report.field("uswap_pool_size_bytes", serde_json::json!(ctx.uswap_pool_bytes));
    if let Err(why) = env {
        report.note(format!("kernel side skipped: {why:#}"));
    }
    report.note(
        "fault p50/p99: latency of accesses slower than 1 us (the workload's proxy for a \
         fault, the same for both sides); synthetic workloads only",
    );
    report.note(
        "peak = cgroup peak (memory.max_usage_in_bytes / memory.peak) + the compressed store \
         outside the charge: zram mem_used_max; zswap's pool (Zswap in /proc/meminfo, \
         sampled) on cgroup v1, which does not charge it (v2 does: store 0 there) + the swap \
         tables the setup allocated outside the cgroup (zram's table, swapon's maps: \
         /proc/vmallocinfo) + the growth of the swap's own slab caches (zsmalloc's handles \
         and zspages, zswap's entries: /sys/kernel/slab); uswap's peak: the peak of a memory \
         cgroup without a limit that it runs in (the same instrument; where none can be made, \
         its process tree's VmRSS + VmPTE, sampled, plus its swap file's page cache)",
    );
    if far {
        report.note(far_side::NOTE);
    }
    report.note("this machine is shared with other builds: timings are noisy, compare ratios");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_parse_by_either_spelling() {
        assert_eq!(parse_configs("zram-lz4").unwrap(), [KernelConfig::ZramLz4]);
        assert_eq!(
            parse_configs("zswap_lz4,zram-lzo-rle,zswap-lz4").unwrap(),
            [KernelConfig::ZswapLz4, KernelConfig::ZramLzoRle]
        );
        assert!(parse_configs("zram-zstd").is_err());
        assert!(parse_configs("").is_err());
    }

    #[test]
    fn the_build_gets_a_longer_time_limit() {
        let limit = |list: &str| default_timeout_s(&workloads::parse_workloads(list).unwrap());
        assert_eq!(limit("seq,zipf"), 1800);
        assert_eq!(limit("seq,build"), 7200);
    }
}
