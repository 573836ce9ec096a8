//! Two shapes every encoder repeats: refusing the first field the other side cannot carry,
//! and writing the optional fields a request sets.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ProxyError;

/// The first `(field, set, why)` whose field is set, as the refusal that names it.
pub fn refuse_first(checks: &[(&str, bool, &str)]) -> Result<(), ProxyError> {
    match checks.iter().find(|(_, set, _)| *set) {
        Some((field, _, why)) => Err(ProxyError::unsupported(*field, *why)),
        None => Ok(()),
    }
}

/// Insert each `(key, value)` whose value is present.
pub fn put_some<T: Serialize>(m: &mut Map<String, Value>, fields: &[(&str, Option<T>)]) {
    for (key, value) in fields {
        if let Some(v) = value.as_ref().and_then(|v| serde_json::to_value(v).ok()) {
            m.insert((*key).to_string(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_set_field_is_named_and_absent_values_are_skipped() {
        let err = refuse_first(&[("a", false, "no"), ("b", true, "why b"), ("c", true, "c")])
            .unwrap_err();
        assert!(matches!(err, ProxyError::Unsupported { ref field, .. } if field == "b"));
        refuse_first(&[("a", false, "no")]).unwrap();
        let mut m = Map::new();
        put_some(&mut m, &[("x", Some(1.5)), ("y", None)]);
        assert_eq!(Value::Object(m), serde_json::json!({"x": 1.5}));
    }
}
