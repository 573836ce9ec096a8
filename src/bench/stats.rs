//! Small statistics shared by the reports: means, nearest-rank quantiles, rates.

use std::time::Duration;

/// `amount` per second of `d`; 0 for an empty duration.
pub fn per_second(amount: f64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        amount / s
    } else {
        0.0
    }
}

/// The mean, 0 when there are no values.
pub fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u64), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// The mean, `None` when there are no values.
pub fn mean_opt(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0u64), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Nearest-rank quantile `q` in `0..=1`.
pub fn quantile(mut values: Vec<f64>, q: f64) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    quantile_sorted(&values, q)
}

/// Nearest-rank quantile of values already sorted.
pub fn quantile_sorted(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * values.len() as f64).ceil() as usize;
    Some(values[rank.saturating_sub(1).min(values.len() - 1)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(v.clone(), 0.5), Some(50.0));
        assert_eq!(quantile(v.clone(), 0.99), Some(99.0));
        assert_eq!(quantile(v.clone(), 0.999), Some(100.0));
        assert_eq!(quantile(Vec::new(), 0.5), None);
        assert_eq!(mean_opt(std::iter::empty()), None);
        assert_eq!(mean(v.into_iter()), 50.5);
    }
}
