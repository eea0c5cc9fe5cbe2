//! The fault-latency histogram: log-linear buckets, 16 per power of two, so a quantile is
//! known within 1/16 (6%) of its value from 1 ns to centuries, in 8 KiB of counters.
//!
//! ```text
//!   value v < 16:        bucket v                         (exact)
//!   value v >= 16:       e = floor(log2 v) >= 4, s = the 4 bits below the top one
//!                        bucket 16 + 16 (e - 4) + s       (v in [(16+s) 2^(e-4), (17+s) 2^(e-4)))
//! ```
//!
//! [`AtomicHistogram::record`] is one relaxed `fetch_add` with no allocation and no lock:
//! the shim records every fault from the handler thread with it. Snapshots
//! ([`Histogram`]) add (images of one program, or samples over time) and answer quantiles.
//! The text form is `index:count` pairs for the non-empty buckets.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Buckets (values up to 2^64 - 1 land in bucket 16 + 16 * 59 + 15 = 975).
pub const BUCKETS: usize = 976;

/// The bucket of `value`.
pub fn bucket_of(value: u64) -> usize {
    if value < 16 {
        return value as usize;
    }
    let e = 63 - value.leading_zeros() as usize;
    let s = ((value >> (e - 4)) & 15) as usize;
    16 + 16 * (e - 4) + s
}

/// The smallest value of bucket `index`.
pub fn bucket_low(index: usize) -> u64 {
    if index < 16 {
        return index as u64;
    }
    let (e, s) = ((index - 16) / 16 + 4, (index - 16) % 16);
    (16 + s as u64) << (e - 4)
}

/// The middle of bucket `index` (what a quantile reports).
pub fn bucket_mid(index: usize) -> u64 {
    if index < 16 {
        return index as u64;
    }
    let e = (index - 16) / 16 + 4;
    bucket_low(index) + ((1u64 << (e - 4)) >> 1)
}

/// Counters any thread can add to (module essay).
#[derive(Debug)]
pub struct AtomicHistogram {
    counts: [AtomicU64; BUCKETS],
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        AtomicHistogram::new()
    }
}

impl AtomicHistogram {
    /// An empty histogram (usable in a `static`).
    pub const fn new() -> AtomicHistogram {
        AtomicHistogram { counts: [const { AtomicU64::new(0) }; BUCKETS] }
    }

    /// Counts one value. Lock-free, allocation-free.
    pub fn record(&self, value: u64) {
        self.counts[bucket_of(value)].fetch_add(1, Relaxed);
    }

    /// Every count back to zero (a forked child's histogram counts its own faults).
    pub fn reset(&self) {
        self.counts.iter().for_each(|c| c.store(0, Relaxed));
    }

    /// A copy of the counts (each exact; not a consistent cut while others record).
    pub fn snapshot(&self) -> Histogram {
        Histogram { counts: self.counts.iter().map(|c| c.load(Relaxed)).collect() }
    }
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; BUCKETS] }
    }
}

impl Histogram {
    /// Values counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Counts one value (tests, and the summary's own use).
    pub fn record(&mut self, value: u64) {
        self.counts[bucket_of(value)] += 1;
    }

    /// The value at quantile `q` (0.0..=1.0), within 1/16; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(bucket_mid(index));
            }
        }
        None
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }

    /// The text form: `index:count` for every non-empty bucket, space-separated.
    pub fn to_text(&self) -> String {
        let pairs: Vec<String> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| format!("{i}:{c}"))
            .collect();
        pairs.join(" ")
    }

    /// Parses [`Histogram::to_text`]; `None` for malformed text or a bucket out of range.
    pub fn from_text(text: &str) -> Option<Histogram> {
        let mut hist = Histogram::default();
        for pair in text.split_whitespace() {
            let (index, count) = pair.split_once(':')?;
            let (index, count): (usize, u64) = (index.parse().ok()?, count.parse().ok()?);
            *hist.counts.get_mut(index)? += count;
        }
        Some(hist)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(15), 15);
        assert_eq!(bucket_of(16), 16);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        for index in 1..BUCKETS {
            assert!(bucket_low(index) > bucket_low(index - 1), "{index}");
            assert_eq!(bucket_of(bucket_low(index)), index, "{index}");
            assert_eq!(bucket_of(bucket_low(index) - 1), index - 1, "{index}");
        }
    }

    #[test]
    fn quantiles_are_within_a_sixteenth() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        for (q, exact) in [(0.5, 5_000_000u64), (0.99, 9_900_000), (1.0, 10_000_000)] {
            let got = h.quantile(q).unwrap();
            let error = got.abs_diff(exact) as f64 / exact as f64;
            assert!(error <= 1.0 / 16.0, "q {q}: {got} vs {exact}");
        }
    }

    #[test]
    fn text_round_trips_and_histograms_add() {
        let atomic = AtomicHistogram::new();
        for v in [3, 100, 100, 12_345, 7_000_000] {
            atomic.record(v);
        }
        let h = atomic.snapshot();
        assert_eq!(h.total(), 5);
        let back = Histogram::from_text(&h.to_text()).unwrap();
        assert_eq!(back, h);
        let mut sum = back.clone();
        sum.add(&h);
        assert_eq!(sum.total(), 10);
        assert_eq!(Histogram::from_text("5:1 9999:1"), None);
        assert_eq!(Histogram::from_text("x"), None);
    }
}
