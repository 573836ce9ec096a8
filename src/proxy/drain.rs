//! Shutdown as state the request path can read: draining (no new work, `/ready` is 503) and
//! expired (the grace period is over: open streams end with their dialect's error).

use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Serving,
    Draining,
    Expired,
}

/// One per server; cheap to clone, every clone sees the same phase.
#[derive(Clone)]
pub struct Drain {
    tx: std::sync::Arc<watch::Sender<Phase>>,
    rx: watch::Receiver<Phase>,
}

impl Default for Drain {
    fn default() -> Drain {
        let (tx, rx) = watch::channel(Phase::Serving);
        Drain {
            tx: std::sync::Arc::new(tx),
            rx,
        }
    }
}

impl Drain {
    /// Stop taking new work; what is in flight goes on.
    pub fn start(&self) {
        self.advance(Phase::Draining);
    }

    /// The grace period is over: whatever is still open must end now.
    pub fn expire(&self) {
        self.advance(Phase::Expired);
    }

    fn advance(&self, to: Phase) {
        self.tx.send_if_modified(|p| {
            let later = to > *p;
            if later {
                *p = to;
            }
            later
        });
    }

    pub fn is_draining(&self) -> bool {
        *self.rx.borrow() >= Phase::Draining
    }

    pub fn is_expired(&self) -> bool {
        *self.rx.borrow() == Phase::Expired
    }

    /// Resolves once draining has started.
    pub async fn draining(&self) {
        self.reach(Phase::Draining).await
    }

    /// Resolves once the grace period is over (never, while serving normally).
    pub async fn expired(&self) {
        self.reach(Phase::Expired).await
    }

    async fn reach(&self, phase: Phase) {
        let mut rx = self.rx.clone();
        // The sender lives as long as any clone of `Drain`, so this only fails when none is
        // left to ever advance it: then the phase is never reached.
        if rx.wait_for(|p| *p >= phase).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn phases_only_move_forward_and_wake_waiters() {
        let d = Drain::default();
        assert!(!d.is_draining());
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.expired().await }
        });
        d.start();
        assert!(d.is_draining() && !d.is_expired());
        d.expire();
        d.start();
        assert!(d.is_expired());
        waiter.await.unwrap();
    }
}
