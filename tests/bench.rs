//! `lingo bench` over real sockets: a tiny scripted completions server written here (for exact
//! control of counts, failures and broken streams), and lingo's mock for every dialect.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use http::StatusCode;
use lingo::bench::{render_table, run, BenchConfig, LevelReport};
use lingo::dialect::Dialect;
use lingo::mock::{MockConfig, MockKind, MockState};
use serde_json::{json, Value};

// ---- the scripted server ---------------------------------------------------------------

/// How the scripted server answers `/v1/completions`.
#[derive(Clone, Copy)]
struct Script {
    /// Tokens generated per request, whatever `max_tokens` says.
    tokens: u32,
    per_chunk: u32,
    /// Send `token_ids` in each chunk.
    ids: bool,
    /// Send a final usage chunk.
    usage: bool,
    /// Every k-th request (counting from 1) answers HTTP 500.
    fail_every: Option<u64>,
    broken: Broken,
}

#[derive(Clone, Copy, PartialEq)]
enum Broken {
    No,
    /// An in-band error event after the first chunk.
    ErrorEvent,
    /// The body ends after the first chunk, without a finish reason.
    Truncated,
    /// Headers, then nothing.
    Hang,
}

impl Default for Script {
    fn default() -> Script {
        Script {
            tokens: 10,
            per_chunk: 3,
            ids: true,
            usage: true,
            fail_every: None,
            broken: Broken::No,
        }
    }
}

struct Scripted {
    script: Script,
    requests: AtomicU64,
    /// Every request body received.
    bodies: Mutex<Vec<Value>>,
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn scripted(script: Script) -> (String, Arc<Scripted>) {
    let state = Arc::new(Scripted {
        script,
        requests: AtomicU64::new(0),
        bodies: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/completions", post(completions))
        .with_state(state.clone());
    (format!("http://{}", serve(app).await), state)
}

async fn completions(State(st): State<Arc<Scripted>>, Json(body): Json<Value>) -> Response {
    let n = st.requests.fetch_add(1, Ordering::SeqCst) + 1;
    st.bodies.lock().expect("not poisoned").push(body.clone());
    let s = st.script;
    if s.fail_every.is_some_and(|k| n % k == 0) {
        let err = json!({"error": {"message": "boom", "type": "InternalServerError"}});
        return (StatusCode::INTERNAL_SERVER_ERROR, Json(err)).into_response();
    }
    let prompt_tokens = body["prompt"].as_array().map_or(0, Vec::len) as u64;
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": s.tokens,
                       "total_tokens": prompt_tokens + u64::from(s.tokens)});
    if body["stream"] != json!(true) {
        let choice = json!({"index": 0, "text": " w".repeat(s.tokens as usize),
                            "finish_reason": "length"});
        return Json(json!({"id": "c", "object": "text_completion", "model": "m",
                           "choices": [choice], "usage": usage}))
        .into_response();
    }
    let mut events: Vec<String> = Vec::new();
    let mut sent = 0;
    while sent < s.tokens {
        let k = s.per_chunk.min(s.tokens - sent);
        sent += k;
        let last = sent == s.tokens;
        let mut choice = json!({"index": 0, "text": " w".repeat(k as usize),
                                "finish_reason": if last { json!("length") } else { Value::Null }});
        if s.ids {
            choice["token_ids"] = json!(vec![1234; k as usize]);
        }
        events.push(
            json!({"id": "c", "object": "text_completion", "model": "m",
                           "choices": [choice]})
            .to_string(),
        );
    }
    match s.broken {
        Broken::No => {}
        Broken::ErrorEvent => {
            events.truncate(1);
            events.push(json!({"error": {"message": "engine died", "code": 500}}).to_string());
        }
        Broken::Truncated => events.truncate(1),
        Broken::Hang => events.clear(),
    }
    if s.broken == Broken::No {
        if s.usage {
            events.push(json!({"id": "c", "choices": [], "usage": usage}).to_string());
        }
        events.push("[DONE]".into());
    }
    let hang = s.broken == Broken::Hang;
    // A short pause before each event, so that chunks arrive apart as a server's would.
    let stream = futures_util::stream::unfold(events.into_iter(), move |mut it| async move {
        if hang {
            std::future::pending::<()>().await;
        }
        let ev = it.next()?;
        tokio::time::sleep(Duration::from_millis(2)).await;
        Some((
            Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {ev}\n\n"))),
            it,
        ))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .expect("a valid response")
}

fn config(url: &str, dialect: Dialect) -> BenchConfig {
    BenchConfig {
        url: url.to_string(),
        dialect,
        concurrency: vec![1, 3],
        input_len: 24,
        output_len: 16,
        requests_per_level: 7,
        warmup: 1,
        seed: 7,
        timeout: Duration::from_secs(30),
        ..BenchConfig::default()
    }
}

fn all_results(levels: &[LevelReport]) -> impl Iterator<Item = &lingo::bench::RequestResult> {
    levels.iter().flat_map(|l| l.results.iter())
}

/// The table's data rows, split into trimmed cells.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip(2)
        .take_while(|l| l.contains('|'))
        .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

// ---- scripted-server tests -------------------------------------------------------------

#[tokio::test]
async fn tokens_come_from_usage_and_counts_per_level_are_exact() {
    let (url, server) = scripted(Script::default()).await;
    let cfg = config(&url, Dialect::OpenaiCompletions);
    let levels = run(&cfg).await.unwrap();

    assert_eq!(levels.len(), 2);
    assert_eq!(server.requests.load(Ordering::SeqCst), 1 + 7 + 7);
    for (l, c) in levels.iter().zip(["c=1", "c=3"]) {
        assert_eq!(l.label(), c);
        assert_eq!(l.results.len(), 7);
        assert_eq!((l.ok(), l.fail()), (7, 0));
        // The server generated 10 tokens; 16 were asked for.
        assert_eq!(l.total_tokens(), 70);
        assert!(l.agg_tok_s() > 0.0 && l.per_req_tok_s() > 0.0);
    }
    for r in all_results(&levels) {
        assert!(r.ok, "{:?}", r.error);
        assert_eq!(
            (r.output_tokens, r.prompt_tokens, r.estimated),
            (10, 24, false)
        );
        let ttft = r.ttft.unwrap();
        // Not strictly less: chunks that reached the socket together (this server writes its
        // whole stream at once) carry the same kernel arrival stamp.
        assert!(ttft <= r.e2e, "ttft {ttft:?} e2e {:?}", r.e2e);
        // Chunks of 3, 3, 3, 1: the first chunk's tokens are TTFT, the other 7 are gaps.
        assert_eq!(r.itl.len(), 7);
        let itl: f64 = r.itl.iter().sum();
        assert!(itl <= (r.e2e - ttft).as_secs_f64() + 1e-9);
    }

    // What was sent: the dialect encoder's body, exact input length, greedy, ignore_eos.
    let bodies = server.bodies.lock().unwrap();
    for b in bodies.iter() {
        assert_eq!(b["prompt"].as_array().unwrap().len(), 24, "{b}");
        assert_eq!(b["max_tokens"], 16);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["temperature"], 0.0);
        assert_eq!(b["stream"], true);
    }
    let prompts: std::collections::HashSet<String> =
        bodies.iter().map(|b| b["prompt"].to_string()).collect();
    assert_eq!(
        prompts.len(),
        bodies.len(),
        "every request has its own prompt"
    );
}

#[tokio::test]
async fn usage_wins_over_counting_chunks() {
    // No token ids: chunk counting would say 4 (one per chunk); the usage says 10.
    let (url, _) = scripted(Script {
        ids: false,
        ..Script::default()
    })
    .await;
    let levels = run(&config(&url, Dialect::OpenaiCompletions))
        .await
        .unwrap();
    for r in all_results(&levels) {
        assert_eq!((r.output_tokens, r.estimated), (10, false));
    }
    assert!(!render_table(&levels).contains("estimated"));
}

#[tokio::test]
async fn without_server_counts_tokens_are_a_marked_estimate() {
    let script = Script {
        ids: false,
        usage: false,
        ..Script::default()
    };
    let (url, _) = scripted(script).await;
    let levels = run(&config(&url, Dialect::OpenaiCompletions))
        .await
        .unwrap();
    for r in all_results(&levels) {
        assert!(r.ok);
        assert_eq!((r.output_tokens, r.estimated), (4, true));
    }
    let table = render_table(&levels);
    assert!(
        table.contains("reported no token counts for 14 request(s)"),
        "{table}"
    );
}

#[tokio::test]
async fn failures_are_counted_exactly() {
    let (url, _) = scripted(Script {
        fail_every: Some(3),
        ..Script::default()
    })
    .await;
    let mut cfg = config(&url, Dialect::OpenaiCompletions);
    cfg.concurrency = vec![2, 4];
    cfg.requests_per_level = 9;
    let levels = run(&cfg).await.unwrap();
    // Request 1 is the warmup; of 2..=10 and 11..=19, three each are multiples of 3.
    for l in &levels {
        assert_eq!(l.results.len(), 9);
        assert_eq!((l.ok(), l.fail()), (6, 3));
        assert_eq!(l.total_tokens(), 60);
        assert_eq!(l.errors(), vec![("HTTP 500: boom".to_string(), 3)]);
    }
    let table = render_table(&levels);
    let rows = rows(&table);
    assert_eq!(rows[0][6..], ["6", "3"]);
    assert!(table.contains("c=4: 3 x HTTP 500: boom"), "{table}");
    assert!(table.contains("Failures c=4: http_500 3"), "{table}");
}

#[tokio::test]
async fn table_shows_the_measured_numbers() {
    let (url, _) = scripted(Script::default()).await;
    let levels = run(&config(&url, Dialect::OpenaiCompletions))
        .await
        .unwrap();
    let table = render_table(&levels);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "     Level |  Agg tok/s |  Per-req tok/s |  TTFT(s) |   Tokens |  Wall(s) |   Ok | Fail"
    );
    let rows = rows(&table);
    assert_eq!(rows.len(), 2, "{table}");
    for (row, l) in rows.iter().zip(&levels) {
        assert_eq!(row.len(), 8);
        assert_eq!(row[0], l.label());
        assert_eq!(row[1], format!("{:.1}", l.agg_tok_s()));
        assert_eq!(row[2], format!("{:.1}", l.per_req_tok_s()));
        assert_eq!(row[3], format!("{:.3}", l.mean_ttft()));
        assert_eq!(row[4], "70");
        assert_eq!(row[5], format!("{:.2}", l.wall.as_secs_f64()));
        assert_eq!(row[6..], ["7", "0"]);
        // Agg tok/s is tokens over wall time.
        let agg: f64 = row[1].parse().unwrap();
        assert!((agg - 70.0 / l.wall.as_secs_f64()).abs() < 0.05 + 1e-9);
    }
}

#[tokio::test]
async fn non_streaming_ttft_is_e2e() {
    let (url, server) = scripted(Script::default()).await;
    let mut cfg = config(&url, Dialect::OpenaiCompletions);
    cfg.stream = false;
    let levels = run(&cfg).await.unwrap();
    for r in all_results(&levels) {
        assert!(r.ok, "{:?}", r.error);
        assert_eq!(r.ttft, Some(r.e2e));
        assert_eq!((r.output_tokens, r.estimated), (10, false));
    }
    assert!(server
        .bodies
        .lock()
        .unwrap()
        .iter()
        .all(|b| b.get("stream").is_none()));
    assert!(render_table(&levels).contains("TTFT equals end-to-end"));
}

#[tokio::test]
async fn broken_streams_fail_and_are_counted() {
    for (broken, needle) in [
        (Broken::ErrorEvent, "engine died"),
        (Broken::Truncated, "without a finish reason"),
        (Broken::Hang, "timed out"),
    ] {
        let (url, _) = scripted(Script {
            broken,
            ..Script::default()
        })
        .await;
        let mut cfg = config(&url, Dialect::OpenaiCompletions);
        cfg.warmup = 0;
        cfg.concurrency = vec![2];
        cfg.requests_per_level = 4;
        cfg.timeout = Duration::from_millis(300);
        let levels = run(&cfg).await.unwrap();
        let l = &levels[0];
        assert_eq!((l.ok(), l.fail()), (0, 4), "{needle}");
        for r in &l.results {
            assert!(
                r.error.as_deref().unwrap().contains(needle),
                "{:?}",
                r.error
            );
        }
        assert_eq!(l.total_tokens(), 0);
    }
}

#[tokio::test]
async fn a_failing_warmup_stops_the_run() {
    let (url, _) = scripted(Script {
        fail_every: Some(1),
        ..Script::default()
    })
    .await;
    let err = run(&config(&url, Dialect::OpenaiCompletions))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("boom"), "{err}");

    let mut bad = config(&url, Dialect::OpenaiCompletions);
    bad.concurrency = vec![0];
    assert!(run(&bad)
        .await
        .unwrap_err()
        .to_string()
        .contains("concurrency"));
}

// ---- against lingo's mock --------------------------------------------------------------

async fn mock(config: MockConfig) -> (String, Arc<MockState>) {
    let state = MockState::new(config);
    let addr = serve(lingo::mock::router(state.clone())).await;
    (format!("http://{addr}"), state)
}

#[tokio::test]
async fn sglang_generate_against_the_mock() {
    let (url, state) = mock(MockConfig {
        kind: MockKind::Sglang,
        tokens_per_chunk: 3,
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&url, Dialect::Sglang);
    cfg.output_len = 20;
    let levels = run(&cfg).await.unwrap();
    for l in &levels {
        assert_eq!((l.ok(), l.fail()), (7, 0));
        assert_eq!(l.total_tokens(), 7 * 20);
    }
    for r in all_results(&levels) {
        assert_eq!(
            (r.output_tokens, r.prompt_tokens, r.estimated),
            (20, 24, false)
        );
        assert!(r.ttft.unwrap() <= r.e2e);
        assert_eq!(r.itl.len(), 20 - 3);
    }
    let stats = state.stats();
    assert_eq!(stats.completed, 15);
    assert_eq!(stats.completion_tokens, 15 * 20);
}

#[tokio::test]
async fn openai_chat_against_the_mock_discovers_the_model() {
    let (url, state) = mock(MockConfig {
        tokens_per_chunk: 2,
        itl: Duration::from_millis(1),
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&url, Dialect::OpenaiChat);
    cfg.output_len = 12;
    let levels = run(&cfg).await.unwrap();
    for l in &levels {
        assert_eq!((l.ok(), l.fail()), (7, 0), "{:?}", l.errors());
        assert_eq!(l.total_tokens(), 7 * 12);
    }
    for r in all_results(&levels) {
        // The mock's chat template adds 3 tokens to the 24 words.
        assert_eq!(
            (r.output_tokens, r.prompt_tokens, r.estimated),
            (12, 27, false)
        );
        let ttft = r.ttft.unwrap();
        assert!(ttft < r.e2e);
        assert_eq!(r.itl.len(), 12 - 2);
        // The mock paces chunks of 2 tokens 2 ms apart by deadline (a late chunk is followed
        // by prompt ones), so only the last token's arrival has a firm bound: 10 gaps of 1 ms.
        let last_token = ttft.as_secs_f64() + r.itl.iter().sum::<f64>();
        assert!(last_token >= 0.010 - 1e-6, "{ttft:?} {:?}", r.itl);
        assert!(last_token <= r.e2e.as_secs_f64() + 1e-6);
    }
    assert_eq!(state.stats().completed, 15);
    // The mock serves /tokenize, so the chat prompt's text was sized by it.
    assert!(render_table(&levels).contains("exact by the server's own /tokenize"));
}

#[tokio::test]
async fn openai_completions_against_the_mock_with_failures_and_without_streaming() {
    let (url, state) = mock(MockConfig {
        fail_every: Some(4),
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&url, Dialect::OpenaiCompletions);
    cfg.concurrency = vec![4];
    cfg.requests_per_level = 12;
    let levels = run(&cfg).await.unwrap();
    // Requests 2..=13 after the warmup: 4, 8 and 12 fail.
    assert_eq!((levels[0].ok(), levels[0].fail()), (9, 3));
    assert_eq!(levels[0].total_tokens(), 9 * 16);
    assert!(levels[0].errors()[0].0.starts_with("HTTP 500"));

    cfg.stream = false;
    let levels = run(&cfg).await.unwrap();
    // Request 14 is the warmup; of 15..=26, 16, 20 and 24 fail.
    assert_eq!((levels[0].ok(), levels[0].fail()), (9, 3));
    for r in levels[0].results.iter().filter(|r| r.ok) {
        assert_eq!(
            (r.output_tokens, r.prompt_tokens, r.estimated),
            (16, 24, false)
        );
        assert_eq!(r.ttft, Some(r.e2e));
    }
    assert_eq!(state.stats().requests, 26);
}

// ---- through lingo ---------------------------------------------------------------------

/// A mock vLLM behind lingo; returns lingo's URL and the mock's state.
async fn lingo_over_vllm() -> (String, Arc<MockState>) {
    let (upstream, state) = mock(MockConfig::default()).await;
    let mut config = lingo::config::Config::default();
    config.upstream.url = upstream;
    config.upstream.kind = lingo::upstream::KindSetting::Vllm;
    let addr = serve(lingo::proxy::app(config)).await;
    (format!("http://{addr}"), state)
}

#[tokio::test]
async fn anthropic_messages_through_lingo() {
    let (url, state) = lingo_over_vllm().await;
    for stream in [true, false] {
        let mut cfg = config(&url, Dialect::Anthropic);
        cfg.stream = stream;
        let levels = run(&cfg).await.unwrap();
        for l in &levels {
            assert_eq!(
                (l.ok(), l.fail()),
                (7, 0),
                "stream={stream}: {:?}",
                l.errors()
            );
        }
        for r in all_results(&levels) {
            // Exact output length (lingo's `ignore_eos` extension), the totals from
            // `message_delta` (or the whole message's usage), the mock's chat template.
            assert_eq!(
                (r.output_tokens, r.prompt_tokens, r.estimated),
                (16, 27, false),
                "stream={stream}"
            );
        }
    }
    assert_eq!(state.stats().completion_tokens, 2 * 15 * 16);
}

#[tokio::test]
async fn vllm_legacy_generate_through_lingo() {
    let (url, state) = lingo_over_vllm().await;
    let levels = run(&config(&url, Dialect::VllmLegacy)).await.unwrap();
    for l in &levels {
        assert_eq!((l.ok(), l.fail()), (7, 0), "{:?}", l.errors());
        assert_eq!(l.total_tokens(), 7 * 16);
    }
    for r in all_results(&levels) {
        // The dialect reports no counts: one token per cumulative line, marked estimated.
        assert_eq!((r.output_tokens, r.estimated), (16, true));
        assert_eq!(r.itl.len(), 15);
    }
    assert_eq!(state.stats().completion_tokens, 15 * 16);
}

/// Every client dialect drives load: through lingo in front of vLLM (translated or passed
/// through), and, for the native dialects, straight at their own server's mock. The counts
/// the driver reports are the upstream's, request for request.
#[tokio::test]
async fn every_dialect_drives_load() {
    let (via_lingo, lingo_state) = lingo_over_vllm().await;
    let mut targets: Vec<(Dialect, String, Arc<MockState>)> = Dialect::ALL
        .into_iter()
        .map(|d| (d, via_lingo.clone(), lingo_state.clone()))
        .collect();
    for (dialect, kind) in [
        (Dialect::Tgi, MockKind::Tgi),
        (Dialect::Llamacpp, MockKind::Llamacpp),
        (Dialect::OllamaGenerate, MockKind::Ollama),
        (Dialect::OllamaChat, MockKind::Ollama),
    ] {
        let (url, state) = mock(MockConfig {
            kind,
            ..MockConfig::default()
        })
        .await;
        targets.push((dialect, url, state));
    }
    for (dialect, url, state) in targets {
        for stream in [true, false] {
            let mut cfg = config(&url, dialect);
            cfg.stream = stream;
            let before = state.stats().completion_tokens;
            let levels = run(&cfg).await.unwrap();
            let what = format!("{} at {url}, stream={stream}", dialect.label());
            for l in &levels {
                assert_eq!((l.ok(), l.fail()), (7, 0), "{what}: {:?}", l.errors());
            }
            let counted: u64 = all_results(&levels).map(|r| r.output_tokens).sum();
            let warmup = state.stats().completion_tokens - before - counted;
            assert!(
                all_results(&levels).all(|r| r.output_tokens >= 1 && r.output_tokens <= 16),
                "{what}: {:?}",
                all_results(&levels)
                    .map(|r| (r.output_tokens, r.estimated))
                    .collect::<Vec<_>>()
            );
            assert!(
                warmup <= 16,
                "{what}: the driver counts what the upstream generated"
            );
        }
    }
}

/// A server that needs a key (OpenAI's, vLLM's `--api-key`) gets it as a bearer token.
#[tokio::test]
async fn the_api_key_reaches_the_server() {
    let (url, state) = mock(MockConfig {
        kind: MockKind::Openai,
        api_key: Some("sk-bench".into()),
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&url, Dialect::OpenaiChat);
    cfg.model = Some("mock-model".into());
    // OpenAI's API has no ignore_eos (or any vLLM extension): only documented fields go.
    cfg.standard_api = true;
    let err = run(&cfg).await.unwrap_err().to_string();
    assert!(err.contains("401"), "{err}");
    cfg.api_key = Some("sk-bench".into());
    let levels = run(&cfg).await.unwrap();
    for l in &levels {
        assert_eq!((l.ok(), l.fail()), (7, 0), "{:?}", l.errors());
    }
    assert!(state.stats().completion_tokens > 0);
}
