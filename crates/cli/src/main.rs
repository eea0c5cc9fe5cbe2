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
mod manual;
mod outputs;
mod preflight;
mod report;
mod run;
mod rundir;
mod shim;
mod signals;
mod sim;
mod stat;
mod svg;

use clap::{CommandFactory as _, Parser, Subcommand};

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
    /// Check this machine for `uswap run`, and say what is missing.
    ///
    /// The kernel, userfaultfd (system call, device, features), the privilege ladder's
    /// rung, the swap directory, the shim. Exit status 1 when `uswap run` cannot run here.
    Check(check::CheckArgs),
    /// Run the engine in the deterministic simulator.
    ///
    /// Find bugs from seeds, replay one, sweep parameters, compare cluster policies.
    Sim(Box<sim::SimArgs>),
    #[command(
        about = run::args::ABOUT,
        before_help = run::args::EXAMPLE,
        after_long_help = run::args::AFTER_LONG_HELP,
        help_template = run::args::TEMPLATE,
        override_usage = run::args::USAGE
    )]
    Run(Box<run::RunArgs>),
    /// Show the figures of a program running under `uswap run`, given any pid of its tree.
    Stat(stat::StatArgs),
    /// Print the manual page, or write every page into a directory.
    Man(manual::ManArgs),
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell).
    Completions(manual::CompletionsArgs),
}

/// The command line after `uswap run`, as it was given.
fn run_args() -> Vec<String> {
    std::env::args().skip(1).skip_while(|arg| arg != "run").skip(1).collect()
}

fn main() {
    // Bad flags are one line, as every other refusal, with clap's usage-error status (help
    // and version print as usual).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if error.use_stderr() => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "uswap: {}", run::config::one_line(&error));
            std::process::exit(error.exit_code());
        }
        Err(error) => error.exit(),
    };
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Check(args) => match check::run(args) {
            Ok(status) => std::process::exit(status),
            Err(error) => Err(error),
        },
        Command::Sim(args) => sim::run(*args),
        Command::Run(args) => match run::config::with_file(*args, &run_args()).and_then(run::run) {
            Ok(status) => std::process::exit(status),
            Err(error) => Err(error),
        },
        Command::Stat(args) => stat::run(args),
        Command::Man(args) => manual::man(args, Cli::command()),
        Command::Completions(args) => manual::completions(args, Cli::command()),
    };
    if let Err(error) = result {
        use std::io::Write as _;
        // A closed stderr must not turn the error's exit status into a panic's.
        let _ = writeln!(std::io::stderr(), "uswap: {error:#}");
        std::process::exit(1);
    }
}
