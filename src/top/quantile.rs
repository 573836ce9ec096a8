//! Quantiles estimated from histogram buckets the way Prometheus' `histogram_quantile` does:
//! find the bucket the rank falls in and interpolate linearly inside it, assuming its
//! observations are spread evenly between its lower and upper bound.

/// The `q`-quantile (0 to 1) of cumulative bucket counts given as `(le, count)`, sorted by
/// `le` ascending and ending with `+Inf`. `None` when there is nothing to estimate: no
/// observations, fewer than two buckets, no `+Inf` bucket, or `q` outside 0 to 1.
///
/// As in Prometheus: a rank in the first bucket interpolates from 0 (if its bound is
/// positive); a rank in the `+Inf` bucket answers the highest finite bound; counts that
/// decrease with `le` (a scrape racing an observation) are lifted to stay monotonic.
pub fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    if !(0.0..=1.0).contains(&q) || buckets.len() < 2 {
        return None;
    }
    if buckets.last().map(|b| b.0) != Some(f64::INFINITY) {
        return None;
    }
    let mut cumulative = Vec::with_capacity(buckets.len());
    let mut max = 0.0_f64;
    for &(le, count) in buckets {
        max = max.max(count);
        cumulative.push((le, max));
    }
    let total = max;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let b = cumulative.iter().position(|&(_, c)| c >= rank)?;
    if b == cumulative.len() - 1 {
        return Some(cumulative[b - 1].0);
    }
    let (upper, count) = cumulative[b];
    if b == 0 && upper <= 0.0 {
        return Some(upper);
    }
    let (lower, below) = match b {
        0 => (0.0, 0.0),
        _ => cumulative[b - 1],
    };
    let in_bucket = count - below;
    if in_bucket <= 0.0 {
        return Some(lower);
    }
    Some(lower + (upper - lower) * (rank - below) / in_bucket)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    #[test]
    fn interpolates_inside_the_bucket() {
        // 10 observations: 2 in (0, 0.1], 6 in (0.1, 0.5], 2 in (0.5, 1].
        let b = [(0.1, 2.0), (0.5, 8.0), (1.0, 10.0), (INF, 10.0)];
        // Rank 5 is the 3rd of 6 in (0.1, 0.5]: 0.1 + 0.4 * 3/6.
        assert!(close(quantile(0.5, &b), 0.3));
        // Rank 9.9 is 1.9 of 2 in (0.5, 1].
        assert!(close(quantile(0.99, &b), 0.5 + 0.5 * 1.9 / 2.0));
        // Rank 1 in the first bucket interpolates from 0.
        assert!(close(quantile(0.1, &b), 0.05));
        assert!(close(quantile(1.0, &b), 1.0));
        assert!(close(quantile(0.0, &b), 0.0));
    }

    #[test]
    fn the_inf_bucket_answers_the_highest_finite_bound() {
        let b = [(0.1, 1.0), (0.5, 2.0), (INF, 10.0)];
        assert!(close(quantile(0.5, &b), 0.5));
        assert!(close(quantile(0.99, &b), 0.5));
    }

    #[test]
    fn nothing_to_estimate() {
        assert_eq!(quantile(0.5, &[(0.1, 0.0), (INF, 0.0)]), None);
        assert_eq!(quantile(0.5, &[(INF, 4.0)]), None);
        assert_eq!(quantile(0.5, &[(0.1, 1.0), (1.0, 4.0)]), None);
        assert_eq!(quantile(1.5, &[(0.1, 1.0), (INF, 4.0)]), None);
        assert_eq!(quantile(0.5, &[]), None);
    }

    #[test]
    fn non_monotonic_counts_are_lifted() {
        // 0.5 has fewer than 0.1: treated as 4, so all 4 observations are in (0, 0.1].
        let b = [(0.1, 4.0), (0.5, 3.0), (INF, 4.0)];
        assert!(close(quantile(0.5, &b), 0.05));
    }

    #[test]
    fn non_positive_first_bound_is_returned_as_is() {
        let b = [(-1.0, 2.0), (0.0, 3.0), (INF, 3.0)];
        assert!(close(quantile(0.25, &b), -1.0));
        assert!(close(quantile(0.9, &b), -1.0 + 1.0 * (2.7 - 2.0)));
    }
}
