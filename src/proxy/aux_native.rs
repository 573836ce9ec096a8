//! The endpoints llama.cpp and Ollama clients call around generation: `/props`,
//! `/api/tags`, `/api/show`, `/api/version`. Forwarded to an upstream of that kind, answered
//! by lingo from the upstream's model list otherwise.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use serde_json::{json, Value};

use super::aux::{forward, forward_to, kind, upstream_error};
use super::AppState;
use crate::dialect::{llamacpp, ollama};
use crate::error::ProxyError;
use crate::upstream::Kind;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/props", get(props))
        .route("/api/tags", get(tags))
        .route("/api/show", post(show))
        .route("/api/version", get(version))
}

/// Ollama has no `/health`; `GET /` answers "Ollama is running" when it is up.
pub async fn ollama_health(st: &AppState) -> Response {
    let resp = forward(st, Method::GET, "/").await;
    if resp.status().is_success() {
        return Json(json!({"status": "ok"})).into_response();
    }
    resp
}

/// The upstream's models (re-read once if lingo has none yet): `(name, context length)`.
async fn model_list(st: &AppState) -> Vec<(String, Option<u64>)> {
    if st.models.cards().is_empty() || !st.fleet.is_single() {
        st.refresh_models(false).await;
    }
    let mut list: Vec<(String, Option<u64>)> = st
        .models
        .cards()
        .into_iter()
        .map(|c| (c.id, c.max_model_len))
        .collect();
    let ctx_of = |target: &str, list: &[(String, Option<u64>)]| {
        list.iter().find(|(n, _)| n == target).and_then(|(_, c)| *c)
    };
    let aliases: Vec<(String, Option<u64>)> = st
        .models
        .aliases()
        .iter()
        .map(|(alias, target)| (alias.clone(), ctx_of(target, &list)))
        .collect();
    list.extend(aliases);
    list
}

/// llama.cpp's `/props`: the upstream's own on llama.cpp, else the model lingo serves with the
/// sampling defaults lingo applies to a llama.cpp request that sets none.
async fn props(State(st): St, uri: Uri) -> Response {
    let named = super::aux::named_model(&uri);
    match st.aux_endpoint_for(named.as_deref()).await {
        Ok((ep, Kind::Llamacpp)) => forward_to(&ep, Method::GET, "/props", Bytes::new()).await,
        Err(e) => upstream_error(&e),
        Ok(_) => {
            let model = match named {
                Some(m) => m,
                None => st.default_model().await.unwrap_or_default(),
            };
            let n_ctx = model_list(&st)
                .await
                .into_iter()
                .find(|(n, _)| *n == model)
                .and_then(|(_, c)| c);
            Json(json!({
                "default_generation_settings": {
                    "n_ctx": n_ctx,
                    "params": {
                        "n_predict": llamacpp::DEFAULT_N_PREDICT,
                        "temperature": llamacpp::DEFAULT_TEMPERATURE,
                        "top_k": llamacpp::DEFAULT_TOP_K,
                        "top_p": llamacpp::DEFAULT_TOP_P,
                        "min_p": llamacpp::DEFAULT_MIN_P,
                    },
                },
                "model_path": model,
                "model_alias": model,
                "modalities": {"vision": false, "audio": false},
                "build_info": concat!("lingo-", env!("CARGO_PKG_VERSION")),
            }))
            .into_response()
        }
    }
}

fn model_details() -> Value {
    json!({"parent_model": "", "format": "", "family": "", "families": null,
           "parameter_size": "", "quantization_level": ""})
}

/// Ollama's `/api/tags`: the upstream's own on Ollama, else the upstream's model list (and
/// lingo's aliases) in Ollama's shape. Sizes and digests are unknown: 0 and empty.
async fn tags(State(st): St) -> Response {
    match kind(&st).await {
        Ok(Kind::Ollama) if st.fleet.is_single() => forward(&st, Method::GET, "/api/tags").await,
        Ok(_) => {
            let now = ollama::created_at();
            let models: Vec<Value> = model_list(&st)
                .await
                .into_iter()
                .map(|(name, _)| {
                    json!({"name": name, "model": name, "modified_at": now, "size": 0,
                           "digest": "", "details": model_details()})
                })
                .collect();
            Json(json!({ "models": models })).into_response()
        }
        Err(r) => r,
    }
}

/// Ollama's `/api/show {model}`: forwarded on Ollama; elsewhere what lingo knows of a listed
/// model (its context length, when the upstream says), or Ollama's 404.
async fn show(State(st): St, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(name) = v.get("model").or(v.get("name")).and_then(Value::as_str) else {
        let err = json!({"error": "model is required"});
        return (StatusCode::BAD_REQUEST, Json(err)).into_response();
    };
    match st.aux_endpoint_for(Some(name)).await {
        Ok((ep, Kind::Ollama)) => forward_to(&ep, Method::POST, "/api/show", body).await,
        Err(ProxyError::ModelNotFound(_)) => not_found(name),
        Err(e) => upstream_error(&e),
        Ok(_) => {
            let Some((_, n_ctx)) = model_list(&st).await.into_iter().find(|(n, _)| n == name)
            else {
                return not_found(name);
            };
            let mut info = json!({"general.architecture": "lingo"});
            if let Some(n) = n_ctx {
                info["lingo.context_length"] = json!(n);
            }
            Json(json!({
                "modelfile": "", "parameters": "", "template": "",
                "details": model_details(), "model_info": info,
                "capabilities": ["completion"],
                "modified_at": ollama::created_at(),
            }))
            .into_response()
        }
    }
}

/// Ollama's 404 for a model it does not have.
fn not_found(name: &str) -> Response {
    let err = json!({ "error": format!("model '{name}' not found") });
    (StatusCode::NOT_FOUND, Json(err)).into_response()
}

async fn version(State(st): St) -> Response {
    match kind(&st).await {
        Ok(Kind::Ollama) => forward(&st, Method::GET, "/api/version").await,
        Ok(_) => Json(json!({ "version": ollama::API_VERSION })).into_response(),
        Err(r) => r,
    }
}
