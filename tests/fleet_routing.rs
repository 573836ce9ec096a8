//! Fleets over real sockets: each policy's distribution over a bounded run, a mixed pool's
//! answers, routing by model across two pools, and per-endpoint counts against the mocks'.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use lingo::config::{Config, EndpointConfig, Policy, PoolConfig};
use lingo::mock::{MockConfig, MockKind};
use serde_json::{json, Value};

fn endpoint(m: &Mock, kind: MockKind, weight: u32) -> EndpointConfig {
    let mut e = EndpointConfig::new(&m.url(), kind_setting(kind));
    e.weight = weight;
    e
}

fn pool(policy: Policy, endpoints: Vec<EndpointConfig>) -> PoolConfig {
    PoolConfig {
        policy,
        endpoints,
        ..PoolConfig::default()
    }
}

fn fleet(pools: Vec<(&str, PoolConfig)>) -> Config {
    let c = Config {
        pools: pools
            .into_iter()
            .map(|(n, p)| (n.to_string(), p))
            .collect::<BTreeMap<_, _>>(),
        ..Config::default()
    };
    c.validate().unwrap();
    c
}

async fn mocks(kind: MockKind, n: usize) -> Vec<Mock> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(mock(kind).await);
    }
    out
}

fn chat(stream: bool) -> Value {
    json!({"model": "mock-model", "max_tokens": 8, "stream": stream,
           "messages": [{"role": "user", "content": "hi"}]})
}

async fn post_ok(url: &str, body: &Value) -> Value {
    let r = post_json(url, body).await;
    assert_eq!(r.status(), 200, "{url}");
    r.json().await.unwrap()
}

fn requests(m: &Mock) -> u64 {
    m.state.stats().requests
}

/// The value of the one sample whose line starts with `prefix` (0 when there is none).
fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn weighted_round_robin_gives_exact_shares_and_counts_per_endpoint() {
    let ms = mocks(MockKind::Vllm, 3).await;
    let eps = vec![
        endpoint(&ms[0], MockKind::Vllm, 1),
        endpoint(&ms[1], MockKind::Vllm, 2),
        endpoint(&ms[2], MockKind::Vllm, 3),
    ];
    let base = lingo_app(fleet(vec![("p", pool(Policy::RoundRobin, eps))])).await;
    for _ in 0..60 {
        post_ok(&format!("{base}/v1/chat/completions"), &chat(false)).await;
    }
    let got: Vec<u64> = ms.iter().map(requests).collect();
    assert_eq!(got, vec![10, 20, 30]);
    // lingo's own per-endpoint counts are the mocks' own.
    let text = scrape(&base).await;
    for m in &ms {
        let prefix = format!(
            "lingo_endpoint_requests_total{{endpoint=\"{}\",outcome=\"ok\",pool=\"p\"}}",
            m.addr
        );
        assert_eq!(sample(&text, &prefix), requests(m) as f64, "{text}");
        let in_flight = format!(
            "lingo_endpoint_in_flight{{endpoint=\"{}\",pool=\"p\"}}",
            m.addr
        );
        assert_eq!(sample(&text, &in_flight), 0.0, "{text}");
    }
    // The group is the `upstream` label (default: the pool's name).
    let group = "lingo_requests_total{dialect=\"openai-chat\",finish_reason=\"length\",key=\"none\",model=\"other\",outcome=\"ok\",upstream=\"p\"}";
    assert_eq!(sample(&text, group), 60.0, "{text}");
    let status = get_json(&format!("{base}/fleet")).await;
    let eps = status["pools"][0]["endpoints"].as_array().unwrap();
    let counts: Vec<u64> = eps
        .iter()
        .map(|e| e["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, vec![10, 20, 30], "{status}");
    assert!(eps
        .iter()
        .all(|e| e["state"] == "healthy" && e["kind"] == "vllm"));
}

#[tokio::test]
async fn least_outstanding_sends_nothing_new_to_a_busy_endpoint() {
    let ms = mocks(MockKind::Vllm, 3).await;
    let eps = ms.iter().map(|m| endpoint(m, MockKind::Vllm, 1)).collect();
    let base = lingo(fleet(vec![("p", pool(Policy::LeastOutstanding, eps))])).await;
    ms[0].state.hold_after(1);
    // Streams until one is held on the first mock (each lands there with chance >= 1/3).
    let mut held = None;
    for _ in 0..40 {
        let r = post_json(&format!("{base}/v1/chat/completions"), &chat(true)).await;
        assert_eq!(r.status(), 200);
        if ms[0].state.stats().in_flight == 1 {
            held = Some(r);
            break;
        }
        r.text().await.unwrap();
    }
    let held = held.expect("a stream landed on the held mock");
    let before = requests(&ms[0]);
    let others = requests(&ms[1]) + requests(&ms[2]);
    for _ in 0..30 {
        post_ok(&format!("{base}/v1/chat/completions"), &chat(false)).await;
    }
    assert_eq!(requests(&ms[0]), before, "the busy endpoint got a request");
    assert_eq!(requests(&ms[1]) + requests(&ms[2]), others + 30);
    ms[0].state.release();
    let body = held.text().await.unwrap();
    assert!(body.contains("[DONE]"), "{body}");
}

#[tokio::test]
async fn a_session_keeps_its_endpoint() {
    let ms = mocks(MockKind::Vllm, 3).await;
    let eps = ms.iter().map(|m| endpoint(m, MockKind::Vllm, 1)).collect();
    let base = lingo(fleet(vec![("p", pool(Policy::Session, eps))])).await;
    let mut used = std::collections::HashSet::new();
    for key in 0..8 {
        let before: Vec<u64> = ms.iter().map(requests).collect();
        for _ in 0..4 {
            let r = client()
                .post(format!("{base}/v1/chat/completions"))
                .header("x-session-id", format!("conversation-{key}"))
                .json(&chat(false))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
        let delta: Vec<u64> = ms
            .iter()
            .zip(&before)
            .map(|(m, b)| requests(m) - b)
            .collect();
        let hit: Vec<usize> = (0..3).filter(|i| delta[*i] > 0).collect();
        assert_eq!(hit.len(), 1, "key {key} moved: {delta:?}");
        assert_eq!(delta[hit[0]], 4);
        used.insert(hit[0]);
    }
    assert!(used.len() > 1, "eight keys all hashed to one endpoint");
    // Without the header, OpenAI's `user` field is the key.
    let before: Vec<u64> = ms.iter().map(requests).collect();
    let mut body = chat(false);
    body["user"] = json!("alice");
    for _ in 0..4 {
        post_ok(&format!("{base}/v1/chat/completions"), &body).await;
    }
    let delta: Vec<u64> = ms
        .iter()
        .zip(&before)
        .map(|(m, b)| requests(m) - b)
        .collect();
    assert_eq!(delta.iter().filter(|d| **d > 0).count(), 1, "{delta:?}");
}

/// Everything but ids and timestamps, for comparing answers from different endpoints.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "id" | "created" | "rid" | "e2e_latency"))
                .map(|(k, v)| (k.clone(), shape(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::String(_) => json!("s"),
        other => other.clone(),
    }
}

#[tokio::test]
async fn a_mixed_pool_answers_alike_from_every_kind() {
    let sg = mock(MockKind::Sglang).await;
    let vl = mock(MockKind::Vllm).await;
    let lc = mock(MockKind::Llamacpp).await;
    // Kinds probed per endpoint.
    let eps = [&sg, &vl, &lc]
        .iter()
        .map(|m| EndpointConfig::new(&m.url(), lingo::upstream::KindSetting::Auto))
        .collect();
    let base = lingo(fleet(vec![("mix", pool(Policy::RoundRobin, eps))])).await;
    let sglang = json!({"text": "a b c", "sampling_params": {"max_new_tokens": 8}});
    let anthropic = json!({"model": "mock-model", "max_tokens": 8,
                           "messages": [{"role": "user", "content": "hi"}]});
    for (path, body, tokens) in [
        ("/generate", &sglang, "/meta_info/completion_tokens"),
        (
            "/v1/chat/completions",
            &chat(false),
            "/usage/completion_tokens",
        ),
        ("/v1/messages", &anthropic, "/usage/output_tokens"),
    ] {
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(post_ok(&format!("{base}{path}"), body).await);
        }
        for a in &answers {
            assert_eq!(a.pointer(tokens), Some(&json!(8)), "{path}: {a}");
        }
        // Passthrough forwards a server's own extras (llama.cpp's `timings`, SGLang's
        // meta_info fields): compare the fields the client dialect defines.
        let core: &[&str] = match path {
            "/generate" => &["text", "meta_info"],
            "/v1/chat/completions" => &["choices", "model", "object", "usage"],
            // `usage` differs only by SGLang's cached-token count (checked below).
            _ => &["content", "model", "role", "stop_reason", "type"],
        };
        let pick = |v: &Value| -> Value {
            core.iter()
                .map(|k| (k.to_string(), shape(&v[*k])))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        for a in &answers {
            for k in core {
                assert!(a.get(*k).is_some(), "{path}: no {k} in {a}");
            }
        }
        if path == "/v1/messages" {
            assert_eq!(pick(&answers[0]), pick(&answers[1]), "{path}");
            assert_eq!(pick(&answers[1]), pick(&answers[2]), "{path}");
        }
    }
    // Round robin over three: one of each request per endpoint.
    for m in [&sg, &vl, &lc] {
        assert_eq!(requests(m), 3, "{}", m.url());
    }
    let status = get_json(&format!("{base}/fleet")).await;
    let kinds: Vec<&str> = status["pools"][0]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["sglang", "vllm", "llamacpp"]);
}

#[tokio::test]
async fn models_route_to_their_pools_and_unknown_ones_are_404s() {
    let a = mock_with(MockConfig {
        kind: MockKind::Vllm,
        model: "model-a".into(),
        ..MockConfig::default()
    })
    .await;
    let b = mock_with(MockConfig {
        kind: MockKind::Sglang,
        model: "model-b".into(),
        ..MockConfig::default()
    })
    .await;
    let mut pa = pool(Policy::Random, vec![endpoint(&a, MockKind::Vllm, 1)]);
    pa.models = vec!["model-a".into()];
    // Pool b's models are discovered from its endpoint.
    let pb = pool(Policy::Random, vec![endpoint(&b, MockKind::Sglang, 1)]);
    let mut cfg = fleet(vec![("a", pa), ("b", pb)]);
    cfg.default_pool = Some("b".into());
    cfg.models = [("alias-a".to_string(), "model-a".to_string())].into();
    let base = lingo(cfg).await;
    let mut body = chat(false);
    for (model, on_a, on_b) in [("model-a", 1, 0), ("model-b", 1, 1), ("alias-a", 2, 1)] {
        body["model"] = json!(model);
        let v = post_ok(&format!("{base}/v1/chat/completions"), &body).await;
        assert_eq!(v["model"], json!(model), "{v}");
        assert_eq!((requests(&a), requests(&b)), (on_a, on_b), "{model}");
    }
    // A request naming no model goes to the default pool.
    let sglang = json!({"text": "a b", "sampling_params": {"max_new_tokens": 2}});
    post_ok(&format!("{base}/generate"), &sglang).await;
    assert_eq!((requests(&a), requests(&b)), (2, 2));

    let models = get_json(&format!("{base}/v1/models")).await;
    let mut ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, vec!["alias-a", "model-a", "model-b"], "{models}");

    body["model"] = json!("nope");
    let r = post_json(&format!("{base}/v1/chat/completions"), &body).await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("nope") && msg.contains("model-a") && msg.contains("model-b"),
        "{v}"
    );
    let anthropic = json!({"model": "nope", "max_tokens": 8,
                           "messages": [{"role": "user", "content": "hi"}]});
    let r = post_json(&format!("{base}/v1/messages"), &anthropic).await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("model-b"),
        "{v}"
    );
    assert_eq!((requests(&a), requests(&b)), (2, 2));
}

async fn mock_of(kind: MockKind, model: &str) -> Mock {
    mock_with(MockConfig {
        kind,
        model: model.into(),
        ..MockConfig::default()
    })
    .await
}

/// Routes around generation that name a model go to that model's pool; the rest to the
/// default pool; `/flush_cache` reaches every SGLang endpoint of the fleet.
#[tokio::test]
async fn info_routes_follow_the_model_they_name_and_flushes_reach_every_sglang_endpoint() {
    let sg = [
        mock_of(MockKind::Sglang, "s").await,
        mock_of(MockKind::Sglang, "s").await,
    ];
    let ol = mock_of(MockKind::Ollama, "o").await;
    let lc = mock_of(MockKind::Llamacpp, "l").await;
    let sg_pool = pool(
        Policy::RoundRobin,
        sg.iter()
            .map(|m| endpoint(m, MockKind::Sglang, 1))
            .collect(),
    );
    let mut cfg = fleet(vec![
        ("sg", sg_pool),
        (
            "ol",
            pool(Policy::Random, vec![endpoint(&ol, MockKind::Ollama, 1)]),
        ),
        (
            "lc",
            pool(Policy::Random, vec![endpoint(&lc, MockKind::Llamacpp, 1)]),
        ),
    ]);
    cfg.default_pool = Some("sg".into());
    let base = lingo(cfg).await;

    // No model named: the default (SGLang) pool's own answer.
    let own = get_json(&format!("{base}/get_model_info")).await;
    assert_eq!(own["model_path"], "s", "{own}");
    // A named model: that pool's endpoint, in SGLang's shape.
    let named = get_json(&format!("{base}/get_model_info?model=o")).await;
    assert_eq!(named["model_path"], "o", "{named}");
    assert_eq!(named["is_generation"], true, "{named}");
    let r = client()
        .get(format!("{base}/get_model_info?model=nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // Ollama's /api/show is forwarded to the Ollama pool (the mock's own answer) ...
    let shown = post_ok(&format!("{base}/api/show"), &json!({"model": "o"})).await;
    assert_eq!(
        shown["model_info"]["general.architecture"], "mock",
        "{shown}"
    );
    // ... and answered by lingo, from the list, for a model served elsewhere.
    let shown = post_ok(&format!("{base}/api/show"), &json!({"model": "s"})).await;
    assert_eq!(
        shown["model_info"]["general.architecture"], "lingo",
        "{shown}"
    );
    let r = post_json(&format!("{base}/api/show"), &json!({"model": "nope"})).await;
    assert_eq!(r.status(), 404);
    // llama.cpp's /props from the llama.cpp endpoint when its model is named.
    let props = get_json(&format!("{base}/props?model=l")).await;
    let build = props["build_info"].as_str().unwrap_or_default().to_string();
    assert!(!build.starts_with("lingo-"), "{props}");
    let props = get_json(&format!("{base}/props")).await;
    assert_eq!(props["model_path"], "s", "{props}");

    let r = client()
        .post(format!("{base}/flush_cache"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let flushes: Vec<u64> = sg.iter().map(|m| m.state.stats().cache_flushes).collect();
    assert_eq!(flushes, vec![1, 1]);
    assert_eq!(ol.state.stats().requests + lc.state.stats().requests, 0);
}
