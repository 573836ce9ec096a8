//! Results of a run: one record per request, one report per level, and the figures derived
//! from them. Only successful requests enter the latency figures; failures are counted.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::config::Load;
use super::stats::{mean, per_second, quantile};
use crate::dialect::Dialect;

/// Why a request failed: a closed set, for counting failures by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The server answered with an error status.
    Http(u16),
    /// No connection, or the connection broke before the response headers.
    Connect,
    /// No complete answer within the per-request timeout.
    Timeout,
    /// The body broke while it was being read.
    Read,
    /// The server sent an error event inside the stream.
    InBand,
    /// The server finished the request as aborted.
    Abort,
    /// The stream ended without a finish reason.
    Truncated,
    /// The answer could not be decoded in the dialect.
    Decode,
    /// The request could not be built.
    Build,
}

impl ErrorKind {
    /// A closed label: `http_500`, `timeout`, ...
    pub fn label(self) -> String {
        match self {
            ErrorKind::Http(code) => format!("http_{code}"),
            ErrorKind::Connect => "connect".into(),
            ErrorKind::Timeout => "timeout".into(),
            ErrorKind::Read => "read".into(),
            ErrorKind::InBand => "in_band_error".into(),
            ErrorKind::Abort => "abort".into(),
            ErrorKind::Truncated => "truncated".into(),
            ErrorKind::Decode => "decode".into(),
            ErrorKind::Build => "build".into(),
        }
    }
}

/// What one request measured. Offsets are from the start of its level.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestResult {
    pub ok: bool,
    /// Why the request failed (status, transport, timeout, in-band error, unfinished stream).
    pub error: Option<String>,
    pub kind: Option<ErrorKind>,
    /// When the request was due: its arrival time (open loop), or its send time (closed loop;
    /// with kernel stamps the moment its first byte was written).
    pub scheduled: Duration,
    /// When the driver handed it to the connection.
    pub sent: Duration,
    /// From `sent` to the moment its first byte was written (plain `http://` targets, where
    /// a closed loop's `scheduled` is that moment; zero elsewhere).
    pub to_wire: Duration,
    /// How late the driver sent it: from the moment it was free to go (its arrival time, or
    /// the moment a `max_concurrency` slot or a closed-loop worker came free) to `sent`.
    pub lag: Duration,
    /// From `scheduled` to the first chunk carrying a generated token; equals `e2e` without
    /// streaming.
    pub ttft: Option<Duration>,
    /// From `scheduled` to the last chunk carrying content or the finish reason (to the
    /// failure if failed).
    pub e2e: Duration,
    /// From the server's counts (usage, `meta_info.completion_tokens`) unless `estimated`.
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    /// The server reported no counts, so tokens were counted on the client (one per non-empty
    /// chunk, or the returned token ids).
    pub estimated: bool,
    /// The input length asked for, in tokens (0 when unknown, as for dataset prompts).
    pub input_len: u32,
    /// The output length asked for (`max_tokens`).
    pub output_len: u32,
    /// Token-weighted inter-token gaps in seconds: a chunk of k tokens after a gap g adds k
    /// entries of g/k.
    pub itl: Vec<f64>,
    /// Multi-turn: the conversation (numbered within its level) and the turn (from 0).
    pub conversation: Option<u32>,
    pub turn: Option<u32>,
    /// The answer's text, kept only when a later turn needs it (multi-turn).
    pub answer: Option<String>,
    /// How long the answer's bytes waited in the socket before the driver read them, on
    /// average over its reads: the driver's own lateness, kept out of the latencies above.
    /// `None` where the kernel gives no receive stamps (TLS targets).
    pub read_lag: Option<Duration>,
    /// How long the answer's last bytes waited before the driver read them: time the driver
    /// took after the server was done (with `read_lag`, where stamps exist).
    pub end_lag: Option<Duration>,
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

/// How the prompts' lengths were made, for the report's notes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputLengths {
    /// Token ids: exact.
    TokenIds,
    /// Text sized with the server's own `/tokenize`.
    ServerTokenizer,
    /// Text sized with the `--tokenizer` file.
    LocalTokenizer,
    /// Text of that many words, which is approximately that many tokens.
    Approximate,
    /// Prompts from a dataset, as written.
    Dataset,
}

/// One level of the run.
#[derive(Debug, Clone)]
pub struct LevelReport {
    pub load: Load,
    /// Which target: 0 for `url` (A), 1 for `vs_url` (B).
    pub target: usize,
    pub url: String,
    /// From the start of the level to the end of its last request.
    pub wall: Duration,
    pub results: Vec<RequestResult>,
    /// The dialect driven (decides the notes under the table).
    pub dialect: Dialect,
    /// Whether the requests streamed (without streaming TTFT equals E2E).
    pub stream: bool,
    pub input: InputLengths,
    /// CPU time the driver's process used during the level (`None` where unreadable).
    pub cpu: Option<Duration>,
    /// Worker threads the driver's runtime had: the CPU it could use.
    pub cores: usize,
    /// The whole machine's CPU over the level, where this process is the driver alone
    /// (`selfcheck::sole_driver`): a server sharing the machine ran on what the driver left.
    pub machine: Option<super::selfcheck::Machine>,
    /// The server's own view, from its `/metrics` (with `scrape_metrics`).
    pub server: Option<super::scrape::ServerSide>,
    /// Multi-turn: (conversations, turns per conversation) of the level.
    pub dialogues: Option<(u32, u32)>,
}

impl LevelReport {
    /// `c=4`, `rate=5`, ...; with two targets, `A c=4`.
    pub fn label(&self) -> String {
        self.load.label()
    }

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

    /// Failures by kind, in the kinds' order.
    pub fn failures_by_kind(&self) -> Vec<(ErrorKind, usize)> {
        let mut counts = std::collections::BTreeMap::new();
        for k in self.results.iter().filter_map(|r| r.kind) {
            *counts.entry(k).or_insert(0) += 1;
        }
        counts.into_iter().collect()
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn ok(tokens: u64, ttft_ms: u64, e2e_ms: u64) -> RequestResult {
        RequestResult {
            ok: true,
            ttft: Some(Duration::from_millis(ttft_ms)),
            e2e: Duration::from_millis(e2e_ms),
            output_tokens: tokens,
            prompt_tokens: 1,
            itl: vec![0.001; tokens.saturating_sub(1) as usize],
            ..RequestResult::default()
        }
    }

    pub(crate) fn level(results: Vec<RequestResult>) -> LevelReport {
        LevelReport {
            load: Load::Concurrency { concurrency: 2 },
            target: 0,
            url: "http://a".into(),
            wall: Duration::from_secs(2),
            results,
            dialect: Dialect::OpenaiCompletions,
            stream: true,
            input: InputLengths::TokenIds,
            cpu: None,
            cores: 2,
            machine: None,
            server: None,
            dialogues: None,
        }
    }

    #[test]
    fn derived_figures() {
        let mut bad = ok(5, 1, 1);
        bad.ok = false;
        bad.error = Some("HTTP 500".into());
        bad.kind = Some(ErrorKind::Http(500));
        let level = level(vec![ok(10, 100, 1000), ok(30, 300, 2000), bad]);
        assert_eq!((level.ok(), level.fail()), (2, 1));
        assert_eq!(level.total_tokens(), 40);
        assert!((level.agg_tok_s() - 20.0).abs() < 1e-9);
        assert!((level.per_req_tok_s() - 12.5).abs() < 1e-9);
        assert!((level.mean_ttft() - 0.2).abs() < 1e-9);
        assert_eq!(level.ttft_quantile(0.5), Some(0.1));
        assert_eq!(level.ttft_quantile(1.0), Some(0.3));
        assert_eq!(level.errors(), vec![("HTTP 500".to_string(), 1)]);
        assert_eq!(level.failures_by_kind(), vec![(ErrorKind::Http(500), 1)]);
        let tpot = ok(11, 100, 1100).tpot().unwrap();
        assert!((tpot - 0.1).abs() < 1e-9);
    }
}
