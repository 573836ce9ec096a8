//! What every handler shares: config, the fleet of endpoints, model names and metrics.

use std::sync::Arc;

use crate::config::Config;
use crate::error::ProxyError;
use crate::fleet::{Endpoint, Fleet, Pool};
use crate::metrics::Metrics;
use crate::upstream::{Kind, Models};

pub struct AppState {
    pub config: Config,
    pub fleet: Fleet,
    /// Aliases, and the model names metrics may use (the fleet's merged list).
    pub models: Models,
    pub metrics: Arc<Metrics>,
    /// Shutdown phase, read by `/ready`, the accept loop and open streams.
    pub drain: super::drain::Drain,
    /// `limits.max_in_flight`'s slots (the generation routes' layer holds a clone).
    pub admission: super::admission::Admission,
    default_pool: Arc<str>,
}

impl AppState {
    pub fn new(config: Config, metrics: Arc<Metrics>) -> AppState {
        let fleet = Fleet::new(&config, metrics.clone());
        let configured = match config.pools.is_empty() {
            true => config.upstream.model.clone(),
            false => None,
        };
        let models = Models::new(config.models.clone(), configured);
        let default_pool = fleet.default_pool().name.to_string();
        let admission = super::admission::Admission::new(&config.limits, metrics.clone());
        AppState {
            admission,
            config,
            fleet,
            models,
            metrics,
            drain: super::drain::Drain::default(),
            default_pool: default_pool.into(),
        }
    }

    /// Probe at start-up so the first request does not pay for it; failures are logged
    /// and retried on demand.
    pub async fn warm_up(&self) {
        // `dns://` endpoints get their addresses first, so they are probed with the rest.
        let pools = self.config.pool_configs();
        crate::fleet::resolve::start(&self.fleet, &pools, &self.config.discovery).await;
        // The first round of probes detects unknown kinds too.
        self.fleet.start_probes().await;
        let names: Vec<String> = self.refresh_models(true).await;
        if !names.is_empty() {
            tracing::info!(?names, "upstream models");
        }
    }

    /// Re-read the endpoints' model lists (at most every few seconds unless `force`) and
    /// make the merged list the label set; returns the names.
    pub async fn refresh_models(&self, force: bool) -> Vec<String> {
        let cards = self.fleet.refresh_models(force).await;
        let names: Vec<String> = cards.iter().map(|c| c.id.clone()).collect();
        self.models.set_cards(cards);
        self.metrics.vllm_models_known(&names);
        names
    }

    /// The metric label of requests not yet given to an endpoint: the default pool's name
    /// (a single upstream's `upstream.name`).
    pub fn upstream_label(&self) -> Arc<str> {
        self.default_pool.clone()
    }

    /// The model for a request that names none (it goes to the default pool), discovering
    /// it if needed.
    pub async fn default_model(&self) -> Result<String, ProxyError> {
        let pool = self.fleet.default_pool();
        if let Some(m) = pool.default_model(&self.models) {
            return Ok(m);
        }
        self.refresh_models(false).await;
        pool.default_model(&self.models).ok_or_else(|| {
            ProxyError::UpstreamUnreachable(
                "no model configured and the upstream lists none on /v1/models".into(),
            )
        })
    }

    /// Whether the default model came from an endpoint's list (and so may go stale).
    pub fn default_is_discovered(&self) -> bool {
        self.fleet.default_pool().models.is_empty()
    }

    /// The pool for `model` as a client named it (aliases resolved; none is the default
    /// pool). A model no pool knows yet may have been added to an endpoint since, so the
    /// lists are read again once before the 404 that names the models served.
    pub async fn pool_for(&self, model: Option<&str>) -> Result<Arc<Pool>, ProxyError> {
        let model = model.map(|m| self.models.resolve(m));
        if let Some(p) = self.fleet.pool_for(model) {
            return Ok(p.clone());
        }
        let served = self.refresh_models(false).await;
        match self.fleet.pool_for(model) {
            Some(p) => Ok(p.clone()),
            None => Err(ProxyError::ModelNotFound(format!(
                "`{}` is not served here; models: {}",
                model.unwrap_or_default(),
                served.join(", ")
            ))),
        }
    }

    /// The endpoint the routes around generation speak to (`/health`, `/get_server_info`,
    /// ...): the default pool's first healthy one, probing pending ones if none is.
    pub async fn aux_endpoint(&self) -> Result<(Arc<Endpoint>, Kind), ProxyError> {
        self.aux_endpoint_in(self.fleet.default_pool()).await
    }

    /// `aux_endpoint` for a route that names a model (`/get_model_info?model=`,
    /// `/api/show`, `/props?model=`): the first healthy endpoint of that model's pool.
    pub async fn aux_endpoint_for(
        &self,
        model: Option<&str>,
    ) -> Result<(Arc<Endpoint>, Kind), ProxyError> {
        let pool = self.pool_for(model).await?;
        self.aux_endpoint_in(&pool).await
    }

    async fn aux_endpoint_in(&self, pool: &Pool) -> Result<(Arc<Endpoint>, Kind), ProxyError> {
        self.fleet.first_use().await;
        let set = pool.endpoints();
        let healthy = set
            .iter()
            .find(|e| e.health() == crate::fleet::Health::Healthy);
        let ep = match healthy {
            Some(e) => e.clone(),
            None => self.fleet.pick(pool, &crate::fleet::Key::None, &[]).await?,
        };
        match ep.kind().await {
            Some(k) => Ok((ep, k)),
            None => Err(ProxyError::UpstreamUnreachable(format!(
                "could not detect the kind of `{}` (set --upstream-kind)",
                ep.group
            ))),
        }
    }
}
