//! A pool: the endpoints serving a set of models, replaceable as a whole at run time (the
//! seam discovery uses), and the policy that picks among them.

use std::collections::HashSet;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};

use super::endpoint::{Endpoint, Health, Setup};
use super::failover::Budget;
use super::{policy, Key, MAX_ENDPOINT_LABELS};
use crate::config::{
    Config, EndpointConfig, HealthConfig, Limits, LoadConfig, Policy, PoolConfig, Timeouts,
};
use crate::metrics::Metrics;
use crate::upstream::{ModelCard, Models};
use smallvec::SmallVec;

pub struct Pool {
    pub name: Arc<str>,
    pub policy: Policy,
    /// `load_bound` and `prefix_len` (for `prefix_affinity`).
    pub load_bound: f64,
    pub prefix_len: u32,
    pub session_header: http::HeaderName,
    /// Configured models (empty: the endpoints' own lists decide).
    pub models: Vec<String>,
    pub health: Arc<HealthConfig>,
    /// Extra attempts a request may make on other endpoints (`retries`).
    pub retries: u32,
    pub budget: Budget,
    /// The shadow deployment that also gets a fraction of this pool's requests.
    pub mirror: Option<Arc<super::mirror::Mirror>>,
    /// Healthy endpoints in the set (each endpoint keeps it as its state changes).
    healthy: Arc<AtomicUsize>,
    /// Set once the first round of probes has run and the probe task is spawned.
    probing: tokio::sync::OnceCell<()>,
    endpoints: RwLock<Arc<Vec<Arc<Endpoint>>>>,
    /// Endpoints removed from the set while requests were in flight on them.
    draining: Mutex<Vec<Arc<Endpoint>>>,
    /// Serialises round robin's shared running weights.
    pick_lock: Mutex<()>,
    /// The endpoint labels given out so far (at most `MAX_ENDPOINT_LABELS`).
    labels: Mutex<HashSet<String>>,
    build: Build,
}

/// What a pool needs to build endpoints later (discovery adds them at run time).
struct Build {
    timeouts: Timeouts,
    limits: Limits,
    load: LoadConfig,
    metrics: Arc<Metrics>,
}

/// Why no endpoint could be picked.
pub enum NoPick {
    /// Some endpoints were never reached (kind unknown): the error says which.
    Unknown(String),
    /// Every endpoint is ejected (or draining).
    Down,
}

impl Pool {
    /// Pool `name` of `config` (`cfg` is `config.pool_configs()[name]`).
    pub fn new(name: &str, cfg: &PoolConfig, config: &Config, metrics: Arc<Metrics>) -> Pool {
        let mirror = cfg.mirror.as_ref().map(|m| {
            Arc::new(super::mirror::Mirror::new(
                name,
                m,
                cfg,
                config,
                metrics.clone(),
            ))
        });
        let pool = Pool {
            mirror,
            health: Arc::new(config.health_for(cfg)),
            retries: cfg.retries,
            budget: Budget::default(),
            healthy: Arc::new(AtomicUsize::new(0)),
            probing: tokio::sync::OnceCell::new(),
            name: Arc::from(name),
            policy: cfg.policy,
            load_bound: cfg.load_bound,
            prefix_len: cfg.prefix_len,
            session_header: http::HeaderName::from_bytes(cfg.session_header.as_bytes())
                .unwrap_or(http::HeaderName::from_static("x-session-id")),
            models: cfg.models.clone(),
            endpoints: RwLock::new(Arc::new(Vec::new())),
            draining: Mutex::new(Vec::new()),
            pick_lock: Mutex::new(()),
            labels: Mutex::new(HashSet::new()),
            build: Build {
                timeouts: config.timeouts.clone(),
                limits: config.limits.clone(),
                load: config.load.clone(),
                metrics,
            },
        };
        // `dns://` entries have no address until discovery resolves them (`resolve`).
        let fixed: Vec<EndpointConfig> = cfg
            .endpoints
            .iter()
            .filter(|e| super::discovery::parse_dns_url(&e.url).is_none())
            .cloned()
            .collect();
        pool.replace(&fixed);
        pool
    }

    /// The current set (a snapshot: a replacement does not disturb a pick in progress).
    pub fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.endpoints.read().map(|e| e.clone()).unwrap_or_default()
    }

    /// Endpoints out of the set that still have requests in flight.
    pub fn draining(&self) -> Vec<Arc<Endpoint>> {
        let mut d = self.draining.lock().unwrap_or_else(|e| e.into_inner());
        d.retain(|e| e.in_flight() > 0);
        d.clone()
    }

    /// Replace the endpoint set: endpoints whose URL stays keep their handle (and state);
    /// new ones start `pending` (or healthy with a configured kind); removed ones take no new
    /// requests and leave once their in-flight requests end. Discovery calls this.
    pub fn replace(&self, configs: &[EndpointConfig]) {
        let old = self.endpoints();
        let mut next = Vec::with_capacity(configs.len());
        for cfg in configs {
            match old.iter().find(|e| e.url == cfg.url) {
                Some(e) => next.push(e.clone()),
                None => next.push(Arc::new(self.endpoint(cfg))),
            }
        }
        let gone: Vec<Arc<Endpoint>> = old
            .iter()
            .filter(|e| !next.iter().any(|n| Arc::ptr_eq(n, e)))
            .cloned()
            .collect();
        for e in &gone {
            e.set_health(Health::Draining);
        }
        if let Ok(mut set) = self.endpoints.write() {
            *set = Arc::new(next);
        }
        let mut d = self.draining.lock().unwrap_or_else(|e| e.into_inner());
        d.extend(gone);
        d.retain(|e| e.in_flight() > 0);
    }

    fn endpoint(&self, cfg: &EndpointConfig) -> Endpoint {
        let group = cfg.group.clone().unwrap_or_else(|| self.name.to_string());
        let setup = Setup {
            pool: self.name.clone(),
            label: self.label_for(&cfg.url),
            timeouts: &self.build.timeouts,
            limits: &self.build.limits,
            metrics: self.build.metrics.clone(),
            health: self.health.clone(),
            pool_healthy: self.healthy.clone(),
            load_stale_after: self.build.load.stale_after,
        };
        Endpoint::new(cfg, &group, setup)
    }

    /// `host:port` while the pool has given out fewer than the cap, else `other`: a thousand
    /// discovered addresses leave at most `MAX_ENDPOINT_LABELS + 1` series per pool.
    fn label_for(&self, url: &str) -> String {
        let name = url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.authority().map(|a| a.as_str().to_string()))
            .map(|a| a.rsplit('@').next().unwrap_or_default().to_string())
            .unwrap_or_else(|| "other".into());
        let mut labels = self.labels.lock().unwrap_or_else(|e| e.into_inner());
        if labels.contains(&name) || labels.len() < MAX_ENDPOINT_LABELS {
            labels.insert(name.clone());
            return name;
        }
        "other".into()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.build.metrics
    }

    /// Whether requests for `model` (already resolved from aliases) come here.
    pub fn serves(&self, model: &str) -> bool {
        if !self.models.is_empty() {
            return self.models.iter().any(|m| m == model);
        }
        self.endpoints().iter().any(|e| e.serves(model))
    }

    /// The models this pool serves: configured, else its endpoints' lists (deduplicated).
    pub fn model_cards(&self) -> Vec<ModelCard> {
        let mut cards: Vec<ModelCard> = Vec::new();
        for e in self.endpoints().iter() {
            for c in e.models() {
                if !cards.iter().any(|k| k.id == c.id) {
                    cards.push(c);
                }
            }
        }
        if self.models.is_empty() {
            return cards;
        }
        self.models
            .iter()
            .map(|m| {
                cards
                    .iter()
                    .find(|c| &c.id == m)
                    .cloned()
                    .unwrap_or_else(|| ModelCard::named(m))
            })
            .collect()
    }

    /// The model for a request that names none: the first configured (through aliases), else
    /// the first any endpoint lists.
    pub fn default_model(&self, aliases: &Models) -> Option<String> {
        if let Some(m) = self.models.first() {
            return Some(aliases.resolve(m).to_string());
        }
        self.endpoints().iter().find_map(|e| e.first_model())
    }

    /// Run the first round of probes and start the pool's probe task, once: `serve` does it
    /// at warm-up; a router built in-process does it at its first use.
    pub async fn start_probes(self: &Arc<Self>) {
        self.probing
            .get_or_init(|| async {
                super::health::round(self).await;
                super::health::spawn(self);
                super::load::spawn(self, self.build.load.clone());
            })
            .await;
    }

    /// Pick an endpoint for a request, not one of `tried`. Healthy endpoints are chosen;
    /// when none is, pending ones are: those of an unknown kind are detected now (so lingo
    /// may start before its servers), once each; the others are tried as they are. Ejected
    /// endpoints never are.
    pub async fn pick(&self, key: &Key, tried: &[Arc<Endpoint>]) -> Result<Arc<Endpoint>, NoPick> {
        if let Some(e) = self.pick_in(Health::Healthy, key, tried) {
            return Ok(e);
        }
        let set = self.endpoints();
        let mut unknown = None;
        let pending = set
            .iter()
            .filter(|e| e.health() == Health::Pending && e.kind_now().is_none());
        for e in pending {
            if e.kind().await.is_none() {
                unknown.get_or_insert_with(|| e.group.clone());
            }
        }
        if let Some(e) = self.pick_in(Health::Healthy, key, tried) {
            return Ok(e);
        }
        if let Some(e) = self.pick_in(Health::Pending, key, tried) {
            return Ok(e);
        }
        match unknown {
            Some(group) => Err(NoPick::Unknown(group.to_string())),
            None => Err(NoPick::Down),
        }
    }

    /// Whether a healthy endpoint other than `tried` is left (somewhere to fail over to).
    pub fn has_other(&self, tried: &[Arc<Endpoint>]) -> bool {
        self.endpoints()
            .iter()
            .any(|e| e.health() == Health::Healthy && !tried.iter().any(|t| Arc::ptr_eq(t, e)))
    }

    fn pick_in(&self, state: Health, key: &Key, tried: &[Arc<Endpoint>]) -> Option<Arc<Endpoint>> {
        let set = self.endpoints();
        // Borrowed, on the stack: only the chosen one is cloned (a list of clones was a
        // malloc and an atomic count up and down per endpoint, per request).
        let candidates: SmallVec<[&Arc<Endpoint>; 8]> = set
            .iter()
            .filter(|e| e.health() == state)
            .filter(|e| state != Health::Pending || e.kind_now().is_some())
            .filter(|e| !tried.iter().any(|t| Arc::ptr_eq(t, e)))
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let _rr = match self.policy {
            Policy::RoundRobin => Some(self.pick_lock.lock().unwrap_or_else(|e| e.into_inner())),
            _ => None,
        };
        Some(policy::pick(self.policy, &candidates, key, self.load_bound))
    }
}
