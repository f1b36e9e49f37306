//! Records as bytes: the frame that crosses the component boundary.
//!
//! WIT has no recursive types, and a list of WIT records is lifted and
//! lowered element by element, so records travel as one `list<u8>` per call
//! (`wit/omlet.wit`, `frame`), which the canonical ABI copies in one go. Both
//! sides of the boundary use this module: the guest, the Rust host, and (in
//! JavaScript) `examples/portable/lib/frame.mjs`.
//!
//! Layout, all integers little-endian:
//!
//! ```text
//! u32 records | u32 node-bytes | u32 text-bytes
//! u32 × records    nodes of each record (top-level fields and everything under them)
//! node-bytes       the nodes, in pre-order, one record after another
//! text-bytes       UTF-8: every field name and chars value, nodes point into it
//! ```
//!
//! A node is a tag byte, the name as a span of the text (u32 start, u32
//! length), then a payload by tag: `0` chars (span), `1` digit (i64), `2`
//! float (f64 bits), `3` bool (u8), `4` ipv4 (u32), `5` ipv6 (u64 high, u64
//! low), `6` time (i64 ns since 1970-01-01, naive), `7` null, `8` ignore (no
//! payload), `9` obj and `10` array (u32 n: the next n subtrees are its
//! members or elements), `11` bigint (span: canonical decimal digits, an
//! integer past i64; since WIT `omlet:rule@0.4.0`).

use alloc::borrow::Cow;
use alloc::vec::Vec;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::value::{Field, Value};

const CHARS: u8 = 0;
const DIGIT: u8 = 1;
const FLOAT: u8 = 2;
const BOOL: u8 = 3;
const IPV4: u8 = 4;
const IPV6: u8 = 5;
const TIME: u8 = 6;
const NULL: u8 = 7;
const IGNORE: u8 = 8;
const OBJ: u8 = 9;
const ARRAY: u8 = 10;
const BIGINT: u8 = 11;

/// Deepest nesting a frame may carry (the decoders recurse).
pub const MAX_DEPTH: u32 = 128;

/// A place in a [`Writer`]'s frame (see [`Writer::mark`]).
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    sizes: usize,
    nodes: usize,
    text: usize,
}

/// Moves every text span of `nodes` (whole nodes, as a frame holds them)
/// from `from` to `base`, checking that each pointed inside the `text_len`
/// bytes of text that start at `from`.
fn rebase(nodes: &mut [u8], from: u32, base: u32, text_len: u64) -> Result<(), FrameError> {
    let span = |nodes: &mut [u8], at: usize| -> Result<(), FrameError> {
        let b = nodes.get_mut(at..at + 8).ok_or("truncated node")?;
        let s = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let s = s.checked_sub(from).ok_or("a span points outside the frame's text")?;
        if u64::from(s) + u64::from(len) > text_len {
            return Err("a span points outside the frame's text");
        }
        let moved = s.checked_add(base).ok_or("frame too large")?;
        b[..4].copy_from_slice(&moved.to_le_bytes());
        Ok(())
    };
    let mut at = 0;
    while at < nodes.len() {
        let tag = nodes[at];
        span(nodes, at + 1)?;
        at += 9;
        at += match tag {
            CHARS | BIGINT => {
                span(nodes, at)?;
                8
            }
            DIGIT | FLOAT | TIME => 8,
            BOOL => 1,
            IPV4 | OBJ | ARRAY => 4,
            IPV6 => 16,
            NULL | IGNORE => 0,
            _ => return Err("unknown node tag"),
        };
    }
    if at == nodes.len() { Ok(()) } else { Err("truncated node") }
}

/// One record of a frame that holds several: its node count, its nodes,
/// and the part of the frame's text that they point into, which starts at
/// byte `text_from` of that text. A host that reads many records into one
/// frame hands them on by these parts (see [`join_parts`]).
#[derive(Debug, Clone, Copy)]
pub struct Part<'f> {
    pub size: u32,
    pub nodes: &'f [u8],
    pub text: &'f [u8],
    pub text_from: u32,
}

impl<'f> Part<'f> {
    /// The record of a one-record frame (a record kept as its own frame).
    pub fn of(frame: &'f [u8]) -> Result<Part<'f>, FrameError> {
        if u32_at(frame, 0)? != 1 {
            return Err("not a one-record frame");
        }
        let (nodes, text) = (u32_at(frame, 4)? as usize, u32_at(frame, 8)? as usize);
        if 16usize.checked_add(nodes).and_then(|n| n.checked_add(text)) != Some(frame.len()) {
            return Err("frame length does not match its header");
        }
        Ok(Part { size: u32_at(frame, 12)?, nodes: &frame[16..16 + nodes], text: &frame[16 + nodes..], text_from: 0 })
    }
}

/// One frame holding `parts` as its records, in order, each part's nodes
/// copied once into place with their text spans moved, in one buffer of the
/// exact size. The frames' structure is checked (spans, tags, each against
/// its part's own text), not their text's UTF-8: a reader checks that.
pub fn join_parts<'f>(parts: impl Iterator<Item = Part<'f>> + Clone) -> Result<Vec<u8>, FrameError> {
    let (mut records, mut nodes, mut text) = (0usize, 0usize, 0usize);
    for p in parts.clone() {
        records += 1;
        nodes += p.nodes.len();
        text += p.text.len();
    }
    let count = |n: usize| u32::try_from(n).map_err(|_| "frame too large");
    let mut out = Vec::with_capacity(12 + records * 4 + nodes + text);
    out.extend_from_slice(&count(records)?.to_le_bytes());
    out.extend_from_slice(&count(nodes)?.to_le_bytes());
    out.extend_from_slice(&count(text)?.to_le_bytes());
    for p in parts.clone() {
        out.extend_from_slice(&p.size.to_le_bytes());
    }
    let mut base = 0u32;
    for p in parts.clone() {
        let start = out.len();
        out.extend_from_slice(p.nodes);
        rebase(&mut out[start..], p.text_from, base, p.text.len() as u64)?;
        base = base.checked_add(count(p.text.len())?).ok_or("frame too large")?;
    }
    for p in parts {
        out.extend_from_slice(p.text);
    }
    Ok(out)
}

/// Builds a frame record by record.
#[derive(Default)]
pub struct Writer {
    sizes: Vec<u32>,
    nodes: Vec<u8>,
    text: Vec<u8>,
    count: u32,
}

impl Writer {
    /// An empty writer (for statics: it allocates nothing until written to).
    pub const fn new() -> Writer {
        Writer { sizes: Vec::new(), nodes: Vec::new(), text: Vec::new(), count: 0 }
    }

    /// A writer with room for about `records` records of `fields` fields.
    pub fn with_capacity(records: usize, fields: usize) -> Writer {
        Writer {
            sizes: Vec::with_capacity(records),
            nodes: Vec::with_capacity(records * fields * 13),
            text: Vec::with_capacity(records * fields * 12),
            count: 0,
        }
    }

    /// Appends one record.
    pub fn record(&mut self, fields: &[Field<'_>]) {
        self.count = 0;
        for f in fields {
            self.field(f);
        }
        self.end_record();
    }

    /// [`Writer::record`] of an output evaluated with
    /// [`crate::eval::Spare::writer_hides`]: a field whose name starts with
    /// `__` is written as ignored (its name kept), as
    /// [`crate::eval::evaluate_with`] would otherwise have left it.
    pub fn record_hiding(&mut self, fields: &[Field<'_>]) {
        self.count = 0;
        for f in fields {
            if f.name.starts_with("__") {
                self.head(IGNORE, &f.name);
            } else if let Value::Chars(s) = &f.value {
                // Most fields are text: written here, without the call to
                // `field` (which recurses, so stays a call), whose prologue
                // cost as much as the node.
                self.text_leaf(CHARS, &f.name, s);
            } else {
                self.field(f);
            }
        }
        self.end_record();
    }

    /// Appends one field of a record written field by field; [`Writer::end_record`]
    /// ends the record. For a writer that reads its fields as it goes (a
    /// JSON line read straight into a frame), so that they need not be
    /// collected first.
    pub fn push_field(&mut self, f: &Field<'_>) {
        self.field(f);
    }

    /// Ends the record that [`Writer::push_field`] wrote.
    pub fn end_record(&mut self) {
        self.sizes.push(self.count);
        self.count = 0;
    }

    /// Appends every record of `frame`, a frame a [`Writer`] made: its nodes
    /// copied with their text spans moved to where its text lands here. A
    /// record kept as its own frame is added to a batch this way, without
    /// being read into fields and written again. A frame that does not read
    /// (a damaged one) is refused, and this writer left as it was.
    pub fn append_frame(&mut self, frame: &[u8]) -> Result<(), FrameError> {
        let r = Reader::new(frame)?;
        let base = u32::try_from(self.text.len()).map_err(|_| "frame too large")?;
        let text_len = r.text.len() as u64;
        let mark = self.mark();
        let start = self.nodes.len();
        self.nodes.extend_from_slice(r.nodes);
        if let Err(e) = rebase(&mut self.nodes[start..], 0, base, text_len) {
            self.truncate(mark);
            return Err(e);
        }
        self.text.extend_from_slice(r.text.as_bytes());
        for i in 0..r.records() {
            self.sizes.push(r.size(i)?);
        }
        Ok(())
    }

    /// [`Writer::append_frame`] of one record that is a [`Part`] of a
    /// larger frame; the part's text must be UTF-8 (a reader checks).
    pub fn append_part(&mut self, p: Part<'_>) -> Result<(), FrameError> {
        let base = u32::try_from(self.text.len()).map_err(|_| "frame too large")?;
        let mark = self.mark();
        let start = self.nodes.len();
        self.nodes.extend_from_slice(p.nodes);
        if let Err(e) = rebase(&mut self.nodes[start..], p.text_from, base, p.text.len() as u64) {
            self.truncate(mark);
            return Err(e);
        }
        self.text.extend_from_slice(p.text);
        self.sizes.push(p.size);
        Ok(())
    }

    /// Bytes of nodes written so far (where the next record's nodes start).
    pub fn node_bytes(&self) -> usize {
        self.nodes.len()
    }

    /// Bytes of text written so far (where the next record's text starts).
    pub fn text_bytes(&self) -> usize {
        self.text.len()
    }

    /// Appends `s` to the text: the span that points at it.
    fn text_span(&mut self, s: &str) -> [u8; 8] {
        let start = self.text.len() as u32;
        crate::value::append(&mut self.text, s.as_bytes());
        let mut span = [0; 8];
        span[..4].copy_from_slice(&start.to_le_bytes());
        span[4..].copy_from_slice(&(s.len() as u32).to_le_bytes());
        span
    }

    /// Appends a node named `name`: see [`Writer::put`].
    fn node<const N: usize>(&mut self, tag: u8, name: &str, payload: [u8; N]) {
        let name = self.text_span(name);
        self.put(tag, name, payload);
    }

    /// Appends a node: its tag, its name's span, then `N` bytes of payload,
    /// in one copy of a fixed length, which the compiler writes inline (a
    /// push or a copy for each part was a capacity check and a call each).
    fn put<const N: usize>(&mut self, tag: u8, name: [u8; 8], payload: [u8; N]) {
        const { assert!(N <= 16, "a node's payload is at most 16 bytes") };
        self.count += 1;
        let mut node = [0; 25];
        node[0] = tag;
        node[1..9].copy_from_slice(&name);
        node[9..9 + N].copy_from_slice(&payload);
        self.nodes.extend_from_slice(&node[..9 + N]);
    }

    /// Appends a leaf whose value is text (`chars`, `bigint`).
    #[inline(always)]
    fn text_leaf(&mut self, tag: u8, name: &str, s: &str) {
        let name = self.text_span(name);
        let value = self.text_span(s);
        self.put(tag, name, value);
    }

    fn head(&mut self, tag: u8, name: &str) {
        self.node(tag, name, []);
    }

    fn field(&mut self, f: &Field<'_>) {
        match &f.value {
            Value::Chars(s) => self.text_leaf(CHARS, &f.name, s),
            Value::Digit(d) => self.node(DIGIT, &f.name, d.to_le_bytes()),
            Value::Float(x) => self.node(FLOAT, &f.name, x.to_bits().to_le_bytes()),
            Value::Bool(b) => self.node(BOOL, &f.name, [*b as u8]),
            Value::Ip(IpAddr::V4(a)) => self.node(IPV4, &f.name, u32::from(*a).to_le_bytes()),
            Value::Ip(IpAddr::V6(a)) => {
                let n = u128::from(*a);
                let mut payload = [0; 16];
                payload[..8].copy_from_slice(&((n >> 64) as u64).to_le_bytes());
                payload[8..].copy_from_slice(&(n as u64).to_le_bytes());
                self.node(IPV6, &f.name, payload);
            }
            Value::Time(t) => self.node(TIME, &f.name, t.to_le_bytes()),
            Value::BigInt(s) => self.text_leaf(BIGINT, &f.name, s),
            Value::Null => self.head(NULL, &f.name),
            Value::Ignore => self.head(IGNORE, &f.name),
            Value::Obj(m) | Value::Array(m) => {
                let tag = if matches!(f.value, Value::Obj(_)) { OBJ } else { ARRAY };
                self.node(tag, &f.name, (m.len() as u32).to_le_bytes());
                for c in m.iter() {
                    self.field(c);
                }
            }
        }
    }

    /// How many bytes the frame written so far takes.
    pub fn len(&self) -> usize {
        12 + self.sizes.len() * 4 + self.nodes.len() + self.text.len()
    }

    /// Whether no record has been written.
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// Where the frame ends now, to go back to with [`Writer::truncate`].
    pub fn mark(&self) -> Mark {
        Mark { sizes: self.sizes.len(), nodes: self.nodes.len(), text: self.text.len() }
    }

    /// Drops the records written since `mark`.
    pub fn truncate(&mut self, mark: Mark) {
        self.count = 0;
        self.sizes.truncate(mark.sizes);
        self.nodes.truncate(mark.nodes);
        self.text.truncate(mark.text);
    }

    /// The frame's bytes.
    pub fn finish(self) -> Vec<u8> {
        self.bytes()
    }

    /// The frame's bytes, leaving the writer empty for the next frame. A
    /// writer reused this way keeps its buffers, so it allocates only the
    /// frames it hands out; buffers a frame grew past [`KEEP_BYTES`] are let
    /// go, so that one huge frame does not hold its memory for good.
    pub fn take_frame(&mut self) -> Vec<u8> {
        let out = self.bytes();
        self.reset();
        out
    }

    /// [`Writer::take_frame`] into `out`, which is cleared first and whose
    /// buffer is reused: a caller that keeps `out` allocates no frame at all.
    pub fn take_frame_into(&mut self, out: &mut Vec<u8>) {
        out.clear();
        self.bytes_into(out);
        self.reset();
    }

    /// Empties the writer for the next frame, letting go of buffers past
    /// [`KEEP_BYTES`].
    fn reset(&mut self) {
        if self.sizes.capacity() * 4 + self.nodes.capacity() + self.text.capacity() > KEEP_BYTES {
            *self = Writer::new();
        } else {
            self.sizes.clear();
            self.nodes.clear();
            self.text.clear();
            self.count = 0;
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.bytes_into(&mut out);
        out
    }

    fn bytes_into(&self, out: &mut Vec<u8>) {
        out.reserve(12 + self.sizes.len() * 4 + self.nodes.len() + self.text.len());
        out.extend_from_slice(&(self.sizes.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.nodes.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.text.len() as u32).to_le_bytes());
        for s in &self.sizes {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend_from_slice(&self.nodes);
        out.extend_from_slice(&self.text);
    }
}

/// Most bytes of buffers a reused [`Writer`] keeps between frames (see
/// [`Writer::take_frame`]).
pub const KEEP_BYTES: usize = 1 << 20;

/// One node's value as read, text borrowed from the frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Raw<'a> {
    /// A value without members.
    Leaf(Value<'a>),
    /// An object with this many members (the next subtrees).
    Obj(u32),
    /// An array with this many elements (the next subtrees).
    Array(u32),
}

/// Reads a frame: the records' node counts, then their nodes in order.
pub struct Reader<'a> {
    sizes: &'a [u8],
    nodes: &'a [u8],
    text: &'a str,
    at: usize,
}

/// Why a frame cannot be read.
pub type FrameError = &'static str;

fn u32_at(b: &[u8], at: usize) -> Result<u32, FrameError> {
    b.get(at..at.checked_add(4).ok_or("truncated frame")?)
        .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        .ok_or("truncated frame")
}

impl<'a> Reader<'a> {
    /// Checks the frame's header and that its text is UTF-8.
    pub fn new(frame: &'a [u8]) -> Result<Reader<'a>, FrameError> {
        let records = u32_at(frame, 0)? as usize;
        let node_bytes = u32_at(frame, 4)? as usize;
        let text_bytes = u32_at(frame, 8)? as usize;
        let sizes_end = records.checked_mul(4).and_then(|n| n.checked_add(12)).ok_or("frame too large")?;
        let nodes_end = sizes_end.checked_add(node_bytes).ok_or("frame too large")?;
        let text_end = nodes_end.checked_add(text_bytes).ok_or("frame too large")?;
        if text_end != frame.len() {
            return Err("frame length does not match its header");
        }
        let text = simdutf8::basic::from_utf8(&frame[nodes_end..text_end]).map_err(|_| "frame text is not UTF-8")?;
        Ok(Reader { sizes: &frame[12..sizes_end], nodes: &frame[sizes_end..nodes_end], text, at: 0 })
    }

    /// How many records the frame holds.
    pub fn records(&self) -> usize {
        self.sizes.len() / 4
    }

    /// How many nodes record `i` has.
    pub fn size(&self, i: usize) -> Result<u32, FrameError> {
        u32_at(self.sizes, i.checked_mul(4).ok_or("record index out of range")?)
    }

    /// Whether every node has been read.
    pub fn done(&self) -> bool {
        self.at >= self.nodes.len()
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let b = self.nodes.get(self.at..self.at + N).ok_or("truncated node")?;
        self.at += N;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn span(&mut self) -> Result<&'a str, FrameError> {
        let start = u32::from_le_bytes(self.take()?) as usize;
        let len = u32::from_le_bytes(self.take()?) as usize;
        let text: &'a str = self.text;
        text.get(start..start.checked_add(len).ok_or("bad span")?).ok_or("a span points outside the frame's text")
    }

    /// The next node: its name, and its value (a container as its member
    /// count).
    pub fn node(&mut self) -> Result<(&'a str, Raw<'a>), FrameError> {
        let [tag] = self.take::<1>()?;
        let name = self.span()?;
        let raw = match tag {
            CHARS => Raw::Leaf(Value::Chars(self.span()?.into())),
            DIGIT => Raw::Leaf(Value::Digit(i64::from_le_bytes(self.take()?))),
            FLOAT => Raw::Leaf(Value::Float(f64::from_bits(u64::from_le_bytes(self.take()?)))),
            BOOL => Raw::Leaf(Value::Bool(self.take::<1>()?[0] != 0)),
            IPV4 => Raw::Leaf(Value::Ip(IpAddr::V4(Ipv4Addr::from(u32::from_le_bytes(self.take()?))))),
            IPV6 => {
                let hi = u64::from_le_bytes(self.take()?) as u128;
                let lo = u64::from_le_bytes(self.take()?) as u128;
                Raw::Leaf(Value::Ip(IpAddr::V6(Ipv6Addr::from(hi << 64 | lo))))
            }
            TIME => Raw::Leaf(Value::Time(i64::from_le_bytes(self.take()?))),
            BIGINT => {
                let digits = self.span()?;
                if !crate::value::is_canonical_bigint(digits) {
                    return Err("a bigint node that is not canonical decimal digits");
                }
                Raw::Leaf(Value::BigInt(digits.into()))
            }
            NULL => Raw::Leaf(Value::Null),
            IGNORE => Raw::Leaf(Value::Ignore),
            OBJ => Raw::Obj(u32::from_le_bytes(self.take()?)),
            ARRAY => Raw::Array(u32::from_le_bytes(self.take()?)),
            _ => return Err("unknown node tag"),
        };
        Ok((name, raw))
    }

    /// The next `count` top-level fields, borrowing their text from the
    /// frame; object members are put in name order, as OML keeps them.
    pub fn fields(&mut self, count: u32) -> Result<Vec<Field<'a>>, FrameError> {
        self.fields_in(count, Vec::new())
    }

    /// [`Reader::fields`] into `out`, whose buffer is reused (it is cleared
    /// first).
    pub fn fields_in(&mut self, count: u32, mut out: Vec<Field<'a>>) -> Result<Vec<Field<'a>>, FrameError> {
        out.clear();
        out.reserve((count as usize).min(self.nodes.len()));
        let mut read = 0u32;
        while read < count {
            // A text leaf, the commonest node, read in one go: no `Raw` and
            // no `Result` of a field passed back through the stack.
            if let Some((name, text)) = self.chars_leaf() {
                read += 1;
                out.push(Field::new(name, Value::Chars(Cow::Borrowed(text))));
                continue;
            }
            out.push(self.tree(&mut read, 0)?);
        }
        if read != count {
            return Err("a record's subtrees overrun its node count");
        }
        Ok(out)
    }

    /// The next node's name and text when it is a text leaf whose spans are
    /// sound, having read it; else `None`, having read nothing (`node`
    /// then reads it, or says what is wrong with it). The commonest node,
    /// read without passing a [`Raw`] back through memory: the host's JSON
    /// rendering of outputs takes it first too.
    #[inline(always)]
    pub fn chars_leaf(&mut self) -> Option<(&'a str, &'a str)> {
        let b: &[u8; 17] = self.nodes.get(self.at..self.at + 17)?.try_into().ok()?;
        if b[0] != CHARS {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]) as usize;
        let text: &'a str = self.text;
        let name = text.get(word(1)..word(1).checked_add(word(5))?)?;
        let value = text.get(word(9)..word(9).checked_add(word(13))?)?;
        self.at += 17;
        Some((name, value))
    }

    /// [`Reader::chars_leaf`] for an integer leaf.
    #[inline(always)]
    pub fn digit_leaf(&mut self) -> Option<(&'a str, i64)> {
        let b: &[u8; 17] = self.nodes.get(self.at..self.at + 17)?.try_into().ok()?;
        if b[0] != DIGIT {
            return None;
        }
        let start = u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as usize;
        let len = u32::from_le_bytes([b[5], b[6], b[7], b[8]]) as usize;
        let name = self.text.get(start..start.checked_add(len)?)?;
        let mut d = [0u8; 8];
        d.copy_from_slice(&b[9..17]);
        self.at += 17;
        Some((name, i64::from_le_bytes(d)))
    }

    fn tree(&mut self, read: &mut u32, depth: u32) -> Result<Field<'a>, FrameError> {
        if depth > MAX_DEPTH {
            return Err("record nested deeper than 128 levels");
        }
        let (name, raw) = self.node()?;
        *read += 1;
        let value = match raw {
            Raw::Leaf(v) => v,
            Raw::Obj(n) | Raw::Array(n) => {
                let mut members = Vec::with_capacity((n as usize).min(self.nodes.len()));
                for _ in 0..n {
                    members.push(self.tree(read, depth + 1)?);
                }
                if matches!(raw, Raw::Obj(_)) {
                    Value::Obj(crate::value::obj_from(members).into())
                } else {
                    Value::Array(members.into())
                }
            }
        };
        Ok(Field::new(name, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::borrow::Cow;
    use alloc::vec;

    fn sample() -> Vec<Field<'static>> {
        vec![
            Field::new("s", Value::Chars(Cow::Borrowed("héllo"))),
            Field::new("d", Value::Digit(-42)),
            Field::new("f", Value::Float(1.5)),
            Field::new("b", Value::Bool(true)),
            Field::new("v4", Value::Ip("10.0.0.1".parse().unwrap())),
            Field::new("v6", Value::Ip("2001:db8::1".parse().unwrap())),
            Field::new("t", Value::Time(1_700_000_000_000_000_000)),
            Field::new("n", Value::Null),
            Field::new("i", Value::Ignore),
            Field::new(
                "o",
                Value::Obj(Box::new(vec![
                    Field::new(
                        "a",
                        Value::Array(Box::new(vec![Field::new("", Value::Digit(1)), Field::new("", Value::Chars("x".into()))])),
                    ),
                    Field::new("z", Value::Null),
                ])),
            ),
            // Last, so that the slices the tests take keep their fields:
            // every tag is here, which is what keeps the three places that
            // know the payloads (writing, reading, `append_frame`'s walk)
            // in step.
            Field::new("big", Value::BigInt(Cow::Borrowed("18446744073709551616"))),
        ]
    }

    #[test]
    fn records_come_back_as_they_went() {
        let mut w = Writer::default();
        w.record(&sample());
        w.record(&[]);
        w.record(&sample()[..2]);
        let bytes = w.finish();
        let mut r = Reader::new(&bytes).unwrap();
        assert_eq!(r.records(), 3);
        assert_eq!(r.size(0).unwrap(), 15);
        let n = r.size(0).unwrap();
        assert_eq!(r.fields(n).unwrap(), sample());
        let n = r.size(1).unwrap();
        assert!(r.fields(n).unwrap().is_empty());
        let n = r.size(2).unwrap();
        assert_eq!(r.fields(n).unwrap(), sample()[..2].to_vec());
        assert!(r.done());
    }

    /// The frame of one record, from a writer of its own.
    fn fresh(fields: &[Field<'_>]) -> Vec<u8> {
        let mut w = Writer::default();
        w.record(fields);
        w.finish()
    }

    #[test]
    fn a_reused_writer_gives_each_frame_alone_and_lets_huge_buffers_go() {
        let mut w = Writer::new();
        w.record(&sample());
        assert_eq!(w.take_frame(), fresh(&sample()));
        w.record(&sample()[..2]);
        assert_eq!(w.take_frame(), fresh(&sample()[..2]), "the first frame leaked into the second");
        assert!(w.nodes.capacity() > 0, "small buffers are kept");
        let huge = [Field::new("big", Value::Chars("x".repeat(KEEP_BYTES + 1).into()))];
        w.record(&huge);
        assert_eq!(w.take_frame(), fresh(&huge));
        assert_eq!(w.text.capacity(), 0, "a huge frame's buffers are let go");
    }

    #[test]
    fn appended_frames_read_as_if_written_here() {
        let one = fresh;
        let mut direct = Writer::default();
        let mut appended = Writer::default();
        for fields in [&sample()[..], &[], &sample()[3..]] {
            direct.record(fields);
            appended.append_frame(&one(fields)).unwrap();
        }
        // Field by field, as a reader that does not collect them writes.
        for f in &sample()[..4] {
            direct.push_field(f);
            appended.push_field(f);
        }
        direct.end_record();
        appended.end_record();
        assert_eq!(appended.finish(), direct.finish());
        // A damaged frame is refused, and the writer is as it was.
        let mut w = Writer::default();
        w.record(&sample()[..2]);
        let before = w.len();
        let mut bad = one(&sample());
        let at = 12 + 4 + 1; // the first node's name span
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(w.append_frame(&bad).err(), Some("a span points outside the frame's text"));
        assert_eq!(w.len(), before);
        assert_eq!(w.finish(), one(&sample()[..2]));
    }

    #[test]
    fn joined_frames_are_the_frames_appended_one_by_one() {
        let parts = [fresh(&sample()), fresh(&[]), fresh(&sample()[3..]), fresh(&sample()[..2])];
        let mut appended = Writer::default();
        for p in &parts {
            appended.append_frame(p).unwrap();
        }
        fn of(f: &[u8]) -> Part<'_> {
            Part::of(f).unwrap()
        }
        assert_eq!(join_parts(parts.iter().map(|p| of(p))).unwrap(), appended.finish());
        assert_eq!(join_parts(core::iter::empty()).unwrap(), Writer::default().finish());
        // A damaged frame is refused: a span past its text, a wrong length,
        // a frame of several records.
        let mut bad = parts[0].clone();
        let at = 12 + 4 + 1;
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(join_parts([of(&parts[2]), of(&bad)].into_iter()).err(), Some("a span points outside the frame's text"));
        let short = &parts[0][..parts[0].len() - 1];
        assert_eq!(Part::of(short).err(), Some("frame length does not match its header"));
        let mut two = Writer::default();
        two.record(&sample()[..2]);
        two.record(&[]);
        assert_eq!(Part::of(&two.finish()).err(), Some("not a one-record frame"));
    }

    #[test]
    fn records_cut_out_of_a_frame_join_and_append_as_their_own_frames() {
        let records = [&sample()[..], &[], &sample()[3..], &sample()[..2]];
        // All of them in one frame, each record's nodes and text noted.
        let mut w = Writer::default();
        let mut ranges = Vec::new();
        for r in records {
            let (n0, t0) = (w.node_bytes(), w.text_bytes());
            w.record(r);
            ranges.push((n0..w.node_bytes(), t0..w.text_bytes()));
        }
        let node_bytes = w.node_bytes();
        let frame = w.finish();
        let nodes_at = 12 + 4 * records.len();
        let text_at = nodes_at + node_bytes;
        let part = |i: usize| {
            let (n, t) = ranges[i].clone();
            Part {
                size: u32_at(&frame, 12 + 4 * i).unwrap(),
                nodes: &frame[nodes_at + n.start..nodes_at + n.end],
                text: &frame[text_at + t.start..text_at + t.end],
                text_from: t.start as u32,
            }
        };
        // Any of them, in any order, as if each had been a frame of its own.
        for order in [&[0, 1, 2, 3][..], &[3, 0], &[2]] {
            let mut written = Writer::default();
            order.iter().for_each(|&i| written.record(records[i]));
            let want = written.finish();
            assert_eq!(join_parts(order.iter().map(|&i| part(i))).unwrap(), want);
            let mut appended = Writer::default();
            order.iter().for_each(|&i| appended.append_part(part(i)).unwrap());
            assert_eq!(appended.finish(), want);
        }
        // A span outside the part's own text is refused, even when it is
        // inside the frame's, and the writer is left as it was.
        let mut w = Writer::default();
        w.record(&sample()[..2]);
        let before = w.len();
        let mut outside = part(3);
        outside.text_from += 1;
        assert_eq!(w.append_part(outside).err(), Some("a span points outside the frame's text"));
        assert_eq!(join_parts([part(0), outside].into_iter()).err(), Some("a span points outside the frame's text"));
        assert_eq!(w.len(), before);
    }

    #[test]
    fn damaged_frames_are_refused_without_panicking() {
        let mut w = Writer::default();
        w.record(&sample());
        let good = w.finish();
        // Every truncation, and every single-byte change, fails cleanly or reads something.
        for cut in 0..good.len() {
            if let Ok(mut r) = Reader::new(&good[..cut]) {
                let _ = r.size(0).and_then(|n| r.fields(n));
            }
        }
        for i in 0..good.len() {
            for b in [0u8, 1, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[i] = b;
                let _ = Writer::default().append_frame(&bad);
                if let Ok(p) = Part::of(&bad) {
                    let _ = join_parts([Part::of(&good).unwrap(), p].into_iter());
                }
                if let Ok(mut r) = Reader::new(&bad) {
                    let _ = r.size(0).and_then(|n| r.fields(n));
                }
            }
        }
        assert_eq!(Reader::new(&good[..11]).err(), Some("truncated frame"));
        let mut long = good.clone();
        long.push(0);
        assert_eq!(Reader::new(&long).err(), Some("frame length does not match its header"));
    }

    #[test]
    fn a_wide_object_is_read_in_n_log_n() {
        // Members in reverse name order, one duplicate: reading used to
        // insert each into the sorted members (O(n²) moves, minutes).
        let n = 200_000;
        let names: Vec<String> = (0..n).map(|i| alloc::format!("m{i:06}")).collect();
        let mut members: Vec<Field<'_>> = names.iter().rev().map(|s| Field::new(s.as_str(), Value::Digit(1))).collect();
        members.push(Field::new("m000007", Value::Digit(2)));
        let mut w = Writer::default();
        w.record(&[Field::new("o", Value::Obj(Box::new(members)))]);
        let bytes = w.finish();
        let mut r = Reader::new(&bytes).unwrap();
        let size = r.size(0).unwrap();
        let fields = r.fields(size).unwrap();
        let Value::Obj(m) = &fields[0].value else { panic!("not an object") };
        assert_eq!(m.len(), n);
        assert!(m.windows(2).all(|w| w[0].name < w[1].name));
        assert_eq!(m[7].value, Value::Digit(2), "the last of a name wins");
    }

    #[test]
    fn nesting_is_bounded() {
        let mut f = Field::new("x", Value::Null);
        for _ in 0..200 {
            f = Field::new("x", Value::Array(Box::new(vec![f])));
        }
        let mut w = Writer::default();
        w.record(&[f]);
        let bytes = w.finish();
        let mut r = Reader::new(&bytes).unwrap();
        let n = r.size(0).unwrap();
        assert_eq!(r.fields(n).err(), Some("record nested deeper than 128 levels"));
    }
}
