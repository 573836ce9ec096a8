//! SGLang's native API: `POST /generate` and its auxiliary endpoints (dialects.md 1).
//!
//! Error placement follows SGLang: a body that fails validation is a 400 in the flat
//! `ErrorResponse` shape; a generation error (bad sampling params, prompt too long) is a 400
//! `{"error":{"message"}}`, or, when streaming, a 200 stream holding that error and `[DONE]`.

mod encode;
pub(crate) mod info;
mod job;
mod request;

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use tokio::time::Instant;

use super::driver::{self, Generation};
use super::error::{stream_error, ApiError, ErrorShape};
use super::generate::generate_all;
use super::sched::QUEUE_FULL;
use super::sse::{sse_done, sse_event};
use super::state::MockState;
use request::GenerateRequest;

pub(crate) async fn generate(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let start = Instant::now();
    let (mut guard, ordinal) = state.begin();
    if state.should_fail(ordinal) {
        guard.fail();
        return ApiError::internal("mock: injected failure (fail_every)")
            .into_response(ErrorShape::Generate);
    }
    let req = match serde_json::from_slice::<GenerateRequest>(&body) {
        Ok(req) => req,
        Err(err) => {
            guard.fail();
            return ApiError::invalid_body(err).into_response(ErrorShape::Flat);
        }
    };
    let stream = req.stream.unwrap_or(false);
    let job = match job::build(req, state.config.max_model_len) {
        Ok(job) => job,
        Err(err) if stream => {
            guard.fail();
            return in_band_error(&err.message);
        }
        Err(err) => {
            guard.fail();
            return err.into_response(ErrorShape::Generate);
        }
    };
    if guard.admit(&job.prompts).is_err() {
        guard.fail();
        return ApiError::unavailable(QUEUE_FULL).into_response(ErrorShape::Generate);
    }
    let seqs = generate_all(&job.prompts, &job.params, job.n, state.config.eos_seed);
    // Every output object reports its own prompt_tokens, so n samples report the prompt n times.
    let prompt_tokens = seqs
        .iter()
        .filter_map(|s| job.prompts.get(s.prompt_idx))
        .map(|p| u64::from(p.len()))
        .sum();
    let completion_tokens = seqs.iter().map(|s| s.len() as u64).sum();
    let mut generation = Generation {
        seqs,
        prompt_tokens,
        completion_tokens,
        guard,
    };
    let ctx = encode::Ctx { job, start };
    if stream {
        return driver::stream(state, generation, encode::Stream(ctx));
    }
    driver::pace_whole(&state, &mut generation.guard, &generation.seqs).await;
    let body = encode::body(&ctx, &generation.seqs);
    generation.guard.complete(prompt_tokens, completion_tokens);
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}

/// A generation error after SGLang already answered 200 to a streaming request.
fn in_band_error(message: &str) -> Response {
    let mut out = Vec::new();
    sse_event(&mut out, &stream_error(ErrorShape::Generate, message));
    sse_done(&mut out);
    ([(CONTENT_TYPE, "text/event-stream")], out).into_response()
}
