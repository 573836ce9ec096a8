//! `lingo serve`: the router, its shared state, and the layer stack around it.

pub(crate) mod admission;
mod aux;
mod aux_native;
pub mod drain;
mod fleet_status;
mod generate;
mod layers;
mod respond;
mod server;
mod state;

pub use server::default_max_connections;
pub use state::AppState;

use std::sync::Arc;

use axum::middleware;
use axum::routing::post;
use axum::Router;
use tower::util::option_layer;
use tower::ServiceBuilder;

use crate::auth;
use crate::config::Config;
use crate::dialect::Dialect;
use crate::metrics::Metrics;

/// The proxy as a router: what `lingo serve` runs and what tests drive.
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

/// The router over an existing state (so `serve` can warm the state up first).
pub fn router(state: Arc<AppState>) -> Router {
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
    let body_limit = state.config.limits.max_request_body;
    let gen = |d: Dialect| move |s, b| generate::handle(s, d, b);
    let gen_stream = |d: Dialect| move |s, b| generate::handle_stream(s, d, b);
    let routes = Router::new()
        // Shared by SGLang, TGI and vLLM's legacy server: the body decides.
        .route(
            "/generate",
            post(generate::handle_generate).put(generate::handle_generate),
        )
        .route("/v1/completions", post(gen(Dialect::OpenaiCompletions)))
        .route("/v1/chat/completions", post(gen(Dialect::OpenaiChat)))
        .route("/generate_stream", post(gen_stream(Dialect::Tgi)))
        // TGI's compat route, which its Python client (`text-generation`) posts to.
        .route("/", post(generate::handle_tgi_compat))
        .route("/v1/messages", post(gen(Dialect::Anthropic)))
        .route("/completion", post(gen(Dialect::Llamacpp)))
        .route("/completions", post(gen(Dialect::Llamacpp)))
        .route("/api/generate", post(gen(Dialect::OllamaGenerate)))
        .route("/api/chat", post(gen(Dialect::OllamaChat)))
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
    // Order, outermost first: a request id exists before anything logs; a panic anywhere
    // inside becomes a 500 rather than a dropped connection; a request without a valid key
    // goes no further (nor is its body read). Admission (above, generation routes only)
    // comes after auth, so unauthenticated requests never take an in-flight slot.
    routes.layer(
        ServiceBuilder::new()
            .layer(layers::edge())
            .layer(option_layer(gate)),
    )
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
