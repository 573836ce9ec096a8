//! The service `lingo serve`'s connections call: the generation routes go straight to their
//! handler, everything else through the router.
//!
//! Why: through axum's router a generation request costs a path match, a clone of two boxed
//! route services, four boxed futures and four request extensions before its handler runs
//! (about a tenth of what passthrough spends on a request). The generation routes are a fixed
//! set of exact paths, so a table lookup finds them; the router still serves the rest, and
//! serves these too when auth or admission must wrap them (both are router layers).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::Router;
use futures_util::future::Either;
use http::{Method, Request};
use tower::Service;

use super::generate::{self, ClientBody};
use super::AppState;
use crate::dialect::Dialect;

/// A generation route: what its handler is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Hot {
    /// One dialect, streaming as the body says.
    Generate(Dialect),
    /// One dialect, always streaming (TGI's `/generate_stream`).
    Stream(Dialect),
    /// `/generate`, shared by SGLang, TGI and vLLM's legacy server: the body decides.
    Shared,
    /// TGI's compat route `/`, which its Python client posts to.
    TgiCompat,
}

/// Every generation route, by exact path. All take POST; `/generate` takes PUT too.
pub const HOT: [(&str, Hot); 10] = [
    ("/generate", Hot::Shared),
    ("/v1/completions", Hot::Generate(Dialect::OpenaiCompletions)),
    ("/v1/chat/completions", Hot::Generate(Dialect::OpenaiChat)),
    ("/generate_stream", Hot::Stream(Dialect::Tgi)),
    ("/", Hot::TgiCompat),
    ("/v1/messages", Hot::Generate(Dialect::Anthropic)),
    ("/completion", Hot::Generate(Dialect::Llamacpp)),
    ("/completions", Hot::Generate(Dialect::Llamacpp)),
    ("/api/generate", Hot::Generate(Dialect::OllamaGenerate)),
    ("/api/chat", Hot::Generate(Dialect::OllamaChat)),
];

impl Hot {
    pub fn takes_put(self) -> bool {
        self == Hot::Shared
    }

    fn find(method: &Method, path: &str) -> Option<Hot> {
        let (_, hot) = HOT.iter().find(|(p, _)| *p == path)?;
        let takes = *method == Method::POST || (*method == Method::PUT && hot.takes_put());
        takes.then_some(*hot)
    }
}

/// The handler of a generation route (the router's routes call it too).
pub async fn serve_hot(st: Arc<AppState>, hot: Hot, body: ClientBody) -> Response {
    let st = State(st);
    match hot {
        Hot::Generate(d) => generate::handle(st, d, body).await,
        Hot::Stream(d) => generate::handle_stream(st, d, body).await,
        Hot::Shared => generate::handle_generate(st, body).await,
        Hot::TgiCompat => generate::handle_tgi_compat(st, body).await,
    }
}

/// The router, and the state to serve the generation routes with when nothing wraps them.
#[derive(Clone)]
pub struct Dispatch {
    routes: Router,
    direct: Option<Arc<AppState>>,
}

impl Dispatch {
    /// `direct`: the state, when the generation routes need no router layer.
    pub fn new(routes: Router, direct: Option<Arc<AppState>>) -> Dispatch {
        Dispatch { routes, direct }
    }
}

type HotFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<B> Service<Request<B>> for Dispatch
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<HotFuture, <Router as Service<Request<B>>>::Future>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let hot = self.direct.as_ref().and_then(|st| {
            let hot = Hot::find(req.method(), req.uri().path())?;
            Some((st.clone(), hot))
        });
        let Some((st, hot)) = hot else {
            return Either::Right(self.routes.call(req));
        };
        Either::Left(boxed(st, hot, req.map(Body::new)))
    }
}

/// The request's future: small (the body reader and what the handler needs), with the
/// handler's own (about 8 KiB) boxed apart once the body is read. Boxed whole here, that
/// one was built on the stack and copied twice into its box, which showed in profiles.
fn boxed(st: Arc<AppState>, hot: Hot, req: Request<Body>) -> HotFuture {
    // The handlers read only the headers and the body.
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    Box::pin(async move {
        let body = ClientBody::take(headers, body, ClientBody::limits(&st)).await;
        Ok(Box::pin(serve_hot(st, hot, body)).await)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_routes_are_found_by_exact_path_and_method() {
        assert_eq!(
            Hot::find(&Method::POST, "/v1/completions"),
            Some(Hot::Generate(Dialect::OpenaiCompletions))
        );
        assert_eq!(Hot::find(&Method::PUT, "/generate"), Some(Hot::Shared));
        assert_eq!(Hot::find(&Method::PUT, "/v1/completions"), None);
        assert_eq!(Hot::find(&Method::GET, "/generate"), None);
        assert_eq!(Hot::find(&Method::POST, "/v1/completions/"), None);
        assert_eq!(Hot::find(&Method::POST, "/metrics"), None);
        assert_eq!(Hot::find(&Method::POST, "/"), Some(Hot::TgiCompat));
    }
}
