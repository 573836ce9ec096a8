//! A pool whose endpoints come from DNS (`dns://NAME:PORT`): mocks on 127.0.0.2, .3 and .4
//! behind one name served by a DNS server the test runs; addresses join and leave while
//! requests keep flowing, and none fails.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use common::dns::DnsServer;
use common::{post_json, sum};
use lingo::config::{Config, EndpointConfig, Policy, PoolConfig};
use lingo::fleet::discovery::DiscoveryConfig;
use lingo::mock::{MockConfig, MockKind, MockState};
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

const NAME: &str = "vllm.test.";

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Mocks on 127.0.0.N for each N, all on one port (DNS gives addresses, not ports).
async fn mocks_on_one_port(lasts: &[u8]) -> (u16, Vec<Arc<MockState>>) {
    'attempt: for _ in 0..50 {
        let first = tokio::net::TcpListener::bind((ip(lasts[0]), 0))
            .await
            .unwrap();
        let port = first.local_addr().unwrap().port();
        let mut listeners = vec![first];
        for last in &lasts[1..] {
            match tokio::net::TcpListener::bind((ip(*last), port)).await {
                Ok(l) => listeners.push(l),
                Err(_) => continue 'attempt,
            }
        }
        let mut states = Vec::new();
        for l in listeners {
            let state = MockState::new(MockConfig {
                kind: MockKind::Vllm,
                model: "m".into(),
                ..MockConfig::default()
            });
            tokio::spawn(lingo::mock::serve_with(l, state.clone()));
            states.push(state);
        }
        return (port, states);
    }
    panic!("no port free on every address");
}

/// lingo through `serve`, which starts discovery (as `lingo serve` does).
async fn lingo_serving(config: Config) -> String {
    format!("http://{}", common::serving(config).await)
}

/// One round-robin pool of `dns://NAME:port`, resolved and probed every so many ms.
fn round_robin_over_dns(dns: &DnsServer, port: u16, resolve_ms: u64, probe_ms: u64) -> Config {
    let mut config = Config::default();
    let url = format!("dns://{NAME}:{port}");
    config.pools.insert(
        "q".into(),
        PoolConfig {
            policy: Policy::RoundRobin,
            endpoints: vec![EndpointConfig::new(&url, KindSetting::Vllm)],
            ..PoolConfig::default()
        },
    );
    config.discovery = DiscoveryConfig {
        interval: Duration::from_millis(resolve_ms),
        nameserver: Some(dns.addr),
    };
    config.health.interval = Duration::from_millis(probe_ms);
    config.validate().unwrap();
    config
}

async fn complete(base: &str) {
    let body = json!({"model": "m", "prompt": "hello", "max_tokens": 2});
    let r = post_json(&format!("{base}/v1/completions"), &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

fn served(states: &[Arc<MockState>]) -> Vec<u64> {
    states.iter().map(|s| s.stats().requests).collect()
}

async fn fleet_urls(base: &str) -> Vec<String> {
    let v: Value = common::get_json(&format!("{base}/fleet")).await;
    v["pools"][0]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["url"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn addresses_join_and_leave_while_requests_flow() {
    let dns = DnsServer::start().await;
    dns.set(NAME, &[ip(2), ip(3)]);
    let (port, mocks) = mocks_on_one_port(&[2, 3, 4]).await;
    // A new address starts pending and takes requests after its first passing probe.
    let config = round_robin_over_dns(&dns, port, 100, 100);
    let base = lingo_serving(config).await;

    for _ in 0..10 {
        complete(&base).await;
    }
    assert_eq!(served(&mocks), vec![5, 5, 0]);

    // A third address joins: it starts getting requests, and no request fails meanwhile.
    dns.set(NAME, &[ip(2), ip(3), ip(4)]);
    let mut joined = false;
    for _ in 0..500 {
        complete(&base).await;
        if served(&mocks)[2] > 0 {
            joined = true;
            break;
        }
    }
    assert!(
        joined,
        "127.0.0.4 never got a request: {:?}",
        served(&mocks)
    );

    // The first leaves: once lingo's set no longer has it, it gets nothing more.
    dns.set(NAME, &[ip(3), ip(4)]);
    let gone = format!("127.0.0.2:{port}");
    let mut left = false;
    for _ in 0..500 {
        complete(&base).await;
        if !fleet_urls(&base).await.iter().any(|u| u.contains(&gone)) {
            left = true;
            break;
        }
    }
    assert!(
        left,
        "127.0.0.2 still in the pool: {:?}",
        fleet_urls(&base).await
    );
    let before = served(&mocks)[0];
    for _ in 0..10 {
        complete(&base).await;
    }
    assert_eq!(served(&mocks)[0], before, "a removed address got requests");

    let text = common::scrape(&base).await;
    assert_eq!(sum(&text, "lingo_requests_in_flight", &[]), 0.0, "{text}");
    let failed = sum(
        &text,
        "lingo_requests_total",
        &[("outcome", "upstream_error")],
    );
    assert_eq!(failed, 0.0, "{text}");
}

/// A thousand addresses behind one name: the pool holds them all, but the `endpoint` label
/// takes at most `MAX_ENDPOINT_LABELS` values plus `other`, on every per-endpoint series.
#[tokio::test]
async fn a_thousand_addresses_leave_a_capped_label_set() {
    let dns = DnsServer::start().await;
    let (port, mocks) = mocks_on_one_port(&[2, 3]).await;
    // Two live mocks first, then 998 addresses nobody listens on (probes fail, fast, on
    // loopback): 127.0.1.0 and up.
    let mut ips = vec![ip(2), ip(3)];
    ips.extend((0..998u16).map(|i| {
        let [hi, lo] = i.to_be_bytes();
        IpAddr::V4(Ipv4Addr::new(127, 1 + hi, lo, 1))
    }));
    dns.set(NAME, &ips);
    let config = round_robin_over_dns(&dns, port, 200, 500);
    let base = lingo_serving(config).await;

    assert_eq!(fleet_urls(&base).await.len(), 1000);
    for _ in 0..20 {
        complete(&base).await;
    }
    assert_eq!(
        served(&mocks),
        vec![10, 10],
        "round robin over the two live ones"
    );

    let text = common::scrape(&base).await;
    let mut labels = std::collections::BTreeSet::new();
    let mut series = 0;
    for (name, l, _) in common::samples(&text) {
        if let Some(e) = l.get("endpoint") {
            assert!(
                name.starts_with("lingo_endpoint_"),
                "{name} has an endpoint label"
            );
            labels.insert(e.clone());
            series += 1;
        }
    }
    let cap = lingo::fleet::MAX_ENDPOINT_LABELS;
    assert!(labels.contains("other"), "{labels:?}");
    assert!(labels.len() <= cap + 1, "{} endpoint labels", labels.len());
    // Every per-endpoint family stays within a few series per label, not per address.
    assert!(series < 10 * (cap + 1), "{series} per-endpoint series");
    let healthy = sum(&text, "lingo_endpoint_healthy", &[("pool", "q")]);
    // Counted, not set: the two live ones are healthy, the 998 behind `other` are not.
    assert_eq!(healthy, 2.0, "{text}");
}
