//! OpenAI's `/v1/completions` and `/v1/chat/completions`, with vLLM's and SGLang's extensions.
//!
//! Quirks handled here:
//! - vLLM sends usage in a stream only when `stream_options.include_usage` is exactly `true`
//!   (a real 0.32 server ignored `{}`), so the encoder always sends an explicit `true`.
//! - `stop_reason` (vLLM) carries the matched stop string or token id; `null` means EOS.
//! - llama.cpp puts `usage` on its last completions chunk, beside a non-empty `choices`.
//! - Errors come flat (`{"object":"error",...}`, vLLM <= 0.10.0 and SGLang) or nested
//!   (`{"error":{...}}`); both are read, the nested one is written.

pub mod chat;
pub mod completions;
pub(crate) mod cursor;
pub mod error;
mod opening;
mod scan;
mod shape;
pub mod stream;
mod summary;
pub mod wire;

/// Logprobs of one stream chunk, in either endpoint's shape.
fn completions_logprobs(
    chat: bool,
    v: serde_json::Value,
    ids: Option<&[u32]>,
) -> Vec<crate::model::TokenLogprob> {
    if chat {
        chat::logprobs_from_value(v, ids)
    } else {
        completions::logprobs_from_value(v, ids)
    }
}

pub(crate) use summary::counts as response_counts;

/// For the fuzzers: the fast readers of stream events (each after the one before) and of
/// whole answers agree with serde wherever they answer.
pub(crate) fn fast_readers_agree(texts: &[&str]) {
    scan::agrees_with_serde(texts);
    texts.iter().for_each(|t| summary::agrees_with_serde(t));
}

/// For the fuzzers: a stream's frames decoded with every fast path (completions and chat)
/// give what serde alone gives (`stream::Decoder::fast_paths_agree`).
pub(crate) fn stream_fast_paths_agree(frames: &[crate::stream::framing::Frame]) {
    stream::Decoder::fast_paths_agree(false, frames);
    stream::Decoder::fast_paths_agree(true, frames);
}
pub use wire::{finish_from_wire, finish_to_wire, sampling_from_wire, write_sampling, UsageWire};

/// How much of vLLM's additions to the OpenAI API an upstream takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// vLLM, SGLang and llama.cpp: `top_k`, `min_p`, `ignore_eos`, `return_token_ids`,
    /// per-chunk usage, `request_id`, ... (lingo asks for token ids and usage to count
    /// exactly).
    Vllm,
    /// llama.cpp's OpenAI routes: its own names for the extensions it has (`repeat_penalty`),
    /// the others refused rather than silently ignored; no token ids or per-chunk usage.
    Llamacpp,
    /// The OpenAI API as documented, for any other compatible server (OpenAI's own rejects
    /// unknown fields): the extensions a client set are refused by name, and the ones lingo
    /// would add for itself are left out.
    Standard,
}
