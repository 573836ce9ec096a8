//! hyper's HTTP/1.1 as the reference for lingo's own. lingo replaced hyper's server and its
//! pooled client on HTTP/1 for speed; what it reads must not change. lingo may refuse more
//! than hyper (it refuses whatever could be framed two ways), but what it reads, hyper must
//! read the same: a proxy that reads a request differently from other servers is how
//! requests are smuggled, and a client that reads an answer differently tells its users
//! something the server did not say.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A request as hyper's server handed it to its service.
#[derive(Debug)]
pub(super) struct Heard {
    pub method: Method,
    pub target: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body, or `None` if hyper failed to read it.
    pub body: Option<Vec<u8>>,
}

/// An answer as hyper's client read it: status and body (`None` if the body failed).
pub(super) type Got = (StatusCode, Option<Vec<u8>>);

/// The requests hyper's HTTP/1.1 server reads from a connection whose reads are `pieces`.
pub(super) fn requests(pieces: &[&[u8]]) -> Vec<Heard> {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let into = heard.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let into = into.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.ok().map(|b| b.to_bytes().to_vec());
            into.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Heard {
                    method: parts.method,
                    target: parts.uri.to_string(),
                    headers: super::http1::lines(&parts.headers),
                    body,
                });
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        }
    });
    // The client's end of the connection closes after its bytes; requests it sent whole
    // are still answered (without `half_close`, hyper drops one in progress at the close).
    let conn = hyper::server::conn::http1::Builder::new()
        .half_close(true)
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(Script::new(pieces, false)), service);
    block_on(async {
        let _ = conn.await;
    });
    let mut heard = heard.lock().unwrap_or_else(PoisonError::into_inner);
    std::mem::take(&mut *heard)
}

/// The answer hyper's HTTP/1.1 client reads to one request (a `HEAD` one if `head`) from a
/// connection whose reads are `pieces`; `None` if it read no answer.
pub(super) fn answer(pieces: &[&[u8]], head: bool) -> Option<Got> {
    block_on(async {
        let io = TokioIo::new(Script::new(pieces, true));
        // With lingo's limit on header lines (hyper's default is 100).
        let mut builder = hyper::client::conn::http1::Builder::new();
        builder.max_headers(crate::upstream::h1::head::MAX_HEADERS);
        let (mut send, conn) = builder.handshake(io).await.ok()?;
        let method = if head { Method::HEAD } else { Method::GET };
        let req = Request::builder()
            .method(method)
            .uri("/")
            .body(Empty::<Bytes>::new());
        // The connection on a task of its own, as hyper-util's pool runs it.
        let driver = tokio::spawn(conn);
        let got = async {
            let resp = send.send_request(req.ok()?).await.ok()?;
            let status = resp.status();
            let body = resp.into_body().collect().await.ok();
            Some((status, body.map(|b| b.to_bytes().to_vec())))
        };
        let got = got.await;
        driver.abort();
        got
    })
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime with no drivers builds");
    }
    RUNTIME.with(|rt| rt.block_on(f))
}

/// A connection whose reads are the given pieces, one a read, then the end; what is
/// written to it goes nowhere. Pending only until the first write when it answers (a
/// client's connection: an answer before the request is one hyper refuses), so whatever
/// runs on it ends.
struct Script {
    reads: VecDeque<Bytes>,
    /// Reads wait for a write, and this task waits for it.
    answers: Option<Option<Waker>>,
}

impl Script {
    fn new(pieces: &[&[u8]], answers: bool) -> Script {
        let reads = pieces.iter().filter(|p| !p.is_empty());
        Script {
            reads: reads.map(|p| Bytes::copy_from_slice(p)).collect(),
            answers: answers.then_some(None),
        }
    }
}

impl AsyncRead for Script {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(waiting) = &mut self.answers {
            *waiting = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if let Some(front) = self.reads.front_mut() {
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front.split_to(n));
            if front.is_empty() {
                self.reads.pop_front();
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Script {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(Some(reader)) = self.answers.take() {
            reader.wake();
        }
        Poll::Ready(Ok(b.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
