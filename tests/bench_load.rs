//! `lingo bench` load shapes and measurements over real sockets, against lingo's mock (with
//! known TTFT and ITL) and lingo's proxy: accuracy, open-loop schedules, duration bounds,
//! replay, datasets, `--scrape-metrics` and `--vs-url`.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::path::PathBuf;
use std::time::Duration;

use lingo::bench::schedule::Arrivals;
use lingo::bench::{
    run, BenchConfig, ErrorKind, InputLengths, LevelReport, Load, Rate, Slo, Source, Summary,
};
use lingo::dialect::Dialect;
use lingo::mock::{MockConfig, MockKind};
use lingo::upstream::KindSetting;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/bench")
        .join(name)
}

fn config(url: &str, dialect: Dialect) -> BenchConfig {
    BenchConfig {
        url: url.to_string(),
        dialect,
        concurrency: vec![2],
        input_len: 16,
        output_len: 8,
        requests_per_level: 8,
        warmup: 1,
        seed: 11,
        timeout: Duration::from_secs(30),
        ..BenchConfig::default()
    }
}

fn summary(l: &LevelReport) -> Summary {
    Summary::of(l, &[50.0, 99.0], &Slo::default())
}

#[tokio::test]
async fn measured_ttft_and_itl_match_the_mock() {
    let ttft = Duration::from_millis(40);
    let itl = Duration::from_millis(8);
    let mock = common::mock_with(MockConfig {
        ttft,
        itl,
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&mock.url(), Dialect::OpenaiCompletions);
    cfg.concurrency = vec![1, 4];
    cfg.output_len = 12;
    let levels = run(&cfg).await.unwrap();
    for l in &levels {
        assert_eq!((l.ok(), l.fail()), (8, 0), "{:?}", l.errors());
        assert_eq!(l.total_tokens(), 8 * 12);
        for r in &l.results {
            // Never earlier than the mock's delay: the mock counts it from the kernel's stamp
            // of the request's arrival, the driver from its write and the stamp of the first
            // token's bytes, so this holds however late either process ran.
            assert!(r.ttft.unwrap() >= ttft, "{:?}", r.ttft);
            // A plain http:// target is read with kernel stamps: the driver's lag is known.
            assert!(r.read_lag.is_some() && r.end_lag.is_some(), "{r:?}");
            assert_eq!((r.output_tokens, r.prompt_tokens), (12, 16));
            assert_eq!(r.itl.len(), 11);
        }
        let s = summary(l);
        // Loose bounds on a shared machine: the tight figure is scripts/bench-driver.sh's job.
        let p50 = s.ttft.p(50.0).unwrap();
        assert!(p50 <= ttft.as_secs_f64() + 0.020, "{p50}");
        let mean_itl = s.itl.mean.unwrap();
        assert!(
            mean_itl >= 0.5 * itl.as_secs_f64() && mean_itl <= 1.5 * itl.as_secs_f64() + 0.002,
            "{mean_itl}"
        );
        let tpot = s.tpot.mean.unwrap();
        assert!(
            (tpot - itl.as_secs_f64()).abs() < 0.5 * itl.as_secs_f64(),
            "{tpot}"
        );
        assert!(!s.self_check.driver_bound, "{:?}", s.self_check.reasons);
        assert!(s.self_check.driver_share.is_some());
        assert!(s.self_check.read_lag_p99.is_some());
    }
    // The warmup and both levels, exactly.
    let stats = mock.state.stats();
    assert_eq!(stats.completion_tokens, (1 + 16) * 12);
    // The mock saw each stream's first token leave, and when: its own lateness, which the
    // driver's TTFT error holds too (scripts/bench-driver.sh reports both).
    let late = stats.first_token_late;
    assert_eq!(late.count, 1 + 16);
    assert!(
        late.p50_us <= late.p99_us && late.p99_us <= late.max_us,
        "{late:?}"
    );
}

#[tokio::test]
async fn open_loop_follows_the_seeded_schedule() {
    let mock = common::mock(MockKind::Sglang).await;
    let mut cfg = config(&mock.url(), Dialect::Sglang);
    cfg.concurrency = Vec::new();
    cfg.request_rate = vec![Rate::PerSecond(400.0)];
    cfg.requests_per_level = 40;
    let levels = run(&cfg).await.unwrap();
    let l = &levels[0];
    assert_eq!(l.load.label(), "rate=400");
    assert_eq!((l.ok(), l.fail()), (40, 0));
    // The first level's schedule is keyed by the requests before it: the one warmup request.
    let want: Vec<Duration> = Arrivals::new(Rate::PerSecond(400.0), 1.0, 11, 1)
        .take(40)
        .collect();
    let got: Vec<Duration> = l.results.iter().map(|r| r.scheduled).collect();
    assert_eq!(got, want);
    for r in &l.results {
        assert!(r.sent >= r.scheduled);
        // Latency runs from the schedule: it includes any lateness of the send.
        assert!(r.scheduled + r.ttft.unwrap() >= r.sent);
    }
    let s = summary(l);
    assert!(s.self_check.scheduled_rate.unwrap() > 0.0);
    assert!(s.self_check.achieved_rate.unwrap() > 0.0);

    // Another seed, another schedule; the same seed, the same one.
    let again = run(&cfg).await.unwrap();
    let got2: Vec<Duration> = again[0].results.iter().map(|r| r.scheduled).collect();
    assert_eq!(got2, want);
    cfg.seed = 12;
    let other = run(&cfg).await.unwrap();
    assert_ne!(other[0].results[5].scheduled, want[5]);
}

#[tokio::test]
async fn max_concurrency_queues_and_the_wait_counts_in_latency() {
    let ttft = Duration::from_millis(25);
    let mock = common::mock_with(MockConfig {
        kind: MockKind::Sglang,
        ttft,
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&mock.url(), Dialect::Sglang);
    cfg.concurrency = Vec::new();
    cfg.request_rate = vec![Rate::Infinite];
    cfg.max_concurrency = Some(1);
    cfg.requests_per_level = 5;
    cfg.warmup = 0;
    let levels = run(&cfg).await.unwrap();
    let l = &levels[0];
    assert_eq!(l.ok(), 5);
    for (i, r) in l.results.iter().enumerate() {
        assert_eq!(r.scheduled, Duration::ZERO);
        // Request i waited for the i before it, one at a time.
        let floor = ttft * (i as u32 + 1);
        assert!(r.ttft.unwrap() >= floor, "{i}: {:?}", r.ttft);
        // Waiting for a slot is not the driver's lag.
        assert!(r.lag < Duration::from_millis(20), "{i}: {:?}", r.lag);
    }
    assert_eq!(
        l.load,
        Load::Rate {
            rate: Rate::Infinite,
            max_concurrency: Some(1)
        }
    );
}

#[tokio::test]
async fn open_loop_failures_are_counted_exactly_by_kind() {
    let mock = common::mock_with(MockConfig {
        fail_every: Some(5),
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&mock.url(), Dialect::OpenaiCompletions);
    cfg.concurrency = Vec::new();
    cfg.request_rate = vec![Rate::Infinite];
    cfg.requests_per_level = 20;
    cfg.warmup = 0;
    let levels = run(&cfg).await.unwrap();
    let l = &levels[0];
    assert_eq!((l.ok(), l.fail()), (16, 4));
    assert_eq!(l.failures_by_kind(), vec![(ErrorKind::Http(500), 4)]);
    assert_eq!(l.total_tokens(), 16 * 8);
    let s = summary(l);
    assert_eq!(s.failures.get("http_500"), Some(&4));
}

#[tokio::test]
async fn a_duration_bounds_a_closed_loop_level() {
    let mock = common::mock_with(MockConfig {
        kind: MockKind::Sglang,
        ttft: Duration::from_millis(10),
        ..MockConfig::default()
    })
    .await;
    let mut cfg = config(&mock.url(), Dialect::Sglang);
    cfg.requests_per_level = u32::MAX;
    cfg.duration = Some(Duration::from_millis(300));
    let levels = run(&cfg).await.unwrap();
    let l = &levels[0];
    // Two workers of ~10 ms requests for 300 ms: some, but bounded, requests.
    assert!(
        l.results.len() >= 4 && l.results.len() <= 70,
        "{}",
        l.results.len()
    );
    // A worker starts a request only while it is free before the end; on a busy machine the
    // handoff (`sent`) may land after it, `lag` later than the moment it was free.
    assert!(l
        .results
        .iter()
        .all(|r| r.sent.saturating_sub(r.lag) < Duration::from_millis(300)));
    assert_eq!(l.fail(), 0);
}

#[tokio::test]
async fn replay_reproduces_lengths_and_relative_arrivals() {
    let mock = common::mock(MockKind::Sglang).await;
    let mut cfg = config(&mock.url(), Dialect::Sglang);
    cfg.source = Source::Replay(fixture("requests.jsonl"));
    cfg.warmup = 0;
    let levels = run(&cfg).await.unwrap();
    assert_eq!(levels.len(), 1);
    let l = &levels[0];
    assert_eq!(l.label(), "replay");
    // The fixture's lines, relative to the first arrival (Unix 1764500000.0).
    let want = [
        (0.0, 20, 5),
        (0.05, 7, 1),
        (0.2, 64, 12),
        (0.25, 33, 3),
        (0.4, 128, 9),
    ];
    assert_eq!(l.results.len(), want.len());
    for (r, (at, prompt, out)) in l.results.iter().zip(want) {
        assert!(r.ok, "{:?}", r.error);
        assert!(
            (r.scheduled.as_secs_f64() - at).abs() < 1e-6,
            "{:?} {at}",
            r.scheduled
        );
        assert!(r.sent >= r.scheduled && r.sent < r.scheduled + Duration::from_millis(100));
        // Exact lengths by the server's own counts.
        assert_eq!((r.prompt_tokens, r.output_tokens), (prompt, out));
        assert_eq!(
            (u64::from(r.input_len), u64::from(r.output_len)),
            (prompt, out)
        );
    }
}

#[tokio::test]
async fn dataset_prompts_and_their_answer_lengths() {
    // The vLLM mock counts a token per word, on /tokenize as in its usage.
    let mock = common::mock(MockKind::Vllm).await;
    let mut cfg = config(&mock.url(), Dialect::OpenaiCompletions);
    cfg.source = Source::Dataset(fixture("sharegpt.json"));
    cfg.requests_per_level = 6;
    let levels = run(&cfg).await.unwrap();
    let l = &levels[0];
    assert_eq!(l.input, InputLengths::Dataset);
    assert_eq!(l.ok(), 6);
    // The fixture's three usable prompts have 4, 6 and 2 words; their answers 3, 5 and 7.
    let mut pairs: Vec<(u64, u64)> = l
        .results
        .iter()
        .map(|r| (r.prompt_tokens, r.output_tokens))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    assert_eq!(pairs, [(2, 7), (4, 3), (6, 5)]);

    cfg.source = Source::Dataset(fixture("prompts.jsonl"));
    let levels = run(&cfg).await.unwrap();
    let outs: std::collections::BTreeSet<u64> =
        levels[0].results.iter().map(|r| r.output_tokens).collect();
    // One line sets output_len 3; the others take --output-len (8).
    assert_eq!(outs, [3, 8].into());
}

#[tokio::test]
async fn text_dialects_are_sized_by_the_servers_tokenizer() {
    let mock = common::mock(MockKind::Vllm).await;
    let mut cfg = config(&mock.url(), Dialect::OpenaiChat);
    cfg.input_len = 50;
    cfg.input_range = 0.2;
    let levels = run(&cfg).await.unwrap();
    let l = &levels[0];
    assert_eq!(l.input, InputLengths::ServerTokenizer);
    for r in &l.results {
        assert!((40..=60).contains(&r.input_len), "{}", r.input_len);
        // The mock's chat template adds three tokens to the text's.
        assert_eq!(r.prompt_tokens, u64::from(r.input_len) + 3);
    }
}

#[tokio::test]
async fn scraped_server_metrics_match_the_client_through_lingo() {
    let mock = common::mock(MockKind::Vllm).await;
    let proxy = common::lingo(common::config_for(&mock.url(), KindSetting::Vllm)).await;
    let mut cfg = config(&proxy, Dialect::OpenaiCompletions);
    cfg.scrape_metrics = true;
    cfg.concurrency = vec![1, 3];
    let levels = run(&cfg).await.unwrap();
    for l in &levels {
        let server = l.server.as_ref().expect("lingo serves /metrics");
        assert_eq!(server.prefix, "lingo_");
        assert_eq!(server.generation_tokens, l.total_tokens() as f64);
        assert_eq!(server.ttft_count, 8.0);
        assert!(server.ttft_mean.is_some());
    }
    let table = lingo::bench::render(&levels.iter().map(summary).collect::<Vec<_>>(), false);
    assert!(
        table.contains("Server c=1 (lingo_metrics): mean TTFT"),
        "{table}"
    );

    // The mock itself exports vLLM's names: its own view of the same level, exact.
    let mut direct = cfg.clone();
    direct.url = mock.url();
    direct.concurrency = vec![1];
    let level = &run(&direct).await.unwrap()[0];
    let server = level.server.as_ref().expect("the mock serves /metrics");
    assert_eq!(server.prefix, "vllm:");
    assert_eq!(server.generation_tokens, level.total_tokens() as f64);
    assert_eq!(server.ttft_count, 8.0);

    // A server whose /metrics fails: no server figures, no failure.
    let r = common::post_json(
        &format!("{}/mock/load", mock.url()),
        &serde_json::json!({"metrics_status": 404}),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(run(&direct).await.unwrap()[0].server.is_none());
}

#[tokio::test]
async fn vs_url_alternates_targets_level_by_level() {
    let mock = common::mock(MockKind::Vllm).await;
    let proxy = common::lingo(common::config_for(&mock.url(), KindSetting::Vllm)).await;
    let mut cfg = config(&mock.url(), Dialect::OpenaiCompletions);
    cfg.vs_url = Some(proxy.clone());
    cfg.concurrency = vec![1, 2];
    let levels = run(&cfg).await.unwrap();
    let order: Vec<(usize, String)> = levels.iter().map(|l| (l.target, l.label())).collect();
    assert_eq!(
        order,
        [(0, "c=1"), (1, "c=1"), (0, "c=2"), (1, "c=2")].map(|(t, l)| (t, l.to_string()))
    );
    assert_eq!(levels[1].url, proxy);
    assert!(levels.iter().all(|l| l.ok() == 8));
    // Both warmups and all four levels reached the one mock.
    assert_eq!(mock.state.stats().completed, 2 + 4 * 8);
    let summaries: Vec<Summary> = levels.iter().map(summary).collect();
    let pairs: Vec<(&Summary, &Summary)> = summaries.chunks(2).map(|ab| (&ab[0], &ab[1])).collect();
    let out = lingo::bench::compare::render(&pairs, "mock", "lingo");
    assert!(out.contains("B = lingo"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("failed") && l.ends_with("1.000")),
        "{out}"
    );
    let table = lingo::bench::render(&summaries, false);
    assert!(table.contains("B c=2"), "{table}");
}

/// A server that answers each request whole and then closes the connection without saying
/// so (as llama.cpp's does after a stream): the next request on that idle connection fails
/// before any answer, and the driver sends it again on a new one.
async fn closing_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read the head and a body of Content-Length bytes, then answer and close.
                loop {
                    let Ok(n) = tcp.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    let Some(head_end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let len = text[..head_end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buf.len() >= head_end + 4 + len {
                        break;
                    }
                }
                let body = r#"{"id":"x","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":"a b","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":16,"completion_tokens":2,"total_tokens":18}}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = tcp.write_all(answer.as_bytes()).await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    (url, accepted)
}

#[tokio::test]
async fn a_server_that_closes_idle_connections_costs_no_request() {
    let (url, accepted) = closing_server().await;
    let mut cfg = config(&url, Dialect::OpenaiCompletions);
    cfg.model = Some("m".into());
    cfg.stream = false;
    cfg.concurrency = vec![2];
    cfg.requests_per_level = 6;
    let levels = run(&cfg).await.unwrap();
    let l = &levels[0];
    assert_eq!((l.ok(), l.fail()), (6, 0), "{:?}", l.errors());
    assert_eq!(l.total_tokens(), 6 * 2);
    // One connection per request at least (the server closes each after its answer).
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 7);
}
