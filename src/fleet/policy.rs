//! The pick: one endpoint out of a pool's healthy ones, by the pool's policy. Ties are broken
//! at random, never by position, so the first endpoint of a list is not favoured.

use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::Rng;

use super::Endpoint;
use crate::config::Policy;

/// Pick from `healthy` (non-empty) by `policy`; `key` is the session key, if any.
/// `round_robin` must be called under the pool's pick lock (its weights are shared state).
pub fn pick(policy: Policy, healthy: &[Arc<Endpoint>], key: Option<&str>) -> Arc<Endpoint> {
    match (policy, key) {
        _ if healthy.len() == 1 => healthy[0].clone(),
        (Policy::RoundRobin, _) => round_robin(healthy),
        (Policy::Random, _) => random(healthy),
        (Policy::Session, Some(k)) => rendezvous(healthy, k),
        (Policy::LeastOutstanding | Policy::Session, _) => least_outstanding(healthy),
    }
}

/// Smooth weighted round robin (nginx): every endpoint gains its weight, the largest running
/// weight wins and pays the total back. Over any `sum(weights)` picks each endpoint gets
/// exactly its weight, interleaved rather than in runs.
fn round_robin(healthy: &[Arc<Endpoint>]) -> Arc<Endpoint> {
    let total: i64 = healthy.iter().map(|e| i64::from(e.weight)).sum();
    let mut best: Vec<&Arc<Endpoint>> = Vec::new();
    let mut top = i64::MIN;
    for e in healthy {
        let cur = e.current.fetch_add(i64::from(e.weight), Ordering::Relaxed) + i64::from(e.weight);
        if cur > top {
            top = cur;
            best.clear();
        }
        if cur == top {
            best.push(e);
        }
    }
    let chosen = best[rand::rng().random_range(0..best.len())];
    chosen.current.fetch_sub(total, Ordering::Relaxed);
    chosen.clone()
}

/// Weighted, uniformly at random.
fn random(healthy: &[Arc<Endpoint>]) -> Arc<Endpoint> {
    let total: u64 = healthy.iter().map(|e| u64::from(e.weight)).sum();
    let mut at = rand::rng().random_range(0..total.max(1));
    for e in healthy {
        let w = u64::from(e.weight);
        if at < w {
            return e.clone();
        }
        at -= w;
    }
    healthy[healthy.len() - 1].clone()
}

/// Power of two choices: two distinct endpoints at random, the one with fewer requests in
/// flight (lingo's own count, held until each body ends); a tie is a coin toss.
fn least_outstanding(healthy: &[Arc<Endpoint>]) -> Arc<Endpoint> {
    let mut rng = rand::rng();
    let n = healthy.len();
    let a = rng.random_range(0..n);
    let b = (a + rng.random_range(1..n)) % n;
    let (ea, eb) = (&healthy[a], &healthy[b]);
    let chosen = match ea.in_flight().cmp(&eb.in_flight()) {
        std::cmp::Ordering::Less => ea,
        std::cmp::Ordering::Greater => eb,
        std::cmp::Ordering::Equal if rng.random_bool(0.5) => ea,
        std::cmp::Ordering::Equal => eb,
    };
    chosen.clone()
}

/// Weighted rendezvous hashing: each endpoint scores `-weight / ln(h)` for a hash `h` of
/// (key, endpoint URL) in (0, 1); the highest wins. An endpoint leaving moves only the keys
/// it had; one joining takes only its share.
fn rendezvous(healthy: &[Arc<Endpoint>], key: &str) -> Arc<Endpoint> {
    let score = |e: &Endpoint| {
        let mut h = std::hash::DefaultHasher::new();
        key.hash(&mut h);
        e.url.hash(&mut h);
        // 53 bits into (0, 1).
        let unit = ((h.finish() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        -f64::from(e.weight) / unit.ln()
    };
    let mut best = &healthy[0];
    let mut top = f64::MIN;
    for e in healthy {
        let s = score(e);
        if s > top {
            top = s;
            best = e;
        }
    }
    best.clone()
}
