//! JSON text to a `serde_json::Value`, refusing an object that repeats a key, and sizes
//! past the limits while parsing (docs/limits.md).
//!
//! `serde_json::from_str::<Value>` keeps the last of repeated keys without a word, so
//! `{"label": 1, "label": 2}` would train on label 2 while the line says both. This is
//! serde_json's own `Value` visitor with that one check; serde_json's deserializer still
//! does the parsing and enforces its nesting limit (128), so the cost is that of
//! `from_str::<Value>` plus a map lookup per key.
//!
//! The visitor also counts: an array of more than [`MAX_ARRAY_ITEMS`] items (the
//! collection limit) or a document of more than [`MAX_VALUES`] values is an error as soon
//! as the count passes, so a huge array is refused after that many items, not after a
//! vector of all of them was grown (a 200 MB line of one array aborted on a 4 GiB
//! allocation).

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};
use std::cell::Cell;
use std::fmt;

/// The most items of one JSON array: the executor's limit on a collection's elements.
pub(crate) const MAX_ARRAY_ITEMS: u64 = amp_ir::limits::MAX_COLLECTION_ELEMENTS;

/// The most values (numbers, strings, arrays, objects...) of one JSON document.
pub(crate) const MAX_VALUES: u64 = 1 << 25;

/// Parses one JSON document; a repeated key in any object is an error naming the key.
pub(crate) fn from_str(text: &str) -> serde_json::Result<Value> {
    from_str_within(text, Limits { items: MAX_ARRAY_ITEMS, values: MAX_VALUES })
}

/// What one document may hold.
#[derive(Clone, Copy)]
struct Limits {
    items: u64,
    values: u64,
}

fn from_str_within(text: &str, limits: Limits) -> serde_json::Result<Value> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let values = Cell::new(0);
    let value = StrictValue { values: &values, limits }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// A `Value` whose objects have distinct keys, counting the document's values.
#[derive(Clone, Copy)]
struct StrictValue<'c> {
    values: &'c Cell<u64>,
    limits: Limits,
}

impl StrictValue<'_> {
    /// Counts one more value of the document.
    fn count<E: serde::de::Error>(self) -> Result<(), E> {
        let values = self.values.get() + 1;
        self.values.set(values);
        if values > self.limits.values {
            let limit = self.limits.values;
            return Err(E::custom(format_args!("more than {limit} values in one line (the limit of an instance)")));
        }
        Ok(())
    }

    fn counted<E: serde::de::Error>(self, value: Value) -> Result<Value, E> {
        self.count()?;
        Ok(value)
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<Value, E> {
        self.counted(Value::Bool(value))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Value, E> {
        self.counted(Value::Number(value.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Value, E> {
        self.counted(Value::Number(value.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Value, E> {
        // As serde_json's own visitor: a number that is not finite becomes null.
        self.counted(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Value, E> {
        self.counted(Value::String(value.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, value: String) -> Result<Value, E> {
        self.counted(Value::String(value))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.counted(Value::Null)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.counted(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut out = Vec::with_capacity(items.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = items.next_element_seed(self)? {
            if out.len() as u64 >= self.limits.items {
                let limit = self.limits.items;
                return Err(A::Error::custom(format_args!(
                    "an array of more than {limit} items (the limit of a collection)"
                )));
            }
            out.push(item);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut map = Map::new();
        while let Some(key) = entries.next_key::<String>()? {
            let value = entries.next_value_seed(self)?;
            match map.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(slot) => {
                    let key = crate::error::excerpt(slot.key());
                    return Err(A::Error::custom(format_args!("duplicate key `{key}`")));
                }
            }
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_as_serde_json_does_and_refuses_repeated_keys() {
        let text = r#"{"a": [1, -2, 3.5, true, null, "x"], "b": {"c": {}}, "d": 18446744073709551615}"#;
        assert_eq!(from_str(text).ok(), serde_json::from_str::<Value>(text).ok());
        let error = from_str(r#"{"a": 1, "b": {"c": 1, "c": 2}}"#).map(|_| ()).unwrap_err();
        assert!(error.to_string().contains("duplicate key `c`"), "{error}");
        assert!(from_str(r#"{"a": 1} x"#).is_err(), "trailing text");
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(from_str(&deep).is_err(), "serde_json's nesting limit holds");
    }

    #[test]
    fn an_array_past_the_collection_limit_is_refused_while_parsing() {
        assert_eq!(MAX_ARRAY_ITEMS, 1 << 24);
        let limits = Limits { items: 1000, values: MAX_VALUES };
        let at = format!("[{}1]", "1,".repeat(999));
        assert!(from_str_within(&at, limits).is_ok_and(|v| v.as_array().is_some_and(|a| a.len() == 1000)));
        let past = format!("[{}1]", "1,".repeat(1000));
        let error = from_str_within(&past, limits).map(|_| ()).unwrap_err();
        assert!(error.to_string().contains("an array of more than 1000 items"), "{error}");
        // The error comes at the item past the limit, not at the end of the array.
        assert_eq!(error.column(), 2003, "{error}");
    }

    #[test]
    fn a_document_past_the_values_limit_is_refused_while_parsing() {
        // Arrays of one item each, every array within the collection limit.
        let limits = Limits { items: MAX_ARRAY_ITEMS, values: 100 };
        let at = format!("[{}[1]]", "[1],".repeat(48)); // 1 + 49 * 2 = 99 values
        assert!(from_str_within(&at, limits).is_ok());
        let past = format!("[{}[1]]", "[1],".repeat(50));
        let error = from_str_within(&past, limits).map(|_| ()).unwrap_err();
        assert!(error.to_string().contains("more than 100 values"), "{error}");
    }
}
