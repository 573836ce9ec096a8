//! One inference server: its client, kind, models, health state and load, in one handle.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use super::health::{self, Change, Seen, Vitals};
use super::load::{self, EngineLoad};
use crate::config::EndpointConfig;
use crate::config::HealthConfig;
use crate::config::{Limits, Timeouts};
use crate::metrics::relay::Hist;
use crate::metrics::{EndpointSeries, Metrics, OnEnd, Outcome};
use crate::upstream::{detect_kind, list_models, redact_url, Client, Kind, ModelCard};

/// Where an endpoint stands; the picker reads it, probes and outcomes write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not yet known to work: no probe has passed yet (kind detection counts as one).
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
    pub group: Arc<str>,
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
    vitals: Mutex<Vitals>,
    health_cfg: Arc<HealthConfig>,
    /// How many of the pool's endpoints are healthy (kept by `set_health`), so a passive
    /// signal never takes out the last one.
    pool_healthy: Arc<AtomicUsize>,
    /// Smooth weighted round robin's running weight (read under the pool's pick lock).
    pub(super) current: AtomicI64,
    /// The engine's own load, as last polled.
    pub engine: EngineLoad,
    series: Option<EndpointSeries>,
    /// Load polls that found nothing in a row, and when the next is due.
    load_poll: Mutex<(u32, Instant)>,
    /// The engine's queue-time and prefill-time histograms, as last polled (vLLM).
    hists: Mutex<[Option<Hist>; 2]>,
    metrics: Arc<Metrics>,
}

/// What builds an endpoint besides its config.
pub struct Setup<'a> {
    pub pool: Arc<str>,
    pub label: String,
    pub timeouts: &'a Timeouts,
    pub limits: &'a Limits,
    pub metrics: Arc<Metrics>,
    pub health: Arc<HealthConfig>,
    pub pool_healthy: Arc<AtomicUsize>,
    /// `load.stale_after`.
    pub load_stale_after: Duration,
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
        s.metrics.endpoint_health(&s.pool, &s.label, None);
        let series = s.metrics.endpoint_series(&s.pool, &s.label);
        Endpoint {
            client,
            url: cfg.url.clone(),
            shown: redact_url(&cfg.url),
            group: Arc::from(group),
            weight: cfg.weight.max(1),
            pool: s.pool,
            label: s.label,
            kind: RwLock::new(kind),
            detecting: tokio::sync::Mutex::new(()),
            models: RwLock::new(Vec::new()),
            health: AtomicU8::new(Health::Pending.as_u8()),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            last_error: Mutex::new(None),
            vitals: Mutex::new(Vitals::new(&s.health)),
            health_cfg: s.health,
            pool_healthy: s.pool_healthy,
            current: AtomicI64::new(0),
            engine: EngineLoad::new(s.load_stale_after),
            series,
            load_poll: Mutex::new((0, Instant::now())),
            hists: Mutex::new([None, None]),
            metrics: s.metrics,
        }
    }

    pub fn health(&self) -> Health {
        Health::from_u8(self.health.load(Ordering::Relaxed))
    }

    /// Change the state, keeping the pool's healthy count and the gauge with it.
    pub fn set_health(&self, h: Health) {
        let old = Health::from_u8(self.health.swap(h.as_u8(), Ordering::Relaxed));
        match (old == Health::Healthy, h == Health::Healthy) {
            (false, true) => {
                self.pool_healthy.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.pool_healthy.fetch_sub(1, Ordering::Relaxed);
            }
            _ => return,
        }
        self.metrics
            .endpoint_health(&self.pool, &self.label, Some(h == Health::Healthy));
        tracing::info!(
            url = self.shown,
            pool = &*self.pool,
            from = old.label(),
            to = h.label(),
            "endpoint state"
        );
    }

    /// Times this endpoint was taken out of rotation.
    pub fn ejections(&self) -> u64 {
        self.vitals().ejections
    }

    fn vitals(&self) -> std::sync::MutexGuard<'_, Vitals> {
        self.vitals.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this is the pool's only healthy endpoint.
    fn is_last(&self) -> bool {
        self.health() == Health::Healthy && self.pool_healthy.load(Ordering::Relaxed) <= 1
    }

    fn apply(&self, change: Change) {
        match change {
            Change::None => {}
            Change::Healthy => self.set_health(Health::Healthy),
            Change::Eject => {
                self.metrics.endpoint_ejected(&self.pool, &self.label);
                self.set_health(Health::Ejected);
            }
        }
    }

    /// Whether an ejected endpoint may be probed back in.
    pub fn ejection_over(&self) -> bool {
        health::due(&self.vitals())
    }

    pub fn probe_passed(&self) {
        let change = health::passed(&mut self.vitals(), &self.health_cfg, self.health());
        self.apply(change);
    }

    pub fn probe_failed(&self, why: String) {
        self.note_error(why);
        let change = health::failed(
            &mut self.vitals(),
            &self.health_cfg,
            self.health(),
            Seen::Probe,
            self.is_last(),
        );
        self.apply(change);
    }

    /// A real request on this endpoint ended: failures (upstream errors, timeouts) count
    /// toward ejection, a success ends the run; client errors and cancellations say nothing.
    fn request_ended(&self, outcome: Outcome) {
        match outcome {
            Outcome::Ok => health::succeeded(&mut self.vitals(), &self.health_cfg),
            Outcome::UpstreamError | Outcome::Timeout => {
                self.note_error(format!("request failed: {}", outcome.label()));
                let change = health::failed(
                    &mut self.vitals(),
                    &self.health_cfg,
                    self.health(),
                    Seen::Request,
                    self.is_last(),
                );
                self.apply(change);
            }
            Outcome::ClientError | Outcome::Cancelled => {}
        }
    }

    /// The endpoint answered a 429 or 503 with `Retry-After`: out for that long (never the
    /// pool's last healthy endpoint), back after a passing probe.
    pub fn note_answer(&self, status: http::StatusCode, headers: &http::HeaderMap) {
        if !matches!(status.as_u16(), 429 | 503) {
            return;
        }
        let Some(secs) = retry_after(headers) else {
            return;
        };
        self.note_error(format!(
            "answered {} with Retry-After: {secs}",
            status.as_u16()
        ));
        let change = health::hold_off(&mut self.vitals(), self.health(), secs, self.is_last());
        self.apply(change);
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// What policies compare: lingo's requests in flight here, and what the engine says
    /// it holds where that is known and fresh (see `EngineLoad::load`).
    pub fn load(&self) -> usize {
        self.engine.load(self.in_flight())
    }

    /// The engine's relayed histograms, as last polled.
    pub(super) fn engine_hists(&self) -> [Option<Hist>; 2] {
        self.hists.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// Whether the load poller should ask this endpoint now.
    pub(super) fn load_poll_due(&self) -> bool {
        self.load_poll
            .lock()
            .map_or(true, |p| Instant::now() >= p.1)
    }

    /// A poll's result: kept and exported, or (nothing exported) the next poll put off,
    /// doubling up to 30 s, so a server without load metrics costs almost nothing.
    pub(super) fn note_load(&self, reading: Option<load::Reading>) {
        let Ok(mut p) = self.load_poll.lock() else {
            return;
        };
        match reading {
            Some(r) => {
                *p = (0, Instant::now());
                self.engine.set(r.sample, self.in_flight());
                self.metrics
                    .endpoint_engine(&self.pool, &self.label, &r.sample);
                if let Ok(mut h) = self.hists.lock() {
                    *h = r.hists;
                }
            }
            None => {
                p.0 = p.0.saturating_add(1);
                let wait = Duration::from_millis(250u64 << p.0.min(7)).min(Duration::from_secs(30));
                p.1 = Instant::now() + wait;
            }
        }
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

    /// The first model it lists, without copying the list (a request naming no model asks).
    pub fn first_model(&self) -> Option<String> {
        self.models.read().ok()?.first().map(|c| c.id.clone())
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
    /// start before its servers do). A successful detection counts as a passing probe.
    pub async fn kind(&self) -> Option<Kind> {
        if let Some(k) = self.kind_now() {
            return Some(k);
        }
        // Boxed: it runs until the kind is known, and inline its 1.5 KiB would be part of
        // every request's future.
        let k = Box::pin(self.detect()).await;
        if k.is_some() {
            self.probe_passed();
        }
        k
    }

    /// Detect the kind (once at a time), without counting it as a probe.
    pub(super) async fn detect(&self) -> Option<Kind> {
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
                group = &*self.group,
                "kind detection failed"
            );
            self.note_error("kind detection failed".into());
            return None;
        };
        tracing::info!(url = self.shown, group = &*self.group, kind = kind.label(), %why, "detected endpoint kind");
        if let Ok(mut slot) = self.kind.write() {
            *slot = Some(kind);
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
        if let Some(m) = &self.series {
            m.started();
        }
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
        if let Some(m) = &ep.series {
            m.finished(outcome);
        }
        ep.request_ended(outcome);
    }

    /// The ticket as a record's end hook.
    pub fn into_hook(self) -> OnEnd {
        Box::new(move |outcome| self.end(outcome))
    }
}

/// `Retry-After` in seconds (the HTTP-date form is not used by inference servers).
fn retry_after(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.settle(Outcome::Cancelled);
    }
}
