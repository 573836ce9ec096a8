//! Ollama answer objects: a delta per line with `"done": false`, then the final object.

use axum::response::{IntoResponse, Response};
use http::header::CONTENT_TYPE;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use crate::mock::generate::{Finish, Seq};
use crate::mock::prompt::Prompt;
use crate::mock::sse::Encoder;

pub(crate) struct Ctx {
    pub chat: bool,
    pub model: String,
    pub start: Instant,
    pub first: Option<Instant>,
    pub prompt: Option<Prompt>,
}

fn created_at() -> String {
    humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string()
}

impl Ctx {
    fn object(&self, text: &str, done: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("model".into(), json!(self.model));
        m.insert("created_at".into(), json!(created_at()));
        if self.chat {
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

    /// The final object: reason, `context` (generate), counts and durations in nanoseconds,
    /// each left out when zero (Go's `omitempty`).
    fn last(&self, seq: &Seq, text: &str) -> Map<String, Value> {
        let mut m = self.object(text, true);
        let reason = match seq.finish {
            Finish::Length => "length",
            _ => "stop",
        };
        m.insert("done_reason".into(), json!(reason));
        let prompt = self.prompt.as_ref();
        if !self.chat {
            let mut ctx: Vec<u32> = prompt.map(|p| p.ids.clone()).unwrap_or_default();
            ctx.extend_from_slice(&seq.ids);
            m.insert("context".into(), json!(ctx));
        }
        let now = Instant::now();
        let first = self.first.unwrap_or(now);
        // A real server never takes no time: at least 1 ns, so no duration is left out.
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        let fields = [
            ("total_duration", ns(now - self.start)),
            ("load_duration", 0),
            (
                "prompt_eval_count",
                prompt.map_or(0, |p| u64::from(p.len())),
            ),
            ("prompt_eval_duration", ns(first - self.start)),
            ("eval_count", seq.len() as u64),
            ("eval_duration", ns(now - first)),
        ];
        for (k, v) in fields {
            if v > 0 {
                m.insert(k.into(), json!(v));
            }
        }
        m
    }
}

fn line(out: &mut Vec<u8>, m: Map<String, Value>) {
    if let Err(err) = serde_json::to_writer(&mut *out, &Value::Object(m)) {
        tracing::error!(%err, "mock: cannot encode an NDJSON line");
    }
    out.push(b'\n');
}

/// The whole answer (`stream: false`).
pub(crate) fn body(ctx: &Ctx, seqs: &[Seq]) -> String {
    match seqs.first() {
        Some(seq) => Value::Object(ctx.last(seq, &seq.text)).to_string(),
        None => String::new(),
    }
}

/// An empty prompt loads the model and answers at once, `done_reason: "load"`.
pub(crate) fn loaded(ctx: &Ctx, stream: bool) -> Response {
    let mut m = ctx.object("", true);
    m.insert("done_reason".into(), json!("load"));
    let mut out = Vec::new();
    line(&mut out, m);
    let ct = if stream {
        "application/x-ndjson"
    } else {
        "application/json"
    };
    ([(CONTENT_TYPE, ct)], out).into_response()
}

pub(crate) struct Stream(pub Ctx);

impl Encoder for Stream {
    fn tokens(&mut self, seqs: &[Seq], i: usize, from: usize, to: usize, out: &mut Vec<u8>) {
        let text = seqs[i].text_between(from, to);
        if text.is_empty() {
            return;
        }
        self.0.first.get_or_insert_with(Instant::now);
        line(out, self.0.object(text, false));
    }

    fn close(&mut self, seqs: &[Seq], out: &mut Vec<u8>) {
        if let Some(seq) = seqs.first() {
            line(out, self.0.last(seq, ""));
        }
    }

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        line(out, Map::from_iter([("error".to_owned(), json!(message))]));
    }

    fn malformed(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"model\":\"mock\",\"response\":\n");
    }
}
