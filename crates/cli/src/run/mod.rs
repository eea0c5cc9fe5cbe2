//! `uswap run [FLAGS] -- CMD ARGS...`: run an unmodified program, and every process it
//! starts, with their private anonymous memory managed by uswap under one budget
//! (docs/RUN.md).
//!
//! ```text
//!   check everything (sizes, budget, CMD exists and can load the shim, swap file path
//!   writable, userfaultfd at rung 1 or 2 of the privilege ladder, the shim loadable)
//!     -> one line on stderr and exit 1 on the first problem, before CMD starts
//!   private run directory (0700, in $TMPDIR) holding the shim (crate::shim), a run
//!   token, a child subreaper
//!   the broker's thread (broker/): the control socket, the tree's budget and swap space
//!   CMD with LD_PRELOAD=libuswap_preload.so and runstat's USWAP_* variables; every
//!   process of the tree that loads the shim joins the broker, which gives it a share
//!   wait4 for CMD (reaping orphans; ru_maxrss); forward every catchable signal
//!   summary (summary.rs) from the broker's view and the shims' stats files; leave the
//!   run directory (its last member removes it); exit as CMD did (its code, or 128 +
//!   the signal, as shells do)
//! ```
//!
//! Modules: [`args`] (the flags, as `--help` shows them), [`checks`] (flags and the
//! environment, before CMD starts), [`budget`] (the default budget), [`broker`], [`view`]
//! (the broker's view of the tree, also the tree file `uswap stat` reads), [`live`]
//! (`--stats-every`), [`summary`], [`sys`] (spawning, waiting, the unsafe calls).

pub mod args;
mod broker;
mod budget;
mod checks;
pub mod config;
mod far_copies;
mod live;
mod plot;
pub mod summary;
mod sys;
pub mod view;

use anyhow::{anyhow, bail, Context, Result};
pub use args::RunArgs;
pub use checks::find_shim;
use checks::{
    absolute, check_pool_size, check_swap_file, check_uncached_io, check_zswap, find_program,
    swap_size,
};
use engine::LargeFolios;
use frontend::idle::{IdlePage, IdlePolling};
use runstat::env::RunConfig;
use runstat::settings::{Delivery, FileCache, Switch};
use runstat::{format_size, StatsFile};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;
pub use sys::time_of_day;

/// A line on stderr that a closed stderr does not turn into a panic: nothing `uswap run`
/// says may change the exit status it passes on (`... 2>&1 | true` closes the pipe).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// An order-0 folio: the smallest budget is one folio of the order in force.
const PAGE_BYTES: u64 = 4096;
/// The default swap device size (a sparse file).
const DEFAULT_SWAP_BYTES: u64 = engine::defaults::RUN.swap_size_bytes;
/// The smallest swap device: one cluster of 512 pages.
const MIN_SWAP_BYTES: u64 = (slots::SWAPFILE_CLUSTER as u64) * PAGE_BYTES;
/// The largest: the largest file ext4 holds with 4 KiB blocks.
const MAX_SWAP_BYTES: u64 = 16 << 40;

/// Runs `uswap run`; returns the exit status to end with.
///
/// # Errors
/// Bad input or an environment that cannot run the shim: one line, before CMD starts.
pub fn run(args: RunArgs) -> Result<i32> {
    let plan = plan(&args)?;
    if let Some(cpus) = &plan.cpus {
        cpus.apply()?;
    }
    let mut config = plan.config.clone();
    let stats_out = (args.stats_file.as_deref())
        .map(|path| crate::outputs::open_output("--stats-file", path, args.force, false))
        .transpose()?;
    // The totals go to the same open file after the live lines (the two share its offset).
    let totals_out = stats_out.as_ref().map(std::fs::File::try_clone).transpose()?;
    if let Some(path) = &args.record {
        config.record_file = Some(crate::outputs::start_trace(path, args.force)?);
    }
    // Opened now, so that a path that cannot be written fails before the program runs.
    let plot_out = (args.plot.as_deref())
        .map(|path| crate::outputs::open_output("--plot", path, args.force, true))
        .transpose()?;
    // Directories of runs whose members are all gone (killed) go first.
    crate::rundir::sweep(&std::env::temp_dir());
    let dir = crate::rundir::RunDir::create()?;
    let socket = dir.path.join(runstat::env::SOCKET);
    if socket.as_os_str().len() >= 108 {
        bail!("{}: too long for a Unix socket's address: set TMPDIR shorter", socket.display());
    }
    for note in &plan.swap_notes {
        say!("uswap: note: {note}");
    }
    config.run_dir = dir.path.display().to_string();
    config.preload_path = plan.shim.place(&dir.path)?.display().to_string();
    config.run_token = format!("{:032x}", rand::random::<u128>());
    // Polling only saves wake-ups: a run whose pollers cannot start goes on without them.
    let pollers = start_pollers(plan.idle_poll, &dir.path).unwrap_or_else(|e| {
        say!("uswap: note: idle polling is off for this run: {e:#}");
        None
    });
    config.idle_page = pollers.as_ref().map(|_| dir.path.join(IDLE_PAGE).display().to_string());
    // Orphans of the tree are re-parented here, not to init: they stay in the tree.
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .context("cannot become a child subreaper (PR_SET_CHILD_SUBREAPER)")?;
    let settings = broker::Settings {
        budget_bytes: config.budget_bytes,
        budget_source: plan.budget_source.describe(),
        token: config.run_token.clone(),
        dir: dir.path.clone(),
        exclude: pollers.iter().map(sys::PollerProcess::pid).collect(),
        shim: config.preload_path.clone(),
        auto: plan.auto,
        plot: plot_out.is_some(),
    };
    // Before the broker's threads start: they inherit the mask, and leave every forwarded
    // signal to the main thread's wait.
    let signals = crate::signals::Signals::block();
    let broker = broker::Broker::start(settings, config.swap_size_bytes)?;
    let started = Instant::now();
    let outcome = sys::spawn_and_wait(&plan, &config, &args, stats_out, signals);
    let wall = started.elapsed();
    let (view, recording) = broker.finish();
    let outcome = outcome?;
    let far_copies = (config.far.as_deref())
        .map(|url| far_copies::delete(&dir, url, config.far_replicas))
        .unwrap_or_default();
    let mut files = summary::read_files(&dir.path);
    let total = &mut files.total;
    if let Some(done) = &far_copies.deleted {
        far_copies::add_figures(done, total);
    }
    if let Some(pollers) = pollers {
        let idle = pollers.stop();
        total.set("idle_pollers", idle.pollers);
        total.set("idle_poll_ns", idle.poll_ns);
        total.set("idle_poll_setup_errors", idle.setup_errors);
    }
    let hwm = total.get("vm_hwm_bytes").max(outcome.maxrss_bytes);
    total.set("vm_hwm_bytes", hwm);
    total.set("budget_bytes", config.budget_bytes);
    total.set("pool_size_bytes", config.pool_bytes.unwrap_or(0));
    let ending = summary::Ending {
        cmd: plan.cmd[0].clone(),
        status: outcome.status,
        wall,
        children_cpu_ns: outcome.children_cpu_ns,
    };
    let mut lines = summary::lines(&ending, &view, &files, args.verbose);
    lines.extend(far_copies.line);
    if let (Some(file), Some(recording), Some(path)) = (plot_out, recording, &args.plot) {
        lines.push(write_plot(file, &recording, &plan.cmd[0], path));
    }
    if let Some(out) = totals_out {
        write_totals(out, &files.total, &view);
    }
    let total = &files.total;
    if outcome.status == runstat::env::START_FAILED && total.get("shim_scans") == 0 {
        lines.push(format!(
            "note: the shim could not start in {} (its reason is above)",
            plan.cmd[0]
        ));
    } else if total.get("shim_scans") == 0 {
        lines.push(
            "note: the program wrote no stats (it exited before the shim's first scan)".into(),
        );
    }
    // The summary never changes the exit status: a stderr that cannot be written to
    // (closed, a pipe whose reader left) loses the lines, nothing more.
    let mut err = std::io::stderr().lock();
    for line in lines {
        let _ = writeln!(err, "uswap: {line}");
    }
    Ok(outcome.status)
}

/// Writes `--plot`'s SVG; the summary's line about it (written, or why not: the run's exit
/// status is the program's either way).
fn write_plot(
    mut file: std::fs::File,
    recording: &plot::Recording,
    cmd: &str,
    path: &Path,
) -> String {
    let name = Path::new(cmd).file_name().map_or(cmd.into(), |n| n.to_string_lossy());
    match file.write_all(recording.render(&name).as_bytes()) {
        Ok(()) => format!(
            "plot of the budget, resident memory and fault stall ({} points) in {}",
            recording.points().len(),
            path.display()
        ),
        Err(e) => format!("warning: --plot {}: {e}", path.display()),
    }
}

/// Everything checked, ready to spawn.
#[derive(Debug)]
struct Plan {
    program: PathBuf,
    cmd: Vec<String>,
    config: RunConfig,
    cpus: Option<crate::cpus::Cpus>,
    idle_poll: IdlePolling,
    /// Where the budget came from (the verbose summary says).
    budget_source: budget::BudgetSource,
    /// `--budget auto`: the budget is then its ceiling.
    auto: Option<runstat::auto::AutoSpec>,
    /// Said as the run starts: that the swap file may grow past the free disk space, or
    /// that it would be in memory; both when both hold.
    swap_notes: Vec<String>,
    /// The shim the run loads (placed once its directory exists).
    shim: crate::shim::Shim,
}

/// The idle pollers' page in the run directory.
const IDLE_PAGE: &str = "idle";

/// Starts the idle pollers `polling` asks for on this process's CPU set (which the program
/// inherits), watching a page in `dir`; `None` when there are none to start.
///
/// Where they run: in a process of their own, forked from this one, in a session of its
/// own whose autogroup has nice 19. A thread's scheduling class and nice rank it only within
/// its group (an autogroup, or a cgroup): as threads of `uswap run`, which shares the
/// program's session, the pollers (then at `SCHED_IDLE`) were idle against the program but
/// took 6-9% of a CPU from a busy process of another session (docs/RUN.md, "Idle
/// polling"). The threads take nice 19 too, for a system without autogroups.
///
/// # Errors
/// The CPU set cannot be read, the page made, or the process forked.
fn start_pollers(polling: IdlePolling, dir: &Path) -> Result<Option<sys::PollerProcess>> {
    let allowed = uffd::sys::process::allowed_cpus()
        .map_err(|e| anyhow!("read this process's CPU affinity: {e}"))?;
    let cpus = polling.cpus(allowed);
    if cpus.is_empty() {
        return Ok(None);
    }
    let path = dir.join(IDLE_PAGE);
    let page = IdlePage::create(&path)
        .with_context(|| format!("--idle-poll: create {}", path.display()))?;
    let process = sys::fork_pollers(std::sync::Arc::new(page), &cpus, polling.window())
        .context("--idle-poll: start the pollers")?;
    Ok(Some(process))
}

/// Checks `--far`: the URL, the replicas, every server answering, and encryption on (pages
/// that leave the machine are always sealed).
///
/// # Errors
/// One line naming the flag and the problem.
fn check_far(url: &str, replicas: u32, encrypt: Switch) -> Result<()> {
    if encrypt == Switch::Off {
        bail!("--far with --encrypt off: pages sent to other machines are always encrypted");
    }
    let config = far::FarConfig::parse(url, replicas as usize).map_err(|e| anyhow!("--far {e}"))?;
    far::check_servers(&config).map_err(|e| anyhow!("--far: {e}"))
}

/// Checks `--folio-order` and `--large-folios` (also for `uswap bench compare`'s uswap
/// side, before minutes of runs).
///
/// # Errors
/// One line naming the bad flag.
pub fn check_folios(order: u32, policy: &str) -> Result<LargeFolios> {
    if order > engine::MAX_ORDER {
        bail!("--folio-order {order}: use 0..={}", engine::MAX_ORDER);
    }
    policy.parse().map_err(|e| anyhow!("--large-folios {e}"))
}

fn plan(args: &RunArgs) -> Result<Plan> {
    let cmd = args.cmd.clone();
    let Some(name) = cmd.first() else {
        bail!("no program to run: uswap run [FLAGS] -- CMD ARGS...");
    };
    let (budget_bytes, budget_source, auto) =
        budget::from_flag(args.budget.as_deref(), PAGE_BYTES << args.folio_order)?;
    let swap_dir =
        args.swap_file.as_deref().and_then(Path::parent).filter(|d| !d.as_os_str().is_empty());
    let swap_dir = swap_dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
    check_zswap(&args.zswap)?;
    if args.pool_percent == 0 || args.pool_percent > 100 {
        bail!("--pool-percent {}: use 1..=100", args.pool_percent);
    }
    let pool_bytes =
        args.pool_size.as_deref().map(|text| check_pool_size(text, &args.zswap)).transpose()?;
    if args.folio_order > engine::MAX_ORDER {
        bail!("--folio-order {}: use 0..={}", args.folio_order, engine::MAX_ORDER);
    }
    if budget_bytes < PAGE_BYTES << args.folio_order {
        bail!(
            "--budget {} is smaller than one folio of order {} ({} bytes): raise it or \
             lower --folio-order",
            format_size(budget_bytes),
            args.folio_order,
            PAGE_BYTES << args.folio_order
        );
    }
    crate::preflight::check_budget(budget_bytes, &args.zswap, args.pool_percent, pool_bytes)?;
    let pool_max = match (args.zswap.as_str(), pool_bytes) {
        ("off", _) => 0,
        (_, Some(bytes)) => bytes,
        _ => budget_bytes * u64::from(args.pool_percent) / 100,
    };
    crate::preflight::check_address_space(pool_max)?;
    let cpus = args.cpus.as_deref().map(crate::cpus::Cpus::parse).transpose()?;
    let reclaim_cpus = match &args.reclaim_cpus {
        Some(text) => {
            let cpus = crate::cpus::Cpus::parse_flag("--reclaim-cpus", text)?;
            cpus.check_online()?;
            Some(cpus.cpus().to_vec())
        }
        None => cpus.as_ref().and_then(crate::cpus::Cpus::others_allowed),
    };
    let idle_poll: IdlePolling = args.idle_poll.parse().map_err(|e| anyhow!("--idle-poll {e}"))?;
    let program = find_program(name)?;
    crate::preflight::check_loadable(&program)?;
    if let Some(path) = &args.swap_file {
        check_swap_file(path)?;
    }
    let (swap_size_bytes, size_note) = swap_size(args.swap_size.as_deref(), &swap_dir)?;
    let in_memory = crate::preflight::swap_in_memory(&swap_dir);
    let swap_notes = size_note.into_iter().chain(in_memory).collect();
    if args.swap_file_cache == FileCache::Drop {
        check_uncached_io(&swap_dir)?;
    }
    if let Some(url) = &args.far {
        check_far(url, args.far_replicas, args.encrypt)?;
    }
    let sigbus = args.delivery == Delivery::Sigbus;
    crate::ladder::check_userfaultfd(sigbus)?;
    let shim = crate::shim::Shim::for_run(&std::env::temp_dir())?;
    let config = RunConfig {
        run_dir: String::new(),
        parent_pid: std::process::id(),
        run_token: String::new(),
        budget_bytes,
        zswap: args.zswap.clone(),
        pool_percent: args.pool_percent,
        pool_bytes,
        swap_file: args.swap_file.as_ref().map(|p| absolute(p).display().to_string()),
        swap_size_bytes,
        swap_file_cache: args.swap_file_cache,
        record: args.record.as_ref().map(|p| absolute(p).display().to_string()),
        record_file: None,
        // The live file is rewritten at least as often as --stats-every prints it.
        stats_interval_ms: args
            .stats_every
            .filter(|s| *s > 0.0)
            .map_or(1000, |secs| ((secs * 1000.0) as u64).clamp(10, 1000)),
        preload_path: String::new(),
        folio_order: args.folio_order,
        large_folios: args.large_folios,
        zero_pages: args.zero_pages,
        delivery: args.delivery,
        idle_page: None,
        reclaim_cpus: reclaim_cpus.map(|cpus| runstat::cpus::format_list(&cpus)),
        handler_placement: args.handler_placement,
        encrypt: args.encrypt,
        far: args.far.clone(),
        far_replicas: args.far_replicas,
    };
    Ok(Plan { program, cmd, config, cpus, idle_poll, swap_notes, budget_source, auto, shim })
}

/// Appends the tree's totals to `out` (--stats-file): every process's counters added up,
/// with the broker's figures named `tree_<name>`, as one stats file (runstat's format, from
/// its magic line on). A file that cannot be written loses the totals, nothing more.
fn write_totals(mut out: std::fs::File, total: &StatsFile, view: &view::TreeView) {
    let mut totals = total.clone();
    for (name, value) in &view.values {
        totals.set(&format!("tree_{name}"), *value);
    }
    let _ = out.write_all(totals.to_text().as_bytes());
}
