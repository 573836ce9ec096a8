//! Whole `/completion` responses, both directions, and the pieces the stream shares.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Finish, Response, TokenLogprob, Usage};

/// `(stop_type, stopping_word)` for a finish reason.
pub fn stop_fields(f: Option<&Finish>) -> (&'static str, &str) {
    match f {
        Some(Finish::StopString(s)) => ("word", s.as_str()),
        Some(Finish::Length) => ("limit", ""),
        Some(Finish::Eos(_) | Finish::StopToken(_) | Finish::Stop) => ("eos", ""),
        Some(Finish::Abort(_)) | None => ("none", ""),
    }
}

/// What lingo measured of one request: time to the first token (when it streamed) and in all.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub first_token: Option<Duration>,
    pub total: Duration,
}

/// llama.cpp's `timings`, synthesized: `prompt_n`, `predicted_n` and `cache_n` are the
/// upstream's counts; the milliseconds are lingo's own clock (request arrival to first token
/// for the prompt, first token to the end for the output). A whole (non-streamed) upstream
/// answer gives no split, so then all the time counts as `predicted_ms` and `prompt_ms` is 0.
pub fn timings(usage: &Usage, m: Measured) -> Value {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (prompt_ms, predicted_ms) = match m.first_token {
        Some(ft) => (ms(ft), ms(m.total.saturating_sub(ft))),
        None => (0.0, ms(m.total)),
    };
    let per_token = |ms: f64, n: u64| if n > 0 { ms / n as f64 } else { 0.0 };
    let per_second = |ms: f64, n: u64| {
        if ms > 0.0 {
            n as f64 * 1000.0 / ms
        } else {
            0.0
        }
    };
    let cached = usage.cached_tokens.unwrap_or(0);
    let (p, c) = (
        usage.prompt_tokens.saturating_sub(cached),
        usage.completion_tokens,
    );
    json!({
        "cache_n": cached,
        "prompt_n": p,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": per_token(prompt_ms, p),
        "prompt_per_second": per_second(prompt_ms, p),
        "predicted_n": c,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": per_token(predicted_ms, c),
        "predicted_per_second": per_second(predicted_ms, c),
    })
}

/// The final (`"stop": true`) object, shared by whole responses and the stream's last event.
pub fn final_json(ctx: &Ctx, c: &Choice, usage: &Usage, m: Measured, content: &str) -> Value {
    let (stop_type, word) = stop_fields(c.finish.as_ref());
    let mut v = json!({
        "index": 0,
        "content": content,
        "tokens": c.token_ids.as_deref().unwrap_or(&[]),
        "stop": true,
        "model": ctx.model,
        "tokens_predicted": usage.completion_tokens,
        "tokens_evaluated": usage.prompt_tokens,
        "has_new_line": c.text.contains('\n'),
        "truncated": false,
        "stop_type": stop_type,
        "stopping_word": word,
        // Prompt and output now held by the upstream's cache, as llama.cpp counts its slot.
        "tokens_cached": usage.prompt_tokens + usage.completion_tokens,
        "timings": timings(usage, m),
    });
    if ctx.logprobs.is_some() {
        v["completion_probabilities"] = probabilities(c.logprobs.as_deref().unwrap_or(&[]));
    }
    v
}

pub fn encode(resp: &Response, ctx: &Ctx) -> Vec<u8> {
    let empty = Choice::default();
    let c = resp.choices.first().unwrap_or(&empty);
    let usage = resp.usage.or(c.usage).unwrap_or_default();
    let m = Measured {
        first_token: None,
        total: ctx.started.elapsed(),
    };
    final_json(ctx, c, &usage, m, &c.text)
        .to_string()
        .into_bytes()
}

/// `completion_probabilities`: `[{id, token, bytes, logprob, top_logprobs:[...]}]`.
pub fn probabilities(lps: &[TokenLogprob]) -> Value {
    let entry = |id: Option<u32>, token: Option<&str>, lp: f64| {
        let t = token.unwrap_or_default();
        json!({"id": id, "token": t, "bytes": t.as_bytes(), "logprob": lp})
    };
    let items: Vec<Value> = lps
        .iter()
        .map(|l| {
            let mut v = entry(l.token_id, l.token.as_deref(), l.logprob);
            let top: Vec<Value> = l
                .top
                .iter()
                .map(|(t, id, lp)| entry(*id, t.as_deref(), *lp))
                .collect();
            v["top_logprobs"] = Value::Array(top);
            v
        })
        .collect();
    Value::Array(items)
}

#[derive(Debug, Deserialize)]
struct ProbWire {
    id: Option<u32>,
    token: Option<String>,
    logprob: Option<f64>,
    /// With `post_sampling_probs` llama.cpp sends probabilities instead.
    prob: Option<f64>,
    #[serde(default, alias = "top_probs")]
    top_logprobs: Vec<ProbWire>,
}

impl ProbWire {
    fn logprob(&self) -> f64 {
        self.logprob.or(self.prob.map(f64::ln)).unwrap_or(-9999.0)
    }
}

pub fn probabilities_from(v: Value) -> Vec<TokenLogprob> {
    let items: Vec<ProbWire> = serde_json::from_value(v).unwrap_or_default();
    items
        .into_iter()
        .map(|p| TokenLogprob {
            logprob: p.logprob(),
            top: p
                .top_logprobs
                .iter()
                .map(|t| (t.token.clone(), t.id, t.logprob()))
                .collect(),
            token: p.token,
            token_id: p.id,
        })
        .collect()
}

#[derive(Debug, Default, Deserialize)]
pub struct TimingsWire {
    pub cache_n: Option<u64>,
}

/// One native result object: the whole answer, or a stream event.
#[derive(Debug, Deserialize)]
pub struct ResultWire {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub content: String,
    pub tokens: Option<Vec<u32>>,
    #[serde(default)]
    pub stop: bool,
    pub tokens_predicted: Option<u64>,
    pub tokens_evaluated: Option<u64>,
    pub stop_type: Option<String>,
    #[serde(default)]
    pub stopping_word: String,
    #[serde(default)]
    pub stopped_eos: bool,
    #[serde(default)]
    pub stopped_word: bool,
    #[serde(default)]
    pub stopped_limit: bool,
    pub timings: Option<TimingsWire>,
    pub completion_probabilities: Option<Value>,
    pub model: Option<String>,
    pub error: Option<Value>,
}

impl ResultWire {
    pub fn finish(&self) -> Option<Finish> {
        if !self.stop {
            return None;
        }
        let word = || Finish::StopString(self.stopping_word.clone());
        Some(match self.stop_type.as_deref() {
            Some("eos") => Finish::Eos(None),
            Some("word") => word(),
            Some("limit") => Finish::Length,
            Some(_) => Finish::Stop,
            None if self.stopped_word => word(),
            None if self.stopped_limit => Finish::Length,
            None if self.stopped_eos => Finish::Eos(None),
            None => Finish::Stop,
        })
    }

    /// Cumulative counts, when this object carries them.
    pub fn usage(&self) -> Option<Usage> {
        let completion = self.tokens_predicted?;
        Some(Usage {
            prompt_tokens: self.tokens_evaluated.unwrap_or(0),
            completion_tokens: completion,
            cached_tokens: self.timings.as_ref().and_then(|t| t.cache_n),
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum BodyWire {
    One(Box<ResultWire>),
    Many(Vec<ResultWire>),
}

pub fn decode(body: &[u8]) -> Result<Response, ProxyError> {
    let w: BodyWire = crate::dialect::json::from_bytes(body)
        .map_err(|e| ProxyError::UpstreamProtocol(format!("completion response: {e}")))?;
    let items = match w {
        BodyWire::One(r) => vec![*r],
        BodyWire::Many(v) => v,
    };
    let model = items
        .first()
        .and_then(|r| r.model.clone())
        .unwrap_or_default();
    let choices = items
        .into_iter()
        .enumerate()
        .map(|(i, r)| Choice {
            index: i as u32,
            finish: r.finish(),
            usage: r.usage(),
            token_ids: r.tokens.filter(|t| !t.is_empty()),
            logprobs: r.completion_probabilities.map(probabilities_from),
            text: r.content,
        })
        .collect();
    Ok(Response {
        id: String::new(),
        model,
        choices,
        usage: None,
    })
}
