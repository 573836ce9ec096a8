//! `/v1/chat/completions` responses and stream chunks (dialects.md 2.2, 2.3).
//!
//! vLLM serialises stream chunks with `exclude_unset`, so its content chunks carry no
//! `stop_reason` until the finishing one; SGLang sends `matched_stop` on every chunk.

use serde::Serialize;

use super::logprobs::{self, ChatLogprobs};
use super::wire::{totals, Ctx, StopSlot, UsageSlot};
use crate::mock::error::stream_error;
use crate::mock::generate::Seq;
use crate::mock::sse::{sse_done, sse_event, Encoder};
use crate::mock::MockKind;

#[derive(Serialize)]
struct Envelope<'a, C> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: C,
    usage: UsageSlot,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: Option<&'a [u32]>,
}

#[derive(Serialize)]
struct Choice<'a, M> {
    index: usize,
    #[serde(flatten)]
    body: M,
    logprobs: Option<ChatLogprobs>,
    finish_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "StopSlot::is_absent")]
    stop_reason: StopSlot<'a>,
    #[serde(skip_serializing_if = "StopSlot::is_absent")]
    matched_stop: StopSlot<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<&'a [u32]>,
}

#[derive(Serialize)]
struct Message<'a> {
    message: MessageBody<'a>,
}

#[derive(Serialize)]
struct MessageBody<'a> {
    role: &'static str,
    content: &'a str,
    tool_calls: [(); 0],
}

#[derive(Serialize)]
struct Delta<'a> {
    delta: DeltaBody<'a>,
}

#[derive(Serialize)]
struct DeltaBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    content: &'a str,
}

fn choice<'a, M>(
    ctx: &'a Ctx,
    seq: &'a Seq,
    index: usize,
    from: usize,
    to: usize,
    body: M,
) -> Choice<'a, M> {
    let done = to == seq.len();
    let mut finish = ctx.finish(seq, done);
    if matches!(ctx.kind, MockKind::Vllm | MockKind::Openai) && !done {
        finish.stop_reason = StopSlot::Absent;
    }
    Choice {
        index,
        body,
        logprobs: ctx.logprobs.map(|top| logprobs::chat(seq, from, to, top)),
        finish_reason: finish.reason,
        stop_reason: finish.stop_reason,
        matched_stop: finish.matched_stop,
        token_ids: ctx
            .return_token_ids
            .then(|| seq.ids.get(from..to))
            .flatten(),
    }
}

fn prompt_ids(ctx: &Ctx) -> Option<&[u32]> {
    ctx.return_token_ids
        .then(|| ctx.prompts.first().map(|p| p.ids.as_slice()))
        .flatten()
}

/// The non-streaming response body.
pub(super) fn body(ctx: &Ctx, seqs: &[Seq]) -> Vec<u8> {
    let choices: Vec<_> = seqs
        .iter()
        .enumerate()
        .map(|(i, seq)| {
            let message = MessageBody {
                role: "assistant",
                content: &seq.text,
                tool_calls: [],
            };
            choice(ctx, seq, i, 0, seq.len(), Message { message })
        })
        .collect();
    let (prompt, completion) = totals(ctx, seqs);
    let envelope = Envelope {
        id: &ctx.id,
        object: "chat.completion",
        created: ctx.created,
        model: &ctx.model,
        choices,
        usage: UsageSlot::Some(ctx.usage(prompt, completion)),
        prompt_token_ids: prompt_ids(ctx),
    };
    serde_json::to_vec(&envelope).unwrap_or_default()
}

/// Streams a role chunk per choice, content chunks, then the optional usage chunk and `[DONE]`.
pub(super) struct Stream(pub Ctx);

impl Stream {
    fn chunk<C: Serialize>(&self, choices: C, usage: UsageSlot, first: bool, out: &mut Vec<u8>) {
        let ctx = &self.0;
        let chunk = Envelope {
            id: &ctx.id,
            object: "chat.completion.chunk",
            created: ctx.created,
            model: &ctx.model,
            choices,
            usage,
            prompt_token_ids: if first { prompt_ids(ctx) } else { None },
        };
        sse_event(out, &chunk);
    }
}

impl Encoder for Stream {
    fn open(&mut self, seqs: &[Seq], out: &mut Vec<u8>) {
        let ctx = &self.0;
        let (stop_reason, matched_stop) = match ctx.kind {
            MockKind::Vllm | MockKind::Llamacpp | MockKind::Ollama | MockKind::Openai => {
                (StopSlot::Absent, StopSlot::Absent)
            }
            MockKind::Sglang | MockKind::Tgi => (StopSlot::Absent, StopSlot::Null),
        };
        for (index, seq) in seqs.iter().enumerate() {
            let delta = DeltaBody {
                role: Some("assistant"),
                content: "",
            };
            let role = Choice {
                index,
                body: Delta { delta },
                logprobs: None,
                finish_reason: None,
                stop_reason,
                matched_stop,
                token_ids: None,
            };
            self.chunk([role], ctx.chunk_usage(seq, 0), true, out);
        }
    }

    fn tokens(&mut self, seqs: &[Seq], i: usize, from: usize, to: usize, out: &mut Vec<u8>) {
        let ctx = &self.0;
        let seq = &seqs[i];
        let delta = DeltaBody {
            role: None,
            content: seq.text_between(from, to),
        };
        let c = choice(ctx, seq, i, from, to, Delta { delta });
        self.chunk([c], ctx.chunk_usage(seq, to), false, out);
    }

    fn close(&mut self, seqs: &[Seq], out: &mut Vec<u8>) {
        let ctx = &self.0;
        if ctx.include_usage {
            let (prompt, completion) = totals(ctx, seqs);
            self.chunk(
                [(); 0],
                UsageSlot::Some(ctx.usage(prompt, completion)),
                false,
                out,
            );
        }
        sse_done(out);
    }

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        sse_event(out, &stream_error(self.0.shape(), message));
        sse_done(out);
    }
}
