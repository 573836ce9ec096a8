//! JSON from bytes, with the UTF-8 check done once per document.
//!
//! `serde_json::from_slice` checks every string (keys included) for UTF-8 on its own; a
//! stream event has a dozen of them, and a profile of a streaming passthrough put a tenth of
//! lingo's instructions in those checks. Checking the whole document once (fast on ASCII)
//! and reading it as a `str` gives the same answers, errors included.

use serde::Deserialize;

use crate::dialect::openai::cursor::has_stop;

/// `serde_json::from_slice`, with one UTF-8 check for the whole document.
pub fn from_bytes<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        // Not UTF-8: let serde_json say where, as it would have.
        Err(_) => serde_json::from_slice(bytes),
    }
}

/// `s` as serde_json writes a string, quotes included.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    if has_stop(s.as_bytes()) {
        // Writing a string into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
        return;
    }
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// `s` escaped as serde_json escapes a string, without the quotes. A string with nothing to
/// escape (no quote, backslash or control character: ids, most text) is copied as it is,
/// found eight bytes a step; serde's escaper walks it byte by byte (an SGLang stream's id,
/// written in every event, cost 370 instructions an event). One that has something is
/// escaped by serde in place, its quotes taken off after.
pub fn write_str_inner(out: &mut Vec<u8>, s: &str) {
    if !has_stop(s.as_bytes()) {
        return out.extend_from_slice(s.as_bytes());
    }
    let open = out.len();
    // Writing a string into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
    out.pop();
    out.remove(open);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        // Bounded: 5,000 random strings of characters serde escapes and ones it does not,
        // each after bytes already written.
        use rand::{Rng, SeedableRng};
        let alphabet = [
            'a', ' ', '"', '\\', '\n', '\u{1}', '\u{1f}', '\u{7f}', 'é', '😀', '/',
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for _ in 0..5_000 {
            let len = rng.random_range(0..24);
            let s: String = (0..len)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            let want = serde_json::to_vec(&s).unwrap();
            let mut out = b"x".to_vec();
            write_str(&mut out, &s);
            assert_eq!(out[1..], want[..], "{s:?}");
            let mut inner = b"x".to_vec();
            write_str_inner(&mut inner, &s);
            assert_eq!(inner[1..], want[1..want.len() - 1], "{s:?}");
        }
    }

    #[test]
    fn same_answers_as_from_slice() {
        let cases: [&[u8]; 5] = [
            br#"{"a":"x\u00e9","b":[1,2]}"#,
            "{\"a\":\"é\"}".as_bytes(),
            b"{\"a\":\"\xff\"}",
            b"{\"a\":",
            b"[1,2,3]",
        ];
        for c in cases {
            let want = serde_json::from_slice::<serde_json::Value>(c).map_err(|e| e.to_string());
            let got = from_bytes::<serde_json::Value>(c).map_err(|e| e.to_string());
            assert_eq!(got, want, "{c:?}");
        }
    }
}
