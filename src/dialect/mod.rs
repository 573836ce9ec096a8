//! The closed set of wire dialects, and the dispatch from a dialect to its module.
//!
//! Each dialect module converts both directions through `crate::model`:
//! as the client side it decodes requests and encodes responses, streams and errors; as the
//! upstream side it encodes requests and decodes responses, streams and errors. No dialect
//! converts into another directly. The codecs do no I/O.

pub mod llamacpp;
pub mod ollama;
pub mod openai;
pub mod sglang;

pub mod ctx;
mod stream;

pub use ctx::Ctx;
pub use stream::{StreamDecoder, StreamEncoder};

use crate::error::ProxyError;
use crate::model::{Request, Response};
use crate::stream::framing::Framing;

/// Every wire dialect lingo speaks, named by the endpoint that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dialect {
    /// SGLang native `POST /generate`.
    Sglang,
    /// OpenAI `POST /v1/completions`.
    OpenaiCompletions,
    /// OpenAI `POST /v1/chat/completions`.
    OpenaiChat,
    /// llama.cpp native `POST /completion` (alias `/completions`).
    Llamacpp,
    /// Ollama `POST /api/generate`.
    OllamaGenerate,
    /// Ollama `POST /api/chat`.
    OllamaChat,
}

impl Dialect {
    pub const ALL: [Dialect; 6] = [
        Dialect::Sglang,
        Dialect::OpenaiCompletions,
        Dialect::OpenaiChat,
        Dialect::Llamacpp,
        Dialect::OllamaGenerate,
        Dialect::OllamaChat,
    ];

    /// A closed label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Dialect::Sglang => "sglang",
            Dialect::OpenaiCompletions => "openai-completions",
            Dialect::OpenaiChat => "openai-chat",
            Dialect::Llamacpp => "llamacpp",
            Dialect::OllamaGenerate => "ollama-generate",
            Dialect::OllamaChat => "ollama-chat",
        }
    }

    pub fn parse(s: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.label() == s)
    }

    /// The path this dialect's generation endpoint lives on.
    pub fn path(self) -> &'static str {
        match self {
            Dialect::Sglang => "/generate",
            Dialect::OpenaiCompletions => "/v1/completions",
            Dialect::OpenaiChat => "/v1/chat/completions",
            Dialect::Llamacpp => "/completion",
            Dialect::OllamaGenerate => "/api/generate",
            Dialect::OllamaChat => "/api/chat",
        }
    }

    /// The path a request goes to on an upstream of this dialect (TGI streams on its own
    /// route).
    pub fn request_path(self, _stream: bool) -> &'static str {
        self.path()
    }

    pub fn framing(self) -> Framing {
        match self {
            Dialect::OllamaGenerate | Dialect::OllamaChat => Framing::Ndjson,
            _ => Framing::Sse,
        }
    }

    pub fn stream_content_type(self) -> &'static str {
        match self {
            Dialect::OllamaGenerate | Dialect::OllamaChat => "application/x-ndjson",
            _ => "text/event-stream",
        }
    }

    /// Whether the dialect carries chat messages (rather than raw prompts).
    pub fn is_chat(self) -> bool {
        matches!(self, Dialect::OpenaiChat | Dialect::OllamaChat)
    }

    /// Whether a request that does not say streams (Ollama's `stream` defaults to true).
    pub fn streams_by_default(self) -> bool {
        matches!(self, Dialect::OllamaGenerate | Dialect::OllamaChat)
    }

    /// This upstream dialect's sibling endpoint for a request's prompt shape: chat messages go
    /// to the chat endpoint, raw prompts to the completion one (Ollama's `/api/generate`
    /// carries either, so its requests pick their endpoint by body, not by route).
    pub fn for_prompt(self, chat: bool) -> Dialect {
        match (self, chat) {
            (Dialect::OpenaiCompletions, true) => Dialect::OpenaiChat,
            (Dialect::OpenaiChat, false) => Dialect::OpenaiCompletions,
            (Dialect::OllamaGenerate, true) => Dialect::OllamaChat,
            (Dialect::OllamaChat, false) => Dialect::OllamaGenerate,
            (d, _) => d,
        }
    }

    // ---- client side -------------------------------------------------------------------

    /// Decode a client's request body.
    pub fn decode_request(self, body: &[u8]) -> Result<Request, ProxyError> {
        match self {
            Dialect::Sglang => sglang::request::decode(body),
            Dialect::OpenaiCompletions => openai::completions::decode_request(body),
            Dialect::OpenaiChat => openai::chat::decode_request(body),
            Dialect::Llamacpp => llamacpp::request::decode(body),
            Dialect::OllamaGenerate => ollama::request::decode_generate(body),
            Dialect::OllamaChat => ollama::request::decode_chat(body),
        }
    }

    /// Encode a whole response for the client.
    pub fn encode_response(self, resp: &Response, ctx: &Ctx) -> Vec<u8> {
        match self {
            Dialect::Sglang => sglang::response::encode(resp, ctx),
            Dialect::OpenaiCompletions => openai::completions::encode_response(resp, ctx),
            Dialect::OpenaiChat => openai::chat::encode_response(resp, ctx),
            Dialect::Llamacpp => llamacpp::response::encode(resp, ctx),
            Dialect::OllamaGenerate => ollama::response::encode(resp, ctx, false),
            Dialect::OllamaChat => ollama::response::encode(resp, ctx, true),
        }
    }

    pub fn stream_encoder(self, ctx: Ctx) -> StreamEncoder {
        match self {
            Dialect::Sglang => StreamEncoder::Sglang(sglang::stream::Encoder::new(ctx)),
            Dialect::OpenaiCompletions => {
                StreamEncoder::Completions(openai::completions::StreamEncoder::new(ctx))
            }
            Dialect::OpenaiChat => StreamEncoder::Chat(openai::chat::StreamEncoder::new(ctx)),
            Dialect::Llamacpp => {
                StreamEncoder::Llamacpp(Box::new(llamacpp::stream::Encoder::new(ctx)))
            }
            Dialect::OllamaGenerate => {
                StreamEncoder::Ollama(Box::new(ollama::stream::Encoder::new(ctx, false)))
            }
            Dialect::OllamaChat => {
                StreamEncoder::Ollama(Box::new(ollama::stream::Encoder::new(ctx, true)))
            }
        }
    }

    /// The client's error body for an error raised before any output was sent.
    pub fn error_body(self, err: &ProxyError) -> Vec<u8> {
        match self {
            Dialect::Sglang => sglang::error::encode(err),
            Dialect::OpenaiCompletions | Dialect::OpenaiChat => openai::error::encode(err),
            Dialect::Llamacpp => llamacpp::error::encode(err),
            Dialect::OllamaGenerate | Dialect::OllamaChat => ollama::error::encode(err),
        }
    }

    /// The status an error gets in this dialect (TGI answers validation errors with 422).
    pub fn error_status(self, err: &ProxyError) -> http::StatusCode {
        match self {
            Dialect::Sglang
            | Dialect::OpenaiCompletions
            | Dialect::OpenaiChat
            | Dialect::Llamacpp
            | Dialect::OllamaGenerate
            | Dialect::OllamaChat => err.status(),
        }
    }

    /// Headers a whole response carries in this dialect (TGI's `x-prompt-tokens`, ...).
    pub fn response_headers(self, _resp: &Response) -> Vec<(http::HeaderName, http::HeaderValue)> {
        match self {
            Dialect::Sglang
            | Dialect::OpenaiCompletions
            | Dialect::OpenaiChat
            | Dialect::Llamacpp
            | Dialect::OllamaGenerate
            | Dialect::OllamaChat => Vec::new(),
        }
    }

    /// Name a canonical field the way this client dialect spells it, for error messages.
    pub fn field_name(self, canonical: &str) -> String {
        match self {
            Dialect::Sglang => sglang::request::field_name(canonical),
            Dialect::OpenaiCompletions | Dialect::OpenaiChat => canonical.to_string(),
            Dialect::Llamacpp => llamacpp::request::field_name(canonical),
            Dialect::OllamaGenerate => ollama::field_name(canonical, false),
            Dialect::OllamaChat => ollama::field_name(canonical, true),
        }
    }

    // ---- upstream side -----------------------------------------------------------------

    /// Encode a canonical request for an upstream that speaks this dialect.
    pub fn encode_request(self, req: &Request) -> Result<Vec<u8>, ProxyError> {
        match self {
            Dialect::Sglang => sglang::request::encode(req),
            Dialect::OpenaiCompletions => openai::completions::encode_request(req),
            Dialect::OpenaiChat => openai::chat::encode_request(req),
            Dialect::Llamacpp => llamacpp::request::encode(req),
            Dialect::OllamaGenerate => ollama::request::encode_generate(req),
            Dialect::OllamaChat => ollama::request::encode_chat(req),
        }
    }

    /// Decode an upstream's whole response.
    pub fn decode_response(self, body: &[u8]) -> Result<Response, ProxyError> {
        match self {
            Dialect::Sglang => sglang::response::decode(body),
            Dialect::OpenaiCompletions => openai::completions::decode_response(body),
            Dialect::OpenaiChat => openai::chat::decode_response(body),
            Dialect::Llamacpp => llamacpp::response::decode(body),
            Dialect::OllamaGenerate | Dialect::OllamaChat => ollama::response::decode(body),
        }
    }

    /// Token counts an upstream of this dialect puts in response headers (TGI's
    /// `x-prompt-tokens` / `x-generated-tokens`), to complete what the body says.
    pub fn usage_from_headers(self, _headers: &http::HeaderMap) -> Option<crate::model::Usage> {
        match self {
            Dialect::Sglang
            | Dialect::OpenaiCompletions
            | Dialect::OpenaiChat
            | Dialect::Llamacpp
            | Dialect::OllamaGenerate
            | Dialect::OllamaChat => None,
        }
    }

    pub fn stream_decoder(self) -> StreamDecoder {
        match self {
            Dialect::Sglang => StreamDecoder::Sglang(sglang::stream::Decoder::default()),
            Dialect::OpenaiCompletions | Dialect::OpenaiChat => {
                StreamDecoder::Openai(openai::stream::Decoder::new(self.is_chat()))
            }
            Dialect::Llamacpp => StreamDecoder::Llamacpp(llamacpp::stream::Decoder),
            Dialect::OllamaGenerate | Dialect::OllamaChat => {
                StreamDecoder::Ollama(ollama::stream::Decoder)
            }
        }
    }

    /// The message inside an upstream error body of this dialect (any known shape).
    pub fn decode_error(self, body: &[u8]) -> String {
        error_message(body)
    }
}

/// Find the human message in any of the error shapes the servers use.
pub fn error_message(body: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::from_utf8_lossy(body).trim().to_string();
    };
    let msg = v
        .pointer("/error/message")
        .or_else(|| v.get("message"))
        .or_else(|| v.get("error"))
        .or_else(|| v.get("detail"));
    match msg {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => v.to_string(),
    }
}
