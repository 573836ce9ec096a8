//! lingo in front of each kind for llama.cpp and Ollama clients: the endpoints around
//! generation (forwarded or synthesized), Ollama passthrough with a model alias (NDJSON stays
//! NDJSON), in-band errors in the client's shape, and refusals by name.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::*;
use lingo::mock::{FailMode, MockKind};
use serde_json::{json, Value};

async fn get(base: &str, path: &str) -> (u16, Value) {
    let resp = client().get(format!("{base}{path}")).send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

async fn post(base: &str, path: &str, body: Value) -> (u16, String) {
    let resp = post_json(&format!("{base}{path}"), &body).await;
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test]
async fn native_aux_endpoints_are_synthesized_elsewhere() {
    let mock = mock(MockKind::Vllm).await;
    let base = lingo(config_for(&mock.url(), kind_setting(MockKind::Vllm))).await;
    let (status, props) = get(&base, "/props").await;
    assert_eq!(status, 200);
    assert_eq!(props["model_path"], json!("mock-model"));
    assert_eq!(props["default_generation_settings"]["n_ctx"], json!(32768));
    let (_, tags) = get(&base, "/api/tags").await;
    assert_eq!(tags["models"][0]["name"], json!("mock-model"));
    let (_, version) = get(&base, "/api/version").await;
    assert!(version["version"].is_string());
    let (status, show) = post(&base, "/api/show", json!({"model": "mock-model"})).await;
    assert_eq!(status, 200, "{show}");
    let (status, body) = post(&base, "/api/show", json!({"model": "nope"})).await;
    assert_eq!(
        (status, body.as_str()),
        (404, r#"{"error":"model 'nope' not found"}"#)
    );
}

#[tokio::test]
async fn native_aux_endpoints_are_forwarded_to_their_kind() {
    let llama = mock(MockKind::Llamacpp).await;
    let base = lingo(config_for(&llama.url(), kind_setting(MockKind::Llamacpp))).await;
    let (_, props) = get(&base, "/props").await;
    assert_eq!(
        props["build_info"],
        json!("b0-mock"),
        "the upstream's own /props"
    );
    assert_eq!(get(&base, "/health").await.1, json!({"status": "ok"}));
    let ollama = mock(MockKind::Ollama).await;
    let base = lingo(config_for(&ollama.url(), kind_setting(MockKind::Ollama))).await;
    let (_, tags) = get(&base, "/api/tags").await;
    assert_eq!(tags["models"][0]["digest"], json!("6d6f636b2d6d6f64656c"));
    assert_eq!(get(&base, "/health").await.1, json!({"status": "ok"}));
}

#[tokio::test]
async fn ollama_passthrough_restores_the_alias_line_by_line() {
    let mock = mock(MockKind::Ollama).await;
    let mut config = config_for(&mock.url(), kind_setting(MockKind::Ollama));
    config.models.insert("fast".into(), "mock-model".into());
    let base = lingo(config).await;
    let body = json!({"model": "fast", "prompt": "the red fox", "options": {"num_predict": 4}});
    let (status, text) = post(&base, "/api/generate", body).await;
    assert_eq!(status, 200, "{text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        5,
        "four deltas and the final object, as NDJSON: {text}"
    );
    assert!(lines.iter().all(|l| l["model"] == json!("fast")));
    assert_eq!(lines[4]["eval_count"], json!(4));
}

#[tokio::test]
async fn errors_travel_in_the_client_shape() {
    let mock = mock(MockKind::Vllm).await;
    let base = lingo(config_for(&mock.url(), kind_setting(MockKind::Vllm))).await;
    // Before output: each dialect's error body.
    let (status, body) = post(&base, "/completion", json!({"prompt": "a", "grammar": "x"})).await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], json!(400));
    assert_eq!(v["error"]["type"], json!("invalid_request_error"));
    assert!(v["error"]["message"].as_str().unwrap().contains("grammar"));
    let (status, body) = post(&base, "/api/chat", json!({"messages": []})).await;
    assert_eq!(status, 400);
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    // After output: an NDJSON error line (Ollama) or a data: error event (llama.cpp).
    mock.state.fail_next_stream(2, FailMode::ErrorEvent);
    let body = json!({"model": "mock-model", "prompt": "a b", "raw": true});
    let (status, text) = post(&base, "/api/generate", body).await;
    assert_eq!(status, 200);
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert!(last["error"].is_string(), "{text}");
    mock.state.fail_next_stream(2, FailMode::ErrorEvent);
    let body = json!({"prompt": "a b", "n_predict": 8, "stream": true});
    let (_, text) = post(&base, "/completion", body).await;
    let events = sse_events(&text);
    assert_eq!(
        events.last().unwrap()["error"]["code"],
        json!(500),
        "{text}"
    );
}
