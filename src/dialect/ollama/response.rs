//! Whole `/api/generate` and `/api/chat` responses, both directions, and the objects the
//! stream shares.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::created_at;
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Finish, Response, Usage};

/// `done_reason` for a finish reason.
pub fn done_reason(f: Option<&Finish>) -> &'static str {
    match f {
        Some(Finish::Length) => "length",
        // Ollama leaves it empty when generation did not end normally.
        Some(Finish::Abort(_)) => "",
        _ => "stop",
    }
}

/// One object of the answer: `response` (generate) or `message` (chat) carrying `text`.
pub fn object(ctx: &Ctx, chat: bool, text: &str, done: bool) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("model".into(), json!(ctx.model));
    m.insert("created_at".into(), json!(created_at()));
    if chat {
        m.insert(
            "message".into(),
            json!({"role": "assistant", "content": text}),
        );
    } else {
        m.insert("response".into(), json!(text));
    }
    m.insert("done".into(), json!(done));
    m
}

/// Add the final object's fields: `done_reason`, counts, durations in nanoseconds.
///
/// The counts are the upstream's. The durations are lingo's own clock: `total_duration` from
/// the request's arrival to now; when the answer streamed, `prompt_eval_duration` up to the
/// first token and `eval_duration` from there to the end; a whole upstream answer gives no
/// such split, so `prompt_eval_duration` is left out and `eval_duration` is the total.
/// `load_duration` is 0: lingo loads no model. Counts of 0 are left out, as Ollama does.
pub fn metrics(
    m: &mut Map<String, Value>,
    finish: Option<&Finish>,
    usage: &Usage,
    first_token: Option<Duration>,
    total: Duration,
) {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    m.insert("done_reason".into(), json!(done_reason(finish)));
    m.insert("total_duration".into(), json!(ns(total)));
    m.insert("load_duration".into(), json!(0));
    if usage.prompt_tokens > 0 {
        m.insert("prompt_eval_count".into(), json!(usage.prompt_tokens));
    }
    let eval = match first_token {
        Some(ft) => {
            m.insert("prompt_eval_duration".into(), json!(ns(ft)));
            total.saturating_sub(ft)
        }
        None => total,
    };
    if usage.completion_tokens > 0 {
        m.insert("eval_count".into(), json!(usage.completion_tokens));
    }
    m.insert("eval_duration".into(), json!(ns(eval)));
}

pub fn encode(resp: &Response, ctx: &Ctx, chat: bool) -> Vec<u8> {
    let empty = Choice::default();
    let c = resp.choices.first().unwrap_or(&empty);
    let usage = resp.usage.or(c.usage).unwrap_or_default();
    let mut m = object(ctx, chat, &c.text, true);
    metrics(
        &mut m,
        c.finish.as_ref(),
        &usage,
        None,
        ctx.started.elapsed(),
    );
    Value::Object(m).to_string().into_bytes()
}

#[derive(Debug, Deserialize)]
pub struct MessageWire {
    #[serde(default)]
    pub content: String,
}

/// One object of an Ollama answer: the whole response, or a stream line.
#[derive(Debug, Deserialize)]
pub struct ObjectWire {
    #[serde(default)]
    pub model: String,
    pub response: Option<String>,
    pub message: Option<MessageWire>,
    #[serde(default)]
    pub done: bool,
    pub done_reason: Option<String>,
    pub prompt_eval_count: Option<u64>,
    pub eval_count: Option<u64>,
    pub error: Option<Value>,
}

impl ObjectWire {
    pub fn text(&mut self) -> String {
        match (self.response.take(), self.message.take()) {
            (Some(r), _) => r,
            (None, Some(m)) => m.content,
            (None, None) => String::new(),
        }
    }

    /// Ollama does not say whether EOS or a stop string ended the text.
    pub fn finish(&self) -> Option<Finish> {
        if !self.done {
            return None;
        }
        Some(match self.done_reason.as_deref() {
            Some("length") => Finish::Length,
            _ => Finish::Stop,
        })
    }

    /// The final object's counts (absent counts are 0: Ollama omits zeros).
    pub fn usage(&self) -> Option<Usage> {
        self.done.then(|| Usage {
            prompt_tokens: self.prompt_eval_count.unwrap_or(0),
            completion_tokens: self.eval_count.unwrap_or(0),
            cached_tokens: None,
        })
    }
}

pub fn decode(body: &[u8]) -> Result<Response, ProxyError> {
    let mut w: ObjectWire = crate::dialect::json::from_bytes(body)
        .map_err(|e| ProxyError::UpstreamProtocol(format!("Ollama response: {e}")))?;
    let choice = Choice {
        index: 0,
        text: w.text(),
        finish: w.finish(),
        usage: w.usage(),
        ..Choice::default()
    };
    Ok(Response {
        id: String::new(),
        usage: choice.usage,
        model: w.model,
        choices: vec![choice],
    })
}
