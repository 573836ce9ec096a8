//! The driver's own HTTP/1.1 connections to a plain `http://` target, kept idle between
//! requests and driven by the task of the request that holds one.
//!
//! Why not the proxy's pooled client: it runs every connection on a task of its own, so each
//! body chunk costs a hand-over between two tasks, and it cannot say when bytes arrived.
//! Here the request's task polls its connection itself (one wake-up per read) and the socket
//! is a [`StampedTcp`], so events are timed by the kernel's receive stamps and the request by
//! the moment its first byte was written. `https://` targets keep the pooled client.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::{header, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::Full;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;

use crate::netstamp::{StampedTcp, Stamps};

type Io = TokioIo<StampedTcp>;

/// Polls of the connection and the request within one poll of their task, at most.
const ROUNDS: usize = 8;

/// The waker [`Conn::drive`] polls with: it notes a wake during the poll (handled by polling
/// again) and passes any other on to the task's own waker.
#[derive(Default)]
struct Wakeup {
    polling: AtomicBool,
    woken: AtomicBool,
    outer: AtomicWaker,
}

impl Wake for Wakeup {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Ordered against `drive`: a wake that sees `polling` set is seen by its check of
        // `woken` after the poll; one that does not goes to the runtime.
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.outer.wake();
        }
    }
}

/// One open connection: the request side, the connection future and its stamps.
pub struct Conn {
    pub send: SendRequest<Full<Bytes>>,
    pub driver: Pin<Box<Connection<Io, Full<Bytes>>>>,
    /// The connection future has ended: the connection is closed.
    pub ended: bool,
    pub stamps: Arc<Stamps>,
    /// Taken from the idle set (it may have been closed by the server meanwhile).
    pub reused: bool,
}

impl Conn {
    /// Run `work` while polling the connection from this same task.
    ///
    /// The two wake each other at every step (the request is queued, its head parsed, each
    /// chunk handed over, the body wants the next), and a task that wakes itself goes to the
    /// back of the runtime's queue: behind 511 other streams, once per chunk. So within one
    /// poll both are polled again while either woke this task meanwhile, up to `ROUNDS` times;
    /// wakes from elsewhere (the socket) pass through to the runtime as usual.
    pub async fn drive<C: Future, F: Future>(
        driver: &mut Pin<Box<C>>,
        ended: &mut bool,
        work: F,
    ) -> F::Output {
        let mut work = std::pin::pin!(work);
        let wakeup = Arc::new(Wakeup::default());
        let waker = Waker::from(wakeup.clone());
        std::future::poll_fn(|cx| {
            wakeup.outer.register(cx.waker());
            let mut inner = Context::from_waker(&waker);
            for _ in 0..ROUNDS {
                wakeup.polling.store(true, Ordering::SeqCst);
                wakeup.woken.store(false, Ordering::SeqCst);
                // The connection first: it reads the socket and hands the body its next chunk.
                if !*ended && driver.as_mut().poll(&mut inner).is_ready() {
                    *ended = true;
                }
                let out = work.as_mut().poll(&mut inner);
                wakeup.polling.store(false, Ordering::SeqCst);
                if out.is_ready() {
                    return out;
                }
                if !wakeup.woken.load(Ordering::SeqCst) {
                    return Poll::Pending;
                }
            }
            // Still busy: yield to the other tasks, to be polled again.
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }

    fn usable(&self) -> bool {
        !self.ended && !self.send.is_closed()
    }
}

/// A plain `http://` target: where to connect, what to send, and the idle connections.
pub struct Direct {
    /// `host:port` to connect to.
    addr: String,
    /// The `Host` header.
    host: HeaderValue,
    /// The base URL's path, prefixed to every request path.
    prefix: String,
    auth: Option<HeaderValue>,
    connect_timeout: Duration,
    idle: Mutex<Vec<Conn>>,
}

impl Direct {
    /// For an `http://host[:port][/prefix]` URL without credentials; `None` otherwise (the
    /// pooled client serves it).
    pub fn parse(
        url: &str,
        auth: Option<HeaderValue>,
        connect_timeout: Duration,
    ) -> Option<Direct> {
        let uri: Uri = url.trim_end_matches('/').parse().ok()?;
        let authority = uri.authority()?;
        if uri.scheme_str() != Some("http") || authority.as_str().contains('@') {
            return None;
        }
        let port = authority.port_u16().unwrap_or(80);
        Some(Direct {
            addr: format!("{}:{port}", authority.host()),
            host: HeaderValue::from_str(authority.as_str()).ok()?,
            prefix: uri.path().trim_end_matches('/').to_string(),
            auth,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection, else a new one.
    pub async fn checkout(&self) -> std::io::Result<Conn> {
        loop {
            let Some(mut conn) = self.idle().pop() else {
                return self.connect().await;
            };
            if conn.usable() {
                conn.reused = true;
                return Ok(conn);
            }
        }
    }

    /// A new connection, not taken from the idle set.
    pub async fn connect(&self) -> std::io::Result<Conn> {
        let timeout = std::io::Error::from(std::io::ErrorKind::TimedOut);
        let tcp = tokio::time::timeout(
            self.connect_timeout,
            tokio::net::TcpStream::connect(&self.addr),
        )
        .await
        .map_err(|_| timeout)??;
        // Streams are many small writes and reads: Nagle would hold the request back.
        tcp.set_nodelay(true)?;
        let io = StampedTcp::new(tcp);
        let stamps = io.stamps();
        let (send, driver) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(std::io::Error::other)?;
        Ok(Conn {
            send,
            driver: Box::pin(driver),
            ended: false,
            stamps,
            reused: false,
        })
    }

    /// Keep `conn` for a later request, if it can take one.
    pub fn checkin(&self, conn: Conn) {
        if conn.usable() {
            self.idle().push(conn);
        }
    }

    /// Open connections until `n` are idle (before a level, so none opens while it is
    /// measured); connection failures are left for the requests to report.
    pub async fn open(&self, n: usize) {
        let missing = n.saturating_sub(self.idle().len());
        let opened = futures_util::future::join_all((0..missing).map(|_| self.connect())).await;
        let mut idle = self.idle();
        idle.extend(opened.into_iter().flatten());
    }

    /// A POST of `body` to `path` (under the base URL's path).
    pub fn post(
        &self,
        path: &str,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
    ) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(format!("{}{path}", self.prefix))
            .header(header::HOST, self.host.clone())
            .header(header::CONTENT_TYPE, "application/json");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        if let Some(auth) = &self.auth {
            req = req.header(header::AUTHORIZATION, auth.clone());
        }
        req.body(Full::new(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes its task on each of its first `n` polls, then is ready.
    struct SelfWaking {
        left: usize,
    }

    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.left == 0 {
                return Poll::Ready(());
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn wakes_during_a_poll_are_served_in_that_poll_and_bounded() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut idle = Box::pin(std::future::pending::<()>());
        let mut ended = false;

        // Five self-wakes: done within one poll, the runtime never asked to poll again.
        {
            let fut = Conn::drive(&mut idle, &mut ended, SelfWaking { left: 5 });
            let mut fut = std::pin::pin!(fut);
            assert!(fut.as_mut().poll(&mut cx).is_ready());
            assert_eq!(count.0.load(Ordering::SeqCst), 0);
        }

        // More than ROUNDS: the poll yields, asking to be polled again.
        let fut = Conn::drive(&mut idle, &mut ended, SelfWaking { left: 3 * ROUNDS });
        let mut fut = std::pin::pin!(fut);
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        let mut polls = 1;
        while fut.as_mut().poll(&mut cx).is_pending() {
            polls += 1;
        }
        assert_eq!(polls, 3);
    }

    #[test]
    fn only_plain_http_without_credentials_is_direct() {
        let t = Duration::from_secs(1);
        let d = Direct::parse("http://127.0.0.1:8000/", None, t).unwrap();
        assert_eq!((d.addr.as_str(), d.prefix.as_str()), ("127.0.0.1:8000", ""));
        let d = Direct::parse("http://localhost/base/", None, t).unwrap();
        assert_eq!(
            (d.addr.as_str(), d.prefix.as_str()),
            ("localhost:80", "/base")
        );
        assert_eq!(d.host, "localhost");
        assert!(Direct::parse("https://api.example.com", None, t).is_none());
        assert!(Direct::parse("http://user:pw@127.0.0.1:1", None, t).is_none());
        assert!(Direct::parse("not a url", None, t).is_none());
    }
}
