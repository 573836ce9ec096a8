//! `/generate` bodies and `/generate_stream` events (dialects.md 3.2).

use serde::Serialize;

use super::request::Job;
use crate::mock::error::{stream_error, ErrorShape};
use crate::mock::generate::{logprob, top_alternatives, Finish, Seq};
use crate::mock::sse::{sse_data, Encoder};
use crate::mock::vocab::{decode, EOS_ID};

/// The EOS token's literal text, which TGI shows in token lists but not in `generated_text`.
const EOS_TEXT: &str = "</s>";

#[derive(Serialize)]
struct Token {
    id: u32,
    text: &'static str,
    logprob: Option<f64>,
    special: bool,
}

fn token(id: u32, logprob: Option<f64>) -> Token {
    let special = id == EOS_ID;
    Token {
        id,
        text: if special { EOS_TEXT } else { decode(id) },
        logprob,
        special,
    }
}

/// Output token `i` of a sequence.
fn output_token(seq: &Seq, i: usize) -> Token {
    token(seq.ids[i], Some(logprob(seq.key, i)))
}

/// The `n` most likely tokens at output position `i`.
fn top_tokens(seq: &Seq, i: usize, n: u32) -> Vec<Token> {
    top_alternatives(seq.ids[i], logprob(seq.key, i), n as usize)
        .map(|(id, lp)| Token {
            special: false,
            ..token(id, Some(lp))
        })
        .collect()
}

fn finish_reason(f: &Finish) -> &'static str {
    match f {
        Finish::Length => "length",
        Finish::StopString(_) => "stop_sequence",
        Finish::Eos | Finish::StopToken(_) => "eos_token",
    }
}

/// `generated_text`: the prompt first with `return_full_text`.
fn generated_text(job: &Job, seq: &Seq) -> String {
    match job.full_text {
        true => format!("{}{}", job.prompt.echo_text(), seq.text),
        false => seq.text.clone(),
    }
}

#[derive(Serialize)]
struct Details {
    finish_reason: &'static str,
    generated_tokens: usize,
    seed: Option<u64>,
    prefill: Vec<Token>,
    tokens: Vec<Token>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    top_tokens: Vec<Vec<Token>>,
}

#[derive(Serialize)]
struct Body {
    generated_text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
}

/// The prompt tokens of `decoder_input_details` (the first has no logprob).
fn prefill(job: &Job) -> Vec<Token> {
    let (ids, hash) = (&job.prompt.ids, job.prompt.hash);
    ids.iter()
        .enumerate()
        .map(|(j, id)| token(*id, (j > 0).then(|| logprob(hash, j))))
        .map(|t| Token {
            special: false,
            ..t
        })
        .collect()
}

/// The non-streaming body.
pub(super) fn body(job: &Job, seq: &Seq) -> Vec<u8> {
    let details = job.details.then(|| Details {
        finish_reason: finish_reason(&seq.finish),
        generated_tokens: seq.len(),
        seed: job.seed,
        prefill: if job.prefill {
            prefill(job)
        } else {
            Vec::new()
        },
        tokens: (0..seq.len()).map(|i| output_token(seq, i)).collect(),
        top_tokens: match job.top_n {
            0 => Vec::new(),
            n => (0..seq.len()).map(|i| top_tokens(seq, i, n)).collect(),
        },
    });
    let body = Body {
        generated_text: generated_text(job, seq),
        details,
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

#[derive(Serialize)]
struct StreamDetails {
    finish_reason: &'static str,
    generated_tokens: usize,
    seed: Option<u64>,
    input_length: u32,
}

#[derive(Serialize)]
struct Event {
    index: usize,
    token: Token,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    top_tokens: Vec<Token>,
    generated_text: Option<String>,
    details: Option<StreamDetails>,
}

/// One event per token; the last carries `generated_text` (and `details` when asked); no
/// terminator, the connection just ends.
pub(super) struct Stream(pub Job);

impl Encoder for Stream {
    fn tokens(&mut self, seqs: &[Seq], i: usize, from: usize, to: usize, out: &mut Vec<u8>) {
        let (job, seq) = (&self.0, &seqs[i]);
        for k in from..to {
            let last = k + 1 == seq.len();
            let event = Event {
                index: k + 1,
                token: Token {
                    // A token's text is what it adds to the text (a stop may cut the last one).
                    text: if seq.ids[k] == EOS_ID {
                        EOS_TEXT
                    } else {
                        decode(seq.ids[k])
                            .get(..seq.text_between(k, k + 1).len())
                            .unwrap_or("")
                    },
                    ..output_token(seq, k)
                },
                top_tokens: match job.top_n {
                    0 => Vec::new(),
                    n => top_tokens(seq, k, n),
                },
                generated_text: last.then(|| generated_text(job, seq)),
                details: (last && job.details).then(|| StreamDetails {
                    finish_reason: finish_reason(&seq.finish),
                    generated_tokens: seq.len(),
                    seed: job.seed,
                    input_length: job.prompt.len(),
                }),
            };
            sse_data(out, &event);
        }
    }

    fn close(&mut self, _seqs: &[Seq], _out: &mut Vec<u8>) {}

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        sse_data(out, &stream_error(ErrorShape::Tgi, message));
    }
}
