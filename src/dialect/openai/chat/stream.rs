//! Chat streams for a client: a role chunk per choice, content deltas, usage on request.

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
    opened: Vec<bool>,
}

impl StreamEncoder {
    pub fn new(ctx: Ctx) -> StreamEncoder {
        StreamEncoder {
            ctx,
            tally: Tally::default(),
            opened: Vec::new(),
        }
    }

    /// Send the role-only opening chunk of a choice once, as OpenAI does.
    fn open(&mut self, index: u32, out: &mut BytesMut) {
        let i = index as usize;
        if self.opened.len() <= i {
            self.opened.resize(i + 1, false);
        }
        if !self.opened[i] {
            self.opened[i] = true;
            let delta = json!({"role": "assistant", "content": ""});
            let choice =
                json!({"index": index, "delta": delta, "logprobs": null, "finish_reason": null});
            self.chunk(choice, out);
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
            match ev {
                Event::Role { index } => self.open(*index, out),
                Event::Chunk(c) => {
                    self.open(c.index, out);
                    if c.text.is_empty() && c.finish.is_none() {
                        continue;
                    }
                    let lp = match (&c.logprobs, self.ctx.logprobs) {
                        (Some(l), Some(_)) => logprobs::to_wire(l),
                        _ => Value::Null,
                    };
                    let (finish, stop) = finish_to_wire(c.finish.as_ref());
                    let delta = if c.text.is_empty() {
                        json!({})
                    } else {
                        json!({"content": c.text})
                    };
                    let choice = json!({"index": c.index, "delta": delta, "logprobs": lp,
                                        "finish_reason": finish, "stop_reason": stop});
                    self.chunk(choice, out);
                }
                _ => {}
            }
        }
        tokens
    }

    fn chunk(&self, choice: Value, out: &mut BytesMut) {
        let mut v = json!({"id": self.ctx.id, "object": "chat.completion.chunk",
                           "created": self.ctx.created, "model": self.ctx.model,
                           "choices": [choice]});
        if self.ctx.stream_usage {
            v["usage"] = Value::Null;
        }
        write_sse(out, v.to_string().as_bytes());
    }

    pub fn end(&mut self, out: &mut BytesMut) {
        write_stream_end(&self.ctx, "chat.completion.chunk", &self.tally, out);
    }
}
