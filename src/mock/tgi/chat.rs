//! TGI's Messages API, `POST /v1/chat/completions` (dialects.md 3.4).
//!
//! TGI's flavour of OpenAI chat: `model` is `"tgi"`, absent, or taken as a LoRA adapter id
//! (unknown adapters fall back to the base model, so the mock accepts any); `id` is `""`;
//! `temperature: 0` is greedy; `stop` is a list only; `finish_reason` is `"stop"` for EOS but
//! `"length"` / `"stop_sequence"` as TGI names them; every stream chunk's delta carries the role;
//! usage, when asked, comes in a last chunk with no choices; events are `data:{json}`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::request::Limits;
use super::{parse, VERSION};
use crate::mock::driver::{self, Generation};
use crate::mock::error::{ApiError, ErrorShape};
use crate::mock::generate::{generate_all, logprob, top_alternatives, Finish, Params, Seq};
use crate::mock::openai::request::{chat_prompt, ChatMessage};
use crate::mock::prompt::Prompt;
use crate::mock::sched::QUEUE_FULL;
use crate::mock::sse::{sse_data, Encoder};
use crate::mock::state::MockState;
use crate::mock::vocab::{decode, EOS_ID};

#[derive(Deserialize, Default)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
#[allow(dead_code)] // accepted as TGI accepts them; no effect on the mock's output
struct ChatRequest {
    model: Option<String>,
    messages: Vec<ChatMessage>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    stop: Option<Vec<String>>,
    seed: Option<u64>,
    logprobs: Option<bool>,
    top_logprobs: Option<u32>,
    frequency_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
}

struct Ctx {
    model: String,
    created: u64,
    prompt: Prompt,
    include_usage: bool,
    logprobs: Option<u32>,
}

fn validate(req: &ChatRequest, limits: Limits) -> Result<(Prompt, Params), ApiError> {
    let invalid = |m: &str| Err(ApiError::unprocessable(m));
    if req.messages.is_empty() {
        return invalid("Template error: no messages");
    }
    // `temperature: 0` is greedy here; other values go through `/generate`'s checks.
    if req.temperature.is_some_and(|t| t < 0.0) {
        return invalid("`temperature` must be strictly positive");
    }
    if req.top_p.is_some_and(|p| !(p > 0.0 && p < 1.0)) {
        return invalid("`top_p` must be > 0.0 and < 1.0");
    }
    let stop = req.stop.clone().unwrap_or_default();
    if stop.len() > 4 {
        return Err(ApiError::unprocessable(format!(
            "`stop` supports up to 4 stop sequences. Given: {}",
            stop.len()
        )));
    }
    let max = req.max_completion_tokens.or(req.max_tokens);
    if max == Some(0) {
        return invalid("`max_new_tokens` must be strictly positive");
    }
    let prompt = chat_prompt(&req.messages);
    let input = prompt.len();
    if input > limits.max_input {
        return Err(ApiError::unprocessable(format!(
            "`inputs` must have less than {} tokens. Given: {input}",
            limits.max_input
        )));
    }
    let max_new = max.unwrap_or(limits.max_total.saturating_sub(input));
    if u64::from(input) + u64::from(max_new) > u64::from(limits.max_total) {
        return Err(ApiError::unprocessable(format!(
            "`inputs` tokens + `max_new_tokens` must be <= {}. Given: {input} `inputs` tokens and \
             {max_new} `max_new_tokens`",
            limits.max_total
        )));
    }
    let params = Params {
        max_tokens: max_new,
        stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
        keep_stop: true,
        ..Params::default()
    };
    Ok((prompt, params))
}

pub(crate) async fn chat(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let req = match parse::<ChatRequest>(&body) {
        Ok(req) => req,
        Err(rejection) => return rejection.into_response(),
    };
    let (mut guard, ordinal) = state.begin();
    let checked = if state.should_fail(ordinal) {
        Err(ApiError::failed_dependency(
            "mock: injected failure (fail_every)",
        ))
    } else {
        validate(&req, Limits::new(state.config.max_model_len))
    };
    let checked = checked.and_then(|(prompt, params)| {
        guard
            .admit(std::slice::from_ref(&prompt))
            .map_err(|_| ApiError::unavailable(QUEUE_FULL))?;
        Ok((prompt, params))
    });
    let (prompt, params) = match checked {
        Ok(v) => v,
        Err(err) => {
            guard.fail();
            return err.into_response(ErrorShape::Tgi);
        }
    };
    let seqs = generate_all(
        std::slice::from_ref(&prompt),
        &[params],
        1,
        state.config.eos_seed,
    );
    let ctx = Ctx {
        model: state.model(),
        created: super::super::openai::now(),
        include_usage: req.stream_options.unwrap_or_default().include_usage == Some(true),
        logprobs: (req.logprobs == Some(true)).then(|| req.top_logprobs.unwrap_or(0)),
        prompt,
    };
    let prompt_tokens = u64::from(ctx.prompt.len());
    let completion_tokens = seqs.iter().map(|s| s.len() as u64).sum();
    let mut generation = Generation {
        seqs,
        prompt_tokens,
        completion_tokens,
        guard,
    };
    if req.stream {
        return driver::stream(state, generation, Stream(ctx));
    }
    driver::pace_whole(&state, &mut generation.guard, &generation.seqs).await;
    let body = match generation.seqs.first() {
        Some(seq) => whole(&ctx, seq),
        None => Vec::new(),
    };
    generation.guard.complete(prompt_tokens, completion_tokens);
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}

/// TGI's chat finish reasons: EOS becomes `stop`, the others keep TGI's names.
fn finish_reason(f: &Finish) -> &'static str {
    match f {
        Finish::Length => "length",
        Finish::StopString(_) => "stop_sequence",
        Finish::Eos | Finish::StopToken(_) => "stop",
    }
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

fn usage(ctx: &Ctx, seq: &Seq) -> Usage {
    let prompt = u64::from(ctx.prompt.len());
    let completion = seq.len() as u64;
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
    }
}

fn fingerprint() -> String {
    format!("{VERSION}-native")
}

/// `{content:[{token, logprob, top_logprobs:[{token, logprob}]}]}` for tokens `from..to`.
fn logprobs(ctx: &Ctx, seq: &Seq, from: usize, to: usize) -> serde_json::Value {
    let Some(top) = ctx.logprobs else {
        return serde_json::Value::Null;
    };
    let content: Vec<_> = (from..to)
        .map(|i| {
            let (id, lp) = (seq.ids[i], logprob(seq.key, i));
            let alts: Vec<_> = top_alternatives(id, lp, top as usize)
                .map(|(t, l)| json!({"token": decode(t), "logprob": l}))
                .collect();
            json!({"token": decode(id), "logprob": lp, "top_logprobs": alts})
        })
        .collect();
    json!({ "content": content })
}

fn whole(ctx: &Ctx, seq: &Seq) -> Vec<u8> {
    let v = json!({
        "object": "chat.completion", "id": "", "created": ctx.created, "model": ctx.model,
        "system_fingerprint": fingerprint(),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": seq.text},
                     "logprobs": logprobs(ctx, seq, 0, seq.len()),
                     "finish_reason": finish_reason(&seq.finish)}],
        "usage": usage(ctx, seq),
    });
    v.to_string().into_bytes()
}

/// One chunk per token, an optional usage chunk, then `data:[DONE]`.
struct Stream(Ctx);

impl Stream {
    fn chunk(&self, choices: serde_json::Value, usage: Option<Usage>, out: &mut Vec<u8>) {
        let ctx = &self.0;
        let v = json!({
            "object": "chat.completion.chunk", "id": "", "created": ctx.created,
            "model": ctx.model, "system_fingerprint": fingerprint(),
            "choices": choices, "usage": usage,
        });
        sse_data(out, &v);
    }
}

impl Encoder for Stream {
    fn tokens(&mut self, seqs: &[Seq], i: usize, from: usize, to: usize, out: &mut Vec<u8>) {
        let seq = &seqs[i];
        for k in from..to {
            // The EOS token is a special token: its chunk has empty content.
            let content = match seq.ids[k] {
                EOS_ID => "",
                _ => seq.text_between(k, k + 1),
            };
            let finish = (k + 1 == seq.len()).then(|| finish_reason(&seq.finish));
            let choice = json!([{"index": 0, "delta": {"role": "assistant", "content": content},
                                 "logprobs": logprobs(&self.0, seq, k, k + 1),
                                 "finish_reason": finish}]);
            self.chunk(choice, None, out);
        }
    }

    fn close(&mut self, seqs: &[Seq], out: &mut Vec<u8>) {
        if let (true, Some(seq)) = (self.0.include_usage, seqs.first()) {
            self.chunk(json!([]), Some(usage(&self.0, seq)), out);
        }
        out.extend_from_slice(b"data:[DONE]\n\n");
    }

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        sse_data(
            out,
            &json!({"error": {"message": message, "http_status_code": 424}}),
        );
    }
}
