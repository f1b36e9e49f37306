//! The pipe function catalogue (spec §9) and the SQL helper functions that
//! the guest folds into parameters (spec §8.11.4).
//!
//! A pipe function never makes a value absent: on a kind it does not handle
//! it returns its input unchanged (or ignore, for `starts_with`).

use alloc::borrow::Cow;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write;
use core::net::{IpAddr, Ipv4Addr};

use crate::bytes;
use crate::cell::Cell;
use crate::ir::{Helper, PathPart, PipeFn, UrlPart, const_value};
use crate::time;
use crate::value::{Field, Value, parse_ipv4};

pub fn apply<'a>(f: &'a PipeFn, v: Value<'a>) -> Value<'a> {
    if matches!(v, Value::Ignore) {
        return match f {
            PipeFn::ToJson => Value::Chars(Cow::Borrowed("\"\"")),
            PipeFn::OnFail(text) => Value::Chars(Cow::Owned(text.clone())),
            _ => Value::Ignore,
        };
    }
    match (f, v) {
        (PipeFn::Base64Encode, Value::Chars(s)) => Value::Chars(Cow::Owned(base64_encode(s.as_bytes()))),
        (PipeFn::Base64Decode, Value::Chars(s)) => Value::Chars(Cow::Owned(match base64_decode(&s) {
            Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            None => String::new(),
        })),
        (PipeFn::Base64DecodeAs(c), Value::Chars(s)) => Value::Chars(Cow::Owned(match base64_decode(&s) {
            Some(bytes) => c.decode(&bytes),
            None => String::new(),
        })),
        (PipeFn::HtmlEscape, Value::Chars(s)) => Value::Chars(Cow::Owned(html_escape(&s))),
        (PipeFn::HtmlUnescape, Value::Chars(s)) => Value::Chars(Cow::Owned(html_unescape(&s))),
        (PipeFn::JsonEscape, Value::Chars(s)) => {
            let mut out = String::with_capacity(s.len());
            json_escape_into(&s, &mut out);
            Value::Chars(Cow::Owned(out))
        }
        (PipeFn::JsonUnescape, Value::Chars(s)) => match json_unescape(&s) {
            Some(u) => Value::Chars(Cow::Owned(u)),
            None => Value::Chars(s),
        },
        (PipeFn::StrEscape, Value::Chars(s)) => Value::Chars(Cow::Owned(str_escape(&s))),
        (PipeFn::ToTs { zone_hours, unit }, Value::Time(t)) => Value::Digit(time::to_timestamp(t, *zone_hours, *unit)),
        (PipeFn::Nth(i), Value::Array(items)) => match usize::try_from(*i).ok().filter(|i| *i < items.len()) {
            Some(i) => items.into_iter().nth(i).map(|f| f.value).unwrap_or(Value::Null),
            None => Value::Array(items),
        },
        (PipeFn::Get(path), Value::Obj(m)) => get_path(Value::Obj(m), path),
        (PipeFn::Path(part), Value::Chars(s)) => path_part(s, *part),
        (PipeFn::Url(part), Value::Chars(s)) => url_part(s, *part),
        // Delta §7: IPv6 and text that is no IPv4 address give null.
        (PipeFn::Ip4ToInt, Value::Ip(IpAddr::V4(a))) => Value::Digit(u32::from(a) as i64),
        (PipeFn::Ip4ToInt, Value::Ip(IpAddr::V6(_))) => Value::Null,
        (PipeFn::Ip4ToInt, Value::Chars(s)) => match parse_ipv4(s.trim()) {
            Some(a) => Value::Digit(i64::from(u32::from(a))),
            None => Value::Null,
        },
        (PipeFn::FromTs { zone_hours, unit }, Value::Digit(d)) => match time::from_timestamp(d, *zone_hours, *unit) {
            Some(t) => Value::Time(t),
            None => Value::Digit(d),
        },
        (PipeFn::OnFail(text), Value::Ignore | Value::Null) => Value::Chars(Cow::Owned(text.clone())),
        (PipeFn::IpToBigUint, v) => ip_to_biguint(&v),
        (PipeFn::ToJson, v) => {
            let mut out = String::new();
            write_json(&v, &mut out, false);
            Value::Chars(Cow::Owned(out))
        }
        (PipeFn::ToStr, v) => Value::Chars(v.raw_text()),
        (PipeFn::SkipEmpty, v) => {
            let empty = match &v {
                Value::Chars(s) => s.is_empty(),
                Value::Array(m) | Value::Obj(m) => m.is_empty(),
                Value::Digit(0) => true,
                Value::Float(f) => *f == 0.0,
                _ => false,
            };
            if empty { Value::Ignore } else { v }
        }
        (PipeFn::StartsWith(p), Value::Chars(s)) => {
            if s.starts_with(p.as_str()) {
                Value::Chars(s)
            } else {
                Value::Ignore
            }
        }
        (PipeFn::StartsWith(_), _) => Value::Ignore,
        (PipeFn::MapTo(c), _) => const_value(c),
        (PipeFn::IntranetIp, v) => intranet_ip(v, &crate::intranet::BUILTIN),
        (PipeFn::Lower, Value::Chars(s)) => Value::Chars(lower(s)),
        (PipeFn::Upper, Value::Chars(s)) => {
            Value::Chars(if s.chars().any(char::is_lowercase) { Cow::Owned(s.to_uppercase()) } else { s })
        }
        (PipeFn::Split(sep), Value::Chars(s)) => {
            let items = s.split(sep.as_str()).map(|p| crate::value::Field::new("", Value::Chars(Cow::Owned(p.to_string()))));
            Value::Array(alloc::boxed::Box::new(items.collect()))
        }
        (PipeFn::Substr { start, len }, Value::Chars(s)) => Value::Chars(substr(s, *start, *len)),
        (PipeFn::TimeParse { format, zone_hours }, v) => time_parse(format, *zone_hours, v),
        (_, v) => v,
    }
}

/// `lower`, borrowing when nothing changes (the common case for keys that
/// are already lower-case).
fn lower(s: Cow<'_, str>) -> Cow<'_, str> {
    if s.chars().any(char::is_uppercase) { Cow::Owned(s.to_lowercase()) } else { s }
}

/// `substr(start, len)` over characters: a start past the end gives the
/// empty text; a negative start counts from the end, and one before the
/// beginning starts there.
fn substr(s: Cow<'_, str>, start: i64, len: Option<u64>) -> Cow<'_, str> {
    let count = s.chars().count() as i64;
    let from = if start < 0 { (count + start).max(0) } else { start.min(count) } as usize;
    let take = len.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let begin = s.char_indices().nth(from).map_or(s.len(), |(i, _)| i);
    let end = s[begin..].char_indices().nth(take).map_or(s.len(), |(i, _)| begin + i);
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(&b[begin..end]),
        Cow::Owned(o) => Cow::Owned(o[begin..end].to_string()),
    }
}

/// `Time::parse`: text (or, for the epoch formats, a number) to a time;
/// text that does not match gives null. A time passes unchanged, and so
/// does any other kind.
fn time_parse<'a>(format: &crate::timefmt::TimeFormat, zone_hours: i64, v: Value<'a>) -> Value<'a> {
    use crate::timefmt::{self, TimeFormat};
    let zone = zone_hours.saturating_mul(3600 * time::NANOS_PER_SEC);
    let parsed = match (&v, format) {
        (Value::Chars(s), f) => timefmt::parse(f, s, zone_hours),
        (Value::Digit(d), TimeFormat::Epoch(unit)) => time::from_timestamp(*d, zone_hours, *unit),
        (Value::Float(x), TimeFormat::Epoch(crate::time::TsUnit::Seconds)) if x.is_finite() && x.abs() < 9.2e9 => {
            Some((*x * 1e9) as i64).and_then(|t| t.checked_add(zone))
        }
        (Value::Float(_), TimeFormat::Epoch(_)) => None,
        _ => return v,
    };
    parsed.map_or(Value::Null, Value::Time)
}

/// `intranet_ip` (delta §9.2): an address, or text that is one once
/// trimmed, to `LAN` or `WAN`; empty or unparsable text, null and ignore to
/// ignore; any other kind unchanged.
pub fn intranet_ip<'a>(v: Value<'a>, nets: &[crate::intranet::Net]) -> Value<'a> {
    let addr = match &v {
        Value::Ip(a) => *a,
        Value::Chars(s) => match crate::value::parse_ip(s) {
            Some(a) => a,
            None => return Value::Ignore,
        },
        Value::Null | Value::Ignore => return Value::Ignore,
        _ => return v,
    };
    Value::Chars(Cow::Borrowed(if crate::intranet::is_lan(nets, addr) { "LAN" } else { "WAN" }))
}

/// `get(a/b/c)` with the reference's skipping of missing segments (§9).
fn get_path<'a>(v: Value<'a>, path: &[String]) -> Value<'a> {
    let Value::Obj(root) = v else { return v };
    let mut cur: &Value<'a> = &Value::Null;
    let root_val = Value::Obj(root);
    let mut at: &Value<'a> = &root_val;
    let mut found_last = false;
    for (i, seg) in path.iter().enumerate() {
        let next = match at {
            Value::Obj(m) => m.iter().find(|f| f.name == seg.as_str()).map(|f| &f.value),
            _ => None,
        };
        if let Some(n) = next {
            at = n;
            if i + 1 == path.len() {
                found_last = true;
                cur = n;
            }
        }
    }
    if found_last { cur.clone() } else { at.clone() }
}

fn path_part<'a>(s: Cow<'a, str>, part: Option<PathPart>) -> Value<'a> {
    let norm: Cow<'a, str> = if bytes::find(s.as_bytes(), b'\\').is_some() { Cow::Owned(s.replace('\\', "/")) } else { s };
    let Some(part) = part else { return Value::Chars(norm) };
    let trimmed = norm.trim_end_matches('/');
    if trimmed.is_empty() {
        return Value::Chars(norm);
    }
    // Each part is a range of `trimmed`, a prefix of `norm`: a part of
    // borrowed text stays borrowed, with no copy per record.
    let slash = bytes::rfind(trimmed.as_bytes(), b'/');
    let range = match (part, slash) {
        (PathPart::Name, Some(i)) => i + 1..trimmed.len(),
        (PathPart::Name, None) => 0..trimmed.len(),
        // The parent of `/x` is `/` itself.
        (PathPart::Path, Some(0)) => 0..1,
        (PathPart::Path, Some(i)) => 0..i,
        (PathPart::Path, None) => 0..0,
    };
    Value::Chars(slice_of(&norm, &trimmed[range]))
}

/// The parts of an absolute URL, WHATWG-style for the common cases: slices
/// of the text parsed, so that a part of borrowed text needs no copy.
struct Url<'s> {
    host: &'s str,
    /// The host and its port as written (`host` alone when there is none).
    hostport: &'s str,
    port: Option<u16>,
    /// Empty for a URL without a path (whose path is then `/`).
    path: &'s str,
    query: Option<&'s str>,
    /// The path, query and fragment as written (`path?query#fragment`).
    tail: &'s str,
}

fn parse_url(s: &str) -> Option<Url<'_>> {
    let s = s.trim();
    let colon = s.find(':')?;
    let scheme = &s[..colon];
    if scheme.is_empty()
        || !scheme.as_bytes()[0].is_ascii_alphabetic()
        || !scheme.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'))
    {
        return None;
    }
    let rest = s[colon + 1..].strip_prefix("//")?;
    // Where the authority ends (the first `/`, `?` or `#`), and its last
    // `@` and last `:` (all ASCII, so the cuts fall on character
    // boundaries), eight bytes at a time ([`bytes`]).
    let end = bytes::find3(rest.as_bytes(), b'/', b'?', b'#').unwrap_or(rest.len());
    let authority = &rest[..end];
    let (at, last_colon) = (bytes::rfind(authority.as_bytes(), b'@'), bytes::rfind(authority.as_bytes(), b':'));
    let tail = &rest[end..];
    let host_from = at.map_or(0, |i| i + 1);
    let hostport = &authority[host_from..];
    let (host, port) = if hostport.starts_with('[') {
        let close = hostport.find(']')?;
        let after = &hostport[close + 1..];
        (&hostport[..=close], after.strip_prefix(':'))
    } else {
        match last_colon.filter(|&c| c >= host_from) {
            Some(c) => (&authority[host_from..c], Some(&authority[c + 1..])),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        None | Some("") => None,
        Some(p) => Some(p.parse::<u16>().ok()?),
    };
    let is = |name: &str| scheme.eq_ignore_ascii_case(name);
    let default = if is("http") || is("ws") {
        Some(80)
    } else if is("https") || is("wss") {
        Some(443)
    } else if is("ftp") {
        Some(21)
    } else {
        None
    };
    let port = port.filter(|p| Some(*p) != default);
    // The same for the rest: the first `#`, and the first `?` before it.
    let hash = bytes::find(tail.as_bytes(), b'#').unwrap_or(tail.len());
    let before_frag = &tail[..hash];
    let (path, query) = match bytes::find(before_frag.as_bytes(), b'?') {
        Some(q) => (&before_frag[..q], Some(&before_frag[q + 1..])),
        None => (before_frag, None),
    };
    Some(Url { host, hostport, port, path, query, tail })
}

/// `part`, a slice of `s`'s text, as a value: borrowed when `s` is.
fn slice_of<'a>(s: &Cow<'a, str>, part: &str) -> Cow<'a, str> {
    if let Cow::Borrowed(b) = s {
        let at = (part.as_ptr() as usize).checked_sub(b.as_ptr() as usize);
        if let Some(x) = at.and_then(|at| b.get(at..)?.get(..part.len())).filter(|x| x.as_ptr() == part.as_ptr()) {
            return Cow::Borrowed(x);
        }
    }
    Cow::Owned(part.to_string())
}

fn url_part<'a>(s: Cow<'a, str>, part: Option<UrlPart>) -> Value<'a> {
    let Some(part) = part else { return Value::Chars(s) };
    let Some(u) = parse_url(&s) else { return Value::Chars(s) };
    // Hosts compare without case: an ASCII host in lower case already stays a slice.
    let lower = u.host.is_ascii() && !bytes::has_upper(u.host.as_bytes());
    let host = || -> Cow<'a, str> { if lower { slice_of(&s, u.host) } else { Cow::Owned(u.host.to_lowercase()) } };
    // A port written as its decimal digits (no sign, no leading zero) is
    // written as it would be formatted.
    let port_as_formatted = || {
        let digits = u.hostport.get(u.host.len()..).and_then(|r| r.strip_prefix(':')).unwrap_or("");
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && (digits.len() == 1 || !digits.starts_with('0'))
    };
    let out: Cow<'a, str> = match part {
        UrlPart::Domain => {
            let is_ip = u.host.starts_with('[') || parse_ipv4(u.host).is_some();
            if is_ip {
                return Value::Chars(s);
            }
            host()
        }
        UrlPart::Host => match u.port {
            Some(_) if lower && port_as_formatted() => slice_of(&s, u.hostport),
            Some(p) => Cow::Owned(alloc::format!("{}:{p}", host())),
            None => host(),
        },
        // `path?query#fragment` as written, the path `/` when it has none.
        UrlPart::Uri if u.path.is_empty() => Cow::Owned(alloc::format!("/{}", u.tail)),
        UrlPart::Uri => slice_of(&s, u.tail),
        UrlPart::Path if u.path.is_empty() => Cow::Borrowed("/"),
        UrlPart::Path => slice_of(&s, u.path),
        UrlPart::Params => u.query.map_or(Cow::Borrowed(""), |q| slice_of(&s, q)),
    };
    Value::Chars(out)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let bytes = s.as_bytes();
    for (ci, chunk) in bytes.chunks(4).enumerate() {
        let last = ci == bytes.len() / 4 - 1;
        let mut n = 0u32;
        let mut pad = 0;
        for (i, &c) in chunk.iter().enumerate() {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                b'=' if last && i >= 2 => {
                    pad += 1;
                    0
                }
                _ => return None,
            };
            if pad > 0 && c != b'=' {
                return None;
            }
            n = n << 6 | v as u32;
        }
        out.push((n >> 16) as u8);
        if pad < 2 {
            out.push((n >> 8) as u8);
        }
        if pad < 1 {
            out.push(n as u8);
        }
    }
    Some(out)
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            '/' => out.push_str("&#x2F;"),
            c => out.push(c),
        }
    }
    out
}

/// Named references decoded by `html_unescape`: the common HTML ones.
const ENTITIES: &[(&str, char)] = &[
    ("amp", '&'),
    ("lt", '<'),
    ("gt", '>'),
    ("quot", '"'),
    ("apos", '\''),
    ("nbsp", '\u{a0}'),
    ("copy", '©'),
    ("reg", '®'),
    ("trade", '™'),
    ("hellip", '…'),
    ("mdash", '—'),
    ("ndash", '–'),
    ("lsquo", '‘'),
    ("rsquo", '’'),
    ("ldquo", '“'),
    ("rdquo", '”'),
    ("laquo", '«'),
    ("raquo", '»'),
    ("euro", '€'),
    ("pound", '£'),
    ("yen", '¥'),
    ("cent", '¢'),
    ("sect", '§'),
    ("deg", '°'),
    ("plusmn", '±'),
    ("times", '×'),
    ("divide", '÷'),
    ("middot", '·'),
    ("para", '¶'),
    ("bull", '•'),
    ("iexcl", '¡'),
    ("iquest", '¿'),
    ("shy", '\u{ad}'),
    ("micro", 'µ'),
    ("frac12", '½'),
    ("frac14", '¼'),
    ("frac34", '¾'),
    ("sup2", '²'),
    ("sup3", '³'),
    ("acute", '´'),
    ("uml", '¨'),
    ("larr", '←'),
    ("rarr", '→'),
    ("uarr", '↑'),
    ("darr", '↓'),
    ("harr", '↔'),
    ("ne", '≠'),
    ("le", '≤'),
    ("ge", '≥'),
    ("infin", '∞'),
    ("minus", '−'),
    ("asymp", '≈'),
];

fn html_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let end = rest[1..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '#')).map(|e| e + 1);
        let (name, consumed) = match end {
            Some(e) if rest.as_bytes().get(e) == Some(&b';') => (&rest[1..e], e + 1),
            Some(e) => (&rest[1..e], e),
            None => (&rest[1..], rest.len()),
        };
        let decoded = if let Some(num) = name.strip_prefix('#') {
            let code = match num.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok(),
                None => num.parse::<u32>().ok(),
            };
            code.and_then(char::from_u32)
        } else {
            ENTITIES.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[consumed..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// JSON string-content escaping (RFC 8259).
pub fn json_escape_into(s: &str, out: &mut String) {
    // Runs of bytes that need no escape are copied whole; every byte that
    // does is ASCII, so the cuts fall on character boundaries. Most text
    // needs none: find the first byte that does eight bytes at a time.
    let bytes = s.as_bytes();
    let clean = clean_prefix(bytes);
    if clean == bytes.len() {
        out.push_str(s);
        return;
    }
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate().skip(clean) {
        let escaped = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x0c => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[from..i]);
        if escaped.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(escaped);
        }
        from = i + 1;
    }
    out.push_str(&s[from..]);
}

/// How many leading bytes of `b` need no JSON escape: none is `"`, `\\` or
/// below 0x20. Eight bytes at a time (SWAR): a byte `x` of a word is flagged
/// when `x ^ '"'`, `x ^ '\\'` or `x & 0xe0` is zero. (The same bytes end a
/// JSON string's plain run, so the host's JSONL reader finds strings with it.)
pub fn clean_prefix(b: &[u8]) -> usize {
    let mut i = 0;
    while i + 8 <= b.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        let hit = dirty(u64::from_le_bytes(w));
        if hit != 0 {
            return i + (hit.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && !needs_escape(b[i]) {
        i += 1;
    }
    i
}

/// The bytes of the word `x` (little-endian) that need a JSON escape, each
/// flagged by its high bit: a byte is flagged when `x ^ '"'`, `x ^ '\\'` or
/// `x & 0xe0` is zero there. The flag of the first such byte is exact (a
/// later one may be a borrow's), which is all [`clean_prefix`] and the
/// guest's line writer ask of it.
#[inline(always)]
pub(crate) fn dirty(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    zero(x ^ (ONES * b'"' as u64)) | zero(x ^ (ONES * b'\\' as u64)) | zero(x & (ONES * 0xe0))
}

/// Whether byte `b` needs a JSON escape: `"`, `\\` and the controls below 0x20.
fn needs_escape(b: u8) -> bool {
    matches!(b, b'"' | b'\\' | 0..=0x1f)
}

fn json_unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            '/' => out.push('/'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'u' => {
                let hex = |chars: &mut core::str::Chars<'_>| -> Option<u32> {
                    let h: String = chars.by_ref().take(4).collect();
                    if h.len() != 4 { None } else { u32::from_str_radix(&h, 16).ok() }
                };
                let hi = hex(&mut chars)?;
                let code = if (0xD800..0xDC00).contains(&hi) {
                    if chars.next()? != '\\' || chars.next()? != 'u' {
                        return None;
                    }
                    let lo = hex(&mut chars)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return None;
                    }
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else {
                    hi
                };
                out.push(char::from_u32(code)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

fn str_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            ' '..='~' => out.push(c),
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    out
}

/// `ip_to_biguint` (OML 1.25 delta §8): one integer key for both address
/// families, so that one range table holds both. An IPv4 address is its
/// 32-bit value; an IPv6 address (an IPv4-mapped one included) is its
/// 128-bit value plus 2^128, so the two never overlap. Anything else, text
/// included, gives null: text is not parsed (type the input `ip` first).
fn ip_to_biguint(v: &Value<'_>) -> Value<'static> {
    match v {
        Value::Ip(IpAddr::V4(a)) => Value::BigInt(Cow::Owned(u32::from(*a).to_string())),
        Value::Ip(IpAddr::V6(a)) => Value::BigInt(Cow::Owned(plus_2_pow_128(u128::from(*a)))),
        _ => Value::Null,
    }
}

/// The decimal digits of `n + 2^128` (past u128, so added digit by digit).
fn plus_2_pow_128(n: u128) -> String {
    const TWO_POW_128: &[u8] = b"340282366920938463463374607431768211456";
    let n = n.to_string();
    let (a, b) = (TWO_POW_128, n.as_bytes());
    let mut out = Vec::with_capacity(a.len() + 1);
    let (mut carry, mut i, mut j) = (0u8, a.len(), b.len());
    while i > 0 || j > 0 || carry > 0 {
        let x = if i > 0 { a[i - 1] - b'0' } else { 0 };
        let y = if j > 0 { b[j - 1] - b'0' } else { 0 };
        let d = x + y + carry;
        out.push(b'0' + d % 10);
        carry = d / 10;
        i = i.saturating_sub(1);
        j = j.saturating_sub(1);
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// JSON rendering of a value (spec §11); `in_array` decides how a nested
/// ignore renders (`""` in an array, `null` in an object).
pub fn write_json(v: &Value<'_>, out: &mut String, in_array: bool) {
    match v {
        Value::Chars(s) => {
            out.push('"');
            json_escape_into(s, out);
            out.push('"');
        }
        Value::Digit(d) => crate::value::push_digit(out, *d),
        // All its digits, as a JSON integer (delta §8; a consumer that reads
        // JSON numbers as doubles should compare the digit strings).
        Value::BigInt(s) => out.push_str(s),
        Value::Float(f) => {
            if f.is_nan() {
                out.push_str("null");
            } else if f.is_infinite() {
                out.push_str(if *f > 0.0 { "\"Infinity\"" } else { "\"-Infinity\"" });
            } else {
                crate::value::push_json_float(out, *f);
            }
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Ip(_) | Value::Time(_) => {
            out.push('"');
            v.write_raw(out);
            out.push('"');
        }
        Value::Null => out.push_str("null"),
        Value::Ignore => out.push_str(if in_array { "\"\"" } else { "null" }),
        Value::Array(items) => {
            out.push('[');
            for (i, f) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(&f.value, out, true);
            }
            out.push(']');
        }
        Value::Obj(members) => write_json_object(members.iter(), out),
    }
}

/// `fields` as a JSON object, each as `"name":` and [`write_json`]: an
/// object's members, and a record's shown fields (the host's
/// `Record::to_json`, the guest's JSON lines).
pub fn write_json_object<'f, 'v: 'f>(fields: impl Iterator<Item = &'f Field<'v>>, out: &mut String) {
    out.push('{');
    for (i, f) in fields.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        json_escape_into(&f.name, out);
        out.push_str("\":");
        write_json(&f.value, out, false);
    }
    out.push('}');
}

/// An IPv4 address as the `ip4_*` and `cidr4_*` helpers read it: dotted
/// text (trimmed) or an integer in range. The host's in-memory index of
/// networks reads parameters with it, to answer as the helper would.
pub fn cell_ipv4(c: &Cell) -> Option<u32> {
    match c {
        Cell::Text(s) => parse_ipv4(s.trim()).map(u32::from),
        Cell::Integer(i) => u32::try_from(*i).ok(),
        _ => None,
    }
}

fn cidr4(c: &Cell) -> Option<(u32, u32)> {
    let Cell::Text(s) = c else { return None };
    let (ip, bits) = s.trim().split_once('/')?;
    let ip = u32::from(parse_ipv4(ip)?);
    let bits: u32 = bits.parse().ok().filter(|b| *b <= 32)?;
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    Some((ip & mask, ip | !mask))
}

/// An address of either family as the 128-bit number of its IPv6 form
/// (IPv4 mapped), from text or an IPv4 integer.
fn cell_ip(c: &Cell) -> Option<u128> {
    match c {
        Cell::Text(s) => crate::value::parse_ip(s).map(crate::intranet::key),
        Cell::Integer(i) => u32::try_from(*i).ok().map(|n| crate::intranet::key(IpAddr::V4(n.into()))),
        _ => None,
    }
}

/// A network of either family, as its first and last address.
fn cidr(c: &Cell) -> Option<(u128, u128)> {
    let Cell::Text(s) = c else { return None };
    if !s.contains('/') {
        return None;
    }
    let net = crate::intranet::parse_cidr(s)?;
    Some((net.addr, net.last()))
}

fn key_text(n: u128) -> Cell {
    Cell::Text(alloc::format!("{n:032x}"))
}

/// A SQL helper over parameter values, computed in the guest (§8.11.4).
pub fn helper(h: Helper, args: &[Cell]) -> Cell {
    let arg = |i: usize| args.get(i).unwrap_or(&Cell::Null);
    match h {
        Helper::Ip4Int => Cell::Integer(cell_ipv4(arg(0)).map(i64::from).unwrap_or(0)),
        Helper::Ip4Between => match (cell_ipv4(arg(0)), cell_ipv4(arg(1)), cell_ipv4(arg(2))) {
            (Some(ip), Some(lo), Some(hi)) => Cell::Integer((lo <= ip && ip <= hi) as i64),
            _ => Cell::Integer(0),
        },
        Helper::Cidr4Min => cidr4(arg(0)).map(|(lo, _)| Cell::Integer(lo as i64)).unwrap_or(Cell::Null),
        Helper::Cidr4Max => cidr4(arg(0)).map(|(_, hi)| Cell::Integer(hi as i64)).unwrap_or(Cell::Null),
        Helper::Cidr4Contains => match (cell_ipv4(arg(0)), cidr4(arg(1))) {
            (Some(ip), Some((lo, hi))) => Cell::Integer((lo <= ip && ip <= hi) as i64),
            _ => Cell::Integer(0),
        },
        Helper::Ip4Text => match arg(0) {
            Cell::Integer(i) => match u32::try_from(*i) {
                Ok(n) => Cell::Text(Ipv4Addr::from(n).to_string()),
                Err(_) => Cell::Null,
            },
            _ => Cell::Null,
        },
        Helper::TrimQuotes => match arg(0) {
            Cell::Text(s) => {
                let b = s.as_bytes();
                if b.len() >= 2 && (b[0] == b'"' || b[0] == b'\'') && b[b.len() - 1] == b[0] {
                    Cell::Text(s[1..s.len() - 1].to_string())
                } else {
                    Cell::Text(s.clone())
                }
            }
            other => other.clone(),
        },
        Helper::IpKey => cell_ip(arg(0)).map_or(Cell::Null, key_text),
        Helper::CidrMinKey => cidr(arg(0)).map_or(Cell::Null, |(lo, _)| key_text(lo)),
        Helper::CidrMaxKey => cidr(arg(0)).map_or(Cell::Null, |(_, hi)| key_text(hi)),
        Helper::CidrContains => match (cell_ip(arg(0)), cidr(arg(1))) {
            (Some(ip), Some((lo, hi))) => Cell::Integer((lo <= ip && ip <= hi) as i64),
            _ => Cell::Integer(0),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Field;
    use alloc::boxed::Box;
    use alloc::vec;

    #[test]
    fn url_parts_of_borrowed_text_are_borrowed_where_they_can_be() {
        use UrlPart::*;
        let cases: &[(&str, UrlPart, &str, bool)] = &[
            ("https://shop.example.com:8443/cart?x=1#top", Host, "shop.example.com:8443", true),
            ("https://shop.example.com:08443/cart", Host, "shop.example.com:8443", false),
            ("https://shop.example.com:+8443/cart", Host, "shop.example.com:8443", false),
            ("https://Shop.example.com:8443/cart", Host, "shop.example.com:8443", false),
            ("http://[::1]:8080/x", Host, "[::1]:8080", true),
            ("http://u:p@h.example:0/x", Host, "h.example:0", true),
            ("https://shop.example.com:443/cart", Host, "shop.example.com", true),
            ("HTTP://Example.COM/a", Host, "example.com", false),
            ("http://example.com", Domain, "example.com", true),
            ("http://10.0.0.1:8080/x", Domain, "http://10.0.0.1:8080/x", true),
            ("http://u:p@example.com/a/b?q=1#f", Uri, "/a/b?q=1#f", true),
            ("http://example.com?q=1#f", Uri, "/?q=1#f", false),
            ("http://example.com#f?x", Params, "", true),
            ("http://example.com/p?a=1&b=2#f", Params, "a=1&b=2", true),
            ("http://example.com", Path, "/", true),
            ("  http://example.com/a/b?q  ", Path, "/a/b", true),
            ("ftp://files.example.com:21/x", Host, "files.example.com", true),
            ("not a url", Host, "not a url", true),
            // Delimiters more than once, or in each other's parts.
            ("http://a@b@c:1/x", Host, "c:1", true),
            ("http://a@b@c:1/x", Domain, "c", true),
            ("http://h:1:2/x", Host, "h:1:2", true),
            ("http://h/p#f?q", Params, "", true),
            ("http://h/p#f?q", Path, "/p", true),
            ("http://h?q1?q2#f", Params, "q1?q2", true),
            ("http://h?q1?q2#f", Path, "/", true),
            ("http://u@[::1]:8/x?y#z", Host, "[::1]:8", true),
            ("http://[::1@x]/", Host, "x]", true),
        ];
        for &(text, part, want, borrowed) in cases {
            let got = url_part(Cow::Borrowed(text), Some(part));
            assert_eq!(got, Value::Chars(Cow::Borrowed(want)), "{text} {part:?}");
            assert_eq!(url_part(Cow::Owned(text.to_string()), Some(part)), got, "{text} {part:?}");
            assert_eq!(matches!(got, Value::Chars(Cow::Borrowed(_))), borrowed, "{text} {part:?}: borrowed?");
        }
    }

    #[test]
    fn path_parts_of_borrowed_text_are_borrowed_and_the_same_as_of_owned_text() {
        let cases = [
            ("/var/log/app.log", "app.log", "/var/log"),
            ("/x", "x", "/"),
            ("x", "x", ""),
            ("a/b/", "b", "a"),
            ("/", "/", "/"),
            ("", "", ""),
            ("c:\\dir\\f.txt", "f.txt", "c:/dir"),
        ];
        for (text, name, path) in cases {
            for (part, want) in [(PathPart::Name, name), (PathPart::Path, path)] {
                let borrowed = path_part(Cow::Borrowed(text), Some(part));
                let owned = path_part(Cow::Owned(text.to_string()), Some(part));
                assert_eq!(borrowed, Value::Chars(Cow::Borrowed(want)), "{text} {part:?}");
                assert_eq!(owned, borrowed, "{text} {part:?}");
                if !text.contains('\\') {
                    assert!(matches!(borrowed, Value::Chars(Cow::Borrowed(_))), "{text} {part:?} was copied");
                }
            }
        }
    }

    #[test]
    fn base64_round_trips_and_refuses_garbage() {
        for bytes in [&b""[..], b"f", b"fo", b"foo", b"\x00\xff\x10"] {
            assert_eq!(base64_decode(&base64_encode(bytes)).as_deref(), Some(bytes));
        }
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_decode("Zm9v!"), None);
    }

    #[test]
    fn json_text_escapes_quotes_and_controls() {
        let mut out = String::new();
        json_escape_into("a\"b\\c\nd\u{1}", &mut out);
        assert_eq!(out, "a\\\"b\\\\c\\nd\\u0001");
    }

    #[test]
    fn the_clean_prefix_stops_at_the_first_byte_to_escape() {
        // Every position of every kind of byte to escape, at every offset
        // into a word, after ASCII and multi-byte text.
        let base = "héllo wörld, ∑ plain text of some length";
        assert_eq!(clean_prefix(base.as_bytes()), base.len());
        for special in ['"', '\\', '\n', '\u{0}', '\u{1f}'] {
            for at in 0..=base.len() {
                if !base.is_char_boundary(at) {
                    continue;
                }
                let text = alloc::format!("{}{special}{}", &base[..at], &base[at..]);
                assert_eq!(clean_prefix(text.as_bytes()), at, "{text:?}");
                // And the escaped text is what a byte-by-byte escape gives.
                let mut fast = String::new();
                json_escape_into(&text, &mut fast);
                let slow: String = text
                    .chars()
                    .map(|c| match c {
                        '"' => "\\\"".into(),
                        '\\' => "\\\\".into(),
                        '\n' => "\\n".into(),
                        c if (c as u32) < 0x20 => alloc::format!("\\u{:04x}", c as u32),
                        c => c.into(),
                    })
                    .collect();
                assert_eq!(fast, slow);
            }
        }
        // Every byte value at every offset of two words: the prefix ends at
        // the first byte that needs an escape, whatever the word around it.
        for b in 0..=255u8 {
            for at in 0..16 {
                let mut bytes = [b'x'; 24];
                bytes[at] = b;
                let want = if needs_escape(b) { at } else { 24 };
                assert_eq!(clean_prefix(&bytes), want, "byte {b:#04x} at {at}");
            }
        }
        assert_eq!((0..=255u8).filter(|&b| needs_escape(b)).count(), 34);
    }

    #[test]
    fn json_values_follow_the_output_rules() {
        let render = |v: &Value<'_>| {
            let mut s = String::new();
            write_json(v, &mut s, false);
            s
        };
        assert_eq!(render(&Value::Float(1.0)), "1.0");
        assert_eq!(render(&Value::Float(f64::NAN)), "null");
        assert_eq!(render(&Value::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))), "\"10.0.0.1\"");
        // An ignored element of an array renders as "", elsewhere as null.
        let arr = Value::Array(Box::new(vec![Field::new("", Value::Ignore), Field::new("", Value::Digit(2))]));
        assert_eq!(render(&arr), "[\"\",2]");
        assert_eq!(render(&Value::Ignore), "null");
    }

    #[test]
    fn pipes_pick_and_convert() {
        let arr = Value::Array(Box::new(vec![Field::new("", Value::Digit(7)), Field::new("", Value::Digit(8))]));
        assert_eq!(apply(&PipeFn::Nth(1), arr), Value::Digit(8));
        assert_eq!(apply(&PipeFn::Base64Encode, Value::Chars("foo".into())), Value::Chars("Zm9v".into()));
        assert_eq!(apply(&PipeFn::Ip4ToInt, Value::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))), Value::Digit(167_772_161));
        let big = |v| apply(&PipeFn::IpToBigUint, v);
        assert_eq!(big(Value::Ip(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)))), Value::BigInt("3405803785".into()));
        let v6 = |s: &str| Value::Ip(IpAddr::V6(s.parse().unwrap()));
        assert_eq!(big(v6("::1")), Value::BigInt("340282366920938463463374607431768211457".into()));
        assert_eq!(big(v6("::")), Value::BigInt("340282366920938463463374607431768211456".into()));
        assert_eq!(
            big(v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
            Value::BigInt("680564733841876926926749214863536422911".into())
        );
        assert_eq!(big(v6("::ffff:10.0.0.1")), Value::BigInt("340282366920938463463374888902617726977".into()));
        assert_eq!(big(Value::Chars("10.0.0.1".into())), Value::Null, "text is not parsed");
        assert_eq!(big(Value::Null), Value::Null);
        assert_eq!(big(Value::Ignore), Value::Ignore, "an ignore passes every pipe");
    }

    #[test]
    fn sql_helpers_compute_like_the_databases() {
        let t = |s: &str| Cell::Text(s.to_string());
        assert_eq!(helper(Helper::Ip4Int, &[t("10.0.0.1")]), Cell::Integer(167_772_161));
        assert_eq!(helper(Helper::Ip4Int, &[t("not an ip")]), Cell::Integer(0));
        assert_eq!(helper(Helper::Cidr4Contains, &[t("10.1.2.3"), t("10.0.0.0/8")]), Cell::Integer(1));
        assert_eq!(helper(Helper::Cidr4Contains, &[t("11.1.2.3"), t("10.0.0.0/8")]), Cell::Integer(0));
        assert_eq!(helper(Helper::TrimQuotes, &[t("'x'")]), t("x"));
        assert_eq!(helper(Helper::TrimQuotes, &[t("'x\"")]), t("'x\""));
    }

    #[test]
    fn ip_keys_order_both_families_as_text() {
        let t = |s: &str| Cell::Text(s.to_string());
        assert_eq!(helper(Helper::IpKey, &[t(" 2001:DB8::7 ")]), t("20010db8000000000000000000000007"));
        assert_eq!(helper(Helper::IpKey, &[t("10.0.0.1")]), t("00000000000000000000ffff0a000001"));
        assert_eq!(helper(Helper::IpKey, &[t("::ffff:10.0.0.1")]), helper(Helper::IpKey, &[t("10.0.0.1")]));
        assert_eq!(helper(Helper::IpKey, &[Cell::Integer(167_772_161)]), helper(Helper::IpKey, &[t("10.0.0.1")]));
        assert_eq!(helper(Helper::IpKey, &[t("x")]), Cell::Null);
        assert_eq!(helper(Helper::CidrMinKey, &[t("2001:db8::/32")]), t("20010db8000000000000000000000000"));
        assert_eq!(helper(Helper::CidrMaxKey, &[t("2001:db8::/32")]), t("20010db8ffffffffffffffffffffffff"));
        assert_eq!(helper(Helper::CidrMaxKey, &[t("10.0.0.0/8")]), t("00000000000000000000ffff0affffff"));
        assert_eq!(helper(Helper::CidrMinKey, &[t("::/0")]), t("00000000000000000000000000000000"));
        assert_eq!(helper(Helper::CidrMaxKey, &[t("2001:db8::7")]), Cell::Null, "an address is no network");
        assert_eq!(helper(Helper::CidrMaxKey, &[t("2001:db8::7/128")]), t("20010db8000000000000000000000007"), "one host");
        assert_eq!(helper(Helper::CidrMaxKey, &[t("10.0.0.7/32")]), t("00000000000000000000ffff0a000007"));
        assert_eq!(helper(Helper::CidrContains, &[t("2001:db8::7"), t("2001:db8::/32")]), Cell::Integer(1));
        assert_eq!(helper(Helper::CidrContains, &[t("2001:db9::7"), t("2001:db8::/32")]), Cell::Integer(0));
        assert_eq!(helper(Helper::CidrContains, &[t("10.1.2.3"), t("10.0.0.0/8")]), Cell::Integer(1));
        assert_eq!(helper(Helper::CidrContains, &[t("10.1.2.3"), t("bogus")]), Cell::Integer(0));
        let (a, b) = (helper(Helper::IpKey, &[t("9.255.255.255")]), helper(Helper::IpKey, &[t("10.0.0.0")]));
        assert!(matches!((a, b), (Cell::Text(a), Cell::Text(b)) if a < b), "text order is address order");
    }
}
