//! What the bench sends: deterministic prompts of an exact length, greedy sampling, and the
//! body encoded by the target dialect's own upstream encoder (the bench writes no wire JSON).

use bytes::Bytes;
use serde_json::Value;

use crate::dialect::Dialect;
use crate::model::{Message, Prompt, Request, Role};

/// Token ids are drawn from this range: clear of the special and byte-fallback ids at the
/// bottom of common vocabularies and inside every vocabulary of 30k or more.
const ID_LOW: u32 = 1000;
const ID_HIGH: u32 = 30000;

/// Common English words that are one token (with their leading space) in the usual BPE
/// vocabularies, and exactly one token in lingo's mock.
const WORDS: [&str; 32] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their",
];

/// The request-independent part of every request of a run.
#[derive(Debug, Clone)]
pub struct Workload {
    pub dialect: Dialect,
    pub model: Option<String>,
    pub input_len: u32,
    pub output_len: u32,
    pub stream: bool,
    pub seed: u64,
}

impl Workload {
    /// The canonical request for the request numbered `key` (distinct keys give distinct
    /// prompts, so a server's prefix cache cannot serve one request from another).
    pub fn request(&self, key: u64) -> Request {
        let mut rng = SplitMix64(self.seed ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let prompt = if self.dialect.is_chat() {
            let mut text = String::with_capacity(self.input_len as usize * 6);
            for i in 0..self.input_len {
                if i > 0 {
                    text.push(' ');
                }
                text.push_str(WORDS[(rng.next() % WORDS.len() as u64) as usize]);
            }
            Prompt::Chat(vec![Message {
                role: Role::User,
                content: Value::String(text),
            }])
        } else {
            let span = u64::from(ID_HIGH - ID_LOW);
            let ids = (0..self.input_len)
                .map(|_| ID_LOW + (rng.next() % span) as u32)
                .collect();
            Prompt::Tokens(vec![ids])
        };
        let mut req = Request::new(prompt);
        req.model = self.model.clone();
        req.stream = self.stream;
        req.stream_usage = self.stream;
        req.sampling.max_tokens = Some(self.output_len);
        req.sampling.temperature = Some(0.0);
        req.sampling.ignore_eos = true;
        req.sampling.n = 1;
        req
    }

    /// The encoded body for request `key`.
    pub fn body(&self, key: u64) -> anyhow::Result<Bytes> {
        let req = self.request(key);
        let body = self
            .dialect
            .encode_request(&req)
            .map_err(|e| anyhow::anyhow!("encoding a {} request: {e}", self.dialect.label()))?;
        Ok(Bytes::from(body))
    }
}

/// A tiny deterministic generator (SplitMix64): the prompts depend on the seed only, never on
/// the version of a random-number crate.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(dialect: Dialect) -> Workload {
        Workload {
            dialect,
            model: Some("m".into()),
            input_len: 100,
            output_len: 7,
            stream: true,
            seed: 42,
        }
    }

    #[test]
    fn token_prompts_are_exact_deterministic_and_distinct() {
        let w = workload(Dialect::Sglang);
        let a = w.request(1);
        let Prompt::Tokens(ids) = &a.prompt else {
            panic!("expected token ids")
        };
        assert_eq!(ids.len(), 1);
        assert_eq!(ids[0].len(), 100);
        assert!(ids[0].iter().all(|&i| (ID_LOW..ID_HIGH).contains(&i)));
        assert_eq!(a, w.request(1));
        assert_ne!(a.prompt, w.request(2).prompt);
        assert_eq!(a.sampling.max_tokens, Some(7));
        assert!(a.sampling.ignore_eos);
        assert_eq!(a.sampling.temperature, Some(0.0));
    }

    #[test]
    fn chat_prompt_has_input_len_words() {
        let r = workload(Dialect::OpenaiChat).request(3);
        let Prompt::Chat(msgs) = &r.prompt else {
            panic!("expected chat")
        };
        let text = msgs[0].content.as_str().unwrap();
        assert_eq!(text.split(' ').count(), 100);
    }

    #[test]
    fn bodies_come_from_the_dialect_encoders() {
        // TGI takes neither token prompts nor ignore_eos: the bench cannot drive it exactly.
        for d in Dialect::ALL.into_iter().filter(|d| *d != Dialect::Tgi) {
            let body = workload(d).body(5).unwrap();
            let v: Value = serde_json::from_slice(&body).unwrap();
            let back = d.decode_request(&body).unwrap();
            assert_eq!(back.sampling.max_tokens, Some(7), "{d:?}: {v}");
            assert!(back.sampling.ignore_eos, "{d:?}");
            assert!(back.stream, "{d:?}");
        }
    }
}
