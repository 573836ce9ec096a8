//! Injects a request's fault: the middleware in front of the generation routes answers the
//! modes that never reach a handler (hangs, reset, huge error) itself, and hands the others to
//! the driver through a task-local for the handler's run.
//!
//! Why a task-local: the fault is chosen from the headers and the raw body, which the handlers
//! never see, and every handler already funnels through `driver::stream`, `driver::pace_whole`
//! and `RequestGuard::complete`, which read it. A whole answer to be cut (stall, close,
//! malformed) hands its guard back here on `complete`, so the cut body holds it and the
//! request is counted by how the cut body ends.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, Method, StatusCode};
use serde_json::{json, Value};

use super::error::{ApiError, ErrorShape};
use super::fault::{self, Fault, FaultMode};
use super::listener::ResetOnDrop;
use super::state::{MockState, RequestGuard};
use super::MockKind;

tokio::task_local! {
    static CURRENT: Arc<Active>;
}

/// The fault of the request whose handler is running.
pub(crate) struct Active {
    fault: Fault,
    /// A completed whole answer's guard and usage, handed back to be cut.
    deferred: Mutex<Option<(RequestGuard, (u64, u64))>>,
}

/// The fault of the running handler's request, if any.
pub(crate) fn current() -> Option<Fault> {
    CURRENT.try_with(|a| a.fault).ok()
}

/// Takes a guard being completed when the running request's whole answer is to be cut;
/// gives it back otherwise. Streams complete outside the handler, so they are never taken.
pub(crate) fn defer(guard: RequestGuard, usage: (u64, u64)) -> Option<RequestGuard> {
    let mut guard = Some(guard);
    let _ = CURRENT.try_with(|a| {
        let cut = matches!(
            a.fault.mode,
            FaultMode::StallMidStream | FaultMode::CloseMidStream | FaultMode::MalformedChunk
        );
        let mut slot = a.deferred.lock().unwrap_or_else(|e| e.into_inner());
        if cut && slot.is_none() {
            *slot = guard.take().map(|g| (g, usage));
        }
    });
    guard
}

/// The error envelope of a generation route.
#[derive(Clone, Copy)]
enum Shape {
    Api(ErrorShape),
    Llamacpp,
    Ollama,
}

impl Shape {
    fn body(self, message: &str) -> Value {
        match self {
            Shape::Api(shape) => ApiError::bad_request(message).body(shape),
            Shape::Llamacpp => json!({"error": {"code": 400, "message": message,
                "type": "invalid_request_error"}}),
            Shape::Ollama => json!({ "error": message }),
        }
    }

    fn error(self, message: &str) -> Response {
        (StatusCode::BAD_REQUEST, axum::Json(self.body(message))).into_response()
    }
}

/// The error shape of `path` if it is a generation route of `kind`.
fn generation_shape(kind: MockKind, path: &str) -> Option<Shape> {
    let openai = matches!(path, "/v1/completions" | "/v1/chat/completions");
    match kind {
        MockKind::Vllm | MockKind::Openai => openai.then_some(Shape::Api(ErrorShape::Nested)),
        MockKind::Sglang if path == "/generate" => Some(Shape::Api(ErrorShape::Generate)),
        MockKind::Sglang => openai.then_some(Shape::Api(ErrorShape::Flat)),
        MockKind::Tgi => (openai && path != "/v1/completions"
            || matches!(path, "/generate" | "/generate_stream"))
        .then_some(Shape::Api(ErrorShape::Tgi)),
        MockKind::Llamacpp => {
            (openai || matches!(path, "/completion" | "/completions")).then_some(Shape::Llamacpp)
        }
        MockKind::Ollama => matches!(path, "/api/generate" | "/api/chat").then_some(Shape::Ollama),
    }
}

/// The middleware: chooses the request's fault and injects it.
pub(crate) async fn middleware(
    State(state): State<Arc<MockState>>,
    req: Request,
    next: Next,
) -> Response {
    let kind = state.config.kind;
    let shape = match generation_shape(kind, req.uri().path()) {
        Some(shape) if matches!(*req.method(), Method::POST | Method::PUT) => shape,
        _ => return next.run(req).await,
    };
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, super::routes::BODY_LIMIT).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response();
    };
    let fault = match fault::choose(&state, &parts.headers, &bytes) {
        Ok(Some(fault)) => fault,
        Ok(None) => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(message) => return shape.error(&format!("mock: {message}")),
    };
    state.count_fault(fault.mode);
    let streaming = streams(kind, parts.uri.path(), &bytes);
    let reset = parts
        .extensions
        .get::<ConnectInfo<ResetOnDrop>>()
        .map(|c| c.0.clone());
    match fault.mode {
        FaultMode::HangBeforeHeaders => {
            let (_guard, _) = state.begin();
            // Dropped with this future when hyper sees the client close: counted as aborted.
            std::future::pending::<()>().await;
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
        FaultMode::HangAfterHeaders => headers_only(state.begin().0, kind, streaming),
        FaultMode::Reset => {
            state.begin().0.fail();
            if let Some(reset) = reset {
                reset.arm();
            }
            broken_body()
        }
        FaultMode::HugeError => {
            state.begin().0.fail();
            huge_error(shape, fault.error_bytes)
        }
        _ => {
            let active = Arc::new(Active {
                fault,
                deferred: Mutex::new(None),
            });
            let req = Request::from_parts(parts, Body::from(bytes));
            let resp = CURRENT.scope(active.clone(), next.run(req)).await;
            let deferred = active
                .deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            match deferred {
                Some(deferred) => cut_whole(resp, fault.mode, deferred).await,
                None => resp,
            }
        }
    }
}

/// Whether the request asks for a stream (each dialect's default when it does not say).
fn streams(kind: MockKind, path: &str, body: &[u8]) -> bool {
    let asked = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("stream").and_then(Value::as_bool));
    asked.unwrap_or(kind == MockKind::Ollama || path == "/generate_stream")
}

/// Status 200 and headers; the body never sends a byte and holds the guard until dropped.
fn headers_only(guard: RequestGuard, kind: MockKind, streaming: bool) -> Response {
    let body = stream::once(async move {
        let _guard = guard;
        std::future::pending::<Result<Bytes, std::io::Error>>().await
    });
    let content_type = match (streaming, kind) {
        (true, MockKind::Ollama) => "application/x-ndjson",
        (true, _) => "text/event-stream",
        (false, _) => "application/json",
    };
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A body that fails before its first byte: hyper drops the connection without writing the
/// head it had buffered.
fn broken_body() -> Response {
    let body =
        stream::once(async { Err::<Bytes, _>(std::io::Error::other("mock: injected reset")) });
    Response::new(Body::from_stream(body))
}

static FILLER: [u8; 64 * 1024] = [b'x'; 64 * 1024];
/// Stands for the filler in the serialised error body.
const MARK: &str = "MOCK_HUGE_ERROR_FILLER";

/// A 400 in `shape` whose message is padded so the body is about `bytes` long; streamed, so
/// it costs no memory.
fn huge_error(shape: Shape, bytes: u64) -> Response {
    let text = shape
        .body(&format!("mock: injected huge error {MARK}"))
        .to_string();
    let (head, tail) = text.split_once(MARK).unwrap_or((text.as_str(), ""));
    let (head, tail) = (
        Bytes::copy_from_slice(head.as_bytes()),
        Bytes::copy_from_slice(tail.as_bytes()),
    );
    let mut left = bytes.saturating_sub((head.len() + tail.len()) as u64);
    let filler = stream::iter(std::iter::from_fn(move || {
        let n = left.min(FILLER.len() as u64) as usize;
        left -= n as u64;
        (n > 0).then(|| Bytes::from_static(&FILLER[..n]))
    }));
    let chunks = stream::iter([head])
        .chain(filler)
        .chain(stream::iter([tail]))
        .map(Ok::<_, std::io::Error>);
    let mut resp = Response::new(Body::from_stream(chunks));
    *resp.status_mut() = StatusCode::BAD_REQUEST;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Cuts a whole answer: half its bytes, then silence (stall) or a cut connection (close);
/// `malformed-chunk` answers half the body as if it were all of it.
async fn cut_whole(
    resp: Response,
    mode: FaultMode,
    (guard, usage): (RequestGuard, (u64, u64)),
) -> Response {
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        guard.fail();
        return Response::from_parts(parts, Body::empty());
    };
    let half = bytes.slice(..bytes.len() / 2);
    let body = match mode {
        FaultMode::MalformedChunk => {
            guard.complete_now(usage.0, usage.1);
            Body::from(half)
        }
        FaultMode::CloseMidStream => {
            let end = stream::once(async move {
                // Pending once so hyper flushes the half it holds before the error cuts it.
                tokio::task::yield_now().await;
                guard.fail();
                Err(std::io::Error::other("mock: injected close"))
            });
            Body::from_stream(stream::iter([Ok(half)]).chain(end))
        }
        _ => {
            let end = stream::once(async move {
                let _guard = guard;
                std::future::pending::<Result<Bytes, std::io::Error>>().await
            });
            Body::from_stream(stream::iter([Ok(half)]).chain(end))
        }
    };
    Response::from_parts(parts, body)
}
