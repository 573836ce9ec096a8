//! Shapes every encoder repeats: refusing the first field the other side cannot carry,
//! writing the optional fields a request sets, and where an encoder puts its fields (a
//! `Map` it edits further, or an `ObjectWriter` that writes them straight to bytes).

use serde::Serialize;
use serde_json::{Map, Value};
use smallvec::SmallVec;

use crate::error::ProxyError;

/// The first `(field, set, why)` whose field is set, as the refusal that names it.
pub fn refuse_first(checks: &[(&str, bool, &str)]) -> Result<(), ProxyError> {
    match checks.iter().find(|(_, set, _)| *set) {
        Some((field, _, why)) => Err(ProxyError::unsupported(*field, *why)),
        None => Ok(()),
    }
}

/// Where an encoder puts an object's fields.
pub trait Put {
    /// Set `key` to `value` (a value that does not serialize is left out, as before).
    fn put<V: Serialize + ?Sized>(&mut self, key: &'static str, value: &V);
}

impl Put for Map<String, Value> {
    fn put<V: Serialize + ?Sized>(&mut self, key: &'static str, value: &V) {
        if let Ok(v) = serde_json::to_value(value) {
            self.insert(key.to_string(), v);
        }
    }
}

/// Insert each `(key, value)` whose value is present.
pub fn put_some<P: Put, T: Serialize>(m: &mut P, fields: &[(&'static str, Option<T>)]) {
    for (key, value) in fields {
        if let Some(v) = value {
            m.put(key, v);
        }
    }
}

/// A JSON object written field by field straight into its bytes, in the order written.
/// Building a `Map` (a B-tree of owned keys and `Value`s) to serialize and drop it cost a
/// translated request about 5k instructions; this writes the same fields for a fifth of it.
/// Each key is written once: a second `put` of one is a bug (debug builds stop on it;
/// release keeps the first).
pub struct ObjectWriter {
    out: Vec<u8>,
    keys: SmallVec<[&'static str; 16]>,
}

impl Default for ObjectWriter {
    fn default() -> Self {
        let mut out = Vec::with_capacity(256);
        out.push(b'{');
        ObjectWriter {
            out,
            keys: SmallVec::new(),
        }
    }
}

impl Put for ObjectWriter {
    fn put<V: Serialize + ?Sized>(&mut self, key: &'static str, value: &V) {
        debug_assert!(!self.keys.contains(&key), "`{key}` written twice");
        if self.keys.contains(&key) {
            return;
        }
        let mark = self.out.len();
        if self.write_named(key, value).is_ok() {
            self.keys.push(key);
        } else {
            self.out.truncate(mark);
        }
    }
}

impl ObjectWriter {
    /// `write` for one of lingo's own field names, which need no escapes: copied between
    /// quotes, where serde's writer looked at each byte for one (about 80 instructions a
    /// key, seven keys an upstream request).
    fn write_named<V: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &V,
    ) -> serde_json::Result<()> {
        debug_assert!(
            key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\'),
            "`{key}` needs escapes"
        );
        if self.out.len() > 1 {
            self.out.push(b',');
        }
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
        serde_json::to_writer(&mut self.out, value)
    }

    fn write<V: Serialize + ?Sized>(&mut self, key: &str, value: &V) -> serde_json::Result<()> {
        if self.out.len() > 1 {
            self.out.push(b',');
        }
        serde_json::to_writer(&mut self.out, key)?;
        self.out.push(b':');
        serde_json::to_writer(&mut self.out, value)
    }

    /// The object's bytes, with each of `extra` (a client's own fields) whose key was not
    /// written already after the rest.
    pub fn finish(mut self, extra: &Map<String, Value>) -> Vec<u8> {
        for (key, value) in extra {
            if !self.keys.contains(&key.as_str()) {
                let mark = self.out.len();
                if self.write(key, value).is_err() {
                    self.out.truncate(mark);
                }
            }
        }
        self.out.push(b'}');
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_set_field_is_named_and_absent_values_are_skipped() {
        let err = refuse_first(&[("a", false, "no"), ("b", true, "why b"), ("c", true, "c")])
            .unwrap_err();
        assert!(matches!(err, ProxyError::Unsupported { ref field, .. } if field == "b"));
        refuse_first(&[("a", false, "no")]).unwrap();
        let mut m = Map::new();
        put_some(&mut m, &[("x", Some(1.5)), ("y", None)]);
        assert_eq!(Value::Object(m), json!({"x": 1.5}));
    }

    #[test]
    fn a_written_object_is_the_map_it_stands_for_with_extras_after_and_never_twice() {
        let mut w = ObjectWriter::default();
        w.put("model", "m\"1");
        put_some(&mut w, &[("x", Some(1.5)), ("y", None)]);
        w.put("ids", &[1u32, 2]);
        let extra = json!({"model": "other", "z": {"a": [null]}, "é\n": true});
        let bytes = w.finish(extra.as_object().unwrap());
        let text = std::str::from_utf8(&bytes).unwrap();
        assert_eq!(
            text,
            r#"{"model":"m\"1","x":1.5,"ids":[1,2],"z":{"a":[null]},"é\n":true}"#
        );
        let empty = ObjectWriter::default().finish(&Map::new());
        assert_eq!(empty, b"{}");
    }
}
