//! Records on the host side, and their JSON form.
//!
//! A record is an ordered list of fields, the same [`Field`] type the
//! evaluator uses, owning its text. JSON input follows the conformance
//! corpus's mapping (string → chars, integer → digit, …); JSON output follows
//! spec §11 (ignore fields skipped, objects with sorted keys, floats with a
//! decimal point).

use std::borrow::Cow;

use omlet_lang::value::{Field, Value, obj_from};
use serde_json::Value as Json;

/// One record: fields in order.
pub type Record = Vec<Field<'static>>;

/// Builds a record from a JSON object (key order kept).
pub fn from_json(json: &Json) -> Result<Record, String> {
    let Json::Object(map) = json else {
        return Err("a record must be a JSON object".to_string());
    };
    Ok(map.iter().map(|(k, v)| Field::new(Cow::Owned(k.clone()), value_from_json(v))).collect())
}

/// Parses one JSON text into a record, with the mapping of [`from_json`]
/// but straight into fields, without an intermediate `serde_json::Value`.
pub fn from_json_str(text: &str) -> Result<Record, String> {
    if !text.trim_start().starts_with('{') {
        // Not an object: say whether it is JSON at all, as `from_json` would.
        let json: Json = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
        return from_json(&json);
    }
    let TopLevel(record) = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    Ok(record)
}

/// Past this many fields, repeated keys are found through an index.
const INDEX_FROM: usize = 32;

/// A record read directly by serde: members in order; a repeated key keeps
/// its first place and its last value, as an order-preserving JSON map does.
struct TopLevel(Record);

impl<'de> serde::Deserialize<'de> for TopLevel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = TopLevel;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<TopLevel, A::Error> {
                let mut fields: Record = Vec::with_capacity(map.size_hint().unwrap_or(8));
                // Repeated keys are found by a scan while the record is small,
                // and through an index past that, so a wide record is read in
                // linear time (200,000 fields used to take minutes).
                let mut index: Option<std::collections::HashMap<String, usize>> = None;
                while let Some(key) = map.next_key::<String>()? {
                    let JsonValue(value) = map.next_value()?;
                    if index.is_none() && fields.len() >= INDEX_FROM {
                        index = Some(fields.iter().enumerate().map(|(i, f)| (f.name.to_string(), i)).collect());
                    }
                    let at = match &mut index {
                        Some(ix) => match ix.get(key.as_str()) {
                            Some(&i) => Some(i),
                            None => {
                                ix.insert(key.clone(), fields.len());
                                None
                            }
                        },
                        None => fields.iter().position(|f| f.name == key.as_str()),
                    };
                    match at {
                        Some(i) => fields[i].value = value,
                        None => fields.push(Field::new(Cow::Owned(key), value)),
                    }
                }
                Ok(TopLevel(fields))
            }
        }
        d.deserialize_map(V)
    }
}

/// One JSON value as an OML value, read directly by serde.
struct JsonValue(Value<'static>);

impl<'de> serde::Deserialize<'de> for JsonValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = JsonValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<JsonValue, E> {
                Ok(JsonValue(Value::Null))
            }
            fn visit_bool<E>(self, b: bool) -> Result<JsonValue, E> {
                Ok(JsonValue(Value::Bool(b)))
            }
            fn visit_i64<E>(self, i: i64) -> Result<JsonValue, E> {
                Ok(JsonValue(Value::Digit(i)))
            }
            fn visit_u64<E>(self, u: u64) -> Result<JsonValue, E> {
                Ok(JsonValue(i64::try_from(u).map(Value::Digit).unwrap_or(Value::Float(u as f64))))
            }
            fn visit_f64<E>(self, f: f64) -> Result<JsonValue, E> {
                Ok(JsonValue(Value::Float(f)))
            }
            fn visit_str<E>(self, s: &str) -> Result<JsonValue, E> {
                Ok(JsonValue(Value::Chars(Cow::Owned(s.to_string()))))
            }
            fn visit_string<E>(self, s: String) -> Result<JsonValue, E> {
                Ok(JsonValue(Value::Chars(Cow::Owned(s))))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<JsonValue, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(4));
                while let Some(JsonValue(v)) = seq.next_element()? {
                    items.push(Field::new(Cow::Borrowed(""), v));
                }
                Ok(JsonValue(Value::Array(Box::new(items))))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<JsonValue, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(key) = map.next_key::<String>()? {
                    let JsonValue(v) = map.next_value()?;
                    members.push(Field::new(Cow::Owned(key), v));
                }
                // Sorted once (n log n), not one insertion per member.
                Ok(JsonValue(Value::Obj(Box::new(obj_from(members)))))
            }
        }
        d.deserialize_any(V)
    }
}

/// One JSON value as an OML value (the mapping of [`from_json`]).
pub fn value_from_json(v: &Json) -> Value<'static> {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Digit(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Chars(Cow::Owned(s.clone())),
        Json::Array(items) => {
            Value::Array(Box::new(items.iter().map(|i| Field::new(Cow::Borrowed(""), value_from_json(i))).collect()))
        }
        Json::Object(m) => {
            let members = m.iter().map(|(k, v)| Field::new(Cow::Owned(k.clone()), value_from_json(v))).collect();
            Value::Obj(Box::new(obj_from(members)))
        }
    }
}

/// Renders a record as one line of JSON (spec §11).
pub fn to_json_string(record: &[Field<'_>]) -> String {
    let mut out = String::with_capacity(64 + record.len() * 16);
    out.push('{');
    let mut first = true;
    for f in record {
        if matches!(f.value, Value::Ignore) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        out.push('"');
        omlet_lang::pipes::json_escape_into(&f.name, &mut out);
        out.push_str("\":");
        omlet_lang::pipes::write_json(&f.value, &mut out, false);
    }
    out.push('}');
    out
}

/// A record as a `serde_json::Value` (for comparisons in tests and tools).
pub fn to_json(record: &[Field<'_>]) -> Json {
    serde_json::from_str(&to_json_string(record)).unwrap_or(Json::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_parsing_reads_what_the_json_value_path_reads() {
        for text in [
            r#"{"a":1,"b":-2.5,"c":"x\u00e9\n","d":null,"e":true,"f":[1,"two",[3],{"z":1,"a":2}],"g":{"y":{"k":[]},"b":0.0}}"#,
            r#"{"big":18446744073709551615,"neg":-9223372036854775808,"exp":1e3,"tiny":5e-324}"#,
            r#"{"dup":1,"other":2,"dup":3}"#,
            r#"  {"nested":{"dup":1,"dup":2}}  "#,
            r#"{}"#,
            r#"{"海":"莲花","":""}"#,
        ] {
            let json: Json = serde_json::from_str(text).unwrap();
            let via_value = from_json(&json).unwrap();
            let direct = from_json_str(text).unwrap();
            assert_eq!(format!("{direct:?}"), format!("{via_value:?}"), "{text}");
        }
        assert_eq!(from_json_str("[1]").unwrap_err(), "a record must be a JSON object");
        assert!(from_json_str(r#"{"a":}"#).unwrap_err().starts_with("invalid JSON: "));
        assert!(from_json_str(r#"{"a":1} x"#).unwrap_err().starts_with("invalid JSON: trailing characters"));
    }

    #[test]
    fn wide_records_with_repeated_keys_read_like_small_ones() {
        // Past the index threshold: repeated keys keep their first place and last value.
        let mut text = String::from("{");
        for i in 0..100 {
            text.push_str(&format!("\"k{i}\":{i},"));
        }
        text.push_str("\"k3\":\"again\",\"k99\":null,\"new\":1}");
        let json: Json = serde_json::from_str(&text).unwrap();
        assert_eq!(format!("{:?}", from_json_str(&text).unwrap()), format!("{:?}", from_json(&json).unwrap()));
        // 200,000 distinct fields: linear, so this takes milliseconds, not minutes.
        let mut wide = String::from("{");
        for i in 0..200_000 {
            wide.push_str(&format!("\"f{i}\":{i},"));
        }
        wide.push_str("\"f0\":\"last\"}");
        let r = from_json_str(&wide).unwrap();
        assert_eq!(r.len(), 200_000);
        assert_eq!(to_json_string(&r[..1]), r#"{"f0":"last"}"#);
    }
}
