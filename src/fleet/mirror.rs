//! A pool's mirror: a shadow deployment that also gets a fraction of the pool's generation
//! requests, so two deployments (an MTP one and a DFlash one, say) compare on live traffic.
//!
//! The mirror is a pool of its own (least outstanding over its healthy endpoints, its own
//! probes, its own connection pools), so a slow shadow holds none of the client's
//! connections. Which requests are mirrored is decided by a counter of the pool's arrivals,
//! not by the clock or a random draw: over any n arrivals, floor(n * fraction) are chosen,
//! evenly spread. A chosen request is sent only while the mirror has fewer than
//! `max_in_flight` shadow requests open and lingo is not nearly full or draining; each
//! decision is counted (`lingo_mirror_requests_total`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::Pool;
use crate::config::{Config, MirrorConfig, Policy, PoolConfig};
use crate::metrics::Metrics;

/// The outcomes of a mirroring decision, in the order `Mirror::counters` holds them.
pub const OUTCOMES: [&str; 3] = ["sent", "dropped_cap", "dropped_load"];

pub struct Mirror {
    pub group: String,
    pub fraction: f64,
    pub max_in_flight: usize,
    /// The shadow endpoints, as a pool that never retries.
    pub pool: Arc<Pool>,
    /// The main pool's requests seen so far (the even-spread counter).
    arrivals: AtomicU64,
    in_flight: Arc<AtomicUsize>,
    counters: Option<[prometheus::IntCounter; 3]>,
}

/// What to do with one of the pool's requests.
pub enum Decision {
    /// Not in the fraction: nothing is counted.
    Skip,
    /// Send the shadow request; it holds the slot until it ends.
    Send(Slot),
    /// Chosen, but not sent (counted as `dropped_cap` or `dropped_load`).
    Dropped,
}

/// A shadow request's place under `max_in_flight`, given back on drop.
pub struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Mirror {
    /// The mirror of pool `pool` (`config` for the timeouts, limits and health its endpoints
    /// share with the pool's).
    pub fn new(
        pool: &str,
        cfg: &MirrorConfig,
        parent: &PoolConfig,
        config: &Config,
        metrics: Arc<Metrics>,
    ) -> Mirror {
        let endpoints = cfg
            .endpoints
            .iter()
            .map(|e| {
                let mut e = e.clone();
                e.group = Some(cfg.group.clone());
                e
            })
            .collect();
        let shadow = PoolConfig {
            policy: Policy::LeastOutstanding,
            retries: 0,
            health: parent.health.clone(),
            endpoints,
            mirror: None,
            ..PoolConfig::default()
        };
        let name = format!("{pool}.mirror");
        let counters = metrics.mirror_series(pool, &cfg.group, OUTCOMES);
        Mirror {
            group: cfg.group.clone(),
            fraction: cfg.fraction,
            max_in_flight: cfg.max_in_flight,
            pool: Arc::new(Pool::new(&name, &shadow, config, metrics)),
            arrivals: AtomicU64::new(0),
            in_flight: Arc::new(AtomicUsize::new(0)),
            counters,
        }
    }

    /// Shadow requests open now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Decide for one of the pool's requests; `busy` is lingo's own state (admission nearly
    /// full, or draining), under which shadow traffic is the first to go.
    pub fn decide(&self, busy: bool) -> Decision {
        let n = self.arrivals.fetch_add(1, Ordering::Relaxed);
        if !chosen(n, self.fraction) {
            return Decision::Skip;
        }
        if busy {
            self.count(2);
            return Decision::Dropped;
        }
        let cap = self.max_in_flight;
        let took = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v < cap).then_some(v + 1)
            });
        if took.is_err() {
            self.count(1);
            return Decision::Dropped;
        }
        self.count(0);
        Decision::Send(Slot(self.in_flight.clone()))
    }

    fn count(&self, i: usize) {
        if let Some(c) = &self.counters {
            c[i].inc();
        }
    }
}

/// Whether arrival `n` (from 0) is one of the fraction: the count of chosen arrivals steps up
/// by one each time `n * fraction` passes a whole number.
fn chosen(n: u64, fraction: f64) -> bool {
    let before = (n as f64 * fraction).floor();
    let after = ((n + 1) as f64 * fraction).floor();
    after > before
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fraction_is_spread_evenly_and_exactly() {
        let count = |n: u64, f: f64| (0..n).filter(|i| chosen(*i, f)).count();
        assert_eq!(count(40, 0.25), 10);
        assert_eq!(count(40, 1.0), 40);
        assert_eq!(count(1000, 0.05), 50);
        // Evenly: a quarter is every fourth arrival, never two in a row.
        let picks: Vec<u64> = (0..12).filter(|i| chosen(*i, 0.25)).collect();
        assert_eq!(picks, vec![3, 7, 11]);
        // Any window of 20 arrivals at 5% holds exactly one.
        for start in 0..100 {
            assert_eq!((start..start + 20).filter(|i| chosen(*i, 0.05)).count(), 1);
        }
    }

    #[test]
    fn the_cap_and_load_drop_and_a_slot_frees_on_drop() {
        let mut cfg = Config::default();
        let m = MirrorConfig {
            fraction: 1.0,
            group: "g".into(),
            endpoints: vec![crate::config::EndpointConfig::new(
                "http://127.0.0.1:9",
                crate::upstream::KindSetting::Vllm,
            )],
            max_in_flight: 2,
        };
        cfg.upstream.name = "p".into();
        let metrics = Arc::new(Metrics::new());
        let mirror = Mirror::new("p", &m, &PoolConfig::default(), &cfg, metrics.clone());
        let a = mirror.decide(false);
        let b = mirror.decide(false);
        assert!(matches!(a, Decision::Send(_)) && matches!(b, Decision::Send(_)));
        assert!(matches!(mirror.decide(false), Decision::Dropped));
        assert_eq!(mirror.in_flight(), 2);
        drop(a);
        assert!(matches!(mirror.decide(true), Decision::Dropped));
        assert!(matches!(mirror.decide(false), Decision::Send(_)));
        let text = metrics.render();
        for (outcome, n) in [("sent", 3), ("dropped_cap", 1), ("dropped_load", 1)] {
            let line = format!(
                "lingo_mirror_requests_total{{group=\"g\",outcome=\"{outcome}\",pool=\"p\"}} {n}"
            );
            assert!(text.contains(&line), "{line}\n{text}");
        }
        assert_eq!(mirror.pool.endpoints()[0].group, "g".into());
    }
}
