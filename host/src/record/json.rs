//! Records and JSON: reading a JSON object into a [`Record`] (integers past
//! 64 bits kept exactly), and writing fields back as JSON text.

use omlet_lang::value::{Field, Value as LangValue, obj_from};
use serde_json::Value as Json;
use std::borrow::Cow;

use super::Record;

/// Why a JSON text holds no record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The text is JSON, but not an object.
    #[error("a record must be a JSON object")]
    NotAnObject,
    /// The text is not JSON: serde_json's message, which says where.
    #[error("invalid JSON: {message}")]
    Invalid {
        /// What serde_json says, with the line and column.
        message: String,
        /// 1-based line of the error in the text.
        line: usize,
        /// 1-based column of the error in its line.
        column: usize,
    },
}

impl From<serde_json::Error> for JsonError {
    fn from(e: serde_json::Error) -> JsonError {
        JsonError::Invalid { message: e.to_string(), line: e.line(), column: e.column() }
    }
}

/// Builds a record from a JSON object (key order kept).
pub fn from_json(json: &Json) -> std::result::Result<Record, JsonError> {
    let Json::Object(map) = json else {
        return Err(JsonError::NotAnObject);
    };
    Ok(Record::from_fields(map.iter().map(|(k, v)| Field::new(Cow::Owned(k.clone()), value_from_json(v))).collect()))
}

/// Parses one JSON text into a record, with the mapping of [`from_json`]
/// but straight into fields, without an intermediate `serde_json::Value`.
pub fn from_json_str(text: &str) -> std::result::Result<Record, JsonError> {
    if !text.trim_start().starts_with('{') {
        // Not an object: say whether it is JSON at all, as `from_json` would.
        let json: Json = serde_json::from_str(text)?;
        return from_json(&json);
    }
    // A read through `Record`'s own Deserialize may have left a note.
    big::forget();
    let TopLevel::<false>(fields) = serde_json::from_str(text)?;
    if big::seen() {
        // An integer past u64 came as a float: read the text again, with
        // every number's literal at hand, to keep its digits.
        let TopLevel::<true>(fields) = big::exact(text, || serde_json::from_str(text))?;
        return Ok(Record::from_fields(fields));
    }
    Ok(Record::from_fields(fields))
}

/// Reads one JSON object as [`from_json_str`] does, into the same record,
/// kept as the bytes a rule is called with until its fields are asked for:
/// for records read to be evaluated and dropped (`stream::read`'s JSONL, the
/// CLI's Kafka worker), one buffer instead of one per field. Reading its
/// fields afterwards costs a second pass, so a host that reads them anyway is
/// better served by `from_json_str`. The error is `from_json_str`'s.
///
/// ```
/// let line = r#"{"status":"200","bytes":512}"#;
/// let r = omlet::record::from_json_line(line).unwrap();
/// assert_eq!(r, omlet::record::from_json_str(line).unwrap());
/// ```
pub fn from_json_line(text: &str) -> std::result::Result<Record, JsonError> {
    match frame_from_json_str(text) {
        Some(frame) => {
            Ok(Record { fields: std::sync::OnceLock::new(), frame: Some(super::Bytes::Own(frame.into_boxed_slice())) })
        }
        None => from_json_str(text),
    }
}

thread_local! {
    /// The reading thread's writer for [`frame_from_json_str`], reused line after line.
    static LINE_WRITER: std::cell::RefCell<omlet_lang::frame::Writer> = const { std::cell::RefCell::new(omlet_lang::frame::Writer::new()) };
}

/// Most top-level fields a line may have to be read straight into a frame:
/// past that, repeated keys are looked for through [`TopLevel`]'s index.
const DIRECT_FIELDS: usize = INDEX_FROM;

/// Reads one JSON object straight into a one-record frame, each field
/// written as it is read, so that no field is built as a value and freed
/// again (a JSONL line that is evaluated and dropped needs only the frame).
/// The frame is what writing [`from_json_str`]'s record gives, byte for
/// byte. `None` means "read it the usual way": for text that is not an
/// object or not JSON (whose error [`from_json_str`] words), a repeated key
/// (the first place keeps the last value there), a key with escapes, more
/// than [`DIRECT_FIELDS`] fields, or a number that may be an integer past
/// 64 bits (which needs a second read). Nested objects and arrays are read
/// as values, as before, and written whole.
pub(crate) fn frame_from_json_str(text: &str) -> Option<Vec<u8>> {
    read_frame(text, Read::Any)
}

/// Which reads [`read_frame`] may take (all of them but in the tests, which
/// hold one to the other).
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Read {
    Any,
    Flat,
    Serde,
}

/// [`frame_from_json_str`] through the reads `how` allows: [`flat::read`]
/// first, then serde's.
pub(super) fn read_frame(text: &str, how: Read) -> Option<Vec<u8>> {
    LINE_WRITER.with(|cell| {
        let mut w = cell.try_borrow_mut().ok()?;
        write_line(text, how, &mut w).then(|| w.take_frame())
    })
}

/// Writes the record of `text` into `w` through the reads `how` allows, as
/// [`read_frame`] reads it: true, the record ended, when it could; false,
/// with `w` as it was, when it could not.
pub(super) fn write_line(text: &str, how: Read, w: &mut omlet_lang::frame::Writer) -> bool {
    use serde::de::Deserializer as _;
    if !text.trim_start().starts_with('{') {
        return false;
    }
    big::forget();
    let mark = w.mark();
    if how != Read::Serde && flat::read(text, w).is_some() {
        w.end_record();
        return true;
    }
    w.truncate(mark);
    if how == Read::Flat {
        return false;
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let read = de.deserialize_map(DirectRecord(w)).and_then(|()| de.end());
    if read.is_err() || big::seen() {
        w.truncate(mark);
        return false;
    }
    w.end_record();
    true
}

/// The common line read without serde: a flat object whose keys and texts
/// have no escapes, and whose other values are integers of 64 bits, `true`,
/// `false` or `null`. Such a line is scanned once, each member written to the
/// frame as serde's visit of it would write it. Anything else (a nested
/// value, an escape, a fraction or an exponent, a number past 64 bits, `-0`,
/// a repeated key, more than [`DIRECT_FIELDS`] members, a line that is not
/// JSON) makes [`read`](flat::read) give up, and the line is read with
/// serde_json as before, which words any error. serde_json's visitor
/// machinery was most of the reading thread's time (a third of a
/// 200-byte nginx line's read); the tests hold both reads to the same
/// frames.
mod flat {
    use std::borrow::Cow;

    use omlet_lang::frame::Writer;
    use omlet_lang::value::{Field, Value as LangValue};

    use super::{DIRECT_FIELDS, repeated};

    /// Writes the members of `text` into `w`; `None` when the line is not
    /// of the simple kind (the caller then drops what was written).
    pub(super) fn read(text: &str, w: &mut Writer) -> Option<()> {
        let b = text.as_bytes();
        let mut i = space(b, 0);
        (b.get(i) == Some(&b'{')).then_some(())?;
        i = space(b, i + 1);
        let (mut keys, mut n) = ([""; DIRECT_FIELDS], 0);
        if b.get(i) == Some(&b'}') {
            i += 1;
        } else {
            loop {
                let (key, at) = string(text, i)?;
                if n >= DIRECT_FIELDS || repeated(&keys[..n], key) {
                    return None;
                }
                keys[n] = key;
                n += 1;
                i = space(b, at);
                (b.get(i) == Some(&b':')).then_some(())?;
                let (value, at) = scalar(text, space(b, i + 1))?;
                // The name is only written into the frame: borrowed, not interned.
                w.push_field(&Field::new(key, value));
                i = space(b, at);
                match b.get(i) {
                    Some(b',') => i = space(b, i + 1),
                    Some(b'}') => {
                        i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        (space(b, i) == b.len()).then_some(())
    }

    /// Past JSON's white space from `i`.
    fn space(b: &[u8], mut i: usize) -> usize {
        while matches!(b.get(i), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            i += 1;
        }
        i
    }

    /// The string at `i` when it has no escape or control character, and
    /// where it ends.
    fn string(text: &str, i: usize) -> Option<(&str, usize)> {
        let b = text.as_bytes();
        (b.get(i) == Some(&b'"')).then_some(())?;
        let end = i + 1 + crate::record::scan::clean_prefix(&b[i + 1..]);
        // The plain run ends at the closing quote, or else at an escape or
        // a control character, which serde reads.
        (b.get(end) == Some(&b'"')).then(|| (&text[i + 1..end], end + 1))
    }

    /// The value at `i`, if it is a plain string, an integer of 64 bits or a
    /// literal, and where it ends.
    fn scalar(text: &str, i: usize) -> Option<(LangValue<'_>, usize)> {
        let b = text.as_bytes();
        let literal = |word: &str, v: LangValue<'static>| text[i..].starts_with(word).then(|| (v, i + word.len()));
        match *b.get(i)? {
            b'"' => string(text, i).map(|(s, at)| (LangValue::Chars(Cow::Borrowed(s)), at)),
            b't' => literal("true", LangValue::Bool(true)),
            b'f' => literal("false", LangValue::Bool(false)),
            b'n' => literal("null", LangValue::Null),
            b'-' | b'0'..=b'9' => {
                let digits = i + usize::from(b[i] == b'-');
                let end = digits + b[digits..].iter().take_while(|c| c.is_ascii_digit()).count();
                let run = &b[digits..end];
                // No digits, a leading zero, `-0` (a float to serde), or a
                // fraction or exponent: serde's.
                if run.is_empty() || (run[0] == b'0' && (run.len() > 1 || digits > i)) {
                    return None;
                }
                if matches!(b.get(end), Some(b'.' | b'e' | b'E')) {
                    return None;
                }
                // Past 64 bits: serde's (a bigint, or a u64).
                text[i..end].parse::<i64>().ok().map(|d| (LangValue::Digit(d), end))
            }
            _ => None,
        }
    }
}

/// The top-level object of [`frame_from_json_str`]: each member written as
/// it is read.
struct DirectRecord<'w>(&'w mut omlet_lang::frame::Writer);

impl<'de> serde::de::Visitor<'de> for DirectRecord<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        use serde::de::Error as _;
        // The keys read so far, on the stack: no allocation per line.
        let (mut keys, mut n) = ([""; DIRECT_FIELDS], 0);
        // A key with escapes is not borrowed from the text: an error here,
        // so that the line is read the usual way.
        while let Some(key) = map.next_key::<&'de str>()? {
            if n >= DIRECT_FIELDS || repeated(&keys[..n], key) {
                return Err(A::Error::custom("read the usual way"));
            }
            keys[n] = key;
            n += 1;
            map.next_value_seed(DirectValue { w: &mut *self.0, name: key })?;
        }
        Ok(())
    }
}

/// Whether `key` is among `keys`. Lengths and first bytes are compared
/// before the text: keys of one length are common (`status`, `method`), and
/// a `memcmp` call for each pair was most of this check's cost.
fn repeated(keys: &[&str], key: &str) -> bool {
    let first = key.as_bytes().first();
    keys.iter().any(|k| k.len() == key.len() && k.as_bytes().first() == first && *k == key)
}

/// One member's value, written as a field of the record.
struct DirectValue<'w, 'n> {
    w: &'w mut omlet_lang::frame::Writer,
    /// Only written into the frame: borrowed from the line, not interned.
    name: &'n str,
}

impl DirectValue<'_, '_> {
    fn write(self, value: LangValue<'_>) {
        self.w.push_field(&Field::new(self.name, value));
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for DirectValue<'_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Every kind but text goes through [`JsonVisitor`], so that a value is
/// mapped as the usual read maps it; text is written borrowed from the line.
impl<'de> serde::de::Visitor<'de> for DirectValue<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<Er: serde::de::Error>(self) -> std::result::Result<(), Er> {
        self.write(JsonVisitor::<false>.visit_unit()?.0);
        Ok(())
    }
    fn visit_bool<Er: serde::de::Error>(self, b: bool) -> std::result::Result<(), Er> {
        self.write(JsonVisitor::<false>.visit_bool(b)?.0);
        Ok(())
    }
    fn visit_i64<Er: serde::de::Error>(self, i: i64) -> std::result::Result<(), Er> {
        self.write(JsonVisitor::<false>.visit_i64(i)?.0);
        Ok(())
    }
    fn visit_u64<Er: serde::de::Error>(self, u: u64) -> std::result::Result<(), Er> {
        self.write(JsonVisitor::<false>.visit_u64(u)?.0);
        Ok(())
    }
    fn visit_f64<Er: serde::de::Error>(self, f: f64) -> std::result::Result<(), Er> {
        // Notes a float that may have been a big integer (`big::float`).
        self.write(JsonVisitor::<false>.visit_f64(f)?.0);
        Ok(())
    }
    fn visit_str<Er>(self, s: &str) -> std::result::Result<(), Er> {
        self.write(LangValue::Chars(Cow::Borrowed(s)));
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> std::result::Result<(), A::Error> {
        self.write(JsonVisitor::<false>.visit_seq(seq)?.0);
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> std::result::Result<(), A::Error> {
        self.write(JsonVisitor::<false>.visit_map(map)?.0);
        Ok(())
    }
}

/// Integers past u64 in JSON text. serde_json reads them as floats, with
/// their digits lost, so a record that holds one is read twice: once as
/// usual, which notes that a float could have been such an integer, and
/// once more with the literals of the text's numbers, in order, at hand;
/// serde visits numbers in the order they stand in the text, so the n-th
/// visit is the n-th literal. The usual read (`JsonValue<false>`) only
/// looks at floats; the exact one (`JsonValue<true>`) takes a literal per
/// number.
pub(super) mod big {
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
pub(super) const INDEX_FROM: usize = 32;

/// A record read directly by serde: members in order; a repeated key keeps
/// its first place and its last value, as an order-preserving JSON map does.
/// `EXACT`: the numbers are read with their literals at hand (`big`).
pub(super) struct TopLevel<const EXACT: bool>(pub(super) Vec<Field<'static>>);

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
/// name (`record::names`, bounded) when there is one, so that the few names
/// every record repeats are not allocated again for each record.
pub(super) struct Key;

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
                Ok(super::names::cow(s))
            }
        }
        d.deserialize_str(V)
    }
}

/// One JSON value as an OML value, read directly by serde; `EXACT` as for
/// [`TopLevel`].
pub(super) struct JsonValue<const EXACT: bool>(pub(super) LangValue<'static>);

impl<'de, const EXACT: bool> serde::Deserialize<'de> for JsonValue<EXACT> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor::<EXACT>)
    }
}

/// The visitor of [`JsonValue`], which [`DirectValue`] also hands nested
/// values to.
struct JsonVisitor<const E: bool>;

impl<'de, const E: bool> serde::de::Visitor<'de> for JsonVisitor<E> {
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
pub(super) fn write_fields_json(record: &[Field<'_>], out: &mut String) {
    // An ignored field is not shown.
    omlet_lang::pipes::write_json_object(record.iter().filter(|f| !matches!(f.value, LangValue::Ignore)), out);
}

/// [`Record::to_json`], as a function (omlet's tests and tools).
pub fn to_json_string(record: &Record) -> String {
    record.to_json()
}
