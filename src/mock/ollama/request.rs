//! `/api/generate` and `/api/chat` requests, validated into a generation.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::StatusCode;
use serde::Deserialize;
use tokio::time::Instant;

use super::encode::{self, Ctx};
use crate::mock::driver::{self, Generation};
use crate::mock::generate::{generate_all, Params};
use crate::mock::openai::request::{chat_prompt, ChatMessage, Content};
use crate::mock::prompt::{ChatTurn, Prompt};
use crate::mock::sched::QUEUE_FULL;
use crate::mock::state::MockState;

/// The options that change the mock's output; the rest (sampling, hardware) are accepted.
#[derive(Deserialize, Default)]
struct Options {
    num_predict: Option<i64>,
    stop: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct GenerateRequest {
    model: Option<String>,
    #[serde(default)]
    prompt: String,
    system: Option<String>,
    raw: Option<bool>,
    stream: Option<bool>,
    options: Option<Options>,
}

#[derive(Deserialize)]
struct ChatRequest {
    model: Option<String>,
    #[serde(default)]
    messages: Vec<ChatMessage>,
    stream: Option<bool>,
    options: Option<Options>,
}

/// What both endpoints share once parsed.
struct Parsed {
    model: Option<String>,
    /// `None`: an empty prompt, which only loads the model.
    prompt: Option<Prompt>,
    stream: bool,
    options: Options,
}

pub(crate) async fn generate(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let parsed = serde_json::from_slice::<GenerateRequest>(&body).map(|r| {
        let prompt = match (r.prompt.is_empty(), r.raw.unwrap_or(false)) {
            (true, _) => None,
            (false, true) => Some(Prompt::from_text(r.prompt)),
            (false, false) => {
                // The template: the system message, then the prompt as a user turn.
                let mut turns = Vec::new();
                if let Some(s) = r.system.as_deref().filter(|s| !s.is_empty()) {
                    turns.push(ChatTurn {
                        role: "system",
                        texts: vec![s],
                    });
                }
                turns.push(ChatTurn {
                    role: "user",
                    texts: vec![r.prompt.as_str()],
                });
                Some(Prompt::from_chat(&turns))
            }
        };
        Parsed {
            model: r.model,
            prompt,
            stream: r.stream.unwrap_or(true),
            options: r.options.unwrap_or_default(),
        }
    });
    answer(state, parsed.map_err(|e| e.to_string()), false).await
}

pub(crate) async fn chat(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let parsed = serde_json::from_slice::<ChatRequest>(&body).map(|r| {
        let empty = r.messages.iter().all(|m| match &m.content {
            None => true,
            Some(Content::Text(t)) => t.is_empty(),
            Some(Content::Parts(p)) => p.is_empty(),
        });
        Parsed {
            model: r.model,
            prompt: (!r.messages.is_empty() && !empty).then(|| chat_prompt(&r.messages)),
            stream: r.stream.unwrap_or(true),
            options: r.options.unwrap_or_default(),
        }
    });
    answer(state, parsed.map_err(|e| e.to_string()), true).await
}

async fn answer(state: Arc<MockState>, parsed: Result<Parsed, String>, chat: bool) -> Response {
    let start = Instant::now();
    let (mut guard, ordinal) = state.begin();
    if state.should_fail(ordinal) {
        guard.fail();
        return super::error(StatusCode::INTERNAL_SERVER_ERROR, "mock: injected failure");
    }
    let parsed = match parsed {
        Ok(p) => p,
        Err(msg) => {
            guard.fail();
            return super::error(StatusCode::BAD_REQUEST, &msg);
        }
    };
    let Some(model) = parsed.model.filter(|m| !m.is_empty()) else {
        guard.fail();
        return super::error(StatusCode::BAD_REQUEST, "model is required");
    };
    if !super::serves(&state, &model) {
        guard.fail();
        let msg = format!("model '{model}' not found");
        return super::error(StatusCode::NOT_FOUND, &msg);
    }
    let ctx = Ctx {
        chat,
        model,
        start,
        first: None,
        prompt: parsed.prompt.clone(),
    };
    let Some(prompt) = parsed.prompt else {
        guard.complete(0, 0);
        return encode::loaded(&ctx, parsed.stream);
    };
    let max_len = state.config.max_model_len;
    if prompt.len() >= max_len {
        guard.fail();
        return super::error(
            StatusCode::BAD_REQUEST,
            "the input length exceeds the context length",
        );
    }
    if guard.admit(std::slice::from_ref(&prompt)).is_err() {
        guard.fail();
        return super::error(StatusCode::SERVICE_UNAVAILABLE, QUEUE_FULL);
    }
    let room = max_len - prompt.len();
    let o = parsed.options;
    let max_tokens = match o.num_predict {
        Some(n) if n >= 0 => u32::try_from(n).unwrap_or(room).min(room),
        _ => room,
    };
    let params = Params {
        max_tokens,
        stop: o
            .stop
            .unwrap_or_default()
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect(),
        ..Params::default()
    };
    let seqs = generate_all(
        std::slice::from_ref(&prompt),
        &[params],
        1,
        state.config.eos_seed,
    );
    let prompt_tokens = u64::from(prompt.len());
    let completion_tokens = seqs.iter().map(|s| s.len() as u64).sum();
    let mut generation = Generation {
        seqs,
        prompt_tokens,
        completion_tokens,
        guard,
    };
    if parsed.stream {
        let mut resp = driver::stream(state, generation, encode::Stream(ctx));
        resp.headers_mut().insert(
            CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-ndjson"),
        );
        return resp;
    }
    driver::pace_whole(&state, &mut generation.guard, &generation.seqs).await;
    let body = encode::body(&ctx, &generation.seqs);
    generation.guard.complete(prompt_tokens, completion_tokens);
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}
