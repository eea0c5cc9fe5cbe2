//! The summary `uswap run` prints at exit, and `uswap stat` while it runs: written for the
//! person who ran the program, in MiB and GiB, without counter names.
//!
//! ```text
//!   uswap: sh exited with status 0 after 12.4 s, 3.1x the program's own CPU time (4.0 s)
//!   uswap: budget 96.0 MiB, peak 99.2 MiB, memory saved 512 MiB
//!   uswap: paged out 1.10 GiB: 12.0 MiB of zeros, 1.02 GiB compressed 3.4:1, 70.1 MiB to disk
//!   uswap: warning: the tree went 3.20 MiB (3%) over its budget: ...       (when it did)
//!   uswap: warning: 4107 static-prog ran unmanaged (statically linked): ...
//! ```
//!
//! Everything else (a line per process of a tree, the engines' detail, the broker's
//! figures, where the budget came from) is printed under `--verbose`, and `uswap stat
//! --all` prints every counter.

use super::view::{ProcState, ProcView, TreeView};
use runstat::share::MIN_SHARE_BYTES;
use runstat::{format_size, StatsFile, Summary};
use std::collections::BTreeMap;
use std::time::Duration;

/// How the run ended, for the first line.
#[derive(Debug, Clone)]
pub struct Ending {
    /// CMD's name.
    pub cmd: String,
    /// Its exit status (or 128 + the signal).
    pub status: i32,
    /// Wall time from its start to its end.
    pub wall: Duration,
    /// CPU time of the tree's processes waited for (their engines' included).
    pub children_cpu_ns: u64,
}

/// Over the budget by more than this fraction is worth a warning line.
const OVER_BUDGET_FRACTION: f64 = 0.01;

/// The figures of every process, by pid, and of them all.
#[derive(Debug, Default)]
pub struct Files {
    /// Each process's stats files added up (its images: an exec is a new one).
    pub by_pid: BTreeMap<u32, StatsFile>,
    /// All of them added up.
    pub total: StatsFile,
}

/// Reads every stats file of run directory `dir` (final files, and live files of images
/// still running or that ended without a final one).
pub fn read_files(dir: &std::path::Path) -> Files {
    let mut files = Files::default();
    let Ok(entries) = std::fs::read_dir(dir) else { return files };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !(name.starts_with("final-") || name.starts_with("live-")) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        let Ok(file) = StatsFile::parse(&text) else { continue };
        let pid = file.get("pid") as u32;
        files.by_pid.entry(pid).or_default().absorb(&file);
        files.total.absorb(&file);
    }
    files
}

fn size(bytes: u64) -> String {
    format_size(bytes)
}

fn pages(n: u64) -> String {
    size(n * 4096)
}

/// The first line (module essay).
fn ending_line(ending: &Ending, total: &StatsFile) -> String {
    let wall = ending.wall.as_secs_f64();
    let engines = total.get("engine_cpu_ns");
    let own_ns = ending.children_cpu_ns.saturating_sub(engines);
    let stall_ns = total.get("fault_stall_ns");
    let (own, stall) = (own_ns as f64 / 1e9, stall_ns as f64 / 1e9);
    let head = format!("{} exited with status {} after {wall:.2} s", ending.cmd, ending.status);
    // The program's own CPU time is what it would take alone when it ran one thing at a
    // time and did little but compute and wait for its pages.
    if own > 0.05 && own <= wall * 1.05 && own + stall >= 0.7 * wall {
        return format!("{head}, {:.1}x the program's own CPU time ({own:.2} s)", wall / own);
    }
    if stall > 0.0 {
        let share = 100.0 * stall / wall.max(1e-9);
        return format!("{head}; waiting for its pages took {stall:.2} s ({share:.0}% of the run)");
    }
    head
}

/// The lines of the summary (module essay), each after `prefix`.
pub fn lines(ending: &Ending, view: &TreeView, files: &Files, verbose: bool) -> Vec<String> {
    let total = &files.total;
    let budget = view.get("budget_bytes");
    // The broker's peak is the tree's charged memory, sampled; a process's VmHWM is exact
    // but counts its file-backed pages, which a tree of several charges to none of them.
    let hwm = files.by_pid.values().map(|f| f.get("vm_hwm_bytes")).max().unwrap_or(0);
    let alone = view.procs.len() <= 1;
    let peak = if alone { view.get("peak_bytes").max(hwm) } else { view.get("peak_bytes") };
    let saved = view.get("footprint_peak_bytes").saturating_sub(peak);
    let beside = match total.get("pool_size_bytes") {
        0 => String::new(),
        bytes => format!(" (and a pool of up to {} beside it)", size(bytes)),
    };
    let budget_words = match view.get("auto_target_ppm") {
        0 => format!("budget {}", size(budget)),
        _ => format!("budget auto, {} at the end", size(budget)),
    };
    let mut out = vec![
        ending_line(ending, total),
        format!("{budget_words}{beside}, peak {}, memory saved {}", size(peak), size(saved)),
        paged_out_line(total),
    ];
    if let Some(line) = auto_line(view) {
        out.push(line);
    }
    // Under `--budget auto` the budget moved: the run passed it if it passed the highest.
    let budget = budget.max(view.get("budget_max_bytes"));
    // A pool beside the budget (`--pool-size`) is outside the charge by design, and the
    // peak (members' resident memory, a lone process's VmHWM) holds it: less its peak.
    let charged_peak = match total.get("pool_size_bytes") {
        0 => peak,
        _ => peak.saturating_sub(total.get("pool_peak_bytes")),
    };
    if charged_peak as f64 > budget as f64 * (1.0 + OVER_BUDGET_FRACTION) {
        out.push(over_budget_line(view, total, charged_peak, budget));
    }
    out.extend(process_lines(view, files, verbose));
    if verbose {
        out.extend(verbose_lines(view, total));
    }
    out
}

/// `--budget auto`'s line: where the budget went, the tree's mean resident memory against
/// what it would have held (its sampled peak of resident and paged-out memory), and the
/// time lost to faults against the target: over the whole run, and in its worst second (the
/// last second would often be the program's exit, which faults its memory back to free
/// it).
fn auto_line(view: &TreeView) -> Option<String> {
    let target = view.get("auto_target_ppm");
    if target == 0 {
        return None;
    }
    let ticks = view.get("budget_ticks").max(1);
    let mean_budget = (view.get("budget_sum_ticks_mib") / ticks) << 20;
    let mean_resident = (view.get("resident_sum_ticks_mib") / ticks) << 20;
    let percent = |ppm: u64| ppm as f64 / 1e4;
    Some(format!(
        "budget auto: from {} to {} (mean {}), mean resident {} of {} held at most; faults \
         cost {:.2}% of the run, {:.2}% in its worst second (target {}%), raised {} times",
        size(view.get("budget_ceiling_bytes")),
        size(view.get("budget_min_bytes")),
        size(mean_budget),
        size(mean_resident),
        size(view.get("footprint_peak_bytes")),
        percent(view.get("auto_loss_run_ppm")),
        percent(view.get("auto_loss_peak_ppm")),
        percent(target),
        view.get("auto_raises"),
    ))
}

/// The third line: where the pages went.
pub fn paged_out_line(total: &StatsFile) -> String {
    let (zero, pool, disk) = (total.get("swpout_zero"), total.get("zswpout"), total.get("pswpout"));
    if zero + pool + disk == 0 {
        return "nothing was paged out".to_string();
    }
    let stored = total.get("pool_peak_stored_pages") * 4096;
    let ratio = match total.get("pool_peak_bytes") {
        0 => String::new(),
        bytes => format!(" {:.1}:1", stored as f64 / bytes as f64),
    };
    format!(
        "paged out {}: {} of zeros, {} compressed{ratio}, {} to disk",
        pages(zero + pool + disk),
        pages(zero),
        pages(pool),
        pages(disk)
    )
}

/// The warning of a tree over its budget: by how much, and the likeliest reason.
fn over_budget_line(view: &TreeView, total: &StatsFile, peak: u64, budget: u64) -> String {
    let over = peak - budget;
    let percent = 100.0 * over as f64 / budget.max(1) as f64;
    let why = if view.get("unmanaged_peak_bytes") > 0 {
        format!(
            "processes uswap could not manage held up to {} (named below)",
            size(view.get("unmanaged_peak_bytes"))
        )
    } else if view.get("overcommitted_ticks") > 0 {
        format!(
            "its processes needed {} together, more than the budget: each keeps at least {} \
             and what it cannot page out (its interpreter's heap, the shim's own memory)",
            size(view.get("floors_peak_bytes")),
            size(MIN_SHARE_BYTES)
        )
    } else if total.get("swap_quota_refused_bytes") > 0 || total.get("swap_full") > 0 {
        "the swap space was full (raise --swap-size)".to_string()
    } else if total.get("swap_no_space") > 0 {
        "the swap file's disk was low on space".to_string()
    } else if total.get("reclaim_floor") > 0 {
        "what it cannot page out (its libraries, the pool's bookkeeping) filled the budget, \
         and reclaim keeps each process a working floor (raise --budget)"
            .to_string()
    } else {
        "memory was touched faster than it could be paged out".to_string()
    };
    format!("warning: the tree went {} ({percent:.0}%) over its budget: {why}", size(over))
}

/// Processes that ran unmanaged named one by one in the summary (the largest first); the
/// rest are counted (`--verbose` names them all).
const PROCESS_LINES_MAX: usize = 8;

/// Under `--verbose` (`all`), one line per process when the tree had several; always, a
/// warning per process that ran unmanaged, beyond [`PROCESS_LINES_MAX`] of them one line
/// for the rest unless `all`. The default summary stays three lines for any tree.
fn process_lines(view: &TreeView, files: &Files, all: bool) -> Vec<String> {
    let mut members: Vec<&ProcView> =
        view.procs.iter().filter(|p| files.by_pid.contains_key(&p.pid)).collect();
    let mut unmanaged: Vec<&ProcView> = view.procs.iter().filter(|p| !p.why.is_empty()).collect();
    let mut out = Vec::new();
    if members.len() + unmanaged.len() <= 1 {
        return out;
    }
    let limit = if all { usize::MAX } else { PROCESS_LINES_MAX };
    members.sort_by_key(|p| std::cmp::Reverse(p.peak_bytes));
    if all {
        for p in &members {
            out.push(format!("  {}", process_line(p, &files.by_pid[&p.pid])));
        }
    }
    unmanaged.sort_by_key(|p| std::cmp::Reverse(p.peak_bytes));
    for p in unmanaged.iter().take(limit) {
        let now = if p.state == ProcState::Unmanaged { "runs" } else { "ran" };
        out.push(format!(
            "warning: {} {} {now} unmanaged ({}): its {} counted against the budget",
            p.pid,
            p.name,
            p.why,
            size(p.peak_bytes)
        ));
    }
    if let Some(rest) = rest_line(&unmanaged, limit, "unmanaged") {
        out.push(format!("warning: {rest}"));
    }
    out
}

/// "and N more ..." for the processes past `limit` (sorted largest first).
fn rest_line(procs: &[&ProcView], limit: usize, what: &str) -> Option<String> {
    let rest = procs.get(limit..).filter(|r| !r.is_empty())?;
    Some(format!(
        "and {} more {what} processes, of {} at most each (--verbose names them)",
        rest.len(),
        size(rest[0].peak_bytes)
    ))
}

/// A process's line: its peak, its pages out and in by tier, its faults.
pub fn process_line(p: &ProcView, file: &StatsFile) -> String {
    let s = Summary::of(file);
    let peak = p.peak_bytes.max(s.peak_rss_bytes);
    let us = |ns: u64| ns as f64 / 1000.0;
    format!(
        "{} {}: peak {}, out {} ({} zero, {} compressed, {} disk), in {}, {} faults (p50 {:.1} \
         us, p99 {:.1} us)",
        p.pid,
        p.name,
        size(peak),
        pages(s.out_zero + s.out_pool + s.out_file),
        pages(s.out_zero),
        pages(s.out_pool),
        pages(s.out_file),
        pages(s.in_zero + s.in_pool + s.in_file),
        s.faults,
        us(s.fault_ns_p50),
        us(s.fault_ns_p99)
    )
}

/// The detail `--verbose` adds: the budget's source, the broker's figures, the engines'
/// counters as lines.
fn verbose_lines(view: &TreeView, total: &StatsFile) -> Vec<String> {
    let mut out = vec![format!("budget source: {}", view.budget_source)];
    out.push(format!(
        "tree: at most {} managed processes at once, {} joins, {} refused; shares rebalanced \
         every 50 ms; over-committed for {} ticks (floors up to {})",
        view.get("members_peak"),
        view.get("joins"),
        view.get("refused"),
        view.get("overcommitted_ticks"),
        size(view.get("floors_peak_bytes"))
    ));
    out.push(format!(
        "swap space: {} of {} reserved at most, {} at the end",
        size(view.get("swap_used_peak_bytes")),
        size(view.get("swap_limit_bytes")),
        size(view.get("swap_used_bytes"))
    ));
    out.extend(Summary::of(total).to_lines(""));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ending() -> Ending {
        Ending {
            cmd: "python3".into(),
            status: 7,
            wall: Duration::from_millis(18_300),
            children_cpu_ns: 3_000_000_000,
        }
    }

    fn files() -> Files {
        let mut file = StatsFile::default();
        for (name, value) in [
            ("pid", 42),
            ("vm_hwm_bytes", 60 << 20),
            ("swpout_zero", 256),
            ("zswpout", 51_200),
            ("pswpout", 2560),
            ("pool_peak_bytes", 50 << 20),
            ("pool_peak_stored_pages", 51_200),
            ("engine_cpu_ns", 800_000_000),
            ("fault_stall_ns", 15_000_000_000),
        ] {
            file.set(name, value);
        }
        let mut files = Files::default();
        files.total.absorb(&file);
        files.by_pid.insert(42, file);
        files
    }

    fn view(peak: u64) -> TreeView {
        let mut view = TreeView { budget_source: "--budget".into(), ..TreeView::default() };
        view.set("budget_bytes", 64 << 20);
        view.set("peak_bytes", peak);
        view.set("footprint_peak_bytes", 300 << 20);
        view.procs.push(ProcView {
            pid: 42,
            state: ProcState::Exited,
            share_bytes: 0,
            rss_bytes: 0,
            peak_bytes: 60 << 20,
            name: "python3".into(),
            why: String::new(),
        });
        view
    }

    /// The default summary is three lines (four over budget), in MiB or GiB, with no
    /// counter names; `--verbose` adds the detail.
    #[test]
    fn three_lines_in_a_persons_units() {
        let lines = lines(&ending(), &view(63 << 20), &files(), false);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert_eq!(
            lines[0],
            "python3 exited with status 7 after 18.30 s, 8.3x the program's own CPU time (2.20 s)"
        );
        assert_eq!(lines[1], "budget 64.0 MiB, peak 63.0 MiB, memory saved 237 MiB");
        assert_eq!(
            lines[2],
            "paged out 211 MiB: 1.00 MiB of zeros, 200 MiB compressed 4.0:1, 10.0 MiB to disk"
        );
        for line in &lines {
            assert!(!line.contains('_'), "a counter name: {line}");
        }
        let over = super::lines(&ending(), &view(70 << 20), &files(), false);
        assert_eq!(over.len(), 4, "{over:#?}");
        assert!(over[3].starts_with("warning: the tree went 6.00 MiB (9%) over its budget: "));
        assert!(over[3].ends_with("than it could be paged out"), "{}", over[3]);
        let mut floor = files();
        floor.total.set("reclaim_floor", 3);
        let over = super::lines(&ending(), &view(70 << 20), &floor, false);
        assert!(over[3].ends_with("a working floor (raise --budget)"), "{}", over[3]);
        let verbose = super::lines(&ending(), &view(63 << 20), &files(), true);
        assert!(
            verbose.iter().any(|l| l.contains("pages out: zero 256, pool 51200")),
            "{verbose:#?}"
        );
        assert!(verbose.iter().any(|l| l == "budget source: --budget"));
    }

    /// A pool beside the budget is not over it: the peak (a lone process's VmHWM, the
    /// members' resident memory) holds the pool's pages, which the budget leaves out by
    /// design.
    #[test]
    fn a_pool_beside_the_budget_is_not_over_it() {
        let mut beside = files();
        for file in [&mut beside.total, beside.by_pid.get_mut(&42).unwrap()] {
            file.set("pool_size_bytes", 1 << 30);
            file.set("pool_peak_bytes", 300 << 20);
            file.set("vm_hwm_bytes", 363 << 20);
        }
        let lines = super::lines(&ending(), &view(363 << 20), &beside, false);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines[1].contains("(and a pool of up to 1.00 GiB beside it), peak 363 MiB"));
        for file in [&mut beside.total, beside.by_pid.get_mut(&42).unwrap()] {
            file.set("vm_hwm_bytes", 374 << 20);
        }
        let over = super::lines(&ending(), &view(374 << 20), &beside, false);
        assert!(over[3].starts_with("warning: the tree went 10.0 MiB (16%) over"), "{over:#?}");
    }

    #[test]
    fn a_run_that_did_not_compute_says_how_long_it_waited_for_pages() {
        let mut idle = ending();
        idle.children_cpu_ns = 1_000_000_000; // 0.2 s of its own, 15 s of faults, 18.3 s
        let mut f = files();
        f.total.set("fault_stall_ns", 4_000_000_000);
        let line = ending_line(&idle, &f.total);
        assert!(line.ends_with("; waiting for its pages took 4.00 s (22% of the run)"), "{line}");
    }

    #[test]
    fn several_processes_get_a_line_each_under_verbose_and_unmanaged_ones_a_warning() {
        let mut v = view(63 << 20);
        v.procs.push(ProcView {
            pid: 43,
            state: ProcState::Unmanaged,
            share_bytes: 0,
            rss_bytes: 5 << 20,
            peak_bytes: 12 << 20,
            name: "static-prog".into(),
            why: "statically linked: the shim cannot load into it".into(),
        });
        let warning = "warning: 43 static-prog runs unmanaged (statically linked: the shim \
                       cannot load into it): its 12.0 MiB counted against the budget";
        let lines = lines(&ending(), &v, &files(), false);
        assert_eq!(lines.len(), 4, "three lines and the warning: {lines:#?}");
        assert_eq!(lines[3], warning);
        let verbose = super::lines(&ending(), &v, &files(), true);
        let python = verbose.iter().find(|l| l.starts_with("  42 python3: peak 60.0 MiB, out 211"));
        assert!(python.is_some(), "{verbose:#?}");
        assert!(verbose.iter().any(|l| l == warning), "{verbose:#?}");
    }
}
