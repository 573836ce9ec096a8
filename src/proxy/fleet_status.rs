//! `GET /fleet` (every pool and endpoint as JSON) and a fleet's `/health`.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{json, Value};

use super::AppState;
use crate::fleet::mirror::Mirror;
use crate::fleet::{Endpoint, Health};

pub async fn fleet(State(st): State<Arc<AppState>>) -> Response {
    st.fleet.first_use().await;
    let pools: Vec<Value> = st
        .fleet
        .pools()
        .iter()
        .map(|p| {
            let mut endpoints: Vec<Value> = p.endpoints().iter().map(|e| endpoint(e)).collect();
            endpoints.extend(p.draining().iter().map(|e| endpoint(e)));
            json!({
                "name": &*p.name,
                "policy": p.policy.label(),
                "models": p.model_cards().into_iter().map(|c| c.id).collect::<Vec<_>>(),
                "default": Arc::ptr_eq(p, st.fleet.default_pool()),
                "retries": p.retries,
                "endpoints": endpoints,
                "mirror": p.mirror.as_deref().map(mirror),
            })
        })
        .collect();
    axum::Json(json!({ "pools": pools })).into_response()
}

/// A pool's shadow deployment: what it gets, what it has open, and its endpoints.
fn mirror(m: &Mirror) -> Value {
    let endpoints: Vec<Value> = m.pool.endpoints().iter().map(|e| endpoint(e)).collect();
    json!({
        "group": m.group,
        "fraction": m.fraction,
        "max_in_flight": m.max_in_flight,
        "in_flight": m.in_flight(),
        "endpoints": endpoints,
    })
}

fn endpoint(e: &Endpoint) -> Value {
    let last_error = e.last_error().map(|(message, at)| {
        let at = at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        json!({"message": message, "at_unix": at})
    });
    // The engine's own figures, while fresh (null otherwise: see `fleet::load`).
    let engine = e.engine.fresh().map(|(s, age)| {
        json!({"waiting": s.waiting, "running": s.running, "kv_cache_usage": s.kv_usage,
               "age_ms": age.as_millis() as u64})
    });
    json!({
        "url": e.shown,
        "kind": e.kind_now().map(|k| k.label()),
        "group": &*e.group,
        "state": e.health().label(),
        "in_flight": e.in_flight(),
        "load": e.load(),
        "engine": engine,
        "requests": e.requests(),
        "ejections": e.ejections(),
        "weight": e.weight,
        "last_error": last_error,
    })
}

/// 200 when every pool has a healthy endpoint (old scripts poll `/health`), else 503 naming
/// the pools without one.
pub async fn health(st: &AppState) -> Response {
    // The probes' state (their first round runs now if nothing has started them).
    st.fleet.first_use().await;
    let down: Vec<String> = st
        .fleet
        .pools()
        .iter()
        .filter(|p| !p.endpoints().iter().any(|e| e.health() == Health::Healthy))
        .map(|p| p.name.to_string())
        .collect();
    if down.is_empty() {
        return (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response();
    }
    let body = json!({"status": "unhealthy", "pools_without_healthy_endpoint": down});
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}
