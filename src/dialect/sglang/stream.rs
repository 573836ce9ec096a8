//! `/generate` streams: the client encoder re-accumulates deltas into SGLang's cumulative
//! chunks; the upstream decoder turns cumulative chunks back into deltas.

use bytes::{BufMut, BytesMut};
use serde::Deserialize;
use serde_json::Value;

use super::response::{finish_from_json, meta_info};
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Chunk, Event, Tally, Usage};
use crate::stream::framing::{is_done_marker, write_sse, Frame};

/// Client side: one cumulative `data:` chunk per upstream chunk.
pub struct Encoder {
    ctx: Ctx,
    tally: Tally,
    /// Cumulative state per choice (text, ids, logprobs, finish).
    choices: Vec<Choice>,
    /// Finished choices whose last event waits for the upstream's counts: an upstream that
    /// reports usage only at the end (plain OpenAI, llama.cpp) sends it after the finish.
    deferred: Vec<u32>,
}

#[derive(serde::Serialize)]
struct Out<'a> {
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_ids: Option<&'a [u32]>,
    meta_info: super::response::MetaInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<u32>,
}

impl Encoder {
    pub fn new(ctx: Ctx) -> Encoder {
        Encoder {
            ctx,
            tally: Tally::default(),
            choices: Vec::new(),
            deferred: Vec::new(),
        }
    }

    pub fn events(&mut self, events: &[Event], out: &mut BytesMut) {
        for ev in events {
            self.tally.observe(ev);
            match ev {
                Event::Chunk(c) => self.chunk(c, out),
                Event::Usage(_) | Event::Done => self.flush(out),
                _ => {}
            }
        }
    }

    /// Write the last events that waited for the counts.
    fn flush(&mut self, out: &mut BytesMut) {
        for i in std::mem::take(&mut self.deferred) {
            self.write(i, out);
        }
    }

    fn chunk(&mut self, c: &Chunk, out: &mut BytesMut) {
        let i = c.index as usize;
        if self.choices.len() <= i {
            self.choices.resize_with(i + 1, Choice::default);
        }
        let st = &mut self.choices[i];
        st.index = c.index;
        st.text.push_str(&c.text);
        if let Some(ids) = &c.token_ids {
            st.token_ids
                .get_or_insert_with(Vec::new)
                .extend_from_slice(ids);
        }
        if let Some(lps) = &c.logprobs {
            st.logprobs
                .get_or_insert_with(Vec::new)
                .extend_from_slice(lps);
        }
        if c.finish.is_some() {
            st.finish = c.finish.clone();
        }
        if c.text.is_empty() && c.finish.is_none() {
            return;
        }
        // The last event carries the final counts: without the upstream's yet, wait for them
        // (they follow in the same breath; `end` writes it regardless).
        if c.finish.is_some() && self.tally.choice_prompt(c.index).is_none() {
            self.deferred.push(c.index);
            return;
        }
        self.write(c.index, out);
    }

    /// One cumulative event for choice `index`, with the counts as they stand: the prompt's
    /// from the upstream's running usage, else from the request's token ids (as SGLang
    /// itself reports it from the first chunk).
    fn write(&mut self, index: u32, out: &mut BytesMut) {
        let prompt = self.tally.choice_prompt(index);
        let usage = Usage {
            prompt_tokens: prompt.or(self.ctx.choice_prompt(index)).unwrap_or(0),
            completion_tokens: self.tally.choice_tokens(index),
            cached_tokens: self.tally.choice_cached(index),
        };
        let st = &self.choices[index as usize];
        let body = Out {
            text: &st.text,
            output_ids: st.token_ids.as_deref(),
            meta_info: meta_info(&self.ctx, st, usage, st.finish.is_some()),
            index: self.ctx.is_multi().then_some(index),
        };
        out.put_slice(b"data: ");
        if serde_json::to_writer((&mut *out).writer(), &body).is_err() {
            out.put_slice(b"{}");
        }
        out.put_slice(b"\n\n");
    }

    pub fn end(&mut self, out: &mut BytesMut) {
        self.flush(out);
        write_sse(out, b"[DONE]");
    }

    pub fn error(&mut self, err: &ProxyError, out: &mut BytesMut) {
        super::error::write_stream_error(err, out);
    }
}

#[derive(Debug, Deserialize)]
struct MetaWire {
    finish_reason: Option<Value>,
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    cached_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ChunkWire {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    text: String,
    output_ids: Option<Vec<u32>>,
    meta_info: Option<MetaWire>,
    error: Option<Value>,
}

#[derive(Debug, Default, Clone)]
struct Seen {
    text_len: usize,
    ids_len: usize,
    tokens: u64,
}

/// Upstream side: turns cumulative chunks into deltas.
#[derive(Debug, Default)]
pub struct Decoder {
    seen: Vec<Seen>,
}

impl Decoder {
    pub fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), ProxyError> {
        if is_done_marker(&frame.data) {
            out.push(Event::Done);
            return Ok(());
        }
        let w: ChunkWire = crate::dialect::json::from_bytes(&frame.data)
            .map_err(|e| ProxyError::UpstreamProtocol(format!("generate stream chunk: {e}")))?;
        if let Some(err) = w.error {
            out.push(Event::Error {
                message: crate::dialect::error_message(err.to_string().as_bytes()),
            });
            return Ok(());
        }
        if w.index >= crate::model::MAX_CHOICES {
            return Err(crate::dialect::stream::too_many_choices(w.index));
        }
        let i = w.index as usize;
        if self.seen.len() <= i {
            self.seen.resize(i + 1, Seen::default());
        }
        let seen = &mut self.seen[i];
        // Cumulative text: emit the new suffix; if a chunk is not an extension of the last
        // one (stop trimming can shorten it), emit nothing rather than garbage.
        let text = match w.text.get(seen.text_len..) {
            Some(s) if w.text.is_char_boundary(seen.text_len) => s.to_string(),
            _ => String::new(),
        };
        seen.text_len = seen.text_len.max(w.text.len());
        let ids = w.output_ids.map(|ids| {
            let new = ids.get(seen.ids_len..).unwrap_or_default().to_vec();
            seen.ids_len = seen.ids_len.max(ids.len());
            new
        });
        let meta = w.meta_info;
        let tokens = meta
            .as_ref()
            .map(|m| m.completion_tokens.saturating_sub(seen.tokens));
        if let Some(m) = &meta {
            seen.tokens = seen.tokens.max(m.completion_tokens);
        }
        out.push(Event::Chunk(Chunk {
            index: w.index,
            text,
            token_ids: ids,
            tokens: tokens.map(|t| t as u32),
            finish: meta
                .as_ref()
                .and_then(|m| m.finish_reason.as_ref())
                .and_then(finish_from_json),
            logprobs: None,
            usage: meta.map(|m| Usage {
                prompt_tokens: m.prompt_tokens,
                completion_tokens: m.completion_tokens,
                cached_tokens: m.cached_tokens,
            }),
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::Dialect;

    fn encoder(body: &[u8]) -> Encoder {
        let req = Dialect::Sglang.decode_request(body).unwrap();
        Encoder::new(Ctx::new(&req, "id".into(), "m".into()))
    }

    fn text(s: &str, usage: Option<Usage>) -> Event {
        Event::Chunk(Chunk {
            text: s.into(),
            usage,
            ..Chunk::default()
        })
    }

    fn prompts(out: &BytesMut) -> Vec<Value> {
        std::str::from_utf8(out)
            .unwrap()
            .split("\n\n")
            .filter_map(|b| b.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| {
                serde_json::from_str::<Value>(d).unwrap()["meta_info"]["prompt_tokens"].clone()
            })
            .collect()
    }

    #[test]
    fn a_token_id_prompt_is_counted_from_the_first_chunk() {
        // An upstream that counts only at the end: lingo knows the prompt from the request.
        let mut enc = encoder(br#"{"input_ids": [1, 2, 3], "stream": true}"#);
        let mut out = BytesMut::new();
        enc.events(&[text("a", None), text("b", None)], &mut out);
        assert_eq!(prompts(&out), [3, 3]);
    }

    #[test]
    fn running_usage_gives_the_prompt_from_the_first_chunk() {
        let usage = |c| {
            Some(Usage {
                prompt_tokens: 4,
                completion_tokens: c,
                cached_tokens: None,
            })
        };
        let mut enc = encoder(br#"{"text": "a b c", "stream": true}"#);
        let mut out = BytesMut::new();
        enc.events(&[text("a", usage(1)), text("b", usage(2))], &mut out);
        assert_eq!(prompts(&out), [4, 4]);
        // Without either, the count is unknown until the end (and 0 on the wire, as before).
        let mut enc = encoder(br#"{"text": "a b c", "stream": true}"#);
        let mut out = BytesMut::new();
        enc.events(&[text("a", None)], &mut out);
        assert_eq!(prompts(&out), [0]);
    }
}
