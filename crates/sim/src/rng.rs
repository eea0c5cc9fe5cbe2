//! The simulator's random numbers: one seed, split into named streams.
//!
//! Everything a run does is drawn from its `u64` seed, so the seed replays it. The draws
//! are split into independent streams by purpose (options, scheduler, faults, latency, each
//! thread's workload): a stream is `SplitMix64(mix64(seed ^ hash(label)))`. Splitting keeps
//! unrelated choices apart, so, for example, turning a fault site on does not change which
//! pages a thread touches, and two runs that differ only in the allocation policy issue the
//! same operations.
//!
//! The generator is the workload crate's SplitMix64: its own code, so the stream can never
//! change under a dependency update (a seed recorded today must replay next year).

use workload::rng::{mix64, SplitMix64};

/// A stream of random numbers.
#[derive(Debug, Clone)]
pub struct SimRng {
    inner: SplitMix64,
}

/// Hashes a label into a word (FNV-1a, then mixed).
fn label_hash(label: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in label.bytes() {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    mix64(h)
}

impl SimRng {
    /// The stream named `label` of run `seed`.
    pub fn stream(seed: u64, label: &str) -> SimRng {
        SimRng { inner: SplitMix64::new(mix64(seed ^ label_hash(label))) }
    }

    /// The stream named `label`, number `index` (one per thread).
    pub fn stream_n(seed: u64, label: &str, index: u64) -> SimRng {
        let key = mix64(seed ^ label_hash(label)) ^ mix64(index.wrapping_add(1));
        SimRng { inner: SplitMix64::new(mix64(key)) }
    }

    /// 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// Uniform in `[0, n)`.
    ///
    /// # Panics
    /// If `n` is zero.
    pub fn below(&mut self, n: u64) -> u64 {
        self.inner.below(n)
    }

    /// Uniform in `[lo, hi]`.
    ///
    /// # Panics
    /// If `hi < lo`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(hi >= lo, "empty range {lo}..={hi}");
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        self.inner.next_f64()
    }

    /// True with probability `parts_per_million / 1e6`.
    pub fn chance_ppm(&mut self, parts_per_million: u32) -> bool {
        self.below(1_000_000) < u64::from(parts_per_million)
    }

    /// True with probability `percent / 100`.
    pub fn percent(&mut self, percent: u32) -> bool {
        self.below(100) < u64::from(percent)
    }

    /// One element of a non-empty slice.
    ///
    /// # Panics
    /// If `items` is empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// The underlying generator (for the workload crate's Zipf sampler).
    pub fn splitmix(&mut self) -> &mut SplitMix64 {
        &mut self.inner
    }
}

/// Folds words into a running 64-bit digest (order matters): the fingerprint of a run's
/// operation log and final counters that the replay test compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest(pub u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0x6a09_e667_f3bc_c908)
    }
}

impl Digest {
    /// Folds in one word.
    pub fn add(&mut self, word: u64) {
        self.0 = mix64(self.0.rotate_left(7) ^ word.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }

    /// Folds in several words.
    pub fn add_all(&mut self, words: &[u64]) {
        for &word in words {
            self.add(word);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_stable_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| SimRng::stream(7, "sched").next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]), "a stream depends only on seed and label");
        let mut sched = SimRng::stream(7, "sched");
        let mut faults = SimRng::stream(7, "faults");
        assert_ne!(sched.next_u64(), faults.next_u64());
        let mut t0 = SimRng::stream_n(7, "thread", 0);
        let mut t1 = SimRng::stream_n(7, "thread", 1);
        assert_ne!(t0.next_u64(), t1.next_u64());
    }

    #[test]
    fn range_and_chance_stay_in_bounds() {
        let mut rng = SimRng::stream(1, "t");
        for _ in 0..10_000 {
            let x = rng.range(3, 5);
            assert!((3..=5).contains(&x));
        }
        assert!(!(0..1000).any(|_| rng.chance_ppm(0)));
        assert!((0..1000).all(|_| rng.chance_ppm(1_000_000)));
    }

    #[test]
    fn digest_depends_on_order() {
        let (mut a, mut b) = (Digest::default(), Digest::default());
        a.add_all(&[1, 2]);
        b.add_all(&[2, 1]);
        assert_ne!(a, b);
    }
}
