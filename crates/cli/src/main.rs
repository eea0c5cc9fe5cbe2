//! `uswap`: the command-line face of the user-space swap.
//!
//! Flags are parsed here (clap, "lowargs"), turned into each subsystem's own configuration
//! in the subcommand modules ("hiargs"), and only `main` decides the exit code: 0 on
//! success, 1 when the work failed, 2 for bad usage (clap's own convention).

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod bench;
mod check;
mod cpus;
mod ladder;
mod outputs;
mod preflight;
mod report;
mod run;
mod rundir;
mod shim;
mod signals;
mod sim;
mod stat;

use clap::{Parser, Subcommand};

/// The Linux swap subsystem rebuilt in user space.
///
/// A program's memory gets a swap it controls: zero pages cost nothing, cold pages are
/// compressed into a zswap-like pool, and the pool writes back to a swap file whose slots
/// come from the kernel's cluster allocator. Pages move through userfaultfd.
#[derive(Debug, Parser)]
#[command(name = "uswap", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a benchmark: prints a table, or one JSON object with --json.
    Bench(bench::BenchArgs),
    /// Check this machine for `uswap run`: kernel, userfaultfd (system call, device,
    /// features), the privilege ladder's rung, swap directory, shim. Prints what is missing;
    /// exit status 1 when `uswap run` cannot run here.
    Check(check::CheckArgs),
    /// Run the engine in the deterministic simulator: find bugs from seeds, replay one,
    /// sweep parameters, compare cluster policies.
    Sim(Box<sim::SimArgs>),
    /// Run a program with its anonymous memory managed by uswap under a budget:
    /// uswap run [--budget SIZE] ... -- CMD ARGS...
    Run(Box<run::RunArgs>),
    /// Show the live counters of a program running under `uswap run`.
    Stat(stat::StatArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Check(args) => match check::run(args) {
            Ok(status) => std::process::exit(status),
            Err(error) => Err(error),
        },
        Command::Sim(args) => sim::run(*args),
        Command::Run(args) => match run::run(*args) {
            Ok(status) => std::process::exit(status),
            Err(error) => Err(error),
        },
        Command::Stat(args) => stat::run(args),
    };
    if let Err(error) = result {
        use std::io::Write as _;
        // A closed stderr must not turn the error's exit status into a panic's.
        let _ = writeln!(std::io::stderr(), "uswap: {error:#}");
        std::process::exit(1);
    }
}
