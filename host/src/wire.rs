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

fn text(text: &[u8], s: Span) -> Result<String, String> {
    let start = s.start as usize;
    let b = text.get(start..start + s.len as usize).ok_or("span outside the text buffer")?;
    Ok(String::from_utf8_lossy(b).into_owned())
}

fn node(t: &[u8], nodes: &[Node], i: &mut usize) -> Result<Field<'static>, String> {
    let n = nodes.get(*i).ok_or("truncated node list")?;
    *i += 1;
    let name = Cow::Owned(text(t, n.name)?);
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
