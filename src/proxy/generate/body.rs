//! A generation request's body: read under `limits.max_request_body`, checked as UTF-8, and
//! every failure typed, so the handler answers in its client's dialect (axum's own `Bytes`
//! rejections are plain text, and call a slow body a 400).

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use bytes::Bytes;
use http::header;

use super::AppState;
use crate::error::{ProxyError, Timer};

/// Bodies up to this size may share a connection's read buffer (hyper's first read for
/// HTTP/2, lingo's own for HTTP/1, are up to 8 KiB).
const SHARED_BODY: usize = 8 << 10;

/// The body, or why there is none; the handler turns the error into its dialect's shape.
pub struct ClientBody(pub Result<Bytes, ProxyError>);

impl FromRequest<Arc<AppState>> for ClientBody {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, st: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        Ok(ClientBody(
            read(req, st.config.limits.max_request_body).await,
        ))
    }
}

async fn read(req: Request, limit: usize) -> Result<Bytes, ProxyError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // Refuse a declared size at once rather than after reading `limit` bytes of it.
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ProxyError::TooLarge { limit });
    }
    let body = axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|e| classify(&e, limit))?;
    // A small body that came in one read with its head is a slice of the connection's read
    // buffer, and lingo keeps the body (for failover) for as long as the answer streams:
    // a copy of its own lets that buffer go (or be reused for the next read) instead of
    // being held, head and all, per in-flight stream.
    let body = match body.len() <= SHARED_BODY {
        true => Bytes::copy_from_slice(&body),
        false => body,
    };
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

/// Which failure a body error is: the length limit, the client-body timer
/// (`RequestBodyTimeoutLayer`'s error, boxed inside axum's), or a broken body.
fn classify(e: &axum::Error, limit: usize) -> ProxyError {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if s.is::<http_body_util::LengthLimitError>() {
            return ProxyError::TooLarge { limit };
        }
        if s.is::<tower_http::timeout::TimeoutError>() {
            return ProxyError::Timeout(Timer::ClientBody);
        }
        src = s.source();
    }
    tracing::debug!(error = %e, "reading a request body failed");
    ProxyError::invalid("", "the request body could not be read to its end")
}
