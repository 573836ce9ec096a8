//! `--workers n`: client connections served on n single-threaded runtimes. Requests over
//! many connections at once all answer and are each counted once, and HTTP/2 streams on
//! one connection are served (the drain under workers: `tests/drain.rs`).

#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
mod common;

use std::time::Duration;

use lingo::mock::MockKind;
use serde_json::json;

const BOUND: Duration = Duration::from_secs(20);

async fn lingo_with_workers(mock: &common::Mock, grace: &str) -> child::Lingo {
    let url = mock.url();
    let args = [
        "--upstream",
        &url,
        "--upstream-kind",
        "vllm",
        "--workers",
        "2",
        "--timeout-shutdown-grace",
        grace,
    ];
    child::spawn(None, &args).await
}

#[tokio::test]
async fn requests_over_many_connections_answer_and_are_counted_once() {
    let mock = common::mock(MockKind::Vllm).await;
    let mut lingo = lingo_with_workers(&mock, "5s").await;
    let url = format!("{}/v1/completions", lingo.url());
    // 16 clients (their own connection pools) of 8 requests each, half of them streamed.
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..16 {
        let url = url.clone();
        tasks.spawn(async move {
            let client = common::client();
            let mut tokens = 0;
            for i in 0..8 {
                let stream = (c + i) % 2 == 0;
                let body = json!({"model": "mock-model", "prompt": "a b", "max_tokens": 4,
                                  "ignore_eos": true, "stream": stream});
                let resp = client.post(&url).json(&body).send().await.unwrap();
                assert_eq!(resp.status(), 200);
                let text = resp.text().await.unwrap();
                tokens += match stream {
                    true => common::sse_events(&text).len() - 1,
                    false => {
                        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                        v["usage"]["completion_tokens"].as_u64().unwrap() as usize
                    }
                };
            }
            tokens
        });
    }
    let mut tokens = 0;
    while let Some(t) = tokio::time::timeout(BOUND, tasks.join_next())
        .await
        .unwrap()
    {
        tokens += t.unwrap();
    }
    assert_eq!(tokens, 16 * 8 * 4);
    let text = common::scrape(&lingo.url()).await;
    let counted = common::sum(&text, "lingo_requests_total", &[("outcome", "ok")]);
    assert_eq!(counted, 128.0, "{text}");
    let on_workers = common::eventually(|| lingo.log().contains("workers=2")).await;
    assert!(on_workers, "no worker threads started:\n{}", lingo.log());
    lingo.signal("TERM");
    let status = lingo.exit_status(BOUND).await;
    assert!(status.success(), "{status:?}\n{}", lingo.log());
}

#[tokio::test]
async fn http2_streams_on_one_connection_are_served_by_a_worker() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let mock = common::mock(MockKind::Vllm).await;
    let mut lingo = lingo_with_workers(&mock, "5s").await;
    let tcp = tokio::net::TcpStream::connect(lingo.addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let body = json!({"model": "mock-model", "prompt": "a b", "max_tokens": 4,
                      "ignore_eos": true});
    let mut streams = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let mut send = send.clone();
        let req = http::Request::post(format!("http://{}/v1/completions", lingo.addr))
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from(body.to_string())))
            .unwrap();
        streams.spawn(async move {
            let resp = send.send_request(req).await.unwrap();
            assert_eq!(resp.version(), http::Version::HTTP_2);
            assert_eq!(resp.status(), 200);
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            v["usage"]["completion_tokens"].as_u64().unwrap()
        });
    }
    let mut tokens = 0;
    while let Some(t) = tokio::time::timeout(BOUND, streams.join_next())
        .await
        .unwrap()
    {
        tokens += t.unwrap();
    }
    assert_eq!(tokens, 8 * 4);
    lingo.signal("TERM");
    let status = lingo.exit_status(BOUND).await;
    assert!(status.success(), "{status:?}\n{}", lingo.log());
}
