//! `uswap run --stats-every SECS`: the tree's figures while it runs, in the summary's
//! units.
//!
//! ```text
//!   on a terminal (stderr, no --stats-file): one line, redrawn in place (indicatif)
//!     uswap: 12.3 s, resident 80.1 MiB of 96.0 MiB (peak 95.2 MiB), paged out 1.10 GiB,
//!            in 300 MiB, 12345 faults
//!   otherwise: a block every SECS, headed by the time of day and the time since the start
//!     uswap live at 14:03:12, 12.3 s in: resident 80.1 MiB of 96.0 MiB (peak 95.2 MiB),
//!       2 processes
//!     uswap live: paged out 1.10 GiB: 12.0 MiB of zeros, 1.02 GiB compressed 3.4:1,
//!       70.1 MiB to disk
//!     uswap live: paged in 300 MiB by 12345 faults (p50 4.0 us, p99 9.0 us)
//! ```
//!
//! The figures come from the run directory, as `uswap stat`'s do: the members' live stats
//! files (rewritten at least every SECS) and the broker's tree file (resident memory,
//! rewritten every second). The terminal's line is cleared before the summary is printed.
//!
//! Context: the reporter's own thread, which reads files and writes to stderr or the stats
//! file; nothing it does can change the run's exit status.

use super::summary::{self, Files};
use super::view::{ProcState, TreeView};
use runstat::{format_size, Summary};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// The figures of one report.
#[derive(Debug, Clone, PartialEq)]
pub struct Live {
    /// Since the program started.
    pub elapsed: Duration,
    /// The budget.
    pub budget_bytes: u64,
    /// The tree's resident memory at the broker's last sample, and its peak.
    pub now_bytes: u64,
    pub peak_bytes: u64,
    /// Processes that are members now.
    pub members: usize,
    /// Where the pages went (the summary's third line).
    pub paged_out: String,
    /// Everything paged in, and the faults that did it.
    pub in_bytes: u64,
    pub out_bytes: u64,
    pub faults: u64,
    pub fault_ns_p50: u64,
    pub fault_ns_p99: u64,
}

impl Live {
    /// The figures of run directory `dir`'s files, the tree's budget being `budget_bytes`
    /// until the broker's first tree file says it.
    pub fn read(dir: &Path, budget_bytes: u64, elapsed: Duration) -> Live {
        let files = summary::read_files(dir);
        let view = std::fs::read_to_string(dir.join(runstat::env::TREE_FILE))
            .ok()
            .and_then(|text| TreeView::parse(&text).ok())
            .unwrap_or_default();
        Live::of(&view, &files, budget_bytes, elapsed)
    }

    /// The figures of a view and the stats files.
    pub fn of(view: &TreeView, files: &Files, budget_bytes: u64, elapsed: Duration) -> Live {
        let s = Summary::of(&files.total);
        let page = 4096;
        Live {
            elapsed,
            budget_bytes: match view.get("budget_bytes") {
                0 => budget_bytes,
                bytes => bytes,
            },
            now_bytes: view.get("now_bytes"),
            peak_bytes: view.get("peak_bytes"),
            members: view.procs.iter().filter(|p| p.state == ProcState::Member).count(),
            paged_out: summary::paged_out_line(&files.total),
            in_bytes: (s.in_zero + s.in_pool + s.in_file) * page,
            out_bytes: (s.out_zero + s.out_pool + s.out_file) * page,
            faults: s.faults,
            fault_ns_p50: s.fault_ns_p50,
            fault_ns_p99: s.fault_ns_p99,
        }
    }

    fn resident(&self) -> String {
        format!(
            "resident {} of {} (peak {})",
            format_size(self.now_bytes),
            format_size(self.budget_bytes),
            format_size(self.peak_bytes)
        )
    }

    /// The block written when stderr is not a terminal, or to --stats-file (module
    /// essay); `clock` is the time of day.
    pub fn block(&self, clock: &str) -> Vec<String> {
        let processes = match self.members {
            1 => "1 process".to_string(),
            n => format!("{n} processes"),
        };
        let us = |ns: u64| ns as f64 / 1000.0;
        vec![
            format!(
                "uswap live at {clock}, {:.1} s in: {}, {processes}",
                self.elapsed.as_secs_f64(),
                self.resident()
            ),
            format!("uswap live: {}", self.paged_out),
            format!(
                "uswap live: paged in {} by {} faults (p50 {:.1} us, p99 {:.1} us)",
                format_size(self.in_bytes),
                self.faults,
                us(self.fault_ns_p50),
                us(self.fault_ns_p99)
            ),
        ]
    }

    /// The line redrawn on a terminal (module essay).
    pub fn status(&self) -> String {
        format!(
            "uswap: {:.1} s, {}, paged out {}, in {}, {} faults",
            self.elapsed.as_secs_f64(),
            self.resident(),
            format_size(self.out_bytes),
            format_size(self.in_bytes),
            self.faults
        )
    }
}

/// Where the reports go.
enum Sink {
    /// A line redrawn in place on the terminal that is stderr.
    Terminal(indicatif::ProgressBar),
    /// Blocks on stderr, not a terminal.
    Stderr,
    /// Blocks appended to --stats-file.
    File(std::fs::File),
}

impl Sink {
    fn new(file: Option<std::fs::File>) -> Sink {
        use std::io::IsTerminal as _;
        match file {
            Some(file) => Sink::File(file),
            None if std::io::stderr().is_terminal() => {
                let bar = indicatif::ProgressBar::with_draw_target(
                    None,
                    indicatif::ProgressDrawTarget::stderr(),
                );
                bar.set_style(
                    indicatif::ProgressStyle::with_template("{wide_msg}")
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
                );
                Sink::Terminal(bar)
            }
            None => Sink::Stderr,
        }
    }

    fn report(&mut self, live: &Live) {
        let block = || live.block(&super::sys::time_of_day()).join("\n") + "\n";
        match self {
            Sink::Terminal(bar) => bar.set_message(live.status()),
            Sink::Stderr => {
                let _ = std::io::stderr().write_all(block().as_bytes());
            }
            Sink::File(file) => {
                let _ = file.write_all(block().as_bytes());
            }
        }
    }

    /// Clears the terminal's line, for the summary.
    fn finish(self) {
        if let Sink::Terminal(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Reports the figures of run directory `dir` every `every` until `done` (the
/// --stats-every thread), to `file` or stderr.
pub fn report(
    dir: PathBuf,
    budget_bytes: u64,
    every: Duration,
    file: Option<std::fs::File>,
    done: &AtomicBool,
) {
    let started = Instant::now();
    let mut sink = Sink::new(file);
    let mut next = started + every;
    while !done.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if Instant::now() < next {
            continue;
        }
        next += every;
        sink.report(&Live::read(&dir, budget_bytes, started.elapsed()));
    }
    sink.finish();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::view::ProcView;
    use runstat::StatsFile;

    fn figures() -> Live {
        let mut file = StatsFile::default();
        for (name, value) in [("pid", 42), ("swpout_zero", 256), ("zswpout", 51_200)] {
            file.set(name, value);
        }
        for (name, value) in [("pool_peak_bytes", 50 << 20), ("pool_peak_stored_pages", 51_200)] {
            file.set(name, value);
        }
        file.set("swpin_zero", 10);
        file.set("zswpin", 2550);
        let mut files = Files::default();
        files.total.absorb(&file);
        files.by_pid.insert(42, file);
        let mut view = TreeView::default();
        view.set("now_bytes", 80 << 20);
        view.set("peak_bytes", 95 << 20);
        for (pid, state) in [(42, ProcState::Member), (43, ProcState::Exited)] {
            view.procs.push(ProcView {
                pid,
                state,
                share_bytes: 0,
                rss_bytes: 0,
                peak_bytes: 0,
                name: "python3".into(),
                why: String::new(),
            });
        }
        Live::of(&view, &files, 96 << 20, Duration::from_millis(12_340))
    }

    /// A block: the time of day and since the start, then sizes in a person's units and
    /// no counter names (the summary's rules).
    #[test]
    fn a_block_says_when_and_how_much_in_a_persons_units() {
        let block = figures().block("14:03:12");
        assert_eq!(
            block,
            [
                "uswap live at 14:03:12, 12.3 s in: resident 80.0 MiB of 96.0 MiB (peak 95.0 \
                 MiB), 1 process",
                "uswap live: paged out 201 MiB: 1.00 MiB of zeros, 200 MiB compressed 4.0:1, \
                 0 B to disk",
                "uswap live: paged in 10.0 MiB by 0 faults (p50 0.0 us, p99 0.0 us)",
            ]
        );
        for line in &block {
            assert!(!line.contains('_'), "a counter name: {line}");
        }
    }

    #[test]
    fn the_terminals_line_is_one_line() {
        let line = figures().status();
        assert_eq!(
            line,
            "uswap: 12.3 s, resident 80.0 MiB of 96.0 MiB (peak 95.0 MiB), paged out 201 MiB, \
             in 10.0 MiB, 0 faults"
        );
    }

    /// Before the broker's first tree file, the budget is the run's.
    #[test]
    fn before_the_first_tree_file_the_budget_is_the_runs() {
        let live = Live::of(&TreeView::default(), &Files::default(), 64 << 20, Duration::ZERO);
        assert!(live.status().contains("resident 0 B of 64.0 MiB"), "{}", live.status());
    }
}
