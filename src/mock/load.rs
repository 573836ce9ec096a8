//! Load routes: `GET /metrics` (every kind), SGLang's `GET /get_load` and `GET /v1/loads`, and
//! the `POST /mock/load` control that fakes a queue or a failing metrics endpoint.
//!
//! SGLang shapes (`http_server.py`, `v1_loads.py`): `/get_load` is a list with one object per
//! data-parallel rank `{dp_rank, num_reqs, num_waiting_reqs, num_tokens, num_pending_tokens,
//! ts_tic}`; `/v1/loads` is `{timestamp, version, dp_rank_count, loads: [...], aggregate}`.
//! The mock has one rank, 0.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

use super::sched::Load;
use super::state::MockState;

/// The status set by `/mock/load`, when it is not 200.
fn failing(state: &MockState) -> Option<Response> {
    let status = state.sched.metrics_status();
    (status != StatusCode::OK)
        .then(|| (status, "mock: metrics_status set by /mock/load").into_response())
}

/// `GET /metrics`: Prometheus text.
pub(crate) async fn metrics(State(state): State<Arc<MockState>>) -> Response {
    if let Some(resp) = failing(&state) {
        return resp;
    }
    let body = state.metrics.render(&state.model(), &state.sched.load());
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
        .into_response()
}

/// `GET /get_load` (SGLang's older load route).
pub(crate) async fn get_load(State(state): State<Arc<MockState>>) -> Response {
    if let Some(resp) = failing(&state) {
        return resp;
    }
    let l = state.sched.load();
    let waiting = l.reported_waiting();
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Json(json!([{
        "dp_rank": 0,
        "num_reqs": l.running + waiting,
        "num_waiting_reqs": waiting,
        "num_tokens": l.held_tokens + l.waiting_tokens,
        "num_pending_tokens": l.waiting_tokens,
        "ts_tic": ts,
    }]))
    .into_response()
}

/// `GET /v1/loads` (SGLang's newer load route), JSON only.
pub(crate) async fn loads(State(state): State<Arc<MockState>>) -> Response {
    if let Some(resp) = failing(&state) {
        return resp;
    }
    let l = state.sched.load();
    let rank = rank(&l);
    let aggregate = json!({
        "total_running_reqs": l.running,
        "total_waiting_reqs": l.reported_waiting(),
        "total_reqs": l.running + l.reported_waiting(),
        "avg_token_usage": rank["token_usage"],
        "avg_throughput": 0.0,
        "avg_utilization": rank["utilization"],
    });
    Json(json!({
        "timestamp": humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
        "version": super::sglang::info::VERSION,
        "dp_rank_count": 1,
        "loads": [rank],
        "aggregate": aggregate,
    }))
    .into_response()
}

/// One rank's entry of `/v1/loads`.
fn rank(l: &Load) -> Value {
    let waiting = l.reported_waiting();
    let utilization = match l.max_running {
        Some(max) => l.running as f64 / f64::from(max.max(1)),
        None => 0.0,
    };
    json!({
        "dp_rank": 0,
        "num_running_reqs": l.running,
        "num_waiting_reqs": waiting,
        "num_used_tokens": l.held_tokens,
        "num_total_tokens": l.held_tokens + l.waiting_tokens,
        "max_total_num_tokens": l.cache_tokens,
        "token_usage": l.kv_usage(),
        "gen_throughput": 0.0,
        "cache_hit_rate": l.hit_rate(),
        "utilization": utilization,
        "max_running_requests": l.max_running.unwrap_or(0),
        "num_total_reqs": l.running + waiting,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadBody {
    /// Added to every reported waiting figure until set again; 0 clears.
    waiting: Option<u64>,
    /// Status of `/metrics` and the load routes; 200 restores.
    metrics_status: Option<u16>,
}

/// `POST /mock/load`.
pub(crate) async fn control(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let bad =
        |msg: String| (StatusCode::BAD_REQUEST, Json(json!({ "error": msg }))).into_response();
    let b: LoadBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return bad(format!("invalid control body: {e}")),
    };
    let status = match b.metrics_status.map(StatusCode::from_u16) {
        Some(Err(_)) => return bad("metrics_status must be an HTTP status (100-999)".into()),
        Some(Ok(s)) => Some(s),
        None => None,
    };
    if let Some(n) = b.waiting {
        state.sched.set_extra_waiting(n);
    }
    if let Some(s) = status {
        state.sched.set_metrics_status(s);
    }
    Json(json!({})).into_response()
}
