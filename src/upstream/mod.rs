//! Upstream servers: their kinds, the endpoints each kind serves, and how to reach them.

mod client;
mod detect;
mod models;

pub use client::{forward_headers, Client, UpstreamResponse};
pub use detect::{detect_kind, list_models, ModelCard};
pub use models::Models;

use serde::{Deserialize, Serialize};

use crate::dialect::Dialect;

/// The `kind` setting: a known kind, or `auto` to probe at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KindSetting {
    Auto,
    Vllm,
    Sglang,
    Tgi,
}

impl std::str::FromStr for KindSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<KindSetting, String> {
        match s {
            "auto" => Ok(KindSetting::Auto),
            "vllm" => Ok(KindSetting::Vllm),
            "sglang" => Ok(KindSetting::Sglang),
            "tgi" => Ok(KindSetting::Tgi),
            other => Err(format!(
                "unknown upstream kind `{other}` (auto, vllm, sglang, tgi)"
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
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Vllm => "vllm",
            Kind::Sglang => "sglang",
            Kind::Tgi => "tgi",
        }
    }

    /// The client endpoints this kind serves itself (so requests pass through untouched).
    pub fn serves(self, dialect: Dialect) -> bool {
        match self {
            Kind::Vllm => matches!(dialect, Dialect::OpenaiCompletions | Dialect::OpenaiChat),
            Kind::Sglang => !matches!(dialect, Dialect::Tgi),
            Kind::Tgi => matches!(dialect, Dialect::Tgi | Dialect::OpenaiChat),
        }
    }

    /// Where a client dialect's request goes on this kind: raw prompts to the kind's native
    /// endpoint (vLLM's is completions), chats to its chat endpoint.
    pub fn route(self, client: Dialect) -> Route {
        if self.serves(client) {
            return Route::Passthrough;
        }
        Route::Translate(match (self, client.is_chat()) {
            (_, true) => Dialect::OpenaiChat,
            (Kind::Vllm, false) => Dialect::OpenaiCompletions,
            (Kind::Sglang, false) => Dialect::Sglang,
            (Kind::Tgi, false) => Dialect::Tgi,
        })
    }

    /// The kind a setting names (`None` for `auto`).
    pub fn from_setting(setting: KindSetting) -> Option<Kind> {
        match setting {
            KindSetting::Auto => None,
            KindSetting::Vllm => Some(Kind::Vllm),
            KindSetting::Sglang => Some(Kind::Sglang),
            KindSetting::Tgi => Some(Kind::Tgi),
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
}
