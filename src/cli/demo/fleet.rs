//! `lingo demo --fleet`: an SGLang mock and two vLLM mocks, one of them three times slower,
//! in one `least_outstanding` pool behind lingo; the sweep of plain `lingo demo` through it,
//! then what lingo's own `/metrics` says per group and per endpoint.

use std::collections::BTreeMap;
use std::time::Duration;

use lingo::bench::BenchConfig;
use lingo::config::{Config, EndpointConfig, Policy, PoolConfig};
use lingo::mock::{MockConfig, MockKind};
use lingo::upstream::{Client, KindSetting};

use super::report::{self, Endpoint};
use super::{loopback, sweep, sweep_config, DemoArgs};

const POOL: &str = "demo";

/// How much slower the slow vLLM mock is, in TTFT and per token.
const SLOWDOWN: u32 = 3;

/// The fleet: (group, mock kind, the kind setting lingo is told, latency multiplier).
const MEMBERS: &[(&str, MockKind, KindSetting, u32)] = &[
    ("sglang", MockKind::Sglang, KindSetting::Sglang, 1),
    ("vllm-fast", MockKind::Vllm, KindSetting::Vllm, 1),
    ("vllm-slow", MockKind::Vllm, KindSetting::Vllm, SLOWDOWN),
];

pub async fn run(args: &DemoArgs) -> anyhow::Result<()> {
    let mut endpoints = Vec::new();
    let mut pool = PoolConfig {
        policy: Policy::LeastOutstanding,
        ..PoolConfig::default()
    };
    for &(group, kind, setting, slow) in MEMBERS {
        let (ttft, itl) = (args.ttft * slow, args.itl * slow);
        let (l, url) = loopback().await?;
        let addr = l.local_addr()?.to_string();
        let mock = MockConfig {
            kind,
            ttft,
            itl,
            ..MockConfig::default()
        };
        tokio::spawn(lingo::mock::serve(l, mock));
        println!(
            "{:<9} mock {:<7} {url}  (TTFT {ttft:?}, {itl:?}/token)",
            group,
            kind.as_str()
        );
        let mut ep = EndpointConfig::new(&url, setting);
        ep.group = Some(group.to_string());
        pool.endpoints.push(ep);
        endpoints.push(Endpoint {
            addr,
            group: group.to_string(),
        });
    }
    let (proxy_l, proxy_url) = loopback().await?;
    let config = Config {
        pools: BTreeMap::from([(POOL.to_string(), pool)]),
        listen: proxy_l.local_addr()?,
        ..Config::default()
    };
    config.validate()?;
    tokio::spawn(lingo::proxy::serve(proxy_l, config, std::future::pending()));
    println!("lingo proxy        {proxy_url}  -> pool {POOL:?}, policy least_outstanding\n");

    println!("SGLang-dialect sweep (POST /generate) through lingo over the fleet:\n");
    let n = args.requests_per_level.unwrap_or(64);
    let bench = BenchConfig {
        timeout: Duration::from_secs(60),
        ..sweep_config(&proxy_url, vec![4, 16, 32], n)
    };
    let warmup = bench.warmup;
    let levels = sweep(bench).await?;
    let sent = warmup as usize + levels.iter().map(|l| l.ok() + l.fail()).sum::<usize>();

    let client = Client::new(&proxy_url, &lingo::config::Timeouts::default());
    let snapshot = lingo::top::scrape(&client).await?;
    let groups: Vec<&str> = MEMBERS.iter().map(|m| m.0).collect();
    println!("\nFrom lingo's /metrics, {sent} requests sent (warmup included):\n");
    print!("{}", report::render(&snapshot, &groups, &endpoints, POOL));
    let fails: usize = levels.iter().map(|l| l.fail()).sum();
    anyhow::ensure!(fails == 0, "{fails} requests failed");
    Ok(())
}
