//! Reading OpenAI-style upstream streams (completions and chat) into canonical events.

use std::borrow::Cow;

use compact_str::CompactString;
use serde::Deserialize;
use serde_json::Value;
use smallvec::SmallVec;

use super::completions_logprobs;
use super::shape::Shape;
use super::wire::{finish_from_wire, UsageWire};
use super::{opening, scan};
use crate::error::ProxyError;
use crate::model::{Chunk, ChunkCounts, Event, Ids, Usage};
use crate::stream::framing::{is_done_marker, Frame};

// The strings borrow from the event where they can (no escapes): a stream decodes one of
// these per token, so each allocation saved is saved thousands of times a second.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct DeltaWire<'a> {
    #[serde(borrow)]
    pub(super) role: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(super) content: Option<Cow<'a, str>>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct ChoiceWire<'a> {
    #[serde(default)]
    pub(super) index: u32,
    /// Completions.
    #[serde(borrow)]
    pub(super) text: Option<Cow<'a, str>>,
    /// Chat.
    #[serde(borrow)]
    pub(super) delta: Option<DeltaWire<'a>>,
    #[serde(borrow)]
    pub(super) finish_reason: Option<Cow<'a, str>>,
    pub(super) stop_reason: Option<Value>,
    /// SGLang's OpenAI routes name the matched stop this way.
    pub(super) matched_stop: Option<Value>,
    pub(super) token_ids: Option<Ids>,
    pub(super) logprobs: Option<Value>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct ChunkWire<'a> {
    #[serde(default, borrow)]
    pub(super) id: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(super) model: Cow<'a, str>,
    /// Nearly every event has one choice: held inline, not allocated per event.
    #[serde(default, borrow)]
    pub(super) choices: SmallVec<[ChoiceWire<'a>; 1]>,
    pub(super) usage: Option<UsageWire>,
    pub(super) error: Option<Value>,
}

/// Decodes one OpenAI-style stream.
#[derive(Debug)]
pub struct Decoder {
    chat: bool,
    started: bool,
    /// The last event's head, for the fast reader to skip in the next.
    head: scan::Head,
    /// The last event with only a text in it, for the next that differs only there.
    shape: Shape,
}

impl Decoder {
    pub fn new(chat: bool) -> Decoder {
        Decoder {
            chat,
            started: false,
            head: scan::Head::default(),
            shape: Shape::default(),
        }
    }

    pub fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        if is_done_marker(&frame.data) {
            out.push(Event::Done);
            return Ok(());
        }
        // Most events are the last one with a new token: read straight into the chunk.
        if let Some(c) = self.shape.chunk(&frame.data) {
            out.push(Event::Chunk(c));
            return Ok(());
        }
        // A stream's first is most often the last stream's first with new values.
        if !self.started {
            if let Some(o) = opening::open(&frame.data, self.chat) {
                self.opened(o, &frame.data, out);
                return Ok(());
            }
        }
        // The fast reader gives serde's answer when it is sure of it, else serde reads.
        let w: ChunkWire = match self.fast(&frame.data) {
            Some(w) => w,
            None => by_serde(&frame.data)?,
        };
        self.wire(w, out);
        Ok(())
    }

    /// `frame` by serde alone: no shape, no opening, no fast reader. What every fast path
    /// must agree with (`fast_paths_agree`).
    fn frame_by_serde(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        if is_done_marker(&frame.data) {
            out.push(Event::Done);
            return Ok(());
        }
        self.wire(by_serde(&frame.data)?, out);
        Ok(())
    }

    /// A frame's counts (`data`, its payload), when it is the stream's shape with new values
    /// (most events): what `frame` would count of it, for a passthrough that needs no
    /// events. `None`: read it with `frame`.
    #[inline]
    pub fn counts(&self, data: &[u8]) -> Option<ChunkCounts> {
        self.shape.counts(data)
    }

    /// A frame's chunk (`data`, its payload), when it is the stream's shape with new values,
    /// written over `slot`: the one event `frame` would give for it, for a translation that
    /// reads whole events without framing them. `None`: read it with `frame`.
    #[inline]
    pub fn shaped_into(&self, data: &[u8], slot: &mut Chunk) -> Option<()> {
        self.shape.chunk_into(data, slot)
    }

    /// Whether `data` would be read from the stream's shape.
    #[cfg(test)]
    pub(super) fn shape_reads(&self, data: &[u8]) -> bool {
        self.shape.chunk(data).is_some()
    }

    /// For the fuzzers: `frames` through a decoder as the pipeline runs it (its shape, the
    /// thread's opening, the fast reader; and before each frame, what a passthrough's
    /// `counts` and a translation's `shaped_into` take from it) give the events of a decoder
    /// that reads every frame with serde alone, up to the first error, which both must meet.
    pub(crate) fn fast_paths_agree(chat: bool, frames: &[Frame]) {
        let (mut fast, mut plain) = (Decoder::new(chat), Decoder::new(chat));
        let (mut got, mut want) = (Vec::new(), Vec::new());
        // Written over as the pipeline writes over its last event's chunk.
        let mut slot = Chunk::default();
        for f in frames {
            let counts = fast.counts(&f.data);
            let shaped = fast.shaped_into(&f.data, &mut slot).map(|()| slot.clone());
            got.clear();
            want.clear();
            let read = fast.frame(f, &mut got);
            let by_serde = plain.frame_by_serde(f, &mut want);
            let data = String::from_utf8_lossy(&f.data);
            assert_eq!(
                read.is_ok(),
                by_serde.is_ok(),
                "read fast otherwise: {data}"
            );
            if by_serde.is_err() {
                return;
            }
            assert_eq!(got, want, "events read fast otherwise than serde: {data}");
            let serde_chunk = match want.as_slice() {
                [Event::Chunk(c)] => Some(c),
                _ => None,
            };
            if let Some(counts) = counts {
                assert_eq!(
                    Some(counts),
                    serde_chunk.map(ChunkCounts::of),
                    "counts: {data}"
                );
            }
            if let Some(shaped) = shaped {
                assert_eq!(Some(&shaped), serde_chunk, "a shaped chunk: {data}");
            }
        }
    }

    /// The events one read event gives.
    pub(super) fn wire(&mut self, w: ChunkWire<'_>, out: &mut Vec<Event>) {
        if let Some(err) = w.error {
            let message = match err.get("message") {
                Some(Value::String(s)) => s.clone(),
                _ => err.to_string(),
            };
            out.push(Event::Error { message });
            return;
        }
        if !self.started {
            self.started = true;
            out.push(Event::Start {
                id: w.id.into_owned(),
                model: w.model.into_owned(),
            });
        }
        let usage: Option<Usage> = w.usage.map(Into::into);
        let single = w.choices.len() == 1;
        if w.choices.is_empty() {
            if let Some(u) = usage {
                out.push(Event::Usage(u));
            }
        }
        for c in w.choices {
            self.choice(c, usage.filter(|_| single), out);
        }
    }

    /// The event as the fast reader reads it, when it is sure; it teaches the shape (and a
    /// stream's first event, the thread's opening).
    fn fast<'a>(&mut self, data: &'a [u8]) -> Option<ChunkWire<'a>> {
        let text = std::str::from_utf8(data).ok()?;
        let w = scan::chunk_after(text, &mut self.head)?;
        self.shape.learn(text, &w, &self.head.spots, self.chat);
        if !self.started {
            opening::learn(text, &w, &self.head, self.chat);
        }
        Some(w)
    }

    /// A first event read from the thread's opening: what `wire` gives for it, and the
    /// head and shape reading it whole would have left.
    fn opened(&mut self, o: opening::Opened, data: &[u8], out: &mut Vec<Event>) {
        self.started = true;
        out.push(Event::Start {
            id: o.id,
            model: o.model,
        });
        out.push(o.event);
        if let Some(shape) = o.shape {
            self.shape.take(data, shape, &o.head.spots);
        }
        self.head = o.head;
    }

    fn choice(&self, c: ChoiceWire<'_>, usage: Option<Usage>, out: &mut Vec<Event>) {
        let (text, role) = match (self.chat, c.delta) {
            (true, Some(d)) => (d.content.unwrap_or_default().into(), d.role.is_some()),
            (true, None) => (CompactString::default(), false),
            (false, _) => (c.text.unwrap_or_default().into(), false),
        };
        let stop = c.stop_reason.as_ref().or(c.matched_stop.as_ref());
        let finish = finish_from_wire(c.finish_reason.as_deref(), stop);
        if role && text.is_empty() && finish.is_none() && c.token_ids.is_none() {
            out.push(Event::Role { index: c.index });
            return;
        }
        let logprobs = c
            .logprobs
            .filter(|v| !v.is_null())
            .map(|v| completions_logprobs(self.chat, v, c.token_ids.as_deref()));
        out.push(Event::Chunk(Chunk {
            index: c.index,
            text,
            tokens: c.token_ids.as_ref().map(|t| t.len() as u32),
            token_ids: c.token_ids,
            finish,
            logprobs,
            usage,
        }));
    }
}

/// An event as serde reads it, the fast paths' last resort and their reference.
fn by_serde(data: &[u8]) -> Result<ChunkWire<'_>, ProxyError> {
    crate::dialect::json::from_bytes(data)
        .map_err(|e| ProxyError::UpstreamProtocol(format!("stream chunk: {e}")))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn frames(texts: &[&str]) -> Vec<Frame> {
        let data = |t: &&str| Bytes::copy_from_slice(t.as_bytes());
        texts
            .iter()
            .map(|t| Frame {
                event: None,
                data: data(t),
            })
            .collect()
    }

    fn decode(chat: bool, frames: &[Frame]) -> Vec<Result<Vec<Event>, ProxyError>> {
        let mut d = Decoder::new(chat);
        let read = |f: &Frame| {
            let mut out = Vec::new();
            d.frame(f, &mut out).map(|()| out)
        };
        frames.iter().map(read).collect()
    }

    #[test]
    fn a_chat_stream_reads_completions_shaped_events_as_serde_does_fast_or_not() {
        // The text of a completions-shaped event is not a chat chunk's: learnt as a shape
        // it was, for the events after the first.
        let event = |t: &str| {
            format!(
                r#"{{"id":"x","model":"m","choices":[{{"index":0,"text":"{t}","finish_reason":null}}]}}"#
            )
        };
        let (a, b) = (event(" a"), event(" b"));
        let fs = frames(&[&a, &b]);
        Decoder::fast_paths_agree(true, &fs);
        let got = decode(true, &fs);
        let Ok(second) = &got[1] else {
            panic!("{got:?}")
        };
        assert!(
            matches!(second.as_slice(), [Event::Chunk(c)] if c.text.is_empty()),
            "{second:?}"
        );
    }

    #[test]
    fn an_empty_event_is_refused_before_any_shape_is_learnt() {
        // The shape not yet learnt matched an empty event: a chunk serde would refuse.
        let role = r#"{"id":"x","model":"m","choices":[{"index":0,"delta":{"role":"assistant"}}]}"#;
        for (chat, texts) in [(false, vec![""]), (true, vec![role, ""])] {
            let fs = frames(&texts);
            Decoder::fast_paths_agree(chat, &fs);
            assert!(decode(chat, &fs).last().unwrap().is_err(), "{texts:?}");
        }
    }
}
