//! End-to-end behaviour of the proxy beyond the happy path: streaming without buffering,
//! client disconnects, errors in each client's dialect, auxiliary endpoints, aliases.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use lingo::mock::{FailMode, MockConfig, MockKind};
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

fn generate(stream: bool, max: u64) -> Value {
    json!({"text": "a b c", "stream": stream,
           "sampling_params": {"max_new_tokens": max, "ignore_eos": true}})
}

async fn vllm_pair() -> (Mock, String) {
    let mock = mock(MockKind::Vllm).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    (mock, base)
}

/// The highest `completion_tokens` among the SGLang chunks received so far.
fn tokens_so_far(buf: &str) -> u64 {
    sse_events(buf)
        .iter()
        .filter_map(|e| e["meta_info"]["completion_tokens"].as_u64())
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn streaming_never_buffers() {
    let (mock, base) = vllm_pair().await;
    let k = 3;
    mock.state.hold_after(k);
    let resp = post_json(&format!("{base}/generate"), &generate(true, 10)).await;
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    // The mock is holding after token k: the client must already have tokens 1..k. If lingo
    // buffered, this read would never complete (the bound only keeps a broken build finite).
    let got_k = tokio::time::timeout(Duration::from_secs(20), async {
        while tokens_so_far(&buf) < k as u64 {
            let chunk = body.next().await.expect("stream ended early").unwrap();
            buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await;
    assert!(
        got_k.is_ok(),
        "client did not receive tokens 1..{k} while the upstream held"
    );
    assert_eq!(
        tokens_so_far(&buf),
        k as u64,
        "nothing past token k can exist yet"
    );
    mock.state.release();
    while let Some(chunk) = body.next().await {
        buf.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    assert_eq!(tokens_so_far(&buf), 10);
    assert!(buf.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn client_disconnect_aborts_upstream() {
    let mock = mock_with(MockConfig {
        kind: MockKind::Vllm,
        itl: Duration::from_millis(20),
        ..MockConfig::default()
    })
    .await;
    let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    let resp = post_json(&format!("{base}/generate"), &generate(true, 500)).await;
    let mut body = resp.bytes_stream();
    body.next().await.unwrap().unwrap();
    drop(body);
    let state = mock.state.clone();
    tokio::time::timeout(Duration::from_secs(10), state.wait_for(|s| s.aborted == 1))
        .await
        .unwrap_or_else(|_| panic!("upstream request was not dropped: {:?}", state.stats()));
    assert_eq!(mock.state.stats().completed, 0);
}

#[tokio::test]
async fn malformed_json_gets_each_dialects_error_shape() {
    let (_mock, base) = vllm_pair().await;
    let r = client()
        .post(format!("{base}/generate"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "error", "SGLang's flat validation shape: {v}");
    let r = post_json(
        &format!("{base}/generate"),
        &json!({"text": "x", "sampling_params": {"temperature": "hot"}}),
    )
    .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("sampling_params.temperature"),
        "{v}"
    );
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let r = post_json(
            &format!("{base}{path}"),
            &json!({"model": "mock-model", "prompt": "x", "stream": "yes"}),
        )
        .await;
        assert_eq!(r.status(), 400, "{path}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["param"], "stream", "{path}: {v}");
        assert_eq!(v["error"]["code"], 400);
    }
}

#[tokio::test]
async fn unhonourable_field_is_refused_by_name() {
    let (mock, base) = vllm_pair().await;
    let r = post_json(
        &format!("{base}/generate"),
        &json!({"text": "x", "sampling_params": {"stop_regex": "a+"}}),
    )
    .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sampling_params.stop_regex"),
        "{v}"
    );
    assert_eq!(
        mock.state.stats().requests,
        0,
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn upstream_4xx_is_translated_with_its_message() {
    let (_mock, base) = vllm_pair().await;
    let r = post_json(
        &format!("{base}/generate"),
        &json!({"text": "x", "lora_path": "no-such-adapter"}),
    )
    .await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("no-such-adapter"),
        "upstream's message kept: {v}"
    );
}

#[tokio::test]
async fn unreachable_upstream_is_502_and_timeout_is_504() {
    // A port that was just free: bind, read the address, close.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let base = lingo(config_for(&format!("http://{dead}"), KindSetting::Vllm)).await;
    let r = post_json(
        &format!("{base}/v1/completions"),
        &json!({"model": "m", "prompt": "x"}),
    )
    .await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].is_string());

    let mock = mock_with(MockConfig {
        kind: MockKind::Vllm,
        ttft: Duration::from_secs(30),
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config_for(&mock.url(), KindSetting::Vllm);
    cfg.timeouts.response_headers = Duration::from_millis(200);
    cfg.upstream.model = Some("mock-model".into());
    let base = lingo(cfg).await;
    let r = post_json(&format!("{base}/generate"), &generate(false, 4)).await;
    assert_eq!(r.status(), 504);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timeouts.response_headers"),
        "{v}"
    );
}

#[tokio::test]
async fn failure_mid_stream_is_an_in_band_error_then_a_clean_end() {
    // A per-token delay, so the tokens before the failure leave the mock before it fails
    // (hyper would otherwise discard its unflushed buffer with the aborted connection).
    let mock = mock_with(MockConfig {
        kind: MockKind::Vllm,
        itl: Duration::from_millis(5),
        ..MockConfig::default()
    })
    .await;
    let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    mock.state.fail_next_stream(2, FailMode::ErrorEvent);
    let body = post_json(&format!("{base}/generate"), &generate(true, 10))
        .await
        .text()
        .await
        .unwrap();
    let events = sse_events(&body);
    assert_eq!(events.last(), Some(&json!("[DONE]")), "{body}");
    let err = &events[events.len() - 2];
    assert!(err["error"]["message"].is_string(), "{body}");
    assert!(
        events.iter().any(|e| e["text"].is_string()),
        "tokens before the failure arrived"
    );

    mock.state.fail_next_stream(2, FailMode::Abort);
    let body = post_json(&format!("{base}/generate"), &generate(true, 10))
        .await
        .text()
        .await
        .unwrap();
    let events = sse_events(&body);
    assert_eq!(events.last(), Some(&json!("[DONE]")), "{body}");
    assert!(
        events[events.len() - 2]["error"]["message"].is_string(),
        "{body}"
    );
}

#[tokio::test]
async fn sglang_auxiliary_endpoints_on_a_vllm_upstream() {
    let (_mock, base) = vllm_pair().await;
    let c = client();
    let info: Value = c
        .get(format!("{base}/get_model_info"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["model_path"], "mock-model");
    let info2: Value = c
        .get(format!("{base}/model_info"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info, info2);
    for path in ["/get_server_info", "/server_info"] {
        let s: Value = c
            .get(format!("{base}{path}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(s["incremental_streaming_output"], false, "{path}");
        assert!(s["internal_states"].is_array());
    }
    for path in ["/health", "/health_generate"] {
        assert_eq!(
            c.get(format!("{base}{path}"))
                .send()
                .await
                .unwrap()
                .status(),
            200,
            "{path}"
        );
    }
    let r = c.post(format!("{base}/flush_cache")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let models: Value = c
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "mock-model");
    let r = c.get(format!("{base}/no/such/path")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn flush_cache_is_forwarded_to_sglang() {
    let mock = mock(MockKind::Sglang).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Sglang)).await;
    let r = client()
        .post(format!("{base}/flush_cache"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().starts_with("Cache flushed"));
}

#[tokio::test]
async fn model_alias_is_rewritten_both_ways() {
    let mock = mock(MockKind::Vllm).await;
    let mut cfg = config_for(&mock.url(), KindSetting::Vllm);
    cfg.models.insert("qwen".into(), "mock-model".into());
    let base = lingo(cfg).await;
    let req = json!({"model": "qwen", "prompt": "a b", "max_tokens": 3, "ignore_eos": true});
    let v: Value = post_json(&format!("{base}/v1/completions"), &req)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["model"], "qwen", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    let mut req = req;
    req["stream"] = json!(true);
    let body = post_json(&format!("{base}/v1/completions"), &req)
        .await
        .text()
        .await
        .unwrap();
    let events = sse_events(&body);
    assert!(events.len() > 2);
    for e in &events[..events.len() - 1] {
        assert_eq!(e["model"], "qwen", "{e}");
    }
    let models: Value = client()
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(models["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == "qwen"));
}

#[tokio::test]
async fn model_list_is_refreshed_when_the_upstream_says_not_found() {
    let (mock, base) = vllm_pair().await;
    // Warm lingo's view of the upstream's models, then let the upstream "switch models".
    let r = post_json(&format!("{base}/generate"), &generate(false, 2)).await;
    assert_eq!(r.status(), 200);
    mock.state.set_model("renamed-model");
    let r = post_json(&format!("{base}/generate"), &generate(false, 2)).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

#[tokio::test]
async fn metrics_count_the_upstreams_tokens() {
    let (_mock, base) = vllm_pair().await;
    for stream in [false, true] {
        let r = post_json(&format!("{base}/generate"), &generate(stream, 5)).await;
        r.text().await.unwrap();
    }
    let text = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("lingo_generation_tokens_total{") && l.contains("dialect=\"sglang\"")
        })
        .unwrap_or_else(|| panic!("no generation counter in\n{text}"));
    assert!(line.ends_with(" 10"), "{line}");
    assert!(text.contains("lingo_time_to_first_token_seconds_count{dialect=\"sglang\""));
}

// ---------------------------------------------------------------- TGI clients

fn tgi_stream_request(params: Value) -> Value {
    json!({"inputs": "a b c", "parameters": params})
}

/// POST to `/generate_stream`; TGI answers 200 whatever happens, so lingo does too.
async fn tgi_events(base: &str, body: Value) -> Vec<Value> {
    let r = post_json(&format!("{base}/generate_stream"), &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    sse_events(&r.text().await.unwrap())
}

#[tokio::test]
async fn tgi_stream_errors_are_in_band_even_before_output() {
    let (mock, base) = vllm_pair().await;
    let events = tgi_events(&base, tgi_stream_request(json!({"typical_p": 0.5}))).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["error_type"], "validation");
    assert!(events[0]["error"]
        .as_str()
        .unwrap()
        .contains("parameters.typical_p"));
    assert_eq!(
        mock.state.stats().requests,
        0,
        "nothing reached the upstream"
    );

    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let base = lingo(config_for(&format!("http://{dead}"), KindSetting::Vllm)).await;
    let events = tgi_events(&base, tgi_stream_request(json!({"max_new_tokens": 3}))).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["error_type"], "incomplete_generation");
}

#[tokio::test]
async fn tgi_stream_failure_after_output_is_an_error_event_last() {
    let (mock, base) = vllm_pair().await;
    mock.state.fail_next_stream(2, FailMode::ErrorEvent);
    let events = tgi_events(&base, tgi_stream_request(json!({"max_new_tokens": 6}))).await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[0]["index"], 1);
    assert_eq!(events[1]["index"], 2);
    assert!(events[2]["error"].is_string(), "{events:?}");
    assert!(events[2].get("token").is_none());
}

#[tokio::test]
async fn tgi_info_is_synthesized_for_other_upstreams() {
    let (_mock, base) = vllm_pair().await;
    let v: Value = get_json(&format!("{base}/info")).await;
    assert_eq!(v["model_id"], "mock-model");
    assert_eq!(v["max_total_tokens"], 32768);
    assert_eq!(v["max_stop_sequences"], 4);
    assert_eq!(v["lingo"]["upstream_kind"], "vllm");
}

#[tokio::test]
async fn generate_body_without_a_known_prompt_field_is_refused_with_what_was_expected() {
    let (mock, base) = vllm_pair().await;
    let r = post_json(
        &format!("{base}/generate"),
        &json!({"text": "a", "inputs": "b"}),
    )
    .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    let msg = v["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("`text` or `input_ids` (SGLang)") && msg.contains("`inputs` (TGI)"),
        "{v}"
    );
    assert_eq!(mock.state.stats().requests, 0);
}
