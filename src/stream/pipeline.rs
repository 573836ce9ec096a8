//! The streaming pipeline: upstream body -> frames -> canonical events -> client bytes.
//!
//! Each upstream body chunk is processed as soon as it arrives and whatever it produces is
//! emitted at once: no whole event is held back for a later chunk (the no-buffering
//! invariant). Only the start of an event still arriving waits for its end, in every mode.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::time::Duration;

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::{FutureExt, Stream};
use http_body::Body as _;
use http_body_util::BodyExt;

use super::framing::{write_ndjson, write_sse_frame, Frame, FrameParser, Framing, SSE_DATA};
use super::timers::Timers;
use crate::blocks;
use crate::dialect::{Dialect, StreamDecoder, StreamEncoder};
use crate::error::{ProxyError, Source};
use crate::metrics::{Emit, Outcome, Progress, Summary};
use crate::model::{self, ChunkCounts, Event, Tally};
use crate::upstream::{BodyError, UpstreamBody};

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

/// The upstream side of a stream: its body, its dialect, and the limits it runs under.
pub struct Upstream {
    pub body: UpstreamBody,
    /// The upstream's dialect: its framing and decoder, and in passthrough (where it is the
    /// client's too) the in-band error lingo appends when the stream breaks.
    pub dialect: Dialect,
    /// Time already spent waiting for the headers.
    pub header_wait: Duration,
    pub timers: Timers,
    /// `limits.max_stream_event`.
    pub max_event: usize,
}

/// Joining ready chunks stops past this many bytes; the rest goes in the next write.
const JOIN_CAP: usize = 256 << 10;

struct State {
    /// Dropped as soon as the stream ends, which closes the upstream connection.
    body: Option<UpstreamBody>,
    dialect: Dialect,
    parser: FrameParser,
    decoder: StreamDecoder,
    output: Output,
    timers: Timers,
    /// A stream passed on counts here; a translation's tally is its encoder's (`tally()`).
    tally: Tally,
    events: Vec<Event>,
    queue: VecDeque<Emit>,
    finish: Option<&'static str>,
    saw_end: bool,
    finished: bool,
    wait: Duration,
    /// A wait for the next chunk in progress: since when, and the timer bounding it. On
    /// tokio's clock, which the timers' deadlines are on (the same clock, outside tests).
    waiting: Option<(tokio::time::Instant, crate::error::Timer)>,
    /// When the last wait ended: when the chunk being handled arrived.
    arrived: Option<tokio::time::Instant>,
    /// Passthrough: upstream events lingo could not decode (forwarded as they came).
    decode_errors: u32,
    /// Passthrough: the upstream's own in-band error, already forwarded with the rest.
    upstream_failed: Option<ProxyError>,
    /// Raw passthrough: the start of an event still arriving, held until it is whole.
    partial: BytesMut,
    /// The body's end or error, seen while collecting ready chunks.
    pending: Option<Chunk>,
}

/// What one wait on the body gives: a frame, an error, or the end.
type Chunk = Option<Result<http_body::Frame<Bytes>, BodyError>>;

/// Build the client-facing stream over an upstream body.
pub fn pipeline(up: Upstream, output: Output) -> impl Stream<Item = Emit> + Send {
    let parser = FrameParser::new(up.dialect.framing()).with_limit(up.max_event);
    let st = State::new(Some(up.body), up.dialect, parser, up.timers, output);
    // The time already spent waiting for the headers counts as waiting.
    Pipeline(State {
        wait: up.header_wait,
        ..st
    })
}

impl State {
    fn new(
        body: Option<UpstreamBody>,
        dialect: Dialect,
        parser: FrameParser,
        timers: Timers,
        output: Output,
    ) -> State {
        State {
            body,
            dialect,
            parser,
            decoder: dialect.stream_decoder(),
            output,
            timers,
            tally: Tally::default(),
            events: Vec::new(),
            queue: VecDeque::new(),
            finish: None,
            saw_end: false,
            finished: false,
            wait: Duration::ZERO,
            waiting: None,
            arrived: None,
            decode_errors: 0,
            upstream_failed: None,
            partial: BytesMut::new(),
            pending: None,
        }
    }

    /// A state fed by hand, not by a body (the fuzz check and the unit tests): the
    /// `upstream`'s framing without a limit, default timeouts.
    fn detached(upstream: Dialect, output: Output) -> State {
        let timers = Timers::start(
            &crate::config::Timeouts::default(),
            std::time::Instant::now(),
            &crate::proxy::drain::Drain::default(),
            true,
        );
        let parser = FrameParser::new(upstream.framing());
        State::new(None, upstream, parser, timers, output)
    }
}

thread_local! {
    /// One chunk's frames and the chunks being joined: per worker thread rather than per
    /// stream, as both are empty between chunks (per stream, each request grew them anew
    /// from nothing, and a long stream kept the most it ever held). A chunk is handled
    /// without an await, so no other stream takes them in between.
    static FRAMES: Cell<Vec<Frame>> = const { Cell::new(Vec::new()) };
    static READY: Cell<Vec<Bytes>> = const { Cell::new(Vec::new()) };
    /// Where a chunk's events are written when they are re-encoded, and chunks read
    /// together are joined (`blocks`): each one's own buffer was an allocation, and the
    /// pieces live only until the server copies them out.
    static ENCODED: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(ENCODED_BLOCK));
}

/// The block `ENCODED` pieces are cut from: many events', a few whole chunks'.
const ENCODED_BLOCK: usize = 16 << 10;

/// Give an emptied scratch vector back to its thread, unless one chunk made it large: a
/// thread keeps at most `SCRATCH_KEPT` slots of each.
fn keep<T: 'static>(slot: &'static std::thread::LocalKey<Cell<Vec<T>>>, v: Vec<T>) {
    if v.capacity() <= SCRATCH_KEPT {
        slot.set(v);
    }
}

const SCRATCH_KEPT: usize = 256;

/// The stream itself, polled in place: the state is never moved between events (a
/// `stream::unfold` moves it in and out of a future at every step).
struct Pipeline(State);

impl Stream for Pipeline {
    type Item = Emit;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Emit>> {
        let st = &mut self.get_mut().0;
        loop {
            if let Some(e) = st.queue.pop_front() {
                return Poll::Ready(Some(e));
            }
            if st.finished {
                return Poll::Ready(None);
            }
            ready!(st.poll_step(cx));
        }
    }
}

impl State {
    /// Read one upstream chunk, with every chunk already received behind it, and queue what
    /// they produce.
    fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let next = match self.pending.take() {
            Some(next) => next,
            None => match ready!(self.poll_chunk(cx)) {
                Ok(next) => next,
                Err(e) => {
                    self.fail(e);
                    return Poll::Ready(());
                }
            },
        };
        match next {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let data = self.with_ready(data);
                    self.chunk(data, false);
                }
            }
            Some(Err(e)) => {
                // The body's error text says nothing a client can use; the log keeps it.
                tracing::warn!(error = %e, "upstream stream broke off");
                self.fail(ProxyError::UpstreamClosed)
            }
            None => self.chunk(Bytes::new(), true),
        }
        Poll::Ready(())
    }

    /// The next body frame, within the phase's timer; the time spent waiting is counted.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Chunk, ProxyError>> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(Err(ProxyError::Internal(
                "the stream was read after it ended".into(),
            )));
        };
        let (since, timer) = match self.waiting {
            Some(w) => w,
            None => {
                // One clock read starts both the wait's count and its deadline.
                let now = tokio::time::Instant::now();
                let timer = match self.timers.arm_chunk(now) {
                    Ok(t) => t,
                    Err(e) => return Poll::Ready(Err(e)),
                };
                *self.waiting.insert((now, timer))
            }
        };
        let done = match Pin::new(body).poll_frame(cx) {
            Poll::Ready(next) => Ok(next),
            Poll::Pending => Err(ready!(self.timers.poll_fired(cx, timer))),
        };
        self.waiting = None;
        // One clock read ends the wait and times the tokens it brought (`Emit::Data::at`).
        let now = tokio::time::Instant::now();
        self.wait += now.saturating_duration_since(since);
        self.arrived = Some(now);
        Poll::Ready(done)
    }

    /// Append the body chunks that are ready now, without waiting for any. Servers write an
    /// HTTP chunk per event, so one socket read often holds many: handling them together
    /// gives the client one write instead of one per event, and holds nothing back.
    fn with_ready(&mut self, first: Bytes) -> Bytes {
        let Some(body) = self.body.as_mut() else {
            return first;
        };
        let mut total = first.len();
        let mut ready = READY.take();
        ready.push(first);
        // A body that says it is dry would only answer Pending.
        while total < JOIN_CAP && !body.dry() {
            match body.frame().now_or_never() {
                // Not ready: what is here goes out now.
                None => break,
                Some(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        total += data.len();
                        ready.push(data);
                    }
                }
                // The end or an error: handled by the next step, after this data.
                Some(end_or_error) => {
                    self.pending = Some(end_or_error);
                    break;
                }
            }
        }
        let joined = match ready.len() {
            1 => ready.pop().unwrap_or_default(),
            _ => {
                // One copy of each piece, into the thread's block (`ENCODED`): a buffer of
                // its own was an allocation, and a second at its first clone (the parser's).
                let mut out = blocks::open(&ENCODED, total);
                for piece in ready.drain(..) {
                    out.extend_from_slice(&piece);
                }
                blocks::close(&ENCODED, out)
            }
        };
        keep(&READY, ready);
        joined
    }

    fn passthrough(&self) -> bool {
        !matches!(self.output, Output::Encode(_))
    }

    fn chunk(&mut self, data: Bytes, eof: bool) {
        // The whole events a passthrough counts from their shape are not framed (no frames
        // cut from the buffer for them); what follows them (most often nothing) is.
        let (counted, counted_tokens) = self.count_whole(&data);
        if counted_tokens > 0 {
            self.timers.token_seen();
        }
        let (bytes, tokens, failure) = match counted {
            n if n == data.len() && !eof => (data, counted_tokens, None),
            0 => {
                let (bytes, tokens, _, failure) = self.frame(data, eof);
                (bytes, tokens, failure)
            }
            n => {
                let (rest, tokens, as_came, failure) = self.frame(data.slice(n..), eof);
                let tokens = tokens.saturating_add(counted_tokens);
                (joined(data, n, rest, as_came), tokens, failure)
            }
        };
        let bytes = match self.output {
            Output::Raw => {
                let failing = failure.is_some() || (eof && !self.ends_well());
                self.whole_events_only(bytes, eof, failing)
            }
            _ => bytes,
        };
        // One call: a chunk is sent as one piece.
        self.emit(bytes, tokens);
        match failure {
            Some(e) => self.fail(e),
            None if eof => self.end(),
            None => {}
        }
    }

    /// Raw passthrough sends whole events only: the bytes of one still arriving wait for
    /// the rest of it (every whole event goes on at once, as before). An SSE client
    /// dispatches whatever event it holds at the next blank line, so half an event
    /// forwarded before the upstream broke off would reach it, cut short, ahead of
    /// lingo's error event. A stream that ends well keeps every byte as it came.
    fn whole_events_only(&mut self, bytes: Bytes, eof: bool, failing: bool) -> Bytes {
        let mut bytes = match self.partial.is_empty() {
            true => bytes,
            false => {
                self.partial.extend_from_slice(&bytes);
                self.partial.split().freeze()
            }
        };
        if !failing && (eof || self.parser.between_events()) {
            return bytes;
        }
        let at = event_boundary(self.dialect.framing(), &bytes);
        // Held no longer than an event may be: lines that are no event (comments, unknown
        // fields) do not count toward the parser's limit, and an upstream may send them
        // without end.
        if !failing && bytes.len() - at > self.parser.limit() {
            return bytes;
        }
        let rest = bytes.split_off(at);
        if !failing {
            // Copied: a slice would keep the whole read buffer it came in.
            self.partial.extend_from_slice(&rest);
        }
        bytes
    }

    /// Whether the stream, at its end, ends without an error of lingo's (as `end` decides).
    fn ends_well(&self) -> bool {
        self.upstream_failed.is_some() || self.saw_end || self.finish.is_some()
    }

    /// Frame, decode and account for `data`: the bytes to send for it, its tokens, whether
    /// those bytes are `data` as it came, and the failure that ends the stream, if any.
    fn frame(&mut self, data: Bytes, eof: bool) -> (Bytes, u32, bool, Option<ProxyError>) {
        let starts_whole = self.parser.between_events();
        // A translation encodes the whole events it reads from their shape first, unframed.
        let mut encoded = match self.output {
            Output::Encode(_) => Some(blocks::open(&ENCODED, data.len() + 256)),
            _ => None,
        };
        let (skip, mut tokens) = match &mut encoded {
            Some(out) => self.encode_whole(&data, out),
            None => (0, 0),
        };
        let mut frames = FRAMES.take();
        let fed = match skip {
            n if n == data.len() => Ok(()),
            0 => self.parser.try_feed_bytes(data.clone(), &mut frames),
            n => self.parser.try_feed_bytes(data.slice(n..), &mut frames),
        };
        if eof && fed.is_ok() {
            self.parser.finish(&mut frames);
        }
        let raw = matches!(self.output, Output::Raw);
        // Re-framing without a new model name leaves a chunk of whole events as it came
        // unless one of its events is left out: such a chunk goes on uncopied.
        let mut verbatim = starts_whole
            && fed.is_ok()
            && self.parser.between_events()
            && matches!(self.output, Output::Reframe { alias: None, .. });
        let mut out = match encoded {
            Some(out) => out,
            None if raw || verbatim => BytesMut::new(),
            None => blocks::open(&ENCODED, data.len() + 256),
        };
        let mut failure = None;
        for (i, frame) in frames.iter().enumerate() {
            match self.event(frame, &mut out, &mut tokens, verbatim) {
                Err(e) => {
                    failure = Some(e);
                    break;
                }
                Ok(Written::Dropped) if verbatim => {
                    // Re-framed after all: the frames before this one, kept, go first.
                    out.reserve(data.len());
                    let framing = self.dialect.framing();
                    frames[..i]
                        .iter()
                        .for_each(|f| reframe(framing, f, &f.data, &mut out));
                    verbatim = false;
                }
                Ok(_) => {}
            }
        }
        // The frames are slices of the upstream's read buffer: kept while the stream waits
        // for its next token, they would keep that buffer too.
        frames.clear();
        keep(&FRAMES, frames);
        let failure = failure.or_else(|| {
            fed.err().map(|e| {
                ProxyError::UpstreamProtocol(format!(
                    "a stream event is larger than limits.max_stream_event ({} bytes)",
                    e.limit
                ))
            })
        });
        if eof && failure.is_none() {
            tokens = tokens.saturating_add(self.closed(&mut out));
        }
        if tokens > 0 {
            self.timers.token_seen();
        }
        if raw || verbatim {
            (data, tokens, true, failure)
        } else {
            (blocks::close(&ENCODED, out), tokens, false, failure)
        }
    }

    /// The whole SSE events `data` begins with that the decoder counts without events,
    /// accounted for: the bytes they take and their tokens. Only where they would go on
    /// as they came anyway: a passthrough that renames nothing. A shaped event is a chunk,
    /// so never one a re-framing leaves out.
    #[inline]
    fn count_whole(&mut self, data: &[u8]) -> (usize, u32) {
        match &self.output {
            Output::Raw | Output::Reframe { alias: None, .. } => {}
            Output::Reframe { alias: Some(_), .. } | Output::Encode(_) => return (0, 0),
        }
        self.whole_events(data, |st, payload| {
            let c = st.decoder.counts(payload)?;
            Some(st.count(&c))
        })
    }

    /// The whole SSE events `data` begins with that the decoder reads from its shape (most
    /// of a translated stream's), decoded, accounted for and encoded into `out`, as `event`
    /// would have done with their frames: the bytes they took and their tokens. No frames
    /// are cut for them, as `count_whole` cuts none for a passthrough's.
    #[inline]
    fn encode_whole(&mut self, data: &[u8], out: &mut BytesMut) -> (usize, u32) {
        self.whole_events(data, |st, payload| {
            st.decoder
                .shaped_into(payload, chunk_slot(&mut st.events))?;
            Some(st.account_into(out))
        })
    }

    /// `read` each whole `data: payload` event `data` begins with (only from an event's
    /// start, not after a line the parser holds), until it reads one as `None`: the bytes
    /// the events it read took, and the tokens it gave for them.
    #[inline]
    fn whole_events(
        &mut self,
        data: &[u8],
        mut read: impl FnMut(&mut Self, &[u8]) -> Option<u32>,
    ) -> (usize, u32) {
        let (mut at, mut tokens) = (0, 0u32);
        if !self.parser.between_events() {
            return (at, tokens);
        }
        while let Some(end) = self.parser.whole_event(&data[at..]) {
            let Some(n) = read(self, &data[at + SSE_DATA.len()..at + end]) else {
                break;
            };
            tokens = tokens.saturating_add(n);
            at += end + 2;
        }
        (at, tokens)
    }

    /// Decode, account for and write one frame. In passthrough an event lingo cannot
    /// decode, or the upstream's own error event, goes to the client as it came and the
    /// stream goes on (lingo only observes); in translation either ends the stream.
    fn event(
        &mut self,
        frame: &Frame,
        out: &mut BytesMut,
        tokens: &mut u32,
        defer: bool,
    ) -> Result<Written, ProxyError> {
        self.events.clear();
        // Passed through (as it came, or framed again): most events need only their
        // counts, read without events. Such an event is a chunk, so never usage alone.
        if self.passthrough() {
            if let Some(c) = self.decoder.counts(&frame.data) {
                *tokens = tokens.saturating_add(self.count(&c));
                return Ok(self.write(frame, out, defer));
            }
        }
        if let Err(e) = self.decoder.frame(frame, &mut self.events) {
            if !self.passthrough() {
                return Err(e);
            }
            tracing::debug!(error = %e, "forwarding an upstream event lingo cannot decode");
            self.decode_errors += 1;
            self.events.clear();
        }
        if let Some(message) = self.upstream_error() {
            let err = ProxyError::UpstreamStatus {
                status: 500,
                message,
            };
            if !self.passthrough() {
                return Err(err);
            }
            self.upstream_failed.get_or_insert(err);
        }
        *tokens = tokens.saturating_add(self.account_into(out));
        Ok(self.write(frame, out, defer))
    }

    /// The upstream closed the connection: account for (and encode) what the decoder reads
    /// into that, for streams that end by closing.
    fn closed(&mut self, out: &mut BytesMut) -> u32 {
        self.events.clear();
        self.decoder.close(&mut self.events);
        if self.events.is_empty() {
            return 0;
        }
        self.account_into(out)
    }

    fn upstream_error(&self) -> Option<String> {
        self.events.iter().find_map(|e| match e {
            Event::Error { message } => Some(message.clone()),
            _ => None,
        })
    }

    /// Account for a chunk read for its counts alone, as `account` does for its event.
    fn count(&mut self, c: &ChunkCounts) -> u32 {
        if c.finish.is_some() {
            self.finish = c.finish;
        }
        self.tally.observe_chunk(c)
    }

    /// Account for the events (their tokens, finish reasons and the end marker) and, in a
    /// translation, encode them into `out`: the new tokens they carried. A translation's
    /// tally is its encoder's, which observes each event as it writes it (a second tally
    /// of the same events here was about 70 instructions a token); a stream passed on
    /// keeps its own.
    #[inline]
    fn account_into(&mut self, out: &mut BytesMut) -> u32 {
        for ev in &self.events {
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
        match &mut self.output {
            Output::Encode(enc) => enc.events(&self.events, out),
            // The counts are the upstream's: absurd ones saturate rather than overflow.
            _ => self.events.iter().fold(0u32, |tokens, ev| {
                tokens.saturating_add(self.tally.observe(ev))
            }),
        }
    }

    /// The stream's tally: a translation's encoder's, else the pipeline's own.
    fn tally(&self) -> &Tally {
        match &self.output {
            Output::Encode(enc) => enc.tally(),
            _ => &self.tally,
        }
    }

    /// Write one frame's output (a translation's was written as it was accounted for).
    /// `defer`: a frame kept as it came is not written (the caller forwards the whole chunk
    /// as it came).
    fn write(&mut self, frame: &Frame, out: &mut BytesMut, defer: bool) -> Written {
        match &mut self.output {
            Output::Encode(_) | Output::Raw => {}
            Output::Reframe { alias, strip_usage } => {
                if *strip_usage && is_usage_only(&self.events) {
                    return Written::Dropped;
                }
                // (`chunk` defers only without an alias.)
                if defer {
                    return Written::Deferred;
                }
                // Copied once, into `out`, unless the model name must change.
                let data = match alias {
                    Some(a) => std::borrow::Cow::Owned(rewrite_model(&frame.data, a)),
                    None => std::borrow::Cow::Borrowed(&frame.data[..]),
                };
                reframe(self.dialect.framing(), frame, &data, out);
            }
        }
        Written::Out
    }

    fn emit(&mut self, bytes: Bytes, tokens: u32) {
        if bytes.is_empty() && tokens == 0 {
            return;
        }
        // Kept by the record should the request end before the stream does.
        let progress = (tokens > 0).then(|| {
            let (prompt_tokens, estimated) = self.tally().so_far();
            Progress {
                prompt_tokens,
                estimated,
            }
        });
        self.queue.push_back(Emit::Data {
            bytes,
            tokens,
            at: self.arrived.map(tokio::time::Instant::into_std),
            progress,
        });
    }

    fn end(&mut self) {
        // Passthrough: the upstream's own error went out with the rest of its bytes.
        if let Some(err) = self.upstream_failed.take() {
            return self.close(Some((outcome(&err), err.kind())));
        }
        // A stream that stops without its terminator or any finish reason was cut short.
        if !self.ends_well() {
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

    /// End the stream with the client dialect's in-band error and terminator, so that a
    /// broken stream never looks complete; passthrough appends it to the upstream's bytes,
    /// unless the upstream already sent its own error.
    fn fail(&mut self, err: ProxyError) {
        if let Some(first) = self.upstream_failed.take() {
            tracing::debug!(error = %err, "after the upstream's own error event");
            return self.close(Some((outcome(&first), first.kind())));
        }
        let mut out = BytesMut::new();
        match &mut self.output {
            Output::Encode(enc) => enc.error(&err, &mut out),
            // What went out ends with a whole event (`whole_events_only`; unless more than
            // an event may take of lines that make none came after a `data:` line).
            Output::Raw | Output::Reframe { .. } => self.dialect.write_stream_error(&err, &mut out),
        }
        self.emit(out.freeze(), 0);
        self.close(Some((outcome(&err), err.kind())));
    }

    fn close(&mut self, error: Option<(Outcome, &'static str)>) {
        // Closing the upstream connection now (not when the client has read the end) is
        // what stops the server generating after a timeout or a failure.
        self.body = None;
        self.pending = None;
        let (usage, estimated) = self.tally().totals();
        self.queue.push_back(Emit::End(Summary {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            estimated: estimated || self.decode_errors > 0,
            finish: self.finish,
            error,
            upstream_wait: self.wait,
            decode_errors: self.decode_errors,
        }));
        self.finished = true;
    }
}

/// How a stream fed by `drive` ended: what its record would hold, but for the times.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Ended {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub finish: Option<&'static str>,
    /// The error kind, when it failed.
    pub error: Option<&'static str>,
    pub decode_errors: u32,
}

/// Fuzzing (`crate::fuzzing::stream`): an `upstream` stream body's `pieces`, one chunk
/// each, then its end, through a pipeline state with `output`: the client's bytes, and how
/// the stream ended.
pub(crate) fn drive(upstream: Dialect, output: Output, pieces: &[&[u8]]) -> (Vec<u8>, Ended) {
    let mut st = State::detached(upstream, output);
    let mut sent = Vec::new();
    let mut ended = Ended::default();
    let chunks = pieces.iter().map(|p| (Bytes::copy_from_slice(p), false));
    for (chunk, eof) in chunks.chain([(Bytes::new(), true)]) {
        if st.finished {
            break;
        }
        st.chunk(chunk, eof);
        for e in st.queue.drain(..) {
            match e {
                Emit::Data { bytes, .. } => sent.extend_from_slice(&bytes),
                Emit::End(s) => {
                    ended = Ended {
                        prompt_tokens: s.prompt_tokens,
                        completion_tokens: s.completion_tokens,
                        finish: s.finish,
                        error: s.error.map(|(_, kind)| kind),
                        decode_errors: s.decode_errors,
                    }
                }
            }
        }
    }
    (sent, ended)
}

/// Where the last whole event in `bytes` ends (0 if none does): after the last blank line
/// (SSE) or the last line (NDJSON). Lines end where the frame parser ends them, at LF or
/// NUL, less a CR before; `bytes` starts between events, so a blank first line counts.
fn event_boundary(framing: Framing, bytes: &[u8]) -> usize {
    let ends = |b: &u8| *b == b'\n' || *b == 0;
    let mut end = bytes.len();
    while let Some(nl) = memchr::memrchr2(b'\n', 0, &bytes[..end]) {
        let before = &bytes[..nl];
        let before = before.strip_suffix(b"\r").unwrap_or(before);
        if framing == Framing::Ndjson || before.last().is_none_or(ends) {
            return nl + 1;
        }
        end = nl;
    }
    0
}

/// The outcome label of an error that ended a stream (as `respond::error` decides it).
fn outcome(err: &ProxyError) -> Outcome {
    match (err, err.source()) {
        (ProxyError::Timeout(_), _) => Outcome::Timeout,
        (_, Source::Client) => Outcome::ClientError,
        _ => Outcome::UpstreamError,
    }
}

/// What `State::write` did with a frame.
enum Written {
    /// Its output is in `out` (or, forwarding raw, nothing was needed).
    Out,
    /// Kept as it came, and not written: the chunk goes on whole.
    Deferred,
    /// Left out (the usage chunk lingo asked for).
    Dropped,
}

/// One event's payload, framed again.
/// `frame` framed again with `data` (its own, or with the model renamed), its event name
/// and its lines kept: an SSE client may dispatch on the name (`event: error`, Anthropic's
/// event types).
fn reframe(framing: Framing, frame: &Frame, data: &[u8], out: &mut BytesMut) {
    match framing {
        Framing::Sse => write_sse_frame(out, frame.event.as_deref(), data),
        Framing::Ndjson => write_ndjson(out, data),
    }
}

/// A chunk whose first `counted` bytes were counted in place, with `rest`, what the bytes
/// after them became: the chunk as it came when `rest` is those bytes as they came, else
/// the counted events (as they came, which is how re-framing writes a whole `data: `
/// event) before `rest`, in one piece.
fn joined(data: Bytes, counted: usize, rest: Bytes, as_came: bool) -> Bytes {
    if as_came {
        return data;
    }
    let mut out = blocks::open(&ENCODED, counted + rest.len());
    out.extend_from_slice(&data[..counted]);
    out.extend_from_slice(&rest);
    blocks::close(&ENCODED, out)
}

/// `events` as one chunk to read the next shaped event into (`encode_whole`): the one there
/// already, or a new one.
fn chunk_slot(events: &mut Vec<Event>) -> &mut model::Chunk {
    if !matches!(events.as_slice(), [Event::Chunk(_)]) {
        events.clear();
        events.push(Event::Chunk(model::Chunk::default()));
    }
    match events.first_mut() {
        Some(Event::Chunk(c)) => c,
        _ => unreachable!("the list was just made one chunk"),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn reframing(strip_usage: bool) -> State {
        let output = Output::Reframe {
            alias: None,
            strip_usage,
        };
        State::detached(Dialect::OpenaiCompletions, output)
    }

    /// The bytes the stream sent the client so far.
    fn sent(st: &mut State) -> Vec<Bytes> {
        st.queue
            .drain(..)
            .filter_map(|e| match e {
                Emit::Data { bytes, .. } => Some(bytes),
                _ => None,
            })
            .collect()
    }

    fn token(text: &str) -> String {
        format!(
            "data:{{\"id\":\"c\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\
             \"choices\":[{{\"index\":0,\"text\":\"{text}\",\"finish_reason\":null}}]}}\n\n"
        )
    }

    const USAGE: &str = "data: {\"id\":\"c\",\"object\":\"text_completion\",\"created\":1,\
        \"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2,\
        \"total_tokens\":4}}\n\n";

    #[tokio::test]
    async fn a_chunk_of_whole_kept_events_goes_on_uncopied() {
        let mut st = reframing(true);
        let data = Bytes::from(token("a") + &token("b"));
        st.chunk(data.clone(), false);
        let sent = sent(&mut st);
        assert_eq!(sent, vec![data.clone()]);
        // The same bytes, not a copy of them (and, from `data:` without a space, not
        // re-framed).
        assert_eq!(sent[0].as_ptr(), data.as_ptr());
    }

    #[tokio::test]
    async fn a_chunk_holding_the_usage_lingo_asked_for_loses_only_it() {
        let mut st = reframing(true);
        let data = Bytes::from(token("a") + USAGE + "data: [DONE]\n\n");
        st.chunk(data, false);
        let sent = sent(&mut st).concat();
        let a = token("a").replacen("data:", "data: ", 1);
        assert_eq!(String::from_utf8(sent).unwrap(), a + "data: [DONE]\n\n");
        assert_eq!(st.tally.so_far().0, Some(2), "the usage is still read");
    }

    #[tokio::test]
    async fn chunks_that_split_an_event_are_framed_again() {
        let mut st = reframing(false);
        let b = token("b");
        let (head, tail) = b.split_at(20);
        let first = Bytes::from(token("a") + head);
        st.chunk(first.clone(), false);
        st.chunk(Bytes::from(tail.to_string()), false);
        let sent = sent(&mut st);
        let framed = |t: String| Bytes::from(t.replacen("data:", "data: ", 1));
        assert_eq!(sent, vec![framed(token("a")), framed(b.clone())]);
        assert_ne!(sent[0].as_ptr(), first.as_ptr());
        // Whole again: the next chunk goes on as it came.
        let c = Bytes::from(token("c"));
        st.chunk(c.clone(), false);
        assert_eq!(sent_one(&mut st).as_ptr(), c.as_ptr());
    }

    fn raw(dialect: Dialect) -> State {
        State::detached(dialect, Output::Raw)
    }

    #[tokio::test]
    async fn raw_passthrough_sends_an_event_split_across_chunks_once_it_is_whole() {
        let mut st = raw(Dialect::OpenaiCompletions);
        let b = token("b");
        let (head, tail) = b.split_at(20);
        st.chunk(Bytes::from(token("a") + head), false);
        assert_eq!(sent(&mut st).concat(), token("a").as_bytes());
        st.chunk(Bytes::from(tail.to_string() + &token("c")[..9]), false);
        assert_eq!(sent(&mut st).concat(), b.as_bytes());
        st.chunk(Bytes::from(token("c")[9..].to_string()), false);
        assert_eq!(sent(&mut st).concat(), token("c").as_bytes());
    }

    #[tokio::test]
    async fn raw_passthrough_cut_mid_event_sends_no_half_event_before_its_error() {
        for (dialect, first, cut) in [
            (Dialect::OpenaiCompletions, token("a"), token("b")),
            (
                Dialect::OllamaGenerate,
                "{\"model\":\"m\",\"response\":\"a\",\"done\":false}\n".to_string(),
                "{\"model\":\"m\",\"response\":\"b\",\"done\":false}\n".to_string(),
            ),
        ] {
            let mut st = raw(dialect);
            st.chunk(Bytes::from(first.clone() + &cut[..12]), false);
            st.fail(ProxyError::UpstreamClosed);
            let sent = String::from_utf8(sent(&mut st).concat()).unwrap();
            let error = sent.strip_prefix(&first).expect(&sent);
            let mut out = BytesMut::new();
            dialect.write_stream_error(&ProxyError::UpstreamClosed, &mut out);
            assert_eq!(error.as_bytes(), &out[..], "{dialect:?}");
        }
    }

    #[tokio::test]
    async fn raw_passthrough_holds_no_more_than_an_event_may_take() {
        let mut st = raw(Dialect::OpenaiCompletions);
        st.parser = FrameParser::new(Framing::Sse).with_limit(64);
        // A data line, then comment lines without end: no blank line ever comes.
        st.chunk(Bytes::from("data: {}\n"), false);
        assert!(sent(&mut st).is_empty(), "the start of an event waits");
        let comments = Bytes::from(": keep-alive\n".repeat(8));
        st.chunk(comments.clone(), false);
        let sent = sent(&mut st).concat();
        assert_eq!(
            sent.len(),
            "data: {}\n".len() + comments.len(),
            "past the limit, sent"
        );
        assert!(st.partial.is_empty());
    }

    #[tokio::test]
    async fn raw_passthrough_ended_mid_event_without_its_end_drops_the_half() {
        let mut st = raw(Dialect::OpenaiCompletions);
        let b = token("b");
        st.chunk(Bytes::from(token("a") + &b[..20]), false);
        st.chunk(Bytes::new(), true);
        let sent = String::from_utf8(sent(&mut st).concat()).unwrap();
        let error = sent.strip_prefix(&token("a")).expect(&sent);
        assert!(error.starts_with("data: {\"error\""), "{sent}");
    }

    #[tokio::test]
    async fn a_stream_framed_again_keeps_event_names_and_lines() {
        let mut st = reframing(true);
        let odd = "event: note\ndata: a\ndata: b\n\n";
        st.chunk(Bytes::from(token("a") + &USAGE[..30]), false);
        st.chunk(Bytes::from(USAGE[30..].to_string() + odd), false);
        let sent = String::from_utf8(sent(&mut st).concat()).unwrap();
        let a = token("a").replacen("data:", "data: ", 1);
        assert_eq!(sent, a + odd);
    }

    #[tokio::test]
    async fn a_stream_ended_inside_an_event_is_framed_whole_before_its_error() {
        let mut st = reframing(false);
        // The body ends after a `data:` line (empty), before the blank line that ends it.
        st.chunk(Bytes::from(token("a") + "data:\n"), false);
        st.chunk(Bytes::new(), true);
        let sent = sent(&mut st).concat();
        let mut frames = Vec::new();
        let mut parser = FrameParser::new(Framing::Sse);
        parser.feed(&sent, &mut frames);
        let data: Vec<&[u8]> = frames.iter().map(|f| &f.data[..]).collect();
        assert_eq!(data.len(), 4, "{:?}", String::from_utf8_lossy(&sent));
        assert_eq!((data[1], data[3]), (&b""[..], &b"[DONE]"[..]));
        assert!(data[2].starts_with(b"{\"error\""));
    }

    #[test]
    fn an_event_boundary_is_after_the_last_blank_line() {
        let sse = |b: &str| event_boundary(Framing::Sse, b.as_bytes());
        assert_eq!(sse("data: a\n\ndata: b"), 9);
        assert_eq!(sse("data: a\r\n\r\ndata: b\r\n"), 11);
        assert_eq!(sse("data: a\n\nevent: x\ndata: b\n"), 9);
        assert_eq!(sse("data: a\ndata: b\n"), 0);
        assert_eq!(sse("\ndata: b"), 1);
        assert_eq!(sse("data: a\n\n"), 9);
        assert_eq!(event_boundary(Framing::Ndjson, b"{}\n{\"a\""), 3);
        assert_eq!(event_boundary(Framing::Ndjson, b"{\"a\""), 0);
    }

    /// vLLM's completions event with `text` and `finish`, framed.
    fn vllm(text: &str, finish: &str) -> String {
        format!(
            "data: {{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\
             \"model\":\"m\",\"choices\":[{{\"index\":0,\"text\":\"{text}\",\"logprobs\":null,\
             \"finish_reason\":{finish},\"stop_reason\":null}}],\"usage\":null}}\n\n"
        )
    }

    /// Every chunk through `st`: the bytes it sent and the tokens they carried.
    fn drive(st: &mut State, chunks: &[Bytes]) -> (Vec<Bytes>, u32) {
        let (mut sent, mut tokens) = (Vec::new(), 0);
        for c in chunks {
            st.chunk(c.clone(), false);
            for e in st.queue.drain(..) {
                if let Emit::Data {
                    bytes, tokens: n, ..
                } = e
                {
                    sent.push(bytes);
                    tokens += n;
                }
            }
        }
        (sent, tokens)
    }

    #[tokio::test]
    async fn whole_shaped_events_are_counted_in_place_and_the_rest_is_framed() {
        let d = vllm(" d", "null");
        let (d_head, d_tail) = d.split_at(30);
        let usage = USAGE.replacen("data:", "data: ", 1);
        let chunks = [
            vllm(" a", "null"),
            vllm(" b", "null") + &vllm("", "null") + d_head,
            d_tail.to_string() + &vllm(" e", "null") + ":",
            // After the `:` held, a comment line (`:data: ...`), not an event.
            vllm(" x", "null"),
            vllm(" f", "\"length\"") + &usage + "data: [DONE]\n\n",
        ]
        .map(Bytes::from);
        for strip_usage in [false, true] {
            let mut st = reframing(strip_usage);
            if !strip_usage {
                st.output = Output::Raw;
            }
            let (first, tokens) = drive(&mut st, &chunks);
            // Byte for byte as they came; re-framed, without the usage lingo asked for
            // (nor the comment, in a chunk that began inside an event). Every event a
            // token, the empty text's included, the comment's not.
            let all = chunks.concat();
            let comment = format!(":{}", vllm(" x", "null"));
            let want = match strip_usage {
                true => String::from_utf8(all)
                    .unwrap()
                    .replace(&usage, "")
                    .replace(&comment, ""),
                false => String::from_utf8(all).unwrap(),
            };
            let sent = String::from_utf8(first.concat()).unwrap();
            assert_eq!(sent, want, "{strip_usage}");
            assert_eq!(tokens, 6, "{strip_usage}");
            assert_eq!((st.finish, st.saw_end), (Some("length"), true));
            assert_eq!(st.tally.so_far().0, Some(2), "the usage is still read");
            // Events counted in place go on with the rest of their chunk, uncopied unless
            // the rest was framed again.
            assert_eq!(first[1].as_ptr() == chunks[1].as_ptr(), !strip_usage);
            // One piece a chunk (re-framed, the comment's chunk gave none).
            assert_eq!(first.len(), chunks.len() - usize::from(strip_usage));
        }
    }

    /// A translation of vLLM's completions stream for an SGLang client.
    fn translating() -> State {
        let req = Dialect::Sglang
            .decode_request(br#"{"text": "a b", "stream": true}"#)
            .unwrap();
        let ctx = crate::dialect::Ctx::new(&req, "id".into(), "m".into());
        let mut st = reframing(false);
        st.output = Output::Encode(Box::new(Dialect::Sglang.stream_encoder(ctx)));
        st
    }

    #[tokio::test]
    async fn a_translation_encodes_whole_shaped_events_as_it_would_their_frames() {
        let d = vllm(" d", "null");
        let (d_head, d_tail) = d.split_at(30);
        let chunks = [
            vllm(" a", "null"),
            vllm(" b", "null") + &vllm("", "null") + d_head,
            // An escaped text is not the shape's: framed and decoded whole.
            d_tail.to_string() + &vllm(" e", "null") + &vllm(r#" \"q\""#, "null"),
            vllm(" f", "null") + USAGE + "data: [DONE]\n\n",
        ]
        .map(Bytes::from);
        let mut st = translating();
        let (whole, tokens) = drive(&mut st, &chunks);
        // The same stream a byte at a time: no whole event in any read, every one framed.
        let all = chunks.concat();
        let bytes: Vec<Bytes> = all.chunks(1).map(Bytes::copy_from_slice).collect();
        let (framed, framed_tokens) = drive(&mut translating(), &bytes);
        let text = |b: Vec<Bytes>| String::from_utf8(b.concat()).unwrap();
        let whole = text(whole);
        assert_eq!(whole, text(framed));
        assert_eq!(tokens, framed_tokens);
        // Every text an event (the empty one none), the whole text so far in each.
        assert_eq!(whole.matches("data: {").count(), 6, "{whole}");
        assert!(whole.contains(r#""text":" a b d e \"q\" f""#), "{whole}");
        // Whole shaped events, once the stream's shape is known, are read without frames.
        let next = Bytes::from(vllm(" g", "null") + &vllm(" h", "null"));
        let mut out = BytesMut::new();
        let mut st = translating();
        drive(&mut st, &chunks[..1]);
        assert_eq!(st.encode_whole(&next, &mut out), (next.len(), 2));
        assert!(String::from_utf8_lossy(&out).contains(" a g h"));
    }

    fn sent_one(st: &mut State) -> Bytes {
        let mut all = sent(st);
        assert_eq!(all.len(), 1);
        all.remove(0)
    }
}
