//! Whole chat responses, both directions.

use serde::Deserialize;
use serde_json::{json, Value};

use super::logprobs;
use crate::dialect::openai::wire::{finish_from_wire, finish_to_wire, usage_json, UsageWire};
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Response};

#[derive(Debug, Deserialize)]
struct MessageWire {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChoiceWire {
    #[serde(default)]
    index: u32,
    message: MessageWire,
    finish_reason: Option<String>,
    stop_reason: Option<Value>,
    /// SGLang's OpenAI routes name the matched stop this way.
    matched_stop: Option<Value>,
    logprobs: Option<Value>,
    token_ids: Option<Vec<u32>>,
}

#[derive(Debug, Deserialize)]
struct ChatResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    choices: Vec<ChoiceWire>,
    usage: Option<UsageWire>,
}

pub fn decode_response(body: &[u8]) -> Result<Response, ProxyError> {
    let w: ChatResponse = crate::dialect::json::from_bytes(body)
        .map_err(|e| ProxyError::UpstreamProtocol(format!("chat response: {e}")))?;
    let choices = w
        .choices
        .into_iter()
        .map(|c| Choice {
            index: c.index,
            text: c.message.content.unwrap_or_default(),
            finish: finish_from_wire(
                c.finish_reason.as_deref(),
                c.stop_reason.as_ref().or(c.matched_stop.as_ref()),
            ),
            logprobs: c
                .logprobs
                .filter(|v| !v.is_null())
                .map(|v| logprobs::logprobs_from_value(v, c.token_ids.as_deref())),
            token_ids: c.token_ids,
            usage: None,
        })
        .collect();
    Ok(Response {
        id: w.id,
        model: w.model,
        choices,
        usage: w.usage.map(Into::into),
    })
}

pub fn encode_response(resp: &Response, ctx: &Ctx) -> Vec<u8> {
    let choices: Vec<Value> = resp
        .choices
        .iter()
        .map(|c| {
            let (finish, stop) = finish_to_wire(c.finish.as_ref());
            let lp = match (&c.logprobs, ctx.logprobs) {
                (Some(l), Some(_)) => logprobs::to_wire(l),
                _ => Value::Null,
            };
            json!({"index": c.index,
                   "message": {"role": "assistant", "content": c.text},
                   "logprobs": lp, "finish_reason": finish, "stop_reason": stop})
        })
        .collect();
    let usage = resp.usage.unwrap_or_default();
    json!({
        "id": ctx.id, "object": "chat.completion", "created": ctx.created, "model": ctx.model,
        "choices": choices, "usage": usage_json(&usage),
    })
    .to_string()
    .into_bytes()
}
