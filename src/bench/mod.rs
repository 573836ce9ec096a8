//! `lingo bench`: a closed-loop load driver that sweeps concurrency levels against a server
//! speaking one of lingo's dialects, and reports throughput and latency by lingo's metric
//! definitions (TTFT, E2E, token-weighted ITL, output tokens from the server's own counts).
//!
//! The bench is a client: it builds canonical requests and uses the dialect's upstream-side
//! codecs (`encode_request`, `stream_decoder`, `decode_response`) and `model::Tally`, so wire
//! formats have one source of truth. It writes no wire JSON of its own.

mod exchange;
mod measure;
mod report;
mod sweep;
mod table;
mod workload;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

pub use report::{LevelReport, RequestResult};
pub use table::render_table;

use crate::config::Timeouts;
use crate::dialect::Dialect;
use crate::upstream::{list_models, Client};
use exchange::Target;
use workload::Workload;

/// Longest wait for a TCP connection, when the request timeout is longer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What to run. `Default` gives the documented default of every field.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Base URL of the server, e.g. `http://127.0.0.1:30000` (plain HTTP only).
    pub url: String,
    /// The dialect to speak; decides the endpoint. Default `sglang`.
    pub dialect: Dialect,
    /// Model name for OpenAI dialects. `None`: the first id of `GET {url}/v1/models`, or no
    /// model when the server lists none. SGLang `/generate` takes no model.
    pub model: Option<String>,
    /// Concurrency levels, run in this order, each a closed loop. Default `[1, 4, 16]`.
    pub concurrency: Vec<u32>,
    /// Prompt length in tokens (exact as token ids; chat and text-only dialects: words,
    /// approximately tokens). Default 512.
    pub input_len: u32,
    /// Output tokens per request, made exact by `ignore_eos`. Default 128.
    pub output_len: u32,
    /// Requests per concurrency level. Default 64.
    pub requests_per_level: u32,
    /// Requests sent one by one before the sweep, excluded from the results. Default 1.
    pub warmup: u32,
    /// Stream the answers (needed for TTFT and ITL). Default true.
    pub stream: bool,
    /// Seed of the prompts. Default 0.
    pub seed: u64,
    /// Per-request limit, from send to the end of the answer. Default 600 s.
    pub timeout: Duration,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        BenchConfig {
            url: "http://127.0.0.1:30000".into(),
            dialect: Dialect::Sglang,
            model: None,
            concurrency: vec![1, 4, 16],
            input_len: 512,
            output_len: 128,
            requests_per_level: 64,
            warmup: 1,
            stream: true,
            seed: 0,
            timeout: Duration::from_secs(600),
        }
    }
}

impl BenchConfig {
    /// Check the settings; errors name the offending field.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !self.url.starts_with("http://") {
            bail!(
                "url: `{}` must start with http:// (the bench speaks plain HTTP)",
                self.url
            );
        }
        if self.concurrency.is_empty() || self.concurrency.contains(&0) {
            bail!("concurrency: give one or more levels, each at least 1");
        }
        let positive = [
            ("input_len", self.input_len),
            ("output_len", self.output_len),
            ("requests_per_level", self.requests_per_level),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            bail!("{name}: must be at least 1");
        }
        if self.timeout.is_zero() {
            bail!("timeout: must be more than zero");
        }
        Ok(())
    }
}

/// Run the warmup, then every concurrency level in order; one report per level.
///
/// Fails only when the configuration is invalid or every warmup request failed (the server is
/// unreachable or refuses the requests); failures during the sweep are counted in the reports.
pub async fn run(config: &BenchConfig) -> anyhow::Result<Vec<LevelReport>> {
    config.validate()?;
    // The pool's idle timeout stays the proxy's default: under uvicorn's keep-alive.
    let timeouts = Timeouts {
        connect: config.timeout.min(CONNECT_TIMEOUT),
        response_headers: config.timeout,
        ..Timeouts::default()
    };
    let client = Client::new(&config.url, &timeouts);
    let model = match (&config.model, config.dialect) {
        (Some(m), _) => Some(m.clone()),
        (None, Dialect::Sglang) => None,
        (None, _) => list_models(&client)
            .await
            .and_then(|models| models.into_iter().next())
            .map(|m| m.id),
    };
    let workload = Arc::new(Workload {
        dialect: config.dialect,
        model,
        input_len: config.input_len,
        output_len: config.output_len,
        stream: config.stream,
        seed: config.seed,
    });
    workload.body(0).context("building the first request")?;
    let target = Arc::new(Target {
        client,
        dialect: config.dialect,
        stream: config.stream,
        output_len: config.output_len,
        timeout: config.timeout,
    });
    warmup(&target, &workload, config.warmup).await?;
    let mut levels = Vec::with_capacity(config.concurrency.len());
    for (i, &c) in config.concurrency.iter().enumerate() {
        // Keys never repeat across the warmup and the levels, so neither do prompts.
        let first_key = (i as u64 + 1) << 32;
        levels
            .push(sweep::level(&target, &workload, c, config.requests_per_level, first_key).await?);
    }
    Ok(levels)
}

/// Send the warmup requests one by one; an error only if all of them failed.
async fn warmup(target: &Target, workload: &Workload, count: u32) -> anyhow::Result<()> {
    let mut last_error = None;
    let mut any_ok = count == 0;
    for key in 0..u64::from(count) {
        match target.send(workload.body(key)?).await.error {
            None => any_ok = true,
            Some(e) => last_error = Some(e),
        }
    }
    match (any_ok, last_error) {
        (false, Some(e)) => bail!("every warmup request failed, so the sweep would too: {e}"),
        _ => Ok(()),
    }
}
