//! What a bench run does: the target, the load shapes, the workload and what to report.
//! `BenchConfig::default()` gives the documented default of every field.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Serialize};

use crate::dialect::Dialect;

/// A request rate of an open-loop level: requests per second, or all at once. In JSON a
/// number, or the string `"inf"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    PerSecond(f64),
    /// Every request is scheduled at t = 0.
    Infinite,
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Rate::PerSecond(r) => s.serialize_f64(*r),
            Rate::Infinite => s.serialize_str("inf"),
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Number(n) => n
                .as_f64()
                .map(Rate::PerSecond)
                .ok_or_else(|| serde::de::Error::custom("bad rate")),
            serde_json::Value::String(s) => Rate::parse(&s).map_err(serde::de::Error::custom),
            other => Err(serde::de::Error::custom(format!("bad rate {other}"))),
        }
    }
}

impl Rate {
    /// `inf`, or a positive number of requests per second.
    pub fn parse(s: &str) -> Result<Rate, String> {
        match s.trim() {
            "inf" | "infinity" => Ok(Rate::Infinite),
            t => match t.parse::<f64>() {
                Ok(r) if r.is_finite() && r > 0.0 => Ok(Rate::PerSecond(r)),
                _ => Err(format!(
                    "request rate `{s}`: give a positive number or `inf`"
                )),
            },
        }
    }

    pub fn label(self) -> String {
        match self {
            Rate::PerSecond(r) => format!("{r}"),
            Rate::Infinite => "inf".into(),
        }
    }
}

/// How a level loads the server.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Load {
    /// Closed loop: this many workers, each sending its next request when the last ended.
    Concurrency { concurrency: u32 },
    /// Open loop: arrivals at this rate whatever the server does, at most `max_concurrency`
    /// in flight (the rest wait, and the wait counts in their latency).
    Rate {
        rate: Rate,
        max_concurrency: Option<u32>,
    },
    /// Open loop at the arrival times of a request log.
    Replay { max_concurrency: Option<u32> },
}

impl Load {
    /// Short name of the level, as in tables: `c=4`, `rate=5`, `rate=inf`, `replay`.
    pub fn label(&self) -> String {
        match self {
            Load::Concurrency { concurrency } => format!("c={concurrency}"),
            Load::Rate { rate, .. } => format!("rate={}", rate.label()),
            Load::Replay { .. } => "replay".into(),
        }
    }

    pub fn is_open(&self) -> bool {
        !matches!(self, Load::Concurrency { .. })
    }
}

/// Service-level objectives: a request is good when every given one holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    #[serde(with = "opt_secs")]
    pub ttft: Option<Duration>,
    #[serde(with = "opt_secs")]
    pub tpot: Option<Duration>,
    #[serde(with = "opt_secs")]
    pub e2e: Option<Duration>,
}

mod opt_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.map(Duration::from_secs_f64))
    }
}

impl Slo {
    /// `ttft=500ms,tpot=50ms,e2e=2s` (any subset, humantime durations).
    pub fn parse(s: &str) -> Result<Slo, String> {
        let mut slo = Slo::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("SLO `{part}`: expected name=duration"))?;
            let d = humantime::parse_duration(value.trim())
                .map_err(|e| format!("SLO `{part}`: {e}"))?;
            let slot = match key.trim() {
                "ttft" => &mut slo.ttft,
                "tpot" => &mut slo.tpot,
                "e2e" | "e2el" => &mut slo.e2e,
                other => return Err(format!("SLO `{other}`: one of ttft, tpot, e2e")),
            };
            *slot = Some(d);
        }
        Ok(slo)
    }

    pub fn is_empty(&self) -> bool {
        self.ttft.is_none() && self.tpot.is_none() && self.e2e.is_none()
    }
}

/// Where prompts come from when not generated.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Random prompts of `input_len` tokens (with `input_range`).
    Random,
    /// ShareGPT JSON (`[{"conversations": [{"from": "human", ...}, {"from": "gpt", ...}]}]`)
    /// or JSONL of `{"prompt": ..., "output_len"?: ...}`.
    Dataset(PathBuf),
    /// lingo's JSONL request log: arrival times and lengths are replayed.
    Replay(PathBuf),
}

/// What each request of a level is: independent prompts, or turns of conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    /// Every request its own prompt (random, dataset or replayed).
    #[default]
    Random,
    /// `conversations` conversations of `turns` turns: each turn's prompt is the whole history
    /// so far (the server's own answers included) plus a new user message.
    Multiturn,
}

impl WorkloadKind {
    pub fn parse(s: &str) -> Result<WorkloadKind, String> {
        match s.trim() {
            "random" => Ok(WorkloadKind::Random),
            "multiturn" | "multi-turn" => Ok(WorkloadKind::Multiturn),
            other => Err(format!("workload `{other}`: one of random, multiturn")),
        }
    }
}

/// How requests spread over several `--url` targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Conversation i (request i, outside multi-turn runs) goes to url i mod n.
    #[default]
    Conversations,
    /// Each request goes to the next url in turn.
    Requests,
}

impl Split {
    pub fn parse(s: &str) -> Result<Split, String> {
        match s.trim() {
            "conversations" => Ok(Split::Conversations),
            "requests" => Ok(Split::Requests),
            other => Err(format!("split `{other}`: one of conversations, requests")),
        }
    }
}

/// What to run. `Default` gives the documented default of every field.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Base URL of the server, e.g. `http://127.0.0.1:30000` (plain HTTP only).
    pub url: String,
    /// A second server: levels alternate between `url` (A) and this one (B). Default none.
    pub vs_url: Option<String>,
    /// Further servers sharing the load with `url` (a repeated `--url`), spread by `split`.
    /// Default none.
    pub more_urls: Vec<String>,
    /// How requests spread over `url` and `more_urls`. Default by conversation.
    pub split: Split,
    /// Independent prompts or multi-turn conversations. Default random.
    pub workload: WorkloadKind,
    /// Multi-turn: conversations per level. Default 16.
    pub conversations: u32,
    /// Multi-turn: turns per conversation. Default 4.
    pub turns: u32,
    /// Multi-turn: tokens of a system prompt shared by every conversation; 0 for none.
    /// Default 0.
    pub system_prompt_len: u32,
    /// The dialect to speak; decides the endpoint. Default `sglang`.
    pub dialect: Dialect,
    /// Model name. `None`: the first id of `GET {url}/v1/models`, or no model when the
    /// server lists none.
    pub model: Option<String>,
    /// Closed-loop concurrency levels, run in this order. Default `[1, 4, 16]`.
    pub concurrency: Vec<u32>,
    /// Open-loop request rates, run after the concurrency levels. Default none.
    pub request_rate: Vec<Rate>,
    /// Gamma shape of open-loop inter-arrival times: 1 is Poisson, below 1 burstier,
    /// above 1 more regular (as vLLM's `--burstiness`). Default 1.
    pub burstiness: f64,
    /// Cap on requests in flight in open-loop levels. Default none.
    pub max_concurrency: Option<u32>,
    /// Prompt length in tokens. Default 512.
    pub input_len: u32,
    /// Prompt lengths are uniform in `input_len * [1 - r, 1 + r]`. Default 0.
    pub input_range: f64,
    /// Output tokens per request, made exact by `ignore_eos`. Default 128.
    pub output_len: u32,
    /// Output lengths are uniform in `output_len * [1 - r, 1 + r]`. Default 0.
    pub output_range: f64,
    /// Requests per level (a cap when `duration` is set); `u32::MAX` for no cap, allowed with
    /// a `duration` or a replay (which ends with its log). Default 64.
    pub requests_per_level: u32,
    /// Each level also ends when this much time has passed since its start (no new
    /// request is sent after it; those in flight finish). Default none.
    pub duration: Option<Duration>,
    /// Requests sent all at once before the first level (opening as many connections),
    /// excluded from the results. Default 1.
    pub warmup: u32,
    /// Closed loop and multi-turn: worker k of C sends its first request `k / C * ramp_up` after the level
    /// starts, so C streams do not start (and, with a server that paces tokens, go on) in one
    /// lockstep burst. Default 0: all at once.
    pub ramp_up: Duration,
    /// Stream the answers (needed for TTFT and ITL). Default true.
    pub stream: bool,
    /// Seed of prompts, lengths, dataset order and arrival times. Default 0.
    pub seed: u64,
    /// Per-request limit, from send to the end of the answer. Default 600 s.
    pub timeout: Duration,
    /// Send only the dialect's documented fields (a plain OpenAI-compatible server): no
    /// `ignore_eos` or other vLLM extensions, so outputs may end before `output_len`.
    /// Default false.
    pub standard_api: bool,
    /// Sent as `Authorization: Bearer` to every target (a hosted OpenAI-compatible API, or
    /// vLLM's `--api-key`). Never written to reports. Default none.
    pub api_key: Option<String>,
    /// Prompt source. Default random.
    pub source: Source,
    /// A Hugging Face `tokenizer.json`, to size text prompts when the server has no
    /// `/tokenize`. Default none.
    pub tokenizer: Option<PathBuf>,
    /// Percentiles reported, in percent. Default `[50, 90, 99]`.
    pub percentiles: Vec<f64>,
    /// SLOs for goodput. Default none (goodput not reported).
    pub slo: Slo,
    /// Read the server's Prometheus `/metrics` before and after every level. Default false.
    pub scrape_metrics: bool,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        BenchConfig {
            url: "http://127.0.0.1:30000".into(),
            vs_url: None,
            more_urls: Vec::new(),
            split: Split::Conversations,
            workload: WorkloadKind::Random,
            conversations: 16,
            turns: 4,
            system_prompt_len: 0,
            dialect: Dialect::Sglang,
            model: None,
            concurrency: vec![1, 4, 16],
            request_rate: Vec::new(),
            burstiness: 1.0,
            max_concurrency: None,
            input_len: 512,
            input_range: 0.0,
            output_len: 128,
            output_range: 0.0,
            requests_per_level: 64,
            duration: None,
            warmup: 1,
            ramp_up: Duration::ZERO,
            stream: true,
            seed: 0,
            timeout: Duration::from_secs(600),
            api_key: None,
            standard_api: false,
            source: Source::Random,
            tokenizer: None,
            percentiles: vec![50.0, 90.0, 99.0],
            slo: Slo::default(),
            scrape_metrics: false,
        }
    }
}

impl BenchConfig {
    /// Prompt lengths drawn around `input_len` (`input_range`).
    pub fn input_span(&self) -> super::workload::Span {
        super::workload::Span {
            len: self.input_len,
            range: self.input_range,
        }
    }

    /// Output lengths drawn around `output_len` (`output_range`).
    pub fn output_span(&self) -> super::workload::Span {
        super::workload::Span {
            len: self.output_len,
            range: self.output_range,
        }
    }

    /// The OpenAI extensions the requests may use.
    pub fn flavor(&self) -> crate::dialect::openai::Flavor {
        match self.standard_api {
            true => crate::dialect::openai::Flavor::Standard,
            false => crate::dialect::openai::Flavor::Vllm,
        }
    }

    /// The levels in the order they run: concurrency levels, then rates; a replay is one
    /// level of its own.
    pub fn loads(&self) -> Vec<Load> {
        if matches!(self.source, Source::Replay(_)) {
            return vec![Load::Replay {
                max_concurrency: self.max_concurrency,
            }];
        }
        let closed = self
            .concurrency
            .iter()
            .map(|&concurrency| Load::Concurrency { concurrency });
        let open = self.request_rate.iter().map(|&rate| Load::Rate {
            rate,
            max_concurrency: self.max_concurrency,
        });
        closed.chain(open).collect()
    }

    /// Every url requests go to, `url` first (not `vs_url`, which runs levels of its own).
    pub fn urls(&self) -> Vec<String> {
        std::iter::once(&self.url)
            .chain(&self.more_urls)
            .cloned()
            .collect()
    }

    pub fn is_multiturn(&self) -> bool {
        self.workload == WorkloadKind::Multiturn
    }

    /// Check the settings; errors name the offending field.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.validate_targets()?;
        self.validate_multiturn()?;
        self.validate_levels()
    }

    fn validate_targets(&self) -> anyhow::Result<()> {
        if self.vs_url.is_some() && !self.more_urls.is_empty() {
            bail!(
                "vs_url: cannot be combined with a repeated url (--vs-url compares two \
                 servers level by level; several --url share one level's load)"
            );
        }
        Ok(())
    }

    fn validate_multiturn(&self) -> anyhow::Result<()> {
        if !self.is_multiturn() {
            return Ok(());
        }
        if self.conversations == 0 || self.turns == 0 {
            bail!("conversations, turns: must be at least 1");
        }
        if !self.request_rate.is_empty() || self.duration.is_some() {
            bail!(
                "workload multiturn: runs closed-loop levels only (no request_rate, no duration)"
            );
        }
        if !matches!(self.source, Source::Random) {
            bail!("workload multiturn: generates its prompts (no dataset, no replay)");
        }
        Ok(())
    }

    fn validate_levels(&self) -> anyhow::Result<()> {
        for url in self.urls().iter().chain(&self.vs_url) {
            if !url.starts_with("http://") {
                bail!("url: `{url}` must start with http:// (the bench speaks plain HTTP)");
            }
        }
        if self.concurrency.contains(&0) {
            bail!("concurrency: every level must be at least 1");
        }
        if self.loads().is_empty() {
            bail!("concurrency, request_rate: give at least one level");
        }
        let positive = [
            ("input_len", self.input_len),
            ("output_len", self.output_len),
            ("requests_per_level", self.requests_per_level),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            bail!("{name}: must be at least 1");
        }
        if self.max_concurrency == Some(0) {
            bail!("max_concurrency: must be at least 1");
        }
        for (name, r) in [
            ("input_range", self.input_range),
            ("output_range", self.output_range),
        ] {
            if !(0.0..1.0).contains(&r) {
                bail!("{name}: must be in [0, 1)");
            }
        }
        if !(self.burstiness.is_finite() && self.burstiness > 0.0) {
            bail!("burstiness: must be a positive number");
        }
        if self.timeout.is_zero() {
            bail!("timeout: must be more than zero");
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            bail!("duration: must be more than zero");
        }
        let unbounded = self.requests_per_level == u32::MAX;
        let replay = matches!(self.source, Source::Replay(_));
        if unbounded && self.duration.is_none() && !replay {
            bail!("requests_per_level: give a count or a duration");
        }
        if unbounded && self.request_rate.contains(&Rate::Infinite) {
            bail!("request_rate: `inf` sends every request at once, so it needs a request count");
        }
        let bad = self
            .percentiles
            .iter()
            .find(|p| !(**p > 0.0 && **p <= 100.0));
        if let Some(p) = bad {
            bail!("percentiles: {p} is not in (0, 100]");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates_and_slos() {
        assert_eq!(Rate::parse("inf"), Ok(Rate::Infinite));
        assert_eq!(Rate::parse("2.5"), Ok(Rate::PerSecond(2.5)));
        assert!(Rate::parse("0").is_err());
        assert!(Rate::parse("x").is_err());
        let slo = Slo::parse("ttft=500ms, e2e=2s").unwrap();
        assert_eq!(slo.ttft, Some(Duration::from_millis(500)));
        assert_eq!((slo.tpot, slo.e2e), (None, Some(Duration::from_secs(2))));
        assert!(Slo::parse("itl=5ms").is_err());
        let json = serde_json::to_string(&[Rate::Infinite, Rate::PerSecond(3.0)]).unwrap();
        assert_eq!(json, r#"["inf",3.0]"#);
        let back: Vec<Rate> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, [Rate::Infinite, Rate::PerSecond(3.0)]);
    }

    #[test]
    fn levels_and_validation() {
        let mut c = BenchConfig {
            concurrency: vec![2],
            request_rate: vec![Rate::PerSecond(5.0), Rate::Infinite],
            ..BenchConfig::default()
        };
        let labels: Vec<String> = c.loads().iter().map(Load::label).collect();
        assert_eq!(labels, ["c=2", "rate=5", "rate=inf"]);
        assert!(c.validate().is_ok());
        c.requests_per_level = u32::MAX;
        c.duration = Some(Duration::from_secs(1));
        assert!(c.validate().unwrap_err().to_string().contains("inf"));
        c.request_rate.pop();
        assert!(c.validate().is_ok());
        c.input_range = 1.0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("input_range"));
    }
}
