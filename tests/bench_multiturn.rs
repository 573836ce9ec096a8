//! `lingo bench --workload multiturn` against lingo's mock, through a small capture server in
//! front of each mock that records every request body and the answer the mock gave, so the
//! tests check what arrived, in which order, at which server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use axum::Router;
use lingo::bench::{run, BenchConfig, LevelReport, Split, Summary, WorkloadKind};
use lingo::dialect::Dialect;
use lingo::mock::{MockConfig, MockState};
use serde_json::Value;

/// One generation request as the capture server saw it.
#[derive(Debug, Clone)]
struct Seen {
    body: Value,
    /// The answer's text, from the mock's stream.
    answer: String,
    /// Ticks of the capture's clock at the request's arrival and at its answer's end.
    arrived: u64,
    ended: u64,
    /// Its `x-session-id` header.
    session: Option<String>,
}

struct Capture {
    upstream: String,
    client: reqwest::Client,
    seen: Mutex<Vec<Seen>>,
    /// Counts arrivals and ends, to order them.
    clock: AtomicU64,
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A mock, and a capture server in front of it; returns the capture's URL.
async fn captured(config: MockConfig) -> (String, Arc<Capture>) {
    let state = MockState::new(config);
    let mock = serve(lingo::mock::router(state)).await;
    let capture = Arc::new(Capture {
        upstream: format!("http://{mock}"),
        client: reqwest::Client::new(),
        seen: Mutex::new(Vec::new()),
        clock: AtomicU64::new(0),
    });
    let app = Router::new().fallback(forward).with_state(capture.clone());
    (format!("http://{}", serve(app).await), capture)
}

/// Forward to the mock; record generation requests (POSTs other than /tokenize) with the
/// answer text read from the stream.
async fn forward(State(c): State<Arc<Capture>>, req: axum::extract::Request) -> Response {
    let arrived = c.clock.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 26).await.expect("a body");
    let url = format!("{}{}", c.upstream, parts.uri);
    let resp = c
        .client
        .request(parts.method.clone(), url)
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .expect("the mock answers");
    let status = resp.status();
    let content_type = resp.headers().get("content-type").cloned();
    let bytes = resp.bytes().await.expect("the mock's body");
    let ended = c.clock.fetch_add(1, Ordering::SeqCst);
    let generation = parts.method == http::Method::POST && !parts.uri.path().contains("tokenize");
    if generation {
        let seen = Seen {
            body: serde_json::from_slice(&body).expect("JSON request"),
            answer: answer_of(&bytes),
            arrived,
            ended,
            session: parts
                .headers
                .get("x-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        };
        c.seen.lock().expect("not poisoned").push(seen);
    }
    let mut out = Response::builder().status(status.as_u16());
    if let Some(ct) = content_type {
        out = out.header("content-type", ct.as_bytes());
    }
    out.body(Body::from(bytes)).expect("a response")
}

/// The text of an OpenAI-style SSE stream (completions `text` or chat `delta.content`).
fn answer_of(bytes: &Bytes) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let choice = &v["choices"][0];
        let piece = choice["text"]
            .as_str()
            .or_else(|| choice["delta"]["content"].as_str());
        out.push_str(piece.unwrap_or(""));
    }
    out
}

fn config(url: &str, dialect: Dialect) -> BenchConfig {
    BenchConfig {
        url: url.to_string(),
        dialect,
        workload: WorkloadKind::Multiturn,
        conversations: 3,
        turns: 4,
        concurrency: vec![2],
        input_len: 6,
        output_len: 5,
        warmup: 0,
        seed: 11,
        timeout: Duration::from_secs(30),
        ..BenchConfig::default()
    }
}

fn seen(c: &Capture) -> Vec<Seen> {
    c.seen.lock().expect("not poisoned").clone()
}

fn summary(level: &LevelReport) -> Summary {
    Summary::of(level, &[50.0, 99.0], &lingo::bench::Slo::default())
}

/// The text prompt of a completions body.
fn prompt(s: &Seen) -> String {
    s.body["prompt"]
        .as_str()
        .expect("a text prompt")
        .to_string()
}

/// Chat bodies grouped by conversation (its first user message), in arrival order.
fn chat_conversations(all: &[Seen]) -> BTreeMap<String, Vec<Seen>> {
    let mut by: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
    for s in all {
        let first_user = s.body["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["role"] == "user"))
            .map(|m| m["content"].to_string())
            .expect("a user message");
        by.entry(first_user).or_default().push(s.clone());
    }
    by
}

#[tokio::test]
async fn chat_turns_arrive_in_order_each_extending_the_last_with_the_answer() {
    let (url, capture) = captured(MockConfig::default()).await;
    let mut cfg = config(&url, Dialect::OpenaiChat);
    cfg.system_prompt_len = 8;
    let levels = run(&cfg).await.expect("the run");

    let all = seen(&capture);
    assert_eq!(all.len(), 12);
    let convs = chat_conversations(&all);
    assert_eq!(convs.len(), 3);
    let mut systems = std::collections::HashSet::new();
    for turns in convs.values() {
        assert_eq!(turns.len(), 4);
        for (t, pair) in turns.windows(2).enumerate() {
            let (prev, next) = (&pair[0], &pair[1]);
            let pm = prev.body["messages"].as_array().expect("messages");
            let nm = next.body["messages"].as_array().expect("messages");
            // System, then user/assistant pairs: 2 + 2t messages at turn t.
            assert_eq!(pm.len(), 2 + 2 * t);
            assert_eq!(nm.len(), pm.len() + 2);
            assert_eq!(
                &nm[..pm.len()],
                &pm[..],
                "turn {t} does not extend turn {}",
                t - 1
            );
            assert_eq!(nm[pm.len()]["role"], "assistant");
            assert_eq!(nm[pm.len()]["content"], prev.answer.trim());
            assert!(!prev.answer.trim().is_empty());
            assert_eq!(nm[pm.len() + 1]["role"], "user");
        }
        let first = &turns[0].body["messages"][0];
        assert_eq!(first["role"], "system");
        assert_eq!(
            first["content"].as_str().map(|s| s.split(' ').count()),
            Some(8)
        );
        systems.insert(first["content"].to_string());
    }
    assert_eq!(systems.len(), 1, "one system prompt shared by all");

    // The report: per turn, exact counts, and prompts that grow with the history.
    let s = summary(&levels[0]);
    let d = s.multiturn.expect("per-turn figures");
    assert_eq!((d.conversations, d.turns_per_conversation), (3, 4));
    let counts: Vec<(usize, usize, usize)> = d
        .turns
        .iter()
        .map(|t| (t.requests, t.ok, t.not_sent))
        .collect();
    assert_eq!(counts, [(3, 3, 0); 4]);
    let means: Vec<f64> = d
        .turns
        .iter()
        .filter_map(|t| t.prompt_tokens_mean)
        .collect();
    assert_eq!(means.len(), 4);
    assert!(means.windows(2).all(|w| w[1] > w[0]), "{means:?}");
    let table = lingo::bench::render(&[summary(&levels[0])], true);
    assert!(table.contains("3 conversations x 4 turns"), "{table}");
}

#[tokio::test]
async fn text_dialects_get_the_flattened_history_extending_each_turn() {
    let (url, capture) = captured(MockConfig::default()).await;
    let mut cfg = config(&url, Dialect::OpenaiCompletions);
    cfg.system_prompt_len = 5;
    cfg.conversations = 2;
    cfg.concurrency = vec![1];
    run(&cfg).await.expect("the run");

    // One conversation at a time: arrivals are conversation 0's turns, then 1's.
    let all = seen(&capture);
    assert_eq!(all.len(), 8);
    for conv in all.chunks(4) {
        assert!(prompt(&conv[0]).starts_with("System: "));
        assert!(prompt(&conv[0]).ends_with("\n\nAssistant:"));
        for pair in conv.windows(2) {
            let (prev, next) = (prompt(&pair[0]), prompt(&pair[1]));
            let expected = format!("{prev} {}\n\nUser: ", pair[0].answer.trim());
            assert!(next.starts_with(&expected), "{next:?} from {expected:?}");
            assert!(next.ends_with("\n\nAssistant:"));
        }
    }
    let system = |s: &Seen| prompt(s).split("\n\n").next().map(str::to_string);
    assert_eq!(system(&all[0]), system(&all[4]));
}

#[tokio::test]
async fn the_same_seed_sends_the_same_bodies() {
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let (url, capture) = captured(MockConfig::default()).await;
        let mut cfg = config(&url, Dialect::OpenaiChat);
        cfg.system_prompt_len = 4;
        run(&cfg).await.expect("the run");
        let mut b: Vec<String> = seen(&capture).iter().map(|s| s.body.to_string()).collect();
        // Conversations interleave differently from run to run; the set is what must match.
        b.sort();
        bodies.push(b);
    }
    assert_eq!(bodies[0].len(), 12);
    assert_eq!(bodies[0], bodies[1]);
    let (url, capture) = captured(MockConfig::default()).await;
    let mut cfg = config(&url, Dialect::OpenaiChat);
    cfg.system_prompt_len = 4;
    cfg.seed = 12;
    run(&cfg).await.expect("the run");
    let mut other: Vec<String> = seen(&capture).iter().map(|s| s.body.to_string()).collect();
    other.sort();
    assert_ne!(other, bodies[0]);
}

#[tokio::test]
async fn a_failed_turn_ends_its_conversation_and_is_reported() {
    // Every 5th request fails: one at a time, that is conversation 1's first turn.
    let (url, capture) = captured(MockConfig {
        fail_every: Some(5),
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&url, Dialect::OpenaiCompletions);
    cfg.concurrency = vec![1];
    let levels = run(&cfg).await.expect("the run");
    assert_eq!(seen(&capture).len(), 9, "4 + 1 failed + 4");
    let l = &levels[0];
    assert_eq!((l.results.len(), l.ok(), l.fail()), (9, 8, 1));
    let d = summary(l).multiturn.expect("per-turn figures");
    let counts: Vec<(usize, usize, usize)> = d
        .turns
        .iter()
        .map(|t| (t.requests, t.ok, t.not_sent))
        .collect();
    assert_eq!(counts, [(3, 2, 0), (2, 2, 1), (2, 2, 1), (2, 2, 1)]);
    assert_eq!((d.ended_early, d.not_sent), (1, 3));
    let table = lingo::bench::render(&[summary(l)], false);
    assert!(
        table.contains(
            "1 conversation(s) ended at a failed turn; their 3 later turn(s) were not sent"
        ),
        "{table}"
    );
    let csv = lingo::bench::csv::render(&[summary(l)], &[50.0]);
    let header: Vec<&str> = csv.lines().next().unwrap_or("").split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap_or("").split(',').collect();
    assert_eq!(header.len(), row.len());
    let at = |name: &str| header.iter().position(|h| *h == name).map(|i| row[i]);
    assert_eq!(at("turn2_not_sent"), Some("1"));
    assert_eq!(at("turn1_ok"), Some("2"));
}

#[tokio::test]
async fn split_conversations_sends_each_conversation_to_one_server() {
    let (a, ca) = captured(MockConfig::default()).await;
    let (b, cb) = captured(MockConfig::default()).await;
    let mut cfg = config(&a, Dialect::OpenaiChat);
    cfg.more_urls = vec![b.clone()];
    cfg.conversations = 4;
    cfg.turns = 3;
    let levels = run(&cfg).await.expect("the run");
    assert_eq!(levels.len(), 1);
    assert_eq!(levels[0].url, format!("{a},{b}"));
    let (sa, sb) = (seen(&ca), seen(&cb));
    assert_eq!((sa.len(), sb.len()), (6, 6));
    let (ka, kb) = (chat_conversations(&sa), chat_conversations(&sb));
    assert_eq!((ka.len(), kb.len()), (2, 2));
    assert!(
        ka.keys().all(|k| !kb.contains_key(k)),
        "a conversation at both"
    );
    assert!(ka.values().chain(kb.values()).all(|t| t.len() == 3));

    // Per request: the turns of one conversation alternate between the two.
    let (a, ca) = captured(MockConfig::default()).await;
    let (b, cb) = captured(MockConfig::default()).await;
    cfg.url = a;
    cfg.more_urls = vec![b];
    cfg.split = Split::Requests;
    cfg.concurrency = vec![1];
    run(&cfg).await.expect("the run");
    let (sa, sb) = (seen(&ca), seen(&cb));
    assert_eq!((sa.len(), sb.len()), (6, 6));
    let ka = chat_conversations(&sa);
    assert_eq!(ka.len(), 4, "every conversation reached both servers");
}

#[tokio::test]
async fn vs_url_with_a_repeated_url_is_refused() {
    let mut cfg = config("http://127.0.0.1:9", Dialect::OpenaiChat);
    cfg.more_urls = vec!["http://127.0.0.1:10".into()];
    cfg.vs_url = Some("http://127.0.0.1:11".into());
    let e = run(&cfg).await.expect_err("refused");
    assert!(e.to_string().contains("vs_url"), "{e}");
}

/// A temporary file of this test's own.
fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lingo-multiturn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let p = dir.join(name);
    std::fs::write(&p, text).expect("written");
    p
}

#[tokio::test]
async fn replay_sends_each_session_in_order_with_extending_prompts() {
    // Everything arrives at t = 0: only the sessions hold their later lines back. The mock
    // takes 100 ms to its first token, so an unordered replay would overlap them.
    let (url, capture) = captured(MockConfig {
        ttft: Duration::from_millis(100),
        ..MockConfig::default()
    })
    .await;
    let line = |t: f64, p: u32, s: Option<&str>| {
        let mut v = serde_json::json!({"time": t, "prompt_tokens": p, "completion_tokens": 3});
        if let Some(s) = s {
            v["session"] = s.into();
        }
        v.to_string()
    };
    let log = [
        line(0.0, 10, Some("a")),
        line(0.0, 15, Some("b")),
        line(0.0, 12, None),
        line(0.0, 20, Some("a")),
        line(0.0, 25, Some("b")),
        line(0.0, 30, Some("a")),
    ]
    .join("\n");
    let cfg = BenchConfig {
        url,
        dialect: Dialect::OpenaiCompletions,
        source: lingo::bench::Source::Replay(temp_file("sessions.jsonl", &log)),
        requests_per_level: u32::MAX,
        warmup: 0,
        seed: 3,
        timeout: Duration::from_secs(30),
        ..BenchConfig::default()
    };
    let levels = run(&cfg).await.expect("the run");
    assert_eq!((levels[0].results.len(), levels[0].ok()), (6, 6));
    let all = seen(&capture);
    let ids = |s: &Seen| -> Vec<u64> {
        s.body["prompt"]
            .as_array()
            .expect("token ids")
            .iter()
            .filter_map(Value::as_u64)
            .collect()
    };
    let by_len = |n: usize| all.iter().find(|s| ids(s).len() == n).expect("a request");
    for session in [&[10, 20, 30][..], &[15, 25]] {
        for pair in session.windows(2) {
            let (prev, next) = (by_len(pair[0]), by_len(pair[1]));
            assert!(next.arrived > prev.ended, "{pair:?} overlapped");
            assert!(
                ids(next).starts_with(&ids(prev)),
                "{pair:?} share no prefix"
            );
        }
    }
    // Different sessions, and the line without one, start apart.
    assert_ne!(ids(by_len(10))[..5], ids(by_len(15))[..5]);
    assert_ne!(ids(by_len(10))[..5], ids(by_len(12))[..5]);
    // The unordered line and the first of each session left together.
    let first_end = [10, 15, 12].map(|n| by_len(n).ended).into_iter().min();
    assert!([10, 15, 12]
        .iter()
        .all(|n| Some(by_len(*n).arrived) < first_end));
}

#[tokio::test]
async fn multiturn_names_its_conversations_for_a_request_log() {
    let (url, capture) = captured(MockConfig::default()).await;
    let mut cfg = config(&url, Dialect::OpenaiChat);
    cfg.turns = 2;
    run(&cfg).await.expect("the run");
    let by = chat_conversations(&seen(&capture));
    let mut sessions = std::collections::HashSet::new();
    for turns in by.values() {
        let s: Vec<&Option<String>> = turns.iter().map(|t| &t.session).collect();
        assert!(s[0].is_some() && s.iter().all(|x| *x == s[0]), "{s:?}");
        sessions.insert(s[0].clone());
    }
    assert_eq!(sessions.len(), 3);
}

/// Every dialect holds a conversation: through lingo in front of a vLLM mock (translated or
/// passed through; lingo's request log then names each conversation as its session), and
/// the native dialects straight at their own server's mock.
#[tokio::test]
async fn every_dialect_holds_a_conversation_and_lingo_logs_its_sessions() {
    let upstream = lingo::mock::router(MockState::new(MockConfig::default()));
    let upstream = format!("http://{}", serve(upstream).await);
    let log = temp_file("requests.jsonl", "");
    let mut proxy = lingo::config::Config::default();
    proxy.upstream.url = upstream;
    proxy.upstream.kind = lingo::upstream::KindSetting::Vllm;
    proxy.metrics.request_log = Some(log.display().to_string());
    let via_lingo = format!("http://{}", serve(lingo::proxy::app(proxy)).await);
    let mut targets: Vec<(Dialect, String)> = Dialect::ALL
        .into_iter()
        .map(|d| (d, via_lingo.clone()))
        .collect();
    for (dialect, kind) in [
        (Dialect::Tgi, lingo::mock::MockKind::Tgi),
        (Dialect::Llamacpp, lingo::mock::MockKind::Llamacpp),
        (Dialect::OllamaGenerate, lingo::mock::MockKind::Ollama),
        (Dialect::OllamaChat, lingo::mock::MockKind::Ollama),
    ] {
        let state = MockState::new(MockConfig {
            kind,
            ..MockConfig::default()
        });
        let url = format!("http://{}", serve(lingo::mock::router(state)).await);
        targets.push((dialect, url));
    }
    let mut through_lingo = 0;
    for (dialect, url) in targets {
        let mut cfg = config(&url, dialect);
        cfg.conversations = 2;
        cfg.turns = 3;
        cfg.system_prompt_len = 4;
        // One warmup first: lingo discovers its upstream's model at the first request, and
        // two first requests at once can find it not yet known (a 502 for one of them).
        cfg.warmup = 1;
        let levels = run(&cfg).await.expect("the run");
        let what = format!("{} at {url}", dialect.label());
        assert_eq!(levels[0].ok(), 6, "{what}: {:?}", levels[0].errors());
        let d = summary(&levels[0]).multiturn.expect("per-turn figures");
        assert!(d.turns.iter().all(|t| t.ok == 2), "{what}: {d:?}");
        let means: Vec<f64> = d
            .turns
            .iter()
            .filter_map(|t| t.prompt_tokens_mean)
            .collect();
        assert!(
            means.iter().all(|m| *m == 0.0) || means.windows(2).all(|w| w[1] > w[0]),
            "{what}: prompts grow with the history: {means:?}"
        );
        through_lingo += usize::from(url == via_lingo);
    }
    // The log is written off the request path: wait (bounded) for every line.
    let wanted = through_lingo * 6;
    let mut lines: Vec<Value> = Vec::new();
    for _ in 0..500 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        lines = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if lines.len() >= wanted + through_lingo {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One warmup per run (no session), then the conversations' turns.
    let mut per_session: BTreeMap<String, usize> = BTreeMap::new();
    for l in &lines {
        if let Some(s) = l["session"].as_str() {
            *per_session.entry(s.to_string()).or_default() += 1;
        }
    }
    assert_eq!(lines.len(), wanted + through_lingo, "{lines:?}");
    // Every run numbers its conversations alike (same seed): each session is one
    // conversation per dialect run, three turns each.
    assert_eq!(per_session.len(), 2, "{per_session:?}");
    assert!(per_session.values().all(|n| *n == 3 * through_lingo));
}

#[tokio::test]
async fn a_ramp_up_starts_the_second_worker_conversation_later() {
    // Two workers, two conversations, and a 2 s ramp: the second worker's conversation
    // starts 1 s in, long after an instant mock answered all three turns of the first.
    // Without the ramp both first turns arrive before any answer ends.
    let (url, capture) = captured(MockConfig::default()).await;
    let mut cfg = config(&url, Dialect::OpenaiChat);
    cfg.conversations = 2;
    cfg.turns = 3;
    cfg.ramp_up = Duration::from_secs(2);
    run(&cfg).await.expect("the run");

    let convs: Vec<Vec<Seen>> = chat_conversations(&seen(&capture)).into_values().collect();
    assert_eq!(convs.len(), 2);
    let (first, second) = match convs[0][0].arrived < convs[1][0].arrived {
        true => (&convs[0], &convs[1]),
        false => (&convs[1], &convs[0]),
    };
    let first_done = first.iter().map(|s| s.ended).max().expect("turns");
    assert!(
        first_done < second[0].arrived,
        "the second conversation started at tick {} before the first ended at {first_done}",
        second[0].arrived
    );
}
