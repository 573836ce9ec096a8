//! Keeps each pool's endpoint set in step with DNS: its static endpoints, plus one endpoint
//! per address each `dns://NAME:PORT` entry resolves to (same kind, group, weight and key).
//! New addresses join `pending`; vanished ones drain (`Pool::replace`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use super::discovery::{parse_dns_url, Addrs, Discovery, DiscoveryConfig};
use super::{Fleet, Pool};
use crate::config::{EndpointConfig, PoolConfig};

/// One `dns://` entry of a pool and what it resolves to now.
struct Entry {
    template: EndpointConfig,
    discovery: Discovery,
}

/// Start discovery for every pool that has `dns://` endpoints. The first lookups are awaited
/// (each bounded by `Discovery::start`), so the pools start with addresses when DNS answers.
pub async fn start(fleet: &Fleet, pools: &BTreeMap<String, PoolConfig>, cfg: &DiscoveryConfig) {
    for (name, pcfg) in pools {
        let Some(pool) = fleet.pool(name) else {
            continue;
        };
        let entries = entries(pcfg, cfg).await;
        if entries.is_empty() {
            continue;
        }
        pool.replace(&expand(&pcfg.endpoints, &entries));
        tokio::spawn(follow(
            Arc::downgrade(pool),
            pcfg.endpoints.clone(),
            entries,
        ));
    }
}

async fn entries(pcfg: &PoolConfig, cfg: &DiscoveryConfig) -> Vec<Entry> {
    let mut out = Vec::new();
    for ep in &pcfg.endpoints {
        let Some((name, port)) = parse_dns_url(&ep.url) else {
            continue;
        };
        match Discovery::start(&name, port, cfg).await {
            Ok(discovery) => out.push(Entry {
                template: ep.clone(),
                discovery,
            }),
            // `validate()` checked the name; a resolver that cannot start is logged and the
            // entry has no endpoints.
            Err(e) => tracing::error!(%name, error = %e, "DNS discovery not started"),
        }
    }
    out
}

/// Replace the pool's set whenever any entry's addresses change; ends when the pool is gone.
async fn follow(pool: Weak<Pool>, configured: Vec<EndpointConfig>, entries: Vec<Entry>) {
    let mut subs: Vec<_> = entries.iter().map(|e| e.discovery.subscribe()).collect();
    loop {
        let changes = subs.iter_mut().map(|rx| Box::pin(rx.changed()));
        let (res, _, _) = futures_util::future::select_all(changes).await;
        if res.is_err() {
            return;
        }
        let Some(pool) = pool.upgrade() else { return };
        pool.replace(&expand(&configured, &entries));
    }
}

/// The static endpoints, then each `dns://` entry's addresses as `http://IP:PORT`.
fn expand(configured: &[EndpointConfig], entries: &[Entry]) -> Vec<EndpointConfig> {
    let mut out: Vec<EndpointConfig> = configured
        .iter()
        .filter(|e| parse_dns_url(&e.url).is_none())
        .cloned()
        .collect();
    for e in entries {
        out.extend(addresses(&e.template, &e.discovery.current()));
    }
    out
}

fn addresses(template: &EndpointConfig, addrs: &Addrs) -> Vec<EndpointConfig> {
    addrs
        .iter()
        .map(|a: &SocketAddr| EndpointConfig {
            url: format!("http://{a}"),
            ..template.clone()
        })
        .collect()
}
