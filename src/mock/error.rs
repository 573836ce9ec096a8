//! Error responses and in-band stream errors, in the shape each imitated route uses.

use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use serde_json::{json, Value};

use super::MockKind;

/// Which error envelope a route answers with (dialects.md 1.5, 2.4, 8.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorShape {
    /// vLLM >= 0.10.1: `{"error":{"message","type","param","code"}}`.
    Nested,
    /// SGLang OpenAI routes and request validation: `{"object":"error","message",...}`.
    Flat,
    /// SGLang `/generate` generation errors: `{"error":{"message"}}`.
    Generate,
    /// TGI, every route: `{"error":"...","error_type":"validation"|...}`.
    Tgi,
}

impl ErrorShape {
    /// The envelope of a kind's OpenAI routes and token utilities.
    pub fn openai(kind: MockKind) -> ErrorShape {
        match kind {
            // llama.cpp and Ollama answer their OpenAI-style routes in their own modules.
            MockKind::Vllm | MockKind::Llamacpp | MockKind::Ollama | MockKind::Openai => {
                ErrorShape::Nested
            }
            MockKind::Sglang => ErrorShape::Flat,
            MockKind::Tgi => ErrorShape::Tgi,
        }
    }
}

/// An error to answer a request with.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// A request body that failed to parse: SGLang names those `Bad Request` (FastAPI handler).
    pub validation: bool,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// The body is not valid JSON or has the wrong types.
    pub fn invalid_body(err: impl std::fmt::Display) -> ApiError {
        ApiError {
            validation: true,
            ..ApiError::bad_request(format!("invalid request body: {err}"))
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// A full queue (`max_waiting`).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// TGI's validation error.
    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    /// TGI's generation error.
    pub fn failed_dependency(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FAILED_DEPENDENCY, message)
    }

    /// TGI's `error_type` for this status.
    pub fn tgi_type(&self) -> &'static str {
        match self.status {
            StatusCode::UNPROCESSABLE_ENTITY => "validation",
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => "overloaded",
            StatusCode::FAILED_DEPENDENCY => "generation",
            _ => "incomplete_generation",
        }
    }

    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            validation: false,
        }
    }

    fn type_name(&self, shape: ErrorShape) -> &'static str {
        match self.status {
            _ if self.validation && shape == ErrorShape::Flat => "Bad Request",
            StatusCode::BAD_REQUEST => "BadRequestError",
            StatusCode::NOT_FOUND => "NotFoundError",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableError",
            _ => "InternalServerError",
        }
    }

    /// The error body in `shape`.
    pub fn body(&self, shape: ErrorShape) -> Value {
        let (message, kind, code) = (&self.message, self.type_name(shape), self.status.as_u16());
        match shape {
            ErrorShape::Nested => json!({"error": {
                "message": message, "type": kind, "param": null, "code": code}}),
            ErrorShape::Flat => json!({
                "object": "error", "message": message, "type": kind, "param": null, "code": code}),
            ErrorShape::Generate => json!({"error": {"message": message}}),
            ErrorShape::Tgi => json!({"error": message, "error_type": self.tgi_type()}),
        }
    }

    pub fn into_response(self, shape: ErrorShape) -> Response {
        (self.status, Json(self.body(shape))).into_response()
    }
}

/// The `data:` payload a server sends when a stream fails after its headers went out.
pub(crate) fn stream_error(shape: ErrorShape, message: &str) -> Value {
    match shape {
        ErrorShape::Nested => json!({"error": {
            "message": message, "type": "InternalServerError", "code": 500}}),
        // SGLang's OpenAI routes wrap their flat ErrorResponse in an `error` key mid-stream.
        ErrorShape::Flat => json!({"error": {"object": "error", "message": message,
            "type": "InternalServerError", "param": null, "code": 500}}),
        ErrorShape::Generate => json!({"error": {"message": message}}),
        ErrorShape::Tgi => json!({"error": message, "error_type": "generation"}),
    }
}
