//! `/generate` bodies of the common shape read in one walk, exactly as serde's derived
//! reader reads them into `GenerateRequest`, or not at all. That reader matches every key
//! against 19 and 25 field names and moves both structs several times: about 3k
//! instructions for a 78-byte body, two thirds of a translated request's decode.
//!
//! It answers only when it is sure: a field it does not read (images, embeddings, a list
//! of sampling params, a batch of id lists), an escaped key, a field given twice, a float
//! spelt at length or a negative zero, a number that is not plainly spelt where serde wants
//! an integer, anything not well-formed, and serde reads the body instead (which then gives
//! its own answer or error). `agrees_with_serde` is the check, in the tests and the
//! `request` fuzz target.

use serde_json::Value;

use super::{GenerateRequest, SamplingParams};
use crate::dialect::openai::cursor::{Cursor, Seen, Sure};
use crate::dialect::openai::wire::OneOrMany;
use crate::dialect::sglang::forms::{IdsWire, OneOrList, TextWire};

/// The request, or `None` when serde should read the body.
pub(super) fn request(text: &str) -> Sure<GenerateRequest> {
    let mut c = Cursor::new(text);
    let mut w = GenerateRequest::default();
    let mut seen = Seen::default();
    c.object(|c, key| {
        match key {
            "text" => w.text = seen.first(0).and_then(|()| c.nullable(text_wire))?,
            "input_ids" => {
                w.input_ids = seen
                    .first(1)
                    .and_then(|()| c.nullable(|c| c.ids().map(IdsWire::One)))?;
            }
            "sampling_params" => {
                w.sampling_params = seen
                    .first(2)
                    .and_then(|()| c.nullable(|c| sampling(c).map(OneOrList::One)))?;
            }
            "stream" => w.stream = seen.first(3).and_then(|()| boolean(c))?,
            "rid" => {
                w.rid = seen
                    .first(4)
                    .and_then(|()| c.nullable(|c| c.string().map(|s| Value::String(s.into()))))?;
            }
            "return_logprob" => w.return_logprob = seen.first(5).and_then(|()| boolean(c))?,
            "logprob_start_len" => {
                w.logprob_start_len = seen.first(6).and_then(|()| c.nullable(int))?;
            }
            "top_logprobs_num" => {
                w.top_logprobs_num = seen.first(7).and_then(|()| c.nullable(Cursor::u32))?;
            }
            "return_text_in_logprobs" => {
                w.return_text_in_logprobs = seen.first(8).and_then(|()| boolean(c))?;
            }
            "lora_path" => {
                w.lora_path = seen
                    .first(9)
                    .and_then(|()| c.nullable(|c| c.string().map(String::from)))?;
            }
            // Fields read as values lingo refuses or checks: serde's.
            "input_embeds"
            | "token_ids_logprob"
            | "image_data"
            | "video_data"
            | "audio_data"
            | "session_params"
            | "custom_logit_processor"
            | "return_hidden_states" => return None,
            // SGLang ignores keys it does not know, and so does serde here.
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    c.end()?;
    Some(w)
}

fn sampling(c: &mut Cursor<'_>) -> Sure<SamplingParams> {
    let mut p = SamplingParams::default();
    let mut seen = Seen::default();
    c.object(|c, key| {
        match key {
            "max_new_tokens" => {
                p.max_new_tokens = seen.first(0).and_then(|()| c.nullable(Cursor::u32))?.into();
            }
            "min_new_tokens" => {
                p.min_new_tokens = seen.first(1).and_then(|()| c.nullable(Cursor::u32))?
            }
            "temperature" => p.temperature = seen.first(2).and_then(|()| c.nullable(float))?,
            "top_p" => p.top_p = seen.first(3).and_then(|()| c.nullable(float))?,
            "top_k" => p.top_k = seen.first(4).and_then(|()| c.nullable(int))?,
            "min_p" => p.min_p = seen.first(5).and_then(|()| c.nullable(float))?,
            "frequency_penalty" => {
                p.frequency_penalty = seen.first(6).and_then(|()| c.nullable(float))?;
            }
            "presence_penalty" => {
                p.presence_penalty = seen.first(7).and_then(|()| c.nullable(float))?;
            }
            "repetition_penalty" => {
                p.repetition_penalty = seen.first(8).and_then(|()| c.nullable(float))?;
            }
            "stop" => p.stop = seen.first(9).and_then(|()| c.nullable(one_or_many))?,
            "stop_token_ids" => {
                p.stop_token_ids = seen.first(10).and_then(|()| c.nullable(Cursor::ids))?
            }
            "ignore_eos" => p.ignore_eos = seen.first(11).and_then(|()| boolean(c))?,
            "n" => p.n = seen.first(12).and_then(|()| c.nullable(Cursor::u32))?,
            "skip_special_tokens" => {
                p.skip_special_tokens = seen.first(13).and_then(|()| c.nullable(boolean))?;
            }
            "spaces_between_special_tokens" => {
                p.spaces_between_special_tokens =
                    seen.first(14).and_then(|()| c.nullable(boolean))?;
            }
            "no_stop_trim" => p.no_stop_trim = seen.first(15).and_then(|()| boolean(c))?,
            "sampling_seed" => {
                p.sampling_seed = seen.first(16).and_then(|()| c.nullable(Cursor::uint))?
            }
            // Unknown keys are an error to serde (and SGLang); the rest are rare: serde's.
            _ => return None,
        }
        Some(())
    })?;
    Some(p)
}

/// `text`: one prompt or a batch of them.
fn text_wire(c: &mut Cursor<'_>) -> Sure<TextWire> {
    string_or_list(c, TextWire::One, TextWire::Batch)
}

/// `stop`: a string or a list of strings.
fn one_or_many(c: &mut Cursor<'_>) -> Sure<OneOrMany> {
    string_or_list(c, OneOrMany::One, OneOrMany::Many)
}

fn string_or_list<T>(
    c: &mut Cursor<'_>,
    one: fn(String) -> T,
    list: fn(Vec<String>) -> T,
) -> Sure<T> {
    match c.peek()? {
        b'"' => c.string().map(|s| one(s.into())),
        b'[' => c.array(|c| c.string().map(String::from)).map(list),
        _ => None,
    }
}

fn boolean(c: &mut Cursor<'_>) -> Sure<bool> {
    match c.peek()? {
        b't' => c.check_value(0).map(|()| true),
        b'f' => c.check_value(0).map(|()| false),
        _ => None,
    }
}

/// An `i64` spelt plainly, with or without a minus (`top_k: -1`); a fraction or exponent
/// after it is left for the caller's next read to refuse.
fn int(c: &mut Cursor<'_>) -> Sure<i64> {
    if c.peek()? == b'-' {
        c.at += 1;
        // `uint` steps over spaces first, and JSON allows none after a minus.
        c.bytes.get(c.at).filter(|b| b.is_ascii_digit())?;
        return c.uint::<u32>().map(|v| -i64::from(v));
    }
    c.uint()
}

/// A float as serde reads one (`float_roundtrip`: correctly rounded, as `str::parse` is),
/// when it is short enough that no reading of its digits could differ: fifteen characters
/// or fewer, finite, and not a negative zero (which serde may read as an integer zero).
fn float(c: &mut Cursor<'_>) -> Sure<f64> {
    if !matches!(c.peek()?, b'-' | b'0'..=b'9') {
        return None;
    }
    let text = c.raw()?;
    let v: f64 = text.parse().ok()?;
    let plain = text.len() <= 15 && v.is_finite() && !(v == 0.0 && text.starts_with('-'));
    plain.then_some(v)
}
