//! The generation endpoints: pass through when the upstream speaks the client's dialect,
//! translate through the canonical model otherwise.

mod body;
pub(crate) mod glance;
mod passthrough;
mod shadow;
mod translate;

pub use body::ClientBody;

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::HeaderMap;

use super::{respond, AppState};
use crate::config::Policy;
use crate::dialect::Dialect;
use crate::error::ProxyError;
use crate::fleet::{prefix, Endpoint, Key, Pool, Reason};
use crate::upstream::{Kind, Route};
use glance::{Glance, Lazy};

pub async fn handle(
    State(st): State<Arc<AppState>>,
    dialect: Dialect,
    ClientBody { headers, body }: ClientBody,
) -> Response {
    let at = respond::Arrival::new(&st, dialect, &headers);
    match body {
        Ok(body) => run(&st, dialect, &at, &headers, body).await,
        Err(e) => refuse(&st, dialect, &at, &e),
    }
}

/// TGI's `POST /generate_stream`: the route, not the body, asks for a stream.
pub async fn handle_stream(
    State(st): State<Arc<AppState>>,
    dialect: Dialect,
    ClientBody { headers, body }: ClientBody,
) -> Response {
    let mut at = respond::Arrival::new(&st, dialect, &headers);
    at.stream = true;
    match body {
        Ok(body) => run(&st, dialect, &at, &headers, body).await,
        Err(e) => refuse(&st, dialect, &at, &e),
    }
}

/// A request refused before anything was decoded (its body could not be read).
fn refuse(
    st: &AppState,
    dialect: Dialect,
    at: &respond::Arrival,
    e: &crate::error::ProxyError,
) -> Response {
    respond::error(st, respond::record(st, dialect, None, at), dialect, e)
}

/// What an attempt gives back: the response, or a failure before any output that may go to
/// another endpoint (the handler gave the record back to the arrival).
type Attempt = Result<Response, ProxyError>;

async fn run(
    st: &Arc<AppState>,
    dialect: Dialect,
    at: &respond::Arrival,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let glance = Lazy::new(&body);
    let (pool, key) = match route(st, headers, &glance).await {
        Ok(p) => p,
        Err(e) => {
            let rec = respond::record(st, dialect, None, at);
            return respond::error(st, rec, dialect, &e);
        }
    };
    // Spawned: the client's request goes on as if there were no mirror.
    shadow::start(st, &pool, dialect, at.stream, headers, &body);
    attempts(st, dialect, at, headers, &body, &glance, &pool, &key).await
}

/// The request on `pool`: an endpoint by its policy, the route by that endpoint's kind, and
/// other endpoints after a failure before any output (up to `pool.retries`, in the budget).
#[allow(clippy::too_many_arguments)]
async fn attempts(
    st: &AppState,
    dialect: Dialect,
    at: &respond::Arrival,
    headers: &HeaderMap,
    body: &Bytes,
    glance: &Lazy<'_>,
    pool: &Pool,
    key: &Key,
) -> Response {
    pool.budget.request();
    // Inline: most requests try one endpoint, and a heap Vec was a malloc per request.
    let mut tried: smallvec::SmallVec<[Arc<Endpoint>; 2]> = smallvec::SmallVec::new();
    let mut last: Option<ProxyError> = None;
    loop {
        let (ep, kind) = match choose(st, pool, key, &tried).await {
            Ok(p) => p,
            // After a failed attempt, its error says more than "nothing left to try".
            Err(e) => {
                let e = last.unwrap_or(e);
                return respond::error(st, at.take(st, dialect), dialect, &e);
            }
        };
        at.hold(&ep.group, ep.take());
        tried.push(ep.clone());
        let retry = tried.len() <= pool.retries as usize
            && pool.has_other(&tried)
            && pool.budget.has_room();
        // The route is chosen after the endpoint, from that endpoint's kind (so each attempt
        // in a mixed pool speaks its own endpoint's dialect).
        let attempt = match kind.route(dialect) {
            Route::Passthrough => {
                let body = body.clone();
                passthrough::handle(st, &ep, kind, dialect, headers, body, glance, at, retry).await
            }
            Route::Translate(target) => {
                let way = (dialect, target);
                // Boxed: the translation's future is twice the passthrough's, and inline it
                // made every future above this one (the handler's, boxed and copied whole
                // per request) 2 KiB larger on the passthrough path too.
                let body = body.clone();
                Box::pin(translate::handle(
                    st, &ep, kind, way, headers, body, at, retry,
                ))
                .await
            }
        };
        let e = match attempt {
            Ok(resp) => return resp,
            Err(e) => e,
        };
        let reason = Reason::of(&e).unwrap_or(Reason::Reset);
        at.release(reason.outcome());
        if !pool.budget.try_retry() {
            return respond::error(st, at.take(st, dialect), dialect, &e);
        }
        tracing::info!(pool = &*pool.name, endpoint = ep.shown, reason = reason.label(), error = %e, "trying another endpoint");
        st.metrics.endpoint_retried(&pool.name, reason.label());
        last = Some(e);
    }
}

/// A failed send before any output: back to the retry loop when it may go elsewhere (the
/// record given back to the arrival), else the client's error now.
fn failed(
    st: &AppState,
    rec: crate::metrics::OpenRecord,
    dialect: Dialect,
    e: ProxyError,
    at: &respond::Arrival,
    retry: bool,
) -> Attempt {
    if retry && Reason::of(&e).is_some() {
        at.restore(rec);
        return Err(e);
    }
    Ok(respond::error(st, rec, dialect, &e))
}

/// The pool by the request's model, and the request's key for the pool's policy: the
/// session header (else the OpenAI `user` field) under `session`, the prompt's prefix under
/// `prefix_affinity`. The body is read here only when routing needs it (several pools, a
/// session without its header, a prefix); a body that does not parse is left to the
/// handler's decoder to refuse.
async fn route(
    st: &AppState,
    headers: &HeaderMap,
    glance: &Lazy<'_>,
) -> Result<(Arc<Pool>, Key), ProxyError> {
    let fleet = &st.fleet;
    let header = |p: &Pool| {
        (p.policy == Policy::Session)
            .then(|| headers.get(&p.session_header)?.to_str().ok())
            .flatten()
            .map(str::to_string)
    };
    let single = (!fleet.routes_by_model()).then(|| fleet.default_pool());
    let reads_body = |p: &Pool| match p.policy {
        Policy::Session => header(p).is_none(),
        Policy::PrefixAffinity => true,
        _ => false,
    };
    let empty = Glance::default();
    let g = match single {
        Some(p) if !reads_body(p) => &empty,
        _ => glance.get().as_ref().unwrap_or(&empty),
    };
    let pool = st.pool_for(g.model.as_deref()).await?;
    fleet.first_use().await;
    let key = match pool.policy {
        Policy::Session => header(&pool).or_else(|| g.user.clone()).map(Key::Session),
        Policy::PrefixAffinity => {
            prefix::key(glance.body(), &g.span, pool.prefix_len).map(Key::Prefix)
        }
        _ => None,
    };
    Ok((pool, key.unwrap_or(Key::None)))
}

/// The endpoint by the pool's policy (none of `tried`), and its kind.
async fn choose(
    st: &AppState,
    pool: &Pool,
    key: &Key,
    tried: &[Arc<Endpoint>],
) -> Result<(Arc<Endpoint>, Kind), ProxyError> {
    let ep = st.fleet.pick(pool, key, tried).await?;
    let kind = ep.kind().await.ok_or_else(|| {
        ProxyError::UpstreamUnreachable(format!("could not detect the kind of `{}`", ep.group))
    })?;
    Ok((ep, kind))
}

/// `POST /generate`, shared by three dialects: pick one by the body's shape.
pub async fn handle_generate(st: State<Arc<AppState>>, req: ClientBody) -> Response {
    // Before the body is known, SGLang's shape speaks for the route.
    let dialect = match &req.body {
        Ok(bytes) => crate::dialect::generate_dialect(bytes),
        Err(_) => Ok(Dialect::Sglang),
    };
    match dialect {
        Ok(d) => handle(st, d, req).await,
        Err(e) => {
            let at = respond::Arrival::new(&st, Dialect::Sglang, &req.headers);
            let rec = respond::record(&st, Dialect::Sglang, None, &at);
            respond::error(&st, rec, Dialect::Sglang, &e)
        }
    }
}

/// TGI's compat route `POST /`: a body `stream: true` is `/generate_stream`; otherwise it is
/// `/generate` with the answer in a one-element array.
pub async fn handle_tgi_compat(st: State<Arc<AppState>>, req: ClientBody) -> Response {
    #[derive(serde::Deserialize)]
    struct Compat {
        #[serde(default)]
        stream: bool,
    }
    // A body that does not parse gets its error from the TGI decoder.
    let stream = req
        .body
        .as_ref()
        .is_ok_and(|b| serde_json::from_slice::<Compat>(b).is_ok_and(|c| c.stream));
    if stream {
        return handle_stream(st, Dialect::Tgi, req).await;
    }
    let limit = st.config.limits.max_upstream_body.saturating_mul(2);
    let resp = handle(st, Dialect::Tgi, req).await;
    if !resp.status().is_success() {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    // Whole answers are small and already complete: reading one here ends its metering a
    // copy earlier than the client sees it, which is all this costs. lingo's encoding of an
    // answer the upstream sent within `max_upstream_body` stays within twice that.
    let Ok(inner) = axum::body::to_bytes(body, limit).await else {
        return http::StatusCode::BAD_GATEWAY.into_response();
    };
    let mut wrapped = Vec::with_capacity(inner.len() + 2);
    wrapped.push(b'[');
    wrapped.extend_from_slice(&inner);
    wrapped.push(b']');
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(wrapped))
}

/// Whether an upstream error says the model does not exist (so the model list is stale).
fn is_model_not_found(status: u16, message: &str) -> bool {
    status == 404 && (message.contains("does not exist") || message.contains("not found"))
}
