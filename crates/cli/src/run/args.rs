//! The flags of `uswap run`, as `uswap run --help` shows them: the few a user needs first,
//! then the output files, then the knobs under a heading of their own, one line each
//! (docs/RUN.md explains each knob; clap prints the first paragraph of a doc comment for
//! `-h` and all of it for `--help`).

use engine::defaults::RUN;
use runstat::settings::{Delivery, FileCache, LargeFolios, Placement, Switch, ZeroPages};
use std::path::PathBuf;

/// What `uswap run` is, in the list of subcommands and atop its help.
pub const ABOUT: &str = "Run a program, and every process it starts, under a memory budget";

/// The example every form of the help leads with.
pub const EXAMPLE: &str = "Example: uswap run --budget 256M -- python3 train.py";

/// The help's layout: what it is, the example, the usage, the flags.
pub const TEMPLATE: &str =
    "{about-with-newline}\n{before-help}{usage-heading} {usage}\n\n{all-args}{after-help}";

/// What `uswap run --help` adds after the flags.
pub const AFTER_LONG_HELP: &str = "The tree's private memory past the budget is paged out \
(pages of zeros noted, the rest compressed into a pool, the coldest of those written to an \
encrypted swap file) and paged back in when touched. At exit uswap prints a summary of three \
lines on stderr (every counter with --verbose) and exits as the program did; `uswap stat \
PID` shows the figures while it runs. docs/RUN.md explains each knob.";

/// The usage line (the program comes after `--`).
pub const USAGE: &str = "uswap run [OPTIONS] -- CMD [ARGS]...";

/// Flags of `uswap run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Memory the tree may use: a size (256M) or auto [default: half the free memory]
    ///
    /// Resident pages and the compressed pool of every process of the tree together.
    /// `auto[:TARGET][,max=SIZE]` lowers it while faults cost the programs under TARGET
    /// percent of their run (default 1) and they are not growing, and raises it when pages
    /// they use are pushed out again or the loss outlasts a lowering by a second, never
    /// above SIZE (default: the default budget). The default is half of what the memory
    /// cgroup has left under its limit where one is set, else half of MemAvailable.
    #[arg(long, value_name = "SIZE|auto")]
    pub budget: Option<String>,
    /// Print the live figures every SECS seconds (a status line on a terminal)
    ///
    /// On a terminal, one line redrawn in place; otherwise (or with --stats-file) a block
    /// of lines each time, headed by the time of day.
    #[arg(long, value_name = "SECS")]
    pub stats_every: Option<f64>,
    /// The swap file, which must not exist [default: a private file in $TMPDIR]
    ///
    /// uswap creates it and removes it at exit.
    #[arg(long, value_name = "PATH")]
    pub swap_file: Option<PathBuf>,
    /// The swap file's largest size, e.g. 8G [default: 8G]
    ///
    /// A sparse file: it may be larger than the free disk space (writes to it stop while
    /// less than 64 MiB is free there).
    #[arg(long, value_name = "SIZE")]
    pub swap_size: Option<String>,
    /// Print the detail after the summary: every counter, the budget's source
    #[arg(long, short)]
    pub verbose: bool,
    /// Settings to start from [default: ~/.config/uswap/config.toml where it exists]
    ///
    /// TOML, under [run]: any long flag of uswap run without its dashes, as
    /// `pool-percent = 25`; a flag on the command line wins (docs/RUN.md, "Config file").
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Write the --stats-every blocks, and the tree's totals at exit, to this new file
    /// instead of stderr
    #[arg(long, value_name = "PATH", help_heading = "Output files")]
    pub stats_file: Option<PathBuf>,
    /// Write a trace of faults and evictions (the simulator's format) to this new file
    #[arg(long, value_name = "FILE", help_heading = "Output files")]
    pub record: Option<PathBuf>,
    /// Write an SVG of the budget, the resident memory and the fault stall over time
    ///
    /// Two charts, one above the other: the tree's budget and resident memory in MiB, and
    /// the time its processes lost to faults on paged-out memory, as a share of the run
    /// (with --budget auto, beside the target). Open it in a browser.
    #[arg(long, value_name = "FILE", help_heading = "Output files")]
    pub plot: Option<PathBuf>,
    /// Let --record and --plot replace, and --stats-file append to, an existing file
    #[arg(long, help_heading = "Output files")]
    pub force: bool,

    /// The compressor of the pool: lz4, zstd, zstd:1..=3, or off for no pool
    #[arg(long, value_name = "NAME", default_value = "lz4", help_heading = KNOBS)]
    pub zswap: String,
    /// The pool's share of the budget, in percent
    #[arg(long, value_name = "N", default_value_t = RUN.pool_percent, help_heading = KNOBS)]
    pub pool_percent: u32,
    /// A pool beside the budget, of at most SIZE, instead of a share of it
    #[arg(long, value_name = "SIZE", conflicts_with = "pool_percent", help_heading = KNOBS)]
    pub pool_size: Option<String>,
    /// Keep the swap file's pages in the page cache, or drop them once on disk
    #[arg(long, value_name = "MODE", default_value_t = FileCache::Keep, help_heading = KNOBS)]
    pub swap_file_cache: FileCache,
    /// Encrypt the pages written to the swap file (AES-256-GCM, a key per run)
    #[arg(long, value_name = "MODE", default_value_t = on_off(RUN.encrypt), help_heading = KNOBS)]
    pub encrypt: Switch,
    /// Keep the swap device in memcached instead: memcached://HOST:PORT,HOST:PORT,...
    #[arg(long, value_name = "URL", conflicts_with = "swap_file", help_heading = KNOBS)]
    pub far: Option<String>,
    /// Copies of each page in the far tier (1 up to the number of servers)
    #[arg(long, value_name = "N", default_value_t = 2, requires = "far", help_heading = KNOBS)]
    pub far_replicas: u32,
    /// The largest folio, 2^N pages, a fault maps and a page-out moves (0..=9)
    #[arg(long, value_name = "N", default_value_t = RUN.folio_order, help_heading = KNOBS)]
    pub folio_order: u32,
    /// When a fault maps a large folio: always, or while faults walk forward
    #[arg(long, value_name = "POLICY", default_value_t = policy(RUN.large_folios),
          help_heading = KNOBS)]
    pub large_folios: LargeFolios,
    /// A read of a page of zeros maps it protected (charged once written) or charged
    #[arg(long, value_name = "MODE", default_value_t = ZeroPages::Protected,
          help_heading = KNOBS)]
    pub zero_pages: ZeroPages,
    /// Who serves a fault on a swapped page: the handler thread, or the faulting thread
    #[arg(long, value_name = "MODE", default_value_t = Delivery::Handler, help_heading = KNOBS)]
    pub delivery: Delivery,
    /// Run the program on these CPUs only, as taskset does: 0, 0-1, 0,2-3
    #[arg(long, value_name = "LIST", help_heading = KNOBS)]
    pub cpus: Option<String>,
    /// The reclaimer's CPUs [default: with --cpus, the rest; else the program's]
    #[arg(long, value_name = "LIST", help_heading = KNOBS)]
    pub reclaim_cpus: Option<String>,
    /// Run the fault handler on the CPU of the thread it serves (follow) or anywhere
    #[arg(long, value_name = "MODE", default_value_t = Placement::Follow, help_heading = KNOBS)]
    pub handler_placement: Placement,
    /// Keep idle CPUs polling through fault bursts: auto, on or off (:US, the window)
    #[arg(long, value_name = "MODE", default_value = "auto", help_heading = KNOBS)]
    pub idle_poll: String,

    /// The program and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

/// The engine's policy as the flag names it.
pub fn policy(policy: engine::LargeFolios) -> LargeFolios {
    match policy {
        engine::LargeFolios::Always => LargeFolios::Always,
        engine::LargeFolios::Sequential => LargeFolios::Sequential,
    }
}

/// A default that is a bool as the flag names it.
const fn on_off(on: bool) -> Switch {
    if on {
        Switch::On
    } else {
        Switch::Off
    }
}

/// The heading of the knobs.
const KNOBS: &str = "Knobs (docs/RUN.md explains each)";
