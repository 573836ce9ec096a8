//! The closed set of wire dialects, and the dispatch from a dialect to its module.
//!
//! Each dialect module converts both directions through `crate::model`:
//! as the client side it decodes requests and encodes responses, streams and errors; as the
//! upstream side it encodes requests and decodes responses, streams and errors. No dialect
//! converts into another directly. The codecs do no I/O.

pub mod anthropic;
pub mod llamacpp;
pub mod ollama;
pub mod openai;
pub mod sglang;
pub mod tgi;
pub mod vllm_legacy;

pub mod ctx;
pub mod digits;
pub mod fields;
pub mod json;
mod stream;

pub use ctx::Ctx;
pub use stream::{StreamDecoder, StreamEncoder};

use crate::error::ProxyError;
use crate::model::{Request, Response};

/// What a whole response tells a passthrough's metrics: its token counts as
/// `Response::fill_usage(1)` gives them (0 where it has none), and its first choice's
/// finish label.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub finish: Option<&'static str>,
}

impl Counts {
    /// A decoded response's counts.
    pub fn of(mut resp: Response) -> Counts {
        resp.fill_usage(1);
        let usage = resp.usage.unwrap_or_default();
        Counts {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            finish: resp
                .choices
                .first()
                .and_then(|c| c.finish.as_ref())
                .map(|f| f.label()),
        }
    }
}
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
    /// Hugging Face TGI's native `POST /generate` and `POST /generate_stream`.
    Tgi,
    /// Anthropic Messages `POST /v1/messages`.
    Anthropic,
    /// vLLM's legacy demo server `POST /generate` (`{"prompt": ...}` bodies).
    VllmLegacy,
    /// llama.cpp native `POST /completion` (alias `/completions`).
    Llamacpp,
    /// Ollama `POST /api/generate`.
    OllamaGenerate,
    /// Ollama `POST /api/chat`.
    OllamaChat,
}

impl Dialect {
    pub const ALL: [Dialect; 9] = [
        Dialect::Sglang,
        Dialect::OpenaiCompletions,
        Dialect::OpenaiChat,
        Dialect::Tgi,
        Dialect::Anthropic,
        Dialect::VllmLegacy,
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
            Dialect::Tgi => "tgi",
            Dialect::Anthropic => "anthropic",
            Dialect::VllmLegacy => "vllm-legacy",
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
            Dialect::Sglang | Dialect::Tgi => "/generate",
            Dialect::OpenaiCompletions => "/v1/completions",
            Dialect::OpenaiChat => "/v1/chat/completions",
            Dialect::Anthropic => "/v1/messages",
            Dialect::VllmLegacy => "/generate",
            Dialect::Llamacpp => "/completion",
            Dialect::OllamaGenerate => "/api/generate",
            Dialect::OllamaChat => "/api/chat",
        }
    }

    /// Whose clients call `path` on lingo, for refusals made before a handler reads the body
    /// (auth, admission): `/generate`, shared by three dialects, answers in SGLang's shape;
    /// unknown paths in OpenAI's, the most widely parsed.
    pub fn for_path(path: &str) -> Dialect {
        match path {
            "/v1/messages" => Dialect::Anthropic,
            "/v1/chat/completions" => Dialect::OpenaiChat,
            "/generate" | "/get_model_info" | "/model_info" | "/get_server_info"
            | "/server_info" | "/flush_cache" | "/health_generate" => Dialect::Sglang,
            "/" | "/generate_stream" | "/info" => Dialect::Tgi,
            "/api/chat" => Dialect::OllamaChat,
            p if p.starts_with("/api/") => Dialect::OllamaGenerate,
            "/completion" | "/completions" | "/props" => Dialect::Llamacpp,
            _ => Dialect::OpenaiCompletions,
        }
    }

    /// The path a request goes to on an upstream of this dialect (TGI streams on its own
    /// route).
    pub fn request_path(self, stream: bool) -> &'static str {
        match (self, stream) {
            (Dialect::Tgi, true) => "/generate_stream",
            _ => self.path(),
        }
    }

    pub fn framing(self) -> Framing {
        match self {
            Dialect::VllmLegacy | Dialect::OllamaGenerate | Dialect::OllamaChat => Framing::Ndjson,
            _ => Framing::Sse,
        }
    }

    pub fn stream_content_type(self) -> &'static str {
        match self {
            // The real server sets none; its whole answers are JSON.
            Dialect::VllmLegacy => "application/json",
            Dialect::OllamaGenerate | Dialect::OllamaChat => "application/x-ndjson",
            _ => "text/event-stream",
        }
    }

    /// Whether the dialect carries chat messages (rather than raw prompts).
    pub fn is_chat(self) -> bool {
        matches!(
            self,
            Dialect::OpenaiChat | Dialect::Anthropic | Dialect::OllamaChat
        )
    }

    /// Whether the dialect can carry a prompt of token ids.
    pub fn takes_token_ids(self) -> bool {
        matches!(
            self,
            Dialect::Sglang | Dialect::OpenaiCompletions | Dialect::Llamacpp
        )
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
            // SGLang's and TGI's native endpoints take raw prompts only.
            (Dialect::Sglang | Dialect::Tgi, true) => Dialect::OpenaiChat,
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
            Dialect::Tgi => tgi::request::decode(body),
            Dialect::Anthropic => anthropic::decode_request(body),
            Dialect::VllmLegacy => vllm_legacy::decode_request(body),
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
            Dialect::Tgi => tgi::response::encode(resp, ctx),
            Dialect::Anthropic => anthropic::encode_response(resp, ctx),
            Dialect::VllmLegacy => vllm_legacy::encode_response(resp, ctx),
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
            Dialect::Tgi => StreamEncoder::Tgi(tgi::stream::Encoder::new(ctx)),
            Dialect::Anthropic => StreamEncoder::Anthropic(anthropic::StreamEncoder::new(ctx)),
            Dialect::VllmLegacy => StreamEncoder::VllmLegacy(vllm_legacy::StreamEncoder::new(ctx)),
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
            Dialect::Tgi => tgi::error::encode(err),
            Dialect::Anthropic => anthropic::error::encode(err),
            Dialect::VllmLegacy => vllm_legacy::error::encode(err),
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
            | Dialect::VllmLegacy
            | Dialect::Llamacpp
            | Dialect::OllamaGenerate
            | Dialect::OllamaChat => err.status(),
            Dialect::Anthropic => anthropic::error::status(err),
            Dialect::Tgi => tgi::error::status(err),
        }
    }

    /// Whether a streaming request of this dialect gets its errors inside a 200 stream even
    /// before any output (TGI's `/generate_stream` always answers 200).
    pub fn stream_errors_in_band(self) -> bool {
        matches!(self, Dialect::Tgi)
    }

    /// The in-band stream error of this dialect, with its terminator where it has one.
    pub fn write_stream_error(self, err: &ProxyError, out: &mut bytes::BytesMut) {
        match self {
            Dialect::Sglang => sglang::error::write_stream_error(err, out),
            Dialect::OpenaiCompletions | Dialect::OpenaiChat => {
                openai::error::write_stream_error(err, out)
            }
            Dialect::Tgi => tgi::error::write_stream_error(err, out),
            Dialect::Anthropic => anthropic::error::write_stream_error(err, out),
            Dialect::VllmLegacy => vllm_legacy::error::write_stream_error(err, out),
            Dialect::Llamacpp => llamacpp::error::write_stream_error(err, out),
            Dialect::OllamaGenerate | Dialect::OllamaChat => {
                ollama::error::write_stream_error(err, out)
            }
        }
    }

    /// Headers a whole response carries in this dialect (TGI's `x-prompt-tokens`, ...).
    pub fn response_headers(self, resp: &Response) -> Vec<(http::HeaderName, http::HeaderValue)> {
        match self {
            Dialect::Sglang
            | Dialect::OpenaiCompletions
            | Dialect::OpenaiChat
            | Dialect::Anthropic
            | Dialect::VllmLegacy
            | Dialect::Llamacpp
            | Dialect::OllamaGenerate
            | Dialect::OllamaChat => Vec::new(),
            Dialect::Tgi => tgi::response::headers(resp),
        }
    }

    /// Name a canonical field the way this client dialect spells it, for error messages.
    pub fn field_name(self, canonical: &str) -> String {
        match self {
            Dialect::Sglang => sglang::request::field_name(canonical),
            Dialect::OpenaiCompletions | Dialect::OpenaiChat => match canonical {
                "input_ids" => "prompt".to_string(),
                "continue_final" => "continue_final_message".to_string(),
                "include_stop" => "include_stop_str_in_output".to_string(),
                "ebnf" => "structured_outputs.grammar".to_string(),
                "regex" => "structured_outputs.regex".to_string(),
                other => other.to_string(),
            },
            Dialect::Tgi => tgi::request::field_name(canonical),
            Dialect::Anthropic => anthropic::field_name(canonical),
            Dialect::VllmLegacy => vllm_legacy::field_name(canonical),
            Dialect::Llamacpp => llamacpp::request::field_name(canonical),
            Dialect::OllamaGenerate => ollama::field_name(canonical, false),
            Dialect::OllamaChat => ollama::field_name(canonical, true),
        }
    }

    // ---- upstream side -----------------------------------------------------------------

    /// Encode a canonical request for an upstream that speaks this dialect (with vLLM's
    /// extensions, for OpenAI dialects).
    pub fn encode_request(self, req: &Request) -> Result<Vec<u8>, ProxyError> {
        self.encode_request_as(req, openai::Flavor::Vllm)
    }

    /// Encode a canonical request; `flavor` says which OpenAI extensions the upstream takes.
    pub fn encode_request_as(
        self,
        req: &Request,
        flavor: openai::Flavor,
    ) -> Result<Vec<u8>, ProxyError> {
        match self {
            Dialect::Sglang => sglang::request::encode(req),
            Dialect::OpenaiCompletions => openai::completions::encode_request(req, flavor),
            Dialect::OpenaiChat => openai::chat::encode_request(req, flavor),
            Dialect::Tgi => tgi::request::encode(req),
            Dialect::Anthropic => anthropic::encode_request(req),
            Dialect::VllmLegacy => vllm_legacy::encode_request(req),
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
            Dialect::Tgi => tgi::response::decode(body),
            Dialect::Anthropic => anthropic::decode_response(body),
            Dialect::VllmLegacy => vllm_legacy::decode_response(body),
            Dialect::Llamacpp => llamacpp::response::decode(body),
            Dialect::OllamaGenerate | Dialect::OllamaChat => ollama::response::decode(body),
        }
    }

    /// The `Counts` of an upstream's whole response, `None` when it does not decode. OpenAI's
    /// are read in one pass that gives exactly what `decode_response` would (or nothing,
    /// and then it is decoded): building the whole `Response` for three figures cost a
    /// non-streaming passthrough a tenth of its instructions.
    pub fn response_counts(self, body: &[u8]) -> Option<Counts> {
        let fast = match self {
            Dialect::OpenaiCompletions | Dialect::OpenaiChat => std::str::from_utf8(body)
                .ok()
                .and_then(|text| openai::response_counts(text, self == Dialect::OpenaiChat)),
            _ => None,
        };
        fast.or_else(|| self.decode_response(body).ok().map(Counts::of))
    }

    /// Token counts an upstream of this dialect puts in response headers (TGI's
    /// `x-prompt-tokens` / `x-generated-tokens`), to complete what the body says.
    pub fn usage_from_headers(self, headers: &http::HeaderMap) -> Option<crate::model::Usage> {
        match self {
            Dialect::Sglang
            | Dialect::OpenaiCompletions
            | Dialect::OpenaiChat
            | Dialect::Anthropic
            | Dialect::VllmLegacy
            | Dialect::Llamacpp
            | Dialect::OllamaGenerate
            | Dialect::OllamaChat => None,
            Dialect::Tgi => tgi::response::usage_from_headers(headers),
        }
    }

    pub fn stream_decoder(self) -> StreamDecoder {
        match self {
            Dialect::Sglang => StreamDecoder::Sglang(sglang::stream::Decoder::default()),
            Dialect::OpenaiCompletions | Dialect::OpenaiChat => {
                StreamDecoder::Openai(Box::new(openai::stream::Decoder::new(self.is_chat())))
            }
            Dialect::Tgi => StreamDecoder::Tgi(tgi::stream::Decoder),
            Dialect::Anthropic => StreamDecoder::Anthropic(anthropic::Decoder::default()),
            Dialect::VllmLegacy => StreamDecoder::VllmLegacy(vllm_legacy::Decoder::default()),
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

/// For `deserialize_with`: tell an explicit `null` (`Some(None)`) from an absent key (`None`,
/// with `#[serde(default)]`).
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(d).map(Some)
}

/// The top-level keys that tell `POST /generate` dialects apart.
#[derive(serde::Deserialize)]
struct GenerateShape {
    text: Option<serde::de::IgnoredAny>,
    input_ids: Option<serde::de::IgnoredAny>,
    inputs: Option<serde::de::IgnoredAny>,
    prompt: Option<serde::de::IgnoredAny>,
}

/// Which dialect a `POST /generate` body is: `text`/`input_ids` is SGLang, `inputs` is TGI,
/// `prompt` is vLLM's legacy server. A body that matches none, or more than one, is refused
/// with a message that says what was expected. (Malformed JSON is left to SGLang's decoder,
/// whose error names the position.)
pub fn generate_dialect(body: &[u8]) -> Result<Dialect, ProxyError> {
    let Ok(shape) = serde_json::from_slice::<GenerateShape>(body) else {
        return Ok(Dialect::Sglang);
    };
    let hits = [
        (shape.text.is_some() || shape.input_ids.is_some(), "sglang"),
        (shape.inputs.is_some(), "tgi"),
        (shape.prompt.is_some(), "vllm-legacy"),
    ];
    let found: Vec<&str> = hits
        .iter()
        .filter(|(hit, _)| *hit)
        .map(|(_, d)| *d)
        .collect();
    match found.as_slice() {
        [one] => generate_dialect_named(one).ok_or_else(|| {
            ProxyError::invalid("", format!("the {one} /generate dialect is not supported"))
        }),
        _ => Err(ProxyError::invalid(
            "",
            "ambiguous /generate body: expected exactly one of `text` or `input_ids` (SGLang), \
             `inputs` (TGI), or `prompt` (vLLM's legacy server)",
        )),
    }
}

/// A `/generate` dialect by label, while not every one is compiled in.
fn generate_dialect_named(label: &str) -> Option<Dialect> {
    Dialect::parse(label)
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
