//! Chat logprobs: `{content: [{token, logprob, bytes, top_logprobs: [...]}]}`. llama.cpp
//! answers completions in this shape too, with each token's `id`.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::model::TokenLogprob;

#[derive(Debug, Deserialize)]
struct TopWire {
    token: String,
    logprob: f64,
    /// llama.cpp's.
    id: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct EntryWire {
    token: String,
    logprob: f64,
    /// llama.cpp's.
    id: Option<u32>,
    #[serde(default)]
    top_logprobs: Vec<TopWire>,
}

#[derive(Debug, Deserialize)]
struct LogprobsWire {
    #[serde(default)]
    content: Option<Vec<EntryWire>>,
}

pub fn logprobs_from_value(v: Value, ids: Option<&[u32]>) -> Vec<TokenLogprob> {
    let Ok(w) = serde_json::from_value::<LogprobsWire>(v) else {
        return Vec::new();
    };
    w.content
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, e)| TokenLogprob {
            token: Some(e.token),
            token_id: ids.and_then(|ids| ids.get(i).copied()).or(e.id),
            logprob: e.logprob,
            top: e
                .top_logprobs
                .into_iter()
                .map(|t| (Some(t.token), t.id, t.logprob))
                .collect(),
        })
        .collect()
}

pub fn to_wire(lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|lp| {
            let tok = lp.token.clone().unwrap_or_default();
            let top: Vec<Value> = lp
                .top
                .iter()
                .map(|(t, _, v)| {
                    let t = t.clone().unwrap_or_default();
                    json!({"token": t, "logprob": v, "bytes": t.as_bytes()})
                })
                .collect();
            json!({"token": tok, "logprob": lp.logprob, "bytes": tok.as_bytes(), "top_logprobs": top})
        })
        .collect();
    json!({ "content": content })
}
