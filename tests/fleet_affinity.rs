//! `prefix_affinity` over real sockets: requests sharing a prefix keep one endpoint (chats,
//! text and token-id prompts); an endpoint leaving moves only its own keys; two lingo
//! processes started apart choose alike; a hot prefix spreads within the load bound.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

#[path = "common/child.rs"]
mod child;
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use lingo::config::{Config, EndpointConfig, Policy, PoolConfig};
use lingo::mock::{MockConfig, MockKind};
use serde_json::{json, Value};

async fn mocks(n: usize, itl: Duration) -> Vec<Mock> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            mock_with(MockConfig {
                kind: MockKind::Vllm,
                itl,
                ..MockConfig::default()
            })
            .await,
        );
    }
    out
}

fn affinity(mocks: &[&Mock]) -> Config {
    let endpoints = mocks
        .iter()
        .map(|m| EndpointConfig::new(&m.url(), lingo::upstream::KindSetting::Vllm))
        .collect();
    let pool = PoolConfig {
        policy: Policy::PrefixAffinity,
        endpoints,
        ..PoolConfig::default()
    };
    let c = Config {
        pools: BTreeMap::from([("p".to_string(), pool)]),
        ..Config::default()
    };
    c.validate().unwrap();
    c
}

fn counts(mocks: &[Mock]) -> Vec<u64> {
    mocks.iter().map(|m| m.state.stats().requests).collect()
}

/// Send `body` to `path` and say which mock served it (requests go one at a time).
async fn served_by(base: &str, path: &str, body: &Value, mocks: &[Mock]) -> usize {
    let before = counts(mocks);
    let r = post_json(&format!("{base}{path}"), body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let after = counts(mocks);
    let moved: Vec<usize> = (0..mocks.len())
        .filter(|i| after[*i] != before[*i])
        .collect();
    assert_eq!(moved.len(), 1, "{before:?} -> {after:?}");
    moved[0]
}

/// Turn `t` of conversation `c`: a shared system prompt, the conversation's first message,
/// then the turns so far.
fn chat_turn(c: usize, t: usize) -> Value {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a helpful assistant. ".repeat(20)}),
        json!({"role": "user", "content": format!("conversation {c}: tell me a story")}),
    ];
    for i in 0..t {
        messages.push(json!({"role": "assistant", "content": format!("part {i}")}));
        messages.push(json!({"role": "user", "content": format!("and then {i}?")}));
    }
    json!({"model": "mock-model", "max_tokens": 2, "messages": messages})
}

fn text(c: usize, tail: &str) -> Value {
    let start = format!("document {c}: ").repeat(200);
    json!({"model": "mock-model", "max_tokens": 2, "prompt": format!("{start}{tail}")})
}

#[tokio::test]
async fn requests_sharing_a_prefix_keep_one_endpoint() {
    let m = mocks(4, Duration::ZERO).await;
    let base = lingo(affinity(&m.iter().collect::<Vec<_>>())).await;
    let mut homes = Vec::new();
    for c in 0..12 {
        let home = served_by(&base, "/v1/chat/completions", &chat_turn(c, 0), &m).await;
        for t in 1..4 {
            let at = served_by(&base, "/v1/chat/completions", &chat_turn(c, t), &m).await;
            assert_eq!(at, home, "conversation {c} turn {t} moved");
        }
        homes.push(home);
    }
    // Conversations behind one system prompt still spread.
    homes.sort();
    homes.dedup();
    assert!(
        homes.len() >= 2,
        "every conversation on one endpoint: {homes:?}"
    );

    // Text and token-id prompts that agree over the first `prefix_len` tokens.
    for c in 0..6 {
        let a = served_by(&base, "/v1/completions", &text(c, "one ending"), &m).await;
        let b = served_by(
            &base,
            "/v1/completions",
            &text(c, "another, longer ending"),
            &m,
        )
        .await;
        assert_eq!(a, b, "text prompt {c}");
        let ids: Vec<u32> = (0..400).map(|i| i * 7 + c as u32).collect();
        let mut longer = ids.clone();
        longer.extend([1, 2, 3]);
        let p = |ids: &[u32]| json!({"model": "mock-model", "max_tokens": 2, "prompt": ids});
        let a = served_by(&base, "/v1/completions", &p(&ids), &m).await;
        let b = served_by(&base, "/v1/completions", &p(&longer), &m).await;
        assert_eq!(a, b, "token-id prompt {c}");
    }
}

#[tokio::test]
async fn an_endpoint_leaving_moves_only_its_own_keys() {
    let m = mocks(4, Duration::ZERO).await;
    let all = lingo(affinity(&m.iter().collect::<Vec<_>>())).await;
    let three = lingo(affinity(&m[..3].iter().collect::<Vec<_>>())).await;
    let mut moved = 0;
    for c in 0..40 {
        let before = served_by(&all, "/v1/chat/completions", &chat_turn(c, 0), &m).await;
        let after = served_by(&three, "/v1/chat/completions", &chat_turn(c, 0), &m).await;
        if before == 3 {
            moved += 1;
            assert!(after < 3);
        } else {
            assert_eq!(
                after, before,
                "conversation {c} moved off a remaining endpoint"
            );
        }
    }
    assert!(moved > 0, "no conversation lived on the endpoint that left");
}

#[tokio::test]
async fn two_lingo_processes_choose_alike() {
    let m = mocks(4, Duration::ZERO).await;
    let dir = std::env::temp_dir().join(format!("lingo-affinity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fleet.toml");
    let endpoints: Vec<String> = m
        .iter()
        .map(|x| format!("{{ url = \"{}\", kind = \"vllm\" }}", x.url()))
        .collect();
    let toml = format!(
        "[pools.p]\npolicy = \"prefix_affinity\"\nendpoints = [{}]\n",
        endpoints.join(", ")
    );
    std::fs::write(&path, toml).unwrap();
    let cfg = path.to_str().unwrap();
    let a = child::spawn(None, &["--config", cfg]).await;
    let b = child::spawn(None, &["--config", cfg]).await;
    for c in 0..16 {
        for t in [0, 2] {
            let body = chat_turn(c, t);
            let on_a = served_by(&a.url(), "/v1/chat/completions", &body, &m).await;
            let on_b = served_by(&b.url(), "/v1/chat/completions", &body, &m).await;
            assert_eq!(on_a, on_b, "conversation {c} turn {t}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_hot_prefix_spreads_within_the_load_bound() {
    // Streams held open by slow tokens, all with one prompt.
    let m = mocks(4, Duration::from_millis(40)).await;
    let base = lingo(affinity(&m.iter().collect::<Vec<_>>())).await;
    let n = 16;
    let mut tasks = Vec::new();
    for _ in 0..n {
        let url = format!("{base}/v1/completions");
        tasks.push(tokio::spawn(async move {
            let body = json!({"model": "mock-model", "prompt": "the hot system prompt",
                              "max_tokens": 30, "ignore_eos": true, "stream": true});
            let r = post_json(&url, &body).await;
            assert_eq!(r.status(), 200);
            r.text().await.unwrap()
        }));
    }
    // Once all are in flight, no endpoint holds more than ceil(1.25 * 16 / 4) = 5.
    let all_in = eventually(|| m.iter().map(|x| x.state.stats().in_flight).sum::<u64>() == n).await;
    let held: Vec<u64> = m.iter().map(|x| x.state.stats().in_flight).collect();
    assert!(all_in, "{held:?}");
    assert!(held.iter().all(|h| *h <= 5), "{held:?}");
    assert!(held.iter().filter(|h| **h > 0).count() >= 3, "{held:?}");
    for t in tasks {
        assert!(t.await.unwrap().contains("[DONE]"));
    }
}
