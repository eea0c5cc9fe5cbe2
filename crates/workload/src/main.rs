//! The `uswap-workload` binary: options in, one JSON line (or a summary) out.
//!
//! Exit status: 0 when every page verified, 3 when any page read back differed from its
//! last write (the data-safety failure), 1 for any other error, 2 for bad usage (clap).

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use clap::Parser;
use std::time::Duration;
use workload::run::{run, Config, Report};
use workload::size::{format_size, parse_size};
use workload::Pattern;

/// Exit status when a page read back differed from its last write.
const EXIT_VERIFY_FAILED: i32 = 3;

/// A memory workload that verifies every page it reads, for comparing swaps.
///
/// Allocates --size bytes with calloc, fills them with realistic page contents, runs one
/// access pattern while timing every page touch, verifies every read, and prints one JSON
/// line (with --json) or a summary.
#[derive(Debug, Parser)]
#[command(name = "uswap-workload", version)]
struct Options {
    /// Working-set size (4096, 64K, 256M, 1G, ...).
    #[arg(long, default_value = "256M", value_parser = parse_size_arg)]
    size: u64,
    /// Access pattern.
    #[arg(long, value_enum, default_value_t = Pattern::Uniform)]
    pattern: Pattern,
    /// Passes over all pages after the fill (seq only).
    #[arg(long, default_value_t = 2)]
    sweeps: u64,
    /// Accesses after the fill (uniform, zipf, zero); default 2 per page.
    #[arg(long)]
    ops: Option<u64>,
    /// Stop the access phase after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Seed of the access stream and the page contents.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Share of accesses that write (0..=1).
    #[arg(long, default_value_t = 0.25)]
    write_ratio: f64,
    /// Skip the final read-back of every page.
    #[arg(long)]
    no_final_verify: bool,
    /// Print the report as one JSON line.
    #[arg(long)]
    json: bool,
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

fn main() {
    let options = Options::parse();
    let duration = match options.duration {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            eprintln!("uswap-workload: --duration must be a positive number of seconds");
            std::process::exit(2);
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let config = Config {
        size_bytes: options.size,
        pattern: options.pattern,
        sweeps: options.sweeps,
        ops: options.ops,
        duration,
        seed: options.seed,
        write_ratio: options.write_ratio,
        final_verify: !options.no_final_verify,
    };
    let report = match run(&config) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("uswap-workload: {error}");
            std::process::exit(1);
        }
    };
    if options.json {
        match serde_json::to_string(&report) {
            Ok(line) => println!("{line}"),
            Err(error) => {
                eprintln!("uswap-workload: {error}");
                std::process::exit(1);
            }
        }
    } else {
        print_summary(&report);
    }
    if report.verify_errors > 0 {
        std::process::exit(EXIT_VERIFY_FAILED);
    }
}

fn print_summary(r: &Report) {
    let fault = |v: Option<u64>| v.map_or("-".to_string(), |ns| ns.to_string());
    println!(
        "pattern {} size {} seed {} write-ratio {}",
        r.pattern,
        format_size(r.size_bytes),
        r.seed,
        r.write_ratio
    );
    println!(
        "wall {:.3} s (fill {:.3}, run {:.3}, verify {:.3})",
        r.wall_s, r.fill_s, r.run_s, r.verify_s
    );
    println!(
        "accesses {} (reads {}, writes {}): p50 {} ns, p99 {} ns, max {} ns",
        r.accesses, r.reads, r.writes, r.access_p50_ns, r.access_p99_ns, r.access_max_ns
    );
    println!(
        "faults (> {} ns): {} accesses, p50 {} ns, p99 {} ns",
        r.fault_threshold_ns,
        r.slow_accesses,
        fault(r.fault_p50_ns),
        fault(r.fault_p99_ns)
    );
    println!(
        "major faults {} (run phase {}), minor faults {}, peak RSS {}",
        r.major_faults,
        r.run_major_faults,
        r.minor_faults,
        format_size(r.peak_rss_bytes)
    );
    println!("verified pages {}, verify errors {}", r.verified_pages, r.verify_errors);
}
