//! llama-server's OpenAI routes, with the shapes a real server sends (dialects.md 4.3):
//! `chatcmpl-` ids on both endpoints, the alias as `model`, no `stop_reason`, usage and
//! `timings` always on whole answers; completions streams end with an empty-text chunk that
//! carries `finish_reason`, `usage` and `timings` together; chat streams open with
//! `content: null`, finish with an empty delta, and add a usage chunk only when asked.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::StatusCode;
use serde_json::{json, Value};

use super::timing::Clock;
use super::BUILD;
use crate::mock::driver::{self, Generation};
use crate::mock::generate::{generate_all, Finish, Params, Seq};
use crate::mock::openai::request::{chat_prompt, ChatRequest, Common, CompletionRequest};
use crate::mock::prompt::Prompt;
use crate::mock::sched::QUEUE_FULL;
use crate::mock::sse::{sse_done, sse_event, Encoder};
use crate::mock::state::MockState;

struct Ctx {
    chat: bool,
    id: String,
    created: u64,
    model: String,
    prompts: Vec<Prompt>,
    include_usage: bool,
    clock: Clock,
}

impl Ctx {
    fn envelope(&self, choices: Value) -> Value {
        json!({
            "choices": choices, "created": self.created, "model": self.model,
            "system_fingerprint": BUILD,
            "object": if self.chat { "chat.completion.chunk" } else { "text_completion" },
            "id": self.id,
        })
    }

    fn totals(&self, seqs: &[Seq]) -> (u64, u64) {
        let prompt = self.prompts.iter().map(|p| u64::from(p.len())).sum();
        (prompt, seqs.iter().map(|s| s.len() as u64).sum())
    }

    fn usage(&self, seqs: &[Seq]) -> Value {
        let (p, c) = self.totals(seqs);
        json!({"completion_tokens": c, "prompt_tokens": p, "total_tokens": p + c,
               "prompt_tokens_details": {"cached_tokens": 0}})
    }

    fn timings(&self, seqs: &[Seq]) -> Value {
        let (p, c) = self.totals(seqs);
        self.clock.timings(p, c)
    }
}

fn reason(seq: &Seq) -> &'static str {
    match seq.finish {
        Finish::Length => "length",
        _ => "stop",
    }
}

pub(crate) async fn completions(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let parsed = serde_json::from_slice::<CompletionRequest>(&body)
        .map_err(|e| e.to_string())
        .and_then(|r| {
            let prompts = r.prompt.into_prompts().map_err(|e| e.message)?;
            Ok((r.common, prompts, r.max_tokens))
        });
    answer(state, parsed, false).await
}

pub(crate) async fn chat(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let parsed = serde_json::from_slice::<ChatRequest>(&body)
        .map_err(|e| e.to_string())
        .and_then(|r| {
            if r.messages.is_empty() {
                return Err("'messages' must be a non-empty array".to_owned());
            }
            let max = r.max_completion_tokens.or(r.max_tokens);
            Ok((r.common, vec![chat_prompt(&r.messages)], max))
        });
    answer(state, parsed, true).await
}

type Parsed = Result<(Common, Vec<Prompt>, Option<u32>), String>;

async fn answer(state: Arc<MockState>, parsed: Parsed, chat: bool) -> Response {
    let clock = Clock::new();
    let (mut guard, ordinal) = state.begin();
    if state.should_fail(ordinal) {
        guard.fail();
        return super::error(StatusCode::INTERNAL_SERVER_ERROR, "mock: injected failure");
    }
    let (common, prompts, max) = match parsed {
        Ok(p) => p,
        Err(msg) => {
            guard.fail();
            return super::error(StatusCode::BAD_REQUEST, &msg);
        }
    };
    let max_len = state.config.max_model_len;
    if prompts.iter().any(|p| p.len() >= max_len) {
        guard.fail();
        return super::error(
            StatusCode::BAD_REQUEST,
            "the request exceeds the available context size, try increasing it",
        );
    }
    // llama.cpp has no min_tokens nor stop token ids: those fields are ignored.
    let base = Params {
        min_tokens: 0,
        stop_token_ids: Vec::new(),
        keep_stop: false,
        ..common.params()
    };
    let params: Vec<Params> = prompts
        .iter()
        .map(|p| {
            let room = max_len - p.len();
            Params {
                max_tokens: max.map_or(room, |m| m.min(room)),
                ..base.clone()
            }
        })
        .collect();
    let n = common.n.unwrap_or(1).max(1);
    if guard.admit(&prompts).is_err() {
        guard.fail();
        return super::error(StatusCode::SERVICE_UNAVAILABLE, QUEUE_FULL);
    }
    let seqs = generate_all(&prompts, &params, n, state.config.eos_seed);
    let stream = common.stream.unwrap_or(false);
    let ctx = Ctx {
        chat,
        id: format!("chatcmpl-{:032x}", rand::random::<u128>()),
        created: crate::mock::openai::now(),
        model: state.model(),
        include_usage: stream
            && common
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
        prompts,
        clock,
    };
    let (prompt_tokens, completion_tokens) = ctx.totals(&seqs);
    let mut generation = Generation {
        seqs,
        prompt_tokens,
        completion_tokens,
        guard,
    };
    if stream {
        return driver::stream(state, generation, Stream(ctx));
    }
    driver::pace_whole(&state, &mut generation.guard, &generation.seqs).await;
    let choices: Vec<Value> = generation
        .seqs
        .iter()
        .enumerate()
        .map(|(i, s)| match chat {
            true => json!({"finish_reason": reason(s), "index": i,
                           "message": {"role": "assistant", "content": s.text}}),
            false => json!({"text": s.text, "index": i, "logprobs": null,
                            "finish_reason": reason(s)}),
        })
        .collect();
    let mut v = ctx.envelope(Value::Array(choices));
    v["object"] = json!(if chat {
        "chat.completion"
    } else {
        "text_completion"
    });
    v["usage"] = ctx.usage(&generation.seqs);
    v["timings"] = ctx.timings(&generation.seqs);
    generation.guard.complete(prompt_tokens, completion_tokens);
    ([(CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

struct Stream(Ctx);

impl Encoder for Stream {
    fn open(&mut self, seqs: &[Seq], out: &mut Vec<u8>) {
        let ctx = &self.0;
        if !ctx.chat {
            return;
        }
        for i in 0..seqs.len() {
            let choice = json!({"finish_reason": null, "index": i,
                                "delta": {"role": "assistant", "content": null}});
            sse_event(out, &ctx.envelope(json!([choice])));
        }
    }

    fn tokens(&mut self, seqs: &[Seq], i: usize, from: usize, to: usize, out: &mut Vec<u8>) {
        let ctx = &mut self.0;
        let text = seqs[i].text_between(from, to);
        if text.is_empty() {
            return;
        }
        ctx.clock.mark_first();
        let choice = match ctx.chat {
            true => json!({"finish_reason": null, "index": i, "delta": {"content": text}}),
            false => json!({"text": text, "index": i, "logprobs": null, "finish_reason": null}),
        };
        sse_event(out, &ctx.envelope(json!([choice])));
    }

    fn close(&mut self, seqs: &[Seq], out: &mut Vec<u8>) {
        let ctx = &self.0;
        let last = seqs.len().saturating_sub(1);
        for (i, seq) in seqs.iter().enumerate() {
            let choice = match ctx.chat {
                true => json!({"finish_reason": reason(seq), "index": i, "delta": {}}),
                false => json!({"text": "", "index": i, "logprobs": null,
                                "finish_reason": reason(seq)}),
            };
            let mut v = ctx.envelope(json!([choice]));
            if i == last && !ctx.chat {
                // Completions: usage and timings ride on the last chunk, always.
                v["usage"] = ctx.usage(seqs);
                v["timings"] = ctx.timings(seqs);
            } else if i == last && !ctx.include_usage {
                v["timings"] = ctx.timings(seqs);
            }
            sse_event(out, &v);
        }
        if ctx.chat && ctx.include_usage {
            let mut v = ctx.envelope(json!([]));
            v["usage"] = ctx.usage(seqs);
            v["timings"] = ctx.timings(seqs);
            sse_event(out, &v);
        }
        sse_done(out);
    }

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        let body = json!({"error": {"code": 500, "message": message, "type": "server_error"}});
        sse_event(out, &body);
    }
}
