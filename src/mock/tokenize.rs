//! `/tokenize` and `/detokenize` with the mock's word tokenizer (see `vocab` and `prompt`).
//!
//! vLLM answers `{count, max_model_len, tokens, token_strs}` and `{prompt}`; SGLang answers
//! `{tokens, count, max_model_len}` and `{text}`, and also takes lists of prompts.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ErrorShape};
use super::openai::request::{chat_prompt, ChatMessage};
use super::prompt::Prompt;
use super::state::MockState;
use super::vocab::decode;
use super::MockKind;

#[derive(Deserialize)]
struct TokenizeRequest {
    model: Option<String>,
    prompt: Option<Texts>,
    messages: Option<Vec<ChatMessage>>,
    return_token_strs: Option<bool>,
}

#[derive(Deserialize)]
struct DetokenizeRequest {
    model: Option<String>,
    tokens: Ids,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Texts {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Ids {
    One(Vec<u32>),
    Many(Vec<Vec<u32>>),
}

pub(crate) async fn tokenize(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let kind = state.config.kind;
    match serde_json::from_slice::<TokenizeRequest>(&body)
        .map_err(ApiError::invalid_body)
        .and_then(|req| tokenized(&state, req))
    {
        Ok(value) => Json(value).into_response(),
        Err(err) => err.into_response(ErrorShape::openai(kind)),
    }
}

pub(crate) async fn detokenize(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let kind = state.config.kind;
    let req = match serde_json::from_slice::<DetokenizeRequest>(&body) {
        Ok(req) => req,
        Err(err) => return ApiError::invalid_body(err).into_response(ErrorShape::openai(kind)),
    };
    if let Err(err) = check_model(&state, req.model.as_deref()) {
        return err.into_response(ErrorShape::openai(kind));
    }
    let text = |ids: &[u32]| ids.iter().map(|id| decode(*id)).collect::<String>();
    let value = match (kind, &req.tokens) {
        (MockKind::Sglang, Ids::One(ids)) => json!({"text": text(ids)}),
        (MockKind::Sglang, Ids::Many(lists)) => {
            json!({"text": lists.iter().map(|ids| text(ids)).collect::<Vec<_>>()})
        }
        (_, Ids::One(ids)) => json!({"prompt": text(ids)}),
        (_, Ids::Many(_)) => {
            return ApiError::invalid_body("tokens must be a list of integers")
                .into_response(ErrorShape::openai(kind));
        }
    };
    Json(value).into_response()
}

fn tokenized(state: &MockState, req: TokenizeRequest) -> Result<Value, ApiError> {
    check_model(state, req.model.as_deref())?;
    let cfg = &state.config;
    let prompt = match (req.prompt, &req.messages) {
        (Some(Texts::One(text)), None) => Prompt::from_text(text),
        (Some(Texts::Many(texts)), None) if cfg.kind == MockKind::Sglang => {
            let prompts: Vec<Prompt> = texts.into_iter().map(Prompt::from_text).collect();
            let counts: Vec<u32> = prompts.iter().map(Prompt::len).collect();
            let tokens: Vec<&[u32]> = prompts.iter().map(|p| p.ids.as_slice()).collect();
            return Ok(
                json!({"tokens": tokens, "count": counts, "max_model_len": cfg.max_model_len}),
            );
        }
        (None, Some(messages)) => chat_prompt(messages),
        _ => {
            return Err(ApiError::bad_request(
                "Exactly one of `prompt` or `messages` must be set",
            ))
        }
    };
    Ok(match cfg.kind {
        MockKind::Vllm | MockKind::Llamacpp | MockKind::Ollama | MockKind::Openai => {
            let strs = req.return_token_strs.unwrap_or(false).then(|| {
                prompt
                    .ids
                    .iter()
                    .map(|id| decode(*id).trim_start())
                    .collect::<Vec<_>>()
            });
            json!({"count": prompt.len(), "max_model_len": cfg.max_model_len,
                   "tokens": prompt.ids, "token_strs": strs})
        }
        MockKind::Sglang | MockKind::Tgi => {
            json!({"tokens": prompt.ids, "count": prompt.len(), "max_model_len": cfg.max_model_len})
        }
    })
}

fn check_model(state: &MockState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(m) if state.config.kind == MockKind::Vllm && m != state.model() => Err(
            ApiError::not_found(format!("The model `{m}` does not exist.")),
        ),
        _ => Ok(()),
    }
}
