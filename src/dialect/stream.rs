//! Stateful stream codecs, dispatched over the closed set of dialects.

use bytes::BytesMut;

use super::{anthropic, llamacpp, ollama, openai, sglang, tgi, vllm_legacy};
use crate::error::ProxyError;
use crate::model::{Chunk, ChunkCounts, Event, Tally, MAX_CHOICES};
use crate::stream::framing::Frame;

/// Turns canonical events into a client dialect's stream bytes.
pub enum StreamEncoder {
    Sglang(sglang::stream::Encoder),
    Completions(openai::completions::StreamEncoder),
    Chat(openai::chat::StreamEncoder),
    Tgi(tgi::stream::Encoder),
    Anthropic(anthropic::StreamEncoder),
    VllmLegacy(vllm_legacy::StreamEncoder),
    // Boxed: they keep a whole choice or finish, and `Output` holds an encoder inline.
    Llamacpp(Box<llamacpp::stream::Encoder>),
    Ollama(Box<ollama::stream::Encoder>),
}

impl StreamEncoder {
    /// Encode the events decoded from one upstream frame; the new tokens they carried, as
    /// the encoder's tally counts them.
    pub fn events(&mut self, events: &[Event], out: &mut BytesMut) -> u32 {
        match self {
            StreamEncoder::Sglang(e) => e.events(events, out),
            StreamEncoder::Completions(e) => e.events(events, out),
            StreamEncoder::Chat(e) => e.events(events, out),
            StreamEncoder::Tgi(e) => e.events(events, out),
            StreamEncoder::Anthropic(e) => e.events(events, out),
            StreamEncoder::VllmLegacy(e) => e.events(events, out),
            StreamEncoder::Llamacpp(e) => e.events(events, out),
            StreamEncoder::Ollama(e) => e.events(events, out),
        }
    }

    /// What the events so far count. Every encoder observes each event as it writes it, so
    /// a translated stream's tally is its encoder's: the pipeline keeps no second one.
    pub fn tally(&self) -> &Tally {
        match self {
            StreamEncoder::Sglang(e) => e.tally(),
            StreamEncoder::Completions(e) => e.tally(),
            StreamEncoder::Chat(e) => e.tally(),
            StreamEncoder::Tgi(e) => e.tally(),
            StreamEncoder::Anthropic(e) => e.tally(),
            StreamEncoder::VllmLegacy(e) => e.tally(),
            StreamEncoder::Llamacpp(e) => e.tally(),
            StreamEncoder::Ollama(e) => e.tally(),
        }
    }

    /// The upstream ended cleanly: write the terminator.
    pub fn end(&mut self, out: &mut BytesMut) {
        match self {
            StreamEncoder::Sglang(e) => e.end(out),
            StreamEncoder::Completions(e) => e.end(out),
            StreamEncoder::Chat(e) => e.end(out),
            StreamEncoder::Tgi(e) => e.end(out),
            StreamEncoder::Anthropic(e) => e.end(out),
            StreamEncoder::VllmLegacy(e) => e.end(out),
            StreamEncoder::Llamacpp(e) => e.end(out),
            StreamEncoder::Ollama(e) => e.end(out),
        }
    }

    /// The stream failed after it started: an in-band error, then the terminator.
    pub fn error(&mut self, err: &ProxyError, out: &mut BytesMut) {
        match self {
            StreamEncoder::Sglang(e) => e.error(err, out),
            StreamEncoder::Completions(_) | StreamEncoder::Chat(_) => {
                openai::error::write_stream_error(err, out)
            }
            StreamEncoder::Tgi(_) => tgi::error::write_stream_error(err, out),
            StreamEncoder::Anthropic(e) => e.error(err, out),
            StreamEncoder::VllmLegacy(e) => e.error(err, out),
            StreamEncoder::Llamacpp(e) => e.error(err, out),
            StreamEncoder::Ollama(e) => e.error(err, out),
        }
    }
}

/// Refuse a choice index no request can have, before an encoder or the tally sizes its
/// per-choice state by it.
fn check_indexes(events: &[Event]) -> Result<(), ProxyError> {
    let index = |e: &Event| match e {
        Event::Chunk(c) => c.index,
        Event::Role { index } => *index,
        _ => 0,
    };
    match events.iter().map(index).find(|i| *i >= MAX_CHOICES) {
        Some(i) => Err(too_many_choices(i)),
        None => Ok(()),
    }
}

/// The error for an upstream choice index at or beyond [`MAX_CHOICES`].
pub(crate) fn too_many_choices(index: impl std::fmt::Display) -> ProxyError {
    ProxyError::UpstreamProtocol(format!(
        "choice index {index} is beyond the {MAX_CHOICES} choices a stream may have"
    ))
}

/// Turns an upstream dialect's frames into canonical events.
pub enum StreamDecoder {
    Sglang(sglang::stream::Decoder),
    /// Boxed: it keeps the last event's head and shape (about 330 bytes).
    Openai(Box<openai::stream::Decoder>),
    Tgi(tgi::stream::Decoder),
    Anthropic(anthropic::Decoder),
    VllmLegacy(vllm_legacy::Decoder),
    Llamacpp(llamacpp::stream::Decoder),
    Ollama(ollama::stream::Decoder),
}

impl StreamDecoder {
    pub fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        let start = out.len();
        self.decode(frame, out)?;
        check_indexes(&out[start..])
    }

    fn decode(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        match self {
            StreamDecoder::Sglang(d) => d.frame(frame, out),
            StreamDecoder::Openai(d) => d.frame(frame, out),
            StreamDecoder::Tgi(d) => d.frame(frame, out),
            StreamDecoder::Anthropic(d) => d.frame(frame, out),
            StreamDecoder::VllmLegacy(d) => d.frame(frame, out),
            StreamDecoder::Llamacpp(d) => d.frame(frame, out),
            StreamDecoder::Ollama(d) => d.frame(frame, out),
        }
    }

    /// A frame's counts alone (`data`, its payload), when the decoder can read them without
    /// its events (an OpenAI stream's shaped event): for a passthrough, which forwards the
    /// frame as it came. `None`: decode it with `frame`, which gives the same counts.
    #[inline]
    pub fn counts(&self, data: &[u8]) -> Option<ChunkCounts> {
        match self {
            StreamDecoder::Openai(d) => d.counts(data).filter(|c| c.index < MAX_CHOICES),
            _ => None,
        }
    }

    /// A frame's one chunk (`data`, its payload), when the decoder reads it from the stream's
    /// shape (an OpenAI stream's shaped event): what `frame` gives for it, for a translation
    /// that encodes whole events without framing them, written over `slot`. `None`: decode
    /// it with `frame` (`slot` may then hold anything).
    #[inline]
    pub fn shaped_into(&self, data: &[u8], slot: &mut Chunk) -> Option<()> {
        match self {
            StreamDecoder::Openai(d) => d
                .shaped_into(data, slot)
                .filter(|()| slot.index < MAX_CHOICES),
            _ => None,
        }
    }

    /// The upstream closed the connection: the events that implies, for streams whose end
    /// is the close itself (vLLM's legacy server says nothing else).
    pub fn close(&mut self, out: &mut Vec<Event>) {
        match self {
            StreamDecoder::VllmLegacy(d) => d.close(out),
            StreamDecoder::Sglang(_)
            | StreamDecoder::Openai(_)
            | StreamDecoder::Anthropic(_)
            | StreamDecoder::Llamacpp(_)
            | StreamDecoder::Ollama(_)
            | StreamDecoder::Tgi(_) => {}
        }
    }
}
