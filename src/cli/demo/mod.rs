//! `lingo demo`: the first thing a new user runs. A mock vLLM server and a lingo proxy on free
//! loopback ports, a short SGLang-dialect sweep through the proxy, the table, what was
//! translated, and an excerpt of lingo's own metrics. `--fleet` does the same over a pool of
//! three mocks of two kinds and two speeds (`fleet`), reported per group (`report`).

mod fleet;
mod report;

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::net::TcpListener;

use lingo::bench::{render_table, BenchConfig};
use lingo::config::Config;
use lingo::dialect::Dialect;
use lingo::mock::{MockConfig, MockKind};
use lingo::upstream::{Client, KindSetting};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Requests per concurrency level (default 16; 64 with `--fleet`).
    #[arg(long, env = "LINGO_DEMO_REQUESTS_PER_LEVEL")]
    pub requests_per_level: Option<u32>,
    /// A fleet instead: an SGLang mock and two vLLM mocks (one slower) in one
    /// `least_outstanding` pool, and a latency table per group from lingo's `/metrics`.
    #[arg(long)]
    pub fleet: bool,
    /// The mock's time to first token.
    #[arg(long, env = "LINGO_DEMO_TTFT", default_value = "20ms", value_parser = humantime::parse_duration)]
    pub ttft: Duration,
    /// The mock's time per output token.
    #[arg(long, env = "LINGO_DEMO_ITL", default_value = "2ms", value_parser = humantime::parse_duration)]
    pub itl: Duration,
}

pub(super) async fn loopback() -> anyhow::Result<(TcpListener, String)> {
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding a loopback port")?;
    let url = format!("http://{}", l.local_addr()?);
    Ok((l, url))
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if args.fleet {
        return fleet::run(&args).await;
    }
    let (mock_l, mock_url) = loopback().await?;
    let mock = MockConfig {
        kind: MockKind::Vllm,
        ttft: args.ttft,
        itl: args.itl,
        ..MockConfig::default()
    };
    tokio::spawn(lingo::mock::serve(mock_l, mock));
    let (proxy_l, proxy_url) = loopback().await?;
    let mut config = Config::default();
    config.upstream.url = mock_url.clone();
    config.upstream.kind = KindSetting::Auto;
    config.listen = proxy_l.local_addr()?;
    tokio::spawn(lingo::proxy::serve(proxy_l, config, std::future::pending()));

    println!(
        "mock vLLM server   {mock_url}  (TTFT {:?}, {:?}/token)",
        args.ttft, args.itl
    );
    println!("lingo proxy        {proxy_url}  -> {mock_url}\n");
    println!("SGLang-dialect sweep (POST /generate, input_ids, ignore_eos) through lingo:\n");
    let n = args.requests_per_level.unwrap_or(16);
    let levels = sweep(sweep_config(&proxy_url, vec![1, 4, 16], n)).await?;

    let client = Client::new(&proxy_url, &lingo::config::Timeouts::default());
    let info = get_json(&client, "/get_server_info").await?;
    let kind = info["lingo"]["upstream_kind"].as_str().unwrap_or("sglang");
    let route = match kind {
        "vllm" => "translated SGLang POST /generate -> vLLM POST /v1/completions and back (cumulative SSE)",
        _ => "passed SGLang POST /generate through untouched",
    };
    println!("\nlingo detected a {kind} upstream and {route}.");

    let metrics = get_text(&client, "/metrics").await?;
    println!("\nFrom lingo's /metrics:");
    for line in metrics.lines().filter(|l| is_summary_line(l)) {
        println!("  {line}");
    }
    let fails: usize = levels.iter().map(|l| l.fail()).sum();
    anyhow::ensure!(fails == 0, "{fails} requests failed");
    Ok(())
}

fn is_summary_line(l: &str) -> bool {
    let wanted = [
        "lingo_requests_total{",
        "lingo_prompt_tokens_total{",
        "lingo_generation_tokens_total{",
        "lingo_time_to_first_token_seconds_sum{",
        "lingo_time_to_first_token_seconds_count{",
        "lingo_overhead_seconds_sum{",
    ];
    wanted.iter().any(|w| l.starts_with(w))
}

/// The demos' SGLang-dialect sweep: 256-token prompts, 64-token answers.
pub(super) fn sweep_config(url: &str, concurrency: Vec<u32>, per_level: u32) -> BenchConfig {
    BenchConfig {
        url: url.to_string(),
        dialect: Dialect::Sglang,
        concurrency,
        input_len: 256,
        output_len: 64,
        requests_per_level: per_level,
        ..BenchConfig::default()
    }
}

/// Run the sweep and print its table.
pub(super) async fn sweep(bench: BenchConfig) -> anyhow::Result<Vec<lingo::bench::LevelReport>> {
    let levels = lingo::bench::run(&bench).await?;
    print!("{}", render_table(&levels));
    Ok(levels)
}

pub(super) async fn get_text(client: &Client, path: &str) -> anyhow::Result<String> {
    let body = client.get(path).await?.bytes().await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

async fn get_json(client: &Client, path: &str) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::from_str(&get_text(client, path).await?)?)
}
