//! Host records to and from frames, the bytes that cross the boundary
//! (layout and codec: `omlet_lang::frame`; WIT: `types.frame`).

use omlet_lang::frame::{Raw, Reader, Writer};
use omlet_lang::value::{Field, Value};

use crate::record::Record;
use crate::{Error, Result};

thread_local! {
    /// One writer per thread, and one frame buffer, reused from call to call.
    static FRAME: std::cell::RefCell<(Writer, Vec<u8>)> = const { std::cell::RefCell::new((Writer::new(), Vec::new())) };
}

/// One record as a frame of its own, for `evaluate` (the thread's buffers
/// do the writing, see [`with_record_frame`]).
pub(crate) fn encode_record(r: &Record) -> Vec<u8> {
    with_record_frame(r, <[u8]>::to_vec)
}

/// One record as a frame from a writer of its own: while the thread's
/// buffers are in use, or gone (the thread is ending).
fn fresh_frame(r: &Record) -> Vec<u8> {
    let mut w = Writer::new();
    r.write_frame(&mut w);
    w.finish()
}

/// `f` on one record's frame, written into the thread's own buffer: a
/// one-record call that is made while `f` runs (the fiber-less path)
/// allocates no frame. A buffer one huge record grew past
/// [`omlet_lang::frame::KEEP_BYTES`] is let go after the call.
pub(crate) fn with_record_frame<T>(r: &Record, f: impl FnOnce(&[u8]) -> T) -> T {
    // The thread is ending and its buffer is gone: a frame of its own.
    if FRAME.try_with(|_| ()).is_err() {
        return f(&fresh_frame(r));
    }
    FRAME.with(|cell| {
        // Taken while another `f` of this thread runs: a frame of its own.
        let Ok(mut b) = cell.try_borrow_mut() else {
            return f(&fresh_frame(r));
        };
        let (w, frame) = &mut *b;
        r.write_frame(w);
        w.take_frame_into(frame);
        let out = f(frame);
        if frame.capacity() > omlet_lang::frame::KEEP_BYTES {
            *frame = Vec::new();
        }
        out
    })
}

/// A batch's frame: its own bytes, or the frame of the chunk its records
/// were read into.
pub(crate) enum BatchFrame {
    Own(Vec<u8>),
    Chunk(std::sync::Arc<crate::record::chunk::Cell>),
}

impl BatchFrame {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            BatchFrame::Own(b) => b,
            BatchFrame::Chunk(cell) => cell.get().map_or(&[], |f| f.bytes()),
        }
    }
}

/// Records as one frame, for `evaluate-batch`.
pub(crate) fn encode_frame<'r>(records: impl ExactSizeIterator<Item = &'r Record> + Clone) -> BatchFrame {
    // Every record of one chunk, in order (`record::chunk`): that chunk's
    // frame as it is.
    if let Some((cell, 0)) = records.clone().next().and_then(Record::chunk)
        && cell.get().is_some_and(|f| f.len() == records.len())
        && records
            .clone()
            .enumerate()
            .all(|(i, r)| r.chunk().is_some_and(|(c, at)| std::sync::Arc::ptr_eq(c, cell) && at as usize == i))
    {
        return BatchFrame::Chunk(cell.clone());
    }
    // Records read from JSONL each keep their frame (their own, or a part
    // of their chunk's): joined in one buffer of the exact size
    // (`frame::join_parts`), not appended to a writer's growing buffers and
    // copied out of them.
    if records.clone().all(|r| r.part().is_some())
        && let Ok(frame) = omlet_lang::frame::join_parts(records.clone().filter_map(Record::part))
    {
        return BatchFrame::Own(frame);
    }
    let mut w = Writer::with_capacity(records.len(), 8);
    for r in records {
        r.write_frame(&mut w);
    }
    BatchFrame::Own(w.finish())
}

/// Field names of records (the guest's outputs, and JSON input's keys,
/// `record::from_json_str`), shared rather than allocated per field.
///
/// A rule writes the same few names into every record, so decoding them into
/// a fresh `String` each time was a large share of the host's allocations.
/// Names are kept for the life of the process (they must be `'static` in a
/// [`Record`]); to bound that memory, only names up to [`MAX_LEN`] bytes are
/// kept, and at most [`MAX_NAMES`] of them, after which further new names are
/// allocated per field as before. Each thread looks names up in its own
/// table first, so the shared one is locked only for a name it has not seen.
pub(crate) mod names {
    use omlet_lang::fnv::FnvBuild;
    use std::borrow::Cow;
    use std::cell::{Cell, RefCell};
    use std::collections::{HashMap, HashSet};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    pub(super) const MAX_LEN: usize = 64;
    pub(super) const MAX_NAMES: usize = 4096;

    // FNV (omlet_lang::fnv): names are short, and a lookup per field must be cheap.
    type Table = HashMap<&'static [u8], &'static str, FnvBuild>;

    static SHARED: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    /// The shared table is full: a name a thread has not seen is not looked
    /// for there (no lock per field once input keys have filled the table).
    static FULL: AtomicBool = AtomicBool::new(false);

    /// Slots of the per-thread front cache (a power of two).
    const FRONT: usize = 256;

    thread_local! {
        static LOCAL: RefCell<Table> = RefCell::new(Table::default());
        /// A direct-mapped cache in front of `LOCAL`, by length and first and
        /// last bytes: records repeat the same few names, and this finds
        /// them with one compare instead of hashing every byte.
        static FRONT_CACHE: [Cell<&'static str>; FRONT] = const { [const { Cell::new("") }; FRONT] };
    }

    /// A name's slot in the front cache (not empty: `""` marks a free slot).
    pub(super) fn front_slot(name: &[u8]) -> usize {
        let (first, last) = (name[0] as usize, name[name.len() - 1] as usize);
        (name.len().wrapping_mul(31) ^ first.wrapping_mul(7) ^ last.wrapping_mul(131)) & (FRONT - 1)
    }

    /// The shared copy of `name`, if it is (or can still be) kept.
    pub(crate) fn get(name: &[u8]) -> Option<&'static str> {
        if name.len() > MAX_LEN {
            return None;
        }
        if name.is_empty() {
            return kept(name);
        }
        let slot = front_slot(name);
        let hit = FRONT_CACHE.with(|f| f[slot].get());
        if hit.as_bytes() == name {
            return Some(hit);
        }
        let found = kept(name)?;
        FRONT_CACHE.with(|f| f[slot].set(found));
        Some(found)
    }

    /// [`get`] past the front cache: this thread's table, then the shared one.
    fn kept(name: &[u8]) -> Option<&'static str> {
        if let Some(hit) = LOCAL.with(|t| t.borrow().get(name).copied()) {
            return Some(hit);
        }
        if FULL.load(Ordering::Relaxed) {
            return None;
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
                None => {
                    FULL.store(true, Ordering::Relaxed);
                    return None;
                }
            }
        };
        LOCAL.with(|t| t.borrow_mut().insert(kept.as_bytes(), kept));
        Some(kept)
    }

    /// Tests that need the shared table in a known state take this lock and
    /// [`reset`] it, so that a test filling the table (its bound is tested,
    /// and very wide records fill it) cannot run beside them.
    #[cfg(test)]
    pub(crate) static TEST_LOCK: Mutex<()> = Mutex::new(());

    /// Empties the shared table and this thread's caches (names handed out
    /// stay valid: they are never freed).
    #[cfg(test)]
    pub(crate) fn reset() {
        if let Ok(mut shared) = SHARED.lock() {
            *shared = None;
        }
        FULL.store(false, Ordering::Relaxed);
        LOCAL.with(|t| t.borrow_mut().clear());
        FRONT_CACHE.with(|f| f.iter().for_each(|c| c.set("")));
    }

    /// `name` as a field name: the shared copy, or else its own.
    pub(crate) fn cow(name: &str) -> Cow<'static, str> {
        get(name.as_bytes()).map_or_else(|| Cow::Owned(name.to_string()), Cow::Borrowed)
    }
}

/// The errors both decoders below give, in the same places, so that a
/// frame fails the same way as records and as JSON lines (the guest's
/// reader, `omlet_lang::frame`, says the same).
const TOO_DEEP: &str = "record nested deeper than 128 levels";
const OVERRUN: &str = "a record's subtrees overrun its node count";

/// What the records of a guest's output frame are decoded into: owned
/// [`Record`]s for the API, or JSON lines for a stream that only writes
/// them out ([`crate::stream::run_json`]).
pub(crate) trait Decoded: Sized + Send + 'static {
    /// Whether [`Decoded::decode`] uses `plain`: the frame's text is looked
    /// at for it only then.
    const USES_PLAIN: bool;
    /// The next record of `r`, of `size` nodes; `plain` says that no byte
    /// of the frame's text needs a JSON escape ([`plain_text`]).
    fn decode(r: &mut Reader<'_>, size: u32, plain: bool) -> Result<Self, String>;
    /// Whether outputs are better asked for as JSON lines
    /// (`evaluate-batch-lines`), read with [`Decoded::from_line`].
    const LINES: bool;
    /// An output from its JSON line (without the line feed).
    fn from_line(line: &str) -> Result<Self, String>;
}

impl Decoded for Record {
    const USES_PLAIN: bool = false;
    fn decode(r: &mut Reader<'_>, size: u32, _: bool) -> Result<Record, String> {
        record(r, size)
    }
    const LINES: bool = false;
    /// Never asked for (`LINES` is false): a line has lost the kinds that
    /// JSON has no type for (an address, a time), so a record read back
    /// from it would not be the output.
    fn from_line(_: &str) -> Result<Record, String> {
        Err("an output record cannot be read back from its JSON line".into())
    }
}

/// Whether no byte of a frame's text (every name and text value of its
/// records) needs a JSON escape: then its strings are written out as they
/// are. Looking once over the whole text, eight bytes at a time, costs less
/// than looking at each of a record's thirty-odd short strings on its own,
/// which was a fifth of rendering a nginx record (valgrind: about 1,700 of
/// 9,000 instructions). A frame too short to hold its text is not plain;
/// the reader then says what is wrong with it.
fn plain_text(frame: &[u8]) -> bool {
    let Some(len) = frame.get(8..12).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize) else {
        return false;
    };
    frame.len().checked_sub(len).is_some_and(|at| crate::record::scan::clean_prefix(&frame[at..]) == len)
}

/// A record's JSON line (spec §11): the text [`Record::to_json`] gives for the
/// record decoded from the same nodes, rendered node by node as the frame is
/// read, so that no field is built, copied or freed for a line that is only
/// written out.
impl Decoded for String {
    const USES_PLAIN: bool = true;
    fn decode(r: &mut Reader<'_>, size: u32, plain: bool) -> Result<String, String> {
        // The count comes from the guest: room for a usual record, grown as needed.
        let mut line = String::with_capacity(64 + (size as usize).min(256) * 24);
        line.push('{');
        let (mut read, mut first) = (0, true);
        while read < size {
            json_tree(r, &mut read, 0, &mut line, At::Field(&mut first), plain)?;
        }
        if read != size {
            return Err(OVERRUN.into());
        }
        line.push('}');
        Ok(line)
    }
    const LINES: bool = true;
    fn from_line(line: &str) -> Result<String, String> {
        Ok(line.to_string())
    }
}

/// Where a node renders in [`json_tree`].
enum At<'f> {
    /// A top-level field (false once one has been written): an ignored one
    /// is left out, as `Record::to_json` leaves it out.
    Field(&'f mut bool),
    /// The `i`th member of an object.
    Member(u32),
    /// The `i`th element of an array (an ignored one renders as `""`).
    Element(u32),
}

/// Renders the next subtree of `r` into `out` as [`tree`] reads it (the same
/// checks, in the same order, so the same errors), and as `Record::to_json`
/// renders the field [`tree`] would make (leaves through the same
/// `write_json`).
fn json_tree(r: &mut Reader<'_>, read: &mut u32, depth: u32, out: &mut String, at: At<'_>, plain: bool) -> Result<(), String> {
    if depth > omlet_lang::frame::MAX_DEPTH {
        return Err(TOO_DEEP.into());
    }
    let escape = |s: &str, out: &mut String| {
        if plain {
            out.push_str(s);
        } else {
            omlet_lang::pipes::json_escape_into(s, out);
        }
    };
    // What goes before a value: its comma, and its name unless in an array.
    let head = |out: &mut String, at: At<'_>, name: &str| {
        let (comma, named) = match at {
            At::Field(first) => (!std::mem::replace(first, false), true),
            At::Member(i) => (i > 0, true),
            At::Element(i) => (i > 0, false),
        };
        if comma {
            out.push(',');
        }
        if named {
            out.push('"');
            escape(name, out);
            out.push_str("\":");
        }
    };
    // Text and integer leaves, most of a record, are rendered straight from
    // their node: `node` passes its value back through memory, and reading
    // that back stalled on the narrow stores that wrote it (half of this
    // function's own time in `perf annotate`).
    if let Some((name, text)) = r.chars_leaf() {
        *read += 1;
        head(out, at, name);
        out.push('"');
        escape(text, out);
        out.push('"');
        return Ok(());
    }
    if let Some((name, d)) = r.digit_leaf() {
        *read += 1;
        head(out, at, name);
        omlet_lang::value::push_digit(out, d);
        return Ok(());
    }
    let (name, raw) = r.node()?;
    *read += 1;
    if matches!(at, At::Field(_)) && matches!(raw, Raw::Leaf(Value::Ignore)) {
        return Ok(());
    }
    let in_array = matches!(at, At::Element(_));
    head(out, at, name);
    match raw {
        Raw::Leaf(v) => omlet_lang::pipes::write_json(&v, out, in_array),
        Raw::Obj(n) => {
            out.push('{');
            for i in 0..n {
                json_tree(r, read, depth + 1, out, At::Member(i), plain)?;
            }
            out.push('}');
        }
        Raw::Array(n) => {
            out.push('[');
            for i in 0..n {
                json_tree(r, read, depth + 1, out, At::Element(i), plain)?;
            }
            out.push(']');
        }
    }
    Ok(())
}

/// The next subtree of `r` as an owned field (names shared, see [`names`]).
/// Object members stay in the order the guest wrote them (name order).
fn tree(r: &mut Reader<'_>, read: &mut u32, depth: u32) -> Result<Field<'static>, String> {
    if depth > omlet_lang::frame::MAX_DEPTH {
        return Err(TOO_DEEP.into());
    }
    let (name, raw) = r.node()?;
    *read += 1;
    let name = names::cow(name);
    let value = match raw {
        Raw::Leaf(v) => v.into_owned(),
        Raw::Obj(n) | Raw::Array(n) => {
            let mut members = Vec::with_capacity((n as usize).min(4096));
            for _ in 0..n {
                members.push(tree(r, read, depth + 1)?);
            }
            if matches!(raw, Raw::Obj(_)) { Value::Obj(Box::new(members)) } else { Value::Array(Box::new(members)) }
        }
    };
    Ok(Field::new(name, value))
}

/// The next record of `r`, of `size` nodes.
fn record(r: &mut Reader<'_>, size: u32) -> Result<Record, String> {
    // The count comes from the guest: reserve a little, grow as nodes come.
    let mut out = Vec::with_capacity((size as usize).min(4096));
    let mut read = 0;
    while read < size {
        out.push(tree(r, &mut read, 0)?);
    }
    if read != size {
        return Err(OVERRUN.into());
    }
    Ok(Record::from_fields(out))
}

/// The one record of an `evaluate` output.
pub(crate) fn decode_record(frame: &[u8]) -> Result<Record, String> {
    let mut r = Reader::new(frame)?;
    if r.records() != 1 {
        return Err(format!("expected one output record, the frame has {}", r.records()));
    }
    let size = r.size(0)?;
    Record::decode(&mut r, size, false)
}

/// Re-assembles per-input results from a batch output frame (successes in
/// order) and its error list.
pub(crate) fn decode_batch<T: Decoded>(
    n: usize,
    frame: &[u8],
    errors: impl Iterator<Item = (usize, Error)>,
) -> Result<Vec<Result<T>>> {
    let errs = by_index(n, errors);
    let bad = |m: &str| Error::Internal(format!("batch output: {m}"));
    let mut r = Reader::new(frame).map_err(bad)?;
    let plain = T::USES_PLAIN && plain_text(frame);
    let mut out = Vec::with_capacity(n);
    let mut next = 0usize;
    for (index, err) in errs.into_iter().enumerate() {
        if let Some(e) = err {
            out.push(Err(e));
            continue;
        }
        if next >= r.records() {
            return Err(bad("too few records"));
        }
        let size = r.size(next).map_err(bad)?;
        next += 1;
        out.push(T::decode(&mut r, size, plain).map_err(|m| Error::Internal(format!("the guest's output record {index}: {m}"))));
    }
    Ok(out)
}

/// Re-assembles per-input results from `evaluate-batch-lines`' text (the
/// successes' JSON lines in order, each ended by a line feed), where each
/// line ends (past its line feed) and its error list, as [`decode_batch`]
/// does from a frame.
pub(crate) fn decode_lines<T: Decoded>(
    n: usize,
    text: &str,
    ends: &[u32],
    errors: impl Iterator<Item = (usize, Error)>,
) -> Result<Vec<Result<T>>> {
    let bad = |m: &str| Error::Internal(format!("batch lines: {m}"));
    let mut out = Vec::with_capacity(n);
    let (mut start, mut ends) = (0usize, ends.iter());
    for (index, err) in by_index(n, errors).into_iter().enumerate() {
        if let Some(e) = err {
            out.push(Err(e));
            continue;
        }
        let end = *ends.next().ok_or_else(|| bad("fewer lines than records"))? as usize;
        // Each line ends with its line feed (ASCII, so the cut is on a
        // character's boundary), after the previous one.
        let line = match end.checked_sub(1).filter(|&feed| feed >= start && text.as_bytes().get(feed) == Some(&b'\n')) {
            Some(feed) => &text[start..feed],
            None => return Err(bad("a line's end is not a line feed after the line before")),
        };
        out.push(T::from_line(line).map_err(|m| Error::Internal(format!("the guest's output record {index}: {m}"))));
        start = end;
    }
    if start != text.len() || ends.next().is_some() {
        return Err(bad("more lines than records"));
    }
    Ok(out)
}

/// The errors of a batch of `n` by input index (an index out of range is
/// dropped: its record then reads its output).
fn by_index(n: usize, errors: impl Iterator<Item = (usize, Error)>) -> Vec<Option<Error>> {
    let mut errs: Vec<Option<Error>> = (0..n).map(|_| None).collect();
    for (i, e) in errors {
        if let Some(slot) = errs.get_mut(i) {
            *slot = Some(e);
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A one-record frame is written into the thread's buffer: the same
    /// bytes as a writer of its own gives, the same buffer call after call, a buffer a
    /// huge record grew let go after its call, and a frame asked for while
    /// the buffer is in use is a frame of its own.
    #[test]
    fn one_record_frames_reuse_the_threads_buffer() {
        let small = Record::from_json(r#"{"id":1,"msg":"hello"}"#).unwrap();
        let (at, bytes) = with_record_frame(&small, |f| (f.as_ptr() as usize, f.to_vec()));
        assert_eq!(bytes, fresh_frame(&small));
        assert_eq!(encode_record(&small), bytes);
        // The frame was the thread's own buffer, and it is kept.
        FRAME.with(|c| assert_eq!(c.borrow().1.as_ptr() as usize, at, "the frame was not the thread's buffer"));
        assert_eq!(with_record_frame(&small, |f| f.as_ptr() as usize), at, "the buffer was not reused");
        let mut big = Record::new();
        big.insert("text", "x".repeat(omlet_lang::frame::KEEP_BYTES));
        let inner = with_record_frame(&small, |outer| {
            with_record_frame(&big, |inner| {
                assert_ne!(outer.as_ptr(), inner.as_ptr());
                inner.to_vec()
            })
        });
        assert_eq!(inner, fresh_frame(&big));
        with_record_frame(&big, |f| assert!(f.len() > omlet_lang::frame::KEEP_BYTES));
        FRAME.with(|c| assert_eq!(c.borrow().1.capacity(), 0, "a huge record's buffer was kept"));
    }

    /// JSON lines rendered from a frame are the records' `to_json`, with
    /// the frame's text plain (written as it is) or not (escaped), names
    /// and nested members included.
    #[test]
    fn json_lines_are_the_records_json_whether_or_not_the_text_is_plain() {
        for (text, plain) in [
            (r#"{"a":"plain","b":{"c":"x","d":[1,"y"]},"n":1}"#, true),
            (r#"{"a":"quote \" and \\ and \n","b":{"c\t":"x","d":[1,"y"]},"n":1}"#, false),
            (r#"{"a":"plain","b":{"c":"x"},"n":"\u0001"}"#, false),
        ] {
            let rec = Record::from_json(text).unwrap();
            let frame = encode_record(&rec);
            assert_eq!(plain_text(&frame), plain, "{text}");
            let lines = decode_batch::<String>(1, &frame, std::iter::empty()).unwrap();
            assert_eq!(lines[0].as_ref().unwrap(), &rec.to_json(), "{text}");
        }
        // A frame cut short is not plain (the reader refuses it).
        assert!(!plain_text(&[1, 0, 0, 0, 0, 0, 0, 0, 200, 0, 0, 0]));
        assert!(!plain_text(&[1, 0]));
    }

    /// Lines cut at their ends, errors in their places; ends that do not
    /// fall after a line feed, or too few or too many lines, fail the batch.
    #[test]
    fn batch_lines_are_cut_at_their_ends_between_the_errors() {
        let text = "{\"a\":1}\n{\"b\":\"é\"}\n";
        let errors = || std::iter::once((1, Error::Rejected { index: 1, message: "no".into() }));
        let out = decode_lines::<String>(3, text, &[8, 19], errors()).unwrap();
        assert_eq!(out[0].as_ref().unwrap(), "{\"a\":1}");
        assert!(matches!(out[1], Err(Error::Rejected { index: 1, .. })));
        assert_eq!(out[2].as_ref().unwrap(), "{\"b\":\"é\"}");
        for (n, ends) in
            [(3, &[7u32, 19][..]), (3, &[8][..]), (2, &[8, 19][..]), (3, &[8, 19, 19][..]), (3, &[8, 18][..]), (3, &[0, 19][..])]
        {
            let e = decode_lines::<String>(n, text, ends, errors()).map(|_| ()).unwrap_err();
            assert!(e.to_string().contains("batch lines"), "{ends:?}: {e}");
        }
        // Records never come from lines.
        assert!(decode_lines::<Record>(1, "{}\n", &[3], std::iter::empty()).unwrap()[0].is_err());
    }

    #[test]
    fn output_names_are_shared_and_bounded() {
        let _table = names::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        names::reset();
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
        let r = encode_record(&Record::from_fields(vec![Field::new(Cow::Borrowed("one-name-too-many"), Value::Digit(1))]));
        let back = decode_record(&r).unwrap().into_fields();
        assert_eq!(back[0].name, "one-name-too-many");
        assert!(matches!(back[0].name, Cow::Owned(_)));
    }

    #[test]
    fn names_sharing_a_front_cache_slot_each_come_back_as_themselves() {
        let _table = names::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        names::reset();
        // Same length, first and last bytes: one slot of the front cache.
        assert_eq!(names::front_slot(b"name10"), names::front_slot(b"name20"));
        for _ in 0..3 {
            assert_eq!(names::get(b"name10"), Some("name10"));
            assert_eq!(names::get(b"name20"), Some("name20"));
        }
        assert_eq!(names::get(b""), Some(""), "an empty name skips the front cache");
    }
}
