//! Open-loop arrival times: when each request of a level is due, as offsets from the level's
//! start. Inter-arrival gaps are Gamma(shape = burstiness, mean = 1 / rate), as in vLLM's
//! `--burstiness` (1 is a Poisson process); the first request is due at 0; `inf` puts every
//! request at 0. The schedule depends on the seed only.

use std::time::Duration;

use super::config::Rate;
use super::rng::Rng;

/// The arrival offsets of one level, endless: the level cuts it by count or duration.
#[derive(Debug, Clone)]
pub struct Arrivals {
    rng: Rng,
    /// Mean gap in seconds; `None` for an infinite rate.
    mean_gap: Option<f64>,
    shape: f64,
    next: f64,
}

impl Arrivals {
    pub fn new(rate: Rate, burstiness: f64, seed: u64, level: u64) -> Arrivals {
        Arrivals {
            rng: Rng::new(seed, 0x5C4E_D01E ^ level),
            mean_gap: match rate {
                Rate::PerSecond(r) => Some(1.0 / r),
                Rate::Infinite => None,
            },
            shape: burstiness,
            next: 0.0,
        }
    }
}

impl Iterator for Arrivals {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let at = self.next;
        if let Some(mean) = self.mean_gap {
            // Gamma(k, theta) has mean k * theta: theta = mean / k keeps the mean gap.
            self.next += self.rng.gamma(self.shape) * mean / self.shape;
        }
        Some(Duration::from_secs_f64(at))
    }
}

/// Replayed arrivals: the log's times relative to its first line (sorted input not assumed).
pub fn replayed(times: &[f64]) -> Vec<Duration> {
    let first = times.iter().copied().fold(f64::INFINITY, f64::min);
    times
        .iter()
        .map(|t| Duration::from_secs_f64((t - first).max(0.0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(rate: f64, burstiness: f64, seed: u64, n: usize) -> Vec<f64> {
        let at: Vec<f64> = Arrivals::new(Rate::PerSecond(rate), burstiness, seed, 0)
            .take(n + 1)
            .map(|d| d.as_secs_f64())
            .collect();
        at.windows(2).map(|w| w[1] - w[0]).collect()
    }

    fn mean_var(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        (m, xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n)
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let a: Vec<Duration> = Arrivals::new(Rate::PerSecond(10.0), 1.0, 7, 1)
            .take(100)
            .collect();
        let b: Vec<Duration> = Arrivals::new(Rate::PerSecond(10.0), 1.0, 7, 1)
            .take(100)
            .collect();
        assert_eq!(a, b);
        assert_eq!(a[0], Duration::ZERO);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        let c: Vec<Duration> = Arrivals::new(Rate::PerSecond(10.0), 1.0, 8, 1)
            .take(100)
            .collect();
        assert_ne!(a, c);
    }

    #[test]
    fn poisson_gaps_average_one_over_the_rate() {
        let (mean, var) = mean_var(&gaps(20.0, 1.0, 1, 100_000));
        assert!((mean - 0.05).abs() < 0.001, "{mean}");
        // Exponential: the variance is the squared mean.
        assert!((var - 0.0025).abs() < 0.0002, "{var}");
    }

    #[test]
    fn burstiness_changes_the_variance_not_the_mean() {
        // Gamma(k, 1/(r k)): variance 1 / (r^2 k).
        for (k, want) in [(0.25, 4.0), (4.0, 0.25)] {
            let (mean, var) = mean_var(&gaps(1.0, k, 2, 200_000));
            assert!((mean - 1.0).abs() < 0.02, "{k}: {mean}");
            assert!((var - want).abs() < 0.06 * want.max(1.0), "{k}: {var}");
        }
    }

    #[test]
    fn infinite_rate_is_all_at_zero() {
        assert!(Arrivals::new(Rate::Infinite, 1.0, 0, 0)
            .take(1000)
            .all(|d| d.is_zero()));
    }

    #[test]
    fn replay_is_relative_to_the_first_line() {
        let at = replayed(&[100.5, 100.0, 103.25]);
        assert_eq!(at, [0.5, 0.0, 3.25].map(Duration::from_secs_f64).to_vec());
    }
}
