//! Whole `/generate` responses, both directions, and TGI's token-count headers.

use http::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Finish, Response, TokenLogprob, Usage};

const PROMPT_TOKENS: &str = "x-prompt-tokens";
const GENERATED_TOKENS: &str = "x-generated-tokens";

/// One token as TGI reports it, in details and stream events.
#[derive(Debug, Deserialize)]
pub(super) struct TokenWire {
    #[serde(default)]
    pub id: u32,
    #[serde(default)]
    pub text: String,
    pub logprob: Option<f64>,
    #[serde(default)]
    pub special: bool,
}

impl TokenWire {
    /// The canonical logprob entry of a token and its alternatives.
    pub fn logprob_entry(&self, top: &[TokenWire]) -> TokenLogprob {
        TokenLogprob {
            token: Some(self.text.clone()),
            token_id: Some(self.id),
            logprob: self.logprob.unwrap_or(-9999.0),
            top: top
                .iter()
                .map(|t| {
                    (
                        Some(t.text.clone()),
                        Some(t.id),
                        t.logprob.unwrap_or(-9999.0),
                    )
                })
                .collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct DetailsWire {
    finish_reason: Option<String>,
    #[serde(default)]
    generated_tokens: u64,
    #[serde(default)]
    prefill: Vec<Value>,
    #[serde(default)]
    tokens: Vec<TokenWire>,
    #[serde(default)]
    top_tokens: Vec<Vec<TokenWire>>,
}

#[derive(Debug, Deserialize)]
struct ResponseWire {
    #[serde(default)]
    generated_text: String,
    details: Option<DetailsWire>,
}

/// TGI's compat route `/` wraps the response in a one-element array.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum BodyWire {
    One(ResponseWire),
    Many(Vec<ResponseWire>),
}

/// `eos_token` | `stop_sequence` | `length`; the EOS token's id, when the last token is it.
pub(super) fn finish_from_wire(reason: &str, last: Option<&TokenWire>) -> Finish {
    match reason {
        "length" => Finish::Length,
        // TGI does not say which sequence matched.
        "stop_sequence" => Finish::Stop,
        _ => Finish::Eos(last.filter(|t| t.special).map(|t| t.id)),
    }
}

pub(super) fn finish_to_wire(f: Option<&Finish>) -> &'static str {
    match f {
        Some(Finish::Length) => "length",
        Some(Finish::StopString(_) | Finish::Stop) => "stop_sequence",
        // TGI has no stop tokens and no aborted finish (an abort is an error there).
        Some(Finish::Eos(_) | Finish::StopToken(_) | Finish::Abort(_)) | None => "eos_token",
    }
}

/// Decode a TGI upstream's whole response (its token counts come from the headers).
pub fn decode(body: &[u8]) -> Result<Response, ProxyError> {
    let w: BodyWire = crate::dialect::json::from_bytes(body)
        .map_err(|e| ProxyError::UpstreamProtocol(format!("generate response: {e}")))?;
    let w = match w {
        BodyWire::One(r) => r,
        BodyWire::Many(v) => v
            .into_iter()
            .next()
            .ok_or_else(|| ProxyError::UpstreamProtocol("generate response: empty list".into()))?,
    };
    let mut choice = Choice {
        text: w.generated_text,
        ..Choice::default()
    };
    let mut usage = None;
    if let Some(d) = w.details {
        choice.finish = d
            .finish_reason
            .as_deref()
            .map(|r| finish_from_wire(r, d.tokens.last()));
        choice.logprobs = Some(
            d.tokens
                .iter()
                .enumerate()
                .map(|(i, t)| t.logprob_entry(d.top_tokens.get(i).map_or(&[], Vec::as_slice)))
                .collect(),
        );
        choice.token_ids = Some(d.tokens.iter().map(|t| t.id).collect());
        // `prefill` is only filled with `decoder_input_details`: the prompt count comes from
        // the `x-prompt-tokens` header, which replaces these totals.
        usage = Some(Usage {
            prompt_tokens: d.prefill.len() as u64,
            completion_tokens: d.generated_tokens,
            cached_tokens: None,
        });
    }
    Ok(Response {
        choices: vec![choice],
        usage,
        ..Response::default()
    })
}

/// The counts TGI puts in `x-prompt-tokens` / `x-generated-tokens`.
pub fn usage_from_headers(headers: &HeaderMap) -> Option<Usage> {
    let get = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<u64>().ok();
    Some(Usage {
        prompt_tokens: get(PROMPT_TOKENS)?,
        completion_tokens: get(GENERATED_TOKENS)?,
        cached_tokens: None,
    })
}

/// The count headers of a whole response for a TGI client.
pub fn headers(resp: &Response) -> Vec<(HeaderName, HeaderValue)> {
    let u = resp.usage.unwrap_or_default();
    vec![
        (
            HeaderName::from_static(PROMPT_TOKENS),
            HeaderValue::from(u.prompt_tokens),
        ),
        (
            HeaderName::from_static(GENERATED_TOKENS),
            HeaderValue::from(u.completion_tokens),
        ),
    ]
}

/// One `{id, text, logprob, special}` token.
pub(super) fn token_json(
    id: Option<u32>,
    text: &str,
    logprob: Option<f64>,
    special: bool,
) -> Value {
    json!({"id": id.unwrap_or(0), "text": text, "logprob": logprob, "special": special})
}

/// `details.tokens` (and `top_tokens` when asked) from what the upstream told about the choice.
fn tokens_json(c: &Choice, ctx: &Ctx) -> (Vec<Value>, Option<Vec<Value>>) {
    let eos = matches!(c.finish, Some(Finish::Eos(_)));
    let tops = ctx.logprobs.is_some_and(|k| k > 0);
    match (&c.logprobs, &c.token_ids) {
        (Some(lps), _) => {
            let last = lps.len().saturating_sub(1);
            let tokens = lps
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let text = l.token.as_deref().unwrap_or("");
                    let special = eos && i == last && text.is_empty();
                    token_json(l.token_id, text, Some(l.logprob), special)
                })
                .collect();
            let top = tops.then(|| {
                lps.iter()
                    .map(|l| {
                        let alts = l.top.iter().map(|(t, id, lp)| {
                            token_json(*id, t.as_deref().unwrap_or(""), Some(*lp), false)
                        });
                        Value::Array(alts.collect())
                    })
                    .collect()
            });
            (tokens, top)
        }
        (None, Some(ids)) => {
            let last = ids.len().saturating_sub(1);
            let tokens = ids
                .iter()
                .enumerate()
                .map(|(i, id)| token_json(Some(*id), "", None, eos && i == last))
                .collect();
            (tokens, None)
        }
        (None, None) => (Vec::new(), None),
    }
}

/// Encode a whole response for a TGI client: the prompt in front with `return_full_text`,
/// `details` when asked.
pub fn encode(resp: &Response, ctx: &Ctx) -> Vec<u8> {
    let empty = Choice::default();
    let c = resp.choices.first().unwrap_or(&empty);
    let text = match ctx.echo.first() {
        Some(prompt) => format!("{prompt}{}", c.text),
        None => c.text.clone(),
    };
    let mut v = json!({"generated_text": text});
    if ctx.details {
        let usage = resp.usage.or(c.usage).unwrap_or_default();
        let (tokens, top) = tokens_json(c, ctx);
        let mut d = json!({
            "finish_reason": finish_to_wire(c.finish.as_ref()),
            "generated_tokens": usage.completion_tokens,
            "seed": ctx.seed,
            "prefill": [],
            "tokens": tokens,
        });
        if let Some(top) = top {
            d["top_tokens"] = Value::Array(top);
        }
        v["details"] = d;
    }
    v.to_string().into_bytes()
}
