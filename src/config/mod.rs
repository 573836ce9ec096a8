//! Configuration: serde structs with documented defaults and a `validate()` that names the
//! offending key. Sources are layered file, then environment, then command line (the CLI
//! module applies the last two over what `load` returns).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::upstream::KindSetting;

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
    Invalid { key: &'static str, message: String },
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
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
    pub metrics: MetricsConfig,
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

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 30000)),
            upstream: UpstreamConfig::default(),
            models: BTreeMap::new(),
            timeouts: Timeouts::default(),
            metrics: MetricsConfig::default(),
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
        let (var, required) = match (&self.api_key_env, self.kind) {
            (Some(v), _) => (v.as_str(), true),
            (None, KindSetting::Openai) => ("OPENAI_API_KEY", false),
            (None, _) => return Ok(None),
        };
        match std::env::var(var) {
            Ok(key) if !key.is_empty() => Ok(Some(key)),
            _ if required => Err(invalid(
                "upstream.api_key_env",
                format!("the environment variable {var} is not set"),
            )),
            _ => Ok(None),
        }
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Connecting to the upstream. Default 5s.
    #[serde(with = "humantime_serde")]
    pub connect: Duration,
    /// From sending a request to the upstream's response headers (covers queueing and, for
    /// non-streaming requests, the whole generation). Default 600s.
    #[serde(with = "humantime_serde")]
    pub response_headers: Duration,
    /// Reading a client's request body. Default 30s.
    #[serde(with = "humantime_serde")]
    pub client_body: Duration,
    /// How long an idle upstream connection stays pooled. Default 4s: vLLM and SGLang run
    /// uvicorn, which closes idle keep-alive connections after 5s; reusing one it is closing
    /// fails the request.
    #[serde(with = "humantime_serde")]
    pub pool_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(5),
            response_headers: Duration::from_secs(600),
            client_body: Duration::from_secs(30),
            pool_idle: Duration::from_secs(4),
        }
    }
}

impl Config {
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
        if self.upstream.name.is_empty() {
            return Err(invalid("upstream.name", "must not be empty"));
        }
        for (alias, target) in &self.models {
            if alias.is_empty() || target.is_empty() {
                return Err(invalid("models", "alias and target must be non-empty"));
            }
        }
        if self.metrics.listen == Some(self.listen) {
            return Err(invalid("metrics.listen", "must differ from listen"));
        }
        if self.metrics.request_log.as_deref() == Some("") {
            return Err(invalid("metrics.request_log", "must be a path or -"));
        }
        let t = &self.timeouts;
        for (key, d) in [
            ("timeouts.connect", t.connect),
            ("timeouts.response_headers", t.response_headers),
            ("timeouts.client_body", t.client_body),
            ("timeouts.pool_idle", t.pool_idle),
        ] {
            if d.is_zero() {
                return Err(invalid(key, "must be greater than zero"));
            }
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
