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

use omlet_lang::value::{Field, Value as LangValue, obj_from};
use serde_json::Value as Json;

use crate::{Error, Result};

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
/// Fields a rule marks as ignored (spec §4.5: `__` names, `ignore` values)
/// stay inside the record but are not shown: `get`, `iter`, `len` and the
/// JSON form skip them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    fields: Vec<Field<'static>>,
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
        from_json_str(text).map_err(|message| Error::Input { what: "record".into(), message })
    }

    /// A record from a parsed JSON object (see [`Record::from_json`]).
    pub fn from_json_value(json: &Json) -> Result<Record> {
        from_json(json).map_err(|message| Error::Input { what: "record".into(), message })
    }

    /// The record as one line of JSON (spec §11).
    pub fn to_json(&self) -> String {
        fields_json(&self.fields)
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
        write_fields_json(&self.fields, out);
    }

    /// The record as a `serde_json::Value` object.
    pub fn to_json_value(&self) -> Json {
        // The serde form is the spec §11 form; no text round trip.
        serde_json::to_value(self).unwrap_or(Json::Null)
    }

    /// The value of field `name`, if the record shows one.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.fields.iter().find(|f| f.name == name && !matches!(f.value, LangValue::Ignore)).map(|f| Value::from_lang(&f.value))
    }

    /// Whether the record shows a field `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.fields.iter().any(|f| f.name == name && !matches!(f.value, LangValue::Ignore))
    }

    /// Sets field `name`: in its place when the record has it (giving back
    /// the old value), else as a new last field.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        let name = name.into();
        let value = value.into().into_lang();
        match self.fields.iter_mut().find(|f| f.name == name.as_str()) {
            Some(f) => {
                let old = std::mem::replace(&mut f.value, value);
                (!matches!(old, LangValue::Ignore)).then(|| Value::from_lang(&old))
            }
            None => {
                self.fields.push(Field::new(Cow::Owned(name), value));
                None
            }
        }
    }

    /// Removes field `name`, giving back its value.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        let at = self.fields.iter().position(|f| f.name == name)?;
        let old = self.fields.remove(at).value;
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
        // Typed on a copy: a field that fails leaves the record as it was.
        let mut typed = self.fields.clone();
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
        self.fields = typed;
        Ok(())
    }

    /// The names of the fields the record shows, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.shown().map(|f| f.name.as_ref())
    }

    fn shown(&self) -> impl Iterator<Item = &Field<'static>> + '_ {
        self.fields.iter().filter(|f| !matches!(f.value, LangValue::Ignore))
    }

    /// The evaluator's fields (the wire and the CLI's native runs).
    #[doc(hidden)]
    pub fn fields(&self) -> &[Field<'static>] {
        &self.fields
    }

    /// A record of the evaluator's fields.
    #[doc(hidden)]
    pub fn from_fields(fields: Vec<Field<'static>>) -> Record {
        Record { fields }
    }

    /// The evaluator's fields, taken out.
    #[doc(hidden)]
    pub fn into_fields(self) -> Vec<Field<'static>> {
        self.fields
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
        Ok(Record { fields })
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

/// Builds a record from a JSON object (key order kept).
pub fn from_json(json: &Json) -> std::result::Result<Record, String> {
    let Json::Object(map) = json else {
        return Err("a record must be a JSON object".to_string());
    };
    Ok(Record { fields: map.iter().map(|(k, v)| Field::new(Cow::Owned(k.clone()), value_from_json(v))).collect() })
}

/// Parses one JSON text into a record, with the mapping of [`from_json`]
/// but straight into fields, without an intermediate `serde_json::Value`.
pub fn from_json_str(text: &str) -> std::result::Result<Record, String> {
    if !text.trim_start().starts_with('{') {
        // Not an object: say whether it is JSON at all, as `from_json` would.
        let json: Json = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
        return from_json(&json);
    }
    // A read through `Record`'s own Deserialize may have left a note.
    big::forget();
    let TopLevel::<false>(fields) = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    if big::seen() {
        // An integer past u64 came as a float: read the text again, with
        // every number's literal at hand, to keep its digits.
        let TopLevel::<true>(fields) =
            big::exact(text, || serde_json::from_str(text)).map_err(|e| format!("invalid JSON: {e}"))?;
        return Ok(Record { fields });
    }
    Ok(Record { fields })
}

/// Integers past u64 in JSON text. serde_json reads them as floats, with
/// their digits lost, so a record that holds one is read twice: once as
/// usual, which notes that a float could have been such an integer, and
/// once more with the literals of the text's numbers, in order, at hand;
/// serde visits numbers in the order they stand in the text, so the n-th
/// visit is the n-th literal. The usual read (`JsonValue<false>`) only
/// looks at floats; the exact one (`JsonValue<true>`) takes a literal per
/// number.
mod big {
    use std::cell::{Cell, RefCell};
    use std::collections::VecDeque;

    use super::{Cow, LangValue};

    thread_local! {
        /// A float that may have been an integer past u64 was read.
        static SEEN: Cell<bool> = const { Cell::new(false) };
        /// While reading exactly: each number literal still to come, as
        /// its canonical digits when it is an integer, else `None`.
        static LITERALS: RefCell<Option<VecDeque<Option<String>>>> = const { RefCell::new(None) };
    }

    /// Whether the last read saw a float that may have been a big integer
    /// (and forgets it).
    pub(super) fn seen() -> bool {
        SEEN.with(|s| s.replace(false))
    }

    /// Forgets a float noted by an earlier read.
    pub(super) fn forget() {
        SEEN.with(|s| s.set(false));
    }

    /// Reads with the text's number literals at hand.
    pub(super) fn exact<T>(text: &str, read: impl FnOnce() -> T) -> T {
        LITERALS.with(|l| *l.borrow_mut() = Some(literals(text)));
        let out = read();
        LITERALS.with(|l| l.borrow_mut().take());
        out
    }

    /// The next literal while reading exactly.
    fn next() -> Option<Option<String>> {
        LITERALS.with(|l| l.borrow_mut().as_mut().and_then(VecDeque::pop_front))
    }

    /// A float of the usual read: notes one that may have been an integer
    /// past u64.
    pub(super) fn float(f: f64) -> LangValue<'static> {
        if f.fract() == 0.0 && f.abs() >= 9.2e18 {
            SEEN.with(|s| s.set(true));
        }
        LangValue::Float(f)
    }

    /// An integer of the exact read: its literal is consumed to keep the
    /// count.
    pub(super) fn exact_integer(v: LangValue<'static>) -> LangValue<'static> {
        let _ = next();
        v
    }

    /// A float of the exact read: an integer literal gives its digits.
    pub(super) fn exact_float(f: f64) -> LangValue<'static> {
        match next() {
            // serde_json reads an integer as a float past 64 bits, and `-0`.
            Some(Some(digits)) if digits.parse::<i64>().is_err() => LangValue::BigInt(Cow::Owned(digits)),
            _ => LangValue::Float(f),
        }
    }

    /// Every number literal outside strings, in order: its canonical
    /// digits when it is an integer, `None` when it has a fraction or an
    /// exponent.
    fn literals(text: &str) -> VecDeque<Option<String>> {
        let b = text.as_bytes();
        let (mut out, mut i) = (VecDeque::new(), 0);
        while i < b.len() {
            match b[i] {
                b'"' => {
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                b'-' | b'0'..=b'9' => {
                    let start = i;
                    while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                        i += 1;
                    }
                    let lit = &text[start..i];
                    out.push_back(if lit.bytes().any(|c| matches!(c, b'.' | b'e' | b'E')) {
                        None
                    } else {
                        omlet_lang::value::parse_bigint(lit)
                    });
                }
                _ => i += 1,
            }
        }
        out
    }
}

/// Past this many fields, repeated keys are found through an index.
const INDEX_FROM: usize = 32;

/// A record read directly by serde: members in order; a repeated key keeps
/// its first place and its last value, as an order-preserving JSON map does.
/// `EXACT`: the numbers are read with their literals at hand (`big`).
struct TopLevel<const EXACT: bool>(Vec<Field<'static>>);

impl<'de, const EXACT: bool> serde::Deserialize<'de> for TopLevel<EXACT> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<const E: bool>;
        impl<'de, const E: bool> serde::de::Visitor<'de> for V<E> {
            type Value = TopLevel<E>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<TopLevel<E>, A::Error> {
                let mut fields: Vec<Field<'static>> = Vec::with_capacity(map.size_hint().unwrap_or(8));
                // Repeated keys are found by a scan while the record is small,
                // and through an index past that, so a wide record is read in
                // linear time (200,000 fields used to take minutes).
                let mut index: Option<std::collections::HashMap<String, usize>> = None;
                while let Some(key) = map.next_key_seed(Key)? {
                    let JsonValue::<E>(value) = map.next_value()?;
                    if index.is_none() && fields.len() >= INDEX_FROM {
                        index = Some(fields.iter().enumerate().map(|(i, f)| (f.name.to_string(), i)).collect());
                    }
                    let at = match &mut index {
                        Some(ix) => match ix.get(key.as_ref()) {
                            Some(&i) => Some(i),
                            None => {
                                ix.insert(key.to_string(), fields.len());
                                None
                            }
                        },
                        None => fields.iter().position(|f| f.name == key),
                    };
                    match at {
                        Some(i) => fields[i].value = value,
                        None => fields.push(Field::new(key, value)),
                    }
                }
                Ok(TopLevel(fields))
            }
        }
        d.deserialize_map(V::<EXACT>)
    }
}

/// A record's field name, read directly by serde: the shared copy of the
/// name (`wire::names`, bounded) when there is one, so that the few names
/// every record repeats are not allocated again for each record.
struct Key;

impl<'de> serde::de::DeserializeSeed<'de> for Key {
    type Value = Cow<'static, str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Cow<'static, str>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<Self::Value, E> {
                Ok(crate::wire::names::cow(s))
            }
        }
        d.deserialize_str(V)
    }
}

/// One JSON value as an OML value, read directly by serde; `EXACT` as for
/// [`TopLevel`].
struct JsonValue<const EXACT: bool>(LangValue<'static>);

impl<'de, const EXACT: bool> serde::Deserialize<'de> for JsonValue<EXACT> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<const E: bool>;
        impl<'de, const E: bool> serde::de::Visitor<'de> for V<E> {
            type Value = JsonValue<E>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<Er>(self) -> std::result::Result<JsonValue<E>, Er> {
                Ok(JsonValue(LangValue::Null))
            }
            fn visit_bool<Er>(self, b: bool) -> std::result::Result<JsonValue<E>, Er> {
                Ok(JsonValue(LangValue::Bool(b)))
            }
            fn visit_i64<Er>(self, i: i64) -> std::result::Result<JsonValue<E>, Er> {
                let v = LangValue::Digit(i);
                Ok(JsonValue(if E { big::exact_integer(v) } else { v }))
            }
            fn visit_u64<Er>(self, u: u64) -> std::result::Result<JsonValue<E>, Er> {
                let v = i64::try_from(u).map(LangValue::Digit).unwrap_or_else(|_| LangValue::BigInt(Cow::Owned(u.to_string())));
                Ok(JsonValue(if E { big::exact_integer(v) } else { v }))
            }
            fn visit_f64<Er>(self, f: f64) -> std::result::Result<JsonValue<E>, Er> {
                Ok(JsonValue(if E { big::exact_float(f) } else { big::float(f) }))
            }
            fn visit_str<Er>(self, s: &str) -> std::result::Result<JsonValue<E>, Er> {
                Ok(JsonValue(LangValue::Chars(Cow::Owned(s.to_string()))))
            }
            fn visit_string<Er>(self, s: String) -> std::result::Result<JsonValue<E>, Er> {
                Ok(JsonValue(LangValue::Chars(Cow::Owned(s))))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<JsonValue<E>, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(4));
                while let Some(JsonValue::<E>(v)) = seq.next_element()? {
                    items.push(Field::new(Cow::Borrowed(""), v));
                }
                Ok(JsonValue(LangValue::Array(Box::new(items))))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<JsonValue<E>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(key) = map.next_key::<String>()? {
                    let JsonValue::<E>(v) = map.next_value()?;
                    members.push(Field::new(Cow::Owned(key), v));
                }
                // Sorted once (n log n), not one insertion per member.
                Ok(JsonValue(LangValue::Obj(Box::new(obj_from(members)))))
            }
        }
        d.deserialize_any(V::<EXACT>)
    }
}

/// One JSON value as an OML value (the mapping of [`from_json`]).
pub fn value_from_json(v: &Json) -> LangValue<'static> {
    match v {
        Json::Null => LangValue::Null,
        Json::Bool(b) => LangValue::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => LangValue::Digit(i),
            (None, Some(u)) => LangValue::BigInt(Cow::Owned(u.to_string())),
            // Past u64 a `serde_json::Value` has only the float left.
            _ => LangValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => LangValue::Chars(Cow::Owned(s.clone())),
        Json::Array(items) => {
            LangValue::Array(Box::new(items.iter().map(|i| Field::new(Cow::Borrowed(""), value_from_json(i))).collect()))
        }
        Json::Object(m) => {
            let members = m.iter().map(|(k, v)| Field::new(Cow::Owned(k.clone()), value_from_json(v))).collect();
            LangValue::Obj(Box::new(obj_from(members)))
        }
    }
}

/// Renders a record as one line of JSON (spec §11).
pub fn fields_json(record: &[Field<'_>]) -> String {
    let mut out = String::with_capacity(64 + record.len() * 16);
    write_fields_json(record, &mut out);
    out
}

/// [`fields_json`], appended to `out`.
fn write_fields_json(record: &[Field<'_>], out: &mut String) {
    out.push('{');
    let mut first = true;
    for f in record {
        if matches!(f.value, LangValue::Ignore) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        out.push('"');
        omlet_lang::pipes::json_escape_into(&f.name, out);
        out.push_str("\":");
        omlet_lang::pipes::write_json(&f.value, out, false);
    }
    out.push('}');
}

/// [`Record::to_json`], as a function (omlet's tests and tools).
pub fn to_json_string(record: &Record) -> String {
    record.to_json()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_past_64_bits_keep_their_digits() {
        let text = r#"{"s":"q\"1e99 \\","a":18446744073709551616,"b":-9223372036854775809,"c":[1,2.5,123456789012345678901234567890],"d":1e20,"e":"99999999999999999999","u":18446744073709551615,"z":-0}"#;
        let rec = from_json_str(text).unwrap();
        assert_eq!(
            rec.to_json(),
            r#"{"s":"q\"1e99 \\","a":18446744073709551616,"b":-9223372036854775809,"c":[1,2.5,123456789012345678901234567890],"d":100000000000000000000.0,"e":"99999999999999999999","u":18446744073709551615,"z":-0.0}"#
        );
        assert_eq!(rec.get("a"), Some(Value::BigInt("18446744073709551616".into())));
        assert_eq!(rec.get("u"), Some(Value::BigInt("18446744073709551615".into())));
        // The next record, without one, is read the usual way.
        assert_eq!(from_json_str(r#"{"f":1e300}"#).unwrap().get("f"), Some(Value::Float(1e300)));
    }

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
    fn values_round_trip_through_records_and_serde() {
        let text = r#"{"s":"x","d":-3,"f":2.5,"b":true,"n":null,"a":[1,"two",[3.0]],"o":{"z":1,"a":{"k":"v"}}}"#;
        let r = Record::from_json(text).unwrap();
        assert_eq!(r.to_json(), r#"{"s":"x","d":-3,"f":2.5,"b":true,"n":null,"a":[1,"two",[3.0]],"o":{"a":{"k":"v"},"z":1}}"#);
        // serde's form is the same JSON, and reads back to the same record.
        let via_serde = serde_json::to_string(&r).unwrap();
        assert_eq!(via_serde, r.to_json());
        let back: Record = serde_json::from_str(&via_serde).unwrap();
        assert_eq!(back, r);
        // The JSON value is the JSON text, parsed.
        assert_eq!(r.to_json_value(), serde_json::from_str::<Json>(&r.to_json()).unwrap());
        // Typed values out, and in again.
        assert_eq!(r.get("d"), Some(Value::Digit(-3)));
        assert_eq!(r.get("a"), Some(Value::Array(vec![1.into(), "two".into(), Value::Array(vec![3.0.into()])])));
        let Some(Value::Object(o)) = r.get("o") else { panic!("o is an object") };
        assert_eq!(o.keys().collect::<Vec<_>>(), ["a", "z"]);
        let rebuilt: Record = r.iter().map(|(n, v)| (n.to_string(), v)).collect();
        assert_eq!(rebuilt.to_json(), r.to_json());
        // IPs and times render as the spec's strings.
        let mut t = Record::new();
        t.insert("ip", std::net::Ipv4Addr::new(10, 0, 0, 7));
        t.insert("at", Value::Time(86_400_000_000_000));
        assert_eq!(t.to_json(), r#"{"ip":"10.0.0.7","at":"1970-01-02 00:00:00"}"#);
        assert_eq!(serde_json::to_string(&t).unwrap(), t.to_json());
        // insert replaces in place; remove takes out.
        assert_eq!(t.insert("ip", "gone"), Some(Value::Ip("10.0.0.7".parse().unwrap())));
        assert_eq!(t.names().collect::<Vec<_>>(), ["ip", "at"]);
        assert_eq!(t.remove("ip"), Some(Value::Chars("gone".into())));
        assert_eq!(t.len(), 1);
        // Ignored fields are kept but not shown.
        let hidden = Record::from_fields(vec![
            Field::new(Cow::Borrowed("__x"), LangValue::Ignore),
            Field::new(Cow::Borrowed("y"), LangValue::Digit(1)),
        ]);
        assert_eq!((hidden.len(), hidden.get("__x"), hidden.to_json()), (1, None, r#"{"y":1}"#.to_string()));
        assert!(matches!(Record::from_json("[1]"), Err(Error::Input { .. })));
    }

    #[test]
    fn json_keys_are_shared_between_records() {
        let _table = crate::wire::names::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        crate::wire::names::reset();
        let a = from_json_str(r#"{"a_key_of_this_test":1,"a\u0062c":2}"#).unwrap();
        let b = from_json_str(r#"{"a_key_of_this_test":3}"#).unwrap();
        assert_eq!(a.names().collect::<Vec<_>>(), ["a_key_of_this_test", "abc"], "an escaped key reads unescaped");
        match (&a.fields()[0].name, &b.fields()[0].name) {
            (Cow::Borrowed(x), Cow::Borrowed(y)) => assert!(std::ptr::eq(*x, *y), "one shared copy"),
            other => panic!("a key was not shared though the table had room: {other:?}"),
        }
    }

    #[test]
    fn wide_records_with_repeated_keys_read_like_small_ones() {
        // Its 200,000 keys fill the shared table of names: not beside the tests of that table.
        let _table = crate::wire::names::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
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
        let r = r.fields;
        assert_eq!(fields_json(&r[..1]), r#"{"f0":"last"}"#);
    }
}
