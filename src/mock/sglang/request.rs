//! SGLang `GenerateReqInput` and `SamplingParams` (dialects.md 1.1, 1.2).
//!
//! Unknown top-level keys are ignored, unknown `sampling_params` keys are rejected, as SGLang
//! does. Sampling knobs that cannot change the mock's output are still range-checked like
//! SGLang's `SamplingParams.verify`, so a translator sending a bad value sees the real error.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::mock::error::ApiError;

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T: Clone> OneOrMany<T> {
    /// The value for batch element `i`: a scalar applies to all.
    pub fn get(&self, i: usize) -> Option<T> {
        match self {
            OneOrMany::One(v) => Some(v.clone()),
            OneOrMany::Many(list) => list.get(i).cloned(),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum InputIds {
    One(Vec<u32>),
    Batch(Vec<Vec<u32>>),
}

#[derive(Deserialize)]
pub(crate) struct GenerateRequest {
    pub text: Option<OneOrMany<String>>,
    pub input_ids: Option<InputIds>,
    pub input_embeds: Option<Value>,
    /// An object, or a list with one object per prompt; parsed per prompt, later, because SGLang
    /// rejects bad sampling params as a generation error (in-band when streaming).
    pub sampling_params: Option<Value>,
    pub stream: Option<bool>,
    pub rid: Option<OneOrMany<String>>,
    pub return_logprob: Option<OneOrMany<bool>>,
    pub logprob_start_len: Option<OneOrMany<i64>>,
    pub top_logprobs_num: Option<OneOrMany<u32>>,
    pub return_text_in_logprobs: Option<bool>,
}

/// Every key SGLang's `SamplingParams` takes, and no other (`deny_unknown_fields` cannot be
/// combined with `flatten`, so the keys without effect on the mock are listed here too).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // the grammar/detokenizer keys are accepted and ignored
pub(crate) struct SamplingParams {
    /// Absent: 128; `null`: up to the context length.
    #[serde(default, deserialize_with = "present")]
    pub max_new_tokens: Option<Option<u32>>,
    pub min_new_tokens: Option<u32>,
    pub stop: Option<OneOrMany<String>>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub ignore_eos: Option<bool>,
    pub no_stop_trim: Option<bool>,
    pub n: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    stop_regex: Option<Value>,
    json_schema: Option<Value>,
    regex: Option<Value>,
    ebnf: Option<Value>,
    structural_tag: Option<Value>,
    skip_special_tokens: Option<bool>,
    spaces_between_special_tokens: Option<bool>,
    custom_params: Option<Value>,
    stream_interval: Option<u32>,
    logit_bias: Option<Value>,
    sampling_seed: Option<i64>,
}

/// Distinguishes `"key": null` (Some(None)) from an absent key (None, via `default`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u32>>, D::Error> {
    Option::<u32>::deserialize(d).map(Some)
}

impl SamplingParams {
    /// The sampling params of batch element `i`.
    pub fn for_prompt(
        raw: Option<&Value>,
        i: usize,
        batch: usize,
    ) -> Result<SamplingParams, ApiError> {
        let one = match raw {
            None | Some(Value::Null) => return Ok(SamplingParams::default()),
            Some(Value::Array(list)) if list.len() != batch => {
                return Err(ApiError::bad_request(format!(
                    "sampling_params has {} entries for a batch of {batch}",
                    list.len()
                )));
            }
            Some(Value::Array(list)) => list.get(i),
            Some(one) => Some(one),
        };
        let Some(one) = one else {
            return Ok(SamplingParams::default());
        };
        let params = SamplingParams::deserialize(one)
            .map_err(|e| ApiError::bad_request(format!("invalid sampling_params: {e}")))?;
        params.verify()?;
        Ok(params)
    }

    /// SGLang's `SamplingParams.verify` checks, with its messages.
    fn verify(&self) -> Result<(), ApiError> {
        let bad = |msg: String| Err(ApiError::bad_request(msg));
        let t = self.temperature.unwrap_or(1.0);
        if !t.is_finite() || t < 0.0 {
            return bad(format!(
                "temperature must be a non-negative finite number, got {t}."
            ));
        }
        let p = self.top_p.unwrap_or(1.0);
        if !(p > 0.0 && p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {p}."));
        }
        let min_p = self.min_p.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&min_p) {
            return bad(format!("min_p must be in [0, 1], got {min_p}."));
        }
        let k = self.top_k.unwrap_or(-1);
        if k < 1 && k != -1 {
            return bad(format!(
                "top_k must be -1 (disable) or at least 1, got {k}."
            ));
        }
        for (name, v) in [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            let v = v.unwrap_or(0.0);
            if !(-2.0..=2.0).contains(&v) {
                return bad(format!("{name} must be in [-2, 2], got {v}."));
            }
        }
        let r = self.repetition_penalty.unwrap_or(1.0);
        if !(r > 0.0 && r <= 2.0) {
            return bad(format!(
                "repetition_penalty must be in (0, 2] (1.0 = no penalty), got {r}."
            ));
        }
        if self.n == Some(0) {
            return bad("n must be at least 1, got 0.".to_owned());
        }
        Ok(())
    }
}
