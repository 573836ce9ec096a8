//! The TGI mock over real sockets: TGI's wire shapes (dialects.md 3), its validation and error
//! placement, exact counts.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::*;
use lingo::mock::{FailMode, MockKind};
use serde_json::{json, Value};

async fn tgi() -> Mock {
    mock(MockKind::Tgi).await
}

async fn post(m: &Mock, path: &str, body: Value) -> reqwest::Response {
    post_json(&format!("{}{path}", m.url()), &body).await
}

/// The raw text of a stream, checked for TGI's framing: `data:{` with no space, no `[DONE]`.
async fn stream_text(m: &Mock, body: Value) -> String {
    let resp = post(m, "/generate_stream", body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    for block in text.split_terminator("\n\n") {
        assert!(
            block.starts_with("data:{"),
            "TGI writes data: without a space: {block:?}"
        );
    }
    assert!(
        !text.contains("[DONE]"),
        "no terminator on /generate_stream"
    );
    text
}

#[tokio::test]
async fn info_describes_a_tgi_router() {
    let m = tgi().await;
    let v: Value = get_json(&format!("{}/info", m.url())).await;
    assert_eq!(v["model_id"], "mock-model");
    assert_eq!(v["max_total_tokens"], 32768);
    assert_eq!(v["max_input_tokens"], 32767);
    assert_eq!(v["max_stop_sequences"], 4);
    assert_eq!(v["router"], "text-generation-router");
    let models: Value = get_json(&format!("{}/v1/models", m.url())).await;
    assert_eq!(
        models["data"][0],
        json!({"id": "mock-model", "object": "model", "created": 0, "owned_by": "mock-model"})
    );
}

#[tokio::test]
async fn generate_reports_details_and_count_headers() {
    let m = tgi().await;
    let body = json!({"inputs": "a b c", "parameters": {"max_new_tokens": 5, "details": true}});
    let resp = post(&m, "/generate", body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-prompt-tokens"], "3");
    assert_eq!(resp.headers()["x-generated-tokens"], "5");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v["generated_text"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count(),
        5
    );
    let d = &v["details"];
    assert_eq!(d["finish_reason"], "length");
    assert_eq!(d["generated_tokens"], 5);
    assert_eq!(d["seed"], Value::Null, "greedy reports no seed");
    assert_eq!(d["prefill"], json!([]));
    let tokens = d["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 5);
    let text: String = tokens.iter().map(|t| t["text"].as_str().unwrap()).collect();
    assert_eq!(text, v["generated_text"]);
    let mut keys: Vec<&String> = tokens[0].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["id", "logprob", "special", "text"]);
    // Without `details` there are none; the headers still count.
    let v: Value = post(&m, "/generate", json!({"inputs": "a b c"}))
        .await
        .json()
        .await
        .unwrap();
    assert!(v.get("details").is_none(), "{v}");
    let stats = m.state.stats();
    assert_eq!(
        (stats.requests, stats.completed, stats.prompt_tokens),
        (2, 2, 6)
    );
}

#[tokio::test]
async fn eos_is_a_counted_special_token_without_text() {
    let m = tgi().await;
    let body = json!({"inputs": "hello", "parameters": {"max_new_tokens": 400, "details": true}});
    let resp = post(&m, "/generate", body).await;
    let generated: u64 = resp.headers()["x-generated-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let v: Value = resp.json().await.unwrap();
    let d = &v["details"];
    assert_eq!(d["finish_reason"], "eos_token");
    let tokens = d["tokens"].as_array().unwrap();
    assert_eq!(tokens.len() as u64, generated);
    assert_eq!(d["generated_tokens"], generated);
    let last = tokens.last().unwrap();
    assert_eq!(
        (last["text"].as_str(), last["special"].as_bool()),
        (Some("</s>"), Some(true))
    );
    assert!(!v["generated_text"].as_str().unwrap().contains("</s>"));
    assert_eq!(
        v["generated_text"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count() as u64,
        generated - 1
    );
}

#[tokio::test]
async fn full_text_and_kept_stop_sequences() {
    let m = tgi().await;
    let plain: Value = post(
        &m,
        "/generate",
        json!({"inputs": "x y", "parameters": {"max_new_tokens": 6}}),
    )
    .await
    .json()
    .await
    .unwrap();
    let text = plain["generated_text"].as_str().unwrap().to_string();
    let third = text.split_whitespace().nth(2).unwrap().to_string();
    let body = json!({"inputs": "x y", "parameters": {"max_new_tokens": 6, "stop": [third],
                                                     "return_full_text": true, "details": true}});
    let v: Value = post(&m, "/generate", body).await.json().await.unwrap();
    let got = v["generated_text"].as_str().unwrap();
    assert!(got.starts_with("x y "), "prompt first: {got:?}");
    assert!(
        got.ends_with(third.as_str()),
        "TGI keeps the stop sequence: {got:?}"
    );
    assert_eq!(v["details"]["finish_reason"], "stop_sequence");
}

#[tokio::test]
async fn validation_errors_are_422_in_tgi_shape() {
    let m = tgi().await;
    let cases = [
        (
            json!({"temperature": 0.0}),
            "`temperature` must be strictly positive",
        ),
        (json!({"top_p": 1.0}), "`top_p` must be > 0.0 and < 1.0"),
        (
            json!({"max_new_tokens": 0}),
            "`max_new_tokens` must be strictly positive",
        ),
        (json!({"top_k": 0}), "`top_k` must be strictly positive"),
        (
            json!({"stop": ["a", "b", "c", "d", "e"]}),
            "`stop` supports up to 4 stop sequences. Given: 5",
        ),
        (
            json!({"best_of": 2}),
            "`best_of` != 1 is not allowed for this endpoint",
        ),
    ];
    for (params, message) in cases {
        let resp = post(
            &m,
            "/generate",
            json!({"inputs": "a", "parameters": params}),
        )
        .await;
        assert_eq!(resp.status(), 422, "{params}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v, json!({"error": message, "error_type": "validation"}));
    }
    // Not JSON at all: rejected before the handler, as axum does.
    let resp = client()
        .post(format!("{}/generate", m.url()))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = post(&m, "/generate", json!({"inputs": 3})).await;
    assert_eq!(resp.status(), 422);
}

#[tokio::test]
async fn stream_is_one_token_per_event_and_closes_after_the_final_one() {
    let m = tgi().await;
    let body = json!({"inputs": "a b c", "parameters": {"max_new_tokens": 7, "details": true}});
    let events = sse_events(&stream_text(&m, body).await);
    assert_eq!(events.len(), 7);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["index"], i + 1);
        assert!(e["token"]["id"].is_u64());
        let last = i + 1 == events.len();
        assert_eq!(e["generated_text"].is_string(), last, "{e}");
        assert_eq!(e["details"].is_object(), last, "{e}");
    }
    let text: String = events
        .iter()
        .map(|e| e["token"]["text"].as_str().unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["generated_text"], text);
    assert_eq!(
        last["details"],
        json!({"finish_reason": "length", "generated_tokens": 7, "seed": null, "input_length": 3})
    );
    assert_eq!(m.state.stats().completed, 1);
}

#[tokio::test]
async fn stream_errors_come_in_band_with_status_200() {
    let m = tgi().await;
    let body = json!({"inputs": "a", "parameters": {"temperature": 0}});
    let events = sse_events(&stream_text(&m, body).await);
    assert_eq!(
        events,
        [json!({"error": "`temperature` must be strictly positive", "error_type": "validation"})]
    );
    m.state.fail_next_stream(2, FailMode::ErrorEvent);
    let body = json!({"inputs": "a", "parameters": {"max_new_tokens": 5}});
    let events = sse_events(&stream_text(&m, body).await);
    assert_eq!(events.len(), 3);
    assert_eq!(events[2]["error_type"], "generation");
    assert!(events[1]["generated_text"].is_null());
}

#[tokio::test]
async fn messages_api_speaks_tgis_flavour_of_openai_chat() {
    let m = tgi().await;
    let msgs = json!([{"role": "user", "content": "hello there"}]);
    let v: Value = post(
        &m,
        "/v1/chat/completions",
        json!({"model": "tgi", "messages": msgs, "max_tokens": 4}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(v["id"], "");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "mock-model");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 4);
    assert_eq!(v["usage"]["prompt_tokens"], 2 + 3);

    let body = json!({"messages": msgs, "max_tokens": 4, "stream": true,
                      "stream_options": {"include_usage": true}});
    let resp = post(&m, "/v1/chat/completions", body).await;
    let text = resp.text().await.unwrap();
    assert!(text.ends_with("data:[DONE]\n\n"), "{text}");
    assert!(!text.contains("data: "), "no space after data: {text}");
    let events = sse_events(&text);
    assert_eq!(events.len(), 4 + 1 + 1, "a chunk per token, usage, [DONE]");
    for e in &events[..4] {
        assert_eq!(e["choices"][0]["delta"]["role"], "assistant");
        assert!(e["usage"].is_null());
    }
    assert_eq!(events[3]["choices"][0]["finish_reason"], "length");
    assert_eq!(events[4]["choices"], json!([]));
    assert_eq!(events[4]["usage"]["completion_tokens"], 4);

    let resp = post(
        &m,
        "/v1/chat/completions",
        json!({"messages": msgs, "top_p": 1.0}),
    )
    .await;
    assert_eq!(resp.status(), 422);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error_type"], "validation");
    // `stop` takes a list only.
    let resp = post(
        &m,
        "/v1/chat/completions",
        json!({"messages": msgs, "stop": "x"}),
    )
    .await;
    assert_eq!(resp.status(), 422);
}
