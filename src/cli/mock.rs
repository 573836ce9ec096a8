//! `lingo mock`: the simulated inference server.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use lingo::mock::{MockConfig, MockKind};

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
        }
    }
}

pub async fn run(args: MockArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(listen = %args.listen, kind = args.kind.as_str(), model = %args.model, "lingo mock");
    tokio::select! {
        r = lingo::mock::serve(listener, args.config()) => r?,
        _ = super::shutdown_signal() => {}
    }
    Ok(())
}
