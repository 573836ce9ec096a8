//! An upstream response body, from whichever client carried the request.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;

use super::h1;

/// Why an upstream body broke off: for the log only (clients see a typed error).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

pub enum UpstreamBody {
    /// Read by the request's own task (`http://` upstreams).
    H1(h1::Body),
    /// From hyper-util's pooled client (`https://`).
    Hyper(Incoming),
}

impl UpstreamBody {
    /// Whether a poll now would surely find nothing (`h1::Body::dry`); hyper's bodies do
    /// not say, so they are never dry.
    pub fn dry(&self) -> bool {
        match self {
            UpstreamBody::H1(b) => b.dry(),
            UpstreamBody::Hyper(_) => false,
        }
    }
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            UpstreamBody::H1(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            UpstreamBody::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::H1(b) => b.is_end_stream(),
            UpstreamBody::Hyper(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::H1(b) => b.size_hint(),
            UpstreamBody::Hyper(b) => b.size_hint(),
        }
    }
}
