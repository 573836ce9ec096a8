//! Health and failover over sockets: endpoints that refuse, reset or answer 5xx are failed
//! over; the retry budget caps what a failing pool receives; a stream cut midway is not
//! retried; ejection after failures in a row and return after a passing probe; `Retry-After`
//! holds an endpoint off; an all-down pool answers 503 with `Retry-After` in each dialect.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use common::*;
use lingo::config::{Config, EndpointConfig, HealthConfig, Policy, PoolConfig};
use lingo::mock::{MockConfig, MockKind};
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

/// Probes every 50 ms; out after `unhealthy_after` failures for 200 ms (doubling to 1 s).
fn quick(unhealthy_after: u32) -> HealthConfig {
    HealthConfig {
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(500),
        unhealthy_after,
        healthy_after: 1,
        backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(1),
    }
}

fn fleet(urls: &[String], health: HealthConfig) -> Config {
    let endpoints = urls
        .iter()
        .map(|u| EndpointConfig::new(u, KindSetting::Vllm))
        .collect();
    let pool = PoolConfig {
        policy: Policy::RoundRobin,
        health: Some(health),
        endpoints,
        ..PoolConfig::default()
    };
    Config {
        pools: BTreeMap::from([("p".to_string(), pool)]),
        ..Config::default()
    }
}

fn completions() -> Value {
    json!({"model": "mock-model", "prompt": "a b c", "max_tokens": 3})
}

/// Poll an async condition, at most 500 times 10 ms apart.
async fn until<F: Future<Output = bool>>(mut f: impl FnMut() -> F) -> bool {
    for _ in 0..500 {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// The endpoint of `/fleet` whose URL is `url`.
async fn endpoint(base: &str, url: &str) -> Value {
    let v = get_json(&format!("{base}/fleet")).await;
    v["pools"][0]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["url"] == url)
        .cloned()
        .unwrap()
}

/// An address nothing listens on (bound, then let go).
async fn refused() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

/// A server that passes `/health` and answers every generation with `status` and
/// `Retry-After: 30`; returns its URL, and the task (abort it to make it refuse).
async fn answering(status: u16) -> (String, tokio::task::JoinHandle<()>) {
    use axum::routing::get;
    let app = axum::Router::new()
        // `connection: close`, so no pooled connection outlives the server.
        .route("/health", get(|| async { ([("connection", "close")], "") }))
        .fallback(move || async move {
            let code = http::StatusCode::from_u16(status).unwrap();
            let body = json!({"error": {"message": "busy"}}).to_string();
            (code, [("retry-after", "30"), ("connection", "close")], body)
        });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(l, app).await.unwrap();
    });
    (url, task)
}

async fn retries(base: &str, reason: &str) -> f64 {
    sum(
        &scrape(base).await,
        "lingo_endpoint_retries_total",
        &[("reason", reason)],
    )
}

/// Every request succeeds through the good endpoint although the other fails each its way.
async fn every_request_succeeds(base: &str, n: usize) {
    for _ in 0..n {
        let r = post_json(&format!("{base}/v1/completions"), &completions()).await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert!(v["choices"][0]["text"].is_string(), "{v}");
    }
}

#[tokio::test]
async fn an_endpoint_that_refuses_is_failed_over() {
    let good = mock(MockKind::Vllm).await;
    // Healthy at the first probe round, then gone: new connections are refused.
    let (gone, task) = answering(200).await;
    let mut h = quick(3);
    // One round only, so the probes do not eject it before the requests see it fail.
    h.interval = Duration::from_secs(3600);
    let base = lingo(fleet(&[gone.clone(), good.url()], h)).await;
    assert_eq!(endpoint(&base, &gone).await["state"], "healthy");
    task.abort();
    let _ = task.await;
    every_request_succeeds(&base, 6).await;
    assert!(retries(&base, "connect").await >= 1.0);
    assert_eq!(good.state.stats().completed, 6);
    // Three failures in a row took it out (the good one was still healthy).
    assert_eq!(endpoint(&base, &gone).await["state"], "ejected");
}

#[tokio::test]
async fn an_endpoint_that_resets_is_failed_over() {
    let bad = mock(MockKind::Vllm).await;
    let good = mock(MockKind::Vllm).await;
    let r = post_json(
        &format!("{}/mock/fault", bad.url()),
        &json!({"mode": "reset", "count": 100}),
    )
    .await;
    assert_eq!(r.status(), 200);
    let base = lingo(fleet(&[bad.url(), good.url()], quick(1000))).await;
    every_request_succeeds(&base, 6).await;
    assert!(retries(&base, "reset").await >= 1.0);
    assert_eq!(bad.state.stats().completed, 0);
    assert_eq!(good.state.stats().completed, 6);
}

#[tokio::test]
async fn an_endpoint_that_answers_5xx_is_failed_over_translated_too() {
    let bad = mock_with(MockConfig {
        fail_every: Some(1),
        ..MockConfig::default()
    })
    .await;
    let good = mock(MockKind::Vllm).await;
    let base = lingo(fleet(&[bad.url(), good.url()], quick(1000))).await;
    every_request_succeeds(&base, 4).await;
    // SGLang's native route, translated to the vLLM endpoints.
    for _ in 0..4 {
        let body = json!({"text": "a b", "sampling_params": {"max_new_tokens": 2}});
        let r = post_json(&format!("{base}/generate"), &body).await;
        assert_eq!(r.status(), 200);
    }
    assert!(retries(&base, "status_5xx").await >= 2.0);
    assert!(bad.state.stats().requests >= 2);
    assert_eq!(good.state.stats().completed, 8);
}

#[tokio::test]
async fn the_retry_budget_caps_what_a_failing_pool_receives() {
    let mocks = [
        mock_with(MockConfig {
            fail_every: Some(1),
            ..MockConfig::default()
        })
        .await,
        mock_with(MockConfig {
            fail_every: Some(1),
            ..MockConfig::default()
        })
        .await,
        mock_with(MockConfig {
            fail_every: Some(1),
            ..MockConfig::default()
        })
        .await,
    ];
    let urls: Vec<String> = mocks.iter().map(|m| m.url()).collect();
    // Never ejected, so only the budget limits the retries (2 each would make 3 attempts).
    let base = lingo(fleet(&urls, quick(100_000))).await;
    let n = 60u64;
    for _ in 0..n {
        let r = post_json(&format!("{base}/v1/completions"), &completions()).await;
        assert_eq!(r.status(), 500);
    }
    let attempts: u64 = mocks.iter().map(|m| m.state.stats().requests).sum();
    // 20% of the requests plus a floor of 3 a second over the 10 s window.
    assert!(attempts <= n + n / 5 + 30, "{attempts}");
    assert!(attempts > n, "no retry at all: {attempts}");
    let r = retries(&base, "status_5xx").await;
    assert_eq!(r as u64, attempts - n);
}

#[tokio::test]
async fn a_stream_cut_midway_gets_the_in_band_error_and_no_retry() {
    let a = mock(MockKind::Vllm).await;
    let b = mock(MockKind::Vllm).await;
    for m in [&a, &b] {
        m.state
            .arm_fault(Some("close-mid-stream".parse().unwrap()), 1);
    }
    let base = lingo(fleet(&[a.url(), b.url()], quick(1000))).await;
    let mut body = completions();
    body["stream"] = json!(true);
    let r = post_json(&format!("{base}/v1/completions"), &body).await;
    assert_eq!(r.status(), 200);
    let events = sse_events(&r.text().await.unwrap());
    let n = events.len();
    assert!(n >= 2, "{events:?}");
    assert!(events[n - 2]["error"]["message"].is_string(), "{events:?}");
    assert_eq!(a.state.stats().requests + b.state.stats().requests, 1);
    let text = scrape(&base).await;
    assert_eq!(sum(&text, "lingo_endpoint_retries_total", &[]), 0.0);
    assert_eq!(
        sum(
            &text,
            "lingo_endpoint_requests_total",
            &[("outcome", "upstream_error")]
        ),
        1.0
    );
}

#[tokio::test]
async fn failures_in_a_row_eject_and_a_passing_probe_brings_it_back() {
    let bad = mock(MockKind::Vllm).await;
    let good = mock(MockKind::Vllm).await;
    bad.state.arm_fault(Some("reset".parse().unwrap()), 1000);
    let base = lingo(fleet(&[bad.url(), good.url()], quick(2))).await;
    // Round robin sends every other request to `bad` until it is out.
    every_request_succeeds(&base, 6).await;
    let ejected = until(|| async {
        endpoint(&base, &bad.url()).await["ejections"]
            .as_u64()
            .unwrap()
            >= 1
    })
    .await;
    assert!(ejected);
    let e = endpoint(&base, &bad.url()).await;
    assert!(e["last_error"]["message"].is_string(), "{e}");
    // It recovers; after its backoff a probe passes and it takes requests again.
    bad.state.arm_fault(None, 0);
    let back = until(|| async { endpoint(&base, &bad.url()).await["state"] == "healthy" }).await;
    assert!(back);
    every_request_succeeds(&base, 4).await;
    assert!(bad.state.stats().completed >= 1);
    let text = scrape(&base).await;
    let who = [("endpoint", bad.addr.to_string())];
    let labels: Vec<(&str, &str)> = who.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(sum(&text, "lingo_endpoint_ejections_total", &labels), 1.0);
    assert_eq!(sum(&text, "lingo_endpoint_healthy", &labels), 1.0);
}

#[tokio::test]
async fn retry_after_on_a_429_or_503_holds_the_endpoint_off() {
    for status in [429u16, 503] {
        let (busy, _task) = answering(status).await;
        let good = mock(MockKind::Vllm).await;
        let base = lingo(fleet(&[busy.clone(), good.url()], quick(1000))).await;
        every_request_succeeds(&base, 6).await;
        let e = endpoint(&base, &busy).await;
        // Out for 30 s although its probes pass; it saw one request only.
        assert_eq!(e["state"], "ejected", "{e}");
        assert_eq!(e["ejections"], 1, "{e}");
        assert_eq!(good.state.stats().completed, 6);
        let reason = if status == 429 {
            "status_429"
        } else {
            "status_5xx"
        };
        assert_eq!(retries(&base, reason).await, 1.0);
    }
}

#[tokio::test]
async fn an_all_down_pool_answers_503_with_retry_after_in_each_dialect() {
    let urls = [refused().await, refused().await];
    let base = lingo(fleet(&urls, quick(1))).await;
    let down = until(|| async {
        let v = get_json(&format!("{base}/fleet")).await;
        v["pools"][0]["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["state"] == "ejected")
    })
    .await;
    assert!(down);
    // Anthropic's dialect says "overloaded" with its own 529.
    let cases = [
        (
            503,
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            529,
            "/v1/messages",
            json!({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            503,
            "/generate",
            json!({"text": "a b", "sampling_params": {"max_new_tokens": 2}}),
        ),
    ];
    for (status, path, body) in cases {
        let r = post_json(&format!("{base}{path}"), &body).await;
        assert_eq!(r.status(), status, "{path}");
        let wait: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(wait >= 1, "{path}");
        let v: Value = r.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("no healthy endpoint"), "{path}: {v}");
        if path == "/v1/messages" {
            assert_eq!(v["type"], "error", "{v}");
        }
    }
    let r = client().get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let text = scrape(&base).await;
    assert_eq!(sum(&text, "lingo_endpoint_healthy", &[]), 0.0);
    assert!(sum(&text, "lingo_endpoint_ejections_total", &[]) >= 2.0);
}
