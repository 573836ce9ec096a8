//! Graceful drain of a lingo process: on SIGTERM `/ready` turns 503, the listener closes,
//! half-sent requests are dropped, in-flight requests run on for `shutdown_grace`, then lingo
//! exits 0, a stream still open at the deadline ending with its dialect's error; a second
//! signal exits at once. The first two also with `--workers 0` (tokio's shared runtime, not
//! the default worker runtimes).

#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
mod common;

use std::sync::Arc;
use std::time::Duration;

use lingo::mock::MockKind;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

const BOUND: Duration = Duration::from_secs(20);

/// A mock vLLM whose streams pause after two tokens, and a lingo process in front of it.
async fn held(grace: &str) -> (common::Mock, child::Lingo) {
    held_on(grace, &[]).await
}

/// `held`, with more flags for lingo (`--workers 0`: the drain on tokio's shared runtime).
async fn held_on(grace: &str, more: &[&str]) -> (common::Mock, child::Lingo) {
    let mock = common::mock(MockKind::Vllm).await;
    mock.state.hold_after(2);
    let url = mock.url();
    let mut args = vec![
        "--upstream",
        &url,
        "--upstream-kind",
        "vllm",
        "--metrics-listen",
        "127.0.0.1:0",
        "--timeout-shutdown-grace",
        grace,
        // Long, so only the drain can close a half-sent request.
        "--timeout-client-header",
        "60s",
    ];
    args.extend_from_slice(more);
    let lingo = child::spawn(None, &args).await;
    (mock, lingo)
}

/// A stream through lingo that has its first tokens and is now held by the mock.
async fn open_stream(mock: &common::Mock, lingo: &child::Lingo) -> (reqwest::Response, String) {
    let body = json!({"model": "mock-model", "prompt": "a b", "max_tokens": 16,
                      "ignore_eos": true, "stream": true});
    let mut resp = common::post_json(&format!("{}/v1/completions", lingo.url()), &body).await;
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await.unwrap().expect("a first event");
    let mock_state = mock.state.clone();
    tokio::time::timeout(BOUND, mock_state.wait_for(|s| s.in_flight == 1))
        .await
        .unwrap();
    (resp, String::from_utf8_lossy(&first).into_owned())
}

/// The rest of a body as text, and whether it ended cleanly.
async fn rest(resp: &mut reqwest::Response, mut text: String) -> (String, bool) {
    loop {
        match tokio::time::timeout(BOUND, resp.chunk()).await {
            Ok(Ok(Some(c))) => text.push_str(&String::from_utf8_lossy(&c)),
            Ok(Ok(None)) => return (text, true),
            Ok(Err(_)) => return (text, false),
            Err(_) => panic!("stream still open after {BOUND:?}: {text}"),
        }
    }
}

async fn ready_status(lingo: &child::Lingo) -> u16 {
    let url = format!("http://{}/ready", lingo.metrics.unwrap());
    common::client()
        .get(url)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Poll `/ready` on the metrics port (which stays open) until it answers 503.
async fn until_unready(lingo: &child::Lingo) {
    for _ in 0..200 {
        if ready_status(lingo).await == 503 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("/ready never turned 503:\n{}", lingo.log());
}

#[tokio::test]
async fn sigterm_refuses_new_work_drops_half_sent_requests_and_exits_0() {
    refuses_new_work_and_exits_0(&[]).await;
}

#[tokio::test]
async fn on_the_shared_runtime_sigterm_refuses_new_work_and_exits_0() {
    refuses_new_work_and_exits_0(&["--workers", "0"]).await;
}

async fn refuses_new_work_and_exits_0(more: &[&str]) {
    let (mock, mut lingo) = held_on("1s", more).await;
    assert_eq!(ready_status(&lingo).await, 200);
    let (mut stream, first) = open_stream(&mock, &lingo).await;
    let mut half = TcpStream::connect(lingo.addr).await.unwrap();
    half.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: lingo\r\nContent-Le")
        .await
        .unwrap();
    lingo.signal("TERM");
    until_unready(&lingo).await;
    // The half-sent request is dropped without an answer.
    let mut buf = Vec::new();
    let read = tokio::time::timeout(BOUND, half.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "half-sent request kept open while draining");
    assert!(buf.is_empty(), "{}", String::from_utf8_lossy(&buf));
    // The listener is closed: new connections are refused.
    let mut refused = false;
    for _ in 0..200 {
        if TcpStream::connect(lingo.addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(refused, "still accepting while draining");
    // The held stream outlives the grace period; lingo ends it and exits 0 all the same.
    let (text, _) = rest(&mut stream, first).await;
    assert!(text.starts_with("data: "), "{text}");
    let status = lingo.exit_status(BOUND).await;
    assert!(status.success(), "{status:?}\n{}", lingo.log());
}

#[tokio::test]
async fn in_flight_streams_finish_within_the_grace_period() {
    in_flight_streams_finish(&[]).await;
}

#[tokio::test]
async fn on_the_shared_runtime_in_flight_streams_finish_within_the_grace_period() {
    in_flight_streams_finish(&["--workers", "0"]).await;
}

async fn in_flight_streams_finish(more: &[&str]) {
    let (mock, mut lingo) = held_on("30s", more).await;
    let (mut stream, first) = open_stream(&mock, &lingo).await;
    lingo.signal("TERM");
    until_unready(&lingo).await;
    mock.state.release();
    let (text, clean) = rest(&mut stream, first).await;
    assert!(clean, "{text}");
    let events = common::sse_events(&text);
    assert_eq!(events.len(), 17, "{text}");
    assert_eq!(events.last(), Some(&json!("[DONE]")), "{text}");
    let status = lingo.exit_status(BOUND).await;
    assert!(status.success(), "{status:?}\n{}", lingo.log());
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    // The grace period is longer than the test waits: only the second signal ends lingo.
    let (mock, mut lingo) = held("300s").await;
    let (_stream, _) = open_stream(&mock, &lingo).await;
    lingo.signal("TERM");
    until_unready(&lingo).await;
    lingo.signal("INT");
    let status = lingo.exit_status(BOUND).await;
    assert!(!status.success(), "{status:?}");
}

#[tokio::test]
async fn a_stream_open_at_the_deadline_ends_with_its_dialects_error() {
    let (mock, mut lingo) = held("500ms").await;
    let (mut stream, first) = open_stream(&mock, &lingo).await;
    lingo.signal("TERM");
    let (text, clean) = rest(&mut stream, first).await;
    assert!(
        clean,
        "the stream was cut, not ended: {text}\n{}",
        lingo.log()
    );
    let events = common::sse_events(&text);
    let error = events.iter().find(|e| e.get("error").is_some());
    assert!(error.is_some(), "no in-band error event: {text}");
    assert_eq!(events.last(), Some(&json!("[DONE]")), "{text}");
    assert!(lingo.exit_status(BOUND).await.success());
}

#[tokio::test]
async fn ready_turns_503_on_the_client_port_once_draining() {
    let config = common::config_for("http://127.0.0.1:9", lingo::upstream::KindSetting::Vllm);
    let state = Arc::new(lingo::proxy::AppState::new(
        config,
        Arc::new(lingo::metrics::Metrics::new()),
    ));
    let ready = || {
        let app = lingo::proxy::router(state.clone());
        let req = http::Request::get("/ready")
            .body(axum::body::Body::empty())
            .unwrap();
        async move { app.oneshot(req).await.unwrap().status() }
    };
    assert_eq!(ready().await, 200);
    state.drain.start();
    assert_eq!(ready().await, 503);
}
