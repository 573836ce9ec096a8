//! Completions requests, both directions.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::dialect::fields::{ObjectWriter, Put};
use crate::dialect::openai::wire::{
    finish_request, sampling_from_wire, write_sampling, SamplingWire,
};
use crate::dialect::openai::Flavor;
use crate::error::{decode_json, ProxyError};
use crate::model::{Prompt, Request};

/// vLLM's default when `max_tokens` is absent or null.
pub const DEFAULT_MAX_TOKENS: u32 = 16;

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PromptWire {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenBatch(Vec<Vec<u32>>),
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    model: Option<String>,
    prompt: PromptWire,
    max_tokens: Option<u32>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    logprobs: Option<u32>,
    #[serde(default)]
    echo: bool,
    request_id: Option<String>,
    #[serde(flatten)]
    sampling: SamplingWire,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

pub fn decode_request(body: &[u8]) -> Result<Request, ProxyError> {
    let w: CompletionRequest = decode_json(body)?;
    if w.echo {
        return Err(ProxyError::unsupported(
            "echo",
            "lingo does not translate prompt echo",
        ));
    }
    let (prompt, batched) = match w.prompt {
        PromptWire::Text(t) => (Prompt::Text(vec![t]), false),
        PromptWire::Texts(t) => (Prompt::Text(t), true),
        PromptWire::Tokens(t) => (Prompt::Tokens(vec![t]), false),
        PromptWire::TokenBatch(t) => (Prompt::Tokens(t), true),
    };
    if prompt.is_empty() {
        return Err(ProxyError::invalid("prompt", "must not be empty"));
    }
    let mut req = Request::new(prompt);
    req.model = w.model;
    req.batched = batched;
    req.sampling = sampling_from_wire(w.sampling, w.max_tokens.or(Some(DEFAULT_MAX_TOKENS)));
    req.stream = w.stream;
    req.stream_usage = w.stream_options.and_then(|o| o.include_usage) == Some(true);
    req.logprobs = w.logprobs;
    req.request_id = w.request_id;
    req.extra = w.extra;
    Ok(req)
}

/// Encode for a completions upstream. Always sends an explicit `max_tokens`; of a vLLM-flavoured
/// one, asks for token ids and per-chunk usage so lingo can count exactly.
pub fn encode_request(req: &Request, flavor: Flavor) -> Result<Vec<u8>, ProxyError> {
    let mut m = ObjectWriter::default();
    if let Some(model) = &req.model {
        m.put("model", model);
    }
    match (&req.prompt, req.batched) {
        (Prompt::Text(t), false) if t.len() == 1 => m.put("prompt", &t[0]),
        (Prompt::Text(t), _) => m.put("prompt", t),
        (Prompt::Tokens(t), false) if t.len() == 1 => m.put("prompt", &t[0]),
        (Prompt::Tokens(t), _) => m.put("prompt", t),
        (Prompt::Chat(_), _) => {
            return Err(ProxyError::unsupported(
                "messages",
                "chat messages cannot be sent to a completions endpoint",
            ))
        }
    }
    let max = req.sampling.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    m.put("max_tokens", &max);
    if flavor == Flavor::Standard && req.sampling.json_schema.is_some() {
        return Err(ProxyError::unsupported(
            "json_schema",
            "the standard completions API has no response_format (only chat does)",
        ));
    }
    write_sampling(&req.sampling, &mut m, flavor)?;
    if let Some(k) = req.logprobs {
        // llama.cpp gives no logprobs at all for 0: ask for the sampled token's at least.
        let k = if flavor == Flavor::Llamacpp {
            k.max(1)
        } else {
            k
        };
        m.put("logprobs", &k);
    }
    if flavor == Flavor::Vllm {
        m.put("return_token_ids", &true);
    }
    Ok(finish_request(req, m, flavor))
}
