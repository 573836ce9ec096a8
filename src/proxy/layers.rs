//! The cross-cutting layers: request ids and panic rescue.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Ids are a per-process random prefix plus a counter: unique, cheap, and sortable.
#[derive(Clone)]
pub struct MakeId {
    prefix: u32,
}

static NEXT: AtomicU64 = AtomicU64::new(1);

impl MakeRequestId for MakeId {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("{:08x}-{n:x}", self.prefix);
        HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

pub fn request_id() -> SetRequestIdLayer<MakeId> {
    SetRequestIdLayer::new(
        X_REQUEST_ID,
        MakeId {
            prefix: rand::random(),
        },
    )
}

pub fn propagate_request_id() -> PropagateRequestIdLayer {
    PropagateRequestIdLayer::new(X_REQUEST_ID)
}

type PanicHandler = fn(Box<dyn std::any::Any + Send>) -> Response<Body>;

/// A panic is a bug in lingo: answer 500 with a JSON body every dialect's clients can read.
pub fn catch_panic() -> CatchPanicLayer<PanicHandler> {
    CatchPanicLayer::custom(on_panic as PanicHandler)
}

fn on_panic(_: Box<dyn std::any::Any + Send>) -> Response<Body> {
    tracing::error!("handler panicked");
    let body = r#"{"error":{"message":"internal error in lingo","type":"InternalServerError","code":500}}"#;
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
