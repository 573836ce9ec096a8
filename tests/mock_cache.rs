//! The mock as something to route to, over real sockets: its prefix cache (exact counters,
//! shared prefixes, LRU eviction, the prefill it saves), its running cap and queue, its
//! `/metrics` and load routes under each server's names, the `/mock/load` controls, and
//! `lingo mock --replicas`.

#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::{mock_with, sum, Mock};
use lingo::mock::{MockConfig, MockKind, MockStats};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

const MODEL: &[(&str, &str)] = &[("model_name", "mock-model")];

/// Every test runs under this bound, so a hung request fails instead of stalling the suite.
async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(Duration::from_secs(30), test)
        .await
        .expect("test timed out");
}

async fn cached(cache_tokens: u64) -> Mock {
    mock_with(MockConfig {
        cache_tokens,
        ..MockConfig::default()
    })
    .await
}

/// A prompt of `n` words, all starting with `tag` so prompts with different tags share nothing.
fn words(tag: &str, n: usize) -> String {
    (0..n).map(|i| format!("{tag}{i} ")).collect()
}

/// A whole one-token completion of `prompt`; panics unless 200.
async fn complete(mock: &Mock, prompt: &str) {
    let body = json!({"model": "mock-model", "prompt": prompt, "max_tokens": 1});
    let resp = common::post_json(&format!("{}/v1/completions", mock.url()), &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

async fn chat(mock: &Mock, messages: Value) {
    let body = json!({"model": "mock-model", "messages": messages, "max_tokens": 1});
    let resp = common::post_json(&format!("{}/v1/chat/completions", mock.url()), &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

/// Hit tokens of the next completion of `prompt`.
async fn hit_of(mock: &Mock, prompt: &str) -> u64 {
    let before = mock.state.stats().prefix_cache_hits;
    complete(mock, prompt).await;
    mock.state.stats().prefix_cache_hits - before
}

async fn metrics(base: &str) -> (u16, String) {
    let resp = common::client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

async fn stats_json(mock: &Mock) -> MockStats {
    serde_json::from_value(common::get_json(&format!("{}/mock/stats", mock.url())).await).unwrap()
}

async fn control(mock: &Mock, body: Value) -> u16 {
    let url = format!("{}/mock/load", mock.url());
    common::post_json(&url, &body).await.status().as_u16()
}

#[tokio::test]
async fn a_repeated_prompt_hits_its_full_blocks_and_counts_exactly() {
    bounded(async {
        let mock = cached(4096).await;
        let prompt = words("r", 100);
        complete(&mock, &prompt).await;
        complete(&mock, &prompt).await;
        let s = stats_json(&mock).await;
        // 100 tokens queried twice; the second finds 6 full blocks of 16.
        assert_eq!((s.prefix_cache_queries, s.prefix_cache_hits), (200, 96));
        let (status, text) = metrics(&mock.url()).await;
        assert_eq!(status, 200);
        assert_eq!(sum(&text, "vllm:prefix_cache_queries_total", MODEL), 200.0);
        assert_eq!(sum(&text, "vllm:prefix_cache_hits_total", MODEL), 96.0);
        assert_eq!(sum(&text, "vllm:prompt_tokens_total", MODEL), 200.0);
        assert_eq!(sum(&text, "vllm:generation_tokens_total", MODEL), 2.0);
        assert_eq!(
            sum(&text, "vllm:time_to_first_token_seconds_count", MODEL),
            2.0
        );
        assert_eq!(
            sum(&text, "vllm:request_queue_time_seconds_count", MODEL),
            2.0
        );
        assert_eq!(
            sum(&text, "vllm:request_prefill_time_seconds_count", MODEL),
            2.0
        );
        // A prompt of exactly 6 blocks keeps its last block to compute: 5 blocks hit.
        let exact = words("e", 96);
        assert_eq!(hit_of(&mock, &exact).await, 0);
        assert_eq!(hit_of(&mock, &exact).await, 80);
    })
    .await;
}

#[tokio::test]
async fn a_shared_prefix_hits_its_full_blocks_only() {
    bounded(async {
        let mock = cached(4096).await;
        let shared = words("s", 40);
        assert_eq!(
            hit_of(&mock, &format!("{shared}{}", words("a", 30))).await,
            0
        );
        // 40 shared tokens: blocks 0 and 1 are whole in both, block 2 differs.
        assert_eq!(
            hit_of(&mock, &format!("{shared}{}", words("b", 30))).await,
            32
        );
        assert_eq!(mock.state.stats().prefix_cache_queries, 140);

        // Chats as rendered, roles included: a 30-word system turn is 33 template tokens,
        // then the user turn opens with 2 more: 35 shared, 2 whole blocks.
        let system = words("sys", 30);
        let turn = |user: &str| {
            json!([{"role": "system", "content": system},
                                       {"role": "user", "content": user}])
        };
        let before = mock.state.stats().prefix_cache_hits;
        chat(&mock, turn(&words("u", 20))).await;
        chat(&mock, turn(&words("v", 20))).await;
        assert_eq!(mock.state.stats().prefix_cache_hits - before, 32);
        // The same text under another role is another prompt.
        let before = mock.state.stats().prefix_cache_hits;
        chat(
            &mock,
            json!([{"role": "user", "content": system},
                            {"role": "user", "content": words("u", 20)}]),
        )
        .await;
        assert_eq!(mock.state.stats().prefix_cache_hits - before, 0);
    })
    .await;
}

#[tokio::test]
async fn the_cache_evicts_the_least_recently_used_prompt_at_capacity() {
    bounded(async {
        // 8 blocks: room for two 65-token prompts (4 full blocks each).
        let mock = cached(128).await;
        let (a, b, c) = (words("a", 65), words("b", 65), words("c", 65));
        assert_eq!(hit_of(&mock, &a).await, 0);
        assert_eq!(hit_of(&mock, &b).await, 0);
        assert_eq!(
            hit_of(&mock, &a).await,
            64,
            "a refreshed, b now least recent"
        );
        assert_eq!(hit_of(&mock, &c).await, 0);
        // c took b's blocks, not a's (FIFO would have dropped a, inserted first).
        assert_eq!(hit_of(&mock, &a).await, 64);
        assert_eq!(hit_of(&mock, &b).await, 0);
    })
    .await;
}

#[tokio::test]
async fn a_hit_cuts_the_simulated_prefill() {
    bounded(async {
        let mock = mock_with(MockConfig {
            cache_tokens: 4096,
            prefill_per_token: Duration::from_millis(2),
            ..MockConfig::default()
        })
        .await;
        let prompt = words("p", 200);
        let t = Instant::now();
        complete(&mock, &prompt).await;
        let cold = t.elapsed();
        let t = Instant::now();
        complete(&mock, &prompt).await;
        let warm = t.elapsed();
        // Cold: 200 uncached tokens, at least 400 ms of sleep. Warm: 192 hit, 8 uncached
        // (16 ms); half the cold time leaves a wide margin for a loaded machine.
        assert!(cold >= Duration::from_millis(400), "cold {cold:?}");
        assert!(warm < cold / 2, "warm {warm:?} vs cold {cold:?}");
        let (_, text) = metrics(&mock.url()).await;
        let prefill = sum(&text, "vllm:request_prefill_time_seconds_sum", MODEL);
        assert!(prefill >= 0.4, "prefill seconds {prefill}");
    })
    .await;
}

/// A streamed completion read to its end: status and body.
async fn stream_to_end(base: String, prompt: String) -> (u16, String) {
    let body = json!({"model": "mock-model", "prompt": prompt, "max_tokens": 5,
                      "ignore_eos": true, "stream": true});
    let resp = common::post_json(&format!("{base}/v1/completions"), &body).await;
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

#[tokio::test]
async fn max_running_queues_the_rest_and_all_complete() {
    bounded(async {
        let mock = mock_with(MockConfig {
            max_running: Some(1),
            max_waiting: 2,
            cache_tokens: 1000,
            ..MockConfig::default()
        })
        .await;
        // The running request pauses after its first token, so the other two must queue.
        mock.state.hold_after(1);
        let tasks: Vec<_> = (0..3)
            .map(|i| tokio::spawn(stream_to_end(mock.url(), words(&format!("q{i}"), 10))))
            .collect();
        mock.state
            .wait_for(|s| s.running == 1 && s.waiting == 2)
            .await;
        let (_, text) = metrics(&mock.url()).await;
        assert_eq!(sum(&text, "vllm:num_requests_running", MODEL), 1.0);
        assert_eq!(sum(&text, "vllm:num_requests_waiting", MODEL), 2.0);
        // The running request holds its 10 prompt tokens and 1 generated of 1000.
        let usage = sum(&text, "vllm:kv_cache_usage_perc", MODEL);
        assert!((usage - 0.011).abs() < 1e-9, "kv usage {usage}");
        let s = stats_json(&mock).await;
        assert_eq!((s.running, s.waiting), (1, 2));

        // The queue is full: a fourth request is refused in vLLM's error shape.
        let body = json!({"model": "mock-model", "prompt": "one more", "max_tokens": 1});
        let resp = common::post_json(&format!("{}/v1/completions", mock.url()), &body).await;
        assert_eq!(resp.status(), 503);
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["error"]["code"], 503, "{err}");

        mock.state.release();
        for task in tasks {
            let (status, body) = task.await.unwrap();
            assert_eq!(status, 200);
            assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
        }
        let s = mock.state.stats();
        assert_eq!((s.running, s.waiting, s.completed, s.failed), (0, 0, 3, 1));
        let (_, text) = metrics(&mock.url()).await;
        assert_eq!(sum(&text, "vllm:num_requests_running", MODEL), 0.0);
        assert_eq!(sum(&text, "vllm:kv_cache_usage_perc", MODEL), 0.0);
        // Three streams of 5 tokens; the refused fourth generated none.
        assert_eq!(sum(&text, "vllm:generation_tokens_total", MODEL), 15.0);
    })
    .await;
}

#[tokio::test]
async fn a_client_gone_while_queued_leaves_the_queue() {
    bounded(async {
        let mock = mock_with(MockConfig {
            max_running: Some(1),
            ..MockConfig::default()
        })
        .await;
        mock.state.hold_after(1);
        let first = tokio::spawn(stream_to_end(mock.url(), words("a", 5)));
        mock.state.wait_for(|s| s.running == 1).await;
        let queued = tokio::spawn(stream_to_end(mock.url(), words("b", 5)));
        mock.state.wait_for(|s| s.waiting == 1).await;
        queued.abort();
        mock.state
            .wait_for(|s| s.waiting == 0 && s.aborted == 1)
            .await;
        mock.state.release();
        assert_eq!(first.await.unwrap().0, 200);
        let s = mock.state.stats();
        assert_eq!((s.running, s.waiting, s.completed), (0, 0, 1));
    })
    .await;
}

/// Each kind's own waiting figures in `/metrics` (besides vLLM's).
fn own_waiting(kind: MockKind, text: &str) -> Vec<f64> {
    match kind {
        MockKind::Sglang => vec![sum(text, "sglang:num_queue_reqs", MODEL)],
        MockKind::Tgi => vec![sum(text, "tgi_queue_size", &[])],
        MockKind::Llamacpp => vec![sum(text, "llamacpp:requests_deferred", &[])],
        MockKind::Vllm | MockKind::Ollama | MockKind::Openai => vec![],
    }
}

/// SGLang's load routes' waiting figures.
async fn sglang_waiting(mock: &Mock) -> Vec<f64> {
    let get_load = common::get_json(&format!("{}/get_load", mock.url())).await;
    let loads = common::get_json(&format!("{}/v1/loads", mock.url())).await;
    vec![
        get_load[0]["num_waiting_reqs"].as_f64().unwrap(),
        loads["loads"][0]["num_waiting_reqs"].as_f64().unwrap(),
        loads["aggregate"]["total_waiting_reqs"].as_f64().unwrap(),
    ]
}

#[tokio::test]
async fn mock_load_waiting_shows_under_every_kinds_names() {
    bounded(async {
        for kind in MockKind::ALL {
            let mock = common::mock(kind).await;
            let (status, text) = metrics(&mock.url()).await;
            assert_eq!(status, 200, "{kind:?}");
            // The model's series exist before any request.
            assert!(
                text.contains(
                    "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"mock-model\"} 0"
                ),
                "{kind:?}:\n{text}"
            );
            assert_eq!(control(&mock, json!({"waiting": 7})).await, 200);
            let (_, text) = metrics(&mock.url()).await;
            assert_eq!(
                sum(&text, "vllm:num_requests_waiting", MODEL),
                7.0,
                "{kind:?}"
            );
            let mut want = own_waiting(kind, &text);
            if kind == MockKind::Sglang {
                want.extend(sglang_waiting(&mock).await);
                assert_eq!(want.len(), 4);
            }
            assert!(want.iter().all(|w| *w == 7.0), "{kind:?}: {want:?}");
            // The real queue is still empty.
            assert_eq!(stats_json(&mock).await.waiting, 0);

            assert_eq!(control(&mock, json!({"waiting": 0})).await, 200);
            let (_, text) = metrics(&mock.url()).await;
            assert_eq!(
                sum(&text, "vllm:num_requests_waiting", MODEL),
                0.0,
                "{kind:?}"
            );
            assert!(
                own_waiting(kind, &text).iter().all(|w| *w == 0.0),
                "{kind:?}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn metrics_status_fails_metrics_and_load_routes_until_restored() {
    bounded(async {
        let mock = common::mock(MockKind::Sglang).await;
        assert_eq!(control(&mock, json!({"metrics_status": 500})).await, 200);
        assert_eq!(metrics(&mock.url()).await.0, 500);
        for path in ["/get_load", "/v1/loads"] {
            let resp = common::client()
                .get(format!("{}{path}", mock.url()))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 500, "{path}");
        }
        // Generation is unaffected.
        complete(&mock, "still serving").await;
        assert_eq!(control(&mock, json!({"metrics_status": 200})).await, 200);
        assert_eq!(metrics(&mock.url()).await.0, 200);
        assert_eq!(control(&mock, json!({"metrics_status": 7})).await, 400);
        assert_eq!(control(&mock, json!({"queue": 1})).await, 400);
    })
    .await;
}

#[tokio::test]
async fn flush_cache_empties_the_prefix_cache() {
    bounded(async {
        let mock = mock_with(MockConfig {
            kind: MockKind::Sglang,
            cache_tokens: 4096,
            ..MockConfig::default()
        })
        .await;
        let prompt = words("f", 50);
        assert_eq!(hit_of(&mock, &prompt).await, 0);
        assert_eq!(hit_of(&mock, &prompt).await, 48);
        let resp = common::post_json(&format!("{}/flush_cache", mock.url()), &json!({})).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(hit_of(&mock, &prompt).await, 0);
    })
    .await;
}

#[tokio::test]
async fn replicas_answer_on_their_own_ports_with_their_own_state() {
    bounded(async {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_lingo"))
            .args(["mock", "--listen", "127.0.0.1:0", "--replicas", "3"])
            .env_remove("LINGO_MOCK_LISTEN")
            .env_remove("LINGO_MOCK_REPLICAS")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut urls = Vec::new();
        while urls.len() < 3 {
            let line = lines.next_line().await.unwrap().expect("three URLs");
            urls.push(line);
        }
        let mut ports: Vec<&str> = urls.iter().map(|u| u.rsplit(':').next().unwrap()).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 3, "{urls:?}");
        let body = json!({"model": "mock-model", "prompt": "same for all", "max_tokens": 8});
        let mut answers = Vec::new();
        for url in &urls {
            let resp = common::post_json(&format!("{url}/v1/completions"), &body).await;
            assert_eq!(resp.status(), 200, "{url}");
            let v: Value = resp.json().await.unwrap();
            answers.push(v["choices"][0]["text"].clone());
        }
        assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
        // Each replica counted its own request only.
        for url in &urls {
            let s = common::get_json(&format!("{url}/mock/stats")).await;
            assert_eq!(s["requests"], 1, "{url}");
        }
        child.kill().await.unwrap();
    })
    .await;
}
