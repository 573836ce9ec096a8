//! The fleet: pools of endpoints by model. A request's model picks the pool, the pool's
//! policy picks the endpoint, and only then is the route (passthrough or translation)
//! chosen, from that endpoint's kind.

pub mod discovery;
mod endpoint;
mod failover;
mod health;
pub mod load;
pub mod mirror;
mod policy;
mod pool;
pub mod prefix;
pub mod resolve;

pub use endpoint::{Endpoint, Health, Ticket};
pub use failover::{Budget, Reason};
pub use pool::{NoPick, Pool};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::upstream::ModelCard;

/// What a request carries for its pool's policy to hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    None,
    /// `session`: the session header, else the OpenAI `user` field.
    Session(String),
    /// `prefix_affinity`: the prompt's prefix key (`prefix::key`).
    Prefix(u64),
}

/// At most this many distinct `endpoint` label values per pool; the rest are `other`.
pub const MAX_ENDPOINT_LABELS: usize = 64;

/// How long a merged model list is reused before the endpoints are asked again.
const MODELS_TTL: Duration = Duration::from_secs(2);

/// The longest a model-list refresh holds up the requests waiting on it.
const MODELS_WAIT: Duration = Duration::from_secs(5);

/// What a refused client waits before asking a pool with no healthy endpoint again.
const DOWN_RETRY_AFTER: u64 = 1;

pub struct Fleet {
    pools: Vec<Arc<Pool>>,
    default: usize,
    /// When the endpoints' model lists were last read; held while they are read, so a
    /// request arriving meanwhile waits for the lists rather than seeing none.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
    /// Every pool's probes have started (`start_probes` ran to its end): a request's
    /// `first_use` is then one load, where it gathered the pools and joined their
    /// (finished) starts, a few allocations per request.
    probed: AtomicBool,
}

impl Fleet {
    pub fn new(config: &Config, metrics: Arc<Metrics>) -> Fleet {
        let configs = config.pool_configs();
        let default_name = config.default_pool_name();
        let pools: Vec<Arc<Pool>> = configs
            .iter()
            .map(|(name, cfg)| Arc::new(Pool::new(name, cfg, config, metrics.clone())))
            .collect();
        let default = pools
            .iter()
            .position(|p| *p.name == *default_name)
            .unwrap_or(0);
        Fleet {
            pools,
            default,
            refreshed: tokio::sync::Mutex::new(None),
            probed: AtomicBool::new(false),
        }
    }

    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    pub fn pool(&self, name: &str) -> Option<&Arc<Pool>> {
        self.pools.iter().find(|p| *p.name == *name)
    }

    pub fn default_pool(&self) -> &Arc<Pool> {
        &self.pools[self.default]
    }

    /// One pool of one endpoint: today's single upstream, whose own answers lingo forwards.
    pub fn is_single(&self) -> bool {
        self.pools.len() == 1 && self.default_pool().endpoints().len() == 1
    }

    /// Whether routing needs the request's model (more than one pool to choose from).
    pub fn routes_by_model(&self) -> bool {
        self.pools.len() > 1
    }

    /// The pool for a model (resolved from aliases); a request naming none, and every
    /// request when there is one pool, goes to the default pool.
    pub fn pool_for(&self, model: Option<&str>) -> Option<&Arc<Pool>> {
        match model {
            _ if self.pools.len() == 1 => Some(self.default_pool()),
            None => Some(self.default_pool()),
            Some(m) => self.pools.iter().find(|p| p.serves(m)),
        }
    }

    /// Every model served, across pools, deduplicated (pool order, then list order).
    pub fn model_cards(&self) -> Vec<ModelCard> {
        let mut out: Vec<ModelCard> = Vec::new();
        for p in &self.pools {
            for c in p.model_cards() {
                if !out.iter().any(|k| k.id == c.id) {
                    out.push(c);
                }
            }
        }
        out
    }

    /// Read every endpoint's model list again unless that was done within `MODELS_TTL`
    /// (`force` skips the wait); returns the merged list.
    pub async fn refresh_models(&self, force: bool) -> Vec<ModelCard> {
        let mut at = self.refreshed.lock().await;
        if force || at.is_none_or(|t| t.elapsed() >= MODELS_TTL) {
            *at = Some(Instant::now());
            let all: Vec<Arc<Endpoint>> = self
                .pools
                .iter()
                .flat_map(|p| p.endpoints().iter().cloned().collect::<Vec<_>>())
                .collect();
            let reads = all.iter().map(|e| e.refresh_models());
            // Bounded: requests wait on this; an endpoint that does not answer in time
            // keeps the list it had.
            let _ = tokio::time::timeout(MODELS_WAIT, futures_util::future::join_all(reads)).await;
        }
        self.model_cards()
    }

    /// Start every pool's probes, and its mirror's (once; see `Pool::start_probes`):
    /// `serve`'s warm-up.
    pub async fn start_probes(&self) {
        if self.probed.load(Ordering::Acquire) {
            return;
        }
        let mirrors = self.pools.iter().filter_map(|p| p.mirror.as_ref());
        let all: Vec<&Arc<Pool>> = self.pools.iter().chain(mirrors.map(|m| &m.pool)).collect();
        futures_util::future::join_all(all.into_iter().map(|p| p.start_probes())).await;
        self.probed.store(true, Ordering::Release);
    }

    /// A router built in-process (`proxy::app`) starts a fleet's probes at its first use. A
    /// single upstream's stays probe-free there, as it always was: it has nowhere to fail
    /// over to, and tests of one upstream count its every connection.
    /// A mirror's endpoints are probed all the same: nothing else tells a shadow is down.
    pub async fn first_use(&self) {
        if self.probed.load(Ordering::Acquire) {
            return;
        }
        if !self.is_single() {
            return self.start_probes().await;
        }
        if let Some(m) = &self.default_pool().mirror {
            m.pool.start_probes().await;
        }
    }

    /// Pick an endpoint of `pool` for a request with session key `key`, not one of `tried`,
    /// or the error a client gets: the kind still unknown (as a single upstream always
    /// said), or a 503 with `Retry-After` when every endpoint is out.
    pub async fn pick(
        &self,
        pool: &Pool,
        key: &Key,
        tried: &[Arc<Endpoint>],
    ) -> Result<Arc<Endpoint>, ProxyError> {
        pool.pick(key, tried).await.map_err(|why| match why {
            NoPick::Unknown(group) => ProxyError::UpstreamUnreachable(format!(
                "could not detect the kind of `{group}` (set --upstream-kind)"
            )),
            NoPick::Down => ProxyError::NoHealthyEndpoint {
                pool: pool.name.to_string(),
                retry_after: DOWN_RETRY_AFTER,
            },
        })
    }
}
