//! `/generate_stream`: one token per `data:` event, the last one with `generated_text` and
//! (when asked) `details`; no terminator, the connection closes.

use bytes::{BufMut, BytesMut};
use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::response::{finish_from_wire, finish_to_wire, token_json, TokenWire};
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Chunk, Event, Finish, Ids, Tally, Usage};
use crate::stream::framing::{is_done_marker, Frame};

/// One SSE event as TGI writes it: `data:` without a space.
pub fn write_event<T: Serialize>(out: &mut BytesMut, value: &T) {
    out.put_slice(b"data:");
    if serde_json::to_writer((&mut *out).writer(), value).is_err() {
        out.put_slice(b"{}");
    }
    out.put_slice(b"\n\n");
}

/// An alternative token: text, id, logprob (as in `TokenLogprob::top`).
type Alt = (Option<String>, Option<u32>, f64);

/// One token to send: its id, text and logprob when known.
struct Tok<'a> {
    id: Option<u32>,
    text: &'a str,
    logprob: Option<f64>,
    top: Option<&'a [Alt]>,
}

/// A last token event kept until the counts arrive: the token (owned), whether it is special,
/// and the finish.
struct Deferred {
    id: Option<u32>,
    text: String,
    logprob: Option<f64>,
    top: Option<Vec<Alt>>,
    special: bool,
    finish: Finish,
}

/// Client side: canonical events to TGI stream events.
pub struct Encoder {
    ctx: Ctx,
    tally: Tally,
    /// Events sent so far (TGI's `index` counts tokens from 1).
    sent: u32,
    /// The text so far, for the final event's `generated_text`.
    text: String,
    finished: bool,
    /// The last token event, waiting for the upstream's counts (an upstream that reports
    /// usage only after the finish, as plain OpenAI servers do).
    last: Option<Deferred>,
}

impl Encoder {
    pub fn new(ctx: Ctx) -> Encoder {
        let text = ctx.echo.first().cloned().unwrap_or_default();
        Encoder {
            ctx,
            tally: Tally::default(),
            sent: 0,
            text,
            finished: false,
            last: None,
        }
    }

    /// What the events so far count (each observed as it is written): the stream's tally.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Write the events; the new tokens they carried.
    pub fn events(&mut self, events: &[Event], out: &mut BytesMut) -> u32 {
        let mut tokens = 0u32;
        for ev in events {
            tokens = tokens.saturating_add(self.tally.observe(ev));
            match ev {
                // TGI clients send one prompt and get one sequence.
                Event::Chunk(c) if c.index == 0 && !self.finished => self.chunk(c, out),
                Event::Usage(_) | Event::Done => self.flush(out),
                _ => {}
            }
        }
        tokens
    }

    /// Write the last token event if it waited for the counts.
    fn flush(&mut self, out: &mut BytesMut) {
        if let Some(d) = self.last.take() {
            let t = Tok {
                id: d.id,
                text: &d.text,
                logprob: d.logprob,
                top: d.top.as_deref(),
            };
            self.token_event(&t, d.special, Some(&d.finish), out);
        }
    }

    fn chunk(&mut self, c: &Chunk, out: &mut BytesMut) {
        self.text.push_str(&c.text);
        let mut toks = split(c);
        if toks.is_empty() {
            if c.finish.is_none() {
                return;
            }
            // A finish without a token (llama.cpp and Ollama end with a separate chunk):
            // TGI's last event still carries a token, so send an empty one marked special,
            // which clients skip like TGI's own end-of-sequence token (holding every token
            // back by one to merge them would delay the whole stream).
            toks.push(Tok {
                id: None,
                text: "",
                logprob: None,
                top: None,
            });
        }
        let last = toks.len() - 1;
        let eos = matches!(c.finish, Some(Finish::Eos(_)));
        let counted = self.tally.choice_prompt(0).is_some();
        for (i, t) in toks.iter().enumerate() {
            let finish = if i == last { c.finish.as_ref() } else { None };
            let special = finish.is_some() && t.text.is_empty() && (eos || t.id.is_none());
            if let (Some(f), false) = (finish, counted) {
                self.finished = true;
                self.last = Some(Deferred {
                    id: t.id,
                    text: t.text.to_string(),
                    logprob: t.logprob,
                    top: t.top.map(<[Alt]>::to_vec),
                    special,
                    finish: f.clone(),
                });
                continue;
            }
            self.token_event(t, special, finish, out);
        }
    }

    fn token_event(
        &mut self,
        t: &Tok<'_>,
        special: bool,
        finish: Option<&Finish>,
        out: &mut BytesMut,
    ) {
        self.sent += 1;
        let mut v = json!({
            "index": self.sent,
            "token": token_json(t.id, t.text, t.logprob, special),
            "generated_text": null,
            "details": null,
        });
        if let (Some(top), Some(k)) = (t.top, self.ctx.logprobs.filter(|&k| k > 0)) {
            let alts = top.iter().take(k as usize).map(|(text, id, lp)| {
                token_json(*id, text.as_deref().unwrap_or(""), Some(*lp), false)
            });
            v["top_tokens"] = Value::Array(alts.collect());
        }
        if let Some(f) = finish {
            self.finished = true;
            v["generated_text"] = json!(self.text);
            if self.ctx.details {
                v["details"] = json!({
                    "finish_reason": finish_to_wire(Some(f)),
                    "generated_tokens": self.tally.choice_tokens(0),
                    "seed": self.ctx.seed,
                    "input_length": self.tally.choice_prompt(0).unwrap_or(0),
                });
            }
        }
        write_event(out, &v);
    }

    /// TGI ends a stream by closing the connection: nothing to write but a last event that
    /// still waited for counts.
    pub fn end(&mut self, out: &mut BytesMut) {
        self.flush(out);
    }
}

/// The tokens of one chunk: one per token id when the ids are known (with per-token texts
/// from the logprobs when they add up to the chunk's text), else one for the whole chunk.
fn split(c: &Chunk) -> Vec<Tok<'_>> {
    let lps = c.logprobs.as_deref().unwrap_or(&[]);
    if !lps.is_empty() && texts_add_up(lps, &c.text) {
        let ids = c.token_ids.as_deref().unwrap_or(&[]);
        return lps
            .iter()
            .enumerate()
            .map(|(i, l)| Tok {
                id: l.token_id.or(ids.get(i).copied()),
                text: l.token.as_deref().unwrap_or(""),
                logprob: Some(l.logprob),
                top: Some(&l.top),
            })
            .collect();
    }
    match c.token_ids.as_deref() {
        Some(ids) if !ids.is_empty() => ids
            .iter()
            .enumerate()
            .map(|(i, id)| Tok {
                id: Some(*id),
                text: if i == 0 { &c.text } else { "" },
                logprob: lps.get(i).map(|l| l.logprob),
                top: lps.get(i).map(|l| l.top.as_slice()),
            })
            .collect(),
        _ if c.text.is_empty() => Vec::new(),
        _ => vec![Tok {
            id: None,
            text: &c.text,
            logprob: None,
            top: None,
        }],
    }
}

/// Whether the logprobs' token texts, in order, are exactly the chunk's text.
fn texts_add_up(lps: &[crate::model::TokenLogprob], text: &str) -> bool {
    let mut rest = text;
    for l in lps {
        match l.token.as_deref().and_then(|t| rest.strip_prefix(t)) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

#[derive(Debug, Deserialize)]
struct StreamDetailsWire {
    finish_reason: Option<String>,
    #[serde(default)]
    generated_tokens: u64,
    /// Prompt tokens (TGI >= 2.1).
    input_length: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct EventWire {
    token: Option<TokenWire>,
    #[serde(default)]
    top_tokens: Vec<TokenWire>,
    generated_text: Option<String>,
    details: Option<StreamDetailsWire>,
    error: Option<Value>,
}

/// Upstream side: one chunk per token event; the final event closes the choice.
#[derive(Debug)]
pub struct Decoder;

impl Decoder {
    /// Decode one `data:` event.
    pub fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        if is_done_marker(&frame.data) {
            out.push(Event::Done);
            return Ok(());
        }
        let w: EventWire = crate::dialect::json::from_bytes(&frame.data)
            .map_err(|e| ProxyError::UpstreamProtocol(format!("generate_stream event: {e}")))?;
        if let Some(err) = w.error {
            let message = match err {
                Value::String(s) => s,
                other => crate::dialect::error_message(other.to_string().as_bytes()),
            };
            out.push(Event::Error { message });
            return Ok(());
        }
        let Some(token) = w.token else {
            return Err(ProxyError::UpstreamProtocol(
                "generate_stream event without a token".into(),
            ));
        };
        let finished = w.generated_text.is_some();
        let finish = match (&w.details, finished) {
            (Some(d), _) => d
                .finish_reason
                .as_deref()
                .map(|r| finish_from_wire(r, Some(&token))),
            // Without details TGI does not say why; the EOS token tells one case apart.
            (None, true) if token.special => Some(Finish::Eos(Some(token.id))),
            (None, true) => Some(Finish::Length),
            (None, false) => None,
        };
        let usage = w.details.as_ref().map(|d| Usage {
            prompt_tokens: d.input_length.unwrap_or(0),
            completion_tokens: d.generated_tokens,
            cached_tokens: None,
        });
        out.push(Event::Chunk(Chunk {
            index: 0,
            // The EOS token is counted but its literal text (`</s>`) is not output.
            text: if token.special {
                CompactString::default()
            } else {
                CompactString::from(token.text.as_str())
            },
            token_ids: Some(Ids::from_slice(&[token.id])),
            tokens: Some(1),
            finish,
            logprobs: Some(vec![token.logprob_entry(&w.top_tokens)]),
            usage,
        }));
        Ok(())
    }
}
