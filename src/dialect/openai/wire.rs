//! Wire pieces shared by completions and chat: sampling fields, usage, finish reasons.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::ProxyError;
use bytes::BytesMut;

use crate::dialect::fields::{put_some, ObjectWriter, Put};
use crate::dialect::openai::Flavor;
use crate::dialect::Ctx;
use crate::model::{Finish, Request, Sampling, Tally, Usage};
use crate::stream::framing::write_sse;

/// `stop` is a string or a list of strings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// Sampling fields common to both endpoints (OpenAI plus vLLM's extensions).
#[derive(Debug, Default, Deserialize)]
pub struct SamplingWire {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub n: Option<u32>,
    pub stop: Option<OneOrMany>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub ignore_eos: Option<bool>,
    pub min_tokens: Option<u32>,
    pub seed: Option<u64>,
    pub skip_special_tokens: Option<bool>,
    pub spaces_between_special_tokens: Option<bool>,
    pub include_stop_str_in_output: Option<bool>,
    pub logit_bias: Option<Map<String, Value>>,
}

pub fn sampling_from_wire(w: SamplingWire, max_tokens: Option<u32>) -> Sampling {
    Sampling {
        max_tokens,
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
        logit_bias: w.logit_bias,
        ..Sampling::default()
    }
}

/// Write every sampling field the request sets (vLLM's names), refusing what the upstream
/// lacks.
pub fn write_sampling<P: Put>(s: &Sampling, m: &mut P, flavor: Flavor) -> Result<(), ProxyError> {
    write_standard(s, m);
    match flavor {
        Flavor::Vllm => write_extensions(s, m),
        Flavor::Llamacpp => write_llamacpp(s, m),
        Flavor::Standard => refuse_extensions(s, flavor, &[]),
    }?;
    write_structured(s, m)
}

/// The fields OpenAI documents.
fn write_standard<P: Put>(s: &Sampling, m: &mut P) {
    let floats = [
        ("temperature", s.temperature),
        ("top_p", s.top_p),
        ("frequency_penalty", s.frequency_penalty),
        ("presence_penalty", s.presence_penalty),
    ];
    put_some(m, &floats);
    if s.n != 1 {
        m.put("n", &s.n);
    }
    if !s.stop.is_empty() {
        m.put("stop", &s.stop);
    }
    if let Some(seed) = s.seed {
        m.put("seed", &seed);
    }
    if let Some(b) = &s.logit_bias {
        m.put("logit_bias", b);
    }
}

/// vLLM's (and SGLang's) sampling additions.
fn write_extensions<P: Put>(s: &Sampling, m: &mut P) -> Result<(), ProxyError> {
    if let Some(v) = s.min_tokens.filter(|&v| v > 0) {
        m.put("min_tokens", &v);
    }
    if let Some(v) = s.min_p {
        m.put("min_p", &v);
    }
    if let Some(v) = s.repetition_penalty {
        m.put("repetition_penalty", &v);
    }
    if let Some(k) = s.top_k {
        m.put("top_k", &k);
    }
    if !s.stop_token_ids.is_empty() {
        m.put("stop_token_ids", &s.stop_token_ids);
    }
    if s.ignore_eos {
        m.put("ignore_eos", &true);
    }
    if let Some(v) = s.skip_special_tokens {
        m.put("skip_special_tokens", &v);
    }
    if let Some(v) = s.spaces_between_special_tokens {
        m.put("spaces_between_special_tokens", &v);
    }
    if s.include_stop {
        // vLLM's name, and SGLang's (whose OpenAI routes read only `no_stop_trim`).
        m.put("include_stop_str_in_output", &true);
        m.put("no_stop_trim", &true);
    }
    Ok(())
}

/// The vLLM sampling fields a request sets (neutral values, `top_k: -1`, `min_p: 0`, ...,
/// ask for nothing and count as unset).
fn extensions_set(s: &Sampling) -> [(&'static str, bool); 11] {
    [
        ("top_k", s.top_k.is_some_and(|k| k > 0)),
        ("min_p", s.min_p.is_some_and(|p| p > 0.0)),
        (
            "repetition_penalty",
            s.repetition_penalty.is_some_and(|p| p != 1.0),
        ),
        ("ignore_eos", s.ignore_eos),
        ("min_tokens", s.min_tokens.is_some_and(|n| n > 0)),
        ("stop_token_ids", !s.stop_token_ids.is_empty()),
        ("skip_special_tokens", s.skip_special_tokens == Some(false)),
        (
            "spaces_between_special_tokens",
            s.spaces_between_special_tokens == Some(false),
        ),
        ("include_stop", s.include_stop),
        ("regex", s.regex.is_some()),
        ("ebnf", s.ebnf.is_some()),
    ]
}

/// Refuse the first extension the request sets that `takes` does not list.
fn refuse_extensions(s: &Sampling, flavor: Flavor, takes: &[&str]) -> Result<(), ProxyError> {
    let set = extensions_set(s);
    let Some((field, _)) = set.iter().find(|(f, on)| *on && !takes.contains(f)) else {
        return Ok(());
    };
    let upstream = match flavor {
        Flavor::Llamacpp => "llama.cpp",
        Flavor::Vllm | Flavor::Standard => "the standard OpenAI API",
    };
    let reason = match *field {
        // TGI clients ask for this implicitly: TGI keeps a matched stop sequence in the text.
        "include_stop" => {
            format!("{upstream} cannot keep the matched stop sequence in the text")
        }
        _ => format!("{upstream} has no such field"),
    };
    Err(ProxyError::unsupported(*field, reason))
}

/// llama.cpp's OpenAI routes read its native sampling names: the extensions it has are
/// written its way, the others refused (it would ignore them silently).
fn write_llamacpp<P: Put>(s: &Sampling, m: &mut P) -> Result<(), ProxyError> {
    refuse_extensions(s, Flavor::Llamacpp, LLAMACPP_TAKES)?;
    if let Some(k) = s.top_k {
        m.put("top_k", &k.max(0));
    }
    if let Some(v) = s.min_p {
        m.put("min_p", &v);
    }
    if let Some(v) = s.repetition_penalty {
        m.put("repeat_penalty", &v);
    }
    if s.ignore_eos {
        m.put("ignore_eos", &true);
    }
    Ok(())
}

/// The vLLM extensions llama.cpp has (under its own names).
const LLAMACPP_TAKES: &[&str] = &["top_k", "min_p", "repetition_penalty", "ignore_eos"];

/// Structured output: a JSON schema through `response_format`, regex and grammars through
/// vLLM's `structured_outputs`.
fn write_structured<P: Put>(s: &Sampling, m: &mut P) -> Result<(), ProxyError> {
    if !s.stop_regex.is_empty() {
        return Err(ProxyError::unsupported(
            "stop_regex",
            "the upstream has no stop-by-regex; use stop strings",
        ));
    }
    if let Some(schema) = &s.json_schema {
        let format =
            json!({"type": "json_schema", "json_schema": {"name": "schema", "schema": schema}});
        m.put("response_format", &format);
    }
    let mut so = Map::new();
    if let Some(r) = &s.regex {
        so.insert("regex".into(), json!(r));
    }
    if let Some(g) = &s.ebnf {
        so.insert("grammar".into(), json!(g));
    }
    if !so.is_empty() {
        m.put("structured_outputs", &so);
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
pub struct UsageWire {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<CachedWire>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
pub struct CachedWire {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

impl From<UsageWire> for Usage {
    fn from(u: UsageWire) -> Usage {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
        }
    }
}

pub fn usage_json(u: &Usage) -> Value {
    let mut v = json!({
        "prompt_tokens": u.prompt_tokens,
        "total_tokens": u.total(),
        "completion_tokens": u.completion_tokens,
    });
    if let Some(c) = u.cached_tokens {
        v["prompt_tokens_details"] = json!({ "cached_tokens": c });
    }
    v
}

/// Read `finish_reason` plus vLLM's `stop_reason`.
pub fn finish_from_wire(reason: Option<&str>, stop_reason: Option<&Value>) -> Option<Finish> {
    Some(match reason? {
        "stop" | "eos_token" | "stop_sequence" => match stop_reason {
            Some(Value::String(s)) => Finish::StopString(s.clone()),
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map_or(Finish::Stop, Finish::StopToken),
            _ if reason == Some("stop_sequence") => Finish::Stop,
            _ => Finish::Eos(None),
        },
        "length" => Finish::Length,
        "abort" | "error" => Finish::Abort(String::new()),
        _ => Finish::Stop,
    })
}

/// `(finish_reason, stop_reason)` for OpenAI-style clients.
pub fn finish_to_wire(f: Option<&Finish>) -> (Value, Value) {
    match f {
        None => (Value::Null, Value::Null),
        Some(Finish::Length) => (json!("length"), Value::Null),
        Some(Finish::Abort(_)) => (json!("abort"), Value::Null),
        Some(Finish::StopString(s)) => (json!("stop"), json!(s)),
        Some(Finish::StopToken(t)) => (json!("stop"), json!(t)),
        Some(Finish::Eos(_) | Finish::Stop) => (json!("stop"), Value::Null),
    }
}

/// `stream_options` as an upstream is asked for them.
#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    continuous_usage_stats: bool,
}

/// The tail every OpenAI-style upstream request shares: the request id, the stream flag
/// with usage (per chunk where the upstream can, so lingo counts exactly), and the client's
/// own extra fields.
pub fn finish_request(req: &Request, mut m: ObjectWriter, flavor: Flavor) -> Vec<u8> {
    let vllm = flavor == Flavor::Vllm;
    if let Some(id) = req.request_id.as_ref().filter(|_| vllm) {
        m.put("request_id", id);
    }
    if req.stream {
        m.put("stream", &true);
        let options = StreamOptions {
            include_usage: true,
            continuous_usage_stats: vllm,
        };
        m.put("stream_options", &options);
    }
    m.finish(&req.extra)
}

/// A stream's end for an OpenAI client: the usage chunk if it asked for one, then `[DONE]`.
pub fn write_stream_end(ctx: &Ctx, object: &str, tally: &Tally, out: &mut BytesMut) {
    if ctx.stream_usage {
        let (usage, _) = tally.totals();
        let v = json!({"id": ctx.id, "object": object, "created": ctx.created,
                       "model": ctx.model, "choices": [], "usage": usage_json(&usage)});
        write_sse(out, v.to_string().as_bytes());
    }
    write_sse(out, b"[DONE]");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(s: &Sampling, flavor: Flavor) -> Result<Map<String, Value>, ProxyError> {
        let mut m = Map::new();
        write_sampling(s, &mut m, flavor).map(|()| m)
    }

    #[test]
    fn each_flavor_writes_what_its_upstream_reads() {
        let s = Sampling {
            top_k: Some(20),
            repetition_penalty: Some(1.1),
            temperature: Some(0.5),
            ..Sampling::default()
        };
        let vllm = written(&s, Flavor::Vllm).unwrap();
        assert_eq!(vllm["repetition_penalty"], json!(1.1));
        let llama = written(&s, Flavor::Llamacpp).unwrap();
        assert_eq!(llama["repeat_penalty"], json!(1.1));
        assert!(!llama.contains_key("repetition_penalty"));
        assert_eq!(llama["top_k"], json!(20));
        let err = written(&s, Flavor::Standard).unwrap_err();
        assert!(err.to_string().contains("top_k"), "{err}");
    }

    #[test]
    fn llamacpp_refuses_what_it_would_ignore() {
        let s = Sampling {
            min_tokens: Some(3),
            ..Sampling::default()
        };
        let err = written(&s, Flavor::Llamacpp).unwrap_err();
        assert!(err.to_string().contains("min_tokens"), "{err}");
        // Neutral values ask for nothing.
        let neutral = Sampling {
            min_tokens: Some(0),
            skip_special_tokens: Some(true),
            ..Sampling::default()
        };
        written(&neutral, Flavor::Llamacpp).unwrap();
        written(&neutral, Flavor::Standard).unwrap();
    }
}
