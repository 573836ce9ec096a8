//! Native `POST /completion`: request parsing, the final result object and the stream.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::timing::Clock;
use crate::mock::driver::{self, Generation};
use crate::mock::generate::{generate_all, logprob, top_alternatives, Finish, Params, Seq};
use crate::mock::prompt::Prompt;
use crate::mock::sched::QUEUE_FULL;
use crate::mock::sse::{sse_event, Encoder};
use crate::mock::state::MockState;
use crate::mock::vocab::{decode, encode, EOS_ID};

#[derive(Deserialize)]
struct NativeRequest {
    prompt: Option<Value>,
    n_predict: Option<i64>,
    max_tokens: Option<i64>,
    stream: Option<bool>,
    /// An array of strings; anything else is ignored, as llama.cpp does.
    stop: Option<Value>,
    ignore_eos: Option<bool>,
    n_probs: Option<u32>,
    return_tokens: Option<bool>,
}

const PROMPT_ERROR: &str = "\"prompt\" elements must be a string, a list of tokens, a JSON \
     object containing a prompt string, or a list of mixed strings & tokens.";

/// One prompt: a string, token ids, or a mix of both.
fn one_prompt(v: &Value) -> Option<Prompt> {
    match v {
        Value::String(s) => Some(Prompt::from_text(s.clone())),
        Value::Array(items) => {
            let mut ids = Vec::new();
            for item in items {
                match item {
                    Value::Number(n) => ids.push(u32::try_from(n.as_u64()?).ok()?),
                    Value::String(s) => ids.extend(encode(s)),
                    _ => return None,
                }
            }
            Some(Prompt::from_ids(ids))
        }
        _ => None,
    }
}

/// llama.cpp's reading of `prompt`: one prompt, or a list of prompts (a result array).
fn prompts(v: Option<&Value>) -> Option<(Vec<Prompt>, bool)> {
    let v = v?;
    let is_single = match v {
        Value::Array(items) => items.iter().any(Value::is_number),
        _ => true,
    };
    if is_single {
        return one_prompt(v).map(|p| (vec![p], false));
    }
    let items = v.as_array()?;
    let list: Option<Vec<Prompt>> = items.iter().map(one_prompt).collect();
    list.filter(|l| !l.is_empty()).map(|l| (l, true))
}

pub(crate) async fn completion(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let clock = Clock::new();
    let (mut guard, ordinal) = state.begin();
    if state.should_fail(ordinal) {
        guard.fail();
        return super::error(StatusCode::INTERNAL_SERVER_ERROR, "mock: injected failure");
    }
    let req = match serde_json::from_slice::<NativeRequest>(&body) {
        Ok(r) => r,
        Err(e) => {
            guard.fail();
            return super::error(StatusCode::BAD_REQUEST, &e.to_string());
        }
    };
    let Some((prompts, multi)) = prompts(req.prompt.as_ref()) else {
        guard.fail();
        return super::error(StatusCode::BAD_REQUEST, PROMPT_ERROR);
    };
    let max_len = state.config.max_model_len;
    let mut params = Vec::with_capacity(prompts.len());
    for p in &prompts {
        if p.len() >= max_len {
            guard.fail();
            return super::error(
                StatusCode::BAD_REQUEST,
                "the request exceeds the available context size, try increasing it",
            );
        }
        let room = max_len - p.len();
        let n_predict = req.n_predict.or(req.max_tokens).unwrap_or(-1);
        let max_tokens = u32::try_from(n_predict).map_or(room, |n| n.min(room));
        let stop = match &req.stop {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        params.push(Params {
            max_tokens,
            ignore_eos: req.ignore_eos.unwrap_or(false),
            stop,
            ..Params::default()
        });
    }
    if guard.admit(&prompts).is_err() {
        guard.fail();
        return super::error(StatusCode::SERVICE_UNAVAILABLE, QUEUE_FULL);
    }
    let seqs = generate_all(&prompts, &params, 1, state.config.eos_seed);
    let prompt_tokens = prompts.iter().map(|p| u64::from(p.len())).sum();
    let completion_tokens = seqs.iter().map(|s| s.len() as u64).sum();
    let ctx = Ctx {
        model: state.model(),
        prompts,
        multi,
        n_probs: req.n_probs.unwrap_or(0),
        return_tokens: req.return_tokens.unwrap_or(false),
        clock,
    };
    let mut generation = Generation {
        seqs,
        prompt_tokens,
        completion_tokens,
        guard,
    };
    if req.stream.unwrap_or(false) {
        return driver::stream(state, generation, Stream(ctx));
    }
    driver::pace_whole(&state, &mut generation.guard, &generation.seqs).await;
    let results: Vec<Value> = generation
        .seqs
        .iter()
        .enumerate()
        .map(|(i, s)| ctx.result(s, i, false))
        .collect();
    let body = match (multi, results.len()) {
        (false, 1) => results.into_iter().next().unwrap_or(Value::Null),
        _ => Value::Array(results),
    };
    generation.guard.complete(prompt_tokens, completion_tokens);
    ([(CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

struct Ctx {
    model: String,
    prompts: Vec<Prompt>,
    multi: bool,
    n_probs: u32,
    return_tokens: bool,
    clock: Clock,
}

impl Ctx {
    fn prompt_len(&self, seq: &Seq) -> u64 {
        self.prompts
            .get(seq.prompt_idx)
            .map_or(0, |p| u64::from(p.len()))
    }

    /// The final object of sequence `i`: the whole text (empty in a stream) and the counts.
    fn result(&self, seq: &Seq, i: usize, streaming: bool) -> Value {
        let (stop_type, word) = match &seq.finish {
            Finish::Eos | Finish::StopToken(_) => ("eos", ""),
            Finish::StopString(s) => ("word", s.as_str()),
            Finish::Length => ("limit", ""),
        };
        let prompt = self.prompt_len(seq);
        let predicted = seq.len() as u64;
        let tokens = if self.return_tokens && !streaming {
            visible(&seq.ids)
        } else {
            Vec::new()
        };
        let mut v = json!({
            "index": i, "content": if streaming { "" } else { seq.text.as_str() },
            "tokens": tokens, "id_slot": 0, "stop": true, "model": self.model,
            "tokens_predicted": predicted, "tokens_evaluated": prompt,
            "generation_settings": {"n_predict": -1, "temperature": 0.8},
            "prompt": self.prompts.get(seq.prompt_idx).map(Prompt::echo_text),
            "has_new_line": seq.text.contains('\n'), "truncated": false,
            "stop_type": stop_type, "stopping_word": word,
            "tokens_cached": prompt + predicted,
            "timings": self.clock.timings(prompt, predicted),
        });
        if self.n_probs > 0 && !streaming {
            v["completion_probabilities"] = self.probs(seq, 0, seq.len());
        }
        v
    }

    /// `completion_probabilities` of tokens `from..to`.
    fn probs(&self, seq: &Seq, from: usize, to: usize) -> Value {
        let entry = |id: u32, lp: f64| {
            let t = decode(id);
            json!({"id": id, "token": t, "bytes": t.as_bytes(), "logprob": lp})
        };
        let items: Vec<Value> = (from..to.min(seq.len()))
            .filter(|&i| seq.ids[i] != EOS_ID)
            .map(|i| {
                let (id, lp) = (seq.ids[i], logprob(seq.key, i));
                let mut e = entry(id, lp);
                let top: Vec<Value> = top_alternatives(id, lp, self.n_probs as usize)
                    .map(|(t, l)| entry(t, l))
                    .collect();
                e["top_logprobs"] = Value::Array(top);
                e
            })
            .collect();
        Value::Array(items)
    }
}

/// Output ids without the end-of-sequence token, which llama.cpp does not stream.
fn visible(ids: &[u32]) -> Vec<u32> {
    ids.iter().copied().filter(|&id| id != EOS_ID).collect()
}

struct Stream(Ctx);

impl Encoder for Stream {
    fn tokens(&mut self, seqs: &[Seq], i: usize, from: usize, to: usize, out: &mut Vec<u8>) {
        let ctx = &mut self.0;
        let seq = &seqs[i];
        let text = seq.text_between(from, to);
        let ids = visible(seq.ids.get(from..to).unwrap_or(&[]));
        if text.is_empty() && ids.is_empty() {
            return;
        }
        ctx.clock.mark_first();
        let mut v = Map::new();
        v.insert("index".into(), json!(i));
        v.insert("content".into(), json!(text));
        v.insert("tokens".into(), json!(ids));
        v.insert("stop".into(), json!(false));
        v.insert("id_slot".into(), json!(-1));
        v.insert("tokens_predicted".into(), json!(to));
        v.insert("tokens_evaluated".into(), json!(ctx.prompt_len(seq)));
        if ctx.n_probs > 0 {
            v.insert("completion_probabilities".into(), ctx.probs(seq, from, to));
        }
        sse_event(out, &Value::Object(v));
    }

    /// One final event per sequence; then the connection closes (no `[DONE]`).
    fn close(&mut self, seqs: &[Seq], out: &mut Vec<u8>) {
        for (i, seq) in seqs.iter().enumerate() {
            let mut v = self.0.result(seq, i, true);
            if !self.0.multi {
                v["index"] = json!(0);
            }
            sse_event(out, &v);
        }
    }

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        let body = json!({"error": {"code": 500, "message": message, "type": "server_error"}});
        sse_event(out, &body);
    }
}
