//! Validation of OpenAI-style requests into a job: model, lengths against the context, defaults.
//!
//! Messages follow vLLM's wording, so a proxy passing errors through shows the real text.

use super::request::{chat_prompt, ChatRequest, Common, CompletionRequest};
use super::wire::Ctx;
use crate::mock::error::ApiError;
use crate::mock::generate::Params;
use crate::mock::prompt::Prompt;
use crate::mock::state::MockState;
use crate::mock::MockKind;

/// vLLM's default `--max-logprobs`.
const MAX_LOGPROBS: u32 = 20;

/// A validated request.
pub(super) struct Job {
    pub ctx: Ctx,
    pub params: Vec<Params>,
    pub n: u32,
    pub stream: bool,
}

pub(super) fn completion_job(state: &MockState, req: CompletionRequest) -> Result<Job, ApiError> {
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

pub(super) fn chat_job(state: &MockState, req: ChatRequest) -> Result<Job, ApiError> {
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
        (MockKind::Vllm | MockKind::Openai, Some(m)) if m != state.model() => {
            return Err(ApiError::not_found(format!(
                "The model `{m}` does not exist."
            )));
        }
        (MockKind::Vllm | MockKind::Openai, _) => state.model(),
        (MockKind::Sglang | MockKind::Tgi, m) => m.unwrap_or("default").to_owned(),
        // llama.cpp and Ollama serve their OpenAI routes from their own modules.
        (MockKind::Llamacpp | MockKind::Ollama, _) => state.model(),
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
        created: super::now(),
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
