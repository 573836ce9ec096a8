//! The OpenAI routes both kinds serve: `POST /v1/completions` and `POST /v1/chat/completions`.
//!
//! vLLM and SGLang differ here only in the error envelope, the stop detail (`stop_reason` vs
//! `matched_stop`), model-name checking (vLLM 404s an unknown model; SGLang echoes whatever it
//! was sent, `"default"` when absent) and SGLang's `reasoning_tokens` in usage.

mod chat;
mod completions;
mod logprobs;
pub(crate) mod request;
mod wire;

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_TYPE;

use super::driver::{self, Generation};
use super::error::{ApiError, ErrorShape};
use super::generate::{generate_all, Params};
use super::prompt::Prompt;
use super::state::{MockState, RequestGuard};
use super::MockKind;
use request::{chat_prompt, ChatRequest, Common, CompletionRequest};
use wire::Ctx;

/// vLLM's default `--max-logprobs`.
const MAX_LOGPROBS: u32 = 20;

pub(crate) async fn completions(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let (guard, ordinal) = state.begin();
    let job = if state.should_fail(ordinal) {
        Err(ApiError::internal("mock: injected failure (fail_every)"))
    } else {
        serde_json::from_slice::<CompletionRequest>(&body)
            .map_err(ApiError::invalid_body)
            .and_then(|req| completion_job(&state, req))
    };
    answer(state, guard, job, Endpoint::Completions).await
}

pub(crate) async fn chat(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let (guard, ordinal) = state.begin();
    let job = if state.should_fail(ordinal) {
        Err(ApiError::internal("mock: injected failure (fail_every)"))
    } else {
        serde_json::from_slice::<ChatRequest>(&body)
            .map_err(ApiError::invalid_body)
            .and_then(|req| chat_job(&state, req))
    };
    answer(state, guard, job, Endpoint::Chat).await
}

#[derive(Clone, Copy)]
enum Endpoint {
    Completions,
    Chat,
}

/// A validated request.
struct Job {
    ctx: Ctx,
    params: Vec<Params>,
    n: u32,
    stream: bool,
}

async fn answer(
    state: Arc<MockState>,
    guard: RequestGuard,
    job: Result<Job, ApiError>,
    endpoint: Endpoint,
) -> Response {
    let job = match job {
        Ok(job) => job,
        Err(err) => {
            guard.fail();
            return err.into_response(ErrorShape::openai(state.config.kind));
        }
    };
    let seqs = generate_all(&job.ctx.prompts, &job.params, job.n, state.config.eos_seed);
    let (prompt_tokens, completion_tokens) = wire::totals(&job.ctx, &seqs);
    let generation = Generation {
        seqs,
        prompt_tokens,
        completion_tokens,
        guard,
    };
    if job.stream {
        return match endpoint {
            Endpoint::Completions => {
                driver::stream(state, generation, completions::Stream(job.ctx))
            }
            Endpoint::Chat => driver::stream(state, generation, chat::Stream(job.ctx)),
        };
    }
    driver::pace_whole(&state, &generation.seqs).await;
    let body = match endpoint {
        Endpoint::Completions => completions::body(&job.ctx, &generation.seqs),
        Endpoint::Chat => chat::body(&job.ctx, &generation.seqs),
    };
    generation.guard.complete(prompt_tokens, completion_tokens);
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}

fn completion_job(state: &MockState, req: CompletionRequest) -> Result<Job, ApiError> {
    let prompts = req.prompt.into_prompts()?;
    if let Some(k) = req.logprobs.filter(|k| *k > MAX_LOGPROBS) {
        return Err(ApiError::bad_request(format!(
            "Requested sample logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS}"
        )));
    }
    let limits = Limits {
        requested: req.max_tokens,
        default: Some(16),
    };
    let mut job = prepare(state, req.common, prompts, limits, "cmpl")?;
    job.ctx.logprobs = req.logprobs;
    if req.echo.unwrap_or(false) {
        job.ctx.echo = job.ctx.prompts.iter().map(Prompt::echo_text).collect();
    }
    Ok(job)
}

fn chat_job(state: &MockState, req: ChatRequest) -> Result<Job, ApiError> {
    if req.messages.is_empty() {
        return Err(ApiError::bad_request("messages must not be empty"));
    }
    let top = req.top_logprobs.unwrap_or(0);
    if top > MAX_LOGPROBS {
        return Err(ApiError::bad_request(format!(
            "Requested top_logprobs of {top}, which is greater than max allowed: {MAX_LOGPROBS}"
        )));
    }
    let logprobs = req.logprobs.unwrap_or(false);
    if top > 0 && !logprobs {
        return Err(ApiError::bad_request(
            "when using `top_logprobs`, `logprobs` must be set to true.",
        ));
    }
    let prompts = vec![chat_prompt(&req.messages)];
    let requested = req.max_completion_tokens.or(req.max_tokens);
    let limits = Limits {
        requested,
        default: None,
    };
    let mut job = prepare(state, req.common, prompts, limits, "chatcmpl")?;
    job.ctx.logprobs = logprobs.then_some(top);
    Ok(job)
}

/// Output length: as requested, else the endpoint's default (`None`: up to the context).
struct Limits {
    requested: Option<u32>,
    default: Option<u32>,
}

fn prepare(
    state: &MockState,
    common: Common,
    prompts: Vec<Prompt>,
    limits: Limits,
    id: &str,
) -> Result<Job, ApiError> {
    let cfg = &state.config;
    let model = match (cfg.kind, common.model.as_deref()) {
        (MockKind::Vllm, Some(m)) if m != cfg.model => {
            return Err(ApiError::not_found(format!(
                "The model `{m}` does not exist."
            )));
        }
        (MockKind::Vllm, _) => cfg.model.clone(),
        (MockKind::Sglang, m) => m.unwrap_or("default").to_owned(),
    };
    let stream = common.stream.unwrap_or(false);
    if cfg.kind == MockKind::Vllm && common.stream_options.is_some() && !stream {
        return Err(ApiError::bad_request(
            "Stream options can only be defined when `stream=True`.",
        ));
    }
    let n = common.n.unwrap_or(1);
    if n == 0 {
        return Err(ApiError::bad_request("n must be at least 1, got 0."));
    }
    if limits.requested == Some(0) {
        return Err(ApiError::bad_request(
            "max_tokens must be at least 1, got 0.",
        ));
    }
    let base = common.params();
    let params = prompts
        .iter()
        .map(|p| prompt_params(&base, p.len(), &limits, cfg.max_model_len))
        .collect::<Result<Vec<_>, _>>()?;
    let options = common.stream_options.unwrap_or_default();
    let include_usage = stream && options.include_usage == Some(true);
    let ctx = Ctx {
        kind: cfg.kind,
        id: format!("{id}-{:032x}", rand::random::<u128>()),
        created: now(),
        model,
        prompts,
        include_usage,
        continuous_usage: include_usage && options.continuous_usage_stats == Some(true),
        return_token_ids: common.return_token_ids.unwrap_or(false),
        logprobs: None,
        echo: Vec::new(),
    };
    Ok(Job {
        ctx,
        params,
        n,
        stream,
    })
}

fn prompt_params(
    base: &Params,
    prompt: u32,
    limits: &Limits,
    max_len: u32,
) -> Result<Params, ApiError> {
    if prompt >= max_len {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_len} tokens. However, your request has \
             {prompt} input tokens. Please reduce the length of the input messages."
        )));
    }
    let room = max_len - prompt;
    if let Some(max) = limits.requested.filter(|m| *m > room) {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_len} tokens. However, you requested {} \
             tokens ({prompt} in the messages, {max} in the completion). Please reduce the length \
             of the messages or completion.",
            u64::from(prompt) + u64::from(max)
        )));
    }
    let max_tokens = limits
        .requested
        .or(limits.default)
        .map_or(room, |m| m.min(room));
    if base.min_tokens > max_tokens {
        return Err(ApiError::bad_request(format!(
            "min_tokens must be less than or equal to max_tokens={max_tokens}, got {}.",
            base.min_tokens
        )));
    }
    Ok(Params {
        max_tokens,
        ..base.clone()
    })
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
