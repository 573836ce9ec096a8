//! Nothing internal reaches a client: no upstream URL or password, no OS error text, no Rust
//! type names; and request bodies that are not UTF-8, too large or too slow are refused in
//! the client's own dialect (issue 9, items 8 and 9).

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::time::Duration;

use common::*;
use lingo::mock::MockKind;
use lingo::upstream::KindSetting;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A port nothing listens on: bound, read, and closed again.
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

/// Words that would betray lingo's internals in a client-facing message.
const INTERNAL: [&str; 8] = [
    "struct", "enum ", "Peek", "u32", "i64", "f64", "os error", "Wire",
];

fn assert_no_internals(body: &str) {
    for word in INTERNAL {
        assert!(!body.contains(word), "`{word}` in {body}");
    }
}

#[tokio::test]
async fn an_unreachable_upstream_is_named_not_located() {
    let port = closed_port().await;
    let url = format!("http://user:secret@127.0.0.1:{port}");
    for kind in [KindSetting::Vllm, KindSetting::Auto] {
        let mut c = config_for(&url, kind);
        c.upstream.name = "gpu-a".into();
        let lingo = lingo(c).await;
        let req = json!({"model": "m", "prompt": "hi", "max_tokens": 2});
        let resp = post_json(&format!("{lingo}/v1/completions"), &req).await;
        assert_eq!(resp.status(), 502, "{kind:?}");
        let body = resp.text().await.unwrap();
        assert!(body.contains("`gpu-a`"), "{body}");
        for leak in ["secret", "user", "127.0.0.1", &port.to_string(), "os error"] {
            assert!(!body.contains(leak), "`{leak}` in {body}");
        }
        // The same in another dialect's shape.
        let req =
            json!({"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]});
        let resp = post_json(&format!("{lingo}/v1/messages"), &req).await;
        let body = resp.text().await.unwrap();
        assert!(
            body.contains("`gpu-a`") && !body.contains("secret"),
            "{body}"
        );
        assert_no_internals(&body);
    }
}

#[tokio::test]
async fn server_info_shows_the_upstream_with_its_password_masked() {
    let mock = mock(MockKind::Vllm).await;
    let url = format!("http://user:secret@{}", mock.addr);
    let lingo = lingo(config_for(&url, KindSetting::Vllm)).await;
    let want = format!("http://user:***@{}", mock.addr);
    for path in ["/get_server_info", "/info"] {
        let info = get_json(&format!("{lingo}{path}")).await;
        assert_eq!(info["lingo"]["upstream"], want.as_str(), "{path}: {info}");
        assert!(!info.to_string().contains("secret"), "{path}: {info}");
    }
}

/// A wrong-type field, per client route, and the field the message must name.
fn wrong_types() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        // Passthrough behind vLLM reads only a few fields: the body's own type, `stream`.
        ("/v1/completions", json!("just a string"), "JSON object"),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [], "stream": "yes"}),
            "stream",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": "ten", "messages": []}),
            "max_tokens",
        ),
        (
            "/api/generate",
            json!({"model": "m", "prompt": 5}),
            "prompt",
        ),
        (
            "/api/chat",
            json!({"model": "m", "messages": {"role": "user"}}),
            "messages",
        ),
        (
            "/completion",
            json!({"prompt": "hi", "n_predict": "x"}),
            "n_predict",
        ),
        (
            "/generate",
            json!({"text": "hi", "sampling_params": {"max_new_tokens": -1}}),
            "sampling_params.max_new_tokens",
        ),
        (
            "/generate",
            json!({"inputs": "hi", "parameters": {"max_new_tokens": "x"}}),
            "max_new_tokens",
        ),
        (
            "/generate",
            json!({"prompt": "hi", "max_tokens": [1]}),
            "max_tokens",
        ),
    ]
}

#[tokio::test]
async fn wrong_types_name_the_field_in_json_words() {
    let mock = mock(MockKind::Vllm).await;
    let lingo = lingo(config_for(&mock.url(), KindSetting::Vllm)).await;
    for (path, body, field) in wrong_types() {
        let resp = post_json(&format!("{lingo}{path}"), &body).await;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        assert!(
            matches!(status, 400 | 422),
            "{path} {body}: {status} {text}"
        );
        assert!(text.contains(field), "{path} {body}: {text}");
        assert!(
            text.contains("expected") || text.contains("accepted"),
            "{text}"
        );
        assert_no_internals(&text);
    }
}

/// Post raw bytes; the status and the body as text.
async fn post_bytes(url: &str, body: Vec<u8>) -> (u16, String) {
    let resp = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// JSON with one invalid UTF-8 byte inside the string of `field`.
fn with_bad_byte(before: &str, after: &str) -> Vec<u8> {
    let mut b = before.as_bytes().to_vec();
    b.push(0xff);
    b.extend_from_slice(after.as_bytes());
    b
}

#[tokio::test]
async fn invalid_utf8_is_refused_on_passthrough_and_translated_routes() {
    let vllm = mock(MockKind::Vllm).await;
    let ollama = mock(MockKind::Ollama).await;
    let behind_vllm = lingo(config_for(&vllm.url(), KindSetting::Vllm)).await;
    let behind_ollama = lingo(config_for(&ollama.url(), KindSetting::Ollama)).await;
    let cases = [
        // Passthrough: the bad byte sits in a field passthrough never reads.
        (
            &behind_vllm,
            "/v1/completions",
            r#"{"model":"m","prompt":"hi","user":""#,
            400,
        ),
        (
            &behind_ollama,
            "/api/generate",
            r#"{"model":"m","prompt":"hi","suffix":""#,
            400,
        ),
        // Translated.
        (
            &behind_vllm,
            "/api/generate",
            r#"{"model":"m","prompt":""#,
            400,
        ),
        (
            &behind_vllm,
            "/v1/messages",
            r#"{"model":"m","max_tokens":2,"system":""#,
            400,
        ),
        (&behind_vllm, "/generate", r#"{"text":""#, 400),
        (
            &behind_ollama,
            "/v1/chat/completions",
            r#"{"model":"m","messages":[],"user":""#,
            400,
        ),
        // A `/generate` body that cannot be read has no dialect yet: SGLang's shape speaks.
        (&behind_ollama, "/generate", r#"{"inputs":""#, 400),
        // TGI's own route answers in TGI's shape, with its validation status.
        (&behind_ollama, "/", r#"{"inputs":""#, 422),
    ];
    for (lingo, path, before, want) in cases {
        let body = with_bad_byte(before, r#""}"#);
        let (status, text) = post_bytes(&format!("{lingo}{path}"), body).await;
        assert_eq!(status, want, "{path}: {text}");
        assert!(text.contains("UTF-8"), "{path}: {text}");
        serde_json::from_str::<Value>(&text).unwrap_or_else(|_| panic!("{path}: {text}"));
    }
    assert_eq!(
        vllm.state.stats().requests,
        0,
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413_in_the_dialects_shape() {
    let mock = mock(MockKind::Vllm).await;
    let mut c = config_for(&mock.url(), KindSetting::Vllm);
    c.limits.max_request_body = 1024;
    let lingo = lingo(c).await;
    let long = "x".repeat(2048);
    let openai = json!({"model": "m", "prompt": long});
    let resp = post_json(&format!("{lingo}/v1/completions"), &openai).await;
    assert_eq!(resp.status(), 413);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], 413, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_request_body"));

    let anthropic = json!({"model": "m", "max_tokens": 2, "system": long, "messages": []});
    let resp = post_json(&format!("{lingo}/v1/messages"), &anthropic).await;
    assert_eq!(resp.status(), 413);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "request_too_large", "{v}");

    // Chunked, so no Content-Length announces the size: the limit stops the read itself.
    let bytes = serde_json::to_vec(&json!({"model": "m", "prompt": long})).unwrap();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(256).map(|c| Ok(c.to_vec())).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let resp = client()
        .post(format!("{lingo}/api/generate"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let v: Value = resp.json().await.unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("max_request_body"),
        "{v}"
    );
    assert_eq!(
        mock.state.stats().requests,
        0,
        "nothing reached the upstream"
    );
}

/// Send headers and part of a body, then nothing: the raw response lingo gives.
async fn half_a_body(lingo: &str, path: &str) -> String {
    let addr = lingo.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: 100\r\n\r\n{{\"model\": \"m\""
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Until lingo closes or the chunked body ends; the guard only bounds a broken run.
    let read = async {
        loop {
            let n = s.read(&mut buf).await.unwrap_or(0);
            got.extend_from_slice(&buf[..n]);
            if n == 0 || got.ends_with(b"0\r\n\r\n") {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .unwrap();
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_a_408_in_the_dialects_shape() {
    let mock = mock(MockKind::Vllm).await;
    let mut c = config_for(&mock.url(), KindSetting::Vllm);
    c.timeouts.client_body = Duration::from_millis(200);
    let lingo = lingo(c).await;
    let cases = [
        ("/v1/completions", r#""code":408"#),
        ("/v1/messages", r#""type":"error""#),
        ("/api/chat", r#"{"error":"#),
    ];
    for (path, shape) in cases {
        let raw = half_a_body(&lingo, path).await;
        assert!(raw.starts_with("HTTP/1.1 408"), "{path}: {raw}");
        assert!(
            raw.contains(shape) && raw.contains("client_body"),
            "{path}: {raw}"
        );
    }
    assert_eq!(
        mock.state.stats().requests,
        0,
        "nothing reached the upstream"
    );
}
