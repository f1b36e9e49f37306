//! Output records as JSON lines, written where they were evaluated.
//!
//! Why: a host that only writes its outputs out (`omlet run`, the Kafka
//! worker) used to get each record as frame nodes, which the guest wrote and
//! the host read back only to render the same JSON line
//! (`Record::to_json`). On the nginx example, writing the frame in the guest
//! and decoding and rendering it in the host took more than a fifth of a
//! record's cost, only to move it across the boundary. Written here, the
//! line crosses as one string.
//!
//! What it replaces: on that path only, [`crate::frame::Writer::record_hiding`]
//! and the host's frame-to-JSON renderer. Every other caller (the library's
//! `Record`s, traces, tests) keeps the frame.
//!
//! What it costs: this second writer must give byte for byte the line the
//! host renders from the frame. It shares the rarer leaves' rendering with it
//! ([`crate::pipes::write_json`]: IPv6 addresses, times, big integers, most
//! floats) and renders here text, integers, booleans, nulls, IPv4 addresses,
//! floats that are whole thousandths and nesting, the kinds a line is mostly
//! made of; this module's tests and the host's e2e test hold the two to the
//! same output.

use alloc::string::String;
use alloc::vec::Vec;
use core::net::IpAddr;

use crate::frame::MAX_DEPTH;
use crate::pipes::{dirty, write_json, write_json_object};
use crate::value::{Field, Value, word};

/// Renders records as JSON lines into one buffer.
///
/// Each line is first written through a [`Cursor`]: into room already made
/// (zeroed once, not pushed onto), at an index kept in a register, one
/// bounds check a write. In wasm
/// a `Vec`'s length and capacity live in linear memory, and a push reads and
/// writes them back each time: through `Vec` pushes the line costs about
/// twice as much. A line the cursor cannot finish (no room left:
/// the buffer then grows and the line starts over; a text that needs an
/// escape; a value nested deep) is written by [`Slow`], the plain writer,
/// and copied in.
#[derive(Default)]
pub struct LineWriter {
    /// The lines, then room up to its length (zeroed when made; a word
    /// written past a short text may have left bytes there).
    buf: Vec<u8>,
    /// How many bytes of `buf` are lines.
    at: usize,
    /// Where each line ends in `buf` (past its line feed).
    ends: Vec<u32>,
    /// The floats', addresses' and times' text, as `write_json` renders it.
    scratch: String,
    slow: Slow,
}

/// Why the [`Cursor`] stopped.
enum Stop {
    /// The buffer has no room for the line.
    Full,
    /// The line needs [`Slow`].
    Slow,
}

/// How deep the [`Cursor`] follows nested values; deeper ones go to [`Slow`].
const CURSOR_DEPTH: u32 = 16;

/// The least room a writer starts with or grows by.
const MIN_ROOM: usize = 4096;

impl LineWriter {
    /// A writer whose buffer starts with room for `bytes`.
    pub fn with_capacity(bytes: usize) -> LineWriter {
        LineWriter { buf: alloc::vec![0; bytes.max(MIN_ROOM)], ..LineWriter::default() }
    }

    /// Appends the JSON line (spec §11) of an output evaluated with
    /// [`crate::eval::Spare::writer_hides`], then `\n`: the text the host's
    /// `Record::to_json` gives for the record that
    /// [`crate::frame::Writer::record_hiding`] would have written. A field
    /// whose name starts with `__`, and a top-level field that is ignored,
    /// are left out.
    ///
    /// A value nested deeper than [`crate::frame::MAX_DEPTH`] is refused, as
    /// the host refuses it in a frame: nothing is written then, and the
    /// error says why.
    pub fn line_hiding(&mut self, fields: &[Field<'_>]) -> Result<(), &'static str> {
        loop {
            let mut c = Cursor { buf: &mut self.buf[self.at..], i: 0 };
            match c.line(fields, &mut self.scratch) {
                Ok(()) => {
                    self.at += c.i;
                    break;
                }
                Err(Stop::Full) => self.grow(self.buf.len() - self.at + 1),
                Err(Stop::Slow) => {
                    self.slow.line_hiding(fields)?;
                    let n = self.slow.text.len();
                    if self.buf.len() - self.at < n {
                        self.grow(n);
                    }
                    self.buf[self.at..self.at + n].copy_from_slice(self.slow.text.as_bytes());
                    self.at += n;
                    break;
                }
            }
        }
        // A batch is far below 4 GiB (the host's frame limit); past that the
        // end saturates, and the host refuses the batch.
        self.ends.push(u32::try_from(self.at).unwrap_or(u32::MAX));
        Ok(())
    }

    /// Makes room for `more` bytes past the lines, at least doubling it.
    #[cold]
    fn grow(&mut self, more: usize) {
        let len = self.buf.len() + more.max(self.buf.len()).max(MIN_ROOM);
        self.buf.resize(len, 0);
    }

    /// The lines written so far (UTF-8: every byte written is ASCII or
    /// copied whole from a `str`), and where each ends (the offset past its
    /// line feed); the writer is left empty. Bytes, not a `String`: the
    /// guest would check them again for nothing, and the host checks them
    /// anyway as it takes them.
    pub fn take(&mut self) -> (Vec<u8>, Vec<u32>) {
        self.buf.truncate(self.at);
        self.at = 0;
        (core::mem::take(&mut self.buf), core::mem::take(&mut self.ends))
    }

    /// How many bytes have been written.
    pub fn len(&self) -> usize {
        self.at
    }

    /// Whether nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.at == 0
    }
}

/// Writes into `buf` at index `i`: see [`LineWriter`].
struct Cursor<'b> {
    buf: &'b mut [u8],
    i: usize,
}

impl Cursor<'_> {
    /// The line of `fields`, as [`Slow::line_hiding`] writes it.
    fn line(&mut self, fields: &[Field<'_>], scratch: &mut String) -> Result<(), Stop> {
        self.byte(b'{')?;
        let mut comma = false;
        for f in fields {
            if !shown(f) {
                continue;
            }
            if comma {
                self.byte(b',')?;
            }
            comma = true;
            self.byte(b'"')?;
            self.text(f.name.as_bytes())?;
            // Leaves, most of a line, written here: `value` recurses, so it
            // stays a call, and its prologue costs about as much as a leaf.
            match &f.value {
                Value::Chars(s) => {
                    self.word(*b"\":\"")?;
                    self.text(s.as_bytes())?;
                    self.byte(b'"')?;
                }
                v => {
                    self.word(*b"\":")?;
                    if !self.leaf(v)? {
                        self.i = Cursor::value(self.buf, self.i, v, false, 0, scratch)?;
                    }
                }
            }
        }
        self.word(*b"}\n")
    }

    /// One value at `i`, as [`write_json`] renders it (`in_array`: an
    /// element): where it ends. Not a method: a cursor passed by reference
    /// would have to live in memory, in the caller too, and every write would
    /// load and store its index.
    fn value(buf: &mut [u8], i: usize, v: &Value<'_>, in_array: bool, depth: u32, scratch: &mut String) -> Result<usize, Stop> {
        let mut c = Cursor { buf, i };
        c.value_here(v, in_array, depth, scratch)?;
        Ok(c.i)
    }

    /// Writes `v` when it is a leaf written without a call (text, an
    /// integer, a boolean, null, an IPv4 address), and says whether it was.
    #[inline(always)]
    fn leaf(&mut self, v: &Value<'_>) -> Result<bool, Stop> {
        match v {
            Value::Chars(s) => {
                self.byte(b'"')?;
                self.text(s.as_bytes())?;
                self.byte(b'"')?;
            }
            Value::Digit(d) => match u32::try_from(*d) {
                Ok(n) if n < 10_000 => self.small(n)?,
                _ => self.copy(itoa::Buffer::new().format(*d).as_bytes())?,
            },
            Value::Bool(true) => self.word(*b"true")?,
            Value::Bool(false) => self.word(*b"false")?,
            Value::Null => self.word(*b"null")?,
            Value::Float(x) => {
                let Some((negative, whole, thousandths)) = thousandths(*x) else { return Ok(false) };
                if negative {
                    self.byte(b'-')?;
                }
                match u32::try_from(whole) {
                    Ok(n) if n < 10_000 => self.small(n)?,
                    _ => self.copy(itoa::Buffer::new().format(whole).as_bytes())?,
                }
                self.byte(b'.')?;
                // The fraction's digits, trailing zeros dropped (but one kept).
                let d = [b'0' + (thousandths / 100) as u8, b'0' + (thousandths / 10 % 10) as u8, b'0' + (thousandths % 10) as u8];
                let n = if thousandths % 100 == 0 {
                    1
                } else if thousandths % 10 == 0 {
                    2
                } else {
                    3
                };
                self.word(d)?;
                self.i -= 3 - n;
            }
            Value::Ip(IpAddr::V4(a)) => {
                // As `push_ip` writes it: dotted decimal, no leading zeros.
                self.byte(b'"')?;
                for (k, octet) in a.octets().into_iter().enumerate() {
                    if k > 0 {
                        self.byte(b'.')?;
                    }
                    if octet >= 100 {
                        self.byte(b'0' + octet / 100)?;
                    }
                    if octet >= 10 {
                        self.byte(b'0' + octet / 10 % 10)?;
                    }
                    self.byte(b'0' + octet % 10)?;
                }
                self.byte(b'"')?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// [`Cursor::value`], written by this cursor.
    #[inline(always)]
    fn value_here(&mut self, v: &Value<'_>, in_array: bool, depth: u32, scratch: &mut String) -> Result<(), Stop> {
        if self.leaf(v)? {
            return Ok(());
        }
        match v {
            Value::Array(_) | Value::Obj(_) if depth >= CURSOR_DEPTH => Err(Stop::Slow),
            Value::Array(items) => {
                self.byte(b'[')?;
                for (i, f) in items.iter().enumerate() {
                    if i > 0 {
                        self.byte(b',')?;
                    }
                    if !self.leaf(&f.value)? {
                        self.i = Cursor::value(self.buf, self.i, &f.value, true, depth + 1, scratch)?;
                    }
                }
                self.byte(b']')
            }
            Value::Obj(members) => {
                self.byte(b'{')?;
                for (i, f) in members.iter().enumerate() {
                    if i > 0 {
                        self.byte(b',')?;
                    }
                    self.byte(b'"')?;
                    self.text(f.name.as_bytes())?;
                    self.word(*b"\":")?;
                    if !self.leaf(&f.value)? {
                        self.i = Cursor::value(self.buf, self.i, &f.value, false, depth + 1, scratch)?;
                    }
                }
                self.byte(b'}')
            }
            // Floats, IPv6 addresses, times, big integers and ignored
            // elements: the shared renderer, through the scratch text.
            _ => {
                scratch.clear();
                write_json(v, scratch, in_array);
                self.copy(scratch.as_bytes())
            }
        }
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) -> Result<(), Stop> {
        *self.buf.get_mut(self.i).ok_or(Stop::Full)? = b;
        self.i += 1;
        Ok(())
    }

    /// `n` (below 10,000) in decimal, as one four-byte copy of its digits
    /// shifted past the leading zeros: status codes, sizes and the whole
    /// part of durations, which through itoa's buffer cost about a hundred
    /// instructions each in wasm. The bytes past the number are room.
    #[inline(always)]
    fn small(&mut self, n: u32) -> Result<(), Stop> {
        let digits = u32::from_le_bytes([
            b'0' + (n / 1000) as u8,
            b'0' + (n / 100 % 10) as u8,
            b'0' + (n / 10 % 10) as u8,
            b'0' + (n % 10) as u8,
        ]);
        let skip = u32::from(n < 1000) + u32::from(n < 100) + u32::from(n < 10);
        self.word((digits >> (8 * skip)).to_le_bytes())?;
        self.i -= skip as usize;
        Ok(())
    }

    /// `w`, in one fixed-length copy.
    #[inline(always)]
    fn word<const N: usize>(&mut self, w: [u8; N]) -> Result<(), Stop> {
        self.buf.get_mut(self.i..self.i + N).ok_or(Stop::Full)?.copy_from_slice(&w);
        self.i += N;
        Ok(())
    }

    /// `s` inside a JSON string; [`Stop::Slow`] when a byte needs an escape.
    #[inline(always)]
    fn text(&mut self, s: &[u8]) -> Result<(), Stop> {
        self.words(s, true)
    }

    /// `s` as it is (JSON already).
    #[inline(always)]
    fn copy(&mut self, s: &[u8]) -> Result<(), Stop> {
        self.words(s, false)
    }

    /// Copies `s` a word at a time, never with a copy of run-time length (in
    /// wasm, a call out of the guest: see [`crate::value::append`]): up to 16 bytes as one
    /// or two words that may overlap, longer ones eight bytes at a time and
    /// the last eight over the end of that. With `check`, each word is first
    /// checked by [`clean_prefix`](crate::pipes::clean_prefix)'s test
    /// ([`dirty`]), so that a text is looked at and copied in one pass.
    #[inline(always)]
    fn words(&mut self, s: &[u8], check: bool) -> Result<(), Stop> {
        let (n, at) = (s.len(), self.i);
        if self.buf.len() - at < n.max(8) {
            return Err(Stop::Full);
        }
        let bad = |x: u64| check && dirty(x) != 0;
        match n {
            0 => {}
            1..=3 => {
                // Its first, middle and last bytes are all of it; the rest of the word is plain.
                let (x, y, z) = (s[0], s[n / 2], s[n - 1]);
                if bad(u64::from_le_bytes([x, y, z, b'a', b'a', b'a', b'a', b'a'])) {
                    return Err(Stop::Slow);
                }
                // Written as a word of which only `n` bytes count (there is room for eight).
                let w = [x, if n == 3 { y } else { z }, z, 0, 0, 0, 0, 0];
                self.buf[at..at + 8].copy_from_slice(&w);
            }
            4..=7 => {
                let (head, tail) = (word::<4>(s, 0), word::<4>(s, n - 4));
                if bad(u64::from(u32::from_le_bytes(head)) | u64::from(u32::from_le_bytes(tail)) << 32) {
                    return Err(Stop::Slow);
                }
                self.buf[at..at + 4].copy_from_slice(&head);
                self.buf[at + n - 4..at + n].copy_from_slice(&tail);
            }
            8..=16 => {
                let (head, tail) = (word::<8>(s, 0), word::<8>(s, n - 8));
                if bad(u64::from_le_bytes(head)) || bad(u64::from_le_bytes(tail)) {
                    return Err(Stop::Slow);
                }
                self.buf[at..at + 8].copy_from_slice(&head);
                self.buf[at + n - 8..at + n].copy_from_slice(&tail);
            }
            _ => {
                let mut k = 0;
                while k + 8 <= n {
                    let w = word::<8>(s, k);
                    if bad(u64::from_le_bytes(w)) {
                        return Err(Stop::Slow);
                    }
                    self.buf[at + k..at + k + 8].copy_from_slice(&w);
                    k += 8;
                }
                if k < n {
                    let w = word::<8>(s, n - 8);
                    if bad(u64::from_le_bytes(w)) {
                        return Err(Stop::Slow);
                    }
                    self.buf[at + n - 8..at + n].copy_from_slice(&w);
                }
            }
        }
        self.i = at + n;
        Ok(())
    }
}

/// The plain writer, for the lines that the [`Cursor`] leaves to it: the
/// host's own algorithm (`Record::to_json`: [`write_json_object`] of the shown
/// fields), into a text kept between lines.
#[derive(Default)]
struct Slow {
    text: String,
}

impl Slow {
    /// [`LineWriter::line_hiding`], into `text` (which it replaces).
    fn line_hiding(&mut self, fields: &[Field<'_>]) -> Result<(), &'static str> {
        // Checked first: `write_json` follows any depth.
        if fields.iter().any(|f| shown(f) && nests_too_deep(&f.value, 0)) {
            return Err(TOO_DEEP);
        }
        let out = &mut self.text;
        out.clear();
        write_json_object(fields.iter().filter(|f| shown(f)), out);
        out.push('\n');
        Ok(())
    }
}

/// Whether a top-level field is in its record's line: not ignored, and not
/// hidden by a name that starts with `__`.
#[inline(always)]
fn shown(f: &Field<'_>) -> bool {
    !matches!(f.value, Value::Ignore) && !f.name.starts_with("__")
}

/// Whether `v`, at `depth` (0 for a field's value), holds a value deeper
/// than a frame may ([`MAX_DEPTH`]).
fn nests_too_deep(v: &Value<'_>, depth: u32) -> bool {
    depth > MAX_DEPTH
        || match v {
            Value::Array(m) | Value::Obj(m) => m.iter().any(|f| nests_too_deep(&f.value, depth + 1)),
            _ => false,
        }
}

/// Why [`LineWriter::line_hiding`] refused a record (the host's words for
/// the same refusal of a frame).
pub const TOO_DEEP: &str = "record nested deeper than 128 levels";
const _: () = assert!(MAX_DEPTH == 128, "TOO_DEEP names the depth");

/// A float that is a whole number of thousandths, small enough that no
/// other decimal of at most three fraction digits reads as the same float:
/// its sign, whole part and thousandths. Its shortest decimal, which
/// `push_json_float` writes (ryu's, plain below 1e16 and above 1e-5), is
/// then that one, so it can be written without ryu (1,100 instructions a
/// float in wasm, most of a nginx line's `req_time`). Checked exactly:
/// `k / 1000.0` is the float nearest to k/1000, as reading its decimal gives.
fn thousandths(x: f64) -> Option<(bool, u64, u32)> {
    let a = x.abs();
    // Below 1e11 a float's spacing is under 2e-5, far below 0.001.
    if !a.is_finite() || a >= 1e11 {
        return None;
    }
    let k = (a * 1000.0 + 0.5) as u64;
    if k as f64 / 1000.0 != a {
        return None;
    }
    Some((x.is_sign_negative(), k / 1000, (k % 1000) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipes::{clean_prefix, json_escape_into};
    use alloc::borrow::Cow;
    use alloc::boxed::Box;
    use alloc::vec;

    fn f(name: &'static str, value: Value<'static>) -> Field<'static> {
        Field::new(Cow::Borrowed(name), value)
    }

    /// What the host renders from a frame: `{`, each shown field's
    /// `"name":` and `write_json`, `}` (host/src/record/json.rs).
    fn reference(fields: &[Field<'_>]) -> String {
        let mut out = String::from("{");
        let mut first = true;
        for x in fields.iter().filter(|x| !matches!(x.value, Value::Ignore) && !x.name.starts_with("__")) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push('"');
            json_escape_into(&x.name, &mut out);
            out.push_str("\":");
            write_json(&x.value, &mut out, false);
        }
        out.push_str("}\n");
        out
    }

    #[test]
    fn lines_are_the_frames_json_for_every_kind_and_escape() {
        let mut texts: Vec<String> = Vec::new();
        // Every length around the word sizes, plain and with an escape at each end.
        for n in 0..40 {
            let plain: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            texts.push(plain.clone());
            for bad in ['"', '\\', '\n', '\u{1}', '\u{1f}'] {
                let mut s = plain.clone();
                s.insert(0, bad);
                texts.push(s.clone());
                let mut s = plain.clone();
                s.push(bad);
                texts.push(s);
            }
        }
        texts.push("é ü 漢字 \u{7f} done".into());
        let mut w = LineWriter::default();
        let mut want = String::new();
        for t in &texts {
            let name: &'static str = alloc::boxed::Box::leak(t.clone().into_boxed_str());
            let rec = vec![
                f(name, Value::Chars(Cow::Owned(t.clone()))),
                f("__hidden", Value::Digit(1)),
                f("gone", Value::Ignore),
                f("d", Value::Digit(-1234567890123)),
                f("x", Value::Float(1.5)),
                f("nan", Value::Float(f64::NAN)),
                f("b", Value::Bool(true)),
                f("n", Value::Null),
                f("ip", Value::Ip("10.0.0.1".parse().unwrap())),
                f(
                    "ips",
                    Value::Array(Box::new(vec![
                        f("", Value::Ip("0.9.99.255".parse().unwrap())),
                        f("", Value::Ip("100.10.1.0".parse().unwrap())),
                    ])),
                ),
                f("ip6", Value::Ip("2001:db8::1".parse().unwrap())),
                f("t", Value::Time(1_700_000_000_000_000_000)),
                f("big", Value::BigInt(Cow::Borrowed("123456789012345678901234567890"))),
                f(
                    "o",
                    Value::Obj(Box::new(vec![
                        f("a", Value::Array(Box::new(vec![f("", Value::Ignore), f("", Value::Chars(Cow::Owned(t.clone())))]))),
                        f("e", Value::Obj(Box::new(vec![]))),
                    ])),
                ),
                // Deeper than the cursor follows: the plain writer's line.
                f("deep", (0..CURSOR_DEPTH + 2).fold(Value::Digit(7), |v, _| Value::Array(Box::new(vec![f("", v)])))),
            ];
            w.line_hiding(&rec).unwrap();
            want.push_str(&reference(&rec));
        }
        w.line_hiding(&[]).unwrap();
        want.push_str("{}\n");
        assert_eq!(w.len(), want.len());
        let (text, ends) = w.take();
        assert_eq!(String::from_utf8(text).unwrap(), want);
        let want_ends: Vec<u32> = want.match_indices('\n').map(|(i, _)| i as u32 + 1).collect();
        assert_eq!(ends, want_ends);
        assert!(w.is_empty());
    }

    /// Integers below 10,000 (written from their digits) and every other
    /// integer (through itoa) are written as the host writes them, at the
    /// end of the room as well.
    #[test]
    fn integers_are_written_as_the_host_writes_them() {
        let mut ints: Vec<i64> = (-20..=20_000).collect();
        ints.extend([i64::MIN, i64::MAX, -9_999, 99_999, 100_000, 1 << 32, u32::MAX as i64 + 10_000]);
        for d in ints {
            let mut want = String::new();
            write_json(&Value::Digit(d), &mut want, false);
            // Room for a word past the number, or only for the number (the
            // writer may then say it is full, and grows, but never writes
            // less).
            for room in [want.len() + 8, 40, want.len()] {
                let mut buf = [b'x'; 40];
                let mut c = Cursor { buf: &mut buf[..room], i: 0 };
                match c.leaf(&Value::Digit(d)) {
                    Ok(true) => {}
                    Err(Stop::Full) if room == want.len() => continue,
                    _ => panic!("{d} in {room} bytes was not written"),
                }
                let end = c.i;
                assert_eq!(core::str::from_utf8(&buf[..end]).unwrap(), want, "{d} in {room} bytes");
            }
        }
    }

    #[test]
    fn floats_in_thousandths_are_written_as_ryu_writes_them() {
        let mut floats =
            alloc::vec![0.0, -0.0, 1.0, -1.0, 0.5, 0.012, 0.001, 0.1 + 0.2, 1e-7, 1e10, 99_999_999_999.999, 1e11, 1.5e300];
        floats.extend([f64::MIN_POSITIVE, f64::EPSILON, 123.456, -123.450, 2.0f64.powi(40) + 0.5, 0.3, 1.0 / 3.0]);
        // Every thousandth up to 20, and a sweep of larger ones.
        floats.extend((0..20_000).map(|k| k as f64 / 1000.0));
        floats.extend((0..2_000).map(|k| (k as f64 * 7_919_123.0 + 0.25) / 1000.0));
        let mut fast = 0;
        for x in floats {
            let mut want = String::new();
            write_json(&Value::Float(x), &mut want, false);
            let mut buf = [0u8; 64];
            let mut c = Cursor { buf: &mut buf, i: 0 };
            if c.leaf(&Value::Float(x)).unwrap_or(false) {
                let end = c.i;
                fast += 1;
                assert_eq!(core::str::from_utf8(&buf[..end]).unwrap(), want, "{x:?}");
            }
        }
        assert!(fast > 20_000, "the thousandths take the fast way: {fast}");
    }

    #[test]
    fn a_value_too_deep_for_a_frame_is_refused_and_leaves_nothing() {
        let mut deep = Value::Digit(1);
        for _ in 0..MAX_DEPTH {
            deep = Value::Array(Box::new(vec![f("", deep)]));
        }
        let mut w = LineWriter::default();
        w.line_hiding(&[f("a", Value::Digit(1))]).unwrap();
        let before = w.len();
        // MAX_DEPTH arrays around a leaf: the leaf is at depth MAX_DEPTH, as deep as a frame goes.
        w.line_hiding(&[f("ok", deep.clone())]).unwrap();
        let deeper = Value::Obj(Box::new(vec![f("x", deep)]));
        assert_eq!(w.line_hiding(&[f("a", Value::Digit(2)), f("no", deeper)]), Err(TOO_DEEP));
        assert!(w.len() > before);
        let (text, ends) = w.take();
        let text = String::from_utf8(text).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert_eq!(ends.len(), 2, "the refused line has no end");
        // The next record is written as usual.
        w.line_hiding(&[f("a", Value::Digit(3))]).unwrap();
        assert_eq!(w.take(), (b"{\"a\":3}\n".to_vec(), vec![8]));
    }

    #[test]
    fn the_cursor_copies_a_text_when_clean_prefix_finds_it_plain() {
        for n in 0..=40usize {
            for at in 0..n {
                for b in 0..=255u8 {
                    let mut s: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
                    s[at] = b;
                    // After some bytes, so that copies land at an offset;
                    // only valid UTF-8 reaches it, but the test is on bytes.
                    let mut buf = [0u8; 64];
                    let mut c = Cursor { buf: &mut buf, i: 3 };
                    let clean = clean_prefix(&s) == n;
                    match c.text(&s) {
                        Ok(()) => {
                            assert!(clean, "n {n} at {at} byte {b}");
                            assert_eq!(c.i, 3 + n);
                            assert_eq!(&buf[3..3 + n], &s[..], "n {n} at {at} byte {b}");
                        }
                        Err(Stop::Slow) => assert!(!clean, "n {n} at {at} byte {b}"),
                        Err(Stop::Full) => panic!("n {n}: room was left"),
                    }
                }
            }
        }
        // Too little room: full, whatever the text.
        let mut buf = [0u8; 12];
        let mut c = Cursor { buf: &mut buf, i: 4 };
        assert!(matches!(c.text(b"abcdefghi"), Err(Stop::Full)));
        assert!(matches!(c.text(b"abc"), Ok(())), "eight bytes are left, a word");
        assert!(matches!(c.text(b"d"), Err(Stop::Full)), "a byte is written as a word, and five bytes are left");
    }
}
