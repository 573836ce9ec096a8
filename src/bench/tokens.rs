//! Text prompts of a requested length in tokens, for dialects that take no token ids.
//!
//! A counter tells how many tokens a text is: the server's own `/tokenize` (vLLM and SGLang
//! serve `POST /tokenize {"prompt"} -> {"count", "tokens"}`, and so does lingo's mock), else a
//! local Hugging Face `tokenizer.json`. Calibration finds words that add exactly one token
//! each after a fixed first word, so a prompt of n tokens is the first word and n - base
//! calibrated words, with no per-request tokenizer call; one sample prompt is then counted
//! whole to check that the counts add up. Without a counter, a word is taken as a token.

use std::path::Path;

use anyhow::{bail, Context};
use bytes::Bytes;
use serde_json::{json, Value};

use super::report::InputLengths;
use crate::upstream::Client;

/// Common English words: one token each, with their leading space, in the usual BPE
/// vocabularies (and in lingo's mock, where every word is one token).
pub const WORDS: [&str; 32] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their",
];

/// The word every synthetic text prompt starts with.
const FIRST: &str = "the";

/// Counts the tokens of a text.
pub enum Counter {
    /// The server's `/tokenize` at this path.
    Server {
        client: Box<Client>,
        path: &'static str,
        model: Option<String>,
    },
    /// A local tokenizer file.
    Local(Box<tokenizers::Tokenizer>),
}

impl Counter {
    /// The server's `/tokenize` (or `/v1/tokenize`), if it answers a probe with a count.
    pub async fn server(client: &Client, model: Option<&str>) -> Option<Counter> {
        for path in ["/tokenize", "/v1/tokenize"] {
            let counter = Counter::Server {
                client: Box::new(client.clone()),
                path,
                model: model.map(str::to_string),
            };
            if counter.count("hello world").await.is_ok() {
                return Some(counter);
            }
        }
        None
    }

    /// A Hugging Face `tokenizer.json`.
    pub fn local(path: &Path) -> anyhow::Result<Counter> {
        let t = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow::anyhow!("reading the tokenizer {}: {e}", path.display()))?;
        Ok(Counter::Local(Box::new(t)))
    }

    pub fn lengths(&self) -> InputLengths {
        match self {
            Counter::Server { .. } => InputLengths::ServerTokenizer,
            Counter::Local(_) => InputLengths::LocalTokenizer,
        }
    }

    /// Tokens of `text` as a prompt (special tokens included, as the server will count them).
    pub async fn count(&self, text: &str) -> anyhow::Result<u32> {
        match self {
            Counter::Local(t) => t
                .encode(text, true)
                .map(|e| e.len() as u32)
                .map_err(|e| anyhow::anyhow!("tokenizing: {e}")),
            Counter::Server {
                client,
                path,
                model,
            } => {
                let mut body = json!({"prompt": text});
                if let Some(m) = model {
                    body["model"] = json!(m);
                }
                let resp = client
                    .post_json(path, Bytes::from(body.to_string()), &[])
                    .await?;
                let status = resp.status;
                let bytes = resp.bytes().await?;
                if !status.is_success() {
                    bail!("{path}: HTTP {}", status.as_u16());
                }
                let v: Value = serde_json::from_slice(&bytes).context("tokenize answer")?;
                let count = v
                    .get("count")
                    .and_then(Value::as_u64)
                    .or_else(|| {
                        v.get("tokens")
                            .and_then(Value::as_array)
                            .map(|a| a.len() as u64)
                    })
                    .with_context(|| format!("{path}: no count in {v}"))?;
                Ok(count as u32)
            }
        }
    }
}

/// How to write a text prompt of n tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Words that add one token each after the first word.
    pub words: Vec<&'static str>,
    /// Tokens of the first word alone, special tokens included.
    pub base: u32,
    pub lengths: InputLengths,
}

impl Calibration {
    /// Without a tokenizer: a word per token, marked approximate.
    pub fn approximate() -> Calibration {
        Calibration {
            words: WORDS.to_vec(),
            base: 1,
            lengths: InputLengths::Approximate,
        }
    }

    /// Measure with `counter`; falls back to `approximate` (and says why) when the counts
    /// do not add up.
    pub async fn measure(counter: &Counter) -> anyhow::Result<(Calibration, Option<String>)> {
        let base = counter.count(FIRST).await?;
        let mut words = Vec::new();
        for w in WORDS {
            if counter.count(&format!("{FIRST} {w}")).await? == base + 1 {
                words.push(w);
            }
        }
        if words.is_empty() {
            let why = "no common word is one token for this tokenizer".to_string();
            return Ok((Calibration::approximate(), Some(why)));
        }
        let cal = Calibration {
            words,
            base,
            lengths: counter.lengths(),
        };
        let probe = 200 + base;
        let text = cal.text(probe, &mut super::rng::Rng::new(0, 0));
        let got = counter.count(&text).await?;
        if got != probe {
            let why = format!("a {probe}-token test prompt counted {got} tokens");
            return Ok((Calibration::approximate(), Some(why)));
        }
        Ok((cal, None))
    }

    /// A text of `tokens` tokens (at least the first word).
    pub fn text(&self, tokens: u32, rng: &mut super::rng::Rng) -> String {
        let n = tokens.saturating_sub(self.base) as usize;
        let mut text = String::with_capacity(FIRST.len() + n * 6);
        text.push_str(FIRST);
        for _ in 0..n {
            text.push(' ');
            text.push_str(self.words[rng.below(self.words.len() as u64) as usize]);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approximate_text_has_one_word_per_token() {
        let cal = Calibration::approximate();
        let text = cal.text(100, &mut super::super::rng::Rng::new(1, 2));
        assert_eq!(text.split(' ').count(), 100);
        assert!(text.starts_with("the "));
    }

    #[tokio::test]
    async fn a_local_tokenizer_sizes_text_exactly_with_its_special_tokens() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bench/tokenizer.json");
        let counter = Counter::local(&path).unwrap();
        // The fixture's template adds <s>: "the" is two tokens.
        assert_eq!(counter.count("the").await.unwrap(), 2);
        let (cal, why) = Calibration::measure(&counter).await.unwrap();
        assert_eq!(why, None);
        assert_eq!((cal.base, cal.lengths), (2, InputLengths::LocalTokenizer));
        let mut rng = super::super::rng::Rng::new(5, 6);
        for n in [2, 3, 50, 777] {
            assert_eq!(counter.count(&cal.text(n, &mut rng)).await.unwrap(), n);
        }
        assert!(Counter::local(Path::new("/nonexistent.json")).is_err());
    }
}
