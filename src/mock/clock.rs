//! The mock's first-token clock: when a request arrived, and a sleep that ends on time.
//!
//! Why: a streamed request's TTFT is `--ttft` after its arrival, and a client measuring it
//! against the mock should see exactly that. Timed from the handler, it would also hold the
//! time the request waited in the socket and the router while the mock served other streams;
//! on tokio's timer (1 ms wheel, and an idle runtime parks in whole milliseconds) it would end
//! up to 2 ms late. So arrival is the kernel's receive stamp of the request's bytes (see
//! `listener`), and the first token waits on a timerfd, which the kernel fires to the
//! nanosecond and which wakes a parked runtime at once. Later tokens keep tokio's timer: their
//! pacing is deadline-based, so its rounding does not accumulate.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::listener::ResetOnDrop;
use crate::netstamp::Stamps;

tokio::task_local! {
    static ARRIVED: (Instant, Option<Arc<Stamps>>);
}

/// When the request whose handler is running arrived, if the middleware saw it.
pub(crate) fn arrived() -> Option<Instant> {
    ARRIVED.try_with(|a| a.0).ok()
}

/// The stamps of the connection the running handler's request came on, where the listener
/// keeps them: armed before a first token, they tell when it was written (`late`).
pub(crate) fn stamps() -> Option<Arc<Stamps>> {
    ARRIVED.try_with(|a| a.1.clone()).ok().flatten()
}

/// The middleware: the request's arrival for the handler's run; the kernel's stamp where the
/// listener keeps one, else now.
pub(crate) async fn middleware(req: Request, next: Next) -> Response {
    let now = Instant::now();
    let conn = req.extensions().get::<ConnectInfo<ResetOnDrop>>();
    let at = conn.and_then(|c| c.0.arrived()).map_or(now, |a| a.min(now));
    let stamps = conn.map(|c| c.0.stamps().clone());
    ARRIVED.scope((at, stamps), next.run(req)).await
}

struct Timer(TimerFd);

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Sleep until `deadline` on a timerfd; on tokio's timer if one cannot be had.
pub(crate) async fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline <= now {
        return;
    }
    if precise(deadline - now).await.is_err() {
        tokio::time::sleep_until(deadline.into()).await;
    }
}

async fn precise(delay: std::time::Duration) -> std::io::Result<()> {
    let flags = TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC;
    let fd = TimerFd::new(ClockId::CLOCK_MONOTONIC, flags)?;
    let when = Expiration::OneShot(TimeSpec::from_duration(delay));
    fd.set(when, TimerSetTimeFlags::empty())?;
    // The safe constructor is deprecated because a `T` that merely borrows its descriptor could
    // close it while registered; `Timer` owns its timerfd, which lives exactly as long as the
    // registration, so the concern does not apply (and the crate forbids `unsafe`).
    #[allow(deprecated)]
    let fd = AsyncFd::with_interest(Timer(fd), Interest::READABLE)?;
    let _ready = fd.readable().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn ends_no_earlier_than_the_deadline() {
        for ms in [0, 1, 3] {
            let deadline = Instant::now() + Duration::from_millis(ms);
            sleep_until(deadline).await;
            assert!(Instant::now() >= deadline);
        }
        assert!(arrived().is_none(), "outside a request there is no arrival");
    }
}
