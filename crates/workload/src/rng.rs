//! A tiny deterministic generator: SplitMix64 (Steele, Lea, Flood 2014).
//!
//! The workload must produce the same accesses and the same page contents from the same
//! seed on every machine and every build, so it carries its own generator instead of a
//! crate whose stream may change between versions. SplitMix64 passes BigCrush, costs a few
//! cycles, and its finaliser [`mix64`] doubles as the hash that derives page contents from
//! (seed, page index, version).

/// SplitMix64's finaliser: a bijective 64-bit mix with full avalanche.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hashes a tuple of words into one (each word mixed in turn).
#[inline]
pub fn hash3(a: u64, b: u64, c: u64) -> u64 {
    mix64(mix64(mix64(a ^ 0x9e37_79b9_7f4a_7c15) ^ b) ^ c)
}

/// The SplitMix64 stream.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// A uniform float in [0, 1) with 53 random bits.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in [0, n) (Lemire's multiply-shift; bias below 2^-32 for the n
    /// this crate uses, which are page counts far below 2^32).
    ///
    /// # Panics
    /// If `n` is zero.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_is_the_published_splitmix64() {
        // Reference values of SplitMix64 seeded with 1234567 (from the public-domain C).
        let mut rng = SplitMix64::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = SplitMix64::new(7);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let v = rng.below(10);
            assert!(v < 10);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        let f = rng.next_f64();
        assert!((0.0..1.0).contains(&f));
    }
}
