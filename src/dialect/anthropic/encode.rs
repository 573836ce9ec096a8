//! Encoding a canonical request for an Anthropic upstream (what `lingo bench` sends).

use serde_json::{json, Map, Value};

use crate::error::ProxyError;
use crate::model::{Message, Prompt, Request, Role, Sampling};

pub fn encode_request(req: &Request) -> Result<Vec<u8>, ProxyError> {
    let Prompt::Chat(messages) = &req.prompt else {
        return Err(ProxyError::unsupported(
            "prompt",
            "the Messages API takes chat messages, not raw prompts or token ids",
        ));
    };
    let model = req
        .model
        .as_deref()
        .ok_or_else(|| ProxyError::unsupported("model", "the Messages API requires a model"))?;
    let max = req.sampling.max_tokens.ok_or_else(|| {
        ProxyError::unsupported(
            "max_tokens",
            "the Messages API requires an explicit max_tokens",
        )
    })?;
    refuse_sampling(req)?;
    let mut m = Map::new();
    m.insert("model".into(), json!(model));
    m.insert("max_tokens".into(), json!(max));
    let (system, turns) = split_system(messages)?;
    if let Some(s) = system {
        m.insert("system".into(), s);
    }
    let last_is_assistant = turns.last().is_some_and(|t| t.role == Role::Assistant);
    if last_is_assistant && !req.continue_final {
        return Err(ProxyError::unsupported(
            "messages",
            "the Messages API continues a final assistant message rather than answering it",
        ));
    }
    let offset = messages.len() - turns.len();
    let mut wire = Vec::with_capacity(turns.len());
    for (i, t) in turns.iter().enumerate() {
        let c = content(offset + i, &t.content)?;
        wire.push(json!({"role": t.role.as_str(), "content": c}));
    }
    m.insert("messages".into(), Value::Array(wire));
    write_sampling(&req.sampling, &mut m);
    if req.stream {
        m.insert("stream".into(), json!(true));
    }
    serde_json::to_vec(&m).map_err(|e| ProxyError::Internal(e.to_string()))
}

fn write_sampling(s: &Sampling, m: &mut Map<String, Value>) {
    if !s.stop.is_empty() {
        m.insert("stop_sequences".into(), json!(s.stop));
    }
    if let Some(t) = s.temperature {
        m.insert("temperature".into(), json!(t));
    }
    if let Some(p) = s.top_p {
        m.insert("top_p".into(), json!(p));
    }
    // Anthropic has no "off" value for top_k: 0 and -1 mean off elsewhere, so omit them.
    if let Some(k) = s.top_k.filter(|&k| k > 0) {
        m.insert("top_k".into(), json!(k));
    }
    if s.ignore_eos {
        // lingo's extension (see the module quirks).
        m.insert("ignore_eos".into(), json!(true));
    }
}

/// Sampling the Messages API cannot express.
fn refuse_sampling(req: &Request) -> Result<(), ProxyError> {
    let s = &req.sampling;
    let set = [
        ("n", s.n > 1),
        ("seed", s.seed.is_some()),
        ("logprobs", req.logprobs.is_some()),
        ("min_tokens", s.min_tokens.is_some_and(|v| v > 0)),
        ("min_p", s.min_p.is_some_and(|v| v > 0.0)),
        (
            "frequency_penalty",
            s.frequency_penalty.is_some_and(|v| v != 0.0),
        ),
        (
            "presence_penalty",
            s.presence_penalty.is_some_and(|v| v != 0.0),
        ),
        (
            "repetition_penalty",
            s.repetition_penalty.is_some_and(|v| v != 1.0),
        ),
        ("stop_token_ids", !s.stop_token_ids.is_empty()),
        ("skip_special_tokens", s.skip_special_tokens == Some(false)),
        (
            "spaces_between_special_tokens",
            s.spaces_between_special_tokens == Some(false),
        ),
        ("include_stop_str_in_output", s.include_stop),
        ("json_schema", s.json_schema.is_some()),
        ("regex", s.regex.is_some()),
        ("ebnf", s.ebnf.is_some()),
        ("stop_regex", !s.stop_regex.is_empty()),
        ("logit_bias", s.logit_bias.is_some()),
        ("temperature", s.temperature.is_some_and(|t| t > 1.0)),
    ];
    match set.iter().find(|(_, on)| *on) {
        Some((field, _)) => Err(ProxyError::unsupported(
            *field,
            "the Messages API has no equivalent (temperature is 0 to 1 there)",
        )),
        None => Ok(()),
    }
}

/// Leading system messages become `system`; a system message later on has no place.
fn split_system(messages: &[Message]) -> Result<(Option<Value>, &[Message]), ProxyError> {
    let n = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let (system, turns) = messages.split_at(n);
    if let Some(i) = turns
        .iter()
        .position(|m| m.role != Role::User && m.role != Role::Assistant)
    {
        return Err(ProxyError::unsupported(
            format!("messages[{}].role", n + i),
            "the Messages API has user and assistant turns only, and the system prompt first",
        ));
    }
    let text: Vec<String> = system.iter().map(|m| plain_text(&m.content)).collect();
    let system = (!system.is_empty()).then(|| json!(text.join("\n\n")));
    Ok((system, turns))
}

fn plain_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Message content: a string, or text parts as text blocks; other parts are refused.
fn content(i: usize, v: &Value) -> Result<Value, ProxyError> {
    match v {
        Value::String(_) => Ok(v.clone()),
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| match (p.get("type"), p.get("text")) {
                (Some(t), Some(Value::String(text))) if t == "text" => {
                    Ok(json!({"type": "text", "text": text}))
                }
                _ => Err(ProxyError::unsupported(
                    format!("messages[{i}].content[{j}]"),
                    "only text parts are translated to the Messages API",
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Null => Ok(json!("")),
        _ => Err(ProxyError::unsupported(
            format!("messages[{i}].content"),
            "only text content is translated to the Messages API",
        )),
    }
}
