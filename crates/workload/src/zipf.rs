//! Zipf-distributed ranks by rejection-inversion (Hörmann and Derflinger, 1996).
//!
//! The hot/cold pattern of a cache or a key-value store: rank k in 1..=n is drawn with
//! probability proportional to 1 / k^theta. With theta = 0.99 (YCSB's constant) and n = 2^18
//! pages, the top 1% of pages take about 60% of the accesses.
//!
//! Why rejection-inversion and not a precomputed CDF: the CDF table would cost 8 bytes per
//! page (2 MiB for 1 GiB of pages) inside the measured process, and a binary search per
//! draw; rejection-inversion needs O(1) memory and about 1.1 draws of a uniform per
//! sample, independent of n.
//!
//! The method: let h(x) = x^-theta and H(x) its integral, `((x^(1-theta)) - 1) / (1 - theta)`
//! (computed with `expm1`/`ln_1p` so theta near 1 stays exact). Draw u uniformly in
//! [H(n + 1/2), H(3/2) - 1], invert to x = H^-1(u), round to the integer k nearest x, and
//! accept k when x is close enough to k (`k - x <= s`, a precomputed constant) or when u
//! falls under the bar of k (`u >= H(k + 1/2) - h(k)`). The accepted k has exactly the Zipf
//! distribution; the test in this module checks it against the exact probabilities.

use crate::rng::SplitMix64;

/// A sampler of ranks 1..=n with P(k) proportional to k^-theta.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    theta: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

impl Zipf {
    /// A sampler over 1..=`n` with exponent `theta`.
    ///
    /// # Panics
    /// If `n` is zero or `theta` is not positive and finite.
    pub fn new(n: u64, theta: f64) -> Self {
        assert!(n > 0, "Zipf over an empty range");
        assert!(theta > 0.0 && theta.is_finite(), "Zipf exponent {theta}");
        let mut zipf = Zipf { n: n as f64, theta, h_integral_x1: 0.0, h_integral_n: 0.0, s: 0.0 };
        zipf.h_integral_x1 = zipf.h_integral(1.5) - 1.0;
        zipf.h_integral_n = zipf.h_integral(zipf.n + 0.5);
        zipf.s = 2.0 - zipf.h_integral_inverse(zipf.h_integral(2.5) - zipf.h(2.0));
        zipf
    }

    /// Draws one rank in 1..=n. Bounded: the acceptance probability is above 1/2 for every
    /// theta, so the loop ends after a handful of tries with overwhelming probability; it is
    /// cut at 1000 tries (probability below 2^-1000) and then returns rank 1.
    pub fn sample(&self, rng: &mut SplitMix64) -> u64 {
        for _ in 0..1000 {
            let u = self.h_integral_n + rng.next_f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
        1
    }

    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// H(x) = (x^(1-theta) - 1) / (1 - theta), continuous at theta = 1 (where it is ln x).
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.theta) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.theta)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// ln(1 + x) / x, with its limit 1 at x = 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1) / x, with its limit 1 at x = 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chi-square of `draws` samples against the exact Zipf probabilities.
    fn chi_square(n: u64, theta: f64, draws: u64, seed: u64) -> (f64, usize) {
        let zipf = Zipf::new(n, theta);
        let mut rng = SplitMix64::new(seed);
        let mut counts = vec![0u64; n as usize + 1];
        for _ in 0..draws {
            let k = zipf.sample(&mut rng);
            assert!((1..=n).contains(&k), "rank {k} outside 1..={n}");
            counts[k as usize] += 1;
        }
        let norm: f64 = (1..=n).map(|k| (k as f64).powf(-theta)).sum();
        let mut chi = 0.0;
        for k in 1..=n {
            let expected = draws as f64 * (k as f64).powf(-theta) / norm;
            let diff = counts[k as usize] as f64 - expected;
            chi += diff * diff / expected;
        }
        (chi, n as usize - 1)
    }

    #[test]
    fn distribution_matches_exact_probabilities() {
        // 99 degrees of freedom: the 99.9% quantile of chi-square is about 148.
        let (chi, dof) = chi_square(100, 0.99, 400_000, 1);
        assert!(chi < 148.0, "chi-square {chi} with {dof} degrees of freedom");
    }

    #[test]
    fn distribution_holds_at_theta_one_and_other_exponents() {
        for theta in [0.5, 1.0, 1.5] {
            let (chi, _) = chi_square(50, theta, 200_000, 2);
            assert!(chi < 86.0, "theta {theta}: chi-square {chi}"); // 49 dof, 99.9%: 85.4
        }
    }

    #[test]
    fn a_wrong_exponent_is_detected() {
        // Negative space: the test statistic must be able to fail.
        let zipf = Zipf::new(100, 0.5);
        let mut rng = SplitMix64::new(3);
        let norm: f64 = (1..=100).map(|k| (k as f64).powf(-0.99)).sum();
        let mut counts = [0u64; 101];
        for _ in 0..100_000 {
            counts[zipf.sample(&mut rng) as usize] += 1;
        }
        let chi: f64 = (1..=100u64)
            .map(|k| {
                let e = 100_000.0 * (k as f64).powf(-0.99) / norm;
                (counts[k as usize] as f64 - e).powi(2) / e
            })
            .sum();
        assert!(chi > 1000.0, "chi-square {chi}");
    }

    #[test]
    fn hot_set_of_a_large_range() {
        // theta 0.99 over 2^18 pages: the top 1% take well over half the accesses.
        let n = 1 << 18;
        let zipf = Zipf::new(n, 0.99);
        let mut rng = SplitMix64::new(4);
        let hot = (1..=200_000).filter(|_| zipf.sample(&mut rng) <= n / 100).count();
        let share = hot as f64 / 200_000.0;
        assert!((0.55..0.75).contains(&share), "top 1% share {share}");
    }

    #[test]
    fn one_element_range() {
        let zipf = Zipf::new(1, 0.99);
        let mut rng = SplitMix64::new(5);
        assert!((0..100).all(|_| zipf.sample(&mut rng) == 1));
    }
}
