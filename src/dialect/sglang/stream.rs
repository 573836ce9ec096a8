//! `/generate` streams: the client encoder re-accumulates deltas into SGLang's cumulative
//! chunks; the upstream decoder turns cumulative chunks back into deltas.

use bytes::{BufMut, BytesMut};
use compact_str::CompactString;
use serde::Deserialize;
use serde_json::Value;

use super::response::{
    choice_id, finish_from_json, meta_info_from, push_ids, ChoiceParts, MetaInfo,
};
use crate::dialect::digits::put_uint;
use crate::dialect::json::{write_str, write_str_inner};
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Chunk, Event, Finish, Ids, Tally, TokenLogprob, Usage};
use crate::stream::framing::{is_done_marker, write_sse, Frame};

/// Client side: one cumulative `data:` chunk per upstream chunk.
pub struct Encoder {
    ctx: Ctx,
    tally: Tally,
    /// Per choice, what its `meta_info` reads of the events so far.
    choices: Vec<Sofar>,
    /// Finished choices whose last event waits for the upstream's counts: an upstream that
    /// reports usage only at the end (plain OpenAI, llama.cpp) sends it after the finish.
    deferred: Vec<u32>,
    /// Per choice, its cumulative text and ids as written (see `Written`).
    written: Vec<Written>,
    /// Where `meta_info` is written before it is copied out (a `Vec` takes serde's small
    /// pieces cheaper than `BytesMut`'s `io::Write` adapter).
    scratch: Vec<u8>,
}

/// A choice's cumulative `text` escaped as serde_json escapes it (without the quotes) and
/// its `output_ids` as serde_json writes them (without the brackets), each extended by the
/// new delta only: every event repeats them whole, and escaping the whole text again at
/// every event made the escaper the largest cost of a translated SGLang stream. Escaping is
/// per character, so the escaped deltas joined are the escaped whole.
#[derive(Debug, Default)]
struct Written {
    text: Vec<u8>,
    ids: Vec<u8>,
    /// Its `meta_info.id` as a JSON string, written at its first event: a choice's id is
    /// the same at every event, and escaping it again cost 150 instructions an event.
    id: Vec<u8>,
}

/// What a choice's `meta_info` reads of its events so far: the text and ids themselves
/// are only ever written out, so they are kept as written (`Written`), not as a `Choice`.
#[derive(Debug, Default)]
struct Sofar {
    finish: Option<Finish>,
    logprobs: Option<Vec<TokenLogprob>>,
    last_id: Option<u32>,
    /// Whether the upstream sent token ids: then every event has `output_ids`.
    ids: bool,
}

impl Sofar {
    fn parts(&self, index: u32) -> ChoiceParts<'_> {
        ChoiceParts {
            index,
            finish: self.finish.as_ref(),
            logprobs: self.logprobs.as_deref(),
            last_id: self.last_id,
        }
    }
}

/// One event as serde_json wrote it from a struct of these fields, in this order (the tests
/// keep that struct as the reference), from its pieces already in JSON (see `Written`):
/// `{"text":..,"output_ids":..,"meta_info":..,"index":..}`, the `meta_info` by `meta`.
fn write_event(
    out: &mut BytesMut,
    w: &Written,
    ids: bool,
    index: Option<u32>,
    meta: impl FnOnce(&mut BytesMut),
) {
    out.put_slice(b"data: {\"text\":\"");
    out.put_slice(&w.text);
    out.put_slice(b"\"");
    if ids {
        out.put_slice(b",\"output_ids\":[");
        out.put_slice(&w.ids);
        out.put_slice(b"]");
    }
    out.put_slice(b",\"meta_info\":");
    meta(out);
    if let Some(i) = index {
        out.put_slice(b",\"index\":");
        put_uint(out, u64::from(i));
    }
    out.put_slice(b"}\n\n");
}

/// `meta_info` in full (`MetaInfo::write_json`), with the choice's id as kept (`id`, in
/// JSON), through `scratch`.
fn write_meta(out: &mut BytesMut, meta: &MetaInfo<'_>, id: &[u8], scratch: &mut Vec<u8>) {
    scratch.clear();
    meta.write_json_with_id(scratch, |scratch, _| scratch.extend_from_slice(id));
    out.put_slice(scratch);
}

/// `meta_info` of a choice still running, in a request without logprobs: only counts, a
/// `null` finish and the id (`id`, in JSON), written straight into `out`. Building a
/// `MetaInfo` and writing it through the scratch buffer was about a third of writing the
/// event (a translated stream writes one a token).
fn write_running_meta(out: &mut BytesMut, usage: Usage, id: &[u8]) {
    out.put_slice(b"{\"cached_tokens\":");
    put_uint(out, usage.cached_tokens.unwrap_or(0));
    out.put_slice(b",\"completion_tokens\":");
    put_uint(out, usage.completion_tokens);
    out.put_slice(b",\"finish_reason\":null,\"id\":");
    out.put_slice(id);
    out.put_slice(b",\"prompt_tokens\":");
    put_uint(out, usage.prompt_tokens);
    out.put_slice(b"}");
}

/// The most tokens a choice's state is sized for up front (more grow as they come).
const MAX_PRESIZED: u32 = 256;

/// What an event's `meta_info` takes, about, in the encoder's scratch.
const META_ROOM: usize = 256;

/// Bytes of text and of written ids a token takes, about: a choice's state is sized for its
/// request's cap (16 tokens' growth one push at a time was five reallocations of each of
/// its lists, a few hundred instructions an event).
const TEXT_PER_TOKEN: usize = 8;
const ID_DIGITS_PER_TOKEN: usize = 7;

impl Written {
    fn sized(tokens: usize) -> Written {
        Written {
            text: Vec::with_capacity(tokens * TEXT_PER_TOKEN),
            // A number is written as eight bytes and cut to its digits (`push_uint`): the
            // room after the last one's digits is taken for a moment.
            ids: Vec::with_capacity(tokens * ID_DIGITS_PER_TOKEN + 8),
            id: Vec::new(),
        }
    }

    /// Keep the choice's id, `id`, as a JSON string.
    fn set_id(&mut self, id: &str) {
        // Sized once: grown from nothing, the quotes and the id took three allocations.
        self.id.reserve_exact(id.len() + 2);
        write_str(&mut self.id, id);
    }

    /// Extend by one chunk's text and ids.
    fn extend(&mut self, text: &str, ids: Option<&[u32]>) {
        write_str_inner(&mut self.text, text);
        let after = !self.ids.is_empty();
        push_ids(&mut self.ids, ids.unwrap_or_default(), after);
    }
}

impl Encoder {
    pub fn new(ctx: Ctx) -> Encoder {
        Encoder {
            ctx,
            tally: Tally::default(),
            choices: Vec::new(),
            deferred: Vec::new(),
            written: Vec::new(),
            // Room for a `meta_info` (about 200 bytes): grown from nothing, the first event
            // reallocated it three times.
            scratch: Vec::with_capacity(META_ROOM),
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
                Event::Chunk(c) => self.chunk(c, out),
                Event::Usage(_) | Event::Done => self.flush(out),
                _ => {}
            }
        }
        tokens
    }

    /// How many tokens a choice's state is sized for: the request's cap, up to a bound.
    fn presized(&self) -> usize {
        self.ctx.max_tokens.map_or(16, |m| m.min(MAX_PRESIZED)) as usize
    }

    /// Write the last events that waited for the counts.
    fn flush(&mut self, out: &mut BytesMut) {
        for i in std::mem::take(&mut self.deferred) {
            self.write(i, out);
        }
    }

    fn chunk(&mut self, c: &Chunk, out: &mut BytesMut) {
        let i = c.index as usize;
        let tokens = self.presized();
        if self.choices.len() <= i {
            self.choices.resize_with(i + 1, Sofar::default);
            self.written.resize_with(i + 1, || Written::sized(tokens));
        }
        self.written[i].extend(&c.text, c.token_ids.as_deref());
        let st = &mut self.choices[i];
        if let Some(ids) = &c.token_ids {
            st.ids = true;
            st.last_id = ids.last().copied().or(st.last_id);
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

    /// One cumulative event for choice `index`, with the counts as they stand (`meta`).
    fn write(&mut self, index: u32, out: &mut BytesMut) {
        let i = index as usize;
        let st = &self.choices[i];
        let w = &mut self.written[i];
        if w.id.is_empty() {
            w.set_id(&choice_id(&self.ctx, index));
        }
        let multi = self.ctx.is_multi().then_some(index);
        if st.finish.is_none() && self.ctx.logprobs.is_none() {
            let usage = usage(&self.ctx, &self.tally, index);
            write_event(out, w, st.ids, multi, |out| {
                write_running_meta(out, usage, &w.id)
            });
        } else {
            let meta = meta(&self.ctx, &self.tally, st, index);
            let scratch = &mut self.scratch;
            write_event(out, w, st.ids, multi, |out| {
                write_meta(out, &meta, &w.id, scratch)
            });
        }
    }

    pub fn end(&mut self, out: &mut BytesMut) {
        self.flush(out);
        write_sse(out, b"[DONE]");
    }

    pub fn error(&mut self, err: &ProxyError, out: &mut BytesMut) {
        super::error::write_stream_error(err, out);
    }
}

/// Choice `index`'s `meta_info` as it stands (`st` its state): the prompt's count from the
/// upstream's running usage, else from the request's token ids (as SGLang itself reports it
/// from the first chunk).
fn meta<'a>(ctx: &'a Ctx, tally: &Tally, st: &'a Sofar, index: u32) -> MetaInfo<'a> {
    let usage = usage(ctx, tally, index);
    meta_info_from(ctx, st.parts(index), usage, st.finish.is_some())
}

/// Choice `index`'s counts as they stand, as `meta` reads them.
fn usage(ctx: &Ctx, tally: &Tally, index: u32) -> Usage {
    let prompt = tally.choice_prompt(index);
    Usage {
        prompt_tokens: prompt.or(ctx.choice_prompt(index)).unwrap_or(0),
        completion_tokens: tally.choice_tokens(index),
        cached_tokens: tally.choice_cached(index),
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
            Some(s) if w.text.is_char_boundary(seen.text_len) => CompactString::from(s),
            _ => CompactString::default(),
        };
        seen.text_len = seen.text_len.max(w.text.len());
        let ids = w.output_ids.map(|ids| {
            let new = Ids::from_slice(ids.get(seen.ids_len..).unwrap_or_default());
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
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::super::response::meta_info;
    use super::*;
    use crate::dialect::Dialect;
    use crate::model::Choice;

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

    /// An event as serde_json wrote it before `write_event`: the reference.
    #[derive(serde::Serialize)]
    struct Out<'a> {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        output_ids: Option<&'a [u32]>,
        meta_info: &'a MetaInfo<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        index: Option<u32>,
    }

    fn reference(
        text: &str,
        ids: Option<&[u32]>,
        meta: &MetaInfo<'_>,
        index: Option<u32>,
    ) -> Vec<u8> {
        let out = Out {
            text,
            output_ids: ids,
            meta_info: meta,
            index,
        };
        let mut v = b"data: ".to_vec();
        serde_json::to_writer(&mut v, &out).unwrap();
        v.extend_from_slice(b"\n\n");
        v
    }

    /// A random piece of text with what JSON escapes (quotes, backslashes, every control
    /// character, DEL) and what it does not (multi-byte characters).
    fn random_text(rng: &mut StdRng) -> String {
        const PIECES: &[&str] = &[
            "a",
            " b",
            "\"",
            "\\",
            "/",
            "\n",
            "\r",
            "\t",
            "\u{8}",
            "\u{c}",
            "\u{0}",
            "\u{1f}",
            "\u{7f}",
            "é",
            "€",
            "😀",
            "\u{2028}",
            "\u{fffd}",
            "</script>",
        ];
        let len = rng.random_range(0..6);
        (0..len)
            .map(|_| match rng.random_range(0..8) {
                0 => char::from(rng.random_range(0..0x20u8)).to_string(),
                _ => PIECES[rng.random_range(0..PIECES.len())].to_string(),
            })
            .collect()
    }

    #[test]
    fn events_are_the_bytes_serde_json_wrote() {
        // Bounded: 300 streams of up to 30 random deltas, one or two choices, with and
        // without token ids and the upstream's counts.
        let mut rng = StdRng::seed_from_u64(5);
        for round in 0..300 {
            let body: &[u8] = match round % 3 {
                0 => br#"{"text": "a b", "stream": true}"#,
                1 => br#"{"text": "a b", "stream": true, "sampling_params": {"n": 2}}"#,
                _ => br#"{"input_ids": [1, 2], "stream": true}"#,
            };
            let mut enc = encoder(body);
            let choices = if round % 3 == 1 { 2 } else { 1 };
            let mut texts = vec![String::new(); choices];
            let mut ids: Vec<Option<Vec<u32>>> = vec![None; choices];
            for _ in 0..rng.random_range(1..30) {
                let index = rng.random_range(0..choices as u32);
                let i = index as usize;
                let delta = random_text(&mut rng);
                let n = rng.random_range(0..3);
                let new_ids = (round % 2 == 0).then(|| {
                    (0..n)
                        .map(|_| rng.random_range(0..200_000u32))
                        .collect::<Vec<_>>()
                });
                texts[i].push_str(&delta);
                if let Some(n) = &new_ids {
                    ids[i].get_or_insert_with(Vec::new).extend_from_slice(n);
                }
                // Now and then the upstream's running counts, cached tokens among them.
                let usage = (rng.random_range(0..3) == 0).then(|| Usage {
                    prompt_tokens: rng.random_range(0..5_000),
                    completion_tokens: rng.random_range(0..100),
                    cached_tokens: rng.random_bool(0.5).then(|| rng.random_range(0..999)),
                });
                let chunk = Event::Chunk(Chunk {
                    index,
                    text: delta.as_str().into(),
                    token_ids: new_ids.map(Ids::from_vec),
                    tokens: Some(1),
                    usage,
                    ..Chunk::default()
                });
                let mut out = BytesMut::new();
                enc.events(&[chunk], &mut out);
                if delta.is_empty() {
                    assert!(out.is_empty());
                    continue;
                }
                let multi = enc.ctx.is_multi().then_some(index);
                let want = reference(
                    &texts[i],
                    ids[i].as_deref(),
                    &meta(&enc.ctx, &enc.tally, &enc.choices[index as usize], index),
                    multi,
                );
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&want),
                    "{:?}",
                    texts[i]
                );
            }
        }
    }

    #[test]
    fn a_last_event_is_the_bytes_serde_json_wrote() {
        // The last event's meta has a latency of its own: both are written from one.
        let enc = encoder(br#"{"text": "a b", "stream": true, "sampling_params": {"n": 2}}"#);
        let choice = Choice {
            index: 1,
            text: "end \"q\"\n\u{1}".into(),
            token_ids: Some(vec![7, 80]),
            finish: Some(crate::model::Finish::Length),
            ..Choice::default()
        };
        let usage = Usage {
            prompt_tokens: 2,
            completion_tokens: 2,
            cached_tokens: Some(1),
        };
        let meta = meta_info(&enc.ctx, &choice, usage, true);
        let (mut w, mut scratch) = (Written::default(), Vec::new());
        w.extend(&choice.text, choice.token_ids.as_deref());
        w.set_id(&choice_id(&enc.ctx, 1));
        let mut out = BytesMut::new();
        write_event(&mut out, &w, true, Some(1), |out| {
            write_meta(out, &meta, &w.id, &mut scratch)
        });
        let want = reference(&choice.text, choice.token_ids.as_deref(), &meta, Some(1));
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want)
        );
        assert!(want.windows(11).any(|w| w == b"e2e_latency"));
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
    fn a_choice_is_sized_for_its_cap_once() {
        // 16 tokens of up to 8 bytes and their ids fit what the first event set aside.
        let body = br#"{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 16}}"#;
        let mut enc = encoder(body);
        let mut out = BytesMut::new();
        let token = |i: u32| {
            Event::Chunk(Chunk {
                text: " token".into(),
                token_ids: Some(Ids::from_slice(&[100_000 + i])),
                ..Chunk::default()
            })
        };
        enc.events(&[token(0)], &mut out);
        let caps = |e: &Encoder| (e.written[0].text.capacity(), e.written[0].ids.capacity());
        let first = caps(&enc);
        assert!(first.0 >= 16 * 6 && first.1 >= 16 * 7, "{first:?}");
        for i in 1..16 {
            enc.events(&[token(i)], &mut out);
        }
        assert_eq!(caps(&enc), first);
        assert_eq!(enc.written[0].ids.len(), 16 * 7 - 1);
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

    #[test]
    fn an_eos_finish_names_the_last_token_id_sent() {
        // The finish event brings no id of its own: SGLang's `matched` is the stream's last.
        let mut enc = encoder(br#"{"text": "a", "stream": true}"#);
        let ids = |v: &[u32]| Some(Ids::from_slice(v));
        let chunk = |text: &str, token_ids, finish| {
            Event::Chunk(Chunk {
                text: text.into(),
                token_ids,
                finish,
                ..Chunk::default()
            })
        };
        let usage = Usage {
            prompt_tokens: 1,
            completion_tokens: 2,
            cached_tokens: None,
        };
        let mut out = BytesMut::new();
        enc.events(
            &[
                chunk("x", ids(&[5]), None),
                chunk("y", ids(&[9]), None),
                chunk("", ids(&[]), Some(crate::model::Finish::Eos(None))),
                Event::Usage(usage),
                Event::Done,
            ],
            &mut out,
        );
        let text = std::str::from_utf8(&out).unwrap();
        let last = text
            .split("\n\n")
            .filter_map(|b| b.strip_prefix("data: "))
            .nth(2);
        let last: Value = serde_json::from_str(last.unwrap()).unwrap();
        assert_eq!(last["output_ids"], serde_json::json!([5, 9]));
        let finish = &last["meta_info"]["finish_reason"];
        assert_eq!(*finish, serde_json::json!({"matched": 9, "type": "stop"}));
    }
}
