//! Runtime values (spec §4): kinds, fields, the raw text form, comparison
//! and the conversion table of §7.
//!
//! Values borrow their text where they can (`Cow<'a, str>`): from the input
//! record, or from the compiled program for literals, so a rule that only
//! moves fields around allocates no strings.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::fmt::{self, Write};
use core::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};

use crate::time;

/// Text that is either borrowed (input, program) or owned (computed).
pub type Str<'a> = Cow<'a, str>;

/// One OML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Chars(Str<'a>),
    Digit(i64),
    Float(f64),
    Bool(bool),
    Ip(IpAddr),
    /// Naive date-time: nanoseconds since 1970-01-01 00:00:00 (no zone).
    Time(i64),
    /// An integer past the 64 bits of `digit`, exactly: its decimal digits,
    /// canonical (an optional `-`, no leading zeros; see [`parse_bigint`]).
    /// JSON integers past `i64` read as this kind, and the OML 1.25 pipe
    /// `ip_to_biguint` gives it (delta §8).
    BigInt(Str<'a>),
    /// Members sorted by name (byte order), names unique.
    Obj(Box<Vec<Field<'a>>>),
    Array(Box<Vec<Field<'a>>>),
    Null,
    Ignore,
}

/// A named value: a top-level field, an object member or an array element.
#[derive(Debug, Clone, PartialEq)]
pub struct Field<'a> {
    pub name: Str<'a>,
    pub value: Value<'a>,
    /// The name's slot in the program's name table ([`NO_SYM`] when the
    /// program never looks this name up, or for members and elements).
    pub sym: u32,
}

/// The `N` bytes of `s` from `at`, as a value: read once, then copied or
/// compared in registers ([`append`], [`same_bytes`]; their callers stay in
/// bounds).
#[inline(always)]
pub(crate) fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    let mut w = [0; N];
    w.copy_from_slice(&s[at..at + N]);
    w
}

/// Appends `s` to `v`. In wasm a copy of a length known only at run time
/// is a `memory.copy`, which wasmtime makes a call out of the guest's code
/// (its builtin, then libc's `memmove`): about a hundred instructions, far
/// more than the copy of a name or a short value, which most copies into
/// frames and texts are. So there, up to 16 bytes are copied as two words
/// that overlap in the middle, and only longer slices with
/// `extend_from_slice` (natively, that is always the cheaper).
#[inline]
pub fn append(v: &mut Vec<u8>, s: &[u8]) {
    if cfg!(target_arch = "wasm32") && s.len() <= 16 {
        append_short(v, s);
    } else {
        v.extend_from_slice(s);
    }
}

/// [`append`] of at most 16 bytes, without a copy of run-time length.
#[inline(always)]
fn append_short(v: &mut Vec<u8>, s: &[u8]) {
    let n = s.len();
    let at = v.len();
    if n >= 8 {
        let (head, tail) = (word::<8>(s, 0), word::<8>(s, n - 8));
        v.extend_from_slice(&head);
        v.truncate(at + n - 8);
        v.extend_from_slice(&tail);
    } else if n >= 4 {
        let (head, tail) = (word::<4>(s, 0), word::<4>(s, n - 4));
        v.extend_from_slice(&head);
        v.truncate(at + n - 4);
        v.extend_from_slice(&tail);
    } else {
        for &b in s {
            v.push(b);
        }
    }
}

/// Whether `a` and `b` are the same bytes: up to 16 bytes by two
/// overlapping loads of a word each, compared in place, and longer ones with
/// `==`. In wasm, `==` on slices is a call to `memcmp` (LLVM has no inline
/// compare there), which costs its prologue and the deadline's check; names
/// are compared like this once per input field and record.
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1 => a[0] == b[0],
        2..=3 => word::<2>(a, 0) == word::<2>(b, 0) && word::<2>(a, n - 2) == word::<2>(b, n - 2),
        4..=7 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        8..=16 => {
            u64::from_ne_bytes(word(a, 0)) == u64::from_ne_bytes(word(b, 0))
                && u64::from_ne_bytes(word(a, n - 8)) == u64::from_ne_bytes(word(b, n - 8))
        }
        _ => a == b,
    }
}

/// The slot of a name the program does not know.
pub const NO_SYM: u32 = u32::MAX;

impl<'a> Field<'a> {
    pub fn new(name: impl Into<Str<'a>>, value: Value<'a>) -> Self {
        Field { name: name.into(), value, sym: NO_SYM }
    }

    /// Whether two top-level fields have the same name.
    pub fn same_name(&self, other: &Field<'_>) -> bool {
        if self.sym != NO_SYM || other.sym != NO_SYM { self.sym == other.sym } else { self.name == other.name }
    }
}

/// The kind of a value: its runtime variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Chars,
    Digit,
    Float,
    Bool,
    Ip,
    Time,
    Obj,
    Array,
    Null,
    Ignore,
    /// Kept last: programs serialize kinds by their position.
    BigInt,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Chars => "chars",
            Kind::Digit => "digit",
            Kind::Float => "float",
            Kind::Bool => "bool",
            Kind::Ip => "ip",
            Kind::Time => "time",
            Kind::Obj => "obj",
            Kind::Array => "array",
            Kind::Null => "null",
            Kind::Ignore => "ignore",
            Kind::BigInt => "bigint",
        }
    }
}

/// A declared type: a target's, an object member's or a batch statement's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Type {
    Auto,
    Kind(Kind),
    /// A valid tag with no OML behaviour of its own (`symbol`, `http/status`, …):
    /// treated as `auto` for conversion.
    Other(String),
}

/// Type names accepted besides the core kinds (spec §4.1, EXTENDED tags).
const OTHER_TYPES: &[&str] = &[
    "symbol",
    "hex",
    "ip_net",
    "domain",
    "email",
    "url",
    "id_card",
    "mobile_phone",
    "time_iso",
    "json",
    "kv",
    "sn",
    "peek_str",
    "bin",
    "port",
];

impl Type {
    /// Parses a `type_name`; `None` for an unknown name.
    pub fn parse(name: &str) -> Option<Type> {
        let kind = match name {
            "auto" => return Some(Type::Auto),
            "chars" => Kind::Chars,
            "digit" => Kind::Digit,
            "float" => Kind::Float,
            "bool" => Kind::Bool,
            "ip" => Kind::Ip,
            "time" => Kind::Time,
            "bigint" => Kind::BigInt,
            "obj" | "object" => Kind::Obj,
            "array" => Kind::Array,
            _ if name.starts_with("array/") => Kind::Array,
            _ if OTHER_TYPES.contains(&name) || name.starts_with("time/") || name.starts_with("http/") => {
                return Some(Type::Other(name.to_string()));
            }
            _ => return None,
        };
        Some(Type::Kind(kind))
    }
}

impl<'a> Value<'a> {
    pub fn kind(&self) -> Kind {
        match self {
            Value::Chars(_) => Kind::Chars,
            Value::Digit(_) => Kind::Digit,
            Value::Float(_) => Kind::Float,
            Value::Bool(_) => Kind::Bool,
            Value::Ip(_) => Kind::Ip,
            Value::Time(_) => Kind::Time,
            Value::BigInt(_) => Kind::BigInt,
            Value::Obj(_) => Kind::Obj,
            Value::Array(_) => Kind::Array,
            Value::Null => Kind::Null,
            Value::Ignore => Kind::Ignore,
        }
    }

    pub fn chars(s: impl Into<Str<'a>>) -> Self {
        Value::Chars(s.into())
    }

    /// "Empty" for `option:[…]` lookups (spec §8.3.2).
    pub fn is_empty(&self) -> bool {
        match self {
            Value::Chars(s) => s.is_empty(),
            Value::Obj(m) | Value::Array(m) => m.is_empty(),
            Value::Null | Value::Ignore => true,
            _ => false,
        }
    }

    /// Detaches the value from whatever it borrows.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Chars(s) => Value::Chars(Cow::Owned(s.into_owned())),
            Value::Digit(d) => Value::Digit(d),
            Value::Float(f) => Value::Float(f),
            Value::Bool(b) => Value::Bool(b),
            Value::Ip(ip) => Value::Ip(ip),
            Value::Time(t) => Value::Time(t),
            Value::BigInt(s) => Value::BigInt(Cow::Owned(s.into_owned())),
            Value::Obj(m) => Value::Obj(Box::new(m.into_iter().map(Field::into_owned).collect())),
            Value::Array(m) => Value::Array(Box::new(m.into_iter().map(Field::into_owned).collect())),
            Value::Null => Value::Null,
            Value::Ignore => Value::Ignore,
        }
    }

    /// Writes the raw text form (spec §7).
    pub fn write_raw(&self, out: &mut String) {
        match self {
            Value::Chars(s) => out.push_str(s),
            Value::Digit(d) => push_digit(out, *d),
            Value::Float(f) => write_float_raw(*f, out),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Ip(ip) => push_ip(out, ip),
            Value::Time(t) => time::write_time(*t, out),
            Value::BigInt(s) => out.push_str(s),
            Value::Array(items) => {
                out.push('[');
                for (i, f) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    f.value.write_raw(out);
                }
                out.push(']');
            }
            Value::Obj(members) => {
                out.push('{');
                for (i, f) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&f.name);
                    out.push('=');
                    f.value.write_raw(out);
                }
                out.push('}');
            }
            Value::Null | Value::Ignore => {}
        }
    }

    /// The raw text form as a string, borrowing where the value is chars.
    pub fn raw_text(&self) -> Str<'a> {
        match self {
            Value::Chars(s) => s.clone(),
            other => {
                let mut out = String::new();
                other.write_raw(&mut out);
                Cow::Owned(out)
            }
        }
    }

    /// Compares two values of the same kind (spec §8.7.3); `None` when the
    /// kinds differ or the values are not ordered.
    pub fn compare(&self, other: &Value<'_>) -> Option<Ordering> {
        match (self, other) {
            (Value::Chars(a), Value::Chars(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
            (Value::Digit(a), Value::Digit(b)) => Some(a.cmp(b)),
            (Value::Float(a), Value::Float(b)) => a.partial_cmp(b),
            (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
            (Value::Time(a), Value::Time(b)) => Some(a.cmp(b)),
            (Value::BigInt(a), Value::BigInt(b)) => Some(compare_bigint(a, b)),
            (Value::Ip(a), Value::Ip(b)) => Some(compare_ip(a, b)),
            (Value::Null, Value::Null) => Some(Ordering::Equal),
            (Value::Ignore, Value::Ignore) => Some(Ordering::Equal),
            (Value::Obj(a), Value::Obj(b)) | (Value::Array(a), Value::Array(b)) => (a == b).then_some(Ordering::Equal),
            _ => None,
        }
    }

    /// Equality for match conditions: same kind and same value.
    pub fn same(&self, other: &Value<'_>) -> bool {
        self.compare(other) == Some(Ordering::Equal)
    }

    /// "The value's number" of the numeric match functions (spec §8.7.4).
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Digit(d) => Some(*d as f64),
            Value::Float(f) => Some(*f),
            Value::BigInt(s) => s.parse::<f64>().ok(),
            Value::Chars(s) => parse_float(s),
            _ => None,
        }
    }
}

impl<'a> Field<'a> {
    pub fn into_owned(self) -> Field<'static> {
        Field { name: Cow::Owned(self.name.into_owned()), value: self.value.into_owned(), sym: self.sym }
    }
}

/// Orders two canonical big integers (see [`parse_bigint`]) by value.
fn compare_bigint(a: &str, b: &str) -> Ordering {
    match (a.strip_prefix('-'), b.strip_prefix('-')) {
        (Some(a), Some(b)) => (b.len(), b).cmp(&(a.len(), a)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => (a.len(), a).cmp(&(b.len(), b)),
    }
}

/// The canonical decimal form of an integer written with an optional sign
/// and digits only: no `+`, no leading zeros, `0` for zero (never `-0`).
/// `None` for anything else.
pub fn parse_bigint(s: &str) -> Option<String> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    Some(match (digits.is_empty(), neg) {
        (true, _) => "0".to_string(),
        (false, true) => alloc::format!("-{digits}"),
        (false, false) => digits.to_string(),
    })
}

/// Whether `s` is a big integer as [`parse_bigint`] writes it.
pub fn is_canonical_bigint(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" && s.len() == 1 || !digits.starts_with('0'))
}

/// An integer as `digit` when it fits in 64 bits, else as `bigint`.
pub fn integer_value<'a>(canonical: String) -> Value<'a> {
    match canonical.parse::<i64>() {
        Ok(d) => Value::Digit(d),
        Err(_) => Value::BigInt(Cow::Owned(canonical)),
    }
}

fn compare_ip(a: &IpAddr, b: &IpAddr) -> Ordering {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => u32::from(*a).cmp(&u32::from(*b)),
        (IpAddr::V4(_), IpAddr::V6(_)) => Ordering::Less,
        (IpAddr::V6(_), IpAddr::V4(_)) => Ordering::Greater,
        (IpAddr::V6(a), IpAddr::V6(b)) => u128::from(*a).cmp(&u128::from(*b)),
    }
}

/// Shortest round-trip decimal, never in exponent form, no trailing `.0`.
pub fn write_float_raw(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "inf" } else { "-inf" });
    } else {
        let _ = write!(out, "{f}");
    }
}

/// A float as JSON writes it: always with a decimal point or exponent.
pub struct JsonFloat(pub f64);

impl fmt::Display for JsonFloat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v % 1.0 == 0.0 { write!(f, "{v:.1}") } else { write!(f, "{v}") }
    }
}

/// A finite `f` as [`JsonFloat`] writes it. ryu finds the same shortest
/// digits as core's formatting, without a `Formatter` and several times
/// faster (the float of every nginx line was a sixth of rendering it). Core
/// writes it instead where ryu would write an exponent, which `JsonFloat`
/// never does, and where the digits are more than 15: only there can two
/// shortest forms be equally near the float, and the two break such ties
/// apart (1658206780088562.25 is `…562.2` to ryu, `…562.3` to core).
pub fn push_json_float(out: &mut String, f: f64) {
    let mut b = ryu::Buffer::new();
    let text = b.format_finite(f);
    let digits = text.bytes().skip_while(|&c| c == b'-' || c == b'0' || c == b'.').filter(u8::is_ascii_digit).count();
    if digits > 15 || text.bytes().any(|c| c == b'e') {
        let _ = write!(out, "{}", JsonFloat(f));
    } else {
        out.push_str(text);
    }
}

/// Signed 64-bit decimal, optional sign, no spaces (spec §7).
pub fn parse_digit(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let digits = match b.first() {
        Some(b'+') | Some(b'-') => &b[1..],
        _ => b,
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let t = s.strip_prefix('+').unwrap_or(s);
    t.parse().ok()
}

/// Decimal float, with exponent, `inf` and `NaN` (spec §7).
pub fn parse_float(s: &str) -> Option<f64> {
    if let Some(x) = plain_decimal(s.as_bytes()) {
        return Some(x);
    }
    if s.is_empty() || s.bytes().any(|c| c.is_ascii_whitespace()) {
        return None;
    }
    s.parse::<f64>().ok()
}

/// `[-]digits[.digits]` with at most 15 digits, read without core's
/// parser: the digits as an integer (exact below 2^53) divided by an exact
/// power of ten, which IEEE division rounds correctly, so the float is the
/// one core's parser gives. Durations and sizes in logs (`0.012`) are such
/// text, and in wasm core's parser costs about 220 instructions a number.
/// `None` for anything else, which goes to core's parser.
#[inline]
fn plain_decimal(b: &[u8]) -> Option<f64> {
    const POW10: [f64; 16] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];
    let (negative, b) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    if b.is_empty() || b.len() > 16 {
        return None;
    }
    let (mut m, mut digits, mut point) = (0u64, 0usize, None);
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'0'..=b'9' => {
                m = m * 10 + u64::from(c - b'0');
                digits += 1;
            }
            // A point between digits only.
            b'.' if point.is_none() && i > 0 && i + 1 < b.len() => point = Some(i),
            _ => return None,
        }
    }
    if digits > 15 {
        return None;
    }
    let fraction = point.map_or(0, |p| b.len() - p - 1);
    let x = m as f64 / POW10[fraction];
    Some(if negative { -x } else { x })
}

/// Dotted IPv4 only (spec §7).
pub fn parse_ipv4(s: &str) -> Option<Ipv4Addr> {
    dotted_quad(s.as_bytes()).or_else(|| s.parse::<Ipv4Addr>().ok())
}

/// An address of either family in any standard notation, surrounding
/// whitespace trimmed (delta §10): what text becomes as an `ip`.
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    if let Some(a) = dotted_quad(s.as_bytes()) {
        return Some(IpAddr::V4(a));
    }
    s.trim().parse::<IpAddr>().ok()
}

/// Four decimal octets of one to three digits, none above 255 and none
/// with a leading zero, between dots: what core's parser accepts as IPv4,
/// read without it (in wasm it costs about 275 instructions an address,
/// trying one family and then the other). `None` for anything else, which
/// goes to core's parser.
#[inline]
fn dotted_quad(b: &[u8]) -> Option<Ipv4Addr> {
    if b.len() < 7 || b.len() > 15 {
        return None;
    }
    let mut octets = [0u8; 4];
    let mut i = 0;
    for (n, octet) in octets.iter_mut().enumerate() {
        if n > 0 {
            if b.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let start = i;
        let mut v = 0u32;
        while let Some(&c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            if i - start == 3 {
                return None;
            }
            v = v * 10 + u32::from(c - b'0');
            i += 1;
        }
        if i == start || (i - start > 1 && b[start] == b'0') {
            return None;
        }
        *octet = u8::try_from(v).ok()?;
    }
    (i == b.len()).then_some(Ipv4Addr::from(octets))
}

/// Applies the conversion table of spec §7 for a declared type.
pub fn convert<'a>(value: Value<'a>, ty: &Type) -> Value<'a> {
    let kind = match ty {
        Type::Auto | Type::Other(_) => return value,
        Type::Kind(k) => *k,
    };
    if value.kind() == kind {
        return value;
    }
    match (kind, value) {
        (Kind::Chars, Value::Ignore) => Value::Chars(Cow::Borrowed("")),
        (_, Value::Ignore) => Value::Ignore,
        (Kind::Chars, v) => Value::Chars(v.raw_text()),
        (Kind::Digit, Value::Chars(s)) => match parse_digit(&s) {
            Some(d) => Value::Digit(d),
            None => Value::Chars(s),
        },
        // A big integer that fits becomes a digit; one that does not stays
        // as it is, exact, as a failed conversion keeps its value.
        (Kind::Digit, Value::BigInt(s)) => match s.parse::<i64>() {
            Ok(d) => Value::Digit(d),
            Err(_) => Value::BigInt(s),
        },
        (Kind::Float, Value::BigInt(s)) => match s.parse::<f64>() {
            Ok(f) => Value::Float(f),
            Err(_) => Value::BigInt(s),
        },
        (Kind::BigInt, Value::Digit(d)) => Value::BigInt(Cow::Owned(d.to_string())),
        (Kind::BigInt, Value::Chars(s)) => match parse_bigint(&s) {
            Some(b) => Value::BigInt(Cow::Owned(b)),
            None => Value::Chars(s),
        },
        (Kind::Float, Value::Chars(s)) => match parse_float(&s) {
            Some(f) => Value::Float(f),
            None => Value::Chars(s),
        },
        (Kind::Bool, Value::Chars(s)) => match &*s {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::Chars(s),
        },
        // Delta §10: trimmed, either family; text that is no address is
        // null (it used to stay text, so an IPv6 address silently did).
        (Kind::Ip, Value::Chars(s)) => match parse_ip(&s) {
            Some(ip) => Value::Ip(ip),
            None => Value::Null,
        },
        (_, v) => v,
    }
}

/// [`convert`] of the value in `slot`, written there. The commonest
/// conversions (text to a digit, a float or an address) store their result
/// straight into the slot: in wasm a value handed back from `convert` is
/// written to the stack and copied again, and an address (a 17-byte `IpAddr`
/// one byte into the value) copied right after being written stalls the
/// copy's wide loads on the narrow stores before them.
///
/// The test for "nothing to do" is inlined into each caller: the evaluator
/// stores every output field through here, and most (untyped targets, values
/// already of their kind) need nothing, which as a call cost about fifty
/// instructions in wasm, ten times a nginx record.
#[inline(always)]
pub fn convert_in_place(slot: &mut Value<'_>, ty: &Type) {
    if let Type::Kind(kind) = ty
        && slot.kind() != *kind
    {
        convert_kind_in_place(slot, *kind, ty);
    }
}

/// [`convert_in_place`] of a value not of `kind` (`ty` is `Type::Kind(kind)`).
#[inline(never)]
fn convert_kind_in_place(slot: &mut Value<'_>, kind: Kind, ty: &Type) {
    match (kind, &*slot) {
        (Kind::Digit, Value::Chars(s)) => {
            if let Some(d) = parse_digit(s) {
                *slot = Value::Digit(d);
            }
        }
        (Kind::Float, Value::Chars(s)) => {
            if let Some(f) = parse_float(s) {
                *slot = Value::Float(f);
            }
        }
        (Kind::Ip, Value::Chars(s)) => match parse_ip(s) {
            // Rebuilt from its bits, so that the address is written into
            // the slot, not copied there from `parse_ip`'s result.
            Some(IpAddr::V4(a)) => {
                let bits = u32::from(a);
                *slot = Value::Ip(IpAddr::V4(Ipv4Addr::from(bits)));
            }
            Some(ip) => *slot = Value::Ip(ip),
            None => *slot = Value::Null,
        },
        _ => {
            let v = core::mem::replace(slot, Value::Null);
            *slot = convert(v, ty);
        }
    }
}

/// Inserts a member into a sorted object, replacing one of the same name.
pub fn obj_insert<'a>(members: &mut Vec<Field<'a>>, field: Field<'a>) {
    match members.binary_search_by(|m| m.name.as_bytes().cmp(field.name.as_bytes())) {
        Ok(i) => members[i] = field,
        Err(i) => members.insert(i, field),
    }
}

/// Makes an object of members in any order: sorted by name, and of equal
/// names the last one kept, as inserting them one by one with [`obj_insert`]
/// would, but in n·log n (inserting into the middle of a vector is linear,
/// so a 200 000-member object would take minutes).
pub fn obj_from<'a>(mut members: Vec<Field<'a>>) -> Vec<Field<'a>> {
    // A stable sort: equal names keep their order, the last written last.
    members.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    // `dedup_by` keeps the first of a run; swapping moves the later one in.
    members.dedup_by(|later, kept| {
        let same = later.name == kept.name;
        if same {
            core::mem::swap(later, kept);
        }
        same
    });
    members
}

/// `d` in decimal, as `{d}` writes it, without `core::fmt`: rendering a
/// record's integers through a `Formatter` was most of what they cost the
/// host's JSON lines.
pub fn push_digit(out: &mut String, d: i64) {
    out.push_str(itoa::Buffer::new().format(d));
}

/// `ip` as `{ip}` writes it; an IPv4 address without `core::fmt` (the usual
/// case, rendered in every line that holds one).
pub fn push_ip(out: &mut String, ip: &IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                if octet >= 100 {
                    out.push(char::from(b'0' + octet / 100));
                }
                if octet >= 10 {
                    out.push(char::from(b'0' + octet / 10 % 10));
                }
                out.push(char::from(b'0' + octet % 10));
            }
        }
        IpAddr::V6(_) => {
            let _ = write!(out, "{ip}");
        }
    }
}

#[cfg(test)]
mod tests;
