//! The llama.cpp mock (`lingo mock --kind llamacpp`): native `/completion` and its stream,
//! llama-server's OpenAI-route quirks, and the auxiliary endpoints.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::*;
use lingo::mock::MockKind;
use serde_json::{json, Value};

const PROMPT: &str = "the quick brown fox";

async fn post(mock: &Mock, path: &str, body: Value) -> (u16, String) {
    let resp = post_json(&format!("{}{path}", mock.url()), &body).await;
    (resp.status().as_u16(), resp.text().await.unwrap())
}

async fn ok(mock: &Mock, path: &str, body: Value) -> Value {
    let (status, text) = post(mock, path, body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn native_completion_reports_counts_timings_and_the_alias() {
    let mock = mock(MockKind::Llamacpp).await;
    let body = json!({"prompt": PROMPT, "n_predict": 7, "model": "anything"});
    let v = ok(&mock, "/completion", body).await;
    assert_eq!(v["stop"], json!(true));
    assert_eq!(
        v["model"],
        json!("mock-model"),
        "the alias, not the request's model"
    );
    assert_eq!(v["tokens_predicted"], json!(7));
    assert_eq!(v["tokens_evaluated"], json!(4));
    assert_eq!(v["stop_type"], json!("limit"));
    assert_eq!(v["tokens"], json!([]), "ids only with return_tokens");
    assert_eq!(v["timings"]["predicted_n"], json!(7));
    assert_eq!(v["timings"]["prompt_n"], json!(4));
    assert!(v["timings"]["predicted_ms"].is_f64());
    let alias = ok(
        &mock,
        "/completions",
        json!({"prompt": PROMPT, "n_predict": 7}),
    )
    .await;
    assert_eq!(
        alias["content"], v["content"],
        "/completions is the same handler"
    );
    let ids = ok(
        &mock,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": 7, "return_tokens": true}),
    )
    .await;
    assert_eq!(ids["tokens"].as_array().unwrap().len(), 7);
}

#[tokio::test]
async fn native_stream_ends_with_stop_true_and_no_done() {
    let mock = mock(MockKind::Llamacpp).await;
    let whole = ok(
        &mock,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": 5}),
    )
    .await;
    let (status, body) = post(
        &mock,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": 5, "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    let events = sse_events(&body);
    assert!(!events.contains(&json!("[DONE]")));
    let (last, partial) = events.split_last().unwrap();
    assert_eq!(partial.len(), 5);
    for (i, e) in partial.iter().enumerate() {
        assert_eq!(e["stop"], json!(false));
        assert_eq!(
            e["tokens"].as_array().unwrap().len(),
            1,
            "ids in every partial"
        );
        assert_eq!(e["tokens_predicted"], json!(i + 1));
    }
    let text: String = partial
        .iter()
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(json!(text), whole["content"]);
    assert_eq!(last["stop"], json!(true));
    assert_eq!(last["content"], json!(""));
    assert_eq!(last["tokens_predicted"], json!(5));
    assert!(last["timings"]["predicted_per_second"].is_f64());
}

#[tokio::test]
async fn stop_words_eos_and_prompt_shapes() {
    let mock = mock(MockKind::Llamacpp).await;
    // Without n_predict the output runs to EOS (the mock ends every sequence by token 255).
    let v = ok(&mock, "/completion", json!({"prompt": PROMPT})).await;
    assert_eq!(v["stop_type"], json!("eos"));
    let words: Vec<&str> = v["content"].as_str().unwrap().split_whitespace().collect();
    let stop = format!(" {}", words[2]);
    let v = ok(
        &mock,
        "/completion",
        json!({"prompt": PROMPT, "stop": [stop]}),
    )
    .await;
    assert_eq!(v["stop_type"], json!("word"));
    assert_eq!(v["stopping_word"], json!(stop));
    assert!(!v["content"].as_str().unwrap().contains(&stop));
    // A bare string is ignored, as llama.cpp does.
    let v = ok(
        &mock,
        "/completion",
        json!({"prompt": PROMPT, "stop": stop}),
    )
    .await;
    assert_eq!(v["stop_type"], json!("eos"));
    // Token ids and mixed prompts tokenize like the text.
    let ids = ok(&mock, "/tokenize", json!({"content": PROMPT})).await["tokens"].clone();
    let by_ids = ok(&mock, "/completion", json!({"prompt": ids, "n_predict": 4})).await;
    let mixed = json!([ids[0], ids[1], "brown fox"]);
    let by_mixed = ok(
        &mock,
        "/completion",
        json!({"prompt": mixed, "n_predict": 4}),
    )
    .await;
    let by_text = ok(
        &mock,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": 4}),
    )
    .await;
    assert_eq!(by_ids["content"], by_text["content"]);
    assert_eq!(by_mixed["content"], by_text["content"]);
    let (status, body) = post(&mock, "/completion", json!({"prompt": 5})).await;
    assert_eq!(status, 400);
    let err: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["error"]["code"], json!(400));
    assert_eq!(err["error"]["type"], json!("invalid_request_error"));
}

#[tokio::test]
async fn openai_completions_put_usage_and_timings_on_the_last_chunk() {
    let mock = mock(MockKind::Llamacpp).await;
    let body = json!({"model": "zzz", "prompt": PROMPT, "max_tokens": 3, "stream": true,
                      "stream_options": {"include_usage": true}});
    let (_, text) = post(&mock, "/v1/completions", body).await;
    let events = sse_events(&text);
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let chunks = &events[..events.len() - 1];
    for c in chunks {
        assert!(c["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(c["model"], json!("mock-model"));
        assert_eq!(
            c["choices"].as_array().unwrap().len(),
            1,
            "no usage-only chunk"
        );
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["text"], json!(""));
    assert_eq!(last["choices"][0]["finish_reason"], json!("length"));
    assert_eq!(last["usage"]["completion_tokens"], json!(3));
    assert!(last["timings"].is_object());
    assert!(chunks[0].get("usage").is_none());
    let whole = ok(
        &mock,
        "/v1/completions",
        json!({"prompt": PROMPT, "max_tokens": 3}),
    )
    .await;
    assert_eq!(whole["usage"]["completion_tokens"], json!(3));
    assert!(whole["timings"].is_object());
    assert!(whole["choices"][0].get("stop_reason").is_none());
}

#[tokio::test]
async fn openai_chat_stream_shape() {
    let mock = mock(MockKind::Llamacpp).await;
    let msgs = json!([{"role": "user", "content": PROMPT}]);
    for include in [false, true] {
        let body = json!({"messages": msgs, "max_tokens": 2, "stream": true,
                          "stream_options": {"include_usage": include}});
        let (_, text) = post(&mock, "/v1/chat/completions", body).await;
        let events = sse_events(&text);
        assert_eq!(
            events[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": null})
        );
        let finish = events
            .iter()
            .position(|e| e["choices"][0]["finish_reason"].is_string())
            .unwrap();
        assert_eq!(events[finish]["choices"][0]["delta"], json!({}));
        let usage = events.iter().filter(|e| e["usage"].is_object()).count();
        assert_eq!(usage, usize::from(include), "include_usage={include}");
        assert_eq!(events.last(), Some(&json!("[DONE]")));
    }
}

#[tokio::test]
async fn aux_endpoints() {
    let mock = mock(MockKind::Llamacpp).await;
    let get = |path: &str| {
        let url = format!("{}{path}", mock.url());
        async move {
            client()
                .get(url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    assert_eq!(get("/health").await, json!({"status": "ok"}));
    let props = get("/props").await;
    assert_eq!(props["default_generation_settings"]["n_ctx"], json!(32768));
    assert!(props["model_path"].is_string());
    let models = get("/v1/models").await;
    assert_eq!(models["data"][0]["owned_by"], json!("llamacpp"));
    assert_eq!(models["models"][0]["name"], json!("mock-model"));
}
