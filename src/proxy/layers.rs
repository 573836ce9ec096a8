//! The outermost layer, `Edge`: a request id on every request and its answer, and a panic
//! turned into a 500.
//!
//! One layer instead of tower-http's three (`SetRequestId`, `PropagateRequestId`,
//! `CatchPanic`): each of those wraps the future of every request once more, and the first
//! formats the id into a `String` and stores it again as a request extension that nothing
//! in lingo reads (the handlers read the header).

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::BytesMut;
use http::header::Entry;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service};

use crate::blocks;

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

static NEXT: AtomicU64 = AtomicU64::new(1);

/// Room for about fifty ids: the block they are cut from (`format_id`).
const ID_BLOCK: usize = 1 << 10;

thread_local! {
    /// Where this thread's ids are cut from (`blocks`): an id goes on the request and on its
    /// answer, and outlives its handler while the answer streams.
    static IDS: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(ID_BLOCK));
}

/// Ids are a per-process random prefix plus a counter: unique, cheap, and sortable.
#[derive(Clone, Copy)]
pub struct EdgeLayer {
    prefix: u32,
}

pub fn edge() -> EdgeLayer {
    EdgeLayer {
        prefix: rand::random(),
    }
}

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            inner,
            prefix: self.prefix,
        }
    }
}

#[derive(Clone)]
pub struct Edge<S> {
    inner: S,
    prefix: u32,
}

/// `{prefix:08x}-{n:x}`, written without a `String` in between.
fn format_id(prefix: u32, n: u64) -> HeaderValue {
    let mut buf = [0u8; 8 + 1 + 16];
    hex(&mut buf[..8], u64::from(prefix));
    buf[8] = b'-';
    let digits = (64 - n.leading_zeros()).div_ceil(4).max(1) as usize;
    hex(&mut buf[9..9 + digits], n);
    HeaderValue::from_maybe_shared(blocks::cut(&IDS, &buf[..9 + digits]))
        .expect("hex digits and a dash")
}

/// `v` in lowercase hex, right-aligned and zero-padded to fill `out`.
fn hex(out: &mut [u8], mut v: u64) {
    for b in out.iter_mut().rev() {
        *b = b"0123456789abcdef"[(v & 0xf) as usize];
        v >>= 4;
    }
}

impl<S, B> Service<Request<B>> for Edge<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> EdgeFuture<S::Future> {
        // One lookup each way (`entry`), where `get` then `insert` hashed the name twice.
        let id = match req.headers_mut().entry(X_REQUEST_ID) {
            Entry::Occupied(given) => given.get().clone(),
            Entry::Vacant(slot) => {
                let id = format_id(self.prefix, NEXT.fetch_add(1, Ordering::Relaxed));
                slot.insert(id.clone());
                id
            }
        };
        let inner = catch_unwind(AssertUnwindSafe(|| self.inner.call(req))).ok();
        EdgeFuture { inner, id }
    }
}

pin_project_lite::pin_project! {
    pub struct EdgeFuture<F> {
        // `None`: the call itself panicked.
        #[pin]
        inner: Option<F>,
        id: HeaderValue,
    }
}

impl<F> Future for EdgeFuture<F>
where
    F: Future<Output = Result<Response<Body>, Infallible>>,
{
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let polled = match this.inner.as_pin_mut() {
            Some(f) => catch_unwind(AssertUnwindSafe(|| f.poll(cx))).ok(),
            None => None,
        };
        let mut resp = match polled {
            Some(Poll::Pending) => return Poll::Pending,
            Some(Poll::Ready(Ok(resp))) => resp,
            None => on_panic(),
        };
        // A handler's own id (none sets one today) is kept.
        if let Entry::Vacant(slot) = resp.headers_mut().entry(X_REQUEST_ID) {
            // The future ends here: its id moves out rather than being shared once more.
            slot.insert(std::mem::replace(this.id, HeaderValue::from_static("")));
        }
        Poll::Ready(Ok(resp))
    }
}

/// A panic is a bug in lingo: answer 500 with a JSON body every dialect's clients can read.
fn on_panic() -> Response<Body> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn answer(path: &str, id: Option<&str>) -> Response<Body> {
        let app = axum::Router::new()
            .route("/ok", axum::routing::get(|| async { "ok" }))
            .route(
                "/echo",
                axum::routing::get(|h: http::HeaderMap| async move {
                    h.get("x-request-id").unwrap().to_str().unwrap().to_string()
                }),
            )
            .route(
                "/panic",
                axum::routing::get(|| async {
                    if true {
                        panic!("a bug");
                    }
                    "never"
                }),
            )
            .layer(EdgeLayer { prefix: 0xab });
        let mut req = Request::get(path);
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap()
    }

    fn id(r: &Response<Body>) -> String {
        r.headers()["x-request-id"].to_str().unwrap().to_string()
    }

    async fn text(r: Response<Body>) -> String {
        let b = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn every_request_and_its_answer_carry_one_id() {
        let a = answer("/echo", None).await;
        let given = id(&a);
        assert!(given.starts_with("000000ab-"), "{given}");
        assert!(given[9..].bytes().all(|b| b.is_ascii_hexdigit()), "{given}");
        assert_eq!(
            text(a).await,
            given,
            "the handler saw the id it answers with"
        );
        let b = answer("/ok", None).await;
        assert_ne!(id(&b), given, "ids are not reused");
        let kept = answer("/echo", Some("client-7")).await;
        assert_eq!(id(&kept), "client-7");
        assert_eq!(text(kept).await, "client-7");
    }

    #[tokio::test]
    async fn a_panic_is_a_500_with_a_json_error_and_the_id() {
        let r = answer("/panic", Some("p-1")).await;
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(id(&r), "p-1");
        let body: serde_json::Value = serde_json::from_str(&text(r).await).unwrap();
        assert_eq!(body["error"]["code"], 500);
    }

    #[test]
    fn ids_are_hex_without_padding_after_the_dash() {
        assert_eq!(format_id(0x1234, 0x1f), "00001234-1f");
        assert_eq!(format_id(u32::MAX, u64::MAX), "ffffffff-ffffffffffffffff");
        assert_eq!(format_id(0, 0), "00000000-0");
        assert_eq!(format_id(7, 0x10), format!("{:08x}-{:x}", 7, 0x10));
    }

    #[test]
    fn ids_kept_alive_stay_whole_past_a_block() {
        // As streams keep theirs: later ids are cut from new blocks (`blocks`).
        let kept: Vec<_> = (0..200u64).map(|n| (n, format_id(9, n))).collect();
        for (n, id) in &kept {
            assert_eq!(id, format!("00000009-{n:x}").as_str());
        }
    }
}
