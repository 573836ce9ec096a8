//! Shared mock state: configuration, request counters and the test controls (hold, failures).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::IntCounter;
use tokio::sync::Notify;

use super::fault::{self, FaultCounts, FaultMode};
use super::metrics::MockMetrics;
use super::prompt::Prompt;
use super::sched::{Overloaded, Sched, Slot};
use super::{FailMode, MockConfig, MockStats};

/// `hold_at` value meaning "no hold".
const NO_HOLD: u64 = u64::MAX;

/// State shared by every handler and stream of one mock server.
pub struct MockState {
    pub(crate) config: MockConfig,
    /// Unix time the mock started: the `created` of its model card.
    pub(crate) started: u64,
    counters: Counters,
    hold_at: AtomicU64,
    released: Notify,
    fail_next: Mutex<Option<(u32, FailMode)>>,
    /// `POST /mock/fault`: the mode and how many more generation requests get it.
    armed: Mutex<Option<(FaultMode, u32)>>,
    /// Generation requests seen by the fault middleware: the ordinal `--fault-rate` uses.
    fault_ordinal: AtomicU64,
    /// Woken on every counter change, for [`MockState::wait_for`].
    changed: Notify,
    /// The served model name; starts as `config.model`, tests may rename it.
    served: std::sync::RwLock<String>,
    /// Running cap, queue, prefix cache and the load figures.
    pub(crate) sched: Sched,
    pub(crate) metrics: MockMetrics,
    /// How late streams' first tokens left.
    pub(crate) late: super::late::Lateness,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    in_flight: AtomicU64,
    completed: AtomicU64,
    aborted: AtomicU64,
    failed: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    faults: [AtomicU64; FaultMode::ALL.len()],
    cache_flushes: AtomicU64,
}

impl MockState {
    pub fn new(config: MockConfig) -> Arc<MockState> {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Arc::new(MockState {
            started,
            counters: Counters::default(),
            hold_at: AtomicU64::new(NO_HOLD),
            released: Notify::new(),
            fail_next: Mutex::new(None),
            armed: Mutex::new(None),
            fault_ordinal: AtomicU64::new(0),
            changed: Notify::new(),
            served: std::sync::RwLock::new(config.model.clone()),
            sched: Sched::new(&config),
            metrics: MockMetrics::new(config.kind, &config.model),
            late: Default::default(),
            config,
        })
    }

    /// The model name the mock serves now.
    pub fn model(&self) -> String {
        self.served.read().map(|m| m.clone()).unwrap_or_default()
    }

    /// Serve under another name from now on, as when an upstream restarts with another model
    /// (lingo must notice through "model not found" and re-read `/v1/models`).
    pub fn set_model(&self, name: &str) {
        if let Ok(mut m) = self.served.write() {
            *m = name.to_string();
        }
    }

    /// `/flush_cache`: counted, and the prefix cache emptied.
    pub(crate) fn cache_flushed(&self) {
        self.sched.flush();
        self.counters.cache_flushes.fetch_add(1, Ordering::AcqRel);
    }

    /// A snapshot of the counters (each read separately: not atomic as a whole).
    pub fn stats(&self) -> MockStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Acquire);
        let load = self.sched.load();
        MockStats {
            requests: get(&c.requests),
            in_flight: get(&c.in_flight),
            completed: get(&c.completed),
            aborted: get(&c.aborted),
            failed: get(&c.failed),
            prompt_tokens: get(&c.prompt_tokens),
            completion_tokens: get(&c.completion_tokens),
            faults: FaultCounts::from_slice(c.faults.each_ref().map(get)),
            cache_flushes: get(&c.cache_flushes),
            prefix_cache_queries: load.queries,
            prefix_cache_hits: load.hits,
            running: load.running,
            waiting: load.waiting,
            first_token_late: self.late.summary(None),
        }
    }

    /// Every stream pauses once it has sent `tokens` output tokens (per sequence) and still has
    /// more to send, until [`MockState::release`].
    pub fn hold_after(&self, tokens: u32) {
        self.hold_at.store(u64::from(tokens), Ordering::Release);
    }

    /// Lifts the hold and wakes every held stream.
    pub fn release(&self) {
        self.hold_at.store(NO_HOLD, Ordering::Release);
        self.released.notify_waiters();
    }

    /// The next streaming generation request fails once it has sent `after_tokens` tokens.
    pub fn fail_next_stream(&self, after_tokens: u32, mode: FailMode) {
        *self.fail_next.lock().unwrap_or_else(|e| e.into_inner()) = Some((after_tokens, mode));
    }

    /// The next `count` generation requests get fault `mode` (`None` disarms).
    pub fn arm_fault(&self, mode: Option<FaultMode>, count: u32) {
        let armed = mode.filter(|_| count > 0).map(|m| (m, count));
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = armed;
    }

    /// Waits until `pred` holds for the counters; lets tests wait without sleeping.
    pub async fn wait_for(&self, pred: impl Fn(&MockStats) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before checking, so a change between check and await is not lost.
            changed.as_mut().enable();
            if pred(&self.stats()) {
                return;
            }
            changed.await;
        }
    }

    /// Consumes one armed fault, if any.
    pub(crate) fn take_armed_fault(&self) -> Option<FaultMode> {
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        let (mode, left) = armed.as_mut()?;
        let mode = *mode;
        *left -= 1;
        if *left == 0 {
            *armed = None;
        }
        Some(mode)
    }

    /// The whole-mock fault (`--fault`), if this generation request is due for it.
    pub(crate) fn scheduled_fault(&self) -> Option<FaultMode> {
        let mode = self.config.fault?;
        let ordinal = self.fault_ordinal.fetch_add(1, Ordering::AcqRel) + 1;
        fault::scheduled(ordinal, self.config.fault_rate).then_some(mode)
    }

    pub(crate) fn count_fault(&self, mode: FaultMode) {
        self.counters.faults[mode as usize].fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    pub(crate) fn take_stream_failure(&self) -> Option<(u32, FailMode)> {
        self.fail_next
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The token count a stream may reach before it must pause, if a hold is set.
    pub(crate) fn hold_limit(&self) -> Option<u32> {
        let k = self.hold_at.load(Ordering::Acquire);
        (k != NO_HOLD).then(|| u32::try_from(k).unwrap_or(u32::MAX))
    }

    /// Returns once a stream that has sent `sent` tokens may go on; true if it had to pause.
    pub(crate) async fn wait_hold(&self, sent: u32) -> bool {
        // Fast path without touching the Notify (its waiter list sits behind a lock).
        if self.hold_limit().is_none_or(|k| sent < k) {
            return false;
        }
        let mut paused = false;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.hold_limit().is_none_or(|k| sent < k) {
                return paused;
            }
            paused = true;
            released.await;
        }
    }

    /// Counts a new generation request; returns its guard and its 1-based ordinal.
    pub(crate) fn begin(self: &Arc<Self>) -> (RequestGuard, u64) {
        let ordinal = self.counters.requests.fetch_add(1, Ordering::AcqRel) + 1;
        self.counters.in_flight.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
        let guard = RequestGuard {
            state: Arc::clone(self),
            done: false,
            slot: None,
            tokens: None,
        };
        (guard, ordinal)
    }

    /// Whether the request with this ordinal must be failed by `fail_every`.
    pub(crate) fn should_fail(&self, ordinal: u64) -> bool {
        self.config
            .fail_every
            .is_some_and(|k| k > 0 && ordinal % u64::from(k) == 0)
    }
}

/// Tracks one generation request; dropping it unfinished counts the request as aborted, which is
/// how a client that goes away (dropping the handler future or the response body) is noticed.
pub(crate) struct RequestGuard {
    state: Arc<MockState>,
    done: bool,
    /// Its place in the scheduler once admitted: waiting, then running.
    slot: Option<Slot>,
    /// `vllm:prompt_tokens_total` and `vllm:generation_tokens_total` for its model.
    tokens: Option<(IntCounter, IntCounter)>,
}

impl RequestGuard {
    /// Enters the scheduler's queue with the request's prompts, as the server sees them.
    pub(crate) fn admit(&mut self, prompts: &[Prompt]) -> Result<(), Overloaded> {
        self.slot = Some(self.state.sched.admit(prompts)?);
        self.tokens = Some(self.state.metrics.token_counters(&self.state.model()));
        self.state.changed.notify_waiters();
        Ok(())
    }

    /// Waits for a running permit; returns the delay before the first token (`ttft` plus the
    /// prefill of the uncached prompt tokens). Without admission: `ttft`.
    pub(crate) async fn start(&mut self) -> std::time::Duration {
        let state = &self.state;
        let Some(slot) = self.slot.as_mut() else {
            return state.config.ttft;
        };
        let Some(started) = state.sched.start(slot).await else {
            return state.config.ttft;
        };
        state
            .metrics
            .queried(&state.model(), started.queries, started.hits);
        state.changed.notify_waiters();
        started.delay
    }

    /// How long the request waited for a running permit.
    pub(crate) fn queued(&self) -> std::time::Duration {
        self.slot
            .as_ref()
            .map_or(std::time::Duration::ZERO, Slot::queued)
    }

    /// The first token is out: the prompt enters the cache and the timings are recorded.
    pub(crate) fn first_token(&mut self) {
        let state = &self.state;
        if let Some(t) = self.slot.as_mut().and_then(|s| state.sched.prefilled(s)) {
            state.metrics.first_token(&state.model(), &t);
            if let Some((prompt, _)) = &self.tokens {
                prompt.inc_by(t.prompt_tokens);
            }
        }
    }

    /// `tokens` more output tokens are held by this running request.
    pub(crate) fn generated(&mut self, tokens: u64) {
        if let Some(slot) = self.slot.as_mut() {
            self.state.sched.hold(slot, tokens);
        }
        if let Some((_, generation)) = &self.tokens {
            generation.inc_by(tokens);
        }
    }

    pub(crate) fn complete(self, prompt_tokens: u64, completion_tokens: u64) {
        // A whole answer that a fault cuts is counted by how the cut body ends instead.
        if let Some(guard) = super::inject::defer(self, (prompt_tokens, completion_tokens)) {
            guard.complete_now(prompt_tokens, completion_tokens);
        }
    }

    pub(crate) fn complete_now(mut self, prompt_tokens: u64, completion_tokens: u64) {
        let c = &self.state.counters;
        c.prompt_tokens.fetch_add(prompt_tokens, Ordering::AcqRel);
        c.completion_tokens
            .fetch_add(completion_tokens, Ordering::AcqRel);
        self.finish(|c| &c.completed);
    }

    pub(crate) fn fail(mut self) {
        self.finish(|c| &c.failed);
    }

    fn finish(&mut self, outcome: fn(&Counters) -> &AtomicU64) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(slot) = self.slot.take() {
            self.state.sched.release(slot);
        }
        let c = &self.state.counters;
        outcome(c).fetch_add(1, Ordering::AcqRel);
        c.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.state.changed.notify_waiters();
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.finish(|c| &c.aborted);
    }
}
