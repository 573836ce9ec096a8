//! Shutdown as state the request path can read: draining (no new work, `/ready` is 503) and
//! expired (the grace period is over: open streams end with their dialect's error).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use slab::Slab;
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
    /// The tasks an `Expiry` waits in, woken when the grace period is over: a set per
    /// worker thread (`shard`), so the workers take no lock in common per request.
    sleepers: Arc<[Sleepers; SHARDS]>,
}

/// Sets of sleepers (workers beyond this share them).
const SHARDS: usize = 8;

/// Wakers under a lock. Every request waits for the end of the grace period (its timers
/// do), and a wait on the channel was two allocations, a clone of the receiver and the
/// channel's own registration per request; here it is an insert and a removal.
#[derive(Default)]
struct Sleepers(Mutex<Slab<Waker>>);

impl Sleepers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slab<Waker>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for Drain {
    fn default() -> Drain {
        let (tx, rx) = watch::channel(Phase::Serving);
        Drain {
            tx: Arc::new(tx),
            rx,
            now: Arc::new(AtomicU8::new(Phase::Serving as u8)),
            sleepers: Arc::default(),
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
        if to == Phase::Expired {
            // After the store: a wait that registers later finds the phase (`Expiry`).
            for set in self.sleepers.iter() {
                set.lock().iter().for_each(|(_, w)| w.wake_by_ref());
            }
        }
    }

    pub fn is_draining(&self) -> bool {
        come(&self.now, Phase::Draining)
    }

    pub fn is_expired(&self) -> bool {
        come(&self.now, Phase::Expired)
    }

    /// Resolves once the grace period is over (never, while serving normally).
    pub fn expired(&self) -> Expiry {
        Expiry {
            now: self.now.clone(),
            sleepers: self.sleepers.clone(),
            shard: crate::shard::current() as usize % SHARDS,
            slot: None,
        }
    }

    /// Resolves once draining starts.
    pub fn draining(&self) -> Reach {
        let mut rx = self.rx.clone();
        let wait: Wait = Box::pin(async move {
            // The sender lives as long as any clone of `Drain`, so this only fails when
            // none is left to ever advance it: then draining never starts.
            if rx.wait_for(|p| *p >= Phase::Draining).await.is_err() {
                std::future::pending::<()>().await;
            }
        });
        Reach {
            now: self.now.clone(),
            wait: Gated::new(wait),
            done: false,
        }
    }
}

/// Whether the phase in `now` has come to `phase` (phases only move on).
fn come(now: &AtomicU8, phase: Phase) -> bool {
    now.load(Ordering::Acquire) >= phase as u8
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// A wait for draining to start (`Drain::draining`). A connection or a stream polls it at every wake-up of its task (every
/// read, every event), and the channel's own wait takes a lock at each poll: so the phase is
/// read from `Drain::now`, and the channel's wait is polled only after it woke its own
/// waker (`Gated`).
pub struct Reach {
    now: Arc<AtomicU8>,
    wait: Gated<Wait>,
    /// Resolved: it says so again without polling the finished wait.
    done: bool,
}

impl Reach {
    /// Whether draining has started (without waiting for it).
    pub fn reached(&self) -> bool {
        self.done || come(&self.now, Phase::Draining)
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

/// A wait for the end of the grace period (`Drain::expired`).
pub struct Expiry {
    now: Arc<AtomicU8>,
    sleepers: Arc<[Sleepers; SHARDS]>,
    /// Its set of sleepers: the worker's it was made on.
    shard: usize,
    /// Where its waker is, and a copy: a task that polls it again is not registered again.
    slot: Option<(usize, Waker)>,
}

impl Expiry {
    /// Whether the grace period is over (without waiting for it).
    pub fn reached(&self) -> bool {
        come(&self.now, Phase::Expired)
    }
}

impl Future for Expiry {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.reached() {
            return Poll::Ready(());
        }
        match &mut this.slot {
            Some((_, w)) if w.will_wake(cx.waker()) => return Poll::Pending,
            Some((key, w)) => {
                w.clone_from(cx.waker());
                this.sleepers[this.shard].lock()[*key] = w.clone();
            }
            None => {
                let key = this.sleepers[this.shard].lock().insert(cx.waker().clone());
                this.slot = Some((key, cx.waker().clone()));
            }
        }
        // Read after registering: an expiry that came in between, before the lock was
        // taken, is seen here; one after it wakes the waker just put in.
        match this.reached() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }
}

impl Drop for Expiry {
    fn drop(&mut self) {
        if let Some((key, _)) = self.slot.take() {
            self.sleepers[self.shard].lock().remove(key);
        }
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
    fn a_wait_for_the_expiry_is_woken_by_it_alone_and_leaves_no_trace() {
        let d = Drain::default();
        let (count, w) = waker();
        let mut cx = Context::from_waker(&w);
        let mut f = d.expired();
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(d.sleepers[0].lock().len(), 1, "registered once");
        d.start();
        assert_eq!(woken(&count), 0, "draining is not the end of the grace");
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        // A wait dropped before the expiry takes its waker with it.
        let mut gone = d.expired();
        assert!(Pin::new(&mut gone).poll(&mut cx).is_pending());
        drop(gone);
        assert_eq!(d.sleepers[0].lock().len(), 1);
        d.expire();
        assert_eq!(woken(&count), 1);
        assert!(Pin::new(&mut f).poll(&mut cx).is_ready());
        drop(f);
        assert!(d.sleepers[0].lock().is_empty());
    }

    /// Polled by one task and then another, `f` wakes only the last when `fire` comes.
    fn wakes_its_last_poller(mut f: impl Future<Output = ()> + Unpin, fire: impl FnOnce()) {
        let (first, w1) = waker();
        let (second, w2) = waker();
        assert!(Pin::new(&mut f)
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        assert!(Pin::new(&mut f)
            .poll(&mut Context::from_waker(&w2))
            .is_pending());
        fire();
        assert_eq!((woken(&first), woken(&second)), (0, 1));
    }

    #[test]
    fn a_wait_polled_by_another_task_wakes_that_one() {
        let d = Drain::default();
        wakes_its_last_poller(d.draining(), || d.start());
        let d = Drain::default();
        wakes_its_last_poller(d.expired(), || d.expire());
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
