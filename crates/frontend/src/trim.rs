//! Giving the heap's free memory back to the kernel, when it inflates the resident set.
//!
//! The engine allocates and frees a folio buffer for every page-out and page-in, and the
//! pool a 4 KiB buffer per zspage page, from several threads' malloc arenas. glibc keeps
//! freed chunks in the middle of an arena resident, so under swap traffic the resident set
//! grows by the churn, not by anything live: the 1 GiB stress test measured up to 45 MiB of
//! free heap still resident at a 256 MiB budget (tests/stress.rs, docs/TESTING.md).
//! `malloc_trim(0)` returns it, but walks every arena's free chunks under the arena's lock:
//! 2 ms on that 60 MiB heap, so trimming on a timer either costs too much (8% of the
//! handler's time at every 20 ms) or comes too late (the bound failed at every 200 ms).
//!
//! So the trigger is the excess itself:
//!
//! ```text
//!   every CHECK_INTERVAL:   excess = anonymous RSS (statm) - bytes the engine charges
//!   trim when               excess > excess after the last trim + slack (budget / 64)
//!                           and the last trim is DUTY x its duration ago (<= 10% of time)
//! ```
//!
//! The baseline `excess after the last trim` is what stays after a trim: the program's own
//! memory and the engine's metadata, which trimming cannot return; it follows the excess
//! down when the program frees memory, so a shrinking program is not trimmed for nothing.
//!
//! Context: called by the handler thread only, in normal mode (never while a fork holds
//! the allocator's locks). Allocates a little (reading /proc/self/statm).

use engine::Engine;
use std::time::{Duration, Instant};
use uffd::sys::process;

/// How often the excess is measured (a statm read and an engine gauge snapshot).
pub const CHECK_INTERVAL: Duration = Duration::from_millis(10);
/// A trim may take at most 1/`DUTY` of the handler's time.
const DUTY: u32 = 10;

/// The trimmer's state (module essay).
#[derive(Debug)]
pub struct Trimmer {
    last_check: Instant,
    last_trim: Instant,
    next_allowed: Duration,
    excess_after_trim: u64,
    slack_bytes: u64,
    /// Trims done and their total time.
    pub trims: u64,
    /// Nanoseconds spent in `malloc_trim`.
    pub trim_ns: u64,
}

impl Trimmer {
    /// A trimmer for an engine of `budget_bytes`.
    pub fn new(budget_bytes: u64) -> Trimmer {
        Trimmer {
            last_check: Instant::now(),
            last_trim: Instant::now(),
            next_allowed: Duration::ZERO,
            excess_after_trim: 0,
            slack_bytes: (budget_bytes / 64).max(1 << 20),
            trims: 0,
            trim_ns: 0,
        }
    }

    /// Measures the excess if it is time, and trims if it grew (module essay). Returns
    /// whether it trimmed.
    pub fn tick(&mut self, engine: &Engine) -> bool {
        if self.last_check.elapsed() < CHECK_INTERVAL {
            return false;
        }
        self.last_check = Instant::now();
        let Some(anon) = anon_rss_bytes() else { return false };
        let excess = anon.saturating_sub(engine.charged_bytes());
        self.excess_after_trim = self.excess_after_trim.min(excess);
        let grown = excess > self.excess_after_trim + self.slack_bytes;
        if !grown || self.last_trim.elapsed() < self.next_allowed {
            return false;
        }
        let started = Instant::now();
        process::malloc_trim();
        let took = started.elapsed();
        self.last_trim = Instant::now();
        self.next_allowed = took * DUTY;
        self.trims += 1;
        self.trim_ns += took.as_nanos() as u64;
        let after = anon_rss_bytes().unwrap_or(anon);
        self.excess_after_trim = after.saturating_sub(engine.charged_bytes());
        true
    }
}

/// The registry's name for the statm descriptor.
static STATM: fds::Kind = fds::Kind {
    what: "/proc/self/statm descriptor",
    if_lost: "the heap's free memory is no longer given back",
    keep: false,
};

/// Resident anonymous memory from /proc/self/statm (resident - shared, in pages), kept
/// open out of the program's way (crate `fds`): a descriptor opened for each read would
/// take a number the program had just freed.
fn anon_rss_bytes() -> Option<u64> {
    static FILE: fds::OwnProcFile = fds::OwnProcFile::new(c"/proc/self/statm", &STATM);
    let mut text = Vec::with_capacity(256);
    FILE.read(&mut text).ok()?;
    let statm = String::from_utf8_lossy(&text);
    let mut fields = statm.split_whitespace().skip(1).map(|f| f.parse::<u64>().ok());
    let resident = fields.next()??;
    let shared = fields.next()??;
    Some(resident.saturating_sub(shared) * uffd::PAGE_SIZE as u64)
}
