//! Every response leaves through here, wrapped in the metered body.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::Stream;
use http::{header, HeaderName, HeaderValue, StatusCode};

use super::AppState;
use crate::dialect::Dialect;
use crate::error::{ProxyError, Source};

// Names as constants: a lookup by `&str` parses the name first, at every request.
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_SESSION_ID: HeaderName = HeaderName::from_static("x-session-id");
use crate::metrics::{Emit, Labels, MeteredBody, OpenRecord, Outcome, RequestRecord, Summary};

/// When a request arrived, and its record (with the id the request-id layer gave it), open from
/// this moment: if the handler is dropped (the client left) before `record` takes it, it
/// records itself as cancelled.
pub struct Arrival {
    pub started: Instant,
    /// The route itself asks for a stream (TGI's `/generate_stream`).
    pub stream: bool,
    /// A lock only so `record` can take it through `&Arrival`; never contended.
    open: Mutex<Option<OpenRecord>>,
}

impl Arrival {
    /// Open the request's record (it is in flight from here) under labels refined later.
    pub fn new(st: &AppState, dialect: Dialect, headers: &http::HeaderMap) -> Arrival {
        let started = Instant::now();
        // Looked up only for the request log: a lookup hashes the name.
        let request_id = st
            .metrics
            .logs()
            .then(|| headers.get(X_REQUEST_ID)?.to_str().ok().map(str::to_string))
            .flatten();
        let mut rec = RequestRecord::new(labels(st, dialect, None), started);
        rec.request_id = request_id;
        rec.session = headers
            .get(X_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .and_then(crate::metrics::session_key);
        rec.key = crate::auth::current();
        Arrival {
            started,
            stream: false,
            open: Mutex::new(Some(OpenRecord::open(st.metrics.clone(), rec))),
        }
    }
}

impl Arrival {
    /// The request now belongs to an endpoint: its metrics take the endpoint's group as
    /// their `upstream` label, and the endpoint counts it in flight until the record ends
    /// (with the response body).
    pub fn hold(&self, group: &Arc<str>, ticket: crate::fleet::Ticket) {
        let mut slot = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(rec) = slot.as_mut() else {
            return;
        };
        let mut labels = rec.labels.clone();
        labels.upstream = group.clone();
        rec.relabel(labels);
        rec.on_end(ticket.into_hook());
    }
}

impl Arrival {
    /// Count the request under `group` from now on, before any endpoint holds it: a mirrored
    /// request that finds no shadow endpoint is the mirror's failure, not the pool's.
    pub fn label_upstream(&self, group: &str) {
        let mut slot = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rec) = slot.as_mut() {
            let mut labels = rec.labels.clone();
            labels.upstream = Arc::from(group);
            rec.relabel(labels);
        }
    }

    /// Give the record back after a failed attempt, so the next attempt takes it again.
    pub fn restore(&self, rec: OpenRecord) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = Some(rec);
    }

    /// End the current attempt's hold on its endpoint with `outcome` (it failed before any
    /// output; the request goes on elsewhere).
    pub fn release(&self, outcome: Outcome) {
        let hook = self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .and_then(|r| r.take_on_end());
        if let Some(end) = hook {
            end(outcome);
        }
    }

    /// The record as the last attempt left it (labels, stream flag), to answer an error.
    pub fn take(&self, st: &AppState, dialect: Dialect) -> OpenRecord {
        let taken = self.open.lock().unwrap_or_else(|e| e.into_inner()).take();
        taken.unwrap_or_else(|| record(st, dialect, None, self))
    }
}

fn labels(st: &AppState, dialect: Dialect, model: Option<&str>) -> Labels {
    labels_for(st, dialect, model, st.upstream_label())
}

/// The labels with `upstream` given (the record's own, not a fresh name to throw away).
fn labels_for(st: &AppState, dialect: Dialect, model: Option<&str>, upstream: Arc<str>) -> Labels {
    Labels {
        dialect: dialect.label(),
        upstream,
        model: model.map_or_else(|| st.models.other(), |m| st.models.label(m)),
    }
}

/// The request's record, with its labels now that the model is known (in flight until its
/// body ends or drops). Taken once per request.
pub fn record(st: &AppState, dialect: Dialect, model: Option<&str>, at: &Arrival) -> OpenRecord {
    let taken = at.open.lock().unwrap_or_else(|e| e.into_inner()).take();
    let mut rec = taken.unwrap_or_else(|| {
        // A handler that takes the record twice is a bug; still, never lose a request.
        tracing::error!("a request's record was taken twice");
        let rec = RequestRecord::new(labels(st, dialect, None), at.started);
        OpenRecord::open(st.metrics.clone(), rec)
    });
    // The upstream label stays what `Arrival::hold` made it (the endpoint's group).
    let l = labels_for(st, dialect, model, rec.labels.upstream.clone());
    rec.relabel(l);
    rec.model = model.filter(|_| st.metrics.logs()).map(str::to_string);
    rec.stream = at.stream;
    rec
}

pub fn stream<S>(st: &AppState, record: OpenRecord, content_type: HeaderValue, s: S) -> Response
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

/// A whole response: one data piece carrying all its tokens; the request ends as it leaves.
pub fn full(
    st: &AppState,
    record: OpenRecord,
    status: StatusCode,
    content_type: HeaderValue,
    bytes: Bytes,
    summary: Summary,
) -> Response {
    let tokens = u32::try_from(summary.completion_tokens).unwrap_or(u32::MAX);
    // Its length is known: the body says it (its size hint), so the client gets it, not chunks.
    let length = bytes.len() as u64;
    let piece = futures_util::stream::iter([Emit::data(bytes, tokens)]);
    let body = MeteredBody::whole(piece, record, st.metrics.clone(), summary, length);
    let mut resp = Response::new(Body::new(body));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type);
    resp
}

pub fn json() -> HeaderValue {
    HeaderValue::from_static("application/json")
}

/// An error before any output, in the client's dialect.
pub fn error(st: &AppState, record: OpenRecord, dialect: Dialect, err: &ProxyError) -> Response {
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
