//! End to end over real sockets: every client dialect against every upstream kind,
//! streaming and not. Each dialect is one row of data: how to ask, and how to read the
//! answer (independently of lingo's own codecs). The text must equal what the mock gives
//! for the same prompt when asked directly, and token counts must be the mock's.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::*;
use lingo::mock::MockKind;
use serde_json::{json, Value};

const PROMPT: &str = "the quick brown fox jumps";
const MAX: u64 = 9;

/// What one answer said: text, completion tokens, finish reason (normalised).
#[derive(Debug, PartialEq)]
struct Seen {
    text: String,
    tokens: u64,
    finish: String,
}

struct Row {
    name: &'static str,
    path: &'static str,
    /// The stream settings the row runs with.
    streams: &'static [bool],
    request: fn(bool) -> Value,
    read: fn(&str, bool) -> Seen,
}

fn sglang_request(stream: bool) -> Value {
    json!({"text": PROMPT, "stream": stream,
           "sampling_params": {"max_new_tokens": MAX, "ignore_eos": true, "temperature": 0}})
}

fn sglang_read(body: &str, stream: bool) -> Seen {
    let last = if stream {
        let events = sse_events(body);
        assert_eq!(
            events.last(),
            Some(&json!("[DONE]")),
            "stream ends with [DONE]"
        );
        // Cumulative text: every chunk extends the previous one.
        let texts: Vec<&str> = events.iter().filter_map(|e| e["text"].as_str()).collect();
        for w in texts.windows(2) {
            assert!(w[1].starts_with(w[0]), "not cumulative: {w:?}");
        }
        events[events.len() - 2].clone()
    } else {
        serde_json::from_str(body).unwrap()
    };
    Seen {
        text: last["text"].as_str().unwrap().to_string(),
        tokens: last["meta_info"]["completion_tokens"].as_u64().unwrap(),
        finish: last["meta_info"]["finish_reason"]["type"]
            .as_str()
            .unwrap()
            .to_string(),
    }
}

fn completions_request(stream: bool) -> Value {
    let mut v = json!({"model": "mock-model", "prompt": PROMPT, "max_tokens": MAX,
                       "ignore_eos": true, "temperature": 0, "stream": stream});
    if stream {
        v["stream_options"] = json!({"include_usage": true});
    }
    v
}

fn chat_request(stream: bool) -> Value {
    let mut v = json!({"model": "mock-model", "messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": MAX, "ignore_eos": true, "temperature": 0, "stream": stream});
    if stream {
        v["stream_options"] = json!({"include_usage": true});
    }
    v
}

fn openai_read(body: &str, stream: bool, content: fn(&Value) -> Option<&str>) -> Seen {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        return Seen {
            text: content(&v["choices"][0]).unwrap_or_default().to_string(),
            tokens: v["usage"]["completion_tokens"].as_u64().unwrap(),
            finish: v["choices"][0]["finish_reason"]
                .as_str()
                .unwrap()
                .to_string(),
        };
    }
    let events = sse_events(body);
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let mut seen = Seen {
        text: String::new(),
        tokens: 0,
        finish: String::new(),
    };
    for e in &events {
        if let Some(c) = e["choices"].get(0) {
            seen.text.push_str(content(c).unwrap_or_default());
            if let Some(f) = c["finish_reason"].as_str() {
                seen.finish = f.to_string();
            }
        }
        if let Some(n) = e["usage"]["completion_tokens"].as_u64() {
            assert!(
                e["choices"].as_array().unwrap().is_empty(),
                "usage comes in its own chunk"
            );
            seen.tokens = n;
        }
    }
    seen
}

fn tgi_request(_stream: bool) -> Value {
    json!({"inputs": PROMPT,
           "parameters": {"max_new_tokens": MAX, "details": true, "do_sample": false}})
}

/// TGI's stream: one token per event, no terminator, the last event with `details`.
fn tgi_read(body: &str, _stream: bool) -> Seen {
    assert!(
        body.starts_with("data:{"),
        "TGI events have no space: {body:.40}"
    );
    let events = sse_events(body);
    assert!(!events.contains(&json!("[DONE]")), "TGI sends no [DONE]");
    let text = events
        .iter()
        .filter(|e| e["token"]["special"] != json!(true))
        .map(|e| e["token"]["text"].as_str().unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["generated_text"], json!(text), "final generated_text");
    Seen {
        text,
        tokens: last["details"]["generated_tokens"].as_u64().unwrap(),
        finish: last["details"]["finish_reason"]
            .as_str()
            .unwrap()
            .to_string(),
    }
}

const BOTH: &[bool] = &[false, true];

const ROWS: &[Row] = &[
    Row {
        name: "sglang",
        path: "/generate",
        streams: BOTH,
        request: sglang_request,
        read: sglang_read,
    },
    Row {
        name: "openai-completions",
        path: "/v1/completions",
        streams: BOTH,
        request: completions_request,
        read: |b, s| openai_read(b, s, |c| c["text"].as_str()),
    },
    Row {
        name: "openai-chat",
        path: "/v1/chat/completions",
        streams: BOTH,
        request: chat_request,
        read: |b, s| {
            openai_read(b, s, |c| {
                c["message"]["content"]
                    .as_str()
                    .or(c["delta"]["content"].as_str())
            })
        },
    },
    // TGI's non-stream `/generate` shares SGLang's path: the main router tells them apart by
    // body, so only the stream route is driven here.
    Row {
        name: "tgi",
        path: "/generate_stream",
        streams: &[true],
        request: tgi_request,
        read: tgi_read,
    },
];

/// TGI has no `ignore_eos` (lingo refuses it); the matrix's outputs stop at MAX long before the
/// mock's earliest EOS (16 tokens), so the rows run without it there.
fn without_ignore_eos(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("ignore_eos");
    }
    if let Some(p) = v["sampling_params"].as_object_mut() {
        p.remove("ignore_eos");
    }
    v
}

/// The text the mock generates for PROMPT, asked directly on its completions route (TGI's
/// `/generate` for the TGI mock).
async fn direct_text(mock: &Mock, kind: MockKind) -> String {
    if kind == MockKind::Tgi {
        let v: Value = client()
            .post(format!("{}/generate", mock.url()))
            .json(&tgi_request(false))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        return v["generated_text"].as_str().unwrap().to_string();
    }
    let v: Value = client()
        .post(format!("{}/v1/completions", mock.url()))
        .json(&completions_request(false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

async fn run_matrix(kind: MockKind) {
    let mock = mock(kind).await;
    let base = lingo(config_for(&mock.url(), kind_setting(kind))).await;
    let expected_text = direct_text(&mock, kind).await;
    let mut requests = 1;
    for row in ROWS {
        for &stream in row.streams {
            let what = format!("{} via {:?}, stream={stream}", row.name, kind);
            let mut request = (row.request)(stream);
            if kind == MockKind::Tgi {
                request = without_ignore_eos(request);
            }
            let resp = client()
                .post(format!("{base}{}", row.path))
                .json(&request)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{what}");
            let body = resp.text().await.unwrap();
            let seen = (row.read)(&body, stream);
            requests += 1;
            assert_eq!(seen.tokens, MAX, "{what}: token count");
            assert_eq!(seen.finish, "length", "{what}: finish reason");
            if row.name != "openai-chat" {
                assert_eq!(seen.text, expected_text, "{what}: text");
            } else {
                assert!(!seen.text.is_empty(), "{what}: text");
            }
        }
    }
    let stats = mock.state.stats();
    assert_eq!(
        stats.requests, requests,
        "every request reached the upstream once"
    );
    assert_eq!(stats.completion_tokens, requests * MAX);
}

#[tokio::test]
async fn every_dialect_against_vllm() {
    run_matrix(MockKind::Vllm).await;
}

#[tokio::test]
async fn every_dialect_against_sglang() {
    run_matrix(MockKind::Sglang).await;
}

#[tokio::test]
async fn every_dialect_against_tgi() {
    run_matrix(MockKind::Tgi).await;
}

/// What TGI cannot do is refused with a 400 naming the field, before anything reaches it.
#[tokio::test]
async fn untranslatable_requests_to_tgi_are_refused() {
    let mock = mock(MockKind::Tgi).await;
    let base = lingo(config_for(&mock.url(), lingo::upstream::KindSetting::Tgi)).await;
    let cases = [
        (
            "/generate",
            sglang_request(false),
            "sampling_params.ignore_eos",
        ),
        ("/v1/completions", completions_request(true), "ignore_eos"),
        (
            "/generate",
            json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}),
            "input_ids",
        ),
        (
            "/v1/completions",
            json!({"model": "mock-model", "prompt": PROMPT, "n": 2}),
            "n",
        ),
    ];
    for (path, body, field) in cases {
        let resp = client()
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{path} {body}");
        let text = resp.text().await.unwrap();
        assert!(
            text.contains(field),
            "{path}: the error names {field}: {text}"
        );
    }
    assert_eq!(mock.state.stats().requests, 0, "nothing reached TGI");
}

#[tokio::test]
async fn auto_detects_tgi_by_its_info() {
    let mock = mock(MockKind::Tgi).await;
    let base = lingo(config_for(&mock.url(), lingo::upstream::KindSetting::Auto)).await;
    let body = client()
        .post(format!("{base}/generate_stream"))
        .json(&tgi_request(true))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(tgi_read(&body, true).tokens, MAX);
    let info: Value = get_json(&format!("{base}/get_server_info")).await;
    assert_eq!(info["lingo"]["upstream_kind"], "tgi");
    let info: Value = get_json(&format!("{base}/info")).await;
    assert_eq!(
        info["router"], "text-generation-router",
        "forwarded from TGI"
    );
}

#[tokio::test]
async fn auto_detects_each_kind() {
    for kind in [MockKind::Vllm, MockKind::Sglang] {
        let mock = mock(kind).await;
        let base = lingo(config_for(&mock.url(), lingo::upstream::KindSetting::Auto)).await;
        let body = client()
            .post(format!("{base}/generate"))
            .json(&sglang_request(true))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(sglang_read(&body, true).tokens, MAX, "{kind:?}");
    }
}
