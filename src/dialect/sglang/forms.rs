//! `/generate` fields that take one of two forms (a prompt or a batch of them, one dict of
//! sampling params or a list), each read in one pass by the JSON type that comes.
//!
//! Why not `#[serde(untagged)]`: serde reads an untagged enum's value into a buffer of its
//! own (the whole prompt copied, a `Content` tree built) and then tries each form against
//! it, and the sampling params were kept as raw text and parsed a second time: together
//! about a tenth of a translated request's decode. Errors still name the field's path
//! (`sampling_params[1].top_k`), with what was expected and what came.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// `text`: one prompt or a batch.
#[derive(Debug, PartialEq)]
pub(super) enum TextWire {
    One(String),
    Batch(Vec<String>),
}

/// `input_ids`: one prompt's ids or a batch of them. An empty list is one empty prompt.
#[derive(Debug, PartialEq)]
pub(super) enum IdsWire {
    One(Vec<u32>),
    Batch(Vec<Vec<u32>>),
}

/// `sampling_params`: one object, or a list of them (one per prompt).
#[derive(Debug, PartialEq)]
pub(super) enum OneOrList<T> {
    One(T),
    List(Vec<T>),
}

impl<'de> Deserialize<'de> for TextWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = TextWire;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or an array of strings")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<TextWire, E> {
        Ok(TextWire::One(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<TextWire, E> {
        Ok(TextWire::One(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<TextWire, A::Error> {
        Vec::deserialize(SeqAccessDeserializer::new(seq)).map(TextWire::Batch)
    }
}

impl<'de> Deserialize<'de> for IdsWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(IdsVisitor)
    }
}

struct IdsVisitor;

impl<'de> Visitor<'de> for IdsVisitor {
    type Value = IdsWire;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of token ids or an array of such arrays")
    }

    /// The first item decides the form; the rest must take it too.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IdsWire, A::Error> {
        match seq.next_element::<IdOrIds>()? {
            None => Ok(IdsWire::One(Vec::new())),
            Some(IdOrIds::Id(first)) => {
                let mut ids = vec![first];
                while let Some(id) = seq.next_element()? {
                    ids.push(id);
                }
                Ok(IdsWire::One(ids))
            }
            Some(IdOrIds::Ids(first)) => {
                let mut all = vec![first];
                while let Some(ids) = seq.next_element()? {
                    all.push(ids);
                }
                Ok(IdsWire::Batch(all))
            }
        }
    }
}

/// The first item of `input_ids`: an id, or a prompt's list of them.
enum IdOrIds {
    Id(u32),
    Ids(Vec<u32>),
}

impl<'de> Deserialize<'de> for IdOrIds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IdOrIdsVisitor)
    }
}

struct IdOrIdsVisitor;

impl<'de> Visitor<'de> for IdOrIdsVisitor {
    type Value = IdOrIds;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a token id or an array of token ids")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<IdOrIds, E> {
        u32::try_from(v)
            .map(IdOrIds::Id)
            .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &"u32"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<IdOrIds, A::Error> {
        Vec::deserialize(SeqAccessDeserializer::new(seq)).map(IdOrIds::Ids)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrList<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(OneOrListVisitor(PhantomData))
    }
}

struct OneOrListVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for OneOrListVisitor<T> {
    type Value = OneOrList<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object or an array of them")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<OneOrList<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(OneOrList::One)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<OneOrList<T>, A::Error> {
        Vec::deserialize(SeqAccessDeserializer::new(seq)).map(OneOrList::List)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn read<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, String> {
        crate::error::decode_json::<T>(text.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn each_form_is_read_by_the_type_that_comes() {
        assert_eq!(read(r#""a b""#), Ok(TextWire::One("a b".into())));
        assert_eq!(read(r#""a\"b""#), Ok(TextWire::One("a\"b".into())));
        let batch = TextWire::Batch(vec!["a".into(), "b".into()]);
        assert_eq!(read(r#"["a", "b"]"#), Ok(batch));
        assert_eq!(read(r#"[]"#), Ok(TextWire::Batch(vec![])));
        assert_eq!(read("[1, 2]"), Ok(IdsWire::One(vec![1, 2])));
        assert_eq!(read("[]"), Ok(IdsWire::One(vec![])));
        assert_eq!(
            read("[[1], [2, 3]]"),
            Ok(IdsWire::Batch(vec![vec![1], vec![2, 3]]))
        );
        assert_eq!(read("[[]]"), Ok(IdsWire::Batch(vec![vec![]])));
        let one: OneOrList<BTreeMap<String, u32>> = read(r#"{"k": 1}"#).unwrap();
        assert_eq!(one, OneOrList::One(BTreeMap::from([("k".into(), 1)])));
        let list: OneOrList<BTreeMap<String, u32>> = read(r#"[{}, {"k": 2}]"#).unwrap();
        let want = vec![BTreeMap::new(), BTreeMap::from([("k".into(), 2)])];
        assert_eq!(list, OneOrList::List(want));
    }

    #[test]
    fn a_wrong_form_names_what_was_expected_and_where() {
        let cases: [(&str, Result<(), String>); 7] = [
            ("5", read::<TextWire>("5").map(drop)),
            ("[\"a\", 1]", read::<TextWire>(r#"["a", 1]"#).map(drop)),
            ("\"a\"", read::<IdsWire>(r#""a""#).map(drop)),
            ("[1, [2]]", read::<IdsWire>("[1, [2]]").map(drop)),
            ("[[1], 2]", read::<IdsWire>("[[1], 2]").map(drop)),
            ("[4294967296]", read::<IdsWire>("[4294967296]").map(drop)),
            ("[-1]", read::<IdsWire>("[-1]").map(drop)),
        ];
        let want = [
            "expected a string or an array of strings, got integer `5`",
            "[1]: expected a string, got integer `1`",
            "expected an array of token ids or an array of such arrays, got string \"a\"",
            "[1]: expected a non-negative integer (at most 4294967295), got an array",
            "[1]: expected an array, got integer `2`",
            "[0]: expected a non-negative integer (at most 4294967295), got integer `4294967296`",
            "[0]: expected a token id or an array of token ids, got integer `-1`",
        ];
        for ((input, got), want) in cases.into_iter().zip(want) {
            let got = got.expect_err(input);
            assert!(got.contains(want), "{input}: {got}");
        }
    }
}
