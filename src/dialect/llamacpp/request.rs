//! `/completion` requests, both directions.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{DEFAULT_MIN_P, DEFAULT_N_PREDICT, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P};
use crate::dialect::fields::{put_some, refuse_first};
use crate::error::{decode_json, ProxyError};
use crate::model::{Prompt, Request, Sampling};

/// `prompt`: text, or token ids. llama.cpp also takes mixed lists and lists of prompts; those
/// are refused (one prompt per request, text or ids).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PromptWire {
    Text(String),
    Tokens(Vec<u32>),
    Other(serde::de::IgnoredAny),
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    prompt: Option<PromptWire>,
    n_predict: Option<i64>,
    /// Aliases llama.cpp reads when `n_predict` is absent.
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    #[serde(default)]
    stream: bool,
    stop: Option<Vec<String>>,
    temperature: Option<f64>,
    top_k: Option<i64>,
    top_p: Option<f64>,
    min_p: Option<f64>,
    seed: Option<i64>,
    #[serde(default)]
    ignore_eos: bool,
    n_probs: Option<u32>,
    /// Read as `n_probs` when that is absent.
    logprobs: Option<u32>,
    repeat_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    json_schema: Option<Value>,
    /// Accepted: the upstream's own prompt caching applies either way.
    #[serde(rename = "cache_prompt")]
    _cache_prompt: Option<bool>,
    /// Accepted: token ids are returned whenever the upstream gives them.
    #[serde(rename = "return_tokens")]
    _return_tokens: Option<bool>,
    /// Ignored by llama-server too (one model per server).
    #[serde(rename = "model")]
    _model: Option<Value>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// How llama.cpp spells a canonical field, for error messages.
pub fn field_name(canonical: &str) -> String {
    match canonical {
        "max_tokens" => "n_predict".into(),
        "logprobs" => "n_probs".into(),
        "repetition_penalty" => "repeat_penalty".into(),
        "messages" | "input_ids" => "prompt".into(),
        other => other.into(),
    }
}

pub fn decode(body: &[u8]) -> Result<Request, ProxyError> {
    let w: CompletionRequest = decode_json(body)?;
    refuse_extra(&w.extra)?;
    let prompt = match w.prompt {
        None => return Err(ProxyError::invalid("prompt", "is required")),
        Some(PromptWire::Text(t)) => Prompt::Text(vec![t]),
        Some(PromptWire::Tokens(ids)) if ids.is_empty() => {
            return Err(ProxyError::invalid("prompt", "must not be empty"))
        }
        Some(PromptWire::Tokens(ids)) => Prompt::Tokens(vec![ids]),
        Some(PromptWire::Other(_)) => {
            return Err(ProxyError::unsupported(
                "prompt",
                "lingo takes one prompt per request, as a string or a list of token ids \
                 (not mixed lists or several prompts)",
            ))
        }
    };
    let mut req = Request::new(prompt);
    let n_predict = w.n_predict.or(w.max_tokens).or(w.max_completion_tokens);
    let implicit = [
        ("temperature", w.temperature.is_none()),
        ("top_k", w.top_k.is_none()),
        ("top_p", w.top_p.is_none()),
        ("min_p", w.min_p.is_none()),
    ];
    req.sampling = Sampling {
        implicit: implicit
            .iter()
            .filter(|(_, i)| *i)
            .map(|(f, _)| *f)
            .collect(),
        max_tokens: Some(max_tokens(n_predict)?),
        temperature: Some(w.temperature.unwrap_or(DEFAULT_TEMPERATURE).max(0.0)),
        top_k: Some(match w.top_k.unwrap_or(DEFAULT_TOP_K) {
            k if k <= 0 => -1,
            k => k,
        }),
        top_p: Some(w.top_p.unwrap_or(DEFAULT_TOP_P)),
        min_p: Some(w.min_p.unwrap_or(DEFAULT_MIN_P)),
        repetition_penalty: w.repeat_penalty,
        presence_penalty: w.presence_penalty,
        frequency_penalty: w.frequency_penalty,
        stop: w.stop.unwrap_or_default(),
        ignore_eos: w.ignore_eos,
        // llama.cpp's -1 (or any negative) is "random".
        seed: w.seed.and_then(|s| u64::try_from(s).ok()),
        json_schema: w.json_schema.filter(|v| !v.is_null()),
        n: 1,
        ..Sampling::default()
    };
    req.stream = w.stream;
    req.logprobs = w.n_probs.or(w.logprobs).filter(|&n| n > 0);
    Ok(req)
}

fn max_tokens(n_predict: Option<i64>) -> Result<u32, ProxyError> {
    match n_predict {
        None | Some(-1) => Ok(DEFAULT_N_PREDICT),
        Some(n) => u32::try_from(n).map_err(|_| {
            ProxyError::invalid(
                "n_predict",
                format!("must be -1 (lingo's default of {DEFAULT_N_PREDICT}) or a count, got {n}"),
            )
        }),
    }
}

/// Every other llama.cpp field changes sampling or output in a way lingo cannot carry to
/// another server; an explicit `null` or `false` asks for nothing and passes.
fn refuse_extra(extra: &Map<String, Value>) -> Result<(), ProxyError> {
    let mut keys: Vec<&String> = extra
        .iter()
        .filter(|(_, v)| !matches!(v, Value::Null | Value::Bool(false)))
        .map(|(k, _)| k)
        .collect();
    keys.sort();
    match keys.first() {
        Some(k) => Err(ProxyError::unsupported(
            k.as_str(),
            "lingo cannot carry this llama.cpp field to the upstream",
        )),
        None => Ok(()),
    }
}

/// Encode for a llama.cpp upstream's native `/completion` (what `lingo bench` sends).
pub fn encode(req: &Request) -> Result<Vec<u8>, ProxyError> {
    let mut m = Map::new();
    let prompt = match &req.prompt {
        Prompt::Text(t) if t.len() == 1 && !req.batched => json!(t[0]),
        Prompt::Tokens(t) if t.len() == 1 && !req.batched => json!(t[0]),
        Prompt::Chat(_) => {
            return Err(ProxyError::unsupported(
                "messages",
                "llama.cpp /completion takes a raw prompt, not chat messages",
            ))
        }
        _ => {
            return Err(ProxyError::unsupported(
                "prompt",
                "lingo sends llama.cpp one prompt per request",
            ))
        }
    };
    m.insert("prompt".into(), prompt);
    let s = &req.sampling;
    m.insert(
        "n_predict".into(),
        json!(s.max_tokens.unwrap_or(DEFAULT_N_PREDICT)),
    );
    m.insert("stream".into(), json!(req.stream));
    m.insert("return_tokens".into(), json!(true));
    write_sampling(s, &mut m)?;
    if let Some(k) = req.logprobs {
        // llama.cpp returns no probabilities for n_probs 0; ask for the sampled token's at least.
        m.insert("n_probs".into(), json!(k.max(1)));
    }
    serde_json::to_vec(&m).map_err(|e| ProxyError::Internal(e.to_string()))
}

fn write_sampling(s: &Sampling, m: &mut Map<String, Value>) -> Result<(), ProxyError> {
    refuse_sampling(s)?;
    let floats = [
        ("temperature", s.temperature),
        ("top_p", s.top_p),
        ("min_p", s.min_p),
        ("repeat_penalty", s.repetition_penalty),
        ("presence_penalty", s.presence_penalty),
        ("frequency_penalty", s.frequency_penalty),
    ];
    put_some(m, &floats);
    if let Some(k) = s.top_k {
        m.insert("top_k".into(), json!(k.max(0)));
    }
    if !s.stop.is_empty() {
        m.insert("stop".into(), json!(s.stop));
    }
    if s.ignore_eos {
        m.insert("ignore_eos".into(), json!(true));
    }
    if let Some(seed) = s.seed {
        m.insert("seed".into(), json!(seed));
    }
    if let Some(schema) = &s.json_schema {
        m.insert("json_schema".into(), schema.clone());
    }
    if let Some(bias) = &s.logit_bias {
        m.insert("logit_bias".into(), logit_bias(bias)?);
    }
    Ok(())
}

/// What llama.cpp's native endpoint has no field for.
fn refuse_sampling(s: &Sampling) -> Result<(), ProxyError> {
    let refusals = [
        (
            "n",
            s.n > 1,
            "lingo asks llama.cpp for one completion per request",
        ),
        (
            "min_tokens",
            s.min_tokens.is_some_and(|v| v > 0),
            "llama.cpp has no minimum output length",
        ),
        (
            "stop_token_ids",
            !s.stop_token_ids.is_empty(),
            "llama.cpp stops on strings only",
        ),
        (
            "include_stop",
            s.include_stop,
            "llama.cpp always trims the stop string",
        ),
        (
            "stop_regex",
            !s.stop_regex.is_empty(),
            "llama.cpp has no stop-by-regex",
        ),
        (
            "regex",
            s.regex.is_some(),
            "llama.cpp takes grammars in GBNF, not regular expressions",
        ),
        (
            "ebnf",
            s.ebnf.is_some(),
            "llama.cpp's grammar dialect (GBNF) differs from this one",
        ),
        (
            "skip_special_tokens",
            s.skip_special_tokens == Some(false),
            "llama.cpp does not render special tokens on request",
        ),
    ];
    refuse_first(&refusals)
}

/// OpenAI's `{"<token id>": bias}` as llama.cpp's `[[id, bias], ...]`.
fn logit_bias(bias: &Map<String, Value>) -> Result<Value, ProxyError> {
    let mut pairs = Vec::with_capacity(bias.len());
    for (k, v) in bias {
        let id: u32 = k.parse().map_err(|_| {
            ProxyError::unsupported("logit_bias", format!("`{k}` is not a token id"))
        })?;
        pairs.push(json!([id, v]));
    }
    Ok(Value::Array(pairs))
}
