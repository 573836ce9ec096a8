//! Reading an Anthropic upstream's named events into canonical events.
//!
//! The event name comes from the SSE `event:` line, or from the payload's `type` when a
//! frame has none (the two are always equal on Anthropic's wire).

use serde::Deserialize;
use serde_json::Value;

use super::response::{finish_from_wire, UsageWire};
use crate::error::ProxyError;
use crate::model::{Chunk, Event};
use crate::stream::framing::Frame;

#[derive(Debug, Default, Deserialize)]
struct MessageWire {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    usage: Option<UsageWire>,
}

#[derive(Debug, Default, Deserialize)]
struct DeltaWire {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    stop_reason: Option<String>,
    stop_sequence: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct BlockWire {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: String,
}

#[derive(Debug, Default, Deserialize)]
struct EventWire {
    #[serde(rename = "type", default)]
    kind: String,
    message: Option<MessageWire>,
    delta: Option<DeltaWire>,
    content_block: Option<BlockWire>,
    usage: Option<UsageWire>,
    error: Option<Value>,
}

/// Decodes one Messages stream.
#[derive(Debug, Default)]
pub struct Decoder {
    /// `input_tokens` from `message_start`, for the totals at `message_delta`.
    input_tokens: u64,
}

impl Decoder {
    pub fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        let w: EventWire = crate::dialect::json::from_bytes(&frame.data)
            .map_err(|e| ProxyError::UpstreamProtocol(format!("messages event: {e}")))?;
        let name = frame.event.as_deref().unwrap_or(&w.kind);
        match name {
            "message_start" => {
                let m = w.message.unwrap_or_default();
                if let Some(u) = &m.usage {
                    self.input_tokens = u.input_tokens.unwrap_or(0);
                }
                out.push(Event::Start {
                    id: m.id,
                    model: m.model,
                });
            }
            "content_block_start" => match w.content_block {
                Some(b) if b.kind == "text" && !b.text.is_empty() => out.push(text(b.text)),
                _ => {}
            },
            "content_block_delta" => {
                let d = w.delta.unwrap_or_default();
                if d.kind.as_deref() == Some("text_delta") {
                    out.push(text(d.text.unwrap_or_default()));
                }
            }
            "message_delta" => {
                let d = w.delta.unwrap_or_default();
                out.push(Event::Chunk(Chunk {
                    finish: finish_from_wire(d.stop_reason.as_deref(), d.stop_sequence),
                    tokens: Some(0),
                    ..Chunk::default()
                }));
                if let Some(u) = w.usage {
                    let input = u.input_tokens.unwrap_or(self.input_tokens);
                    out.push(Event::Usage(u.to_usage(input)));
                }
            }
            "message_stop" => out.push(Event::Done),
            "error" => {
                let e = w.error.unwrap_or_default();
                let message = match e.get("message") {
                    Some(Value::String(s)) => s.clone(),
                    _ => e.to_string(),
                };
                out.push(Event::Error { message });
            }
            // `ping`, `content_block_stop`, and event types added later carry no output.
            _ => {}
        }
        Ok(())
    }
}

fn text(text: String) -> Event {
    Event::Chunk(Chunk {
        text: text.into(),
        ..Chunk::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Finish, Usage};
    use crate::stream::framing::{FrameParser, Framing};

    #[test]
    fn named_events_to_canonical() {
        let wire = concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",",
            "\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\n",
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: ping\ndata: {\"type\":\"ping\"}\n\n",
            "event: content_block_delta\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Paris\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: message_delta\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\",",
            "\"stop_sequence\":\".\"},\"usage\":{\"output_tokens\":3}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let mut parser = FrameParser::new(Framing::Sse);
        let mut frames = Vec::new();
        parser.feed(wire.as_bytes(), &mut frames);
        let mut d = Decoder::default();
        let mut events = Vec::new();
        for f in &frames {
            d.frame(f, &mut events).unwrap();
        }
        assert_eq!(
            events[0],
            Event::Start {
                id: "msg_1".into(),
                model: "m".into()
            }
        );
        assert!(matches!(&events[1], Event::Chunk(c) if c.text == "Paris"));
        assert!(
            matches!(&events[2], Event::Chunk(c) if c.finish == Some(Finish::StopString(".".into())))
        );
        let usage = Usage {
            prompt_tokens: 12,
            completion_tokens: 3,
            cached_tokens: None,
        };
        assert_eq!(events[3], Event::Usage(usage));
        assert_eq!(events[4], Event::Done);
        assert_eq!(events.len(), 5);
    }
}
