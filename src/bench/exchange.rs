//! One request against the server and its measurement: send, then read the stream through
//! the dialect's own framing and decoder (or decode the whole answer), bounded by the timeout.
//!
//! On a plain `http://` target the request goes over the driver's own connection
//! (`conn::Direct`): latencies run from the moment its first byte was written and every
//! chunk is timed by the kernel's receive stamp of its bytes, so the driver's own queueing
//! stays out of the figures (and is reported as the read lag). Elsewhere the pooled client
//! is used and chunks are timed when read.

use std::time::{Duration, Instant};

use crate::upstream::UpstreamBody;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use http_body_util::BodyExt;

use super::conn::{Conn, Direct};
use super::measure::{failed, Meter};
use super::report::{ErrorKind, RequestResult};
use crate::config::Limits;
use crate::dialect::Dialect;
use crate::error::ProxyError;
use crate::netstamp::Stamps;
use crate::stream::framing::FrameParser;
use crate::upstream::Client;

/// Everything needed to send one request; shared by all workers of a run.
pub struct Target {
    /// 0 for the run's `url` (A), 1 for `vs_url` (B).
    pub index: usize,
    pub client: Client,
    /// The driver's own connections, for a plain `http://` url.
    pub direct: Option<Direct>,
    pub dialect: Dialect,
    pub stream: bool,
    /// The requested output length: sizes the per-request ITL buffer once.
    pub output_len: u32,
    pub timeout: Duration,
    /// Keep each answer's text in its result (a multi-turn run's histories need it).
    pub keep_answers: bool,
}

/// An attempt on a reused connection failed before any answer: the server had closed it
/// while idle.
struct Stale;

impl Target {
    /// Send `body` now and measure the answer, with latencies from `due` (the request's
    /// scheduled time, which may be earlier than now) or, without one, from the moment the
    /// request was sent; the timeout runs from now. Returns the result and when the request
    /// was sent. Never panics: every failure is a failed result.
    pub async fn send(
        &self,
        body: Bytes,
        session: Option<&str>,
        due: Option<Instant>,
    ) -> (RequestResult, Instant) {
        let headers: Vec<(HeaderName, HeaderValue)> = session
            .and_then(|s| HeaderValue::from_str(s).ok())
            .map(|v| (HeaderName::from_static("x-session-id"), v))
            .into_iter()
            .collect();
        let start = Instant::now();
        match tokio::time::timeout(self.timeout, self.exchange(body, &headers, due, start)).await {
            Ok(done) => done,
            Err(_) => {
                let message = format!(
                    "timed out after {}",
                    humantime::format_duration(self.timeout)
                );
                let t0 = due.unwrap_or(start);
                (failed(ErrorKind::Timeout, message, t0.elapsed()), start)
            }
        }
    }

    /// Open connections until `n` are idle (a no-op on the pooled client).
    pub async fn open(&self, n: usize) {
        if let Some(direct) = &self.direct {
            direct.open(n).await;
        }
    }

    async fn exchange(
        &self,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
        due: Option<Instant>,
        start: Instant,
    ) -> (RequestResult, Instant) {
        let path = self.dialect.request_path(self.stream);
        let Some(direct) = &self.direct else {
            let t0 = due.unwrap_or(start);
            let r = match self.client.post_json(path, body, headers).await {
                Ok(resp) => {
                    let status = resp.status;
                    self.answer(status, &resp.headers, resp.body, t0, None)
                        .await
                }
                Err(e) => {
                    let kind = match e {
                        ProxyError::Timeout(_) => ErrorKind::Timeout,
                        _ => ErrorKind::Connect,
                    };
                    failed(kind, e.to_string(), t0.elapsed())
                }
            };
            return (r, start);
        };
        let t0 = due.unwrap_or(start);
        let fail = |e: std::io::Error| {
            let kind = match e.kind() {
                std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
                _ => ErrorKind::Connect,
            };
            let message = format!("connecting to {}: {e}", self.client.base());
            (failed(kind, message, t0.elapsed()), start)
        };
        let conn = match direct.checkout().await {
            Ok(conn) => conn,
            Err(e) => return fail(e),
        };
        let attempt = self
            .on(direct, conn, path, body.clone(), headers, due, start)
            .await;
        if let Ok(answered) = attempt {
            return answered;
        }
        // The server closed that idle connection; it never saw the request: once more, on a
        // new one.
        let conn = match direct.connect().await {
            Ok(conn) => conn,
            Err(e) => return fail(e),
        };
        match self.on(direct, conn, path, body, headers, due, start).await {
            Ok(answered) => answered,
            Err(Stale) => {
                let message = format!(
                    "{} closed the connection before answering",
                    self.client.base()
                );
                (failed(ErrorKind::Connect, message, t0.elapsed()), start)
            }
        }
    }

    /// One attempt on `conn`, driving it from this task; the connection goes back to the idle
    /// set after a clean answer.
    #[allow(clippy::too_many_arguments)]
    async fn on(
        &self,
        direct: &Direct,
        mut conn: Conn,
        path: &str,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
        due: Option<Instant>,
        start: Instant,
    ) -> Result<(RequestResult, Instant), Stale> {
        let req = match direct.post(path, body, headers) {
            Ok(req) => req,
            Err(e) => {
                let r = failed(ErrorKind::Build, e.to_string(), Duration::ZERO);
                return Ok((r, start));
            }
        };
        let reused = conn.reused;
        let stamps = conn.stamps.clone();
        let send = &mut conn.send;
        let work = async {
            send.ready().await?;
            stamps.arm_send();
            let resp = send.send_request(req).await?;
            let sent = stamps.sent().unwrap_or(start);
            let (parts, body) = resp.into_parts();
            let t0 = due.unwrap_or(sent);
            let r = self
                .answer(
                    parts.status,
                    &parts.headers,
                    UpstreamBody::Hyper(body),
                    t0,
                    Some(&stamps),
                )
                .await;
            Ok::<_, hyper::Error>((r, sent))
        };
        let out = Conn::drive(&mut conn.driver, &mut conn.ended, work).await;
        match out {
            Ok((r, sent)) => {
                if r.ok {
                    direct.checkin(conn);
                }
                Ok((r, sent))
            }
            Err(_) if reused => Err(Stale),
            Err(e) => {
                let t0 = due.unwrap_or(start);
                let message = format!("sending the request to {}: {e}", self.client.base());
                Ok((failed(ErrorKind::Connect, message, t0.elapsed()), start))
            }
        }
    }

    /// The answer, from its status on: an error, a stream or a whole answer.
    async fn answer(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        body: UpstreamBody,
        t0: Instant,
        stamps: Option<&Stamps>,
    ) -> RequestResult {
        if !status.is_success() {
            let path = self.dialect.request_path(self.stream);
            let limit = Limits::default().max_upstream_error_body;
            let message = match read_all(body, limit).await {
                Ok(b) => self.dialect.decode_error(&b),
                Err(e) => e,
            };
            // An empty error body (a 404 for an endpoint the server lacks) says nothing:
            // name the endpoint instead.
            let text = match message.trim() {
                "" => format!("HTTP {} from POST {path}", status.as_u16()),
                m => format!("HTTP {}: {m}", status.as_u16()),
            };
            return failed(ErrorKind::Http(status.as_u16()), text, t0.elapsed());
        }
        if self.stream {
            self.read_stream(body, t0, stamps).await
        } else {
            self.read_whole(headers, body, t0, stamps).await
        }
    }

    /// Decode the stream as it arrives. Every event of one body frame gets that frame's
    /// arrival time: the kernel's stamp of the bytes read last (where there is one), else the
    /// moment the frame was read.
    async fn read_stream(
        &self,
        mut body: UpstreamBody,
        t0: Instant,
        stamps: Option<&Stamps>,
    ) -> RequestResult {
        let mut meter = Meter::new(t0, self.output_len);
        if self.keep_answers {
            meter = meter.keep_answer();
        }
        let mut parser = FrameParser::new(self.dialect.framing());
        let mut decoder = self.dialect.stream_decoder();
        let mut frames = Vec::new();
        let mut events = Vec::new();
        loop {
            let next = body.frame().await;
            let at = arrival(stamps, &mut meter);
            let end = match next {
                None => {
                    parser.finish(&mut frames);
                    true
                }
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        parser.feed(data, &mut frames);
                    }
                    false
                }
                Some(Err(e)) => {
                    return failed(
                        ErrorKind::Read,
                        format!("reading the stream: {e}"),
                        at.duration_since(t0),
                    )
                }
            };
            for frame in frames.drain(..) {
                if let Err(e) = decoder.frame(&frame, &mut events) {
                    return failed(ErrorKind::Decode, e.to_string(), at.duration_since(t0));
                }
                for ev in events.drain(..) {
                    meter.event(&ev, at);
                }
            }
            if end {
                decoder.close(&mut events);
                for ev in events.drain(..) {
                    meter.event(&ev, at);
                }
            }
            if end || meter.failed() {
                return meter.finish(at);
            }
        }
    }

    /// A whole answer: TTFT is E2E; tokens from the response's usage.
    async fn read_whole(
        &self,
        headers: &HeaderMap,
        body: UpstreamBody,
        t0: Instant,
        stamps: Option<&Stamps>,
    ) -> RequestResult {
        let header_usage = self.dialect.usage_from_headers(headers);
        let bytes = match read_all(body, Limits::default().max_upstream_body).await {
            Ok(b) => b,
            Err(e) => return failed(ErrorKind::Read, e, t0.elapsed()),
        };
        let mut lag = Meter::new(t0, 0);
        let e2e = arrival(stamps, &mut lag).saturating_duration_since(t0);
        let (read_lag, end_lag) = (lag.read_lag(), lag.end_lag());
        let mut r = match self.dialect.decode_response(&bytes) {
            Ok(r) => r,
            Err(e) => return failed(ErrorKind::Decode, e.to_string(), e2e),
        };
        let Some(first) = r.choices.first() else {
            return failed(ErrorKind::Decode, "the response has no choices".into(), e2e);
        };
        if let Some(crate::model::Finish::Abort(msg)) = &first.finish {
            return failed(
                ErrorKind::Abort,
                format!("aborted by the server: {msg}"),
                e2e,
            );
        }
        let answer = self.keep_answers.then(|| first.text.clone());
        if r.usage.is_none() {
            r.usage = header_usage;
        }
        let reported = r.usage.is_some() || r.choices.iter().any(|c| c.usage.is_some());
        r.fill_usage(1);
        let usage = r.usage.unwrap_or_default();
        let output_tokens = if reported {
            usage.completion_tokens
        } else {
            r.choices
                .iter()
                .filter_map(|c| c.token_ids.as_ref())
                .map(|ids| ids.len() as u64)
                .sum()
        };
        RequestResult {
            ok: true,
            ttft: Some(e2e),
            e2e,
            output_tokens,
            prompt_tokens: usage.prompt_tokens,
            estimated: !reported,
            answer,
            read_lag,
            end_lag,
            ..RequestResult::default()
        }
    }
}

/// When the bytes just read arrived: the kernel's stamp where there is one (the driver's lag
/// behind it goes to `meter`), else now.
fn arrival(stamps: Option<&Stamps>, meter: &mut Meter) -> Instant {
    let now = Instant::now();
    match stamps.and_then(Stamps::received) {
        Some(rx) => {
            let rx = rx.min(now);
            meter.lagged(now - rx);
            rx
        }
        None => now,
    }
}

/// The whole body, at most `limit` bytes: an error past it, or when the body breaks off.
async fn read_all(mut body: UpstreamBody, limit: usize) -> Result<Bytes, String> {
    let mut out = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the answer: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(format!("the answer is larger than {limit} bytes"));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}
