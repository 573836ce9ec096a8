//! `lingo serve`: the router, its shared state, and the layer stack around it.

mod aux;
mod generate;
mod layers;
mod respond;
mod state;

pub use state::AppState;

use std::sync::Arc;

use axum::routing::post;
use axum::Router;
use tower::ServiceBuilder;

use crate::config::Config;
use crate::dialect::Dialect;
use crate::metrics::Metrics;

/// The proxy as a router: what `lingo serve` runs and what tests drive.
pub fn app(config: Config) -> Router {
    app_with_metrics(config, Arc::new(Metrics::new()))
}

pub fn app_with_metrics(config: Config, metrics: Arc<Metrics>) -> Router {
    router(Arc::new(AppState::new(config, metrics)))
}

/// The router over an existing state (so `serve` can warm the state up first).
pub fn router(state: Arc<AppState>) -> Router {
    let body_timeout = state.config.timeouts.client_body;
    let gen = |d: Dialect| move |s, h, b| generate::handle(s, d, h, b);
    let routes = Router::new()
        .route(
            "/generate",
            post(gen(Dialect::Sglang)).put(gen(Dialect::Sglang)),
        )
        .route("/v1/completions", post(gen(Dialect::OpenaiCompletions)))
        .route("/v1/chat/completions", post(gen(Dialect::OpenaiChat)))
        .merge(aux::routes())
        .fallback(aux::not_found)
        .with_state(state);
    // Order, outermost first: a request id exists before anything logs; a panic anywhere
    // inside becomes a 500 rather than a dropped connection; slow clients cannot hold a
    // worker reading their body forever.
    routes.layer(
        ServiceBuilder::new()
            .layer(layers::request_id())
            .layer(layers::propagate_request_id())
            .layer(layers::catch_panic())
            .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
                body_timeout,
            )),
    )
}

/// Run the proxy on a bound listener until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = Arc::new(AppState::new(config, Arc::new(Metrics::new())));
    state.warm_up().await;
    use axum::serve::ListenerExt;
    // Streams are many small writes: Nagle's algorithm would hold tokens back.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
