//! Whole Messages responses, both directions, and the wire pieces streams share with them
//! (stop reasons, usage).

use serde::Deserialize;
use serde_json::{json, Value};

use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Finish, Response, Usage};

/// `(stop_reason, stop_sequence)` for a canonical finish (dialects.md 8.3). An abort has no
/// Anthropic stop reason: `null` in a whole response; streams send an error event instead.
pub fn stop_reason(f: Option<&Finish>) -> (Value, Value) {
    match f {
        Some(Finish::Eos(_) | Finish::StopToken(_) | Finish::Stop) => {
            (json!("end_turn"), Value::Null)
        }
        Some(Finish::StopString(s)) => (json!("stop_sequence"), json!(s)),
        Some(Finish::Length) => (json!("max_tokens"), Value::Null),
        Some(Finish::Abort(_)) | None => (Value::Null, Value::Null),
    }
}

/// Read `stop_reason` / `stop_sequence` from an Anthropic upstream.
pub fn finish_from_wire(reason: Option<&str>, sequence: Option<String>) -> Option<Finish> {
    Some(match reason? {
        "end_turn" => Finish::Eos(None),
        "stop_sequence" => sequence.map_or(Finish::Stop, Finish::StopString),
        "max_tokens" | "model_context_window_exceeded" => Finish::Length,
        _ => Finish::Stop,
    })
}

/// Anthropic's `usage`: `input_tokens` without the cached part, which is
/// `cache_read_input_tokens` when the upstream reported it.
pub fn usage_json(u: &Usage) -> Value {
    let cached = u.cached_tokens.unwrap_or(0).min(u.prompt_tokens);
    let mut v = json!({
        "input_tokens": u.prompt_tokens - cached,
        "output_tokens": u.completion_tokens,
    });
    if u.cached_tokens.is_some() {
        v["cache_read_input_tokens"] = json!(cached);
    }
    v
}

pub fn encode_response(resp: &Response, ctx: &Ctx) -> Vec<u8> {
    let choice = resp.choices.iter().find(|c| c.index == 0);
    let text = choice.map_or("", |c| c.text.as_str());
    let content: Vec<Value> = match text {
        "" => Vec::new(),
        t => vec![json!({"type": "text", "text": t})],
    };
    let (reason, sequence) = stop_reason(choice.and_then(|c| c.finish.as_ref()));
    json!({
        "id": ctx.id, "type": "message", "role": "assistant", "model": ctx.model,
        "content": content, "stop_reason": reason, "stop_sequence": sequence,
        "usage": usage_json(&resp.usage.unwrap_or_default()),
    })
    .to_string()
    .into_bytes()
}

#[derive(Debug, Default, Deserialize)]
pub struct UsageWire {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

impl UsageWire {
    /// Canonical counts: the prompt is every input token, cached or not.
    pub fn to_usage(&self, input: u64) -> Usage {
        let cached = self.cache_read_input_tokens;
        Usage {
            prompt_tokens: input
                + cached.unwrap_or(0)
                + self.cache_creation_input_tokens.unwrap_or(0),
            completion_tokens: self.output_tokens,
            cached_tokens: cached,
        }
    }
}

#[derive(Debug, Deserialize)]
struct BlockWire {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: String,
}

#[derive(Debug, Deserialize)]
struct MessageWire {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    content: Vec<BlockWire>,
    stop_reason: Option<String>,
    stop_sequence: Option<String>,
    usage: Option<UsageWire>,
}

pub fn decode_response(body: &[u8]) -> Result<Response, ProxyError> {
    let w: MessageWire = crate::dialect::json::from_bytes(body)
        .map_err(|e| ProxyError::UpstreamProtocol(format!("messages response: {e}")))?;
    let text: String = w
        .content
        .iter()
        .filter(|b| b.kind == "text")
        .map(|b| b.text.as_str())
        .collect();
    Ok(Response {
        id: w.id,
        model: w.model,
        choices: vec![Choice {
            index: 0,
            text,
            finish: finish_from_wire(w.stop_reason.as_deref(), w.stop_sequence),
            ..Choice::default()
        }],
        usage: w.usage.map(|u| u.to_usage(u.input_tokens.unwrap_or(0))),
    })
}
