//! One client connection: hyper's HTTP/1 + HTTP/2 connection under lingo's own clocks for
//! headers and idleness, closed early when the server is near its cap or draining.
//!
//! hyper's `header_read_timeout` is not used: it restarts when a keep-alive connection goes
//! idle, so it would close idle connections at `client_header`, not `client_idle`, and it
//! does nothing for HTTP/2. Instead the socket reports reads (`Watched`), the service reports
//! requests (`Busy`), and the task below keeps the deadline of the current phase.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, Version};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::ServiceExt;

use super::limit::{Gate, Place};
use crate::proxy::drain::Drain;
use crate::proxy::gate::Gated;
use crate::proxy::Front;

/// How long a connection asked to close (idle, reclaimed, draining) may take to say goodbye
/// (an HTTP/2 GOAWAY) before it is dropped.
const LINGER: Duration = Duration::from_secs(1);

/// How long a connection must have been idle before it is reclaimed: a new client's
/// request arrives just behind its handshake, and a keep-alive client's next request just
/// after the last answer; closing either in that moment would fail a request.
const RECLAIM_AFTER: Duration = Duration::from_millis(250);

/// The HTTP/2 connection preface (RFC 9113, section 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// hyper-util's builder two ways: for HTTP/2, or finding the protocol out.
pub(super) struct Builders {
    auto: Builder<TokioExecutor>,
    h2: Builder<TokioExecutor>,
}

impl Builders {
    pub fn new(auto: Builder<TokioExecutor>) -> Builders {
        Builders {
            h2: auto.clone().http2_only(),
            auto,
        }
    }
}

/// Which server a connection gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    /// lingo's own HTTP/1 connection (`super::h1`).
    H1,
    /// hyper's HTTP/2.
    H2,
    /// Too few bytes to tell (a client sending its first bytes one by one), or none: hyper-
    /// util finds out by reading them itself.
    Unknown,
}

/// The protocol of a connection whose first bytes are `first` (peeked, so still unread).
/// Told it, hyper's HTTP/2 reads the preface itself; hyper-util's detection would read the
/// first 24 bytes apart and keep a buffer for them.
fn pick(first: &[u8]) -> Proto {
    let n = first.len().min(H2_PREFACE.len());
    if first[..n] != H2_PREFACE[..n] {
        Proto::H1
    } else if n == H2_PREFACE.len() {
        Proto::H2
    } else {
        Proto::Unknown
    }
}

/// How a connection's first bytes came out.
enum First {
    /// Peeked (still unread).
    Bytes(usize),
    /// None yet, and the connection goes on without them: past the header clock, a drain
    /// started, or lingo is short of connections (its loop below decides what to close).
    Gone { reclaim_asked: bool },
}

/// Peek at the first bytes the client sends, for as long as nothing else calls. Near the
/// connection cap there is no peek: every idle connection must be where lingo reclaims.
async fn peek_first(
    tcp: &TcpStream,
    buf: &mut [u8; 24],
    shared: &Shared,
    reclaims: &mut tokio::sync::watch::Receiver<u64>,
) -> First {
    if shared.gate.near_cap() {
        return First::Gone {
            reclaim_asked: false,
        };
    }
    tokio::select! {
        r = tcp.peek(buf) => match r {
            Ok(n) if n > 0 => First::Bytes(n),
            _ => First::Gone { reclaim_asked: false },
        },
        _ = tokio::time::sleep(shared.header) => First::Gone { reclaim_asked: false },
        _ = shared.drain.draining() => First::Gone { reclaim_asked: false },
        _ = changed(reclaims) => First::Gone { reclaim_asked: true },
    }
}

/// What every connection task shares.
pub(super) struct Shared {
    pub builders: Builders,
    pub router: Front,
    pub gate: Gate,
    pub drain: Drain,
    pub header: Duration,
    pub idle: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No request in progress and none of its bytes read.
    Idle,
    /// Some bytes of a request read, its head not yet complete.
    Header,
    /// At least one request being served (HTTP/2: one per open stream).
    Busy,
}

#[derive(Debug, Clone, Copy)]
struct Snapshot {
    phase: Phase,
    /// When the phase's clock started: accept for a new connection (its first request's
    /// headers are due `client_header` after it), else the last response's end, or the
    /// first byte of the next request.
    since: Instant,
    /// A read found the socket empty since the connection went idle: it is really idle,
    /// not holding a request the kernel already has.
    drained: bool,
    /// A request was served on this connection (the idle clock, not the header one, runs).
    served: bool,
    h2: bool,
    /// Requests in progress (more than one only on HTTP/2).
    active: usize,
}

pub(super) struct Activity {
    now: Mutex<Snapshot>,
    changed: Notify,
    /// Counts changes: the task below looks after each poll of the connection, which makes
    /// every change of lingo's own HTTP/1 (in this task) without a wake-up.
    version: AtomicU64,
    /// Changes may come from other tasks (hyper's HTTP/2 runs each stream in its own): each
    /// also wakes the task below through `changed`.
    cross_task: AtomicBool,
    /// lingo asked the connection to close once no request is in it (lingo's own HTTP/1
    /// reads this; hyper's connections are told through `graceful_shutdown`).
    asked: AtomicBool,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            now: Mutex::new(Snapshot {
                phase: Phase::Idle,
                since: Instant::now(),
                drained: false,
                served: false,
                h2: false,
                active: 0,
            }),
            changed: Notify::new(),
            version: AtomicU64::new(0),
            cross_task: AtomicBool::new(true),
            asked: AtomicBool::new(false),
        }
    }

    fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    /// The phase changed: the task below recomputes its deadline.
    fn changed(&self) {
        self.version.fetch_add(1, Ordering::Relaxed);
        if self.cross_task.load(Ordering::Relaxed) {
            self.changed.notify_one();
        }
    }

    pub(super) fn ask_close(&self) {
        self.asked.store(true, Ordering::Relaxed);
    }

    pub(super) fn close_asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Snapshot> {
        self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn snapshot(&self) -> Snapshot {
        *self.lock()
    }

    /// A read returned bytes (`true`) or found nothing (`false`).
    pub(super) fn on_read(&self, bytes: bool) {
        let mut s = self.lock();
        if s.phase != Phase::Idle {
            return;
        }
        if bytes {
            // HTTP/2 exchanges frames between requests (PING, SETTINGS, WINDOW_UPDATE):
            // those are not the start of a request. A stream's headers arrive whole or not
            // at all before the service is called, so the idle clock covers them.
            if s.h2 {
                return;
            }
            s.phase = Phase::Header;
            if s.served {
                s.since = Instant::now();
            }
        } else if !s.drained {
            s.drained = true;
        } else {
            return;
        }
        drop(s);
        self.changed();
    }

    pub(super) fn begin(self: &Arc<Self>, version: Version) -> Busy {
        let mut s = self.lock();
        s.active += 1;
        s.phase = Phase::Busy;
        s.served = true;
        s.h2 |= version == Version::HTTP_2;
        drop(s);
        self.changed();
        Busy(self.clone())
    }

    fn end(&self) {
        let mut s = self.lock();
        s.active = s.active.saturating_sub(1);
        if s.active > 0 {
            return;
        }
        s.phase = Phase::Idle;
        s.since = Instant::now();
        s.drained = false;
        drop(s);
        self.changed();
    }
}

/// A request in progress; dropped when its response body ends or is dropped.
pub(super) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The socket, reporting reads to the connection's clocks.
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        match &r {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.activity.on_read(true),
            Poll::Pending => self.activity.on_read(false),
            _ => {}
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The router as a hyper service that marks the connection busy until each response ends.
#[derive(Clone)]
struct Svc {
    router: Front,
    activity: Arc<Activity>,
}

type SvcFuture = Pin<Box<dyn Future<Output = Result<Response<Tracked>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Svc {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = SvcFuture;

    fn call(&self, req: Request<Incoming>) -> SvcFuture {
        let busy = self.activity.begin(req.version());
        let call = self.router.clone().oneshot(req.map(Body::new));
        Box::pin(async move {
            let resp = call.await?;
            Ok(resp.map(|body| Tracked {
                body,
                busy: Some(busy),
            }))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that ends its request's `Busy` when it ends.
    struct Tracked {
        #[pin]
        body: Body,
        busy: Option<Busy>,
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.project();
        let r = this.body.poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.busy.take();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// What the connection's state calls for now.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Keep serving; look again at this instant (if any).
    Keep(Option<Instant>),
    /// Ask it to close politely (it has no request in progress).
    Close(&'static str),
    /// Drop it now: a request head that will never be answered.
    Cut(&'static str),
}

struct Clocks {
    header: Duration,
    idle: Duration,
}

fn verdict(s: &Snapshot, now: Instant, c: &Clocks, draining: bool, pressure: bool) -> Verdict {
    match s.phase {
        Phase::Busy => Verdict::Keep(None),
        Phase::Header => {
            let due = s.since + c.header;
            if draining {
                Verdict::Cut("draining")
            } else if now >= due {
                Verdict::Cut("client_header")
            } else {
                Verdict::Keep(Some(due))
            }
        }
        Phase::Idle => {
            let (limit, timer) = if s.served {
                (c.idle, "client_idle")
            } else {
                (c.header, "client_header")
            };
            let due = s.since + limit;
            if draining {
                Verdict::Close("draining")
            } else if now >= due {
                Verdict::Close(timer)
            } else if pressure && s.drained {
                let ripe = s.since + RECLAIM_AFTER;
                if now >= ripe {
                    Verdict::Close("reclaimed")
                } else {
                    Verdict::Keep(Some(ripe.min(due)))
                }
            } else {
                Verdict::Keep(Some(due))
            }
        }
    }
}

type HyperConn<'a> =
    hyper_util::server::conn::auto::Connection<'a, TokioIo<Watched>, Svc, TokioExecutor>;
type ConnError = Box<dyn std::error::Error + Send + Sync>;

/// A connection being served: by lingo's own HTTP/1, or by hyper.
enum Link<'a> {
    Own(Pin<Box<dyn Future<Output = std::io::Result<()>> + Send + 'a>>),
    Hyper(Pin<Box<HyperConn<'a>>>),
}

impl<'a> Link<'a> {
    fn new(proto: Proto, tcp: TcpStream, shared: &'a Shared, activity: &Arc<Activity>) -> Self {
        let router = shared.router.clone();
        let builder = match proto {
            Proto::H1 => {
                return Link::Own(Box::pin(super::h1::serve(tcp, router, activity.clone())))
            }
            Proto::H2 => &shared.builders.h2,
            Proto::Unknown => &shared.builders.auto,
        };
        let io = TokioIo::new(Watched {
            io: tcp,
            activity: activity.clone(),
        });
        let svc = Svc {
            router,
            activity: activity.clone(),
        };
        Link::Hyper(Box::pin(builder.serve_connection(io, svc)))
    }

    /// Ask it to close once no request is in it (HTTP/2: GOAWAY, then finish its streams).
    fn close(&mut self, activity: &Activity) {
        match self {
            Link::Own(_) => activity.ask_close(),
            Link::Hyper(c) => c.as_mut().graceful_shutdown(),
        }
    }
}

impl Future for Link<'_> {
    type Output = Result<(), ConnError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Link::Own(c) => c.as_mut().poll(cx).map_err(Into::into),
            Link::Hyper(c) => c.as_mut().poll(cx),
        }
    }
}

/// Serve one accepted connection until it ends or lingo ends it; `place` is its place
/// under `limits.max_connections`.
pub(super) async fn serve(tcp: TcpStream, shared: Arc<Shared>, place: Place) {
    let activity = Arc::new(Activity::new());
    let mut reclaims = shared.gate.reclaims();
    let mut first = [0u8; 24];
    let (proto, mut reclaim_asked) =
        match peek_first(&tcp, &mut first, &shared, &mut reclaims).await {
            First::Bytes(n) => (pick(&first[..n]), false),
            First::Gone { reclaim_asked } => (Proto::Unknown, reclaim_asked),
        };
    let mut conn = Link::new(proto, tcp, &shared, &activity);
    if matches!(conn, Link::Own(_)) {
        activity.cross_task.store(false, Ordering::Relaxed);
    }
    let clocks = Clocks {
        header: shared.header,
        idle: shared.idle,
    };
    // When lingo asked the connection to close; it is dropped `LINGER` later unless busy.
    let mut asked: Option<Instant> = None;
    let mut draining = shared.drain.is_draining();
    // The waits live across turns of the loop, each made again only once it fired (made
    // anew at every turn, each would register, and dropped unregister, again), and are
    // polled only once their own channel woke them (`Gated`; a `Reach` is gated inside),
    // not at every read and write of the connection.
    let drain = shared.drain.draining();
    let changed = Gated::new(activity.changed.notified());
    let reclaim = Gated::new(next_change(reclaims));
    let sleep = tokio::time::sleep_until(Instant::now());
    tokio::pin!(drain, changed, reclaim, sleep);
    let mut armed: Option<Instant> = None;
    loop {
        let seen = activity.version();
        let s = activity.snapshot();
        let now = Instant::now();
        // An ask to make room holds for the rest of this idle period.
        reclaim_asked &= s.phase == Phase::Idle;
        let pressure = reclaim_asked || shared.gate.near_cap();
        let mut wake = match verdict(&s, now, &clocks, draining, pressure) {
            Verdict::Cut(why) => {
                tracing::debug!(why, "connection cut");
                break;
            }
            Verdict::Close(why) => {
                if asked.is_none() {
                    tracing::debug!(why, "connection closing");
                    conn.close(&activity);
                    asked = Some(now);
                }
                None
            }
            Verdict::Keep(at) => at,
        };
        // A busy connection asked to close ends by itself once its requests are done.
        if let Some(t) = asked.filter(|_| s.phase != Phase::Busy) {
            if now >= t + LINGER {
                break;
            }
            wake = Some(wake.map_or(t + LINGER, |w| w.min(t + LINGER)));
        }
        if let Some(at) = wake.filter(|at| armed != Some(*at)) {
            sleep.as_mut().reset(at);
            armed = Some(at);
        }
        // `biased`: the connection first, so that a change it made in this poll is seen
        // by the next branch at once; and no random draw per wake-up to pick an order.
        tokio::select! {
            biased;
            r = &mut conn => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended");
                }
                break;
            }
            () = std::future::poll_fn(|_| match activity.version() != seen {
                true => Poll::Ready(()),
                false => Poll::Pending,
            }) => {}
            _ = sleep.as_mut(), if wake.is_some() => armed = None,
            _ = changed.as_mut() => changed.as_mut().renew(activity.changed.notified()),
            rx = reclaim.as_mut() => {
                reclaim_asked = true;
                reclaim.as_mut().renew(next_change(rx));
            }
            _ = drain.as_mut(), if !draining => {
                draining = true;
                // Busy connections finish what they serve and take no more requests.
                if asked.is_none() {
                    conn.close(&activity);
                    asked = Some(Instant::now());
                }
            }
        }
    }
    drop(place);
}

/// The next change of `rx`, which it gives back for the one after.
async fn next_change(
    mut rx: tokio::sync::watch::Receiver<u64>,
) -> tokio::sync::watch::Receiver<u64> {
    changed(&mut rx).await;
    rx
}

async fn changed(rx: &mut tokio::sync::watch::Receiver<u64>) {
    // The sender lives in `Shared`, as long as this task: an error cannot happen.
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_the_protocol_only_when_they_can() {
        assert_eq!(pick(b"POST /v1/completions HTTP/1.1\r\n"), Proto::H1);
        assert_eq!(pick(b"G"), Proto::H1);
        // "PRI" could still be a method of HTTP/1 until the preface departs from it.
        assert_eq!(pick(b"PRI / HTTP/1.1\r\n"), Proto::H1);
        assert_eq!(pick(H2_PREFACE), Proto::H2);
        assert_eq!(pick(b"PRI * HTTP/2.0\r\n"), Proto::Unknown);
        assert_eq!(pick(b"P"), Proto::Unknown);
        let b = Builders::new(Builder::new(TokioExecutor::new()));
        assert!(b.h2.is_http2_available() && !b.h2.is_http1_available());
    }

    const C: Clocks = Clocks {
        header: Duration::from_secs(30),
        idle: Duration::from_secs(60),
    };

    fn snap(since: Instant, phase: Phase, served: bool, drained: bool) -> Snapshot {
        Snapshot {
            phase,
            since,
            drained,
            served,
            h2: false,
            active: 0,
        }
    }

    #[tokio::test]
    async fn each_phase_has_its_own_clock_and_close() {
        let t = Instant::now();
        let fresh = snap(t, Phase::Idle, false, false);
        assert_eq!(
            verdict(&fresh, t, &C, false, false),
            Verdict::Keep(Some(t + C.header))
        );
        let later = t + C.header;
        assert_eq!(
            verdict(&fresh, later, &C, false, false),
            Verdict::Close("client_header")
        );
        let kept = snap(t, Phase::Idle, true, false);
        assert_eq!(
            verdict(&kept, later, &C, false, false),
            Verdict::Keep(Some(t + C.idle))
        );
        assert_eq!(
            verdict(&kept, t + C.idle, &C, false, false),
            Verdict::Close("client_idle")
        );
        let half = snap(t, Phase::Header, true, false);
        assert_eq!(
            verdict(&half, later, &C, false, false),
            Verdict::Cut("client_header")
        );
        assert_eq!(verdict(&half, t, &C, true, false), Verdict::Cut("draining"));
        assert_eq!(
            verdict(&kept, t, &C, true, false),
            Verdict::Close("draining")
        );
        let busy = snap(t, Phase::Busy, true, false);
        assert_eq!(
            verdict(&busy, t + C.idle * 10, &C, true, true),
            Verdict::Keep(None)
        );
    }

    #[tokio::test]
    async fn pressure_closes_only_connections_that_are_really_idle() {
        let t = Instant::now();
        let waiting = snap(t, Phase::Idle, true, false);
        assert!(matches!(
            verdict(&waiting, t, &C, false, true),
            Verdict::Keep(_)
        ));
        let drained = snap(t, Phase::Idle, true, true);
        let ripe = t + RECLAIM_AFTER;
        assert_eq!(
            verdict(&drained, t, &C, false, true),
            Verdict::Keep(Some(ripe))
        );
        assert_eq!(
            verdict(&drained, ripe, &C, false, true),
            Verdict::Close("reclaimed")
        );
        let half = snap(t, Phase::Header, false, true);
        assert!(matches!(
            verdict(&half, t, &C, false, true),
            Verdict::Keep(_)
        ));
    }
}
