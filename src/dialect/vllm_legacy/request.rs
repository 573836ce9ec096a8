//! `/generate` requests of the legacy server, both directions.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::DEFAULT_MAX_TOKENS;
use crate::dialect::openai::wire::{write_sampling, OneOrMany};
use crate::dialect::openai::Flavor;
use crate::dialect::present;
use crate::error::{decode_json, ProxyError};
use crate::model::{Prompt, Request, Sampling};

/// The body: `prompt`, `stream`, and vLLM `SamplingParams` fields at the top level.
#[derive(Debug, Deserialize)]
struct GenerateRequest {
    prompt: Option<Value>,
    stream: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    max_tokens: Option<Option<u32>>,
    n: Option<u32>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    repetition_penalty: Option<f64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    seed: Option<u64>,
    stop: Option<OneOrMany>,
    stop_token_ids: Option<Vec<u32>>,
    ignore_eos: Option<bool>,
    min_tokens: Option<u32>,
    skip_special_tokens: Option<bool>,
    spaces_between_special_tokens: Option<bool>,
    include_stop_str_in_output: Option<bool>,
    logit_bias: Option<Map<String, Value>>,
    structured_outputs: Option<Map<String, Value>>,
    detokenize: Option<bool>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// `SamplingParams` fields that change nothing in this server's answer, which has no place
/// for logprobs: accepted and not asked of the upstream.
const NO_EFFECT: &[&str] = &["logprobs", "prompt_logprobs", "flat_logprobs"];

/// `SamplingParams` fields lingo knows and cannot carry to another server.
const REFUSED: &[&str] = &[
    "best_of",
    "use_beam_search",
    "length_penalty",
    "early_stopping",
    "truncate_prompt_tokens",
    "output_kind",
    "stream_interval",
    "allowed_token_ids",
    "bad_words",
    "extra_args",
    "logits_processors",
    "guided_decoding",
    "thinking_token_budget",
    "repetition_detection",
    "logprob_token_ids",
    "prompt_logprob_token_ids",
    "prompt_logprob_start",
    "skip_reading_prefix_cache",
    "skip_clone",
    "trace_decode_token_ids",
    "routed_experts_prompt_start",
];

/// How this dialect names a canonical field, for error messages (vLLM's own names).
pub fn field_name(canonical: &str) -> String {
    match canonical {
        "messages" => "prompt".into(),
        "include_stop" => "include_stop_str_in_output".into(),
        "json_schema" => "structured_outputs.json".into(),
        "regex" => "structured_outputs.regex".into(),
        "ebnf" => "structured_outputs.grammar".into(),
        other => other.into(),
    }
}

pub fn decode_request(body: &[u8]) -> Result<Request, ProxyError> {
    let w: GenerateRequest = decode_json(body)?;
    for (key, value) in &w.extra {
        if value.is_null() || NO_EFFECT.contains(&key.as_str()) {
            continue;
        }
        return Err(match REFUSED.contains(&key.as_str()) {
            true => ProxyError::unsupported(
                key.clone(),
                "lingo cannot carry this SamplingParams field to the upstream",
            ),
            false => ProxyError::invalid(
                key.clone(),
                "not a vLLM SamplingParams field (the real server answers 500 for it)",
            ),
        });
    }
    let prompt = match w.prompt {
        Some(Value::String(p)) => p,
        None | Some(Value::Null) => {
            return Err(ProxyError::invalid(
                "prompt",
                "Field required (the real server answers 500 without it)",
            ))
        }
        Some(_) => {
            return Err(ProxyError::invalid(
                "prompt",
                "must be a string: this server takes one text prompt, no token ids or lists",
            ))
        }
    };
    if w.detokenize == Some(false) {
        return Err(ProxyError::unsupported(
            "detokenize",
            "lingo translates text; output without text cannot be carried",
        ));
    }
    let max_tokens = match w.max_tokens {
        None => DEFAULT_MAX_TOKENS,
        Some(Some(0)) => return Err(ProxyError::invalid("max_tokens", "must be at least 1")),
        Some(Some(v)) => v,
        Some(None) => {
            return Err(ProxyError::unsupported(
                "max_tokens",
                "null (until the context is full) has no explicit equivalent; give a number",
            ))
        }
    };
    if w.n == Some(0) {
        return Err(ProxyError::invalid("n", "must be at least 1"));
    }
    let (json_schema, regex, ebnf) = structured(w.structured_outputs)?;
    let mut req = Request::new(Prompt::Text(vec![prompt]));
    req.stream = w.stream.unwrap_or(false);
    req.echo = true;
    req.sampling = Sampling {
        max_tokens: Some(max_tokens),
        min_tokens: w.min_tokens,
        temperature: w.temperature,
        top_p: w.top_p,
        top_k: w.top_k,
        min_p: w.min_p,
        frequency_penalty: w.frequency_penalty,
        presence_penalty: w.presence_penalty,
        repetition_penalty: w.repetition_penalty,
        stop: w.stop.map(OneOrMany::into_vec).unwrap_or_default(),
        stop_token_ids: w.stop_token_ids.unwrap_or_default(),
        ignore_eos: w.ignore_eos.unwrap_or(false),
        n: w.n.unwrap_or(1),
        seed: w.seed,
        skip_special_tokens: w.skip_special_tokens,
        spaces_between_special_tokens: w.spaces_between_special_tokens,
        include_stop: w.include_stop_str_in_output.unwrap_or(false),
        json_schema,
        regex,
        ebnf,
        stop_regex: Vec::new(),
        logit_bias: w.logit_bias,
        implicit: Vec::new(),
    };
    Ok(req)
}

type Structured = (Option<Value>, Option<String>, Option<String>);

/// `structured_outputs`: `json` (a schema, or its text), `regex` and `grammar` are carried.
fn structured(so: Option<Map<String, Value>>) -> Result<Structured, ProxyError> {
    let mut out: Structured = (None, None, None);
    for (key, value) in so.unwrap_or_default() {
        let path = format!("structured_outputs.{key}");
        match (key.as_str(), value) {
            (_, Value::Null) | ("disable_any_whitespace", Value::Bool(false)) => {}
            ("json", Value::String(s)) => {
                let v = serde_json::from_str(&s)
                    .map_err(|e| ProxyError::invalid(&path, format!("not valid JSON: {e}")))?;
                out.0 = Some(v);
            }
            ("json", v @ Value::Object(_)) => out.0 = Some(v),
            ("regex", Value::String(s)) => out.1 = Some(s),
            ("grammar", Value::String(s)) => out.2 = Some(s),
            ("json" | "regex" | "grammar", _) => {
                return Err(ProxyError::invalid(path, "wrong type"));
            }
            _ => {
                return Err(ProxyError::unsupported(
                    path,
                    "lingo carries json, regex and grammar constraints only",
                ))
            }
        }
    }
    Ok(out)
}

/// Encode for a legacy-server upstream (also what `lingo bench` sends): explicit
/// `max_tokens`, and only fields `SamplingParams` has.
pub fn encode_request(req: &Request) -> Result<Vec<u8>, ProxyError> {
    let prompt = match &req.prompt {
        Prompt::Text(t) if t.len() == 1 && !req.batched => &t[0],
        Prompt::Text(_) => {
            return Err(ProxyError::unsupported(
                "prompt",
                "vLLM's legacy server takes one prompt per request",
            ))
        }
        Prompt::Tokens(_) => {
            return Err(ProxyError::unsupported(
                "prompt",
                "vLLM's legacy server takes a text prompt, not token ids",
            ))
        }
        Prompt::Chat(_) => {
            return Err(ProxyError::unsupported(
                "messages",
                "vLLM's legacy server takes a raw prompt, not chat messages",
            ))
        }
    };
    if req.logprobs.is_some() {
        return Err(ProxyError::unsupported(
            "logprobs",
            "vLLM's legacy server returns no logprobs",
        ));
    }
    let mut m = Map::new();
    m.insert("prompt".into(), json!(prompt));
    m.insert("stream".into(), json!(req.stream));
    let max = req.sampling.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    m.insert("max_tokens".into(), json!(max));
    // `response_format` is not a SamplingParams field: the schema goes in
    // `structured_outputs.json` beside the regex and grammar `write_sampling` puts there.
    let sampling = Sampling {
        json_schema: None,
        ..req.sampling.clone()
    };
    write_sampling(&sampling, &mut m, Flavor::Vllm)?;
    if let Some(schema) = &req.sampling.json_schema {
        let so = m
            .entry("structured_outputs")
            .or_insert_with(|| Value::Object(Map::new()));
        so["json"] = schema.clone();
    }
    serde_json::to_vec(&m).map_err(|e| ProxyError::Internal(e.to_string()))
}
