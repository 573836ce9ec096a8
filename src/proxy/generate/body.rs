//! A generation request's body: read under `limits.max_request_body`, checked as UTF-8, and
//! every failure typed, so the handler answers in its client's dialect (axum's own `Bytes`
//! rejections are plain text, and call a slow body a 400).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, Request};
use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use http::{header, HeaderMap};
use http_body_util::BodyExt;

use super::AppState;
use crate::blocks;
use crate::error::{ProxyError, Timer};
use crate::gathered::Gathered;

/// Bodies up to this size may share a connection's read buffer (hyper's first read for
/// HTTP/2, lingo's own for HTTP/1, are up to 8 KiB).
const SHARED_BODY: usize = 8 << 10;

/// Bodies up to this size are cut from the thread's block (`BODIES`), larger ones copied on
/// their own. A stream keeps its body, and with it a share of the block it was cut from: a
/// long stream among short requests may keep a whole block alone, so blocks stay small.
const BLOCK_BODY: usize = 1 << 10;
const BODY_BLOCK: usize = 4 << 10;

thread_local! {
    /// Where small bodies are copied to (`blocks`): each attempt at an endpoint takes a
    /// clone, and a copy of its own was promoted to shared (an allocation) at the first.
    static BODIES: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(BODY_BLOCK));
}

/// The request's headers (taken from it, not copied) and its body, or why there is none;
/// the handler turns the error into its dialect's shape.
pub struct ClientBody {
    pub headers: HeaderMap,
    pub body: Result<Bytes, ProxyError>,
}

impl FromRequest<Arc<AppState>> for ClientBody {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, st: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        Ok(ClientBody::take(parts.headers, body, ClientBody::limits(st)).await)
    }
}

impl ClientBody {
    /// `limits.max_request_body` and `timeouts.client_body`.
    pub fn limits(st: &AppState) -> (usize, Duration) {
        (
            st.config.limits.max_request_body,
            st.config.timeouts.client_body,
        )
    }

    /// Read a request's body under `limits`, keeping its headers. A future that owns only
    /// what it needs (`from_request`'s holds the whole request and borrows the state):
    /// `lingo serve` boxes it, and under 1 KiB glibc serves the box from its per-thread
    /// cache (at 1.2 KiB, a profile showed 1k instructions for the allocation).
    pub async fn take(
        headers: HeaderMap,
        body: axum::body::Body,
        limits: (usize, Duration),
    ) -> ClientBody {
        let body = read(&headers, body, limits).await;
        ClientBody { headers, body }
    }
}

async fn read(
    headers: &HeaderMap,
    body: axum::body::Body,
    (limit, wait): (usize, Duration),
) -> Result<Bytes, ProxyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // Refuse a declared size at once rather than after reading `limit` bytes of it.
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ProxyError::TooLarge { limit });
    }
    let body = collect(body, limit, wait).await?;
    // serde_json checks the strings it decodes, not those it skips (passthrough reads three
    // fields), so the whole body is checked once here, for every route alike.
    if let Err(e) = std::str::from_utf8(&body) {
        return Err(ProxyError::invalid(
            "",
            format!(
                "the request body is not valid UTF-8 (at byte {})",
                e.valid_up_to()
            ),
        ));
    }
    Ok(body)
}

/// The body's data, at most `limit` bytes, each piece within `wait` of the last (the
/// client-body timer, as tower-http's `RequestBodyTimeout` keeps it for the other routes).
/// A piece already here is taken without a timer: most bodies come with their head.
async fn collect(
    mut body: axum::body::Body,
    limit: usize,
    wait: Duration,
) -> Result<Bytes, ProxyError> {
    let mut got = Gathered::default();
    loop {
        let next = match body.frame().now_or_never() {
            Some(next) => next,
            None => tokio::time::timeout(wait, body.frame())
                .await
                .map_err(|_| ProxyError::Timeout(Timer::ClientBody))?,
        };
        let Some(frame) = next else { break };
        let frame = frame.map_err(|e| {
            tracing::debug!(error = %e, "reading a request body failed");
            ProxyError::invalid("", "the request body could not be read to its end")
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if got.len() + data.len() > limit {
            return Err(ProxyError::TooLarge { limit });
        }
        got.push(data);
    }
    Ok(match got {
        // A small body that came in one read with its head is a slice of the connection's
        // read buffer, and lingo keeps the body (for failover) for as long as the answer
        // streams: a copy of its own lets that buffer go (or be reused for the next read)
        // instead of being held, head and all, per in-flight stream.
        Gathered::One(one) if one.len() <= BLOCK_BODY => blocks::cut(&BODIES, &one),
        Gathered::One(one) if one.len() <= SHARED_BODY => Bytes::copy_from_slice(&one),
        // Pieces joined are lingo's own buffer already.
        got => got.freeze(),
    })
}
