//! The Anthropic and vLLM-legacy client dialects end to end, beyond the matrix: streams that
//! fail midway, streams that must not wait, and each dialect's error shapes and statuses.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use lingo::mock::{FailMode, MockConfig, MockKind};
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

fn messages(stream: bool, max: u64) -> Value {
    json!({"model": "mock-model", "max_tokens": max, "stream": stream, "ignore_eos": true,
           "messages": [{"role": "user", "content": "a b c"}]})
}

fn legacy(stream: bool, max: u64) -> Value {
    json!({"prompt": "a b c", "stream": stream, "max_tokens": max, "ignore_eos": true})
}

/// `(event name, payload)` of each named SSE event.
fn named(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|b| {
            let name = b.lines().find_map(|l| l.strip_prefix("event: ")).unwrap();
            let data = b.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

async fn slow_vllm() -> (Mock, String) {
    // A per-token delay, so tokens before a failure leave the mock before it fails.
    let mock = mock_with(MockConfig {
        kind: MockKind::Vllm,
        itl: Duration::from_millis(5),
        ..MockConfig::default()
    })
    .await;
    let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    (mock, base)
}

async fn post_text(url: String, body: &Value) -> (u16, String) {
    let r = post_json(&url, body).await;
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn anthropic_failure_mid_stream_is_an_error_event_and_nothing_after() {
    let (mock, base) = slow_vllm().await;
    for mode in [FailMode::ErrorEvent, FailMode::Abort] {
        mock.state.fail_next_stream(2, mode);
        let (status, body) = post_text(format!("{base}/v1/messages"), &messages(true, 10)).await;
        assert_eq!(status, 200);
        let events = named(&body);
        let (last, err) = events.last().unwrap();
        assert_eq!(last, "error", "{mode:?}: {body}");
        assert_eq!(err["type"], "error");
        assert_eq!(err["error"]["type"], "api_error", "{body}");
        assert!(err["error"]["message"].is_string());
        assert_eq!(events[0].0, "message_start", "{body}");
        assert!(
            events.iter().any(|(n, _)| n == "content_block_delta"),
            "tokens before the failure arrived: {body}"
        );
        assert!(!events.iter().any(|(n, _)| n == "message_stop"), "{body}");
    }
}

#[tokio::test]
async fn vllm_legacy_failure_mid_stream_ends_with_an_error_line() {
    let (mock, base) = slow_vllm().await;
    mock.state.fail_next_stream(2, FailMode::ErrorEvent);
    let (status, body) = post_text(format!("{base}/generate"), &legacy(true, 10)).await;
    assert_eq!(status, 200);
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.last().unwrap()["error"].is_string(), "{body}");
    assert!(
        lines[0]["text"][0].as_str().unwrap().starts_with("a b c"),
        "{body}"
    );
}

#[tokio::test]
async fn anthropic_stream_never_waits_for_later_tokens() {
    let mock = mock(MockKind::Vllm).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    let k = 3;
    mock.state.hold_after(k);
    let resp = post_json(&format!("{base}/v1/messages"), &messages(true, 10)).await;
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    let deltas = |buf: &str| buf.matches("event: content_block_delta").count();
    // The mock holds after token k: message_start and k deltas must already be out.
    let got = tokio::time::timeout(Duration::from_secs(20), async {
        while deltas(&buf) < k as usize {
            let chunk = body.next().await.expect("stream ended early").unwrap();
            buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await;
    assert!(
        got.is_ok(),
        "the client did not get {k} deltas while the upstream held"
    );
    assert!(buf.starts_with("event: message_start\n"), "{buf}");
    mock.state.release();
    while let Some(chunk) = body.next().await {
        buf.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    assert_eq!(deltas(&buf), 10);
    assert!(buf.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
}

#[tokio::test]
async fn anthropic_error_shapes_and_statuses() {
    let mock = mock(MockKind::Vllm).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    let url = format!("{base}/v1/messages");
    let r = client()
        .post(&url)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");

    let mut body = messages(false, 4);
    body["model"] = json!("no-such-model");
    let (status, text) = post_text(url, &body).await;
    assert_eq!(status, 404, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["type"], "not_found_error", "{v}");
    assert_eq!(mock.state.stats().completed, 0);

    // An unreachable upstream is Anthropic's 500 `api_error` (it has no 502).
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let base = lingo(config_for(&format!("http://{dead}"), KindSetting::Vllm)).await;
    let (status, text) = post_text(format!("{base}/v1/messages"), &messages(false, 4)).await;
    assert_eq!(status, 500, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["type"], "api_error", "{v}");
}

#[tokio::test]
async fn vllm_legacy_errors_and_content_types() {
    let mock = mock(MockKind::Sglang).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Sglang)).await;
    let url = format!("{base}/generate");
    let (status, text) = post_text(
        url.clone(),
        &json!({"prompt": "x", "use_beam_search": true}),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("use_beam_search"),
        "{v}"
    );

    let r = post_json(&url, &legacy(true, 3)).await;
    assert_eq!(r.headers()["content-type"], "application/json");
    let body = r.text().await.unwrap();
    assert_eq!(body.lines().count(), 3, "{body}");
    assert_eq!(mock.state.stats().completion_tokens, 3);
}
