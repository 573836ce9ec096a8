//! Test harness: a mock upstream and a lingo proxy, each on its own 127.0.0.1 port 0
//! listener bound before the server task is spawned (so no readiness waits).

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test
#![allow(dead_code)]

pub mod cases;
pub mod dns;
pub mod readers;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lingo::config::Config;
use lingo::mock::{MockConfig, MockKind, MockState};
use lingo::upstream::KindSetting;
use serde_json::Value;

pub struct Mock {
    pub addr: SocketAddr,
    pub state: Arc<MockState>,
}

impl Mock {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

pub async fn mock(kind: MockKind) -> Mock {
    mock_with(MockConfig {
        kind,
        ..MockConfig::default()
    })
    .await
}

pub async fn mock_with(config: MockConfig) -> Mock {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = MockState::new(config);
    // `serve_with` makes the `reset` fault a real TCP reset.
    tokio::spawn(lingo::mock::serve_with(listener, state.clone()));
    Mock { addr, state }
}

pub fn config_for(upstream: &str, kind: KindSetting) -> Config {
    let mut c = Config::default();
    c.upstream.url = upstream.to_string();
    c.upstream.kind = kind;
    c
}

/// Start lingo with this config as `lingo serve` runs it (`serving`); returns its base URL.
pub async fn lingo(config: Config) -> String {
    format!("http://{}", serving(config).await)
}

/// Start lingo's router (`proxy::app`) under axum's server; returns its base URL. For tests
/// that count what reaches the upstream: `serve` warms its state up first (a connection, and
/// a kind probe where the kind is not given), the router alone does not.
pub async fn lingo_app(config: Config) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = lingo::proxy::app(config);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// Start lingo as `lingo serve` runs it (its own accept loop, connections and warm-up, not
/// `app` under axum's server); returns its address. Until the warm-up is done a request
/// waits in the listener's backlog.
pub async fn serving(config: Config) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lingo::proxy::serve(
        listener,
        config,
        std::future::pending(),
    ));
    addr
}

pub fn kind_setting(kind: MockKind) -> KindSetting {
    match kind {
        MockKind::Vllm => KindSetting::Vllm,
        MockKind::Sglang => KindSetting::Sglang,
        MockKind::Tgi => KindSetting::Tgi,
        MockKind::Llamacpp => KindSetting::Llamacpp,
        MockKind::Ollama => KindSetting::Ollama,
        MockKind::Openai => KindSetting::Openai,
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// GET a URL and read its JSON body.
pub async fn get_json(url: &str) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Read a whole SSE body into its `data:` payloads (JSON, or the raw string for `[DONE]`).
pub fn sse_events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|block| {
            let data: Vec<&str> = block
                .lines()
                .filter_map(|l| l.strip_prefix("data:").map(str::trim_start))
                .collect();
            if data.is_empty() {
                return None;
            }
            let data = data.join("\n");
            Some(serde_json::from_str(&data).unwrap_or(Value::String(data)))
        })
        .collect()
}

/// Poll until `f` holds, for at most five seconds (for effects that happen after a
/// response, such as the upstream noticing an abort).
pub async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..500 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}

/// Parse exposition lines `name{labels} value` into (name, labels, value).
pub fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (head, value) = l.rsplit_once(' ')?;
            let (name, labels) = match head.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (head, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .filter_map(|p| {
                    let (k, v) = p.split_once("=\"")?;
                    Some((k.to_string(), v.trim_end_matches('"').to_string()))
                })
                .collect();
            Some((name.to_string(), labels, value.parse().ok()?))
        })
        .collect()
}

/// Sum of a metric over the samples whose labels include all of `want`.
pub fn sum(text: &str, name: &str, want: &[(&str, &str)]) -> f64 {
    samples(text)
        .into_iter()
        .filter(|(n, labels, _)| {
            n == name
                && want
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

/// lingo's `/metrics` exposition.
pub async fn scrape(base: &str) -> String {
    get_text(&format!("{base}/metrics")).await
}

/// GET a URL and read its body as text.
pub async fn get_text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A mock of every upstream kind, each behind its own lingo: `(kind, mock, lingo's URL)`.
pub async fn every_kind_behind_lingo() -> Vec<(MockKind, Mock, String)> {
    let mut v = Vec::new();
    for kind in MockKind::ALL {
        let mock = mock(kind).await;
        let base = lingo(config_for(&mock.url(), kind_setting(kind))).await;
        v.push((kind, mock, base));
    }
    v
}

/// POST a JSON body; the response, whatever its status.
pub async fn post_json(url: &str, body: &Value) -> reqwest::Response {
    client().post(url).json(body).send().await.unwrap()
}
