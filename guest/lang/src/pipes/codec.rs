//! Text codecs of the pipe functions: base64, HTML and JSON escapes, and
//! values written as JSON.

use super::*;

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

pub(super) fn html_escape(s: &str) -> String {
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

pub(super) fn html_unescape(s: &str) -> String {
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
pub(super) fn needs_escape(b: u8) -> bool {
    matches!(b, b'"' | b'\\' | 0..=0x1f)
}

pub(super) fn json_unescape(s: &str) -> Option<String> {
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

pub(super) fn str_escape(s: &str) -> String {
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
pub(super) fn ip_to_biguint(v: &Value<'_>) -> Value<'static> {
    match v {
        Value::Ip(IpAddr::V4(a)) => Value::BigInt(Cow::Owned(u32::from(*a).to_string())),
        Value::Ip(IpAddr::V6(a)) => Value::BigInt(Cow::Owned(plus_2_pow_128(u128::from(*a)))),
        _ => Value::Null,
    }
}

/// The decimal digits of `n + 2^128` (past u128, so added digit by digit).
pub(super) fn plus_2_pow_128(n: u128) -> String {
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
