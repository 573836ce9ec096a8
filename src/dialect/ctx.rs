//! What an encoder needs to know about the client's request to shape its answer.

use std::time::Instant;

use crate::model::{Prompt, Request};

/// Facts about the client request that survive translation and shape the client's response.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The id lingo reports to the client (its own, or the client's `rid`).
    pub id: String,
    /// The model name the client used (an alias stays an alias).
    pub model: String,
    /// Unix seconds, for OpenAI's `created`.
    pub created: u64,
    pub started: Instant,
    pub batched: bool,
    pub n: u32,
    pub prompts: usize,
    pub logprobs: Option<u32>,
    /// SGLang `return_text_in_logprobs`.
    pub logprob_text: bool,
    /// The client asked for usage in the stream.
    pub stream_usage: bool,
    /// TGI `details`: per-token details and the finish reason with the result.
    pub details: bool,
    /// Each prompt's text, when the client wants it in front of the outputs (`Request::echo`;
    /// TGI `return_full_text` uses the first).
    pub echo: Vec<String>,
    /// The seed the client asked for (TGI reports it back).
    pub seed: Option<u64>,
    /// Each prompt's length, when the client sent token ids (so lingo knows it before the
    /// upstream says); empty otherwise.
    pub prompt_lens: Vec<u64>,
    /// The request's output cap, when it set one: what a cumulative encoder sizes its
    /// per-choice state by.
    pub max_tokens: Option<u32>,
}

impl Ctx {
    pub fn new(req: &Request, id: String, model: String) -> Ctx {
        Ctx {
            id,
            model,
            created: unix_now(),
            started: Instant::now(),
            batched: req.batched,
            n: req.sampling.n.max(1),
            prompts: req.prompt.len(),
            logprobs: req.logprobs,
            logprob_text: req.logprob_text,
            stream_usage: req.stream_usage,
            details: req.details,
            echo: match (&req.prompt, req.echo) {
                (Prompt::Text(texts), true) => texts.clone(),
                _ => Vec::new(),
            },
            seed: req.sampling.seed,
            prompt_lens: match &req.prompt {
                Prompt::Tokens(ids) => ids.iter().map(|p| p.len() as u64).collect(),
                _ => Vec::new(),
            },
            max_tokens: req.sampling.max_tokens,
        }
    }

    /// The request's prompt tokens, when known from the request itself (each prompt once,
    /// however many samples it gets).
    pub fn prompt_tokens(&self) -> Option<u64> {
        (!self.prompt_lens.is_empty()).then(|| self.prompt_lens.iter().sum())
    }

    /// The prompt length behind choice `index` (choices run prompt by prompt, `n` each), when
    /// known from the request.
    pub fn choice_prompt(&self, index: u32) -> Option<u64> {
        let prompt = index / self.n.max(1);
        self.prompt_lens.get(prompt as usize).copied()
    }

    /// Whether the client expects a list of results rather than one.
    pub fn is_multi(&self) -> bool {
        self.batched || self.n > 1
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A fresh random hex id (32 chars), as SGLang's `uuid4().hex`.
pub fn random_id() -> String {
    hex32(rand::random::<u128>())
}

/// `v` as 32 lowercase hex digits, a byte (two digits) a step: `format!("{:032x}")` went
/// through the formatter a digit at a time, about 340 instructions a translated request.
fn hex32(v: u128) -> String {
    const PAIRS: [[u8; 2]; 256] = {
        let digits = b"0123456789abcdef";
        let mut t = [[0; 2]; 256];
        let mut b = 0;
        while b < 256 {
            t[b] = [digits[b >> 4], digits[b & 0xf]];
            b += 1;
        }
        t
    };
    let mut out = [0; 32];
    for (pair, byte) in out.chunks_exact_mut(2).zip(v.to_be_bytes()) {
        pair.copy_from_slice(&PAIRS[usize::from(byte)]);
    }
    std::str::from_utf8(&out)
        .map(String::from)
        .unwrap_or_default()
}

/// The length of a token-id prompt as a passthrough request spells it (`input_ids`, or a
/// `prompt` of ids), read without keeping the ids: `[1, 2]` is 2, `[[1, 2], [3]]` is 3, and
/// any other shape (text, a mixture) is `None`. Never fails, so peeking at it cannot refuse
/// a body the upstream would take.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IdsLen(pub Option<u64>);

impl<'de> serde::Deserialize<'de> for IdsLen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<IdsLen, D::Error> {
        d.deserialize_any(IdsVisitor { depth: 0 }).map(IdsLen)
    }
}

/// Counts ids at `depth` 0 (a prompt) or 1 (one prompt of a batch); `None` for anything else.
struct IdsVisitor {
    depth: u8,
}

impl<'de> serde::de::Visitor<'de> for IdsVisitor {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_u64<E>(self, _: u64) -> Result<Option<u64>, E> {
        Ok((self.depth > 0).then_some(1))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_none<E>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(None)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Option<u64>, A::Error> {
        if self.depth > 1 {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            return Ok(None);
        }
        let mut total = Some(0u64);
        while let Some(n) = seq.next_element_seed(IdsSeed(self.depth + 1))? {
            total = total.zip(n).map(|(t, n)| t + n);
        }
        Ok(total)
    }
}

struct IdsSeed(u8);

impl<'de> serde::de::DeserializeSeed<'de> for IdsSeed {
    type Value = Option<u64>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(IdsVisitor { depth: self.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_ids_are_what_the_formatter_writes() {
        let mut v = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
        for _ in 0..1000 {
            assert_eq!(hex32(v), format!("{v:032x}"));
            v = v.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(v >> 7) ^ (v << 3);
        }
        assert_eq!(hex32(0), "0".repeat(32));
        assert_eq!(hex32(u128::MAX), "f".repeat(32));
    }

    fn len(json: &str) -> Option<u64> {
        serde_json::from_str::<IdsLen>(json).unwrap().0
    }

    #[test]
    fn token_id_prompts_are_counted_and_anything_else_is_unknown() {
        assert_eq!(len("[1, 2, 3]"), Some(3));
        assert_eq!(len("[[1, 2], [3]]"), Some(3));
        assert_eq!(len("\"a b\""), None);
        assert_eq!(len("[\"a\", \"b\"]"), None);
        assert_eq!(len("[1, \"a\", 2]"), None);
        assert_eq!(len("[[[1]]]"), None);
        assert_eq!(len("{\"a\": [1]}"), None);
        assert_eq!(len("7"), None);
        assert_eq!(len("null"), None);
    }

    #[test]
    fn choices_map_to_their_prompts() {
        let req = crate::dialect::Dialect::Sglang
            .decode_request(br#"{"input_ids": [[1, 2], [3, 4, 5]], "sampling_params": {"n": 2}}"#)
            .unwrap();
        let ctx = Ctx::new(&req, "id".into(), "m".into());
        assert_eq!(ctx.prompt_tokens(), Some(5));
        let per: Vec<_> = (0..4).map(|i| ctx.choice_prompt(i)).collect();
        assert_eq!(per, [Some(2), Some(2), Some(3), Some(3)]);
        let text = crate::dialect::Dialect::Sglang
            .decode_request(br#"{"text": "a b"}"#)
            .unwrap();
        let ctx = Ctx::new(&text, "id".into(), "m".into());
        assert_eq!((ctx.prompt_tokens(), ctx.choice_prompt(0)), (None, None));
    }
}
