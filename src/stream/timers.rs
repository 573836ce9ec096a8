//! The upstream-side timers of one request, and the shutdown deadline, as one object the
//! handler and the streaming pipeline both wait through.
//!
//! Each wait on the upstream (its headers, each body chunk) is bounded by the timer of its
//! phase: `response_headers` (or, for streams, `first_token` if sooner) until the headers,
//! then `first_token` until the first generated token, then `stream_idle` between chunks;
//! `total` bounds all of them, and the end of the shutdown grace (`Drain::expired`) cuts any
//! of them short. An expiry is an error; the caller drops what it waited on, which closes
//! the upstream connection so the server stops generating.

use std::future::Future;
use std::pin::Pin;
use std::task::Waker;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::config::Timeouts;
use crate::error::{ProxyError, Timer};
use crate::proxy::drain::{Drain, Expiry};

/// The headers' deadline and the timer that owns it (for `Client::post_json_until`).
#[derive(Debug, Clone, Copy)]
pub struct HeaderWait {
    pub deadline: Instant,
    pub timer: Timer,
}

/// The timers of one request, started when it is sent upstream.
pub struct Timers {
    headers: HeaderWait,
    /// Until the first generated token (streams only); cleared when it comes.
    first_token: Option<Instant>,
    idle: Duration,
    total: Option<Instant>,
    /// Reused for every wait. Between events it is left where it is when the next deadline
    /// is later (see `arm_chunk`). Made at the first deadline set: a whole answer without
    /// `timeouts.total` never sets one (the client bounds its headers itself).
    sleep: Option<Pin<Box<Sleep>>>,
    /// Where `sleep` is set.
    armed: Instant,
    /// The deadline of the chunk being waited for: `armed` or later.
    due: Instant,
    /// `drain.expired()`, made once (it says Ready again if polled after it resolved).
    expired: Expiry,
    /// The waker `sleep` last said Pending to since it was set: the runtime keeps it until
    /// the deadline fires it, so the same task need not ask again until then.
    registered: Option<Waker>,
}

impl Timers {
    /// Timers for a request that arrived at `arrived` and is being sent now.
    pub fn start(t: &Timeouts, arrived: std::time::Instant, drain: &Drain, stream: bool) -> Timers {
        let now = Instant::now();
        let total = t.total.map(|d| Instant::from_std(arrived) + d);
        let first_token = stream.then(|| now + t.first_token);
        let mut headers = HeaderWait {
            deadline: now + t.response_headers,
            timer: Timer::ResponseHeaders,
        };
        if let Some(ft) = first_token.filter(|ft| *ft < headers.deadline) {
            headers = HeaderWait {
                deadline: ft,
                timer: Timer::FirstToken,
            };
        }
        Timers {
            headers,
            first_token,
            idle: t.stream_idle,
            total,
            sleep: None,
            armed: now,
            due: now,
            expired: drain.expired(),
            registered: None,
        }
    }

    /// How long the upstream may take to send its headers.
    pub fn headers(&self) -> HeaderWait {
        self.headers
    }

    /// A generated token arrived: from now on the gaps are `stream_idle`'s.
    pub fn token_seen(&mut self) {
        self.first_token = None;
    }

    /// Run `f` (the upstream exchange up to its headers, or reading a whole body) unless
    /// `total` or the shutdown deadline comes first.
    pub fn guard<F>(&mut self, f: F) -> Guarded<'_, F> {
        let expired = self.expired.reached();
        // Without `timeouts.total` (the default) there is no timer to arm at all.
        if let (Some(deadline), false) = (self.total, expired) {
            self.set(deadline);
        }
        Guarded {
            f,
            timers: self,
            expired,
        }
    }

    /// Start waiting, at `now`, for the next body chunk (the pipeline polls the body itself,
    /// then `poll_fired`): the timer that will fire, or the shutdown that already came.
    pub fn arm_chunk(&mut self, now: Instant) -> Result<Timer, ProxyError> {
        if self.expired.reached() {
            return Err(ProxyError::ShuttingDown);
        }
        let (deadline, timer) = self.chunk_deadline(now);
        // A stream's idle deadline moves at every event, and resetting the sleep re-files
        // it in the runtime's timer wheel each time. A later deadline is left to
        // `poll_fired`, which moves the sleep on when it ends before `due`.
        self.due = deadline;
        if deadline < self.armed || self.sleep.as_ref().is_none_or(|s| s.is_elapsed()) {
            self.set(deadline);
        }
        Ok(timer)
    }

    fn set(&mut self, deadline: Instant) {
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
        self.armed = deadline;
        self.due = deadline;
        self.registered = None;
    }

    /// The armed wait's end, if it came: the timer's expiry or the shutdown deadline.
    pub fn poll_fired(
        &mut self,
        cx: &mut std::task::Context<'_>,
        timer: Timer,
    ) -> std::task::Poll<ProxyError> {
        while self.sleep_ended(cx) {
            if self.armed >= self.due {
                return std::task::Poll::Ready(ProxyError::Timeout(timer));
            }
            // Ended early (the deadline moved on since it was set): wait for the rest.
            let due = self.due;
            self.set(due);
        }
        if Pin::new(&mut self.expired).poll(cx).is_ready() {
            return std::task::Poll::Ready(ProxyError::ShuttingDown);
        }
        std::task::Poll::Pending
    }

    /// Whether the sleep, if one was ever set, has ended (registering `cx` if not).
    /// A stream polls here at every event (about 100 instructions a poll): while the sleep
    /// holds this task's waker and has not fired, asking again could only say Pending.
    fn sleep_ended(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        let Some(sleep) = self.sleep.as_mut() else {
            return false;
        };
        let held = self
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()));
        if held && !sleep.is_elapsed() {
            return false;
        }
        // Out of budget, tokio's sleep says Pending without taking the waker.
        let budget = tokio::task::coop::has_budget_remaining();
        if sleep.as_mut().poll(cx).is_ready() {
            self.registered = None;
            return true;
        }
        if !held && budget {
            self.registered = Some(cx.waker().clone());
        }
        false
    }

    /// Until the first token its own timer is the bound (queueing and prefill may take
    /// longer than any gap between tokens); after it, `stream_idle`; `total` if sooner.
    fn chunk_deadline(&self, now: Instant) -> (Instant, Timer) {
        let phase = match self.first_token {
            Some(ft) => (ft, Timer::FirstToken),
            None => (now + self.idle, Timer::StreamIdle),
        };
        match self.total {
            Some(total) if total < phase.0 => (total, Timer::Total),
            _ => phase,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Poll;

    use super::*;

    /// One wait for a chunk as the pipeline makes it: arm, then poll `f`, then the timers.
    async fn chunk<T>(t: &mut Timers, f: impl Future<Output = T>) -> Result<T, ProxyError> {
        let timer = t.arm_chunk(Instant::now())?;
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| match f.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Ok(v)),
            Poll::Pending => t.poll_fired(cx, timer).map(Err),
        })
        .await
    }

    fn timeouts(first_token: u64, headers: u64, idle: u64, total: Option<u64>) -> Timeouts {
        Timeouts {
            first_token: Duration::from_millis(first_token),
            response_headers: Duration::from_millis(headers),
            stream_idle: Duration::from_millis(idle),
            total: total.map(Duration::from_millis),
            ..Timeouts::default()
        }
    }

    fn now() -> std::time::Instant {
        std::time::Instant::now()
    }

    #[tokio::test(start_paused = true)]
    async fn streams_wait_for_headers_no_longer_than_the_first_token() {
        let d = Drain::default();
        let t = Timers::start(&timeouts(100, 600, 50, None), now(), &d, true);
        assert_eq!(t.headers().timer, Timer::FirstToken);
        let t = Timers::start(&timeouts(100, 600, 50, None), now(), &d, false);
        assert_eq!(t.headers().timer, Timer::ResponseHeaders);
    }

    #[tokio::test(start_paused = true)]
    async fn first_token_then_idle_then_total_each_name_themselves() {
        let d = Drain::default();
        let mut t = Timers::start(&timeouts(100, 600, 50, Some(1000)), now(), &d, true);
        let never = std::future::pending::<()>;
        assert_eq!(
            chunk(&mut t, never()).await,
            Err(ProxyError::Timeout(Timer::FirstToken))
        );
        t.token_seen();
        assert_eq!(
            chunk(&mut t, never()).await,
            Err(ProxyError::Timeout(Timer::StreamIdle))
        );
        assert_eq!(chunk(&mut t, async { 7 }).await, Ok(7));
        let mut t = Timers::start(&timeouts(100, 600, 50, Some(10)), now(), &d, true);
        assert_eq!(
            chunk(&mut t, never()).await,
            Err(ProxyError::Timeout(Timer::Total))
        );
        let mut t = Timers::start(&timeouts(100, 600, 50, Some(10)), now(), &d, false);
        let slow = async { std::future::pending::<Result<(), ProxyError>>().await };
        assert_eq!(t.guard(slow).await, Err(ProxyError::Timeout(Timer::Total)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_deadline_moved_on_by_events_fires_at_its_own_time() {
        let d = Drain::default();
        let mut t = Timers::start(&timeouts(100, 600, 50, None), now(), &d, true);
        t.token_seen();
        // Events every 30 ms: each moves the idle deadline 50 ms on from itself. The
        // sleep set at the first wait is left there; reaching it must not end the stream.
        for _ in 0..5 {
            let event = tokio::time::sleep(Duration::from_millis(30));
            assert_eq!(chunk(&mut t, event).await, Ok(()));
        }
        let start = tokio::time::Instant::now();
        let never = std::future::pending::<()>;
        assert_eq!(
            chunk(&mut t, never()).await,
            Err(ProxyError::Timeout(Timer::StreamIdle))
        );
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(50),
            "50 ms after the last event"
        );
        // A first wait ends at its own deadline too.
        let mut t = Timers::start(&timeouts(20, 600, 50, None), now(), &d, true);
        let start = tokio::time::Instant::now();
        assert_eq!(
            chunk(&mut t, never()).await,
            Err(ProxyError::Timeout(Timer::FirstToken))
        );
        assert_eq!(start.elapsed(), Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_the_grace_cuts_every_wait_short() {
        let d = Drain::default();
        let mut t = Timers::start(&timeouts(100_000, 600_000, 50_000, None), now(), &d, true);
        d.start();
        d.expire();
        let never = std::future::pending::<()>;
        assert_eq!(chunk(&mut t, never()).await, Err(ProxyError::ShuttingDown));
        let slow = async { std::future::pending::<Result<(), ProxyError>>().await };
        assert_eq!(t.guard(slow).await, Err(ProxyError::ShuttingDown));
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_the_grace_cuts_a_wait_already_under_way() {
        let d = Drain::default();
        let mut t = Timers::start(&timeouts(100_000, 600_000, 50_000, None), now(), &d, true);
        let ends = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            d.start();
            d.expire();
        };
        let wait = chunk(&mut t, std::future::pending::<()>());
        // Bounded, so a wait the expiry fails to reach fails the test rather than hanging it.
        let wait = tokio::time::timeout(Duration::from_secs(60), wait);
        let (got, ()) = tokio::join!(wait, ends);
        assert_eq!(got, Ok(Err(ProxyError::ShuttingDown)));
    }

    /// The sleep is asked only until it holds the task's waker; a poll that came when the
    /// task's budget was spent (tokio's sleep then says Pending without taking the waker)
    /// does not count, or a stream that went quiet would never hear its idle timer.
    #[tokio::test(start_paused = true)]
    async fn an_idle_timer_asked_out_of_budget_still_fires() {
        let d = Drain::default();
        let mut t = Timers::start(&timeouts(100, 600, 50, None), now(), &d, true);
        t.token_seen();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        (0..1000).for_each(|i| tx.send(i).expect("open"));
        let mut spent_once = false;
        let timer = t.arm_chunk(Instant::now()).expect("not draining");
        let wait = std::future::poll_fn(|cx| {
            if !spent_once {
                // Spend the task's budget on a channel that always has more.
                while tokio::task::coop::has_budget_remaining() {
                    let _ = rx.poll_recv(cx);
                }
                spent_once = true;
            }
            match t.poll_fired(cx, timer) {
                Poll::Ready(e) => Poll::Ready(Err::<(), _>(e)),
                Poll::Pending => Poll::Pending,
            }
        });
        let start = Instant::now();
        let got = tokio::time::timeout(Duration::from_secs(60), wait).await;
        assert_eq!(got, Ok(Err(ProxyError::Timeout(Timer::StreamIdle))));
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(50),
            "at its own deadline"
        );
    }
}

pin_project_lite::pin_project! {
    /// `Timers::guard`'s future. Written out rather than an `async fn` around `select!`:
    /// that one held `f` twice (as its argument and inside the select), which doubled the
    /// upstream exchange's share of every request's future.
    pub struct Guarded<'a, F> {
        #[pin]
        f: F,
        timers: &'a mut Timers,
        // The shutdown deadline had passed before the wait began.
        expired: bool,
    }
}

impl<F, T> Future for Guarded<'_, F>
where
    F: Future<Output = Result<T, ProxyError>>,
{
    type Output = Result<T, ProxyError>;

    /// The work first (no random draw per wake-up to pick an order), then the timers.
    fn poll(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = self.project();
        if *this.expired {
            return Poll::Ready(Err(ProxyError::ShuttingDown));
        }
        if let Poll::Ready(r) = this.f.poll(cx) {
            return Poll::Ready(r);
        }
        let timers = this.timers;
        // Armed only with `total` (`guard`).
        if timers.total.is_some() && timers.sleep_ended(cx) {
            return Poll::Ready(Err(ProxyError::Timeout(Timer::Total)));
        }
        if Pin::new(&mut timers.expired).poll(cx).is_ready() {
            return Poll::Ready(Err(ProxyError::ShuttingDown));
        }
        Poll::Pending
    }
}
