//! What bounds the number of client connections: the open-file limit (raised to its hard
//! limit at start), the connection cap derived from it, and the gate the accept loop passes.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
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
    /// The cap in force: `max_connections`, or lower once the open-file limit was reached
    /// first (`out_of_files`).
    cap: AtomicUsize,
    /// Permits to retire as their connections close, for a cap lowered below what was open
    /// (the semaphore holds `cap + owed` permits in all).
    owed: Arc<AtomicUsize>,
    reclaim: watch::Sender<u64>,
    last_reclaim: Mutex<Option<Instant>>,
    /// Serializes `out_of_files` (every worker's accept loop may call it at once).
    lowering: Mutex<()>,
}

/// A client connection's place under the cap; given back (or retired) when dropped.
pub(super) struct Place {
    permit: Option<OwnedSemaphorePermit>,
    owed: Arc<AtomicUsize>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let retire = self
            .owed
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if let (true, Some(p)) = (retire, self.permit.take()) {
            p.forget();
        }
    }
}

impl Gate {
    pub(super) fn new(cap: usize) -> Gate {
        let cap = cap.clamp(1, Semaphore::MAX_PERMITS);
        Gate {
            permits: Arc::new(Semaphore::new(cap)),
            cap: AtomicUsize::new(cap),
            owed: Arc::new(AtomicUsize::new(0)),
            reclaim: watch::channel(0).0,
            last_reclaim: Mutex::new(None),
            lowering: Mutex::new(()),
        }
    }

    /// Room for one more connection. At the cap this waits, and the listener is not
    /// polled meanwhile: new connections wait in the kernel's backlog.
    pub(super) async fn admit(&self) -> Place {
        let permit = loop {
            if let Ok(p) = self.permits.clone().try_acquire_owned() {
                if self.near_cap() {
                    self.reclaim();
                }
                break p;
            }
            self.reclaim();
            // The semaphore is never closed, so an error cannot happen; a retry is harmless.
            if let Ok(Ok(p)) =
                tokio::time::timeout(AT_CAP_RETRY, self.permits.clone().acquire_owned()).await
            {
                break p;
            }
        };
        Place {
            permit: Some(permit),
            owed: self.owed.clone(),
        }
    }

    /// Accepting failed for want of descriptors before the cap was reached (`max_connections`
    /// set above what the open-file limit holds): lower the cap to half the connections now
    /// open, as each may need an upstream connection of its own, so that a connection let in
    /// can still reach its upstream. The lower cap holds until restart.
    pub(super) fn out_of_files(&self) {
        let _one = self.lowering.lock().unwrap_or_else(PoisonError::into_inner);
        let cap = self.cap.load(Relaxed);
        let held = cap + self.owed.load(Relaxed);
        let open = held.saturating_sub(self.permits.available_permits());
        let lower = (open / 2).max(1);
        if lower >= cap {
            return;
        }
        self.cap.store(lower, Relaxed);
        let excess = cap - lower;
        let retired = self.permits.forget_permits(excess);
        self.owed.fetch_add(excess - retired, Relaxed);
        tracing::warn!(
            was = cap,
            now = lower,
            open,
            "open-file limit reached before the connection cap: cap lowered"
        );
    }

    /// Fewer free places than a sixteenth of the cap: idle connections are closed.
    pub(super) fn near_cap(&self) -> bool {
        let low_water = (self.cap.load(Relaxed) / 16).max(1);
        self.permits.available_permits() < low_water
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

    #[tokio::test]
    async fn out_of_files_the_cap_drops_to_half_of_what_was_open() {
        let gate = Gate::new(10);
        let mut open = Vec::new();
        for _ in 0..8 {
            open.push(gate.admit().await);
        }
        gate.out_of_files();
        assert_eq!(gate.cap.load(Relaxed), 4);
        assert_eq!(gate.permits.available_permits(), 0);
        // Again, from the other worker: already as low as the open connections ask.
        gate.out_of_files();
        assert_eq!(gate.cap.load(Relaxed), 4);
        // The first four to close are retired; only then do places come free.
        open.truncate(4);
        assert_eq!(gate.permits.available_permits(), 0);
        open.pop();
        assert_eq!(gate.permits.available_permits(), 1);
        let again = gate.admit().await;
        assert_eq!(gate.permits.available_permits(), 0);
        drop((again, open));
        assert_eq!(gate.permits.available_permits(), 4);
    }
}
