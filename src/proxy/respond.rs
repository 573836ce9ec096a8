//! Every response leaves through here, wrapped in the metered body.

use std::time::Instant;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::Stream;
use http::{header, HeaderValue, StatusCode};

use super::AppState;
use crate::dialect::Dialect;
use crate::error::{ProxyError, Source};
use crate::metrics::{Emit, Labels, MeteredBody, Outcome, RequestRecord, Summary};

/// When a request arrived, and the id the request-id layer gave it.
pub struct Arrival {
    pub started: Instant,
    pub request_id: Option<String>,
    /// The route itself asks for a stream (TGI's `/generate_stream`).
    pub stream: bool,
}

impl Arrival {
    pub fn new(headers: &http::HeaderMap) -> Arrival {
        Arrival {
            started: Instant::now(),
            request_id: headers
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            stream: false,
        }
    }
}

/// Open the record of one request (counts it in flight until its body ends or drops).
pub fn record(st: &AppState, dialect: Dialect, model: Option<&str>, at: &Arrival) -> RequestRecord {
    let labels = Labels {
        dialect: dialect.label(),
        upstream: st.upstream_name().to_string(),
        model: model.map_or_else(|| "other".to_string(), |m| st.models.label(m)),
    };
    st.metrics.request_started(&labels);
    let mut rec = RequestRecord::new(labels, at.started);
    rec.request_id = at.request_id.clone();
    rec.model = model.map(str::to_string);
    rec.stream = at.stream;
    rec.key = crate::auth::current();
    rec
}

pub fn stream<S>(st: &AppState, record: RequestRecord, content_type: HeaderValue, s: S) -> Response
where
    S: Stream<Item = Emit> + Send + 'static,
{
    let body = MeteredBody::new(s, record, st.metrics.clone());
    let mut resp = Response::new(Body::new(body));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// A whole response: one data piece carrying all its tokens, then the end.
pub fn full(
    st: &AppState,
    record: RequestRecord,
    status: StatusCode,
    content_type: HeaderValue,
    bytes: Bytes,
    summary: Summary,
) -> Response {
    let tokens = u32::try_from(summary.completion_tokens).unwrap_or(u32::MAX);
    let pieces = vec![Emit::Data { bytes, tokens }, Emit::End(summary)];
    let body = MeteredBody::new(
        futures_util::stream::iter(pieces),
        record,
        st.metrics.clone(),
    );
    let mut resp = Response::new(Body::new(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    resp
}

pub fn json() -> HeaderValue {
    HeaderValue::from_static("application/json")
}

/// An error before any output, in the client's dialect.
pub fn error(st: &AppState, record: RequestRecord, dialect: Dialect, err: &ProxyError) -> Response {
    let outcome = match (err.source(), err) {
        (_, ProxyError::Timeout(_)) => Outcome::Timeout,
        (Source::Client, _) => Outcome::ClientError,
        _ => Outcome::UpstreamError,
    };
    if err.source() != Source::Client {
        tracing::warn!(dialect = dialect.label(), error = %err, "request failed");
    }
    let summary = Summary {
        error: Some((outcome, err.kind())),
        ..Summary::default()
    };
    if record.stream && dialect.stream_errors_in_band() {
        let mut out = bytes::BytesMut::new();
        dialect.write_stream_error(err, &mut out);
        let ct = HeaderValue::from_static(dialect.stream_content_type());
        return full(st, record, StatusCode::OK, ct, out.freeze(), summary);
    }
    let body = Bytes::from(dialect.error_body(err));
    let mut resp = full(st, record, dialect.error_status(err), json(), body, summary);
    if let Some(secs) = err.retry_after() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}
