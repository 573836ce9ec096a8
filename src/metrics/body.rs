//! The response body wrapper that measures a request from its bytes as they leave.
//!
//! The handler returns as soon as headers are ready; nothing about a stream is known then.
//! This body sees each piece the pipeline emits: the first piece carrying a token is the time
//! to first token, later ones give inter-token gaps, the `End` piece carries the upstream's
//! totals, and dropping the body early means the client went away.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::Stream;
use http_body::{Body, Frame, SizeHint};

use super::{Metrics, Outcome, RequestRecord};

/// What a response pipeline emits.
#[derive(Debug)]
pub enum Emit {
    /// Bytes for the client, and how many generated tokens they carry.
    Data { bytes: Bytes, tokens: u32 },
    /// The end, with the totals the upstream reported.
    End(Summary),
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
    pub struct MeteredBody<S> {
        #[pin]
        inner: S,
        record: RequestRecord,
        metrics: Arc<Metrics>,
        done: bool,
    }

    impl<S> PinnedDrop for MeteredBody<S> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if !*this.done {
                this.record.outcome = Outcome::Cancelled;
                this.record.ended = Some(Instant::now());
                this.metrics.request_finished(this.record);
            }
        }
    }
}

impl<S> MeteredBody<S> {
    pub fn new(inner: S, record: RequestRecord, metrics: Arc<Metrics>) -> MeteredBody<S> {
        MeteredBody {
            inner,
            record,
            metrics,
            done: false,
        }
    }
}

fn on_tokens(record: &mut RequestRecord, metrics: &Metrics, tokens: u32) {
    let now = Instant::now();
    match record.last_token {
        None => {
            record.first_token = Some(now);
            metrics.observe_ttft(record, (now - record.started).as_secs_f64());
            // The first chunk's extra tokens arrived together with the first one.
        }
        Some(prev) => metrics.observe_itl(record, (now - prev).as_secs_f64(), tokens),
    }
    record.last_token = Some(now);
    record.tokens += u64::from(tokens);
    record.charge_key();
}

fn on_end(record: &mut RequestRecord, metrics: &Metrics, s: Summary) {
    record.ended = Some(Instant::now());
    record.prompt_tokens = s.prompt_tokens;
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
    }
    record.charge_key();
    metrics.request_finished(record);
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
            if *this.done {
                return Poll::Ready(None);
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Emit::Data { bytes, tokens })) => {
                    if tokens > 0 {
                        on_tokens(this.record, this.metrics, tokens);
                    }
                    if bytes.is_empty() {
                        continue;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                Poll::Ready(Some(Emit::End(summary))) => {
                    *this.done = true;
                    on_end(this.record, this.metrics, summary);
                }
                Poll::Ready(None) => {
                    *this.done = true;
                    // A pipeline always ends with `End`; without one, trust the chunk count.
                    let s = Summary {
                        estimated: true,
                        ..Summary::default()
                    };
                    on_end(this.record, this.metrics, s);
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
