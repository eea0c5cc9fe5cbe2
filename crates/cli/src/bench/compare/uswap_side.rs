//! The uswap side of `uswap bench compare`: the same workload under `uswap run`.
//!
//! ```text
//!   uswap_available      `uswap run --help` answers?       no -> Skipped (this build lacks it)
//!   execute              every process command is replaced by
//!                          <this uswap> run --budget <budget> --zswap lz4 [--folio-order N
//!                            --large-folios P] [--idle-poll MODE] [--swap-file-cache M]
//!                            [--zero-pages M] [--delivery M] [--pool-size B]
//!                            [--reclaim-cpus LIST] --stats-file <scratch file>
//!                            -- <program> <args>
//!                        (the far configuration: --zswap off --far URL --encrypt on in
//!                        place of --zswap lz4, --swap-file and --pool-size: far_side.rs)
//!                        (before its stdio is set: the harness sets it on the wrapper)
//!   probe, every 50 ms   the usage of the run's memory cgroup, if it has one (the charge
//!                        of the memory chart), and
//!                        VmRSS and VmPTE of the run's process tree (`uswap run` and its
//!                        descendants, from /proc/<pid>/task/*/children): the engine, its
//!                        pool and its threads live inside the program, so this is
//!                        everything it costs (the page tables too: the kernel side's
//!                        cgroup charges its program's)
//!                        and the page cache's pages of each `uswap run`'s swap file
//!                        (`cachestat(2)`; the harness names the files: `--swap-file`);
//!                        what the pool stores, compressed and not, from each managed
//!                        process's live stats file (rewritten every second)
//!   peak                 where the kernel side can run (root, a memory controller):
//!                          charged: the peak of a memory cgroup with no limit that
//!                          `uswap run` joins before exec (its whole tree is in it);
//!                          store: 0 (the swap file's page cache is charged there);
//!                        else:
//!                          charged: max(sampled tree RSS, wait4's ru_maxrss);
//!                          store: the most the swap files had in the page cache;
//!                        peak = charged + store, as the kernel side's cgroup + zram
//!   counters             the tree's totals `uswap run` writes to its --stats-file at exit
//!                        (every process's counters added up, the broker's figures), and
//!                        the summary it printed on stderr
//! ```
//!
//! [`measure_unmanaged`] runs the same workload without `uswap run`, measured the same
//! way: the build workload's reference.
//!
//! The kernel side reports a memory cgroup's charge plus zram's pool. The uswap side is
//! measured by the same instrument where it can be: a memory cgroup, but one without a
//! limit, since `uswap run` keeps the budget itself. Both charges then count the same
//! things: anonymous memory (the program's pages; for uswap also the engine, its pool and
//! its buffers, all inside the program), kernel memory (page tables, userfaultfd's
//! contexts), and the page cache the run brought in: for uswap, its swap file, which
//! `uswap run` writes with buffered `pwrite`, so everything written back stays in memory
//! until the kernel writes it to disk and reclaims it (the kernel's own swap bypasses the
//! page cache). Neither counts the pages of files a run maps that were in the page cache
//! before it started (the programs and their libraries: a cgroup charges a page cache page
//! to whoever read it first), which is why the harness reads the programs before the
//! runs (`warm_programs`). The tree's resident set, the figure used before both sides were
//! measured alike, counted those file pages (about 9 MiB of `uswap run`'s and the
//! workload's at 1 GiB) on the uswap side only; it is still reported
//! (`tree_rss_peak_bytes`), and is the charge where no cgroup can be made, with the swap
//! file's page cache added as the store. The budget is the same number on both sides;
//! how far each side's peak lands from it is the comparison (`uswap run` promises the
//! budget plus its slack, docs/RUN.md).

use super::cgroup::{self, MemCgroup};
use super::counters::SwapCounters;
use super::kernel_side::{meminfo_bytes, KernelEnv};
use super::outcome::{anon_peak, stored_peaks, Meter, RunOutcome, Side};
use super::runner::{MemoryProbe, Sample};
use super::sys::cached_pages;
use super::workloads::{Placement, RunContext, WorkloadSpec};
use anyhow::{Context, Result};
use runstat::StatsFile;
use std::collections::hash_map::{Entry, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The most processes one probe sums (a workload is one or two).
const TREE_MAX: usize = 64;

/// Runs `spec` under `uswap run` with `ctx.budget_bytes` of budget, measured in a memory
/// cgroup of `meter`'s (the kernel side's machine and cgroup parent) when there is one;
/// `run_index` names the group.
///
/// Context: blocks for the whole run (minutes); polls the interrupt flag through the
/// runner, like the kernel side.
pub fn run(
    spec: &WorkloadSpec,
    ctx: &RunContext,
    meter: Option<&KernelEnv>,
    run_index: usize,
) -> Side {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Side::Failed(format!("where is this uswap binary: {e}")),
    };
    if !uswap_run_available(&exe) {
        return Side::Skipped(format!("{} has no `run` subcommand", exe.display()));
    }
    match measure(Some(&exe), spec, ctx, meter, run_index) {
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

/// `uswap run`'s flags for the uswap side of `ctx`, its swap file at `swap_file` (its
/// totals beside it, [`stats_file_of`]).
fn run_flags(ctx: &RunContext, swap_file: &Path) -> Vec<String> {
    let budget = ctx.uswap_budget.clone().unwrap_or_else(|| ctx.budget_bytes.to_string());
    let mut flags: Vec<String> = vec!["--budget".into(), budget];
    match &ctx.uswap_far {
        // No pool: every page past the budget goes to the servers; encryption asked for,
        // as the far tier needs it (far_side.rs). The swap file's name still names the
        // stats file.
        Some(url) => {
            flags.extend(["--zswap".into(), "off".into(), "--far".into(), url.clone()]);
            flags.extend(["--encrypt".into(), "on".into()]);
        }
        None => {
            flags.extend(["--zswap".into(), "lz4".into()]);
            flags.extend(["--swap-file".into(), swap_file.display().to_string()]);
        }
    }
    flags.extend(["--stats-file".into(), stats_file_of(swap_file).display().to_string()]);
    // As large as the kernel side's zram device or swap file (the default, 8 GiB, need not
    // fit on the disk).
    let swap_bytes = super::kernel_side::swap_bytes(ctx.size_bytes);
    flags.extend(["--swap-size".into(), swap_bytes.to_string()]);
    if let Some((order, policy)) = &ctx.uswap_folios {
        flags.extend(["--folio-order".into(), order.to_string()]);
        flags.extend(["--large-folios".into(), policy.clone()]);
    }
    if let Some(mode) = &ctx.uswap_idle_poll {
        flags.extend(["--idle-poll".into(), mode.clone()]);
    }
    if let Some(mode) = &ctx.uswap_swap_file_cache {
        flags.extend(["--swap-file-cache".into(), mode.clone()]);
    }
    if let Some(mode) = &ctx.uswap_zero_pages {
        flags.extend(["--zero-pages".into(), mode.clone()]);
    }
    if let Some(mode) = &ctx.uswap_delivery {
        flags.extend(["--delivery".into(), mode.clone()]);
    }
    if let (Some(bytes), None) = (ctx.uswap_pool_bytes, &ctx.uswap_far) {
        flags.extend(["--pool-size".into(), bytes.to_string()]);
    }
    if let Some(cpus) = &ctx.uswap_reclaim_cpus {
        flags.extend(["--reclaim-cpus".into(), cpus.clone()]);
    }
    flags
}

/// Where the `uswap run` whose swap file is `swap_file` writes its totals.
fn stats_file_of(swap_file: &Path) -> PathBuf {
    PathBuf::from(format!("{}.stats", swap_file.display()))
}

/// `command` wrapped in `uswap run FLAGS --`: the same program, arguments, environment
/// and directory.
fn wrapped(exe: &Path, command: &Command, flags: &[String]) -> Command {
    let mut wrapper = Command::new(exe);
    wrapper.arg("run").args(flags).arg("--");
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

/// Runs `spec` unmanaged (no `uswap run`), measured as the uswap side is: the build
/// workload's reference (build.rs).
///
/// # Errors
/// The workload's failure, a cgroup that cannot be made, an interrupt.
pub fn measure_unmanaged(
    spec: &WorkloadSpec,
    ctx: &RunContext,
    meter: Option<&KernelEnv>,
) -> Result<RunOutcome> {
    measure(None, spec, ctx, meter, 0)
}

/// Runs `spec` under `uswap run` (`exe`), or unmanaged (`None`), measured in a cgroup of
/// `meter`'s when there is one.
fn measure(
    exe: Option<&Path>,
    spec: &WorkloadSpec,
    ctx: &RunContext,
    meter: Option<&KernelEnv>,
    run_index: usize,
) -> Result<RunOutcome> {
    let group = match meter {
        Some(env) => {
            let name = format!("uswap-bench-{}-u{run_index}", std::process::id());
            Some(MemCgroup::create(env.machine.as_ref(), &env.parent, &name, None)?)
        }
        None => None,
    };
    let prefix = format!("{}-u{run_index}-swap", spec.name);
    let mut probe = TreeProbe::new(ctx.scratch_dir.join(prefix));
    probe.group = group.as_ref();
    let prepare = |command: &mut Command| -> Result<()> {
        if let Some(exe) = exe {
            let swap_file = probe.next_swap_file();
            *command = wrapped(exe, command, &run_flags(ctx, &swap_file));
        }
        if let Some(group) = &group {
            super::sys::join_cgroup_before_exec(command, cgroup::open_procs(&group.procs_file())?);
        }
        Ok(())
    };
    let executed = spec.execute(ctx, &Placement { prepare: &prepare, probe: &probe });
    let totals = probe.take_totals();
    let measured = match exe {
        Some(_) => executed.context("under uswap run")?,
        None => executed?,
    };
    let summary_lines = match exe {
        Some(_) => summary_lines(&ctx.scratch_dir.join(format!("{}.stderr", spec.name))),
        None => Vec::new(),
    };
    let sampled = measured.samples.iter().map(|s| s.tree_rss_bytes).max().unwrap_or(0);
    let tree_rss_peak_bytes = sampled.max(measured.max_rss_bytes);
    let file_cache_peak_bytes = (!probe.cache_unknown.load(Ordering::Relaxed))
        .then(|| measured.samples.iter().map(|s| s.file_cache_bytes).max().unwrap_or(0));
    let (meter, charged_peak_bytes, store_peak_bytes, cache_charged_bytes) = match &group {
        // The swap file's page cache is in the group's charge: `uswap run` wrote it.
        Some(group) => (Meter::Cgroup, group.peak_bytes(), 0, group.cache_bytes()),
        None => (Meter::TreeRss, tree_rss_peak_bytes, file_cache_peak_bytes.unwrap_or(0), None),
    };
    let (compressed_peak_bytes, original_peak_bytes) = stored_peaks(&measured.samples);
    Ok(RunOutcome {
        meter,
        charged_peak_bytes,
        cache_charged_bytes,
        tree_rss_peak_bytes: Some(tree_rss_peak_bytes),
        store_peak_bytes,
        tables_bytes: None,
        slab_bytes: None,
        peak_bytes: charged_peak_bytes + store_peak_bytes,
        compressed_peak_bytes,
        original_peak_bytes,
        kmem_peak_bytes: group.as_ref().and_then(MemCgroup::kmem_peak_bytes),
        file_cache_peak_bytes,
        anon_peak_bytes: group.as_ref().map(|_| anon_peak(&measured.samples)),
        swap_counters: totals.as_ref().map(SwapCounters::from_totals),
        kswapd_s: None,
        totals,
        summary_lines,
        measured,
    })
}

/// The lines `uswap run` printed in the workload's stderr log (each `uswap: ...`), without
/// the prefix; none when there is no log (a workload whose stderr is not kept).
fn summary_lines(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter_map(|line| line.strip_prefix("uswap: ")).map(str::to_string).collect()
}

/// The totals in a `--stats-file` (the stats file from its last magic line on: the live
/// lines of `--stats-every`, if any, come before it).
fn parse_totals(text: &str) -> Option<StatsFile> {
    let start = text.rfind(runstat::stats::MAGIC)?;
    StatsFile::parse(&text[start..]).ok()
}

/// Samples the resident set of a process tree and the page cache its swap files hold, and
/// the charge of the cgroup it runs in, if it runs in one.
struct TreeProbe<'g> {
    /// The memory cgroup the run is measured in: the samples' charge is its usage.
    group: Option<&'g MemCgroup<'g>>,
    /// Where the swap files go (the harness's scratch directory); `uswap run` creates each
    /// and unlinks it once it is open.
    prefix: PathBuf,
    /// Each wrapped command's swap file, opened once it exists.
    files: Mutex<Vec<(PathBuf, Option<File>)>>,
    /// `cachestat(2)` failed (before Linux 6.5): the store is not measured (null).
    cache_unknown: AtomicBool,
    /// The run directory of each managed process seen, read once from its environment
    /// rather than at every sample.
    run_dirs: Mutex<HashMap<u32, PathBuf>>,
}

impl TreeProbe<'_> {
    fn new(prefix: PathBuf) -> Self {
        TreeProbe {
            group: None,
            prefix,
            files: Mutex::new(Vec::new()),
            cache_unknown: AtomicBool::new(false),
            run_dirs: Mutex::new(HashMap::new()),
        }
    }

    /// A fresh swap file path for the next `uswap run`.
    fn next_swap_file(&self) -> PathBuf {
        let mut files = self.files.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let path = PathBuf::from(format!("{}-{}", self.prefix.display(), files.len()));
        files.push((path.clone(), None));
        path
    }

    /// Bytes of the swap files in the page cache. `uswap run` unlinks its swap file right
    /// after creating it, so each is found among the open descriptors of the processes in
    /// `pids` and opened through `/proc/PID/fd/N`; one not found yet counts 0, one found
    /// stays measured through this probe's own descriptor.
    fn file_cache_bytes(&self, proc_root: &Path, pids: &[u32]) -> u64 {
        let mut files = self.files.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut total = 0;
        for (path, open) in files.iter_mut() {
            if open.is_none() {
                *open = find_open_file(proc_root, pids, path);
            }
            let Some(file) = open else { continue };
            match cached_pages(file) {
                Ok(pages) => total += pages * backend::PAGE_SIZE as u64,
                Err(_) => self.cache_unknown.store(true, Ordering::Relaxed),
            }
        }
        total
    }
}

impl MemoryProbe for TreeProbe<'_> {
    fn sample(&self, pid: u32) -> Sample {
        let proc_root = Path::new("/proc");
        let pids = tree_pids(proc_root, pid);
        let (compressed_bytes, original_bytes) = self.stored_bytes(&pids);
        let tree_rss_bytes = pids.iter().map(|&pid| footprint_bytes(proc_root, pid)).sum();
        let file_cache_bytes = self.file_cache_bytes(proc_root, &pids);
        let (charged_bytes, outside_bytes) = match self.group {
            // The swap file's page cache is in the group's charge.
            Some(group) => (group.usage_bytes(), 0),
            None => (tree_rss_bytes, file_cache_bytes),
        };
        let anon_bytes = self.group.and_then(MemCgroup::anon_bytes).unwrap_or(0);
        Sample {
            charged_bytes,
            outside_bytes,
            compressed_bytes,
            original_bytes,
            tree_rss_bytes,
            file_cache_bytes,
            anon_bytes,
            ..Sample::default()
        }
    }
}

impl TreeProbe<'_> {
    /// The totals of every `uswap run` this probe named, added up, read and removed; `None`
    /// when none wrote any (unmanaged, or `uswap run` failed before its end).
    fn take_totals(&self) -> Option<StatsFile> {
        let files = self.files.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut totals: Option<StatsFile> = None;
        for (swap_file, _) in files.iter() {
            let path = stats_file_of(swap_file);
            let text = std::fs::read_to_string(&path);
            let _ = std::fs::remove_file(&path);
            if let Some(file) = text.ok().as_deref().and_then(parse_totals) {
                totals.get_or_insert_with(StatsFile::default).absorb(&file);
            }
        }
        totals
    }

    /// What the pools of `pids` store: compressed bytes and the page bytes they stand for,
    /// summed over each managed process's live stats file (a process not managed, or with
    /// no file yet, adds nothing).
    fn stored_bytes(&self, pids: &[u32]) -> (u64, u64) {
        let (mut compressed, mut original) = (0, 0);
        let mut run_dirs = self.run_dirs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for &pid in pids {
            let dir = match run_dirs.entry(pid) {
                Entry::Occupied(known) => known.into_mut(),
                // Only a managed process's directory is kept: one sampled between `uswap
                // run`'s fork and its exec has no run directory yet. Found by the live file
                // too, for a program that wrote over its environment (redis).
                Entry::Vacant(new) => match crate::stat::run_dir_for(pid) {
                    Some(dir) => new.insert(dir),
                    None => continue,
                },
            };
            let text = std::fs::read_to_string(dir.join(format!("live-{pid}")));
            let Ok(file) = text.map_err(|e| e.to_string()).and_then(|t| StatsFile::parse(&t))
            else {
                continue;
            };
            compressed += file.get("zswap_compressed_bytes");
            original += file.get("zswap_stored_pages") * backend::PAGE_SIZE as u64;
        }
        (compressed, original)
    }
}

/// `path` (unlinked or not) as one of `pids`' open files, opened again for reading.
fn find_open_file(proc_root: &Path, pids: &[u32], path: &Path) -> Option<File> {
    let deleted = format!("{} (deleted)", path.display());
    for pid in pids {
        let fds = std::fs::read_dir(proc_root.join(format!("{pid}/fd")));
        for fd in fds.into_iter().flatten().flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else { continue };
            if target == path || target.as_os_str() == deleted.as_str() {
                return File::open(fd.path()).ok();
            }
        }
    }
    None
}

/// `pid` and its descendants (at most [`TREE_MAX`] processes), from each task's
/// `children`; a process gone meanwhile ends its branch.
fn tree_pids(proc_root: &Path, pid: u32) -> Vec<u32> {
    let (mut pending, mut pids) = (vec![pid], Vec::new());
    while let Some(pid) = pending.pop() {
        if pids.len() == TREE_MAX {
            break;
        }
        pids.push(pid);
        let tasks = std::fs::read_dir(proc_root.join(format!("{pid}/task")));
        for task in tasks.into_iter().flatten().flatten() {
            let children = std::fs::read_to_string(task.path().join("children"));
            let children = children.unwrap_or_default();
            pending.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    pids
}

/// VmRSS plus VmPTE (its page tables) of `pid` in bytes; 0 for a process gone.
fn footprint_bytes(proc_root: &Path, pid: u32) -> u64 {
    let status = std::fs::read_to_string(proc_root.join(format!("{pid}/status")));
    let Ok(status) = status else { return 0 };
    let figure = |key| meminfo_bytes(&status, key).unwrap_or(0);
    figure("VmRSS") + figure("VmPTE")
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
            let status = format!("Name:\tx\nVmRSS:\t  {rss} kB\nVmPTE:\t  2 kB\nThreads:\t1\n");
            std::fs::write(root.join(format!("{pid}/status")), status).unwrap();
            std::fs::write(task.join("children"), children).unwrap();
        }
        let tree_rss_bytes = |pid| -> u64 {
            tree_pids(&root, pid).iter().map(|&pid| footprint_bytes(&root, pid)).sum()
        };
        assert_eq!(tree_rss_bytes(10), (124 + 4 * 2) * 1024, "resident sets and page tables");
        assert_eq!(tree_rss_bytes(12), (4 + 2 * 2) * 1024);
        assert_eq!(tree_rss_bytes(99), 0, "a process gone counts 0");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_unlinked_swap_file_is_found_among_open_descriptors() {
        let path = std::env::temp_dir().join(format!("uswap-probe-{}.swap", std::process::id()));
        let mut file = File::create(&path).unwrap();
        std::io::Write::write_all(&mut file, &[7u8; 8192]).unwrap();
        std::fs::remove_file(&path).unwrap();
        let me = std::process::id();
        let probe = TreeProbe::new(std::env::temp_dir().join("unused"));
        probe.files.lock().unwrap().push((path.clone(), None));
        let cached = probe.file_cache_bytes(Path::new("/proc"), &[me]);
        assert_eq!(cached, 8192, "the two pages just written are in the page cache");
        assert!(probe.files.lock().unwrap()[0].1.is_some());
        let other = std::env::temp_dir().join("uswap-probe-no-such.swap");
        assert!(find_open_file(Path::new("/proc"), &[me], &other).is_none());
    }

    #[test]
    fn the_wrapper_keeps_program_arguments_and_environment() {
        let mut inner = Command::new("/bin/prog");
        inner.args(["-a", "b"]).env("K", "V").current_dir("/tmp");
        let flags = ["--budget".to_string(), "268435456".to_string()];
        let outer = wrapped(Path::new("/x/uswap"), &inner, &flags);
        let args: Vec<_> = outer.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(args, ["run", "--budget", "268435456", "--", "/bin/prog", "-a", "b"]);
        assert_eq!(outer.get_program(), "/x/uswap");
        let envs: Vec<_> = outer.get_envs().collect();
        assert_eq!(envs, [(std::ffi::OsStr::new("K"), Some(std::ffi::OsStr::new("V")))]);
        assert_eq!(outer.get_current_dir(), Some(Path::new("/tmp")));
    }

    #[test]
    fn the_run_flags_follow_the_context() {
        let mut ctx = RunContext::for_tests();
        ctx.budget_bytes = 4096;
        let flags = run_flags(&ctx, Path::new("/s"));
        // The swap file is as large as zram's device for 1 MiB: 1 MiB + half + 64 MiB.
        let swap = (1 << 20) + (1 << 19) + (64 << 20);
        let expected = ["--budget", "4096", "--zswap", "lz4", "--swap-file", "/s", "--stats-file"];
        assert_eq!(flags[..7], expected);
        assert_eq!(flags[7..9], ["/s.stats", "--swap-size"]);
        assert_eq!(flags[9], swap.to_string());
        assert_eq!(flags.len(), 10);
        ctx.uswap_folios = Some((0, "always".to_string()));
        ctx.uswap_idle_poll = Some("off".into());
        ctx.uswap_swap_file_cache = Some("drop".into());
        ctx.uswap_zero_pages = Some("charged".into());
        ctx.uswap_delivery = Some("sigbus".into());
        ctx.uswap_pool_bytes = Some(1 << 30);
        let flags = run_flags(&ctx, Path::new("/s"));
        let tail = [
            "--folio-order",
            "0",
            "--large-folios",
            "always",
            "--idle-poll",
            "off",
            "--swap-file-cache",
            "drop",
            "--zero-pages",
            "charged",
            "--delivery",
            "sigbus",
            "--pool-size",
            "1073741824",
        ];
        assert_eq!(flags[10..], tail, "{flags:?}");
        // The far configuration: the servers instead of the file, and no pool.
        ctx.uswap_far = Some("memcached://127.0.0.1:1".into());
        let flags = run_flags(&ctx, Path::new("/s"));
        let far = ["--zswap", "off", "--far", "memcached://127.0.0.1:1", "--encrypt", "on"];
        assert_eq!(flags[2..8], far, "{flags:?}");
        assert!(!flags.iter().any(|f| f == "--swap-file" || f == "--pool-size"), "{flags:?}");
        assert_eq!(flags[8..10], ["--stats-file", "/s.stats"]);
    }

    #[test]
    fn the_totals_are_the_stats_files_last_block() {
        let live = "uswap live: budget 8.00 MiB, peak resident 7.90 MiB\n";
        let block =
            "# uswap stats v1\nzswpout 10\nswpout_64kB 2\ntree_peak_bytes 4096\nfault_ns \n";
        let totals = parse_totals(&format!("{live}{block}")).unwrap();
        assert_eq!(totals.get("zswpout"), 10);
        assert_eq!(totals.get("tree_peak_bytes"), 4096);
        assert!(parse_totals(live).is_none(), "a run that wrote no totals");
        // Two `uswap run`s of one workload (the redis server's, say) add up.
        let prefix = std::env::temp_dir().join(format!("uswap-totals-{}", std::process::id()));
        let probe = TreeProbe::new(prefix);
        for _ in 0..2 {
            let swap_file = probe.next_swap_file();
            std::fs::write(stats_file_of(&swap_file), block).unwrap();
        }
        let sum = probe.take_totals().unwrap();
        assert_eq!(sum.get("zswpout"), 20);
        assert_eq!(SwapCounters::from_totals(&sum).by_size[&64].swpout, 4);
        assert!(probe.take_totals().is_none(), "read once, then removed");
    }

    #[test]
    fn the_summary_is_taken_from_the_log() {
        let log = std::env::temp_dir().join(format!("uswap-summary-{}", std::process::id()));
        std::fs::write(&log, "cc: warning\nuswap: make exited with status 0\nuswap:   12 cc1: x\n")
            .unwrap();
        assert_eq!(summary_lines(&log), ["make exited with status 0", "  12 cc1: x"]);
        std::fs::remove_file(&log).unwrap();
        assert!(summary_lines(&log).is_empty());
    }
}
