//! The soak driver behind `scripts/soak.sh`: many concurrent clients in every dialect,
//! streaming and not, a share of them asking the mock for a fault (`lingo-fault:<mode>` in
//! the prompt) and a share abandoning their request early. It counts what it sent and what
//! came back, then checks lingo's books: `lingo_requests_total` and the request log must
//! both equal the requests sent, and `lingo_requests_in_flight` must return to 0.
//!
//! Bounded in time (`--duration`) and in concurrency; talks to loopback addresses only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

#[derive(Debug, Parser)]
struct Args {
    /// lingo's base URL (repeat for several lingo instances; clients spread over them).
    #[arg(long, required = true)]
    lingo: Vec<String>,
    /// How long to send new requests, in seconds.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    #[arg(long, default_value_t = 200)]
    concurrency: usize,
    /// Share of requests that ask the mock for a fault.
    #[arg(long, default_value_t = 0.2)]
    fault_rate: f64,
    /// Share of requests the client abandons before the answer ends.
    #[arg(long, default_value_t = 0.05)]
    abandon_rate: f64,
    /// The longest any one request may take before the client counts it as hung.
    #[arg(long, default_value_t = 60)]
    request_timeout: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Faults the mock injects; each must end in a clear error (or a timeout lingo enforces).
const FAULTS: [&str; 8] = [
    "hang-before-headers",
    "hang-after-headers",
    "stall-mid-stream",
    "close-mid-stream",
    "malformed-chunk",
    "reset",
    "huge-error",
    "slow-tokens",
];

/// One client dialect: its path and request body.
#[derive(Clone, Copy)]
enum Shape {
    Sglang,
    Completions,
    Chat,
    Tgi,
    Anthropic,
    VllmLegacy,
    Llamacpp,
    OllamaGenerate,
    OllamaChat,
}

const SHAPES: [Shape; 9] = [
    Shape::Sglang,
    Shape::Completions,
    Shape::Chat,
    Shape::Tgi,
    Shape::Anthropic,
    Shape::VllmLegacy,
    Shape::Llamacpp,
    Shape::OllamaGenerate,
    Shape::OllamaChat,
];

impl Shape {
    fn request(self, model: &str, prompt: &str, n: u32, stream: bool) -> (&'static str, Value) {
        let chat = json!([{"role": "user", "content": prompt}]);
        match self {
            Shape::Sglang => (
                "/generate",
                json!({"text": prompt, "sampling_params": {"max_new_tokens": n}, "stream": stream}),
            ),
            Shape::Completions => (
                "/v1/completions",
                json!({"model": model, "prompt": prompt, "max_tokens": n, "stream": stream}),
            ),
            Shape::Chat => (
                "/v1/chat/completions",
                json!({"model": model, "messages": chat, "max_tokens": n, "stream": stream}),
            ),
            Shape::Tgi => (
                if stream {
                    "/generate_stream"
                } else {
                    "/generate"
                },
                json!({"inputs": prompt, "parameters": {"max_new_tokens": n}}),
            ),
            Shape::Anthropic => (
                "/v1/messages",
                json!({"model": model, "messages": chat, "max_tokens": n, "stream": stream}),
            ),
            Shape::VllmLegacy => (
                "/generate",
                json!({"prompt": prompt, "max_tokens": n, "stream": stream}),
            ),
            Shape::Llamacpp => (
                "/completion",
                json!({"prompt": prompt, "n_predict": n, "stream": stream}),
            ),
            Shape::OllamaGenerate => (
                "/api/generate",
                json!({"model": model, "prompt": prompt, "stream": stream, "raw": true,
                       "options": {"num_predict": n}}),
            ),
            Shape::OllamaChat => (
                "/api/chat",
                json!({"model": model, "messages": chat, "stream": stream,
                       "options": {"num_predict": n}}),
            ),
        }
    }
}

#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    ok: AtomicU64,
    http_error: AtomicU64,
    /// A 200 whose body carried an error event or ended early.
    in_band_error: AtomicU64,
    abandoned: AtomicU64,
    /// The client gave up after `--request-timeout`: lingo let a request hang.
    hung: AtomicU64,
    /// The connection failed before any answer (lingo refused or reset it).
    transport: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct Plan {
    base: String,
    path: &'static str,
    body: Value,
    abandon_after: Option<Duration>,
}

fn plan(rng: &mut StdRng, args: &Args, model: &str) -> Plan {
    let shape = SHAPES[rng.random_range(0..SHAPES.len())];
    let stream = rng.random_bool(0.5);
    let n = rng.random_range(4..48);
    let mut prompt = format!("soak request {} says hello", rng.random::<u32>());
    if rng.random_bool(args.fault_rate) {
        prompt.push_str(" lingo-fault:");
        prompt.push_str(FAULTS[rng.random_range(0..FAULTS.len())]);
    }
    let (path, body) = shape.request(model, &prompt, n, stream);
    // Long enough for the request to have reached lingo's handler: only then does lingo
    // know of it, and only then must it be counted.
    let abandon_after = rng
        .random_bool(args.abandon_rate)
        .then(|| Duration::from_millis(rng.random_range(100..1500)));
    Plan {
        base: args.lingo[rng.random_range(0..args.lingo.len())].clone(),
        path,
        body,
        abandon_after,
    }
}

/// Send one request and read its answer to the end; says how it went.
async fn exchange(http: &reqwest::Client, p: &Plan) -> &'static str {
    let resp = match http
        .post(format!("{}{}", p.base, p.path))
        .json(&p.body)
        .send()
        .await
    {
        Ok(r) => r,
        Err(_) => return "transport",
    };
    let status = resp.status();
    let body = match resp.bytes().await {
        Ok(b) => b,
        // The body broke off: lingo must never do that silently, but a reset upstream seen
        // through lingo ends in-band, so a broken body here is lingo's fault.
        Err(_) => return "transport",
    };
    if !status.is_success() {
        return "http_error";
    }
    let text = String::from_utf8_lossy(&body);
    if text.contains("\"error\"") || text.contains("event: error") {
        return "in_band_error";
    }
    "ok"
}

async fn client(
    http: reqwest::Client,
    args: Arc<Args>,
    model: Arc<String>,
    tally: Arc<Tally>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let end = Instant::now() + Duration::from_secs(args.duration);
    let limit = Duration::from_secs(args.request_timeout);
    while Instant::now() < end {
        let p = plan(&mut rng, &args, &model);
        bump(&tally.sent);
        let counter = match p.abandon_after {
            Some(after) => tokio::time::timeout(after, exchange(&http, &p))
                .await
                .unwrap_or("abandoned"),
            None => tokio::time::timeout(limit, exchange(&http, &p))
                .await
                .unwrap_or("hung"),
        };
        bump(match counter {
            "ok" => &tally.ok,
            "http_error" => &tally.http_error,
            "in_band_error" => &tally.in_band_error,
            "abandoned" => &tally.abandoned,
            "hung" => &tally.hung,
            _ => &tally.transport,
        });
    }
}

/// The sum of a metric's samples on one lingo's `/metrics`.
async fn metric_sum(http: &reqwest::Client, base: &str, name: &str) -> anyhow::Result<f64> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

async fn first_model(http: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let v: Value = http
        .get(format!("{base}/v1/models"))
        .send()
        .await?
        .json()
        .await?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("{base}/v1/models lists no model"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let model = Arc::new(first_model(&http, &args.lingo[0]).await?);
    let mut before = 0.0;
    for base in &args.lingo {
        before += metric_sum(&http, base, "lingo_requests_total").await?;
    }
    let tally = Arc::new(Tally::default());
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|i| {
            let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
            tokio::spawn(client(
                http.clone(),
                args.clone(),
                model.clone(),
                tally.clone(),
                seed,
            ))
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    // Abandoned requests are still being wound down inside lingo (its timeouts end them).
    let settle = Instant::now() + Duration::from_secs(args.request_timeout);
    let mut in_flight = f64::NAN;
    while Instant::now() < settle {
        in_flight = 0.0;
        for base in &args.lingo {
            in_flight += metric_sum(&http, base, "lingo_requests_in_flight").await?;
        }
        if in_flight == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut after = 0.0;
    for base in &args.lingo {
        after += metric_sum(&http, base, "lingo_requests_total").await?;
    }
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let summary = json!({
        "sent": load(&tally.sent),
        "ok": load(&tally.ok),
        "http_error": load(&tally.http_error),
        "in_band_error": load(&tally.in_band_error),
        "abandoned": load(&tally.abandoned),
        "hung": load(&tally.hung),
        "transport": load(&tally.transport),
        "lingo_requests_total": after - before,
        "in_flight_at_end": in_flight,
    });
    println!("{summary}");
    Ok(())
}
