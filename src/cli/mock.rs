//! `lingo mock`: the simulated inference server.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use lingo::mock::{FaultMode, MockConfig, MockKind};

#[derive(Debug, Args)]
pub struct MockArgs {
    /// Address to listen on.
    #[arg(long, env = "LINGO_MOCK_LISTEN", default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Which server to imitate: vllm, sglang, tgi, llamacpp, ollama or openai.
    #[arg(long, env = "LINGO_MOCK_KIND", default_value = "vllm")]
    pub kind: MockKind,
    /// Served model name.
    #[arg(long, env = "LINGO_MOCK_MODEL", default_value = "mock-model")]
    pub model: String,
    /// Delay before the first token (e.g. 50ms).
    #[arg(long, env = "LINGO_MOCK_TTFT", default_value = "0s", value_parser = humantime::parse_duration)]
    pub ttft: Duration,
    /// Delay per output token (e.g. 10ms).
    #[arg(long, env = "LINGO_MOCK_ITL", default_value = "0s", value_parser = humantime::parse_duration)]
    pub itl: Duration,
    /// Output tokens per stream chunk (speculative decoding and stream_interval send several).
    #[arg(long, env = "LINGO_MOCK_TOKENS_PER_CHUNK", default_value_t = 1)]
    pub tokens_per_chunk: u32,
    /// Context length (prompt plus output tokens).
    #[arg(long, env = "LINGO_MOCK_MAX_MODEL_LEN", default_value_t = 32768)]
    pub max_model_len: u32,
    /// Seed of the end-of-sequence position of each output (without ignore_eos).
    #[arg(long, env = "LINGO_MOCK_EOS_SEED", default_value_t = 0)]
    pub eos_seed: u64,
    /// Answer every k-th generation request with HTTP 500.
    #[arg(long, env = "LINGO_MOCK_FAIL_EVERY")]
    pub fail_every: Option<u32>,
    /// Require `Authorization: Bearer <key>` (kind openai).
    #[arg(long, env = "LINGO_MOCK_API_KEY")]
    pub api_key: Option<String>,
    /// Inject a fault into generation requests: hang-before-headers (no answer until the
    /// client closes), hang-after-headers (200 and headers, then nothing), stall-mid-stream
    /// (3 tokens or half a whole answer, then silence), close-mid-stream (the same, then the
    /// connection is cut), malformed-chunk (2 tokens, one event that is not JSON, then the
    /// rest), reset (closed before any byte), huge-error (a 400 of --fault-error-bytes),
    /// slow-tokens (--fault-slow-ms between tokens). Per request instead: the header
    /// `x-mock-fault: MODE` or the word `lingo-fault:MODE` in the prompt; or arm the next N
    /// requests with `POST /mock/fault {"mode": MODE, "count": N}`.
    #[arg(long, env = "LINGO_MOCK_FAULT")]
    pub fault: Option<FaultMode>,
    /// Share of generation requests that get --fault, 0 to 1, spread evenly over request
    /// ordinals (0.25: every 4th), so runs repeat.
    #[arg(long, env = "LINGO_MOCK_FAULT_RATE", default_value_t = 1.0, value_parser = rate)]
    pub fault_rate: f64,
    /// Body size in bytes of a huge-error answer (header `x-mock-fault-bytes` per request).
    #[arg(long, env = "LINGO_MOCK_FAULT_ERROR_BYTES", default_value_t = 50 << 20)]
    pub fault_error_bytes: u64,
    /// Milliseconds between tokens of a slow-tokens answer (header `x-mock-fault-ms`).
    #[arg(long, env = "LINGO_MOCK_FAULT_SLOW_MS", default_value_t = 500)]
    pub fault_slow_ms: u64,
    /// Prefix cache capacity in tokens: an LRU of 16-token prompt blocks, as vLLM's automatic
    /// prefix caching (0: no cache).
    #[arg(long, env = "LINGO_MOCK_CACHE_TOKENS", default_value_t = 0)]
    pub cache_tokens: u64,
    /// Prefill time per uncached prompt token, added to --ttft (e.g. 100us).
    #[arg(long, env = "LINGO_MOCK_PREFILL_PER_TOKEN", default_value = "0s", value_parser = humantime::parse_duration)]
    pub prefill_per_token: Duration,
    /// At most N requests generate at once; the rest wait in a FIFO queue (default: no cap).
    #[arg(long, env = "LINGO_MOCK_MAX_RUNNING")]
    pub max_running: Option<u32>,
    /// With --max-running, requests beyond this many waiting are answered 503.
    #[arg(long, env = "LINGO_MOCK_MAX_WAITING", default_value_t = 1024)]
    pub max_waiting: u32,
    /// Start N mocks, each with its own state, on consecutive ports from --listen's (port 0:
    /// N free ports); prints each URL on its own line once all listen.
    #[arg(long, env = "LINGO_MOCK_REPLICAS")]
    pub replicas: Option<u16>,
}

fn rate(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not between 0 and 1"))
    }
}

impl MockArgs {
    pub fn config(&self) -> MockConfig {
        MockConfig {
            kind: self.kind,
            model: self.model.clone(),
            ttft: self.ttft,
            itl: self.itl,
            tokens_per_chunk: self.tokens_per_chunk,
            max_model_len: self.max_model_len,
            eos_seed: self.eos_seed,
            fail_every: self.fail_every,
            api_key: self.api_key.clone(),
            fault: self.fault,
            fault_rate: self.fault_rate,
            fault_error_bytes: self.fault_error_bytes,
            fault_slow: Duration::from_millis(self.fault_slow_ms),
            cache_tokens: self.cache_tokens,
            prefill_per_token: self.prefill_per_token,
            max_running: self.max_running,
            max_waiting: self.max_waiting,
        }
    }
}

pub async fn run(args: MockArgs) -> anyhow::Result<()> {
    let config = args.config();
    config.validate()?;
    let Some(replicas) = args.replicas else {
        return run_one(&args, config).await;
    };
    let listeners = bind_replicas(args.listen, replicas).await?;
    let mut servers = tokio::task::JoinSet::new();
    for listener in listeners {
        // Printed only once every replica listens, so a script reading N lines can go.
        println!("http://{}", listener.local_addr()?);
        servers.spawn(lingo::mock::serve(listener, config.clone()));
    }
    tracing::info!(replicas, kind = args.kind.as_str(), model = %args.model, "lingo mock");
    tokio::select! {
        Some(r) = servers.join_next() => r??,
        _ = super::shutdown_signal() => {}
    }
    Ok(())
}

async fn run_one(args: &MockArgs, config: MockConfig) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    // The bound address, not the asked one: with port 0 that is the only way to learn it.
    let listen = listener.local_addr()?;
    tracing::info!(%listen, kind = args.kind.as_str(), model = %args.model, "lingo mock");
    tokio::select! {
        r = lingo::mock::serve(listener, config) => r?,
        _ = super::shutdown_signal() => {}
    }
    Ok(())
}

/// Listeners for `n` replicas: ports `p..p+n` from `listen`'s port `p`, or `n` free ports when
/// it is 0.
async fn bind_replicas(listen: SocketAddr, n: u16) -> anyhow::Result<Vec<tokio::net::TcpListener>> {
    anyhow::ensure!(n >= 1, "--replicas must be at least 1");
    let p = listen.port();
    if p != 0 {
        anyhow::ensure!(
            p.checked_add(n - 1).is_some(),
            "--replicas {n} from port {p} passes 65535"
        );
    }
    let mut listeners = Vec::with_capacity(usize::from(n));
    for i in 0..n {
        let port = if p == 0 { 0 } else { p + i };
        let addr = SocketAddr::new(listen.ip(), port);
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        listeners.push(l);
    }
    Ok(listeners)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ports(ls: &[tokio::net::TcpListener]) -> Vec<u16> {
        ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
    }

    #[tokio::test]
    async fn replicas_take_consecutive_ports_from_the_given_one() {
        // A port just seen free may be taken by the time it is bound again: a few tries.
        for _ in 0..10 {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let p = probe.local_addr().unwrap().port();
            drop(probe);
            if p > 65533 {
                continue;
            }
            let listen = SocketAddr::from(([127, 0, 0, 1], p));
            if let Ok(ls) = bind_replicas(listen, 3).await {
                assert_eq!(ports(&ls), vec![p, p + 1, p + 2]);
                return;
            }
        }
        panic!("no three consecutive free ports in 10 tries");
    }

    #[tokio::test]
    async fn port_zero_gives_distinct_free_ports_and_the_range_is_checked() {
        let ls = bind_replicas("127.0.0.1:0".parse().unwrap(), 3)
            .await
            .unwrap();
        let mut got = ports(&ls);
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), 3);
        let err = bind_replicas("127.0.0.1:65535".parse().unwrap(), 2)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("passes 65535"), "{err}");
        assert!(bind_replicas("127.0.0.1:0".parse().unwrap(), 0)
            .await
            .is_err());
    }
}
