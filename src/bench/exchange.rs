//! One request against the server and its measurement: send, then read the stream through
//! the dialect's own framing and decoder (or decode the whole answer), bounded by the timeout.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use http_body_util::BodyExt;

use super::measure::{failed, Meter};
use super::report::{ErrorKind, RequestResult};
use crate::dialect::Dialect;
use crate::error::ProxyError;
use crate::stream::framing::FrameParser;
use crate::upstream::{Client, UpstreamResponse};

/// Everything needed to send one request; shared by all workers of a run.
pub struct Target {
    /// 0 for the run's `url` (A), 1 for `vs_url` (B).
    pub index: usize,
    pub client: Client,
    pub dialect: Dialect,
    pub stream: bool,
    /// The requested output length: sizes the per-request ITL buffer once.
    pub output_len: u32,
    pub timeout: Duration,
    /// Keep each answer's text in its result (a multi-turn run's histories need it).
    pub keep_answers: bool,
}

impl Target {
    /// Send `body` now and measure the answer, with latencies from `t0` (the request's
    /// scheduled time, which may be earlier than now); the timeout runs from now. Never
    /// panics: every failure is a failed result.
    pub async fn send(&self, body: Bytes, session: Option<&str>, t0: Instant) -> RequestResult {
        let headers: Vec<(HeaderName, HeaderValue)> = session
            .and_then(|s| HeaderValue::from_str(s).ok())
            .map(|v| (HeaderName::from_static("x-session-id"), v))
            .into_iter()
            .collect();
        match tokio::time::timeout(self.timeout, self.exchange(body, &headers, t0)).await {
            Ok(result) => result,
            Err(_) => failed(
                ErrorKind::Timeout,
                format!(
                    "timed out after {}",
                    humantime::format_duration(self.timeout)
                ),
                t0.elapsed(),
            ),
        }
    }

    async fn exchange(
        &self,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
        t0: Instant,
    ) -> RequestResult {
        let path = self.dialect.request_path(self.stream);
        let resp = match self.client.post_json(path, body, headers).await {
            Ok(resp) => resp,
            Err(e) => {
                let kind = match e {
                    ProxyError::Timeout(_) => ErrorKind::Timeout,
                    _ => ErrorKind::Connect,
                };
                return failed(kind, e.to_string(), t0.elapsed());
            }
        };
        if !resp.status.is_success() {
            let status = resp.status;
            let message = match resp.bytes().await {
                Ok(b) => self.dialect.decode_error(&b),
                Err(e) => e.to_string(),
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
            self.read_stream(resp, t0).await
        } else {
            self.read_whole(resp, t0).await
        }
    }

    /// Decode the stream as it arrives. Every event of one body frame gets that frame's
    /// arrival time: the bytes could not have been seen earlier.
    async fn read_stream(&self, resp: UpstreamResponse, t0: Instant) -> RequestResult {
        let mut meter = Meter::new(t0, self.output_len);
        if self.keep_answers {
            meter = meter.keep_answer();
        }
        let mut parser = FrameParser::new(self.dialect.framing());
        let mut decoder = self.dialect.stream_decoder();
        let mut frames = Vec::new();
        let mut events = Vec::new();
        let mut body = resp.body;
        loop {
            let next = body.frame().await;
            let at = Instant::now();
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
    async fn read_whole(&self, resp: UpstreamResponse, t0: Instant) -> RequestResult {
        let header_usage = self.dialect.usage_from_headers(&resp.headers);
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => return failed(ErrorKind::Read, e.to_string(), t0.elapsed()),
        };
        let e2e = t0.elapsed();
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
            ..RequestResult::default()
        }
    }
}
