//! TGI's `GenerateRequest` and its validation, with TGI's messages (dialects.md 3.1).
//!
//! Unknown keys are ignored, as TGI's serde structs do. Knobs that cannot change the mock's
//! output are still range-checked, so a translator sending a bad value sees the real error.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::mock::error::ApiError;
use crate::mock::generate::Params;
use crate::mock::prompt::Prompt;

/// TGI's default `--max-stop-sequences`, `--max-top-n-tokens` and `--max-best-of`.
const MAX_STOP_SEQUENCES: usize = 4;
const MAX_TOP_N_TOKENS: u32 = 5;
const MAX_BEST_OF: u32 = 1;

#[derive(Deserialize)]
pub(crate) struct GenerateRequest {
    pub inputs: String,
    pub parameters: Option<Parameters>,
}

#[derive(Deserialize, Default)]
#[allow(dead_code)] // grammar and adapter_id are accepted and ignored
pub(crate) struct Parameters {
    best_of: Option<u32>,
    temperature: Option<f64>,
    repetition_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    top_k: Option<i64>,
    top_p: Option<f64>,
    typical_p: Option<f64>,
    do_sample: Option<bool>,
    /// Absent or `null`: up to the context length (TGI 3).
    max_new_tokens: Option<u32>,
    return_full_text: Option<bool>,
    #[serde(default, deserialize_with = "null_as_empty")]
    stop: Vec<String>,
    truncate: Option<u64>,
    watermark: Option<bool>,
    details: Option<bool>,
    decoder_input_details: Option<bool>,
    seed: Option<u64>,
    top_n_tokens: Option<u32>,
    grammar: Option<Value>,
    adapter_id: Option<String>,
}

fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Option::<Vec<String>>::deserialize(d).map(Option::unwrap_or_default)
}

/// A validated request.
pub(crate) struct Job {
    pub prompt: Prompt,
    pub params: Params,
    pub details: bool,
    pub prefill: bool,
    pub full_text: bool,
    pub top_n: u32,
    /// The seed TGI reports: the given or a random one when sampling, none when greedy.
    pub seed: Option<u64>,
}

/// Context limits: TGI's `--max-input-tokens` and `--max-total-tokens`.
#[derive(Clone, Copy)]
pub(crate) struct Limits {
    pub max_input: u32,
    pub max_total: u32,
}

impl Limits {
    pub fn new(max_model_len: u32) -> Limits {
        Limits {
            max_input: max_model_len.saturating_sub(1).max(1),
            max_total: max_model_len,
        }
    }
}

fn invalid(message: String) -> Result<Job, ApiError> {
    Err(ApiError::unprocessable(message))
}

/// TGI's `Validation::validate`, in its order.
pub(crate) fn validate(
    req: GenerateRequest,
    stream: bool,
    limits: Limits,
) -> Result<Job, ApiError> {
    let given = req.parameters.is_some();
    let p = req.parameters.unwrap_or_default();
    let best_of = p.best_of.unwrap_or(1);
    let sampling = p.do_sample.unwrap_or(!given)
        || p.temperature.is_some()
        || p.top_k.is_some()
        || p.top_p.is_some()
        || p.typical_p.is_some();
    if best_of != 1 && stream {
        return invalid("`best_of` != 1 is not supported when streaming tokens".into());
    }
    if best_of != MAX_BEST_OF {
        return invalid("`best_of` != 1 is not allowed for this endpoint".into());
    }
    if p.decoder_input_details == Some(true) && stream {
        return invalid(
            "`decoder_input_details` == true is not supported when streaming tokens".into(),
        );
    }
    let bad = |v: Option<f64>, ok: fn(f64) -> bool| v.is_some_and(|v| !ok(v));
    let checks = [
        (
            bad(p.temperature, |t| t > 0.0),
            "`temperature` must be strictly positive",
        ),
        (
            bad(p.repetition_penalty, |v| v > 0.0),
            "`repetition_penalty` must be strictly positive",
        ),
        (
            bad(p.frequency_penalty, |v| (-2.0..=2.0).contains(&v)),
            "`frequency_penalty` must be >= -2.0 and <= 2.0",
        ),
        (
            bad(p.top_p, |v| v > 0.0 && v < 1.0),
            "`top_p` must be > 0.0 and < 1.0",
        ),
        (
            bad(p.typical_p, |v| v > 0.0 && v < 1.0),
            "`typical_p` must be > 0.0 and < 1.0",
        ),
        (
            p.top_k.is_some_and(|k| k <= 0),
            "`top_k` must be strictly positive",
        ),
        (
            p.max_new_tokens == Some(0),
            "`max_new_tokens` must be strictly positive",
        ),
    ];
    if let Some((_, msg)) = checks.iter().find(|(failed, _)| *failed) {
        return invalid((*msg).into());
    }
    if p.stop.len() > MAX_STOP_SEQUENCES {
        return invalid(format!(
            "`stop` supports up to {MAX_STOP_SEQUENCES} stop sequences. Given: {}",
            p.stop.len()
        ));
    }
    let top_n = p.top_n_tokens.unwrap_or(0);
    if top_n > MAX_TOP_N_TOKENS {
        return invalid(format!(
            "`top_n_tokens` must be >= 0 and <= {MAX_TOP_N_TOKENS}. Given: {top_n}"
        ));
    }
    if req.inputs.is_empty() {
        return invalid("`inputs` cannot be empty".into());
    }
    if let Some(t) = p
        .truncate
        .filter(|&t| t == 0 || t > u64::from(limits.max_input))
    {
        return invalid(format!(
            "`truncate` must be strictly positive and less than {}. Given: {t}",
            limits.max_input
        ));
    }
    let prompt = Prompt::from_text(req.inputs);
    let input = prompt.len();
    if input > limits.max_input {
        return invalid(format!(
            "`inputs` must have less than {} tokens. Given: {input}",
            limits.max_input
        ));
    }
    let max_new = p
        .max_new_tokens
        .unwrap_or(limits.max_total.saturating_sub(input));
    if u64::from(input) + u64::from(max_new) > u64::from(limits.max_total) {
        return invalid(format!(
            "`inputs` tokens + `max_new_tokens` must be <= {}. Given: {input} `inputs` tokens and \
             {max_new} `max_new_tokens`",
            limits.max_total
        ));
    }
    Ok(Job {
        prompt,
        params: Params {
            max_tokens: max_new,
            min_tokens: 0,
            ignore_eos: false,
            stop: p.stop.into_iter().filter(|s| !s.is_empty()).collect(),
            stop_token_ids: Vec::new(),
            // TGI leaves the matched stop sequence in the text.
            keep_stop: true,
        },
        details: p.details.unwrap_or(false),
        prefill: p.decoder_input_details.unwrap_or(false),
        full_text: p.return_full_text.unwrap_or(false),
        top_n,
        seed: sampling.then(|| p.seed.unwrap_or_else(rand::random)),
    })
}
