//! The simulated world every part of a run shares: which fault sites are active, the random
//! streams that decide when they fire and how long I/O takes, and the device's latency.
//!
//! Only the thread holding the baton touches it, so the order of draws (and so every fault
//! and every latency) is a function of the seed. Its locks are leaves: taken to draw a
//! number and released before anything else happens, never held across a yield.

use crate::buggify::{Faults, Site};
use crate::rng::SimRng;
use parking_lot::Mutex;

/// How long the simulated swap device takes, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// Fixed cost of one read.
    pub read_ns: u64,
    /// Fixed cost of one write.
    pub write_ns: u64,
    /// Added per page moved.
    pub per_page_ns: u64,
    /// Chance per million that one request is a slow outlier (20x).
    pub outlier_ppm: u32,
}

impl Latency {
    /// An NVMe-like device: reads ~10 us, writes ~20 us.
    pub const FAST: Latency =
        Latency { read_ns: 10_000, write_ns: 20_000, per_page_ns: 1_000, outlier_ppm: 1_000 };
    /// A slow, jittery device: reads ~100 us, writes ~300 us, more outliers.
    pub const SLOW: Latency =
        Latency { read_ns: 100_000, write_ns: 300_000, per_page_ns: 5_000, outlier_ppm: 20_000 };
}

/// The shared simulated world of one run (see the module documentation).
#[derive(Debug)]
pub struct World {
    /// The run's fault sites.
    pub faults: Faults,
    /// The device's latency.
    pub latency: Latency,
    /// Decides when sites fire (and how: torn lengths, flipped bits).
    fault_rng: Mutex<SimRng>,
    /// Draws I/O latencies.
    latency_rng: Mutex<SimRng>,
}

impl World {
    /// The world of run `seed`.
    pub fn new(seed: u64, faults: Faults, latency: Latency) -> World {
        World {
            faults,
            latency,
            fault_rng: Mutex::new(SimRng::stream(seed, "faults.fire")),
            latency_rng: Mutex::new(SimRng::stream(seed, "latency")),
        }
    }

    /// Does `site` fire now?
    pub fn fires(&self, site: Site) -> bool {
        // Skip the lock for an inactive site: the common case.
        self.faults.active(site) && self.faults.fires(site, &mut self.fault_rng.lock())
    }

    /// A number in `[0, n)` from the fault stream (where a torn write stops, which bit
    /// flips).
    pub fn fault_below(&self, n: u64) -> u64 {
        self.fault_rng.lock().below(n)
    }

    /// The latency of one request of `pages` pages.
    pub fn io_latency_ns(&self, write: bool, pages: u64) -> u64 {
        let l = self.latency;
        let base = if write { l.write_ns } else { l.read_ns };
        let mut rng = self.latency_rng.lock();
        // Uniform jitter of +-50% around the base, plus the transfer.
        let jittered = base / 2 + rng.below(base.max(1));
        let total = jittered + l.per_page_ns * pages;
        if rng.chance_ppm(l.outlier_ppm) {
            total * 20
        } else {
            total
        }
    }

    /// CPU time of one program operation between yields: 0.5 to 2 us.
    pub fn op_cost_ns(&self) -> u64 {
        self.latency_rng.lock().range(500, 2_000)
    }
}
