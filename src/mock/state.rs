//! Shared mock state: configuration, request counters and the test controls (hold, failures).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

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
    /// Woken on every counter change, for [`MockState::wait_for`].
    changed: Notify,
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
}

impl MockState {
    pub fn new(config: MockConfig) -> Arc<MockState> {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Arc::new(MockState {
            config,
            started,
            counters: Counters::default(),
            hold_at: AtomicU64::new(NO_HOLD),
            released: Notify::new(),
            fail_next: Mutex::new(None),
            changed: Notify::new(),
        })
    }

    /// A snapshot of the counters (each read separately: not atomic as a whole).
    pub fn stats(&self) -> MockStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Acquire);
        MockStats {
            requests: get(&c.requests),
            in_flight: get(&c.in_flight),
            completed: get(&c.completed),
            aborted: get(&c.aborted),
            failed: get(&c.failed),
            prompt_tokens: get(&c.prompt_tokens),
            completion_tokens: get(&c.completion_tokens),
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
}

impl RequestGuard {
    pub(crate) fn complete(mut self, prompt_tokens: u64, completion_tokens: u64) {
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
