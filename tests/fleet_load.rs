//! Engine load signals over real sockets: an endpoint whose engine reports a long queue gets
//! no new requests from `least_outstanding`; once its figures stop coming (its /metrics
//! fails) they go stale, are ignored, and the endpoint is used again.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use lingo::config::{Config, EndpointConfig, LoadConfig, Policy, PoolConfig};
use lingo::mock::MockKind;
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

async fn fleet_of(mocks: &[&Mock]) -> String {
    let pool = PoolConfig {
        policy: Policy::LeastOutstanding,
        endpoints: mocks
            .iter()
            .map(|m| EndpointConfig::new(&m.url(), KindSetting::Vllm))
            .collect(),
        ..PoolConfig::default()
    };
    let config = Config {
        pools: BTreeMap::from([("p".to_string(), pool)]),
        load: LoadConfig {
            enabled: true,
            interval: Duration::from_millis(50),
            stale_after: Duration::from_millis(400),
        },
        ..Config::default()
    };
    config.validate().unwrap();
    lingo(config).await
}

/// The engine figures lingo holds for the endpoint at `url` (null when none is fresh).
async fn engine(base: &str, url: &str) -> Value {
    let v = get_json(&format!("{base}/fleet")).await;
    let eps = v["pools"][0]["endpoints"].as_array().unwrap().clone();
    eps.into_iter()
        .find(|e| e["url"].as_str() == Some(url))
        .unwrap()["engine"]
        .clone()
}

async fn until_engine(base: &str, url: &str, want: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..300 {
        let e = engine(base, url).await;
        if want(&e) {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "lingo never saw {url}'s engine as wanted: {}",
        engine(base, url).await
    );
}

async fn send(base: &str, n: usize) {
    for _ in 0..n {
        let body = json!({"model": "mock-model", "prompt": "hi", "max_tokens": 2});
        let r = post_json(&format!("{base}/v1/completions"), &body).await;
        assert_eq!(r.status(), 200);
    }
}

async fn set_load(m: &Mock, body: Value) {
    let r = post_json(&format!("{}/mock/load", m.url()), &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

#[tokio::test]
async fn a_long_engine_queue_takes_an_endpoint_out_of_least_outstanding_until_it_goes_stale() {
    let busy = mock(MockKind::Vllm).await;
    let idle = mock(MockKind::Vllm).await;
    let base = fleet_of(&[&busy, &idle]).await;
    send(&base, 1).await; // the first use starts probes and load polls

    set_load(&busy, json!({"waiting": 50})).await;
    until_engine(&base, &busy.url(), |e| e["waiting"] == 50).await;
    let before = busy.state.stats().requests;
    send(&base, 40).await;
    assert_eq!(
        busy.state.stats().requests,
        before,
        "a queue of 50 still got requests"
    );

    // Its metrics fail from now on: the last figure goes stale and is ignored, and the
    // endpoint is balanced by lingo's own count again.
    set_load(&busy, json!({"metrics_status": 500})).await;
    until_engine(&base, &busy.url(), Value::is_null).await;
    let before = busy.state.stats().requests;
    send(&base, 40).await;
    let got = busy.state.stats().requests - before;
    assert!(
        got >= 10,
        "the endpoint with failing metrics got {got} of 40"
    );
}
