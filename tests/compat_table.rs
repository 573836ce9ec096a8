//! The compatibility table in `docs/dialects.md` is generated here, so it cannot drift from
//! what lingo does: for every client dialect, each field is sent (alone, on a minimal valid
//! request) through lingo to every mock upstream kind, and the outcome is classified:
//!
//! - `pass`: the upstream serves the client's endpoint; the request went through untouched.
//! - `✓`: translated to the upstream's endpoint and answered.
//! - `✗`: refused by lingo with the client's error status, naming the field.
//! - `✗ upstream`: passed through and rejected by the upstream itself.
//!
//! `LINGO_BLESS=1 cargo test --test compat_table` rewrites the table; otherwise a difference
//! fails the test.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use common::*;
use lingo::mock::MockKind;
use serde_json::{json, Value};

const KINDS: [MockKind; 6] = MockKind::ALL;

/// A client dialect: its endpoint, a minimal valid request, and the fields to try, each as
/// `(name in the table, JSON merged into the request)`.
struct Client {
    title: &'static str,
    path: &'static str,
    base: fn() -> Value,
    fields: fn() -> Vec<(&'static str, Value)>,
}

fn sglang() -> Vec<(&'static str, Value)> {
    let sp = |v: Value| json!({ "sampling_params": v });
    vec![
        ("text", json!({})),
        ("text (batch)", json!({"text": ["a b", "c d"]})),
        (
            "input_ids",
            json!({"text": null, "input_ids": [1001, 1002]}),
        ),
        (
            "sampling_params.max_new_tokens",
            sp(json!({"max_new_tokens": 3})),
        ),
        (
            "sampling_params.min_new_tokens",
            sp(json!({"min_new_tokens": 2})),
        ),
        (
            "sampling_params.temperature",
            sp(json!({"temperature": 0.5})),
        ),
        ("sampling_params.top_p", sp(json!({"top_p": 0.9}))),
        ("sampling_params.top_k", sp(json!({"top_k": 20}))),
        ("sampling_params.min_p", sp(json!({"min_p": 0.1}))),
        (
            "sampling_params.repetition_penalty",
            sp(json!({"repetition_penalty": 1.1})),
        ),
        (
            "sampling_params.presence_penalty",
            sp(json!({"presence_penalty": 0.5})),
        ),
        ("sampling_params.stop", sp(json!({"stop": ["zzz"]}))),
        (
            "sampling_params.stop_token_ids",
            sp(json!({"stop_token_ids": [7]})),
        ),
        (
            "sampling_params.ignore_eos",
            sp(json!({"ignore_eos": true})),
        ),
        ("sampling_params.n", sp(json!({"n": 2}))),
        (
            "sampling_params.sampling_seed",
            sp(json!({"sampling_seed": 7})),
        ),
        (
            "sampling_params.no_stop_trim",
            sp(json!({"no_stop_trim": true, "stop": ["zzz"]})),
        ),
        (
            "sampling_params.json_schema",
            sp(json!({"json_schema": "{\"type\":\"object\"}"})),
        ),
        ("sampling_params.regex", sp(json!({"regex": "[a-z]+"}))),
        ("return_logprob", json!({"return_logprob": true})),
        ("stream", json!({"stream": true})),
    ]
}

fn openai_common() -> Vec<(&'static str, Value)> {
    vec![
        ("max_tokens", json!({"max_tokens": 3})),
        ("temperature", json!({"temperature": 0.5})),
        ("top_p", json!({"top_p": 0.9})),
        ("n", json!({"n": 2})),
        ("stop", json!({"stop": ["zzz"]})),
        ("seed", json!({"seed": 7})),
        ("presence_penalty", json!({"presence_penalty": 0.5})),
        ("logit_bias", json!({"logit_bias": {"1001": -100}})),
        ("stream", json!({"stream": true})),
        (
            "stream_options.include_usage",
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        ),
        ("top_k (vLLM)", json!({"top_k": 20})),
        ("min_p (vLLM)", json!({"min_p": 0.1})),
        (
            "repetition_penalty (vLLM)",
            json!({"repetition_penalty": 1.1}),
        ),
        ("ignore_eos (vLLM)", json!({"ignore_eos": true})),
        ("min_tokens (vLLM)", json!({"min_tokens": 2})),
        ("stop_token_ids (vLLM)", json!({"stop_token_ids": [7]})),
    ]
}

fn completions() -> Vec<(&'static str, Value)> {
    let mut f = vec![
        ("prompt", json!({})),
        ("prompt (batch)", json!({"prompt": ["a b", "c d"]})),
        ("prompt (token ids)", json!({"prompt": [1001, 1002]})),
        ("logprobs", json!({"logprobs": 2})),
        ("echo", json!({"echo": true})),
    ];
    f.extend(openai_common());
    f
}

fn chat() -> Vec<(&'static str, Value)> {
    let mut f = vec![
        ("messages", json!({})),
        (
            "max_completion_tokens",
            json!({"max_tokens": null, "max_completion_tokens": 3}),
        ),
        (
            "logprobs, top_logprobs",
            json!({"logprobs": true, "top_logprobs": 2}),
        ),
        (
            "response_format (json_schema)",
            json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "s", "schema": {"type": "object"}}}}),
        ),
    ];
    f.extend(openai_common());
    f
}

fn tgi() -> Vec<(&'static str, Value)> {
    let p = |v: Value| json!({ "parameters": v });
    vec![
        ("inputs", json!({})),
        ("parameters.max_new_tokens", p(json!({"max_new_tokens": 3}))),
        (
            "parameters.temperature",
            p(json!({"temperature": 0.5, "do_sample": true})),
        ),
        (
            "parameters.do_sample: false",
            p(json!({"do_sample": false})),
        ),
        ("parameters.top_p", p(json!({"top_p": 0.9}))),
        ("parameters.top_k", p(json!({"top_k": 20}))),
        (
            "parameters.repetition_penalty",
            p(json!({"repetition_penalty": 1.1})),
        ),
        (
            "parameters.frequency_penalty",
            p(json!({"frequency_penalty": 0.5})),
        ),
        ("parameters.stop", p(json!({"stop": ["zzz"]}))),
        ("parameters.seed", p(json!({"seed": 7, "do_sample": true}))),
        ("parameters.details", p(json!({"details": true}))),
        (
            "parameters.top_n_tokens",
            p(json!({"top_n_tokens": 2, "details": true})),
        ),
        (
            "parameters.return_full_text",
            p(json!({"return_full_text": true})),
        ),
        (
            "parameters.grammar (json)",
            p(json!({"grammar": {"type": "json", "value": {"type": "object"}}})),
        ),
        ("parameters.typical_p", p(json!({"typical_p": 0.5}))),
        ("parameters.watermark", p(json!({"watermark": true}))),
        ("parameters.truncate", p(json!({"truncate": 10}))),
    ]
}

fn anthropic() -> Vec<(&'static str, Value)> {
    vec![
        ("messages", json!({})),
        ("max_tokens", json!({"max_tokens": 3})),
        ("system", json!({"system": "be brief"})),
        ("stop_sequences", json!({"stop_sequences": ["zzz"]})),
        ("temperature", json!({"temperature": 0.5})),
        ("top_p", json!({"top_p": 0.9})),
        ("top_k", json!({"top_k": 20})),
        (
            "assistant prefill",
            json!({"messages": [{"role": "user", "content": "a b"},
                                                  {"role": "assistant", "content": "c"}]}),
        ),
        ("metadata", json!({"metadata": {"user_id": "u"}})),
        ("stream", json!({"stream": true})),
        ("ignore_eos (lingo)", json!({"ignore_eos": true})),
    ]
}

fn vllm_legacy() -> Vec<(&'static str, Value)> {
    vec![
        ("prompt", json!({})),
        ("max_tokens", json!({"max_tokens": 3})),
        ("temperature", json!({"temperature": 0.5})),
        ("top_p", json!({"top_p": 0.9})),
        ("top_k", json!({"top_k": 20})),
        ("n", json!({"n": 2})),
        ("stop", json!({"stop": ["zzz"]})),
        ("seed", json!({"seed": 7})),
        ("ignore_eos", json!({"ignore_eos": true})),
        ("min_tokens", json!({"min_tokens": 2})),
        ("stream", json!({"stream": true})),
    ]
}

fn llamacpp() -> Vec<(&'static str, Value)> {
    vec![
        ("prompt", json!({})),
        ("prompt (token ids)", json!({"prompt": [1001, 1002]})),
        ("n_predict", json!({"n_predict": 3})),
        ("temperature", json!({"temperature": 0.5})),
        ("top_k", json!({"top_k": 20})),
        ("top_p", json!({"top_p": 0.9})),
        ("min_p", json!({"min_p": 0.1})),
        ("repeat_penalty", json!({"repeat_penalty": 1.1})),
        ("stop", json!({"stop": ["zzz"]})),
        ("seed", json!({"seed": 7})),
        ("ignore_eos", json!({"ignore_eos": true})),
        ("n_probs", json!({"n_probs": 2})),
        ("json_schema", json!({"json_schema": {"type": "object"}})),
        ("grammar", json!({"grammar": "root ::= \"a\""})),
        ("stream", json!({"stream": true})),
    ]
}

fn ollama_options() -> Vec<(&'static str, Value)> {
    let o = |v: Value| json!({ "options": v });
    vec![
        ("options.num_predict", o(json!({"num_predict": 3}))),
        (
            "options.temperature",
            o(json!({"num_predict": 3, "temperature": 0.5})),
        ),
        ("options.top_p", o(json!({"num_predict": 3, "top_p": 0.9}))),
        ("options.top_k", o(json!({"num_predict": 3, "top_k": 20}))),
        ("options.min_p", o(json!({"num_predict": 3, "min_p": 0.1}))),
        (
            "options.repeat_penalty",
            o(json!({"num_predict": 3, "repeat_penalty": 1.1})),
        ),
        (
            "options.stop",
            o(json!({"num_predict": 3, "stop": ["zzz"]})),
        ),
        ("options.seed", o(json!({"num_predict": 3, "seed": 7}))),
        (
            "options.num_ctx (loader hint)",
            o(json!({"num_predict": 3, "num_ctx": 4096})),
        ),
        (
            "options.typical_p",
            o(json!({"num_predict": 3, "typical_p": 0.5})),
        ),
        ("keep_alive", json!({"keep_alive": "5m"})),
        ("format: json", json!({"format": "json"})),
        ("stream (default true)", json!({"stream": null})),
    ]
}

fn ollama_generate() -> Vec<(&'static str, Value)> {
    let mut f = vec![
        ("prompt (templated)", json!({})),
        ("raw", json!({"raw": true})),
        ("system", json!({"system": "be brief"})),
        ("images", json!({"images": ["aGk="]})),
    ];
    f.extend(ollama_options());
    f
}

fn ollama_chat() -> Vec<(&'static str, Value)> {
    let mut f = vec![("messages", json!({}))];
    f.extend(ollama_options());
    f
}

const CLIENTS: &[Client] = &[
    Client {
        title: "SGLang `POST /generate`",
        path: "/generate",
        base: || json!({"text": "a b", "sampling_params": {"max_new_tokens": 3}}),
        fields: sglang,
    },
    Client {
        title: "OpenAI `POST /v1/completions`",
        path: "/v1/completions",
        base: || json!({"model": "mock-model", "prompt": "a b", "max_tokens": 3}),
        fields: completions,
    },
    Client {
        title: "OpenAI `POST /v1/chat/completions`",
        path: "/v1/chat/completions",
        base: || {
            json!({"model": "mock-model", "max_tokens": 3,
                        "messages": [{"role": "user", "content": "a b"}]})
        },
        fields: chat,
    },
    Client {
        title: "TGI `POST /generate`, `/generate_stream`, `/`",
        path: "/generate",
        base: || json!({"inputs": "a b", "parameters": {"max_new_tokens": 3}}),
        fields: tgi,
    },
    Client {
        title: "Anthropic `POST /v1/messages`",
        path: "/v1/messages",
        base: || {
            json!({"model": "mock-model", "max_tokens": 3,
                        "messages": [{"role": "user", "content": "a b"}]})
        },
        fields: anthropic,
    },
    Client {
        title: "vLLM legacy `POST /generate`",
        path: "/generate",
        base: || json!({"prompt": "a b", "max_tokens": 3}),
        fields: vllm_legacy,
    },
    Client {
        title: "llama.cpp `POST /completion`",
        path: "/completion",
        base: || json!({"prompt": "a b", "n_predict": 3}),
        fields: llamacpp,
    },
    Client {
        title: "Ollama `POST /api/generate`",
        path: "/api/generate",
        base: || {
            json!({"model": "mock-model", "prompt": "a b", "stream": false,
                        "options": {"num_predict": 3}})
        },
        fields: ollama_generate,
    },
    Client {
        title: "Ollama `POST /api/chat`",
        path: "/api/chat",
        base: || {
            json!({"model": "mock-model", "stream": false, "options": {"num_predict": 3},
                        "messages": [{"role": "user", "content": "a b"}]})
        },
        fields: ollama_chat,
    },
];

/// Merge `patch` into `base` (objects recursively; `null` removes a key).
fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                match v {
                    Value::Null => {
                        b.remove(k);
                    }
                    Value::Object(_) if b.get(k).is_some_and(Value::is_object) => {
                        merge(b.get_mut(k).unwrap(), v)
                    }
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}

/// The last path segment of a field's table name: what an error message must mention.
fn key(name: &str) -> &str {
    let bare = name.split([' ', ',']).next().unwrap();
    bare.rsplit('.').next().unwrap()
}

async fn outcome(mock: &Mock, base: &str, path: &str, body: &Value, name: &str) -> String {
    let failed_before = mock.state.stats().failed;
    let resp = post_json(&format!("{base}{path}"), body).await;
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let upstream_refused = mock.state.stats().failed > failed_before;
    // TGI's stream route answers errors inside a 200 stream.
    let in_band = status == 200 && text.contains("\"error_type\"");
    match (status, upstream_refused) {
        (200, _) if !in_band => "ok".into(),
        (_, true) => "✗ upstream".into(),
        _ if text.contains(key(name)) => "✗".into(),
        _ => format!("✗ ({status})"),
    }
}

async fn table(ups: &[(MockKind, Mock, String)], c: &Client) -> String {
    let mut out = format!("### {}\n\n| field |", c.title);
    for (kind, _, _) in ups {
        out.push_str(&format!(" {} |", kind.as_str()));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(ups.len()));
    let dialect_of = |body: &Value| {
        lingo::dialect::Dialect::parse(match c.path {
            "/generate" if body.get("inputs").is_some() => "tgi",
            "/generate" if body.get("prompt").is_some() => "vllm-legacy",
            "/generate" => "sglang",
            "/v1/completions" => "openai-completions",
            "/v1/chat/completions" => "openai-chat",
            "/v1/messages" => "anthropic",
            "/completion" => "llamacpp",
            "/api/generate" => "ollama-generate",
            _ => "ollama-chat",
        })
        .unwrap()
    };
    for (name, patch) in (c.fields)() {
        let mut body = (c.base)();
        merge(&mut body, &patch);
        out.push_str(&format!("\n| `{name}` |"));
        for (kind, mock, base) in ups {
            let mut cell = outcome(mock, base, c.path, &body, name).await;
            if cell == "ok" {
                let kind = lingo::upstream::Kind::from_setting(kind_setting(*kind)).unwrap();
                let pass = kind.route(dialect_of(&body)) == lingo::upstream::Route::Passthrough;
                cell = if pass { "pass".into() } else { "✓".into() };
            }
            out.push_str(&format!(" {cell} |"));
        }
    }
    out.push('\n');
    out
}

/// Where each client endpoint's requests go on each kind, from lingo's own routing.
fn routes() -> String {
    use lingo::dialect::Dialect;
    use lingo::upstream::{Kind, Route};
    let mut out = String::from("### Routes\n\n| client endpoint |");
    for kind in KINDS {
        out.push_str(&format!(" {} |", kind.as_str()));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(KINDS.len()));
    for client in Dialect::ALL {
        out.push_str(&format!("\n| {} `{}` |", client.label(), client.path()));
        for mock_kind in KINDS {
            let kind = Kind::from_setting(kind_setting(mock_kind)).unwrap();
            let cell = match kind.route(client) {
                Route::Passthrough => "pass".to_string(),
                Route::Translate(target) => format!("`{}`", target.path()),
            };
            out.push_str(&format!(" {cell} |"));
        }
    }
    out.push('\n');
    out
}

const BEGIN: &str = "<!-- compat:begin (generated by tests/compat_table.rs) -->\n";
const END: &str = "<!-- compat:end -->";

#[tokio::test]
async fn docs_table_matches_what_lingo_does() {
    let ups = every_kind_behind_lingo().await;
    let mut generated = format!("\n{}", routes());
    for c in CLIENTS {
        generated.push('\n');
        generated.push_str(&table(&ups, c).await);
    }
    generated.push('\n');
    let path = format!("{}/docs/dialects.md", env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc.find(BEGIN).expect("the begin marker") + BEGIN.len();
    let end = doc.find(END).expect("the end marker");
    if std::env::var_os("LINGO_BLESS").is_some() {
        let new = format!("{}{}{}", &doc[..start], generated, &doc[end..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    assert!(
        doc[start..end] == generated,
        "docs/dialects.md is out of date: run LINGO_BLESS=1 cargo test --test compat_table\n{generated}"
    );
}

/// The doc's cell for `field` of the client titled `title`, in `kind`'s column.
fn doc_cell<'a>(doc: &'a str, title: &str, kind: &str, field: &str) -> Option<&'a str> {
    let section = doc.split(&format!("### {title}\n")).nth(1)?;
    let mut lines = section.lines().filter(|l| l.starts_with('|'));
    let header: Vec<&str> = lines.next()?.split('|').map(str::trim).collect();
    let col = header.iter().position(|h| *h == kind)?;
    lines
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .find(|cells| cells.get(1) == Some(&format!("`{field}`").as_str()))
        .and_then(|cells| cells.get(col).copied())
}

/// What a real server behind lingo made of one field: `ok`, `✗` (refused, the field named) or
/// `✗ (status)`. A real server's refusals cannot be told from lingo's by its state, as the
/// mock's can; the table's `✗ upstream` stands for either.
async fn real_outcome(base: &str, path: &str, body: &Value, name: &str) -> String {
    let resp = post_json(&format!("{base}{path}"), body).await;
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let in_band = status == 200 && text.contains("\"error");
    match status {
        200 if !in_band => "ok".into(),
        _ if text.contains(key(name)) => "✗".into(),
        _ => format!(
            "✗ ({status}: {})",
            text.chars().take(160).collect::<String>()
        ),
    }
}

/// Every field of every client through lingo to a real server (`LINGO_COMPAT_UPSTREAM`, its kind
/// `LINGO_COMPAT_KIND`, serving `LINGO_COMPAT_MODEL`, which the tables' `mock-model` is
/// aliased to), each outcome held against the table's column for that kind: the mocks the
/// table is made from are not the truth. `scripts/check-vllm.sh` runs it against vLLM.
#[tokio::test]
#[ignore = "needs a real server: LINGO_COMPAT_UPSTREAM, LINGO_COMPAT_KIND, LINGO_COMPAT_MODEL"]
async fn a_real_server_agrees_with_the_table() {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set"));
    let (url, kind, model) = (
        var("LINGO_COMPAT_UPSTREAM"),
        var("LINGO_COMPAT_KIND"),
        var("LINGO_COMPAT_MODEL"),
    );
    let mut config = config_for(&url, kind.parse::<lingo::upstream::KindSetting>().unwrap());
    config.models.insert("mock-model".into(), model);
    let base = lingo(config).await;
    let doc = std::fs::read_to_string(format!("{}/docs/dialects.md", env!("CARGO_MANIFEST_DIR")))
        .unwrap();
    let (mut checked, mut differ) = (0, Vec::new());
    for c in CLIENTS {
        for (name, patch) in (c.fields)() {
            let mut body = (c.base)();
            merge(&mut body, &patch);
            let want = doc_cell(&doc, c.title, &kind, name).expect("a cell for every field");
            let got = real_outcome(&base, c.path, &body, name).await;
            let agree = match want {
                "pass" | "✓" => got == "ok",
                _ => got != "ok",
            };
            println!(
                "{} {} `{name}`: table {want}, {kind} {got}",
                if agree { "ok  " } else { "DIFF" },
                c.title
            );
            checked += 1;
            if !agree {
                differ.push(format!("{} `{name}`: table {want}, {kind} {got}", c.title));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {checked} fields differ from the table:\n{}",
        differ.len(),
        differ.join("\n")
    );
}
