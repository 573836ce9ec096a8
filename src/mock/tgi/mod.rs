//! TGI's native API and Messages API (dialects.md 3): `/generate`, `/generate_stream`, `/info`
//! and `/v1/chat/completions`.
//!
//! As TGI does: validation errors are 422 `{"error","error_type":"validation"}`, generation
//! errors 424; `/generate_stream` answers 200 whatever happens and sends errors as an event;
//! stream events are `data:{json}` without a space, one token per event, the EOS token an event
//! with `special: true`, and no terminator; a matched stop sequence stays in the text; whole
//! responses carry `x-prompt-tokens` and `x-generated-tokens`. A body that is not JSON is
//! rejected before the handler, as axum does: 400 (syntax) or 422 (wrong types), plain text.

mod chat;
mod encode;
mod request;

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue, StatusCode};
use serde_json::{json, Value};

use super::driver::{self, Generation};
use super::error::{ApiError, ErrorShape};
use super::generate::generate_all;
use super::sched::QUEUE_FULL;
use super::sse::sse_data;
use super::state::MockState;
use request::{GenerateRequest, Limits};

pub(crate) use chat::chat;

/// The TGI release the mock claims to be.
const VERSION: &str = "3.3.6";

/// `POST /generate`.
pub(crate) async fn generate(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    generate_as(state, body, false).await
}

/// `POST /generate_stream`.
pub(crate) async fn generate_stream(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    generate_as(state, body, true).await
}

async fn generate_as(state: Arc<MockState>, body: Bytes, stream: bool) -> Response {
    let req = match parse::<GenerateRequest>(&body) {
        Ok(req) => req,
        Err(rejection) => return rejection.into_response(),
    };
    let (mut guard, ordinal) = state.begin();
    let job = if state.should_fail(ordinal) {
        Err(ApiError::failed_dependency(
            "mock: injected failure (fail_every)",
        ))
    } else {
        request::validate(req, stream, Limits::new(state.config.max_model_len))
    };
    let job = job.and_then(|job| {
        guard
            .admit(std::slice::from_ref(&job.prompt))
            .map_err(|_| ApiError::unavailable(QUEUE_FULL))?;
        Ok(job)
    });
    let job = match job {
        Ok(job) => job,
        Err(err) => {
            guard.fail();
            return match stream {
                // A full queue is refused before the stream starts, as TGI's overload is.
                true if err.status != StatusCode::SERVICE_UNAVAILABLE => in_band_error(&err),
                _ => err.into_response(ErrorShape::Tgi),
            };
        }
    };
    let params = [job.params.clone()];
    let mut seqs = generate_all(
        std::slice::from_ref(&job.prompt),
        &params,
        1,
        state.config.eos_seed,
    );
    let prompt_tokens = u64::from(job.prompt.len());
    let completion_tokens = seqs.iter().map(|s| s.len() as u64).sum();
    if stream {
        let generation = Generation {
            seqs,
            prompt_tokens,
            completion_tokens,
            guard,
        };
        return driver::stream(state, generation, encode::Stream(job));
    }
    driver::pace_whole(&state, &mut guard, &seqs).await;
    let Some(seq) = seqs.pop() else {
        guard.fail();
        return ApiError::internal("no sequence").into_response(ErrorShape::Tgi);
    };
    let body = encode::body(&job, &seq);
    guard.complete(prompt_tokens, completion_tokens);
    let mut resp = ([(CONTENT_TYPE, "application/json")], body).into_response();
    let h = resp.headers_mut();
    h.insert(
        HeaderName::from_static("x-compute-type"),
        HeaderValue::from_static("gpu+optimized"),
    );
    h.insert(
        HeaderName::from_static("x-prompt-tokens"),
        HeaderValue::from(prompt_tokens),
    );
    h.insert(
        HeaderName::from_static("x-generated-tokens"),
        HeaderValue::from(completion_tokens),
    );
    resp
}

/// axum's `Json` rejection: a syntax error is a 400, a type error a 422, both plain text.
pub(super) struct Rejected(StatusCode, String);

impl IntoResponse for Rejected {
    fn into_response(self) -> Response {
        (
            self.0,
            [(CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.1,
        )
            .into_response()
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Rejected> {
    serde_json::from_slice(body).map_err(|e| {
        let status = match e.classify() {
            serde_json::error::Category::Data => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::BAD_REQUEST,
        };
        Rejected(
            status,
            format!("Failed to deserialize the JSON body into the target type: {e}"),
        )
    })
}

/// `/generate_stream` already answered 200: the error is the only event.
fn in_band_error(err: &ApiError) -> Response {
    let mut out = Vec::new();
    sse_data(&mut out, &err.body(ErrorShape::Tgi));
    ([(CONTENT_TYPE, "text/event-stream")], out).into_response()
}

/// `GET /info`.
pub(crate) async fn info(State(state): State<Arc<MockState>>) -> Json<Value> {
    let limits = Limits::new(state.config.max_model_len);
    Json(json!({
        "model_id": state.model(),
        "model_sha": null,
        "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": 128,
        "max_best_of": 1,
        "max_stop_sequences": 4,
        "max_input_tokens": limits.max_input,
        "max_total_tokens": limits.max_total,
        "validation_workers": 2,
        "max_client_batch_size": 4,
        "router": "text-generation-router",
        "version": VERSION,
        "sha": null,
        "docker_label": null,
    }))
}
