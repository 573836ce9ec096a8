//! `lingo bench`: a concurrency sweep against any server in any dialect lingo speaks.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};

use lingo::bench::{render_table, BenchConfig, LevelReport};
use lingo::dialect::Dialect;

fn parse_dialect(s: &str) -> Result<Dialect, String> {
    Dialect::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Dialect::ALL.iter().map(|d| d.label()).collect();
        format!("unknown dialect `{s}` (one of: {})", names.join(", "))
    })
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Base URL of the server (a lingo proxy, vLLM, SGLang, ...).
    #[arg(
        long,
        env = "LINGO_BENCH_URL",
        default_value = "http://127.0.0.1:30000"
    )]
    pub url: String,
    /// Client dialect to speak: sglang, openai-completions, openai-chat, anthropic or
    /// vllm-legacy.
    #[arg(long, env = "LINGO_BENCH_DIALECT", default_value = "sglang", value_parser = parse_dialect)]
    pub dialect: Dialect,
    /// Model name (OpenAI dialects); default: the server's first model on /v1/models.
    #[arg(long, env = "LINGO_BENCH_MODEL")]
    pub model: Option<String>,
    /// Concurrency levels, comma-separated; each is a closed loop.
    #[arg(
        long,
        env = "LINGO_BENCH_CONCURRENCY",
        value_delimiter = ',',
        default_value = "1,2,4,8,16,32"
    )]
    pub concurrency: Vec<u32>,
    /// Prompt length in tokens (exact via token ids where the dialect takes them).
    #[arg(long, env = "LINGO_BENCH_INPUT_LEN", default_value_t = 1000)]
    pub input_len: u32,
    /// Output tokens per request (exact: ignore_eos is set).
    #[arg(long, env = "LINGO_BENCH_OUTPUT_LEN", default_value_t = 500)]
    pub output_len: u32,
    /// Requests per concurrency level.
    #[arg(long, env = "LINGO_BENCH_REQUESTS_PER_LEVEL", default_value_t = 64)]
    pub requests_per_level: u32,
    /// Warmup requests before the sweep, excluded from the results.
    #[arg(long, env = "LINGO_BENCH_WARMUP", default_value_t = 1)]
    pub warmup: u32,
    /// Ask for whole responses instead of streams (TTFT then equals E2E).
    #[arg(long, env = "LINGO_BENCH_NO_STREAM")]
    pub no_stream: bool,
    /// Seed of the generated prompts.
    #[arg(long, env = "LINGO_BENCH_SEED", default_value_t = 0)]
    pub seed: u64,
    /// Per-request timeout (e.g. 600s).
    #[arg(long, env = "LINGO_BENCH_TIMEOUT", default_value = "600s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Also print TTFT, ITL and E2E percentiles per level.
    #[arg(long, env = "LINGO_BENCH_DETAIL")]
    pub detail: bool,
    /// Write a JSON summary of every level to this file.
    #[arg(long, env = "LINGO_BENCH_JSON")]
    pub json: Option<PathBuf>,
}

impl BenchArgs {
    pub fn config(&self) -> BenchConfig {
        BenchConfig {
            url: self.url.trim_end_matches('/').to_string(),
            dialect: self.dialect,
            model: self.model.clone(),
            concurrency: self.concurrency.clone(),
            input_len: self.input_len,
            output_len: self.output_len,
            requests_per_level: self.requests_per_level,
            warmup: self.warmup,
            stream: !self.no_stream,
            seed: self.seed,
            timeout: self.timeout,
        }
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let config = args.config();
    let levels = lingo::bench::run(&config).await?;
    print!("{}", render_table(&levels));
    if args.detail {
        print!("{}", render_detail(&levels));
    }
    if let Some(path) = &args.json {
        let doc = json!({"config": config_json(&config), "levels": levels.iter().map(level_json).collect::<Vec<_>>()});
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |s| format!("{:.2}", s * 1e3))
}

/// Percentile columns: TTFT, ITL (token-weighted) and E2E at p50 / p90 / p99, in ms.
pub fn render_detail(levels: &[LevelReport]) -> String {
    let mut out = String::from(
        "\n   C | TTFT p50 | TTFT p90 | TTFT p99 |  ITL p50 |  ITL p99 |  E2E p50 |  E2E p99   (ms)\n",
    );
    for l in levels {
        out.push_str(&format!(
            "{:>4} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8}\n",
            l.concurrency,
            ms(l.ttft_quantile(0.5)),
            ms(l.ttft_quantile(0.9)),
            ms(l.ttft_quantile(0.99)),
            ms(l.itl_quantile(0.5)),
            ms(l.itl_quantile(0.99)),
            ms(l.e2e_quantile(0.5)),
            ms(l.e2e_quantile(0.99)),
        ));
    }
    out
}

fn config_json(c: &BenchConfig) -> Value {
    json!({"url": c.url, "dialect": c.dialect.label(), "model": c.model,
           "concurrency": c.concurrency, "input_len": c.input_len, "output_len": c.output_len,
           "requests_per_level": c.requests_per_level, "warmup": c.warmup, "stream": c.stream,
           "seed": c.seed})
}

/// One level's summary; times in seconds.
fn level_json(l: &LevelReport) -> Value {
    json!({
        "concurrency": l.concurrency, "wall_s": l.wall.as_secs_f64(),
        "ok": l.ok(), "fail": l.fail(), "tokens": l.total_tokens(), "estimated": l.estimated(),
        "agg_tok_s": l.agg_tok_s(), "per_req_tok_s": l.per_req_tok_s(),
        "ttft_mean": l.mean_ttft(), "ttft_p50": l.ttft_quantile(0.5), "ttft_p99": l.ttft_quantile(0.99),
        "itl_p50": l.itl_quantile(0.5), "itl_p99": l.itl_quantile(0.99),
        "e2e_p50": l.e2e_quantile(0.5), "e2e_p99": l.e2e_quantile(0.99),
        "tpot_mean": l.mean_tpot(),
        "errors": l.errors().into_iter().map(|(e, n)| json!({"error": e, "count": n})).collect::<Vec<_>>(),
    })
}
