//! The simulated scheduler: a cap on running requests with a bounded FIFO queue behind it, the
//! prefix cache lookup and the prefill cost, and the live load figures `/metrics` reports.
//!
//! A generation request is admitted (`waiting`) once its prompts are known, and runs from the
//! moment it holds a permit until its response body ends or is dropped. Its first token comes
//! `ttft + prefill_per_token * uncached prompt tokens` after the permit; the cache is queried
//! when the request starts running and filled once its prefill is done, so two identical
//! requests prefilled at the same time both miss, as on a real server. With the defaults (no
//! cap, no cache, no prefill cost) admission is a few atomic operations and never waits.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::cache::{block_hashes, PrefixCache};
use super::prompt::Prompt;
use super::MockConfig;

/// The message of the 503 a full queue answers with.
pub(crate) const QUEUE_FULL: &str = "mock: the request queue is full";

/// The queue is at `max_waiting`: the request is answered 503.
#[derive(Debug)]
pub(crate) struct Overloaded;

/// Load figures at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Load {
    pub running: u64,
    /// Requests waiting for a permit, without the `/mock/load` addition.
    pub waiting: u64,
    /// The `/mock/load` addition to every reported waiting figure.
    pub extra_waiting: u64,
    /// Prompt tokens of the waiting requests.
    pub waiting_tokens: u64,
    /// Tokens held by running requests: prompts plus tokens generated so far.
    pub held_tokens: u64,
    pub cache_tokens: u64,
    pub max_running: Option<u32>,
    pub queries: u64,
    pub hits: u64,
}

impl Load {
    /// Waiting requests as reported: the real queue plus the `/mock/load` addition.
    pub fn reported_waiting(&self) -> u64 {
        self.waiting.saturating_add(self.extra_waiting)
    }

    /// `held_tokens / cache_tokens`, capped at 1; 0 without a cache.
    pub fn kv_usage(&self) -> f64 {
        if self.cache_tokens == 0 {
            return 0.0;
        }
        (self.held_tokens as f64 / self.cache_tokens as f64).min(1.0)
    }

    /// Hit tokens over queried tokens since start; 0 before any query.
    pub fn hit_rate(&self) -> f64 {
        if self.queries == 0 {
            return 0.0;
        }
        self.hits as f64 / self.queries as f64
    }
}

/// Scheduler state shared by the requests of one mock.
pub(crate) struct Sched {
    permits: Option<Arc<Semaphore>>,
    max_running: Option<u32>,
    max_waiting: u64,
    cache: Option<Mutex<PrefixCache>>,
    cache_tokens: u64,
    ttft: Duration,
    prefill_per_token: Duration,
    running: AtomicU64,
    waiting: AtomicU64,
    waiting_tokens: AtomicU64,
    held_tokens: AtomicU64,
    queries: AtomicU64,
    hits: AtomicU64,
    /// `POST /mock/load`: added to every reported waiting figure.
    extra_waiting: AtomicU64,
    /// `POST /mock/load`: the status `/metrics` and the load routes answer with.
    metrics_status: AtomicU16,
}

/// One admitted request's place in the scheduler; released by [`Sched::release`].
pub(crate) struct Slot {
    /// Per prompt: its block hashes (empty without a cache) and its length.
    prompts: Vec<(Vec<u64>, usize)>,
    prompt_tokens: u64,
    arrived: Instant,
    started: Option<Instant>,
    prefilled: bool,
    _permit: Option<OwnedSemaphorePermit>,
    /// Tokens this request adds to `held_tokens` (0 while waiting).
    held: u64,
}

impl Slot {
    /// How long it waited for a running permit (zero until it started).
    pub fn queued(&self) -> Duration {
        self.started.map_or(Duration::ZERO, |s| {
            s.saturating_duration_since(self.arrived)
        })
    }
}

/// A request that started running: its first-token delay and its cache query.
pub(crate) struct Started {
    /// `ttft + prefill_per_token * uncached prompt tokens`.
    pub delay: Duration,
    /// Prompt tokens queried and found.
    pub queries: u64,
    pub hits: u64,
}

/// Times of one request's first token, for the histograms.
pub(crate) struct FirstToken {
    pub prompt_tokens: u64,
    pub queue: Duration,
    pub prefill: Duration,
    pub ttft: Duration,
}

impl Sched {
    pub fn new(cfg: &MockConfig) -> Sched {
        // A cap of 0 would queue everything forever; it means 1.
        let max_running = cfg.max_running.map(|n| n.max(1));
        Sched {
            permits: max_running.map(|n| Arc::new(Semaphore::new(n as usize))),
            max_running,
            max_waiting: u64::from(cfg.max_waiting),
            cache: (cfg.cache_tokens >= super::cache::BLOCK as u64)
                .then(|| Mutex::new(PrefixCache::new(cfg.cache_tokens))),
            cache_tokens: cfg.cache_tokens,
            ttft: cfg.ttft,
            prefill_per_token: cfg.prefill_per_token,
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            waiting_tokens: AtomicU64::new(0),
            held_tokens: AtomicU64::new(0),
            queries: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            extra_waiting: AtomicU64::new(0),
            metrics_status: AtomicU16::new(200),
        }
    }

    /// Enters the queue; with a running cap, refused once `max_waiting` requests wait.
    pub fn admit(&self, prompts: &[Prompt]) -> Result<Slot, Overloaded> {
        let waiting = self.waiting.fetch_add(1, Ordering::AcqRel);
        if self.permits.is_some() && waiting >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(Overloaded);
        }
        let with_hashes = self.cache.is_some();
        let prompts: Vec<(Vec<u64>, usize)> = prompts
            .iter()
            .map(|p| {
                let hashes = if with_hashes {
                    block_hashes(&p.ids)
                } else {
                    Vec::new()
                };
                (hashes, p.ids.len())
            })
            .collect();
        let prompt_tokens = prompts.iter().map(|(_, len)| *len as u64).sum();
        self.waiting_tokens
            .fetch_add(prompt_tokens, Ordering::AcqRel);
        Ok(Slot {
            prompts,
            prompt_tokens,
            arrived: Instant::now(),
            started: None,
            prefilled: false,
            _permit: None,
            held: 0,
        })
    }

    /// Waits for a permit (FIFO), then starts running and queries the cache. `None` if the
    /// slot already started.
    pub async fn start(&self, slot: &mut Slot) -> Option<Started> {
        if slot.started.is_some() {
            return None;
        }
        if let Some(permits) = &self.permits {
            // The semaphore is never closed, so acquiring fails only if it were.
            slot._permit = Arc::clone(permits).acquire_owned().await.ok();
        }
        // Past the await: the rest happens at once, so a dropped request is either still
        // waiting or fully running.
        slot.started = Some(Instant::now());
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        self.waiting_tokens
            .fetch_sub(slot.prompt_tokens, Ordering::AcqRel);
        self.running.fetch_add(1, Ordering::AcqRel);
        self.hold(slot, slot.prompt_tokens);
        let hit = self.lookup(slot);
        self.queries.fetch_add(slot.prompt_tokens, Ordering::AcqRel);
        self.hits.fetch_add(hit, Ordering::AcqRel);
        let uncached = u32::try_from(slot.prompt_tokens - hit).unwrap_or(u32::MAX);
        Some(Started {
            delay: self.ttft + self.prefill_per_token.saturating_mul(uncached),
            queries: slot.prompt_tokens,
            hits: hit,
        })
    }

    /// Hit tokens of the slot's prompts in the cache.
    fn lookup(&self, slot: &Slot) -> u64 {
        let Some(cache) = &self.cache else {
            return 0;
        };
        let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        slot.prompts
            .iter()
            .map(|(hashes, len)| cache.hit(hashes, *len) as u64)
            .sum()
    }

    /// The prefill is done: the prompts' blocks enter the cache. Returns the times of the first
    /// token, once per slot.
    pub fn prefilled(&self, slot: &mut Slot) -> Option<FirstToken> {
        let started = slot.started?;
        if slot.prefilled {
            return None;
        }
        slot.prefilled = true;
        if let Some(cache) = &self.cache {
            let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            for (hashes, _) in &slot.prompts {
                cache.insert(hashes);
            }
        }
        let now = Instant::now();
        Some(FirstToken {
            prompt_tokens: slot.prompt_tokens,
            queue: started - slot.arrived,
            prefill: now - started,
            ttft: now - slot.arrived,
        })
    }

    /// A running slot holds `tokens` more (tokens generated).
    pub fn hold(&self, slot: &mut Slot, tokens: u64) {
        if slot.started.is_some() {
            slot.held += tokens;
            self.held_tokens.fetch_add(tokens, Ordering::AcqRel);
        }
    }

    /// The request is over (done, failed or dropped): it leaves the queue or frees its permit.
    pub fn release(&self, slot: Slot) {
        if slot.started.is_some() {
            self.running.fetch_sub(1, Ordering::AcqRel);
            self.held_tokens.fetch_sub(slot.held, Ordering::AcqRel);
        } else {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            self.waiting_tokens
                .fetch_sub(slot.prompt_tokens, Ordering::AcqRel);
        }
    }

    /// SGLang's `/flush_cache`: forget every cached block.
    pub fn flush(&self) {
        if let Some(cache) = &self.cache {
            cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    pub fn set_extra_waiting(&self, n: u64) {
        self.extra_waiting.store(n, Ordering::Release);
    }

    pub fn set_metrics_status(&self, status: http::StatusCode) {
        self.metrics_status
            .store(status.as_u16(), Ordering::Release);
    }

    pub fn metrics_status(&self) -> http::StatusCode {
        http::StatusCode::from_u16(self.metrics_status.load(Ordering::Acquire))
            .unwrap_or(http::StatusCode::OK)
    }

    pub fn load(&self) -> Load {
        let get = |a: &AtomicU64| a.load(Ordering::Acquire);
        Load {
            running: get(&self.running),
            waiting: get(&self.waiting),
            extra_waiting: get(&self.extra_waiting),
            waiting_tokens: get(&self.waiting_tokens),
            held_tokens: get(&self.held_tokens),
            cache_tokens: self.cache_tokens,
            max_running: self.max_running,
            queries: get(&self.queries),
            hits: get(&self.hits),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn prompt(n: u32) -> Prompt {
        Prompt::from_ids((0..n).collect())
    }

    #[test]
    fn usage_is_capped_and_rates_are_zero_before_anything() {
        let l = Load {
            held_tokens: 300,
            cache_tokens: 200,
            ..Load::default()
        };
        assert_eq!(l.kv_usage(), 1.0);
        assert_eq!(Load::default().kv_usage(), 0.0);
        assert_eq!(Load::default().hit_rate(), 0.0);
    }

    #[tokio::test]
    async fn a_slot_moves_from_waiting_to_running_and_leaves_clean() {
        let cfg = MockConfig {
            max_running: Some(0),
            max_waiting: 1,
            cache_tokens: 64,
            prefill_per_token: Duration::from_millis(1),
            ..MockConfig::default()
        };
        assert!(cfg.validate().is_err(), "0 is refused by validate()");
        let sched = Sched::new(&cfg);
        let mut a = sched.admit(&[prompt(40)]).unwrap();
        // The cap of 0 is read as 1 and one may wait: a second admission is refused.
        assert!(sched.admit(&[prompt(1)]).is_err());
        let l = sched.load();
        assert_eq!(
            (l.waiting, l.waiting_tokens, l.max_running),
            (1, 40, Some(1))
        );
        let started = sched.start(&mut a).await.unwrap();
        assert_eq!(started.delay, Duration::from_millis(40));
        assert!(sched.start(&mut a).await.is_none(), "started once");
        sched.hold(&mut a, 2);
        let l = sched.load();
        assert_eq!((l.waiting, l.running, l.held_tokens), (0, 1, 42));
        assert!(sched.prefilled(&mut a).is_some());
        assert!(
            sched.prefilled(&mut a).is_none(),
            "the first token is recorded once"
        );
        sched.release(a);
        let l = sched.load();
        assert_eq!((l.running, l.held_tokens, l.queries, l.hits), (0, 0, 40, 0));
        // The permit came back and the prompt's two blocks are cached.
        let mut b = sched.admit(&[prompt(40)]).unwrap();
        let started = sched.start(&mut b).await.unwrap();
        assert_eq!(
            (started.hits, started.delay),
            (32, Duration::from_millis(8))
        );
    }
}
