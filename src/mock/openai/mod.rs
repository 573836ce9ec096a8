//! The OpenAI routes both kinds serve: `POST /v1/completions` and `POST /v1/chat/completions`.
//!
//! vLLM and SGLang differ here only in the error envelope, the stop detail (`stop_reason` vs
//! `matched_stop`), model-name checking (vLLM 404s an unknown model; SGLang echoes whatever it
//! was sent, `"default"` when absent) and SGLang's `reasoning_tokens` in usage.

mod chat;
mod completions;
mod job;
mod logprobs;
pub(crate) mod request;
pub(crate) mod strict;
mod wire;

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_TYPE;

use super::driver::{self, Generation};
use super::error::{ApiError, ErrorShape};
use super::generate::generate_all;
use super::sched::QUEUE_FULL;
use super::state::{MockState, RequestGuard};
use super::MockKind;
use job::{chat_job, completion_job, Job};
use request::{ChatRequest, CompletionRequest};

pub(crate) async fn completions(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let (guard, ordinal) = state.begin();
    let job = if state.should_fail(ordinal) {
        Err(ApiError::internal("mock: injected failure (fail_every)"))
    } else if state.config.kind == MockKind::Openai {
        strict::check(&body, false).and_then(|()| {
            serde_json::from_slice::<CompletionRequest>(&body)
                .map_err(ApiError::invalid_body)
                .and_then(|req| completion_job(&state, req))
        })
    } else {
        serde_json::from_slice::<CompletionRequest>(&body)
            .map_err(ApiError::invalid_body)
            .and_then(|req| completion_job(&state, req))
    };
    answer(state, guard, job, Endpoint::Completions).await
}

pub(crate) async fn chat(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let (guard, ordinal) = state.begin();
    let job = if state.should_fail(ordinal) {
        Err(ApiError::internal("mock: injected failure (fail_every)"))
    } else if state.config.kind == MockKind::Openai {
        strict::check(&body, true).and_then(|()| {
            serde_json::from_slice::<ChatRequest>(&body)
                .map_err(ApiError::invalid_body)
                .and_then(|req| chat_job(&state, req))
        })
    } else {
        serde_json::from_slice::<ChatRequest>(&body)
            .map_err(ApiError::invalid_body)
            .and_then(|req| chat_job(&state, req))
    };
    answer(state, guard, job, Endpoint::Chat).await
}

#[derive(Clone, Copy)]
enum Endpoint {
    Completions,
    Chat,
}

async fn answer(
    state: Arc<MockState>,
    mut guard: RequestGuard,
    job: Result<Job, ApiError>,
    endpoint: Endpoint,
) -> Response {
    let job = match job.and_then(|job| {
        guard
            .admit(&job.ctx.prompts)
            .map_err(|_| ApiError::unavailable(QUEUE_FULL))?;
        Ok(job)
    }) {
        Ok(job) => job,
        Err(err) => {
            guard.fail();
            return err.into_response(ErrorShape::openai(state.config.kind));
        }
    };
    let seqs = generate_all(&job.ctx.prompts, &job.params, job.n, state.config.eos_seed);
    let (prompt_tokens, completion_tokens) = wire::totals(&job.ctx, &seqs);
    let generation = Generation {
        seqs,
        prompt_tokens,
        completion_tokens,
        guard,
    };
    if job.stream {
        return match endpoint {
            Endpoint::Completions => {
                driver::stream(state, generation, completions::Stream(job.ctx))
            }
            Endpoint::Chat => driver::stream(state, generation, chat::Stream(job.ctx)),
        };
    }
    let mut generation = generation;
    driver::pace_whole(&state, &mut generation.guard, &generation.seqs).await;
    let body = match endpoint {
        Endpoint::Completions => completions::body(&job.ctx, &generation.seqs),
        Endpoint::Chat => chat::body(&job.ctx, &generation.seqs),
    };
    generation.guard.complete(prompt_tokens, completion_tokens);
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
