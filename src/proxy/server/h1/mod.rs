//! lingo's own HTTP/1.1 server connection (HTTP/2 stays with hyper).
//!
//! Why not hyper's: every hyper connection keeps an 8 KiB read buffer and an 8 KiB write
//! buffer for its whole life, which at thousands of streams is most of lingo's memory, and
//! its dispatcher costs more per request and per event than the proxying itself. Here the
//! read buffer exists only while bytes wait in it (a read into an empty one is split off the
//! thread's landing buffer, as the upstream client's are), a response's bytes are gathered
//! per wake-up and written in one call, and the connection task is the only task: the
//! handler reads a body still arriving straight from the socket (`body::Body`).
//!
//! While a request is served the socket is still watched: a client that closes its end
//! (EOF) or breaks it has left, and its request is dropped, which is what stops the
//! upstream generating for no one (as hyper does without `half_close`).

mod body;
pub(crate) mod request;
pub(crate) mod response;

use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body as AxumBody;
use bytes::{Buf, Bytes, BytesMut};
use http::Method;
use http_body::Body as _;
use tokio::net::TcpStream;
use tower::Service;

use super::conn::Activity;
use crate::proxy::Front;
use crate::upstream::h1::framing::{front, Framing};
use crate::upstream::h1::poll_fill;
use request::Head;
use response::{Ask, Out};

/// Response bytes gathered before they are written even if more are ready at once.
const GATHER: usize = 64 << 10;
/// Body frames larger than this are written from where they are, not copied first.
const COPY_UP_TO: usize = 16 << 10;
/// What a response head takes, give or take: the service's headers and lingo's.
const HEAD_ROOM: usize = 320;
/// A body frame's chunk framing (a size line and CRLF), and the last chunk.
const FRAMING_ROOM: usize = 32;
/// The largest write buffer kept for the next write (`spare`): what a gather fills.
const SPARE_UP_TO: usize = GATHER + COPY_UP_TO;

thread_local! {
    /// A write buffer between writes, for whichever response on this thread writes next.
    /// Each response's own was an allocation, and a stream's grew (a copy) as its events
    /// did; a stream waiting for its next event holds none (`gather` takes one only once it
    /// has bytes), so one buffer serves every stream of the thread but those a slow client
    /// keeps waiting on their write.
    static SPARE: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// An empty write buffer with `room`, the thread's spare if it has one.
fn spare(room: usize) -> Vec<u8> {
    let mut out = SPARE.take();
    out.reserve(room);
    out
}

/// Room for `n` more bytes in `out`, which is the thread's spare if it had no buffer yet.
fn room(out: &mut Vec<u8>, n: usize) {
    match out.capacity() {
        0 => *out = spare(n),
        _ => out.reserve(n),
    }
}

/// `out`, written, back as the thread's spare (unless it grew too large to keep).
fn keep_spare(out: &mut Vec<u8>) {
    let mut out = std::mem::take(out);
    if out.capacity() <= SPARE_UP_TO {
        out.clear();
        SPARE.set(out);
    }
}

/// Serve HTTP/1 requests on `tcp` until the client closes, a request asks to close, or
/// `activity` is asked to close (between requests).
pub(super) async fn serve(
    tcp: TcpStream,
    router: Front,
    activity: Arc<Activity>,
) -> io::Result<()> {
    let mut c = Conn {
        io: Arc::new(tcp),
        buf: BytesMut::new(),
        heads: BytesMut::new(),
        router,
        activity,
        rest: Arc::new(body::Rest::default()),
        body_open: false,
    };
    loop {
        let head = match c.next_head().await? {
            None => return Ok(()),
            Some(Ok(head)) => head,
            Some(Err(refusal)) => {
                tracing::debug!(why = refusal.why, "request head refused");
                let mut out = Vec::new();
                response::refusal(&mut out, refusal.status);
                write_all(&c.io, &[IoSlice::new(&out)]).await?;
                linger(&c.io).await;
                return Ok(());
            }
        };
        match c.exchange(head).await? {
            After::Next => {}
            After::Close => {
                linger(&c.io).await;
                return Ok(());
            }
            After::Gone => return Ok(()),
        }
    }
}

/// How a request left its connection.
enum After {
    /// Ready for the next request.
    Next,
    /// Answered, and lingo closes (the client asked, HTTP/1.0, a body left unread, a drain).
    Close,
    /// The client left, or the answer broke off: nothing more to say.
    Gone,
}

/// How long, and how much, a closing connection reads what the client still sends.
const LINGER_FOR: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

/// Close after an answer without destroying it: closing a socket with unread bytes in it
/// makes the kernel send a reset, which can overtake the answer on its way (a 413 to a
/// client still sending its body would arrive as "connection reset"). So lingo sends its FIN
/// and reads what still comes, for a while, before it lets go (nginx's lingering close).
async fn linger(io: &TcpStream) {
    if socket2::SockRef::from(io)
        .shutdown(std::net::Shutdown::Write)
        .is_err()
    {
        return;
    }
    let drain = async {
        let mut sink = BytesMut::new();
        let mut read = 0;
        while read < LINGER_BYTES {
            match poll_fn(|cx| poll_fill(io, &mut sink, cx)).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
            sink.clear();
        }
    };
    let _ = tokio::time::timeout(LINGER_FOR, drain).await;
}

struct Conn {
    io: Arc<TcpStream>,
    /// Read and not yet taken: the next head, or the body's start. Empty, it holds no memory.
    buf: BytesMut,
    /// What each request's head is copied into (`request::parse`).
    heads: BytesMut,
    router: Front,
    activity: Arc<Activity>,
    rest: Arc<body::Rest>,
    /// A body is read by the handler (`body::Body`), which has the buffer until it ends.
    body_open: bool,
}

/// How a response body went out.
enum Gather {
    /// Bytes to write, and more to come.
    More,
    /// Bytes to write, and the body said it has no more yet: its wake-up is armed.
    Waiting,
    /// The body ended; write what is gathered and the request is done.
    End,
    /// The body failed or the client left: write what is gathered (if anything) and close.
    Abort,
}

impl Conn {
    /// The next request head, or `None` when the connection is done (closed by the client,
    /// or asked to close while no request was in it).
    async fn next_head(&mut self) -> io::Result<Option<Result<Head, request::Refusal>>> {
        loop {
            if !self.buf.is_empty() {
                match request::parse(&self.buf, &mut self.heads) {
                    Ok(Some(head)) => return Ok(Some(Ok(head))),
                    Err(refusal) => return Ok(Some(Err(refusal))),
                    Ok(None) => {}
                }
            }
            if poll_fn(|cx| self.poll_read_head(cx)).await? == 0 {
                return Ok(None);
            }
        }
    }

    /// Read more of a head; 0 when the client closed, or lingo asked to close between
    /// requests (checked at every poll: the connection loop asks from this same task).
    fn poll_read_head(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.is_empty() && self.activity.close_asked() {
            return Poll::Ready(Ok(0));
        }
        let r = poll_fill(&self.io, &mut self.buf, cx);
        match &r {
            Poll::Ready(Ok(n)) if *n > 0 => self.activity.on_read(true),
            Poll::Pending => self.activity.on_read(false),
            _ => {}
        }
        r
    }

    /// Serve one request.
    async fn exchange(&mut self, head: Head) -> io::Result<After> {
        // Advanced past, not split off: a split would make the buffer shared (an allocation).
        self.buf.advance(head.len);
        let version = head.request.version();
        let head_method = head.request.method() == Method::HEAD;
        let busy = self.activity.begin(version);
        let body = self.body(&head).await?;
        let call = self.router.call(head.request.map(|()| body));
        let Some(Ok(resp)) = self.until_gone(call).await else {
            tracing::debug!("client left before its answer");
            return Ok(After::Gone);
        };
        let (parts, body) = resp.into_parts();
        // A body the handler left unread cannot be skipped to the next request.
        let keep_alive = head.keep_alive && !self.activity.close_asked() && self.body_done();
        let ask = Ask {
            version,
            head_method,
            keep_alive,
        };
        let hint = body.size_hint();
        // Room for the head and a body small enough to be copied behind it: one allocation.
        let length = response::length(&parts, &hint);
        let inline = length.filter(|n| *n <= COPY_UP_TO as u64);
        let mut out = spare(HEAD_ROOM + inline.unwrap_or(0) as usize);
        let (framing, keep) = response::encode(&mut out, &parts, length, ask);
        let ended = self.send(out, body, framing).await?;
        drop(busy);
        Ok(if !ended {
            After::Gone
        } else if keep && self.body_done() {
            After::Next
        } else {
            After::Close
        })
    }

    /// The request's body: whole already (the read buffer is let go if nothing else is in
    /// it), or read by the handler as it arrives.
    async fn body(&mut self, head: &Head) -> io::Result<AxumBody> {
        let body = match head.framing {
            Framing::Length(n) if n as usize <= self.buf.len() => {
                // A slice, not a copy: the generation handlers copy a small body out of it
                // themselves (`generate::body`), and the others drop theirs at once.
                let whole = front(&mut self.buf, n as usize);
                if whole.is_empty() {
                    AxumBody::empty()
                } else {
                    AxumBody::from(whole)
                }
            }
            framing => {
                if head.expect_continue {
                    write_all(&self.io, &[IoSlice::new(b"HTTP/1.1 100 Continue\r\n\r\n")]).await?;
                }
                let buf = std::mem::take(&mut self.buf);
                self.body_open = true;
                let b = body::Body::new(self.io.clone(), buf, framing, self.rest.clone());
                AxumBody::new(b)
            }
        };
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
        Ok(body)
    }

    /// Whether the request body ended (its buffer, with whatever followed it, is back).
    fn body_done(&mut self) -> bool {
        if self.body_open {
            let Some(buf) = self.rest.take() else {
                return false;
            };
            self.buf = buf;
            self.body_open = false;
        }
        true
    }

    /// `call`'s outcome, or `None` if the client left first.
    async fn until_gone<F: Future>(&mut self, call: F) -> Option<F::Output> {
        let mut call = pin!(call);
        poll_fn(|cx| {
            if let Poll::Ready(r) = call.as_mut().poll(cx) {
                return Poll::Ready(Some(r));
            }
            self.poll_gone(cx).map(|()| None)
        })
        .await
    }

    /// Ready when the client has closed or broken its end. Only watched once the request's
    /// body has ended and no next request waits in the buffer (a pipelining client's bytes
    /// are kept, not read as a close).
    fn poll_gone(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.body_done() || !self.buf.is_empty() {
            return Poll::Pending;
        }
        match poll_fill(&self.io, &mut self.buf, cx) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Poll::Ready(()),
            Poll::Ready(Ok(_)) | Poll::Pending => Poll::Pending,
        }
    }

    /// Write the head in `out` and the body after it; `true` if all of it went out.
    async fn send(&mut self, mut out: Vec<u8>, body: AxumBody, framing: Out) -> io::Result<bool> {
        if framing == Out::Bodiless {
            write_all(&self.io, &[IoSlice::new(&out)]).await?;
            keep_spare(&mut out);
            return Ok(true);
        }
        let mut body = pin!(body);
        let mut left = match framing {
            Out::Length(n) => n,
            _ => u64::MAX,
        };
        // The body said Pending just before the last write, and the write did not wait: its
        // wake-up is still armed for this task, so asking again now would only repeat the
        // Pending (a third of the body polls of a paced stream, each with its timers). A
        // write that waited for the socket let the task be polled meanwhile, and a wake-up
        // the body gave then was spent on that poll: the body is asked again.
        let mut armed = false;
        loop {
            let mut big = None;
            let step = poll_fn(|cx| {
                if std::mem::take(&mut armed) {
                    return self.poll_gone(cx).map(|()| Gather::Abort);
                }
                self.gather(cx, body.as_mut(), &mut out, &mut big, framing, &mut left)
            })
            .await;
            let tail: &[u8] = match (&big, framing) {
                (Some(_), Out::Chunked) => b"\r\n",
                _ => b"",
            };
            let slices = [
                IoSlice::new(&out),
                IoSlice::new(big.as_deref().unwrap_or_default()),
                IoSlice::new(tail),
            ];
            let waited = write_all(&self.io, &slices).await?;
            keep_spare(&mut out);
            match step {
                Gather::More => {}
                Gather::Waiting => armed = !waited,
                Gather::End => return Ok(true),
                Gather::Abort => return Ok(false),
            }
        }
    }

    /// Take every body frame that is ready into `out` (a large one into `big`, last), framed
    /// for the wire; ready once there is something to write or the body is over.
    fn gather(
        &mut self,
        cx: &mut Context<'_>,
        mut body: Pin<&mut AxumBody>,
        out: &mut Vec<u8>,
        big: &mut Option<Bytes>,
        framing: Out,
        left: &mut u64,
    ) -> Poll<Gather> {
        loop {
            match body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers: HTTP/1.1 chunked could carry them; none are sent
                    };
                    if data.is_empty() {
                        continue;
                    }
                    if data.len() as u64 > *left {
                        tracing::debug!("response body longer than its content-length");
                        return Poll::Ready(Gather::Abort);
                    }
                    *left = left.saturating_sub(data.len() as u64);
                    // With room for its framing and the last chunk after it: grown for
                    // the data alone, `out` grew again (a copy of it all) for the five
                    // bytes that end a stream read whole.
                    let copied = if data.len() <= COPY_UP_TO {
                        data.len()
                    } else {
                        0
                    };
                    room(out, copied + FRAMING_ROOM);
                    if framing == Out::Chunked {
                        response::chunk_size(out, data.len());
                    }
                    if data.len() > COPY_UP_TO {
                        *big = Some(data);
                        return Poll::Ready(Gather::More);
                    }
                    out.extend_from_slice(&data);
                    if framing == Out::Chunked {
                        out.extend_from_slice(b"\r\n");
                    }
                    if out.len() >= GATHER {
                        return Poll::Ready(Gather::More);
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!(error = %e, "response body failed");
                    return Poll::Ready(Gather::Abort);
                }
                Poll::Ready(None) => {
                    return Poll::Ready(match framing {
                        Out::Chunked => {
                            room(out, FRAMING_ROOM);
                            out.extend_from_slice(response::LAST_CHUNK);
                            Gather::End
                        }
                        Out::Length(_) if *left > 0 => {
                            tracing::debug!("response body shorter than its content-length");
                            Gather::Abort
                        }
                        _ => Gather::End,
                    });
                }
                Poll::Pending if !out.is_empty() => return Poll::Ready(Gather::Waiting),
                Poll::Pending => return self.poll_gone(cx).map(|()| Gather::Abort),
            }
        }
    }
}

/// Write all of `slices` (at most three), in as few calls as the socket takes; `true` if
/// it had to wait for the socket (the task was parked, and polled again, meanwhile).
async fn write_all(io: &TcpStream, slices: &[IoSlice<'_>]) -> io::Result<bool> {
    let mut held = [IoSlice::new(&[]); 3];
    let mut n = 0;
    for s in slices.iter().filter(|s| !s.is_empty()) {
        held[n] = *s;
        n += 1;
    }
    let mut bufs = &mut held[..n];
    let mut waited = false;
    while !bufs.is_empty() {
        match io.try_write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                waited = true;
                io.writable().await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(waited)
}
