//! Health: active probes per endpoint kind, passive ejection from real requests' outcomes,
//! and `Retry-After` hold-offs. Probes run in one background task per pool; the request path
//! only reads the state they leave.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::endpoint::{Endpoint, Health};
use super::Pool;
use crate::config::HealthConfig;
use crate::upstream::Kind;

/// An endpoint's run of failures and passes, and when an ejection ends.
#[derive(Debug)]
pub(super) struct Vitals {
    /// Failures in a row (real requests or probes); a success clears it.
    failures: u32,
    /// Passing probes in a row while not healthy.
    passes: u32,
    pub(super) ejections: u64,
    /// The next ejection's length: `backoff`, doubled by each ejection in a row up to
    /// `max_backoff`, back to `backoff` after a request succeeds.
    next: Duration,
    /// No probe brings the endpoint back before this.
    until: Option<Instant>,
}

impl Vitals {
    pub(super) fn new(cfg: &HealthConfig) -> Vitals {
        Vitals {
            failures: 0,
            passes: 0,
            ejections: 0,
            next: cfg.backoff,
            until: None,
        }
    }
}

/// Where a failure was seen: a probe speaks for the endpoint alone, a real request may be the
/// request's fault, so passive ejection never takes out the pool's last healthy endpoint
/// (probes decide that a whole pool is down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    Probe,
    Request,
}

/// What to do after a state change, outside the vitals lock.
pub(super) enum Change {
    None,
    Eject,
    Healthy,
}

/// Count a failure; returns whether the endpoint must go out.
pub(super) fn failed(
    v: &mut Vitals,
    cfg: &HealthConfig,
    now: Health,
    seen: Seen,
    last: bool,
) -> Change {
    v.failures = v.failures.saturating_add(1);
    v.passes = 0;
    let out = match now {
        Health::Healthy => seen == Seen::Probe || !last,
        // Not yet known to work: only probes decide (a request may be tried on it while
        // nothing is healthy, as a single upstream always was).
        Health::Pending => seen == Seen::Probe,
        // A failed probe after the ejection ran out: out again, for longer.
        Health::Ejected => {
            if seen == Seen::Probe {
                extend(v, cfg);
            }
            return Change::None;
        }
        Health::Draining => false,
    };
    if out && v.failures >= cfg.unhealthy_after {
        v.ejections += 1;
        extend(v, cfg);
        return Change::Eject;
    }
    Change::None
}

fn extend(v: &mut Vitals, cfg: &HealthConfig) {
    v.until = Some(Instant::now() + v.next);
    v.next = (v.next * 2).min(cfg.max_backoff);
}

/// A request succeeded: the run of failures ends, and so does the backoff's growth.
pub(super) fn succeeded(v: &mut Vitals, cfg: &HealthConfig) {
    v.failures = 0;
    v.next = cfg.backoff;
}

/// A probe passed; returns whether the endpoint comes (back) in.
pub(super) fn passed(v: &mut Vitals, cfg: &HealthConfig, now: Health) -> Change {
    v.failures = 0;
    match now {
        Health::Pending | Health::Ejected => {
            v.passes = v.passes.saturating_add(1);
            if v.passes >= cfg.healthy_after {
                v.passes = 0;
                v.until = None;
                return Change::Healthy;
            }
            Change::None
        }
        _ => Change::None,
    }
}

/// An answer said `Retry-After: secs` (a 429 or 503): out for that long, then a probe.
pub(super) fn hold_off(v: &mut Vitals, now: Health, secs: u64, last: bool) -> Change {
    if now != Health::Healthy || last {
        return Change::None;
    }
    v.ejections += 1;
    v.until = Some(Instant::now() + Duration::from_secs(secs));
    Change::Eject
}

/// Whether an ejected endpoint's time out is over (a probe may bring it back).
pub(super) fn due(v: &Vitals) -> bool {
    v.until.is_none_or(|t| Instant::now() >= t)
}

/// The probe of a kind: SGLang, vLLM, TGI and llama.cpp answer `GET /health`, Ollama
/// `/api/version`; the OpenAI API has no health route, so its model list is the sign of life.
fn probe_path(kind: Kind) -> &'static str {
    match kind {
        Kind::Ollama => "/api/version",
        Kind::Openai => "/v1/models",
        _ => "/health",
    }
}

/// One probe: kind detection while the kind is unknown (it counts as a pass), else the
/// kind's health route, within `timeout`.
pub async fn probe(e: &Endpoint, timeout: Duration) -> Result<(), String> {
    let Some(kind) = e.kind_now() else {
        return match tokio::time::timeout(timeout, e.detect()).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("kind detection failed".into()),
            Err(_) => Err("kind detection timed out".into()),
        };
    };
    let path = probe_path(kind);
    match tokio::time::timeout(timeout, e.client.get(path)).await {
        Err(_) => Err(format!("probe {path} timed out")),
        Ok(Err(err)) => Err(format!("probe {path}: {err}")),
        Ok(Ok(r)) if r.status.is_success() => Ok(()),
        Ok(Ok(r)) => Err(format!("probe {path} answered {}", r.status.as_u16())),
    }
}

/// Probe an endpoint if it is due (every state but draining; an ejected one once its time
/// out is over), and record the result.
async fn check(e: &Endpoint, pool: &Pool) {
    match e.health() {
        Health::Draining => return,
        Health::Ejected if !e.ejection_over() => return,
        _ => {}
    }
    match probe(e, pool.health.timeout).await {
        Ok(()) => e.probe_passed(),
        Err(why) => e.probe_failed(why),
    }
}

/// Probe every endpoint of the pool once, concurrently.
pub async fn round(pool: &Pool) {
    let set = pool.endpoints();
    futures_util::future::join_all(set.iter().map(|e| check(e, pool))).await;
}

/// Probe the pool every `interval` until it is dropped (the task holds it only while a round
/// runs).
pub fn spawn(pool: &Arc<Pool>) {
    let weak: Weak<Pool> = Arc::downgrade(pool);
    tokio::spawn(async move {
        loop {
            let interval = match weak.upgrade() {
                Some(p) => p.health.interval,
                None => return,
            };
            tokio::time::sleep(interval).await;
            let Some(p) = weak.upgrade() else { return };
            round(&p).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> HealthConfig {
        HealthConfig {
            unhealthy_after: 3,
            healthy_after: 2,
            ..HealthConfig::default()
        }
    }

    #[test]
    fn three_request_failures_eject_unless_it_is_the_last_healthy_one() {
        let c = cfg();
        let mut v = Vitals::new(&c);
        let h = Health::Healthy;
        assert!(matches!(
            failed(&mut v, &c, h, Seen::Request, false),
            Change::None
        ));
        assert!(matches!(
            failed(&mut v, &c, h, Seen::Request, false),
            Change::None
        ));
        assert!(matches!(
            failed(&mut v, &c, h, Seen::Request, true),
            Change::None
        ));
        assert!(matches!(
            failed(&mut v, &c, h, Seen::Request, false),
            Change::Eject
        ));
        assert_eq!(v.ejections, 1);
        assert!(!due(&v));
        // A probe failure counts even for the last one.
        let mut v = Vitals::new(&c);
        for _ in 0..2 {
            failed(&mut v, &c, h, Seen::Probe, true);
        }
        assert!(matches!(
            failed(&mut v, &c, h, Seen::Probe, true),
            Change::Eject
        ));
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_a_success_resets_it() {
        let c = HealthConfig {
            unhealthy_after: 1,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(3),
            ..HealthConfig::default()
        };
        let mut v = Vitals::new(&c);
        failed(&mut v, &c, Health::Healthy, Seen::Probe, false);
        assert_eq!(v.next, Duration::from_secs(2));
        failed(&mut v, &c, Health::Ejected, Seen::Probe, false);
        assert_eq!(v.next, Duration::from_secs(3));
        failed(&mut v, &c, Health::Ejected, Seen::Probe, false);
        assert_eq!(v.next, Duration::from_secs(3));
        succeeded(&mut v, &c);
        assert_eq!(v.next, Duration::from_secs(1));
    }

    #[test]
    fn healthy_after_counts_passes_in_a_row() {
        let c = cfg();
        let mut v = Vitals::new(&c);
        assert!(matches!(passed(&mut v, &c, Health::Pending), Change::None));
        assert!(matches!(
            passed(&mut v, &c, Health::Pending),
            Change::Healthy
        ));
        assert!(matches!(passed(&mut v, &c, Health::Healthy), Change::None));
    }

    #[test]
    fn retry_after_holds_off_a_healthy_endpoint_but_not_the_last() {
        let mut v = Vitals::new(&cfg());
        assert!(matches!(
            hold_off(&mut v, Health::Healthy, 5, true),
            Change::None
        ));
        assert!(matches!(
            hold_off(&mut v, Health::Healthy, 5, false),
            Change::Eject
        ));
        assert!(!due(&v));
    }

    #[test]
    fn probe_paths_by_kind() {
        assert_eq!(probe_path(Kind::Sglang), "/health");
        assert_eq!(probe_path(Kind::Llamacpp), "/health");
        assert_eq!(probe_path(Kind::Ollama), "/api/version");
        assert_eq!(probe_path(Kind::Openai), "/v1/models");
    }
}
