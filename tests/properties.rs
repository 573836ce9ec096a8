//! Property: a random valid request in any client dialect, through any upstream kind, comes
//! back as a valid answer of the client dialect (its readers check the shape) carrying the
//! upstream's own token count, and lingo's metrics count exactly what the upstream generated.
//! Refusals are allowed only where lingo documents them, in the client's error shape, naming
//! the field.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::sync::OnceLock;

use common::readers::*;
use common::*;
use lingo::mock::MockKind;
use proptest::prelude::*;
use serde_json::{json, Value};

const KINDS: [MockKind; 6] = MockKind::ALL;

/// Client dialects by endpoint (TGI three ways: `/generate`, `/generate_stream`, `/`).
const DIALECTS: [&str; 12] = [
    "sglang",
    "openai-completions",
    "openai-chat",
    "tgi",
    "tgi-stream",
    "tgi-compat",
    "anthropic",
    "vllm-legacy",
    "llamacpp",
    "ollama-generate",
    "ollama-generate-raw",
    "ollama-chat",
];

/// Words the mock generates, so stop strings sometimes match.
const STOPS: [&str; 6] = ["the", "of", "and", "time", "light", "sea"];

#[derive(Debug, Clone)]
struct Spec {
    dialect: &'static str,
    kind: MockKind,
    prompt: String,
    max: u64,
    stream: bool,
    /// In [0, 1] (Anthropic's range); `Some(0.0)` is greedy.
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<u64>,
    stop: Vec<String>,
}

fn spec() -> impl Strategy<Value = Spec> {
    let words = prop::collection::vec(prop::sample::select(&STOPS[..]), 1..12);
    let temperature = prop::option::of(prop_oneof![Just(0.0), 0.1f64..1.0]);
    let stop = prop::collection::vec(prop::sample::select(&STOPS[..]), 0..3);
    (
        prop::sample::select(&DIALECTS[..]),
        prop::sample::select(&KINDS[..]),
        words,
        1u64..24,
        any::<bool>(),
        temperature,
        prop::option::of(0.05f64..0.95),
        prop::option::of(0u64..1000),
        stop,
    )
        .prop_map(
            |(dialect, kind, words, max, stream, temperature, top_p, seed, stop)| Spec {
                dialect,
                kind,
                prompt: words.join(" "),
                max,
                stream: match dialect {
                    "tgi" => false,
                    "tgi-stream" => true,
                    _ => stream,
                },
                temperature,
                top_p,
                seed,
                stop: stop.into_iter().map(|s| format!(" {s}")).collect(),
            },
        )
}

/// Set the optional sampling fields on `m` under the given names.
fn sampling(s: &Spec, m: &mut Value, temperature: &str, stop: &str) {
    if let Some(t) = s.temperature {
        m[temperature] = json!(t);
    }
    if let Some(p) = s.top_p {
        m["top_p"] = json!(p);
    }
    if let Some(seed) = s.seed {
        m["seed"] = json!(seed);
    }
    if !s.stop.is_empty() {
        m[stop] = json!(s.stop);
    }
}

fn request(s: &Spec) -> (&'static str, Value) {
    let chat = json!([{"role": "user", "content": s.prompt}]);
    match s.dialect {
        "sglang" => {
            let mut p = json!({"max_new_tokens": s.max});
            sampling(s, &mut p, "temperature", "stop");
            if let Some(seed) = p.as_object_mut().unwrap().remove("seed") {
                p["sampling_seed"] = seed;
            }
            let v = json!({"text": s.prompt, "stream": s.stream, "sampling_params": p});
            ("/generate", v)
        }
        "openai-completions" | "openai-chat" => {
            let mut v = json!({"model": "mock-model", "max_tokens": s.max, "stream": s.stream});
            sampling(s, &mut v, "temperature", "stop");
            if s.stream {
                v["stream_options"] = json!({"include_usage": true});
            }
            if s.dialect == "openai-chat" {
                v["messages"] = chat;
                return ("/v1/chat/completions", v);
            }
            v["prompt"] = json!(s.prompt);
            ("/v1/completions", v)
        }
        "tgi" | "tgi-stream" | "tgi-compat" => tgi_request(s),
        "anthropic" => {
            let mut v = json!({"model": "mock-model", "max_tokens": s.max, "stream": s.stream,
                               "messages": chat});
            sampling(s, &mut v, "temperature", "stop_sequences");
            v.as_object_mut().unwrap().remove("seed");
            ("/v1/messages", v)
        }
        "vllm-legacy" => {
            let mut v = json!({"prompt": s.prompt, "max_tokens": s.max, "stream": s.stream});
            sampling(s, &mut v, "temperature", "stop");
            ("/generate", v)
        }
        "llamacpp" => {
            let mut v = json!({"prompt": s.prompt, "n_predict": s.max, "stream": s.stream});
            sampling(s, &mut v, "temperature", "stop");
            ("/completion", v)
        }
        _ => ollama_request(s, chat),
    }
}

/// TGI: greedy is `do_sample: false` (a zero temperature is invalid there); `details` always,
/// for the counts.
fn tgi_request(s: &Spec) -> (&'static str, Value) {
    let mut p = json!({"max_new_tokens": s.max, "details": true});
    sampling(s, &mut p, "temperature", "stop");
    let greedy = s.temperature == Some(0.0);
    if greedy {
        p.as_object_mut().unwrap().remove("temperature");
    }
    p["do_sample"] = json!(!greedy && s.temperature.is_some());
    let mut v = json!({"inputs": s.prompt, "parameters": p});
    match s.dialect {
        "tgi" => ("/generate", v),
        "tgi-stream" => ("/generate_stream", v),
        _ => {
            v["stream"] = json!(s.stream);
            ("/", v)
        }
    }
}

fn ollama_request(s: &Spec, chat: Value) -> (&'static str, Value) {
    let mut o = json!({"num_predict": s.max});
    sampling(s, &mut o, "temperature", "stop");
    let mut v = json!({"model": "mock-model", "stream": s.stream, "options": o});
    if s.dialect == "ollama-chat" {
        v["messages"] = chat;
        return ("/api/chat", v);
    }
    v["prompt"] = json!(s.prompt);
    v["raw"] = json!(s.dialect == "ollama-generate-raw");
    ("/api/generate", v)
}

fn read(s: &Spec, body: &str) -> Seen {
    match s.dialect {
        "sglang" => sglang_read(body, s.stream),
        "openai-completions" => openai_read(body, s.stream, |c| c["text"].as_str()),
        "openai-chat" => openai_read(body, s.stream, |c| {
            c["message"]["content"]
                .as_str()
                .or(c["delta"]["content"].as_str())
        }),
        "tgi" | "tgi-stream" => tgi_read(body, s.stream),
        "tgi-compat" => tgi_compat_read(body, s.stream),
        "anthropic" => anthropic_read(body, s.stream),
        "vllm-legacy" => vllm_legacy_read(&s.prompt, body, s.stream),
        "llamacpp" => llamacpp_read(body, s.stream),
        _ => ollama_read(body, s.stream),
    }
}

/// The refusals lingo documents for these fields: TGI's `details` needs per-token log
/// probabilities, which Ollama does not give; TGI keeps a matched stop sequence in the text,
/// which a standard OpenAI server and llama.cpp's OpenAI routes cannot.
fn refused_field(s: &Spec) -> Option<&'static str> {
    let tgi = s.dialect.starts_with("tgi");
    match s.kind {
        MockKind::Ollama if tgi => Some("details"),
        MockKind::Openai | MockKind::Llamacpp if tgi && !s.stop.is_empty() => Some("stop"),
        _ => None,
    }
}

/// The message of an error answer in the client's own shape (`None`: not that shape).
fn error_message(s: &Spec, status: u16, body: &str) -> Option<String> {
    // TGI streams its errors in a 200 stream, as `data:{"error":...}` events.
    let v: Value = match body.strip_prefix("data:") {
        Some(event) => serde_json::from_str(event.trim()).ok()?,
        None => serde_json::from_str(body).ok()?,
    };
    let text = match s.dialect {
        d if d.starts_with("tgi") => {
            let ok = v["error_type"].is_string() && (status == 422 || status == 200);
            ok.then(|| v["error"].as_str())??
        }
        "anthropic" => {
            (v["type"] == "error" && status == 400).then(|| v["error"]["message"].as_str())??
        }
        d if d.starts_with("ollama") => (status == 400).then(|| v["error"].as_str())??,
        _ => (status == 400).then(|| v["error"]["message"].as_str())??,
    };
    Some(text.to_string())
}

/// One mock and one lingo per kind, on a runtime that outlives each case.
struct Servers {
    rt: tokio::runtime::Runtime,
    by_kind: Vec<(MockKind, Mock, String)>,
}

fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let rt = common::cases::runtime();
        let by_kind = rt.block_on(every_kind_behind_lingo());
        Servers { rt, by_kind }
    })
}

/// Send one case and check it; the mock's counters and lingo's metrics are read before and
/// after, so cases must not overlap (proptest runs them one at a time).
async fn check(s: &Spec, mock: &Mock, base: &str) -> Result<(), TestCaseError> {
    let (path, body) = request(s);
    let before = mock.state.stats();
    let metrics_before = sum(&scrape(base).await, "lingo_generation_tokens_total", &[]);
    let resp = post_json(&format!("{base}{path}"), &body).await;
    let status = resp.status().as_u16();
    let header_tokens = resp
        .headers()
        .get("x-generated-tokens")
        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    let text = resp.text().await.unwrap();
    let generated = mock.state.stats().completion_tokens - before.completion_tokens;
    if let Some(field) = refused_field(s) {
        let message = error_message(s, status, &text);
        prop_assert!(
            message.is_some(),
            "an error in the client's shape: {status} {text}"
        );
        prop_assert!(message.unwrap().contains(field), "names {field}: {text}");
        prop_assert_eq!(generated, 0);
        return Ok(());
    }
    prop_assert_eq!(status, 200, "{:?} -> {}", body, text);
    let mut seen = read(s, &text);
    if seen.tokens == 0 {
        seen.tokens = header_tokens.unwrap_or(0);
    }
    prop_assert!(
        generated >= 1 && generated <= s.max,
        "{generated} of {}",
        s.max
    );
    if s.dialect != "vllm-legacy" {
        prop_assert_eq!(seen.tokens, generated, "client-reported count: {}", text);
    } else if s.stop.is_empty() {
        // vLLM's legacy answers carry no count: the reader counts words, which a trimmed
        // stop string leaves out, and an end-of-sequence token (counted, never shown) is
        // one more than the words.
        prop_assert!(
            seen.tokens == generated || seen.tokens + 1 == generated,
            "client-reported count {} of {generated}: {}",
            seen.tokens,
            text
        );
    }
    let metrics = sum(&scrape(base).await, "lingo_generation_tokens_total", &[]);
    prop_assert_eq!(
        (metrics - metrics_before) as u64,
        generated,
        "lingo's metric"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_request_through_any_kind(s in spec()) {
        let servers = servers();
        let (_, mock, base) = servers.by_kind.iter().find(|(k, _, _)| *k == s.kind).unwrap();
        servers.rt.block_on(check(&s, mock, base))?;
    }
}
