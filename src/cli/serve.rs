//! `lingo serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use lingo::config::{
    AuthConfig, Config, EndpointConfig, Limits, MetricsCompat, OverloadStatus, PoolConfig, Timeouts,
};
use lingo::upstream::KindSetting;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML config file (see config/lingo.toml); flags and LINGO_* variables override it.
    #[arg(long, env = "LINGO_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:30000].
    #[arg(long, env = "LINGO_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Base URL of the inference server [default: http://127.0.0.1:8000]. Repeat it (or
    /// separate URLs by commas) for one pool of several endpoints, models discovered; given,
    /// it replaces the config file's `[pools]`.
    #[arg(long, env = "LINGO_UPSTREAM", value_delimiter = ',')]
    pub upstream: Vec<String>,
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
    /// Serve client connections on this many single-threaded runtimes (`workers`; default
    /// one per core; 0: tokio's shared runtime).
    #[arg(long, env = "LINGO_WORKERS")]
    pub workers: Option<usize>,
    /// Serve /metrics on the client port too: true or false [default: true].
    #[arg(long, env = "LINGO_METRICS_ON_CLIENT_PORT")]
    pub metrics_on_client_port: Option<bool>,
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// `[timeouts]`, one flag and one `LINGO_TIMEOUT_*` variable per key (values like `30s`).
#[derive(Debug, Args)]
pub struct TimeoutArgs {
    /// A client's request line and headers [default: 30s].
    #[arg(long, env = "LINGO_TIMEOUT_CLIENT_HEADER", value_parser = humantime::parse_duration)]
    pub timeout_client_header: Option<Duration>,
    /// A keep-alive client connection with no request [default: 60s].
    #[arg(long, env = "LINGO_TIMEOUT_CLIENT_IDLE", value_parser = humantime::parse_duration)]
    pub timeout_client_idle: Option<Duration>,
    /// Reading a client's request body (then 408) [default: 30s].
    #[arg(long, env = "LINGO_TIMEOUT_CLIENT_BODY", value_parser = humantime::parse_duration)]
    pub timeout_client_body: Option<Duration>,
    /// Connecting to the upstream [default: 5s].
    #[arg(long, env = "LINGO_TIMEOUT_CONNECT", value_parser = humantime::parse_duration)]
    pub timeout_connect: Option<Duration>,
    /// A stream's request to its first token [default: 300s].
    #[arg(long, env = "LINGO_TIMEOUT_FIRST_TOKEN", value_parser = humantime::parse_duration)]
    pub timeout_first_token: Option<Duration>,
    /// The upstream's response headers [default: 600s].
    #[arg(long, env = "LINGO_TIMEOUT_RESPONSE_HEADERS", value_parser = humantime::parse_duration)]
    pub timeout_response_headers: Option<Duration>,
    /// The longest gap between upstream body chunks [default: 120s].
    #[arg(long, env = "LINGO_TIMEOUT_STREAM_IDLE", value_parser = humantime::parse_duration)]
    pub timeout_stream_idle: Option<Duration>,
    /// A whole request [default: none].
    #[arg(long, env = "LINGO_TIMEOUT_TOTAL", value_parser = humantime::parse_duration)]
    pub timeout_total: Option<Duration>,
    /// How long requests may run on after SIGTERM [default: 30s].
    #[arg(long, env = "LINGO_TIMEOUT_SHUTDOWN_GRACE", value_parser = humantime::parse_duration)]
    pub timeout_shutdown_grace: Option<Duration>,
    /// How long an idle upstream connection stays pooled [default: 4s].
    #[arg(long, env = "LINGO_TIMEOUT_POOL_IDLE", value_parser = humantime::parse_duration)]
    pub timeout_pool_idle: Option<Duration>,
}

/// `[limits]`, one flag and one `LINGO_*` variable per key.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Open client connections [default: the open-file limit less a reserve].
    #[arg(long, env = "LINGO_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Requests in flight; beyond it 429 (or --overload-status) [default: no limit].
    #[arg(long, env = "LINGO_MAX_IN_FLIGHT")]
    pub max_in_flight: Option<usize>,
    /// The status --max-in-flight answers: 429 or 503 [default: 429].
    #[arg(long, env = "LINGO_OVERLOAD_STATUS", value_parser = parse_overload)]
    pub overload_status: Option<OverloadStatus>,
    /// A client's request body in bytes (then 413) [default: 16 MiB].
    #[arg(long, env = "LINGO_MAX_REQUEST_BODY")]
    pub max_request_body: Option<usize>,
    /// An upstream error body in bytes; the rest is cut [default: 1 MiB].
    #[arg(long, env = "LINGO_MAX_UPSTREAM_ERROR_BODY")]
    pub max_upstream_error_body: Option<usize>,
    /// An upstream's whole answer in bytes [default: 64 MiB].
    #[arg(long, env = "LINGO_MAX_UPSTREAM_BODY")]
    pub max_upstream_body: Option<usize>,
    /// One upstream stream event in bytes [default: 4 MiB].
    #[arg(long, env = "LINGO_MAX_STREAM_EVENT")]
    pub max_stream_event: Option<usize>,
}

/// `[auth]`.
#[derive(Debug, Args)]
pub struct AuthArgs {
    /// Client keys, one `NAME:KEY` or `NAME:sha256:HEX` per line.
    #[arg(long, env = "LINGO_AUTH_KEYS_FILE")]
    pub auth_keys_file: Option<String>,
    /// An environment variable holding such lines.
    #[arg(long, env = "LINGO_AUTH_KEYS_ENV")]
    pub auth_keys_env: Option<String>,
    /// Requests per minute per client key [default: no limit].
    #[arg(long, env = "LINGO_AUTH_REQUESTS_PER_MINUTE")]
    pub auth_requests_per_minute: Option<u32>,
    /// Tokens per minute per client key [default: no limit].
    #[arg(long, env = "LINGO_AUTH_TOKENS_PER_MINUTE")]
    pub auth_tokens_per_minute: Option<u64>,
    /// Start without client auth even with an upstream key on a non-loopback address.
    #[arg(long, env = "LINGO_ALLOW_UNAUTHENTICATED")]
    pub allow_unauthenticated: bool,
}

fn parse_overload(s: &str) -> Result<OverloadStatus, String> {
    match s {
        "429" => Ok(OverloadStatus::TooMany),
        "503" => Ok(OverloadStatus::Unavailable),
        other => Err(format!("`{other}`: 429 or 503")),
    }
}

impl TimeoutArgs {
    fn apply(&self, t: &mut Timeouts) {
        let set = |slot: &mut Duration, v: Option<Duration>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        set(&mut t.client_header, self.timeout_client_header);
        set(&mut t.client_idle, self.timeout_client_idle);
        set(&mut t.client_body, self.timeout_client_body);
        set(&mut t.connect, self.timeout_connect);
        set(&mut t.first_token, self.timeout_first_token);
        set(&mut t.response_headers, self.timeout_response_headers);
        set(&mut t.stream_idle, self.timeout_stream_idle);
        set(&mut t.shutdown_grace, self.timeout_shutdown_grace);
        set(&mut t.pool_idle, self.timeout_pool_idle);
        if self.timeout_total.is_some() {
            t.total = self.timeout_total;
        }
    }
}

impl LimitArgs {
    fn apply(&self, l: &mut Limits) {
        let set = |slot: &mut usize, v: Option<usize>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        if self.max_connections.is_some() {
            l.max_connections = self.max_connections;
        }
        if self.max_in_flight.is_some() {
            l.max_in_flight = self.max_in_flight;
        }
        if let Some(v) = self.overload_status {
            l.overload_status = v;
        }
        set(&mut l.max_request_body, self.max_request_body);
        set(&mut l.max_upstream_error_body, self.max_upstream_error_body);
        set(&mut l.max_upstream_body, self.max_upstream_body);
        set(&mut l.max_stream_event, self.max_stream_event);
    }
}

impl AuthArgs {
    fn apply(&self, a: &mut AuthConfig) {
        if let Some(v) = &self.auth_keys_file {
            a.keys_file = Some(v.clone());
        }
        if let Some(v) = &self.auth_keys_env {
            a.keys_env = Some(v.clone());
        }
        if self.auth_requests_per_minute.is_some() {
            a.requests_per_minute = self.auth_requests_per_minute;
        }
        if self.auth_tokens_per_minute.is_some() {
            a.tokens_per_minute = self.auth_tokens_per_minute;
        }
        if self.allow_unauthenticated {
            a.allow_unauthenticated = true;
        }
    }
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
        self.apply_upstreams(&mut c);
        if let Some(v) = self.metrics_listen {
            c.metrics.listen = Some(v);
        }
        if let Some(v) = self.metrics_compat {
            c.metrics.compat = Some(v);
        }
        if self.no_metrics {
            c.metrics.disabled = true;
        }
        if self.workers.is_some() {
            c.workers = self.workers;
        }
        if let Some(v) = &self.request_log {
            c.metrics.request_log = Some(v.clone());
        }
        if let Some(v) = self.metrics_on_client_port {
            c.metrics.on_client_port = v;
        }
        self.timeouts.apply(&mut c.timeouts);
        self.limits.apply(&mut c.limits);
        self.auth.apply(&mut c.auth);
        c.validate()?;
        Ok(c)
    }
}

impl ServeArgs {
    /// One `--upstream` is `upstream.url`; several are one pool named `upstream.name`, each
    /// an endpoint of `upstream.kind` with `upstream.api_key_env`.
    fn apply_upstreams(&self, c: &mut Config) {
        let urls: Vec<&String> = self.upstream.iter().filter(|u| !u.is_empty()).collect();
        match urls.as_slice() {
            [] => {}
            [one] => {
                c.upstream.url = one.to_string();
                c.pools.clear();
            }
            many => {
                let endpoints = many
                    .iter()
                    .map(|u| {
                        let mut ep = EndpointConfig::new(u, c.upstream.kind);
                        ep.api_key_env = c.upstream.api_key_env.clone();
                        ep
                    })
                    .collect();
                let pool = PoolConfig {
                    endpoints,
                    ..PoolConfig::default()
                };
                c.pools = [(c.upstream.name.clone(), pool)].into();
                c.default_pool = None;
            }
        }
    }
}

/// What must hold before lingo listens: the client keys load, and an upstream key is not
/// offered to anyone who can reach the port.
fn startup_checks(config: &Config) -> anyhow::Result<()> {
    if let Some(auth) = lingo::auth::Auth::from_config(&config.auth)? {
        tracing::info!(keys = auth.len(), "client authentication on");
    }
    lingo::auth::check_exposure(config).map_err(anyhow::Error::msg)
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    startup_checks(&config)?;
    let listener = lingo::proxy::bind(config.listen, config.worker_count())
        .and_then(tokio::net::TcpListener::from_std)
        .with_context(|| format!("binding {}", config.listen))?;
    let listen = listener.local_addr()?;
    for (pool, p) in config.pool_configs() {
        let urls: Vec<String> = p
            .endpoints
            .iter()
            .map(|e| lingo::upstream::redact_url(&e.url))
            .collect();
        tracing::info!(%listen, %pool, ?urls, "lingo serve");
    }
    let (drain, stop) = super::drain_signals();
    tokio::select! {
        r = lingo::proxy::serve(listener, config, drain) => r?,
        _ = stop => anyhow::bail!("second signal: stopped without draining"),
    }
    Ok(())
}
