//! What every handler shares: config, the upstream client, its kind, models and metrics.

use std::sync::Arc;

use tokio::sync::RwLock;

use crate::config::Config;
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::upstream::{detect_kind, Client, Kind, Models};

pub struct AppState {
    pub config: Config,
    pub client: Client,
    pub models: Models,
    pub metrics: Arc<Metrics>,
    /// Shutdown phase, read by `/ready`, the accept loop and open streams.
    pub drain: super::drain::Drain,
    kind: RwLock<Option<Kind>>,
}

impl AppState {
    pub fn new(config: Config, metrics: Arc<Metrics>) -> AppState {
        let mut client = Client::new(&config.upstream.url, &config.timeouts)
            .named(&config.upstream.name)
            .with_limits(&config.limits);
        // `validate()` has checked that an explicitly named variable is set.
        if let Ok(Some(key)) = config.upstream.api_key() {
            match client.clone().with_api_key(&key) {
                Ok(c) => client = c,
                Err(e) => tracing::warn!(error = %e, "API key not used"),
            }
        }
        let models = Models::new(config.models.clone(), config.upstream.model.clone());
        let kind = Kind::from_setting(config.upstream.kind);
        AppState {
            config,
            client,
            models,
            metrics,
            drain: super::drain::Drain::default(),
            kind: RwLock::new(kind),
        }
    }

    /// The upstream's kind: configured, or probed once (and again after a failed probe, so
    /// lingo may start before its upstream does).
    pub async fn kind(&self) -> Result<Kind, ProxyError> {
        if let Some(k) = *self.kind.read().await {
            return Ok(k);
        }
        let mut slot = self.kind.write().await;
        if let Some(k) = *slot {
            return Ok(k);
        }
        // The client sees the upstream's name; the (redacted) URL is for the log.
        let (kind, why) = detect_kind(&self.client).await.ok_or_else(|| {
            tracing::warn!(
                upstream = self.client.name(),
                url = self.client.base(),
                "kind detection failed"
            );
            ProxyError::UpstreamUnreachable(format!(
                "could not detect the kind of `{}` (set --upstream-kind)",
                self.client.name()
            ))
        })?;
        tracing::info!(upstream = self.client.name(), url = self.client.base(), kind = kind.label(), %why, "detected upstream kind");
        *slot = Some(kind);
        Ok(kind)
    }

    /// Probe at start-up so the first request does not pay for it; failures are logged
    /// and retried on demand.
    pub async fn warm_up(&self) {
        if let Err(e) = self.kind().await {
            tracing::warn!(error = %e, "upstream kind unknown for now");
        }
        if self.models.refresh(&self.client).await {
            let names: Vec<String> = self.models.cards().into_iter().map(|c| c.id).collect();
            tracing::info!(?names, "upstream models");
        }
    }

    pub fn upstream_name(&self) -> &str {
        &self.config.upstream.name
    }

    /// The model for a request that names none, discovering it if needed.
    pub async fn default_model(&self) -> Result<String, ProxyError> {
        if let Some(m) = self.models.default_model() {
            return Ok(m);
        }
        self.models.refresh(&self.client).await;
        self.models.default_model().ok_or_else(|| {
            ProxyError::UpstreamUnreachable(
                "no model configured and the upstream lists none on /v1/models".into(),
            )
        })
    }
}
