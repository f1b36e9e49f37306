//! Records on the host side: [`Record`], an ordered set of named [`Value`]s,
//! and their JSON form.
//!
//! JSON input follows the conformance corpus's mapping (string → chars,
//! integer → digit, other number → float, …); JSON output follows spec §11
//! (ignored fields skipped, objects with sorted keys, floats with a decimal
//! point, IPs and times as strings).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::OnceLock;

use omlet_lang::value::{Field, Value as LangValue};
use serde_json::Value as Json;

use crate::{Error, Result};

pub(crate) mod chunk;
pub(crate) mod frame;
mod json;
pub(crate) mod names;
pub(crate) mod scan;

pub use json::{JsonError, fields_json, from_json, from_json_line, from_json_str, to_json_string, value_from_json};
use json::{JsonValue, TopLevel, write_fields_json};

/// One record: named fields in order, as a rule reads and writes them.
///
/// Build one from JSON ([`Record::from_json`]) or field by field
/// ([`Record::insert`]); read one with [`Record::get`] and
/// [`Record::iter`]. It is `serde`-serializable, as the JSON object of
/// [`Record::to_json`].
///
/// ```
/// use omlet::{Record, Value};
/// let mut r = Record::from_json(r#"{"host":"web-1","status":"200"}"#)?;
/// r.insert("bytes", 512);
/// assert_eq!(r.get("host"), Some(Value::Chars("web-1".into())));
/// assert_eq!(r.to_json(), r#"{"host":"web-1","status":"200","bytes":512}"#);
/// # Ok::<(), omlet::Error>(())
/// ```
///
/// A record that a one-record call returns keeps the guest's output frame:
/// its fields are built from it when first read, and [`Record::to_json`]
/// renders it straight from the frame, so an output that is only written
/// out is never taken apart.
///
/// Fields a rule marks as ignored (spec §4.5: `__` names, `ignore` values)
/// stay inside the record but are not shown: `get`, `iter`, `len` and the
/// JSON form skip them.
#[derive(Clone, Default)]
pub struct Record {
    /// The fields: given at once, or read from `frame` when first asked for.
    fields: OnceLock<Vec<Field<'static>>>,
    /// The record as frame bytes, when it was read straight into a frame
    /// (a JSONL line, [`from_json_line`]) or is a one-record call's output:
    /// a record that is only evaluated and dropped, or written out as JSON,
    /// is never taken apart into fields, and goes into a batch frame as
    /// bytes ([`Record::write_frame`]). Any change to the record drops it.
    frame: Option<Bytes>,
}

/// Where a record read straight into a frame keeps its bytes.
#[derive(Clone)]
enum Bytes {
    /// A one-record frame of its own.
    Own(Box<[u8]>),
    /// Record `index` of a frame shared with the records read beside it
    /// (see [`chunk`]).
    Chunk(std::sync::Arc<chunk::Cell>, u32),
}

impl PartialEq for Record {
    fn eq(&self, other: &Record) -> bool {
        self.fields() == other.fields()
    }
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record").field("fields", &self.fields()).finish()
    }
}

/// A field's value, by OML kind (spec §4.1).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// No value (`null`).
    Null,
    /// `bool`.
    Bool(bool),
    /// `digit`: a 64-bit integer.
    Digit(i64),
    /// `float`.
    Float(f64),
    /// `chars`: text.
    Chars(String),
    /// `ip`: an IPv4 or IPv6 address.
    Ip(IpAddr),
    /// `time`: a naive date-time (no zone), as nanoseconds since
    /// 1970-01-01 00:00:00.
    Time(i64),
    /// `bigint`: an integer past the 64 bits of `digit`, kept exactly as its
    /// decimal digits (an optional `-`, no leading zeros). JSON integers
    /// outside `i64` read as this kind.
    BigInt(String),
    /// `array`.
    Array(Vec<Value>),
    /// `obj`: members by name (sorted, unique).
    Object(BTreeMap<String, Value>),
}

impl Record {
    /// An empty record.
    pub fn new() -> Record {
        Record::default()
    }

    /// Parses one JSON object. Key order is kept; a repeated key keeps its
    /// first place and its last value. Fails with [`Error::Input`] for text
    /// that is not a JSON object.
    pub fn from_json(text: &str) -> Result<Record> {
        from_json_str(text).map_err(|e| Error::Input { what: "record".into(), message: e.to_string() })
    }

    /// A record from a parsed JSON object (see [`Record::from_json`]).
    pub fn from_json_value(json: &Json) -> Result<Record> {
        from_json(json).map_err(|e| Error::Input { what: "record".into(), message: e.to_string() })
    }

    /// The record as one line of JSON (spec §11).
    pub fn to_json(&self) -> String {
        if let Some(own) = self.unread_frame() {
            let mut line = String::with_capacity(own.len());
            if frame::write_json_of(own, &mut line).is_ok() {
                return line;
            }
        }
        fields_json(self.fields())
    }

    /// Appends [`Record::to_json`]'s text to `out`: a writer of many records
    /// can reuse one buffer instead of allocating a string per record.
    ///
    /// ```
    /// let mut line = String::new();
    /// omlet::Record::from_json(r#"{"a":1}"#)?.write_json(&mut line);
    /// assert_eq!(line, r#"{"a":1}"#);
    /// # Ok::<(), omlet::Error>(())
    /// ```
    pub fn write_json(&self, out: &mut String) {
        // A record still kept as its own frame (an output, or a JSONL line)
        // is rendered from it, node by node, without building its fields.
        if let Some(own) = self.unread_frame()
            && frame::write_json_of(own, out).is_ok()
        {
            return;
        }
        write_fields_json(self.fields(), out);
    }

    /// The record as a `serde_json::Value` object.
    pub fn to_json_value(&self) -> Json {
        // The serde form is the spec §11 form; no text round trip.
        serde_json::to_value(self).unwrap_or(Json::Null)
    }

    /// The value of field `name`, if the record shows one.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.fields().iter().find(|f| f.name == name && !matches!(f.value, LangValue::Ignore)).map(|f| Value::from_lang(&f.value))
    }

    /// Whether the record shows a field `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.fields().iter().any(|f| f.name == name && !matches!(f.value, LangValue::Ignore))
    }

    /// Sets field `name`: in its place when the record has it (giving back
    /// the old value), else as a new last field.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        let name = name.into();
        let value = value.into().into_lang();
        match self.fields_mut().iter_mut().find(|f| f.name == name.as_str()) {
            Some(f) => {
                let old = std::mem::replace(&mut f.value, value);
                (!matches!(old, LangValue::Ignore)).then(|| Value::from_lang(&old))
            }
            None => {
                self.fields_mut().push(Field::new(Cow::Owned(name), value));
                None
            }
        }
    }

    /// Removes field `name`, giving back its value.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        let at = self.fields().iter().position(|f| f.name == name)?;
        let old = self.fields_mut().remove(at).value;
        (!matches!(old, LangValue::Ignore)).then(|| Value::from_lang(&old))
    }

    /// How many fields the record shows.
    pub fn len(&self) -> usize {
        self.shown().count()
    }

    /// Whether the record shows no field.
    pub fn is_empty(&self) -> bool {
        self.shown().next().is_none()
    }

    /// The fields the record shows, in order, with their values.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Value)> + '_ {
        self.shown().map(|f| (f.name.as_ref(), Value::from_lang(&f.value)))
    }

    /// The text of field `name`, when the record shows it as chars,
    /// borrowed (what [`Route::Field`](crate::Route::Field) routes by).
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.shown().find(|f| f.name == name).and_then(|f| match &f.value {
            LangValue::Chars(s) => Some(s.as_ref()),
            _ => None,
        })
    }

    /// Types the fields that JSON and CSV cannot say, as `omlet run
    /// --input-types` and a test case's `input_types` do: `types` maps a
    /// field name to `ip`, `time` (`YYYY-MM-DD HH:MM:SS`, with an optional
    /// fraction), `digit`, `float`, `bool` (only `true` is true) or `chars`.
    /// Digits, floats and addresses are read by the evaluator's own
    /// conversion (that of a typed target). A field that is not there is
    /// left out; one whose text does not read as its type fails with
    /// [`Error::Input`] naming it, and the record is then left as it was.
    ///
    /// ```
    /// let mut r = omlet::Record::from_json(r#"{"ts":"2024-01-02 03:04:05","src":"10.0.0.1"}"#)?;
    /// r.retype(&[("ts", "time"), ("src", "ip")].into_iter().map(|(a, b)| (a.to_string(), b.to_string())).collect())?;
    /// assert_eq!(r.get("src"), Some(omlet::Value::Ip("10.0.0.1".parse().unwrap())));
    /// # Ok::<(), omlet::Error>(())
    /// ```
    pub fn retype(&mut self, types: &BTreeMap<String, String>) -> Result<()> {
        use omlet_lang::value::{Kind, Type, convert};
        // A record that has none of the fields keeps its frame (and is not
        // copied): it is written into a batch as its bytes.
        if !self.fields().iter().any(|f| types.contains_key(f.name.as_ref())) {
            return Ok(());
        }
        // Typed on a copy: a field that fails leaves the record as it was.
        let mut typed = self.fields().to_vec();
        for f in &mut typed {
            let Some(ty) = types.get(f.name.as_ref()) else { continue };
            let (name, text) = (f.name.to_string(), f.value.raw_text().into_owned());
            let bad = |message: String| Error::Input { what: format!("field {name}"), message };
            let value = std::mem::replace(&mut f.value, LangValue::Null);
            let kind = match ty.as_str() {
                "time" => {
                    let t = omlet_lang::time::parse_time(&text);
                    f.value = LangValue::Time(t.ok_or_else(|| bad(format!("not a time (YYYY-MM-DD HH:MM:SS): {text}")))?);
                    continue;
                }
                "bool" => {
                    f.value = LangValue::Bool(text == "true");
                    continue;
                }
                "chars" => Kind::Chars,
                "ip" => Kind::Ip,
                "digit" => Kind::Digit,
                "float" => Kind::Float,
                other => return Err(bad(format!("unknown type {other} (ip, time, digit, float, bool or chars)"))),
            };
            f.value = convert(value, &Type::Kind(kind));
            if f.value.kind() != kind {
                return Err(bad(format!("not {}: {text}", kind.name())));
            }
        }
        *self.fields_mut() = typed;
        Ok(())
    }

    /// The names of the fields the record shows, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.shown().map(|f| f.name.as_ref())
    }

    fn shown(&self) -> impl Iterator<Item = &Field<'static>> + '_ {
        self.fields().iter().filter(|f| !matches!(f.value, LangValue::Ignore))
    }

    /// The record's own one-record frame while its fields have not been
    /// read from it: its JSON is rendered from the frame then.
    fn unread_frame(&self) -> Option<&[u8]> {
        match (&self.frame, self.fields.get()) {
            (Some(Bytes::Own(own)), None) => Some(own),
            _ => None,
        }
    }

    /// The evaluator's fields.
    pub(crate) fn fields(&self) -> &[Field<'static>] {
        self.fields.get_or_init(|| {
            let decoded = match &self.frame {
                Some(Bytes::Own(own)) => frame::decode_record(own),
                Some(Bytes::Chunk(..)) => match self.part() {
                    Some(part) => omlet_lang::frame::join_parts(std::iter::once(part))
                        .map_err(frame::DecodeError::from)
                        .and_then(|joined| frame::decode_record(&joined)),
                    None => Err(frame::DecodeError::Malformed("its chunk's frame is gone")),
                },
                None => return Vec::new(),
            };
            decoded.map(Record::into_fields).unwrap_or_else(|e| {
                // These frames come from a `Writer` (`from_json_line`) or
                // were checked whole before the record was made
                // (`frame::record_keeping_frame`).
                debug_assert!(false, "a record's own frame does not read: {e}");
                Vec::new()
            })
        })
    }

    /// The fields, to change: the frame, if any, no longer says the same.
    fn fields_mut(&mut self) -> &mut Vec<Field<'static>> {
        self.fields();
        self.frame = None;
        self.fields.get_mut().expect("the fields were just read")
    }

    /// A record of the evaluator's fields.
    pub(crate) fn from_fields(fields: Vec<Field<'static>>) -> Record {
        Record { fields: OnceLock::from(fields), frame: None }
    }

    /// A record kept as its own one-record frame, its fields read from it
    /// when first asked for. The frame must read (see
    /// [`frame::record_keeping_frame`], which checks it).
    pub(crate) fn from_own_frame(frame: Box<[u8]>) -> Record {
        Record { fields: OnceLock::new(), frame: Some(Bytes::Own(frame)) }
    }

    /// The evaluator's fields, taken out.
    pub(crate) fn into_fields(self) -> Vec<Field<'static>> {
        self.fields();
        self.fields.into_inner().unwrap_or_default()
    }

    /// The record's own one-record frame, when it has one.
    #[cfg(test)]
    pub(crate) fn own_frame(&self) -> Option<&[u8]> {
        match &self.frame {
            Some(Bytes::Own(frame)) => Some(frame),
            _ => None,
        }
    }

    /// The record's nodes and text, when it was read straight into a frame
    /// (its own, or its chunk's) and that frame holds it alone or is sealed.
    pub(crate) fn part(&self) -> Option<omlet_lang::frame::Part<'_>> {
        match self.frame.as_ref()? {
            Bytes::Own(frame) => omlet_lang::frame::Part::of(frame).ok(),
            Bytes::Chunk(cell, index) => cell.get()?.part(*index as usize),
        }
    }

    /// The chunk the record was read into, and its place there.
    pub(crate) fn chunk(&self) -> Option<(&std::sync::Arc<chunk::Cell>, u32)> {
        match self.frame.as_ref()? {
            Bytes::Chunk(cell, index) => Some((cell, *index)),
            Bytes::Own(_) => None,
        }
    }

    /// Appends the record to a frame being written: its frame's bytes when
    /// it has them, else its fields.
    pub(crate) fn write_frame(&self, w: &mut omlet_lang::frame::Writer) {
        if let Some(part) = self.part()
            && w.append_part(part).is_ok()
        {
            return;
        }
        w.record(self.fields());
    }
}

/// A record of the evaluator's own fields (`omlet_lang`'s form of a record):
/// for a host that also runs the language natively, as `omlet test --native`
/// and the benches do.
impl From<Vec<Field<'static>>> for Record {
    fn from(fields: Vec<Field<'static>>) -> Record {
        Record::from_fields(fields)
    }
}

/// The record's fields in the evaluator's own form (see the `From` impl
/// above), ignored fields included.
impl From<Record> for Vec<Field<'static>> {
    fn from(record: Record) -> Vec<Field<'static>> {
        record.into_fields()
    }
}

impl std::fmt::Display for Record {
    /// The JSON form of [`Record::to_json`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_json())
    }
}

impl<N: Into<String>, V: Into<Value>> FromIterator<(N, V)> for Record {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Record {
        let mut r = Record::new();
        for (n, v) in iter {
            r.insert(n, v);
        }
        r
    }
}

impl serde::Serialize for Record {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.len()))?;
        for f in self.shown() {
            map.serialize_entry(f.name.as_ref(), &Shown(&f.value, false))?;
        }
        map.end()
    }
}

impl<'de> serde::Deserialize<'de> for Record {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let TopLevel(fields) = TopLevel::<false>::deserialize(d)?;
        Ok(Record::from_fields(fields))
    }
}

impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        Shown(&self.clone().into_lang(), false).serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let JsonValue(v) = JsonValue::<false>::deserialize(d)?;
        Ok(Value::from_lang(&v))
    }
}

/// An evaluator value serialized as its spec §11 JSON (the flag: inside an array).
struct Shown<'v>(&'v LangValue<'v>, bool);

impl serde::Serialize for Shown<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            LangValue::Chars(t) => s.serialize_str(t),
            LangValue::Digit(d) => s.serialize_i64(*d),
            LangValue::Float(f) if f.is_nan() => s.serialize_unit(),
            LangValue::Float(f) if f.is_infinite() => s.serialize_str(if *f > 0.0 { "Infinity" } else { "-Infinity" }),
            LangValue::Float(f) => s.serialize_f64(*f),
            LangValue::Bool(b) => s.serialize_bool(*b),
            v @ (LangValue::Ip(_) | LangValue::Time(_)) => {
                let mut text = String::new();
                v.write_raw(&mut text);
                s.serialize_str(&text)
            }
            // A JSON number as far as serde's integers reach (128 bits), its
            // digits as a string past that (`Record::to_json` writes every
            // digit as a number).
            LangValue::BigInt(t) => match (t.parse::<i128>(), t.parse::<u128>()) {
                (Ok(i), _) => s.serialize_i128(i),
                (_, Ok(u)) => s.serialize_u128(u),
                _ => s.serialize_str(t),
            },
            LangValue::Null => s.serialize_unit(),
            LangValue::Ignore if self.1 => s.serialize_str(""),
            LangValue::Ignore => s.serialize_unit(),
            LangValue::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items.iter() {
                    seq.serialize_element(&Shown(&i.value, true))?;
                }
                seq.end()
            }
            LangValue::Obj(members) => {
                let mut map = s.serialize_map(Some(members.len()))?;
                for m in members.iter() {
                    map.serialize_entry(m.name.as_ref(), &Shown(&m.value, false))?;
                }
                map.end()
            }
        }
    }
}

impl Value {
    fn from_lang(v: &LangValue<'_>) -> Value {
        match v {
            LangValue::Chars(s) => Value::Chars(s.to_string()),
            LangValue::Digit(d) => Value::Digit(*d),
            LangValue::Float(f) => Value::Float(*f),
            LangValue::Bool(b) => Value::Bool(*b),
            LangValue::Ip(ip) => Value::Ip(*ip),
            LangValue::Time(t) => Value::Time(*t),
            LangValue::BigInt(d) => Value::BigInt(d.to_string()),
            LangValue::Obj(m) => Value::Object(m.iter().map(|f| (f.name.to_string(), Value::from_lang(&f.value))).collect()),
            LangValue::Array(items) => Value::Array(items.iter().map(|f| Value::from_lang(&f.value)).collect()),
            LangValue::Null | LangValue::Ignore => Value::Null,
        }
    }

    fn into_lang(self) -> LangValue<'static> {
        match self {
            Value::Null => LangValue::Null,
            Value::Bool(b) => LangValue::Bool(b),
            Value::Digit(d) => LangValue::Digit(d),
            Value::Float(f) => LangValue::Float(f),
            Value::Chars(s) => LangValue::Chars(Cow::Owned(s)),
            Value::Ip(ip) => LangValue::Ip(ip),
            Value::Time(t) => LangValue::Time(t),
            // Digits that are not canonical are made so; text that is no
            // integer stays text rather than a value no frame may carry.
            Value::BigInt(d) => match omlet_lang::value::parse_bigint(&d) {
                Some(c) => omlet_lang::value::integer_value(c),
                None => LangValue::Chars(Cow::Owned(d)),
            },
            Value::Array(items) => {
                LangValue::Array(Box::new(items.into_iter().map(|v| Field::new(Cow::Borrowed(""), v.into_lang())).collect()))
            }
            Value::Object(m) => {
                // A BTreeMap is already sorted by name, with names unique.
                LangValue::Obj(Box::new(m.into_iter().map(|(k, v)| Field::new(Cow::Owned(k), v.into_lang())).collect()))
            }
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident $(as $cast:ty)?),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::$v(x $(as $cast)?)
            }
        }
    )*};
}

value_from!(bool => Bool, i64 => Digit, i32 => Digit as i64, u32 => Digit as i64, f64 => Float, String => Chars, IpAddr => Ip);

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Chars(s.to_string())
    }
}

impl From<std::net::Ipv4Addr> for Value {
    fn from(ip: std::net::Ipv4Addr) -> Value {
        Value::Ip(IpAddr::V4(ip))
    }
}

impl From<std::net::Ipv6Addr> for Value {
    fn from(ip: std::net::Ipv6Addr) -> Value {
        Value::Ip(IpAddr::V6(ip))
    }
}

impl From<Vec<Value>> for Value {
    fn from(items: Vec<Value>) -> Value {
        Value::Array(items)
    }
}

impl From<BTreeMap<String, Value>> for Value {
    fn from(members: BTreeMap<String, Value>) -> Value {
        Value::Object(members)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(x: Option<T>) -> Value {
        x.map(Into::into).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests;
