//! A pool's mirror over real sockets: the client's answer is the same byte for byte with or
//! without one, the shadow group's metrics count exactly the mirrored requests, a slow
//! shadow never slows the client, the shadow's in-flight cap holds, and a shadow that
//! refuses connections is neither felt by the client nor retried.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use lingo::config::{Config, EndpointConfig, HealthConfig, MirrorConfig, PoolConfig};
use lingo::mock::{FaultMode, MockConfig, MockKind};
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

const GROUP: &str = "shadow";

fn mirror(urls: &[String], kind: KindSetting, fraction: f64, cap: usize) -> MirrorConfig {
    MirrorConfig {
        fraction,
        group: GROUP.into(),
        endpoints: urls.iter().map(|u| EndpointConfig::new(u, kind)).collect(),
        max_in_flight: cap,
    }
}

/// Pool `p` of `main`, with `mirror` if given.
fn config(main: &Mock, kind: KindSetting, mirror: Option<MirrorConfig>) -> Config {
    let mut c = Config::default();
    c.pools.insert(
        "p".into(),
        PoolConfig {
            endpoints: vec![EndpointConfig::new(&main.url(), kind)],
            mirror,
            ..PoolConfig::default()
        },
    );
    c.validate().unwrap();
    c
}

async fn mock_ttft(kind: MockKind, ttft: Duration) -> Mock {
    mock_with(MockConfig {
        kind,
        ttft,
        ..MockConfig::default()
    })
    .await
}

/// POST and read the whole body as bytes (asserting a 200).
async fn post_bytes(url: &str, body: &Value) -> bytes::Bytes {
    let r = post_json(url, body).await;
    assert_eq!(r.status(), 200, "{url}");
    r.bytes().await.unwrap()
}

fn chat(stream: bool) -> Value {
    json!({"model": "mock-model", "max_tokens": 6, "stream": stream,
           "messages": [{"role": "user", "content": "hello there"}]})
}

/// Scrape until `name` summed over `want` reaches `n` (bounded: 500 scrapes, 10 ms apart);
/// the last value seen.
async fn metric_reaches(base: &str, name: &str, want: &[(&str, &str)], n: f64) -> f64 {
    let mut v = 0.0;
    for _ in 0..500 {
        v = sum(&scrape(base).await, name, want);
        if v >= n {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    v
}

fn mirrored(text: &str, outcome: &str) -> f64 {
    let want = [("pool", "p"), ("group", GROUP), ("outcome", outcome)];
    sum(text, "lingo_mirror_requests_total", &want)
}

#[tokio::test]
async fn the_clients_answer_is_byte_identical_with_and_without_a_mirror() {
    // TGI's native answers carry no id or timestamp: identical requests to identical mocks
    // answer identically, which the first comparison checks before the mirror's.
    let plain_mock = mock(MockKind::Tgi).await;
    let mirrored_mock = mock(MockKind::Tgi).await;
    let shadow = mock(MockKind::Tgi).await;
    let plain = lingo(config(&plain_mock, KindSetting::Tgi, None)).await;
    let m = mirror(&[shadow.url()], KindSetting::Tgi, 1.0, 16);
    let with = lingo(config(&mirrored_mock, KindSetting::Tgi, Some(m))).await;
    let body = json!({"inputs": "hello there", "parameters": {"max_new_tokens": 8}});
    for path in ["/generate", "/generate_stream"] {
        let first = post_bytes(&format!("{plain}{path}"), &body).await;
        let again = post_bytes(&format!("{plain}{path}"), &body).await;
        assert_eq!(first, again, "{path}: the mock's answer is deterministic");
        let got = post_bytes(&format!("{with}{path}"), &body).await;
        assert_eq!(got, first, "{path}: the mirror changed the client's answer");
    }
    // The shadow got both requests, and answered them in full.
    assert!(eventually(|| shadow.state.stats().completed == 2).await);
    assert_eq!(mirrored(&scrape(&with).await, "sent"), 2.0);
    // The client's side is counted as the pool's, the shadow's under its group.
    let text = scrape(&with).await;
    let ok = |u: &str| sum(&text, "lingo_requests_total", &[("upstream", u)]);
    assert_eq!(ok("p"), 2.0, "{text}");
}

#[tokio::test]
async fn the_shadow_groups_metrics_count_the_mirrored_requests() {
    for (fraction, n, expect) in [(1.0, 12u32, 12.0), (0.25, 40, 10.0)] {
        let main = mock(MockKind::Vllm).await;
        let shadow = mock(MockKind::Vllm).await;
        let m = mirror(&[shadow.url()], KindSetting::Vllm, fraction, 16);
        let base = lingo(config(&main, KindSetting::Vllm, Some(m))).await;
        let url = format!("{base}/v1/chat/completions");
        for i in 0..n {
            post_bytes(&url, &chat(i % 2 == 0)).await;
        }
        let group = [("upstream", GROUP)];
        let seen = metric_reaches(&base, "lingo_requests_total", &group, expect).await;
        assert_eq!(seen, expect, "fraction {fraction}");
        let text = scrape(&base).await;
        let client = sum(&text, "lingo_requests_total", &[("upstream", "p")]);
        assert_eq!(client, f64::from(n));
        assert_eq!(mirrored(&text, "sent"), expect);
        assert_eq!(mirrored(&text, "dropped_cap"), 0.0);
        assert_eq!(shadow.state.stats().requests as f64, expect);
        // Latencies and tokens are the shadow's own, under its group.
        let ttft = "lingo_time_to_first_token_seconds_count";
        assert_eq!(sum(&text, ttft, &group), expect, "{text}");
        let tokens = sum(&text, "lingo_generation_tokens_total", &group);
        assert_eq!(tokens, shadow.state.stats().completion_tokens as f64);
        let ok = [("upstream", GROUP), ("outcome", "ok")];
        assert_eq!(sum(&text, "lingo_requests_total", &ok), expect);
    }
}

#[tokio::test]
async fn a_slow_shadow_never_slows_the_client() {
    let main = mock(MockKind::Vllm).await;
    let shadow = mock_ttft(MockKind::Vllm, Duration::from_secs(2)).await;
    let m = mirror(&[shadow.url()], KindSetting::Vllm, 1.0, 16);
    let base = lingo(config(&main, KindSetting::Vllm, Some(m))).await;
    let url = format!("{base}/v1/chat/completions");
    for stream in [false, true, false, true, false, true] {
        let t = Instant::now();
        post_bytes(&url, &chat(stream)).await;
        // The shadow takes 2 s to its first token; the client does not wait on it.
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    // Every request was mirrored and the shadows are still waiting on their first token.
    assert_eq!(mirrored(&scrape(&base).await, "sent"), 6.0);
    assert!(eventually(|| shadow.state.stats().requests == 6).await);
    let status = get_json(&format!("{base}/fleet")).await;
    let m = &status["pools"][0]["mirror"];
    assert_eq!(m["group"], GROUP);
    assert_eq!(m["fraction"], 1.0);
    assert_eq!(m["endpoints"][0]["group"], GROUP);
    assert!(m["in_flight"].as_u64().unwrap() >= 1, "{m}");
}

#[tokio::test]
async fn shadow_in_flight_stays_under_its_cap() {
    let main = mock(MockKind::Vllm).await;
    // Holds each stream 5 s before its first token, far longer than the client's requests.
    let shadow = mock_ttft(MockKind::Vllm, Duration::from_secs(5)).await;
    let m = mirror(&[shadow.url()], KindSetting::Vllm, 1.0, 2);
    let base = lingo(config(&main, KindSetting::Vllm, Some(m))).await;
    let url = format!("{base}/v1/chat/completions");
    for _ in 0..6 {
        post_bytes(&url, &chat(true)).await;
        assert!(shadow.state.stats().in_flight <= 2);
    }
    let text = scrape(&base).await;
    assert_eq!(
        (mirrored(&text, "sent"), mirrored(&text, "dropped_cap")),
        (2.0, 4.0),
        "{text}"
    );
    assert_eq!(mirrored(&text, "dropped_load"), 0.0);
    assert!(eventually(|| shadow.state.stats().in_flight == 2).await);
    assert_eq!(shadow.state.stats().requests, 2);
    let status = get_json(&format!("{base}/fleet")).await;
    let m = &status["pools"][0]["mirror"];
    assert_eq!(
        (m["in_flight"].as_u64(), m["max_in_flight"].as_u64()),
        (Some(2), Some(2))
    );
}

#[tokio::test]
async fn a_refusing_shadow_never_reaches_the_client() {
    let main = mock(MockKind::Vllm).await;
    // A port nothing listens on: connections are refused.
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let m = mirror(&[refused], KindSetting::Vllm, 1.0, 16);
    let mut c = config(&main, KindSetting::Vllm, Some(m));
    // Probed out quickly, so later shadows find no endpoint at all: still the mirror's
    // failures, never counted under the pool.
    c.pools.get_mut("p").unwrap().health = Some(HealthConfig {
        interval: Duration::from_millis(20),
        unhealthy_after: 1,
        ..HealthConfig::default()
    });
    let base = lingo(c).await;
    let direct = lingo(config(&main, KindSetting::Vllm, None)).await;
    let url = format!("{base}/v1/chat/completions");
    for stream in [false, true].repeat(5) {
        let got = post_bytes(&url, &chat(stream)).await;
        let plain = post_bytes(&format!("{direct}/v1/chat/completions"), &chat(stream)).await;
        // The ids differ (lingo passes the mock's own through); the shape is the same.
        assert_eq!(got.len(), plain.len(), "{got:?}");
    }
    let failed = [("upstream", GROUP), ("outcome", "upstream_error")];
    let errors = metric_reaches(&base, "lingo_requests_total", &failed, 10.0).await;
    assert_eq!(errors, 10.0);
    let text = scrape(&base).await;
    let client_ok = [("upstream", "p"), ("outcome", "ok")];
    assert_eq!(
        sum(&text, "lingo_requests_total", &client_ok),
        10.0,
        "{text}"
    );
    let client = sum(&text, "lingo_requests_total", &[("upstream", "p")]);
    assert_eq!(client, 10.0, "{text}");
    let status = get_json(&format!("{base}/fleet")).await;
    assert_eq!(
        status["pools"][0]["mirror"]["endpoints"][0]["state"],
        "ejected"
    );
    // A lingo without a mirror exports no mirror series at all.
    assert!(!scrape(&direct)
        .await
        .contains("lingo_mirror_requests_total"));
}

#[tokio::test]
async fn a_failed_shadow_request_is_not_retried() {
    let main = mock(MockKind::Vllm).await;
    // One shadow endpoint resets generation requests; the other holds each request a while,
    // so least-outstanding sends the next ones to the resetting one until it is ejected.
    let resets = mock(MockKind::Vllm).await;
    resets.state.arm_fault(Some(FaultMode::Reset), 100);
    let good = mock_ttft(MockKind::Vllm, Duration::from_millis(1500)).await;
    let m = mirror(&[resets.url(), good.url()], KindSetting::Vllm, 1.0, 16);
    let base = lingo(config(&main, KindSetting::Vllm, Some(m))).await;
    let url = format!("{base}/v1/chat/completions");
    for _ in 0..10 {
        let got: Value = serde_json::from_slice(&post_bytes(&url, &chat(false)).await).unwrap();
        assert_eq!(got["object"], "chat.completion", "{got}");
    }
    let want = [("upstream", GROUP)];
    assert_eq!(
        metric_reaches(&base, "lingo_requests_total", &want, 10.0).await,
        10.0
    );
    let text = scrape(&base).await;
    let failed = [("upstream", GROUP), ("outcome", "upstream_error")];
    let errors = sum(&text, "lingo_requests_total", &failed);
    assert!(errors >= 1.0, "{text}");
    // Each shadow request made one attempt: a failed one was not sent to `good` as well.
    assert_eq!(resets.state.stats().requests as f64, errors, "{text}");
    assert_eq!(good.state.stats().requests as f64 + errors, 10.0, "{text}");
    let attempts = sum(
        &text,
        "lingo_endpoint_requests_total",
        &[("pool", "p.mirror")],
    );
    assert_eq!(attempts, 10.0, "{text}");
    assert_eq!(sum(&text, "lingo_endpoint_retries_total", &[]), 0.0);
    let client_ok = [("upstream", "p"), ("outcome", "ok")];
    assert_eq!(sum(&text, "lingo_requests_total", &client_ok), 10.0);
}

#[tokio::test]
async fn shadow_traffic_is_dropped_first_when_lingo_is_nearly_full() {
    let main = mock(MockKind::Vllm).await;
    let shadow = mock(MockKind::Vllm).await;
    let m = mirror(&[shadow.url()], KindSetting::Vllm, 1.0, 16);
    let mut c = config(&main, KindSetting::Vllm, Some(m));
    // One slot: a client request in flight fills it, which is over 80%.
    c.limits.max_in_flight = Some(1);
    let base = lingo(c).await;
    for _ in 0..3 {
        post_bytes(&format!("{base}/v1/chat/completions"), &chat(false)).await;
    }
    let text = scrape(&base).await;
    assert_eq!(mirrored(&text, "dropped_load"), 3.0, "{text}");
    assert_eq!(mirrored(&text, "sent"), 0.0);
    assert_eq!(shadow.state.stats().requests, 0);
}
