//! The mock's fault modes over real sockets: raw HTTP/1.1 over a `TcpStream`, so a test sees
//! exactly which bytes arrived, whether the chunked body ended, and how the connection closed.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lingo::mock::{FaultMode, MockConfig, MockKind, MockState, MockStats};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Upper bound on any wait, so a broken mode fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(20);

struct Mock {
    addr: SocketAddr,
    state: Arc<MockState>,
}

async fn spawn(config: MockConfig) -> Mock {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = MockState::new(config);
    tokio::spawn(lingo::mock::serve_with(listener, state.clone()));
    Mock { addr, state }
}

async fn mock(kind: MockKind) -> Mock {
    spawn(MockConfig {
        kind,
        ..MockConfig::default()
    })
    .await
}

/// A generation request for `kind`: path and JSON body, streaming or not, 12 tokens.
fn generation(kind: MockKind, stream: bool, prompt: &str) -> (&'static str, Value) {
    match kind {
        MockKind::Vllm | MockKind::Sglang => (
            "/v1/completions",
            json!({"model": "mock-model", "prompt": prompt, "max_tokens": 12,
                   "stream": stream, "ignore_eos": true}),
        ),
        // OpenAI's API rejects undocumented fields such as `ignore_eos`.
        MockKind::Openai => (
            "/v1/completions",
            json!({"model": "mock-model", "prompt": prompt, "max_tokens": 12, "stream": stream}),
        ),
        MockKind::Tgi => (
            if stream {
                "/generate_stream"
            } else {
                "/generate"
            },
            json!({"inputs": prompt, "parameters": {"max_new_tokens": 12}}),
        ),
        MockKind::Llamacpp => (
            "/completion",
            json!({"prompt": prompt, "n_predict": 12, "stream": stream, "ignore_eos": true}),
        ),
        MockKind::Ollama => (
            "/api/generate",
            json!({"model": "mock-model", "prompt": prompt, "stream": stream,
                   "options": {"num_predict": 12}}),
        ),
    }
}

/// Opens a connection and writes one request (`Connection: close`) with extra headers.
async fn send(addr: SocketAddr, path: &str, body: &Value, headers: &[(&str, &str)]) -> TcpStream {
    let body = body.to_string();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
    tcp
}

/// How reading a connection ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Eof,
    Reset,
    /// `until` held (the connection is still open).
    Reached,
}

/// Reads until EOF, a reset, or `until(received)` holds.
async fn read(tcp: &mut TcpStream, until: impl Fn(&[u8]) -> bool) -> (Vec<u8>, End) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    let end = tokio::time::timeout(BOUND, async {
        loop {
            if until(&got) {
                return End::Reached;
            }
            match tcp.read(&mut buf).await {
                Ok(0) => return End::Eof,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return End::Reset,
                Err(e) => panic!("read: {e}"),
            }
        }
    })
    .await
    .expect("the mock neither answered nor closed");
    (got, end)
}

async fn read_to_end(tcp: &mut TcpStream) -> (Vec<u8>, End) {
    read(tcp, |_| false).await
}

/// Nothing more is readable right now (the mock is silent, the connection open).
fn silent(tcp: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(tcp.try_read(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

fn head_end(raw: &[u8]) -> Option<usize> {
    raw.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn status(raw: &[u8]) -> u16 {
    std::str::from_utf8(&raw[9..12]).unwrap().parse().unwrap()
}

fn header<'a>(raw: &'a [u8], name: &str) -> Option<&'a str> {
    let head = std::str::from_utf8(&raw[..head_end(raw)?]).ok()?;
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The body after the head, its chunked framing removed; `true` if the terminator arrived.
fn dechunk(raw: &[u8]) -> (Vec<u8>, bool) {
    let mut rest = &raw[head_end(raw).unwrap()..];
    if header(raw, "transfer-encoding") != Some("chunked") {
        return (rest.to_vec(), true);
    }
    let mut body = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (body, false);
        };
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap(), 16).unwrap();
        if size == 0 {
            return (body, rest.len() >= eol + 4);
        }
        let Some(chunk) = rest.get(eol + 2..eol + 2 + size) else {
            body.extend_from_slice(&rest[eol + 2..]);
            return (body, false);
        };
        body.extend_from_slice(chunk);
        rest = rest.get(eol + 4 + size..).unwrap_or_default();
    }
}

/// Token events in a (partial) raw stream of `kind`.
fn events(kind: MockKind, raw: &[u8]) -> usize {
    let (body, _) = dechunk(raw);
    count_events(kind, &String::from_utf8_lossy(&body))
}

fn count_events(kind: MockKind, text: &str) -> usize {
    match kind {
        MockKind::Ollama => text.matches("\"done\":false").count(),
        _ => text.matches("data:").count(),
    }
}

async fn wait(state: &MockState, what: &str, pred: impl Fn(&MockStats) -> bool) {
    if tokio::time::timeout(BOUND, state.wait_for(pred))
        .await
        .is_err()
    {
        panic!("mock never reached: {what}; stats {:?}", state.stats());
    }
}

/// Drops the client side and waits for the mock to count the abort.
async fn close_and_expect_abort(mock: &Mock, tcp: TcpStream) {
    drop(tcp);
    wait(&mock.state, "aborted", |s| {
        s.aborted == 1 && s.in_flight == 0
    })
    .await;
}

const FAULT: &str = "x-mock-fault";

// One test per mode, vLLM and SGLang, header trigger.

async fn hang_before_headers(kind: MockKind) {
    let m = mock(kind).await;
    let (path, body) = generation(kind, true, "hello");
    let tcp = send(m.addr, path, &body, &[(FAULT, "hang-before-headers")]).await;
    wait(&m.state, "in flight", |s| s.in_flight == 1).await;
    assert!(silent(&tcp), "a hanging mock sent bytes");
    assert_eq!(m.state.stats().faults.get(FaultMode::HangBeforeHeaders), 1);
    close_and_expect_abort(&m, tcp).await;
}

#[tokio::test]
async fn hang_before_headers_vllm_and_sglang() {
    hang_before_headers(MockKind::Vllm).await;
    hang_before_headers(MockKind::Sglang).await;
}

async fn hang_after_headers(kind: MockKind, stream: bool) {
    let m = mock(kind).await;
    let (path, body) = generation(kind, stream, "hello");
    let mut tcp = send(m.addr, path, &body, &[(FAULT, "hang-after-headers")]).await;
    let (raw, end) = read(&mut tcp, |r| head_end(r).is_some()).await;
    assert_eq!(end, End::Reached);
    assert_eq!(status(&raw), 200);
    assert_eq!(head_end(&raw), Some(raw.len()), "a body byte arrived");
    assert_eq!(header(&raw, "transfer-encoding"), Some("chunked"));
    let ct = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    assert_eq!(header(&raw, "content-type"), Some(ct));
    wait(&m.state, "in flight", |s| s.in_flight == 1).await;
    assert!(silent(&tcp));
    close_and_expect_abort(&m, tcp).await;
}

#[tokio::test]
async fn hang_after_headers_vllm_and_sglang() {
    for kind in [MockKind::Vllm, MockKind::Sglang] {
        hang_after_headers(kind, true).await;
        hang_after_headers(kind, false).await;
    }
}

async fn stall_stream(kind: MockKind, path: &str, body: Value) {
    let m = mock(kind).await;
    let mut tcp = send(m.addr, path, &body, &[(FAULT, "stall-mid-stream")]).await;
    let (raw, end) = read(&mut tcp, |r| head_end(r).is_some() && events(kind, r) >= 3).await;
    assert_eq!(end, End::Reached);
    assert_eq!(status(&raw), 200);
    let (body, ended) = dechunk(&raw);
    assert!(!ended);
    assert!(!String::from_utf8_lossy(&body).contains("[DONE]"));
    assert!(silent(&tcp), "more than 3 events arrived");
    assert_eq!(m.state.stats().in_flight, 1);
    assert_eq!(m.state.stats().faults.get(FaultMode::StallMidStream), 1);
    close_and_expect_abort(&m, tcp).await;
}

#[tokio::test]
async fn stall_mid_stream_sends_three_tokens_then_nothing() {
    let (path, body) = generation(MockKind::Vllm, true, "hello");
    stall_stream(MockKind::Vllm, path, body).await;
    let (path, body) = generation(MockKind::Sglang, true, "hello");
    stall_stream(MockKind::Sglang, path, body).await;
    let native = json!({"text": "hello", "stream": true,
                        "sampling_params": {"max_new_tokens": 12, "ignore_eos": true}});
    stall_stream(MockKind::Sglang, "/generate", native).await;
}

#[tokio::test]
async fn stall_mid_stream_whole_answer_sends_half_its_body() {
    for kind in [MockKind::Vllm, MockKind::Sglang] {
        let m = mock(kind).await;
        let (path, body) = generation(kind, false, "hello");
        let mut tcp = send(m.addr, path, &body, &[(FAULT, "stall-mid-stream")]).await;
        // The half body is one chunk: wait for its size line and bytes.
        let (raw, end) = read(&mut tcp, |r| {
            head_end(r).is_some_and(|h| {
                let (b, _) = dechunk(r);
                r.len() > h && !b.is_empty() && r.ends_with(b"\r\n")
            })
        })
        .await;
        assert_eq!(end, End::Reached);
        assert_eq!(status(&raw), 200);
        assert_eq!(header(&raw, "content-length"), None);
        let (half, ended) = dechunk(&raw);
        assert!(!ended);
        let err = serde_json::from_slice::<Value>(&half).unwrap_err();
        assert!(err.is_eof(), "not a cut JSON body: {err}");
        assert!(silent(&tcp));
        assert_eq!(m.state.stats().in_flight, 1);
        close_and_expect_abort(&m, tcp).await;
    }
}

async fn close_mid_stream(kind: MockKind, stream: bool) {
    let m = mock(kind).await;
    let (path, body) = generation(kind, stream, "hello");
    let mut tcp = send(m.addr, path, &body, &[(FAULT, "close-mid-stream")]).await;
    let (raw, end) = read_to_end(&mut tcp).await;
    assert_ne!(end, End::Reached);
    assert_eq!(status(&raw), 200);
    let (body, ended) = dechunk(&raw);
    assert!(!ended, "the chunked terminator arrived");
    if stream {
        assert_eq!(events(kind, &raw), 3);
        assert!(!String::from_utf8_lossy(&body).contains("[DONE]"));
    } else {
        assert!(serde_json::from_slice::<Value>(&body).unwrap_err().is_eof());
    }
    wait(&m.state, "failed", |s| s.failed == 1 && s.in_flight == 0).await;
    assert_eq!(m.state.stats().faults.get(FaultMode::CloseMidStream), 1);
}

#[tokio::test]
async fn close_mid_stream_cuts_the_body() {
    for kind in [MockKind::Vllm, MockKind::Sglang] {
        close_mid_stream(kind, true).await;
        close_mid_stream(kind, false).await;
    }
}

async fn malformed(kind: MockKind) {
    let m = mock(kind).await;
    let (path, body) = generation(kind, true, "hello");
    let mut tcp = send(m.addr, path, &body, &[(FAULT, "malformed-chunk")]).await;
    let (raw, end) = read_to_end(&mut tcp).await;
    assert_eq!(end, End::Eof);
    let (body, ended) = dechunk(&raw);
    assert!(ended);
    let text = String::from_utf8(body).unwrap();
    let payloads: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    let bad: Vec<usize> = (0..payloads.len())
        .filter(|i| {
            payloads[*i] != "[DONE]" && serde_json::from_str::<Value>(payloads[*i]).is_err()
        })
        .collect();
    assert_eq!(bad, [2], "events: {payloads:?}");
    assert_eq!(payloads.last(), Some(&"[DONE]"));
    // Twelve tokens, the broken event and [DONE].
    assert_eq!(payloads.len(), 14);
    wait(&m.state, "completed", |s| s.completed == 1).await;
}

#[tokio::test]
async fn malformed_chunk_breaks_one_event_and_finishes() {
    malformed(MockKind::Vllm).await;
    malformed(MockKind::Sglang).await;
}

#[tokio::test]
async fn reset_closes_before_any_byte() {
    for kind in [MockKind::Vllm, MockKind::Sglang] {
        let m = mock(kind).await;
        let (path, body) = generation(kind, true, "hello");
        let mut tcp = send(m.addr, path, &body, &[(FAULT, "reset")]).await;
        let (raw, end) = read_to_end(&mut tcp).await;
        assert!(raw.is_empty(), "got {} bytes", raw.len());
        assert_eq!(end, End::Reset);
        wait(&m.state, "failed", |s| s.failed == 1 && s.in_flight == 0).await;
        assert_eq!(m.state.stats().faults.get(FaultMode::Reset), 1);
    }
}

#[tokio::test]
async fn reset_without_the_mock_listener_still_closes() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = MockState::new(MockConfig::default());
    let app = lingo::mock::router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (path, body) = generation(MockKind::Vllm, true, "hello");
    let mut tcp = send(addr, path, &body, &[(FAULT, "reset")]).await;
    let (raw, end) = read_to_end(&mut tcp).await;
    assert!(raw.is_empty());
    assert_ne!(end, End::Reached);
}

async fn huge_error(kind: MockKind, stream: bool) -> Value {
    let m = mock(kind).await;
    let (path, body) = generation(kind, stream, "hello");
    let headers = [(FAULT, "huge-error"), ("x-mock-fault-bytes", "1000000")];
    let mut tcp = send(m.addr, path, &body, &headers).await;
    let (raw, end) = read_to_end(&mut tcp).await;
    assert_eq!(end, End::Eof);
    assert_eq!(status(&raw), 400);
    let (body, ended) = dechunk(&raw);
    assert!(ended);
    assert_eq!(body.len(), 1_000_000);
    wait(&m.state, "failed", |s| s.failed == 1).await;
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn huge_error_is_a_400_in_the_kinds_shape() {
    let v = huge_error(MockKind::Vllm, true).await;
    assert_eq!(v["error"]["code"], 400);
    assert!(v["error"]["message"].as_str().unwrap().len() > 999_000);
    let v = huge_error(MockKind::Sglang, false).await;
    assert_eq!(v["object"], "error");
    assert!(v["message"].as_str().unwrap().len() > 999_000);
}

#[tokio::test]
async fn huge_error_defaults_to_fifty_mib() {
    let m = mock(MockKind::Vllm).await;
    let (path, body) = generation(MockKind::Vllm, false, "hello");
    let mut tcp = send(m.addr, path, &body, &[(FAULT, "huge-error")]).await;
    let (raw, _) = read_to_end(&mut tcp).await;
    let (body, ended) = dechunk(&raw);
    assert!(ended);
    assert_eq!(body.len(), 50 << 20);
}

#[tokio::test]
async fn slow_tokens_spaces_the_tokens() {
    for kind in [MockKind::Vllm, MockKind::Sglang] {
        let m = mock(kind).await;
        let (path, mut body) = generation(kind, true, "hello");
        body["max_tokens"] = json!(5);
        let started = Instant::now();
        let headers = [(FAULT, "slow-tokens"), ("x-mock-fault-ms", "20")];
        let mut tcp = send(m.addr, path, &body, &headers).await;
        let (raw, end) = read_to_end(&mut tcp).await;
        assert_eq!(end, End::Eof);
        assert!(dechunk(&raw).1);
        assert_eq!(events(kind, &raw), 6); // five tokens and [DONE]
                                           // A lower bound only: four gaps of at least 20 ms each.
        assert!(started.elapsed() >= Duration::from_millis(80));
        wait(&m.state, "completed", |s| s.completed == 1).await;
        assert_eq!(m.state.stats().faults.get(FaultMode::SlowTokens), 1);
    }
}

// Triggers.

/// Sends one request and returns its status (0: no response), reading it whole.
async fn status_of(m: &Mock, kind: MockKind, prompt: &str, headers: &[(&str, &str)]) -> u16 {
    let (path, body) = generation(kind, false, prompt);
    let mut tcp = send(m.addr, path, &body, headers).await;
    let (raw, _) = read_to_end(&mut tcp).await;
    if raw.len() < 12 {
        0
    } else {
        status(&raw)
    }
}

#[tokio::test]
async fn the_prompt_word_triggers_a_fault() {
    for kind in [MockKind::Vllm, MockKind::Sglang] {
        let m = mock(kind).await;
        assert_eq!(
            status_of(&m, kind, "hi lingo-fault:reset there", &[]).await,
            0
        );
        assert_eq!(status_of(&m, kind, "hi there", &[]).await, 200);
        assert_eq!(m.state.stats().faults.get(FaultMode::Reset), 1);
    }
    // In a chat message, too.
    let m = mock(MockKind::Vllm).await;
    let body = json!({"model": "mock-model", "max_tokens": 4, "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "lingo-fault:huge-error"}]});
    let headers = [("x-mock-fault-bytes", "5000")];
    let mut tcp = send(m.addr, "/v1/chat/completions", &body, &headers).await;
    let (raw, _) = read_to_end(&mut tcp).await;
    assert_eq!(status(&raw), 400);
    assert_eq!(dechunk(&raw).0.len(), 5000);
}

#[tokio::test]
async fn an_unknown_mode_is_a_400_naming_it() {
    let m = mock(MockKind::Vllm).await;
    let (path, body) = generation(MockKind::Vllm, false, "hello");
    let mut tcp = send(m.addr, path, &body, &[(FAULT, "explode")]).await;
    let (raw, _) = read_to_end(&mut tcp).await;
    assert_eq!(status(&raw), 400);
    assert!(String::from_utf8_lossy(&raw).contains("unknown fault mode `explode`"));
}

async fn control(m: &Mock, body: Value) {
    let resp = reqwest::Client::new()
        .post(format!("http://{}/mock/fault", m.addr))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn the_control_faults_the_next_n_requests() {
    let m = mock(MockKind::Sglang).await;
    control(&m, json!({"mode": "reset", "count": 2})).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(status_of(&m, MockKind::Sglang, "hello", &[]).await);
    }
    assert_eq!(got, [0, 0, 200]);
    // Default count 1; null disarms.
    control(&m, json!({"mode": "reset"})).await;
    assert_eq!(status_of(&m, MockKind::Sglang, "hello", &[]).await, 0);
    assert_eq!(status_of(&m, MockKind::Sglang, "hello", &[]).await, 200);
    control(&m, json!({"mode": "reset", "count": 5})).await;
    control(&m, json!({"mode": null})).await;
    assert_eq!(status_of(&m, MockKind::Sglang, "hello", &[]).await, 200);
    assert_eq!(m.state.stats().faults.get(FaultMode::Reset), 3);
    // Non-generation routes are never faulted.
    control(&m, json!({"mode": "reset"})).await;
    let models = reqwest::get(format!("http://{}/v1/models", m.addr))
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
}

#[tokio::test]
async fn the_whole_mock_fault_follows_the_rate() {
    let m = spawn(MockConfig {
        kind: MockKind::Vllm,
        fault: Some(FaultMode::HugeError),
        fault_rate: 0.5,
        fault_error_bytes: 2000,
        ..MockConfig::default()
    })
    .await;
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(status_of(&m, MockKind::Vllm, "hello", &[]).await);
    }
    assert_eq!(got, [200, 400, 200, 400, 200, 400]);
    // A per-request header wins over the whole-mock fault.
    let headers = [(FAULT, "reset")];
    assert_eq!(status_of(&m, MockKind::Vllm, "hello", &headers).await, 0);
    let s = m.state.stats();
    assert_eq!(
        (
            s.faults.get(FaultMode::HugeError),
            s.faults.get(FaultMode::Reset)
        ),
        (3, 1)
    );
    assert_eq!(s.faults.total(), 4);
}

#[tokio::test]
async fn stats_report_faults_by_mode_name() {
    let m = mock(MockKind::Vllm).await;
    assert_eq!(
        status_of(&m, MockKind::Vllm, "hello", &[(FAULT, "reset")]).await,
        0
    );
    let stats: Value = reqwest::get(format!("http://{}/mock/stats", m.addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["faults"]["reset"], 1);
    assert_eq!(stats["faults"]["hang-before-headers"], 0);
}

// Every kind supports every mode, streaming and whole.

/// The kind's malformed stream event.
fn malformed_payload(kind: MockKind) -> &'static str {
    match kind {
        MockKind::Ollama => "{\"model\":\"mock\",\"response\":\n",
        _ => "data: {\"choices\": [\n\n",
    }
}

async fn check(kind: MockKind, mode: FaultMode, stream: bool) {
    let what = format!("{} {mode} stream={stream}", kind.as_str());
    let m = mock(kind).await;
    let (path, body) = generation(kind, stream, &format!("say lingo-fault:{mode} now"));
    // Slow tokens at the 500 ms default would take long: 1 ms is enough to take the path.
    let headers = [("x-mock-fault-bytes", "3000"), ("x-mock-fault-ms", "1")];
    let mut tcp = send(m.addr, path, &body, &headers).await;
    match mode {
        FaultMode::HangBeforeHeaders => {
            wait(&m.state, &what, |s| s.in_flight == 1).await;
            assert!(silent(&tcp), "{what}");
            close_and_expect_abort(&m, tcp).await;
        }
        FaultMode::HangAfterHeaders => {
            let (raw, _) = read(&mut tcp, |r| head_end(r).is_some()).await;
            assert_eq!(
                (status(&raw), head_end(&raw)),
                (200, Some(raw.len())),
                "{what}"
            );
            close_and_expect_abort(&m, tcp).await;
        }
        FaultMode::StallMidStream => {
            let enough = |r: &[u8]| match stream {
                true => head_end(r).is_some() && events(kind, r) >= 3,
                false => head_end(r).is_some() && !dechunk(r).0.is_empty(),
            };
            let (raw, end) = read(&mut tcp, enough).await;
            assert_eq!(end, End::Reached, "{what}");
            let (body, ended) = dechunk(&raw);
            assert!(!ended, "{what}");
            if !stream {
                assert!(serde_json::from_slice::<Value>(&body).unwrap_err().is_eof());
            }
            assert!(silent(&tcp), "{what}");
            close_and_expect_abort(&m, tcp).await;
        }
        FaultMode::CloseMidStream => {
            let (raw, end) = read_to_end(&mut tcp).await;
            assert_ne!(end, End::Reached, "{what}");
            let (body, ended) = dechunk(&raw);
            assert!(!ended, "{what}");
            if stream {
                assert_eq!(events(kind, &raw), 3, "{what}");
            } else {
                assert!(serde_json::from_slice::<Value>(&body).unwrap_err().is_eof());
            }
            wait(&m.state, &what, |s| s.failed == 1 && s.in_flight == 0).await;
        }
        FaultMode::MalformedChunk => {
            let (raw, end) = read_to_end(&mut tcp).await;
            assert_eq!(end, End::Eof, "{what}");
            let (body, ended) = dechunk(&raw);
            assert!(ended, "{what}");
            if stream {
                let text = String::from_utf8(body).unwrap();
                let at = text.find(malformed_payload(kind)).expect(&what);
                assert_eq!(count_events(kind, &text[..at]), 2, "{what}");
                assert!(events(kind, &raw) > 3, "{what}: the stream did not go on");
            } else {
                assert!(header(&raw, "content-length").is_some(), "{what}");
                assert!(serde_json::from_slice::<Value>(&body).is_err(), "{what}");
            }
            wait(&m.state, &what, |s| s.completed == 1).await;
        }
        FaultMode::Reset => {
            let (raw, end) = read_to_end(&mut tcp).await;
            assert_eq!((raw.len(), end), (0, End::Reset), "{what}");
            wait(&m.state, &what, |s| s.failed == 1).await;
        }
        FaultMode::HugeError => {
            let (raw, _) = read_to_end(&mut tcp).await;
            assert_eq!(status(&raw), 400, "{what}");
            let (body, ended) = dechunk(&raw);
            assert!(ended && body.len() == 3000, "{what}");
            let v: Value = serde_json::from_slice(&body).unwrap();
            assert!(v.to_string().contains("injected huge error"), "{what}");
            wait(&m.state, &what, |s| s.failed == 1).await;
        }
        FaultMode::SlowTokens => {
            let (raw, end) = read_to_end(&mut tcp).await;
            assert_eq!((status(&raw), end), (200, End::Eof), "{what}");
            assert!(dechunk(&raw).1, "{what}");
            wait(&m.state, &what, |s| s.completed == 1).await;
        }
    }
    assert_eq!(m.state.stats().faults.get(mode), 1, "{what}");
    assert_eq!(m.state.stats().faults.total(), 1, "{what}");
}

#[tokio::test]
async fn every_kind_supports_every_mode() {
    for kind in MockKind::ALL {
        for mode in FaultMode::ALL {
            check(kind, mode, true).await;
            check(kind, mode, false).await;
        }
    }
}
