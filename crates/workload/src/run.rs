//! One workload run: fill, access, verify, and the JSON line that reports it.
//!
//! ```text
//!   fill      write every data page at version 1 (sequential; not timed per access)
//!   run       `sweeps` x pages (seq) or `ops` accesses (others), or until `duration`:
//!               page  = next page of the pattern
//!               write (probability write_ratio): next version's contents prepared
//!                     untimed, then [t0] store of the first word [t1], then the rest
//!               read: [t0] load of the first word [t1], then the whole page verified
//!   verify    every page read back and compared with its last version (not timed)
//! ```
//!
//! Only the first touch of a page is timed, because that is where a fault, if any, is
//! taken; generating and comparing 4 KiB of expected contents costs about a microsecond and
//! would blur the line between a hit and a fault.
//!
//! Clock: `std::time::Instant`, which is `clock_gettime(CLOCK_MONOTONIC)` through the vDSO
//! (no system call; about 20-40 ns per reading on a TSC clocksource, twice per access).
//!
//! Fault latency: a touch that hits a resident page takes well under a microsecond (a TLB
//! miss and a cache miss, plus the clock readings); any fault costs more (a minor fault
//! 0.5-2 us on these VMs, a swap-in from zram several us). So accesses slower than
//! [`FAULT_THRESHOLD_NS`] = 1 us are counted as faults and their latencies kept in a
//! second histogram. The proxy is the same whatever serves the fault (the kernel or uswap),
//! so it compares fairly; it also catches preemptions by other processes, which is why
//! `slow_accesses` is reported beside the kernel's own fault counts.

use crate::arena::{fault_counts, Arena, FaultCounts};
use crate::content::{fill_page, mismatched_bytes, PAGE_SIZE};
use crate::pattern::{page_kind, PageKind, PageStream, Pattern};
use crate::rng::SplitMix64;
use crate::WorkloadError;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Accesses slower than this are taken as faults (see the module essay).
pub const FAULT_THRESHOLD_NS: u64 = 1_000;
/// The largest latency a histogram records exactly; slower ones saturate (one hour).
const HISTOGRAM_MAX_NS: u64 = 3_600_000_000_000;
/// The quantiles of the latency CDF in the report (for the harness's charts).
const CDF_QUANTILES: [f64; 27] = [
    0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.92, 0.94, 0.95,
    0.96, 0.97, 0.98, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99999, 1.0,
];
/// How often (in accesses) the run checks its duration limit.
const DURATION_CHECK_EVERY: u64 = 256;

/// What to run (the command-line options, parsed).
#[derive(Debug, Clone)]
pub struct Config {
    /// Working-set size in bytes (rounded up to whole pages).
    pub size_bytes: u64,
    /// The access pattern.
    pub pattern: Pattern,
    /// Passes over all pages (`seq` only).
    pub sweeps: u64,
    /// Accesses (`uniform`, `zipf`, `zero`); `None` means 2 per page.
    pub ops: Option<u64>,
    /// Stop the run phase after this long, whatever `sweeps`/`ops` say.
    pub duration: Option<Duration>,
    /// Seed of the access stream and of the page contents.
    pub seed: u64,
    /// Probability that an access is a write, in [0, 1].
    pub write_ratio: f64,
    /// Read back and verify every page at the end.
    pub final_verify: bool,
}

/// The one JSON line the workload prints (field names carry their unit last).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub pattern: String,
    pub size_bytes: u64,
    pub pages: u64,
    pub seed: u64,
    pub write_ratio: f64,
    /// Fill + run + final verification.
    pub wall_s: f64,
    pub fill_s: f64,
    pub run_s: f64,
    pub verify_s: f64,
    /// Timed accesses of the run phase.
    pub accesses: u64,
    pub reads: u64,
    pub writes: u64,
    pub access_p50_ns: u64,
    pub access_p99_ns: u64,
    pub access_max_ns: u64,
    pub fault_threshold_ns: u64,
    /// Accesses slower than the threshold (the "faults" of the latency proxy).
    pub slow_accesses: u64,
    pub fault_p50_ns: Option<u64>,
    pub fault_p99_ns: Option<u64>,
    /// `getrusage(RUSAGE_SELF)` at the end, whole process.
    pub major_faults: u64,
    pub minor_faults: u64,
    /// Major faults taken during the run phase only.
    pub run_major_faults: u64,
    /// `VmHWM` from /proc/self/status.
    pub peak_rss_bytes: u64,
    /// Pages whose contents differed from their last write (must be 0).
    pub verify_errors: u64,
    /// Pages compared (run-phase reads plus the final sweep).
    pub verified_pages: u64,
    pub clock: String,
    /// (quantile, latency ns) points of the access-latency distribution.
    pub latency_cdf: Vec<(f64, u64)>,
}

/// The state of a run.
struct Workload {
    config: Config,
    arena: Arena,
    /// The last version written to each page (0: never written).
    versions: Vec<u32>,
    scratch: Box<[u8; PAGE_SIZE]>,
    all: Histogram<u64>,
    slow: Histogram<u64>,
    reads: u64,
    writes: u64,
    verify_errors: u64,
    verified_pages: u64,
}

/// Runs the workload described by `config`.
///
/// # Errors
/// [`WorkloadError::BadOption`] for a write ratio outside [0, 1] or a zero size;
/// [`WorkloadError::OutOfMemory`] when the working set cannot be allocated.
/// A verification mismatch is not an error: it is counted in `verify_errors`.
pub fn run(config: &Config) -> Result<Report, WorkloadError> {
    let start = Instant::now();
    let mut workload = Workload::new(config.clone())?;
    workload.fill();
    let fill_s = start.elapsed().as_secs_f64();
    let majors_before = fault_counts().major;
    let run_start = Instant::now();
    workload.run_phase();
    let run_s = run_start.elapsed().as_secs_f64();
    let run_major_faults = fault_counts().major - majors_before;
    let verify_start = Instant::now();
    if config.final_verify {
        workload.verify_all();
    }
    let verify_s = verify_start.elapsed().as_secs_f64();
    let wall_s = start.elapsed().as_secs_f64();
    let faults = fault_counts();
    Ok(workload.report(wall_s, fill_s, run_s, verify_s, faults, run_major_faults))
}

impl Workload {
    fn new(config: Config) -> Result<Self, WorkloadError> {
        if !(0.0..=1.0).contains(&config.write_ratio) {
            let what = format!("--write-ratio {} is outside [0, 1]", config.write_ratio);
            return Err(WorkloadError::BadOption { what });
        }
        if config.size_bytes == 0 {
            return Err(WorkloadError::BadOption { what: "--size 0".into() });
        }
        let pages = config.size_bytes.div_ceil(PAGE_SIZE as u64);
        let pages = usize::try_from(pages)
            .map_err(|_| WorkloadError::OutOfMemory { bytes: config.size_bytes })?;
        let histogram = || {
            Histogram::new_with_bounds(1, HISTOGRAM_MAX_NS, 3)
                .map_err(|e| WorkloadError::BadOption { what: format!("histogram: {e}") })
        };
        Ok(Workload {
            arena: Arena::new(pages)?,
            versions: vec![0; pages],
            scratch: Box::new([0; PAGE_SIZE]),
            all: histogram()?,
            slow: histogram()?,
            reads: 0,
            writes: 0,
            verify_errors: 0,
            verified_pages: 0,
            config,
        })
    }

    fn kind(&self, page: usize) -> PageKind {
        page_kind(self.config.pattern, self.config.seed, page as u64)
    }

    /// The version whose contents `page` must hold: zero pages always hold version 0.
    fn content_version(&self, page: usize) -> u32 {
        match self.kind(page) {
            PageKind::Data => self.versions[page],
            PageKind::ZeroWritten | PageKind::ZeroUntouched => 0,
        }
    }

    fn fill(&mut self) {
        let seed = self.config.seed;
        for page in 0..self.arena.pages() {
            match self.kind(page) {
                PageKind::Data => {
                    fill_page(seed, page as u64, 1, self.arena.page_mut(page));
                    self.versions[page] = 1;
                }
                PageKind::ZeroWritten => self.arena.page_mut(page).fill(0),
                PageKind::ZeroUntouched => {}
            }
        }
    }

    fn run_phase(&mut self) {
        let pages = self.arena.pages() as u64;
        let accesses = match self.config.pattern {
            Pattern::Seq => self.config.sweeps.saturating_mul(pages),
            _ => self.config.ops.unwrap_or(2 * pages),
        };
        let mut rng = SplitMix64::new(self.config.seed ^ 0x5eed);
        let mut stream = PageStream::new(self.config.pattern, pages);
        let start = Instant::now();
        for i in 0..accesses {
            if let Some(limit) = self.config.duration {
                if i % DURATION_CHECK_EVERY == 0 && start.elapsed() >= limit {
                    break;
                }
            }
            let page = stream.next_page(&mut rng) as usize;
            let latency_ns = if rng.next_f64() < self.config.write_ratio {
                self.write(page)
            } else {
                self.read(page)
            };
            self.all.saturating_record(latency_ns.max(1));
            if latency_ns > FAULT_THRESHOLD_NS {
                self.slow.saturating_record(latency_ns);
            }
        }
    }

    /// A timed write of the page's next version; returns the touch latency.
    fn write(&mut self, page: usize) -> u64 {
        self.writes += 1;
        let version = match self.kind(page) {
            PageKind::Data => self.versions[page].saturating_add(1),
            PageKind::ZeroWritten | PageKind::ZeroUntouched => 0,
        };
        fill_page(self.config.seed, page as u64, version, &mut self.scratch);
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.scratch[..8]);
        let t0 = Instant::now();
        self.arena.touch_write(page, u64::from_le_bytes(first));
        let latency = t0.elapsed();
        self.arena.page_mut(page)[8..].copy_from_slice(&self.scratch[8..]);
        if version > 0 {
            self.versions[page] = version;
        }
        nanos(latency)
    }

    /// A timed read of the page, then its verification; returns the touch latency.
    fn read(&mut self, page: usize) -> u64 {
        self.reads += 1;
        let t0 = Instant::now();
        std::hint::black_box(self.arena.touch_read(page));
        let latency = t0.elapsed();
        self.verify(page);
        nanos(latency)
    }

    fn verify(&mut self, page: usize) {
        let version = self.content_version(page);
        let seed = self.config.seed;
        let actual = self.arena.page(page);
        let bad = mismatched_bytes(seed, page as u64, version, actual, &mut self.scratch);
        self.verified_pages += 1;
        if bad > 0 {
            self.verify_errors += 1;
            if self.verify_errors <= 10 {
                eprintln!(
                    "uswap-workload: page {page} (version {version}): {bad} bytes differ \
                     from the last write"
                );
            }
        }
    }

    fn verify_all(&mut self) {
        for page in 0..self.arena.pages() {
            self.verify(page);
        }
    }

    fn report(
        &self,
        wall_s: f64,
        fill_s: f64,
        run_s: f64,
        verify_s: f64,
        faults: FaultCounts,
        run_major_faults: u64,
    ) -> Report {
        let slow = (!self.slow.is_empty()).then_some(&self.slow);
        Report {
            pattern: self.config.pattern.name().to_string(),
            size_bytes: self.arena.pages() as u64 * PAGE_SIZE as u64,
            pages: self.arena.pages() as u64,
            seed: self.config.seed,
            write_ratio: self.config.write_ratio,
            wall_s,
            fill_s,
            run_s,
            verify_s,
            accesses: self.all.len(),
            reads: self.reads,
            writes: self.writes,
            access_p50_ns: self.all.value_at_quantile(0.5),
            access_p99_ns: self.all.value_at_quantile(0.99),
            access_max_ns: self.all.max(),
            fault_threshold_ns: FAULT_THRESHOLD_NS,
            slow_accesses: self.slow.len(),
            fault_p50_ns: slow.map(|h| h.value_at_quantile(0.5)),
            fault_p99_ns: slow.map(|h| h.value_at_quantile(0.99)),
            major_faults: faults.major,
            minor_faults: faults.minor,
            run_major_faults,
            peak_rss_bytes: peak_rss_bytes(),
            verify_errors: self.verify_errors,
            verified_pages: self.verified_pages,
            clock: "clock_gettime(CLOCK_MONOTONIC) via vDSO (std::time::Instant)".into(),
            latency_cdf: if self.all.is_empty() {
                Vec::new()
            } else {
                CDF_QUANTILES.iter().map(|&q| (q, self.all.value_at_quantile(q))).collect()
            },
        }
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// `VmHWM` of this process in bytes, or 0 when /proc is unreadable.
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pattern: Pattern) -> Config {
        Config {
            size_bytes: 256 * PAGE_SIZE as u64,
            pattern,
            sweeps: 2,
            ops: Some(2000),
            duration: None,
            seed: 11,
            write_ratio: 0.3,
            final_verify: true,
        }
    }

    #[test]
    fn every_pattern_runs_clean() {
        for pattern in [Pattern::Seq, Pattern::Uniform, Pattern::Zipf, Pattern::Zero] {
            let report = run(&config(pattern)).unwrap();
            assert_eq!(report.verify_errors, 0, "{pattern:?}");
            assert_eq!(report.pages, 256);
            let expected = if pattern == Pattern::Seq { 512 } else { 2000 };
            assert_eq!(report.accesses, expected, "{pattern:?}");
            assert_eq!(report.reads + report.writes, report.accesses);
            assert!(report.writes > 0 && report.reads > 0);
            assert_eq!(report.verified_pages, report.reads + 256);
            assert!(report.access_p50_ns <= report.access_p99_ns);
            assert!(report.access_p99_ns <= report.access_max_ns);
            assert_eq!(report.latency_cdf.len(), CDF_QUANTILES.len());
            assert!(report.peak_rss_bytes > 0);
        }
    }

    #[test]
    fn corruption_is_detected() {
        let mut workload = Workload::new(config(Pattern::Uniform)).unwrap();
        workload.fill();
        workload.arena.page_mut(17)[1000] ^= 0x40;
        workload.verify_all();
        assert_eq!(workload.verify_errors, 1);
        // A zero page that stops being zero is caught too.
        let mut workload = Workload::new(config(Pattern::Zero)).unwrap();
        workload.fill();
        let zero = (0..256).find(|&p| workload.kind(p) != PageKind::Data).unwrap();
        workload.arena.page_mut(zero)[5] = 1;
        workload.verify_all();
        assert_eq!(workload.verify_errors, 1);
    }

    #[test]
    fn bad_options_are_refused() {
        let mut bad = config(Pattern::Seq);
        bad.write_ratio = 1.5;
        assert!(matches!(run(&bad), Err(WorkloadError::BadOption { .. })));
        bad.write_ratio = 0.5;
        bad.size_bytes = 0;
        assert!(matches!(run(&bad), Err(WorkloadError::BadOption { .. })));
    }

    #[test]
    fn duration_limits_the_run() {
        let mut long = config(Pattern::Uniform);
        long.ops = Some(u64::MAX);
        long.duration = Some(Duration::from_millis(50));
        let report = run(&long).unwrap();
        assert!(report.accesses > 0 && report.accesses < u64::MAX);
        assert_eq!(report.verify_errors, 0);
    }
}
