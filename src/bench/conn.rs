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
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::Full;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;

use crate::netstamp::{StampedTcp, Stamps};

type Io = TokioIo<StampedTcp>;

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
    pub async fn drive<F: Future>(
        driver: &mut Pin<Box<Connection<Io, Full<Bytes>>>>,
        ended: &mut bool,
        work: F,
    ) -> F::Output {
        let mut work = std::pin::pin!(work);
        std::future::poll_fn(|cx| {
            // The connection first: it reads the socket and hands the body its next chunk.
            if !*ended && driver.as_mut().poll(cx).is_ready() {
                *ended = true;
            }
            match work.as_mut().poll(cx) {
                Poll::Ready(out) => Poll::Ready(out),
                Poll::Pending => Poll::Pending,
            }
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
