//! Pieces shared by the completions and chat encoders: the request context, usage, finish fields.

use serde::{Serialize, Serializer};

use crate::mock::error::ErrorShape;
use crate::mock::generate::{Finish, Seq};
use crate::mock::prompt::Prompt;
use crate::mock::vocab::EOS_ID;
use crate::mock::MockKind;

/// What the encoders need to know about one accepted request.
pub(crate) struct Ctx {
    pub kind: MockKind,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub prompts: Vec<Prompt>,
    pub include_usage: bool,
    /// Cumulative per-choice usage on every chunk (only with `include_usage`, as in vLLM).
    pub continuous_usage: bool,
    pub return_token_ids: bool,
    /// Completions: the `logprobs` top-k; chat: `top_logprobs` when `logprobs` is true.
    pub logprobs: Option<u32>,
    /// Completions `echo`: the text of each prompt to prepend; empty without echo.
    pub echo: Vec<String>,
}

impl Ctx {
    pub fn shape(&self) -> ErrorShape {
        ErrorShape::openai(self.kind)
    }

    /// The echoed prompt text of a sequence ("" without echo).
    pub fn echo_of(&self, seq: &Seq) -> &str {
        self.echo.get(seq.prompt_idx).map_or("", String::as_str)
    }

    pub fn usage(&self, prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage {
            prompt_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            completion_tokens,
            prompt_tokens_details: None,
            reasoning_tokens: (self.kind == MockKind::Sglang).then_some(0),
        }
    }

    /// The `usage` of a stream chunk carrying tokens `..to` of `seq`.
    pub fn chunk_usage(&self, seq: &Seq, to: usize) -> UsageSlot {
        if self.continuous_usage {
            let prompt = self.prompts.get(seq.prompt_idx).map_or(0, Prompt::len);
            UsageSlot::Some(self.usage(u64::from(prompt), to as u64))
        } else {
            // vLLM and SGLang serialise chunks with `exclude_unset=False`: `"usage": null` is on
            // every chunk whether or not usage was asked for (vLLM serving_completion.py).
            UsageSlot::Null
        }
    }

    /// `finish_reason` and the stop detail of a choice, or nulls while it is running. vLLM names
    /// the detail `stop_reason` (null for EOS), SGLang `matched_stop` (the EOS id for EOS).
    pub fn finish<'s>(&self, seq: &'s Seq, done: bool) -> FinishFields<'s> {
        let sglang = self.kind == MockKind::Sglang;
        let (reason, detail) = match &seq.finish {
            _ if !done => (None, StopSlot::Null),
            Finish::Length => (Some("length"), StopSlot::Null),
            Finish::Eos if sglang => (Some("stop"), StopSlot::Id(EOS_ID)),
            Finish::Eos => (Some("stop"), StopSlot::Null),
            Finish::StopString(stop) => (Some("stop"), StopSlot::Str(stop)),
            Finish::StopToken(id) => (Some("stop"), StopSlot::Id(*id)),
        };
        let (stop_reason, matched_stop) = if sglang {
            (StopSlot::Absent, detail)
        } else {
            (detail, StopSlot::Absent)
        };
        FinishFields {
            reason,
            stop_reason,
            matched_stop,
        }
    }
}

/// Usage of the whole request: prompts count once however many samples they have.
pub(crate) fn totals(ctx: &Ctx, seqs: &[Seq]) -> (u64, u64) {
    let prompt = ctx.prompts.iter().map(|p| u64::from(p.len())).sum();
    let completion = seqs.iter().map(|s| s.len() as u64).sum();
    (prompt, completion)
}

/// The three finish-related fields of a choice.
pub(crate) struct FinishFields<'a> {
    pub reason: Option<&'static str>,
    pub stop_reason: StopSlot<'a>,
    pub matched_stop: StopSlot<'a>,
}

/// A stop detail: absent from the JSON, `null`, the matched string or the token id.
#[derive(Clone, Copy)]
pub(crate) enum StopSlot<'a> {
    Absent,
    Null,
    Str(&'a str),
    Id(u32),
}

impl StopSlot<'_> {
    pub fn is_absent(&self) -> bool {
        matches!(self, StopSlot::Absent)
    }
}

impl Serialize for StopSlot<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StopSlot::Absent | StopSlot::Null => s.serialize_none(),
            StopSlot::Str(v) => s.serialize_str(v),
            StopSlot::Id(v) => s.serialize_u32(*v),
        }
    }
}

#[derive(Serialize)]
pub(crate) struct Usage {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
    pub completion_tokens: u64,
    pub prompt_tokens_details: Option<()>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// A chunk's `usage`: absent unless usage was asked for, then `null` or cumulative counts.
pub(crate) enum UsageSlot {
    Null,
    Some(Usage),
}

impl Serialize for UsageSlot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            UsageSlot::Null => s.serialize_none(),
            UsageSlot::Some(u) => u.serialize(s),
        }
    }
}
