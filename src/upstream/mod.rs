//! Upstream servers: their kinds, the endpoints each kind serves, and how to reach them.

mod body;
mod client;
mod detect;
pub(crate) mod h1;
mod models;

pub use body::{BodyError, UpstreamBody};
pub use client::{forward_headers, redact_url, Client, UpstreamResponse};
pub use detect::{detect_kind, list_models, ModelCard};
pub use models::Models;

use serde::{Deserialize, Serialize};

use crate::dialect::openai::Flavor;
use crate::dialect::Dialect;

/// The `kind` setting: a known kind, or `auto` to probe at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KindSetting {
    Auto,
    Vllm,
    Sglang,
    Tgi,
    Llamacpp,
    Ollama,
    Openai,
}

impl std::str::FromStr for KindSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<KindSetting, String> {
        match s {
            "auto" => Ok(KindSetting::Auto),
            "vllm" => Ok(KindSetting::Vllm),
            "sglang" => Ok(KindSetting::Sglang),
            "tgi" => Ok(KindSetting::Tgi),
            "llamacpp" => Ok(KindSetting::Llamacpp),
            "ollama" => Ok(KindSetting::Ollama),
            "openai" => Ok(KindSetting::Openai),
            other => Err(format!(
                "unknown upstream kind `{other}` (auto, vllm, sglang, tgi, llamacpp, ollama, \
                 openai)"
            )),
        }
    }
}

/// What kind of server the upstream is: decides which endpoints it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// vLLM's OpenAI-compatible server.
    Vllm,
    /// SGLang: native `/generate` plus its OpenAI routes.
    Sglang,
    /// Hugging Face TGI: native `/generate`, `/generate_stream` and its Messages API.
    Tgi,
    /// llama.cpp's `llama-server`: native `/completion` plus its OpenAI routes.
    Llamacpp,
    /// Ollama: native `/api/generate` and `/api/chat` (its OpenAI routes are not used: the
    /// native ones take an explicit `num_predict` and report exact counts).
    Ollama,
    /// Any other OpenAI-compatible server (OpenAI itself, hosted APIs): the standard API only,
    /// no vLLM extensions.
    Openai,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Vllm => "vllm",
            Kind::Sglang => "sglang",
            Kind::Tgi => "tgi",
            Kind::Llamacpp => "llamacpp",
            Kind::Ollama => "ollama",
            Kind::Openai => "openai",
        }
    }

    /// The client endpoints this kind serves itself (so requests pass through untouched).
    pub fn serves(self, dialect: Dialect) -> bool {
        match self {
            Kind::Vllm | Kind::Openai => {
                matches!(dialect, Dialect::OpenaiCompletions | Dialect::OpenaiChat)
            }
            Kind::Sglang => matches!(
                dialect,
                Dialect::Sglang | Dialect::OpenaiCompletions | Dialect::OpenaiChat
            ),
            Kind::Tgi => matches!(dialect, Dialect::Tgi | Dialect::OpenaiChat),
            Kind::Llamacpp => matches!(
                dialect,
                Dialect::Llamacpp | Dialect::OpenaiCompletions | Dialect::OpenaiChat
            ),
            Kind::Ollama => matches!(dialect, Dialect::OllamaGenerate | Dialect::OllamaChat),
        }
    }

    /// Where a client dialect's request goes on this kind: raw prompts to the kind's native
    /// endpoint (vLLM's is completions), chats to its chat endpoint.
    pub fn route(self, client: Dialect) -> Route {
        if self.serves(client) {
            return Route::Passthrough;
        }
        let completions = match self {
            Kind::Ollama => Dialect::OllamaGenerate,
            Kind::Tgi => Dialect::Tgi,
            // TGI's raw prompts go to SGLang's native endpoint, which takes all of TGI's
            // parameters.
            Kind::Sglang if client == Dialect::Tgi => Dialect::Sglang,
            Kind::Vllm | Kind::Sglang | Kind::Llamacpp | Kind::Openai => Dialect::OpenaiCompletions,
        };
        Route::Translate(completions.for_prompt(client.is_chat()))
    }

    /// The kind a setting names (`None` for `auto`).
    pub fn from_setting(setting: KindSetting) -> Option<Kind> {
        match setting {
            KindSetting::Auto => None,
            KindSetting::Vllm => Some(Kind::Vllm),
            KindSetting::Sglang => Some(Kind::Sglang),
            KindSetting::Tgi => Some(Kind::Tgi),
            KindSetting::Llamacpp => Some(Kind::Llamacpp),
            KindSetting::Ollama => Some(Kind::Ollama),
            KindSetting::Openai => Some(Kind::Openai),
        }
    }

    /// Which OpenAI extensions this kind's OpenAI routes take.
    pub fn flavor(self) -> Flavor {
        match self {
            // TGI's Messages API reads the standard fields only (no top_k, no ignore_eos) and
            // ignores the rest silently.
            Kind::Openai | Kind::Tgi => Flavor::Standard,
            Kind::Llamacpp => Flavor::Llamacpp,
            Kind::Vllm | Kind::Sglang | Kind::Ollama => Flavor::Vllm,
        }
    }
}

/// How a request reaches the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Same dialect on both sides: bytes forwarded, only observed.
    Passthrough,
    /// Translated through the canonical model into this upstream dialect.
    Translate(Dialect),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_client_on_vllm_translates_to_completions() {
        assert_eq!(
            Kind::Vllm.route(Dialect::Sglang),
            Route::Translate(Dialect::OpenaiCompletions)
        );
        assert_eq!(Kind::Sglang.route(Dialect::Sglang), Route::Passthrough);
        assert_eq!(Kind::Vllm.route(Dialect::OpenaiChat), Route::Passthrough);
    }

    #[test]
    fn tgi_serves_its_own_endpoints_and_takes_raw_prompts_natively() {
        assert_eq!(Kind::Tgi.route(Dialect::Tgi), Route::Passthrough);
        assert_eq!(Kind::Tgi.route(Dialect::OpenaiChat), Route::Passthrough);
        for client in [Dialect::Sglang, Dialect::OpenaiCompletions] {
            assert_eq!(Kind::Tgi.route(client), Route::Translate(Dialect::Tgi));
        }
        assert_eq!(
            Kind::Vllm.route(Dialect::Tgi),
            Route::Translate(Dialect::OpenaiCompletions)
        );
        assert_eq!(
            Kind::Sglang.route(Dialect::Tgi),
            Route::Translate(Dialect::Sglang)
        );
    }

    #[test]
    fn anthropic_goes_to_chat_and_vllm_legacy_to_completions() {
        for kind in [Kind::Vllm, Kind::Sglang] {
            assert_eq!(
                kind.route(Dialect::Anthropic),
                Route::Translate(Dialect::OpenaiChat)
            );
            assert_eq!(
                kind.route(Dialect::VllmLegacy),
                Route::Translate(Dialect::OpenaiCompletions)
            );
        }
    }

    #[test]
    fn llamacpp_and_ollama_routes() {
        assert_eq!(Kind::Llamacpp.route(Dialect::Llamacpp), Route::Passthrough);
        assert_eq!(
            Kind::Llamacpp.route(Dialect::Sglang),
            Route::Translate(Dialect::OpenaiCompletions)
        );
        assert_eq!(
            Kind::Vllm.route(Dialect::OllamaChat),
            Route::Translate(Dialect::OpenaiChat)
        );
        assert_eq!(
            Kind::Ollama.route(Dialect::OllamaGenerate),
            Route::Passthrough
        );
        assert_eq!(
            Kind::Ollama.route(Dialect::OpenaiChat),
            Route::Translate(Dialect::OllamaChat)
        );
        assert_eq!(
            Kind::Ollama.route(Dialect::Llamacpp),
            Route::Translate(Dialect::OllamaGenerate)
        );
    }
}
