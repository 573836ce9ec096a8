//! The one parse of a request body that routing and passthrough share: the model, the
//! session fields, the stream flags, token-id prompt lengths, and where the prompt lies (for
//! `prefix_affinity`'s key). Made at most once per request, and only when something needs it:
//! translation decodes the body in full anyway and reads none of this unless routing does.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dialect::ctx::IdsLen;
use crate::dialect::Dialect;
use crate::error::{decode_json, ProxyError};
use crate::fleet::prefix::PromptSpan;

mod fast;

/// A body's fields as serde reads them into `Raw`: what `fast::fields` must agree with.
fn fields_by_serde(body: &str) -> Option<Fields<'_>> {
    decode_json::<Raw>(body.as_bytes()).ok().map(Fields::from)
}

/// For the fuzzers: what the fast reader gives for a request body, when it gives anything,
/// is what serde reads into `Raw`.
pub(crate) fn agrees_with_serde(body: &str) {
    if let Some(fast) = fast::fields(body) {
        let serde = fields_by_serde(body);
        assert_eq!(
            Some(fast),
            serde,
            "a body read fast otherwise than serde: {body}"
        );
    }
}

#[derive(Debug, Default)]
pub struct Glance {
    pub model: Option<String>,
    pub user: Option<String>,
    /// Absent means the dialect's default (Ollama streams by default).
    pub stream: Option<bool>,
    /// `stream_options` present at all, and its `include_usage`.
    pub stream_options: Option<Option<bool>>,
    /// A token-id prompt's length, known before the upstream says (SGLang, OpenAI).
    pub ids_len: Option<u64>,
    /// The output cap, by whichever name the dialect gives it.
    pub max_tokens: Option<u64>,
    pub span: PromptSpan,
}

impl Glance {
    /// An OpenAI stream without usage gives lingo no token counts: ask for them, and strip
    /// the extra chunk from what the client receives.
    pub fn needs_usage(&self, dialect: Dialect) -> bool {
        let asked = self.stream_options.flatten() == Some(true);
        let openai = matches!(dialect, Dialect::OpenaiCompletions | Dialect::OpenaiChat);
        self.streams(dialect) && !asked && openai
    }

    pub fn streams(&self, dialect: Dialect) -> bool {
        self.stream.unwrap_or(dialect.streams_by_default())
    }
}

/// A body's glance, parsed on first use.
pub struct Lazy<'a> {
    body: &'a [u8],
    cell: OnceLock<Result<Glance, ProxyError>>,
}

impl<'a> Lazy<'a> {
    pub fn new(body: &'a [u8]) -> Lazy<'a> {
        Lazy {
            body,
            cell: OnceLock::new(),
        }
    }

    /// The glance, or the 400 naming the field that does not parse.
    pub fn get(&self) -> &Result<Glance, ProxyError> {
        self.cell.get_or_init(|| parse(self.body))
    }

    pub fn body(&self) -> &'a [u8] {
        self.body
    }
}

/// Only `model`, `stream` and `stream_options` are read strictly (passthrough always has);
/// the fields read for routing and metrics never turn a request the upstream would take
/// into a 400, so they are `Lenient`.
#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    user: Lenient<String>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    #[serde(borrow)]
    input_ids: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt: Option<&'a RawValue>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    inputs: Option<&'a RawValue>,
    #[serde(borrow)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Messages<'a>,
    // The output cap: OpenAI, Anthropic, vLLM; llama.cpp; SGLang, TGI and Ollama nest theirs.
    #[serde(default)]
    max_tokens: Lenient<u64>,
    #[serde(default)]
    max_completion_tokens: Lenient<u64>,
    #[serde(default)]
    n_predict: Lenient<u64>,
    #[serde(default)]
    sampling_params: Lenient<Cap>,
    #[serde(default)]
    parameters: Lenient<Cap>,
    #[serde(default)]
    options: Lenient<Cap>,
}

/// A field read if it has the expected shape, else ignored: one visit, no second parse.
/// `u64` takes a non-negative integer, `String` a string, `Cap` an object's output cap.
struct Lenient<T>(Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

/// The output cap inside `sampling_params` (SGLang), `parameters` (TGI) or `options` (Ollama).
struct Cap(u64);

/// What one lenient visit saw.
enum Seen {
    Int(u64),
    Str(String),
    Cap(Option<u64>),
    Other,
}

struct SeenVisitor;

impl<'de> serde::de::Visitor<'de> for SeenVisitor {
    type Value = Seen;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Seen, E> {
        Ok(Seen::Int(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Seen, E> {
        Ok(u64::try_from(v).map_or(Seen::Other, Seen::Int))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Seen, E> {
        Ok(Seen::Other)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Seen, E> {
        Ok(Seen::Other)
    }
    fn visit_unit<E>(self) -> Result<Seen, E> {
        Ok(Seen::Other)
    }
    fn visit_str<E>(self, v: &str) -> Result<Seen, E> {
        Ok(Seen::Str(v.to_string()))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Seen, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Seen::Other)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Seen, A::Error> {
        let mut cap = None;
        while let Some(k) = map.next_key::<Cow<'de, str>>()? {
            if matches!(&*k, "max_new_tokens" | "num_predict") {
                if let Seen::Int(v) = map.next_value::<Seen>()? {
                    cap = cap.or(Some(v));
                }
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(Seen::Cap(cap))
    }
}

impl<'de> Deserialize<'de> for Seen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Seen, D::Error> {
        d.deserialize_any(SeenVisitor)
    }
}

impl<'de> Deserialize<'de> for Lenient<u64> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Lenient(match Seen::deserialize(d)? {
            Seen::Int(v) => Some(v),
            _ => None,
        }))
    }
}

impl<'de> Deserialize<'de> for Lenient<String> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Lenient(match Seen::deserialize(d)? {
            Seen::Str(v) => Some(v),
            _ => None,
        }))
    }
}

impl<'de> Deserialize<'de> for Lenient<Cap> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Lenient(match Seen::deserialize(d)? {
            Seen::Cap(Some(v)) => Some(Cap(v)),
            _ => None,
        }))
    }
}

/// A chat's messages, each kept as its raw bytes; anything but an array is no messages.
#[derive(Default)]
struct Messages<'a>(Option<Vec<&'a RawValue>>);

impl<'de: 'a, 'a> Deserialize<'de> for Messages<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Messages<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of messages")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Messages<'a>, A::Error> {
                let mut out = Vec::new();
                while let Some(m) = seq.next_element::<&'de RawValue>()? {
                    out.push(m);
                }
                Ok(Messages(Some(out)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Messages<'a>, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Messages(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Messages<'a>, E> {
                Ok(Messages(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Messages<'a>, E> {
                Ok(Messages(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Messages<'a>, E> {
                Ok(Messages(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Messages<'a>, E> {
                Ok(Messages(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Messages<'a>, E> {
                Ok(Messages(None))
            }
            fn visit_unit<E>(self) -> Result<Messages<'a>, E> {
                Ok(Messages(None))
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct Role<'a> {
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
}

/// `Raw`'s fields as both readers give them: the values kept as text borrow from the body.
#[derive(Debug, Default, PartialEq)]
struct Fields<'a> {
    model: Option<Cow<'a, str>>,
    user: Option<String>,
    stream: Option<bool>,
    stream_options: Option<Option<bool>>,
    input_ids: Option<&'a str>,
    prompt: Option<&'a str>,
    text: Option<&'a str>,
    inputs: Option<&'a str>,
    system: Option<&'a str>,
    messages: Option<Vec<&'a str>>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    n_predict: Option<u64>,
    /// In `sampling_params`, `parameters` and `options`.
    caps: [Option<u64>; 3],
}

impl<'a> From<Raw<'a>> for Fields<'a> {
    fn from(raw: Raw<'a>) -> Fields<'a> {
        let text = |v: Option<&'a RawValue>| v.map(RawValue::get);
        let cap = |c: Lenient<Cap>| c.0.map(|c| c.0);
        Fields {
            model: raw.model,
            user: raw.user.0,
            stream: raw.stream,
            stream_options: raw.stream_options.map(|o| o.include_usage),
            input_ids: text(raw.input_ids),
            prompt: text(raw.prompt),
            text: text(raw.text),
            inputs: text(raw.inputs),
            system: text(raw.system),
            messages: raw
                .messages
                .0
                .map(|m| m.into_iter().map(RawValue::get).collect()),
            max_tokens: raw.max_tokens.0,
            max_completion_tokens: raw.max_completion_tokens.0,
            n_predict: raw.n_predict.0,
            caps: [
                cap(raw.sampling_params),
                cap(raw.parameters),
                cap(raw.options),
            ],
        }
    }
}

/// The fields by the fast reader when it is sure, else by serde (and its error).
fn fields(body: &[u8]) -> Result<Fields<'_>, ProxyError> {
    let fast = std::str::from_utf8(body).ok().and_then(fast::fields);
    match fast {
        Some(f) => Ok(f),
        None => decode_json::<Raw>(body).map(Fields::from),
    }
}

fn parse(body: &[u8]) -> Result<Glance, ProxyError> {
    let f = fields(body)?;
    let ids = |v: Option<&str>| v.and_then(|v| serde_json::from_str::<IdsLen>(v).ok()?.0);
    let ids_len = ids(f.input_ids).or_else(|| ids(f.prompt));
    let prompt = f.input_ids.or(f.prompt).or(f.text).or(f.inputs);
    let span = PromptSpan {
        system: f.system.and_then(|v| range(body, v)),
        prompt: prompt.and_then(|v| range(body, v)),
        chat: f.messages.as_deref().and_then(|m| chat_range(body, m)),
    };
    let nested_cap = f.caps.iter().find_map(|c| *c);
    let max_tokens = f
        .max_tokens
        .or(f.max_completion_tokens)
        .or(f.n_predict)
        .or(nested_cap);
    Ok(Glance {
        max_tokens,
        model: f.model.map(Cow::into_owned),
        user: f.user,
        stream: f.stream,
        stream_options: f.stream_options,
        ids_len,
        span,
    })
}

/// Where `v` (borrowed from `body`) lies in it.
fn range(body: &[u8], v: &str) -> Option<Range<usize>> {
    let start = (v.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start.checked_add(v.len())?;
    (end <= body.len()).then_some(start..end)
}

/// From the first message through the first user message (all of them without one).
fn chat_range(body: &[u8], messages: &[&str]) -> Option<Range<usize>> {
    let first = range(body, messages.first()?)?;
    let is_user = |m: &&&str| {
        serde_json::from_str::<Role>(m).is_ok_and(|r| r.role.as_deref() == Some("user"))
    };
    let last = messages.iter().find(is_user).or(messages.last())?;
    Some(first.start..range(body, last)?.end)
}

#[cfg(test)]
mod tests {
    use super::fields_by_serde as serde;
    use super::*;

    fn slice<'a>(body: &'a str, r: &Option<Range<usize>>) -> &'a str {
        &body[r.clone().unwrap()]
    }

    #[test]
    fn a_chat_spans_its_messages_through_the_first_user_one() {
        let body = r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u1"},{"role":"assistant","content":"a"}],"stream":true}"#;
        let g = parse(body.as_bytes()).unwrap();
        assert_eq!(g.model.as_deref(), Some("m"));
        assert_eq!(g.stream, Some(true));
        assert_eq!(
            slice(body, &g.span.chat),
            r#"{"role":"system","content":"s"},{"role":"user","content":"u1"}"#
        );
        assert_eq!(g.span.prompt, None);
    }

    #[test]
    fn prompts_of_each_dialect_are_found_and_ids_counted() {
        let body = r#"{"input_ids":[1,2,3],"sampling_params":{}}"#;
        let g = parse(body.as_bytes()).unwrap();
        assert_eq!(slice(body, &g.span.prompt), "[1,2,3]");
        assert_eq!(g.ids_len, Some(3));
        for (body, want) in [
            (r#"{"text":"hi there"}"#, r#""hi there""#),
            (r#"{"inputs":"x","parameters":{}}"#, r#""x""#),
            (
                r#"{"prompt":["a","b"],"stream_options":{"include_usage":true}}"#,
                r#"["a","b"]"#,
            ),
        ] {
            let g = parse(body.as_bytes()).unwrap();
            assert_eq!(slice(body, &g.span.prompt), want);
        }
        let body = r#"{"system":"be brief","prompt":"p"}"#;
        let g = parse(body.as_bytes()).unwrap();
        assert_eq!(slice(body, &g.span.system), r#""be brief""#);
    }

    #[test]
    fn fields_read_for_routing_never_refuse_a_request() {
        let body = br#"{"user":{"id":1},"messages":"hi","max_tokens":-1,"sampling_params":7,"n_predict":-1}"#;
        let g = parse(body).unwrap();
        assert_eq!((g.user, g.max_tokens, g.span.chat), (None, None, None));
        let g = parse(br#"{"sampling_params":{"max_new_tokens":12,"temperature":0.5}}"#).unwrap();
        assert_eq!(g.max_tokens, Some(12));
        let g = parse(br#"{"options":{"num_predict":7},"max_completion_tokens":9}"#).unwrap();
        assert_eq!(g.max_tokens, Some(9));
    }

    /// Bodies of every dialect, as clients send them: each must be read fast.
    const BODIES: &[&str] = &[
        r#"{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true}"#,
        r#"{"model":"m","prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true},"user":"u"}"#,
        r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi \"there\""}],"max_completion_tokens":9,"stream":false}"#,
        r#"{"text":"once upon","sampling_params":{"max_new_tokens":12,"temperature":0.5},"stream":true}"#,
        r#"{"input_ids":[[1,2],[3]],"sampling_params":{"num_predict":3,"max_new_tokens":4}}"#,
        r#"{"inputs":"x","parameters":{"max_new_tokens":20,"details":true},"stream":null}"#,
        r#"{"model":"m","system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"t"}]}],"max_tokens":64}"#,
        r#"{"prompt":"p","n_predict":0,"cache_prompt":true,"user":true,"extra":{"id":[1,-2.5e1]}}"#,
        r#"{"model":"llama3","prompt":"p","options":{"num_predict":5,"seed":-1.5e3},"stream":false}"#,
        r#" { "model" : null , "messages" : "hi" , "max_tokens" : 7 , "stream_options" : {} } "#,
        r#"{"model":"\u00e9t\u00e9","user":"\ud83d\ude00","prompt":null}"#,
    ];

    /// Bodies the fast reader must leave to serde (which may take or refuse them).
    const DEFERRED: &[&str] = &[
        r#"{"model":"a","model":"b"}"#,
        r#"{"mod\u0065l":"m"}"#,
        r#"{"stream":"yes"}"#,
        r#"{"stream_options":[true]}"#,
        r#"["m"]"#,
        r#"{"max_tokens":1e3}"#,
        r#"{"max_tokens":-1}"#,
        r#"{"user":"\ud800"}"#,
        r#"{"prompt":"p"} x"#,
        r#"{"max_tokens":{"max_new_tokens":1}}"#,
        r#"{"max_tokens":1.5}"#,
        r#"{"user":{"id":1}}"#,
    ];

    #[test]
    fn bodies_are_read_fast_and_as_serde_reads_them() {
        for body in BODIES {
            let fast = fast::fields(body);
            assert!(fast.is_some(), "not read fast: {body}");
            assert_eq!(fast, serde(body), "{body}");
        }
        for body in DEFERRED {
            assert_eq!(fast::fields(body), None, "{body}");
        }
    }

    #[test]
    fn mangled_bodies_are_never_read_otherwise_than_serde_would() {
        use crate::dialect::openai::cursor::{mangled_bodies, JSON_BYTES};
        // Bounded: 40,000 random edits of the corpus.
        let corpus: Vec<&str> = BODIES.iter().chain(DEFERRED).copied().collect();
        let read_fast = mangled_bodies(&corpus, JSON_BYTES, 13, 40_000, |b| {
            let fast = fast::fields(b);
            let answered = fast.is_some();
            assert!(!answered || fast == serde(b), "{b}");
            answered
        });
        assert!(read_fast > 5_000, "only {read_fast} edits were read fast");
    }

    #[test]
    fn a_bad_field_is_named() {
        let e = parse(br#"{"stream":"yes"}"#).unwrap_err();
        assert!(e.to_string().contains("stream"), "{e}");
    }
}
