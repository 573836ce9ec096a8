//! Whole `/generate` responses, both directions.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::logprobs;
use crate::dialect::digits::push_uint;
use crate::dialect::json::write_str;
use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Finish, Response, TokenLogprob, Usage};

/// SGLang's `finish_reason` object, borrowed from the choice: built as a JSON map, it cost
/// a map, two keys and their drop per answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FinishJson<'a> {
    Null,
    /// `{"matched": .., "type": "stop"}`: the token id, the stop string, or null.
    Stop(Matched<'a>),
    /// `{"length": .., "type": "length"}`.
    Length(u64),
    /// `{"message": .., "type": "abort"}`.
    Abort(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Matched<'a> {
    Id(u32),
    Text(&'a str),
    Null,
}

/// SGLang's `finish_reason` for `f`.
pub fn finish_json(
    f: Option<&Finish>,
    completion_tokens: u64,
    last_id: Option<u32>,
) -> FinishJson<'_> {
    let stop = FinishJson::Stop;
    match f {
        None => FinishJson::Null,
        Some(Finish::Eos(id)) => stop(id.or(last_id).map_or(Matched::Null, Matched::Id)),
        Some(Finish::StopString(s)) => stop(Matched::Text(s)),
        Some(Finish::StopToken(t)) => stop(Matched::Id(*t)),
        Some(Finish::Stop) => stop(Matched::Null),
        Some(Finish::Length) => FinishJson::Length(completion_tokens),
        Some(Finish::Abort(m)) => FinishJson::Abort(m),
    }
}

impl FinishJson<'_> {
    /// As serde_json wrote the map it was (keys sorted, `type` last).
    fn write_json(&self, out: &mut Vec<u8>) {
        let kind: &[u8] = match self {
            FinishJson::Null => return out.extend_from_slice(b"null"),
            FinishJson::Stop(m) => {
                out.extend_from_slice(b"{\"matched\":");
                match m {
                    Matched::Id(id) => json(out, id),
                    Matched::Text(t) => write_str(out, t),
                    Matched::Null => out.extend_from_slice(b"null"),
                }
                b"stop"
            }
            FinishJson::Length(n) => {
                out.extend_from_slice(b"{\"length\":");
                json(out, n);
                b"length"
            }
            FinishJson::Abort(m) => {
                out.extend_from_slice(b"{\"message\":");
                write_str(out, m);
                b"abort"
            }
        };
        out.extend_from_slice(b",\"type\":\"");
        out.extend_from_slice(kind);
        out.extend_from_slice(b"\"}");
    }
}

impl Serialize for FinishJson<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (key, kind) = match self {
            FinishJson::Null => return ser.serialize_unit(),
            FinishJson::Stop(_) => ("matched", "stop"),
            FinishJson::Length(_) => ("length", "length"),
            FinishJson::Abort(_) => ("message", "abort"),
        };
        let mut map = ser.serialize_map(Some(2))?;
        match self {
            FinishJson::Stop(Matched::Id(id)) => map.serialize_entry(key, id)?,
            FinishJson::Stop(Matched::Text(t)) => map.serialize_entry(key, t)?,
            FinishJson::Stop(Matched::Null) => map.serialize_entry(key, &())?,
            FinishJson::Length(n) => map.serialize_entry(key, n)?,
            FinishJson::Abort(m) => map.serialize_entry(key, m)?,
            FinishJson::Null => {}
        }
        map.serialize_entry("type", kind)?;
        map.end()
    }
}

pub fn finish_from_json(v: &Value) -> Option<Finish> {
    let kind = v.get("type")?.as_str()?;
    Some(match kind {
        "stop" => match v.get("matched") {
            Some(Value::String(s)) => Finish::StopString(s.clone()),
            Some(Value::Number(n)) => Finish::Eos(n.as_u64().map(|n| n as u32)),
            _ => Finish::Stop,
        },
        "length" => Finish::Length,
        "abort" => Finish::Abort(
            v.get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        ),
        _ => Finish::Stop,
    })
}

/// The `meta_info` object for one choice.
/// `meta_info` as SGLang writes it. The fields are in alphabetical order, the order of the
/// JSON map it was first built as, so the bytes are the same; a struct spares a stream the
/// map's allocations at every event.
#[derive(Serialize)]
pub struct MetaInfo<'a> {
    cached_tokens: u64,
    completion_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    e2e_latency: Option<f64>,
    finish_reason: FinishJson<'a>,
    /// The request's id, borrowed: a stream writes it at every event.
    id: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_token_logprobs: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_token_logprobs: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_top_logprobs: Option<Value>,
    prompt_tokens: u64,
}

impl MetaInfo<'_> {
    /// This as serde_json writes it (the derive's order and skips), written directly: serde
    /// escaped every key again at every event of a stream. The values that are not plain
    /// numbers go through serde_json still.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.write_json_with_id(out, write_str);
    }

    /// `write_json` with the id (a JSON string) written by `id`, given the id: a stream
    /// escapes its id once and copies it at every event after.
    pub fn write_json_with_id(&self, out: &mut Vec<u8>, id: impl FnOnce(&mut Vec<u8>, &str)) {
        out.extend_from_slice(b"{\"cached_tokens\":");
        push_uint(out, self.cached_tokens);
        out.extend_from_slice(b",\"completion_tokens\":");
        push_uint(out, self.completion_tokens);
        if let Some(l) = self.e2e_latency {
            out.extend_from_slice(b",\"e2e_latency\":");
            json(out, &l);
        }
        out.extend_from_slice(b",\"finish_reason\":");
        self.finish_reason.write_json(out);
        out.extend_from_slice(b",\"id\":");
        id(out, &self.id);
        let logprobs: [(&[u8], &Option<Value>); 3] = [
            (b",\"input_token_logprobs\":", &self.input_token_logprobs),
            (b",\"output_token_logprobs\":", &self.output_token_logprobs),
            (b",\"output_top_logprobs\":", &self.output_top_logprobs),
        ];
        for (key, v) in logprobs {
            if let Some(v) = v {
                out.extend_from_slice(key);
                json(out, v);
            }
        }
        out.extend_from_slice(b",\"prompt_tokens\":");
        push_uint(out, self.prompt_tokens);
        out.push(b'}');
    }
}

/// `v` as serde_json writes it; into a `Vec`, numbers, strings and JSON values cannot fail.
fn json<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    let _ = serde_json::to_writer(&mut *out, v);
}

pub fn meta_info<'a>(ctx: &'a Ctx, c: &'a Choice, usage: Usage, finished: bool) -> MetaInfo<'a> {
    let last_id = c.token_ids.as_ref().and_then(|ids| ids.last().copied());
    let parts = ChoiceParts {
        index: c.index,
        finish: c.finish.as_ref(),
        logprobs: c.logprobs.as_deref(),
        last_id,
    };
    meta_info_from(ctx, parts, usage, finished)
}

/// What of a choice its `meta_info` reads, besides the counts: a stream's encoder keeps
/// only these, not the whole cumulative `Choice`.
#[derive(Debug, Clone, Copy)]
pub struct ChoiceParts<'a> {
    pub index: u32,
    pub finish: Option<&'a Finish>,
    pub logprobs: Option<&'a [TokenLogprob]>,
    /// The last output token id, which a finish by EOS without its own id names.
    pub last_id: Option<u32>,
}

/// `meta_info` from the parts of a choice it reads.
pub fn meta_info_from<'a>(
    ctx: &'a Ctx,
    c: ChoiceParts<'a>,
    usage: Usage,
    finished: bool,
) -> MetaInfo<'a> {
    let logprobs = ctx
        .logprobs
        .map(|_| logprobs::to_meta(c.logprobs.unwrap_or(&[]), ctx.logprob_text));
    let (tokens, tops) = match logprobs {
        Some((t, o)) => (Some(t), Some(o)),
        None => (None, None),
    };
    MetaInfo {
        cached_tokens: usage.cached_tokens.unwrap_or(0),
        completion_tokens: usage.completion_tokens,
        e2e_latency: finished.then(|| ctx.started.elapsed().as_secs_f64()),
        finish_reason: finish_json(c.finish, usage.completion_tokens, c.last_id),
        id: choice_id(ctx, c.index),
        input_token_logprobs: tokens.as_ref().map(|_| json!([])),
        output_token_logprobs: tokens,
        output_top_logprobs: tops,
        prompt_tokens: usage.prompt_tokens,
    }
}

/// SGLang names each request of a batch `{rid}_{i}`.
pub fn choice_id(ctx: &Ctx, index: u32) -> Cow<'_, str> {
    if ctx.is_multi() {
        Cow::Owned(format!("{}_{}", ctx.id, index))
    } else {
        Cow::Borrowed(&ctx.id)
    }
}

/// One item as serde_json wrote it from a JSON map (keys in its sorted order), written
/// directly: building that map cost a quarter of a translated request's instructions.
fn write_item(out: &mut Vec<u8>, ctx: &Ctx, c: &Choice, usage: Usage) {
    out.extend_from_slice(b"{\"meta_info\":");
    meta_info(ctx, c, usage, true).write_json(out);
    if let Some(ids) = &c.token_ids {
        out.extend_from_slice(b",\"output_ids\":[");
        push_ids(out, ids, false);
        out.push(b']');
    }
    out.extend_from_slice(b",\"text\":");
    write_str(out, &c.text);
    out.push(b'}');
}

/// Token ids as serde_json writes a list's items (no brackets), each after a comma when
/// `after` says the list already has items.
pub(super) fn push_ids(out: &mut Vec<u8>, ids: &[u32], mut after: bool) {
    for &id in ids {
        if std::mem::replace(&mut after, true) {
            out.push(b',');
        }
        push_uint(out, u64::from(id));
    }
}

/// An item's keys, numbers and id, without its text and ids.
const ITEM_ROOM: usize = 320;

pub fn encode(resp: &Response, ctx: &Ctx) -> Vec<u8> {
    let usages = per_choice_usage(resp, ctx);
    // One object for one plain request; a list for a batch or `n` > 1, as SGLang answers.
    let list = ctx.is_multi() || resp.choices.len() != 1;
    // Room for what each item holds, escapes in its text, and its ids at up to seven
    // digits and a comma: sized for the text alone, the buffer grew (a copy) for the ids.
    let room: usize = resp
        .choices
        .iter()
        .map(|c| ITEM_ROOM + c.text.len() * 5 / 4 + c.token_ids.as_ref().map_or(0, |i| 8 * i.len()))
        .sum();
    let mut out = Vec::with_capacity(room);
    if list {
        out.push(b'[');
    }
    for (i, (c, u)) in resp.choices.iter().zip(usages).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_item(&mut out, ctx, c, u);
    }
    if list {
        out.push(b']');
    }
    out
}

/// Per-choice counts: the upstream's own per choice, else exact from token ids, else the
/// totals split evenly (only when the upstream gave nothing finer).
fn per_choice_usage(resp: &Response, ctx: &Ctx) -> Vec<Usage> {
    let total = resp.usage.unwrap_or_default();
    let count = resp.choices.len().max(1) as u64;
    let prompt_each = total.prompt_tokens / (ctx.prompts.max(1) as u64);
    resp.choices
        .iter()
        .map(|c| {
            if let Some(u) = c.usage {
                return u;
            }
            if count == 1 {
                return total;
            }
            let completion = match &c.token_ids {
                Some(ids) => ids.len() as u64,
                None => total.completion_tokens / count,
            };
            Usage {
                prompt_tokens: prompt_each,
                completion_tokens: completion,
                cached_tokens: total.cached_tokens.map(|_| 0),
            }
        })
        .collect()
}

#[derive(Debug, Deserialize)]
struct MetaWire {
    #[serde(default)]
    id: String,
    finish_reason: Option<Value>,
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    cached_tokens: Option<u64>,
    output_token_logprobs: Option<Value>,
    output_top_logprobs: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ItemWire {
    #[serde(default)]
    text: String,
    output_ids: Option<Vec<u32>>,
    meta_info: MetaWire,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum BodyWire {
    One(Box<ItemWire>),
    Many(Vec<ItemWire>),
}

pub fn decode(body: &[u8]) -> Result<Response, ProxyError> {
    let w: BodyWire = crate::dialect::json::from_bytes(body)
        .map_err(|e| ProxyError::UpstreamProtocol(format!("generate response: {e}")))?;
    let items = match w {
        BodyWire::One(i) => vec![*i],
        BodyWire::Many(v) => v,
    };
    let id = items
        .first()
        .map(|i| i.meta_info.id.clone())
        .unwrap_or_default();
    let choices = items
        .into_iter()
        .enumerate()
        .map(|(i, it)| item_choice(i, it))
        .collect();
    Ok(Response {
        id,
        model: String::new(),
        choices,
        usage: None,
    })
}

fn item_choice(index: usize, it: ItemWire) -> Choice {
    let m = it.meta_info;
    Choice {
        index: index as u32,
        text: it.text,
        token_ids: it.output_ids,
        finish: m.finish_reason.as_ref().and_then(finish_from_json),
        logprobs: m
            .output_token_logprobs
            .as_ref()
            .map(|t| logprobs::from_meta(t, m.output_top_logprobs.as_ref())),
        usage: Some(Usage {
            prompt_tokens: m.prompt_tokens,
            completion_tokens: m.completion_tokens,
            cached_tokens: m.cached_tokens,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::Dialect;
    use crate::model::TokenLogprob;
    use serde_json::Map;

    /// The map-built answer `encode` replaced, kept as its reference.
    fn encode_by_map(resp: &Response, ctx: &Ctx) -> Vec<u8> {
        let items: Vec<Value> = resp
            .choices
            .iter()
            .zip(per_choice_usage(resp, ctx))
            .map(|(c, u)| {
                let mut v = Map::new();
                v.insert("text".into(), json!(c.text));
                if let Some(ids) = &c.token_ids {
                    v.insert("output_ids".into(), json!(ids));
                }
                let meta = serde_json::to_value(meta_info(ctx, c, u, true)).unwrap();
                v.insert("meta_info".into(), meta);
                Value::Object(v)
            })
            .collect();
        let body = match (ctx.is_multi(), items.len()) {
            (false, 1) => items.into_iter().next().unwrap(),
            _ => Value::Array(items),
        };
        serde_json::to_vec(&body).unwrap()
    }

    /// `e2e_latency` is a clock reading: equal bytes need it out of both.
    fn without_latency(bytes: &[u8]) -> Value {
        let mut v: Value = serde_json::from_slice(bytes).unwrap();
        let items = match &mut v {
            Value::Array(items) => items.iter_mut().collect(),
            one => vec![one],
        };
        for item in items {
            let meta = item["meta_info"].as_object_mut().unwrap();
            assert!(meta.remove("e2e_latency").unwrap().as_f64().unwrap() >= 0.0);
        }
        v
    }

    #[test]
    fn whole_answers_are_written_as_the_map_was() {
        let bodies: [&[u8]; 4] = [
            br#"{"text": "a"}"#,
            br#"{"text": ["a", "b"]}"#,
            br#"{"text": "a", "sampling_params": {"n": 2}}"#,
            br#"{"text": "a", "return_logprob": true, "top_logprobs_num": 1}"#,
        ];
        let choice = |index, ids: Option<Vec<u32>>, finish| Choice {
            index,
            text: format!("t{index} \"q\"\n\u{1} é😀"),
            token_ids: ids,
            finish,
            ..Choice::default()
        };
        let answers = [
            vec![choice(
                0,
                Some(vec![4, 9, 4_000_000_000]),
                Some(Finish::Length),
            )],
            vec![choice(0, None, Some(Finish::StopString("\\".into())))],
            vec![
                choice(0, Some(vec![]), Some(Finish::Eos(None))),
                choice(1, Some(vec![1]), None),
            ],
            vec![],
        ];
        let mut checked = 0;
        for body in bodies {
            let req = Dialect::Sglang.decode_request(body).unwrap();
            let ctx = Ctx::new(&req, "rid-\"q\"".into(), "m".into());
            for choices in &answers {
                let resp = Response {
                    choices: choices.clone(),
                    usage: Some(Usage {
                        prompt_tokens: 3,
                        completion_tokens: 4,
                        cached_tokens: Some(1),
                    }),
                    ..Response::default()
                };
                let (got, want) = (encode(&resp, &ctx), encode_by_map(&resp, &ctx));
                if choices.is_empty() {
                    assert_eq!(got, want);
                } else {
                    // Equal values, and equal bytes once the clock reading is out.
                    let (g, w) = (without_latency(&got), without_latency(&want));
                    assert_eq!(g, w);
                    let strip = |b: &[u8]| {
                        let s = String::from_utf8(b.to_vec()).unwrap();
                        let mut out = String::new();
                        let mut rest = s.as_str();
                        while let Some(at) = rest.find(",\"e2e_latency\":") {
                            out.push_str(&rest[..at]);
                            rest = &rest[at + 1..];
                            rest = &rest[rest.find(',').unwrap()..];
                        }
                        out + rest
                    };
                    assert_eq!(strip(&got), strip(&want));
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 16);
    }

    #[test]
    fn finish_reasons_are_the_maps_they_were() {
        let cases = [
            (None, Value::Null),
            (
                Some(Finish::Eos(None)),
                json!({"type": "stop", "matched": 7}),
            ),
            (
                Some(Finish::Eos(Some(2))),
                json!({"type": "stop", "matched": 2}),
            ),
            (
                Some(Finish::StopString("\"a\"\n".into())),
                json!({"type": "stop", "matched": "\"a\"\n"}),
            ),
            (
                Some(Finish::StopToken(13)),
                json!({"type": "stop", "matched": 13}),
            ),
            (Some(Finish::Stop), json!({"type": "stop", "matched": null})),
            (Some(Finish::Length), json!({"type": "length", "length": 5})),
            (
                Some(Finish::Abort("é \u{1}".into())),
                json!({"type": "abort", "message": "é \u{1}"}),
            ),
        ];
        for (finish, want) in cases {
            let f = finish_json(finish.as_ref(), 5, Some(7));
            let mut got = Vec::new();
            f.write_json(&mut got);
            assert_eq!(got, serde_json::to_vec(&want).unwrap(), "{finish:?}");
            assert_eq!(serde_json::to_vec(&f).unwrap(), got, "{finish:?}");
        }
    }

    #[test]
    fn meta_info_is_written_as_serde_json_writes_it() {
        let finishes = [
            None,
            Some(Finish::Eos(None)),
            Some(Finish::Eos(Some(2))),
            Some(Finish::StopString("\"end\"\n\\ é".into())),
            Some(Finish::StopToken(13)),
            Some(Finish::Stop),
            Some(Finish::Length),
            Some(Finish::Abort("a \u{1} b".into())),
        ];
        let bodies: [&[u8]; 3] = [
            br#"{"text": "a"}"#,
            br#"{"text": "a", "sampling_params": {"n": 2}}"#,
            br#"{"text": "a", "return_logprob": true, "top_logprobs_num": 1}"#,
        ];
        let lp = TokenLogprob {
            token: Some("a\"b".into()),
            token_id: Some(5),
            logprob: -0.5,
            top: vec![(Some("x\\".into()), Some(1), -1.25)],
        };
        let (mut checked, mut with_logprobs) = (0, 0);
        for body in bodies {
            let req = Dialect::Sglang.decode_request(body).unwrap();
            let ctx = Ctx::new(&req, "rid-\"q\"\t\u{7f}😀".into(), "m".into());
            for finish in &finishes {
                for (index, finished, cached) in [(0, false, None), (1, true, Some(3))] {
                    let choice = Choice {
                        index,
                        text: "t".into(),
                        token_ids: Some(vec![4, 9]),
                        logprobs: Some(vec![lp.clone()]),
                        finish: finish.clone(),
                        ..Choice::default()
                    };
                    let usage = Usage {
                        prompt_tokens: 7,
                        completion_tokens: 2,
                        cached_tokens: cached,
                    };
                    let meta = meta_info(&ctx, &choice, usage, finished);
                    let mut got = Vec::new();
                    meta.write_json(&mut got);
                    let want = serde_json::to_vec(&meta).unwrap();
                    assert_eq!(
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&want)
                    );
                    checked += 1;
                    with_logprobs += usize::from(want.windows(13).any(|w| w == b"top_logprobs\""));
                }
            }
        }
        assert_eq!((checked, with_logprobs), (48, 16));
    }
}
