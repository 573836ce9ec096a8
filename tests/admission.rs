//! Admission control (`limits.max_in_flight`): beyond the limit a generation request is
//! refused at once in its client's dialect with `Retry-After`; a slot is held until the
//! response body ends or is dropped, not until its headers.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use lingo::config::OverloadStatus;
use lingo::mock::MockKind;
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

fn stream_chat() -> Value {
    json!({"model": "mock-model", "max_tokens": 8, "stream": true,
           "messages": [{"role": "user", "content": "hi"}]})
}

fn messages() -> Value {
    json!({"model": "mock-model", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
}

fn sglang() -> Value {
    json!({"text": "a b", "sampling_params": {"max_new_tokens": 2}})
}

async fn limited(max: usize, status: OverloadStatus) -> (Mock, String) {
    let mock = mock(MockKind::Vllm).await;
    let mut c = config_for(&mock.url(), KindSetting::Vllm);
    c.limits.max_in_flight = Some(max);
    c.limits.overload_status = status;
    let base = lingo(c).await;
    (mock, base)
}

fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_held_stream_takes_the_only_slot_until_its_body_ends() {
    let (mock, base) = limited(1, OverloadStatus::TooMany).await;
    mock.state.hold_after(1);
    // Its headers are back, but the stream is still going: it is in flight.
    let held = post_json(&format!("{base}/v1/chat/completions"), &stream_chat()).await;
    assert_eq!(held.status(), 200);

    let r = post_json(&format!("{base}/v1/chat/completions"), &stream_chat()).await;
    assert_eq!(r.status(), 429);
    assert!(retry_after(&r) >= 1);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "RateLimitError", "{v}");
    let r = post_json(&format!("{base}/v1/messages"), &messages()).await;
    assert_eq!(r.status(), 429);
    assert!(retry_after(&r) >= 1);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
    let r = post_json(&format!("{base}/generate"), &sglang()).await;
    assert_eq!(r.status(), 429);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].is_string(), "{v}");
    // Probes and listings take no slot.
    assert_eq!(
        client()
            .get(format!("{base}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let models = client()
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    assert_eq!(
        mock.state.stats().requests,
        1,
        "refusals never reach the upstream"
    );

    mock.state.release();
    let body = held.text().await.unwrap();
    assert!(sse_events(&body).iter().any(|e| e == "[DONE]"));
    // The body ended, so the slot is free again.
    let r = post_json(&format!("{base}/generate"), &sglang()).await;
    assert_eq!(r.status(), 200);
    let text = scrape(&base).await;
    assert_eq!(
        sum(
            &text,
            "lingo_requests_refused_total",
            &[("reason", "overloaded")]
        ),
        3.0
    );
}

#[tokio::test]
async fn a_dropped_stream_gives_its_slot_back() {
    let (mock, base) = limited(1, OverloadStatus::TooMany).await;
    mock.state.hold_after(1);
    let held = post_json(&format!("{base}/v1/chat/completions"), &stream_chat()).await;
    let mut body = held.bytes_stream();
    body.next().await.unwrap().unwrap();
    let r = post_json(&format!("{base}/generate"), &sglang()).await;
    assert_eq!(r.status(), 429);
    drop(body);
    // The upstream sees the abort once lingo dropped the response body, and with it the slot.
    let aborted = mock.state.wait_for(|s| s.aborted == 1);
    tokio::time::timeout(Duration::from_secs(20), aborted)
        .await
        .expect("the upstream never saw the abort");
    mock.state.release();
    let r = post_json(&format!("{base}/generate"), &sglang()).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn the_overload_status_can_be_503_in_each_dialect() {
    let (mock, base) = limited(1, OverloadStatus::Unavailable).await;
    mock.state.hold_after(1);
    let held = post_json(&format!("{base}/v1/chat/completions"), &stream_chat()).await;
    assert_eq!(held.status(), 200);
    let r = post_json(&format!("{base}/generate"), &sglang()).await;
    assert_eq!(r.status(), 503);
    assert!(retry_after(&r) >= 1);
    // Anthropic's clients know an overload as 529.
    let r = post_json(&format!("{base}/v1/messages"), &messages()).await;
    assert_eq!(r.status(), 529);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "overloaded_error", "{v}");
    let tgi = json!({"inputs": "a b", "parameters": {"max_new_tokens": 2}});
    let r = post_json(&format!("{base}/generate_stream"), &tgi).await;
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error_type"], "overloaded", "{v}");
    let ollama = json!({"model": "mock-model", "prompt": "a b"});
    let r = post_json(&format!("{base}/api/generate"), &ollama).await;
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].is_string(), "{v}");
    mock.state.release();
    held.text().await.unwrap();
}

#[tokio::test]
async fn without_a_limit_nothing_is_refused() {
    let mock = mock(MockKind::Vllm).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    mock.state.hold_after(1);
    let a = post_json(&format!("{base}/v1/chat/completions"), &stream_chat()).await;
    let b = post_json(&format!("{base}/v1/chat/completions"), &stream_chat()).await;
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    mock.state.release();
    a.text().await.unwrap();
    b.text().await.unwrap();
}
