//! DNS discovery against a DNS server the test runs and changes: addresses that join and
//! leave, a server that fails or goes quiet (the last good set stays), 1,000 records.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::dns::{DnsServer, Mode};
use lingo::fleet::discovery::{parse_dns_url, Addrs, Discovery, DiscoveryConfig};
use tokio::sync::watch;

const NAME: &str = "vllm.test.";
/// Every wait is bounded by this; none is a timed assertion.
const BOUND: Duration = Duration::from_secs(20);

/// Makes the server fail in one way.
type Fail = fn(&DnsServer);

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

fn addrs(ips: &[IpAddr], port: u16) -> BTreeSet<SocketAddr> {
    ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()
}

fn config(server: &DnsServer) -> DiscoveryConfig {
    let config = DiscoveryConfig {
        interval: Duration::from_millis(100),
        nameserver: Some(server.addr),
    };
    config.validate().unwrap();
    config
}

/// Waits for the set to become `want`, through however many intermediate sets.
async fn wait_for(rx: &mut watch::Receiver<Addrs>, want: &BTreeSet<SocketAddr>) {
    let wait = tokio::time::timeout(BOUND, rx.wait_for(|set| **set == *want)).await;
    let reached = wait.map(|r| r.is_ok()).unwrap_or(false);
    assert!(reached, "set is {:?}, want {want:?}", *rx.borrow());
}

#[tokio::test]
async fn addresses_join_and_leave_and_a_failing_server_keeps_the_last_set() {
    let server = DnsServer::start().await;
    server.set(NAME, &[ip(2), ip(3)]);
    let (name, port) = parse_dns_url(&format!("dns://{NAME}:8000")).unwrap();
    let discovery = Discovery::start(&name, port, &config(&server))
        .await
        .unwrap();
    assert_eq!(*discovery.current(), addrs(&[ip(2), ip(3)], 8000));
    let mut rx = discovery.subscribe();

    server.set(NAME, &[ip(2), ip(3), ip(4)]);
    wait_for(&mut rx, &addrs(&[ip(2), ip(3), ip(4)], 8000)).await;
    server.set(NAME, &[ip(3), ip(4)]);
    wait_for(&mut rx, &addrs(&[ip(3), ip(4)], 8000)).await;
    let good = addrs(&[ip(3), ip(4)], 8000);
    rx.mark_unchanged();

    // A failure, an empty answer and an unknown name each keep the set. 8 queries span at
    // least one whole round (a round asks A and AAAA, over UDP and at most again over TCP).
    let failures: [(&str, Fail); 4] = [
        ("SERVFAIL", |s| s.set_mode(Mode::ServFail)),
        ("silence", |s| s.set_mode(Mode::Silent)),
        ("no records", |s| {
            s.set_mode(Mode::Answer);
            s.set(NAME, &[]);
        }),
        ("NXDOMAIN", |s| s.remove(NAME)),
    ];
    for (what, fail) in failures {
        fail(&server);
        let since = server.queries();
        server.wait_queries(since, 8, BOUND).await;
        assert_eq!(*discovery.current(), good, "{what}");
        assert!(!rx.has_changed().unwrap(), "{what} changed the set");
    }

    // It resolves again after the failures.
    server.set(NAME, &[ip(4), ip(5)]);
    wait_for(&mut rx, &addrs(&[ip(4), ip(5)], 8000)).await;

    // Dropping the Discovery stops its task: the receiver learns the sender is gone.
    drop(discovery);
    let closed = tokio::time::timeout(BOUND, rx.changed()).await.unwrap();
    assert!(closed.is_err());
}

#[tokio::test]
async fn a_and_aaaa_records_both_count() {
    let server = DnsServer::start().await;
    let v6: IpAddr = "::1".parse().unwrap();
    server.set(NAME, &[ip(2), v6]);
    let discovery = Discovery::start(NAME, 30000, &config(&server))
        .await
        .unwrap();
    assert_eq!(*discovery.current(), addrs(&[ip(2), v6], 30000));
    // Only AAAA left: an A answer with no records is an empty family, not a failure.
    server.set(NAME, &[v6]);
    wait_for(&mut discovery.subscribe(), &addrs(&[v6], 30000)).await;
}

#[tokio::test]
async fn a_thousand_records_are_a_thousand_addresses() {
    let server = DnsServer::start().await;
    let ips: Vec<IpAddr> = (0..1000u16)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 1, (i / 200) as u8, (i % 200) as u8 + 1)))
        .collect();
    server.set(NAME, &ips);
    // Over UDP the answer is truncated; the resolver asks again over TCP.
    let discovery = Discovery::start(NAME, 8000, &config(&server))
        .await
        .unwrap();
    let set = discovery.current();
    assert_eq!(set.len(), 1000);
    assert_eq!(*set, addrs(&ips, 8000));
}

#[tokio::test]
async fn a_name_that_never_resolves_starts_empty_and_joins_later() {
    let server = DnsServer::start().await;
    server.set_mode(Mode::ServFail);
    let discovery = Discovery::start(NAME, 8000, &config(&server))
        .await
        .unwrap();
    assert!(discovery.current().is_empty());
    server.set(NAME, &[ip(2)]);
    server.set_mode(Mode::Answer);
    wait_for(&mut discovery.subscribe(), &addrs(&[ip(2)], 8000)).await;
}
