//! Pipe functions (spec §9): [`apply`] runs one over a value, and the
//! catalogue (`catalogue`) names and reads them; the SQL helper functions
//! that the guest folds into lookup parameters (spec §8.11.4) are in
//! `helpers`, and the text codecs both use in `codec`.
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

pub(crate) mod catalogue;
mod codec;
mod helpers;
#[cfg(test)]
mod tests;

pub(crate) use codec::dirty;
use codec::*;
pub use codec::{base64_decode, base64_encode, clean_prefix, json_escape_into, write_json, write_json_object};
pub use helpers::{cell_ipv4, helper};

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
