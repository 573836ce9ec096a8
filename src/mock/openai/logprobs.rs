//! Deterministic logprobs in the OpenAI completions and chat formats (dialects.md 2.3).

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::mock::generate::{logprob, top_alternatives, Seq};
use crate::mock::vocab::decode;

/// Completions: `{tokens, token_logprobs, top_logprobs:[{tok: lp}], text_offset}`.
#[derive(Serialize)]
pub(crate) struct CompletionLogprobs {
    tokens: Vec<&'static str>,
    token_logprobs: Vec<f64>,
    top_logprobs: Vec<TopMap>,
    text_offset: Vec<usize>,
}

/// One position's top tokens as a JSON object, most likely first.
struct TopMap(Vec<(&'static str, f64)>);

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (token, lp) in &self.0 {
            map.serialize_entry(token, lp)?;
        }
        map.end()
    }
}

/// Logprobs of tokens `from..to`; offsets count from the choice text's start, which is
/// `text_base` bytes before the generated text (the echoed prompt).
pub(crate) fn completion(
    seq: &Seq,
    from: usize,
    to: usize,
    k: u32,
    text_base: usize,
) -> CompletionLogprobs {
    let n = to.saturating_sub(from);
    let mut out = CompletionLogprobs {
        tokens: Vec::with_capacity(n),
        token_logprobs: Vec::with_capacity(n),
        top_logprobs: Vec::with_capacity(n),
        text_offset: Vec::with_capacity(n),
    };
    for (i, id) in seq.ids.iter().enumerate().take(to).skip(from) {
        let lp = logprob(seq.key, i);
        out.tokens.push(decode(*id));
        out.token_logprobs.push(lp);
        // vLLM always lists the sampled token, so `logprobs: 0` still gives one entry.
        let top = top_alternatives(*id, lp, (k as usize).max(1));
        out.top_logprobs
            .push(TopMap(top.map(|(t, l)| (decode(t), l)).collect()));
        out.text_offset.push(text_base + seq.text_end(i));
    }
    out
}

/// Chat: `{content:[{token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}]}`.
#[derive(Serialize)]
pub(crate) struct ChatLogprobs {
    content: Vec<ChatToken>,
}

#[derive(Serialize)]
struct ChatToken {
    token: &'static str,
    logprob: f64,
    bytes: &'static [u8],
    top_logprobs: Vec<ChatTop>,
}

#[derive(Serialize)]
struct ChatTop {
    token: &'static str,
    logprob: f64,
    bytes: &'static [u8],
}

pub(crate) fn chat(seq: &Seq, from: usize, to: usize, top: u32) -> ChatLogprobs {
    let content = seq
        .ids
        .iter()
        .enumerate()
        .take(to)
        .skip(from)
        .map(|(i, id)| {
            let lp = logprob(seq.key, i);
            let token = decode(*id);
            let top_logprobs = top_alternatives(*id, lp, top as usize)
                .map(|(t, l)| {
                    let token = decode(t);
                    ChatTop {
                        token,
                        logprob: l,
                        bytes: token.as_bytes(),
                    }
                })
                .collect();
            ChatToken {
                token,
                logprob: lp,
                bytes: token.as_bytes(),
                top_logprobs,
            }
        })
        .collect();
    ChatLogprobs { content }
}
