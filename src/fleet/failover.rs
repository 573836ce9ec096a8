//! Failover: which failures send a request to another endpoint, and the budget that keeps
//! retries from multiplying the load on a pool that is failing as a whole.

use std::sync::Mutex;
use std::time::Instant;

use crate::error::{ProxyError, Timer};

/// Why a request was sent to another endpoint; a closed set used as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The connection could not be made (refused, unreachable).
    Connect,
    /// The connection closed or reset before the response headers.
    Reset,
    Status5xx,
    Status429,
    /// The connect, response-headers or `first_token` timer fired while nothing was sent.
    Timeout,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::Connect => "connect",
            Reason::Reset => "reset",
            Reason::Status5xx => "status_5xx",
            Reason::Status429 => "status_429",
            Reason::Timeout => "timeout",
        }
    }

    /// Whether an error from sending a request (before anything reached the client) may be
    /// retried elsewhere, and why. A 4xx other than 429 is the client's and never is; nor
    /// are `timeouts.total` (the request's whole time is spent) and body errors.
    pub fn of(e: &ProxyError) -> Option<Reason> {
        match e {
            ProxyError::UpstreamRefused(_) => Some(Reason::Connect),
            ProxyError::UpstreamUnreachable(_) => Some(Reason::Reset),
            ProxyError::UpstreamStatus { status: 429, .. } => Some(Reason::Status429),
            ProxyError::UpstreamStatus { status, .. } if *status >= 500 => Some(Reason::Status5xx),
            ProxyError::Timeout(Timer::Connect) => Some(Reason::Connect),
            ProxyError::Timeout(Timer::FirstToken | Timer::ResponseHeaders) => {
                Some(Reason::Timeout)
            }
            _ => None,
        }
    }

    /// How the failed attempt is recorded on its endpoint: a 429 is not the endpoint failing
    /// (it does not count toward ejection), the rest are.
    pub fn outcome(self) -> crate::metrics::Outcome {
        use crate::metrics::Outcome;
        match self {
            Reason::Status429 => Outcome::ClientError,
            Reason::Timeout => Outcome::Timeout,
            _ => Outcome::UpstreamError,
        }
    }
}

/// The sliding window the budget counts over, in one-second slots.
const WINDOW_SECS: usize = 10;
/// Extra attempts may be at most this share of the pool's requests in the window...
const RETRY_PERCENT: u64 = 20;
/// ... plus this many per second of the window, so a quiet pool can still retry (30 in all).
const MIN_PER_SEC: u64 = 3;

/// Envoy's and Finagle's retry budget: over the last `WINDOW_SECS` seconds, retries stay
/// within `RETRY_PERCENT`% of requests plus `MIN_PER_SEC` × `WINDOW_SECS`. When a whole pool
/// fails, this caps what it receives at about 1.2 times the client's requests (plus 30).
pub struct Budget {
    start: Instant,
    /// (second since `start`, requests, retries) per slot.
    slots: Mutex<[(u64, u64, u64); WINDOW_SECS]>,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            start: Instant::now(),
            slots: Mutex::new([(0, 0, 0); WINDOW_SECS]),
        }
    }
}

impl Budget {
    /// The current slot, cleared if it belonged to an older second.
    fn with_slot<T>(&self, f: impl FnOnce(&mut [(u64, u64, u64); WINDOW_SECS], usize) -> T) -> T {
        let sec = self.start.elapsed().as_secs();
        let i = (sec % WINDOW_SECS as u64) as usize;
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if slots[i].0 != sec {
            slots[i] = (sec, 0, 0);
        }
        // Slots older than the window count for nothing.
        for s in slots.iter_mut() {
            if sec.saturating_sub(s.0) >= WINDOW_SECS as u64 {
                *s = (sec, 0, 0);
            }
        }
        f(&mut slots, i)
    }

    /// A client request arrived at the pool.
    pub fn request(&self) {
        self.with_slot(|s, i| s[i].1 += 1);
    }

    fn room(slots: &[(u64, u64, u64); WINDOW_SECS]) -> bool {
        let requests: u64 = slots.iter().map(|s| s.1).sum();
        let retries: u64 = slots.iter().map(|s| s.2).sum();
        retries * 100 < requests * RETRY_PERCENT + MIN_PER_SEC * WINDOW_SECS as u64 * 100
    }

    /// Whether a retry would fit now (nothing is taken).
    pub fn has_room(&self) -> bool {
        self.with_slot(|s, _| Budget::room(s))
    }

    /// Take a retry from the budget, if it has room.
    pub fn try_retry(&self) -> bool {
        self.with_slot(|s, i| {
            let ok = Budget::room(s);
            if ok {
                s[i].2 += 1;
            }
            ok
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_allows_the_floor_then_a_fifth_of_requests() {
        let b = Budget::default();
        let floor = (MIN_PER_SEC * WINDOW_SECS as u64) as usize;
        for _ in 0..floor {
            assert!(b.try_retry());
        }
        assert!(!b.try_retry());
        for _ in 0..10 {
            b.request();
        }
        assert!(b.has_room());
        assert!(b.try_retry());
        assert!(b.try_retry());
        assert!(!b.try_retry());
    }

    #[test]
    fn reasons_come_from_a_closed_set_and_client_errors_are_never_retried() {
        let unreachable = |m: &str| ProxyError::UpstreamUnreachable(format!("`u` {m}"));
        let refused = ProxyError::UpstreamRefused("`u` refused the connection".into());
        assert_eq!(Reason::of(&refused), Some(Reason::Connect));
        assert_eq!(
            Reason::of(&unreachable("reset the connection")),
            Some(Reason::Reset)
        );
        let status = |s: u16| ProxyError::UpstreamStatus {
            status: s,
            message: String::new(),
        };
        assert_eq!(Reason::of(&status(503)), Some(Reason::Status5xx));
        assert_eq!(Reason::of(&status(429)), Some(Reason::Status429));
        assert_eq!(Reason::of(&status(400)), None);
        assert_eq!(Reason::of(&status(404)), None);
        assert_eq!(
            Reason::of(&ProxyError::Timeout(Timer::FirstToken)),
            Some(Reason::Timeout)
        );
        assert_eq!(Reason::of(&ProxyError::Timeout(Timer::Total)), None);
        assert_eq!(Reason::of(&ProxyError::UpstreamClosed), None);
    }
}
