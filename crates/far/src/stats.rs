//! The far tier's counters, and a latency histogram of its requests.
//!
//! Counters are declared once, in a `counters::table!` (`far_*` in the stats file), and
//! bumped where things happen; the repairer refreshes the per-server gauges
//! (copies held, servers up) once a second. [`FarStats::each`] hands everything out by
//! those names, which `uswap stat` and `uswap run`'s summary read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Buckets of the latency histogram: four per power of two of nanoseconds, up to 2^40 ns.
const BUCKETS: usize = 160;

/// Request latencies, in nanoseconds, with about 19% resolution.
#[derive(Debug)]
pub struct Latency {
    buckets: [AtomicU64; BUCKETS],
}

impl Default for Latency {
    fn default() -> Self {
        Latency { buckets: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

fn bucket_of(ns: u64) -> usize {
    let ns = ns.max(1);
    let log = 63 - ns.leading_zeros() as usize;
    let frac = if log >= 2 { ((ns >> (log - 2)) & 3) as usize } else { 0 };
    (log * 4 + frac).min(BUCKETS - 1)
}

fn bucket_floor(bucket: usize) -> u64 {
    let (log, frac) = (bucket / 4, (bucket % 4) as u64);
    if log < 2 {
        1 << log
    } else {
        (1u64 << log) + (frac << (log - 2))
    }
}

impl Latency {
    /// Records one request of `ns`.
    pub fn record(&self, ns: u64) {
        self.buckets[bucket_of(ns)].fetch_add(1, Relaxed);
    }

    /// Requests recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Relaxed)).sum()
    }

    /// The `q` quantile (0..=1), the lower edge of its bucket; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((total as f64 * q).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Relaxed);
            if seen >= rank {
                return bucket_floor(i);
            }
        }
        bucket_floor(BUCKETS - 1)
    }
}

/// Per server.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// 1 while up.
    pub up: AtomicU64,
    /// Copies it holds (gauge, from the slot table).
    pub copies: AtomicU64,
    /// Times it was marked down (a failed or timed-out request, a failed probe).
    pub down_events: AtomicU64,
    /// Times it came back with another identity (restarted: its copies gone).
    pub restarts: AtomicU64,
}

counters::table! {
    /// The far tier's event counters (in the stats file as `far_*`; a counter per failure
    /// and fallback).
    pub(crate) struct Counters;
    /// A snapshot of the far tier's counters.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct FarCounts {
        prefix "far_";
        counters {
            /// Pipelined requests sent (one per server per batch).
            requests,
            /// Requests that failed (connection error, timeout, protocol error).
            request_errors,
            /// Pages written (staged).
            pages_written,
            /// Pages stored (their copies committed).
            pages_flushed,
            /// Copies stored by the flusher.
            copies_written,
            /// Pages read.
            pages_read,
            /// Of the pages read, those served from the write-behind buffer.
            pages_read_staged,
            /// Pages whose read moved on from a holder that failed or held no good copy.
            failovers,
            /// Pages read from a replica: a holder other than the slot's first-ranked server
            /// (which was down, or had lost its copy).
            replica_reads,
            /// Copies found missing, stale or corrupt on a server that answered.
            bad_copies,
            /// Copies re-created by the repairer.
            rereplications,
            /// Pages no server returned good (each an error: SIGBUS on access).
            lost_pages,
            /// Flushes that could not store every copy and were retried.
            flush_retries,
            /// Sets a server refused (an error line in a flush's pipeline: out of memory,
            /// ...).
            sets_refused,
            /// Flushes whose copies left before the run's ledger had an entry for them (the
            /// process had not joined its run, or the ledger was full): `uswap run` may not
            /// delete them at the end.
            ledger_misses,
            /// Writes refused: the write-behind buffer stayed full (no server took writes).
            write_refused,
            /// Full scans of the slot table for a server's copies (down or restarted).
            scans,
            /// Forks that went on before every thread of the tier was at rest (one was
            /// stuck on a server past the timeout): the child may find a lock that thread
            /// held.
            fork_unrested,
        }
    }
}

/// Everything counted (module essay).
#[derive(Debug, Default)]
pub struct FarStats {
    /// The event counters.
    pub(crate) counters: Counters,
    /// Latency of every request that completed.
    pub latency: Latency,
    /// Per server, in the order given.
    pub servers: Vec<ServerStats>,
}

impl FarStats {
    pub(crate) fn new(servers: usize) -> FarStats {
        FarStats {
            servers: (0..servers).map(|_| ServerStats::default()).collect(),
            ..Default::default()
        }
    }

    /// Bumps a counter.
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// The counters now.
    pub fn counts(&self) -> FarCounts {
        let mut counts = FarCounts::default();
        self.counters.snapshot_into(&mut counts);
        counts
    }

    /// Hands out every figure by its stats-file name; `addr_of(i)` is server `i`'s address
    /// as a number (IPv4 << 16 | port, 0 for IPv6), so `uswap stat` can name it.
    pub fn each(&self, addr_of: &dyn Fn(usize) -> u64, out: &mut dyn FnMut(&'static str, u64)) {
        let load = |c: &AtomicU64| c.load(Relaxed);
        out("far_servers", self.servers.len() as u64);
        out("far_servers_up", self.servers.iter().map(|s| load(&s.up)).sum());
        let copies: u64 = self.servers.iter().map(|s| load(&s.copies)).sum();
        out("far_copies", copies);
        out("far_bytes_held", copies * crate::ITEM_BYTES as u64);
        self.counters.each(&mut *out);
        out("far_latency_p50_ns", self.latency.quantile(0.5));
        out("far_latency_p99_ns", self.latency.quantile(0.99));
        out("far_restarts", self.servers.iter().map(|s| load(&s.restarts)).sum());
        out("far_down_events", self.servers.iter().map(|s| load(&s.down_events)).sum());
        for (i, s) in self.servers.iter().enumerate().take(SERVER_NAMES.len()) {
            let [up, bytes, addr] = SERVER_NAMES[i];
            out(up, load(&s.up));
            out(bytes, load(&s.copies) * crate::ITEM_BYTES as u64);
            out(addr, addr_of(i));
        }
    }
}

/// The stats-file names of the first servers' figures (names are static strings).
const SERVER_NAMES: [[&str; 3]; 8] = [
    ["far_server0_up", "far_server0_bytes", "far_server0_addr"],
    ["far_server1_up", "far_server1_bytes", "far_server1_addr"],
    ["far_server2_up", "far_server2_bytes", "far_server2_addr"],
    ["far_server3_up", "far_server3_bytes", "far_server3_addr"],
    ["far_server4_up", "far_server4_bytes", "far_server4_addr"],
    ["far_server5_up", "far_server5_bytes", "far_server5_addr"],
    ["far_server6_up", "far_server6_bytes", "far_server6_addr"],
    ["far_server7_up", "far_server7_bytes", "far_server7_addr"],
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_fall_in_the_right_bucket() {
        let l = Latency::default();
        assert_eq!(l.quantile(0.5), 0);
        for ns in [30_000u64; 98] {
            l.record(ns);
        }
        l.record(1_000_000);
        l.record(2_000_000);
        let p50 = l.quantile(0.5) as f64;
        assert!((p50 - 30_000.0).abs() / 30_000.0 < 0.25, "{p50}");
        let p99 = l.quantile(0.99) as f64;
        assert!(p99 >= 786_432.0, "{p99}");
        for ns in [1, 2, 3, 4, 5, 7, 8, 1000, 1 << 39] {
            let b = bucket_of(ns);
            // Below 4 ns a power of two is one bucket (the others stay empty).
            let next = if b < 8 { (b / 4 + 1) * 4 } else { b + 1 };
            assert!(bucket_floor(b) <= ns && ns < bucket_floor(next), "{ns}");
        }
    }
}
