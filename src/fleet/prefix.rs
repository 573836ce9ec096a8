//! `prefix_affinity`'s key: a stable hash of how a prompt starts, as the server will see it,
//! so requests that share a long prefix (and so the server's prefix cache) share a key.
//!
//! The key is hashed from the request's own bytes, at ranges routing found while it parsed
//! the body once (`PromptSpan`): no second parse, and the same bytes give the same key in
//! every lingo replica. Text and token-id prompts count their first `prefix_len` tokens
//! (about 4 bytes of JSON each). A chat's key is its messages, roles included, up to and
//! including the first user message: what stays the same through every turn of one
//! conversation and differs between conversations, even behind a shared system prompt.

use std::ops::Range;

use xxhash_rust::xxh3::Xxh3;

/// JSON bytes per token for the window (4 characters a token, as GIE's 64-character blocks
/// of about 16 tokens assume).
const BYTES_PER_TOKEN: usize = 4;
/// A chat's prefix may run this many times `prefix_len` (a long system prompt plus a first
/// message); beyond it the hash stops, bounding the work per request.
const CHAT_FACTOR: usize = 16;

/// Where a request's prompt lies in its body (byte ranges into it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptSpan {
    /// A top-level `system` (Anthropic, Ollama).
    pub system: Option<Range<usize>>,
    /// A text or token-id prompt (`prompt`, `text`, `input_ids`, `inputs`).
    pub prompt: Option<Range<usize>>,
    /// A chat's messages, from the first through the first user message.
    pub chat: Option<Range<usize>>,
}

/// The key of `body`'s prompt, or `None` when it has none (the policy then balances by
/// load alone).
pub fn key(body: &[u8], span: &PromptSpan, prefix_len: u32) -> Option<u64> {
    let window = (prefix_len as usize).saturating_mul(BYTES_PER_TOKEN);
    let (range, window) = match (&span.chat, &span.prompt) {
        (Some(r), _) => (r, window.saturating_mul(CHAT_FACTOR)),
        (None, Some(r)) => (r, window),
        (None, None) => return None,
    };
    let mut h = Xxh3::new();
    let mut left = window;
    for r in span.system.iter().chain([range]) {
        let bytes = body.get(r.clone())?;
        let take = bytes.len().min(left);
        h.update(&bytes[..take]);
        h.update(&[0]);
        left -= take;
    }
    Some(h.digest())
}

/// A score in (0, 1] for rendezvous hashing of `key` over `name`, stable across processes.
pub fn unit(key: &[u8], name: &str) -> f64 {
    let mut h = Xxh3::new();
    h.update(key);
    h.update(&[0]);
    h.update(name.as_bytes());
    // 53 bits into (0, 1).
    ((h.digest() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span_of(body: &str, field: &str) -> Range<usize> {
        let start = body.find(field).unwrap();
        start..start + field.len()
    }

    #[test]
    fn prompts_agreeing_over_the_window_share_a_key() {
        let a = r#"{"prompt":"the same start, then one ending"}"#;
        let b = r#"{"prompt":"the same start, then another"}"#;
        let sa = PromptSpan {
            prompt: Some(span_of(a, "\"the same start, then one ending\"")),
            ..PromptSpan::default()
        };
        let sb = PromptSpan {
            prompt: Some(span_of(b, "\"the same start, then another\"")),
            ..PromptSpan::default()
        };
        // 4 tokens = 16 bytes: `"the same start, ` agrees.
        assert_eq!(key(a.as_bytes(), &sa, 4), key(b.as_bytes(), &sb, 4));
        assert_ne!(key(a.as_bytes(), &sa, 64), key(b.as_bytes(), &sb, 64));
    }

    #[test]
    fn a_system_prompt_counts_and_no_prompt_has_no_key() {
        let body = r#"{"system":"s1","prompt":"p"}"#;
        let mut span = PromptSpan {
            system: Some(span_of(body, "\"s1\"")),
            prompt: Some(span_of(body, "\"p\"")),
            ..PromptSpan::default()
        };
        let with = key(body.as_bytes(), &span, 64);
        span.system = None;
        assert_ne!(with, key(body.as_bytes(), &span, 64));
        assert_eq!(key(body.as_bytes(), &PromptSpan::default(), 64), None);
        // A range outside the body is no key, never a panic.
        span.prompt = Some(0..10_000);
        assert_eq!(key(body.as_bytes(), &span, 64), None);
    }

    #[test]
    fn scores_are_stable_numbers_in_the_unit_interval() {
        let s = unit(b"k", "http://a:1");
        assert!(s > 0.0 && s <= 1.0);
        assert_eq!(s, unit(b"k", "http://a:1"));
        assert_ne!(s, unit(b"k", "http://b:1"));
    }
}
