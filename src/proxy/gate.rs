//! A future polled only after it woke its own waker: for the side waits a task polls at
//! every wake-up (a connection's drain, reclaim and `changed` signals, a stream's shutdown
//! deadline) while its real work wakes it far more often.
//!
//! Why: tokio's channel and `Notify` waits take a lock at every poll, and the drain's and
//! the reclaim signal's channels are shared by every connection on every worker. Polled at
//! each event of each stream, that was a lock on a cache line both cores write (and, for a
//! connection's own `Notify`, a lock for nothing). Behind a gate, a wait
//! is polled once to register, then again only when its channel woke it (as
//! `FuturesUnordered` polls only the futures that woke).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_util::task::{ArcWake, AtomicWaker};

pin_project_lite::pin_project! {
    /// `inner`, polled on the first poll and after each wake of its own waker; any other
    /// poll is `Pending` without touching it. Any wake counts (spurious ones too), so the
    /// wait never sits unpolled with its channel's wake spent.
    pub struct Gated<F> {
        #[pin]
        inner: F,
        woke: Arc<Woke>,
        // `woke` as a waker: the one `inner` is always polled with.
        waker: Waker,
    }
}

/// Set when the inner wait is woken; passes the wake on to the task that polls the gate.
struct Woke {
    flag: AtomicBool,
    task: AtomicWaker,
}

impl ArcWake for Woke {
    fn wake_by_ref(w: &Arc<Self>) {
        w.flag.store(true, Ordering::Release);
        w.task.wake();
    }
}

impl<F> Gated<F> {
    pub fn new(inner: F) -> Gated<F> {
        // Set: the first poll polls the wait (which registers it).
        let woke = Arc::new(Woke {
            flag: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Gated {
            inner,
            waker: futures_util::task::waker(woke.clone()),
            woke,
        }
    }

    /// A new wait in place of the old (one that resolved); polled at the next poll.
    pub fn renew(self: Pin<&mut Self>, inner: F) {
        let mut this = self.project();
        this.inner.set(inner);
        this.woke.flag.store(true, Ordering::Release);
    }
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        this.woke.task.register(cx.waker());
        // Cleared before the poll: a wake during or after it is seen at the next one.
        if !this.woke.flag.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner.poll(&mut Context::from_waker(this.waker))
    }
}

/// A waker that counts its wakes, for tests of waits.
#[cfg(test)]
pub(crate) mod wakes {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Waker;

    use futures_util::task::ArcWake;

    pub(crate) struct Wakes(AtomicUsize);

    impl ArcWake for Wakes {
        fn wake_by_ref(w: &Arc<Self>) {
            w.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(crate) fn waker() -> (Arc<Wakes>, Waker) {
        let w = Arc::new(Wakes(AtomicUsize::new(0)));
        (w.clone(), futures_util::task::waker(w))
    }

    pub(crate) fn woken(w: &Wakes) -> usize {
        w.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::wakes::{waker, woken};
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A wait that counts its polls and resolves once told to.
    struct Counted {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Counted {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn the_wait_is_polled_only_after_its_own_wake_and_passes_the_wake_on() {
        let polls = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(std::sync::Mutex::new(None));
        let mut g = Box::pin(Gated::new(Counted {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: inner_waker.clone(),
        }));
        let (task, w) = waker();
        let mut cx = Context::from_waker(&w);
        assert!(g.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1, "the first poll registers");
        for _ in 0..5 {
            assert!(g.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1, "not woken: not polled");
        ready.store(true, Ordering::SeqCst);
        let inner = inner_waker.lock().unwrap().take().expect("registered");
        inner.wake();
        assert_eq!(woken(&task), 1, "the task heard the wake");
        assert!(g.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        // A new wait in its place is polled at once.
        ready.store(false, Ordering::SeqCst);
        g.as_mut().renew(Counted {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: inner_waker.clone(),
        });
        assert!(g.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 3);
    }
}
