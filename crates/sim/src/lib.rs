//! `uswap sim`: the real engine over simulated memory, driven from one seed, for finding
//! bugs and for studying policies (TigerBeetle's VOPR, FoundationDB's simulation).
//!
//! One `u64` seed drives everything: the options of the run (workload, operation mix,
//! engine configuration, fault sites), what every thread does, which thread runs at each
//! switch point, the latency of every I/O and every injected fault. A failure prints the
//! seed and the commit, and `uswap sim --seed N` replays it exactly: the same operations in
//! the same interleaving.
//!
//! ```text
//!   seed ─► options (swarm) ─► World: fault sites, latency ─► SimBackend ─┐
//!                                                                          ▼
//!   program threads ─► Generator ─► Op ─► Ctx::execute ─► SimSource ─► Engine
//!   reclaimer thread ─────────────────────────────────────────────────────►│
//!        every thread under one baton scheduler (sched.rs): one runs at a time,
//!        switching at backend I/O, folio waits and between operations
//!   checker: Model (last version of every page) + engine.check_invariants() when
//!            quiescent + liveness (deadlock, waits and steps bounded)
//! ```
//!
//! Modules, bottom up: [`rng`] (seeded streams, the digest), [`buggify`] (fault sites),
//! [`world`] (faults and latency shared by the simulated parts), [`backend`] (the swap
//! device that yields and misbehaves), [`source`] (simulated memory, the engine's page
//! source), [`content`] and [`model`] (the checker), [`sched`] (the baton scheduler),
//! [`ops`] (workloads), `exec` and [`run`] (one run), [`report`], [`trace`] (the trace
//! format shared with `uswap run --record`), [`study`] (sweeps and the policy comparison).
//!
//! What the checker guarantees: every read returns the last version written (exactly,
//! all 4096 bytes); a page may only be *lost loudly* (poisoned) in a run whose fault sites
//! can lose data, and then the program drops it; the engine's invariants hold at every
//! sampled quiescent point and at the end; no thread waits forever. See docs/TESTING.md for
//! reading the output and replaying a seed.

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod backend;
pub mod buggify;
pub mod content;
mod exec;
pub mod failure;
pub mod model;
pub mod ops;
pub mod options;
pub mod report;
pub mod rng;
pub mod run;
pub mod sched;
pub mod source;
pub mod study;
pub mod trace;
pub mod tree;
pub mod world;

pub use buggify::{Faults, Site};
pub use options::{FaultChoice, Overrides, SimOptions, WorkloadKind};
pub use report::{RunReport, COMMIT};
pub use run::run;

/// Runs seed `seed` with `overrides` (no trace written).
///
/// # Errors
/// A message for options that are out of range.
pub fn run_seed(seed: u64, overrides: &Overrides) -> Result<RunReport, String> {
    let options = SimOptions::draw(seed, overrides)?;
    Ok(run(&options, None))
}
