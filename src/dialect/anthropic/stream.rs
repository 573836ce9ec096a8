//! Messages streams for a client: Anthropic's named events over the canonical stream.
//!
//! `message_start` needs the prompt's token count, which arrives with the upstream's first
//! chunk: the opening events are written with that chunk, never later (see the module quirks).

use bytes::BytesMut;
use serde_json::{json, Value};

use super::error::write_stream_error;
use super::response::{stop_reason, usage_json};
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Chunk, Event, Finish, Tally, Usage};
use crate::stream::framing::write_sse_event;

/// Where the message is in Anthropic's event sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing written yet.
    Before,
    /// `message_start` and the text block's start are out.
    Open,
    /// The finish came: the block is closed; `message_delta` waits for the end marker.
    Finished,
    /// `message_stop` or an error event is out: nothing more.
    Closed,
}

pub struct StreamEncoder {
    ctx: Ctx,
    tally: Tally,
    phase: Phase,
    finish: Option<Finish>,
}

fn event(out: &mut BytesMut, name: &str, data: &Value) {
    write_sse_event(out, name, data.to_string().as_bytes());
}

impl StreamEncoder {
    pub fn new(ctx: Ctx) -> StreamEncoder {
        StreamEncoder {
            ctx,
            tally: Tally::default(),
            phase: Phase::Before,
            finish: None,
        }
    }

    /// The counts known so far, for choice 0 (Anthropic has exactly one).
    fn usage(&self) -> Usage {
        let (totals, _) = self.tally.totals();
        Usage {
            prompt_tokens: self.tally.choice_prompt(0).unwrap_or(totals.prompt_tokens),
            completion_tokens: self.tally.choice_tokens(0).max(totals.completion_tokens),
            cached_tokens: self.tally.choice_cached(0).or(totals.cached_tokens),
        }
    }

    fn open(&mut self, out: &mut BytesMut) {
        if self.phase != Phase::Before {
            return;
        }
        self.phase = Phase::Open;
        let message = json!({
            "id": self.ctx.id, "type": "message", "role": "assistant", "content": [],
            "model": self.ctx.model, "stop_reason": null, "stop_sequence": null,
            "usage": usage_json(&self.usage()),
        });
        event(
            out,
            "message_start",
            &json!({"type": "message_start", "message": message}),
        );
        let block = json!({"type": "content_block_start", "index": 0,
                           "content_block": {"type": "text", "text": ""}});
        event(out, "content_block_start", &block);
        event(out, "ping", &json!({"type": "ping"}));
    }

    /// What the events so far count (each observed as it came): the stream's tally.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Write the events; the new tokens they carried. Once the message is closed nothing
    /// more is written, but what comes is still counted (the stream's tally is this one).
    pub fn events(&mut self, events: &[Event], out: &mut BytesMut) -> u32 {
        let mut tokens = 0u32;
        for ev in events {
            tokens = tokens.saturating_add(self.tally.observe(ev));
            if self.phase == Phase::Closed {
                continue;
            }
            match ev {
                Event::Chunk(c) if c.index == 0 => self.chunk(c, out),
                Event::Done => self.end(out),
                _ => {}
            }
        }
        tokens
    }

    fn chunk(&mut self, c: &Chunk, out: &mut BytesMut) {
        self.open(out);
        if self.phase != Phase::Open {
            return;
        }
        if !c.text.is_empty() {
            let delta = json!({"type": "content_block_delta", "index": 0,
                               "delta": {"type": "text_delta", "text": c.text}});
            event(out, "content_block_delta", &delta);
        }
        match &c.finish {
            Some(Finish::Abort(msg)) => {
                let err = ProxyError::UpstreamStatus {
                    status: 500,
                    message: format!("generation aborted: {msg}"),
                };
                self.error(&err, out);
            }
            Some(f) => {
                self.finish = Some(f.clone());
                self.phase = Phase::Finished;
                event(
                    out,
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": 0}),
                );
            }
            None => {}
        }
    }

    /// The upstream ended cleanly: close the block if the finish never came, then the final
    /// `message_delta` with the totals, and `message_stop`.
    pub fn end(&mut self, out: &mut BytesMut) {
        match self.phase {
            Phase::Closed => return,
            Phase::Before | Phase::Open => {
                self.open(out);
                event(
                    out,
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": 0}),
                );
            }
            Phase::Finished => {}
        }
        self.phase = Phase::Closed;
        let (reason, sequence) = stop_reason(self.finish.as_ref());
        let usage = usage_json(&self.usage());
        let delta = json!({"type": "message_delta",
                           "delta": {"stop_reason": reason, "stop_sequence": sequence},
                           "usage": usage});
        event(out, "message_delta", &delta);
        event(out, "message_stop", &json!({"type": "message_stop"}));
    }

    pub fn error(&mut self, err: &ProxyError, out: &mut BytesMut) {
        if self.phase != Phase::Closed {
            self.phase = Phase::Closed;
            write_stream_error(err, out);
        }
    }
}
