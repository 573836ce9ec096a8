//! NDJSON streams: one object per delta with `"done": false`, then the final `"done": true`
//! object with `done_reason`, counts and durations.

use std::time::Instant;

use bytes::BytesMut;
use serde_json::{Map, Value};

use super::response::{metrics, object, ObjectWire};
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Chunk, Event, Finish, Tally};
use crate::stream::framing::{is_done_marker, Frame};

fn write_line(out: &mut BytesMut, m: Map<String, Value>) {
    out.extend_from_slice(Value::Object(m).to_string().as_bytes());
    out.extend_from_slice(b"\n");
}

/// Client side, for `/api/generate` (`response`) or `/api/chat` (`message`).
pub struct Encoder {
    ctx: Ctx,
    chat: bool,
    tally: Tally,
    first_token: Option<Instant>,
    finish: Option<Finish>,
}

impl Encoder {
    pub fn new(ctx: Ctx, chat: bool) -> Encoder {
        Encoder {
            ctx,
            chat,
            tally: Tally::default(),
            first_token: None,
            finish: None,
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
            let Event::Chunk(c) = ev else { continue };
            if c.finish.is_some() {
                self.finish = c.finish.clone();
            }
            if c.text.is_empty() {
                continue;
            }
            self.first_token.get_or_insert_with(Instant::now);
            write_line(out, object(&self.ctx, self.chat, &c.text, false));
        }
        tokens
    }

    /// The final object, once the upstream's totals are known.
    pub fn end(&mut self, out: &mut BytesMut) {
        let (usage, _) = self.tally.totals();
        let mut m = object(&self.ctx, self.chat, "", true);
        metrics(
            &mut m,
            self.finish.as_ref(),
            &usage,
            self.first_token.map(|t| t - self.ctx.started),
            self.ctx.started.elapsed(),
        );
        write_line(out, m);
    }

    pub fn error(&mut self, err: &ProxyError, out: &mut BytesMut) {
        super::error::write_stream_error(err, out);
    }
}

/// Upstream side: deltas, then the `done` object's finish and counts, then the end.
#[derive(Debug, Default)]
pub struct Decoder;

impl Decoder {
    pub fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        if is_done_marker(&frame.data) {
            out.push(Event::Done);
            return Ok(());
        }
        let mut w: ObjectWire = crate::dialect::json::from_bytes(&frame.data)
            .map_err(|e| ProxyError::UpstreamProtocol(format!("Ollama stream line: {e}")))?;
        if let Some(err) = &w.error {
            let message = match err {
                Value::String(s) => s.clone(),
                other => crate::dialect::error_message(other.to_string().as_bytes()),
            };
            out.push(Event::Error { message });
            return Ok(());
        }
        // Ollama does not say how many tokens a line holds; the final object's `eval_count`
        // settles the count (see `Tally`).
        out.push(Event::Chunk(Chunk {
            index: 0,
            text: w.text().into(),
            finish: w.finish(),
            usage: w.usage(),
            ..Chunk::default()
        }));
        if w.done {
            out.push(Event::Done);
        }
        Ok(())
    }
}
