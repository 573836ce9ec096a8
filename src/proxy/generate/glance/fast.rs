//! The glance's fields in one walk of the body, exactly as serde reads them into `Raw`, or
//! nothing. serde's derived reader matches every key against `Raw`'s seventeen names and
//! visits every value: about 2.7k instructions for a 75-byte completions body in a
//! profile, for a handful of fields.
//!
//! It answers only when it is sure: an escaped key, a field given twice, a number that is
//! not a plain unsigned integer where serde would read it, a lenient field holding an
//! object or array, anything not well-formed, and serde reads the body instead (which then
//! gives its own answer or error).

use std::borrow::Cow;

use super::Fields;
use crate::dialect::openai::cursor::{Cursor, Seen, Sure};

/// The fields, or `None` when serde should read the body.
pub(super) fn fields(text: &str) -> Sure<Fields<'_>> {
    let mut c = Cursor::new(text);
    let mut f = Fields::default();
    let mut seen = Seen::default();
    c.object(|c, key| {
        match key {
            "model" => f.model = seen.first(0).and_then(|()| c.nullable(Cursor::string))?,
            "user" => f.user = seen.first(1).and_then(|()| lenient_string(c))?,
            "stream" => f.stream = seen.first(2).and_then(|()| c.nullable(boolean))?,
            "stream_options" => {
                f.stream_options = seen.first(3).and_then(|()| c.nullable(stream_options))?;
            }
            "input_ids" => f.input_ids = seen.first(4).and_then(|()| raw(c))?,
            "prompt" => f.prompt = seen.first(5).and_then(|()| raw(c))?,
            "text" => f.text = seen.first(6).and_then(|()| raw(c))?,
            "inputs" => f.inputs = seen.first(7).and_then(|()| raw(c))?,
            "system" => f.system = seen.first(8).and_then(|()| raw(c))?,
            "messages" => f.messages = seen.first(9).and_then(|()| messages(c))?,
            "max_tokens" => f.max_tokens = seen.first(10).and_then(|()| lenient_uint(c))?,
            "max_completion_tokens" => {
                f.max_completion_tokens = seen.first(11).and_then(|()| lenient_uint(c))?;
            }
            "n_predict" => f.n_predict = seen.first(12).and_then(|()| lenient_uint(c))?,
            "sampling_params" => f.caps[0] = seen.first(13).and_then(|()| lenient_cap(c))?,
            "parameters" => f.caps[1] = seen.first(14).and_then(|()| lenient_cap(c))?,
            "options" => f.caps[2] = seen.first(15).and_then(|()| lenient_cap(c))?,
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    c.end()?;
    Some(f)
}

fn boolean(c: &mut Cursor<'_>) -> Sure<bool> {
    match c.peek()? {
        b't' => c.check_value(0).map(|()| true),
        b'f' => c.check_value(0).map(|()| false),
        _ => None,
    }
}

/// `stream_options` as an object (serde would also take an array: left to it).
fn stream_options(c: &mut Cursor<'_>) -> Sure<Option<bool>> {
    let mut seen = Seen::default();
    let mut include_usage = None;
    c.object(|c, key| {
        match key {
            "include_usage" => include_usage = seen.first(0).and_then(|()| c.nullable(boolean))?,
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    Some(include_usage)
}

/// A value kept as its text, `null` as none.
fn raw<'a>(c: &mut Cursor<'a>) -> Sure<Option<&'a str>> {
    c.nullable(Cursor::raw)
}

/// A chat's messages, each as its text: an array, anything else is no messages.
fn messages<'a>(c: &mut Cursor<'a>) -> Sure<Option<Vec<&'a str>>> {
    match c.peek()? {
        b'[' => c.array(Cursor::raw).map(Some),
        b'{' => c.skip_value(0).map(|()| None),
        _ => scalar(c).map(|_| None),
    }
}

/// What serde's any-value visit of a scalar gives a lenient field: a plain unsigned
/// integer, a string, or neither (`null`, a boolean).
enum Scalar<'a> {
    Uint(u64),
    Str(Cow<'a, str>),
    Other,
}

/// A scalar as serde visits one; other numbers (negative, fractions, exponents, past
/// `u64`: floats to serde, some out of its range) and objects and arrays are not sure.
fn scalar<'a>(c: &mut Cursor<'a>) -> Sure<Scalar<'a>> {
    match c.peek()? {
        b'"' => {
            // serde reads the string in full: its escapes must make characters.
            let at = c.at;
            c.check_string()?;
            c.at = at;
            c.string().map(Scalar::Str)
        }
        b'0'..=b'9' => {
            let v = c.uint()?;
            // A fraction or exponent after the digits is a float to serde.
            matches!(c.peek()?, b',' | b'}' | b']').then_some(Scalar::Uint(v))
        }
        b't' | b'f' | b'n' => c.check_value(0).map(|()| Scalar::Other),
        _ => None,
    }
}

fn lenient_uint(c: &mut Cursor<'_>) -> Sure<Option<u64>> {
    Some(match scalar(c)? {
        Scalar::Uint(v) => Some(v),
        _ => None,
    })
}

fn lenient_string(c: &mut Cursor<'_>) -> Sure<Option<String>> {
    Some(match scalar(c)? {
        Scalar::Str(s) => Some(s.into_owned()),
        _ => None,
    })
}

/// The output cap inside an object (`max_new_tokens` or `num_predict`, the first that is
/// a plain unsigned integer); any scalar is no cap.
fn lenient_cap(c: &mut Cursor<'_>) -> Sure<Option<u64>> {
    if c.peek()? != b'{' {
        return scalar(c).map(|_| None);
    }
    let mut cap = None;
    c.object(|c, key| {
        match key {
            "max_new_tokens" | "num_predict" => {
                if let Scalar::Uint(v) = scalar(c)? {
                    cap = cap.or(Some(v));
                }
            }
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    Some(cap)
}
