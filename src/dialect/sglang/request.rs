//! `/generate` requests, both directions.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::forms::{IdsWire, OneOrList, TextWire};
use super::DEFAULT_MAX_NEW_TOKENS;
use crate::dialect::fields::put_some;
use crate::dialect::openai::wire::OneOrMany;
use crate::error::{decode_json, ProxyError};
use crate::model::{Prompt, Request, Sampling};

mod fast;

/// SGLang's `SamplingParams`; unknown keys are an error there, so here too.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct SamplingParams {
    #[serde(default, deserialize_with = "crate::dialect::present")]
    max_new_tokens: Option<Option<u32>>,
    min_new_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    frequency_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    repetition_penalty: Option<f64>,
    stop: Option<OneOrMany>,
    stop_token_ids: Option<Vec<u32>>,
    stop_regex: Option<OneOrMany>,
    #[serde(default)]
    ignore_eos: bool,
    n: Option<u32>,
    skip_special_tokens: Option<bool>,
    spaces_between_special_tokens: Option<bool>,
    #[serde(default)]
    no_stop_trim: bool,
    json_schema: Option<String>,
    regex: Option<String>,
    ebnf: Option<String>,
    structural_tag: Option<Value>,
    logit_bias: Option<Map<String, Value>>,
    sampling_seed: Option<u64>,
    stream_interval: Option<Value>,
    custom_params: Option<Value>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
struct GenerateRequest {
    text: Option<TextWire>,
    input_ids: Option<IdsWire>,
    input_embeds: Option<Value>,
    sampling_params: Option<OneOrList<SamplingParams>>,
    #[serde(default)]
    stream: bool,
    rid: Option<Value>,
    #[serde(default)]
    return_logprob: bool,
    logprob_start_len: Option<i64>,
    top_logprobs_num: Option<u32>,
    token_ids_logprob: Option<Value>,
    #[serde(default)]
    return_text_in_logprobs: bool,
    lora_path: Option<String>,
    image_data: Option<Value>,
    video_data: Option<Value>,
    audio_data: Option<Value>,
    session_params: Option<Value>,
    custom_logit_processor: Option<Value>,
    #[serde(default)]
    return_hidden_states: bool,
}

/// How this dialect names a canonical field, for error messages.
pub fn field_name(canonical: &str) -> String {
    match canonical {
        "prompt" | "messages" => "text".into(),
        "input_ids" => "input_ids".into(),
        "max_tokens" => "sampling_params.max_new_tokens".into(),
        "min_tokens" => "sampling_params.min_new_tokens".into(),
        "seed" => "sampling_params.sampling_seed".into(),
        "include_stop" => "sampling_params.no_stop_trim".into(),
        "logprobs" => "return_logprob".into(),
        "model" => "model".into(),
        other => format!("sampling_params.{other}"),
    }
}

/// Top-level fields SGLang has and lingo cannot carry to another server.
fn refuse_unsupported(w: &GenerateRequest) -> Result<(), ProxyError> {
    let set = [
        ("input_embeds", w.input_embeds.is_some()),
        (
            "image_data",
            w.image_data.as_ref().is_some_and(|v| !v.is_null()),
        ),
        (
            "video_data",
            w.video_data.as_ref().is_some_and(|v| !v.is_null()),
        ),
        (
            "audio_data",
            w.audio_data.as_ref().is_some_and(|v| !v.is_null()),
        ),
        (
            "session_params",
            w.session_params.as_ref().is_some_and(|v| !v.is_null()),
        ),
        ("custom_logit_processor", w.custom_logit_processor.is_some()),
        ("return_hidden_states", w.return_hidden_states),
        (
            "token_ids_logprob",
            w.token_ids_logprob.as_ref().is_some_and(|v| !v.is_null()),
        ),
        (
            "logprob_start_len",
            w.return_logprob && w.logprob_start_len.is_some_and(|v| v >= 0),
        ),
        ("rid", w.rid.as_ref().is_some_and(Value::is_array)),
    ];
    match set.iter().find(|(_, on)| *on) {
        Some((field, _)) => Err(ProxyError::unsupported(
            *field,
            "lingo cannot carry this SGLang field to the upstream",
        )),
        None => Ok(()),
    }
}

/// The body as serde reads it.
fn by_serde(body: &[u8]) -> Result<GenerateRequest, ProxyError> {
    decode_json(body)
}

/// For the fuzzers: what the fast reader gives for a body, when it gives anything, is what
/// serde reads.
pub(crate) fn agrees_with_serde(body: &str) {
    if let Some(fast) = fast::request(body) {
        let serde = by_serde(body.as_bytes()).ok();
        assert_eq!(
            Some(fast),
            serde,
            "a body read fast otherwise than serde: {body}"
        );
    }
}

pub fn decode(body: &[u8]) -> Result<Request, ProxyError> {
    let fast = std::str::from_utf8(body).ok().and_then(fast::request);
    let mut w = match fast {
        Some(w) => w,
        None => by_serde(body)?,
    };
    refuse_unsupported(&w)?;
    // Taken, not copied: the prompt is the largest part of most requests.
    let (prompt, batched) = match (w.text.take(), w.input_ids.take()) {
        (Some(_), Some(_)) => {
            return Err(ProxyError::invalid(
                "text",
                "send either text or input_ids, not both",
            ))
        }
        (Some(TextWire::One(t)), None) => (Prompt::Text(vec![t]), false),
        (Some(TextWire::Batch(t)), None) => (Prompt::Text(t), true),
        (None, Some(IdsWire::One(ids))) => (Prompt::Tokens(vec![ids]), false),
        (None, Some(IdsWire::Batch(ids))) => (Prompt::Tokens(ids), true),
        (None, None) => {
            return Err(ProxyError::invalid(
                "text",
                "either text or input_ids is required",
            ))
        }
    };
    if prompt.is_empty() || matches!(&prompt, Prompt::Tokens(t) if t.iter().any(Vec::is_empty)) {
        return Err(ProxyError::invalid("input_ids", "must not be empty"));
    }
    let params = match w.sampling_params {
        None => SamplingParams::default(),
        Some(OneOrList::One(p)) => p,
        Some(OneOrList::List(mut list)) => {
            let first = list.pop().unwrap_or_default();
            if list.iter().any(|p| *p != first) {
                return Err(ProxyError::unsupported(
                    "sampling_params",
                    "different sampling_params per prompt are not supported; send one dict",
                ));
            }
            first
        }
    };
    let mut req = Request::new(prompt);
    req.batched = batched;
    req.sampling = sampling(params)?;
    req.stream = w.stream;
    req.model = w.lora_path;
    req.request_id = w.rid.and_then(|v| v.as_str().map(str::to_string));
    if w.return_logprob {
        req.logprobs = Some(w.top_logprobs_num.unwrap_or(0));
        req.logprob_text = w.return_text_in_logprobs;
    }
    Ok(req)
}

fn sampling(p: SamplingParams) -> Result<Sampling, ProxyError> {
    let refuse = |field: &str, on: bool| -> Result<(), ProxyError> {
        match on {
            true => Err(ProxyError::unsupported(
                format!("sampling_params.{field}"),
                "no equivalent on the upstream",
            )),
            false => Ok(()),
        }
    };
    refuse("structural_tag", p.structural_tag.is_some())?;
    refuse("custom_params", p.custom_params.is_some())?;
    refuse(
        "stream_interval",
        p.stream_interval.is_some_and(|v| !v.is_null()),
    )?;
    let max_tokens = match p.max_new_tokens {
        None => DEFAULT_MAX_NEW_TOKENS,
        Some(Some(v)) => v,
        Some(None) => {
            return Err(ProxyError::unsupported(
                "sampling_params.max_new_tokens",
                "null (until the context is full) has no explicit equivalent; give a number",
            ))
        }
    };
    let json_schema = match p.json_schema {
        None => None,
        Some(s) => Some(serde_json::from_str(&s).map_err(|e| {
            ProxyError::invalid(
                "sampling_params.json_schema",
                format!("not valid JSON: {e}"),
            )
        })?),
    };
    Ok(Sampling {
        max_tokens: Some(max_tokens),
        min_tokens: p.min_new_tokens,
        temperature: p.temperature,
        top_p: p.top_p,
        top_k: p.top_k,
        min_p: p.min_p,
        frequency_penalty: p.frequency_penalty,
        presence_penalty: p.presence_penalty,
        repetition_penalty: p.repetition_penalty,
        stop: p.stop.map(OneOrMany::into_vec).unwrap_or_default(),
        stop_token_ids: p.stop_token_ids.unwrap_or_default(),
        ignore_eos: p.ignore_eos,
        n: p.n.unwrap_or(1),
        seed: p.sampling_seed,
        skip_special_tokens: p.skip_special_tokens,
        spaces_between_special_tokens: p.spaces_between_special_tokens,
        include_stop: p.no_stop_trim,
        json_schema,
        regex: p.regex,
        ebnf: p.ebnf,
        logit_bias: p.logit_bias,
        stop_regex: p.stop_regex.map(OneOrMany::into_vec).unwrap_or_default(),
        implicit: Vec::new(),
    })
}

/// Encode a canonical request for an SGLang upstream (also what `lingo bench` sends).
pub fn encode(req: &Request) -> Result<Vec<u8>, ProxyError> {
    let mut m = Map::new();
    match (&req.prompt, req.batched) {
        (Prompt::Text(t), false) if t.len() == 1 => m.insert("text".into(), json!(t[0])),
        (Prompt::Text(t), _) => m.insert("text".into(), json!(t)),
        (Prompt::Tokens(t), false) if t.len() == 1 => m.insert("input_ids".into(), json!(t[0])),
        (Prompt::Tokens(t), _) => m.insert("input_ids".into(), json!(t)),
        (Prompt::Chat(_), _) => {
            return Err(ProxyError::unsupported(
                "messages",
                "SGLang /generate takes raw prompts, not chat messages",
            ))
        }
    };
    m.insert(
        "sampling_params".into(),
        Value::Object(sampling_json(&req.sampling)),
    );
    m.insert("stream".into(), json!(req.stream));
    if let Some(id) = &req.request_id {
        m.insert("rid".into(), json!(id));
    }
    if let Some(k) = req.logprobs {
        m.insert("return_logprob".into(), json!(true));
        m.insert("top_logprobs_num".into(), json!(k));
        m.insert("return_text_in_logprobs".into(), json!(true));
    }
    serde_json::to_vec(&m).map_err(|e| ProxyError::Internal(e.to_string()))
}

fn sampling_json(s: &Sampling) -> Map<String, Value> {
    let mut p = Map::new();
    let max = s.max_tokens.unwrap_or(DEFAULT_MAX_NEW_TOKENS);
    p.insert("max_new_tokens".into(), json!(max));
    let optional = [
        ("min_new_tokens", s.min_tokens.map(|v| json!(v))),
        ("temperature", s.temperature.map(|v| json!(v))),
        ("top_p", s.top_p.map(|v| json!(v))),
        ("top_k", s.top_k.map(|v| json!(v))),
        ("min_p", s.min_p.map(|v| json!(v))),
        ("frequency_penalty", s.frequency_penalty.map(|v| json!(v))),
        ("presence_penalty", s.presence_penalty.map(|v| json!(v))),
        ("repetition_penalty", s.repetition_penalty.map(|v| json!(v))),
        ("sampling_seed", s.seed.map(|v| json!(v))),
        (
            "skip_special_tokens",
            s.skip_special_tokens.map(|v| json!(v)),
        ),
        (
            "spaces_between_special_tokens",
            s.spaces_between_special_tokens.map(|v| json!(v)),
        ),
        (
            "json_schema",
            s.json_schema.as_ref().map(|v| json!(v.to_string())),
        ),
        ("regex", s.regex.as_ref().map(|v| json!(v))),
        ("ebnf", s.ebnf.as_ref().map(|v| json!(v))),
        ("logit_bias", s.logit_bias.clone().map(Value::Object)),
        ("stop", (!s.stop.is_empty()).then(|| json!(s.stop))),
        (
            "stop_token_ids",
            (!s.stop_token_ids.is_empty()).then(|| json!(s.stop_token_ids)),
        ),
        (
            "stop_regex",
            (!s.stop_regex.is_empty()).then(|| json!(s.stop_regex)),
        ),
        ("ignore_eos", s.ignore_eos.then_some(json!(true))),
        ("no_stop_trim", s.include_stop.then_some(json!(true))),
        ("n", (s.n != 1).then(|| json!(s.n))),
    ];
    put_some(&mut p, &optional);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bodies the fast reader reads, as serde does.
    const FAST: &[&str] = &[
        r#"{"text":"a b c d","sampling_params":{"max_new_tokens":16,"ignore_eos":true}}"#,
        r#"{"text": "a", "sampling_params": null, "stream": true}"#,
        r#"{"text": ["a", "b\n\u00e9"], "rid": "r-1", "lora_path": null}"#,
        r#"{"input_ids": [1, 2, 3], "stream": false, "return_logprob": true, "top_logprobs_num": 2, "return_text_in_logprobs": true, "logprob_start_len": -1}"#,
        r#"{"input_ids":[],"text":null,"rid":null}"#,
        r#"{"text":"x","sampling_params":{"max_new_tokens":null,"min_new_tokens":1,"temperature":0.7,"top_p":1,"top_k":-1,"min_p":0.05,"frequency_penalty":-0.5,"presence_penalty":0,"repetition_penalty":1.1,"stop":["\n",".\""],"stop_token_ids":[2],"n":1,"skip_special_tokens":null,"spaces_between_special_tokens":false,"no_stop_trim":true,"sampling_seed":42}}"#,
        r#"{"text":"x","sampling_params":{"stop":"end","temperature":1e-3,"top_p":2.5E0}}"#,
        r#" {"text":"x","unknown":{"deep":[1,{"a":null}]},"other":-1.5e7} "#,
        r#"{"text":"x","sampling_params":{}}"#,
    ];

    /// Bodies left to serde, whatever it makes of them.
    const DEFERRED: &[&str] = &[
        r#"{"text":"x","image_data":null}"#,
        r#"{"text":"x","sampling_params":[{"top_k":1}]}"#,
        r#"{"input_ids":[[1],[2]]}"#,
        r#"{"text":"x","text":"y"}"#,
        r#"{"t\u0065xt":"x"}"#,
        r#"{"text":"x","sampling_params":{"top_k":1.0}}"#,
        r#"{"text":"x","sampling_params":{"top_k":- 1}}"#,
        r#"{"text":"x","sampling_params":{"temperature":0.12345678901234567}}"#,
        r#"{"text":"x","sampling_params":{"temperature":-0}}"#,
        r#"{"text":"x","sampling_params":{"temperature":1e400}}"#,
        r#"{"text":"x","sampling_params":{"best_of":2}}"#,
        r#"{"text":"x","stream":null}"#,
        r#"{"text":5}"#,
        r#"{"text":"x"} x"#,
        r#"["x"]"#,
        r#"{"text":"x","rid":["a"]}"#,
    ];

    fn serde(body: &str) -> Option<GenerateRequest> {
        by_serde(body.as_bytes()).ok()
    }

    #[test]
    fn common_bodies_are_read_fast_and_as_serde_reads_them() {
        for body in FAST {
            let fast = fast::request(body);
            assert!(fast.is_some(), "not read fast: {body}");
            assert_eq!(fast, serde(body), "{body}");
        }
        for body in DEFERRED {
            assert_eq!(fast::request(body), None, "{body}");
        }
    }

    #[test]
    fn mangled_bodies_are_never_read_otherwise_than_serde_would() {
        use crate::dialect::openai::cursor::{mangled_bodies, JSON_BYTES};
        // Bounded: 40,000 random edits of the bodies above.
        let corpus: Vec<&str> = FAST.iter().chain(DEFERRED).copied().collect();
        let read_fast = mangled_bodies(&corpus, JSON_BYTES, 17, 40_000, |b| {
            let fast = fast::request(b);
            let answered = fast.is_some();
            assert!(!answered || fast == serde(b), "{b}");
            answered
        });
        assert!(read_fast > 5_000, "only {read_fast} edits were read fast");
    }

    fn field(body: &str) -> Option<String> {
        decode(body.as_bytes())
            .err()
            .and_then(|e| e.param().map(str::to_string))
    }

    #[test]
    fn sampling_params_read_in_the_same_pass_as_the_rest() {
        let plain = decode(br#"{"text": "a", "sampling_params": null}"#).unwrap();
        assert_eq!(plain.sampling.max_tokens, Some(DEFAULT_MAX_NEW_TOKENS));
        let one = decode(br#"{"text": "a", "sampling_params": {"max_new_tokens": 3}}"#).unwrap();
        assert_eq!(one.sampling.max_tokens, Some(3));
        let list = r#"{"text": ["a", "b"], "sampling_params": [{"top_k": 2}, {"top_k": 2}]}"#;
        assert_eq!(decode(list.as_bytes()).unwrap().sampling.top_k, Some(2));
        // Failures name the field by its whole path.
        let cases = [
            (
                r#"{"text": "a", "sampling_params": {"top_k": "2"}}"#,
                "sampling_params.top_k",
            ),
            (r#"{"text": "a", "sampling_params": 5}"#, "sampling_params"),
            (
                r#"{"text": ["a", "b"], "sampling_params": [{}, {"top_k": 1.5}]}"#,
                "sampling_params[1].top_k",
            ),
            (
                r#"{"text": ["a", "b"], "sampling_params": [{"top_k": 1}, {}]}"#,
                "sampling_params",
            ),
            (r#"{"text": 5}"#, "text"),
        ];
        for (body, want) in cases {
            assert_eq!(field(body).as_deref(), Some(want), "{body}");
        }
    }
}
