//! Configuration: serde structs with documented defaults and a `validate()` that names the
//! offending key. Sources are layered file, then environment, then command line (the CLI
//! module applies the last two over what `load` returns).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::upstream::KindSetting;

mod fleet;

pub use fleet::{
    check_url, EndpointConfig, HealthConfig, LoadConfig, MirrorConfig, Policy, PoolConfig,
};

/// The most `workers` lingo accepts (a typo guard: each is a thread and a runtime).
const MAX_WORKERS: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("invalid config: {key}: {message}")]
    Invalid { key: String, message: String },
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    invalid_at(key, message)
}

fn invalid_at(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        message: message.into(),
    }
}

/// The whole configuration of `lingo serve`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the proxy listens on. Default `127.0.0.1:30000` (SGLang's default port).
    pub listen: SocketAddr,
    pub upstream: UpstreamConfig,
    /// Model aliases: client-facing name = upstream name. Rewritten in the request and back
    /// in the response.
    pub models: BTreeMap<String, String>,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub auth: AuthConfig,
    pub metrics: MetricsConfig,
    /// The fleet: pools of endpoints by name (see `fleet.rs`). Default: none, meaning one
    /// implicit pool named `upstream.name` of the one `upstream.url`.
    pub pools: BTreeMap<String, PoolConfig>,
    /// The pool for requests that name no model. Default: the first pool by name.
    pub default_pool: Option<String>,
    /// How `dns://NAME:PORT` endpoints are resolved (interval, nameserver).
    pub discovery: crate::fleet::discovery::DiscoveryConfig,
    /// Health checks of every pool without its own `health` (see `fleet.rs`).
    pub health: HealthConfig,
    /// The engines' load figures, polled per endpoint (see `fleet.rs`).
    pub load: LoadConfig,
    /// Serve client connections on this many threads, each its own single-threaded runtime
    /// with its own upstream connections (as nginx's `worker_processes auto`). Default: one
    /// per core lingo may use (`std::thread::available_parallelism`: affinity and cgroup
    /// quota). 0: tokio's one work-stealing runtime (`TOKIO_WORKER_THREADS` sets its threads).
    pub workers: Option<usize>,
}

/// Extra metric names to export beside lingo's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsCompat {
    /// vLLM's names, buckets and `model_name` label, for vLLM's Grafana dashboards.
    Vllm,
}

impl std::str::FromStr for MetricsCompat {
    type Err = String;
    fn from_str(s: &str) -> Result<MetricsCompat, String> {
        match s {
            "vllm" => Ok(MetricsCompat::Vllm),
            other => Err(format!("unknown metrics compat `{other}` (vllm)")),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Record no metrics at all (to measure what they cost). Default false.
    pub disabled: bool,
    /// Also serve `/metrics` on this address (it is always on the proxy's own port too).
    /// Default: unset.
    pub listen: Option<SocketAddr>,
    /// Also export another server's metric names. Default: unset.
    pub compat: Option<MetricsCompat>,
    /// Write one JSON line per request to this file (`-` for standard output). Default: unset.
    pub request_log: Option<String>,
    /// Serve `/metrics` on the client port too. Default true; set false when `listen` above
    /// should be the only place metrics are read.
    pub on_client_port: bool,
}

impl Default for MetricsConfig {
    fn default() -> MetricsConfig {
        MetricsConfig {
            disabled: false,
            listen: None,
            compat: None,
            request_log: None,
            on_client_port: true,
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 30000)),
            upstream: UpstreamConfig::default(),
            models: BTreeMap::new(),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            auth: AuthConfig::default(),
            metrics: MetricsConfig::default(),
            pools: BTreeMap::new(),
            default_pool: None,
            discovery: Default::default(),
            health: HealthConfig::default(),
            load: LoadConfig::default(),
            workers: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Base URL of the inference server. Default `http://127.0.0.1:8000` (vLLM's default).
    pub url: String,
    /// `auto` (probe the server at start), `vllm`, `sglang`, `tgi`, `llamacpp`, `ollama` or
    /// `openai` (any other OpenAI-compatible server: standard fields only). Default `auto`.
    pub kind: KindSetting,
    /// The upstream's name in metrics labels. Default `default`.
    pub name: String,
    /// Model used for requests that name none (SGLang's `/generate` never does). Default:
    /// the first model the upstream lists on `/v1/models`.
    pub model: Option<String>,
    /// The environment variable that holds the upstream's API key, sent as
    /// `Authorization: Bearer <key>` on every upstream request (in place of the client's).
    /// Default: `OPENAI_API_KEY` for kind `openai` (when it is set), none otherwise.
    pub api_key_env: Option<String>,
}

impl UpstreamConfig {
    /// The API key to send upstream, read from the environment.
    pub fn api_key(&self) -> Result<Option<String>, ConfigError> {
        fleet::api_key(self.api_key_env.as_deref(), self.kind)
            .map_err(|m| invalid("upstream.api_key_env", m))
    }
}

impl Default for UpstreamConfig {
    fn default() -> UpstreamConfig {
        UpstreamConfig {
            url: "http://127.0.0.1:8000".into(),
            kind: KindSetting::Auto,
            name: "default".into(),
            model: None,
            api_key_env: None,
        }
    }
}

/// A timer per phase of a request (Envoy and nginx keep them apart too): each answers a
/// different question, and each expiry is recorded with outcome `timeout` and its name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// A client's request line and headers: on a new connection from its accept, on a
    /// keep-alive one from the first byte of its next request. Past it the connection closes
    /// without an answer. Default 30s.
    #[serde(with = "humantime_serde")]
    pub client_header: Duration,
    /// A keep-alive connection with no request in progress (a long stream is in progress).
    /// Default 60s (nginx's too).
    #[serde(with = "humantime_serde")]
    pub client_idle: Duration,
    /// Reading a client's request body; past it the client gets a 408. Default 30s.
    #[serde(with = "humantime_serde")]
    pub client_body: Duration,
    /// Connecting to the upstream. Default 5s.
    #[serde(with = "humantime_serde")]
    pub connect: Duration,
    /// A stream's request sent to its first generated token (queueing plus prefill). A 504
    /// in the client's dialect while nothing was sent, the in-band error after. Default 300s.
    #[serde(with = "humantime_serde")]
    pub first_token: Duration,
    /// From sending a request to the upstream's response headers (for a whole answer the
    /// headers come with the whole generation). Default 600s.
    #[serde(with = "humantime_serde")]
    pub response_headers: Duration,
    /// The longest gap between upstream body chunks once headers arrived, for streams and
    /// whole answers alike. Default 120s.
    #[serde(with = "humantime_serde")]
    pub stream_idle: Duration,
    /// A whole request, arrival to the end of its answer. Default: none.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub total: Option<Duration>,
    /// On SIGTERM or SIGINT, how long in-flight requests may run before their streams get
    /// their dialect's error and lingo exits. Default 30s.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// How long an idle upstream connection stays pooled. Default 4s: vLLM and SGLang run
    /// uvicorn, which closes idle keep-alive connections after 5s; reusing one it is closing
    /// fails the request.
    #[serde(with = "humantime_serde")]
    pub pool_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            client_header: Duration::from_secs(30),
            client_idle: Duration::from_secs(60),
            client_body: Duration::from_secs(30),
            connect: Duration::from_secs(5),
            first_token: Duration::from_secs(300),
            response_headers: Duration::from_secs(600),
            stream_idle: Duration::from_secs(120),
            total: None,
            shutdown_grace: Duration::from_secs(30),
            pool_idle: Duration::from_secs(4),
        }
    }
}

/// What 'too many requests in flight' answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverloadStatus {
    /// 429 Too Many Requests (what OpenAI's clients retry on).
    #[serde(rename = "429")]
    TooMany,
    /// 503 Service Unavailable.
    #[serde(rename = "503")]
    Unavailable,
}

impl OverloadStatus {
    pub fn status(self) -> http::StatusCode {
        match self {
            OverloadStatus::TooMany => http::StatusCode::TOO_MANY_REQUESTS,
            OverloadStatus::Unavailable => http::StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Bounds on everything a client or an upstream can make lingo hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Open client connections. Further connections wait in the kernel's backlog; near the
    /// cap, idle keep-alive connections are closed first. Default: unset, meaning
    /// `(nofile - 64) / 2` for the open-file limit `nofile` (raised to its hard limit at
    /// start): 64 descriptors kept for listeners and files, and one upstream connection for
    /// each client connection.
    pub max_connections: Option<usize>,
    /// Requests in flight at once; beyond it a request is refused at once (429 or 503 with
    /// `Retry-After`, in the client's dialect), never queued. Default: unset (no limit).
    pub max_in_flight: Option<usize>,
    /// The status `max_in_flight` answers with: 429 or 503. Default 429.
    pub overload_status: OverloadStatus,
    /// A client's request body, in bytes; larger is a 413. Default 16 MiB.
    pub max_request_body: usize,
    /// An upstream's error body, in bytes; the rest is cut and the cut noted. Default 1 MiB.
    pub max_upstream_error_body: usize,
    /// An upstream's whole (non-stream) answer, in bytes; larger fails the request with a
    /// 502. Default 64 MiB.
    pub max_upstream_body: usize,
    /// One upstream stream event, in bytes; larger fails the stream. Default 4 MiB.
    pub max_stream_event: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: None,
            max_in_flight: None,
            overload_status: OverloadStatus::TooMany,
            max_request_body: 16 << 20,
            max_upstream_error_body: 1 << 20,
            max_upstream_body: 64 << 20,
            max_stream_event: 4 << 20,
        }
    }
}

/// Client authentication. With neither `keys_file` nor `keys_env` set, lingo serves
/// everyone (and refuses to start with an upstream key on a non-loopback address unless
/// `allow_unauthenticated`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// A file of client keys, one per line: `NAME:KEY`, or `NAME:sha256:HEX` for a key
    /// stored as its SHA-256. Blank lines and `#` comments are skipped. Default: unset.
    pub keys_file: Option<String>,
    /// An environment variable holding lines like those of `keys_file`. Default: unset.
    pub keys_env: Option<String>,
    /// Requests per minute each key may make. Default: unset (no limit).
    pub requests_per_minute: Option<u32>,
    /// Tokens (prompt plus generated) per minute each key may spend. Default: unset.
    pub tokens_per_minute: Option<u64>,
    /// Start without client auth even with an upstream key on a non-loopback address.
    /// Default false.
    pub allow_unauthenticated: bool,
}

impl AuthConfig {
    /// Whether client authentication is configured.
    pub fn enabled(&self) -> bool {
        self.keys_file.is_some() || self.keys_env.is_some()
    }
}

impl Config {
    /// How many worker runtimes serve client connections (`workers`; 0: tokio's runtime).
    pub fn worker_count(&self) -> usize {
        self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }

    /// Read a TOML file (keys not in these structs are an error).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        // With `[pools]`, `upstream.url` (most likely its default) makes no pool.
        if self.pools.is_empty() {
            self.validate_upstream()?;
        }
        self.validate_pools()?;
        self.discovery.validate()?;
        if self.upstream.name.is_empty() {
            return Err(invalid("upstream.name", "must not be empty"));
        }
        for (alias, target) in &self.models {
            if alias.is_empty() || target.is_empty() {
                return Err(invalid("models", "alias and target must be non-empty"));
            }
        }
        // Port 0 twice is two free ports, not one address.
        if self.metrics.listen == Some(self.listen) && self.listen.port() != 0 {
            return Err(invalid("metrics.listen", "must differ from listen"));
        }
        if self.metrics.request_log.as_deref() == Some("") {
            return Err(invalid("metrics.request_log", "must be a path or -"));
        }
        let t = &self.timeouts;
        for (key, d) in [
            ("timeouts.client_header", t.client_header),
            ("timeouts.client_idle", t.client_idle),
            ("timeouts.client_body", t.client_body),
            ("timeouts.connect", t.connect),
            ("timeouts.first_token", t.first_token),
            ("timeouts.response_headers", t.response_headers),
            ("timeouts.stream_idle", t.stream_idle),
            ("timeouts.total", t.total.unwrap_or(Duration::MAX)),
            ("timeouts.pool_idle", t.pool_idle),
        ] {
            if d.is_zero() {
                return Err(invalid(key, "must be greater than zero"));
            }
        }
        if self.workers.is_some_and(|n| n > MAX_WORKERS) {
            return Err(invalid(
                "workers",
                format!("must be from 0 to {MAX_WORKERS}"),
            ));
        }
        self.validate_limits()?;
        self.validate_auth()
    }

    fn validate_upstream(&self) -> Result<(), ConfigError> {
        let url: http::Uri = self
            .upstream
            .url
            .parse()
            .map_err(|e| invalid("upstream.url", format!("not a URL: {e}")))?;
        if !matches!(url.scheme_str(), Some("http" | "https")) {
            return Err(invalid(
                "upstream.url",
                "must start with http:// or https://",
            ));
        }
        if url.host().is_none() {
            return Err(invalid("upstream.url", "has no host"));
        }
        if self.upstream.api_key_env.as_deref() == Some("") {
            return Err(invalid("upstream.api_key_env", "must name a variable"));
        }
        self.upstream.api_key()?;
        Ok(())
    }

    fn validate_limits(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
        for (key, n) in [
            ("limits.max_connections", l.max_connections.unwrap_or(1)),
            ("limits.max_in_flight", l.max_in_flight.unwrap_or(1)),
            ("limits.max_request_body", l.max_request_body),
            ("limits.max_upstream_error_body", l.max_upstream_error_body),
            ("limits.max_upstream_body", l.max_upstream_body),
            ("limits.max_stream_event", l.max_stream_event),
        ] {
            if n == 0 {
                return Err(invalid(key, "must be greater than zero"));
            }
        }
        Ok(())
    }

    fn validate_auth(&self) -> Result<(), ConfigError> {
        let a = &self.auth;
        if a.keys_file.as_deref() == Some("") {
            return Err(invalid("auth.keys_file", "must be a path"));
        }
        if a.keys_env.as_deref() == Some("") {
            return Err(invalid("auth.keys_env", "must name a variable"));
        }
        if a.requests_per_minute == Some(0) {
            return Err(invalid(
                "auth.requests_per_minute",
                "must be greater than zero",
            ));
        }
        if a.tokens_per_minute == Some(0) {
            return Err(invalid(
                "auth.tokens_per_minute",
                "must be greater than zero",
            ));
        }
        if !self.metrics.on_client_port && self.metrics.listen.is_none() {
            return Err(invalid(
                "metrics.on_client_port",
                "false needs metrics.listen, or /metrics is served nowhere",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_file_parses_and_validates() {
        let cfg = Config::load(Path::new("config/lingo.toml")).unwrap();
        cfg.validate().unwrap();
        assert_eq!(
            cfg.models.get("qwen").map(String::as_str),
            Some("Qwen/Qwen3.6-27B")
        );
    }

    #[test]
    fn unknown_key_is_an_error() {
        let err = toml::from_str::<Config>("listn = \"127.0.0.1:1\"").unwrap_err();
        assert!(err.to_string().contains("listn"), "{err}");
    }

    #[test]
    fn validate_names_the_key() {
        let mut cfg = Config::default();
        cfg.upstream.url = "ftp://x".into();
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("upstream.url"));
        let mut cfg = Config::default();
        cfg.timeouts.connect = Duration::ZERO;
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("timeouts.connect"));
    }
}
