//! Plays generated sequences out over time: an incremental SSE body, or one delayed response.
//!
//! Timing: the first chunk goes out `ttft` plus the prefill of its uncached prompt tokens after
//! the request arrived (see `clock`), and after any wait for a running permit (see `sched`), on
//! a precise timer; each later chunk of `t` tokens
//! `t * itl` after the previous one (deadline-based, so encoding time does not add drift). With
//! all delays zero the driver never sleeps or reads the tokio clock. Chunks of all sequences of
//! a request advance together, one step of `tokens_per_chunk` tokens at a time, as a batch
//! decodes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use tokio::time::Instant;

use super::fault::FaultMode;
use super::generate::Seq;
use super::inject;
use super::sse::Encoder;
use super::state::{MockState, RequestGuard};
use super::FailMode;

/// A generation ready to be answered: its sequences, the usage it reports, its request guard.
pub(crate) struct Generation {
    pub seqs: Vec<Seq>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub guard: RequestGuard,
}

/// Sleeps as long as the whole stream of `seqs` would take (non-streaming responses): the
/// queue and prefill before the first chunk, then the rest of the tokens.
pub(crate) async fn pace_whole(state: &MockState, guard: &mut RequestGuard, seqs: &[Seq]) {
    let total = seqs.iter().map(Seq::len).max().unwrap_or(0);
    let first = total.min(chunk_size(state));
    let delay = guard.start().await;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    guard.first_token();
    guard.generated(produced(seqs, 0, first));
    let rest = itl(state) * u32::try_from(total - first).unwrap_or(u32::MAX);
    if !rest.is_zero() {
        tokio::time::sleep(rest).await;
    }
    guard.generated(produced(seqs, first, total));
}

/// Output tokens all of `seqs` produce between positions `from` and `to`.
fn produced(seqs: &[Seq], from: usize, to: usize) -> u64 {
    seqs.iter()
        .map(|s| (to.min(s.len()).saturating_sub(from)) as u64)
        .sum()
}

/// The delay per token: `slow-tokens` overrides the configured one.
fn itl(state: &MockState) -> Duration {
    match inject::current() {
        Some(f) if f.mode == FaultMode::SlowTokens => f.slow,
        _ => state.config.itl,
    }
}

/// Where and how the stream fails: an injected fault, else `fail_next_stream`.
fn stream_failure(state: &MockState) -> Option<(u32, FailMode)> {
    match inject::current().map(|f| f.mode) {
        Some(FaultMode::StallMidStream) => Some((3, FailMode::Stall)),
        Some(FaultMode::CloseMidStream) => Some((3, FailMode::Abort)),
        Some(FaultMode::MalformedChunk) => Some((2, FailMode::Malformed)),
        _ => state.take_stream_failure(),
    }
}

fn chunk_size(state: &MockState) -> usize {
    state.config.tokens_per_chunk.max(1) as usize
}

/// An SSE response that plays `generation` out through `encoder`.
pub(crate) fn stream<E: Encoder>(
    state: Arc<MockState>,
    generation: Generation,
    encoder: E,
) -> Response {
    let itl = itl(&state);
    let cfg = &state.config;
    let paced = !(cfg.ttft.is_zero() && itl.is_zero() && cfg.prefill_per_token.is_zero());
    let driver = Driver {
        fail: stream_failure(&state),
        itl,
        total: generation.seqs.iter().map(Seq::len).max().unwrap_or(0),
        chunk: chunk_size(&state),
        deadline: paced.then(Instant::now),
        arrived: super::clock::arrived(),
        stamps: super::clock::stamps(),
        first_due: None,
        usage: (generation.prompt_tokens, generation.completion_tokens),
        guard: Some(generation.guard),
        seqs: generation.seqs,
        encoder,
        state,
        pos: 0,
        started: false,
    };
    let frames = futures_util::stream::unfold(driver, |mut driver| async move {
        let frame = driver.next_frame().await?;
        Some((frame, driver))
    });
    let mut response = Response::new(Body::from_stream(frames));
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// The stream's state. Dropping it unfinished (the client went away) drops the guard, which
/// counts the request as aborted.
struct Driver<E> {
    state: Arc<MockState>,
    seqs: Vec<Seq>,
    encoder: E,
    usage: (u64, u64),
    guard: Option<RequestGuard>,
    fail: Option<(u32, FailMode)>,
    /// Delay per token.
    itl: Duration,
    /// Tokens sent per sequence so far.
    pos: usize,
    /// Length of the longest sequence.
    total: usize,
    chunk: usize,
    started: bool,
    /// When the next chunk is due; `None` when the mock has no delays.
    deadline: Option<Instant>,
    /// When the request arrived (the kernel's stamp of its bytes), if known.
    arrived: Option<std::time::Instant>,
    /// The connection's stamps, and when the first token was due once they were armed for
    /// its write: its lateness is recorded once the write is seen.
    stamps: Option<Arc<crate::netstamp::Stamps>>,
    first_due: Option<std::time::Instant>,
}

impl<E: Encoder> Driver<E> {
    async fn next_frame(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        self.first_written();
        self.guard.as_ref()?;
        if self.pos < self.total && self.state.wait_hold(self.pos as u32).await {
            // A paused stream resumes at its own pace rather than bursting to catch up.
            if let Some(deadline) = &mut self.deadline {
                *deadline = Instant::now();
            }
        }
        if let Some((after, mode)) = self.fail {
            // A failure armed past the end still fires, in place of the terminator.
            if self.pos >= (after as usize).min(self.total) && (self.started || after == 0) {
                return self.fail_now(mode).await;
            }
        }
        let mut out = Vec::with_capacity(256 * self.seqs.len().max(1));
        if self.started && self.pos >= self.total {
            self.encoder.close(&self.seqs, &mut out);
            if let Some(guard) = self.guard.take() {
                guard.complete(self.usage.0, self.usage.1);
            }
            return Some(Ok(out.into()));
        }
        let first = !self.started;
        let end = self.chunk_end();
        if first {
            self.prefill().await;
        } else {
            self.pace(end - self.pos).await;
        }
        if let Some(guard) = self.guard.as_mut() {
            guard.generated(produced(&self.seqs, self.pos, end));
        }
        if first {
            self.started = true;
            self.encoder.open(&self.seqs, &mut out);
        }
        for i in 0..self.seqs.len() {
            let len = self.seqs[i].len();
            // An empty sequence (max_new_tokens 0) still sends one event with its finish reason.
            if self.pos < len || (first && len == 0) {
                self.encoder
                    .tokens(&self.seqs, i, self.pos, end.min(len), &mut out);
            }
        }
        self.pos = end;
        Some(Ok(out.into()))
    }

    /// Where the next chunk ends: a full chunk, cut short at a hold or failure point so the
    /// client has received exactly that many tokens when the stream pauses or fails.
    fn chunk_end(&self) -> usize {
        let mut end = (self.pos + self.chunk).min(self.total);
        let hold = self.state.hold_limit().map(|k| k as usize);
        for limit in [hold, self.fail.map(|(k, _)| k as usize)]
            .into_iter()
            .flatten()
        {
            if limit > self.pos {
                end = end.min(limit);
            }
        }
        end
    }

    /// Waits for a running permit and the prefill; later chunks are paced from the first.
    async fn prefill(&mut self) {
        let Some(guard) = self.guard.as_mut() else {
            return;
        };
        let delay = guard.start().await;
        let queued = guard.queued();
        if let Some(deadline) = &mut self.deadline {
            // From the arrival, plus any time spent queued (not caught up on later).
            let now = std::time::Instant::now();
            let from = self.arrived.map_or(now, |a| a.min(now)) + queued;
            let due = from + delay;
            *deadline = due.into();
            if due > now {
                super::clock::sleep_until(due).await;
            }
            // The next write on the connection is the first token's.
            if let Some(stamps) = &self.stamps {
                stamps.arm_send();
                self.first_due = Some(due);
            }
        }
        if let Some(guard) = self.guard.as_mut() {
            guard.first_token();
        }
    }

    /// Record how late the first token was written, once its write is seen (the server
    /// writes a chunk after the stream gave it, so it is looked for at the next chunk, and as
    /// the stream ends).
    fn first_written(&mut self) {
        let (Some(due), Some(stamps)) = (self.first_due, &self.stamps) else {
            return;
        };
        if let Some(sent) = stamps.sent() {
            self.state.late.record(sent.saturating_duration_since(due));
            self.first_due = None;
        }
    }

    async fn pace(&mut self, tokens: usize) {
        let Some(deadline) = &mut self.deadline else {
            return;
        };
        let delay = self
            .itl
            .saturating_mul(u32::try_from(tokens).unwrap_or(u32::MAX));
        if delay > Duration::ZERO {
            *deadline += delay;
            tokio::time::sleep_until(*deadline).await;
        }
    }

    async fn fail_now(&mut self, mode: FailMode) -> Option<Result<Bytes, std::io::Error>> {
        match mode {
            FailMode::Stall => {
                // The guard stays with the driver: the client closing drops it, an abort.
                std::future::pending::<()>().await;
                return None;
            }
            FailMode::Malformed => {
                self.fail = None;
                let mut out = Vec::new();
                self.encoder.malformed(&mut out);
                return Some(Ok(out.into()));
            }
            FailMode::ErrorEvent | FailMode::Abort => {}
        }
        if let Some(guard) = self.guard.take() {
            guard.fail();
        }
        if mode == FailMode::ErrorEvent {
            let mut out = Vec::new();
            self.encoder
                .error("mock: injected stream failure", &mut out);
            return Some(Ok(out.into()));
        }
        // Pending once so hyper flushes the headers and tokens it holds: a server that dies
        // mid-stream has sent those. Then the error makes hyper cut the connection without the
        // chunked terminator.
        tokio::task::yield_now().await;
        Some(Err(std::io::Error::other("mock: injected stream abort")))
    }
}
