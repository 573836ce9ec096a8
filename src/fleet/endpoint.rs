//! One inference server: its client, kind, models, health state and load, in one handle.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use crate::config::EndpointConfig;
use crate::config::{Limits, Timeouts};
use crate::metrics::{Metrics, OnEnd, Outcome};
use crate::upstream::{detect_kind, list_models, redact_url, Client, Kind, ModelCard};

/// Where an endpoint stands; the picker reads it, probes and outcomes write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not yet known to work (its kind not detected yet).
    Pending,
    Healthy,
    /// Taken out of rotation.
    Ejected,
    /// Removed from its pool's set (by discovery): no new requests, gone once its
    /// in-flight ones end.
    Draining,
}

impl Health {
    pub fn label(self) -> &'static str {
        match self {
            Health::Pending => "pending",
            Health::Healthy => "healthy",
            Health::Ejected => "ejected",
            Health::Draining => "draining",
        }
    }

    fn from_u8(v: u8) -> Health {
        match v {
            1 => Health::Healthy,
            2 => Health::Ejected,
            3 => Health::Draining,
            _ => Health::Pending,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            Health::Pending => 0,
            Health::Healthy => 1,
            Health::Ejected => 2,
            Health::Draining => 3,
        }
    }
}

pub struct Endpoint {
    pub client: Client,
    /// The URL as configured (or resolved by discovery): the endpoint's identity in its pool.
    pub url: String,
    /// As shown: credentials masked.
    pub shown: String,
    pub group: String,
    pub weight: u32,
    pub pool: Arc<str>,
    /// The `endpoint` metric label: `host:port`, or `other` beyond the pool's cap.
    pub label: String,
    kind: RwLock<Option<Kind>>,
    /// Held while the kind is probed, so concurrent requests probe once.
    detecting: tokio::sync::Mutex<()>,
    models: RwLock<Vec<ModelCard>>,
    health: AtomicU8,
    in_flight: AtomicUsize,
    requests: AtomicU64,
    last_error: Mutex<Option<(String, SystemTime)>>,
    /// Smooth weighted round robin's running weight (read under the pool's pick lock).
    pub(super) current: AtomicI64,
    metrics: Arc<Metrics>,
}

/// What builds an endpoint besides its config.
pub struct Setup<'a> {
    pub pool: Arc<str>,
    pub label: String,
    pub timeouts: &'a Timeouts,
    pub limits: &'a Limits,
    pub metrics: Arc<Metrics>,
}

impl Endpoint {
    pub fn new(cfg: &EndpointConfig, group: &str, s: Setup<'_>) -> Endpoint {
        let mut client = Client::new(&cfg.url, s.timeouts)
            .named(group)
            .with_limits(s.limits);
        // `validate()` has checked that an explicitly named variable is set.
        if let Ok(Some(key)) = cfg.api_key() {
            match client.clone().with_api_key(&key) {
                Ok(c) => client = c,
                Err(e) => tracing::warn!(error = %e, "API key not used"),
            }
        }
        let kind = Kind::from_setting(cfg.kind);
        // A configured kind has nothing to wait for (health probes come later).
        let health = if kind.is_some() {
            Health::Healthy
        } else {
            Health::Pending
        };
        Endpoint {
            client,
            url: cfg.url.clone(),
            shown: redact_url(&cfg.url),
            group: group.to_string(),
            weight: cfg.weight.max(1),
            pool: s.pool,
            label: s.label,
            kind: RwLock::new(kind),
            detecting: tokio::sync::Mutex::new(()),
            models: RwLock::new(Vec::new()),
            health: AtomicU8::new(health.as_u8()),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            last_error: Mutex::new(None),
            current: AtomicI64::new(0),
            metrics: s.metrics,
        }
    }

    pub fn health(&self) -> Health {
        Health::from_u8(self.health.load(Ordering::Relaxed))
    }

    pub fn set_health(&self, h: Health) {
        self.health.store(h.as_u8(), Ordering::Relaxed);
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub fn kind_now(&self) -> Option<Kind> {
        self.kind.read().ok().and_then(|k| *k)
    }

    pub fn models(&self) -> Vec<ModelCard> {
        self.models.read().map(|m| m.clone()).unwrap_or_default()
    }

    pub fn serves(&self, model: &str) -> bool {
        self.models
            .read()
            .is_ok_and(|m| m.iter().any(|c| c.id == model))
    }

    pub fn last_error(&self) -> Option<(String, SystemTime)> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    pub fn note_error(&self, message: String) {
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some((message, SystemTime::now()));
        }
    }

    /// The endpoint's kind: configured, or probed (again after a failed probe, so lingo may
    /// start before its servers do). A successful probe makes a pending endpoint healthy.
    pub async fn kind(&self) -> Option<Kind> {
        if let Some(k) = self.kind_now() {
            return Some(k);
        }
        let _one = self.detecting.lock().await;
        if let Some(k) = self.kind_now() {
            return Some(k);
        }
        let Some((kind, why)) = detect_kind(&self.client).await else {
            tracing::warn!(
                url = self.shown,
                group = self.group,
                "kind detection failed"
            );
            self.note_error("kind detection failed".into());
            return None;
        };
        tracing::info!(url = self.shown, group = self.group, kind = kind.label(), %why, "detected endpoint kind");
        if let Ok(mut slot) = self.kind.write() {
            *slot = Some(kind);
        }
        if self.health() == Health::Pending {
            self.set_health(Health::Healthy);
        }
        Some(kind)
    }

    /// Re-read the endpoint's model list; returns whether it answered.
    pub async fn refresh_models(&self) -> bool {
        let Some(list) = list_models(&self.client).await else {
            return false;
        };
        if let Ok(mut m) = self.models.write() {
            *m = list;
        }
        true
    }

    /// Count a request on this endpoint until the returned hook runs (at the end of its
    /// response body, or when it is dropped).
    pub fn take(self: &Arc<Self>) -> Ticket {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.metrics.endpoint_started(&self.pool, &self.label);
        Ticket {
            endpoint: self.clone(),
            ended: false,
        }
    }
}

/// One request's hold on an endpoint's in-flight count.
pub struct Ticket {
    endpoint: Arc<Endpoint>,
    ended: bool,
}

impl Ticket {
    pub fn end(mut self, outcome: Outcome) {
        self.settle(outcome);
    }

    fn settle(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let ep = &self.endpoint;
        ep.in_flight.fetch_sub(1, Ordering::Relaxed);
        ep.metrics.endpoint_finished(&ep.pool, &ep.label, outcome);
    }

    /// The ticket as a record's end hook.
    pub fn into_hook(self) -> OnEnd {
        Box::new(move |outcome| self.end(outcome))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.settle(Outcome::Cancelled);
    }
}
