//! `uswap bench NAME`: every benchmark of the project behind one subcommand.
//!
//! Each benchmark lives in its own module, measures the real code path (never a model of
//! it), and returns a [`Report`]: a table for people and one JSON object for machines.
//! Comparisons are ratios measured side by side in the same run, because these machines are
//! shared and noisy: an absolute figure from another run says little.

mod uffd;

use crate::report::Report;
use clap::{Args, Subcommand};

/// Options every benchmark understands.
#[derive(Debug, Clone, Args)]
pub struct CommonOpts {
    /// Print one JSON object instead of the table.
    #[arg(long, global = true)]
    pub json: bool,
    /// A much smaller run (seconds, not minutes), for tests and smoke checks.
    #[arg(long, global = true)]
    pub quick: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub which: Which,
    #[command(flatten)]
    pub common: CommonOpts,
}

/// The benchmarks. Each one's `--help` says what it measures and which JSON fields it
/// prints.
#[derive(Debug, Subcommand)]
pub enum Which {
    /// Print the machine description every report carries (a smoke test of the harness).
    Machine,
    /// userfaultfd fault round trips (poll / spin handler, SIGBUS, kernel first touch) and
    /// eviction primitives (MOVE out vs write-protect + copy + MADV_DONTNEED). JSON:
    /// handler_poll_copy_p50_ns, handler_spin_copy_p50_ns, sigbus_copy_p50_ns,
    /// kernel_anon_fault_p50_ns, move_out_ns_per_page, wp_copy_drop_ns_per_page, ...
    Uffd,
}

/// Runs one benchmark and prints its report.
///
/// # Errors
/// Whatever the benchmark reports: an unsupported environment, an I/O error.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let report = match args.which {
        Which::Machine => machine(),
        Which::Uffd => uffd::run(args.common.quick)?,
    };
    report.print(args.common.json);
    Ok(())
}

fn machine() -> Report {
    let mut report = Report::new("machine");
    let description = crate::report::machine_description();
    let table = report.table("Machine", &["what", "value"]);
    table.row(["description", description.as_str()]);
    let page_size = 4096; // x86-64 base page; the layers assert it at compile time.
    table.row(["page size".to_string(), page_size.to_string()]);
    report.field("page_size_bytes", page_size);
    report.note("figures from one machine compare only as ratios within one run");
    report
}
