//! `/generate` and `/generate_stream` request bodies, both directions.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{DEFAULT_MAX_NEW_TOKENS, MAX_STOP_SEQUENCES, MAX_TOP_N_TOKENS};
use crate::dialect::fields::{put_some, refuse_first};
use crate::error::{decode_json, ProxyError};
use crate::model::{Prompt, Request, Sampling};

#[derive(Debug, Deserialize)]
struct GenerateRequest {
    inputs: String,
    parameters: Option<Parameters>,
    /// Only TGI's compat route `POST /` reads it; `/generate_stream` streams by route.
    #[serde(default)]
    stream: bool,
}

/// TGI's `GenerateParameters`. Unknown keys are ignored, as TGI does; every field may be
/// `null` (the `text-generation` client sends them all).
#[derive(Debug, Default, Deserialize)]
struct Parameters {
    best_of: Option<u32>,
    temperature: Option<f64>,
    repetition_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    top_k: Option<i64>,
    top_p: Option<f64>,
    typical_p: Option<f64>,
    do_sample: Option<bool>,
    #[serde(default, deserialize_with = "crate::dialect::present")]
    max_new_tokens: Option<Option<u32>>,
    return_full_text: Option<bool>,
    stop: Option<Vec<String>>,
    truncate: Option<u64>,
    watermark: Option<bool>,
    details: Option<bool>,
    decoder_input_details: Option<bool>,
    seed: Option<u64>,
    top_n_tokens: Option<u32>,
    grammar: Option<Grammar>,
    adapter_id: Option<String>,
}

/// `{"type": "json" | "json_schema" | "regex", "value": ...}`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
enum Grammar {
    #[serde(alias = "json_object")]
    Json(Value),
    JsonSchema(Value),
    Regex(String),
}

/// How TGI names a canonical field, for error messages.
pub fn field_name(canonical: &str) -> String {
    match canonical {
        "prompt" | "messages" | "input_ids" | "inputs" => "inputs".into(),
        "max_tokens" => "parameters.max_new_tokens".into(),
        "model" => "parameters.adapter_id".into(),
        // `details` asks for per-token log probabilities (`top_n_tokens` for alternatives).
        "logprobs" => "parameters.details/top_n_tokens".into(),
        "json_schema" | "regex" => "parameters.grammar".into(),
        "include_stop" => "parameters.stop".into(),
        other if other.starts_with("parameters.") => other.into(),
        other => format!("parameters.{other}"),
    }
}

/// Decode a TGI client's `/generate` (or `/generate_stream`) body; the stream flag is the
/// route's (the handler sets it), or the compat route's `stream`.
pub fn decode(body: &[u8]) -> Result<Request, ProxyError> {
    let w: GenerateRequest = decode_json(body)?;
    if w.inputs.is_empty() {
        return Err(ProxyError::invalid("inputs", "`inputs` cannot be empty"));
    }
    // TGI samples by default only when the request has no `parameters` at all.
    let sample_default = w.parameters.is_none();
    let p = w.parameters.unwrap_or_default();
    refuse_unsupported(&p)?;
    validate(&p)?;
    let mut req = Request::new(Prompt::Text(vec![w.inputs]));
    req.stream = w.stream;
    req.model = p.adapter_id.clone();
    req.echo = p.return_full_text == Some(true);
    req.details = p.details == Some(true);
    let top_n = p.top_n_tokens.filter(|&n| n > 0);
    if req.details || top_n.is_some() {
        req.logprobs = Some(top_n.unwrap_or(0));
    }
    req.sampling = sampling(p, sample_default)?;
    Ok(req)
}

/// Fields TGI has and lingo cannot carry to another server.
fn refuse_unsupported(p: &Parameters) -> Result<(), ProxyError> {
    let set = [
        (
            "best_of",
            p.best_of.is_some_and(|n| n > 1),
            "lingo returns one sequence",
        ),
        (
            "typical_p",
            p.typical_p.is_some(),
            "no equivalent on the upstream",
        ),
        (
            "decoder_input_details",
            p.decoder_input_details == Some(true),
            "prompt token details have no equivalent on the upstream",
        ),
        (
            "watermark",
            p.watermark == Some(true),
            "no equivalent on the upstream",
        ),
        (
            "truncate",
            p.truncate.is_some(),
            "prompt truncation has no equivalent on the upstream",
        ),
    ];
    match set.iter().find(|(_, on, _)| *on) {
        Some((field, _, why)) => Err(ProxyError::unsupported(format!("parameters.{field}"), *why)),
        None => Ok(()),
    }
}

/// TGI's own range checks, with its messages (a TGI client expects a 422 for these).
fn validate(p: &Parameters) -> Result<(), ProxyError> {
    let outside = |v: Option<f64>, ok: fn(f64) -> bool| v.is_some_and(|v| !ok(v));
    let checks = [
        (
            "temperature",
            outside(p.temperature, |t| t > 0.0),
            "`temperature` must be strictly positive",
        ),
        (
            "top_p",
            outside(p.top_p, |v| v > 0.0 && v < 1.0),
            "`top_p` must be > 0.0 and < 1.0",
        ),
        (
            "top_k",
            p.top_k.is_some_and(|k| k <= 0),
            "`top_k` must be strictly positive",
        ),
        (
            "repetition_penalty",
            outside(p.repetition_penalty, |v| v > 0.0),
            "`repetition_penalty` must be strictly positive",
        ),
        (
            "frequency_penalty",
            outside(p.frequency_penalty, |v| (-2.0..=2.0).contains(&v)),
            "`frequency_penalty` must be >= -2.0 and <= 2.0",
        ),
        (
            "max_new_tokens",
            p.max_new_tokens == Some(Some(0)),
            "`max_new_tokens` must be strictly positive",
        ),
    ];
    if let Some((field, _, msg)) = checks.iter().find(|(_, bad, _)| *bad) {
        return Err(ProxyError::invalid(format!("parameters.{field}"), *msg));
    }
    let stops = p.stop.as_ref().map_or(0, Vec::len);
    if stops > MAX_STOP_SEQUENCES {
        return Err(ProxyError::invalid(
            "parameters.stop",
            format!("`stop` supports up to {MAX_STOP_SEQUENCES} stop sequences. Given: {stops}"),
        ));
    }
    if let Some(n) = p.top_n_tokens.filter(|&n| n > MAX_TOP_N_TOKENS) {
        return Err(ProxyError::invalid(
            "parameters.top_n_tokens",
            format!("`top_n_tokens` must be >= 0 and <= {MAX_TOP_N_TOKENS}. Given: {n}"),
        ));
    }
    Ok(())
}

fn sampling(p: Parameters, sample_default: bool) -> Result<Sampling, ProxyError> {
    let max_tokens = match p.max_new_tokens {
        None => DEFAULT_MAX_NEW_TOKENS,
        Some(Some(v)) => v,
        Some(None) => {
            return Err(ProxyError::unsupported(
                "parameters.max_new_tokens",
                "null (until the context is full) has no explicit equivalent; give a number",
            ))
        }
    };
    // TGI samples when asked to, or when any sampling knob is set; otherwise it is greedy.
    let samples = p.do_sample.unwrap_or(sample_default)
        || p.temperature.is_some()
        || p.top_k.is_some()
        || p.top_p.is_some();
    let (json_schema, regex) = match p.grammar {
        None => (None, None),
        Some(Grammar::Regex(r)) => (None, Some(r)),
        Some(Grammar::Json(v)) => (Some(json_value(v)?), None),
        Some(Grammar::JsonSchema(v)) => {
            let schema = match v {
                Value::Object(mut m) if m.contains_key("schema") => {
                    m.remove("schema").unwrap_or_default()
                }
                other => other,
            };
            (Some(json_value(schema)?), None)
        }
    };
    let stop = p.stop.unwrap_or_default();
    Ok(Sampling {
        max_tokens: Some(max_tokens),
        temperature: if samples { p.temperature } else { Some(0.0) },
        top_p: p.top_p,
        top_k: p.top_k,
        frequency_penalty: p.frequency_penalty,
        repetition_penalty: p.repetition_penalty,
        // TGI leaves a matched stop sequence in the text.
        include_stop: !stop.is_empty(),
        stop,
        n: 1,
        seed: p.seed,
        json_schema,
        regex,
        ..Sampling::default()
    })
}

/// A JSON grammar may be the schema or a string holding it.
fn json_value(v: Value) -> Result<Value, ProxyError> {
    match v {
        Value::String(s) => serde_json::from_str(&s)
            .map_err(|e| ProxyError::invalid("parameters.grammar", format!("not valid JSON: {e}"))),
        other => Ok(other),
    }
}

/// Canonical fields a TGI upstream has no way to honour.
fn refuse_for_tgi(req: &Request) -> Result<(), ProxyError> {
    let s = &req.sampling;
    let refused = [
        ("n", s.n > 1, "TGI returns one sequence per request"),
        (
            "ignore_eos",
            s.ignore_eos,
            "TGI cannot ignore the end-of-sequence token",
        ),
        (
            "min_tokens",
            s.min_tokens.is_some_and(|m| m > 0),
            "TGI has no minimum length",
        ),
        (
            "stop_token_ids",
            !s.stop_token_ids.is_empty(),
            "TGI stops on strings only",
        ),
        (
            "stop_regex",
            !s.stop_regex.is_empty(),
            "TGI has no stop-by-regex",
        ),
        (
            "ebnf",
            s.ebnf.is_some(),
            "TGI takes JSON or regex grammars only",
        ),
        (
            "logit_bias",
            s.logit_bias.as_ref().is_some_and(|b| !b.is_empty()),
            "TGI has no logit bias",
        ),
        (
            "min_p",
            s.min_p.is_some_and(|v| v > 0.0),
            "TGI has no min_p",
        ),
        (
            "presence_penalty",
            s.presence_penalty.is_some_and(|v| v != 0.0),
            "TGI's /generate has no presence penalty",
        ),
        (
            "stop",
            s.stop.len() > MAX_STOP_SEQUENCES,
            "TGI takes at most 4 stop sequences",
        ),
        (
            "logprobs",
            req.logprobs.is_some_and(|k| k > MAX_TOP_N_TOKENS),
            "TGI returns at most 5 top tokens per position",
        ),
        (
            "json_schema",
            s.json_schema.is_some() && s.regex.is_some(),
            "TGI takes one grammar",
        ),
    ];
    refuse_first(&refused)
}

/// Encode a canonical request for a TGI upstream: always an explicit `max_new_tokens` and
/// `details: true` (the counts come back only then); greedy as `do_sample: false`.
pub fn encode(req: &Request) -> Result<Vec<u8>, ProxyError> {
    let inputs = match &req.prompt {
        Prompt::Text(t) if t.len() == 1 => &t[0],
        Prompt::Text(_) => {
            return Err(ProxyError::unsupported(
                "prompt",
                "TGI takes one prompt per request, not a batch",
            ))
        }
        Prompt::Tokens(_) => {
            return Err(ProxyError::unsupported(
                "input_ids",
                "TGI takes text prompts only, not token ids",
            ))
        }
        Prompt::Chat(_) => {
            return Err(ProxyError::unsupported(
                "messages",
                "TGI's /generate takes a raw prompt, not chat messages",
            ))
        }
    };
    refuse_for_tgi(req)?;
    let s = &req.sampling;
    let mut p = Map::new();
    let max = s.max_tokens.unwrap_or(DEFAULT_MAX_NEW_TOKENS);
    p.insert("max_new_tokens".into(), json!(max));
    // SGLang's rule: a temperature below 1e-6 is greedy. TGI rejects 0, and any sampling knob
    // would turn sampling back on.
    let greedy = s.temperature.is_some_and(|t| t < 1e-6);
    p.insert("do_sample".into(), json!(!greedy));
    if !greedy {
        if let Some(t) = s.temperature {
            p.insert("temperature".into(), json!(t));
        }
        if let Some(v) = s.top_p.filter(|&v| v < 1.0) {
            p.insert("top_p".into(), json!(v));
        }
        if let Some(k) = s.top_k.filter(|&k| k > 0) {
            p.insert("top_k".into(), json!(k));
        }
    }
    let optional = [
        ("repetition_penalty", s.repetition_penalty.map(|v| json!(v))),
        ("frequency_penalty", s.frequency_penalty.map(|v| json!(v))),
        ("seed", s.seed.map(|v| json!(v))),
        ("stop", (!s.stop.is_empty()).then(|| json!(s.stop))),
        (
            "top_n_tokens",
            req.logprobs.filter(|&k| k > 0).map(|k| json!(k)),
        ),
        (
            "grammar",
            match (&s.json_schema, &s.regex) {
                (Some(schema), _) => Some(json!({"type": "json", "value": schema})),
                (None, Some(r)) => Some(json!({"type": "regex", "value": r})),
                (None, None) => None,
            },
        ),
    ];
    put_some(&mut p, &optional);
    p.insert("details".into(), json!(true));
    let body = json!({"inputs": inputs, "parameters": p});
    serde_json::to_vec(&body).map_err(|e| ProxyError::Internal(e.to_string()))
}
