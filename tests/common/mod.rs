//! Test harness: a mock upstream and a lingo proxy, each on its own 127.0.0.1 port 0
//! listener bound before the server task is spawned (so no readiness waits).

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test
#![allow(dead_code)]

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
    let app = lingo::mock::router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Mock { addr, state }
}

pub fn config_for(upstream: &str, kind: KindSetting) -> Config {
    let mut c = Config::default();
    c.upstream.url = upstream.to_string();
    c.upstream.kind = kind;
    c
}

/// Start lingo with this config; returns its base URL.
pub async fn lingo(config: Config) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = lingo::proxy::app(config);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

pub fn kind_setting(kind: MockKind) -> KindSetting {
    match kind {
        MockKind::Vllm => KindSetting::Vllm,
        MockKind::Sglang => KindSetting::Sglang,
        MockKind::Tgi => KindSetting::Tgi,
        MockKind::Llamacpp => KindSetting::Llamacpp,
        MockKind::Ollama => KindSetting::Ollama,
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
