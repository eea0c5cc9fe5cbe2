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
//! Modules: [`checks`] (flags and the environment, before CMD starts), [`budget`] (the
//! default budget), [`broker`], [`view`] (the broker's view of the tree, also the tree
//! file `uswap stat` reads), [`summary`], [`sys`] (spawning, waiting, the unsafe calls).

mod broker;
mod budget;
mod checks;
pub mod summary;
mod sys;
pub mod view;

use anyhow::{anyhow, bail, Context, Result};
pub use checks::find_shim;
use checks::{
    absolute, check_pool_size, check_swap_file, check_uncached_io, check_zswap, find_program,
    swap_size,
};
use engine::LargeFolios;
use runstat::env::RunConfig;
use runstat::{format_size, StatsFile, Summary};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use uffd::idle::{IdlePage, IdlePolling};

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
const DEFAULT_SWAP_BYTES: u64 = 8 << 30;
/// The smallest swap device: one cluster of 512 pages.
const MIN_SWAP_BYTES: u64 = (slots::SWAPFILE_CLUSTER as u64) * PAGE_BYTES;
/// The largest: the largest file ext4 holds with 4 KiB blocks.
const MAX_SWAP_BYTES: u64 = 16 << 40;

/// Flags of `uswap run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Memory the program's managed pages may occupy (resident + compressed pool), e.g.
    /// 256M, 1.5G; or `auto[:TARGET][,max=SIZE]`: lowered while faults cost the programs
    /// under TARGET percent of their run (default 1), raised at once when they cost more,
    /// never above SIZE (default: the default budget). Default: half of MemAvailable, or of
    /// what a memory cgroup's limit leaves.
    #[arg(long, value_name = "SIZE|auto")]
    budget: Option<String>,
    /// The compressed pool: lz4, zstd (level 3; zstd:1..=3 for another level) or off.
    #[arg(long, default_value = "lz4")]
    zswap: String,
    /// The pool's share of the budget, percent. The pool's memory is charged to the budget,
    /// as zswap's is to a memory cgroup.
    #[arg(long, default_value_t = 20)]
    pool_percent: u32,
    /// A compressed pool of its own beside the budget, of at most SIZE (e.g. 1G), instead of
    /// a share of it: its pages of compressed data are then counted apart, as a memory
    /// cgroup's limit leaves zram's store out, and the budget limits resident pages (and
    /// the pool's bookkeeping). What the pool cannot hold goes to the swap file
    /// (docs/RUN.md, "The pool beside the budget").
    #[arg(long, value_name = "SIZE", conflicts_with = "pool_percent")]
    pool_size: Option<String>,
    /// The swap file (must not exist; removed at exit). Default: a file in a private
    /// temporary directory.
    #[arg(long)]
    swap_file: Option<PathBuf>,
    /// The swap device's size, e.g. 8G: a sparse file, which may be larger than the free
    /// disk space (writes to it stop while less than 64 MiB is free there). Default: 8G.
    #[arg(long)]
    swap_size: Option<String>,
    /// Whether the swap file's pages may stay in the page cache: `keep` (fast page-ins from
    /// memory, but everything written stays in RAM, outside the budget, until the kernel
    /// writes it back and reclaims it) or `drop` (RWF_DONTCACHE, Linux 6.14: a written page
    /// leaves the page cache once it is on disk; a page read back from the file is a disk
    /// read). docs/RUN.md.
    #[arg(long, value_name = "MODE", default_value = "keep")]
    swap_file_cache: String,
    /// Whether pages written to the swap file are encrypted: `on` (AES-256-GCM under a key
    /// made for this run and held only in the program's memory, each page bound to its
    /// slot: the file holds no plaintext, and a page that does not authenticate on its way
    /// back is a SIGBUS, never wrong data) or `off`. docs/RUN.md, "Encryption".
    #[arg(long, value_name = "MODE", default_value = "on", value_parser = ["on", "off"])]
    encrypt: String,
    /// Put the swap device in a memcached cluster instead of a file: `memcached://HOST:PORT,
    /// HOST:PORT,...` (servers run with -M, no eviction). Each page is sealed (encryption
    /// is always on here) and stored on --far-replicas servers chosen by rendezvous hashing;
    /// a lost or restarted server is read around and its copies re-created; a page no server
    /// returns raises SIGBUS on access. docs/RUN.md, "The far tier".
    #[arg(long, value_name = "URL", conflicts_with = "swap_file")]
    far: Option<String>,
    /// Copies of each page in the far tier (1 up to the number of servers).
    #[arg(long, value_name = "N", default_value_t = 2, requires = "far")]
    far_replicas: u32,
    /// Print the live figures every SECS seconds (to stderr, or --stats-file).
    #[arg(long, value_name = "SECS")]
    stats_every: Option<f64>,
    /// Where --stats-every writes instead of stderr: a new file (see --force).
    #[arg(long)]
    stats_file: Option<PathBuf>,
    /// Write a trace of faults, evictions and events (the simulator's format) to FILE, a new
    /// file (see --force); every image of a program that execs adds its records to it.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Let --record replace an existing regular file and --stats-file append to one.
    /// Without it such a file is refused; a symbolic link always is (docs/RUN.md).
    #[arg(long)]
    force: bool,
    /// The folio order: a first touch maps, and page-out moves, up to 2^N pages at once (0
    /// = 4 KiB pages only, 4 = 64 KiB folios like the kernel's mTHP; at most 9). At order
    /// 4 one fault maps 16 pages of memory walked in order (see --large-folios).
    #[arg(long, value_name = "N", default_value_t = 4)]
    folio_order: u32,
    /// When a fault takes a folio of --folio-order: `always` (every first touch, every
    /// swapped large folio) or `sequential` (only while faults walk forward through memory;
    /// scattered touches take one page).
    #[arg(long, value_name = "POLICY", default_value = "sequential")]
    large_folios: String,
    /// How a read of a page that holds only zeros is mapped: `protected` (the shared zero
    /// page, write-protected: it costs nothing and is charged nothing until the program's
    /// first write to it, a write-protect fault, makes it resident) or `charged` (the zero
    /// page charged to the budget as a resident page, in case it is written unseen).
    /// Default: protected.
    #[arg(long, value_name = "MODE", value_parser = ["protected", "charged"])]
    zero_pages: Option<String>,
    /// Who resolves a fault on a swapped page: `handler` (uswap's handler thread, woken by
    /// the kernel: serves every access) or `sigbus` (the faulting thread itself, in a
    /// signal handler: no cross-thread wake-ups; a fault's p50 12.8 against 31.4 us in the
    /// 1 GiB Zipf comparison on a 2-vCPU VM, docs/benchmarks.md; but for programs that
    /// suit it only). Under `sigbus` a system call
    /// whose buffer is a swapped page fails with EFAULT: the shim retries libc's read,
    /// write and socket calls after bringing the buffer in, but a datagram received into
    /// one is lost, and direct system calls, io_uring and futexes are not covered. A
    /// forked child serves its own faults the same way. See docs/RUN.md, "Fault delivery"
    #[arg(long, value_name = "MODE", default_value = "handler",
          value_parser = ["handler", "sigbus"])]
    delivery: String,
    /// Run the program (and uswap's fault handler inside it) on these CPUs only, as taskset
    /// does: 0, 0-1, 0,2-3. Default: wherever it may run now. A single-threaded program on
    /// one CPU spares uswap the cross-CPU wake-ups that dominate its faults in a virtual
    /// machine: the handler serves a fault on the faulting thread's CPU. uswap's reclaimer
    /// runs on the CPUs this process may use outside the list, if any (see --reclaim-cpus;
    /// docs/RUN.md, "CPUs").
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// The CPUs uswap's reclaimer thread (which compresses pages out of the program in the
    /// background, the kernel's kswapd) runs on. Default: with --cpus, the CPUs this process
    /// may use outside that list, as the kernel's kswapd is not confined with the programs
    /// it reclaims from (none left: the program's); without --cpus, the program's.
    #[arg(long, value_name = "LIST")]
    reclaim_cpus: Option<String>,
    /// Where uswap's fault handler thread runs, under `--delivery handler`: `follow` (on the
    /// CPU of the program thread whose faults it serves, when one thread makes most of
    /// them, with the reclaimer on the other CPUs: a fault's two wake-ups stay on one CPU;
    /// the program's own threads are never moved) or `free` (wherever the scheduler puts
    /// it). Does nothing with one CPU, under --delivery sigbus, or where the reclaimer has
    /// CPUs of its own (--reclaim-cpus, or --cpus with CPUs left outside it). docs/RUN.md,
    /// "CPUs".
    #[arg(long, value_name = "MODE", default_value = "follow", value_parser = ["follow", "free"])]
    handler_placement: String,
    /// Keep the program's idle CPUs polling through bursts of faults, so that waking a
    /// faulting thread is not waking a halted CPU (docs/RUN.md, "Idle polling"): `auto`
    /// (on CPU sets of 2 to 8 CPUs), `on`, or `off`; `auto:US` and `on:US` set how long
    /// after the last fault the pollers spin (default 200 microseconds). The pollers run in
    /// a process uswap run forks for them, pinned one per CPU at nice 19 in a session of
    /// their own at nice 19 (the scheduler's weight 15 against 1,024 at nice 0: a busy
    /// process of another session kept 97% of its CPU beside them), and the summary says
    /// how much they spun.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    idle_poll: String,
    /// Print the detail after the summary: where the budget came from, the broker's
    /// figures, every engine counter the summary is made of.
    #[arg(long, short)]
    verbose: bool,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    cmd: Vec<String>,
}

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
    if let Some(path) = &args.record {
        config.record_file = Some(crate::outputs::start_trace(path, args.force)?);
    }
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
    };
    // Before the broker's threads start: they inherit the mask, and leave every forwarded
    // signal to the main thread's wait.
    let signals = crate::signals::Signals::block();
    let broker = broker::Broker::start(settings, config.swap_size_bytes)?;
    let started = Instant::now();
    let outcome = sys::spawn_and_wait(&plan, &config, &args, stats_out, signals);
    let wall = started.elapsed();
    let view = broker.finish();
    let outcome = outcome?;
    let mut files = summary::read_files(&dir.path);
    let total = &mut files.total;
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
fn check_far(url: &str, replicas: u32, encrypt: &str) -> Result<()> {
    if encrypt == "off" {
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
    check_folios(args.folio_order, &args.large_folios)?;
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
    if !matches!(args.swap_file_cache.as_str(), "keep" | "drop") {
        bail!("--swap-file-cache {}: use keep or drop", args.swap_file_cache);
    }
    if args.swap_file_cache == "drop" {
        check_uncached_io(&swap_dir)?;
    }
    if let Some(url) = &args.far {
        check_far(url, args.far_replicas, &args.encrypt)?;
    }
    let sigbus = args.delivery == "sigbus";
    let zero_pages = args.zero_pages.clone().unwrap_or_else(|| "protected".to_string());
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
        swap_file_cache: args.swap_file_cache.clone(),
        record: args.record.as_ref().map(|p| absolute(p).display().to_string()),
        record_file: None,
        // The live file is rewritten at least as often as --stats-every prints it.
        stats_interval_ms: args
            .stats_every
            .filter(|s| *s > 0.0)
            .map_or(1000, |secs| ((secs * 1000.0) as u64).clamp(10, 1000)),
        preload_path: String::new(),
        folio_order: args.folio_order,
        large_folios: args.large_folios.clone(),
        zero_pages,
        delivery: args.delivery.clone(),
        idle_page: None,
        reclaim_cpus: reclaim_cpus.map(|cpus| runstat::cpus::format_list(&cpus)),
        handler_placement: args.handler_placement.clone(),
        encrypt: args.encrypt.clone(),
        far: args.far.clone(),
        far_replicas: args.far_replicas,
    };
    Ok(Plan { program, cmd, config, cpus, idle_poll, swap_notes, budget_source, auto, shim })
}

/// Every image's stats in a run directory, added up (final files, and live files of
/// images that ended without writing one: killed, or `_exit`).
pub fn collect(dir: &Path) -> StatsFile {
    let mut total = StatsFile::default();
    let Ok(entries) = std::fs::read_dir(dir) else { return total };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !(name.starts_with("final-") || name.starts_with("live-")) {
            continue;
        }
        if let Ok(file) = std::fs::read_to_string(entry.path())
            .map_err(|e| e.to_string())
            .and_then(|t| StatsFile::parse(&t))
        {
            total.absorb(&file);
        }
    }
    total
}

/// Prints the live figures every `every` until `done` (the --stats-every thread).
fn report_live(
    dir: PathBuf,
    every: Duration,
    mut to: Option<std::fs::File>,
    done: &std::sync::atomic::AtomicBool,
) {
    use std::io::Write as _;
    let mut next = Instant::now() + every;
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if Instant::now() < next {
            continue;
        }
        next += every;
        let summary = Summary::of(&collect(&dir));
        let lines = summary.to_lines("uswap live: ").join("\n") + "\n";
        match &mut to {
            Some(file) => {
                let _ = file.write_all(lines.as_bytes());
            }
            None => {
                use std::io::Write as _;
                let _ = std::io::stderr().write_all(lines.as_bytes());
            }
        }
    }
}
