//! `[pools.NAME]`: the fleet's pools, their endpoints and policies, and the one implicit pool
//! a single-upstream config (`[upstream]`, `--upstream`) stands for.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{invalid_at, Config, ConfigError};
use crate::upstream::KindSetting;

/// How a pool picks an endpoint for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Smooth weighted round robin (nginx's): exact shares by weight, interleaved.
    RoundRobin,
    /// Power of two choices over lingo's own in-flight count per endpoint, counted until
    /// each response body ends: streams are long, so this is the load that matters. The
    /// default: it follows endpoints of different speeds without being told their weights.
    #[default]
    LeastOutstanding,
    /// Uniformly at random.
    Random,
    /// A consistent hash of the session header (else the OpenAI `user` field), so a
    /// conversation keeps its endpoint's prefix cache; `least_outstanding` without a key.
    Session,
    /// A consistent hash of the prompt's start (see `fleet::prefix`) with bounded load:
    /// requests sharing a long prefix go to one endpoint while it carries at most
    /// `load_bound` times the pool's mean load, else to the next endpoint for their key.
    PrefixAffinity,
}

impl Policy {
    pub fn label(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round_robin",
            Policy::LeastOutstanding => "least_outstanding",
            Policy::Random => "random",
            Policy::Session => "session",
            Policy::PrefixAffinity => "prefix_affinity",
        }
    }
}

/// One pool: the endpoints that serve a set of models, and how to choose among them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// The models this pool serves (requests naming one come here). Default: discovered from
    /// the endpoints' model lists.
    pub models: Vec<String>,
    /// `round_robin`, `least_outstanding`, `random`, `session` or `prefix_affinity`. Default
    /// `least_outstanding`.
    pub policy: Policy,
    /// `prefix_affinity`: no endpoint takes more than this times the pool's mean load (its
    /// in-flight requests plus the engine's waiting queue); beyond it a request goes to the
    /// next endpoint for its key. Default 1.25.
    pub load_bound: f64,
    /// `prefix_affinity`: how much of a prompt the key covers, in tokens (about 4 characters
    /// each for text). Prompts that agree this far share an endpoint. A chat's key is its
    /// messages up to and including the first user message, up to 16 times as long. Default 256.
    pub prefix_len: u32,
    /// The header `session` hashes. Default `x-session-id`.
    pub session_header: String,
    /// How many times a request that failed before its first byte reached the client is sent
    /// to another endpoint of the pool (within the retry budget). Default 2.
    pub retries: u32,
    /// This pool's health checks. Default: the top-level `[health]`.
    pub health: Option<HealthConfig>,
    pub endpoints: Vec<EndpointConfig>,
    /// A shadow deployment that also gets a fraction of this pool's requests (see
    /// `fleet::mirror`). Default: none.
    pub mirror: Option<MirrorConfig>,
}

/// `[pools.NAME.mirror]`: a fraction of the pool's generation requests is also sent to these
/// endpoints; their answers are read and discarded, their metrics kept under `group`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorConfig {
    /// The share of the pool's requests mirrored, 0 < fraction <= 1 (0.05: one in twenty).
    pub fraction: f64,
    /// The shadow deployment's metrics name: the `upstream` label of its requests' metrics.
    pub group: String,
    /// As a pool's (`url`, `kind`, `weight`, `api_key_env`; no `dns://`, no `group`).
    pub endpoints: Vec<EndpointConfig>,
    /// Shadow requests in flight at once; beyond it a request is not mirrored. Default 16.
    #[serde(default = "sixteen")]
    pub max_in_flight: usize,
}

fn sixteen() -> usize {
    16
}

impl MirrorConfig {
    pub(super) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        if !(self.fraction > 0.0 && self.fraction <= 1.0) {
            return Err(invalid_at(
                &format!("{key}.fraction"),
                "must be greater than 0 and at most 1 (0.05: one request in twenty)",
            ));
        }
        if self.group.is_empty() {
            return Err(invalid_at(&format!("{key}.group"), "must not be empty"));
        }
        if self.max_in_flight == 0 {
            return Err(invalid_at(
                &format!("{key}.max_in_flight"),
                "must be at least 1",
            ));
        }
        if self.endpoints.is_empty() {
            return Err(invalid_at(
                &format!("{key}.endpoints"),
                "a mirror needs an endpoint",
            ));
        }
        for (i, ep) in self.endpoints.iter().enumerate() {
            let at = format!("{key}.endpoints[{i}]");
            validate_endpoint(&at, ep)?;
            if ep.url.starts_with("dns://") {
                return Err(invalid_at(
                    &format!("{at}.url"),
                    "dns:// is not supported for mirrors (list the addresses)",
                ));
            }
            if ep.group.is_some() {
                return Err(invalid_at(
                    &format!("{at}.group"),
                    "a mirror's endpoints take the mirror's group",
                ));
            }
        }
        Ok(())
    }
}

/// `[health]` (or `[pools.NAME.health]`): active probes and passive ejection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Time between two probes of an endpoint. Default 5s.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// A probe that has not answered by then fails. Default 2s.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Consecutive failures (real requests or probes) that take an endpoint out. Default 3.
    pub unhealthy_after: u32,
    /// Consecutive passing probes that bring a pending or ejected endpoint in. Default 1.
    pub healthy_after: u32,
    /// The first ejection's length; each ejection in a row doubles it. Default 1s.
    #[serde(with = "humantime_serde")]
    pub backoff: Duration,
    /// The longest ejection. Default 30s.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
}

impl Default for HealthConfig {
    fn default() -> HealthConfig {
        HealthConfig {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            unhealthy_after: 3,
            healthy_after: 1,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl HealthConfig {
    pub(super) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        for (name, zero) in [
            ("interval", self.interval.is_zero()),
            ("timeout", self.timeout.is_zero()),
            ("unhealthy_after", self.unhealthy_after == 0),
            ("healthy_after", self.healthy_after == 0),
            ("backoff", self.backoff.is_zero()),
        ] {
            if zero {
                return Err(invalid_at(
                    &format!("{key}.{name}"),
                    "must be greater than zero",
                ));
            }
        }
        if self.max_backoff < self.backoff {
            return Err(invalid_at(
                &format!("{key}.max_backoff"),
                "must be at least health.backoff",
            ));
        }
        Ok(())
    }
}

/// `[load]`: the engines' own load figures, polled from each endpoint (vLLM's, SGLang's,
/// TGI's, llama.cpp's metrics), which `least_outstanding` and `prefix_affinity` add to
/// lingo's in-flight count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoadConfig {
    /// Poll the engines at all. Default true.
    pub enabled: bool,
    /// Time between two polls of an endpoint. Default 250ms.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// A figure older than this is ignored (the endpoint counts as lingo's in-flight alone).
    /// Default 2s.
    #[serde(with = "humantime_serde")]
    pub stale_after: Duration,
}

impl Default for LoadConfig {
    fn default() -> LoadConfig {
        LoadConfig {
            enabled: true,
            interval: Duration::from_millis(250),
            stale_after: Duration::from_secs(2),
        }
    }
}

impl LoadConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.interval < Duration::from_millis(10) {
            return Err(invalid_at("load.interval", "must be at least 10ms"));
        }
        if self.stale_after <= self.interval {
            return Err(invalid_at(
                "load.stale_after",
                "must be longer than load.interval",
            ));
        }
        Ok(())
    }
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig {
            models: Vec::new(),
            policy: Policy::default(),
            load_bound: 1.25,
            prefix_len: 256,
            session_header: "x-session-id".into(),
            retries: 2,
            health: None,
            endpoints: Vec::new(),
            mirror: None,
        }
    }
}

/// One inference server of a pool.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    pub url: String,
    /// As `upstream.kind`, probed per endpoint. Default `auto`.
    #[serde(default = "auto")]
    pub kind: KindSetting,
    /// The endpoint's group, the `upstream` label of its requests' metrics (so two
    /// deployments of one model compare side by side). Default: the pool's name.
    #[serde(default)]
    pub group: Option<String>,
    /// Its share under `round_robin` (and `random`, `session`). Default 1.
    #[serde(default = "one")]
    pub weight: u32,
    /// As `upstream.api_key_env`. Default: `OPENAI_API_KEY` for kind `openai`, else none.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

fn auto() -> KindSetting {
    KindSetting::Auto
}

fn one() -> u32 {
    1
}

impl EndpointConfig {
    pub fn new(url: &str, kind: KindSetting) -> EndpointConfig {
        EndpointConfig {
            url: url.to_string(),
            kind,
            group: None,
            weight: 1,
            api_key_env: None,
        }
    }

    /// The API key to send, read from the environment (`None` without one).
    pub fn api_key(&self) -> Result<Option<String>, String> {
        api_key(self.api_key_env.as_deref(), self.kind)
    }
}

/// The key named by `env` (required to be set), or `OPENAI_API_KEY` for kind `openai` if set.
pub(super) fn api_key(env: Option<&str>, kind: KindSetting) -> Result<Option<String>, String> {
    let (var, required) = match (env, kind) {
        (Some(v), _) => (v, true),
        (None, KindSetting::Openai) => ("OPENAI_API_KEY", false),
        (None, _) => return Ok(None),
    };
    match std::env::var(var) {
        Ok(key) if !key.is_empty() => Ok(Some(key)),
        _ if required => Err(format!("the environment variable {var} is not set")),
        _ => Ok(None),
    }
}

impl Config {
    /// The pools to build: `[pools]` as configured, else one pool named `upstream.name` of
    /// the one `upstream.url` (its models: `upstream.model` if set, else discovered).
    pub fn pool_configs(&self) -> BTreeMap<String, PoolConfig> {
        if !self.pools.is_empty() {
            return self.pools.clone();
        }
        let u = &self.upstream;
        let mut ep = EndpointConfig::new(&u.url, u.kind);
        ep.api_key_env = u.api_key_env.clone();
        let pool = PoolConfig {
            models: u.model.iter().cloned().collect(),
            endpoints: vec![ep],
            ..PoolConfig::default()
        };
        BTreeMap::from([(u.name.clone(), pool)])
    }

    /// A pool's health checks: its own, else `[health]`.
    pub fn health_for(&self, pool: &PoolConfig) -> HealthConfig {
        pool.health.clone().unwrap_or_else(|| self.health.clone())
    }

    /// The pool for requests that name no model: `default_pool`, else the first by name.
    pub fn default_pool_name(&self) -> String {
        match &self.default_pool {
            Some(p) if self.pools.contains_key(p) => p.clone(),
            _ => self.pool_configs().into_keys().next().unwrap_or_default(),
        }
    }

    pub(super) fn validate_pools(&self) -> Result<(), ConfigError> {
        self.health.validate("health")?;
        self.load.validate()?;
        if let Some(p) = &self.default_pool {
            if !self.pools.contains_key(p) {
                return Err(invalid_at("default_pool", format!("no pool named `{p}`")));
            }
        }
        let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, pool) in &self.pools {
            let key = format!("pools.{name}");
            if name.is_empty() {
                return Err(invalid_at("pools", "a pool name must not be empty"));
            }
            if pool.endpoints.is_empty() {
                return Err(invalid_at(
                    &format!("{key}.endpoints"),
                    "a pool needs an endpoint",
                ));
            }
            if pool.session_header.is_empty()
                || http::HeaderName::from_bytes(pool.session_header.as_bytes()).is_err()
            {
                return Err(invalid_at(
                    &format!("{key}.session_header"),
                    "must be a header name",
                ));
            }
            for (i, m) in pool.models.iter().enumerate() {
                if m.is_empty() {
                    return Err(invalid_at(
                        &format!("{key}.models[{i}]"),
                        "must not be empty",
                    ));
                }
                if let Some(other) = owner.insert(m, name) {
                    return Err(invalid_at(
                        &format!("{key}.models[{i}]"),
                        format!("`{m}` is served by pool `{other}` too"),
                    ));
                }
            }
            if let Some(h) = &pool.health {
                h.validate(&format!("{key}.health"))?;
            }
            if !(pool.load_bound >= 1.0 && pool.load_bound <= 100.0) {
                return Err(invalid_at(
                    &format!("{key}.load_bound"),
                    "must be between 1.0 and 100 (1.25: at most 25% over the mean load)",
                ));
            }
            if !(1..=1 << 20).contains(&pool.prefix_len) {
                return Err(invalid_at(
                    &format!("{key}.prefix_len"),
                    "must be between 1 and 1048576 tokens",
                ));
            }
            for (i, ep) in pool.endpoints.iter().enumerate() {
                validate_endpoint(&format!("{key}.endpoints[{i}]"), ep)?;
            }
            if let Some(m) = &pool.mirror {
                m.validate(&format!("{key}.mirror"))?;
            }
        }
        Ok(())
    }
}

fn validate_endpoint(key: &str, ep: &EndpointConfig) -> Result<(), ConfigError> {
    check_url(&ep.url).map_err(|m| invalid_at(&format!("{key}.url"), m))?;
    if ep.weight == 0 {
        return Err(invalid_at(&format!("{key}.weight"), "must be at least 1"));
    }
    if ep.group.as_deref() == Some("") {
        return Err(invalid_at(&format!("{key}.group"), "must not be empty"));
    }
    if ep.api_key_env.as_deref() == Some("") {
        return Err(invalid_at(
            &format!("{key}.api_key_env"),
            "must name a variable",
        ));
    }
    ep.api_key()
        .map_err(|m| invalid_at(&format!("{key}.api_key_env"), m))?;
    Ok(())
}

/// An upstream URL: `http://` or `https://` with a host, or `dns://NAME:PORT` (resolved by
/// discovery into the name's addresses).
pub fn check_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some("dns") if uri.port_u16().is_none() => {
            return Err("dns:// needs a port (dns://NAME:PORT)".into())
        }
        Some("dns") if crate::fleet::discovery::parse_dns_url(url).is_none() => {
            return Err("dns://NAME:PORT needs a DNS name (not an IP address), no path".into())
        }
        Some("dns") => {}
        _ => return Err("must start with http://, https:// or dns://".into()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("has no host".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(toml: &str) -> String {
        let cfg: Config = toml::from_str(toml).unwrap();
        cfg.validate().unwrap_err().to_string()
    }

    #[test]
    fn the_issue_example_parses_with_defaults() {
        let cfg: Config = toml::from_str(
            r#"
            [pools.qwen]
            models = ["Qwen/Qwen3-8B"]
            policy = "least_outstanding"
            endpoints = [
              { url = "http://sglang-a:30000", group = "sglang-mtp" },
              { url = "dns://vllm-dflash.default.svc:8000", group = "vllm-dflash", weight = 3 },
            ]
            "#,
        )
        .unwrap();
        cfg.validate().unwrap();
        let pool = &cfg.pool_configs()["qwen"];
        assert_eq!(pool.endpoints[0].kind, KindSetting::Auto);
        assert_eq!(pool.endpoints[0].weight, 1);
        assert_eq!(pool.endpoints[1].weight, 3);
        assert_eq!(cfg.default_pool_name(), "qwen");
    }

    #[test]
    fn a_single_upstream_is_one_implicit_pool() {
        let mut cfg = Config::default();
        cfg.upstream.name = "u".into();
        let pools = cfg.pool_configs();
        assert_eq!(pools.len(), 1);
        assert_eq!(pools["u"].endpoints[0].url, "http://127.0.0.1:8000");
        assert!(pools["u"].models.is_empty());
    }

    #[test]
    fn validate_names_the_pool_key() {
        let e = err("[pools.a]\nendpoints = []");
        assert!(e.contains("pools.a.endpoints"), "{e}");
        let e = err("[pools.q]\nendpoints = [{url = \"http://a:1\"}, {url = \"ftp://b\"}]");
        assert!(e.contains("pools.q.endpoints[1].url"), "{e}");
        let e = err("[pools.q]\nendpoints = [{url = \"http://a:1\", weight = 0}]");
        assert!(e.contains("pools.q.endpoints[0].weight"), "{e}");
        let e = err(
            "[pools.a]\nmodels = [\"m\"]\nendpoints = [{url = \"http://a:1\"}]\n\
             [pools.b]\nmodels = [\"m\"]\nendpoints = [{url = \"http://b:1\"}]",
        );
        assert!(
            e.contains("pools.b.models[0]") && e.contains("pool `a`"),
            "{e}"
        );
        let e = err("default_pool = \"x\"\n[pools.a]\nendpoints = [{url = \"http://a:1\"}]");
        assert!(e.contains("default_pool"), "{e}");
        let e = err("[pools.q]\nendpoints = [{url = \"dns://svc\"}]");
        assert!(e.contains("pools.q.endpoints[0].url"), "{e}");
    }

    #[test]
    fn health_keys_have_defaults_and_validate_names_them() {
        let cfg: Config = toml::from_str(
            "[pools.a]\nendpoints = [{url = \"http://a:1\"}]\n[pools.a.health]\ninterval = \"50ms\"",
        )
        .unwrap();
        cfg.validate().unwrap();
        let h = cfg.health_for(&cfg.pools["a"]);
        assert_eq!(h.interval, Duration::from_millis(50));
        assert_eq!((h.unhealthy_after, h.healthy_after), (3, 1));
        assert_eq!(cfg.pools["a"].retries, 2);
        let e = err("[health]\ninterval = \"0s\"");
        assert!(e.contains("health.interval"), "{e}");
        let e = err(
            "[pools.a]\nendpoints = [{url = \"http://a:1\"}]\n[pools.a.health]\nunhealthy_after = 0",
        );
        assert!(e.contains("pools.a.health.unhealthy_after"), "{e}");
        let e = err("[health]\nbackoff = \"10s\"\nmax_backoff = \"1s\"");
        assert!(e.contains("health.max_backoff"), "{e}");
    }

    #[test]
    fn a_mirror_parses_with_defaults_and_validate_names_its_keys() {
        let cfg: Config = toml::from_str(
            "[pools.q]\nendpoints = [{url = \"http://a:1\"}]\n[pools.q.mirror]\n\
             fraction = 0.05\ngroup = \"dflash\"\nendpoints = [{url = \"http://b:1\"}]",
        )
        .unwrap();
        cfg.validate().unwrap();
        let m = cfg.pools["q"].mirror.as_ref().unwrap();
        assert_eq!(
            (m.fraction, m.group.as_str(), m.max_in_flight),
            (0.05, "dflash", 16)
        );
        let base = "[pools.q]\nendpoints = [{url = \"http://a:1\"}]\n[pools.q.mirror]\n";
        for (body, key) in [
            ("fraction = 0\ngroup = \"g\"\nendpoints = [{url = \"http://b:1\"}]", "pools.q.mirror.fraction"),
            ("fraction = 1.5\ngroup = \"g\"\nendpoints = [{url = \"http://b:1\"}]", "pools.q.mirror.fraction"),
            ("fraction = 0.5\ngroup = \"\"\nendpoints = [{url = \"http://b:1\"}]", "pools.q.mirror.group"),
            ("fraction = 0.5\ngroup = \"g\"\nendpoints = []", "pools.q.mirror.endpoints"),
            ("fraction = 0.5\ngroup = \"g\"\nmax_in_flight = 0\nendpoints = [{url = \"http://b:1\"}]", "pools.q.mirror.max_in_flight"),
            ("fraction = 0.5\ngroup = \"g\"\nendpoints = [{url = \"dns://svc.local:80\"}]", "pools.q.mirror.endpoints[0].url"),
            ("fraction = 0.5\ngroup = \"g\"\nendpoints = [{url = \"ftp://b\"}]", "pools.q.mirror.endpoints[0].url"),
            ("fraction = 0.5\ngroup = \"g\"\nendpoints = [{url = \"http://b:1\", group = \"h\"}]", "pools.q.mirror.endpoints[0].group"),
        ] {
            let e = err(&format!("{base}{body}"));
            assert!(e.contains(key), "{key}: {e}");
        }
        // `group` and `fraction` have no default.
        assert!(
            toml::from_str::<Config>(&format!("{base}fraction = 0.5\nendpoints = []")).is_err()
        );
    }

    #[test]
    fn a_pool_duplicated_in_the_file_is_refused_by_toml() {
        let e = toml::from_str::<Config>(
            "[pools.a]\nendpoints = [{url = \"http://a:1\"}]\n\
             [pools.a]\nendpoints = [{url = \"http://b:1\"}]",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("pools.a") || e.to_string().contains("duplicate"),
            "{e}"
        );
    }
}
