//! The simulated inference server (`lingo mock`): a deterministic stand-in for vLLM, SGLang,
//! TGI, llama.cpp's llama-server and Ollama.
//!
//! The mock speaks the servers' wire formats as the project's wire reference (`dialects.md`,
//! sections 0-3 and 8) describes them, and shares no code with lingo's own dialect modules, so
//! a bug in lingo's encoders cannot hide behind the same bug in the mock. Output is a pure
//! function of the prompt (see `vocab`, `prompt` and `generate`): tests can predict every token,
//! and counts are exact.
//!
//! Module map: `routes` (router, controls) -> `openai` / `sglang` / `tgi` (parse, validate,
//! encode) -> `generate` (whole sequences up front) -> `driver` (timing, hold, injected
//! failures; `clock` dates arrivals and times first tokens) -> `sse`.
//! `state` holds the counters; a `RequestGuard` dropped unfinished counts an abort.
//! `sched` is the simulated scheduler a guard enters once its prompts are known (running cap,
//! FIFO queue, the `cache` prefix LRU, prefill cost); `metrics` and `load` export its figures.
//!
//! Fault modes (`fault` chooses, `inject` injects; README "The mock" has the full list), each
//! in every kind's framing and error shape, streaming and whole:
//! - `hang-before-headers`: no answer; the connection is held until the client closes it.
//! - `hang-after-headers`: 200 and headers (chunked), then no body byte.
//! - `stall-mid-stream`: 3 tokens' events (a whole answer: half its bytes), then silence.
//! - `close-mid-stream`: as stall, then the connection is cut without the chunked terminator.
//! - `malformed-chunk`: 2 tokens, an event that is not JSON, then the rest of the stream and
//!   its end marker (a whole answer: half its body, sent as if it were all of it).
//! - `reset`: closed before any response byte; an RST when served by [`serve_with`].
//! - `huge-error`: a 400 in the route's error shape, `fault_error_bytes` long, streamed.
//! - `slow-tokens`: `fault_slow` between tokens.
//!
//! Triggers, first match wins: header `x-mock-fault: <mode>` (with `x-mock-fault-bytes`,
//! `x-mock-fault-ms`); the word `lingo-fault:<mode>` anywhere in the request body; `POST
//! /mock/fault {"mode", "count"}` for the next N generation requests; `MockConfig::fault` at
//! `fault_rate`. Only generation routes are faulted, before any other check (the `openai`
//! kind's key included). A client that closes first counts as `aborted`; `close-mid-stream`,
//! `reset` and `huge-error` count as `failed`; `MockStats::faults` counts per mode.
//!
//! Known simplifications: one model, no LoRA, no tool calls or reasoning output, no prompt
//! logprobs for `echo`; SGLang's extra prefix-caching request for `n > 1`, per-request
//! `stream_interval` and `/v1/models/{id}` are not simulated; TGI's `/v1/completions`, `/`,
//! `/tokenize`, `best_of > 1`, grammars and tools are not either (TGI's `best_of` is capped at
//! 1, its default).

mod cache;
mod clock;
mod driver;
mod error;
mod fault;
mod generate;
mod inject;
mod late;
mod listener;
mod llamacpp;
mod load;
mod metrics;
mod ollama;
mod openai;
mod prompt;
mod routes;
mod sched;
mod sglang;
mod sse;
mod state;
mod tgi;
mod tokenize;
mod vocab;

pub use late::Late;

use std::str::FromStr;
use std::time::Duration;

pub use fault::{FaultCounts, FaultMode};
pub use listener::{ResetListener, ResetOnDrop};
pub use routes::router;
pub use state::MockState;

/// Which server the mock imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MockKind {
    Vllm,
    Sglang,
    Tgi,
    /// llama.cpp's `llama-server`.
    Llamacpp,
    Ollama,
    /// OpenAI's own API: documented fields only, an optional API key.
    Openai,
}

impl MockKind {
    pub const ALL: [MockKind; 6] = [
        MockKind::Vllm,
        MockKind::Sglang,
        MockKind::Tgi,
        MockKind::Llamacpp,
        MockKind::Ollama,
        MockKind::Openai,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MockKind::Vllm => "vllm",
            MockKind::Sglang => "sglang",
            MockKind::Tgi => "tgi",
            MockKind::Llamacpp => "llamacpp",
            MockKind::Ollama => "ollama",
            MockKind::Openai => "openai",
        }
    }
}

impl FromStr for MockKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "vllm" => Ok(MockKind::Vllm),
            "sglang" => Ok(MockKind::Sglang),
            "tgi" => Ok(MockKind::Tgi),
            "llamacpp" => Ok(MockKind::Llamacpp),
            "ollama" => Ok(MockKind::Ollama),
            "openai" => Ok(MockKind::Openai),
            other => Err(format!(
                "unknown mock kind `{other}` (expected vllm, sglang, tgi, llamacpp, ollama or \
                 openai)"
            )),
        }
    }
}

/// How the mock behaves; every field has a default suited to fast tests.
#[derive(Debug, Clone)]
pub struct MockConfig {
    /// Server imitated. Default `Vllm`.
    pub kind: MockKind,
    /// Served model name. Default `"mock-model"`.
    pub model: String,
    /// Delay before the first token. Default 0 (no sleep at all).
    pub ttft: Duration,
    /// Delay per output token after the first chunk. Default 0.
    pub itl: Duration,
    /// Output tokens per stream chunk (0 is treated as 1). Default 1.
    pub tokens_per_chunk: u32,
    /// Context length: prompt plus output tokens. Default 32768.
    pub max_model_len: u32,
    /// Seeds the EOS position of every sequence. Default 0.
    pub eos_seed: u64,
    /// Every k-th generation request answers HTTP 500. Default `None`.
    pub fail_every: Option<u32>,
    /// Require `Authorization: Bearer <key>` (kind `openai` only). Default: none.
    pub api_key: Option<String>,
    /// Inject this fault into generation requests (`--fault`). Default `None`.
    pub fault: Option<FaultMode>,
    /// Share of generation requests that get `fault`, 0..=1, spread evenly by ordinal.
    /// Default 1.0.
    pub fault_rate: f64,
    /// Body size of a `huge-error` answer. Default 50 MiB.
    pub fault_error_bytes: u64,
    /// Delay between the tokens of a `slow-tokens` answer. Default 500 ms.
    pub fault_slow: Duration,
    /// Prefix cache capacity in tokens (16-token blocks, LRU). Default 0: no cache.
    pub cache_tokens: u64,
    /// Prefill time per uncached prompt token, added to `ttft`. Default 0.
    pub prefill_per_token: Duration,
    /// At most this many requests generate at once, the rest wait FIFO (0 means 1).
    /// Default `None`: no cap.
    pub max_running: Option<u32>,
    /// With `max_running`, requests beyond this many waiting are answered 503. Default 1024.
    pub max_waiting: u32,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            kind: MockKind::Vllm,
            model: "mock-model".to_owned(),
            ttft: Duration::ZERO,
            itl: Duration::ZERO,
            tokens_per_chunk: 1,
            max_model_len: 32768,
            eos_seed: 0,
            fail_every: None,
            api_key: None,
            fault: None,
            fault_rate: 1.0,
            fault_error_bytes: 50 << 20,
            fault_slow: Duration::from_millis(500),
            cache_tokens: 0,
            prefill_per_token: Duration::ZERO,
            max_running: None,
            max_waiting: 1024,
        }
    }
}

/// A [`MockConfig`] value that cannot work, named by its CLI flag.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MockConfigError {
    #[error("--max-running must be at least 1")]
    MaxRunning,
    #[error("--fault-rate must be between 0 and 1")]
    FaultRate,
}

impl MockConfig {
    /// Checks the values [`MockState::new`] would otherwise have to correct.
    pub fn validate(&self) -> Result<(), MockConfigError> {
        if self.max_running == Some(0) {
            return Err(MockConfigError::MaxRunning);
        }
        if !(0.0..=1.0).contains(&self.fault_rate) {
            return Err(MockConfigError::FaultRate);
        }
        Ok(())
    }
}

/// How an armed stream failure shows up (see [`MockState::fail_next_stream`]); `error_event`
/// or `abort` in the `/mock/fail_next_stream` body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// The server's in-band error event, then its stream terminator.
    ErrorEvent,
    /// The connection is dropped mid-stream, without a terminator.
    Abort,
    /// The stream goes silent, holding the connection until the client closes it.
    Stall,
    /// One event that is not valid JSON, then the rest of the stream as usual.
    Malformed,
}

/// Counters over generation requests. Invariant once quiet:
/// `requests == completed + aborted + failed + in_flight`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct MockStats {
    /// Generation requests received (including rejected ones).
    pub requests: u64,
    /// Started and neither finished, failed nor dropped.
    pub in_flight: u64,
    /// Finished normally.
    pub completed: u64,
    /// The client went away before the response finished.
    pub aborted: u64,
    /// Answered with an error status, or failed mid-stream by `fail_next_stream`.
    pub failed: u64,
    /// Sum of the prompt tokens reported in usage of completed requests.
    pub prompt_tokens: u64,
    /// Sum of the completion tokens reported in usage of completed requests.
    pub completion_tokens: u64,
    /// Faults injected, per mode.
    #[serde(default)]
    pub faults: FaultCounts,
    /// `/flush_cache` calls answered.
    #[serde(default)]
    pub cache_flushes: u64,
    /// Prompt tokens looked up in the prefix cache (every prompt token of every request that
    /// started running).
    #[serde(default)]
    pub prefix_cache_queries: u64,
    /// Of those, tokens found in the cache.
    #[serde(default)]
    pub prefix_cache_hits: u64,
    /// Requests holding a running permit now.
    #[serde(default)]
    pub running: u64,
    /// Requests waiting for one now (without the `/mock/load` addition).
    #[serde(default)]
    pub waiting: u64,
    /// How late streams' first tokens were written, against when they were due.
    #[serde(default)]
    pub first_token_late: Late,
}

/// Serves the mock on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, config: MockConfig) -> std::io::Result<()> {
    serve_with(listener, MockState::new(config)).await
}

/// Serves the mock with `state` on `listener` until the process ends; connections a `reset`
/// fault closes end with an RST.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: std::sync::Arc<MockState>,
) -> std::io::Result<()> {
    let app = router(state).into_make_service_with_connect_info::<ResetOnDrop>();
    axum::serve(ResetListener(listener), app).await
}
