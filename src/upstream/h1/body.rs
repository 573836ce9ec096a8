//! A response body read from the socket by whoever polls it.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::framing::{Chunked, Framing, Step};
use super::pool::Conn;

/// Why a body stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the upstream closed the connection before the body ended")]
    Closed,
    #[error("reading the upstream body: {0}")]
    Io(#[from] io::Error),
    #[error("the upstream body is malformed: {0}")]
    Framing(&'static str),
}

/// The body of one response. Read to its end, its connection goes back to the pool;
/// dropped before, the connection closes (which is what stops a server generating for a
/// client that left).
pub struct Body {
    /// `None` once the body ended (or failed).
    conn: Option<Conn>,
    framing: Framing,
    reusable: bool,
    /// The last read took all the socket had (`poll_fill_dry`).
    dry: bool,
}

impl Body {
    pub(super) fn new(conn: Conn, framing: Framing, reusable: bool) -> Body {
        let mut body = Body {
            conn: Some(conn),
            framing,
            reusable,
            dry: false,
        };
        // An empty body has ended already: its connection is free now, read or not.
        if framing == Framing::Length(0) {
            body.finish();
        }
        body
    }

    fn finish(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        // Bytes past the body's end are a server out of step: never reuse that connection.
        if self.reusable && conn.buf.is_empty() {
            conn.pool.checkin(conn.io);
        }
    }

    /// The read buffer's capacity while the body is open.
    #[cfg(test)]
    pub(super) fn buffer_capacity(&self) -> Option<usize> {
        self.conn.as_ref().map(|c| c.buf.capacity())
    }

    /// Whether a poll now would surely find nothing: the last read drained the socket and
    /// what it left holds no data (at most a chunk's closing CRLF). Within one poll of the
    /// task nothing can have arrived since, as the runtime learns of new bytes only between
    /// polls (and should it have, on another thread, the next poll reads them).
    pub fn dry(&self) -> bool {
        let Some(conn) = &self.conn else {
            return false;
        };
        let spent = match self.framing {
            Framing::Chunked(Chunked::DataEnd) => conn.buf.len() <= 2,
            _ => conn.buf.is_empty(),
        };
        self.dry && spent
    }

    fn fail(&mut self, e: BodyError) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.conn = None;
        Poll::Ready(Some(Err(e)))
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let Some(conn) = this.conn.as_mut() else {
            return Poll::Ready(None);
        };
        match ready!(poll_piece(
            &conn.io,
            &mut conn.buf,
            &mut this.framing,
            &mut this.dry,
            cx
        )) {
            Ok(Some(d)) => Poll::Ready(Some(Ok(Frame::data(d)))),
            Ok(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Err(f) => this.fail(f.into()),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.conn {
            None => SizeHint::with_exact(0),
            Some(_) => self.framing.size_hint(),
        }
    }
}

/// Why a framed body stopped before its end (each side words it as its own error).
#[derive(Debug)]
pub(crate) enum Failure {
    /// The peer closed before the body's end.
    Closed,
    Io(io::Error),
    Malformed(&'static str),
}

impl From<Failure> for BodyError {
    fn from(f: Failure) -> BodyError {
        match f {
            Failure::Closed => BodyError::Closed,
            Failure::Io(e) => BodyError::Io(e),
            Failure::Malformed(e) => BodyError::Framing(e),
        }
    }
}

/// The next piece of a body framed by `framing`, `None` at its end (by its framing, or by a
/// close its framing ends at): from `buf` if it holds some, else read from `io`. Both ends
/// of lingo's HTTP/1 read bodies this way (responses from upstreams, requests from clients).
/// `dry` is set to whether the last read drained the socket.
pub(crate) fn poll_piece(
    io: &TcpStream,
    buf: &mut BytesMut,
    framing: &mut Framing,
    dry: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Result<Option<Bytes>, Failure>> {
    loop {
        match framing.decode(buf) {
            Err(e) => return Poll::Ready(Err(Failure::Malformed(e))),
            Ok(Step::Data(d)) => return Poll::Ready(Ok(Some(d))),
            Ok(Step::Done) => return Poll::Ready(Ok(None)),
            Ok(Step::NeedMore) => {}
        }
        match ready!(poll_fill_dry(io, buf, cx)) {
            Ok((0, _)) if framing.ends_at_close() => return Poll::Ready(Ok(None)),
            Ok((0, _)) => return Poll::Ready(Err(Failure::Closed)),
            Ok((_, drained)) => *dry = drained,
            Err(e) => return Poll::Ready(Err(Failure::Io(e))),
        }
    }
}

/// Read what the socket has into the connection's buffer. A stream waits for most of its
/// life (a token every few ms): waiting with an empty buffer, it lets the buffer go, so an
/// idle stream holds no read memory (8 KiB each, at thousands of streams). The next read
/// lands in the thread's landing buffer and the connection's buffer is that read, split
/// off it (an event is a few hundred bytes: a buffer of its own per event was a malloc and
/// a free, a copy, and a second malloc to share it once pieces were split off).
pub(crate) fn poll_fill(
    io: &TcpStream,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    poll_fill_dry(io, buf, cx).map_ok(|(n, _)| n)
}

/// `poll_fill`, and whether the read took all the socket had (its readiness is cleared:
/// reading again before the runtime next looks would find nothing).
pub(crate) fn poll_fill_dry(
    io: &TcpStream,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<(usize, bool)>> {
    loop {
        if io.poll_read_ready(cx)?.is_pending() {
            if buf.is_empty() {
                *buf = BytesMut::new();
            }
            return Poll::Pending;
        }
        // The read runs inside `try_io` so that tokio takes its readiness snapshot before
        // the read: a read that did not fill its room took all the socket had, and saying
        // so (the closure's `WouldBlock`) clears only that snapshot's readiness, never an
        // event for data that arrived after the read. (Clearing with a snapshot taken after
        // the read lost such an event now and then, and the stream stalled with its next
        // bytes unread in the socket.) It saves the read that would find nothing: a
        // syscall per event in a stream.
        let mut got = None;
        let drained = io.try_io(Interest::READABLE, || {
            let (n, room) = read_once(io, buf)?;
            got = Some(n);
            match n > 0 && n < room {
                true => Err(io::ErrorKind::WouldBlock.into()),
                false => Ok(n),
            }
        });
        match (drained, got) {
            (Ok(n), _) => return Poll::Ready(Ok((n, false))),
            (Err(e), Some(n)) if e.kind() == io::ErrorKind::WouldBlock => {
                return Poll::Ready(Ok((n, true)))
            }
            (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => continue,
            (Err(e), _) => return Poll::Ready(Err(e)),
        }
    }
}

/// One read into `buf` (through the thread's landing buffer when `buf` has none): the bytes
/// read and the room they had.
fn read_once(io: &TcpStream, buf: &mut BytesMut) -> io::Result<(usize, usize)> {
    if buf.capacity() == 0 {
        return LANDING.with_borrow_mut(|landing| {
            if landing.capacity() < LANDING_LOW {
                landing.reserve(LANDING_SIZE);
            }
            let room = landing.capacity();
            let n = io.try_read_buf(landing)?;
            *buf = landing.split();
            Ok((n, room))
        });
    }
    super::reserve(buf);
    let room = buf.capacity() - buf.len();
    Ok((io.try_read_buf(buf)?, room))
}

/// The landing buffer's size, and the room below which it is renewed.
const LANDING_SIZE: usize = 8 << 10;
const LANDING_LOW: usize = 2 << 10;

thread_local! {
    /// Where a read with no buffer of its own lands (one per worker thread). Each read is
    /// split off it, so the pieces handed on share it: no allocation or copy of their own.
    /// Renewed when little room is left: in place once every piece of it has been dropped
    /// (pieces live while they are decoded and written, not while a stream waits), else a
    /// fresh one, the old one freed with its last piece. A piece held longer (a slow
    /// client's unwritten event) holds at most one landing buffer.
    static LANDING: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}
