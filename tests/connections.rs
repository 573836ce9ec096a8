//! Client connections over real sockets: silent, half-sent and slowloris connections are
//! closed by `client_header`, idle keep-alive ones by `client_idle` (HTTP/1 and HTTP/2), a
//! long stream is not idle, and a lingo with a small open-file limit keeps serving while
//! idle connections pile up past it.

#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
mod common;

use std::net::SocketAddr;
use std::time::Duration;

use lingo::config::Config;
use lingo::mock::{MockConfig, MockKind};
use lingo::upstream::KindSetting;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longer than any timeout configured here: what a test waits at most for a closure.
const BOUND: Duration = Duration::from_secs(20);

fn config(upstream: &str, header: Duration, idle: Duration) -> Config {
    let mut c = common::config_for(upstream, KindSetting::Vllm);
    c.timeouts.client_header = header;
    c.timeouts.client_idle = idle;
    c
}

/// lingo's own server (not `app`), in this process.
async fn lingo(config: Config) -> SocketAddr {
    common::serving(config).await
}

/// Read until lingo closes the connection; what it sent before (`None`: not closed in time).
async fn until_closed(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(BOUND, read).await.ok().map(|_| got)
}

/// A normal client's completion through lingo, on a fresh connection.
async fn served(base: &str) {
    let resp = common::post_json(
        &format!("{base}/v1/completions"),
        &json!({"model": "mock-model", "prompt": "a b", "max_tokens": 3}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(body["choices"][0]["text"].is_string(), "{body}");
}

#[tokio::test]
async fn silent_and_half_sent_connections_close_while_others_are_served() {
    let mock = common::mock(MockKind::Vllm).await;
    let short = Duration::from_millis(300);
    let addr = lingo(config(&mock.url(), short, Duration::from_secs(60))).await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: lingo\r\nContent-")
        .await
        .unwrap();
    served(&format!("http://{addr}")).await;
    assert_eq!(until_closed(&mut silent).await, Some(vec![]), "silent");
    // Closed without an answer: there is no request to answer.
    assert_eq!(until_closed(&mut half).await, Some(vec![]), "half-sent");
}

#[tokio::test]
async fn a_slowloris_is_closed_before_its_headers_end() {
    let mock = common::mock(MockKind::Vllm).await;
    let header = Duration::from_millis(500);
    let addr = lingo(config(&mock.url(), header, Duration::from_secs(60))).await;
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = s.into_split();
    w.write_all(b"GET /ready HTTP/1.1\r\nHost: lingo\r\nX-Slow: ")
        .await
        .unwrap();
    let mut closed = tokio::spawn(async move {
        let mut buf = [0u8; 64];
        matches!(r.read(&mut buf).await, Ok(0) | Err(_))
    });
    // One header byte every 100 ms: 100 of them would take 10 s, twenty times the timeout.
    let mut sent = 0;
    let cut = loop {
        tokio::select! {
            c = &mut closed => break c.unwrap(),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        if sent == 100 || w.write_all(b"a").await.is_err() {
            break false;
        }
        sent += 1;
    };
    assert!(cut, "still open after {sent} header bytes");
    served(&format!("http://{addr}")).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_closes_after_client_idle() {
    let mock = common::mock(MockKind::Vllm).await;
    let addr = lingo(config(
        &mock.url(),
        Duration::from_secs(60),
        Duration::from_millis(300),
    ))
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /ready HTTP/1.1\r\nHost: lingo\r\n\r\n")
        .await
        .unwrap();
    // The answer comes, then nothing more is asked: the connection closes.
    let got = until_closed(&mut s)
        .await
        .expect("idle connection kept open");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("ready\n"), "{text}");
}

#[tokio::test]
async fn a_long_stream_is_not_idle() {
    let mock = common::mock_with(MockConfig {
        itl: Duration::from_millis(60),
        ..MockConfig::default()
    })
    .await;
    // 16 tokens 60 ms apart take about three times `client_idle`.
    let idle = Duration::from_millis(300);
    let addr = lingo(config(&mock.url(), idle, idle)).await;
    let body = json!({"model": "mock-model", "prompt": "a b", "max_tokens": 16,
                      "ignore_eos": true, "stream": true});
    let resp = common::post_json(&format!("http://{addr}/v1/completions"), &body).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let events = common::sse_events(&text);
    assert_eq!(events.last(), Some(&json!("[DONE]")), "{text}");
    assert_eq!(events.len(), 17, "{text}");
}

type H2Body = http_body_util::Full<bytes::Bytes>;

/// An HTTP/2 connection to lingo (idle clock `idle`) in front of a vLLM mock: the mock (kept
/// alive), lingo's address, the sender and the connection's task.
async fn h2(
    idle: Duration,
) -> (
    common::Mock,
    SocketAddr,
    hyper::client::conn::http2::SendRequest<H2Body>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let mock = common::mock(MockKind::Vllm).await;
    let addr = lingo(config(&mock.url(), Duration::from_secs(60), idle)).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    (mock, addr, send, tokio::spawn(conn))
}

#[tokio::test]
async fn http2_gets_the_idle_clock_too() {
    use http_body_util::BodyExt;

    let (_mock, addr, mut send, conn) = h2(Duration::from_millis(300)).await;
    let req = http::Request::get(format!("http://{addr}/ready"))
        .body(H2Body::default())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"ready\n");
    // No further stream: lingo sends GOAWAY and the connection ends.
    let ended = tokio::time::timeout(BOUND, conn).await;
    assert!(ended.is_ok(), "HTTP/2 connection kept open while idle");
}

#[tokio::test]
async fn a_whole_answer_has_its_length_over_http2_too() {
    use http_body_util::BodyExt;

    let (_mock, addr, mut send, conn) = h2(Duration::from_secs(60)).await;
    let body = json!({"model": "mock-model", "prompt": "a b", "max_tokens": 3}).to_string();
    let req = http::Request::post(format!("http://{addr}/v1/completions"))
        .header("content-type", "application/json")
        .body(H2Body::new(bytes::Bytes::from(body)))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let length = resp.headers().get(http::header::CONTENT_LENGTH).cloned();
    let got = resp.into_body().collect().await.unwrap().to_bytes();
    let length: usize = length
        .expect("a content-length")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(length, got.len());
    conn.abort();
}

/// Idle connections past the open-file limit, held open, then fresh clients; lingo's log.
async fn pile_up_then_serve(max_connections: Option<&str>) -> String {
    let mock = common::mock(MockKind::Vllm).await;
    let url = mock.url();
    // Long clocks: what frees room is the reclaiming of idle connections, not a timeout.
    let mut args = vec![
        "--upstream",
        &url,
        "--upstream-kind",
        "vllm",
        "--timeout-client-header",
        "60s",
        "--timeout-client-idle",
        "60s",
    ];
    if let Some(n) = max_connections {
        args.extend(["--max-connections", n]);
    }
    let lingo = child::spawn(Some(128), &args).await;
    let mut held = Vec::new();
    for i in 0..300 {
        match TcpStream::connect(lingo.addr).await {
            Ok(tcp) => held.push(tcp),
            Err(e) => panic!("connection {i}: {e}\n{}", lingo.log()),
        }
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(BOUND)
        .build()
        .unwrap();
    for i in 0..5 {
        let resp = client
            .post(format!("{}/v1/completions", lingo.url()))
            .json(&json!({"model": "mock-model", "prompt": "a b", "max_tokens": 3}))
            .send()
            .await;
        match resp {
            Ok(r) => assert_eq!(r.status(), 200, "request {i}:\n{}", lingo.log()),
            Err(e) => panic!("request {i}: {e}\n{}", lingo.log()),
        }
    }
    drop(held);
    lingo.log()
}

#[tokio::test]
async fn a_small_open_file_limit_keeps_serving_as_idle_connections_pile_up() {
    let log = pile_up_then_serve(None).await;
    assert!(!log.contains("cap lowered"), "{log}");
}

#[tokio::test]
async fn out_of_descriptors_the_accept_loop_backs_off_and_reclaims() {
    // A cap above the limit: accept itself fails with EMFILE, and the cap comes down so that
    // a connection let in still has a descriptor for its upstream connection.
    let log = pile_up_then_serve(Some("1000")).await;
    assert!(log.contains("cap lowered"), "{log}");
}
