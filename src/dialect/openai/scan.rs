//! A fast reader for OpenAI-style stream events that gives exactly what serde would, or
//! nothing. serde's derived reader spends about 5k instructions on a 220-byte vLLM event
//! (every key parsed, matched and skipped through visitors): in a profile of a streaming
//! passthrough, 40% of lingo's instructions. This walks the event once.
//!
//! It answers only when it is sure: an escaped key, an `error` member, a field given twice,
//! an index that is not a plain integer, anything that is not well-formed JSON, and the
//! caller reads the event with serde instead (which then gives its own answer or error).
//! Values it does not take apart (`usage`, `logprobs`, `stop_reason`, a string with
//! escapes) are handed to serde as their exact text, so they come out as serde reads them.
//! The members servers repeat unchanged before `choices` (`id`, `object`, `created`,
//! `model`) are read once per stream: an event that starts with the last one's bytes there
//! is read from its `choices` on (`Head`).

use std::borrow::Cow;
use std::ops::Range;

use smallvec::SmallVec;

use super::cursor::{begins, plain, plain_uint, Cursor, Seen, Sure};
use super::stream::{ChoiceWire, ChunkWire, DeltaWire};
use super::wire::{CachedWire, UsageWire};

/// An event's head: its members before `choices`, when they are only the ones servers
/// repeat unchanged through a stream (`id`, `object`, `created`, `model`,
/// `system_fingerprint`). An event that starts with the same bytes reads the same there,
/// so reading resumes at `choices`: about half of a vLLM event not read again.
#[derive(Debug, Default)]
pub(super) struct Head {
    /// The bytes through `"choices":`; empty when there is none to reuse.
    bytes: Vec<u8>,
    pub(super) id: Option<Range<usize>>,
    pub(super) model: Option<Range<usize>>,
    /// Where `created` lay, for a stream's opening to learn (`opening.rs`).
    pub(super) created: Option<Range<usize>>,
    /// Where the last event's changing parts lay, for `Shape` to learn.
    pub(super) spots: Spots,
}

impl Head {
    /// The head an event read whole would leave: its bytes through `"choices":` (`bytes`),
    /// its `id` and `model` where they lie in them, and its changing parts at `spots`.
    pub(super) fn of(bytes: &[u8], id: Range<usize>, model: Range<usize>, spots: Spots) -> Head {
        Head {
            bytes: bytes.to_vec(),
            id: Some(id),
            model: Some(model),
            created: None,
            spots,
        }
    }

    /// The length of the head's bytes: 0 when the last event had none to reuse.
    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }
}

/// Where an event's parts that change from token to token lie: its last choice's text or
/// delta's content (between the quotes), `token_ids` array (brackets included) and `null`
/// finish, and the event's `usage`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Spots {
    pub(super) text: Option<Range<usize>>,
    pub(super) content: Option<Range<usize>>,
    pub(super) token_ids: Option<Range<usize>>,
    /// The event's `usage` object (braces included), which vLLM sends with every event when
    /// asked for `continuous_usage_stats`.
    pub(super) usage: Option<Range<usize>>,
    /// The choice's `finish_reason` value, when it was `null`.
    pub(super) finish: Option<Range<usize>>,
    /// The choice's `prompt_token_ids` member, from the end of the value before it to the
    /// end of its own (vLLM sends the prompt's ids in the first event only).
    pub(super) prompt_ids: Option<Range<usize>>,
}

/// Where this event's head ended and where its `id`, `model` and `created` lie, once
/// `choices` came with only repeated members before it.
type HeadEnd = (
    usize,
    Option<Range<usize>>,
    Option<Range<usize>>,
    Option<Range<usize>>,
);

/// One event as serde would read it into a `ChunkWire`, or `None`.
#[cfg(test)]
pub(super) fn chunk(text: &str) -> Option<ChunkWire<'_>> {
    chunk_after(text, &mut Head::default())
}

/// One event as serde reads it: what the fast reader must agree with.
fn by_serde(text: &str) -> Option<ChunkWire<'_>> {
    serde_json::from_str(text).ok()
}

/// For the fuzzers: what the fast reader gives for each of `events` in turn (each after the
/// one before, whose head it may reuse), when it gives anything, is what serde reads.
pub(crate) fn agrees_with_serde(events: &[&str]) {
    let mut head = Head::default();
    for text in events {
        if let Some(fast) = chunk_after(text, &mut head) {
            let serde = by_serde(text);
            assert_eq!(
                Some(fast),
                serde,
                "an event read fast otherwise than serde: {text}"
            );
        }
    }
}

/// `chunk`, skipping the head when the event starts with the last one's (and keeping
/// this event's head for the next).
pub(super) fn chunk_after<'a>(text: &'a str, head: &mut Head) -> Option<ChunkWire<'a>> {
    let mut c = Cursor::new(text);
    let mut w = ChunkWire {
        id: Cow::Borrowed(""),
        model: Cow::Borrowed(""),
        choices: SmallVec::new(),
        usage: None,
        error: None,
    };
    let mut seen = Seen::default();
    let mut spots = Spots::default();
    let reused = !head.bytes.is_empty() && c.bytes.starts_with(&head.bytes);
    if reused {
        // The head's bytes read as they did: its fields count as given.
        if head.id.is_some() {
            seen.first(0)?;
        }
        if head.model.is_some() {
            seen.first(1)?;
        }
    }
    // Only repeated members so far, and where `id` and `model` lie.
    let (mut plain, mut id_at, mut model_at, mut created_at) = (true, None, None, None);
    let mut end: Option<HeadEnd> = None;
    let mut member = |c: &mut Cursor<'a>, key: &'a str| {
        match key {
            "id" => {
                (w.id, id_at) = seen.first(0).and_then(|()| c.located_string())?;
                plain &= id_at.is_some();
            }
            "model" => {
                (w.model, model_at) = seen.first(1).and_then(|()| c.located_string())?;
                plain &= model_at.is_some();
            }
            "choices" => {
                seen.first(2)?;
                if plain {
                    end = Some((c.at, id_at.clone(), model_at.clone(), created_at.clone()));
                }
                w.choices = c.array_into(|c| choice(c, &mut spots))?;
            }
            "usage" => {
                plain = false;
                seen.first(3)?;
                c.ws();
                let start = c.at;
                // vLLM's own spelling read at once (a stream's first and last events hold
                // it), any other by the cursor.
                w.usage = match vllm_usage(&c.bytes[start..]) {
                    Some((u, len)) => {
                        c.at += len;
                        Some(u)
                    }
                    None => c.nullable(usage)?,
                };
                spots.usage = w.usage.is_some().then_some(start..c.at);
            }
            // An upstream's error: rare, and serde's to read.
            "error" => return None,
            "created" => {
                c.ws();
                let start = c.at;
                c.skip_value(0)?;
                created_at = Some(start..c.at);
            }
            "object" | "system_fingerprint" => c.skip_value(0)?,
            _ => {
                plain = false;
                c.skip_value(0)?;
            }
        }
        Some(())
    };
    if reused {
        c.at = head.bytes.len();
        member(&mut c, "choices")?;
        c.members_after(&mut member)?;
    } else {
        c.object(&mut member)?;
    }
    c.ws();
    if c.at != c.bytes.len() {
        return None;
    }
    if reused {
        if let Some(r) = head.id.clone() {
            w.id = Cow::Borrowed(&text[r]);
        }
        if let Some(r) = head.model.clone() {
            w.model = Cow::Borrowed(&text[r]);
        }
    } else if let Some((at, id, model, created)) = end {
        head.bytes.clear();
        head.bytes.extend_from_slice(&c.bytes[..at]);
        head.id = id;
        head.model = model;
        head.created = created;
    }
    head.spots = spots;
    Some(w)
}

/// `usage` as serde reads a `UsageWire`: each count 0 when absent.
pub(super) fn usage(c: &mut Cursor<'_>) -> Sure<UsageWire> {
    let mut seen = Seen::default();
    let mut u = UsageWire::default();
    c.object(|c, key| {
        match key {
            "prompt_tokens" => u.prompt_tokens = seen.first(0).and_then(|()| c.uint())?,
            "completion_tokens" => u.completion_tokens = seen.first(1).and_then(|()| c.uint())?,
            "prompt_tokens_details" => {
                u.prompt_tokens_details = seen.first(2).and_then(|()| c.nullable(details))?;
            }
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    Some(u)
}

/// `usage` as vLLM spells it at every event of a stream with `continuous_usage_stats`,
/// `{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2,"prompt_tokens_details":null}`
/// (or without the details), read as serde reads a `UsageWire`, and the bytes it took; any
/// other spelling is `usage`'s. Both readers of an event take it first: walking it member by
/// member was a third of a translated stream's reading of each event.
pub(super) fn vllm_usage(bytes: &[u8]) -> Sure<(UsageWire, usize)> {
    let mut at = 0;
    let prompt_tokens = count_after(bytes, &mut at, b"{\"prompt_tokens\":")?;
    // Ignored, as serde ignores it: only stepped over (any plain digits are a number; any
    // other spelling fails the key after it, and serde reads the event).
    digits_after(bytes, &mut at, b",\"total_tokens\":")?;
    let completion_tokens = count_after(bytes, &mut at, b",\"completion_tokens\":")?;
    let rest = &bytes[at..];
    const TAIL: &[u8; 30] = b",\"prompt_tokens_details\":null}";
    let end = if begins(rest, TAIL) {
        TAIL.len()
    } else if rest.first() == Some(&b'}') {
        1
    } else {
        return None;
    };
    let usage = UsageWire {
        prompt_tokens,
        completion_tokens,
        prompt_tokens_details: None,
    };
    Some((usage, at + end))
}

/// The plain count after `key` at `*at`, moving `*at` past both.
fn count_after<const N: usize>(bytes: &[u8], at: &mut usize, key: &[u8; N]) -> Sure<u64> {
    begins(&bytes[*at..], key).then_some(())?;
    *at += N;
    let (n, len) = plain_uint(&bytes[*at..])?;
    *at += len;
    Some(n)
}

/// The plain digits after `key` at `*at` (no leading zero), not read: `*at` moved past both.
fn digits_after<const N: usize>(bytes: &[u8], at: &mut usize, key: &[u8; N]) -> Sure<()> {
    begins(&bytes[*at..], key).then_some(())?;
    *at += N;
    let rest = &bytes[*at..];
    let n = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    *at += n;
    plain(rest, n).then_some(())
}

/// `prompt_tokens_details`: its `cached_tokens`, a `u64` or null.
fn details(c: &mut Cursor<'_>) -> Sure<CachedWire> {
    let mut seen = Seen::default();
    let mut d = CachedWire::default();
    c.object(|c, key| {
        match key {
            "cached_tokens" => {
                d.cached_tokens = seen.first(0).and_then(|()| c.nullable(Cursor::uint))?;
            }
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    Some(d)
}

/// A string and where it lies, when it is borrowed.
fn located<'a>(c: &mut Cursor<'a>, at: &mut Option<Range<usize>>) -> Sure<Cow<'a, str>> {
    let (s, range) = c.located_string()?;
    *at = range;
    Some(s)
}

/// One choice; `spots` keeps where its changing parts lie (the last choice's, in the end).
fn choice<'a>(c: &mut Cursor<'a>, spots: &mut Spots) -> Sure<ChoiceWire<'a>> {
    *spots = Spots::default();
    let mut ch = ChoiceWire {
        index: 0,
        text: None,
        delta: None,
        finish_reason: None,
        stop_reason: None,
        matched_stop: None,
        token_ids: None,
        logprobs: None,
    };
    let mut seen = Seen::default();
    // Where the last member's value ended.
    let mut after_value = None;
    c.object(|c, key| {
        match key {
            "index" => ch.index = seen.first(0).and_then(|()| c.u32())?,
            "text" => {
                seen.first(1)?;
                ch.text = c.nullable(|c| located(c, &mut spots.text))?;
            }
            "delta" => {
                seen.first(2)?;
                ch.delta = c.nullable(|c| delta(c, &mut spots.content))?;
            }
            "finish_reason" => {
                seen.first(3)?;
                c.ws();
                let start = c.at;
                ch.finish_reason = c.nullable(Cursor::string)?;
                spots.finish = ch.finish_reason.is_none().then_some(start..c.at);
            }
            "stop_reason" => ch.stop_reason = seen.first(4).and_then(|()| c.value())?,
            "matched_stop" => ch.matched_stop = seen.first(5).and_then(|()| c.value())?,
            "token_ids" => {
                seen.first(6)?;
                c.ws();
                let start = c.at;
                ch.token_ids = c.nullable(|c| c.ids())?.map(crate::model::Ids::from_vec);
                spots.token_ids = ch.token_ids.is_some().then_some(start..c.at);
            }
            "logprobs" => ch.logprobs = seen.first(7).and_then(|()| c.value())?,
            "prompt_token_ids" => {
                c.skip_value(0)?;
                spots.prompt_ids = after_value.map(|start| start..c.at);
            }
            _ => c.skip_value(0)?,
        }
        after_value = Some(c.at);
        Some(())
    })?;
    Some(ch)
}

fn delta<'a>(c: &mut Cursor<'a>, content_at: &mut Option<Range<usize>>) -> Sure<DeltaWire<'a>> {
    let mut d = DeltaWire {
        role: None,
        content: None,
    };
    let mut seen = Seen::default();
    c.object(|c, key| {
        match key {
            "role" => d.role = seen.first(0).and_then(|()| c.nullable(Cursor::string))?,
            "content" => {
                seen.first(1)?;
                d.content = c.nullable(|c| located(c, content_at))?;
            }
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    Some(d)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;

    use crate::dialect::openai::cursor::{mangle, mangled_bodies, JSON_BYTES};
    use rand::{Rng, SeedableRng};

    use super::by_serde as serde;
    use super::*;

    /// Events as servers send them: the fast reader must take each, as serde reads it.
    const COMMON: &[&str] = &[
        r#"{"id":"cmpl-4a76","object":"text_completion","created":1796147249,"model":"mock-model","choices":[{"index":0,"text":" warm","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#,
        r#"{"id":"cmpl-4a76","object":"text_completion","created":1796147249,"model":"m","choices":[{"index":0,"text":" pear","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null}"#,
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":"line\nbreak \"quoted\" \u00e9"},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"x","model":"m","choices":[{"index":1,"text":"é ünï","finish_reason":"stop","stop_reason":13,"token_ids":[1, 22,333]}]}"#,
        r#"{"id":"x","model":"m","choices":[{"index":0,"text":"","finish_reason":"stop","matched_stop":"stop-here"}]}"#,
        r#"{"id":"x","model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":16,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":3}}}"#,
        // vLLM's, asked for token ids and running usage: the first event and the usage one.
        r#"{"id":"cmpl-9","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" warm","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":[43246,27879],"token_ids":[1229]}],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1,"prompt_tokens_details":null}}"#,
        r#"{"id":"cmpl-9","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":2,"total_tokens":18,"completion_tokens":16}}"#,
        r#"{"id":"x","model":"m","choices":[{"index":0,"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-0.5],"top_logprobs":[{"a":-0.5}],"text_offset":[0]}}]}"#,
        " { \"id\" : \"x\" ,\n \"model\":\"m\",\t\"choices\" : [ { \"index\" : 0 , \"text\" : \"a\" } ] , \"extra\": {\"n\": [1.5e-3, -0, true, false, null, {}, []]} } \n",
        r#"{"id":"x","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"c","function":{"arguments":"{\"a\":1}"}}]},"finish_reason":null}]}"#,
    ];

    /// Events the fast reader must leave to serde (which may take or refuse them).
    const DEFERRED: &[&str] = &[
        r#"{"error":{"message":"boom","type":"x"}}"#,
        r#"{"id":"a","id":"b","choices":[]}"#,
        r#"{"choices":[{"index":0,"index":1}]}"#,
        r#"{"i\u0064":"x","choices":[]}"#,
        r#"{"choices":[{"index":1.0}]}"#,
        r#"{"choices":[{"index":1e0}]}"#,
        r#"{"choices":[{"index":-0}]}"#,
        r#"{"choices":[{"index":01}]}"#,
        r#"{"choices":[{"index":4294967296}]}"#,
        r#"{"choices":[{"index":null}]}"#,
        r#"{"id":null,"choices":[]}"#,
        r#"{"choices":null}"#,
        r#"{"choices":[[0,"text"]]}"#,
        r#"["id","model",[]]"#,
        r#"{"choices":[]} x"#,
        r#"{"choices":[],}"#,
        r#"{"choices":[{"text":"a	tab"}]}"#,
        r#"{"choices":[{"text":"\ud800"}]}"#,
        r#"{"choices":[{"text":"\x"}]}"#,
        r#"{"choices":[{"token_ids":[1,-2]}]}"#,
        r#"{"usage":{"prompt_tokens":-1}}"#,
        r#"{"a":01}"#,
        r#"{"a":1.}"#,
        r#"{"a":tru}"#,
        r#"{"a":"#,
        "",
    ];

    #[test]
    fn common_events_are_read_fast_and_as_serde_reads_them() {
        for text in COMMON {
            let fast = chunk(text);
            assert!(fast.is_some(), "not read fast: {text}");
            assert_eq!(fast, serde(text), "{text}");
        }
    }

    #[test]
    fn what_it_is_not_sure_of_goes_to_serde() {
        for text in DEFERRED {
            assert_eq!(chunk(text), None, "{text}");
        }
    }

    #[test]
    fn an_event_with_the_last_ones_head_is_read_from_its_choices() {
        let first = COMMON[0];
        let next = COMMON[0]
            .replace(" warm", " drum")
            .replace("null}]", "\"stop\"}]");
        let mut head = Head::default();
        assert_eq!(chunk_after(first, &mut head), serde(first));
        assert!(head.bytes.ends_with(br#""choices":"#), "{head:?}");
        let got = chunk_after(&next, &mut head);
        assert!(got.is_some());
        assert_eq!(got, serde(&next));
        // A head with `usage` or an escaped id in it is not kept.
        for text in [
            r#"{"usage":null,"id":"x","choices":[]}"#,
            r#"{"id":"a\u0062","choices":[]}"#,
            r#"{"id":"x","other":1,"choices":[]}"#,
        ] {
            let mut head = Head::default();
            assert!(chunk_after(text, &mut head).is_some(), "{text}");
            assert!(head.bytes.is_empty(), "{text}");
        }
    }

    #[test]
    fn an_event_after_another_is_never_read_otherwise_than_serde_would() {
        // Bounded: 40,000 pairs, the second a random edit of the first, so that its head
        // often matches and what follows differs.
        let mut rng = StdRng::seed_from_u64(11);
        let mut reused = 0;
        for _ in 0..40_000 {
            let first = COMMON[rng.random_range(0..COMMON.len())];
            let Some(next) = mangle(&mut rng, first, JSON_BYTES) else {
                continue;
            };
            let mut head = Head::default();
            let _ = chunk_after(first, &mut head);
            let hit = !head.bytes.is_empty() && next.as_bytes().starts_with(&head.bytes);
            if let Some(fast) = chunk_after(&next, &mut head) {
                reused += usize::from(hit);
                assert_eq!(Some(fast), serde(&next), "{first}\n{next}");
            };
        }
        assert!(reused > 1_000, "only {reused} reused a head");
    }

    #[test]
    fn mangled_events_are_never_read_otherwise_than_serde_would() {
        // Bounded: 40,000 random edits of the corpus.
        let corpus: Vec<&str> = COMMON.iter().chain(DEFERRED).copied().collect();
        let read_fast = mangled_bodies(&corpus, JSON_BYTES, 7, 40_000, |text| {
            let fast = chunk(text);
            let answered = fast.is_some();
            assert!(!answered || fast == serde(text), "{text}");
            answered
        });
        assert!(read_fast > 1_000, "only {read_fast} edits were read fast");
    }
}
