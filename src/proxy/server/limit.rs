//! What bounds the number of client connections: the open-file limit (raised to its hard
//! limit at start), the connection cap derived from it, and the gate the accept loop passes.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Descriptors kept back from client connections for everything else: the listeners, the
/// runtime's own, the request log, TLS roots, DNS.
const RESERVE: u64 = 64;

/// How often idle connections may be asked to close, at most (each ask wakes every one).
const RECLAIM_EVERY: Duration = Duration::from_millis(50);

/// While at the cap, how often the accept loop asks again (connections that went idle since
/// the last ask can go).
const AT_CAP_RETRY: Duration = Duration::from_millis(250);

/// Raise the soft open-file limit to the hard one and log both; the limit now in force.
pub(super) fn raise_nofile() -> Option<u64> {
    #[cfg(unix)]
    {
        let (soft, hard) = match rlimit::Resource::NOFILE.get() {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "open-file limit unknown");
                return None;
            }
        };
        let now = rlimit::increase_nofile_limit(u64::MAX).unwrap_or_else(|e| {
            tracing::warn!(error = %e, soft, hard, "open-file limit not raised");
            soft
        });
        tracing::info!(soft = now, hard, was = soft, "open-file limit");
        Some(now)
    }
    #[cfg(not(unix))]
    None
}

/// `limits.max_connections` when unset: every client connection may hold one upstream
/// connection, so half of what the reserve leaves (`(nofile - 64) / 2`, at least 1).
pub fn default_max_connections(nofile: u64) -> usize {
    let n = nofile.saturating_sub(RESERVE) / 2;
    usize::try_from(n).unwrap_or(usize::MAX).max(1)
}

/// One permit per open client connection, and the call to idle connections to make room.
pub(super) struct Gate {
    permits: Arc<Semaphore>,
    /// Fewer free permits than this is "near the cap": idle connections are closed.
    low_water: usize,
    reclaim: watch::Sender<u64>,
    last_reclaim: Mutex<Option<Instant>>,
}

impl Gate {
    pub(super) fn new(cap: usize) -> Gate {
        Gate {
            permits: Arc::new(Semaphore::new(cap.min(Semaphore::MAX_PERMITS))),
            low_water: (cap / 16).max(1),
            reclaim: watch::channel(0).0,
            last_reclaim: Mutex::new(None),
        }
    }

    /// Room for one more connection. At the cap this waits, and the listener is not
    /// polled meanwhile: new connections wait in the kernel's backlog.
    pub(super) async fn admit(&self) -> OwnedSemaphorePermit {
        loop {
            if let Ok(p) = self.permits.clone().try_acquire_owned() {
                if self.near_cap() {
                    self.reclaim();
                }
                return p;
            }
            self.reclaim();
            // The semaphore is never closed, so an error cannot happen; a retry is harmless.
            if let Ok(Ok(p)) =
                tokio::time::timeout(AT_CAP_RETRY, self.permits.clone().acquire_owned()).await
            {
                return p;
            }
        }
    }

    pub(super) fn near_cap(&self) -> bool {
        self.permits.available_permits() < self.low_water
    }

    /// Ask every idle connection to close (rate-limited).
    pub(super) fn reclaim(&self) {
        let now = Instant::now();
        let mut last = self
            .last_reclaim
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| now < t + RECLAIM_EVERY) {
            return;
        }
        *last = Some(now);
        self.reclaim.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Changes whenever idle connections are asked to close.
    pub(super) fn reclaims(&self) -> watch::Receiver<u64> {
        self.reclaim.subscribe()
    }
}

/// Logs a repeated failure at most once a second, with how many were not logged.
#[derive(Default)]
pub(super) struct Throttle {
    last: Option<Instant>,
    skipped: u64,
}

impl Throttle {
    pub(super) fn accept_error(&mut self, e: &std::io::Error) {
        let now = Instant::now();
        if self.last.is_some_and(|t| now < t + Duration::from_secs(1)) {
            self.skipped += 1;
            return;
        }
        tracing::error!(error = %e, repeats = self.skipped, "accept error");
        self.last = Some(now);
        self.skipped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_cap_leaves_the_reserve_and_one_upstream_connection_each() {
        assert_eq!(default_max_connections(1024), 480);
        assert_eq!(default_max_connections(64), 1);
        assert_eq!(default_max_connections(0), 1);
    }

    #[tokio::test]
    async fn near_the_cap_asks_idle_connections_to_close() {
        let gate = Gate::new(2);
        let mut asks = gate.reclaims();
        let first = gate.admit().await;
        assert!(!gate.near_cap());
        let _second = gate.admit().await;
        assert!(gate.near_cap());
        assert!(asks.has_changed().unwrap());
        asks.mark_unchanged();
        drop(first);
        assert!(!gate.near_cap());
    }
}
