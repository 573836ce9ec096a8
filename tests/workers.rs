//! `--workers n`: client connections served on n single-threaded runtimes, by default one
//! per core, 0 for tokio's shared runtime. Requests over many connections at once all
//! answer and are each counted once, and HTTP/2 streams on one connection are served (the
//! drain under workers: `tests/drain.rs`).

#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
mod common;

use std::time::Duration;

use lingo::mock::MockKind;
use serde_json::json;

const BOUND: Duration = Duration::from_secs(20);

#[tokio::test]
async fn by_default_one_worker_per_core_and_none_with_0() {
    let mock = common::mock(MockKind::Vllm).await;
    let url = mock.url();
    let cores = std::thread::available_parallelism().unwrap().get();
    for (flags, want) in [(vec![], Some(cores)), (vec!["--workers", "0"], None)] {
        let mut args = vec!["--upstream", &url, "--upstream-kind", "vllm"];
        args.extend(flags);
        let mut lingo = child::spawn(None, &args).await;
        let body = json!({"model": "mock-model", "prompt": "a b", "max_tokens": 2});
        let resp = common::client()
            .post(format!("{}/v1/completions", lingo.url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        // The main thread may log the workers after one of them has answered.
        let field = want.map(|n| format!("workers={n}"));
        let has = |log: &str| log.split_whitespace().any(|w| Some(w) == field.as_deref());
        if want.is_some() {
            let logged = common::eventually(|| has(&lingo.log())).await;
            assert!(logged, "want {field:?}:\n{}", lingo.log());
        }
        let log = lingo.log();
        assert_eq!(log.contains("worker threads"), want.is_some(), "{log}");
        lingo.signal("TERM");
        let status = lingo.exit_status(BOUND).await;
        assert!(status.success(), "{status:?}\n{log}");
    }
}

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

/// `proxy::serve` embedded in a runtime that shuts down (as each in-process test's does):
/// its worker threads stop with it and close their copies of the listening socket, so
/// nothing of lingo outlives the runtime (the request log's writer waits for their state).
#[test]
fn serve_dropped_with_its_runtime_stops_its_workers() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = rt.block_on(async {
        let mock = common::mock(MockKind::Vllm).await;
        let mut config = common::config_for(&mock.url(), lingo::upstream::KindSetting::Vllm);
        config.workers = Some(2);
        let addr = common::serving(config).await;
        let body = json!({"model": "mock-model", "prompt": "a b", "max_tokens": 2});
        let resp = common::client()
            .post(format!("http://{addr}/v1/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        addr
    });
    drop(rt);
    // A socket still open anywhere takes the connection into its backlog.
    let check = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let closed = check.block_on(common::eventually(|| {
        std::net::TcpStream::connect(addr).is_err()
    }));
    assert!(closed, "a worker still listens on {addr}");
}
