//! Validates a `/generate` request into prompts, per-prompt stopping rules and request ids.

use super::request::{GenerateRequest, InputIds, OneOrMany, SamplingParams};
use crate::mock::error::ApiError;
use crate::mock::generate::Params;
use crate::mock::prompt::Prompt;

/// SGLang's default `max_new_tokens`.
const DEFAULT_MAX_NEW_TOKENS: u32 = 128;

/// Logprob options of one prompt.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogprobOpts {
    pub on: bool,
    /// First prompt position with input logprobs; negative: none.
    pub start_len: i64,
    pub top: u32,
    pub text: bool,
}

pub(crate) struct Job {
    pub prompts: Vec<Prompt>,
    pub params: Vec<Params>,
    pub logprobs: Vec<LogprobOpts>,
    pub n: u32,
    /// A list input or n > 1: the answer is an array and chunks carry `index`.
    pub batch: bool,
    /// One request id per output sequence, prompt-major.
    pub rids: Vec<String>,
}

pub(crate) fn build(req: GenerateRequest, max_len: u32) -> Result<Job, ApiError> {
    let (prompts, list_input) = prompts(&req)?;
    let mut params = Vec::with_capacity(prompts.len());
    let mut n = 1;
    for (i, prompt) in prompts.iter().enumerate() {
        let sp = SamplingParams::for_prompt(req.sampling_params.as_ref(), i, prompts.len())?;
        if i == 0 {
            n = sp.n.unwrap_or(1);
        }
        params.push(to_params(sp, prompt.len(), max_len)?);
    }
    let logprobs = (0..prompts.len())
        .map(|i| LogprobOpts {
            on: req
                .return_logprob
                .as_ref()
                .and_then(|v| v.get(i))
                .unwrap_or(false),
            start_len: req
                .logprob_start_len
                .as_ref()
                .and_then(|v| v.get(i))
                .unwrap_or(-1),
            top: req
                .top_logprobs_num
                .as_ref()
                .and_then(|v| v.get(i))
                .unwrap_or(0),
            text: req.return_text_in_logprobs.unwrap_or(false),
        })
        .collect();
    let rids = rids(req.rid.as_ref(), prompts.len(), n, list_input)?;
    Ok(Job {
        prompts,
        params,
        logprobs,
        n,
        batch: list_input || n > 1,
        rids,
    })
}

fn prompts(req: &GenerateRequest) -> Result<(Vec<Prompt>, bool), ApiError> {
    if req.input_embeds.is_some() {
        return Err(ApiError::bad_request(
            "input_embeds is not supported by the mock server",
        ));
    }
    let empty = || ApiError::bad_request("input_ids cannot be empty.");
    match (&req.text, &req.input_ids) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "Only one of text, input_ids, or input_embeds should be provided.",
        )),
        (None, None) => Err(ApiError::bad_request(
            "Either text, input_ids or input_embeds should be provided.",
        )),
        (Some(OneOrMany::One(text)), None) => Ok((vec![Prompt::from_text(text.clone())], false)),
        (Some(OneOrMany::Many(texts)), None) if texts.is_empty() => {
            Err(ApiError::bad_request("text cannot be an empty list."))
        }
        (Some(OneOrMany::Many(texts)), None) => {
            Ok((texts.iter().cloned().map(Prompt::from_text).collect(), true))
        }
        (None, Some(InputIds::One(ids))) if ids.is_empty() => Err(empty()),
        (None, Some(InputIds::One(ids))) => Ok((vec![Prompt::from_ids(ids.clone())], false)),
        (None, Some(InputIds::Batch(lists))) if lists.iter().any(Vec::is_empty) => Err(empty()),
        (None, Some(InputIds::Batch(lists))) => {
            Ok((lists.iter().cloned().map(Prompt::from_ids).collect(), true))
        }
    }
}

/// Applies the defaults and SGLang's context-length checks, with its messages.
fn to_params(sp: SamplingParams, prompt: u32, max_len: u32) -> Result<Params, ApiError> {
    if prompt >= max_len {
        return Err(ApiError::bad_request(format!(
            "The input ({prompt} tokens) is longer than the model's context length ({max_len} tokens)."
        )));
    }
    let max_new = match sp.max_new_tokens {
        None => DEFAULT_MAX_NEW_TOKENS,
        Some(None) => max_len - prompt,
        Some(Some(m)) => m,
    };
    if u64::from(prompt) + u64::from(max_new) > u64::from(max_len) {
        return Err(ApiError::bad_request(format!(
            "Requested token count exceeds the model's maximum context length of {max_len} tokens. \
             You requested a total of {} tokens: {prompt} tokens from the input messages and \
             {max_new} tokens for the completion. Please reduce the number of tokens in the input \
             messages or the completion to fit within the limit.",
            u64::from(prompt) + u64::from(max_new)
        )));
    }
    let min_new = sp.min_new_tokens.unwrap_or(0);
    if min_new > max_new {
        return Err(ApiError::bad_request(format!(
            "min_new_tokens must be in [0, max_new_tokens({max_new})], got {min_new}."
        )));
    }
    let stop = match sp.stop {
        None => Vec::new(),
        Some(OneOrMany::One(s)) => vec![s],
        Some(OneOrMany::Many(list)) => list,
    };
    Ok(Params {
        max_tokens: max_new,
        min_tokens: min_new,
        ignore_eos: sp.ignore_eos.unwrap_or(false),
        stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
        stop_token_ids: sp.stop_token_ids.unwrap_or_default(),
        keep_stop: sp.no_stop_trim.unwrap_or(false),
    })
}

/// Request ids as SGLang assigns them: the given rid, `"{rid}_{i}"` in a batch, fresh random
/// ids when n > 1.
fn rids(
    rid: Option<&OneOrMany<String>>,
    prompts: usize,
    n: u32,
    list_input: bool,
) -> Result<Vec<String>, ApiError> {
    let fresh = || format!("{:032x}", rand::random::<u128>());
    let total = prompts * n as usize;
    let rids = match rid {
        _ if n > 1 => (0..total).map(|_| fresh()).collect(),
        None => (0..total).map(|_| fresh()).collect(),
        Some(OneOrMany::One(r)) if list_input => (0..total).map(|i| format!("{r}_{i}")).collect(),
        Some(OneOrMany::One(r)) => vec![r.clone()],
        Some(OneOrMany::Many(list)) if list.len() == total => list.clone(),
        Some(OneOrMany::Many(_)) => {
            return Err(ApiError::bad_request(
                "The rid should be a list with the same length as the batch.",
            ));
        }
    };
    Ok(rids)
}
