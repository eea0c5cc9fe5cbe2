//! The access patterns: which page each access touches.
//!
//! ```text
//!   seq      fill 0..n, then `sweeps` passes 0,1,2,...,n-1   (streaming, readahead-friendly)
//!   uniform  fill, then `ops` pages drawn uniformly           (no locality: worst case)
//!   zipf     fill, then `ops` ranks drawn Zipf(0.99), each    (hot/cold: a cache, a KV store)
//!            rank scattered to a page by a fixed bijection
//!   zero     fill only 10% of the pages with data; of the other 90%, half are written with
//!            zeros and half never written; then `ops` uniform accesses (zero-page handling)
//! ```
//!
//! Zipf ranks are scattered over the pages (rank r -> page (r * P) mod n for a prime P
//! coprime with n) so that the hot set is not one contiguous run: contiguity would let
//! readahead and large folios hide the cost of the pattern.

use crate::rng::{hash3, SplitMix64};
use crate::zipf::Zipf;
use serde::{Deserialize, Serialize};

/// YCSB's Zipf constant, used by the `zipf` pattern.
pub const ZIPF_THETA: f64 = 0.99;
/// In the `zero` pattern, one page in this many holds data.
pub const ZERO_PATTERN_DATA_ONE_IN: u64 = 10;
/// Salt of the hash that decides each page's kind in the `zero` pattern.
const ZERO_KIND_SALT: u64 = 0x7a65_726f; // "zero"

/// An access pattern (the `--pattern` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Sequential fill, then sweeps over all pages in order.
    Seq,
    /// Uniformly random page touches.
    Uniform,
    /// Zipf(0.99) hot/cold touches.
    Zipf,
    /// Mostly-zero pages (90% never written or written with zeros), uniform touches.
    Zero,
}

impl Pattern {
    /// The pattern's name as the command line and the JSON spell it.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Uniform => "uniform",
            Pattern::Zipf => "zipf",
            Pattern::Zero => "zero",
        }
    }
}

/// What a page holds over the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// Realistic data, a new version at every write.
    Data,
    /// Always zero; written with zeros during the fill.
    ZeroWritten,
    /// Always zero; not touched by the fill (fresh anonymous memory).
    ZeroUntouched,
}

/// The kind of `page` under `pattern` and `seed`: only the `zero` pattern has zero pages.
pub fn page_kind(pattern: Pattern, seed: u64, page: u64) -> PageKind {
    if pattern != Pattern::Zero {
        return PageKind::Data;
    }
    let hash = hash3(seed, page, ZERO_KIND_SALT);
    if hash.is_multiple_of(ZERO_PATTERN_DATA_ONE_IN) {
        PageKind::Data
    } else if (hash >> 32) & 1 == 0 {
        PageKind::ZeroWritten
    } else {
        PageKind::ZeroUntouched
    }
}

/// The stream of pages the run phase touches.
#[derive(Debug, Clone)]
pub struct PageStream {
    pattern: Pattern,
    pages: u64,
    next_seq: u64,
    zipf: Option<Zipf>,
    scatter: u64,
}

impl PageStream {
    /// The stream for `pattern` over `pages` pages.
    ///
    /// # Panics
    /// If `pages` is zero.
    pub fn new(pattern: Pattern, pages: u64) -> Self {
        assert!(pages > 0, "no pages");
        let zipf = (pattern == Pattern::Zipf).then(|| Zipf::new(pages, ZIPF_THETA));
        PageStream { pattern, pages, next_seq: 0, zipf, scatter: coprime_prime(pages) }
    }

    /// The next page to touch.
    #[inline]
    pub fn next_page(&mut self, rng: &mut SplitMix64) -> u64 {
        match self.pattern {
            Pattern::Seq => {
                let page = self.next_seq;
                self.next_seq = (self.next_seq + 1) % self.pages;
                page
            }
            Pattern::Uniform | Pattern::Zero => rng.below(self.pages),
            Pattern::Zipf => {
                let rank = self.zipf.as_ref().map_or(1, |z| z.sample(rng)) - 1;
                scatter(rank, self.scatter, self.pages)
            }
        }
    }
}

/// Rank r -> page (r * prime) mod n: a bijection on 0..n because gcd(prime, n) = 1.
#[inline]
pub fn scatter(rank: u64, prime: u64, pages: u64) -> u64 {
    ((u128::from(rank) * u128::from(prime)) % u128::from(pages)) as u64
}

/// A prime that does not divide `n` (so it is coprime with n).
pub fn coprime_prime(n: u64) -> u64 {
    const PRIMES: [u64; 3] = [1_000_003, 1_000_033, 1_000_037];
    PRIMES.into_iter().find(|p| !n.is_multiple_of(*p)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_is_a_bijection() {
        for pages in [1u64, 7, 1000, 4096, 1_000_003 * 2] {
            let prime = coprime_prime(pages);
            let sample = pages.min(5000);
            let mut seen = std::collections::HashSet::new();
            for rank in 0..sample {
                let page = scatter(rank, prime, pages);
                assert!(page < pages);
                assert!(seen.insert(page), "rank {rank} collides for {pages} pages");
            }
        }
    }

    #[test]
    fn seq_wraps_around() {
        let mut stream = PageStream::new(Pattern::Seq, 3);
        let mut rng = SplitMix64::new(0);
        let pages: Vec<u64> = (0..7).map(|_| stream.next_page(&mut rng)).collect();
        assert_eq!(pages, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn zero_pattern_is_mostly_zero_pages() {
        let n = 20_000;
        let kinds: Vec<PageKind> = (0..n).map(|p| page_kind(Pattern::Zero, 9, p)).collect();
        let data = kinds.iter().filter(|&&k| k == PageKind::Data).count() as f64 / n as f64;
        let untouched =
            kinds.iter().filter(|&&k| k == PageKind::ZeroUntouched).count() as f64 / n as f64;
        assert!((0.08..0.12).contains(&data), "data share {data}");
        assert!((0.40..0.50).contains(&untouched), "untouched share {untouched}");
        assert_eq!(page_kind(Pattern::Uniform, 9, 5), PageKind::Data);
    }

    #[test]
    fn streams_stay_in_range() {
        let mut rng = SplitMix64::new(1);
        for pattern in [Pattern::Seq, Pattern::Uniform, Pattern::Zipf, Pattern::Zero] {
            let mut stream = PageStream::new(pattern, 333);
            assert!((0..10_000).all(|_| stream.next_page(&mut rng) < 333), "{pattern:?}");
        }
    }
}
