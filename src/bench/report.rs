//! Results of a sweep: one record per request, one report per concurrency level, and the
//! figures derived from them. Only successful requests enter the figures; failures are counted.

use std::time::Duration;

use crate::dialect::Dialect;

/// What one request measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestResult {
    pub ok: bool,
    /// Why the request failed (status, transport, timeout, in-band error, unfinished stream).
    pub error: Option<String>,
    /// Send to the first chunk carrying a generated token; equals `e2e` without streaming.
    pub ttft: Option<Duration>,
    /// Send to the last chunk carrying content or the finish reason (to the failure if failed).
    pub e2e: Duration,
    /// From the server's counts (usage, `meta_info.completion_tokens`) unless `estimated`.
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    /// The server reported no counts, so tokens were counted on the client (one per non-empty
    /// chunk, or the returned token ids).
    pub estimated: bool,
    /// Token-weighted inter-token gaps in seconds: a chunk of k tokens after a gap g adds k
    /// entries of g/k.
    pub itl: Vec<f64>,
}

impl RequestResult {
    /// (E2E - TTFT) / (N - 1), for successful requests with N > 1.
    pub fn tpot(&self) -> Option<f64> {
        let ttft = self.ttft?;
        (self.ok && self.output_tokens > 1).then(|| {
            (self.e2e.saturating_sub(ttft)).as_secs_f64() / (self.output_tokens - 1) as f64
        })
    }
}

/// One concurrency level of the sweep.
#[derive(Debug, Clone)]
pub struct LevelReport {
    pub concurrency: u32,
    /// From the first send of the level to the end of its last request.
    pub wall: Duration,
    pub results: Vec<RequestResult>,
    /// The dialect driven (decides the notes under the table).
    pub dialect: Dialect,
    /// Whether the requests streamed (without streaming TTFT equals E2E).
    pub stream: bool,
}

impl LevelReport {
    fn oks(&self) -> impl Iterator<Item = &RequestResult> {
        self.results.iter().filter(|r| r.ok)
    }

    pub fn ok(&self) -> usize {
        self.oks().count()
    }

    pub fn fail(&self) -> usize {
        self.results.len() - self.ok()
    }

    /// Output tokens of the successful requests.
    pub fn total_tokens(&self) -> u64 {
        self.oks().map(|r| r.output_tokens).sum()
    }

    /// Successful requests whose token counts were estimated.
    pub fn estimated(&self) -> usize {
        self.oks().filter(|r| r.estimated).count()
    }

    /// Total output tokens over the level's wall time.
    pub fn agg_tok_s(&self) -> f64 {
        per_second(self.total_tokens() as f64, self.wall)
    }

    /// Mean over successful requests of N / E2E.
    pub fn per_req_tok_s(&self) -> f64 {
        mean(
            self.oks()
                .map(|r| per_second(r.output_tokens as f64, r.e2e)),
        )
    }

    /// Mean TTFT in seconds over successful requests.
    pub fn mean_ttft(&self) -> f64 {
        mean(self.oks().filter_map(|r| r.ttft).map(|t| t.as_secs_f64()))
    }

    /// Mean TPOT in seconds over successful requests with N > 1.
    pub fn mean_tpot(&self) -> f64 {
        mean(self.oks().filter_map(RequestResult::tpot))
    }

    /// Quantile `q` (0..=1) of TTFT in seconds over successful requests.
    pub fn ttft_quantile(&self, q: f64) -> Option<f64> {
        quantile(
            self.oks()
                .filter_map(|r| r.ttft)
                .map(|t| t.as_secs_f64())
                .collect(),
            q,
        )
    }

    /// Quantile `q` of E2E in seconds over successful requests.
    pub fn e2e_quantile(&self, q: f64) -> Option<f64> {
        quantile(self.oks().map(|r| r.e2e.as_secs_f64()).collect(), q)
    }

    /// Quantile `q` of the token-weighted ITL in seconds, pooled over successful requests.
    pub fn itl_quantile(&self, q: f64) -> Option<f64> {
        quantile(self.oks().flat_map(|r| r.itl.iter().copied()).collect(), q)
    }

    /// The distinct failure messages with their counts, most frequent first.
    pub fn errors(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for e in self.results.iter().filter_map(|r| r.error.as_deref()) {
            match counts.iter_mut().find(|(m, _)| m == e) {
                Some((_, n)) => *n += 1,
                None => counts.push((e.to_string(), 1)),
            }
        }
        counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        counts
    }
}

fn per_second(amount: f64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        amount / s
    } else {
        0.0
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u64), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Nearest-rank quantile.
fn quantile(mut values: Vec<f64>, q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * values.len() as f64).ceil() as usize;
    Some(values[rank.saturating_sub(1).min(values.len() - 1)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(tokens: u64, ttft_ms: u64, e2e_ms: u64) -> RequestResult {
        RequestResult {
            ok: true,
            error: None,
            ttft: Some(Duration::from_millis(ttft_ms)),
            e2e: Duration::from_millis(e2e_ms),
            output_tokens: tokens,
            prompt_tokens: 1,
            estimated: false,
            itl: vec![0.001; tokens.saturating_sub(1) as usize],
        }
    }

    #[test]
    fn derived_figures() {
        let mut bad = ok(5, 1, 1);
        bad.ok = false;
        bad.error = Some("HTTP 500".into());
        let level = LevelReport {
            concurrency: 2,
            wall: Duration::from_secs(2),
            results: vec![ok(10, 100, 1000), ok(30, 300, 2000), bad],
            dialect: Dialect::OpenaiCompletions,
            stream: true,
        };
        assert_eq!((level.ok(), level.fail()), (2, 1));
        assert_eq!(level.total_tokens(), 40);
        assert!((level.agg_tok_s() - 20.0).abs() < 1e-9);
        assert!((level.per_req_tok_s() - 12.5).abs() < 1e-9);
        assert!((level.mean_ttft() - 0.2).abs() < 1e-9);
        assert_eq!(level.ttft_quantile(0.5), Some(0.1));
        assert_eq!(level.ttft_quantile(1.0), Some(0.3));
        assert_eq!(level.errors(), vec![("HTTP 500".to_string(), 1)]);
        let tpot = ok(11, 100, 1100).tpot().unwrap();
        assert!((tpot - 0.1).abs() < 1e-9);
    }
}
