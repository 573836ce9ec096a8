//! A stream's first event, read from the shape of the last stream's first event.
//!
//! A stream's later events are read from the shape of the one before (`shape.rs`), but its
//! first has no event before it and was read member by member: about 5k instructions, a
//! twentieth of a streamed request's in passthrough. Yet one server's streams open alike:
//! vLLM's first event differs from the last stream's only in its `id`, its `created`, its
//! text, and, when lingo asks for token ids, the prompt's and the token's ids and the
//! counts. So each worker thread keeps the last first event it read whole, with those
//! parts as slots (`Opening`), and the next stream's first event is read from it when all
//! its other bytes are the same; anything else is read whole, as before, and becomes the
//! opening kept.
//!
//! What it gives is what reading the event whole gives: the stream's start (its `id` and
//! the opening's `model`, which lies in the bytes that matched), its chunk, and the head and
//! spots the stream's next events are read with. A chat stream's first event names only
//! the role and gives the choice's `Role`; its opening has no text slot and leaves the
//! spots to the next event's reading.

use std::cell::RefCell;
use std::ops::Range;

use super::scan::{Head, Spots};
use super::shape::{shape_of, slots_at, Shape, Slot, MAX_SLOTS};
use super::stream::ChunkWire;
use crate::model::Event;

/// The most bytes an opening keeps: its event without its slots' values (a few hundred
/// bytes for every server; a longer one, a long model name, say, is not kept).
const MAX_KEPT: usize = 2048;

thread_local! {
    /// The last opening each worker thread learnt, for completions and for chat streams.
    static LAST: RefCell<[Option<Opening>; 2]> = const { RefCell::new([None, None]) };
}

/// A first event's shape, its slots' values left out of its bytes (each slot an empty
/// range where its value lay): only the bytes around them are compared.
#[derive(Debug)]
pub(super) struct Opening {
    shape: Shape,
    model: String,
    /// Where the `model` string's content and the head (through `"choices":`) end lie in
    /// the kept bytes.
    model_at: Range<usize>,
    head_end: usize,
    /// How many bytes of the `prompt_token_ids` member come before its value (its spot
    /// starts at the end of the value before it).
    prompt_lead: usize,
    /// A chat stream's first event that only names the role (`"delta":{"role":"assistant",
    /// "content":""}`, nothing else): it reads as the choice's `Role`, not a chunk.
    role: bool,
}

/// A first event read from an opening.
pub(super) struct Opened {
    pub(super) id: String,
    pub(super) model: String,
    /// The choice's chunk, or its `Role` (a role opening's).
    pub(super) event: Event,
    /// The head the stream's next event is read with, as reading this one whole would have
    /// left it (for a role event, without the spots, which that reading sets first).
    pub(super) head: Head,
    /// The event's shape (its bytes for the caller to give), unless it finished the choice
    /// (a finished event gives none).
    pub(super) shape: Option<Shape>,
}

/// The first event `bytes` of a stream, read from this thread's opening (`chat`: of a chat
/// stream), when it is that opening with other values in its slots.
pub(super) fn open(bytes: &[u8], chat: bool) -> Option<Opened> {
    LAST.with_borrow(|last| last[usize::from(chat)].as_ref()?.read(bytes, chat))
}

/// Keep the first event `text`, read whole into `w` with `head`, as this thread's opening
/// when it has one: a plain event (its shape's) or a chat stream's role event, with a head
/// to reuse.
pub(super) fn learn(text: &str, w: &ChunkWire<'_>, head: &Head, chat: bool) {
    if let Some(o) = Opening::of(text, w, head, chat) {
        LAST.with_borrow_mut(|last| last[usize::from(chat)] = Some(o));
    }
}

/// Where a first event read whole has the values an opening of it makes slots of.
struct Found {
    /// In order, each with where its value lies in the event.
    slots: Vec<(Slot, Range<usize>)>,
    index: u32,
    prompt_lead: usize,
    role: bool,
}

/// `Found` for the first event `text`, read whole into `w` with `head`, when it can be an
/// opening: a plain event (its shape's) or a chat stream's role event, with a head to reuse
/// and a plain `created`.
fn found(text: &str, w: &ChunkWire<'_>, head: &Head, chat: bool) -> Option<Found> {
    let spots = &head.spots;
    let role = chat && is_role_only(w);
    let (mut slots, index) = match shape_of(w, spots, chat) {
        Some(shape) => (shape.slots().to_vec(), shape.index()),
        None if role => (Vec::new(), w.choices[0].index),
        None => return None,
    };
    let (id, created) = (head.id.clone()?, head.created.clone()?);
    if head.len() == 0 || !is_plain_uint(&text.as_bytes()[created.clone()]) {
        return None;
    }
    slots.push((Slot::Id, id));
    slots.push((Slot::Created, created));
    let mut prompt_lead = 0;
    if let Some(r) = &spots.prompt_ids {
        // The value is the spot's end: from its `[` on.
        prompt_lead = text.as_bytes()[r.clone()].iter().position(|&b| b == b'[')?;
        slots.push((Slot::PromptIds, r.start + prompt_lead..r.end));
    }
    slots.sort_by_key(|(_, r)| r.start);
    Some(Found {
        slots,
        index,
        prompt_lead,
        role,
    })
}

impl Opening {
    fn of(text: &str, w: &ChunkWire<'_>, head: &Head, chat: bool) -> Option<Opening> {
        let Found {
            slots,
            index,
            prompt_lead,
            role,
        } = found(text, w, head, chat)?;
        let model = head.model.clone()?;
        // The kept bytes: the event's without its slots' values.
        let (mut kept, mut from) = (Vec::with_capacity(text.len()), 0);
        let mut emptied = Vec::with_capacity(slots.len());
        for (slot, r) in &slots {
            kept.extend_from_slice(&text.as_bytes()[from..r.start]);
            emptied.push((*slot, kept.len()..kept.len()));
            from = r.end;
        }
        kept.extend_from_slice(&text.as_bytes()[from..]);
        if kept.len() > MAX_KEPT {
            return None;
        }
        let to_kept = |at: usize| at - removed_before(&slots, at);
        Some(Opening {
            model: text[model.clone()].to_string(),
            model_at: to_kept(model.start)..to_kept(model.end),
            head_end: to_kept(head.len()),
            prompt_lead,
            role,
            shape: Shape::of(kept, emptied, index),
        })
    }

    fn read(&self, bytes: &[u8], chat: bool) -> Option<Opened> {
        let mut values: [Range<usize>; MAX_SLOTS] = Default::default();
        let f = self.shape.fill::<true>(bytes, |i, r| values[i] = r)?;
        let slots = self.shape.slots();
        let at = &values[..slots.len()];
        // A position in the kept bytes, in this event: after the values before it.
        let here = |kept: usize| {
            kept + slots
                .iter()
                .zip(at)
                .filter(|((_, s), _)| s.start <= kept)
                .map(|(_, v)| v.len())
                .sum::<usize>()
        };
        let mut spots = Spots::default();
        let (mut id, mut text) = (None, None);
        for ((slot, _), value) in slots.iter().zip(at) {
            let value = Some(value.clone());
            match slot {
                Slot::Text => {
                    text.clone_from(&value);
                    *(if chat {
                        &mut spots.content
                    } else {
                        &mut spots.text
                    }) = value;
                }
                Slot::Ids => spots.token_ids = value,
                Slot::Usage => spots.usage = value,
                // The spot is that of a `null` finish only (as the whole reading keeps it).
                Slot::Finish => spots.finish = value.filter(|_| f.finish.is_none()),
                Slot::PromptIds => {
                    spots.prompt_ids = value.map(|v| v.start - self.prompt_lead..v.end)
                }
                Slot::Id => id = value,
                Slot::Created => {}
            }
        }
        let head_end = here(self.head_end);
        let model = here(self.model_at.start)..here(self.model_at.end);
        let index = self.shape.index();
        let id_text = f.id.to_string();
        // A role event gives no shape, and its spots are left to the next event's reading
        // (which sets them anew before anything reads them).
        let (event, shape) = match self.role {
            true => (Event::Role { index }, None),
            false => {
                let text = text?;
                let shape = f
                    .finish
                    .is_none()
                    .then(|| Shape::of(Vec::new(), slots_at(&text, &spots), index));
                (Event::Chunk(self.shape.chunk_of(f)), shape)
            }
        };
        Some(Opened {
            id: id_text,
            model: self.model.clone(),
            event,
            head: Head::of(&bytes[..head_end], id?, model, spots),
            shape,
        })
    }
}

/// Whether `w` is a chat stream's role event and nothing else: one choice whose delta has
/// a role and an empty content, no finish, stop, ids or logprobs, and no usage (what the
/// decoder reads as the choice's `Role`).
fn is_role_only(w: &ChunkWire<'_>) -> bool {
    let [c] = w.choices.as_slice() else {
        return false;
    };
    let role = c
        .delta
        .as_ref()
        .is_some_and(|d| d.role.is_some() && d.content.as_deref() == Some(""));
    role && c.text.is_none()
        && c.finish_reason.is_none()
        && c.stop_reason.is_none()
        && c.matched_stop.is_none()
        && c.token_ids.is_none()
        && c.logprobs.is_none()
        && w.usage.is_none()
        && w.error.is_none()
}

/// How many bytes of slots' values lie before `at` (`slots` in order).
fn removed_before(slots: &[(Slot, Range<usize>)], at: usize) -> usize {
    slots
        .iter()
        .filter(|(_, r)| r.end <= at)
        .map(|(_, r)| r.len())
        .sum()
}

/// Digits only, as `plain_uint` reads a number whole.
fn is_plain_uint(bytes: &[u8]) -> bool {
    super::cursor::plain_uint(bytes).is_some_and(|(_, len)| len == bytes.len())
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::super::cursor::mangle;
    use super::super::stream::Decoder;
    use super::*;
    use crate::model::Event;
    use crate::stream::framing::Frame;

    /// First events as servers send them: vLLM's plain, with token ids (the prompt's too),
    /// and with counts on every event; SGLang's OpenAI route.
    const FIRSTS: &[&str] = &[
        r#"{"id":"cmpl-4a76","object":"text_completion","created":1796147249,"model":"mock-model","choices":[{"index":0,"text":" warm","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#,
        r#"{"id":"cmpl-9","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" warm","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":[43246,27879],"token_ids":[1229]}],"usage":null}"#,
        r#"{"id":"cmpl-0e","object":"text_completion","created":1796474986,"model":"mock-model","choices":[{"index":0,"text":" learn","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":[3164],"token_ids":[1226]}],"usage":{"prompt_tokens":1,"total_tokens":2,"completion_tokens":1,"prompt_tokens_details":null}}"#,
        r#"{"id":"c1","object":"text_completion","created":1,"model":"m","choices":[{"index":2,"text":"","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
    ];

    /// Chat streams' first events: the role alone (vLLM's, and with `usage` null).
    const CHAT_FIRSTS: &[&str] = &[
        r#"{"id":"chatcmpl-7f","object":"chat.completion.chunk","created":1796474986,"model":"mock-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"chatcmpl-7f","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    ];

    /// Every first event, and whether it opens a chat stream.
    fn firsts() -> impl Iterator<Item = (&'static str, bool)> {
        let chat = CHAT_FIRSTS.iter().map(|f| (*f, true));
        FIRSTS.iter().map(|f| (*f, false)).chain(chat)
    }

    /// What serde's reading of each event gives, through a decoder's `wire`.
    fn by_serde(events: &[&str], chat: bool) -> Option<Vec<Event>> {
        let mut d = Decoder::new(chat);
        let mut out = Vec::new();
        for e in events {
            d.wire(serde_json::from_str(e).ok()?, &mut out);
        }
        Some(out)
    }

    /// What a new stream's decoder gives for `events`, on this thread.
    fn by_decoder(events: &[&str], chat: bool) -> Option<Vec<Event>> {
        let mut d = Decoder::new(chat);
        let mut out = Vec::new();
        for e in events {
            let frame = Frame {
                event: None,
                data: bytes::Bytes::copy_from_slice(e.as_bytes()),
            };
            d.frame(&frame, &mut out).ok()?;
        }
        Some(out)
    }

    /// The stream that opens with `first`: its next token after it, then its last.
    fn stream(first: &str) -> [String; 3] {
        let next = without_prompt_ids(first)
            .replace(
                "\"role\":\"assistant\",\"content\":\"\"",
                "\"content\":\" warm\"",
            )
            .replace(" warm", " cold")
            .replace(" learn", " water")
            .replace(
                "\"total_tokens\":2,\"completion_tokens\":1",
                "\"total_tokens\":3,\"completion_tokens\":2",
            );
        let last = next.replace("\"finish_reason\":null", "\"finish_reason\":\"length\"");
        [first.to_string(), next, last]
    }

    /// `event` without its `prompt_token_ids` (vLLM sends them in a stream's first only).
    fn without_prompt_ids(event: &str) -> String {
        let key = ",\"prompt_token_ids\":[";
        match event.find(key) {
            Some(at) => {
                let end = at + event[at..].find(']').map_or(0, |e| e + 1);
                format!("{}{}", &event[..at], &event[end..])
            }
            None => event.to_string(),
        }
    }

    /// `first` with another id, time, text and ids, as the next stream's first event.
    fn another(first: &str) -> String {
        first
            .replace("cmpl-4a76", "cmpl-b81f0")
            .replace("chatcmpl-7f", "chatcmpl-80a")
            .replace("\"created\":1796474986", "\"created\":1796474990")
            .replace("cmpl-9\"", "cmpl-10\"")
            .replace("\"created\":1796147249", "\"created\":1796147250")
            .replace("\"created\":1,", "\"created\":12,")
            .replace(" warm", "é")
            .replace("[43246,27879]", "[7,43246,27879,1]")
            .replace("[1229]", "[2]")
            .replace(
                "\"prompt_tokens\":1,\"total_tokens\":2",
                "\"prompt_tokens\":3,\"total_tokens\":4",
            )
    }

    #[test]
    fn a_streams_first_event_is_read_from_the_last_streams() {
        for (first, chat) in firsts() {
            let events = stream(first);
            let events: Vec<&str> = events.iter().map(String::as_str).collect();
            // The first stream teaches the opening.
            assert_eq!(
                by_decoder(&events, chat),
                by_serde(&events, chat),
                "{first}"
            );
            let again = another(first);
            assert_ne!(&again, first);
            assert!(
                open(again.as_bytes(), chat).is_some(),
                "not opened: {again}"
            );
            let mut next = stream(&again);
            next[1] = next[1].replace("é", " cold");
            next[2] = next[2].replace("é", " cold");
            let next: Vec<&str> = next.iter().map(String::as_str).collect();
            let read = by_decoder(&next, chat).unwrap();
            assert_eq!(Some(&read), by_serde(&next, chat).as_ref(), "{again}");
            let second = match chat {
                true => matches!(read[1], Event::Role { .. }),
                false => matches!(read[1], Event::Chunk(_)),
            };
            assert!(second, "{read:?}");
            // After a completions opening, the stream's next event is read from its shape,
            // as after a whole read.
            let mut d = Decoder::new(chat);
            let mut out = Vec::new();
            let frame = |e: &str| Frame {
                event: None,
                data: bytes::Bytes::copy_from_slice(e.as_bytes()),
            };
            d.frame(&frame(next[0]), &mut out).unwrap();
            assert_eq!(d.shape_reads(next[1].as_bytes()), !chat, "{}", next[1]);
        }
    }

    #[test]
    fn a_chat_stream_or_another_model_is_not_read_from_a_completions_opening() {
        let first = FIRSTS[0];
        by_decoder(&[first], false).unwrap();
        assert!(open(first.as_bytes(), true).is_none());
        let other = first.replace("mock-model", "other-model");
        assert!(open(other.as_bytes(), false).is_none());
        // Read whole, it is the opening now.
        by_decoder(&[&other], false).unwrap();
        assert!(open(other.as_bytes(), false).is_some());
        assert!(open(first.as_bytes(), false).is_none());
        // A chat event with content is not read from a role opening.
        by_decoder(&[CHAT_FIRSTS[0]], true).unwrap();
        let content = CHAT_FIRSTS[0].replace(
            "\"role\":\"assistant\",\"content\":\"\"",
            "\"content\":\"a\"",
        );
        assert!(open(content.as_bytes(), true).is_none());
    }

    /// JSON's own characters and a few multi-byte ones, for the edits.
    const EDITS: &[u8] = b"{}[]\":,\\ -.019enul\n\t";

    #[test]
    fn a_first_event_is_never_read_from_an_opening_otherwise_than_serde_would() {
        // Bounded: 40,000 events, each a first event with random edits, anywhere or in one
        // of its slots' values; whenever the opening reads it, serde must read it the same
        // (its start and chunk or role, and the stream's next event after it).
        let mut rng = StdRng::seed_from_u64(11);
        let all: Vec<(&str, bool)> = firsts().collect();
        let mut hits = 0;
        for _ in 0..40_000 {
            let (first, chat) = all[rng.random_range(0..all.len())];
            by_decoder(&[first], chat).unwrap();
            let spans = value_spans(first, chat);
            let next = match rng.random_bool(0.5) {
                true => mangle(&mut rng, first, EDITS),
                false => {
                    // A slot's value in the first event: between the fixed parts around it.
                    let at = spans[rng.random_range(0..spans.len())].clone();
                    mangle(&mut rng, &first[at.clone()], EDITS)
                        .map(|t| format!("{}{t}{}", &first[..at.start], &first[at.end..]))
                }
            };
            let Some(next) = next else { continue };
            if open(next.as_bytes(), chat).is_none() {
                continue;
            }
            hits += 1;
            let second = stream(&next)[1].clone();
            let events = [next.as_str(), second.as_str()];
            let serde = by_serde(&events, chat);
            assert!(serde.is_some(), "opened what serde does not read: {next}");
            assert_eq!(by_decoder(&events, chat), serde, "{next}");
        }
        assert!(hits > 3_000, "only {hits} read from the opening");
    }

    /// Where each slot's value lies in `first` (as read whole), in the opening's order.
    fn value_spans(first: &str, chat: bool) -> Vec<Range<usize>> {
        let mut head = Head::default();
        let w = super::super::scan::chunk_after(first, &mut head).unwrap();
        let found = found(first, &w, &head, chat).unwrap();
        found.slots.into_iter().map(|(_, r)| r).collect()
    }
}
