//! End to end over real sockets: every client dialect against every upstream kind,
//! streaming and not. Each dialect is one row of data: how to ask, and how to read the
//! answer (independently of lingo's own codecs). The text must equal what the mock gives
//! for the same prompt when asked directly, and token counts must be the mock's.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::readers::*;
use common::*;
use lingo::mock::{MockConfig, MockKind};
use serde_json::{json, Value};

const PROMPT: &str = "the quick brown fox jumps";
const MAX: u64 = 9;

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

fn tgi_request(_stream: bool) -> Value {
    json!({"inputs": PROMPT,
           "parameters": {"max_new_tokens": MAX, "details": true, "do_sample": false}})
}

/// TGI's compat route `POST /` (where its Python client posts): the body's `stream` decides,
/// and a whole answer comes as a one-element array.
fn tgi_compat_request(stream: bool) -> Value {
    let mut v = tgi_request(stream);
    v["stream"] = json!(stream);
    v
}

const BOTH: &[bool] = &[false, true];

fn anthropic_request(stream: bool) -> Value {
    // `ignore_eos` is lingo's extension of the Messages API (fixed output lengths).
    json!({"model": "mock-model", "max_tokens": MAX, "stream": stream, "temperature": 0,
           "system": "be brief", "messages": [{"role": "user", "content": PROMPT}],
           "ignore_eos": true})
}

fn vllm_legacy_request(stream: bool) -> Value {
    json!({"prompt": PROMPT, "stream": stream, "max_tokens": MAX, "ignore_eos": true,
           "temperature": 0})
}

fn llamacpp_request(stream: bool) -> Value {
    json!({"prompt": PROMPT, "n_predict": MAX, "ignore_eos": true, "temperature": 0,
           "stream": stream})
}

fn ollama_generate_request(stream: bool) -> Value {
    json!({"model": "mock-model", "prompt": PROMPT, "raw": true, "stream": stream,
           "options": {"num_predict": MAX, "temperature": 0}})
}

fn ollama_chat_request(stream: bool) -> Value {
    json!({"model": "mock-model", "messages": [{"role": "user", "content": PROMPT}],
           "stream": stream, "options": {"num_predict": MAX, "temperature": 0}})
}

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
    // TGI's non-stream `/generate` shares SGLang's path: the router tells them apart by body.
    Row {
        name: "tgi",
        path: "/generate",
        streams: &[false],
        request: tgi_request,
        read: tgi_read,
    },
    Row {
        name: "tgi-stream",
        path: "/generate_stream",
        streams: &[true],
        request: tgi_request,
        read: tgi_read,
    },
    Row {
        name: "tgi-compat",
        path: "/",
        streams: BOTH,
        request: tgi_compat_request,
        read: tgi_compat_read,
    },
    Row {
        name: "anthropic",
        path: "/v1/messages",
        streams: BOTH,
        request: anthropic_request,
        read: anthropic_read,
    },
    Row {
        name: "vllm-legacy",
        path: "/generate",
        streams: BOTH,
        request: vllm_legacy_request,
        read: |b, s| vllm_legacy_read(PROMPT, b, s),
    },
    Row {
        name: "llamacpp",
        path: "/completion",
        streams: BOTH,
        request: llamacpp_request,
        read: llamacpp_read,
    },
    Row {
        name: "ollama-generate",
        path: "/api/generate",
        streams: BOTH,
        request: ollama_generate_request,
        read: ollama_read,
    },
    Row {
        name: "ollama-chat",
        path: "/api/chat",
        streams: BOTH,
        request: ollama_chat_request,
        read: ollama_read,
    },
];

/// Remove a key wherever it appears (top level or nested, as in SGLang's sampling_params).
fn without(mut v: Value, key: &str) -> Value {
    fn strip(v: &mut Value, key: &str) {
        if let Value::Object(m) = v {
            m.remove(key);
            m.values_mut().for_each(|v| strip(v, key));
        }
    }
    strip(&mut v, key);
    v
}

fn mentions(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| k == key || mentions(v, key)),
        _ => false,
    }
}

/// Fields an upstream kind cannot honour: lingo must refuse them with an error naming them
/// (TGI's `details` asks for per-token log probabilities, which Ollama does not give).
fn refused_by(kind: MockKind) -> &'static [&'static str] {
    match kind {
        MockKind::Ollama => &["ignore_eos", "details"],
        // Standard OpenAI has no `ignore_eos`: lingo refuses it, or (passed through) the
        // upstream does, naming it either way.
        MockKind::Openai => &["ignore_eos"],
        _ => &[],
    }
}

/// The text the mock generates for PROMPT, asked directly on its completions route (its
/// native one for TGI and Ollama).
async fn direct_text(mock: &Mock, kind: MockKind) -> String {
    if kind == MockKind::Tgi {
        let v: Value = post_json(&format!("{}/generate", mock.url()), &tgi_request(false))
            .await
            .json()
            .await
            .unwrap();
        return v["generated_text"].as_str().unwrap().to_string();
    }
    if kind == MockKind::Ollama {
        let v: Value = post_json(
            &format!("{}/api/generate", mock.url()),
            &ollama_generate_request(false),
        )
        .await
        .json()
        .await
        .unwrap();
        return v["response"].as_str().unwrap().to_string();
    }
    let v: Value = client()
        .post(format!("{}/v1/completions", mock.url()))
        .bearer_auth(API_KEY)
        .json(&without(completions_request(false), "ignore_eos"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

/// The `openai` mock's key, which lingo reads from this variable.
const API_KEY: &str = "sk-matrix";
const API_KEY_ENV: &str = "LINGO_TEST_MATRIX_KEY";

async fn run_matrix(kind: MockKind) {
    let mock = mock_with(MockConfig {
        kind,
        api_key: (kind == MockKind::Openai).then(|| API_KEY.to_string()),
        ..MockConfig::default()
    })
    .await;
    let mut config = config_for(&mock.url(), kind_setting(kind));
    if kind == MockKind::Openai {
        std::env::set_var(API_KEY_ENV, API_KEY);
        config.upstream.api_key_env = Some(API_KEY_ENV.into());
    }
    let base = lingo(config).await;
    let expected_text = direct_text(&mock, kind).await;
    let before = mock.state.stats();
    let mut requests = 1;
    for row in ROWS {
        for &stream in row.streams {
            let what = format!("{} via {:?}, stream={stream}", row.name, kind);
            let mut request = (row.request)(stream);
            for field in refused_by(kind) {
                if !mentions(&request, field) {
                    continue;
                }
                let resp = post_json(&format!("{base}{}", row.path), &request).await;
                // TGI answers validation errors with 422 (in a 200 stream on
                // `/generate_stream`), everyone else with 400.
                let status = resp.status().as_u16();
                let expected = match (row.name, stream) {
                    ("tgi" | "tgi-compat", false) => 422,
                    ("tgi-stream" | "tgi-compat", true) => 200,
                    _ => 400,
                };
                assert_eq!(status, expected, "{what}: {field} must be refused");
                let body = resp.text().await.unwrap();
                assert!(
                    body.contains(field),
                    "{what}: the refusal names {field}: {body}"
                );
                request = without(request, field);
            }
            // TGI has no `ignore_eos` (lingo refuses it, see below); the matrix's outputs stop
            // at MAX long before the mock's earliest EOS (16 tokens), so it runs without it.
            if kind == MockKind::Tgi {
                request = without(request, "ignore_eos");
            }
            let resp = post_json(&format!("{base}{}", row.path), &request).await;
            let status = resp.status();
            let header_tokens = resp
                .headers()
                .get("x-generated-tokens")
                .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
            let body = resp.text().await.unwrap();
            assert_eq!(status, 200, "{what}: {body}");
            let mut seen = (row.read)(&body, stream);
            if seen.tokens == 0 {
                seen.tokens = header_tokens.expect("a count in the body or the headers");
            }
            requests += 1;
            assert_eq!(seen.tokens, MAX, "{what}: token count");
            if !seen.finish.is_empty() {
                assert_eq!(seen.finish, "length", "{what}: finish reason");
            }
            if !matches!(row.name, "openai-chat" | "anthropic" | "ollama-chat") {
                assert_eq!(seen.text, expected_text, "{what}: text");
            } else {
                assert!(!seen.text.is_empty(), "{what}: text");
            }
        }
    }
    let stats = mock.state.stats();
    // Refusals the upstream made (of passed-through requests) are its failures.
    assert_eq!(
        stats.requests - stats.failed,
        requests,
        "every request reached the upstream once"
    );
    assert_eq!(stats.completion_tokens, requests * MAX);
    check_metrics(
        &base,
        kind,
        requests - 1,
        stats.prompt_tokens - before.prompt_tokens,
    )
    .await;
}

/// lingo's own metrics agree with the upstream's counts for every pair: tokens, one TTFT per
/// request, token-weighted inter-token gaps for streams.
async fn check_metrics(base: &str, kind: MockKind, requests: u64, prompt_tokens: u64) {
    let text = scrape(base).await;
    let ok = [("outcome", "ok")];
    let total = |name: &str| sum(&text, name, &[]) as u64;
    assert_eq!(
        sum(&text, "lingo_requests_total", &ok) as u64,
        requests,
        "{kind:?}"
    );
    assert_eq!(
        total("lingo_generation_tokens_total"),
        requests * MAX,
        "{kind:?}: generated tokens"
    );
    assert_eq!(
        total("lingo_prompt_tokens_total"),
        prompt_tokens,
        "{kind:?}: prompt tokens"
    );
    assert_eq!(
        total("lingo_time_to_first_token_seconds_count"),
        requests,
        "{kind:?}: one TTFT per request"
    );
    assert_eq!(total("lingo_estimated_token_requests_total"), 0, "{kind:?}");
    for row in ROWS {
        let dialect = match row.name {
            "tgi-stream" | "tgi-compat" => "tgi",
            name => name,
        };
        let want = [("dialect", dialect), ("outcome", "ok")];
        assert!(
            sum(&text, "lingo_requests_total", &want) >= 1.0,
            "{kind:?}: {dialect} counted"
        );
    }
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
        let resp = post_json(&format!("{base}{path}"), &body).await;
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
    let body = post_json(&format!("{base}/generate_stream"), &tgi_request(true))
        .await
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
async fn every_dialect_against_llamacpp() {
    run_matrix(MockKind::Llamacpp).await;
}

#[tokio::test]
async fn every_dialect_against_ollama() {
    run_matrix(MockKind::Ollama).await;
}

#[tokio::test]
async fn every_dialect_against_openai() {
    run_matrix(MockKind::Openai).await;
}

#[tokio::test]
async fn auto_detects_each_kind() {
    for kind in [
        MockKind::Vllm,
        MockKind::Sglang,
        MockKind::Llamacpp,
        MockKind::Ollama,
    ] {
        let mock = mock(kind).await;
        let base = lingo(config_for(&mock.url(), lingo::upstream::KindSetting::Auto)).await;
        let body = post_json(
            &format!("{base}/generate"),
            &without(sglang_request(true), "ignore_eos"),
        )
        .await
        .text()
        .await
        .unwrap();
        assert_eq!(sglang_read(&body, true).tokens, MAX, "{kind:?}");
    }
}
