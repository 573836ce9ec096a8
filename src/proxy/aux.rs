//! The endpoints clients call around generation: health, model and server info (SGLang's, and
//! TGI's `/info`), cache flushes, the model list, and `/metrics`. Forwarded where the upstream
//! has them, answered by lingo where it does not.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{header, Method, StatusCode, Uri};
use serde_json::{json, Value};

use super::AppState;
use crate::dialect::Dialect;
use crate::error::ProxyError;
use crate::fleet::{Endpoint, Health};
use crate::upstream::Kind;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(health))
        .route("/health_generate", get(health_generate))
        .route("/get_model_info", get(model_info))
        .route("/model_info", get(model_info))
        .route("/get_server_info", get(server_info))
        .route("/server_info", get(server_info))
        .route("/flush_cache", get(flush_cache).post(flush_cache))
        .route("/v1/models", get(models))
        .route("/info", get(info))
        .route("/metrics", get(metrics))
        .route("/fleet", get(super::fleet_status::fleet))
        .route("/live", get(|| async { (StatusCode::OK, "live\n") }))
        .route(
            "/ready",
            get(|State(st): St| async move { ready(&st.drain) }),
        )
        .merge(super::aux_native::routes())
}

/// Unknown paths get a 404 in OpenAI's shape (the most widely parsed one).
pub async fn not_found(uri: Uri) -> Response {
    let err = ProxyError::invalid("", format!("no route for {}", uri.path()));
    let body = Dialect::OpenaiCompletions.error_body(&err);
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Forward a request to the same path upstream and relay status, type and body.
pub(super) async fn forward(st: &AppState, method: Method, path: &str) -> Response {
    forward_body(st, method, path, Bytes::new()).await
}

/// `forward`, with a request body.
pub(super) async fn forward_body(
    st: &AppState,
    method: Method,
    path: &str,
    body: Bytes,
) -> Response {
    match st.aux_endpoint().await {
        Ok((ep, _)) => forward_to(&ep, method, path, body).await,
        Err(e) => upstream_error(&e),
    }
}

/// Send to one endpoint and relay status, type and body.
pub(super) async fn forward_to(ep: &Endpoint, method: Method, path: &str, body: Bytes) -> Response {
    let resp = match ep.client.send(method, path, body, &[]).await {
        Ok(r) => r,
        Err(e) => return upstream_error(&e),
    };
    let status = resp.status;
    let ct = resp.content_type.clone();
    match resp.bytes().await {
        Ok(body) => {
            let mut r = Response::new(Body::from(body));
            *r.status_mut() = status;
            if let Some(ct) = ct {
                r.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            r
        }
        Err(e) => upstream_error(&e),
    }
}

pub(super) fn upstream_error(e: &ProxyError) -> Response {
    let body = Dialect::OpenaiCompletions.error_body(e);
    (
        e.status(),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

pub(super) async fn kind(st: &AppState) -> Result<Kind, Response> {
    st.aux_endpoint()
        .await
        .map(|(_, k)| k)
        .map_err(|e| upstream_error(&e))
}

/// The shown URL of the endpoint the routes around generation speak to.
async fn aux_base(st: &AppState) -> String {
    match st.aux_endpoint().await {
        Ok((ep, _)) => ep.shown.clone(),
        Err(_) => String::new(),
    }
}

async fn health(State(st): St) -> Response {
    if !st.fleet.is_single() {
        return super::fleet_status::health(&st).await;
    }
    match kind(&st).await {
        Ok(Kind::Ollama) => super::aux_native::ollama_health(&st).await,
        // The OpenAI API has no health route: a model list that answers is the sign of life.
        Ok(Kind::Openai) => match forward(&st, Method::GET, "/v1/models").await {
            r if r.status().is_success() => StatusCode::OK.into_response(),
            r => r,
        },
        _ => forward(&st, Method::GET, "/health").await,
    }
}

/// SGLang runs a one-token generation; elsewhere the upstream's `/health` is the best proxy.
async fn health_generate(State(st): St) -> Response {
    match kind(&st).await {
        Ok(Kind::Sglang) => forward(&st, Method::GET, "/health_generate").await,
        Ok(Kind::Vllm | Kind::Tgi | Kind::Llamacpp | Kind::Ollama | Kind::Openai) => {
            health(State(st)).await
        }
        Err(r) => r,
    }
}

/// `?model=` on an auxiliary route, if given: which pool's endpoint answers it.
pub(super) fn named_model(uri: &Uri) -> Option<String> {
    let q = axum::extract::Query::<std::collections::BTreeMap<String, String>>::try_from_uri(uri);
    q.ok()?.0.remove("model").filter(|m| !m.is_empty())
}

/// SGLang's own on an SGLang endpoint, else SGLang's shape for the model: the default
/// pool's, or the pool serving `?model=` in a fleet.
async fn model_info(State(st): St, uri: Uri) -> Response {
    let named = named_model(&uri);
    let kind = st.aux_endpoint_for(named.as_deref()).await;
    match kind {
        Ok((ep, Kind::Sglang)) => forward_to(&ep, Method::GET, uri.path(), Bytes::new()).await,
        Ok(_) => {
            let model = match named {
                Some(m) => Ok(m),
                None => st.default_model().await,
            };
            match model {
                Ok(m) => axum::Json(json!({
                    "model_path": m, "tokenizer_path": m, "is_generation": true,
                    "preferred_sampling_params": null, "weight_version": "default",
                    "has_image_understanding": false, "has_audio_understanding": false,
                }))
                .into_response(),
                Err(e) => upstream_error(&e),
            }
        }
        Err(e) => upstream_error(&e),
    }
}

/// lingo always streams `/generate` cumulatively to its clients when it translates, so that
/// is what it reports; an SGLang upstream (passthrough) reports its own mode.
async fn server_info(State(st): St, uri: Uri) -> Response {
    match kind(&st).await {
        Ok(Kind::Sglang) => forward(&st, Method::GET, uri.path()).await,
        Ok(k @ (Kind::Vllm | Kind::Tgi | Kind::Llamacpp | Kind::Ollama | Kind::Openai)) => {
            let model = st.default_model().await.unwrap_or_default();
            axum::Json(json!({
                "model_path": model, "served_model_name": model,
                "incremental_streaming_output": false, "stream_output": false,
                "internal_states": [{}],
                "version": concat!("lingo-", env!("CARGO_PKG_VERSION")),
                "lingo": {"upstream": aux_base(&st).await, "upstream_kind": k.label()},
            }))
            .into_response()
        }
        Err(r) => r,
    }
}

/// SGLang's cache flush. A single SGLang upstream answers for itself. In a fleet every
/// healthy SGLang endpoint is flushed (a benchmark that flushes between runs means all of
/// them), and a failure names where. Other kinds have no flush lingo can reach: nothing to do.
async fn flush_cache(State(st): St, method: Method) -> Response {
    if st.fleet.is_single() {
        return match kind(&st).await {
            Ok(Kind::Sglang) => forward(&st, method, "/flush_cache").await,
            Ok(_) => (StatusCode::OK, "Cache flushed.\n").into_response(),
            Err(r) => r,
        };
    }
    st.fleet.first_use().await;
    let targets: Vec<Arc<Endpoint>> = st
        .fleet
        .pools()
        .iter()
        .flat_map(|p| p.endpoints().iter().cloned().collect::<Vec<_>>())
        .filter(|e| e.health() == Health::Healthy && e.kind_now() == Some(Kind::Sglang))
        .collect();
    let flushes = targets
        .iter()
        .map(|e| forward_to(e, method.clone(), "/flush_cache", Bytes::new()));
    let answers = futures_util::future::join_all(flushes).await;
    let failed: Vec<String> = targets
        .iter()
        .zip(&answers)
        .filter(|(_, r)| !r.status().is_success())
        .map(|(e, r)| format!("{}/{} ({})", e.pool, e.label, r.status().as_u16()))
        .collect();
    if failed.is_empty() {
        return (StatusCode::OK, "Cache flushed.\n").into_response();
    }
    let (n, of) = (failed.len(), targets.len());
    let text = format!(
        "Cache flush failed on {n} of {of} endpoints: {}\n",
        failed.join(", ")
    );
    (StatusCode::BAD_GATEWAY, text).into_response()
}

/// TGI's `/info`: a TGI upstream's own; elsewhere what lingo knows, in TGI's shape (the
/// context length from the model list when the upstream gives one).
async fn info(State(st): St) -> Response {
    let kind = match kind(&st).await {
        Ok(Kind::Tgi) if st.fleet.is_single() => return forward(&st, Method::GET, "/info").await,
        Ok(k) => k,
        Err(r) => return r,
    };
    let model = match st.default_model().await {
        Ok(m) => m,
        Err(e) => return upstream_error(&e),
    };
    let total = st
        .models
        .cards()
        .into_iter()
        .find(|c| c.id == model)
        .and_then(|c| c.max_model_len);
    axum::Json(json!({
        "model_id": model, "model_sha": null, "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": 128, "max_best_of": 1,
        "max_stop_sequences": crate::dialect::tgi::MAX_STOP_SEQUENCES,
        "max_input_tokens": total.map(|t| t.saturating_sub(1)), "max_total_tokens": total,
        "validation_workers": 1, "max_client_batch_size": 1,
        "router": "lingo", "version": env!("CARGO_PKG_VERSION"), "sha": null,
        "docker_label": null,
        "lingo": {"upstream": aux_base(&st).await, "upstream_kind": kind.label()},
    }))
    .into_response()
}

/// The upstream's list, plus one entry per configured alias; for a fleet, every endpoint's
/// list merged and deduplicated (re-read at most every few seconds).
async fn models(State(st): St) -> Response {
    if !st.fleet.is_single() {
        return merged_models(&st).await;
    }
    let ep = match st.aux_endpoint().await {
        Ok((ep, _)) => ep,
        Err(e) => return upstream_error(&e),
    };
    let resp = match ep.client.get("/v1/models").await {
        Ok(r) => r,
        Err(e) => return upstream_error(&e),
    };
    let status = resp.status;
    let body = match resp.bytes().await {
        Ok(b) => b,
        Err(e) => return upstream_error(&e),
    };
    let Ok(mut v) = serde_json::from_slice::<Value>(&body) else {
        return (status, body).into_response();
    };
    if let Some(data) = v.get_mut("data").and_then(Value::as_array_mut) {
        let template = data
            .first()
            .cloned()
            .unwrap_or_else(|| json!({"object": "model"}));
        for (alias, target) in st.models.aliases() {
            let mut card = template.clone();
            card["id"] = json!(alias);
            card["root"] = json!(target);
            data.push(card);
        }
    }
    (status, axum::Json(v)).into_response()
}

async fn merged_models(st: &AppState) -> Response {
    st.refresh_models(false).await;
    let owner = |id: &str| {
        st.fleet
            .pools()
            .iter()
            .find(|p| p.serves(id))
            .map(|p| p.name.to_string())
    };
    let mut data: Vec<Value> = st
        .models
        .cards()
        .into_iter()
        .map(|c| {
            let mut card = json!({"id": c.id, "object": "model", "created": 0,
                "owned_by": c.owned_by.unwrap_or_else(|| "lingo".into()), "root": c.id});
            if let Some(n) = c.max_model_len {
                card["max_model_len"] = json!(n);
            }
            if let Some(p) = owner(&c.id) {
                card["lingo_pool"] = json!(p);
            }
            card
        })
        .collect();
    for (alias, target) in st.models.aliases() {
        if !data.iter().any(|c| c["id"] == json!(alias)) {
            data.push(json!({"id": alias, "object": "model", "created": 0,
                "owned_by": "lingo", "root": target}));
        }
    }
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// Off the client port when `metrics.on_client_port` is false: then `metrics.listen` is the
/// only place to read them, and the client port answers as for any unknown path.
async fn metrics(State(st): St, uri: Uri) -> Response {
    if !st.config.metrics.on_client_port {
        return not_found(uri).await;
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        st.metrics.render(),
    )
        .into_response()
}

/// A router with only `/metrics`, for `metrics.listen`.
/// Readiness, lingo's own (not the upstream's): 200 while serving, 503 once draining, so a
/// load balancer stops sending before the listener closes.
fn ready(drain: &super::drain::Drain) -> Response {
    if drain.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response()
    } else {
        (StatusCode::OK, "ready\n").into_response()
    }
}

/// The metrics listener: `/metrics`, and `/ready` (it stays open while the client port drains).
pub fn metrics_only(metrics: Arc<crate::metrics::Metrics>, drain: super::drain::Drain) -> Router {
    Router::new()
        .route("/ready", get(move || async move { ready(&drain) }))
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        m.render(),
                    )
                }
            }),
        )
}
