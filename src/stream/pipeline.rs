//! The streaming pipeline: upstream body -> frames -> canonical events -> client bytes.
//!
//! Each upstream body chunk is processed as soon as it arrives and whatever it produces is
//! emitted at once: nothing is held back for a later chunk (the no-buffering invariant).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{FutureExt, Stream};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::framing::{write_sse, Frame, FrameParser, Framing};
use crate::dialect::{StreamDecoder, StreamEncoder};
use crate::error::ProxyError;
use crate::metrics::{Emit, Outcome, Summary};
use crate::model::{Event, Tally};

/// What to send the client for each upstream chunk.
pub enum Output {
    /// Translate: re-encode the events in the client's dialect.
    Encode(Box<StreamEncoder>),
    /// Passthrough: forward the upstream's bytes untouched.
    Raw,
    /// Passthrough, re-framed event by event: with `model` set back to the client's alias,
    /// and/or without the usage chunk lingo asked for on the client's behalf (so the client
    /// gets exactly the events it would have got without lingo).
    Reframe {
        alias: Option<String>,
        strip_usage: bool,
    },
}

struct State {
    body: Incoming,
    /// The upstream's framing, which a re-framed passthrough writes in too.
    framing: Framing,
    parser: FrameParser,
    decoder: StreamDecoder,
    output: Output,
    tally: Tally,
    frames: Vec<Frame>,
    events: Vec<Event>,
    queue: VecDeque<Emit>,
    finish: Option<&'static str>,
    saw_end: bool,
    finished: bool,
    wait: Duration,
    /// The body's end or error, seen while collecting ready chunks.
    pending: Option<Option<Result<http_body::Frame<Bytes>, hyper::Error>>>,
}

/// Build the client-facing stream over an upstream body.
pub fn pipeline(
    body: Incoming,
    framing: Framing,
    decoder: StreamDecoder,
    output: Output,
    header_wait: Duration,
) -> impl Stream<Item = Emit> + Send {
    let state = State {
        body,
        framing,
        parser: FrameParser::new(framing),
        decoder,
        output,
        tally: Tally::default(),
        frames: Vec::new(),
        events: Vec::new(),
        queue: VecDeque::new(),
        finish: None,
        saw_end: false,
        finished: false,
        wait: header_wait,
        pending: None,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.queue.pop_front() {
                return Some((e, st));
            }
            if st.finished {
                return None;
            }
            st.step().await;
        }
    })
}

impl State {
    /// Read one upstream chunk, with every chunk already received behind it, and queue what
    /// they produce.
    async fn step(&mut self) {
        let next = match self.pending.take() {
            Some(next) => next,
            None => {
                let t0 = Instant::now();
                let next = self.body.frame().await;
                self.wait += t0.elapsed();
                next
            }
        };
        match next {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let data = self.with_ready(data);
                    self.chunk(data, false);
                }
            }
            Some(Err(e)) => self.fail(ProxyError::UpstreamUnreachable(format!(
                "stream broke: {e}"
            ))),
            None => self.chunk(Bytes::new(), true),
        }
    }

    /// Append the body chunks that are ready now, without waiting for any. Servers write an
    /// HTTP chunk per event, so one socket read often holds many: handling them together
    /// gives the client one write instead of one per event, and holds nothing back.
    fn with_ready(&mut self, first: Bytes) -> Bytes {
        let mut joined: Option<BytesMut> = None;
        loop {
            match self.body.frame().now_or_never() {
                // Not ready: what is here goes out now.
                None => break,
                Some(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        joined
                            .get_or_insert_with(|| BytesMut::from(&first[..]))
                            .extend_from_slice(&data);
                    }
                }
                // The end or an error: handled by the next step, after this data.
                Some(end_or_error) => {
                    self.pending = Some(end_or_error);
                    break;
                }
            }
        }
        joined.map_or(first, BytesMut::freeze)
    }

    fn chunk(&mut self, data: Bytes, eof: bool) {
        self.frames.clear();
        self.parser.feed(&data, &mut self.frames);
        if eof {
            self.parser.finish(&mut self.frames);
        }
        let raw = matches!(self.output, Output::Raw);
        let mut out = BytesMut::new();
        let mut tokens = 0u32;
        let frames = std::mem::take(&mut self.frames);
        let mut failure = None;
        for frame in &frames {
            self.events.clear();
            if let Err(e) = self.decoder.frame(frame, &mut self.events) {
                failure = Some(e);
                break;
            }
            if let Some(message) = self.upstream_error() {
                failure = Some(ProxyError::UpstreamStatus {
                    status: 500,
                    message,
                });
                break;
            }
            tokens = tokens.saturating_add(self.account());
            self.write(frame, &mut out);
        }
        self.frames = frames;
        if eof && failure.is_none() {
            tokens = tokens.saturating_add(self.closed(&mut out));
        }
        let bytes = if raw { data } else { out.freeze() };
        self.emit(bytes, tokens);
        match failure {
            Some(e) => self.fail(e),
            None if eof => self.end(),
            None => {}
        }
    }

    /// The upstream closed the connection: account for (and encode) what the decoder reads
    /// into that, for streams that end by closing.
    fn closed(&mut self, out: &mut BytesMut) -> u32 {
        self.events.clear();
        self.decoder.close(&mut self.events);
        if self.events.is_empty() {
            return 0;
        }
        let tokens = self.account();
        if let Output::Encode(enc) = &mut self.output {
            enc.events(&self.events, out);
        }
        tokens
    }

    fn upstream_error(&self) -> Option<String> {
        self.events.iter().find_map(|e| match e {
            Event::Error { message } => Some(message.clone()),
            _ => None,
        })
    }

    /// Count tokens and note finish reasons and the end marker.
    fn account(&mut self) -> u32 {
        // The counts are the upstream's: absurd ones saturate rather than overflow.
        let mut tokens = 0u32;
        for ev in &self.events {
            tokens = tokens.saturating_add(self.tally.observe(ev));
            match ev {
                Event::Chunk(c) => {
                    if let Some(f) = &c.finish {
                        self.finish = Some(f.label());
                    }
                }
                Event::Done => self.saw_end = true,
                _ => {}
            }
        }
        tokens
    }

    fn write(&mut self, frame: &Frame, out: &mut BytesMut) {
        match &mut self.output {
            Output::Encode(enc) => enc.events(&self.events, out),
            Output::Raw => {}
            Output::Reframe { alias, strip_usage } => {
                if *strip_usage && is_usage_only(&self.events) {
                    return;
                }
                // Copied once, into `out`, unless the model name must change.
                let data = match alias {
                    Some(a) => std::borrow::Cow::Owned(rewrite_model(&frame.data, a)),
                    None => std::borrow::Cow::Borrowed(&frame.data[..]),
                };
                match self.framing {
                    Framing::Sse => write_sse(out, &data),
                    Framing::Ndjson => {
                        out.extend_from_slice(&data);
                        out.extend_from_slice(b"\n");
                    }
                }
            }
        }
    }

    fn emit(&mut self, bytes: Bytes, tokens: u32) {
        if !bytes.is_empty() || tokens > 0 {
            self.queue.push_back(Emit::Data { bytes, tokens });
        }
    }

    fn end(&mut self) {
        // A stream that stops without its terminator or any finish reason was cut short.
        if !self.saw_end && self.finish.is_none() {
            return self.fail(ProxyError::UpstreamProtocol(
                "the upstream stream ended before it finished".into(),
            ));
        }
        let mut out = BytesMut::new();
        if let Output::Encode(enc) = &mut self.output {
            enc.end(&mut out);
        }
        self.emit(out.freeze(), 0);
        self.close(None);
    }

    fn fail(&mut self, err: ProxyError) {
        let mut out = BytesMut::new();
        match &mut self.output {
            Output::Encode(enc) => enc.error(&err, &mut out),
            // In passthrough the upstream's own bytes (its error event included) already went
            // out; lingo adds nothing in the upstream's framing.
            Output::Raw | Output::Reframe { .. } => {}
        }
        self.emit(out.freeze(), 0);
        let outcome = match err {
            ProxyError::Timeout(_) => Outcome::Timeout,
            _ => Outcome::UpstreamError,
        };
        self.close(Some((outcome, err.kind())));
    }

    fn close(&mut self, error: Option<(Outcome, &'static str)>) {
        let (usage, estimated) = self.tally.totals();
        self.queue.push_back(Emit::End(Summary {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            estimated,
            finish: self.finish,
            error,
            upstream_wait: self.wait,
        }));
        self.finished = true;
    }
}

/// Whether a frame's events are only the request's usage totals (OpenAI's `choices: []`
/// usage chunk).
fn is_usage_only(events: &[Event]) -> bool {
    events.iter().any(|e| matches!(e, Event::Usage(_)))
        && events
            .iter()
            .all(|e| matches!(e, Event::Usage(_) | Event::Start { .. }))
}

/// Set `model` in one JSON event back to the client's alias; other bytes stay as they were.
pub fn rewrite_model(data: &[u8], alias: &str) -> Vec<u8> {
    match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(mut v) if v.get("model").is_some() => {
            v["model"] = serde_json::Value::String(alias.to_string());
            serde_json::to_vec(&v).unwrap_or_else(|_| data.to_vec())
        }
        _ => data.to_vec(),
    }
}
