//! The `openai` upstream kind: any OpenAI-compatible server, reached with an API key from the
//! environment and sent only the standard API (the mock's `openai` kind refuses everything
//! else, as OpenAI does).

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::*;
use lingo::config::Config;
use lingo::mock::{MockConfig, MockKind};
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

const KEY: &str = "sk-upstream";

async fn openai_mock(key: Option<&str>) -> Mock {
    mock_with(MockConfig {
        kind: MockKind::Openai,
        api_key: key.map(str::to_string),
        ..MockConfig::default()
    })
    .await
}

/// A config whose API key comes from a variable only this test sets.
fn with_key(url: &str, kind: KindSetting, var: &str) -> Config {
    std::env::set_var(var, KEY);
    let mut c = config_for(url, kind);
    c.upstream.api_key_env = Some(var.to_string());
    c
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let r = post_json(&format!("{base}{path}"), &body).await;
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_configured_key_reaches_the_upstream_and_replaces_the_clients() {
    let mock = openai_mock(Some(KEY)).await;
    let var = "LINGO_TEST_OPENAI_KEY_REPLACES";
    let base = lingo(with_key(&mock.url(), KindSetting::Openai, var)).await;
    let chat = json!({"model": "mock-model", "max_tokens": 3,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = client()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth("sk-client-wrong")
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // SGLang's /generate names no model: lingo's discovery needs the key too.
    let (status, v) = post(
        &base,
        "/generate",
        json!({"text": "a b", "sampling_params":
                                                      {"max_new_tokens": 4}}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["meta_info"]["completion_tokens"], 4);
}

#[tokio::test]
async fn without_a_key_lingo_forwards_the_clients_credentials() {
    let mock = openai_mock(Some(KEY)).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Openai)).await;
    let body = json!({"model": "mock-model", "prompt": "a b", "max_tokens": 2});
    let no_key = post_json(&format!("{base}/v1/completions"), &body).await;
    assert_eq!(
        no_key.status(),
        401,
        "the upstream's refusal reaches the client"
    );
    let bearer = client()
        .post(format!("{base}/v1/completions"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);
    // The Anthropic SDK sends its key as x-api-key: it becomes a bearer token.
    let messages = json!({"model": "mock-model", "max_tokens": 2,
                          "messages": [{"role": "user", "content": "hi"}]});
    let anthropic = client()
        .post(format!("{base}/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(&messages)
        .send()
        .await
        .unwrap();
    assert_eq!(
        anthropic.status(),
        200,
        "{}",
        anthropic.text().await.unwrap()
    );
}

#[tokio::test]
async fn vllm_extensions_are_refused_by_name_not_sent() {
    let mock = openai_mock(None).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Openai)).await;
    let cases = [
        (
            "/generate",
            json!({"text": "a", "sampling_params": {"max_new_tokens": 2, "top_k": 5}}),
            "sampling_params.top_k",
        ),
        (
            "/v1/messages",
            json!({"model": "mock-model", "max_tokens": 2, "top_k": 5,
                   "messages": [{"role": "user", "content": "hi"}]}),
            "top_k",
        ),
        (
            "/api/generate",
            json!({"model": "mock-model", "prompt": "a", "raw": true, "stream": false,
                   "options": {"min_p": 0.1}}),
            "options.min_p",
        ),
        (
            "/v1/messages",
            json!({"model": "mock-model", "max_tokens": 2, "messages": [
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}]}),
            "messages",
        ),
    ];
    let requests_before = mock.state.stats().requests;
    for (path, body, field) in cases {
        let (status, v) = post(&base, path, body).await;
        assert_eq!(status, 400, "{path}: {v}");
        assert!(v.to_string().contains(field), "{path} names {field}: {v}");
    }
    assert_eq!(
        mock.state.stats().requests,
        requests_before,
        "lingo refused them itself"
    );
    // Neutral values ask for nothing and pass.
    let neutral = json!({"text": "a", "sampling_params":
                         {"max_new_tokens": 2, "top_k": -1, "min_p": 0.0}});
    let (status, v) = post(&base, "/generate", neutral).await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn streams_are_counted_from_the_final_usage() {
    let mock = openai_mock(None).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Openai)).await;
    let body = json!({"text": "a b c", "stream": true,
                      "sampling_params": {"max_new_tokens": 5}});
    let r = post_json(&format!("{base}/generate"), &body).await;
    assert_eq!(r.status(), 200);
    let events = sse_events(&r.text().await.unwrap());
    let last = &events[events.len() - 2];
    assert_eq!(last["meta_info"]["completion_tokens"], 5, "{last}");
    let text = scrape(&base).await;
    let stats = mock.state.stats();
    assert_eq!(
        sum(&text, "lingo_generation_tokens_total", &[]) as u64,
        stats.completion_tokens
    );
    assert_eq!(
        sum(&text, "lingo_prompt_tokens_total", &[]) as u64,
        stats.prompt_tokens
    );
}

#[tokio::test]
async fn auto_detection_health_and_a_missing_key_variable() {
    let mock = openai_mock(None).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Auto)).await;
    let info = get_json(&format!("{base}/get_server_info")).await;
    assert_eq!(info["lingo"]["upstream_kind"], "openai", "{info}");
    // OpenAI has no /health: lingo answers from the model list.
    let health = client().get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    let mut c = config_for(&mock.url(), KindSetting::Openai);
    c.upstream.api_key_env = Some("LINGO_TEST_SURELY_UNSET_VARIABLE".into());
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("upstream.api_key_env"), "{err}");
}
