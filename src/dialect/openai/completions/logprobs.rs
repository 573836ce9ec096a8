//! Completions logprobs: `{tokens, token_logprobs, top_logprobs, text_offset}` per choice.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::model::TokenLogprob;

#[derive(Debug, Default, Deserialize)]
pub struct LogprobsWire {
    #[serde(default)]
    tokens: Vec<String>,
    #[serde(default)]
    token_logprobs: Vec<Option<f64>>,
    #[serde(default)]
    top_logprobs: Option<Vec<Option<Map<String, Value>>>>,
}

/// Read a choice's logprobs; `ids` are the choice's token ids when the upstream sent them.
pub fn from_wire(w: LogprobsWire, ids: Option<&[u32]>) -> Vec<TokenLogprob> {
    let tops = w.top_logprobs.unwrap_or_default();
    w.tokens
        .into_iter()
        .enumerate()
        .map(|(i, token)| TokenLogprob {
            token_id: ids.and_then(|ids| ids.get(i).copied()),
            logprob: w
                .token_logprobs
                .get(i)
                .copied()
                .flatten()
                .unwrap_or(-9999.0),
            top: tops
                .get(i)
                .and_then(|t| t.as_ref())
                .map(|m| {
                    m.iter()
                        .map(|(t, lp)| (Some(t.clone()), None, lp.as_f64().unwrap_or(-9999.0)))
                        .collect()
                })
                .unwrap_or_default(),
            token: Some(token),
        })
        .collect()
}

/// Write logprobs for a completions client; `offset` is the text offset of the first token.
pub fn to_wire(lps: &[TokenLogprob], mut offset: usize) -> Value {
    let mut tokens = Vec::with_capacity(lps.len());
    let mut values = Vec::with_capacity(lps.len());
    let mut tops = Vec::with_capacity(lps.len());
    let mut offsets = Vec::with_capacity(lps.len());
    for lp in lps {
        let tok = lp.token.clone().unwrap_or_default();
        offsets.push(offset);
        offset += tok.len();
        tokens.push(tok);
        values.push(lp.logprob);
        let top: Map<String, Value> = lp
            .top
            .iter()
            .map(|(t, _, v)| (t.clone().unwrap_or_default(), json!(v)))
            .collect();
        tops.push(top);
    }
    json!({"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets})
}
