//! A tiny deterministic generator (SplitMix64) and the few distributions the bench draws from.
//! Prompts, lengths and arrival times depend on the seed only, never on the version of a
//! random-number crate, so a `--seed` reproduces a run across lingo releases.

/// SplitMix64: fast, well mixed, and enough for workloads (not for cryptography).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for stream `key` of the run seeded with `seed`: distinct keys give
    /// unrelated sequences.
    pub fn new(seed: u64, key: u64) -> Rng {
        Rng(seed ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`; `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `[lo, hi]` (inclusive).
    pub fn between(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below(u64::from(hi - lo) + 1) as u32
    }

    /// Uniform in `(0, 1]`: never zero, so its logarithm is finite.
    pub fn open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.open01(), self.open01());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Gamma with this `shape` (> 0) and scale 1: Marsaglia and Tsang's method, with the
    /// usual boost `Gamma(k) = Gamma(k + 1) * U^(1/k)` for shapes below one.
    pub fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            return self.gamma(shape + 1.0) * self.open01().powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = self.open01();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }

    /// Shuffle in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        (mean, var)
    }

    #[test]
    fn gamma_has_the_textbook_mean_and_variance() {
        for shape in [0.3, 1.0, 4.0] {
            let mut r = Rng::new(1, 2);
            let xs: Vec<f64> = (0..200_000).map(|_| r.gamma(shape)).collect();
            let (mean, var) = moments(&xs);
            assert!(
                (mean - shape).abs() < 0.02 * shape.max(1.0),
                "{shape}: {mean}"
            );
            assert!(
                (var - shape).abs() < 0.05 * shape.max(1.0),
                "{shape}: {var}"
            );
        }
    }

    #[test]
    fn uniform_helpers_stay_in_range() {
        let mut r = Rng::new(3, 4);
        for _ in 0..10_000 {
            let u = r.open01();
            assert!(u > 0.0 && u <= 1.0);
            let b = r.between(90, 110);
            assert!((90..=110).contains(&b));
        }
        let mut v: Vec<u32> = (0..50).collect();
        r.shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(v, sorted);
    }
}
