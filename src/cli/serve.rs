//! `lingo serve`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use lingo::config::{Config, MetricsCompat};
use lingo::upstream::KindSetting;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML config file (see config/lingo.toml); flags and LINGO_* variables override it.
    #[arg(long, env = "LINGO_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:30000].
    #[arg(long, env = "LINGO_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Base URL of the inference server [default: http://127.0.0.1:8000].
    #[arg(long, env = "LINGO_UPSTREAM")]
    pub upstream: Option<String>,
    /// Upstream kind: auto (probe at start), vllm, sglang, tgi, llamacpp, ollama or openai
    /// [default: auto].
    #[arg(long, env = "LINGO_UPSTREAM_KIND")]
    pub upstream_kind: Option<KindSetting>,
    /// Environment variable holding the upstream's API key, sent as a bearer token
    /// [default: OPENAI_API_KEY for kind openai].
    #[arg(long, env = "LINGO_UPSTREAM_API_KEY_ENV")]
    pub upstream_api_key_env: Option<String>,
    /// The upstream's name in metric labels [default: default].
    #[arg(long, env = "LINGO_UPSTREAM_NAME")]
    pub upstream_name: Option<String>,
    /// Model for requests that name none (SGLang /generate) [default: the upstream's first].
    #[arg(long, env = "LINGO_MODEL")]
    pub model: Option<String>,
    /// Also serve /metrics on this address.
    #[arg(long, env = "LINGO_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Also export another server's metric names: vllm.
    #[arg(long, env = "LINGO_METRICS_COMPAT")]
    pub metrics_compat: Option<MetricsCompat>,
    /// Write one JSON line per request to this file (- for stdout).
    #[arg(long, env = "LINGO_REQUEST_LOG")]
    pub request_log: Option<String>,
    /// Record no metrics (to measure their cost).
    #[arg(long, env = "LINGO_NO_METRICS")]
    pub no_metrics: bool,
}

impl ServeArgs {
    /// File, then environment and flags (clap already merged those two, flags winning).
    pub fn config(&self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(p) => Config::load(p)?,
            None => Config::default(),
        };
        if let Some(v) = self.listen {
            c.listen = v;
        }
        if let Some(v) = &self.upstream {
            c.upstream.url = v.clone();
        }
        if let Some(v) = self.upstream_kind {
            c.upstream.kind = v;
        }
        if let Some(v) = &self.upstream_api_key_env {
            c.upstream.api_key_env = Some(v.clone());
        }
        if let Some(v) = &self.upstream_name {
            c.upstream.name = v.clone();
        }
        if let Some(v) = &self.model {
            c.upstream.model = Some(v.clone());
        }
        if let Some(v) = self.metrics_listen {
            c.metrics.listen = Some(v);
        }
        if let Some(v) = self.metrics_compat {
            c.metrics.compat = Some(v);
        }
        if self.no_metrics {
            c.metrics.disabled = true;
        }
        if let Some(v) = &self.request_log {
            c.metrics.request_log = Some(v.clone());
        }
        c.validate()?;
        Ok(c)
    }
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(listen = %config.listen, upstream = %config.upstream.url, "lingo serve");
    lingo::proxy::serve(listener, config, super::shutdown_signal()).await?;
    Ok(())
}
