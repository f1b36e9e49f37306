//! Records on the host side, and their JSON form.
//!
//! A record is an ordered list of fields, the same [`Field`] type the
//! evaluator uses, owning its text. JSON input follows the conformance
//! corpus's mapping (string → chars, integer → digit, …); JSON output follows
//! spec §11 (ignore fields skipped, objects with sorted keys, floats with a
//! decimal point).

use std::borrow::Cow;

use omlet_lang::value::{Field, Value, obj_insert};
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

/// Parses one JSON text into a record.
pub fn from_json_str(text: &str) -> Result<Record, String> {
    let json: Json = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    from_json(&json)
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
        Json::Array(items) => Value::Array(Box::new(
            items.iter().map(|i| Field::new(Cow::Borrowed(""), value_from_json(i))).collect(),
        )),
        Json::Object(m) => {
            let mut members = Vec::with_capacity(m.len());
            for (k, v) in m {
                obj_insert(&mut members, Field::new(Cow::Owned(k.clone()), value_from_json(v)));
            }
            Value::Obj(Box::new(members))
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
