//! The response body wrapper that measures a request from its bytes as they leave.
//!
//! The handler returns as soon as headers are ready; nothing about a stream is known then.
//! This body sees each piece the pipeline emits: the first piece carrying a token is the time
//! to first token, later ones give inter-token gaps, the `End` piece carries the upstream's
//! totals, and dropping the body early means the client went away (the record it owns then
//! records itself as cancelled, with the counts known so far).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::Stream;
use http_body::{Body, Frame, SizeHint};

use super::{Metrics, OpenRecord, Outcome, RequestRecord};

/// What a response pipeline emits.
#[derive(Debug)]
pub enum Emit {
    /// Bytes for the client, and how many generated tokens they carry.
    Data {
        bytes: Bytes,
        tokens: u32,
        /// When the upstream's bytes behind them arrived (the pipeline reads the clock as
        /// each wait ends, and the meter times tokens by that reading rather than taking
        /// its own); `None`: now.
        at: Option<Instant>,
        /// With tokens: what the stream knows so far of the counts its end will report, so
        /// a request that ends early keeps them.
        progress: Option<Progress>,
    },
    /// The end, with the totals the upstream reported.
    End(Summary),
}

impl Emit {
    /// Bytes that carry `tokens` and nothing else the meter needs.
    pub fn data(bytes: Bytes, tokens: u32) -> Emit {
        Emit::Data {
            bytes,
            tokens,
            at: None,
            progress: None,
        }
    }
}

/// The counts a stream's end will report, as far as it knows them yet.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// The upstream's running prompt count.
    pub prompt_tokens: Option<u64>,
    /// Whether the output count so far is a guess.
    pub estimated: bool,
}

#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub estimated: bool,
    pub finish: Option<&'static str>,
    /// `Some` when the request failed; the outcome and error kind.
    pub error: Option<(Outcome, &'static str)>,
    pub upstream_wait: Duration,
    /// Upstream stream events lingo could not decode (passthrough forwards them as they came).
    pub decode_errors: u32,
}

pin_project_lite::pin_project! {
    /// Owns the request's record until the response ends: recorded at `End`, or, dropped
    /// first (the client went away), recorded by the record itself as cancelled.
    pub struct MeteredBody<S> {
        #[pin]
        inner: S,
        record: Option<OpenRecord>,
        metrics: Arc<Metrics>,
        // A whole answer's totals, known before its bytes leave: the request ends as they
        // are handed over, and keeps the counts if the body is dropped unread.
        whole: Option<Summary>,
        // A whole answer's length, for its size hint.
        length: Option<u64>,
    }

    impl<S> PinnedDrop for MeteredBody<S> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let (Some(rec), Some(s)) = (this.record.as_mut(), this.whole.take()) {
                known_counts(rec, &s);
                rec.tokens = s.completion_tokens;
                rec.estimated = s.estimated;
            }
            // An unfinished record records itself (cancelled, partial) as it drops.
        }
    }
}

impl<S> MeteredBody<S> {
    pub fn new(inner: S, mut record: OpenRecord, metrics: Arc<Metrics>) -> MeteredBody<S> {
        record.counting = true;
        MeteredBody {
            inner,
            record: Some(record),
            metrics,
            whole: None,
            length: None,
        }
    }

    /// A whole answer: `inner` yields its `length` bytes; `summary` is its end. The length
    /// is the body's exact size hint, which the servers write as `content-length` (no
    /// header value to make for it).
    pub fn whole(
        inner: S,
        record: OpenRecord,
        metrics: Arc<Metrics>,
        summary: Summary,
        length: u64,
    ) -> MeteredBody<S> {
        let mut body = MeteredBody::new(inner, record, metrics);
        body.whole = Some(summary);
        body.length = Some(length);
        body
    }
}

/// Counts a summary carries that are worth keeping even if the request does not finish.
fn known_counts(record: &mut RequestRecord, s: &Summary) {
    // A zero from a summary that counted nothing (an estimate, an error) is not a count.
    if s.prompt_tokens > 0 || (!s.estimated && s.error.is_none()) {
        record.prompt_tokens = Some(s.prompt_tokens);
    }
}

fn on_tokens(record: &mut RequestRecord, metrics: &Metrics, tokens: u32, now: Instant) {
    match record.last_token {
        None => {
            record.first_token = Some(now);
            metrics.observe_ttft(
                record,
                now.saturating_duration_since(record.started).as_secs_f64(),
            );
            // The first chunk's extra tokens arrived with the first one: gaps of zero, so
            // a stream's histogram counts every token after the first however reads coalesce
            // (a whole answer has no gaps to speak of).
            if tokens > 1 && record.stream {
                metrics.observe_itl(record, 0.0, tokens - 1);
            }
        }
        Some(prev) => metrics.observe_itl(
            record,
            now.saturating_duration_since(prev).as_secs_f64(),
            tokens,
        ),
    }
    record.last_token = Some(now);
    record.tokens += u64::from(tokens);
    record.charge_key();
}

/// Tokens a stream's final count holds beyond those its events were counted with: each still
/// gets its inter-token observation, as the server's own histogram has it. They arrived with
/// the last piece that carried no counted token (vLLM's finish chunk holds the last token,
/// whose text may be empty), or with the last token where no piece came after it.
fn uncounted_tokens(record: &mut RequestRecord, metrics: &Metrics, reported: u64) {
    let missing = reported.saturating_sub(record.tokens);
    let Some(prev) = record.last_token.filter(|_| missing > 0 && record.stream) else {
        return;
    };
    let at = record.last_event.filter(|e| *e > prev).unwrap_or(prev);
    let missing = u32::try_from(missing).unwrap_or(u32::MAX);
    metrics.observe_itl(record, (at - prev).as_secs_f64(), missing);
    record.last_token = Some(at);
}

fn on_end(mut record: OpenRecord, s: Summary, metrics: &Metrics, ended: Instant) {
    record.ended = Some(ended);
    known_counts(&mut record, &s);
    if !s.estimated && s.error.is_none() {
        uncounted_tokens(&mut record, metrics, s.completion_tokens);
    }
    // The upstream's count is authoritative; chunk counting only fills in when it is silent.
    record.tokens = if s.estimated {
        record.tokens.max(s.completion_tokens)
    } else {
        s.completion_tokens
    };
    record.estimated = s.estimated;
    record.finish = s.finish;
    record.upstream_wait += s.upstream_wait;
    metrics.stream_decode_errors(&record.labels, s.decode_errors);
    if let Some((outcome, kind)) = s.error {
        record.outcome = outcome;
        record.error_kind = Some(kind);
        // Output had begun: the counts are what arrived before the failure.
        record.partial = record.first_token.is_some();
    }
    record.charge_key();
    record.finish();
}

impl<S: Stream<Item = Emit>> Body for MeteredBody<S> {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        loop {
            let Some(record) = this.record.as_mut() else {
                return Poll::Ready(None);
            };
            match this.inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Emit::Data {
                    bytes,
                    tokens,
                    at,
                    progress,
                })) => {
                    if let Some(p) = progress {
                        if p.prompt_tokens.is_some() {
                            record.prompt_tokens = p.prompt_tokens;
                        }
                        record.estimated = p.estimated;
                    }
                    // The clock is read at most once: a whole answer's tokens and its end
                    // are the same moment.
                    let mut at = at;
                    let mut now = || *at.get_or_insert_with(Instant::now);
                    if tokens > 0 {
                        on_tokens(record, this.metrics, tokens, now());
                    } else if record.first_token.is_some() && !bytes.is_empty() {
                        record.last_event = Some(now());
                    }
                    if let Some(s) = this.whole.take() {
                        // All of a whole answer is in hand: it ends as it leaves.
                        if let Some(r) = this.record.take() {
                            on_end(r, s, this.metrics, now());
                        }
                    }
                    if bytes.is_empty() {
                        continue;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                Poll::Ready(Some(Emit::End(summary))) => {
                    if let Some(r) = this.record.take() {
                        on_end(r, summary, this.metrics, Instant::now());
                    }
                }
                Poll::Ready(None) => {
                    // A pipeline always ends with `End`; without one, trust the chunk count.
                    let s = Summary {
                        estimated: true,
                        ..Summary::default()
                    };
                    if let Some(r) = this.record.take() {
                        on_end(r, s, this.metrics, Instant::now());
                    }
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match (self.length, &self.record) {
            (Some(n), Some(_)) => SizeHint::with_exact(n),
            (Some(_), None) => SizeHint::with_exact(0),
            (None, _) => SizeHint::default(),
        }
    }
}
