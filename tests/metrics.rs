//! Metrics, checked by scraping `/metrics` after driving known traffic through lingo: the
//! mock knows the truth (its own token counters), lingo must agree exactly.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::collections::BTreeSet;

use common::*;
use lingo::mock::MockKind;
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

fn request(dialect: &str, stream: bool, max: u64) -> (&'static str, Value) {
    match dialect {
        "sglang" => (
            "/generate",
            json!({"text": "a b c d", "stream": stream,
            "sampling_params": {"max_new_tokens": max, "ignore_eos": true}}),
        ),
        "openai-completions" => (
            "/v1/completions",
            json!({"model": "mock-model",
            "prompt": "a b c d", "max_tokens": max, "ignore_eos": true, "stream": stream}),
        ),
        _ => (
            "/v1/chat/completions",
            json!({"model": "mock-model", "max_tokens": max,
            "messages": [{"role": "user", "content": "a b c d"}], "ignore_eos": true,
            "stream": stream}),
        ),
    }
}

#[tokio::test]
async fn token_totals_per_dialect_match_the_upstream() {
    for kind in [MockKind::Vllm, MockKind::Sglang] {
        let mock = mock(kind).await;
        let base = lingo(config_for(&mock.url(), kind_setting(kind))).await;
        let dialects = ["sglang", "openai-completions", "openai-chat"];
        for (i, d) in dialects.iter().enumerate() {
            for stream in [false, true] {
                let max = 3 + i as u64;
                let (path, body) = request(d, stream, max);
                let r = post_json(&format!("{base}{path}"), &body).await;
                assert_eq!(r.status(), 200);
                r.text().await.unwrap();
            }
        }
        let text = scrape(&base).await;
        let stats = mock.state.stats();
        let mut total = 0.0;
        for (i, d) in dialects.iter().enumerate() {
            let want = [("dialect", *d), ("model", "mock-model"), ("outcome", "ok")];
            let gen = sum(&text, "lingo_generation_tokens_total", &want[..2]);
            assert_eq!(gen, 2.0 * (3 + i) as f64, "{kind:?} {d}: generation tokens");
            assert_eq!(
                sum(&text, "lingo_requests_total", &want),
                2.0,
                "{kind:?} {d}"
            );
            let ttft = sum(&text, "lingo_time_to_first_token_seconds_count", &want[..2]);
            assert_eq!(ttft, 2.0, "{kind:?} {d}: one TTFT per request");
            let itl = sum(&text, "lingo_inter_token_latency_seconds_count", &want[..2]);
            // Only the streamed request has gaps: N-1 token-weighted ones.
            assert_eq!(itl, (2 + i) as f64, "{kind:?} {d}: token-weighted gaps");
            total += gen;
        }
        assert_eq!(
            total, stats.completion_tokens as f64,
            "{kind:?}: lingo agrees with the mock"
        );
        let prompt = sum(&text, "lingo_prompt_tokens_total", &[]);
        assert_eq!(
            prompt, stats.prompt_tokens as f64,
            "{kind:?}: prompt tokens"
        );
        assert_eq!(sum(&text, "lingo_estimated_token_requests_total", &[]), 0.0);
        assert_eq!(sum(&text, "lingo_requests_in_flight", &[]), 0.0);
    }
}

/// Replace the per-response `id` and `created` values, which differ between any two requests.
fn normalise(body: &str) -> String {
    let mut out = Vec::new();
    for e in sse_events(body) {
        let mut e = e;
        if let Some(o) = e.as_object_mut() {
            o.insert("id".into(), json!("ID"));
            o.insert("created".into(), json!(0));
        }
        out.push(e.to_string());
    }
    out.join("\n")
}

#[tokio::test]
async fn injected_usage_chunk_is_removed_but_counted() {
    for (path, dialect) in [
        ("/v1/completions", "openai-completions"),
        ("/v1/chat/completions", "openai-chat"),
    ] {
        let mock = mock(MockKind::Vllm).await;
        let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
        let (_, body) = request(dialect, true, 6);
        let direct = post_json(&format!("{}{path}", mock.url()), &body)
            .await
            .text()
            .await
            .unwrap();
        let via = post_json(&format!("{base}{path}"), &body)
            .await
            .text()
            .await
            .unwrap();
        assert!(
            !direct.contains("\"completion_tokens\""),
            "the client asked for no usage"
        );
        assert_eq!(
            normalise(&via),
            normalise(&direct),
            "{dialect}: the client sees the upstream's stream"
        );
        // Byte for byte apart from the two per-response fields: same framing, same order.
        assert_eq!(via.len(), direct.len(), "{dialect}");
        let text = scrape(&base).await;
        assert_eq!(
            sum(
                &text,
                "lingo_generation_tokens_total",
                &[("dialect", dialect)]
            ),
            6.0
        );
        // The mock saw the request twice (directly and through lingo).
        let upstream_prompt = mock.state.stats().prompt_tokens as f64 / 2.0;
        assert_eq!(
            sum(&text, "lingo_prompt_tokens_total", &[("dialect", dialect)]),
            upstream_prompt
        );
        assert_eq!(sum(&text, "lingo_estimated_token_requests_total", &[]), 0.0);
    }
}

#[tokio::test]
async fn a_thousand_model_names_leave_a_closed_label_set() {
    // SGLang's OpenAI routes accept any model name, so every request succeeds.
    let mock = mock(MockKind::Sglang).await;
    let mut cfg = config_for(&mock.url(), KindSetting::Sglang);
    cfg.models.insert("alias".into(), "mock-model".into());
    let base = lingo(cfg).await;
    let c = client();
    for i in 0..1000 {
        let body = json!({"model": format!("model-{i}"), "prompt": "a", "max_tokens": 1});
        let r = c
            .post(format!("{base}/v1/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    let text = scrape(&base).await;
    let models: BTreeSet<String> = samples(&text)
        .into_iter()
        .filter_map(|(_, labels, _)| labels.get("model").cloned())
        .collect();
    let allowed: BTreeSet<String> = ["alias", "mock-model", "other"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(
        models.is_subset(&allowed),
        "model labels leaked: {models:?}"
    );
    assert_eq!(
        sum(&text, "lingo_requests_total", &[("model", "other")]),
        1000.0
    );
}

#[tokio::test]
async fn errors_and_cancellations_are_counted_by_outcome() {
    let mock = mock(MockKind::Vllm).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    let r = client()
        .post(format!("{base}/generate"))
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = post_json(
        &format!("{base}/v1/completions"),
        &json!({"model": "nope", "prompt": "a"}),
    )
    .await;
    assert_eq!(r.status(), 404);
    r.bytes().await.unwrap();
    let text = scrape(&base).await;
    assert_eq!(
        sum(
            &text,
            "lingo_requests_total",
            &[("outcome", "client_error")]
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        sum(&text, "lingo_errors_total", &[("kind", "invalid_request")]),
        1.0
    );
}

#[tokio::test]
async fn vllm_compatible_names_and_the_request_log() {
    let mock = mock(MockKind::Vllm).await;
    let dir = std::env::temp_dir().join(format!("lingo-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("requests.jsonl");
    let mut cfg = config_for(&mock.url(), KindSetting::Vllm);
    cfg.metrics.compat = Some(lingo::config::MetricsCompat::Vllm);
    cfg.metrics.request_log = Some(log.display().to_string());
    let base = lingo(cfg).await;
    for stream in [false, true] {
        let (path, body) = request("sglang", stream, 5);
        let r = post_json(&format!("{base}{path}"), &body).await;
        r.text().await.unwrap();
    }
    let text = scrape(&base).await;
    let m = [("model_name", "mock-model")];
    assert_eq!(
        sum(&text, "vllm:generation_tokens_total", &m),
        10.0,
        "{text}"
    );
    assert_eq!(sum(&text, "vllm:prompt_tokens_total", &m), 8.0);
    assert_eq!(
        sum(
            &text,
            "vllm:request_success_total",
            &[("finished_reason", "length"), m[0]]
        ),
        2.0
    );
    assert_eq!(
        sum(&text, "vllm:time_to_first_token_seconds_count", &m),
        2.0
    );
    assert_eq!(
        sum(&text, "vllm:inter_token_latency_seconds_count", &m),
        4.0
    );
    assert_eq!(
        sum(&text, "vllm:e2e_request_latency_seconds_count", &m),
        2.0
    );
    assert_eq!(sum(&text, "vllm:num_requests_running", &m), 0.0);
    // The log is written off the request path: wait until both lines are there.
    let mut lines = Vec::new();
    for _ in 0..500 {
        lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        if lines.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, stream) in lines.iter().zip([false, true]) {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["dialect"], "sglang");
        assert_eq!(v["model"], "mock-model");
        assert_eq!(v["completion_tokens"], 5);
        assert_eq!(v["prompt_tokens"], 4);
        assert_eq!(v["outcome"], "ok");
        assert_eq!(v["finish_reason"], "length");
        assert_eq!(v["stream"], stream);
        assert!(
            v["request_id"].is_string()
                && v["ttft"].as_f64().unwrap() <= v["e2e"].as_f64().unwrap()
        );
        // The arrival in Unix seconds: before the line was read, and not long before.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let time = v["time"].as_f64().unwrap();
        assert!(time <= now && time > now - 60.0, "{time} against {now}");
        assert!(!line.contains("a b c d"), "no prompt text in the log");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// TGI gives prompt counts only in a header (whole responses) or in the final stream event's
/// `details` (which lingo asks for when it translates): either way lingo's totals are exact.
#[tokio::test]
async fn tgi_counts_come_from_its_header_and_final_details() {
    let mock = mock(MockKind::Tgi).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Tgi)).await;
    let tgi = json!({"inputs": "one two three four",
                     "parameters": {"max_new_tokens": 6, "details": true}});
    let sglang = |stream: bool| json!({"text": "a b c", "stream": stream, "sampling_params": {"max_new_tokens": 5}});
    let requests = [
        ("/generate_stream", tgi),
        ("/generate", sglang(false)),
        ("/generate", sglang(true)),
    ];
    for (path, body) in requests {
        let resp = post_json(&format!("{base}{path}"), &body).await;
        assert_eq!(resp.status(), 200, "{path}");
        resp.text().await.unwrap();
    }
    let stats = mock.state.stats();
    assert_eq!(stats.completed, 3);
    let text = scrape(&base).await;
    let up = [("upstream", "default")];
    assert_eq!(
        sum(&text, "lingo_prompt_tokens_total", &up),
        stats.prompt_tokens as f64
    );
    assert_eq!(
        sum(&text, "lingo_generation_tokens_total", &up),
        stats.completion_tokens as f64
    );
    assert_eq!(sum(&text, "lingo_estimated_token_requests_total", &up), 0.0);
}

/// A vLLM-shaped upstream that streams four tokens as real vLLM may: the second's bytes end
/// inside a character (an empty text), and the last one's text is empty on the finish chunk;
/// then the usage chunk and `[DONE]`.
async fn empty_text_tokens_upstream() -> String {
    let event = |text: &str, finish: Value| {
        let c = json!({"id": "cmpl-1", "object": "text_completion", "created": 1,
            "model": "mock-model", "choices": [{"index": 0, "text": text, "logprobs": null,
            "finish_reason": finish}], "usage": null});
        format!("data: {c}\n\n")
    };
    let usage = json!({"id": "cmpl-1", "object": "text_completion", "created": 1,
        "model": "mock-model", "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}});
    let body = [
        event("a", Value::Null),
        event("", Value::Null),
        event("b", Value::Null),
        event("", json!("length")),
        format!("data: {usage}\n\ndata: [DONE]\n\n"),
    ]
    .concat();
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { ([("content-type", "text/event-stream")], body) }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    url
}

#[tokio::test]
async fn tokens_with_empty_text_get_their_inter_token_observations() {
    let up = empty_text_tokens_upstream().await;
    let base = lingo(config_for(&up, KindSetting::Vllm)).await;
    for stream_options in [json!({"include_usage": true}), Value::Null] {
        let body = json!({"model": "mock-model", "prompt": "x", "max_tokens": 4, "stream": true,
            "stream_options": stream_options});
        let resp = post_json(&format!("{base}/v1/completions"), &body).await;
        assert_eq!(resp.status(), 200);
        resp.text().await.unwrap();
    }
    let text = scrape(&base).await;
    let want = [("dialect", "openai-completions")];
    assert_eq!(sum(&text, "lingo_generation_tokens_total", &want), 8.0);
    // Three gaps after the first of four tokens, in each of the two streams: the empty
    // mid-stream text is a token, and the finish chunk's token is found in the final count.
    assert_eq!(
        sum(&text, "lingo_inter_token_latency_seconds_count", &want),
        6.0
    );
}
