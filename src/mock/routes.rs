//! The router: routes per imitated server, shared auxiliary routes and the `/mock/*` controls.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

use super::clock;
use super::state::MockState;
use super::{
    inject, llamacpp, load, ollama, openai, sglang, tgi, tokenize, FailMode, FaultMode, MockKind,
};

/// Long batched prompts exceed axum's 2 MiB default.
pub(crate) const BODY_LIMIT: usize = 64 << 20;
/// The vLLM release the mock claims to be (>= 0.10.1: nested error envelope).
const VLLM_VERSION: &str = "0.11.0";

/// The mock's routes for `state.config.kind`.
pub fn router(state: Arc<MockState>) -> Router {
    // vLLM and SGLang share the OpenAI routes; TGI, llama.cpp and Ollama answer in their own
    // shapes.
    let openai_routes = || {
        Router::new()
            .route("/health", get(()))
            .route("/v1/models", get(models))
            .route("/v1/completions", post(openai::completions))
            .route("/v1/chat/completions", post(openai::chat))
    };
    let common = Router::new()
        .route("/mock/stats", get(stats))
        .route("/mock/hold", post(hold))
        .route("/mock/release", post(release))
        .route("/mock/fail_next_stream", post(fail_next_stream))
        .route("/mock/fault", post(fault))
        .route("/mock/load", post(load::control))
        .route("/metrics", get(load::metrics));
    let specific = match state.config.kind {
        MockKind::Vllm => openai_routes()
            .route("/ping", get(()))
            .route(
                "/version",
                get(|| async { Json(json!({"version": VLLM_VERSION})) }),
            )
            .route("/tokenize", post(tokenize::tokenize))
            .route("/detokenize", post(tokenize::detokenize)),
        MockKind::Sglang => openai_routes()
            .route("/generate", post(sglang::generate).put(sglang::generate))
            .route("/health_generate", get(()))
            .route("/get_load", get(load::get_load))
            .route("/v1/loads", get(load::loads))
            .route("/get_model_info", get(sglang::info::model_info))
            .route("/model_info", get(sglang::info::model_info))
            .route("/get_server_info", get(sglang::info::server_info))
            .route("/server_info", get(sglang::info::server_info))
            .route(
                "/flush_cache",
                get(sglang::info::flush_cache).post(sglang::info::flush_cache),
            )
            .route("/v1/tokenize", post(tokenize::tokenize))
            .route("/v1/detokenize", post(tokenize::detokenize))
            .route("/tokenize", post(tokenize::tokenize))
            .route("/detokenize", post(tokenize::detokenize)),
        MockKind::Tgi => Router::new()
            .route("/health", get(()))
            .route("/v1/models", get(models))
            .route("/generate", post(tgi::generate))
            .route("/generate_stream", post(tgi::generate_stream))
            .route("/info", get(tgi::info))
            .route("/v1/chat/completions", post(tgi::chat)),
        MockKind::Llamacpp => llamacpp::routes(),
        MockKind::Ollama => ollama::routes(),
        // OpenAI has no health route; its model list needs the key like everything else.
        MockKind::Openai => Router::new()
            .route("/v1/models", get(models))
            .route("/v1/completions", post(openai::completions))
            .route("/v1/chat/completions", post(openai::chat))
            .route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                openai::strict::require_key,
            )),
    };
    common
        .merge(specific)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            inject::middleware,
        ))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        // Outermost: the arrival is read before anything else runs.
        .layer(axum::middleware::from_fn(clock::middleware))
        .with_state(state)
}

async fn models(State(state): State<Arc<MockState>>) -> Json<Value> {
    let cfg = &state.config;
    if cfg.kind == MockKind::Tgi {
        // TGI lists its one model, owned by itself, created at 0 (dialects.md 3.5).
        let m = state.model();
        return Json(json!({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": m}]}));
    }
    if cfg.kind == MockKind::Openai {
        return Json(json!({"object": "list", "data": [
            {"id": state.model(), "object": "model", "created": state.started,
             "owned_by": "system"}]}));
    }
    let mut card = json!({
        "id": state.model(), "object": "model", "created": state.started,
        "owned_by": cfg.kind.as_str(), "root": state.model(), "parent": null,
        "max_model_len": cfg.max_model_len,
    });
    if cfg.kind == MockKind::Vllm {
        card["permission"] = json!([{
            "id": "modelperm-mock", "object": "model_permission", "created": state.started,
            "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
            "allow_search_indices": false, "allow_view": true, "allow_fine_tuning": false,
            "organization": "*", "group": null, "is_blocking": false,
        }]);
    }
    Json(json!({"object": "list", "data": [card]}))
}

/// `?late_last=N`: the first-token lateness of the last N streams only.
#[derive(Deserialize)]
struct StatsQuery {
    late_last: Option<usize>,
}

async fn stats(
    State(state): State<Arc<MockState>>,
    axum::extract::Query(q): axum::extract::Query<StatsQuery>,
) -> Json<super::MockStats> {
    let mut stats = state.stats();
    if q.late_last.is_some() {
        stats.first_token_late = state.late.summary(q.late_last);
    }
    Json(stats)
}

#[derive(Deserialize)]
struct HoldBody {
    after_tokens: u32,
}

#[derive(Deserialize)]
struct FailBody {
    after_tokens: u32,
    #[serde(default = "error_event")]
    mode: FailMode,
}

fn error_event() -> FailMode {
    FailMode::ErrorEvent
}

/// Parses a control body; `Err` is the 400 to answer with.
fn control_body<T: for<'de> Deserialize<'de>>(
    body: &Bytes,
) -> Result<T, (StatusCode, Json<Value>)> {
    serde_json::from_slice(body).map_err(|err| {
        let error = json!({"error": format!("invalid control body: {err}")});
        (StatusCode::BAD_REQUEST, Json(error))
    })
}

async fn hold(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    match control_body::<HoldBody>(&body) {
        Ok(b) => {
            state.hold_after(b.after_tokens);
            Json(json!({})).into_response()
        }
        Err(bad) => bad.into_response(),
    }
}

async fn release(State(state): State<Arc<MockState>>) -> Json<Value> {
    state.release();
    Json(json!({}))
}

async fn fail_next_stream(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    match control_body::<FailBody>(&body) {
        Ok(b) => {
            state.fail_next_stream(b.after_tokens, b.mode);
            Json(json!({})).into_response()
        }
        Err(bad) => bad.into_response(),
    }
}

#[derive(Deserialize)]
struct FaultBody {
    mode: Option<FaultMode>,
    #[serde(default = "one")]
    count: u32,
}

fn one() -> u32 {
    1
}

async fn fault(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    match control_body::<FaultBody>(&body) {
        Ok(b) => {
            state.arm_fault(b.mode, b.count);
            Json(json!({})).into_response()
        }
        Err(bad) => bad.into_response(),
    }
}
