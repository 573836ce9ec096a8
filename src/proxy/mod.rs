//! `lingo serve`: the router, its shared state, and the layer stack around it.

pub(crate) mod admission;
mod aux;
mod aux_native;
pub mod drain;
mod fleet_status;
mod front;
pub(crate) mod gate;
pub(crate) mod generate;
mod layers;
mod respond;
pub(crate) mod server;
pub use server::bind;
mod state;

pub use server::default_max_connections;
pub use state::AppState;

use std::sync::Arc;

use axum::extract::State;
use axum::middleware;
use axum::routing::post;
use axum::Router;
use tower::util::option_layer;
use tower::{Layer, ServiceBuilder};

use crate::auth;
use crate::config::Config;
use crate::metrics::Metrics;

/// The proxy as a router: what in-process embedders and some tests drive. `lingo serve`
/// runs the same routes through `front`.
pub fn app(config: Config) -> Router {
    // `serve` reports a request log that cannot be opened as an error; a router built for a
    // test goes on without it.
    let metrics = build_metrics(&config).unwrap_or_else(|e| {
        tracing::error!(error = %e, "request log unavailable");
        Metrics::new()
    });
    app_with_metrics(config, Arc::new(metrics))
}

pub fn app_with_metrics(config: Config, metrics: Arc<Metrics>) -> Router {
    router(Arc::new(AppState::new(config, metrics)))
}

/// The service `lingo serve`'s connections call.
pub(crate) type Front = layers::Edge<front::Dispatch>;

/// The router over an existing state (so `serve` can warm the state up first).
pub fn router(state: Arc<AppState>) -> Router {
    routes(state, Some(layers::edge())).0
}

/// What `lingo serve`'s connections call: the router, with the generation routes served
/// without it when no router layer (auth, admission) wraps them.
fn front(state: Arc<AppState>) -> Front {
    let (routes, bare) = routes(state.clone(), None);
    layers::edge().layer(front::Dispatch::new(routes, bare.then_some(state)))
}

/// Every route under its layers, `Edge` outermost when given (`front` puts it around the
/// dispatch instead), and whether the generation routes have no other layer.
fn routes(state: Arc<AppState>, edge: Option<layers::EdgeLayer>) -> (Router, bool) {
    let body_timeout = state.config.timeouts.client_body;
    let gate = auth::gate::Gate::new(&state.config.auth, state.metrics.clone());
    // A gate or an admission layer with nothing to check is left out: each costs a boxed
    // clone of the service below it and a boxed future per request.
    let slots = state.admission.clone();
    let admission = slots
        .limits()
        .then(|| middleware::from_fn_with_state(slots, admission::admit));
    let gate = gate
        .guards()
        .then(|| middleware::from_fn_with_state(gate, auth::gate::check));
    let bare = admission.is_none() && gate.is_none();
    let body_limit = state.config.limits.max_request_body;
    let mut generation = Router::new();
    for (path, hot) in front::HOT {
        let handler = move |State(st), body| front::serve_hot(st, hot, body);
        let mut route = post(handler);
        if hot.takes_put() {
            route = route.put(handler);
        }
        generation = generation.route(path, route);
    }
    let routes = generation
        // Only generation takes an in-flight slot (the routes above; probes never do).
        .route_layer(option_layer(admission))
        // The generation routes read their body under `limits.max_request_body` and
        // `timeouts.client_body` themselves (`generate::ClientBody`, answering in the
        // client's dialect); axum's extractors on the other routes read it under these.
        .merge(
            aux::routes().layer(
                ServiceBuilder::new()
                    .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
                        body_timeout,
                    ))
                    .layer(axum::extract::DefaultBodyLimit::max(body_limit)),
            ),
        )
        .fallback(aux::not_found)
        .with_state(state);
    // Order, outermost first: a request id exists before anything logs and a panic anywhere
    // inside becomes a 500 rather than a dropped connection (`Edge`); a request without a
    // valid key goes no further (nor is its body read). Admission (above, generation routes
    // only) comes after auth, so unauthenticated requests never take an in-flight slot. One
    // `layer` call: each wraps every route once more.
    let layers = ServiceBuilder::new()
        .layer(option_layer(edge))
        .layer(option_layer(gate));
    (routes.layer(layers), bare)
}

/// Metrics as configured: lingo's own, plus compat names and the request log if asked.
pub fn build_metrics(config: &Config) -> std::io::Result<Metrics> {
    let mut m = Metrics::new();
    if config.metrics.disabled {
        m = m.disabled();
    }
    if config.metrics.compat == Some(crate::config::MetricsCompat::Vllm) {
        m = m.with_vllm_compat();
    }
    if let Some(target) = &config.metrics.request_log {
        m = m.with_log(crate::metrics::RequestLog::start(
            crate::metrics::LogTarget::parse(target),
        )?);
    }
    Ok(m)
}

/// Run the proxy on a bound listener until `shutdown` resolves, then drain (see `server`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = Arc::new(build_metrics(&config)?);
    let metrics_listen = config.metrics.listen;
    let state = Arc::new(AppState::new(config, metrics.clone()));
    state.warm_up().await;
    if let Some(addr) = metrics_listen {
        let l = tokio::net::TcpListener::bind(addr).await?;
        tracing::info!(metrics_listen = %l.local_addr()?, "metrics");
        let app = aux::metrics_only(metrics, state.drain.clone());
        tokio::spawn(async move { axum::serve(l, app).await });
    }
    server::run(listener, state, shutdown).await
}
