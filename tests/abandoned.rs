//! Exactly one record per request, however it ends: requests abandoned by their client before
//! the upstream answered, while a whole answer was being read, before a stream's headers and
//! mid-stream each leave one `lingo_requests_total` count with outcome `cancelled`, one
//! request-log line, and `lingo_requests_in_flight` back at 0.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use lingo::config::Config;
use lingo::mock::MockKind;
use lingo::upstream::KindSetting;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What a hand-written upstream does with a generation request.
#[derive(Clone, Copy)]
enum Silent {
    /// Never answers.
    NoHeaders,
    /// Sends headers promising a long body, a little of it, then nothing.
    HalfBody,
}

/// An upstream on a raw socket; the receiver hears of each POST once it has arrived (and, in
/// `HalfBody`, once the partial answer was written).
async fn silent_upstream(mode: Silent) -> (String, mpsc::UnboundedReceiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve_silently(sock, mode, tx.clone()));
        }
    });
    (url, rx)
}

async fn serve_silently(mut sock: TcpStream, mode: Silent, tx: mpsc::UnboundedSender<()>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 1 << 20 {
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    if !head.starts_with(b"POST") {
        // Discovery and the like: a quick refusal.
        let _ = sock
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    }
    if let Silent::HalfBody = mode {
        let partial = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                        content-length: 100000\r\n\r\n{\"id\":\"cmpl-1\",\"choices\":[";
        if sock.write_all(partial).await.is_err() {
            return;
        }
    }
    let _ = tx.send(());
    // Hold the connection until lingo closes it.
    while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
}

fn log_path(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "lingo-abandoned-{}-{name}.jsonl",
        std::process::id()
    ));
    std::fs::remove_file(&p).ok();
    p
}

fn with_log(mut cfg: Config, log: &Path) -> Config {
    cfg.metrics.request_log = Some(log.display().to_string());
    cfg
}

/// Send a request on a raw connection, wait until the upstream has it, then hang up.
async fn send_and_leave(
    base: &str,
    path: &str,
    body: &Value,
    arrived: &mut mpsc::UnboundedReceiver<()>,
) {
    let addr = base.trim_start_matches("http://");
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), arrived.recv())
        .await
        .expect("the request never reached the upstream")
        .unwrap();
    drop(sock);
}

/// Wait (bounded) until lingo has one request recorded and none in flight; the exposition.
async fn one_record(base: &str) -> String {
    let mut text = String::new();
    for _ in 0..500 {
        text = scrape(base).await;
        let total = sum(&text, "lingo_requests_total", &[]);
        let in_flight = sum(&text, "lingo_requests_in_flight", &[]);
        if total >= 1.0 && in_flight == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(sum(&text, "lingo_requests_in_flight", &[]), 0.0, "{text}");
    assert_eq!(sum(&text, "lingo_requests_total", &[]), 1.0, "{text}");
    assert_eq!(
        sum(&text, "lingo_requests_total", &[("outcome", "cancelled")]),
        1.0,
        "{text}"
    );
    text
}

/// The request log's lines, once at least one is there (it is written off the request path).
async fn log_lines(log: &Path) -> Vec<Value> {
    let mut lines = Vec::new();
    for _ in 0..500 {
        lines = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if !lines.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    lines
}

/// The one log line of a cancelled request.
async fn cancelled_line(log: &Path) -> Value {
    let lines = log_lines(log).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let v = lines.into_iter().next().unwrap();
    assert_eq!(v["outcome"], "cancelled", "{v}");
    assert_eq!(v["partial"], true, "{v}");
    v
}

fn completion(stream: bool) -> Value {
    json!({"model": "m", "prompt": "a b c", "max_tokens": 50, "stream": stream})
}

#[tokio::test]
async fn whole_answer_abandoned_before_the_upstream_answered() {
    let (url, mut arrived) = silent_upstream(Silent::NoHeaders).await;
    let log = log_path("before");
    let base = lingo(with_log(config_for(&url, KindSetting::Vllm), &log)).await;
    send_and_leave(&base, "/v1/completions", &completion(false), &mut arrived).await;
    one_record(&base).await;
    let v = cancelled_line(&log).await;
    // Nothing was counted: no false zeros.
    assert!(
        v["prompt_tokens"].is_null() && v["completion_tokens"].is_null(),
        "{v}"
    );
    assert_eq!(v["model"], "m");
}

#[tokio::test]
async fn whole_answer_abandoned_while_it_was_read() {
    let (url, mut arrived) = silent_upstream(Silent::HalfBody).await;
    let log = log_path("half");
    let base = lingo(with_log(config_for(&url, KindSetting::Vllm), &log)).await;
    send_and_leave(&base, "/v1/completions", &completion(false), &mut arrived).await;
    one_record(&base).await;
    cancelled_line(&log).await;
}

#[tokio::test]
async fn stream_abandoned_before_its_headers() {
    let (url, mut arrived) = silent_upstream(Silent::NoHeaders).await;
    let log = log_path("headers");
    let base = lingo(with_log(config_for(&url, KindSetting::Vllm), &log)).await;
    send_and_leave(&base, "/v1/completions", &completion(true), &mut arrived).await;
    one_record(&base).await;
    let v = cancelled_line(&log).await;
    assert_eq!(v["stream"], true);
}

/// A token-id prompt's length is lingo's to know from the request, translated (to a plain
/// OpenAI upstream) or passed through (to SGLang): it outlives a client that leaves first.
#[tokio::test]
async fn stream_abandoned_before_its_headers_keeps_a_token_id_prompt() {
    for kind in [KindSetting::Openai, KindSetting::Sglang] {
        let (url, mut arrived) = silent_upstream(Silent::NoHeaders).await;
        let log = log_path(&format!("headers-ids-{kind:?}"));
        let mut cfg = config_for(&url, kind);
        // SGLang's `/generate` names no model: the configured one saves asking the upstream.
        cfg.upstream.model = Some("m".into());
        let base = lingo(with_log(cfg, &log)).await;
        let body = json!({"input_ids": [5, 6, 7, 8, 9], "stream": true,
                          "sampling_params": {"max_new_tokens": 10}});
        send_and_leave(&base, "/generate", &body, &mut arrived).await;
        one_record(&base).await;
        let v = cancelled_line(&log).await;
        assert_eq!(v["prompt_tokens"], 5, "{kind:?}: {v}");
        assert!(v["completion_tokens"].is_null(), "{kind:?}: {v}");
    }
}

/// Read an SGLang stream until `k` tokens have arrived; the events so far.
async fn read_until_tokens(
    body: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    k: u64,
) -> Vec<Value> {
    let mut buf = String::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let events = sse_events(&buf);
            let got = events
                .iter()
                .filter_map(|e| e["meta_info"]["completion_tokens"].as_u64())
                .max();
            if got >= Some(k) {
                return events;
            }
            let chunk = body.next().await.expect("stream ended early").unwrap();
            buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await
    .expect("the first tokens never came")
}

/// An upstream that counts only at the end (plain OpenAI): lingo still reports a token-id
/// prompt's length from the first chunk, and keeps it when the client leaves mid-stream.
#[tokio::test]
async fn token_id_prompt_abandoned_mid_stream_keeps_its_prompt_count() {
    let mock = mock(MockKind::Openai).await;
    mock.state.hold_after(2);
    let log = log_path("mid-ids");
    let base = lingo(with_log(config_for(&mock.url(), KindSetting::Openai), &log)).await;
    let body = json!({"input_ids": [5, 6, 7, 8, 9, 10], "stream": true,
                      "sampling_params": {"max_new_tokens": 10}});
    let resp = post_json(&format!("{base}/generate"), &body).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let mut stream = resp.bytes_stream();
    let events = read_until_tokens(&mut stream, 2).await;
    assert!(!events.is_empty());
    for e in &events {
        assert_eq!(
            e["meta_info"]["prompt_tokens"], 6,
            "every chunk, the first too: {e}"
        );
    }
    drop(stream);
    let text = one_record(&base).await;
    assert_eq!(sum(&text, "lingo_prompt_tokens_total", &[]), 6.0, "{text}");
    let v = cancelled_line(&log).await;
    assert_eq!(v["prompt_tokens"], 6, "{v}");
    assert_eq!(v["completion_tokens"], 2, "{v}");
    assert_eq!(v["tokens_estimated"], true, "counted chunk by chunk: {v}");
    mock.state.release();
}

#[tokio::test]
async fn passthrough_stream_abandoned_mid_stream() {
    let mock = mock(MockKind::Vllm).await;
    mock.state.hold_after(3);
    let log = log_path("mid");
    let base = lingo(with_log(config_for(&mock.url(), KindSetting::Vllm), &log)).await;
    let body = json!({"model": "mock-model", "prompt": "a b c d", "max_tokens": 10,
                      "ignore_eos": true, "stream": true,
                      "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    let resp = post_json(&format!("{base}/v1/completions"), &body).await;
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while sse_events(&buf)
            .iter()
            .filter_map(|e| e["usage"]["completion_tokens"].as_u64())
            .max()
            < Some(3)
        {
            let chunk = stream.next().await.expect("stream ended early").unwrap();
            buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await
    .expect("the first tokens never came");
    drop(stream);
    one_record(&base).await;
    let v = cancelled_line(&log).await;
    // The upstream's running usage: exact, not estimated.
    assert_eq!(v["completion_tokens"], 3, "{v}");
    assert_eq!(v["prompt_tokens"], 4, "{v}");
    assert_eq!(v["tokens_estimated"], false, "{v}");
    mock.state.release();
}

/// A request refused before it was understood still counts once.
#[tokio::test]
async fn a_refused_body_counts_once() {
    let mock = mock(MockKind::Vllm).await;
    let log = log_path("refused");
    let base = lingo(with_log(config_for(&mock.url(), KindSetting::Vllm), &log)).await;
    for path in ["/generate", "/v1/completions", "/v1/chat/completions"] {
        let r = client()
            .post(format!("{base}{path}"))
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
    }
    let text = scrape(&base).await;
    assert_eq!(
        sum(
            &text,
            "lingo_requests_total",
            &[("outcome", "client_error")]
        ),
        3.0,
        "{text}"
    );
    assert_eq!(sum(&text, "lingo_requests_in_flight", &[]), 0.0, "{text}");
    let mut lines = Vec::new();
    for _ in 0..500 {
        lines = log_lines(&log).await;
        if lines.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lines.len(), 3, "{lines:?}");
    for v in &lines {
        assert_eq!(v["partial"], false, "{v}");
        assert!(v["prompt_tokens"].is_null(), "not a false 0: {v}");
    }
}
