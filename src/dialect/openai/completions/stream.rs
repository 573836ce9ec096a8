//! Completions streams for a client: one `data:` chunk per upstream event, usage on request.

use bytes::BytesMut;
use serde_json::{json, Value};

use super::logprobs;
use crate::dialect::openai::wire::{finish_to_wire, write_stream_end};
use crate::dialect::Ctx;
use crate::model::{Event, Tally};
use crate::stream::framing::write_sse;

pub struct StreamEncoder {
    ctx: Ctx,
    tally: Tally,
    offsets: Vec<usize>,
}

impl StreamEncoder {
    pub fn new(ctx: Ctx) -> StreamEncoder {
        StreamEncoder {
            ctx,
            tally: Tally::default(),
            offsets: Vec::new(),
        }
    }

    /// What the events so far count (each observed as it is written): the stream's tally.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Write the events; the new tokens they carried.
    pub fn events(&mut self, events: &[Event], out: &mut BytesMut) -> u32 {
        let mut tokens = 0u32;
        for ev in events {
            tokens = tokens.saturating_add(self.tally.observe(ev));
            if let Event::Chunk(c) = ev {
                if c.text.is_empty() && c.finish.is_none() {
                    continue;
                }
                let i = c.index as usize;
                if self.offsets.len() <= i {
                    self.offsets.resize(i + 1, 0);
                }
                let lp = match (&c.logprobs, self.ctx.logprobs) {
                    (Some(l), Some(_)) => logprobs::to_wire(l, self.offsets[i]),
                    _ => Value::Null,
                };
                self.offsets[i] += c.text.len();
                let (finish, stop) = finish_to_wire(c.finish.as_ref());
                let choice = json!({"index": c.index, "text": c.text, "logprobs": lp,
                                    "finish_reason": finish, "stop_reason": stop});
                self.chunk(vec![choice], out);
            }
        }
        tokens
    }

    fn chunk(&self, choices: Vec<Value>, out: &mut BytesMut) {
        let mut v = json!({"id": self.ctx.id, "object": "text_completion",
                           "created": self.ctx.created, "model": self.ctx.model,
                           "choices": choices});
        if self.ctx.stream_usage {
            v["usage"] = Value::Null;
        }
        write_sse(out, v.to_string().as_bytes());
    }

    pub fn end(&mut self, out: &mut BytesMut) {
        write_stream_end(&self.ctx, "text_completion", &self.tally, out);
    }
}
