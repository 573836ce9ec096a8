//! SGLang's logprob tuples: `[logprob, token_id, text|null]`.

use serde_json::{json, Value};

use crate::model::TokenLogprob;

fn tuple(lp: f64, id: Option<u32>, text: Option<&str>, with_text: bool) -> Value {
    json!([lp, id, if with_text { text } else { None }])
}

/// `(output_token_logprobs, output_top_logprobs)` for `meta_info`.
pub fn to_meta(lps: &[TokenLogprob], with_text: bool) -> (Value, Value) {
    let tokens: Vec<Value> = lps
        .iter()
        .map(|l| tuple(l.logprob, l.token_id, l.token.as_deref(), with_text))
        .collect();
    let tops: Vec<Value> = lps
        .iter()
        .map(|l| {
            let alts: Vec<Value> = l
                .top
                .iter()
                .map(|(t, id, lp)| tuple(*lp, *id, t.as_deref(), with_text))
                .collect();
            Value::Array(alts)
        })
        .collect();
    (Value::Array(tokens), Value::Array(tops))
}

/// Read `meta_info.output_token_logprobs` (+ top) back into canonical entries.
pub fn from_meta(tokens: &Value, tops: Option<&Value>) -> Vec<TokenLogprob> {
    let parse = |t: &Value| -> (Option<String>, Option<u32>, f64) {
        let lp = t.get(0).and_then(Value::as_f64).unwrap_or(-9999.0);
        let id = t.get(1).and_then(Value::as_u64).map(|v| v as u32);
        let text = t.get(2).and_then(Value::as_str).map(str::to_string);
        (text, id, lp)
    };
    let Some(items) = tokens.as_array() else {
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (token, token_id, logprob) = parse(t);
            let top = tops
                .and_then(|v| v.get(i))
                .and_then(Value::as_array)
                .map(|alts| alts.iter().map(parse).collect())
                .unwrap_or_default();
            TokenLogprob {
                token,
                token_id,
                logprob,
                top,
            }
        })
        .collect()
}
