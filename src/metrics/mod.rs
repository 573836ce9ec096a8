//! Metrics: every name in `names.rs`, registered once with help text and explicit buckets;
//! call sites use the typed recording functions here, never the prometheus types.
//!
//! Per-request measurement lives in `body.rs`: a wrapper around the response body sees the
//! first token, every later token, the end, an error, or the client dropping the stream.
//! `open.rs` holds the record from the request's arrival, so it is recorded exactly once.

pub mod body;
mod log;
pub mod names;
mod open;
mod record;
pub mod relay;
mod series;
mod vllm;

pub use body::{Emit, MeteredBody, Progress, Summary};
pub use log::{LogLine, LogTarget, RequestLog};
pub use open::{OnEnd, OpenRecord};
pub use record::{session_key, Labels, Outcome, RequestRecord};
pub use series::Series;

use std::sync::Arc;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use names::*;

/// Why a request was refused at the door; a closed set used as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Unauthorized,
    RateLimited,
    Overloaded,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Unauthorized => "unauthorized",
            Refusal::RateLimited => "rate_limited",
            Refusal::Overloaded => "overloaded",
        }
    }
}

/// All of lingo's metrics, registered in one registry.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    prompt_tokens: IntCounterVec,
    generation_tokens: IntCounterVec,
    estimated_requests: IntCounterVec,
    errors: IntCounterVec,
    ttft: HistogramVec,
    itl: HistogramVec,
    tpot: HistogramVec,
    e2e: HistogramVec,
    prompt_hist: HistogramVec,
    generation_hist: HistogramVec,
    upstream_headers: HistogramVec,
    overhead: HistogramVec,
    in_flight: IntGaugeVec,
    refused: IntCounterVec,
    decode_errors: IntCounterVec,
    endpoint_requests: IntCounterVec,
    endpoint_in_flight: IntGaugeVec,
    endpoint_healthy: IntGaugeVec,
    endpoint_waiting: IntGaugeVec,
    endpoint_running: IntGaugeVec,
    endpoint_kv: GaugeVec,
    endpoint_ejections: IntCounterVec,
    endpoint_retries: IntCounterVec,
    mirror_requests: IntCounterVec,
    /// Each label set's per-request series, resolved once (see `series.rs`).
    series: series::SeriesCache,
    vllm: Option<vllm::VllmCompat>,
    log: Option<RequestLog>,
    /// Record nothing (`--no-metrics`, to measure what metrics cost).
    off: bool,
}

/// See `Metrics::endpoint_series`.
#[derive(Clone)]
pub struct EndpointSeries {
    in_flight: prometheus::IntGauge,
    outcomes: [prometheus::IntCounter; 5],
}

impl EndpointSeries {
    /// A request was given to the endpoint.
    pub fn started(&self) {
        self.in_flight.inc();
    }

    /// Its request ended (the response body ended or was dropped).
    pub fn finished(&self, outcome: Outcome) {
        self.in_flight.dec();
        let i = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.outcomes[i].inc();
    }
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn gauge(r: &Registry, (name, help): (&str, &str), labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

fn float_gauge(r: &Registry, (name, help): (&str, &str), labels: &[&str]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

fn histogram(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: &[f64],
) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    let h = HistogramVec::new(opts, labels).expect("valid metric");
    r.register(Box::new(h.clone())).expect("unique metric");
    h
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let in_flight = gauge(&r, IN_FLIGHT, &["upstream"]);
        let endpoint_in_flight = gauge(&r, ENDPOINT_IN_FLIGHT, &["pool", "endpoint"]);
        Metrics {
            requests: counter(&r, REQUESTS.0, REQUESTS.1, REQUEST_LABELS),
            prompt_tokens: counter(&r, PROMPT_TOKENS.0, PROMPT_TOKENS.1, MODEL_LABELS),
            generation_tokens: counter(&r, GENERATION_TOKENS.0, GENERATION_TOKENS.1, MODEL_LABELS),
            estimated_requests: counter(&r, ESTIMATED.0, ESTIMATED.1, MODEL_LABELS),
            errors: counter(&r, ERRORS.0, ERRORS.1, ERROR_LABELS),
            ttft: histogram(&r, TTFT.0, TTFT.1, MODEL_LABELS, TTFT_BUCKETS),
            itl: histogram(&r, ITL.0, ITL.1, MODEL_LABELS, ITL_BUCKETS),
            tpot: histogram(&r, TPOT.0, TPOT.1, MODEL_LABELS, ITL_BUCKETS),
            e2e: histogram(&r, E2E.0, E2E.1, MODEL_LABELS, E2E_BUCKETS),
            prompt_hist: histogram(
                &r,
                PROMPT_HIST.0,
                PROMPT_HIST.1,
                MODEL_LABELS,
                TOKEN_BUCKETS,
            ),
            generation_hist: histogram(&r, GEN_HIST.0, GEN_HIST.1, MODEL_LABELS, TOKEN_BUCKETS),
            upstream_headers: histogram(&r, HEADERS.0, HEADERS.1, &["upstream"], TTFT_BUCKETS),
            overhead: histogram(
                &r,
                OVERHEAD.0,
                OVERHEAD.1,
                &["dialect", "upstream"],
                OVERHEAD_BUCKETS,
            ),
            in_flight,
            refused: counter(&r, REFUSED.0, REFUSED.1, &["reason"]),
            decode_errors: counter(
                &r,
                DECODE_ERRORS.0,
                DECODE_ERRORS.1,
                &["dialect", "upstream"],
            ),
            endpoint_requests: counter(
                &r,
                ENDPOINT_REQUESTS.0,
                ENDPOINT_REQUESTS.1,
                &["pool", "endpoint", "outcome"],
            ),
            endpoint_in_flight,
            endpoint_healthy: gauge(&r, ENDPOINT_HEALTHY, &["pool", "endpoint"]),
            endpoint_waiting: gauge(&r, ENDPOINT_ENGINE_WAITING, &["pool", "endpoint"]),
            endpoint_running: gauge(&r, ENDPOINT_ENGINE_RUNNING, &["pool", "endpoint"]),
            endpoint_kv: float_gauge(&r, ENDPOINT_KV_USAGE, &["pool", "endpoint"]),
            endpoint_ejections: counter(
                &r,
                ENDPOINT_EJECTIONS.0,
                ENDPOINT_EJECTIONS.1,
                &["pool", "endpoint"],
            ),
            endpoint_retries: counter(
                &r,
                ENDPOINT_RETRIES.0,
                ENDPOINT_RETRIES.1,
                &["pool", "reason"],
            ),
            mirror_requests: counter(
                &r,
                MIRROR_REQUESTS.0,
                MIRROR_REQUESTS.1,
                &["pool", "group", "outcome"],
            ),
            series: series::SeriesCache::default(),
            vllm: None,
            log: None,
            off: false,
            registry: r,
        }
    }

    /// Record nothing; `/metrics` stays empty of samples.
    pub fn disabled(mut self) -> Metrics {
        self.off = true;
        self
    }

    /// Whether vLLM's names are exported (so the fleet relays what its engines report).
    pub fn relays_vllm(&self) -> bool {
        self.vllm.is_some()
    }

    /// The figures the endpoints serving `models` reported (see `relay`).
    pub fn vllm_relay(&self, models: &[String], r: &relay::ModelRelay) {
        if let Some(v) = &self.vllm {
            v.relay(models, r);
        }
    }

    /// The models served, known from the start (see `VllmCompat::models_known`).
    pub fn vllm_models_known(&self, models: &[String]) {
        if let Some(v) = &self.vllm {
            v.models_known(models);
        }
    }

    /// Also export vLLM's metric names and buckets (`--metrics-compat vllm`).
    pub fn with_vllm_compat(mut self) -> Metrics {
        self.vllm = Some(vllm::VllmCompat::register(&self.registry));
        self
    }

    /// Also write one JSON line per finished request.
    pub fn with_log(mut self, log: RequestLog) -> Metrics {
        self.log = Some(log);
        self
    }

    /// Whether finished requests are written to a request log (what only the log reads, a
    /// record need not copy otherwise).
    pub fn logs(&self) -> bool {
        self.log.is_some() && !self.off
    }

    /// Prometheus text exposition of everything registered.
    pub fn render(&self) -> String {
        if let Some(v) = &self.vllm {
            v.refresh();
        }
        let mut out = Vec::new();
        let families = self.registry.gather();
        if TextEncoder::new().encode(&families, &mut out).is_err() {
            return String::new();
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// One endpoint's per-request series (labels from the pool's capped set), resolved once:
    /// a label lookup costs a hash and a lock, twice per request otherwise. `None` when
    /// metrics are off.
    pub fn endpoint_series(&self, pool: &str, endpoint: &str) -> Option<EndpointSeries> {
        if self.off {
            return None;
        }
        let outcomes = Outcome::ALL.map(|o| {
            self.endpoint_requests
                .with_label_values(&[pool, endpoint, o.label()])
        });
        Some(EndpointSeries {
            in_flight: self.endpoint_in_flight.with_label_values(&[pool, endpoint]),
            outcomes,
        })
    }

    /// A pool's mirror counters, one per outcome (`fleet::mirror::OUTCOMES`, in that order),
    /// made now so the series exist (at 0) from the moment a mirror is configured.
    pub fn mirror_series(
        &self,
        pool: &str,
        group: &str,
        outcomes: [&str; 3],
    ) -> Option<[prometheus::IntCounter; 3]> {
        if self.off {
            return None;
        }
        Some(outcomes.map(|o| self.mirror_requests.with_label_values(&[pool, group, o])))
    }

    /// `healthy` is `Some(true)` when an endpoint becomes healthy, `Some(false)` when it stops
    /// being so, `None` when it joins (the series shows 0 from then on).
    pub fn endpoint_health(&self, pool: &str, endpoint: &str, healthy: Option<bool>) {
        if self.off {
            return;
        }
        // Added, not set: every endpoint past the label cap shares `other`, which so counts
        // how many of them are healthy.
        let change = match healthy {
            Some(true) => 1,
            Some(false) => -1,
            None => 0,
        };
        self.endpoint_healthy
            .with_label_values(&[pool, endpoint])
            .add(change);
    }

    /// An endpoint's engine reported its load. Endpoints past the label cap (`other`) share
    /// one series, which a set would make one of theirs at random: they are not exported.
    pub fn endpoint_engine(&self, pool: &str, endpoint: &str, s: &crate::fleet::load::Sample) {
        if self.off || endpoint == "other" {
            return;
        }
        let labels = [pool, endpoint];
        if let Some(w) = s.waiting {
            self.endpoint_waiting
                .with_label_values(&labels)
                .set(i64::from(w));
        }
        if let Some(r) = s.running {
            self.endpoint_running
                .with_label_values(&labels)
                .set(i64::from(r));
        }
        if let Some(k) = s.kv_usage {
            self.endpoint_kv.with_label_values(&labels).set(k);
        }
    }

    /// An endpoint was taken out of rotation.
    pub fn endpoint_ejected(&self, pool: &str, endpoint: &str) {
        if self.off {
            return;
        }
        self.endpoint_ejections
            .with_label_values(&[pool, endpoint])
            .inc();
    }

    /// A request was sent to another endpoint of `pool` (`reason` from a closed set).
    pub fn endpoint_retried(&self, pool: &str, reason: &'static str) {
        if self.off {
            return;
        }
        self.endpoint_retries
            .with_label_values(&[pool, reason])
            .inc();
    }

    /// A request opened: it counts in flight. Gives its series, for the record to keep
    /// (`None` when metrics are off).
    pub fn request_started(&self, labels: &Labels) -> Option<Arc<Series>> {
        if self.off {
            return None;
        }
        let s = self.series.get(labels);
        self.in_flight_of(&s).inc();
        if let Some(v) = &self.vllm {
            v.started(&labels.model);
        }
        Some(s)
    }

    /// A request's labels changed while it was in flight (its model became known): move its
    /// in-flight counts to the new labels. Gives the series of the new ones.
    pub fn request_relabelled(&self, r: &RequestRecord, new: &Labels) -> Option<Arc<Series>> {
        if self.off {
            return None;
        }
        let old = &r.labels;
        let s = match &r.series {
            // Relabelled to what it had (the endpoint's group is the upstream's name): the
            // same series.
            Some(s) if s.labels.same(new) => s.clone(),
            _ => self.series.get(new),
        };
        if old.upstream != new.upstream {
            self.with_series(r, |old| self.in_flight_of(old).dec());
            self.in_flight_of(&s).inc();
        }
        if let Some(v) = &self.vllm {
            v.relabelled(&old.model, &new.model);
        }
        Some(s)
    }

    /// `f` with the record's series: the one it keeps, unless its labels changed without
    /// `relabel` (then they are looked up).
    fn with_series<T>(&self, r: &RequestRecord, f: impl FnOnce(&Series) -> T) -> T {
        match &r.series {
            Some(s) if s.labels.same(&r.labels) => f(s),
            _ => f(&self.series.get(&r.labels)),
        }
    }

    fn in_flight_of<'s>(&self, s: &'s Series) -> &'s prometheus::IntGauge {
        s.in_flight
            .get_or_init(|| self.in_flight.with_label_values(&[&s.labels.upstream]))
    }

    /// Record one finished (or failed, or cancelled) request. Only `OpenRecord` calls this,
    /// once per request.
    pub fn request_finished(&self, r: &RequestRecord) {
        if self.off {
            return;
        }
        self.with_series(r, |s| {
            self.finished_in(r, s);
            if let Some(v) = &self.vllm {
                v.finished(r);
            }
            // Last: a scrape that no longer sees the request in flight sees all of its
            // counts (tests wait for nothing in flight, then read them).
            self.in_flight_of(s).dec();
        });
        if let Some(log) = &self.log {
            log.record(r);
        }
    }

    /// `request_finished`'s series, each made at its first use as `with_label_values` made
    /// it, so the same series appear when they did.
    fn finished_in(&self, r: &RequestRecord, s: &Series) {
        let l = &r.labels;
        let model = [l.dialect, &*l.upstream, &*l.model];
        let (outcome, finish, key) = (r.outcome.label(), r.finish_label(), r.key_label());
        let requests = || {
            self.requests.with_label_values(&[
                l.dialect,
                &l.upstream,
                &l.model,
                outcome,
                finish,
                key,
            ])
        };
        match s.requests(r.outcome, finish, key) {
            Some(kept) => kept.get_or_init(requests).inc(),
            None => requests().inc(),
        }
        if let Some(kind) = r.error_kind {
            self.errors
                .with_label_values(&[l.dialect, &l.upstream, kind])
                .inc();
        }
        let counter = |vec: &IntCounterVec| vec.with_label_values(&model);
        let histogram = |vec: &HistogramVec| vec.with_label_values(&model);
        s.prompt_tokens
            .get_or_init(|| counter(&self.prompt_tokens))
            .inc_by(r.prompt_tokens.unwrap_or(0));
        s.generation_tokens
            .get_or_init(|| counter(&self.generation_tokens))
            .inc_by(r.tokens);
        if r.estimated {
            s.estimated
                .get_or_init(|| counter(&self.estimated_requests))
                .inc();
        }
        // A prompt's length is the request's, whatever became of it; unknown is not 0.
        if let Some(p) = r.prompt_tokens {
            s.prompt_hist
                .get_or_init(|| histogram(&self.prompt_hist))
                .observe(p as f64);
        }
        if r.outcome == Outcome::Ok {
            s.generation_hist
                .get_or_init(|| histogram(&self.generation_hist))
                .observe(r.tokens as f64);
            if let Some(e2e) = r.e2e() {
                s.e2e.get_or_init(|| histogram(&self.e2e)).observe(e2e);
            }
            if let Some(tpot) = r.tpot() {
                s.tpot.get_or_init(|| histogram(&self.tpot)).observe(tpot);
            }
        }
        if let Some(h) = r.upstream_headers {
            s.upstream_headers
                .get_or_init(|| self.upstream_headers.with_label_values(&[&l.upstream]))
                .observe(h.as_secs_f64());
        }
        if let Some(o) = r.overhead() {
            s.overhead
                .get_or_init(|| self.overhead.with_label_values(&[l.dialect, &l.upstream]))
                .observe(o);
        }
    }

    /// A request refused before any handler ran (so it has no request record).
    pub fn request_refused(&self, why: Refusal) {
        if self.off {
            return;
        }
        self.refused.with_label_values(&[why.label()]).inc();
    }

    /// `n` upstream stream events of one request could not be decoded.
    pub fn stream_decode_errors(&self, l: &Labels, n: u32) {
        if self.off || n == 0 {
            return;
        }
        self.decode_errors
            .with_label_values(&[l.dialect, &l.upstream])
            .inc_by(u64::from(n));
    }

    pub fn observe_ttft(&self, r: &RequestRecord, seconds: f64) {
        if self.off {
            return;
        }
        let l = &r.labels;
        self.with_series(r, |s| {
            s.ttft
                .get_or_init(|| {
                    self.ttft
                        .with_label_values(&[l.dialect, &l.upstream, &l.model])
                })
                .observe(seconds);
        });
        if let Some(v) = &self.vllm {
            v.ttft(&l.model, seconds);
        }
    }

    /// A chunk of `tokens` tokens arrived `gap` seconds after the previous one: `tokens`
    /// observations of `gap / tokens` (token-weighted, so multi-token chunks don't inflate ITL).
    pub fn observe_itl(&self, r: &RequestRecord, gap: f64, tokens: u32) {
        if self.off {
            return;
        }
        let l = &r.labels;
        let each = gap / f64::from(tokens.max(1));
        self.with_series(r, |s| {
            let h = s.itl.get_or_init(|| {
                self.itl
                    .with_label_values(&[l.dialect, &l.upstream, &l.model])
            });
            for _ in 0..tokens {
                h.observe(each);
            }
        });
        if let Some(v) = &self.vllm {
            v.itl(&l.model, each, tokens);
        }
    }
}
