//! End to end over real sockets: every client dialect against every upstream kind,
//! streaming and not. Each dialect is one row of data: how to ask, and how to read the
//! answer (independently of lingo's own codecs). The text must equal what the mock gives
//! for the same prompt when asked directly, and token counts must be the mock's.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::*;
use lingo::mock::{MockConfig, MockKind};
use serde_json::{json, Value};

const PROMPT: &str = "the quick brown fox jumps";
const MAX: u64 = 9;

/// What one answer said: text, completion tokens, finish reason (normalised; empty for a
/// dialect that never says, vLLM's legacy server).
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
            // llama.cpp (passed through) puts usage and timings on its last completions chunk.
            assert!(
                e["choices"].as_array().unwrap().is_empty() || e.get("timings").is_some(),
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

/// TGI's answer: one object with `details`, or a stream of one token per event, no
/// terminator, the last event with `details`.
fn tgi_read(body: &str, stream: bool) -> Seen {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        // Without `details` the count is only in the `x-generated-tokens` header (0 here).
        return Seen {
            text: v["generated_text"].as_str().unwrap().to_string(),
            tokens: v["details"]["generated_tokens"].as_u64().unwrap_or(0),
            finish: v["details"]["finish_reason"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        };
    }
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
    // An upstream that ends with a separate finish chunk gives one more, empty and special.
    let tokens = events
        .iter()
        .filter(|e| e["token"]["special"] == json!(false))
        .count() as u64;
    if let Some(n) = last["details"]["generated_tokens"].as_u64() {
        assert_eq!(n, tokens, "one event per generated token");
    }
    Seen {
        text,
        tokens,
        finish: last["details"]["finish_reason"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

/// TGI's compat route `POST /` (where its Python client posts): the body's `stream` decides,
/// and a whole answer comes as a one-element array.
fn tgi_compat_request(stream: bool) -> Value {
    let mut v = tgi_request(stream);
    v["stream"] = json!(stream);
    v
}

fn tgi_compat_read(body: &str, stream: bool) -> Seen {
    if stream {
        return tgi_read(body, true);
    }
    let v: Value = serde_json::from_str(body).unwrap();
    let one = v.as_array().expect("an array").first().unwrap();
    tgi_read(&one.to_string(), false)
}

const BOTH: &[bool] = &[false, true];

fn anthropic_request(stream: bool) -> Value {
    // `ignore_eos` is lingo's extension of the Messages API (fixed output lengths).
    json!({"model": "mock-model", "max_tokens": MAX, "stream": stream, "temperature": 0,
           "system": "be brief", "messages": [{"role": "user", "content": PROMPT}],
           "ignore_eos": true})
}

fn anthropic_finish(reason: &Value) -> String {
    match reason.as_str().unwrap() {
        "max_tokens" => "length".into(),
        "end_turn" | "stop_sequence" => "stop".into(),
        other => other.into(),
    }
}

/// Anthropic's named events, in order: `(event name, payload)`; the name must repeat the
/// payload's `type`.
fn named_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let name = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap();
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(
                v["type"],
                json!(name),
                "event name and type differ: {block}"
            );
            (name.to_string(), v)
        })
        .collect()
}

fn anthropic_read(body: &str, stream: bool) -> Seen {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["type"], "message");
        assert!(v["id"].as_str().unwrap().starts_with("msg_"), "{v}");
        assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0, "{v}");
        return Seen {
            text: v["content"][0]["text"].as_str().unwrap_or_default().into(),
            tokens: v["usage"]["output_tokens"].as_u64().unwrap(),
            finish: anthropic_finish(&v["stop_reason"]),
        };
    }
    let events = named_events(body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..3],
        ["message_start", "content_block_start", "ping"],
        "{names:?}"
    );
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{names:?}"
    );
    // Upstreams that count per chunk (vLLM, SGLang) give the prompt count with the first
    // token, so `message_start` has it; the others only at the end, in `message_delta`.
    let start = &events[0].1["message"];
    let end = &events[events.len() - 2].1;
    assert!(
        start["usage"]["input_tokens"].as_u64().unwrap() > 0
            || end["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0,
        "{start} {end}"
    );
    let text = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, v)| v["delta"]["text"].as_str().unwrap())
        .collect();
    let delta = &events[events.len() - 2].1;
    Seen {
        text,
        tokens: delta["usage"]["output_tokens"].as_u64().unwrap(),
        finish: anthropic_finish(&delta["delta"]["stop_reason"]),
    }
}

fn vllm_legacy_request(stream: bool) -> Value {
    json!({"prompt": PROMPT, "stream": stream, "max_tokens": MAX, "ignore_eos": true,
           "temperature": 0})
}

/// `{"text": [prompt + output]}`, whole or as cumulative lines. The dialect reports no token
/// counts: the mock's output tokens are words, so they are counted as words.
fn vllm_legacy_read(body: &str, stream: bool) -> Seen {
    let full = if stream {
        let texts: Vec<String> = body
            .split('\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["text"][0].as_str().unwrap().to_string()
            })
            .collect();
        assert!(body.ends_with('\n'), "every line ends with a newline");
        for w in texts.windows(2) {
            assert!(w[1].starts_with(&w[0]), "not cumulative: {w:?}");
        }
        texts.last().unwrap().clone()
    } else {
        let v: Value = serde_json::from_str(body).unwrap();
        v["text"][0].as_str().unwrap().to_string()
    };
    let text = full.strip_prefix(PROMPT).expect("the prompt comes first");
    Seen {
        text: text.to_string(),
        tokens: text.split_whitespace().count() as u64,
        finish: String::new(),
    }
}

fn llamacpp_request(stream: bool) -> Value {
    json!({"prompt": PROMPT, "n_predict": MAX, "ignore_eos": true, "temperature": 0,
           "stream": stream})
}

/// llama.cpp's `stop_type`, named as the other rows name their finish reasons.
fn stop_type(v: &Value) -> String {
    match v["stop_type"].as_str().unwrap() {
        "limit" => "length".into(),
        other => other.into(),
    }
}

fn llamacpp_read(body: &str, stream: bool) -> Seen {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["stop"], json!(true));
        return Seen {
            text: v["content"].as_str().unwrap().to_string(),
            tokens: v["tokens_predicted"].as_u64().unwrap(),
            finish: stop_type(&v),
        };
    }
    let events = sse_events(body);
    assert!(
        !events.contains(&json!("[DONE]")),
        "llama.cpp sends no [DONE]"
    );
    let (last, partial) = events.split_last().unwrap();
    assert_eq!(last["stop"], json!(true), "the stream ends with stop: true");
    assert_eq!(last["content"], json!(""));
    assert!(last["timings"]["predicted_n"].is_u64(), "timings: {last}");
    let mut text = String::new();
    for e in partial {
        assert_eq!(e["stop"], json!(false));
        text.push_str(e["content"].as_str().unwrap());
    }
    Seen {
        text,
        tokens: last["tokens_predicted"].as_u64().unwrap(),
        finish: stop_type(last),
    }
}

fn ollama_generate_request(stream: bool) -> Value {
    json!({"model": "mock-model", "prompt": PROMPT, "raw": true, "stream": stream,
           "options": {"num_predict": MAX, "temperature": 0}})
}

fn ollama_chat_request(stream: bool) -> Value {
    json!({"model": "mock-model", "messages": [{"role": "user", "content": PROMPT}],
           "stream": stream, "options": {"num_predict": MAX, "temperature": 0}})
}

fn ollama_text(v: &Value) -> &str {
    v["response"]
        .as_str()
        .or(v["message"]["content"].as_str())
        .unwrap()
}

fn ollama_read(body: &str, stream: bool) -> Seen {
    let lines: Vec<Value> = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (last, partial) = lines.split_last().unwrap();
    assert_eq!(last["done"], json!(true), "the answer ends with done: true");
    assert!(last["total_duration"].as_u64().unwrap() > 0, "{last}");
    assert!(last["eval_duration"].is_u64(), "{last}");
    if !stream {
        assert!(partial.is_empty(), "one object when not streaming");
    }
    let mut text: String = partial.iter().map(ollama_text).collect();
    text.push_str(ollama_text(last));
    Seen {
        text,
        tokens: last["eval_count"].as_u64().unwrap(),
        finish: last["done_reason"].as_str().unwrap().to_string(),
    }
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
        read: vllm_legacy_read,
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
    if kind == MockKind::Ollama {
        let v: Value = client()
            .post(format!("{}/api/generate", mock.url()))
            .json(&ollama_generate_request(false))
            .send()
            .await
            .unwrap()
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
                let resp = client()
                    .post(format!("{base}{}", row.path))
                    .json(&request)
                    .send()
                    .await
                    .unwrap();
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
            let resp = client()
                .post(format!("{base}{}", row.path))
                .json(&request)
                .send()
                .await
                .unwrap();
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
        let body = client()
            .post(format!("{base}/generate"))
            .json(&without(sglang_request(true), "ignore_eos"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(sglang_read(&body, true).tokens, MAX, "{kind:?}");
    }
}
