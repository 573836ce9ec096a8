//! `lingo bench`: load in any dialect lingo speaks, closed or open loop, with the table,
//! `--detail`, `--json`, `--csv`, a progress bar on a terminal, and `lingo bench compare`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use lingo::bench::compare;
use lingo::bench::json::RunDoc;
use lingo::bench::{
    render, render_detail, BenchConfig, LevelReport, Observer, Rate, Slo, Source, Split, Summary,
    WorkloadKind,
};
use lingo::dialect::Dialect;

fn parse_dialect(s: &str) -> Result<Dialect, String> {
    Dialect::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Dialect::ALL.iter().map(|d| d.label()).collect();
        format!("unknown dialect `{s}` (one of: {})", names.join(", "))
    })
}

fn parse_percentile(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err(format!("percentile `{s}`: a number in (0, 100]")),
    }
}

/// `--max-fail`: a count of failed requests, or a fraction of all requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MaxFail {
    Count(u64),
    Fraction(f64),
}

impl MaxFail {
    fn parse(s: &str) -> Result<MaxFail, String> {
        let s = s.trim();
        let bad = || format!("max-fail `{s}`: a count (5), a fraction (0.01) or a percentage (1%)");
        if let Some(pct) = s.strip_suffix('%') {
            let p: f64 = pct.trim().parse().map_err(|_| bad())?;
            return (0.0..=100.0)
                .contains(&p)
                .then_some(MaxFail::Fraction(p / 100.0))
                .ok_or_else(bad);
        }
        if s.contains('.') {
            let f: f64 = s.parse().map_err(|_| bad())?;
            return (0.0..=1.0)
                .contains(&f)
                .then_some(MaxFail::Fraction(f))
                .ok_or_else(bad);
        }
        s.parse().map(MaxFail::Count).map_err(|_| bad())
    }

    /// Whether `failed` of `total` requests exceeds the limit.
    pub fn exceeded(self, failed: u64, total: u64) -> bool {
        match self {
            MaxFail::Count(n) => failed > n,
            MaxFail::Fraction(f) => total > 0 && failed as f64 > f * total as f64,
        }
    }
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    #[command(flatten)]
    pub run: Box<RunArgs>,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Print two `--json` reports side by side: per level and metric, A, B and the ratio B/A.
    Compare {
        /// The baseline report (A).
        a: PathBuf,
        /// The report compared with it (B).
        b: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Base URL of the server (a lingo proxy, vLLM, SGLang, ...). Repeat it to spread each
    /// level over several servers (see --split), e.g. two lingo replicas.
    #[arg(
        long,
        env = "LINGO_BENCH_URL",
        default_value = "http://127.0.0.1:30000"
    )]
    pub url: Vec<String>,
    /// With several --url: `conversations` sends conversation i (request i outside
    /// multi-turn runs) to url i mod n; `requests` sends each request to the next url in turn.
    #[arg(long, env = "LINGO_BENCH_SPLIT", default_value = "conversations", value_parser = Split::parse)]
    pub split: Split,
    /// `random` (independent prompts) or `multiturn`: --conversations conversations of
    /// --turns turns, each turn's prompt the whole history (the server's answers included)
    /// plus a new user message of --input-len tokens; --concurrency conversations in flight.
    #[arg(long, env = "LINGO_BENCH_WORKLOAD", default_value = "random", value_parser = WorkloadKind::parse)]
    pub workload: WorkloadKind,
    /// Multi-turn: conversations per level.
    #[arg(long, env = "LINGO_BENCH_CONVERSATIONS", default_value_t = 16)]
    pub conversations: u32,
    /// Multi-turn: turns per conversation.
    #[arg(long, env = "LINGO_BENCH_TURNS", default_value_t = 4)]
    pub turns: u32,
    /// Multi-turn: tokens of a system prompt shared by every conversation (0: none).
    #[arg(long, env = "LINGO_BENCH_SYSTEM_PROMPT_LEN", default_value_t = 0)]
    pub system_prompt_len: u32,
    /// A second server: every level runs against --url (A), then this one (B), under the
    /// same conditions, and the report gives the ratios B/A (e.g. a proxy and its upstream).
    #[arg(long, env = "LINGO_BENCH_VS_URL")]
    pub vs_url: Option<String>,
    /// Client dialect to speak (any dialect lingo speaks, e.g. sglang, openai-completions,
    /// openai-chat).
    #[arg(long, env = "LINGO_BENCH_DIALECT", default_value = "sglang", value_parser = parse_dialect)]
    pub dialect: Dialect,
    /// Model name; default: the server's first model on /v1/models.
    #[arg(long, env = "LINGO_BENCH_MODEL")]
    pub model: Option<String>,
    /// Closed-loop concurrency levels, comma-separated: each level keeps this many requests
    /// (multi-turn: conversations) in flight. Default 1,2,4,8,16,32 when no --request-rate
    /// is given.
    #[arg(long, env = "LINGO_BENCH_CONCURRENCY", value_delimiter = ',')]
    pub concurrency: Option<Vec<u32>>,
    /// Open-loop request rates in requests/s, comma-separated, `inf` for all at once: arrivals
    /// follow the schedule whatever the server does; latency counts from the scheduled time.
    #[arg(long, env = "LINGO_BENCH_REQUEST_RATE", value_delimiter = ',', value_parser = Rate::parse)]
    pub request_rate: Vec<Rate>,
    /// Gamma shape of open-loop inter-arrival times: 1 = Poisson, < 1 burstier, > 1 more
    /// regular (as vLLM's --burstiness).
    #[arg(long, env = "LINGO_BENCH_BURSTINESS", default_value_t = 1.0)]
    pub burstiness: f64,
    /// Cap on requests in flight in open-loop levels; arrivals beyond it wait (and the wait
    /// counts in their latency).
    #[arg(long, env = "LINGO_BENCH_MAX_CONCURRENCY")]
    pub max_concurrency: Option<u32>,
    /// Prompt length in tokens: exact via token ids where the dialect takes them, else text
    /// sized by the server's /tokenize or --tokenizer (approximate without either).
    #[arg(long, env = "LINGO_BENCH_INPUT_LEN", default_value_t = 1000)]
    pub input_len: u32,
    /// Spread of prompt lengths: uniform in input-len * [1 - r, 1 + r].
    #[arg(long, env = "LINGO_BENCH_INPUT_RANGE", default_value_t = 0.0)]
    pub input_range: f64,
    /// Output tokens per request (exact: ignore_eos is set).
    #[arg(long, env = "LINGO_BENCH_OUTPUT_LEN", default_value_t = 500)]
    pub output_len: u32,
    /// Spread of output lengths: uniform in output-len * [1 - r, 1 + r].
    #[arg(long, env = "LINGO_BENCH_OUTPUT_RANGE", default_value_t = 0.0)]
    pub output_range: f64,
    /// Requests per level (default 64; with --duration or --replay, unbounded unless given).
    #[arg(long, env = "LINGO_BENCH_REQUESTS_PER_LEVEL")]
    pub requests_per_level: Option<u32>,
    /// Also end each level after this long (e.g. 30s): no request leaves after it, those in
    /// flight finish.
    #[arg(long, env = "LINGO_BENCH_DURATION", value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Warmup requests per target, sent all at once before the first level (so they also open
    /// that many connections), excluded from the results.
    #[arg(long, env = "LINGO_BENCH_WARMUP", default_value_t = 1)]
    pub warmup: u32,
    /// Closed loop and multi-turn: spread the workers' first requests (or conversations) over
    /// this long (e.g. 100ms), so that C streams do not start, and with a paced server stay,
    /// in one lockstep burst.
    #[arg(long, env = "LINGO_BENCH_RAMP_UP", value_parser = humantime::parse_duration, default_value = "0s")]
    pub ramp_up: Duration,
    /// Ask for whole responses instead of streams (TTFT then equals E2E).
    #[arg(long, env = "LINGO_BENCH_NO_STREAM")]
    pub no_stream: bool,
    /// Seed of prompts, lengths, dataset order and arrival times: the same seed, the same run.
    #[arg(long, env = "LINGO_BENCH_SEED", default_value_t = 0)]
    pub seed: u64,
    /// Send only the dialect's documented fields (for a plain OpenAI-compatible server): no
    /// ignore_eos or other vLLM extensions, so outputs may end early.
    #[arg(long, env = "LINGO_BENCH_STANDARD_API")]
    pub standard_api: bool,
    /// Environment variable holding an API key, sent as `Authorization: Bearer` (a hosted
    /// OpenAI-compatible API, or vLLM's --api-key). Unset: no key.
    #[arg(long, env = "LINGO_BENCH_API_KEY_ENV")]
    pub api_key_env: Option<String>,
    /// Per-request timeout (e.g. 600s).
    #[arg(long, env = "LINGO_BENCH_TIMEOUT", default_value = "600s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Prompts from a dataset: ShareGPT JSON (output length from the reference answer) or
    /// JSONL of {"prompt": ..., "output_len"?: ...}.
    #[arg(long, env = "LINGO_BENCH_DATASET", conflicts_with = "replay")]
    pub dataset: Option<PathBuf>,
    /// Replay a lingo request log (JSONL with time, prompt_tokens, completion_tokens, and an
    /// optional session): its relative arrival times and lengths, as one open-loop level; a
    /// session's lines go in order, each after the previous ended, sharing a prompt prefix.
    #[arg(long, env = "LINGO_BENCH_REPLAY", conflicts_with_all = ["concurrency", "request_rate"])]
    pub replay: Option<PathBuf>,
    /// A Hugging Face tokenizer.json to size text prompts when the server has no /tokenize.
    #[arg(long, env = "LINGO_BENCH_TOKENIZER")]
    pub tokenizer: Option<PathBuf>,
    /// Percentiles to report, comma-separated.
    #[arg(long, env = "LINGO_BENCH_PERCENTILES", value_delimiter = ',', default_value = "50,90,99", value_parser = parse_percentile)]
    pub percentiles: Vec<f64>,
    /// SLOs for goodput, e.g. ttft=500ms,tpot=50ms,e2e=2s: a request is good when all hold.
    #[arg(long, env = "LINGO_BENCH_SLO", value_parser = Slo::parse)]
    pub slo: Option<Slo>,
    /// Read the server's Prometheus /metrics before and after each level and print its mean
    /// TTFT and token total next to the client's (lingo, vLLM and SGLang names).
    #[arg(long, env = "LINGO_BENCH_SCRAPE_METRICS")]
    pub scrape_metrics: bool,
    /// Also print mean and percentiles of TTFT, TPOT, ITL and E2E, and all throughputs.
    #[arg(long, env = "LINGO_BENCH_DETAIL")]
    pub detail: bool,
    /// Write the whole run (config, per-level summary, every request) as JSON to this file;
    /// the schema is in docs/bench-json.md.
    #[arg(long, env = "LINGO_BENCH_JSON")]
    pub json: Option<PathBuf>,
    /// Write one CSV row per level to this file.
    #[arg(long, env = "LINGO_BENCH_CSV")]
    pub csv: Option<PathBuf>,
    /// Exit non-zero when more requests than this failed over the run: a count (5), a
    /// fraction (0.01) or a percentage (1%). Default: no limit.
    #[arg(long, env = "LINGO_BENCH_MAX_FAIL", value_parser = MaxFail::parse)]
    pub max_fail: Option<MaxFail>,
}

impl RunArgs {
    pub fn config(&self) -> BenchConfig {
        let source = match (&self.replay, &self.dataset) {
            (Some(p), _) => Source::Replay(p.clone()),
            (None, Some(p)) => Source::Dataset(p.clone()),
            (None, None) => Source::Random,
        };
        let concurrency = match (&self.concurrency, self.request_rate.is_empty()) {
            (Some(c), _) => c.clone(),
            (None, true) => vec![1, 2, 4, 8, 16, 32],
            (None, false) => Vec::new(),
        };
        // A replay sends the whole log unless told otherwise.
        let requests_per_level = match (self.requests_per_level, self.duration) {
            (Some(n), _) => n,
            (None, _) if self.replay.is_some() => u32::MAX,
            (None, Some(_)) => u32::MAX,
            (None, None) => 64,
        };
        let mut urls = self.url.iter().map(|u| u.trim_end_matches('/').to_string());
        BenchConfig {
            url: urls.next().unwrap_or_else(|| BenchConfig::default().url),
            more_urls: urls.collect(),
            split: self.split,
            workload: self.workload,
            conversations: self.conversations,
            turns: self.turns,
            system_prompt_len: self.system_prompt_len,
            vs_url: self
                .vs_url
                .as_ref()
                .map(|u| u.trim_end_matches('/').to_string()),
            dialect: self.dialect,
            model: self.model.clone(),
            concurrency,
            request_rate: self.request_rate.clone(),
            burstiness: self.burstiness,
            max_concurrency: self.max_concurrency,
            input_len: self.input_len,
            input_range: self.input_range,
            output_len: self.output_len,
            output_range: self.output_range,
            requests_per_level,
            duration: self.duration,
            warmup: self.warmup,
            ramp_up: self.ramp_up,
            stream: !self.no_stream,
            seed: self.seed,
            timeout: self.timeout,
            standard_api: self.standard_api,
            api_key: self
                .api_key_env
                .as_ref()
                .and_then(|var| std::env::var(var).ok()),
            source,
            tokenizer: self.tokenizer.clone(),
            percentiles: self.percentiles.clone(),
            slo: self.slo.unwrap_or_default(),
            scrape_metrics: self.scrape_metrics,
        }
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        Some(BenchCommand::Compare { a, b }) => {
            print!("{}", compare_files(&a, &b)?);
            Ok(())
        }
        None => run_levels(*args.run).await,
    }
}

/// `lingo bench compare A B`.
pub fn compare_files(a: &std::path::Path, b: &std::path::Path) -> anyhow::Result<String> {
    let (da, db) = (RunDoc::read(a)?, RunDoc::read(b)?);
    let sa: Vec<Summary> = da.levels.into_iter().map(|l| l.summary).collect();
    let sb: Vec<Summary> = db.levels.into_iter().map(|l| l.summary).collect();
    let (pairs, unmatched) = compare::pair(&sa, &sb);
    if pairs.is_empty() {
        bail!("the two reports have no level in common");
    }
    let mut out = compare::render(&pairs, &a.display().to_string(), &b.display().to_string());
    for u in unmatched {
        out.push_str(&format!("Unmatched level: {u}\n"));
    }
    Ok(out)
}

async fn run_levels(args: RunArgs) -> anyhow::Result<()> {
    let config = args.config();
    if let (Some(var), None) = (&args.api_key_env, &config.api_key) {
        bail!("--api-key-env: the environment variable {var} is not set");
    }
    // This process drives and serves nothing: its CPU is the driver's, and the machine's
    // busy cores say whether a server beside it was starved.
    lingo::bench::sole_driver();
    let progress = Arc::new(Progress::new());
    let levels = lingo::bench::run_with(&config, progress.clone()).await?;
    progress.bar.finish_and_clear();
    let summaries: Vec<Summary> = levels
        .iter()
        .map(|l| Summary::of(l, &config.percentiles, &config.slo))
        .collect();
    print!("{}", render(&summaries, config.dialect.is_chat()));
    if args.detail {
        print!("{}", render_detail(&summaries, &config.percentiles));
    }
    if config.vs_url.is_some() {
        println!();
        print!("{}", vs_report(&summaries, &config));
    }
    if let Some(path) = &args.json {
        RunDoc::of(&config, &levels, &summaries).write(path)?;
    }
    if let Some(path) = &args.csv {
        std::fs::write(
            path,
            lingo::bench::csv::render(&summaries, &config.percentiles),
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    check_failures(&levels, args.max_fail)
}

/// The A/B ratios of a `--vs-url` run.
fn vs_report(summaries: &[Summary], config: &BenchConfig) -> String {
    let (a, b): (Vec<&Summary>, Vec<&Summary>) = summaries.iter().partition(|s| s.target == "A");
    let pairs: Vec<(&Summary, &Summary)> = a
        .into_iter()
        .filter_map(|x| b.iter().find(|y| y.label == x.label).map(|y| (x, *y)))
        .collect();
    compare::render(&pairs, &config.url, config.vs_url.as_deref().unwrap_or("-"))
}

fn check_failures(levels: &[LevelReport], max: Option<MaxFail>) -> anyhow::Result<()> {
    let failed: u64 = levels.iter().map(|l| l.fail() as u64).sum();
    let total: u64 = levels.iter().map(|l| l.results.len() as u64).sum();
    match max {
        Some(m) if m.exceeded(failed, total) => {
            bail!("{failed} of {total} requests failed, more than --max-fail allows")
        }
        _ => Ok(()),
    }
}

/// The progress bar on stderr: one bar per level, hidden when stderr is not a terminal.
struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new() -> Progress {
        let target = match std::io::stderr().is_terminal() {
            true => ProgressDrawTarget::stderr(),
            false => ProgressDrawTarget::hidden(),
        };
        Progress {
            bar: ProgressBar::with_draw_target(None, target),
        }
    }
}

impl Observer for Progress {
    fn level_started(&self, label: &str, requests: Option<u64>) {
        let template = match requests {
            Some(_) => "{msg:>10} [{bar:30}] {pos}/{len} requests, {per_sec}, {elapsed}",
            None => "{msg:>10} {spinner} {pos} requests, {per_sec}, {elapsed}",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            self.bar.set_style(style.progress_chars("=> "));
        }
        self.bar.set_message(label.to_string());
        match requests {
            Some(n) => self.bar.set_length(n),
            None => self.bar.unset_length(),
        }
        self.bar.reset();
    }

    fn request_done(&self, _ok: bool) {
        self.bar.inc(1);
    }

    fn level_done(&self, _report: &LevelReport) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_fail_forms() {
        assert_eq!(MaxFail::parse("5"), Ok(MaxFail::Count(5)));
        assert_eq!(MaxFail::parse("0.5"), Ok(MaxFail::Fraction(0.5)));
        assert_eq!(MaxFail::parse("2%"), Ok(MaxFail::Fraction(0.02)));
        assert!(MaxFail::parse("x").is_err());
        assert!(MaxFail::Count(2).exceeded(3, 10));
        assert!(!MaxFail::Count(3).exceeded(3, 10));
        assert!(MaxFail::Fraction(0.2).exceeded(3, 10));
        assert!(!MaxFail::Fraction(0.3).exceeded(3, 10));
    }
}
