//! `/generate` response objects and stream chunks (dialects.md 1.3, 1.4).
//!
//! Stream chunks are cumulative, as SGLang's default (`incremental_streaming_output: false`):
//! each carries the whole text, `output_ids` and logprobs so far, and the running
//! `completion_tokens`.

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use tokio::time::Instant;

use super::job::{Job, LogprobOpts};
use crate::mock::driver::{sse_done, sse_event, Encoder};
use crate::mock::error::{stream_error, ErrorShape};
use crate::mock::generate::{logprob, top_alternatives, Finish, Seq};
use crate::mock::prompt::Prompt;
use crate::mock::vocab::{decode, EOS_ID};

/// What the encoder needs of the request.
pub(crate) struct Ctx {
    pub job: Job,
    pub start: Instant,
}

#[derive(Serialize)]
struct Output<'a> {
    text: &'a str,
    output_ids: &'a [u32],
    meta_info: Meta<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<usize>,
}

#[derive(Serialize)]
struct Meta<'a> {
    id: &'a str,
    finish_reason: Option<FinishReason<'a>>,
    prompt_tokens: u32,
    completion_tokens: usize,
    cached_tokens: u32,
    reasoning_tokens: u32,
    weight_version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    e2e_latency: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_token_logprobs: Option<Vec<Entry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_token_logprobs: Option<Vec<Entry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_top_logprobs: Option<Vec<Vec<Entry>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_top_logprobs: Option<Vec<Vec<Entry>>>,
}

/// `[logprob, token_id, text|null]`.
#[derive(Serialize)]
struct Entry(Option<f64>, u32, Option<&'static str>);

struct FinishReason<'a>(&'a Finish, usize);

impl Serialize for FinishReason<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        match self.0 {
            Finish::Length => {
                map.serialize_entry("type", "length")?;
                map.serialize_entry("length", &self.1)?;
            }
            Finish::Eos => {
                map.serialize_entry("type", "stop")?;
                map.serialize_entry("matched", &EOS_ID)?;
            }
            Finish::StopToken(id) => {
                map.serialize_entry("type", "stop")?;
                map.serialize_entry("matched", id)?;
            }
            Finish::StopString(stop) => {
                map.serialize_entry("type", "stop")?;
                map.serialize_entry("matched", stop)?;
            }
        }
        map.end()
    }
}

impl Ctx {
    /// Sequence `i` as of `to` tokens.
    fn output<'a>(&'a self, seq: &'a Seq, i: usize, to: usize, streaming: bool) -> Output<'a> {
        let job = &self.job;
        let done = to == seq.len();
        let opts = job
            .logprobs
            .get(seq.prompt_idx)
            .copied()
            .unwrap_or_default();
        let prompt = job.prompts.get(seq.prompt_idx);
        let tops = opts.on && opts.top > 0;
        let meta = Meta {
            id: job.rids.get(i).map_or("", String::as_str),
            finish_reason: done.then_some(FinishReason(&seq.finish, seq.len())),
            prompt_tokens: prompt.map_or(0, |p| p.len()),
            completion_tokens: to,
            cached_tokens: 0,
            reasoning_tokens: 0,
            weight_version: "default",
            e2e_latency: done.then(|| self.start.elapsed().as_secs_f64()),
            input_token_logprobs: opts.on.then(|| input_entries(prompt, opts)),
            output_token_logprobs: opts.on.then(|| output_entries(seq, to, opts)),
            input_top_logprobs: tops.then(|| input_top(prompt, opts)),
            output_top_logprobs: tops.then(|| output_top(seq, to, opts)),
        };
        Output {
            text: seq.text.get(..seq.text_end(to)).unwrap_or(""),
            output_ids: seq.ids.get(..to).unwrap_or(&[]),
            meta_info: meta,
            index: (streaming && job.batch).then_some(i),
        }
    }
}

fn text_of(id: u32, opts: LogprobOpts) -> Option<&'static str> {
    opts.text.then(|| decode(id))
}

fn input_positions(
    prompt: Option<&Prompt>,
    opts: LogprobOpts,
) -> impl Iterator<Item = (usize, u32, u64)> + '_ {
    let start = usize::try_from(opts.start_len).unwrap_or(usize::MAX);
    let (ids, hash) = prompt.map_or((&[][..], 0), |p| (p.ids.as_slice(), p.hash));
    ids.iter()
        .enumerate()
        .skip(start)
        .map(move |(j, id)| (j, *id, hash))
}

fn input_entries(prompt: Option<&Prompt>, opts: LogprobOpts) -> Vec<Entry> {
    // The first prompt token has no logprob: nothing precedes it.
    input_positions(prompt, opts)
        .map(|(j, id, hash)| Entry((j > 0).then(|| logprob(hash, j)), id, text_of(id, opts)))
        .collect()
}

fn input_top(prompt: Option<&Prompt>, opts: LogprobOpts) -> Vec<Vec<Entry>> {
    input_positions(prompt, opts)
        .map(|(j, id, hash)| match j {
            0 => Vec::new(),
            _ => top_entries(id, logprob(hash, j), opts),
        })
        .collect()
}

fn output_entries(seq: &Seq, to: usize, opts: LogprobOpts) -> Vec<Entry> {
    let ids = seq.ids.iter().take(to).enumerate();
    ids.map(|(i, id)| Entry(Some(logprob(seq.key, i)), *id, text_of(*id, opts)))
        .collect()
}

fn output_top(seq: &Seq, to: usize, opts: LogprobOpts) -> Vec<Vec<Entry>> {
    let ids = seq.ids.iter().take(to).enumerate();
    ids.map(|(i, id)| top_entries(*id, logprob(seq.key, i), opts))
        .collect()
}

fn top_entries(id: u32, lp: f64, opts: LogprobOpts) -> Vec<Entry> {
    top_alternatives(id, lp, opts.top as usize)
        .map(|(t, l)| Entry(Some(l), t, text_of(t, opts)))
        .collect()
}

/// The non-streaming body: one object, or an array for batch / n > 1 (prompt-major).
pub(crate) fn body(ctx: &Ctx, seqs: &[Seq]) -> Vec<u8> {
    let outputs: Vec<Output<'_>> = seqs
        .iter()
        .enumerate()
        .map(|(i, seq)| ctx.output(seq, i, seq.len(), false))
        .collect();
    let encoded = match (ctx.job.batch, outputs.first()) {
        (false, Some(one)) => serde_json::to_vec(one),
        _ => serde_json::to_vec(&outputs),
    };
    encoded.unwrap_or_default()
}

pub(crate) struct Stream(pub Ctx);

impl Encoder for Stream {
    fn tokens(&mut self, seqs: &[Seq], i: usize, _from: usize, to: usize, out: &mut Vec<u8>) {
        sse_event(out, &self.0.output(&seqs[i], i, to, true));
    }

    fn close(&mut self, _seqs: &[Seq], out: &mut Vec<u8>) {
        sse_done(out);
    }

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        sse_event(out, &stream_error(ErrorShape::Generate, message));
        sse_done(out);
    }
}
