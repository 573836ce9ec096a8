//! Client authentication (`[auth]`): refusals in each client's own error shape, keys from a
//! file and from a variable, per-key budgets, what reaches the upstream, and the start-up
//! refusal of an exposed upstream key.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::*;
use lingo::config::Config;
use lingo::mock::{MockConfig, MockKind};
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

const ALICE: &str = "sk-alice-0123";
const BOB: &str = "sk-bob-4567";

/// A config whose client keys come from a variable only this test sets.
fn with_keys(url: &str, kind: KindSetting, var: &str, lines: &str) -> Config {
    std::env::set_var(var, lines);
    let mut c = config_for(url, kind);
    c.auth.keys_env = Some(var.to_string());
    c
}

fn hex_sha256(key: &str) -> String {
    lingo::auth::sha256(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A request to lingo: method, path, JSON body (for POST), credential header.
/// A chat completion sent with `cred`.
async fn chat_as(base: &str, cred: Cred) -> reqwest::Response {
    send(base, "/v1/chat/completions", Some(&chat()), cred).await
}

async fn send(base: &str, path: &str, body: Option<&Value>, cred: Cred) -> reqwest::Response {
    let url = format!("{base}{path}");
    let mut rb = match body {
        Some(b) => client().post(url).json(b),
        None => client().get(url),
    };
    rb = match cred {
        Cred::None => rb,
        Cred::Bearer(k) => rb.bearer_auth(k),
        Cred::XApiKey(k) => rb.header("x-api-key", k),
    };
    rb.send().await.unwrap()
}

#[derive(Clone, Copy)]
enum Cred {
    None,
    Bearer(&'static str),
    XApiKey(&'static str),
}

fn chat() -> Value {
    json!({"model": "mock-model", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
}

fn messages() -> Value {
    json!({"model": "mock-model", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
}

/// The message of an error body, checking it has the dialect's shape.
fn shape(dialect: &str, v: &Value) -> String {
    let msg = match dialect {
        "openai" => {
            assert_eq!(v["error"]["type"], "AuthenticationError", "{v}");
            assert_eq!(v["error"]["code"], 401, "{v}");
            &v["error"]["message"]
        }
        "anthropic" => {
            assert_eq!(v["type"], "error", "{v}");
            assert_eq!(v["error"]["type"], "authentication_error", "{v}");
            &v["error"]["message"]
        }
        "sglang" => &v["error"]["message"],
        "tgi" => {
            assert!(v["error_type"].is_string(), "{v}");
            &v["error"]
        }
        "ollama" => {
            assert!(v["error"].is_string(), "{v}");
            &v["error"]
        }
        "llamacpp" => {
            assert_eq!(v["error"]["type"], "authentication_error", "{v}");
            &v["error"]["message"]
        }
        other => panic!("{other}"),
    };
    msg.as_str()
        .unwrap_or_else(|| panic!("{dialect}: {v}"))
        .to_string()
}

#[tokio::test]
async fn every_guarded_route_refuses_without_a_valid_key_in_its_clients_shape() {
    let mock = mock(MockKind::Vllm).await;
    let var = "LINGO_TEST_AUTH_KEYS_SHAPES";
    let base = lingo(with_keys(
        &mock.url(),
        KindSetting::Vllm,
        var,
        &format!("alice:{ALICE}\n"),
    ))
    .await;
    let sglang = json!({"text": "a b", "sampling_params": {"max_new_tokens": 2}});
    let tgi = json!({"inputs": "a b", "parameters": {"max_new_tokens": 2}});
    let ollama = json!({"model": "mock-model", "prompt": "a b", "stream": false});
    let llamacpp = json!({"prompt": "a b", "n_predict": 2});
    let cases: Vec<(&str, Option<Value>, &str)> = vec![
        ("/v1/chat/completions", Some(chat()), "openai"),
        (
            "/v1/completions",
            Some(json!({"model": "mock-model", "prompt": "a"})),
            "openai",
        ),
        ("/v1/messages", Some(messages()), "anthropic"),
        ("/generate", Some(sglang), "sglang"),
        ("/generate_stream", Some(tgi.clone()), "tgi"),
        ("/", Some(tgi), "tgi"),
        ("/api/generate", Some(ollama), "ollama"),
        ("/completion", Some(llamacpp), "llamacpp"),
        ("/v1/models", None, "openai"),
        ("/api/tags", None, "ollama"),
        ("/info", None, "tgi"),
        ("/get_model_info", None, "sglang"),
        ("/get_server_info", None, "sglang"),
        ("/flush_cache", None, "sglang"),
        ("/props", None, "llamacpp"),
    ];
    for (path, body, dialect) in &cases {
        for cred in [
            Cred::None,
            Cred::Bearer("sk-wrong"),
            Cred::XApiKey("sk-wrong"),
        ] {
            let r = send(&base, path, body.as_ref(), cred).await;
            assert_eq!(r.status(), 401, "{path}");
            assert_eq!(r.headers()["www-authenticate"], "Bearer", "{path}");
            let v: Value = r.json().await.unwrap();
            let msg = shape(dialect, &v);
            assert!(!msg.contains("sk-wrong"), "{path}: {msg}");
        }
    }
    assert_eq!(
        mock.state.stats().requests,
        0,
        "no refused request reached the upstream"
    );
    // The probes and the scrape stay open.
    assert_eq!(send(&base, "/health", None, Cred::None).await.status(), 200);
    let text = scrape(&base).await;
    let refused = (cases.len() * 3) as f64;
    assert_eq!(
        sum(
            &text,
            "lingo_requests_refused_total",
            &[("reason", "unauthorized")]
        ),
        refused
    );
    // The right key, as a bearer token or as Anthropic's header, is served.
    let r = chat_as(&base, Cred::Bearer(ALICE)).await;
    assert_eq!(r.status(), 200);
    let r = send(
        &base,
        "/v1/messages",
        Some(&messages()),
        Cred::XApiKey(ALICE),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "message", "{v}");
    let r = send(&base, "/v1/models", None, Cred::Bearer(ALICE)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(mock.state.stats().requests, 2);
}

#[tokio::test]
async fn keys_from_a_file_with_sha256_lines_name_the_request_and_never_appear() {
    let mock = mock(MockKind::Vllm).await;
    let dir = std::env::temp_dir().join(format!("lingo-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.txt");
    let log = dir.join("requests.jsonl");
    let text = format!(
        "# clients\nalice:{ALICE}\n\nbob:sha256:{}\n",
        hex_sha256(BOB)
    );
    std::fs::write(&keys, text).unwrap();
    let mut c = config_for(&mock.url(), KindSetting::Vllm);
    c.auth.keys_file = Some(keys.display().to_string());
    c.metrics.request_log = Some(log.display().to_string());
    let base = lingo(c).await;
    for (cred, n) in [(Cred::Bearer(ALICE), 1), (Cred::Bearer(BOB), 2)] {
        for _ in 0..n {
            let r = send(&base, "/v1/chat/completions", Some(&chat()), cred).await;
            assert_eq!(r.status(), 200);
            r.text().await.unwrap();
        }
    }
    let r = chat_as(&base, Cred::Bearer(BOB)).await;
    r.text().await.unwrap();
    let text = scrape(&base).await;
    assert_eq!(sum(&text, "lingo_requests_total", &[("key", "alice")]), 1.0);
    assert_eq!(sum(&text, "lingo_requests_total", &[("key", "bob")]), 3.0);
    // Histograms carry no key label.
    assert!(text
        .lines()
        .filter(|l| l.starts_with("lingo_time_to_first_token_seconds"))
        .all(|l| !l.contains("key=")));
    assert!(!text.contains(ALICE) && !text.contains(BOB));
    let mut lines = String::new();
    assert!(
        eventually(|| {
            lines = std::fs::read_to_string(&log).unwrap_or_default();
            lines.lines().count() == 4
        })
        .await
    );
    let named: Vec<String> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["key"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(named.iter().filter(|n| *n == "bob").count(), 3, "{lines}");
    assert!(!lines.contains(ALICE) && !lines.contains(BOB));
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn without_auth_the_key_label_is_none() {
    let mock = mock(MockKind::Vllm).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    let r = chat_as(&base, Cred::None).await;
    r.text().await.unwrap();
    let text = scrape(&base).await;
    assert_eq!(sum(&text, "lingo_requests_total", &[("key", "none")]), 1.0);
}

#[tokio::test]
async fn requests_per_minute_are_per_key_with_retry_after_in_the_clients_shape() {
    let mock = mock(MockKind::Vllm).await;
    let var = "LINGO_TEST_AUTH_KEYS_RPM";
    let lines = format!("alice:{ALICE}\nbob:{BOB}\n");
    let mut c = with_keys(&mock.url(), KindSetting::Vllm, var, &lines);
    c.auth.requests_per_minute = Some(2);
    let base = lingo(c).await;
    for _ in 0..2 {
        let r = chat_as(&base, Cred::Bearer(ALICE)).await;
        assert_eq!(r.status(), 200);
    }
    let r = chat_as(&base, Cred::Bearer(ALICE)).await;
    assert_eq!(r.status(), 429);
    let wait: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&wait), "{wait}");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "RateLimitError", "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("requests per minute"));
    // Anthropic's clients read their own rate-limit shape.
    let r = send(
        &base,
        "/v1/messages",
        Some(&messages()),
        Cred::XApiKey(ALICE),
    )
    .await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
    // Bob's budget is his own.
    let r = chat_as(&base, Cred::Bearer(BOB)).await;
    assert_eq!(r.status(), 200);
    let text = scrape(&base).await;
    assert_eq!(
        sum(
            &text,
            "lingo_requests_refused_total",
            &[("reason", "rate_limited")]
        ),
        2.0
    );
    assert_eq!(mock.state.stats().requests, 3);
}

#[tokio::test]
async fn tokens_per_minute_are_charged_as_counted_and_refuse_once_in_debt() {
    let mock = mock(MockKind::Vllm).await;
    let var = "LINGO_TEST_AUTH_KEYS_TPM";
    let mut c = with_keys(
        &mock.url(),
        KindSetting::Vllm,
        var,
        &format!("alice:{ALICE}\n"),
    );
    c.auth.tokens_per_minute = Some(10);
    let base = lingo(c).await;
    // A stream of 16 tokens: more than the budget, which goes into debt.
    let body = json!({"model": "mock-model", "max_tokens": 16, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = send(
        &base,
        "/v1/chat/completions",
        Some(&body),
        Cred::Bearer(ALICE),
    )
    .await;
    assert_eq!(r.status(), 200);
    let events = sse_events(&r.text().await.unwrap());
    assert!(events.iter().any(|e| e == "[DONE]"));
    // The Ollama dialect's shape for the refusal.
    let ollama = json!({"model": "mock-model", "prompt": "a b", "stream": false});
    let r = send(&base, "/api/generate", Some(&ollama), Cred::Bearer(ALICE)).await;
    assert_eq!(r.status(), 429);
    let wait: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(wait >= 1, "{wait}");
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("tokens per minute"),
        "{v}"
    );
    assert_eq!(mock.state.stats().requests, 1);
}

#[tokio::test]
async fn the_upstream_key_is_never_spent_on_an_unauthenticated_request() {
    const UPSTREAM: &str = "sk-upstream-secret";
    let mock = mock_with(MockConfig {
        kind: MockKind::Openai,
        api_key: Some(UPSTREAM.to_string()),
        ..MockConfig::default()
    })
    .await;
    let var = "LINGO_TEST_AUTH_KEYS_UPSTREAM";
    let up_var = "LINGO_TEST_AUTH_UPSTREAM_KEY";
    std::env::set_var(up_var, UPSTREAM);
    let mut c = with_keys(
        &mock.url(),
        KindSetting::Openai,
        var,
        &format!("alice:{ALICE}\n"),
    );
    c.upstream.api_key_env = Some(up_var.to_string());
    let base = lingo(c).await;
    // lingo's refusal (its own message), not the upstream's "You didn't provide an API key".
    let r = chat_as(&base, Cred::None).await;
    assert_eq!(r.status(), 401);
    let msg = shape("openai", &r.json().await.unwrap());
    assert!(msg.starts_with("no API key"), "{msg}");
    let r = chat_as(&base, Cred::Bearer(UPSTREAM)).await;
    assert_eq!(r.status(), 401, "the upstream's key is not a client key");
    // An authenticated request is sent with the upstream's key.
    let r = chat_as(&base, Cred::Bearer(ALICE)).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

#[tokio::test]
async fn the_clients_lingo_key_is_not_forwarded_upstream() {
    // An upstream that would accept Alice's lingo key, were it forwarded; lingo has no
    // upstream key of its own, so the upstream must see no credential at all.
    let mock = mock_with(MockConfig {
        kind: MockKind::Openai,
        api_key: Some(ALICE.to_string()),
        ..MockConfig::default()
    })
    .await;
    let var = "LINGO_TEST_AUTH_KEYS_NOT_FORWARDED";
    let base = lingo(with_keys(
        &mock.url(),
        KindSetting::Openai,
        var,
        &format!("alice:{ALICE}\n"),
    ))
    .await;
    for cred in [Cred::Bearer(ALICE), Cred::XApiKey(ALICE)] {
        let r = send(&base, "/v1/chat/completions", Some(&chat()), cred).await;
        assert_eq!(r.status(), 401);
        let v: Value = r.json().await.unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("didn't provide an API key"),
            "the upstream's refusal: {msg}"
        );
    }
}

#[tokio::test]
async fn metrics_off_the_client_port_is_a_404_there() {
    let mock = mock(MockKind::Vllm).await;
    let mut c = config_for(&mock.url(), KindSetting::Vllm);
    c.metrics.on_client_port = false;
    let base = lingo(c).await;
    let r = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

fn lingo_bin() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lingo"));
    cmd.env_remove("LINGO_CONFIG")
        .env_remove("LINGO_ALLOW_UNAUTHENTICATED")
        .env_remove("LINGO_AUTH_KEYS_FILE")
        .env_remove("LINGO_AUTH_KEYS_ENV");
    cmd
}

#[test]
fn lingo_refuses_to_start_with_an_exposed_upstream_key() {
    let out = lingo_bin()
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--upstream",
            "http://127.0.0.1:9",
        ])
        .args([
            "--upstream-kind",
            "vllm",
            "--upstream-api-key-env",
            "LINGO_TEST_EXPOSED",
        ])
        .env("LINGO_TEST_EXPOSED", "sk-exposed-secret")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allow-unauthenticated"), "{err}");
    assert!(!err.contains("sk-exposed-secret"), "{err}");
}

#[test]
fn lingo_refuses_to_start_with_a_malformed_key_file_naming_the_line() {
    let path = std::env::temp_dir().join(format!("lingo-bad-keys-{}.txt", std::process::id()));
    std::fs::write(&path, "alice:sk-fine\n# ok\nsk-secret-without-a-name\n").unwrap();
    let out = lingo_bin()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9",
        ])
        .args(["--upstream-kind", "vllm", "--auth-keys-file"])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).ok();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3"), "{err}");
    assert!(
        !err.contains("sk-secret") && !err.contains("sk-fine"),
        "{err}"
    );
}
