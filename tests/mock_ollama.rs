//! The Ollama mock (`lingo mock --kind ollama`): `/api/generate`, `/api/chat`, NDJSON streams
//! by default, nanosecond durations, errors, and the model endpoints.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::*;
use lingo::mock::{FailMode, MockKind};
use serde_json::{json, Value};

const PROMPT: &str = "the quick brown fox";

async fn post(mock: &Mock, path: &str, body: Value) -> (u16, String, String) {
    let resp = post_json(&format!("{}{path}", mock.url()), &body).await;
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (resp.status().as_u16(), ct, resp.text().await.unwrap())
}

fn lines(body: &str) -> Vec<Value> {
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn generate_streams_ndjson_by_default() {
    let mock = mock(MockKind::Ollama).await;
    let opts = json!({"num_predict": 6});
    let (status, ct, body) = post(
        &mock,
        "/api/generate",
        json!({"model": "mock-model", "prompt": PROMPT, "options": opts}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(ct, "application/x-ndjson");
    let objs = lines(&body);
    let (last, partial) = objs.split_last().unwrap();
    assert_eq!(partial.len(), 6);
    assert!(partial.iter().all(|o| o["done"] == json!(false)));
    assert_eq!(last["done"], json!(true));
    assert_eq!(last["done_reason"], json!("length"));
    assert_eq!(last["eval_count"], json!(6));
    for k in ["total_duration", "prompt_eval_duration", "eval_duration"] {
        assert!(last[k].as_u64().unwrap() > 0, "{k} in ns: {last}");
    }
    assert!(last["context"].is_array());
    let text: String = partial
        .iter()
        .map(|o| o["response"].as_str().unwrap())
        .collect();
    let (_, ct, whole) = post(
        &mock,
        "/api/generate",
        json!({"model": "mock-model:latest", "prompt": PROMPT, "options": opts, "stream": false}),
    )
    .await;
    assert_eq!(ct, "application/json");
    let whole: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(whole["response"], json!(text));
    assert_eq!(whole["prompt_eval_count"], last["prompt_eval_count"]);
}

#[tokio::test]
async fn templated_generate_is_a_chat_and_raw_is_not() {
    let mock = mock(MockKind::Ollama).await;
    let opts = json!({"num_predict": 5});
    let gen = |raw: bool| {
        json!({"model": "mock-model", "prompt": PROMPT, "system": "be brief", "raw": raw,
               "stream": false, "options": opts})
    };
    let (_, _, templated) = post(&mock, "/api/generate", gen(false)).await;
    let (_, _, raw) = post(&mock, "/api/generate", gen(true)).await;
    let msgs =
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": PROMPT}]);
    let (_, _, chat) = post(
        &mock,
        "/api/chat",
        json!({"model": "mock-model", "messages": msgs, "stream": false, "options": opts}),
    )
    .await;
    let (templated, raw, chat): (Value, Value, Value) = (
        serde_json::from_str(&templated).unwrap(),
        serde_json::from_str(&raw).unwrap(),
        serde_json::from_str(&chat).unwrap(),
    );
    assert_eq!(templated["response"], chat["message"]["content"]);
    assert_ne!(templated["response"], raw["response"]);
    assert_eq!(chat["message"]["role"], json!("assistant"));
    assert!(
        chat.get("context").is_none(),
        "chat answers carry no context"
    );
}

#[tokio::test]
async fn errors_and_load() {
    let mock = mock(MockKind::Ollama).await;
    let (status, _, body) = post(&mock, "/api/generate", json!({"prompt": PROMPT})).await;
    assert_eq!(
        (status, body.as_str()),
        (400, r#"{"error":"model is required"}"#)
    );
    let (status, _, body) =
        post(&mock, "/api/chat", json!({"model": "nope", "messages": []})).await;
    assert_eq!(
        (status, body.as_str()),
        (404, r#"{"error":"model 'nope' not found"}"#)
    );
    let (status, _, body) = post(
        &mock,
        "/api/generate",
        json!({"model": "mock-model", "stream": false}),
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["done_reason"], json!("load"));
}

#[tokio::test]
async fn stream_failure_is_an_ndjson_error_line() {
    let mock = mock(MockKind::Ollama).await;
    mock.state.fail_next_stream(2, FailMode::ErrorEvent);
    let (_, _, body) = post(
        &mock,
        "/api/chat",
        json!({"model": "mock-model", "messages": [{"role": "user", "content": PROMPT}]}),
    )
    .await;
    let objs = lines(&body);
    assert_eq!(objs.len(), 3);
    assert!(objs[2]["error"].is_string(), "{body}");
}

#[tokio::test]
async fn model_endpoints() {
    let mock = mock(MockKind::Ollama).await;
    let get = |path: &str| client().get(format!("{}{path}", mock.url())).send();
    assert_eq!(
        get("/").await.unwrap().text().await.unwrap(),
        "Ollama is running"
    );
    let version: Value = get("/api/version").await.unwrap().json().await.unwrap();
    assert!(version["version"].is_string());
    let tags: Value = get("/api/tags").await.unwrap().json().await.unwrap();
    assert_eq!(tags["models"][0]["name"], json!("mock-model"));
    let models: Value = get("/v1/models").await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["owned_by"], json!("library"));
    let (status, _, body) = post(&mock, "/api/show", json!({"model": "mock-model"})).await;
    assert_eq!(status, 200);
    let show: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(show["model_info"]["mock.context_length"], json!(32768));
    let (status, _, _) = post(&mock, "/api/show", json!({"model": "other"})).await;
    assert_eq!(status, 404);
}
