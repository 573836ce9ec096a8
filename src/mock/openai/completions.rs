//! `/v1/completions` responses and stream chunks (dialects.md 2.3).

use std::borrow::Cow;

use serde::Serialize;

use super::logprobs::{self, CompletionLogprobs};
use super::wire::{totals, Ctx, StopSlot, UsageSlot};
use crate::mock::error::stream_error;
use crate::mock::generate::Seq;
use crate::mock::sse::{sse_done, sse_event, Encoder};

/// Response and chunk envelope; the stream's usage-only chunk has no choices.
#[derive(Serialize)]
struct Envelope<'a, C> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: C,
    usage: UsageSlot,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: usize,
    text: Cow<'a, str>,
    logprobs: Option<CompletionLogprobs>,
    finish_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "StopSlot::is_absent")]
    stop_reason: StopSlot<'a>,
    #[serde(skip_serializing_if = "StopSlot::is_absent")]
    matched_stop: StopSlot<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: Option<&'a [u32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<&'a [u32]>,
}

/// The choice for tokens `from..to` of sequence `index`; `0..len` is the whole choice.
fn choice<'a>(ctx: &'a Ctx, seq: &'a Seq, index: usize, from: usize, to: usize) -> Choice<'a> {
    let delta = seq.text_between(from, to);
    let echo = ctx.echo_of(seq);
    // The echoed prompt goes out once, in front of the first text.
    let text = if from == 0 && !echo.is_empty() {
        Cow::Owned(format!("{echo}{delta}"))
    } else {
        Cow::Borrowed(delta)
    };
    let finish = ctx.finish(seq, to == seq.len());
    let ids = ctx.return_token_ids;
    Choice {
        index,
        text,
        logprobs: ctx
            .logprobs
            .map(|k| logprobs::completion(seq, from, to, k, echo.len())),
        finish_reason: finish.reason,
        stop_reason: finish.stop_reason,
        matched_stop: finish.matched_stop,
        prompt_token_ids: (ids && from == 0)
            .then(|| ctx.prompts.get(seq.prompt_idx).map(|p| p.ids.as_slice()))
            .flatten(),
        token_ids: ids.then(|| seq.ids.get(from..to)).flatten(),
    }
}

/// The non-streaming response body.
pub(super) fn body(ctx: &Ctx, seqs: &[Seq]) -> Vec<u8> {
    let choices: Vec<Choice<'_>> = seqs
        .iter()
        .enumerate()
        .map(|(i, seq)| choice(ctx, seq, i, 0, seq.len()))
        .collect();
    let (prompt, completion) = totals(ctx, seqs);
    let envelope = Envelope {
        id: &ctx.id,
        object: "text_completion",
        created: ctx.created,
        model: &ctx.model,
        choices,
        usage: UsageSlot::Some(ctx.usage(prompt, completion)),
    };
    serde_json::to_vec(&envelope).unwrap_or_default()
}

/// Streams one chunk per choice and step, then the optional usage chunk and `[DONE]`.
pub(super) struct Stream(pub Ctx);

impl Encoder for Stream {
    fn tokens(&mut self, seqs: &[Seq], i: usize, from: usize, to: usize, out: &mut Vec<u8>) {
        let ctx = &self.0;
        let seq = &seqs[i];
        let chunk = Envelope {
            id: &ctx.id,
            object: "text_completion",
            created: ctx.created,
            model: &ctx.model,
            choices: [choice(ctx, seq, i, from, to)],
            usage: ctx.chunk_usage(seq, to),
        };
        sse_event(out, &chunk);
    }

    fn close(&mut self, seqs: &[Seq], out: &mut Vec<u8>) {
        let ctx = &self.0;
        if ctx.include_usage {
            let (prompt, completion) = totals(ctx, seqs);
            let chunk = Envelope {
                id: &ctx.id,
                object: "text_completion",
                created: ctx.created,
                model: &ctx.model,
                choices: [(); 0],
                usage: UsageSlot::Some(ctx.usage(prompt, completion)),
            };
            sse_event(out, &chunk);
        }
        sse_done(out);
    }

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        sse_event(out, &stream_error(self.0.shape(), message));
        sse_done(out);
    }
}
