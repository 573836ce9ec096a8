//! The `--json` document: the configuration, and per level its summary and every request.
//! `docs/bench-json.md` describes the schema; bump `SCHEMA_VERSION` on any change that is not
//! a new optional field.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::config::{BenchConfig, Rate, Slo, Source, Split};
use super::report::{LevelReport, RequestResult};
use super::stats::{mean_opt, quantile_sorted};
use super::summary::Summary;

pub const SCHEMA_VERSION: u32 = 1;

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDoc {
    pub schema_version: u32,
    /// The lingo version that wrote it.
    pub lingo: String,
    pub config: ConfigDoc,
    pub levels: Vec<LevelDoc>,
}

/// The run's settings as given (or defaulted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigDoc {
    pub url: String,
    pub vs_url: Option<String>,
    pub dialect: String,
    pub model: Option<String>,
    pub concurrency: Vec<u32>,
    pub request_rate: Vec<Rate>,
    pub burstiness: f64,
    pub max_concurrency: Option<u32>,
    pub input_len: u32,
    pub input_range: f64,
    pub output_len: u32,
    pub output_range: f64,
    /// `null` when only `duration_s` bounds a level.
    pub requests_per_level: Option<u32>,
    pub duration_s: Option<f64>,
    pub warmup: u32,
    /// Closed loop: the span over which the workers' first requests were spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_up_s: Option<f64>,
    pub stream: bool,
    pub seed: u64,
    pub timeout_s: f64,
    pub dataset: Option<String>,
    pub replay: Option<String>,
    pub tokenizer: Option<String>,
    pub percentiles: Vec<f64>,
    pub slo: Slo,
    /// Further urls sharing each level with `url` (a repeated `--url`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_urls: Vec<String>,
    /// How requests spread over `url` and `more_urls` (with `more_urls` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
    /// A multi-turn run's shape (multi-turn runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiturn: Option<MultiturnDoc>,
}

/// `--workload multiturn`'s settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiturnDoc {
    pub conversations: u32,
    pub turns: u32,
    pub system_prompt_len: u32,
}

impl ConfigDoc {
    pub fn of(c: &BenchConfig) -> ConfigDoc {
        let path = |p: &Path| p.display().to_string();
        ConfigDoc {
            url: c.url.clone(),
            vs_url: c.vs_url.clone(),
            dialect: c.dialect.label().to_string(),
            model: c.model.clone(),
            concurrency: c.concurrency.clone(),
            request_rate: c.request_rate.clone(),
            burstiness: c.burstiness,
            max_concurrency: c.max_concurrency,
            input_len: c.input_len,
            input_range: c.input_range,
            output_len: c.output_len,
            output_range: c.output_range,
            requests_per_level: (c.requests_per_level != u32::MAX).then_some(c.requests_per_level),
            duration_s: c.duration.map(|d| d.as_secs_f64()),
            warmup: c.warmup,
            ramp_up_s: (!c.ramp_up.is_zero()).then_some(c.ramp_up.as_secs_f64()),
            stream: c.stream,
            seed: c.seed,
            timeout_s: c.timeout.as_secs_f64(),
            dataset: match &c.source {
                Source::Dataset(p) => Some(path(p)),
                _ => None,
            },
            replay: match &c.source {
                Source::Replay(p) => Some(path(p)),
                _ => None,
            },
            tokenizer: c.tokenizer.as_deref().map(path),
            percentiles: c.percentiles.clone(),
            slo: c.slo,
            more_urls: c.more_urls.clone(),
            split: (!c.more_urls.is_empty()).then_some(c.split),
            multiturn: c.is_multiturn().then_some(MultiturnDoc {
                conversations: c.conversations,
                turns: c.turns,
                system_prompt_len: c.system_prompt_len,
            }),
        }
    }
}

/// One level: its summary fields, then its requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelDoc {
    #[serde(flatten)]
    pub summary: Summary,
    pub requests: Vec<RequestDoc>,
}

/// One request. Offsets and latencies in seconds from the level's start / the scheduled time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestDoc {
    pub ok: bool,
    pub error: Option<String>,
    pub error_kind: Option<String>,
    pub scheduled_s: f64,
    pub sent_s: f64,
    pub lag_s: f64,
    /// Mean time the answer's bytes waited in the socket before the driver read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_lag_s: Option<f64>,
    pub ttft_s: Option<f64>,
    pub e2e_s: f64,
    pub tpot_s: Option<f64>,
    pub itl: Option<ItlStats>,
    /// Asked-for input tokens (0 when not chosen by the bench, as for dataset prompts).
    pub input_len: u32,
    pub prompt_tokens: u64,
    /// Asked-for output tokens (`max_tokens`).
    pub output_len: u32,
    pub output_tokens: u64,
    pub estimated: bool,
    /// Multi-turn: the conversation (within the level) and turn (from 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
}

/// A request's token-weighted inter-token gaps, in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItlStats {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl RequestDoc {
    pub fn of(r: &RequestResult) -> RequestDoc {
        let mut gaps = r.itl.clone();
        gaps.sort_by(f64::total_cmp);
        let itl = mean_opt(gaps.iter().copied()).map(|mean| ItlStats {
            n: gaps.len(),
            mean,
            p50: quantile_sorted(&gaps, 0.5).unwrap_or(0.0),
            p99: quantile_sorted(&gaps, 0.99).unwrap_or(0.0),
            max: gaps.last().copied().unwrap_or(0.0),
        });
        RequestDoc {
            ok: r.ok,
            error: r.error.clone(),
            error_kind: r.kind.map(|k| k.label()),
            scheduled_s: r.scheduled.as_secs_f64(),
            sent_s: r.sent.as_secs_f64(),
            lag_s: r.lag.as_secs_f64(),
            read_lag_s: r.read_lag.map(|l| l.as_secs_f64()),
            ttft_s: r.ttft.map(|t| t.as_secs_f64()),
            e2e_s: r.e2e.as_secs_f64(),
            tpot_s: r.tpot(),
            itl,
            input_len: r.input_len,
            prompt_tokens: r.prompt_tokens,
            output_len: r.output_len,
            output_tokens: r.output_tokens,
            estimated: r.estimated,
            conversation: r.conversation,
            turn: r.turn,
        }
    }
}

impl RunDoc {
    pub fn of(config: &BenchConfig, levels: &[LevelReport], summaries: &[Summary]) -> RunDoc {
        RunDoc {
            schema_version: SCHEMA_VERSION,
            lingo: env!("CARGO_PKG_VERSION").to_string(),
            config: ConfigDoc::of(config),
            levels: levels
                .iter()
                .zip(summaries)
                .map(|(l, s)| LevelDoc {
                    summary: s.clone(),
                    requests: l.results.iter().map(RequestDoc::of).collect(),
                })
                .collect(),
        }
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec_pretty(self)?;
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
    }

    pub fn read(path: &Path) -> anyhow::Result<RunDoc> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let doc: RunDoc = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a lingo bench JSON report", path.display()))?;
        anyhow::ensure!(
            doc.schema_version == SCHEMA_VERSION,
            "{}: schema version {} (this lingo reads {SCHEMA_VERSION})",
            path.display(),
            doc.schema_version
        );
        Ok(doc)
    }
}
