//! Deterministic generation: the tokens a prompt produces, where they stop and why.
//!
//! Output token `i` of sample `s` is vocabulary word `hash(prompt, s, i) % VOCAB_SIZE`. Without
//! `ignore_eos`, sample `s` ends with the EOS token as its `eos_at`-th token, where
//! `eos_at = 16 + hash(prompt, s, eos_seed) % 240` (16..=255), pushed past `min_tokens`. The EOS
//! token counts as a completion token (as in vLLM) but adds no text. Whole sequences are computed
//! up front, so streaming only slices them.

use super::prompt::Prompt;
use super::vocab::{mix, piece, EOS_ID, FIRST_WORD_ID, VOCAB_SIZE};

/// Stopping rules of one prompt, already defaulted and validated by the dialect.
#[derive(Debug, Clone, Default)]
pub(crate) struct Params {
    pub max_tokens: u32,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    /// Non-empty stop strings.
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    /// Keep a matched stop string or stop token in the text (vLLM `include_stop_str_in_output`,
    /// SGLang `no_stop_trim`).
    pub keep_stop: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finish {
    Eos,
    StopString(String),
    StopToken(u32),
    Length,
}

/// One generated sequence (a choice, or one element of an SGLang batch).
#[derive(Debug)]
pub(crate) struct Seq {
    pub prompt_idx: usize,
    /// Seeds this sequence's logprobs.
    pub key: u64,
    /// Output token ids, including a final EOS or stop token.
    pub ids: Vec<u32>,
    /// Final text (stop string trimmed unless kept).
    pub text: String,
    /// Text length after each token, clipped to the final text.
    ends: Vec<u32>,
    pub finish: Finish,
}

impl Seq {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Byte length of the text once `tokens` tokens have been produced.
    pub fn text_end(&self, tokens: usize) -> usize {
        match tokens.checked_sub(1) {
            Some(last) => self.ends.get(last).map_or(self.text.len(), |e| *e as usize),
            None => 0,
        }
    }

    /// The text tokens `from..to` add.
    pub fn text_between(&self, from: usize, to: usize) -> &str {
        self.text
            .get(self.text_end(from)..self.text_end(to))
            .unwrap_or("")
    }
}

/// Generates `n` samples per prompt, prompt-major (sequence `p * n + s`).
pub(crate) fn generate_all(prompts: &[Prompt], params: &[Params], n: u32, seed: u64) -> Vec<Seq> {
    let mut seqs = Vec::with_capacity(prompts.len() * n as usize);
    for (p, prompt) in prompts.iter().enumerate() {
        let Some(params) = params.get(p).or(params.first()) else {
            continue;
        };
        for s in 0..n {
            seqs.push(generate(p, prompt, s, params, seed));
        }
    }
    seqs
}

fn generate(prompt_idx: usize, prompt: &Prompt, sample: u32, params: &Params, seed: u64) -> Seq {
    let key = mix(prompt.hash, u64::from(sample) + 1);
    let eos_at = 16 + (mix(mix(prompt.hash, seed ^ 0xe05), u64::from(sample)) % 240) as u32;
    // min_tokens keeps EOS and stop tokens out of the first `min_tokens` positions.
    let eos_index = if params.ignore_eos {
        u32::MAX
    } else {
        (eos_at - 1).max(params.min_tokens)
    };
    let cap = params.max_tokens.min(eos_index.saturating_add(1)) as usize;
    let (mut ids, mut ends) = (Vec::with_capacity(cap), Vec::with_capacity(cap));
    let mut text = String::with_capacity(cap * 7);
    let mut finish = Finish::Length;
    for i in 0..params.max_tokens {
        if i == eos_index {
            ids.push(EOS_ID);
            ends.push(text.len() as u32);
            finish = Finish::Eos;
            break;
        }
        let word = (mix(key, u64::from(i)) % u64::from(VOCAB_SIZE)) as u32;
        let id = FIRST_WORD_ID + word;
        ids.push(id);
        if i >= params.min_tokens && params.stop_token_ids.contains(&id) {
            if params.keep_stop {
                text.push_str(piece(word));
            }
            ends.push(text.len() as u32);
            finish = Finish::StopToken(id);
            break;
        }
        let before = text.len();
        text.push_str(piece(word));
        ends.push(text.len() as u32);
        if i + 1 >= params.min_tokens {
            if let Some((at, stop)) = find_stop(&text, before, &params.stop) {
                text.truncate(if params.keep_stop {
                    at + stop.len()
                } else {
                    at
                });
                finish = Finish::StopString(stop.to_owned());
                break;
            }
        }
    }
    let len = text.len() as u32;
    for end in &mut ends {
        *end = (*end).min(len);
    }
    Seq {
        prompt_idx,
        key,
        ids,
        text,
        ends,
        finish,
    }
}

/// The earliest stop string that ends in the text added after `before`.
fn find_stop<'a>(text: &str, before: usize, stops: &'a [String]) -> Option<(usize, &'a str)> {
    stops
        .iter()
        .filter_map(|stop| {
            // Generated text is ASCII, so any byte offset is a char boundary.
            let from = before.saturating_sub(stop.len().saturating_sub(1));
            let at = text.get(from..)?.find(stop.as_str())?;
            Some((from + at, stop.as_str()))
        })
        .min_by_key(|(at, _)| *at)
}

/// Deterministic log-probability of output token `i` of a sequence, in (-4, 0].
pub(crate) fn logprob(key: u64, i: usize) -> f64 {
    -(((mix(key, i as u64 ^ 0x10_9b) >> 20) % 4000) as f64) / 1000.0
}

/// The `k` most likely tokens at a position: the sampled token first, then distinct vocabulary
/// words with lower log-probabilities.
pub(crate) fn top_alternatives(id: u32, lp: f64, k: usize) -> impl Iterator<Item = (u32, f64)> {
    let base = id.saturating_sub(FIRST_WORD_ID) % VOCAB_SIZE;
    (0..k).map(move |j| {
        if j == 0 {
            (id, lp)
        } else {
            // 37 is coprime with VOCAB_SIZE, so the alternatives never repeat or hit `id`.
            let alt = (base + j as u32 * 37) % VOCAB_SIZE;
            (
                FIRST_WORD_ID + alt,
                ((lp - 0.5 * j as f64) * 1000.0).round() / 1000.0,
            )
        }
    })
}
