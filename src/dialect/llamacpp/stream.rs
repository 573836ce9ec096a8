//! `/completion` streams: partial events with deltas, then one `"stop": true` event with the
//! counts and timings; the connection closes after it (no `[DONE]`).

use std::time::Instant;

use bytes::BytesMut;
use serde_json::{json, Value};

use super::response::{final_json, probabilities, probabilities_from, Measured, ResultWire};
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Chunk, Event, Ids, Tally};
use crate::stream::framing::{is_done_marker, write_sse, Frame};

/// Client side: one partial event per upstream chunk with text, the final event at the end
/// (when the usage the upstream sends after its last chunk is known too).
pub struct Encoder {
    ctx: Ctx,
    tally: Tally,
    first_token: Option<Instant>,
    /// The whole text and finish so far (the final event reports `has_new_line`, `stop_type`).
    seen: Choice,
}

impl Encoder {
    pub fn new(ctx: Ctx) -> Encoder {
        Encoder {
            ctx,
            tally: Tally::default(),
            first_token: None,
            seen: Choice::default(),
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
                self.chunk(c, out);
            }
        }
        tokens
    }

    fn chunk(&mut self, c: &Chunk, out: &mut BytesMut) {
        if c.finish.is_some() {
            self.seen.finish = c.finish.clone();
        }
        let ids = c.token_ids.as_deref().unwrap_or(&[]);
        if c.text.is_empty() && ids.is_empty() {
            return;
        }
        self.first_token.get_or_insert_with(Instant::now);
        self.seen.text.push_str(&c.text);
        let mut v = json!({
            "index": 0,
            "content": c.text,
            "tokens": ids,
            "stop": false,
            "tokens_predicted": self.tally.choice_tokens(c.index),
        });
        if let Some(p) = self.tally.choice_prompt(c.index) {
            v["tokens_evaluated"] = json!(p);
        }
        if self.ctx.logprobs.is_some() {
            v["completion_probabilities"] = probabilities(c.logprobs.as_deref().unwrap_or(&[]));
        }
        write_sse(out, v.to_string().as_bytes());
    }

    /// The final event: empty content, the counts, lingo's timings.
    pub fn end(&mut self, out: &mut BytesMut) {
        let (usage, _) = self.tally.totals();
        let m = Measured {
            first_token: self.first_token.map(|t| t - self.ctx.started),
            total: self.ctx.started.elapsed(),
        };
        let mut v = final_json(&self.ctx, &self.seen, &usage, m, "");
        if let Value::Object(o) = &mut v {
            // The probabilities went out with the partial events.
            o.remove("completion_probabilities");
        }
        write_sse(out, v.to_string().as_bytes());
    }

    pub fn error(&mut self, err: &ProxyError, out: &mut BytesMut) {
        super::error::write_stream_error(err, out);
    }
}

/// Upstream side: partial events carry deltas and ids; the `stop` event ends the stream.
#[derive(Debug, Default)]
pub struct Decoder;

impl Decoder {
    pub fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        if is_done_marker(&frame.data) {
            out.push(Event::Done);
            return Ok(());
        }
        let w: ResultWire = crate::dialect::json::from_bytes(&frame.data)
            .map_err(|e| ProxyError::UpstreamProtocol(format!("completion stream event: {e}")))?;
        if let Some(err) = &w.error {
            out.push(Event::Error {
                message: crate::dialect::error_message(
                    json!({ "error": err }).to_string().as_bytes(),
                ),
            });
            return Ok(());
        }
        let ids = w.tokens.as_deref().filter(|t| !t.is_empty());
        out.push(Event::Chunk(Chunk {
            index: w.index,
            // Without ids (the final event, or a partial UTF-8 piece) the running
            // `tokens_predicted` tells how many tokens arrived.
            tokens: ids.as_ref().map(|t| t.len() as u32),
            token_ids: ids.map(Ids::from_slice),
            finish: w.finish(),
            usage: w.usage(),
            logprobs: w.completion_probabilities.clone().map(probabilities_from),
            text: w.content.into(),
        }));
        if w.stop {
            out.push(Event::Done);
        }
        Ok(())
    }
}
