//! Host records to and from the flat WIT encoding (`wit/omlet.wit`, `types`).

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use omlet_lang::value::{Field, Value};

use crate::record::Record;
use crate::runtime::{Frame, Node, Span, WRecord, WValue};
use crate::{Error, Result};

#[derive(Default)]
struct Encoder {
    text: Vec<u8>,
    nodes: Vec<Node>,
}

impl Encoder {
    fn span(&mut self, s: &str) -> Span {
        let start = self.text.len() as u32;
        self.text.extend_from_slice(s.as_bytes());
        Span { start, len: s.len() as u32 }
    }

    fn field(&mut self, f: &Field<'_>) {
        let name = self.span(&f.name);
        let value = match &f.value {
            Value::Chars(s) => WValue::Chars(self.span(s)),
            Value::Digit(d) => WValue::Digit(*d),
            Value::Float(x) => WValue::Float(*x),
            Value::Bool(b) => WValue::Boolean(*b),
            Value::Ip(IpAddr::V4(a)) => WValue::Ipv4(u32::from(*a)),
            Value::Ip(IpAddr::V6(a)) => {
                let n = u128::from(*a);
                WValue::Ipv6(((n >> 64) as u64, n as u64))
            }
            Value::Time(t) => WValue::Time(*t),
            Value::Null => WValue::Null,
            Value::Ignore => WValue::Ignore,
            Value::Obj(m) | Value::Array(m) => {
                let n = m.len() as u32;
                let v = if matches!(f.value, Value::Obj(_)) { WValue::Obj(n) } else { WValue::Array(n) };
                self.nodes.push(Node { name, value: v });
                for c in m.iter() {
                    self.field(c);
                }
                return;
            }
        };
        self.nodes.push(Node { name, value });
    }
}

pub(crate) fn encode_record(r: &Record) -> WRecord {
    let mut e = Encoder::default();
    for f in r {
        e.field(f);
    }
    WRecord { text: e.text, nodes: e.nodes }
}

pub(crate) fn encode_frame<'r>(records: impl ExactSizeIterator<Item = &'r Record>) -> Frame {
    let mut e = Encoder::default();
    let mut sizes = Vec::with_capacity(records.len());
    for r in records {
        let before = e.nodes.len();
        for f in r {
            e.field(f);
        }
        sizes.push((e.nodes.len() - before) as u32);
    }
    Frame { text: e.text, nodes: e.nodes, sizes }
}

fn bytes(text: &[u8], s: Span) -> Result<&[u8], String> {
    let start = s.start as usize;
    text.get(start..start + s.len as usize).ok_or_else(|| "span outside the text buffer".into())
}

fn text(t: &[u8], s: Span) -> Result<String, String> {
    Ok(String::from_utf8_lossy(bytes(t, s)?).into_owned())
}

/// Field names of output records, shared rather than allocated per field.
///
/// A rule writes the same few names into every record, so decoding them into
/// a fresh `String` each time was a large share of the host's allocations.
/// Names are kept for the life of the process (they must be `'static` in a
/// [`Record`]); to bound that memory, only names up to [`MAX_LEN`] bytes are
/// kept, and at most [`MAX_NAMES`] of them, after which further new names are
/// allocated per field as before. Each thread looks names up in its own
/// table first, so the shared one is locked only for a name it has not seen.
mod names {
    use std::cell::RefCell;
    use std::collections::{HashMap, HashSet};
    use std::hash::{BuildHasherDefault, Hasher};
    use std::sync::Mutex;

    pub(super) const MAX_LEN: usize = 64;
    pub(super) const MAX_NAMES: usize = 4096;

    /// FNV-1a: names are short, and a lookup per field must be cheap.
    #[derive(Default)]
    struct Fnv(u64);

    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
            for b in bytes {
                h = (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
            }
            self.0 = h;
        }
    }

    type Table = HashMap<&'static [u8], &'static str, BuildHasherDefault<Fnv>>;

    static SHARED: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

    thread_local! {
        static LOCAL: RefCell<Table> = RefCell::new(Table::default());
    }

    /// The shared copy of `name`, if it is (or can still be) kept.
    pub(super) fn get(name: &[u8]) -> Option<&'static str> {
        if name.len() > MAX_LEN {
            return None;
        }
        if let Some(hit) = LOCAL.with(|t| t.borrow().get(name).copied()) {
            return Some(hit);
        }
        let text = std::str::from_utf8(name).ok()?;
        let kept = {
            let mut shared = SHARED.lock().ok()?;
            let set = shared.get_or_insert_with(HashSet::new);
            match set.get(text) {
                Some(k) => *k,
                None if set.len() < MAX_NAMES => {
                    let k: &'static str = Box::leak(text.into());
                    set.insert(k);
                    k
                }
                None => return None,
            }
        };
        LOCAL.with(|t| t.borrow_mut().insert(kept.as_bytes(), kept));
        Some(kept)
    }
}

fn node(t: &[u8], nodes: &[Node], i: &mut usize) -> Result<Field<'static>, String> {
    let n = nodes.get(*i).ok_or("truncated node list")?;
    *i += 1;
    let name = match names::get(bytes(t, n.name)?) {
        Some(kept) => Cow::Borrowed(kept),
        None => Cow::Owned(text(t, n.name)?),
    };
    let value = match n.value {
        WValue::Chars(s) => Value::Chars(Cow::Owned(text(t, s)?)),
        WValue::Digit(d) => Value::Digit(d),
        WValue::Float(f) => Value::Float(f),
        WValue::Boolean(b) => Value::Bool(b),
        WValue::Ipv4(a) => Value::Ip(IpAddr::V4(Ipv4Addr::from(a))),
        WValue::Ipv6((hi, lo)) => Value::Ip(IpAddr::V6(Ipv6Addr::from((hi as u128) << 64 | lo as u128))),
        WValue::Time(x) => Value::Time(x),
        WValue::Null => Value::Null,
        WValue::Ignore => Value::Ignore,
        WValue::Obj(c) | WValue::Array(c) => {
            let mut m = Vec::with_capacity(c as usize);
            for _ in 0..c {
                m.push(node(t, nodes, i)?);
            }
            if matches!(n.value, WValue::Obj(_)) { Value::Obj(Box::new(m)) } else { Value::Array(Box::new(m)) }
        }
    };
    Ok(Field::new(name, value))
}

pub(crate) fn decode_record(t: &[u8], nodes: &[Node]) -> Result<Record, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < nodes.len() {
        out.push(node(t, nodes, &mut i)?);
    }
    Ok(out)
}

/// Re-assembles per-input results from a batch output frame (successes in
/// order) and its error list.
pub(crate) fn decode_batch(
    n: usize,
    frame: Frame,
    errors: impl Iterator<Item = (usize, Error)>,
) -> Result<Vec<Result<Record>>> {
    let mut errs: Vec<Option<Error>> = (0..n).map(|_| None).collect();
    for (i, e) in errors {
        if let Some(slot) = errs.get_mut(i) {
            *slot = Some(e);
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut at = 0usize;
    let mut sizes = frame.sizes.iter();
    for (index, err) in errs.into_iter().enumerate() {
        if let Some(e) = err {
            out.push(Err(e));
            continue;
        }
        let size = *sizes.next().ok_or_else(|| Error::Wasm("batch output has too few records".into()))? as usize;
        let nodes = frame.nodes.get(at..at + size).ok_or_else(|| Error::Wasm("batch output is truncated".into()))?;
        at += size;
        out.push(decode_record(&frame.text, nodes).map_err(|message| Error::Record { index, message }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_are_shared_and_bounded() {
        let a = names::get(b"client_ip").unwrap();
        let b = names::get(b"client_ip").unwrap();
        assert_eq!(a, "client_ip");
        assert!(std::ptr::eq(a, b), "the same name must come back as the same text");
        // From another thread: the same shared copy.
        let c = std::thread::spawn(|| names::get(b"client_ip").unwrap() as *const str as *const u8 as usize).join().unwrap();
        assert_eq!(c, a.as_ptr() as usize);
        assert!(names::get(&[b'x'; names::MAX_LEN + 1]).is_none(), "long names are not kept");
        assert!(names::get(&[0xff, 0xfe]).is_none(), "invalid UTF-8 is not kept");
        // Past the cap, new names are refused and decoding allocates them instead.
        for i in 0..names::MAX_NAMES {
            let _ = names::get(format!("name{i}").as_bytes());
        }
        assert!(names::get(b"one-name-too-many").is_none());
        assert_eq!(names::get(b"client_ip"), Some("client_ip"));
        let r = encode_record(&vec![Field::new(Cow::Borrowed("one-name-too-many"), Value::Digit(1))]);
        let back = decode_record(&r.text, &r.nodes).unwrap();
        assert_eq!(back[0].name, "one-name-too-many");
        assert!(matches!(back[0].name, Cow::Owned(_)));
    }
}
