//! llama.cpp's `llama-server` (dialects.md section 4, and quirks seen on a real server): native
//! `POST /completion` (alias `/completions`), its OpenAI routes with their llama.cpp
//! peculiarities, `/props`, `/health`, `/v1/models` and `/tokenize`.
//!
//! What it imitates: the request's `model` is ignored and the alias echoed; `n_predict` -1 (the
//! default) runs to the context; a bare-string `stop` is ignored; OpenAI completion ids start
//! with `chatcmpl-`; completions streams put `finish_reason`, `usage` and `timings` together
//! on a last chunk with empty text (no usage-only chunk); chat streams open with
//! `content: null`, close with an empty-delta finish chunk and send usage in its own chunk
//! only when asked; the native stream ends with a `stop: true` event and no `[DONE]`.
//! Errors are `{"error":{"code","message","type"}}`. Timings are the mock's measured times.
//! Not simulated: slots, the prompt cache (`cache_n` is 0), grammars, `n_probs` in OpenAI
//! routes, `n > 1` on the native route.

mod native;
mod oai;
mod timing;

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

use super::prompt::Prompt;
use super::state::MockState;
use super::vocab::decode;

/// The llama-server build the mock claims to be.
pub(crate) const BUILD: &str = "b0-mock";

pub(crate) fn routes() -> Router<Arc<MockState>> {
    Router::new()
        .route("/completion", post(native::completion))
        .route("/completions", post(native::completion))
        .route("/v1/completions", post(oai::completions))
        .route("/v1/chat/completions", post(oai::chat))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/props", get(props))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
}

/// llama.cpp's error envelope, with HTTP status = `code`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    let kind = match status.as_u16() {
        400 => "invalid_request_error",
        404 => "not_found_error",
        503 => "unavailable_error",
        _ => "server_error",
    };
    let body = json!({"error": {"code": status.as_u16(), "message": message, "type": kind}});
    (status, Json(body)).into_response()
}

async fn props(State(state): State<Arc<MockState>>) -> Json<Value> {
    let cfg = &state.config;
    Json(json!({
        "default_generation_settings": {
            "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
                       "min_p": 0.05, "seed": 4294967295u64, "ignore_eos": false},
            "n_ctx": cfg.max_model_len,
        },
        "total_slots": 1,
        "model_alias": state.model(),
        "model_path": format!("/models/{}.gguf", state.model()),
        "modalities": {"vision": false, "audio": false},
        "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
        "build_info": BUILD,
    }))
}

/// Ollama-style `models` and OpenAI-style `data` in one body, as llama-server answers.
async fn models(State(state): State<Arc<MockState>>) -> Json<Value> {
    let m = state.model();
    Json(json!({
        "models": [{"name": m, "model": m, "modified_at": "", "size": "", "digest": "",
                    "type": "model", "capabilities": ["completion"],
                    "details": {"format": "gguf"}}],
        "object": "list",
        "data": [{"id": m, "object": "model", "created": state.started, "owned_by": "llamacpp",
                  "meta": {"n_ctx_train": state.config.max_model_len, "n_vocab": 250}}],
    }))
}

#[derive(Deserialize)]
struct TokenizeRequest {
    #[serde(default)]
    content: String,
}

async fn tokenize(body: Bytes) -> Response {
    match serde_json::from_slice::<TokenizeRequest>(&body) {
        Ok(req) => Json(json!({"tokens": Prompt::from_text(req.content).ids})).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

#[derive(Deserialize)]
struct DetokenizeRequest {
    #[serde(default)]
    tokens: Vec<u32>,
}

async fn detokenize(body: Bytes) -> Response {
    match serde_json::from_slice::<DetokenizeRequest>(&body) {
        Ok(req) => {
            let content: String = req.tokens.iter().map(|id| decode(*id)).collect();
            Json(json!({ "content": content })).into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}
