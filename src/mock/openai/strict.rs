//! The `openai` mock kind: OpenAI's own API, which refuses every field it does not document
//! (`400 Unrecognized request argument supplied: top_k`) and, when the mock has a key,
//! every request without `Authorization: Bearer <key>`.
//!
//! This is what keeps lingo honest about its `openai` upstream kind: a vLLM extension that
//! leaks into a request fails here as it would against the real service.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use serde_json::{json, Map, Value};

use crate::mock::error::ApiError;
use crate::mock::state::MockState;

/// Fields both endpoints document.
const COMMON: &[&str] = &[
    "model",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "max_tokens",
    "n",
    "presence_penalty",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "user",
];

const COMPLETIONS: &[&str] = &["prompt", "best_of", "echo", "suffix"];

const CHAT: &[&str] = &[
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "metadata",
    "store",
    "service_tier",
    "reasoning_effort",
    "modalities",
    "audio",
    "prediction",
    "web_search_options",
];

/// The first undocumented field of a completions (`chat == false`) or chat body.
pub(crate) fn check(body: &[u8], chat: bool) -> Result<(), ApiError> {
    // A body that is not an object is left to the endpoint's own parser.
    let Ok(map) = serde_json::from_slice::<Map<String, Value>>(body) else {
        return Ok(());
    };
    let own = if chat { CHAT } else { COMPLETIONS };
    let known = |k: &str| COMMON.contains(&k) || own.contains(&k);
    if let Some(k) = map.keys().find(|k| !known(k)) {
        return Err(unrecognized(k));
    }
    if let Some(Value::Object(o)) = map.get("stream_options") {
        if let Some(k) = o.keys().find(|k| *k != "include_usage") {
            return Err(unrecognized(&format!("stream_options.{k}")));
        }
    }
    Ok(())
}

fn unrecognized(field: &str) -> ApiError {
    ApiError::bad_request(format!("Unrecognized request argument supplied: {field}"))
}

/// Refuse requests without the mock's key (OpenAI's 401), leaving `/mock/*` open.
pub(crate) async fn require_key(
    State(state): State<Arc<MockState>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(key) = state.config.api_key.as_deref() else {
        return next.run(req).await;
    };
    let presented = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented == Some(key) || req.uri().path().starts_with("/mock/") {
        return next.run(req).await;
    }
    let message = match presented {
        None => "You didn't provide an API key.".to_string(),
        Some(_) => "Incorrect API key provided.".to_string(),
    };
    let body = json!({"error": {"message": message, "type": "invalid_request_error",
                                "param": null, "code": "invalid_api_key"}});
    (StatusCode::UNAUTHORIZED, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_fields_pass_and_extensions_are_named() {
        let ok = br#"{"model":"m","prompt":"x","max_tokens":3,"stream":true,
                      "stream_options":{"include_usage":true}}"#;
        check(ok, false).unwrap();
        let err = check(br#"{"model":"m","prompt":"x","top_k":3}"#, false).unwrap_err();
        assert!(err.message.ends_with("supplied: top_k"), "{}", err.message);
        let usage = br#"{"messages":[],"stream_options":{"include_usage":true,
                         "continuous_usage_stats":true}}"#;
        let err = check(usage, true).unwrap_err();
        assert!(err
            .message
            .contains("stream_options.continuous_usage_stats"));
        // `echo` is a completions field only.
        assert!(check(br#"{"messages":[],"echo":true}"#, true).is_err());
    }
}
