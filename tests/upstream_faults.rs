//! Upstream faults over sockets: every phase's timer, streams that break or carry an event
//! lingo cannot decode, oversized bodies and events, and the end of the shutdown grace.
//! Each test checks what the client gets (status, or the dialect's in-band error and end),
//! that the upstream connection was closed, and that the request was counted once, with
//! the right outcome and error kind.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    config_for, eventually, lingo, lingo_app, mock_with, post_json, scrape, sse_events, sum,
};
use lingo::config::Config;
use lingo::metrics::Metrics;
use lingo::mock::{MockConfig, MockKind};
use lingo::proxy::AppState;
use lingo::upstream::KindSetting;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(60);

/// What the fake upstream does once it has read a request.
#[derive(Clone)]
enum Act {
    /// Never answer.
    Hang,
    /// Write these bytes, then wait for lingo to close the connection.
    Send(Vec<u8>),
    /// Write these bytes, then close the connection.
    SendClose(Vec<u8>),
}

/// A raw-TCP upstream that plays one `Act` on every connection and counts the connections
/// lingo closed while the fake still held them (what a server sees as an abort).
struct Fake {
    url: String,
    closed: Arc<AtomicUsize>,
    /// Connections on which the fake has written all it had to.
    sent: Arc<AtomicUsize>,
}

async fn fake(act: Act) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let closed = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let counters = (closed.clone(), sent.clone());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(play(socket, act.clone(), counters.clone()));
        }
    });
    Fake { url, closed, sent }
}

async fn play(mut s: TcpStream, act: Act, (closed, sent): (Arc<AtomicUsize>, Arc<AtomicUsize>)) {
    read_request(&mut s).await;
    match act {
        Act::Hang => {}
        Act::Send(bytes) => {
            if s.write_all(&bytes).await.is_err() {
                closed.fetch_add(1, Ordering::SeqCst);
                return;
            }
            sent.fetch_add(1, Ordering::SeqCst);
        }
        Act::SendClose(bytes) => {
            let _ = s.write_all(&bytes).await;
            return;
        }
    }
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
    closed.fetch_add(1, Ordering::SeqCst);
}

/// Read one request: headers, then `content-length` bytes of body.
async fn read_request(s: &mut TcpStream) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let Ok(n) = s.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while got.len() < head_end + len {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn sse_head() -> String {
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        .to_string()
}

/// One HTTP chunk holding one SSE event.
fn event(data: &str) -> String {
    let e = format!("data: {data}\n\n");
    format!("{:x}\r\n{e}\r\n", e.len())
}

/// A vLLM completions stream chunk.
fn token(text: &str, finish: Option<&str>) -> String {
    json!({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}]})
    .to_string()
}

/// A mock serving model `m` whose streams stop after `tokens` tokens, holding the connection.
async fn held(kind: MockKind, tokens: u32) -> common::Mock {
    let mock = mock_with(MockConfig {
        kind,
        model: "m".into(),
        ..MockConfig::default()
    })
    .await;
    mock.state.hold_after(tokens);
    mock
}

fn config(url: &str, kind: KindSetting) -> Config {
    let mut c = config_for(url, kind);
    c.upstream.model = Some("m".into());
    c.timeouts.first_token = LONG;
    c.timeouts.response_headers = LONG;
    c.timeouts.stream_idle = LONG;
    c
}

fn completions(stream: bool) -> Value {
    json!({"model": "m", "prompt": "hello", "max_tokens": 8, "stream": stream})
}

fn sglang(stream: bool) -> Value {
    json!({"text": "hello", "stream": stream, "sampling_params": {"max_new_tokens": 8}})
}

/// The request was counted exactly once, with this outcome and (if any) error kind, and
/// nothing is left in flight.
async fn counted_once(base: &str, outcome: &str, kind: Option<&str>) -> String {
    let text = scrape(base).await;
    assert_eq!(sum(&text, "lingo_requests_total", &[]), 1.0, "{text}");
    let with = sum(&text, "lingo_requests_total", &[("outcome", outcome)]);
    assert_eq!(with, 1.0, "outcome {outcome}: {text}");
    if let Some(kind) = kind {
        assert_eq!(
            sum(&text, "lingo_errors_total", &[("kind", kind)]),
            1.0,
            "{text}"
        );
    }
    assert_eq!(sum(&text, "lingo_requests_in_flight", &[]), 0.0, "{text}");
    text
}

/// The last two SSE events are an error naming `what`, then `[DONE]`.
fn ends_with_error(events: &[Value], what: &str) {
    let n = events.len();
    assert!(n >= 2, "{events:?}");
    assert_eq!(events[n - 1], Value::String("[DONE]".into()), "{events:?}");
    let message = events[n - 2]["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains(what), "{events:?}");
}

#[tokio::test]
async fn no_headers_within_first_token_is_a_504_and_the_connection_closes() {
    let up = fake(Act::Hang).await;
    let mut cfg = config(&up.url, KindSetting::Vllm);
    cfg.timeouts.first_token = SHORT;
    let base = lingo_app(cfg).await;
    let r = post_json(&format!("{base}/v1/completions"), &completions(true)).await;
    assert_eq!(r.status(), 504);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("first_token"),
        "{v}"
    );
    assert!(eventually(|| up.closed.load(Ordering::SeqCst) == 1).await);
    counted_once(&base, "timeout", Some("timeout_first_token")).await;
}

#[tokio::test]
async fn headers_then_silence_is_a_first_token_error_in_band_translated_to_sglang() {
    let mock = held(MockKind::Vllm, 0).await;
    let mut cfg = config(&mock.url(), KindSetting::Vllm);
    cfg.timeouts.first_token = SHORT;
    let base = lingo(cfg).await;
    let r = post_json(&format!("{base}/generate"), &sglang(true)).await;
    assert_eq!(r.status(), 200);
    let events = sse_events(&r.text().await.unwrap());
    ends_with_error(&events, "first_token");
    assert!(eventually(|| mock.state.stats().aborted == 1).await);
    counted_once(&base, "timeout", Some("timeout_first_token")).await;
}

#[tokio::test]
async fn a_stall_mid_stream_ends_openai_passthrough_with_the_error_and_done() {
    let mock = held(MockKind::Vllm, 2).await;
    let mut cfg = config(&mock.url(), KindSetting::Vllm);
    cfg.timeouts.stream_idle = SHORT;
    let base = lingo(cfg).await;
    let r = post_json(&format!("{base}/v1/completions"), &completions(true)).await;
    assert_eq!(r.status(), 200);
    let events = sse_events(&r.text().await.unwrap());
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["text"].as_str())
        .collect();
    assert!(
        !text.is_empty(),
        "the tokens before the stall arrive: {events:?}"
    );
    ends_with_error(&events, "stream_idle");
    assert!(eventually(|| mock.state.stats().aborted == 1).await);
    counted_once(&base, "timeout", Some("timeout_stream_idle")).await;
}

#[tokio::test]
async fn a_stall_mid_stream_ends_ollama_passthrough_with_its_error_line() {
    let mock = held(MockKind::Ollama, 2).await;
    let mut cfg = config(&mock.url(), KindSetting::Ollama);
    cfg.timeouts.stream_idle = SHORT;
    let base = lingo(cfg).await;
    let body = json!({"model": "m", "prompt": "hello", "options": {"num_predict": 8}});
    let r = post_json(&format!("{base}/api/generate"), &body).await;
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 2, "{body}");
    let last = &lines[lines.len() - 1];
    assert!(
        last["error"].as_str().unwrap().contains("stream_idle"),
        "{body}"
    );
    assert!(lines.iter().all(|l| l["done"] != true), "{body}");
    assert!(eventually(|| mock.state.stats().aborted == 1).await);
    counted_once(&base, "timeout", Some("timeout_stream_idle")).await;
}

#[tokio::test]
async fn a_whole_answer_that_stops_halfway_is_a_504() {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n";
    let up = fake(Act::Send(format!("{head}{{\"id\":").into_bytes())).await;
    let mut cfg = config(&up.url, KindSetting::Vllm);
    cfg.timeouts.stream_idle = SHORT;
    let base = lingo_app(cfg).await;
    let r = post_json(&format!("{base}/v1/completions"), &completions(false)).await;
    assert_eq!(r.status(), 504);
    assert!(eventually(|| up.closed.load(Ordering::SeqCst) == 1).await);
    counted_once(&base, "timeout", Some("timeout_stream_idle")).await;
    // Translated too, in SGLang's error shape.
    let base = lingo(config_with_idle(&up.url)).await;
    let r = post_json(&format!("{base}/generate"), &sglang(false)).await;
    assert_eq!(r.status(), 504);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream_idle"),
        "{v}"
    );
    counted_once(&base, "timeout", Some("timeout_stream_idle")).await;
}

fn config_with_idle(url: &str) -> Config {
    let mut cfg = config(url, KindSetting::Vllm);
    cfg.timeouts.stream_idle = SHORT;
    cfg
}

#[tokio::test]
async fn total_bounds_a_slow_stream() {
    let mock = mock_with(MockConfig {
        kind: MockKind::Vllm,
        model: "m".into(),
        itl: Duration::from_millis(100),
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&mock.url(), KindSetting::Vllm);
    cfg.timeouts.total = Some(Duration::from_millis(250));
    let base = lingo(cfg).await;
    let body = json!({"model": "m", "prompt": "hello", "max_tokens": 100, "stream": true,
                      "ignore_eos": true});
    let r = post_json(&format!("{base}/v1/completions"), &body).await;
    let events = sse_events(&r.text().await.unwrap());
    ends_with_error(&events, "total");
    assert!(eventually(|| mock.state.stats().aborted == 1).await);
    counted_once(&base, "timeout", Some("timeout_total")).await;
}

#[tokio::test]
async fn a_stream_closed_mid_way_gets_the_error_and_done_in_passthrough() {
    let bytes = format!("{}{}", sse_head(), event(&token("a", None)));
    let up = fake(Act::SendClose(bytes.into_bytes())).await;
    let base = lingo(config(&up.url, KindSetting::Vllm)).await;
    let r = post_json(&format!("{base}/v1/completions"), &completions(true)).await;
    assert_eq!(r.status(), 200);
    let events = sse_events(&r.text().await.unwrap());
    assert_eq!(events[0]["choices"][0]["text"], "a", "{events:?}");
    ends_with_error(&events, "");
    counted_once(&base, "upstream_error", Some("upstream_closed")).await;
}

#[tokio::test]
async fn an_undecodable_event_is_forwarded_and_the_rest_of_the_stream_too() {
    let bytes = [
        sse_head(),
        event(&token("a", None)),
        event("{not json"),
        event(&token("b", Some("length"))),
        event("[DONE]"),
        "0\r\n\r\n".into(),
    ]
    .concat();
    let up = fake(Act::Send(bytes.into_bytes())).await;
    let base = lingo(config(&up.url, KindSetting::Vllm)).await;
    // With usage asked for, the bytes go through untouched (`Output::Raw`); without, event by
    // event (`Output::Reframe`): both forward the bad event and everything after it.
    for options in [json!({"include_usage": true}), Value::Null] {
        let mut body = completions(true);
        if !options.is_null() {
            body["stream_options"] = options;
        }
        let r = post_json(&format!("{base}/v1/completions"), &body).await;
        let text = r.text().await.unwrap();
        assert!(text.contains("data: {not json\n\n"), "{text}");
        let events = sse_events(&text);
        assert_eq!(events.len(), 4, "{text}");
        assert_eq!(events[2]["choices"][0]["text"], "b");
        assert_eq!(events[3], Value::String("[DONE]".into()));
    }
    let text = scrape(&base).await;
    assert_eq!(
        sum(&text, "lingo_requests_total", &[("outcome", "ok")]),
        2.0,
        "{text}"
    );
    assert_eq!(
        sum(&text, "lingo_stream_decode_errors_total", &[]),
        2.0,
        "{text}"
    );
    assert_eq!(
        sum(&text, "lingo_estimated_token_requests_total", &[]),
        2.0,
        "{text}"
    );
}

#[tokio::test]
async fn an_undecodable_event_still_fails_a_translated_stream() {
    let bytes = [sse_head(), event(&token("a", None)), event("{not json")].concat();
    let up = fake(Act::Send(bytes.into_bytes())).await;
    let base = lingo_app(config(&up.url, KindSetting::Vllm)).await;
    let r = post_json(&format!("{base}/generate"), &sglang(true)).await;
    let events = sse_events(&r.text().await.unwrap());
    ends_with_error(&events, "");
    assert!(eventually(|| up.closed.load(Ordering::SeqCst) == 1).await);
    counted_once(&base, "upstream_error", None).await;
}

#[tokio::test]
async fn an_oversized_event_fails_the_stream_without_buffering_it() {
    let huge = "x".repeat(256 << 10);
    let bytes = [sse_head(), event(&token("a", None)), event(&huge)].concat();
    let up = fake(Act::Send(bytes.into_bytes())).await;
    let mut cfg = config(&up.url, KindSetting::Vllm);
    cfg.limits.max_stream_event = 64 << 10;
    let base = lingo_app(cfg).await;
    let body = json!({"model": "m", "prompt": "hello", "max_tokens": 8, "stream": true,
                      "stream_options": {"include_usage": true}});
    let r = post_json(&format!("{base}/v1/completions"), &body).await;
    let events = sse_events(&r.text().await.unwrap());
    ends_with_error(&events, "max_stream_event");
    assert!(eventually(|| up.closed.load(Ordering::SeqCst) == 1).await);
    counted_once(&base, "upstream_error", Some("upstream_protocol")).await;
}

/// A 400 whose body is `bytes` long.
fn huge_error(bytes: usize) -> Vec<u8> {
    let filler = "e".repeat(bytes - 30);
    let body = format!("{{\"error\":{{\"message\":\"{filler}\"}}}}");
    let head = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    [head.into_bytes(), body.into_bytes()].concat()
}

#[tokio::test]
async fn a_huge_error_body_is_cut_and_says_so() {
    let up = fake(Act::Send(huge_error(4 << 20))).await;
    let mut cfg = config(&up.url, KindSetting::Vllm);
    cfg.limits.max_upstream_error_body = 64 << 10;
    let base = lingo_app(cfg.clone()).await;
    // Passthrough: the upstream's bytes, up to the limit, then the note.
    let r = post_json(&format!("{base}/v1/completions"), &completions(false)).await;
    assert_eq!(r.status(), 400);
    let body = r.text().await.unwrap();
    assert!(body.len() < (64 << 10) + 100, "{}", body.len());
    assert!(
        body.ends_with("[cut at 65536 bytes]"),
        "{}",
        &body[body.len() - 60..]
    );
    counted_once(&base, "client_error", Some("upstream_status")).await;
    // Translated: the message carries the note.
    let base = lingo_app(cfg).await;
    let r = post_json(&format!("{base}/generate"), &sglang(true)).await;
    assert_eq!(r.status(), 400);
    let body = r.text().await.unwrap();
    assert!(body.len() < (64 << 10) + 200, "{}", body.len());
    assert!(
        body.contains("[cut at 65536 bytes]"),
        "{}",
        &body[body.len() - 80..]
    );
    assert!(eventually(|| up.closed.load(Ordering::SeqCst) == 2).await);
}

#[tokio::test]
async fn a_whole_answer_over_the_limit_is_a_502_naming_it() {
    let body = format!("{{\"id\":\"{}\"}}", "x".repeat(100 << 10));
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let up = fake(Act::Send(format!("{head}{body}").into_bytes())).await;
    let mut cfg = config(&up.url, KindSetting::Vllm);
    cfg.limits.max_upstream_body = 16 << 10;
    let base = lingo(cfg).await;
    let r = post_json(&format!("{base}/v1/completions"), &completions(false)).await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_upstream_body"),
        "{v}"
    );
    counted_once(&base, "upstream_error", Some("upstream_protocol")).await;
}

/// lingo over a state the test holds, to end the shutdown grace.
async fn lingo_with_state(config: Config) -> (String, Arc<AppState>) {
    let state = Arc::new(AppState::new(config, Arc::new(Metrics::new())));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = lingo::proxy::router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), state)
}

#[tokio::test]
async fn the_end_of_the_grace_ends_open_streams_in_band_and_whole_answers_with_503() {
    let mock = held(MockKind::Vllm, 2).await;
    let (base, state) = lingo_with_state(config(&mock.url(), KindSetting::Vllm)).await;
    let mut r = post_json(&format!("{base}/v1/completions"), &completions(true)).await;
    let first = r.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty());
    state.drain.start();
    state.drain.expire();
    let mut rest = String::from_utf8(first.to_vec()).unwrap();
    while let Some(c) = r.chunk().await.unwrap() {
        rest.push_str(std::str::from_utf8(&c).unwrap());
    }
    ends_with_error(&sse_events(&rest), "shutting down");
    assert!(eventually(|| mock.state.stats().aborted == 1).await);
    counted_once(&base, "upstream_error", Some("shutting_down")).await;

    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n";
    let up = fake(Act::Send(format!("{head}{{\"id\":").into_bytes())).await;
    let (base, state) = lingo_with_state(config(&up.url, KindSetting::Vllm)).await;
    let req = tokio::spawn(post_json_owned(format!("{base}/v1/completions")));
    // Whether lingo is still waiting for the headers or already reading the body when the
    // grace ends, the answer is the same.
    assert!(eventually(|| up.sent.load(Ordering::SeqCst) == 1).await);
    state.drain.start();
    state.drain.expire();
    let r = req.await.unwrap();
    assert_eq!(r.status(), 503);
    counted_once(&base, "upstream_error", Some("shutting_down")).await;
}

async fn post_json_owned(url: String) -> reqwest::Response {
    post_json(&url, &completions(false)).await
}

/// The three ways a fault reaches a client in the table below.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Way {
    /// OpenAI completions passed through to vLLM.
    OpenaiOnVllm,
    /// SGLang's `/generate` translated to vLLM's completions.
    SglangOnVllm,
    /// Ollama's `/api/generate` passed through to Ollama (NDJSON).
    OllamaOnOllama,
}

impl Way {
    fn mock(self) -> MockKind {
        match self {
            Way::OllamaOnOllama => MockKind::Ollama,
            _ => MockKind::Vllm,
        }
    }

    fn kind(self) -> KindSetting {
        match self {
            Way::OllamaOnOllama => KindSetting::Ollama,
            _ => KindSetting::Vllm,
        }
    }

    fn request(self, mode: &str) -> (&'static str, Value) {
        let prompt = format!("hello lingo-fault:{mode}");
        match self {
            Way::OpenaiOnVllm => (
                "/v1/completions",
                json!({"model": "m", "prompt": prompt, "max_tokens": 16, "stream": true}),
            ),
            Way::SglangOnVllm => (
                "/generate",
                json!({"text": prompt, "stream": true, "sampling_params": {"max_new_tokens": 16}}),
            ),
            Way::OllamaOnOllama => (
                "/api/generate",
                json!({"model": "m", "prompt": prompt, "options": {"num_predict": 16}}),
            ),
        }
    }

    /// The stream's in-band error message, if it ends with one (and its end marker).
    fn in_band_error(self, body: &str) -> Option<String> {
        if self == Way::OllamaOnOllama {
            let last: Value = serde_json::from_str(body.lines().last()?).ok()?;
            return last["error"].as_str().map(str::to_string);
        }
        let events = sse_events(body);
        let n = events.len();
        if n < 2 || events[n - 1] != Value::String("[DONE]".into()) {
            return None;
        }
        events[n - 2]["error"]["message"]
            .as_str()
            .map(str::to_string)
    }

    /// Whether the stream ended as a complete one.
    fn complete(self, body: &str) -> bool {
        match self {
            Way::OllamaOnOllama => body
                .lines()
                .last()
                .and_then(|l| serde_json::from_str::<Value>(l).ok())
                .is_some_and(|v| v["done"] == true),
            _ => sse_events(body).last() == Some(&Value::String("[DONE]".into())),
        }
    }
}

/// What a fault must come to.
enum Expect {
    /// This status, outcome and error kind before any output.
    Status(u16, &'static str, &'static str),
    /// 200, then the in-band error naming `.0`, with this outcome and error kind.
    InBand(&'static str, &'static str, &'static str),
    /// A complete stream, the bad event counted as a decode error.
    Forwarded,
}

#[tokio::test]
async fn every_mock_fault_through_every_way() {
    use Expect::*;
    let ways = [Way::OpenaiOnVllm, Way::SglangOnVllm, Way::OllamaOnOllama];
    for way in ways {
        let passthrough = way != Way::SglangOnVllm;
        let malformed = if passthrough {
            Forwarded
        } else {
            InBand("", "upstream_error", "upstream_protocol")
        };
        let table = [
            (
                "hang-before-headers",
                Status(504, "timeout", "timeout_first_token"),
            ),
            (
                "hang-after-headers",
                InBand("first_token", "timeout", "timeout_first_token"),
            ),
            (
                "stall-mid-stream",
                InBand("stream_idle", "timeout", "timeout_stream_idle"),
            ),
            (
                "close-mid-stream",
                InBand("", "upstream_error", "upstream_closed"),
            ),
            ("malformed-chunk", malformed),
            (
                "reset",
                Status(502, "upstream_error", "upstream_unreachable"),
            ),
        ];
        for (mode, expect) in table {
            one_fault(way, mode, expect).await;
        }
    }
}

async fn one_fault(way: Way, mode: &str, expect: Expect) {
    let mock = mock_with(MockConfig {
        kind: way.mock(),
        model: "m".into(),
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&mock.url(), way.kind());
    cfg.timeouts.first_token = SHORT;
    cfg.timeouts.stream_idle = SHORT;
    let base = lingo(cfg).await;
    let (path, body) = way.request(mode);
    let r = post_json(&format!("{base}{path}"), &body).await;
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    let case = format!("{way:?} {mode}: {status} {body}");
    match expect {
        Expect::Status(want, outcome, kind) => {
            assert_eq!(status, want, "{case}");
            counted_once(&base, outcome, Some(kind)).await;
        }
        Expect::InBand(what, outcome, kind) => {
            assert_eq!(status, 200, "{case}");
            let message = way.in_band_error(&body);
            assert!(message.is_some_and(|m| m.contains(what)), "{case}");
            counted_once(&base, outcome, Some(kind)).await;
        }
        Expect::Forwarded => {
            assert_eq!(status, 200, "{case}");
            assert!(way.complete(&body), "{case}");
            let text = counted_once(&base, "ok", None).await;
            assert_eq!(
                sum(&text, "lingo_stream_decode_errors_total", &[]),
                1.0,
                "{case}"
            );
        }
    }
    // Every fault that lingo ends closes the upstream connection: the mock counts an abort.
    if matches!(
        mode,
        "hang-before-headers" | "hang-after-headers" | "stall-mid-stream"
    ) {
        let aborted = eventually(|| mock.state.stats().aborted == 1).await;
        assert!(aborted, "{case}: {:?}", mock.state.stats());
    }
}

#[tokio::test]
async fn a_huge_mock_error_is_cut_in_every_way() {
    for way in [Way::OpenaiOnVllm, Way::SglangOnVllm, Way::OllamaOnOllama] {
        let mock = mock_with(MockConfig {
            kind: way.mock(),
            model: "m".into(),
            fault_error_bytes: 4 << 20,
            ..MockConfig::default()
        })
        .await;
        let mut cfg = config(&mock.url(), way.kind());
        cfg.limits.max_upstream_error_body = 64 << 10;
        let base = lingo(cfg).await;
        let (path, body) = way.request("huge-error");
        let r = post_json(&format!("{base}{path}"), &body).await;
        assert_eq!(r.status(), 400, "{way:?}");
        let body = r.text().await.unwrap();
        assert!(body.len() < (64 << 10) + 200, "{way:?}: {}", body.len());
        assert!(body.contains("[cut at 65536 bytes]"), "{way:?}");
        counted_once(&base, "client_error", Some("upstream_status")).await;
    }
}
