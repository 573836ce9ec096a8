//! Decoding a client's Messages request into the canonical chat request.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{decode_json, ProxyError};
use crate::model::{Message, Prompt, Request, Role};

#[derive(Debug, Deserialize)]
struct MessageWire {
    role: String,
    content: Value,
}

#[derive(Debug, Deserialize)]
struct MessagesRequest {
    model: Option<String>,
    max_tokens: Option<u32>,
    messages: Option<Vec<MessageWire>>,
    system: Option<Value>,
    stop_sequences: Option<Vec<String>>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    stream: Option<bool>,
    /// `{user_id}` for Anthropic's abuse tracking: accepted, not used.
    #[serde(rename = "metadata")]
    _metadata: Option<Map<String, Value>>,
    /// lingo extension (vLLM's name).
    ignore_eos: Option<bool>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    thinking: Option<Value>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// Fields of the Messages API that ask nothing of the generation itself, accepted and
/// ignored: Anthropic's capacity tier, speed mode and region; account attribution; the
/// top-level prompt-caching marker (vLLM and SGLang cache prefixes on their own); cache-miss
/// diagnostics (the answer simply has none).
const IGNORED: &[&str] = &[
    "service_tier",
    "speed",
    "inference_geo",
    "user_profile_id",
    "workspace_id",
    "cache_control",
    "diagnostics",
];

/// Fields of the Messages API lingo knows and cannot carry to a vLLM or SGLang chat route.
const REFUSED: &[(&str, &str)] = &[
    (
        "output_config",
        "structured output and effort settings are not translated",
    ),
    (
        "container",
        "code execution containers do not exist upstream",
    ),
    ("mcp_servers", "MCP servers are not carried to the upstream"),
    (
        "context_management",
        "context editing is not carried to the upstream",
    ),
];

/// How this dialect names a canonical field, for error messages.
pub fn field_name(canonical: &str) -> String {
    match canonical {
        // A final assistant turn is Anthropic's prefill: `continue_final` comes from it.
        "prompt" | "messages" | "continue_final" => "messages".into(),
        "stop" => "stop_sequences".into(),
        other => other.into(),
    }
}

pub fn decode_request(body: &[u8]) -> Result<Request, ProxyError> {
    let w: MessagesRequest = decode_json(body)?;
    refuse_unsupported(&w)?;
    let model = w
        .model
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ProxyError::invalid("model", "Field required"))?;
    let max_tokens = w
        .max_tokens
        .ok_or_else(|| ProxyError::invalid("max_tokens", "Field required"))?;
    if max_tokens == 0 {
        return Err(ProxyError::invalid("max_tokens", "must be at least 1"));
    }
    if let Some(t) = w.temperature.filter(|t| !(0.0..=1.0).contains(t)) {
        return Err(ProxyError::invalid(
            "temperature",
            format!("must be between 0 and 1, got {t}"),
        ));
    }
    let wire_messages = w
        .messages
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ProxyError::invalid("messages", "at least one message is required"))?;
    let mut messages = Vec::with_capacity(wire_messages.len() + 1);
    if let Some(system) = w.system.filter(|s| !s.is_null()) {
        let content = content("system", system)?;
        if !is_empty_content(&content) {
            messages.push(Message {
                role: Role::System,
                content,
            });
        }
    }
    for (i, m) in wire_messages.into_iter().enumerate() {
        let role = match m.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(ProxyError::invalid(
                    format!("messages[{i}].role"),
                    format!("must be `user` or `assistant`, got `{other}` (the system prompt is the top-level `system`)"),
                ))
            }
        };
        messages.push(Message {
            role,
            content: content(&format!("messages[{i}].content"), m.content)?,
        });
    }
    let continue_final = messages.last().is_some_and(|m| m.role == Role::Assistant);
    let mut req = Request::new(Prompt::Chat(messages));
    req.model = Some(model);
    req.stream = w.stream.unwrap_or(false);
    req.continue_final = continue_final;
    let s = &mut req.sampling;
    s.max_tokens = Some(max_tokens);
    s.temperature = w.temperature;
    s.top_p = w.top_p;
    s.top_k = w.top_k;
    s.stop = w.stop_sequences.unwrap_or_default();
    s.ignore_eos = w.ignore_eos.unwrap_or(false);
    Ok(req)
}

fn refuse_unsupported(w: &MessagesRequest) -> Result<(), ProxyError> {
    if w.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ProxyError::unsupported(
            "tools",
            "lingo translates text generation only; tool use is not carried to the upstream",
        ));
    }
    let tool_choice = w.tool_choice.as_ref().filter(|v| !v.is_null());
    if tool_choice.is_some_and(|v| v.get("type") != Some(&json!("none"))) {
        return Err(ProxyError::unsupported(
            "tool_choice",
            "lingo translates text generation only; tool use is not carried to the upstream",
        ));
    }
    let thinking = w.thinking.as_ref().filter(|v| !v.is_null());
    if thinking.is_some_and(|v| v.get("type") != Some(&json!("disabled"))) {
        return Err(ProxyError::unsupported(
            "thinking",
            "extended thinking has no equivalent on the upstream",
        ));
    }
    for (key, value) in &w.extra {
        if value.is_null() || IGNORED.contains(&key.as_str()) {
            continue;
        }
        return Err(match REFUSED.iter().find(|(k, _)| k == key) {
            Some((k, why)) => ProxyError::unsupported(*k, *why),
            None => ProxyError::invalid(key.clone(), "Extra inputs are not permitted"),
        });
    }
    Ok(())
}

/// A message's (or the system prompt's) content: a string stays a string; a list of blocks
/// becomes OpenAI text parts. Anything but text is refused, naming the block's `type`.
fn content(path: &str, v: Value) -> Result<Value, ProxyError> {
    let blocks = match v {
        Value::String(_) => return Ok(v),
        Value::Array(blocks) => blocks,
        _ => {
            return Err(ProxyError::invalid(
                path,
                "must be a string or a list of content blocks",
            ))
        }
    };
    let mut parts = Vec::with_capacity(blocks.len());
    for (j, block) in blocks.into_iter().enumerate() {
        parts.push(text_block(&format!("{path}[{j}]"), block)?);
    }
    Ok(Value::Array(parts))
}

fn text_block(path: &str, block: Value) -> Result<Value, ProxyError> {
    let Value::Object(b) = block else {
        return Err(ProxyError::invalid(
            path,
            "a content block must be an object",
        ));
    };
    let kind = match b.get("type") {
        Some(Value::String(t)) => t.as_str(),
        _ => {
            return Err(ProxyError::invalid(
                format!("{path}.type"),
                "Field required",
            ))
        }
    };
    if kind != "text" {
        return Err(ProxyError::unsupported(
            format!("{path}.type"),
            format!("`{kind}` blocks are not translated; lingo carries text content only"),
        ));
    }
    let Some(Value::String(text)) = b.get("text") else {
        return Err(ProxyError::invalid(
            format!("{path}.text"),
            "a text block needs a string `text`",
        ));
    };
    for (key, value) in &b {
        match key.as_str() {
            "type" | "text" | "cache_control" => {}
            "citations" if value.is_null() || value.as_array().is_some_and(Vec::is_empty) => {}
            other => {
                return Err(ProxyError::unsupported(
                    format!("{path}.{other}"),
                    "lingo carries a text block's text only",
                ))
            }
        }
    }
    Ok(json!({"type": "text", "text": text}))
}

fn is_empty_content(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}
