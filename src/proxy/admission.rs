//! Admission control (`limits.max_in_flight`): a generation request beyond the limit is
//! refused at once, never queued.
//!
//! A slot is held until the response body ends or is dropped, not until the handler returns
//! its headers: for a stream the headers are the beginning, and the work (and the upstream's
//! capacity it takes) lasts until the last token.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http::{header, HeaderValue};
use http_body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Limits;
use crate::dialect::Dialect;
use crate::error::ProxyError;
use crate::metrics::{Metrics, Refusal};

/// What a refused client should wait before retrying: in-flight slots free up as fast as
/// generations end, so one second is a fair guess.
const RETRY_AFTER: u64 = 1;

#[derive(Clone)]
pub struct Admission {
    slots: Option<Arc<Semaphore>>,
    /// `limits.max_in_flight` (the semaphore's size).
    size: usize,
    status: u16,
    metrics: Arc<Metrics>,
}

impl Admission {
    pub fn new(limits: &Limits, metrics: Arc<Metrics>) -> Admission {
        Admission {
            slots: limits
                .max_in_flight
                .map(|n| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS)))),
            size: limits
                .max_in_flight
                .unwrap_or(0)
                .min(Semaphore::MAX_PERMITS),
            status: limits.overload_status.status().as_u16(),
            metrics,
        }
    }
}

impl Admission {
    /// Whether in-flight requests are limited (without a limit the layer is left out).
    pub fn limits(&self) -> bool {
        self.slots.is_some()
    }

    /// Whether more than 80% of the in-flight slots are taken (never, without a limit):
    /// shadow traffic is not sent then, so a mirror never pushes clients into refusals.
    pub fn nearly_full(&self) -> bool {
        let Some(slots) = &self.slots else {
            return false;
        };
        let taken = self.size.saturating_sub(slots.available_permits());
        taken.saturating_mul(5) > self.size.saturating_mul(4)
    }
}

pub async fn admit(State(a): State<Admission>, req: Request, next: Next) -> Response {
    let Some(slots) = &a.slots else {
        return next.run(req).await;
    };
    let Ok(permit) = slots.clone().try_acquire_owned() else {
        a.metrics.request_refused(Refusal::Overloaded);
        let err = ProxyError::Overloaded {
            status: a.status,
            retry_after: RETRY_AFTER,
        };
        return refusal(Dialect::for_path(req.uri().path()), &err);
    };
    next.run(req).await.map(|inner| {
        Body::new(Held {
            permit: Some(permit),
            inner,
        })
    })
}

/// A refusal before any handler ran, in the client's dialect, with `Retry-After` where the
/// error has one (and the `WWW-Authenticate` challenge a 401 calls for).
pub(crate) fn refusal(dialect: Dialect, err: &ProxyError) -> Response {
    let mut resp = Response::new(Body::from(dialect.error_body(err)));
    *resp.status_mut() = dialect.error_status(err);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(secs) = err.retry_after() {
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if matches!(err, ProxyError::Unauthorized(_)) {
        h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}

/// A response body holding its in-flight slot until the body ends, fails or is dropped.
struct Held {
    // Dropped first (fields drop in order): the slot is free before the inner body's drop
    // closes the upstream connection, so an upstream that saw the abort can count on it.
    permit: Option<OwnedSemaphorePermit>,
    inner: Body,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.permit = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
