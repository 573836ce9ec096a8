//! `/api/generate` and `/api/chat` requests, both directions.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::options::{self, OptionsWire};
use crate::error::{decode_json, ProxyError};
use crate::model::{Message, Prompt, Request, Role};

/// Fields both endpoints share.
#[derive(Debug, Deserialize)]
struct Common {
    model: Option<String>,
    /// Absent means true.
    stream: Option<bool>,
    format: Option<Value>,
    options: Option<OptionsWire>,
    think: Option<Value>,
    /// A scheduling hint (how long the model stays loaded): accepted and ignored.
    #[serde(rename = "keep_alive")]
    _keep_alive: Option<Value>,
    /// Context-overflow policies: the upstream's own apply.
    #[serde(rename = "truncate")]
    _truncate: Option<bool>,
    #[serde(rename = "shift")]
    _shift: Option<bool>,
    #[serde(default)]
    logprobs: bool,
}

#[derive(Debug, Deserialize)]
struct GenerateRequest {
    #[serde(flatten)]
    common: Common,
    #[serde(default)]
    prompt: String,
    system: Option<String>,
    #[serde(default)]
    raw: bool,
    images: Option<Vec<Value>>,
    suffix: Option<String>,
    template: Option<String>,
    context: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
struct ChatMessageWire {
    role: String,
    #[serde(default)]
    content: String,
    images: Option<Vec<Value>>,
    tool_calls: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    #[serde(flatten)]
    common: Common,
    #[serde(default)]
    messages: Vec<ChatMessageWire>,
    tools: Option<Vec<Value>>,
}

pub fn decode_generate(body: &[u8]) -> Result<Request, ProxyError> {
    let w: GenerateRequest = decode_json(body)?;
    let refused = [
        ("images", w.images.as_ref().is_some_and(|v| !v.is_empty())),
        ("suffix", w.suffix.as_ref().is_some_and(|s| !s.is_empty())),
        (
            "template",
            w.template.as_ref().is_some_and(|s| !s.is_empty()),
        ),
        ("context", w.context.as_ref().is_some_and(|v| !v.is_empty())),
        (
            "system",
            w.raw && w.system.as_ref().is_some_and(|s| !s.is_empty()),
        ),
    ];
    if let Some((field, _)) = refused.iter().find(|(_, on)| *on) {
        return Err(ProxyError::unsupported(*field, why(field)));
    }
    if w.prompt.is_empty() {
        return Err(ProxyError::invalid(
            "prompt",
            "is empty (Ollama would only load the model; lingo has nothing to load)",
        ));
    }
    let prompt = if w.raw {
        Prompt::Text(vec![w.prompt])
    } else {
        // The model's template applies: a chat of one user turn, after the system message.
        let mut msgs = Vec::with_capacity(2);
        if let Some(s) = w.system.filter(|s| !s.is_empty()) {
            msgs.push(Message {
                role: Role::System,
                content: json!(s),
            });
        }
        msgs.push(Message {
            role: Role::User,
            content: json!(w.prompt),
        });
        Prompt::Chat(msgs)
    };
    common(w.common, prompt)
}

pub fn decode_chat(body: &[u8]) -> Result<Request, ProxyError> {
    let w: ChatRequest = decode_json(body)?;
    if w.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ProxyError::unsupported("tools", why("tools")));
    }
    if w.messages.is_empty() {
        return Err(ProxyError::invalid(
            "messages",
            "is empty (Ollama would only load the model; lingo has nothing to load)",
        ));
    }
    let mut msgs = Vec::with_capacity(w.messages.len());
    for (i, m) in w.messages.into_iter().enumerate() {
        if m.images.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(ProxyError::unsupported(
                format!("messages[{i}].images"),
                why("images"),
            ));
        }
        if m.tool_calls.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(ProxyError::unsupported(
                format!("messages[{i}].tool_calls"),
                why("tools"),
            ));
        }
        let role = Role::parse(&m.role).ok_or_else(|| {
            ProxyError::invalid(
                format!("messages[{i}].role"),
                format!("unknown role `{}`", m.role),
            )
        })?;
        msgs.push(Message {
            role,
            content: json!(m.content),
        });
    }
    common(w.common, Prompt::Chat(msgs))
}

fn why(field: &str) -> &'static str {
    match field {
        "images" => "lingo does not carry images",
        "tools" => "lingo does not carry tool calls",
        "system" => "a raw prompt bypasses the template, which is where a system message goes",
        "think" => "lingo does not carry reasoning output",
        "logprobs" => "lingo does not translate Ollama logprobs",
        _ => "lingo cannot carry this Ollama field to another server",
    }
}

fn common(c: Common, prompt: Prompt) -> Result<Request, ProxyError> {
    let model = c.model.filter(|m| !m.is_empty());
    let Some(model) = model else {
        return Err(ProxyError::invalid("model", "is required"));
    };
    let thinks = match &c.think {
        None | Some(Value::Null | Value::Bool(false)) => false,
        Some(_) => true,
    };
    if thinks {
        return Err(ProxyError::unsupported("think", why("think")));
    }
    if c.logprobs {
        return Err(ProxyError::unsupported("logprobs", why("logprobs")));
    }
    let mut req = Request::new(prompt);
    req.model = Some(model);
    req.sampling = options::decode(c.options)?;
    req.sampling.json_schema = format_schema(c.format)?;
    req.stream = c.stream.unwrap_or(true);
    Ok(req)
}

/// `format`: `"json"` (any JSON value: an object schema) or a JSON schema.
fn format_schema(format: Option<Value>) -> Result<Option<Value>, ProxyError> {
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(json!({"type": "object"}))),
        Some(Value::Object(schema)) => Ok(Some(Value::Object(schema))),
        Some(other) => Err(ProxyError::invalid(
            "format",
            format!("must be \"json\" or a JSON schema, got {other}"),
        )),
    }
}

/// Encode for an Ollama upstream's `/api/generate`: a raw prompt, no template.
pub fn encode_generate(req: &Request) -> Result<Vec<u8>, ProxyError> {
    let text = match &req.prompt {
        Prompt::Text(t) if t.len() == 1 && !req.batched => &t[0],
        Prompt::Text(_) => {
            return Err(ProxyError::unsupported(
                "prompt",
                "Ollama takes one prompt per request",
            ))
        }
        Prompt::Tokens(_) => {
            return Err(ProxyError::unsupported(
                "input_ids",
                "Ollama takes text prompts only, not token ids",
            ))
        }
        Prompt::Chat(_) => {
            return Err(ProxyError::unsupported(
                "messages",
                "chat messages go to Ollama's /api/chat",
            ))
        }
    };
    let mut m = envelope(req)?;
    m.insert("prompt".into(), json!(text));
    m.insert("raw".into(), json!(true));
    serde_json::to_vec(&m).map_err(|e| ProxyError::Internal(e.to_string()))
}

/// Encode for an Ollama upstream's `/api/chat`.
pub fn encode_chat(req: &Request) -> Result<Vec<u8>, ProxyError> {
    let Prompt::Chat(messages) = &req.prompt else {
        return Err(ProxyError::unsupported(
            "prompt",
            "a raw prompt goes to Ollama's /api/generate, not /api/chat",
        ));
    };
    let mut msgs = Vec::with_capacity(messages.len());
    for (i, msg) in messages.iter().enumerate() {
        let content = text_content(&msg.content).ok_or_else(|| {
            ProxyError::unsupported(
                format!("messages[{i}].content"),
                "Ollama messages carry text only",
            )
        })?;
        msgs.push(json!({"role": msg.role.as_str(), "content": content}));
    }
    let mut m = envelope(req)?;
    m.insert("messages".into(), Value::Array(msgs));
    serde_json::to_vec(&m).map_err(|e| ProxyError::Internal(e.to_string()))
}

/// A message's text: a string, or text parts joined; `None` when it holds anything else.
fn text_content(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some(String::new()),
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") | None => p.get("text").and_then(Value::as_str),
                Some(_) => None,
            })
            .collect::<Option<Vec<&str>>>()
            .map(|texts| texts.concat()),
        _ => None,
    }
}

/// What both endpoints carry: model, an explicit `stream` (Ollama defaults to true), options,
/// format.
fn envelope(req: &Request) -> Result<Map<String, Value>, ProxyError> {
    if req.logprobs.is_some() {
        return Err(ProxyError::unsupported(
            "logprobs",
            "lingo does not ask Ollama for logprobs",
        ));
    }
    let mut m = Map::new();
    m.insert("model".into(), json!(req.model.as_deref().unwrap_or("")));
    m.insert("stream".into(), json!(req.stream));
    m.insert(
        "options".into(),
        Value::Object(options::encode(&req.sampling)?),
    );
    if let Some(schema) = &req.sampling.json_schema {
        m.insert("format".into(), schema.clone());
    }
    Ok(m)
}
