//! The `options` object: Ollama's sampling parameters, both directions.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::DEFAULT_NUM_PREDICT;
use crate::dialect::fields::{put_some, refuse_first};
use crate::error::ProxyError;
use crate::model::Sampling;

/// Load-time and hardware options: hints to Ollama's model loader with no meaning for another
/// server, whose own configuration applies (`num_ctx` included: the upstream's context is
/// fixed when it starts).
const LOADER_HINTS: &[&str] = &[
    "num_ctx",
    "num_batch",
    "num_gpu",
    "main_gpu",
    "num_thread",
    "use_mmap",
    "use_mlock",
    "numa",
    "low_vram",
    "vocab_only",
    "f16_kv",
    "logits_all",
];

#[derive(Debug, Default, Deserialize)]
pub struct OptionsWire {
    num_predict: Option<i64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    stop: Option<Vec<String>>,
    seed: Option<i64>,
    repeat_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// The canonical sampling of a request's `options` (absent: all defaults).
pub fn decode(o: Option<OptionsWire>) -> Result<Sampling, ProxyError> {
    let o = o.unwrap_or_default();
    let mut rest: Vec<&String> = o
        .rest
        .iter()
        .filter(|(k, v)| !v.is_null() && !LOADER_HINTS.contains(&k.as_str()))
        .map(|(k, _)| k)
        .collect();
    rest.sort();
    if let Some(k) = rest.first() {
        return Err(ProxyError::unsupported(
            format!("options.{k}"),
            "lingo cannot carry this Ollama option to the upstream",
        ));
    }
    let max_tokens = match o.num_predict {
        None | Some(-1) | Some(-2) => DEFAULT_NUM_PREDICT,
        Some(n) => u32::try_from(n).map_err(|_| {
            ProxyError::invalid(
                "options.num_predict",
                format!(
                    "must be -1 (lingo's default of {DEFAULT_NUM_PREDICT}) or a count, got {n}"
                ),
            )
        })?,
    };
    Ok(Sampling {
        max_tokens: Some(max_tokens),
        temperature: o.temperature.map(|t| t.max(0.0)),
        top_p: o.top_p,
        // Ollama's 0 (or less) is "off"; canonical "off" is -1.
        top_k: o.top_k.map(|k| if k <= 0 { -1 } else { k }),
        min_p: o.min_p,
        stop: o.stop.unwrap_or_default(),
        seed: o.seed.and_then(|s| u64::try_from(s).ok()),
        repetition_penalty: o.repeat_penalty,
        presence_penalty: o.presence_penalty,
        frequency_penalty: o.frequency_penalty,
        n: 1,
        ..Sampling::default()
    })
}

/// `options` for an Ollama upstream: an explicit `num_predict`, neutral sampling defaults made
/// explicit, and a refusal for what Ollama has no option for.
pub fn encode(s: &Sampling) -> Result<Map<String, Value>, ProxyError> {
    refuse(s)?;
    let mut m = Map::new();
    m.insert(
        "num_predict".into(),
        json!(s.max_tokens.unwrap_or(DEFAULT_NUM_PREDICT)),
    );
    m.insert("temperature".into(), json!(s.temperature.unwrap_or(1.0)));
    m.insert("top_p".into(), json!(s.top_p.unwrap_or(1.0)));
    m.insert("top_k".into(), json!(s.top_k.unwrap_or(0).max(0)));
    let optional = [
        ("min_p", s.min_p),
        ("repeat_penalty", s.repetition_penalty),
        ("presence_penalty", s.presence_penalty),
        ("frequency_penalty", s.frequency_penalty),
    ];
    put_some(&mut m, &optional);
    if !s.stop.is_empty() {
        m.insert("stop".into(), json!(s.stop));
    }
    if let Some(seed) = s.seed {
        m.insert("seed".into(), json!(seed));
    }
    Ok(m)
}

fn refuse(s: &Sampling) -> Result<(), ProxyError> {
    let refusals = [
        ("n", s.n > 1, "Ollama generates one completion per request"),
        (
            "ignore_eos",
            s.ignore_eos,
            "Ollama has no option to ignore EOS",
        ),
        (
            "min_tokens",
            s.min_tokens.is_some_and(|v| v > 0),
            "Ollama has no minimum output length",
        ),
        (
            "stop_token_ids",
            !s.stop_token_ids.is_empty(),
            "Ollama stops on strings only",
        ),
        (
            "include_stop",
            s.include_stop,
            "Ollama always trims the stop string",
        ),
        (
            "stop_regex",
            !s.stop_regex.is_empty(),
            "Ollama has no stop-by-regex",
        ),
        (
            "regex",
            s.regex.is_some(),
            "Ollama constrains output by JSON schema only",
        ),
        (
            "ebnf",
            s.ebnf.is_some(),
            "Ollama constrains output by JSON schema only",
        ),
        (
            "logit_bias",
            s.logit_bias.is_some(),
            "Ollama has no logit bias option",
        ),
        (
            "skip_special_tokens",
            s.skip_special_tokens == Some(false),
            "Ollama does not render special tokens on request",
        ),
    ];
    refuse_first(&refusals)
}
