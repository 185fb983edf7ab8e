//! JSON text to a `serde_json::Value`, refusing an object that repeats a key.
//!
//! `serde_json::from_str::<Value>` keeps the last of repeated keys without a word, so
//! `{"label": 1, "label": 2}` would train on label 2 while the line says both. This is
//! serde_json's own `Value` visitor with that one check; serde_json's deserializer still
//! does the parsing and enforces its nesting limit (128), so the cost is that of
//! `from_str::<Value>` plus a map lookup per key.

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};
use std::fmt;

/// Parses one JSON document; a repeated key in any object is an error naming the key.
pub(crate) fn from_str(text: &str) -> serde_json::Result<Value> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = StrictValue.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// A `Value` whose objects have distinct keys.
struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        // As serde_json's own visitor: a number that is not finite becomes null.
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(items.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = items.next_element_seed(StrictValue)? {
            out.push(item);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = entries.next_key::<String>()? {
            let value = entries.next_value_seed(StrictValue)?;
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
}
