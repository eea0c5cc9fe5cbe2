//! What `uswap run` and its LD_PRELOAD shim (`libuswap_preload.so`) share.
//!
//! ```text
//!   uswap run                                   the program, with the shim loaded
//!   ---------                                   -----------------------------------
//!   parses flags, checks everything       env   constructor reads [`env::RunConfig`]
//!   makes a private run directory  ----------->  starts the engine, manages memory
//!   spawns CMD, waits, samples VmRSS            every second: <run dir>/live-<pid>
//!   prints [`stats::Summary`] lines  <--------  at exit / exec: <run dir>/final-<pid>-<ns>
//!   uswap stat PID reads the same files          (the stats file format, [`stats`])
//! ```
//!
//! Nothing here allocates in a way the shim could not afford (it runs inside the managed
//! program, on its own allocator) and nothing makes system calls: the crate is plain data
//! and text, shared so both sides agree on names and formats.
//!
//! Modules: [`cpus`] (CPU lists), [`env`] (the environment protocol), [`proto`] (the
//! control protocol between the broker and its members), [`settings`] (the knobs' typed
//! values), [`share`] (the broker's policy: one budget divided among a tree's engines),
//! [`size`] (sizes as users write them),
//! [`hist`] (the fault-latency histogram), [`stats`] (the stats file, its parser and the
//! summary figures), [`trace`] (the simulator's trace format, written by `--record`).

#![deny(unsafe_code)]

pub mod auto;
pub mod cpus;
pub mod env;
pub mod hist;
pub mod proto;
pub mod settings;
pub mod share;
pub mod size;
pub mod stats;
pub mod trace;

pub use env::RunConfig;
pub use hist::{AtomicHistogram, Histogram};
pub use size::{format_size, parse_size, SizeError};
pub use stats::{FarSummary, StatsFile, Summary};
