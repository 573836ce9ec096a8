//! The last event's shape, for the events of a stream that differ from it only in their text.
//!
//! Through most of a stream a server sends the same bytes around one string: vLLM's
//! `{"id":"cmpl-1",...,"choices":[{"index":0,"text":"` and `","logprobs":null,
//! "finish_reason":null,"stop_reason":null}],"usage":null}` repeat while only the token's
//! text changes. When an event is the last one's bytes with another plain string (no quote,
//! backslash or control character) in that place, it tokenizes as the last one did up to the
//! string and after it, so it reads as the last one read, with the new text: two byte
//! comparisons and one scan of the text instead of a walk of every member (2.7k
//! instructions an event in a profile of a streaming passthrough).
//!
//! The same holds for a `token_ids` array after the text (vLLM's, when lingo asks for the
//! ids to translate a stream), read here in its plainest spelling only, and for the
//! `finish_reason` of the stream's last token (`null` in the shape, a known reason then).
//!
//! Only an event whose every other field is one lingo can rebuild without the old bytes
//! gives a shape: one choice, its text (completions) or its delta's content (chat, no role),
//! no finish, stop, logprobs, usage or error. A shaped read gives only the chunk: `id` and
//! `model` are the last event's, and a decoder takes them from a stream's first event.

use std::ops::Range;

use super::cursor::{begins, each_plain_id, plain_run, plain_uint, Cursor, Sure};
use super::scan::{self, vllm_usage, Spots};
use super::stream::{ChunkWire, DeltaWire};
use super::wire::{finish_from_wire, UsageWire};
use crate::model::{Chunk, ChunkCounts, Ids};

/// A part of the last event that may change, and where it lay in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Slot {
    /// A string's content, between its quotes: the choice's text or delta's content.
    Text,
    /// The choice's `token_ids` array.
    Ids,
    /// The event's `usage` object.
    Usage,
    /// The choice's `finish_reason`: `null` in the shaped event, then `null` or one of the
    /// reasons `finish` knows (the last token's `"length"` or `"stop"`, say).
    Finish,
    /// Only in a stream's opening (`opening.rs`), which differs from the last stream's in
    /// these too: the event's `id` (a string's content), its `created` (a plain number)
    /// and the choice's `prompt_token_ids` (ids in their plainest spelling, not kept).
    Id,
    Created,
    PromptIds,
}

/// The most slots a shape has: one of each kind.
pub(super) const MAX_SLOTS: usize = 7;

#[derive(Debug, Default)]
pub(super) struct Shape {
    /// The last shaped event's bytes; empty when there is none.
    bytes: Vec<u8>,
    /// Its slots, in the order they come, each with where it lay.
    slots: Vec<(Slot, Range<usize>)>,
    index: u32,
    /// The shape is its event without that event's `prompt_token_ids` (which vLLM sends in
    /// a stream's first event only, so the second event is read from the first's shape).
    cut: bool,
    /// A stream whose events all carry `prompt_token_ids`: they stay in its shapes.
    keep_prompt_ids: bool,
}

/// What an event had in its slots.
pub(super) struct Filled<'a> {
    pub(super) id: &'a str,
    /// The text, when `fill` was asked to keep it.
    pub(super) text: &'a str,
    /// The text slot held bytes (read whether or not the text was kept).
    pub(super) has_text: bool,
    pub(super) finish: Option<&'static str>,
    /// The token ids, when `fill` was asked to keep the parts.
    pub(super) token_ids: Option<Ids>,
    /// How many token ids the event held (whether or not they were kept).
    pub(super) id_count: Option<u32>,
    pub(super) usage: Option<UsageWire>,
}

impl Shape {
    /// `bytes` (a whole event) as the chunk a decoder makes of it (`Decoder::wire`), when it
    /// is the last shaped event with its own slots. Only the slots are checked as UTF-8:
    /// every other byte equals the last event's, which was checked, and the pieces begin and
    /// end at ASCII bytes. No wire structs in between: a stream reads one of these per token.
    pub(super) fn chunk(&self, bytes: &[u8]) -> Sure<Chunk> {
        self.fill::<true>(bytes, |_, _| {})
            .map(|f| self.chunk_of(f))
    }

    /// `chunk`, written over `slot` field by field: a translation keeps one chunk in its
    /// event list and reads every shaped event into it, where a chunk returned, moved into
    /// an event and pushed onto the list was copied whole (160 bytes) twice an event.
    #[inline]
    pub(super) fn chunk_into(&self, bytes: &[u8], slot: &mut Chunk) -> Sure<()> {
        let f = self.fill::<true>(bytes, |_, _| {})?;
        self.put_chunk(f, slot);
        Some(())
    }

    /// What `chunk` would count of `bytes`, without the chunk: for a passthrough, which
    /// forwards the event as it came and keeps only its counts. The text is checked as
    /// UTF-8 (serde would refuse it otherwise) but not kept: no string to build, no chunk
    /// to move through the event list (about 200 instructions an event).
    #[inline]
    pub(super) fn counts(&self, bytes: &[u8]) -> Sure<ChunkCounts> {
        let f = self.fill::<false>(bytes, |_, _| {})?;
        Some(ChunkCounts {
            index: self.index,
            tokens: f.id_count,
            usage: f.usage.map(Into::into),
            has_text: f.has_text,
            finish: finish_from_wire(f.finish, None).map(|f| f.label()),
        })
    }

    /// The chunk of an event whose slots held `f` (inlined into the per-event read: a call
    /// moved the chunk out through memory, a hundred instructions an event).
    #[inline(always)]
    pub(super) fn chunk_of(&self, f: Filled<'_>) -> Chunk {
        let mut c = Chunk::default();
        self.put_chunk(f, &mut c);
        c
    }

    /// The chunk of an event whose slots held `f`, written over `slot` (its text's room
    /// kept).
    #[inline(always)]
    fn put_chunk(&self, f: Filled<'_>, slot: &mut Chunk) {
        slot.index = self.index;
        slot.text.clear();
        slot.text.push_str(f.text);
        slot.tokens = f.id_count;
        slot.token_ids = f.token_ids;
        slot.finish = finish_from_wire(f.finish, None);
        slot.logprobs = None;
        slot.usage = f.usage.map(Into::into);
    }

    pub(super) fn index(&self) -> u32 {
        self.index
    }

    pub(super) fn slots(&self) -> &[(Slot, Range<usize>)] {
        &self.slots
    }

    /// A shape of `bytes` with `slots` in them (in order), for the choice `index`.
    pub(super) fn of(bytes: Vec<u8>, slots: Vec<(Slot, Range<usize>)>, index: u32) -> Shape {
        Shape {
            bytes,
            slots,
            index,
            cut: false,
            keep_prompt_ids: false,
        }
    }

    /// Each slot's new value, read between the last event's bytes around it. Slots begin
    /// and end at ASCII bytes (a quote, a bracket, a colon), so each one's bytes are
    /// checked as UTF-8 on their own.
    /// `at` is told where each slot's value lay (its index and range), for a reader that
    /// keeps the event's parts (`opening.rs`). Without `KEEP` the text is checked but not
    /// kept (`Filled::text` stays empty) and the token ids are counted, not listed.
    #[inline]
    pub(super) fn fill<'a, const KEEP: bool>(
        &self,
        bytes: &'a [u8],
        mut at_slot: impl FnMut(usize, Range<usize>),
    ) -> Sure<Filled<'a>> {
        // No shape learnt yet (a learnt one has its text's slot at least): the empty one
        // would match an empty event, which serde refuses.
        if self.slots.is_empty() {
            return None;
        }
        let mut f = Filled {
            id: "",
            text: "",
            has_text: false,
            finish: None,
            token_ids: None,
            id_count: None,
            usage: None,
        };
        let (mut at, mut old) = (0, 0);
        for (i, (slot, range)) in self.slots.iter().enumerate() {
            let fixed = &self.bytes[old..range.start];
            bytes[at..].starts_with(fixed).then_some(())?;
            at += fixed.len();
            old = range.end;
            let rest = &bytes[at..];
            let len = match slot {
                // The text runs to the first quote or backslash; the last event's bytes
                // after it start with a quote, so an escape here does not match them.
                Slot::Text => {
                    let len = plain_run(rest)?;
                    f.has_text = len > 0;
                    if KEEP {
                        f.text = utf8(&rest[..len])?;
                    } else {
                        valid_utf8(&rest[..len])?;
                    }
                    len
                }
                Slot::Id => {
                    let len = plain_run(rest)?;
                    f.id = utf8(&rest[..len])?;
                    len
                }
                // Any number serde skips; a plain one is the only spelling read here.
                Slot::Created => plain_uint(rest)?.1,
                Slot::PromptIds => each_plain_id(rest, |_| {})?,
                Slot::Finish => {
                    let (finish, len) = finish(rest)?;
                    f.finish = finish;
                    len
                }
                Slot::Ids if KEEP => {
                    let (ids, len) = id_list(rest)?;
                    f.id_count = Some(ids.len() as u32);
                    f.token_ids = Some(ids);
                    len
                }
                Slot::Ids => {
                    let mut n = 0u32;
                    let len = each_plain_id(rest, |_| n += 1)?;
                    f.id_count = Some(n);
                    len
                }
                Slot::Usage => match vllm_usage(rest) {
                    Some((usage, len)) => {
                        f.usage = Some(usage);
                        len
                    }
                    None => {
                        let mut c = Cursor::new(utf8(rest)?);
                        f.usage = c.nullable(scan::usage)?;
                        c.at
                    }
                },
            };
            at_slot(i, at..at + len);
            at += len;
        }
        (bytes[at..] == self.bytes[old..]).then_some(f)
    }

    /// Keep `w`'s shape (read from `text`, its parts at `spots`) for the next event, if it
    /// has one; otherwise the last one stays. Its `prompt_token_ids` are left out of the
    /// shape, unless the stream has shown that its next events carry them too: a cut shape
    /// is learnt again only when an event did not match it.
    pub(super) fn learn(&mut self, text: &str, w: &ChunkWire<'_>, spots: &Spots, chat: bool) {
        if let Some(s) = shape_of(w, spots, chat) {
            self.take(text.as_bytes(), s, spots);
        }
    }

    /// Keep `s`, the shape of `text` (its parts at `spots`), as `learn` keeps one.
    pub(super) fn take(&mut self, text: &[u8], mut s: Shape, spots: &Spots) {
        let keep_prompt_ids = self.keep_prompt_ids || (self.cut && spots.prompt_ids.is_some());
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes.clear();
        let cut = spots.prompt_ids.clone().filter(|_| !keep_prompt_ids);
        match &cut {
            Some(r) => {
                bytes.extend_from_slice(&text[..r.start]);
                bytes.extend_from_slice(&text[r.end..]);
                // The slots after the cut move back by its length.
                for (_, at) in s.slots.iter_mut().filter(|(_, at)| at.start >= r.end) {
                    *at = at.start - r.len()..at.end - r.len();
                }
            }
            None => bytes.extend_from_slice(text),
        }
        *self = Shape {
            bytes,
            cut: cut.is_some(),
            keep_prompt_ids,
            ..s
        };
    }
}

/// The shape of a plain event (`w`, its parts at `spots`), its bytes left for the caller.
/// Its text is where the decoder reads it (`chat`: the delta's content, else `text`): a
/// completions-shaped event in a chat stream has no text to the decoder, and gets no shape.
pub(super) fn shape_of(w: &ChunkWire<'_>, spots: &Spots, chat: bool) -> Option<Shape> {
    let [c] = w.choices.as_slice() else {
        return None;
    };
    let plain = c.finish_reason.is_none()
        && c.stop_reason.is_none()
        && c.matched_stop.is_none()
        && c.logprobs.is_none();
    if !plain || w.error.is_some() {
        return None;
    }
    let text = match (chat, &c.text, &c.delta, spots) {
        (false, Some(_), None, Spots { text: Some(at), .. }) => at,
        (
            true,
            None,
            Some(DeltaWire {
                role: None,
                content: Some(_),
            }),
            Spots {
                content: Some(at), ..
            },
        ) => at,
        _ => return None,
    };
    // A value lingo read must have been found where it lay.
    for (value, spot) in [
        (c.token_ids.is_some(), &spots.token_ids),
        (w.usage.is_some(), &spots.usage),
    ] {
        if value && spot.is_none() {
            return None;
        }
    }
    Some(Shape::of(Vec::new(), slots_at(text, spots), c.index))
}

/// The slots of a plain event whose text lies at `text` and its other parts at `spots`,
/// in order.
pub(super) fn slots_at(text: &Range<usize>, spots: &Spots) -> Vec<(Slot, Range<usize>)> {
    let mut slots = vec![(Slot::Text, text.clone())];
    // A `null` finish lingo read where it lay (absent, it has no place to change in).
    for (spot, slot) in [
        (&spots.finish, Slot::Finish),
        (&spots.token_ids, Slot::Ids),
        (&spots.usage, Slot::Usage),
    ] {
        if let Some(r) = spot {
            slots.push((slot, r.clone()));
        }
    }
    slots.sort_by_key(|(_, r)| r.start);
    slots
}

fn utf8(bytes: &[u8]) -> Sure<&str> {
    std::str::from_utf8(bytes).ok()
}

/// Whether `bytes` are UTF-8, ASCII tested first: inline, a word at a time, where the
/// library's check is a call and its setup (80 instructions for a token's few bytes).
#[inline]
fn valid_utf8(bytes: &[u8]) -> Sure<()> {
    (bytes.is_ascii() || std::str::from_utf8(bytes).is_ok()).then_some(())
}

/// A `finish_reason` as serde reads an `Option<Cow<str>>`: `null`, or one of the reasons
/// servers send, spelled plainly; and the bytes it took.
#[inline]
fn finish(bytes: &[u8]) -> Sure<(Option<&'static str>, usize)> {
    if begins(bytes, b"null") {
        return Some((None, 4));
    }
    let quoted = bytes.strip_prefix(b"\"")?;
    let reason = ["length", "stop", "abort", "tool_calls", "content_filter"]
        .into_iter()
        .find(|r| {
            quoted
                .strip_prefix(r.as_bytes())
                .is_some_and(|q| q.first() == Some(&b'"'))
        })?;
    Some((Some(reason), reason.len() + 2))
}

/// A `token_ids` array as serde reads a `Vec<u32>`, in the plainest spelling only (no
/// spaces, no leading zeros), and the bytes it took; anything else is not sure.
fn id_list(bytes: &[u8]) -> Sure<(Ids, usize)> {
    let mut ids = Ids::new();
    let len = each_plain_id(bytes, |id| ids.push(id))?;
    Some((ids, len))
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::super::cursor::mangle;
    use super::super::scan;
    use super::*;
    use crate::model::Event;

    const VLLM: &str = r#"{"id":"cmpl-4a76","object":"text_completion","created":1796147249,"model":"mock-model","choices":[{"index":0,"text":" warm","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#;
    const CHAT: &str = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}]}"#;
    /// vLLM's, asked for token ids (as lingo asks it when it translates).
    const IDS: &str = r#"{"id":"cmpl-9","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" storm","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[1111]}],"usage":null}"#;
    /// vLLM's with `continuous_usage_stats`: usage on every event.
    const USAGE: &str = r#"{"id":"cmpl-9","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" drum","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[1165]}],"usage":{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2,"prompt_tokens_details":null}}"#;
    const SGLANG: &str = r#"{"id":"c1","object":"text_completion","created":1,"model":"m","choices":[{"index":2,"text":"","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#;

    /// The chunk a decoder makes of serde's reading of `next`, when it makes exactly one
    /// (after the `Start` a stream's first event gives).
    fn decoded(next: &str) -> Option<Chunk> {
        let w = serde_json::from_str(next).ok()?;
        let mut d = super::super::stream::Decoder::new(next.contains("\"delta\""));
        let mut out = Vec::new();
        d.wire(w, &mut out);
        match out.as_slice() {
            [Event::Start { .. }, Event::Chunk(c)] => Some(c.clone()),
            _ => None,
        }
    }

    /// `bytes` read from `shape`, its counts read alone agreeing with the chunk's.
    fn read(shape: &Shape, bytes: &[u8]) -> Option<Chunk> {
        let chunk = shape.chunk(bytes);
        let counts = shape.counts(bytes);
        assert_eq!(counts, chunk.as_ref().map(ChunkCounts::of), "{bytes:?}");
        chunk
    }

    /// `next` read from `shape`, as serde and the decoder read it.
    fn reads_as_serde(shape: &Shape, next: &str) {
        let got = read(shape, next.as_bytes());
        assert!(got.is_some(), "not read from the shape: {next}");
        assert_eq!(got, decoded(next), "{next}");
    }

    /// The shape `first` leaves, read by the fast reader as a stream's decoder does.
    fn learnt(first: &str) -> Shape {
        let mut shape = Shape::default();
        let mut head = scan::Head::default();
        if let Some(w) = scan::chunk_after(first, &mut head) {
            shape.learn(first, &w, &head.spots, first.contains(r#""delta""#));
        }
        shape
    }

    #[test]
    fn the_next_token_of_each_servers_stream_is_read_from_the_shape() {
        let texts = [
            (VLLM, "\" warm\""),
            (CHAT, "\"hi\""),
            (SGLANG, "\"\""),
            (IDS, "\" storm\""),
        ];
        for (first, old) in texts {
            let shape = learnt(first);
            for new in [
                "\" cold\"",
                "\"\"",
                "\"é ü\"",
                "\"a much longer token text\"",
            ] {
                let next = first.replace(old, new);
                reads_as_serde(&shape, &next);
            }
        }
    }

    #[test]
    fn a_text_that_is_not_utf8_is_not_read_nor_counted() {
        let shape = learnt(VLLM);
        for text in [&b"\xff"[..], b"a\xc3", b"\xed\xa0\x80", b"\xc3\xa9\xe2\x82"] {
            let at = VLLM.find(" warm").unwrap();
            let next = [&VLLM.as_bytes()[..at], text, &VLLM.as_bytes()[at + 5..]].concat();
            // serde refuses the event: the decoder's full reading must see it.
            assert!(serde_json::from_slice::<serde_json::Value>(&next).is_err());
            assert_eq!((read(&shape, &next), shape.counts(&next)), (None, None));
        }
        let next = VLLM.replace(" warm", "\u{e9}\u{20ac}");
        assert!(shape.counts(next.as_bytes()).is_some_and(|c| c.has_text));
    }

    #[test]
    fn token_ids_after_the_text_are_read_with_it() {
        let shape = learnt(IDS);
        for ids in ["[]", "[0]", "[7,42,4294967295]", "[1111]"] {
            let next = IDS.replace("[1111]", ids).replace(" storm", " x");
            reads_as_serde(&shape, &next);
        }
        for ids in [
            "[01]",
            "[1, 2]",
            "[4294967296]",
            "[1,]",
            "[-1]",
            "[1.0]",
            "null",
            "[1",
        ] {
            let next = IDS.replace("[1111]", ids);
            assert_eq!(read(&shape, next.as_bytes()), None, "{next}");
        }
    }

    #[test]
    fn usage_on_every_event_is_read_with_it() {
        let shape = learnt(USAGE);
        let usage = r#"{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2,"prompt_tokens_details":null}"#;
        for new in [
            r#"{"prompt_tokens":4,"total_tokens":7,"completion_tokens":3,"prompt_tokens_details":null}"#,
            r#"{"prompt_tokens":4,"completion_tokens":30,"prompt_tokens_details":{"cached_tokens":2}}"#,
            r#"{}"#,
            "null",
            r#"{"prompt_tokens":18446744073709551615,"total_tokens":0,"completion_tokens":0}"#,
            r#"{"prompt_tokens":0,"total_tokens":1.5,"completion_tokens":9,"prompt_tokens_details":null}"#,
            r#"{"prompt_tokens":1,"total_tokens":99999999999999999999999,"completion_tokens":9}"#,
        ] {
            let next = USAGE.replace(usage, new).replace("[1165]", "[1,2]");
            reads_as_serde(&shape, &next);
        }
        for new in [
            r#"{"prompt_tokens":4,"prompt_tokens":5}"#,
            r#"{"prompt_tokens":-4}"#,
            r#"{"prompt_tokens":4"#,
            r#"{"prompt_tokens":18446744073709551616,"total_tokens":1,"completion_tokens":1}"#,
            r#"{"prompt_tokens":04,"total_tokens":1,"completion_tokens":1}"#,
            r#"{"prompt_tokens":4,"total_tokens":01,"completion_tokens":1}"#,
        ] {
            let next = USAGE.replace(usage, new);
            assert_eq!(read(&shape, next.as_bytes()), None, "{next}");
        }
    }

    #[test]
    fn an_event_that_differs_elsewhere_is_not_read_from_the_shape() {
        let shape = learnt(VLLM);
        for (old, new) in [
            ("\" warm\"", "\"a\\\"b\""),
            ("\" warm\"", "\"a\\nb\""),
            ("\" warm\"", "\"a\tb\""),
            ("\" warm\"", "\"a\",\"text\":\"b\""),
            ("\"finish_reason\":null", "\"finish_reason\":\"a\\\"b\""),
            ("\"finish_reason\":null", "\"finish_reason\":nul"),
            ("\"finish_reason\":null", "\"finish_reason\":1"),
            ("\"finish_reason\":null", "\"finish_reason\":\"\""),
            ("\"finish_reason\":null", "\"finish_reason\":\"lengthy\""),
            ("\"finish_reason\":null", "\"finish_reason\":\"stop"),
            ("\"usage\":null", "\"usage\":{\"prompt_tokens\":1}"),
            ("\"index\":0", "\"index\":1"),
            ("cmpl-4a76", "cmpl-4a77"),
        ] {
            let next = VLLM.replace(old, new);
            assert_eq!(read(&shape, next.as_bytes()), None, "{next}");
        }
    }

    #[test]
    fn the_last_token_with_its_finish_is_read_from_the_shape() {
        for first in [VLLM, CHAT, IDS] {
            let shape = learnt(first);
            for finish in ["\"length\"", "\"stop\"", "\"abort\"", "null"] {
                let next = first.replace(
                    "\"finish_reason\":null",
                    &format!("\"finish_reason\":{finish}"),
                );
                reads_as_serde(&shape, &next);
            }
        }
    }

    #[test]
    fn a_slot_that_is_not_utf8_is_not_read_from_the_shape() {
        let shape = learnt(VLLM);
        let mut next = VLLM.replace(" warm", " w\u{e9}rm").into_bytes();
        let at = next.iter().position(|&b| b == 0xc3).unwrap();
        next[at + 1] = b'x';
        assert!(std::str::from_utf8(&next).is_err());
        assert_eq!(read(&shape, &next), None);
    }

    #[test]
    fn events_with_more_than_a_text_give_no_shape() {
        for text in [
            r#"{"id":"x","model":"m","choices":[{"index":0,"text":"a","finish_reason":"stop"}]}"#,
            r#"{"id":"x","model":"m","choices":[{"index":0,"text":"a","logprobs":{"a":-1}}]}"#,
            r#"{"id":"x","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"id":"x","model":"m","choices":[{"index":0,"text":"a\nb"}]}"#,
            r#"{"id":"x","choices":[{"index":0,"text":"a"},{"index":1,"text":"b"}]}"#,
            r#"{"id":"x","choices":[]}"#,
        ] {
            assert!(scan::chunk(text).is_some(), "{text}");
            assert!(learnt(text).bytes.is_empty(), "{text}");
        }
    }

    /// vLLM's first event when asked for token ids: the prompt's ids too (`IDS` after it).
    const PROMPT: &str = r#"{"id":"cmpl-9","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" warm","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":[43246,27879],"token_ids":[1229]}],"usage":null}"#;

    /// `shape` after the decoder failed to read `text` from it and the fast reader read it.
    fn relearn(shape: &mut Shape, text: &str) {
        assert_eq!(read(shape, text.as_bytes()), None, "{text}");
        let mut head = scan::Head::default();
        let w = scan::chunk_after(text, &mut head).unwrap();
        shape.learn(text, &w, &head.spots, text.contains(r#""delta""#));
    }

    #[test]
    fn the_event_after_the_one_with_the_prompt_ids_is_read_from_its_shape() {
        let shape = learnt(PROMPT);
        assert!(shape.cut);
        reads_as_serde(&shape, IDS);
        for (text, finish) in [("\"\"", "null"), ("\"a b\"", "\"length\"")] {
            let next = IDS.replace("\" storm\"", text).replace(
                "\"finish_reason\":null",
                &format!("\"finish_reason\":{finish}"),
            );
            reads_as_serde(&shape, &next);
        }
        // Only its own prompt ids are left out: any others are a different event.
        let other = PROMPT.replace("[43246,27879]", "[1]");
        assert_eq!(read(&shape, other.as_bytes()), None);
        // The prompt ids as the choice's first member: that spelling is kept whole.
        let first = PROMPT
            .replace(",\"prompt_token_ids\":[43246,27879]", "")
            .replace("{\"index\":0,", "{\"prompt_token_ids\":[1],\"index\":0,");
        assert!(!learnt(&first).cut, "{first}");
    }

    #[test]
    fn a_stream_whose_events_all_carry_prompt_ids_keeps_them_in_its_shape() {
        let mut shape = learnt(PROMPT);
        let second = PROMPT.replace(" warm", " drum").replace("[1229]", "[1165]");
        relearn(&mut shape, &second);
        assert!(!shape.cut && shape.keep_prompt_ids);
        for text in ["\" pear\"", "\"\""] {
            reads_as_serde(&shape, &second.replace("\" drum\"", text));
        }
        // Kept for the rest of the stream, through shapes learnt again.
        relearn(&mut shape, &second.replace(",\"usage\":null", ""));
        assert!(!shape.cut && shape.keep_prompt_ids);
    }

    /// JSON's own characters and a few multi-byte ones, for the edits.
    const EDITS: &[u8] = b"{}[]\":,\\ -.019enul\n\t";

    #[test]
    fn an_event_after_a_shaped_one_is_never_read_otherwise_than_serde_would() {
        // Bounded: 60,000 events, each the first one with random edits, either anywhere or
        // inside its text (where the shape still matches when the text stays plain).
        let mut rng = StdRng::seed_from_u64(5);
        let mut hits = 0;
        for _ in 0..60_000 {
            let event = [VLLM, CHAT, SGLANG, IDS, USAGE, PROMPT][rng.random_range(0..6)];
            let shape = learnt(event);
            // The shape's own bytes (the event's, but for prompt ids left out).
            let first = std::str::from_utf8(&shape.bytes).unwrap();
            let next = match rng.random_bool(0.5) {
                true => mangle(&mut rng, first, EDITS),
                false => {
                    let (_, at) = &shape.slots[rng.random_range(0..shape.slots.len())];
                    mangle(&mut rng, &first[at.clone()], EDITS)
                        .map(|t| format!("{}{t}{}", &first[..at.start], &first[at.end..]))
                }
            };
            let Some(next) = next else { continue };
            if let Some(got) = read(&shape, next.as_bytes()) {
                hits += 1;
                assert_eq!(Some(got), decoded(&next), "{next}");
            };
        }
        assert!(hits > 5_000, "only {hits} read from the shape");
    }
}
