//! Whole completions responses, both directions.

use serde::Deserialize;
use serde_json::{json, Value};

use super::logprobs;
use crate::dialect::openai::wire::{finish_from_wire, finish_to_wire, usage_json, UsageWire};
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Response, Usage};

#[derive(Debug, Deserialize)]
struct ChoiceWire {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    text: String,
    finish_reason: Option<String>,
    stop_reason: Option<Value>,
    /// SGLang's OpenAI routes name the matched stop this way.
    matched_stop: Option<Value>,
    /// OpenAI's completions shape, or llama.cpp's chat-shaped one.
    logprobs: Option<Value>,
    token_ids: Option<Vec<u32>>,
    prompt_token_ids: Option<Vec<u32>>,
}

#[derive(Debug, Deserialize)]
struct CompletionResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    choices: Vec<ChoiceWire>,
    usage: Option<UsageWire>,
}

pub fn decode_response(body: &[u8]) -> Result<Response, ProxyError> {
    let fast = std::str::from_utf8(body)
        .ok()
        .and_then(super::super::summary::completion);
    match fast {
        Some(r) => Ok(r),
        None => decode_by_serde(body),
    }
}

/// `decode_response` by serde alone: what the fast reader must agree with, and what reads
/// what it is not sure of.
pub(crate) fn decode_by_serde(body: &[u8]) -> Result<Response, ProxyError> {
    let w: CompletionResponse = crate::dialect::json::from_bytes(body)
        .map_err(|e| ProxyError::UpstreamProtocol(format!("completions response: {e}")))?;
    let choices = w
        .choices
        .into_iter()
        .map(|c| Choice {
            index: c.index,
            finish: finish_from_wire(
                c.finish_reason.as_deref(),
                c.stop_reason.as_ref().or(c.matched_stop.as_ref()),
            ),
            logprobs: c
                .logprobs
                .filter(|l| !l.is_null())
                .map(|l| super::logprobs_from_value(l, c.token_ids.as_deref())),
            // With vLLM's `return_token_ids` each choice's counts are exact.
            usage: match (&c.prompt_token_ids, &c.token_ids) {
                (Some(p), Some(t)) => Some(Usage {
                    prompt_tokens: p.len() as u64,
                    completion_tokens: t.len() as u64,
                    cached_tokens: None,
                }),
                _ => None,
            },
            text: c.text,
            token_ids: c.token_ids,
        })
        .collect();
    Ok(Response {
        id: w.id,
        model: w.model,
        choices,
        usage: w.usage.map(Into::into),
    })
}

pub fn choice_json(c: &Choice, ctx: &Ctx) -> Value {
    let (finish, stop) = finish_to_wire(c.finish.as_ref());
    let lp = match (&c.logprobs, ctx.logprobs) {
        (Some(l), Some(_)) => logprobs::to_wire(l, 0),
        _ => Value::Null,
    };
    json!({"index": c.index, "text": c.text, "logprobs": lp,
           "finish_reason": finish, "stop_reason": stop})
}

pub fn encode_response(resp: &Response, ctx: &Ctx) -> Vec<u8> {
    let choices: Vec<Value> = resp.choices.iter().map(|c| choice_json(c, ctx)).collect();
    let usage = resp.usage.unwrap_or_default();
    json!({
        "id": ctx.id, "object": "text_completion", "created": ctx.created, "model": ctx.model,
        "choices": choices, "usage": usage_json(&usage),
    })
    .to_string()
    .into_bytes()
}
