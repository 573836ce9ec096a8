//! `lingo top` over real sockets: known traffic through a real lingo in front of the mock,
//! between two scrapes, read back from the rendered frame; and the binary's `--once` and
//! plain modes against a scripted `/metrics` whose two answers are written here.
//!
//! Frames are rendered with an elapsed time of one second, so every rate equals the count of
//! the interval and nothing depends on timing.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use lingo::config::Timeouts;
use lingo::mock::{MockConfig, MockKind};
use lingo::top::{endpoints, render, render_endpoints, scrape, Group, View, Window};
use lingo::upstream::{Client, KindSetting};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The cells of the row named `name` in the table whose header starts with `title`.
fn row(frame: &str, title: &str, name: &str) -> Vec<String> {
    let table = frame
        .split("\n\n")
        .find(|t| t.starts_with(title))
        .unwrap_or_else(|| panic!("no {title} table in\n{frame}"));
    let line = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} row in\n{frame}"));
    line.split_whitespace().map(str::to_string).collect()
}

/// Cells by header, for a frame with every column (headers contain single spaces).
fn cell(frame: &str, title: &str, name: &str, header: &str) -> String {
    let headers = [
        "req/s",
        "in tok/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "err/s",
        "reqs",
        "in tok",
        "out tok",
    ];
    let i = headers.iter().position(|h| *h == header).unwrap();
    row(frame, title, name)[i + 1].clone()
}

async fn proxy_with(mock: MockConfig) -> (String, Client) {
    let mock = common::mock_with(mock).await;
    let url = common::lingo(common::config_for(&mock.url(), KindSetting::Vllm)).await;
    let client = Client::new(&url, &Timeouts::default());
    (url, client)
}

async fn post(url: &str, path: &str, body: Value) -> (u16, String) {
    let resp = common::client()
        .post(format!("{url}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

async fn sglang(url: &str, stream: bool) -> u16 {
    let body = json!({"text": "a b c", "stream": stream,
                      "sampling_params": {"max_new_tokens": 8, "ignore_eos": true}});
    post(url, "/generate", body).await.0
}

async fn completions(url: &str) -> u16 {
    let body = json!({"model": "mock-model", "prompt": "a b c d", "max_tokens": 5,
                      "ignore_eos": true});
    post(url, "/v1/completions", body).await.0
}

#[tokio::test]
async fn the_frame_counts_the_traffic_between_two_scrapes() {
    let (url, client) = proxy_with(MockConfig {
        kind: MockKind::Vllm,
        ..MockConfig::default()
    })
    .await;
    // Before the first scrape: must not be counted.
    assert_eq!(sglang(&url, false).await, 200);
    let prev = scrape(&client).await.unwrap();

    for stream in [false, false, true] {
        assert_eq!(sglang(&url, stream).await, 200);
    }
    for _ in 0..2 {
        assert_eq!(completions(&url).await, 200);
    }
    let cur = scrape(&client).await.unwrap();
    let frame = render(&prev, &cur, Duration::from_secs(1), u16::MAX);

    // 3 SGLang requests of 3 prompt and 8 generated tokens, 2 completions of 4 and 5.
    let expect = |title: &str, name: &str, reqs: &str, tok_in: &str, tok_out: &str| {
        let c = |h: &str| cell(&frame, title, name, h);
        assert_eq!(
            [c("reqs"), c("in tok"), c("out tok")],
            [reqs, tok_in, tok_out],
            "{name}\n{frame}"
        );
        let rate = |n: &str| format!("{:.1}", n.parse::<f64>().unwrap());
        assert_eq!(c("req/s"), format!("{reqs}.00"), "{frame}");
        assert_eq!(
            [c("in tok/s"), c("out tok/s")],
            [rate(tok_in), rate(tok_out)]
        );
        assert_eq!(c("err/s"), "0.00", "{frame}");
        assert_ne!(c("TTFT p50"), "-", "{frame}");
        assert_ne!(c("TTFT p99"), "-", "{frame}");
    };
    expect("total", "all", "5", "17", "34");
    expect("model", "mock-model", "5", "17", "34");
    expect("dialect", "sglang", "3", "9", "24");
    expect("dialect", "openai-completions", "2", "8", "10");
    assert!(frame.starts_with("window 1.00s   in flight 0\n"), "{frame}");

    // Only the streamed request has gaps between tokens: 7 after its first.
    assert_ne!(cell(&frame, "dialect", "sglang", "ITL p50"), "-", "{frame}");
    assert_eq!(
        cell(&frame, "dialect", "openai-completions", "ITL p50"),
        "-"
    );
    let sglang = Window::between(&prev, &cur, Group::Dialect("sglang"));
    assert_eq!(sglang.itl.last(), Some(&(f64::INFINITY, 7.0)));
    assert_eq!(sglang.ttft.last(), Some(&(f64::INFINITY, 3.0)));
}

#[tokio::test]
async fn errors_show_in_every_table() {
    let (url, client) = proxy_with(MockConfig {
        kind: MockKind::Vllm,
        fail_every: Some(2),
        ..MockConfig::default()
    })
    .await;
    let prev = scrape(&client).await.unwrap();
    let mut failed = 0;
    for _ in 0..6 {
        if sglang(&url, false).await != 200 {
            failed += 1;
        }
    }
    assert!(failed > 0 && failed < 6, "{failed}");
    let cur = scrape(&client).await.unwrap();
    let frame = render(&prev, &cur, Duration::from_secs(1), u16::MAX);
    // Totals and dialects count lingo_errors_total; the model row counts failed requests.
    for (title, name) in [
        ("total", "all"),
        ("model", "mock-model"),
        ("dialect", "sglang"),
    ] {
        assert_eq!(
            cell(&frame, title, name, "err/s"),
            format!("{failed}.00"),
            "{frame}"
        );
        assert_eq!(cell(&frame, title, name, "reqs"), "6", "{frame}");
    }
}

// ---- the endpoints view, from two synthetic scrapes of a fleet ------------------------

const FLEET_PREV: &str = r#"
lingo_endpoint_requests_total{endpoint="http://10.0.0.1:8000",outcome="ok",pool="gpu"} 100
lingo_endpoint_requests_total{endpoint="http://10.0.0.2:8000",outcome="ok",pool="gpu"} 50
lingo_endpoint_requests_total{endpoint="http://10.0.0.2:8000",outcome="upstream_error",pool="gpu"} 1
lingo_endpoint_in_flight{endpoint="http://10.0.0.1:8000",pool="gpu"} 1
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m",upstream="gpu",le="0.01"} 0
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m",upstream="gpu",le="0.02"} 10
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m",upstream="gpu",le="+Inf"} 10
"#;

const FLEET_CUR: &str = r#"
lingo_endpoint_requests_total{endpoint="http://10.0.0.1:8000",outcome="ok",pool="gpu"} 108
lingo_endpoint_requests_total{endpoint="http://10.0.0.1:8000",outcome="client_error",pool="gpu"} 2
lingo_endpoint_requests_total{endpoint="http://10.0.0.2:8000",outcome="ok",pool="gpu"} 51
lingo_endpoint_requests_total{endpoint="http://10.0.0.2:8000",outcome="upstream_error",pool="gpu"} 4
lingo_endpoint_requests_total{endpoint="http://10.0.0.2:8000",outcome="timeout",pool="gpu"} 1
lingo_endpoint_in_flight{endpoint="http://10.0.0.1:8000",pool="gpu"} 3
lingo_endpoint_in_flight{endpoint="http://10.0.0.2:8000",pool="gpu"} 0
lingo_endpoint_healthy{endpoint="http://10.0.0.1:8000",pool="gpu"} 1
lingo_endpoint_healthy{endpoint="http://10.0.0.2:8000",pool="gpu"} 0
lingo_endpoint_requests_total{endpoint="http://127.0.0.1:9000",outcome="ok",pool="cpu"} 4
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m",upstream="gpu",le="0.01"} 0
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m",upstream="gpu",le="0.02"} 10
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m",upstream="gpu",le="+Inf"} 14
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m",upstream="cpu",le="0.01"} 4
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m",upstream="cpu",le="0.02"} 4
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m",upstream="cpu",le="+Inf"} 4
lingo_inter_token_latency_seconds_bucket{dialect="sglang",model="m",upstream="cpu",le="0.01"} 0
lingo_inter_token_latency_seconds_bucket{dialect="sglang",model="m",upstream="cpu",le="0.02"} 8
lingo_inter_token_latency_seconds_bucket{dialect="sglang",model="m",upstream="cpu",le="+Inf"} 8
lingo_requests_in_flight{upstream="gpu"} 3
"#;

/// The cells of the endpoints table's row for `pool` and `endpoint`, names included.
fn endpoint_row(frame: &str, pool: &str, endpoint: &str) -> Vec<String> {
    let table = frame
        .split("\n\n")
        .find(|t| t.starts_with("pool "))
        .unwrap_or_else(|| panic!("no endpoints table in\n{frame}"));
    let line = table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cells| cells.len() > 1 && cells[0] == pool && cells[1] == endpoint);
    line.unwrap_or_else(|| panic!("no {pool} {endpoint} row in\n{frame}"))
}

fn fleet_frame(elapsed: Duration, width: u16) -> String {
    let prev = lingo::top::Snapshot::parse(FLEET_PREV).unwrap();
    let cur = lingo::top::Snapshot::parse(FLEET_CUR).unwrap();
    render_endpoints(&prev, &cur, elapsed, width)
}

#[test]
fn the_endpoints_view_rates_each_endpoint_over_the_window() {
    let prev = lingo::top::Snapshot::parse(FLEET_PREV).unwrap();
    let cur = lingo::top::Snapshot::parse(FLEET_CUR).unwrap();
    let rows = endpoints(&prev, &cur);
    let names: Vec<_> = rows
        .iter()
        .map(|r| (r.pool.as_str(), r.endpoint.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("cpu", "http://127.0.0.1:9000"),
            ("gpu", "http://10.0.0.1:8000"),
            ("gpu", "http://10.0.0.2:8000")
        ]
    );
    // 10.0.0.1: 8 ok and 2 client errors (not its fault); 10.0.0.2: 1 ok, 3 + 1 failed.
    assert_eq!((rows[1].requests, rows[1].errors), (10.0, 0.0));
    assert_eq!((rows[2].requests, rows[2].errors), (5.0, 4.0));

    let f = fleet_frame(Duration::from_secs(2), u16::MAX);
    assert!(f.starts_with("window 2.00s   in flight 3\n"), "{f}");
    assert_eq!(
        endpoint_row(&f, "pool", "endpoint")[2..],
        ["req/s", "err/s", "in", "flight", "health"]
    );
    assert_eq!(
        endpoint_row(&f, "gpu", "http://10.0.0.1:8000")[2..],
        ["5.00", "0.00", "3", "up"]
    );
    assert_eq!(
        endpoint_row(&f, "gpu", "http://10.0.0.2:8000")[2..],
        ["2.50", "2.00", "0", "down"]
    );
    // No health gauge for it (nor in-flight): unknown, not down.
    assert_eq!(
        endpoint_row(&f, "cpu", "http://127.0.0.1:9000")[2..],
        ["2.00", "0.00", "0", "?"]
    );
    // Latency by group, over the window: gpu's 4 new first tokens all above 20 ms, so p50
    // is the last finite bound; cpu's 4 in (0, 10 ms], its 8 gaps in (10, 20 ms].
    assert_eq!(row(&f, "group", "gpu")[1..], ["20.0ms", "-"]);
    assert_eq!(row(&f, "group", "cpu")[1..], ["5.00ms", "15.0ms"]);

    // The same frame through the view switch; the models view is still the default.
    assert_eq!(
        View::Endpoints.render(&prev, &cur, Duration::from_secs(2), u16::MAX),
        f
    );
    assert_eq!(View::default(), View::Models);
    assert_eq!(View::Models.toggled(), View::Endpoints);
}

#[test]
fn the_endpoints_view_fits_narrow_screens_and_says_when_there_is_no_fleet() {
    for width in [120, 80, 40] {
        let f = fleet_frame(Duration::from_secs(1), width);
        for l in f.lines() {
            assert!(l.chars().count() <= usize::from(width), "{width}: {l:?}");
        }
    }
    let f = fleet_frame(Duration::from_secs(1), 80);
    assert!(f.contains("gpu      http://10.0.0.1:8000"), "{f}");
    let empty = lingo::top::Snapshot::default();
    let f = render_endpoints(&empty, &empty, Duration::ZERO, 120);
    assert!(
        f.contains("no lingo_ metrics") && f.contains("(no endpoints"),
        "{f}"
    );
}

// ---- the binary, against a scripted /metrics ------------------------------------------

const PREV: &str = r#"# HELP lingo_requests_total Generation requests by outcome and finish reason.
# TYPE lingo_requests_total counter
lingo_requests_total{dialect="sglang",finish_reason="length",model="mock-model",outcome="ok",upstream="default"} 1
lingo_prompt_tokens_total{dialect="sglang",model="mock-model",upstream="default"} 3
lingo_generation_tokens_total{dialect="sglang",model="mock-model",upstream="default"} 8
lingo_requests_in_flight{upstream="default"} 0
"#;

const CUR: &str = r#"# TYPE lingo_requests_total counter
lingo_requests_total{dialect="sglang",finish_reason="length",model="mock-model",outcome="ok",upstream="default"} 5
lingo_prompt_tokens_total{dialect="sglang",model="mock-model",upstream="default"} 15
lingo_generation_tokens_total{dialect="sglang",model="mock-model",upstream="default"} 40
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="mock-model",upstream="default",le="0.01"} 0
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="mock-model",upstream="default",le="0.02"} 4
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="mock-model",upstream="default",le="+Inf"} 4
lingo_requests_in_flight{upstream="default"} 3
"#;

/// Answers `PREV` to the first scrape and `CUR` to every later one; counts scrapes.
async fn scripted_metrics() -> (String, Arc<AtomicUsize>) {
    async fn metrics(State(n): State<Arc<AtomicUsize>>) -> &'static str {
        match n.fetch_add(1, Ordering::SeqCst) {
            0 => PREV,
            _ => CUR,
        }
    }
    let scrapes = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(scrapes.clone());
    (serve(app).await, scrapes)
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn lingo_top() -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_lingo"));
    cmd.arg("top")
        .env_remove("LINGO_TOP_URL")
        .env_remove("LINGO_TOP_INTERVAL")
        .env_remove("LINGO_TOP_ONCE")
        .env_remove("LINGO_TOP_VIEW")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

#[tokio::test]
async fn once_prints_one_plain_frame_from_two_scrapes() {
    let (url, scrapes) = scripted_metrics().await;
    let out = lingo_top()
        .env("LINGO_TOP_URL", &url)
        .args(["--once", "--interval", "20ms"])
        .output()
        .await
        .unwrap();
    let frame = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(scrapes.load(Ordering::SeqCst), 2);
    assert!(!frame.contains('\x1b'), "escape codes in {frame:?}");
    assert!(
        frame.starts_with("window ") && frame.contains("in flight 3\n"),
        "{frame}"
    );
    for (title, name) in [
        ("total", "all"),
        ("model", "mock-model"),
        ("dialect", "sglang"),
    ] {
        let counts = [
            cell(&frame, title, name, "reqs"),
            cell(&frame, title, name, "in tok"),
            cell(&frame, title, name, "out tok"),
        ];
        assert_eq!(counts, ["4", "12", "32"], "{frame}");
        // All four first tokens in (10 ms, 20 ms]: p50 is halfway.
        assert_eq!(cell(&frame, title, name, "TTFT p50"), "15.0ms", "{frame}");
        assert_eq!(cell(&frame, title, name, "ITL p50"), "-", "{frame}");
    }
}

#[tokio::test]
async fn without_a_terminal_frames_repeat_as_plain_text() {
    let (url, scrapes) = scripted_metrics().await;
    let mut child = lingo_top()
        .args(["--url", &url, "--interval", "10ms"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut text = String::new();
    while text.matches("window ").count() < 3 {
        let line = lines.next_line().await.unwrap().expect("top exited early");
        text.push_str(&line);
        text.push('\n');
    }
    child.kill().await.unwrap();
    assert!(scrapes.load(Ordering::SeqCst) >= 3);
    assert!(!text.contains('\x1b'), "escape codes in {text:?}");
    // The first frame spans PREV to CUR; the later ones CUR to CUR, so nothing happened.
    let frames: Vec<&str> = text.split("\n\nwindow ").collect();
    assert_eq!(cell(frames[0], "total", "all", "reqs"), "4", "{text}");
    assert_eq!(cell(frames[1], "total", "all", "reqs"), "0", "{text}");
    assert_eq!(
        cell(frames[1], "model", "mock-model", "out tok"),
        "0",
        "{text}"
    );
}

#[tokio::test]
async fn once_fails_when_there_is_no_metrics_endpoint() {
    let url = serve(Router::new()).await;
    let out = lingo_top()
        .args(["--once", "--url", &url])
        .env("RUST_BACKTRACE", "0")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is a lingo proxy listening") && err.contains("404"),
        "{err}"
    );
}

#[tokio::test]
async fn view_endpoints_prints_the_endpoints_frame() {
    let (url, _) = scripted_metrics().await;
    let out = lingo_top()
        .args(["--once", "--interval", "10ms", "--url", &url])
        .args(["--view", "endpoints"])
        .output()
        .await
        .unwrap();
    let frame = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The scripted lingo has no fleet: no endpoint rows, but its one group's latency.
    assert!(
        frame.contains("\npool ") && frame.contains("(no endpoints"),
        "{frame}"
    );
    assert_eq!(
        row(&frame, "group", "default")[1..],
        ["15.0ms", "-"],
        "{frame}"
    );
    assert!(!frame.contains("\nmodel "), "{frame}");
}

#[tokio::test]
async fn groups_prints_one_row_per_upstream_group() {
    let (url, _) = scripted_metrics().await;
    let out = lingo_top()
        .args(["--once", "--interval", "10ms", "--url", &url, "--groups"])
        .output()
        .await
        .unwrap();
    let frame = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(frame.contains("\ngroup "), "{frame}");
    assert!(
        !frame.contains("\nmodel ") && !frame.contains("\npool "),
        "{frame}"
    );
    // The scripted lingo's one group, with the models view's columns.
    assert_eq!(row(&frame, "group", "default").len(), 12, "{frame}");
}
