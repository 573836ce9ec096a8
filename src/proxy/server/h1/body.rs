//! A request body still arriving, read from the socket by whoever polls it (the handler),
//! like the upstream client's response bodies: no task or channel between the two.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use tokio::net::TcpStream;

use crate::upstream::h1::framing::Framing;
use crate::upstream::h1::{poll_piece, Failure};

#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the client closed the connection before the request body ended")]
    Closed,
    #[error("reading the request body: {0}")]
    Io(#[from] io::Error),
    #[error("the request body is malformed: {0}")]
    Framing(&'static str),
}

/// Where a body read to its end leaves the bytes read past it (the client's next request):
/// the connection takes them back once the answer is out. Empty means the body did not end,
/// and the connection cannot be read again.
#[derive(Default)]
pub struct Rest(Mutex<Option<BytesMut>>);

impl Rest {
    pub fn put(&self, buf: BytesMut) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(buf);
    }

    pub fn take(&self) -> Option<BytesMut> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

pub struct Body {
    io: Arc<TcpStream>,
    /// `None` once the body ended or failed.
    buf: Option<BytesMut>,
    framing: Framing,
    rest: Arc<Rest>,
}

impl Body {
    pub fn new(io: Arc<TcpStream>, buf: BytesMut, framing: Framing, rest: Arc<Rest>) -> Body {
        Body {
            io,
            buf: Some(buf),
            framing,
            rest,
        }
    }

    fn fail(&mut self, e: BodyError) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.buf = None;
        Poll::Ready(Some(Err(e)))
    }
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

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let Some(buf) = this.buf.as_mut() else {
            return Poll::Ready(None);
        };
        // A request body's reads are not joined: whether they drained the socket is unused.
        let mut dry = false;
        match ready!(poll_piece(&this.io, buf, &mut this.framing, &mut dry, cx)) {
            // A copy of its own: the handler keeps the body while the answer streams, and a
            // slice would keep the connection's whole read buffer with it.
            Ok(Some(d)) => Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(&d))))),
            Ok(None) => {
                if let Some(buf) = this.buf.take() {
                    this.rest.put(buf);
                }
                Poll::Ready(None)
            }
            Err(f) => this.fail(f.into()),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.buf.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.buf {
            None => SizeHint::with_exact(0),
            Some(_) => self.framing.size_hint(),
        }
    }
}
