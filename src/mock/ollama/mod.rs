//! Ollama's native API (dialects.md section 5): `POST /api/generate`, `POST /api/chat`,
//! `GET /api/tags`, `POST /api/show`, `GET /api/version`, `GET /` and its OpenAI-style
//! `GET /v1/models`.
//!
//! What it imitates: `model` is required and must be served (`name` or `name:latest`), else
//! 404 `{"error":"model 'x' not found"}`; `stream` defaults to true (NDJSON,
//! `application/x-ndjson`); `num_predict` -1 (the default) runs to the context; `/api/generate`
//! applies the chat template (system, then the prompt as a user turn) unless `raw`, and its
//! final object carries `context`; an empty prompt (or no messages) only "loads" the model
//! (`done_reason: "load"`); durations are nanoseconds measured by the mock, and zero counts
//! are omitted. Errors are `{"error":"msg"}`, mid-stream an NDJSON error line.
//! Not simulated: `format` (accepted; the mock's words are not JSON), images, tools,
//! thinking, `keep_alive`, model management.

mod encode;
mod request;

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use super::state::MockState;

/// The Ollama release the mock claims to be.
const VERSION: &str = "0.12.0";

pub(crate) fn routes() -> Router<Arc<MockState>> {
    Router::new()
        .route("/", get(|| async { "Ollama is running" }))
        .route("/api/generate", post(request::generate))
        .route("/api/chat", post(request::chat))
        .route("/api/tags", get(tags))
        .route("/api/show", post(show))
        .route(
            "/api/version",
            get(|| async { Json(json!({ "version": VERSION })) }),
        )
        .route("/v1/models", get(models))
}

/// Ollama's error body.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// Whether `name` names the served model (Ollama adds the `:latest` tag by default).
pub(crate) fn serves(state: &MockState, name: &str) -> bool {
    let model = state.model();
    name == model || name.strip_suffix(":latest") == Some(model.as_str())
}

fn details() -> Value {
    json!({"parent_model": "", "format": "gguf", "family": "mock", "families": ["mock"],
           "parameter_size": "1M", "quantization_level": "Q4_K_M"})
}

async fn tags(State(state): State<Arc<MockState>>) -> Json<Value> {
    let m = state.model();
    Json(json!({"models": [{
        "name": m, "model": m, "modified_at": "2026-01-01T00:00:00Z", "size": 1_000_000,
        "digest": "6d6f636b2d6d6f64656c", "details": details(),
    }]}))
}

async fn show(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(name) = v.get("model").or(v.get("name")).and_then(Value::as_str) else {
        return error(StatusCode::BAD_REQUEST, "model is required");
    };
    if !serves(&state, name) {
        return error(StatusCode::NOT_FOUND, &format!("model '{name}' not found"));
    }
    Json(json!({
        "modelfile": format!("FROM {name}\n"), "parameters": "", "template": "{{ .Prompt }}",
        "details": details(),
        "model_info": {"general.architecture": "mock",
                       "mock.context_length": state.config.max_model_len},
        "capabilities": ["completion"], "modified_at": "2026-01-01T00:00:00Z",
    }))
    .into_response()
}

/// Ollama's OpenAI-compatible model list.
async fn models(State(state): State<Arc<MockState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{
        "id": state.model(), "object": "model", "created": state.started, "owned_by": "library",
    }]}))
}
