//! The few fields a spec needs from a JSON record (the text, the filtered fields),
//! taken while parsing, without building the record's tree: every other value is
//! checked for syntax and skipped without being stored. A Pile line's `meta` and
//! any other fields cost no allocation.
//!
//! The answers equal those of parsing the whole record into a `serde_json::Value`
//! and looking the paths up: a key given twice counts once, the last time; a path
//! through a non-object is absent; syntax errors are the same errors.

mod quick;

use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// A field's value as the selector needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Absent,
    Null,
    Str(String),
    /// A number, boolean, array or object.
    Other,
}

/// The dotted paths wanted, as a tree of keys. Built only when no path is a prefix of
/// another (then a value is either a leaf or a way to leaves, never both).
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    children: HashMap<String, Wanted>,
    /// The slot of the path that ends here.
    slot: Option<usize>,
    /// Slots of every path below (to forget them when a key is given again).
    below: Vec<usize>,
}

impl Wanted {
    /// The tree for `paths` (each a list of keys); slot `i` answers `paths[i]`. `None`
    /// when one path is a prefix of another or a path is empty.
    pub fn new(paths: &[Vec<String>]) -> Option<Wanted> {
        let mut root = Wanted::default();
        for (slot, path) in paths.iter().enumerate() {
            if path.is_empty() {
                return None;
            }
            let mut node = &mut root;
            for key in path {
                if node.slot.is_some() {
                    return None;
                }
                node.below.push(slot);
                node = node.children.entry(key.clone()).or_default();
            }
            if node.slot.is_some() || !node.children.is_empty() {
                return None;
            }
            node.slot = Some(slot);
        }
        Some(root)
    }

    /// Parses one JSON document, filling one `Found` per path: by hand where the
    /// record's syntax is plain (`quick`), else through serde.
    pub fn extract(&self, json: &str, slots: usize) -> Result<Vec<Found>, serde_json::Error> {
        match quick::extract(self, json, slots) {
            Some(found) => Ok(found),
            None => self.extract_with_serde(json, slots),
        }
    }

    fn extract_with_serde(&self, json: &str, slots: usize) -> Result<Vec<Found>, serde_json::Error> {
        let mut found = vec![Found::Absent; slots];
        let mut deserializer = serde_json::Deserializer::from_str(json);
        Node { wanted: self, found: &mut found }.deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(found)
    }
}

/// Visits a value on the way to wanted leaves: only an object leads anywhere. A
/// value nobody wants is a `Node` of the empty tree (`skip`): parsed as a `Value`
/// would be (numbers out of range and bad escapes are the same errors) and dropped
/// without being stored.
struct Node<'a> {
    wanted: &'a Wanted,
    found: &'a mut [Found],
}

/// The seed for a value nobody wants.
fn skip() -> Node<'static> {
    static NOTHING: std::sync::LazyLock<Wanted> = std::sync::LazyLock::new(Wanted::default);
    Node { wanted: &NOTHING, found: &mut [] }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match self.wanted.children.get(key.as_ref()) {
                Some(child) => {
                    // A key given again replaces what the earlier one held, as in a `Value`.
                    for &slot in child.below.iter().chain(&child.slot) {
                        self.found[slot] = Found::Absent;
                    }
                    match child.slot {
                        Some(slot) => self.found[slot] = map.next_value_seed(Leaf)?,
                        None => map.next_value_seed(Node { wanted: child, found: &mut *self.found })?,
                    }
                }
                None => map.next_value_seed(skip())?,
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(skip())?.is_some() {}
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// A wanted value: kept when it is a string, told apart from null otherwise.
struct Leaf;

impl<'de> DeserializeSeed<'de> for Leaf {
    type Value = Found;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Found, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Leaf {
    type Value = Found;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_str<E>(self, value: &str) -> Result<Found, E> {
        Ok(Found::Str(value.to_string()))
    }

    fn visit_string<E>(self, value: String) -> Result<Found, E> {
        Ok(Found::Str(value))
    }

    fn visit_unit<E>(self) -> Result<Found, E> {
        Ok(Found::Null)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Found, E> {
        Ok(Found::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Found, E> {
        Ok(Found::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Found, E> {
        Ok(Found::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Found, E> {
        Ok(Found::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Found, A::Error> {
        skip().visit_seq(seq).map(|()| Found::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Found, A::Error> {
        skip().visit_map(map).map(|()| Found::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn paths(dotted: &[&str]) -> Vec<Vec<String>> {
        dotted.iter().map(|path| path.split('.').map(str::to_string).collect()).collect()
    }

    /// What looking the paths up in a parsed `Value` answers.
    fn through_value(json: &str, paths: &[Vec<String>]) -> Result<Vec<Found>, String> {
        let value: Value = serde_json::from_str(json).map_err(|err| err.to_string())?;
        Ok(paths
            .iter()
            .map(|path| match path.iter().try_fold(&value, |value, key| value.get(key)) {
                None => Found::Absent,
                Some(Value::Null) => Found::Null,
                Some(Value::String(text)) => Found::Str(text.clone()),
                Some(_) => Found::Other,
            })
            .collect())
    }

    #[test]
    fn overlapping_paths_are_refused() {
        assert!(Wanted::new(&paths(&["meta", "meta.set"])).is_none());
        assert!(Wanted::new(&paths(&["meta.set", "meta"])).is_none());
        assert!(Wanted::new(&paths(&["text", "text"])).is_none());
        assert!(Wanted::new(&paths(&["text", "meta.set", "meta.lang"])).is_some());
    }

    #[test]
    fn fields_equal_a_full_parse_on_the_cases_that_matter() {
        let wanted = paths(&["text", "meta.pile_set_name"]);
        let tree = Wanted::new(&wanted).unwrap();
        for json in [
            r#"{"text": "a\u00e9\n\"q\"", "meta": {"pile_set_name": "Github", "x": [1, {"y": null}]}}"#,
            r#"{"meta": {"pile_set_name": "A"}, "text": "t", "meta": {"other": 1}}"#,
            r#"{"text": "first", "text": "second"}"#,
            r#"{"text": null, "meta": "not an object"}"#,
            r#"{"text": 5, "meta": {"pile_set_name": ["a"]}}"#,
            r#"["text", "meta"]"#,
            r#""just a string""#,
            r#"{"text": "\ud83d\ude80 rocket", "extra": {"deep": {"deeper": [true, false, 1e10]}}}"#,
            r#"{"text": "x"} trailing"#,
            r#"{"text": "x", }"#,
            r#"{"text": "\q"}"#,
            r#"{"other": "\q", "text": "x"}"#,
            r#"{"text": "x""#,
            r#"{"text": "x", "n": 1e400}"#,
            r#"{"text": "x", "n": [18446744073709551616, -9223372036854775809, 0.5e-400]}"#,
            r#"{"text": "x", "k": {"\uD800": 1}}"#,
            r#"{"text": "\uD800 lone"}"#,
        ] {
            let ours = tree.extract(json, wanted.len()).map_err(|err| err.to_string());
            assert_eq!(ours, through_value(json, &wanted), "{json}");
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-z\\u{e9}\\u{1F680}\"\\\\\n ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            let keys =
                prop_oneof![Just("text".to_string()), Just("meta".to_string()), Just("set".to_string()), "[a-z]{1,3}"];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((keys, inner), 0..5).prop_map(|entries| {
                    // Written by hand below, so duplicate keys survive into the text.
                    Value::Array(entries.into_iter().map(|(k, v)| Value::Array(vec![Value::String(k), v])).collect())
                }),
            ]
        })
    }

    /// JSON text for a generated value; `[[k, v], ...]` pairs marked by an array of
    /// two-element arrays with string heads become objects (duplicates kept).
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Array(items)
                if !items.is_empty()
                    && items
                        .iter()
                        .all(|item| matches!(item, Value::Array(pair) if pair.len() == 2 && pair[0].is_string())) =>
            {
                out.push('{');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    out.push_str(&item[0].to_string());
                    out.push(':');
                    write(&item[1], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        #[test]
        fn fields_equal_a_full_parse(value in json_value()) {
            let mut json = String::new();
            write(&value, &mut json);
            let wanted = paths(&["text", "meta.set"]);
            let ours = Wanted::new(&wanted).unwrap().extract(&json, wanted.len()).map_err(|err| err.to_string());
            prop_assert_eq!(ours, through_value(&json, &wanted), "{}", json);
        }
    }
}
