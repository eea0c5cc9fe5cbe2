//! The uswap side of `uswap bench compare`: the same workload under `uswap run`.
//!
//! NOT AVAILABLE YET: `uswap run` (the LD_PRELOAD engine) is being built by other
//! engineers. Until it exists, [`run`] reports [`Side::Skipped`] with
//! [`NOT_AVAILABLE`], every `uswap_*` figure of the report is null, and the report says so
//! in a note. Nothing here pretends to measure.
//!
//! How to fill it in (the kernel side in `kernel_side.rs` is the model):
//!
//! 1. Build the workload's command with [`WorkloadSpec::command`] (or, for `redis`, the
//!    server command in `redis.rs`) and wrap it: `uswap run --budget <budget_bytes> --
//!    <program> <args>`. Do it in the [`Placement::prepare`] hook, which sees every
//!    process command before it is spawned.
//! 2. Give a [`MemoryProbe`](super::runner::MemoryProbe) that reads the run's memory:
//!    `charged_bytes` = the budgeted memory (resident managed pages + staging + pool, as
//!    uswap's own stats count it against the budget), `outside_bytes` = anything uswap
//!    keeps outside the budget (should be 0), `compressed_bytes` / `original_bytes` from
//!    the pool's stats.
//! 3. Call [`WorkloadSpec::execute`] with that placement and turn the
//!    [`Measured`](super::workloads::Measured) into a [`RunOutcome`] with its peaks.
//!    The fault-latency proxy needs nothing new: the workload measures it itself.
//!
//! Everything else (tables, JSON `uswap_s`, `ratio_vs_zram_lz4`, charts) already reads
//! [`Side::Ran`] from here.

#[allow(unused_imports)] // Named by the documentation above.
use super::outcome::RunOutcome;
use super::outcome::Side;
#[allow(unused_imports)] // Named by the documentation above.
use super::workloads::Placement;
use super::workloads::{RunContext, WorkloadSpec};

/// The note every report carries until the uswap side exists.
pub const NOT_AVAILABLE: &str =
    "the uswap side is not available yet (`uswap run` does not exist): uswap figures are null";

/// Runs `spec` under `uswap run` with `ctx.budget_bytes` of budget.
///
/// Context: may block for the whole run (minutes); polls the interrupt flag like the
/// kernel side. Today: always [`Side::Skipped`].
pub fn run(spec: &WorkloadSpec, ctx: &RunContext) -> Side {
    let _ = (spec, ctx);
    Side::Skipped(NOT_AVAILABLE.to_string())
}
