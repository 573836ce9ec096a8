//! Every figure of one level, computed once from its results: what the table, `--detail`,
//! `--json`, `--csv` and `compare` all print. Times in seconds, rates per second; only
//! successful requests enter latencies and token totals.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::config::{Load, Slo};
use super::report::{InputLengths, LevelReport, RequestResult};
use super::scrape::ServerSide;
use super::selfcheck::SelfCheck;
use super::stats::{mean, mean_opt, per_second, quantile_sorted};
use super::turns::Dialogue;

/// A distribution: its mean and the chosen percentiles, keyed `p50`, `p99.9`, ...
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub mean: Option<f64>,
    #[serde(flatten)]
    pub percentiles: BTreeMap<String, f64>,
}

impl Dist {
    /// Of values already sorted.
    pub fn of(values: &[f64], percentiles: &[f64]) -> Dist {
        let mean = mean_opt(values.iter().copied());
        let percentiles = percentiles
            .iter()
            .filter_map(|p| Some((key(*p), quantile_sorted(values, p / 100.0)?)))
            .collect();
        Dist { mean, percentiles }
    }

    /// Percentile `p` (in percent), if it was computed.
    pub fn p(&self, p: f64) -> Option<f64> {
        self.percentiles.get(&key(p)).copied()
    }
}

/// `p50`, `p99.9`.
pub fn key(p: f64) -> String {
    format!("p{p}")
}

/// A failure message and how often it occurred.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorCount {
    pub error: String,
    pub count: usize,
}

/// The figures of one level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// `c=4`, `rate=5`, `rate=inf`, `replay`.
    pub label: String,
    pub load: Load,
    /// `A` (`url`) or `B` (`vs_url`).
    pub target: String,
    pub url: String,
    /// The closed-loop concurrency (schema 0 name), `null` for open-loop levels.
    pub concurrency: Option<u32>,
    pub stream: bool,
    pub wall_s: f64,
    /// Requests of the level, successful or not.
    pub total: usize,
    pub ok: usize,
    pub fail: usize,
    /// Output tokens of successful requests.
    pub tokens: u64,
    pub prompt_tokens: u64,
    /// Successful requests whose token counts were estimated on the client.
    pub estimated: usize,
    pub input_lengths: InputLengths,
    /// Successful requests / wall.
    pub request_throughput: f64,
    /// Output tokens / wall.
    pub agg_tok_s: f64,
    /// (Prompt + output tokens) / wall.
    pub total_tok_s: f64,
    /// Mean over successful requests of tokens / E2E.
    pub per_req_tok_s: f64,
    /// Requests meeting every SLO, and their number over wall (only with SLOs).
    pub good: Option<usize>,
    pub goodput: Option<f64>,
    pub ttft: Dist,
    /// Per request (E2E - TTFT) / (N - 1), requests with N > 1.
    pub tpot: Dist,
    /// Token-weighted, pooled over successful requests.
    pub itl: Dist,
    pub e2e: Dist,
    /// Failures by kind (`http_500`, `timeout`, ...).
    pub failures: BTreeMap<String, usize>,
    /// The distinct failure messages, most frequent first.
    pub errors: Vec<ErrorCount>,
    pub self_check: SelfCheck,
    pub server: Option<ServerSide>,
    /// Multi-turn levels only: the conversations and per-turn figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiturn: Option<Dialogue>,
    // Schema 0 names, kept for scripts written against it; the same values as above.
    pub ttft_mean: f64,
    pub ttft_p50: Option<f64>,
    pub ttft_p99: Option<f64>,
    pub itl_p50: Option<f64>,
    pub itl_p99: Option<f64>,
    pub e2e_p50: Option<f64>,
    pub e2e_p99: Option<f64>,
    pub tpot_mean: f64,
}

/// Whether a successful request meets every given SLO (TPOT counts as 0 when N <= 1, as in
/// vLLM).
pub fn is_good(r: &RequestResult, slo: &Slo) -> bool {
    let within =
        |limit: Option<std::time::Duration>, v: f64| limit.is_none_or(|l| v <= l.as_secs_f64());
    r.ok && within(slo.ttft, r.ttft.map_or(f64::INFINITY, |t| t.as_secs_f64()))
        && within(slo.tpot, r.tpot().unwrap_or(0.0))
        && within(slo.e2e, r.e2e.as_secs_f64())
}

impl Summary {
    pub fn of(l: &LevelReport, percentiles: &[f64], slo: &Slo) -> Summary {
        let oks: Vec<&RequestResult> = l.results.iter().filter(|r| r.ok).collect();
        let secs = |d: std::time::Duration| d.as_secs_f64();
        let sorted = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v
        };
        let ttft_v = sorted(oks.iter().filter_map(|r| r.ttft).map(secs).collect());
        let tpot_v = sorted(oks.iter().filter_map(|r| r.tpot()).collect());
        let itl_v = sorted(oks.iter().flat_map(|r| r.itl.iter().copied()).collect());
        let e2e_v = sorted(oks.iter().map(|r| secs(r.e2e)).collect());
        let dist = |v: &[f64]| Dist::of(v, percentiles);
        let (ttft, tpot, itl, e2e) = (dist(&ttft_v), dist(&tpot_v), dist(&itl_v), dist(&e2e_v));
        let tokens: u64 = oks.iter().map(|r| r.output_tokens).sum();
        let prompt_tokens: u64 = oks.iter().map(|r| r.prompt_tokens).sum();
        let good = (!slo.is_empty()).then(|| l.results.iter().filter(|r| is_good(r, slo)).count());
        Summary {
            label: l.label(),
            load: l.load,
            target: target_name(l.target),
            url: l.url.clone(),
            concurrency: match l.load {
                Load::Concurrency { concurrency } => Some(concurrency),
                _ => None,
            },
            stream: l.stream,
            wall_s: secs(l.wall),
            total: l.results.len(),
            ok: oks.len(),
            fail: l.fail(),
            tokens,
            prompt_tokens,
            estimated: l.estimated(),
            input_lengths: l.input,
            request_throughput: per_second(oks.len() as f64, l.wall),
            agg_tok_s: per_second(tokens as f64, l.wall),
            total_tok_s: per_second((tokens + prompt_tokens) as f64, l.wall),
            per_req_tok_s: mean(
                oks.iter()
                    .map(|r| per_second(r.output_tokens as f64, r.e2e)),
            ),
            good,
            goodput: good.map(|g| per_second(g as f64, l.wall)),
            ttft_mean: ttft.mean.unwrap_or(0.0),
            ttft_p50: quantile_sorted(&ttft_v, 0.5),
            ttft_p99: quantile_sorted(&ttft_v, 0.99),
            itl_p50: quantile_sorted(&itl_v, 0.5),
            itl_p99: quantile_sorted(&itl_v, 0.99),
            e2e_p50: quantile_sorted(&e2e_v, 0.5),
            e2e_p99: quantile_sorted(&e2e_v, 0.99),
            tpot_mean: tpot.mean.unwrap_or(0.0),
            ttft,
            tpot,
            itl,
            e2e,
            failures: l
                .failures_by_kind()
                .into_iter()
                .map(|(k, n)| (k.label(), n))
                .collect(),
            errors: l
                .errors()
                .into_iter()
                .map(|(error, count)| ErrorCount { error, count })
                .collect(),
            self_check: SelfCheck::of(l),
            server: l.server.clone(),
            multiturn: Dialogue::of(l),
        }
    }
}

/// `A` for the run's `url`, `B` for `vs_url`.
pub fn target_name(index: usize) -> String {
    ["A", "B"]
        .get(index)
        .map_or_else(|| index.to_string(), |s| s.to_string())
}
