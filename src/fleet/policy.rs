//! The pick: one endpoint out of a pool's healthy ones, by the pool's policy. Ties are broken
//! at random, never by position, so the first endpoint of a list is not favoured.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::Rng;
use smallvec::SmallVec;

use super::prefix::unit;
use super::{Endpoint, Key};
use crate::config::Policy;

/// Pick from `healthy` (non-empty) by `policy`; `key` is what the request carries for it,
/// `bound` the pool's `load_bound`. `round_robin` must be called under the pool's pick lock
/// (its weights are shared state).
pub fn pick(policy: Policy, healthy: &[&Arc<Endpoint>], key: &Key, bound: f64) -> Arc<Endpoint> {
    match (policy, key) {
        _ if healthy.len() == 1 => Arc::clone(healthy[0]),
        (Policy::RoundRobin, _) => round_robin(healthy),
        (Policy::Random, _) => random(healthy),
        (Policy::Session, Key::Session(k)) => rendezvous(healthy, k.as_bytes()),
        (Policy::PrefixAffinity, Key::Prefix(k)) => bounded(healthy, &k.to_le_bytes(), bound),
        (Policy::LeastOutstanding | Policy::Session | Policy::PrefixAffinity, _) => {
            least_outstanding(healthy)
        }
    }
}

/// Smooth weighted round robin (nginx): every endpoint gains its weight, the largest running
/// weight wins and pays the total back. Over any `sum(weights)` picks each endpoint gets
/// exactly its weight, interleaved rather than in runs.
fn round_robin(healthy: &[&Arc<Endpoint>]) -> Arc<Endpoint> {
    let total: i64 = healthy.iter().map(|e| i64::from(e.weight)).sum();
    // On the stack: a pick allocates nothing.
    let mut best: SmallVec<[&Arc<Endpoint>; 8]> = SmallVec::new();
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
    Arc::clone(chosen)
}

/// Weighted, uniformly at random.
fn random(healthy: &[&Arc<Endpoint>]) -> Arc<Endpoint> {
    let total: u64 = healthy.iter().map(|e| u64::from(e.weight)).sum();
    let mut at = rand::rng().random_range(0..total.max(1));
    for e in healthy {
        let w = u64::from(e.weight);
        if at < w {
            return Arc::clone(e);
        }
        at -= w;
    }
    Arc::clone(healthy[healthy.len() - 1])
}

/// Power of two choices: two distinct endpoints at random, the less loaded (lingo's own
/// in-flight count, held until each body ends, plus the engine's waiting queue where it is
/// known); a tie is a coin toss.
fn least_outstanding(healthy: &[&Arc<Endpoint>]) -> Arc<Endpoint> {
    let mut rng = rand::rng();
    let n = healthy.len();
    let a = rng.random_range(0..n);
    let b = (a + rng.random_range(1..n)) % n;
    let (ea, eb) = (healthy[a], healthy[b]);
    let chosen = match ea.load().cmp(&eb.load()) {
        std::cmp::Ordering::Less => ea,
        std::cmp::Ordering::Greater => eb,
        std::cmp::Ordering::Equal if rng.random_bool(0.5) => ea,
        std::cmp::Ordering::Equal => eb,
    };
    Arc::clone(chosen)
}

/// Weighted rendezvous score of `e` for `key`: `-weight / ln(h)` for a stable hash `h` of
/// (key, endpoint URL) in (0, 1).
fn score(key: &[u8], e: &Endpoint) -> f64 {
    -f64::from(e.weight) / unit(key, &e.url).ln()
}

/// Weighted rendezvous hashing: the highest score wins. An endpoint leaving moves only the
/// keys it had; one joining takes only its share.
fn rendezvous(healthy: &[&Arc<Endpoint>], key: &[u8]) -> Arc<Endpoint> {
    let mut best = healthy[0];
    let mut top = f64::MIN;
    for e in healthy {
        let s = score(key, e);
        if s > top {
            top = s;
            best = e;
        }
    }
    Arc::clone(best)
}

/// Consistent hashing with bounded load (Mirrokni et al.) over rendezvous order: the
/// endpoints ranked by score for `key`, the first whose load after this request stays
/// within `bound` times its weighted share of the pool's load. Some endpoint always
/// qualifies (the shares sum to more than the load), and a hot key spills to the same
/// next endpoints in every lingo replica.
fn bounded(healthy: &[&Arc<Endpoint>], key: &[u8], bound: f64) -> Arc<Endpoint> {
    let loads: SmallVec<[usize; 8]> = healthy.iter().map(|e| e.load()).collect();
    let total = loads.iter().sum::<usize>() as f64 + 1.0;
    let weights = healthy.iter().map(|e| f64::from(e.weight)).sum::<f64>();
    let mut ranked: SmallVec<[(f64, usize); 8]> = healthy
        .iter()
        .enumerate()
        .map(|(i, e)| (score(key, e), i))
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, i) in &ranked {
        let cap = (bound * total * f64::from(healthy[*i].weight) / weights).ceil();
        if (loads[*i] + 1) as f64 <= cap {
            return Arc::clone(healthy[*i]);
        }
    }
    // Unreachable by the argument above; the least loaded is the safe answer anyway.
    least_outstanding(healthy)
}
