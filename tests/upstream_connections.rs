//! The upstream connection pool against a server that closes idle keep-alive connections
//! without saying so (llama.cpp's cpp-httplib after a stream, uvicorn after its keep-alive
//! timeout): a request that lands on such a connection is sent again on a fresh one.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use lingo::upstream::KindSetting;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BODY: &str = r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" ok","finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;

/// Read one HTTP request (headers and a Content-Length body); false at end of stream.
async fn read_request(sock: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < end + 4 + len {
                let n = sock.read(&mut byte).await.unwrap();
                buf.extend_from_slice(&byte[..n]);
            }
            return true;
        }
        let n = sock.read(&mut byte).await.unwrap_or(0);
        if n == 0 {
            return false;
        }
        buf.extend_from_slice(&byte[..n]);
    }
}

/// Answers the first request of each connection, then drops the connection when the
/// second one arrives, as if it had timed out while idle.
async fn one_request_per_connection(listener: TcpListener, connections: Arc<AtomicUsize>) {
    loop {
        let (mut sock, _) = listener.accept().await.unwrap();
        connections.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            if !read_request(&mut sock).await {
                return;
            }
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{BODY}",
                BODY.len()
            );
            sock.write_all(resp.as_bytes()).await.unwrap();
            read_request(&mut sock).await; // and close without answering
        });
    }
}

#[tokio::test]
async fn a_request_on_a_connection_the_server_dropped_is_sent_again() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    tokio::spawn(one_request_per_connection(listener, connections.clone()));
    let mut cfg = config_for(&url, KindSetting::Vllm);
    cfg.upstream.model = Some("m".into());
    let base = lingo(cfg).await;
    for i in 0..3 {
        let r = post_json(
            &format!("{base}/generate"),
            &json!({"text": "x", "sampling_params": {"max_new_tokens": 1}}),
        )
        .await;
        assert_eq!(r.status(), 200, "request {i}: {}", r.text().await.unwrap());
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["text"], " ok");
    }
    assert!(
        connections.load(Ordering::SeqCst) >= 3,
        "each request needed a fresh connection"
    );
}

/// An `https://` upstream is spoken to in TLS: the first bytes lingo sends are a TLS
/// handshake record, and a server that does not answer in TLS gives the client a 502 in its
/// own dialect.
#[tokio::test]
async fn https_upstreams_get_a_tls_handshake() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let first_bytes = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 3];
        sock.read_exact(&mut head).await.unwrap();
        sock.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            .await
            .unwrap();
        head
    });
    let mut config = config_for(&format!("https://{addr}"), KindSetting::Vllm);
    config.upstream.model = Some("m".into());
    config.validate().unwrap();
    let base = lingo(config).await;
    let resp = post_json(
        &format!("{base}/v1/completions"),
        &json!({"model": "m", "prompt": "a", "max_tokens": 1}),
    )
    .await;
    assert_eq!(resp.status(), 502);
    let v: Value = resp.json().await.unwrap();
    assert!(v["error"]["message"].is_string(), "{v}");
    let head = first_bytes.await.unwrap();
    // A TLS record: content type 22 (handshake), protocol major version 3.
    assert_eq!(&head[..2], &[0x16, 0x03], "{head:?}");
}
