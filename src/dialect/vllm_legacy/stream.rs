//! Legacy `/generate` streams: newline-delimited JSON, each line every choice's whole text so
//! far, prompt included, until the connection closes.

use bytes::BytesMut;
use compact_str::CompactString;
use serde::Deserialize;
use serde_json::{json, Value};

use super::response::echo_of;
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Chunk, Event, Finish, Tally};
use crate::stream::framing::{write_ndjson, Frame};

/// Client side: one line per upstream chunk that adds text.
pub struct StreamEncoder {
    /// Each choice's text so far, prompt included.
    texts: Vec<String>,
    wrote: bool,
    failed: bool,
    /// What the events count: this dialect's lines carry no counts, but the stream's tally
    /// is its encoder's.
    tally: Tally,
}

impl StreamEncoder {
    pub fn new(ctx: Ctx) -> StreamEncoder {
        let n = ctx.n.max(1) * ctx.prompts.max(1) as u32;
        StreamEncoder {
            texts: (0..n).map(|i| echo_of(&ctx, i).to_string()).collect(),
            wrote: false,
            failed: false,
            tally: Tally::default(),
        }
    }

    /// What the events so far count: the stream's tally.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Write the events; the new tokens they carried.
    pub fn events(&mut self, events: &[Event], out: &mut BytesMut) -> u32 {
        let mut changed = false;
        let mut tokens = 0u32;
        for ev in events {
            tokens = tokens.saturating_add(self.tally.observe(ev));
            if let Event::Chunk(c) = ev {
                let i = c.index as usize;
                if self.texts.len() <= i {
                    self.texts.resize(i + 1, String::new());
                }
                self.texts[i].push_str(&c.text);
                changed |= !c.text.is_empty();
            }
        }
        if changed {
            self.line(out);
        }
        tokens
    }

    fn line(&mut self, out: &mut BytesMut) {
        self.wrote = true;
        write_ndjson(out, json!({ "text": self.texts }).to_string().as_bytes());
    }

    /// The upstream ended: the real server always answers at least one line, even for an
    /// empty output; then the connection closes.
    pub fn end(&mut self, out: &mut BytesMut) {
        if !self.wrote && !self.failed {
            self.line(out);
        }
    }

    pub fn error(&mut self, err: &ProxyError, out: &mut BytesMut) {
        self.failed = true;
        super::error::write_stream_error(err, out);
    }
}

#[derive(Debug, Deserialize)]
struct LineWire {
    text: Option<Vec<String>>,
    error: Option<Value>,
}

/// Upstream side: cumulative lines to deltas; the connection closing is the end.
#[derive(Debug, Default)]
pub struct Decoder {
    prompt: Option<String>,
    /// Bytes of each choice's text already emitted (prompt included).
    seen: Vec<usize>,
}

impl Decoder {
    /// A decoder that strips `prompt` from the front of the first text of each choice.
    pub fn with_prompt(prompt: String) -> Decoder {
        Decoder {
            prompt: Some(prompt),
            seen: Vec::new(),
        }
    }

    pub fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        let w: LineWire = crate::dialect::json::from_bytes(&frame.data)
            .map_err(|e| ProxyError::UpstreamProtocol(format!("generate stream line: {e}")))?;
        if let Some(err) = w.error {
            out.push(Event::Error {
                message: crate::dialect::error_message(err.to_string().as_bytes()),
            });
            return Ok(());
        }
        let texts = w.text.ok_or_else(|| {
            ProxyError::UpstreamProtocol("generate stream line without `text`".into())
        })?;
        for (i, text) in texts.iter().enumerate() {
            if self.seen.len() <= i {
                let skip = match &self.prompt {
                    Some(p) if text.starts_with(p.as_str()) => p.len(),
                    _ => 0,
                };
                self.seen.resize(i + 1, 0);
                self.seen[i] = skip;
            }
            let from = self.seen[i];
            let delta = match text.get(from..) {
                Some(s) if !s.is_empty() => CompactString::from(s),
                _ => continue,
            };
            self.seen[i] = text.len();
            out.push(Event::Chunk(Chunk {
                index: i as u32,
                text: delta,
                ..Chunk::default()
            }));
        }
        Ok(())
    }

    /// The connection closed: nothing says why generation ended, so each choice that
    /// answered ends with a plain stop, then the stream is done.
    pub fn close(&mut self, out: &mut Vec<Event>) {
        if self.seen.is_empty() {
            return;
        }
        for i in 0..self.seen.len() {
            out.push(Event::Chunk(Chunk {
                index: i as u32,
                finish: Some(Finish::Stop),
                tokens: Some(0),
                ..Chunk::default()
            }));
        }
        out.push(Event::Done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(d: &mut Decoder, s: &str) -> Vec<Event> {
        let mut out = Vec::new();
        let frame = Frame {
            event: None,
            data: s.as_bytes().to_vec().into(),
        };
        d.frame(&frame, &mut out).unwrap();
        out
    }

    fn texts(events: &[Event]) -> Vec<(u32, String)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Chunk(c) if !c.text.is_empty() => Some((c.index, c.text.to_string())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn cumulative_lines_become_deltas_without_the_prompt() {
        let mut d = Decoder::with_prompt("Hi".into());
        let a = line(&mut d, r#"{"text": ["Hi there", "Hi you"]}"#);
        assert_eq!(
            texts(&a),
            vec![(0, " there".to_string()), (1, " you".to_string())]
        );
        let b = line(&mut d, r#"{"text": ["Hi there friend", "Hi you"]}"#);
        assert_eq!(texts(&b), vec![(0, " friend".to_string())]);
        let mut end = Vec::new();
        d.close(&mut end);
        assert_eq!(end.len(), 3);
        assert_eq!(end.last(), Some(&Event::Done));
    }

    #[test]
    fn nothing_received_means_no_end() {
        let mut end = Vec::new();
        Decoder::default().close(&mut end);
        assert!(end.is_empty());
    }
}
