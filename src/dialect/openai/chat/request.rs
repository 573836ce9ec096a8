//! Chat requests, both directions.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dialect::fields::{ObjectWriter, Put};
use crate::dialect::openai::wire::{
    finish_request, sampling_from_wire, write_sampling, SamplingWire,
};
use crate::dialect::openai::Flavor;
use crate::error::{decode_json, ProxyError};
use crate::model::{Message, Prompt, Request, Role};

#[derive(Debug, Deserialize)]
struct MessageWire {
    role: String,
    #[serde(default)]
    content: Value,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    model: Option<String>,
    messages: Vec<MessageWire>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    logprobs: bool,
    top_logprobs: Option<u32>,
    request_id: Option<String>,
    #[serde(flatten)]
    sampling: SamplingWire,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

pub fn decode_request(body: &[u8]) -> Result<Request, ProxyError> {
    let w: ChatRequest = decode_json(body)?;
    if w.messages.is_empty() {
        return Err(ProxyError::invalid("messages", "must not be empty"));
    }
    let mut messages = Vec::with_capacity(w.messages.len());
    for (i, m) in w.messages.into_iter().enumerate() {
        let role = Role::parse(&m.role).ok_or_else(|| {
            ProxyError::invalid(
                format!("messages[{i}].role"),
                format!("unknown role `{}`", m.role),
            )
        })?;
        messages.push(Message {
            role,
            content: m.content,
        });
    }
    let mut req = Request::new(Prompt::Chat(messages));
    req.model = w.model;
    req.sampling = sampling_from_wire(w.sampling, w.max_completion_tokens.or(w.max_tokens));
    req.stream = w.stream;
    req.stream_usage = w.stream_options.and_then(|o| o.include_usage) == Some(true);
    req.logprobs = w.logprobs.then(|| w.top_logprobs.unwrap_or(0));
    req.request_id = w.request_id;
    req.extra = w.extra;
    Ok(req)
}

/// A message as an upstream reads it.
#[derive(Serialize)]
struct MessageOut<'a> {
    role: &'a str,
    content: &'a Value,
}

pub fn encode_request(req: &Request, flavor: Flavor) -> Result<Vec<u8>, ProxyError> {
    let Prompt::Chat(messages) = &req.prompt else {
        return Err(ProxyError::unsupported(
            "prompt",
            "a raw prompt cannot be sent to a chat endpoint without a chat template",
        ));
    };
    let mut m = ObjectWriter::default();
    if let Some(model) = &req.model {
        m.put("model", model);
    }
    let msgs: Vec<MessageOut> = messages
        .iter()
        .map(|msg| MessageOut {
            role: msg.role.as_str(),
            content: &msg.content,
        })
        .collect();
    m.put("messages", &msgs);
    if let Some(max) = req.sampling.max_tokens {
        m.put("max_tokens", &max);
    }
    write_sampling(&req.sampling, &mut m, flavor)?;
    if let Some(k) = req.logprobs {
        m.put("logprobs", &true);
        m.put("top_logprobs", &k);
    }
    if req.continue_final && flavor == Flavor::Standard {
        return Err(ProxyError::unsupported(
            "continue_final",
            "the standard OpenAI API cannot continue a final assistant message",
        ));
    }
    if req.continue_final {
        // vLLM's and SGLang's way to continue the last assistant message (prefill).
        m.put("continue_final_message", &true);
        m.put("add_generation_prompt", &false);
    }
    Ok(finish_request(req, m, flavor))
}
