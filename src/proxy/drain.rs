//! Shutdown as state the request path can read: draining (no new work, `/ready` is 503) and
//! expired (the grace period is over: open streams end with their dialect's error).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::watch;

use super::gate::Gated;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Phase {
    Serving,
    Draining,
    Expired,
}

/// One per server; cheap to clone, every clone sees the same phase.
#[derive(Clone)]
pub struct Drain {
    tx: Arc<watch::Sender<Phase>>,
    rx: watch::Receiver<Phase>,
    /// The phase as a number, set with the channel's value: what the request path reads at
    /// every event. A load leaves the cache line shared between the workers' cores; the
    /// channel's `borrow` takes its lock, a write to that line from every core.
    now: Arc<AtomicU8>,
}

impl Default for Drain {
    fn default() -> Drain {
        let (tx, rx) = watch::channel(Phase::Serving);
        Drain {
            tx: Arc::new(tx),
            rx,
            now: Arc::new(AtomicU8::new(Phase::Serving as u8)),
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
                // Before the channel wakes its waiters: a woken `Reach` reads this first.
                self.now.store(to as u8, Ordering::Release);
            }
            later
        });
    }

    pub fn is_draining(&self) -> bool {
        self.now.load(Ordering::Acquire) >= Phase::Draining as u8
    }

    pub fn is_expired(&self) -> bool {
        self.now.load(Ordering::Acquire) == Phase::Expired as u8
    }

    /// Resolves once draining starts.
    pub fn draining(&self) -> Reach {
        self.reach(Phase::Draining)
    }

    /// Resolves once the grace period is over (never, while serving normally).
    pub fn expired(&self) -> Reach {
        self.reach(Phase::Expired)
    }

    fn reach(&self, phase: Phase) -> Reach {
        let mut rx = self.rx.clone();
        let wait: Wait = Box::pin(async move {
            // The sender lives as long as any clone of `Drain`, so this only fails when
            // none is left to ever advance it: then the phase is never reached.
            if rx.wait_for(|p| *p >= phase).await.is_err() {
                std::future::pending::<()>().await;
            }
        });
        Reach {
            now: self.now.clone(),
            phase,
            wait: Gated::new(wait),
            done: false,
        }
    }
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// A wait for a phase. A connection or a stream polls it at every wake-up of its task (every
/// read, every event), and the channel's own wait takes a lock at each poll: so the phase is
/// read from `Drain::now`, and the channel's wait is polled only after it woke its own
/// waker (`Gated`).
pub struct Reach {
    now: Arc<AtomicU8>,
    phase: Phase,
    wait: Gated<Wait>,
    /// Resolved: it says so again without polling the finished wait.
    done: bool,
}

impl Reach {
    /// Whether the phase has come (without waiting for it).
    pub fn reached(&self) -> bool {
        self.done || self.now.load(Ordering::Acquire) >= self.phase as u8
    }
}

impl Future for Reach {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.reached() || Pin::new(&mut this.wait).poll(cx).is_ready() {
            this.done = true;
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::gate::wakes::{waker, woken};

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

    #[test]
    fn a_wait_past_draining_is_woken_at_each_phase() {
        let d = Drain::default();
        let (count, w) = waker();
        let mut cx = Context::from_waker(&w);
        let mut f = d.expired();
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        d.start();
        assert_eq!(woken(&count), 1);
        // Draining is not the end of the grace: it waits again, and must be woken again.
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        d.expire();
        assert_eq!(woken(&count), 2);
        assert!(Pin::new(&mut f).poll(&mut cx).is_ready());
    }

    #[test]
    fn a_wait_polled_by_another_task_wakes_that_one() {
        let d = Drain::default();
        let (first, w1) = waker();
        let (second, w2) = waker();
        let mut f = d.draining();
        assert!(Pin::new(&mut f)
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        assert!(Pin::new(&mut f)
            .poll(&mut Context::from_waker(&w2))
            .is_pending());
        d.start();
        assert_eq!((woken(&first), woken(&second)), (0, 1));
    }

    #[tokio::test]
    async fn a_wait_first_polled_on_a_spent_budget_is_still_woken() {
        let d = Drain::default();
        let waiter = tokio::spawn({
            let d = d.clone();
            async move {
                let mut f = d.draining();
                std::future::poll_fn(|cx| {
                    // Spend the task's budget, as a busy stream does, then poll the wait.
                    let mut spend = Box::pin(tokio::task::consume_budget());
                    while spend.as_mut().poll(cx).is_ready() {
                        spend.set(tokio::task::consume_budget());
                    }
                    let _ = Pin::new(&mut f).poll(cx);
                    Poll::Ready(())
                })
                .await;
                f.await
            }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        d.start();
        let woke = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await;
        assert!(woke.is_ok(), "the wait never heard of the drain");
    }
}
