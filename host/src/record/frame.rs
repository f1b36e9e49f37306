//! Records as frames, the bytes that cross the boundary (layout and codec:
//! `omlet_lang::frame`; WIT: `types.frame`): a record written into a frame
//! for a call, a batch's frame, and a frame read back into a [`Record`] or
//! rendered as its JSON line.

use omlet_lang::frame::{Raw, Reader, Writer};
use omlet_lang::value::{Field, Value};

use super::{Record, names};

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
    Chunk(std::sync::Arc<super::chunk::Cell>),
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

/// Why the bytes of a frame hold no records: the guest's output, or a
/// record's own frame, read by [`decode_record`], [`record`] or
/// [`json_line`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The frame's layout is broken: what the reader found (the guest's
    /// reader, `omlet_lang::frame`, says the same of the same bytes).
    #[error("{0}")]
    Malformed(&'static str),
    /// A one-record frame was expected; it has this many.
    #[error("expected one output record, the frame has {0}")]
    NotOneRecord(usize),
}

impl From<omlet_lang::frame::FrameError> for DecodeError {
    fn from(e: omlet_lang::frame::FrameError) -> DecodeError {
        DecodeError::Malformed(e)
    }
}

/// The errors both decoders below give, in the same places, so that a
/// frame fails the same way as records and as JSON lines (the guest's
/// reader, `omlet_lang::frame`, says the same).
const TOO_DEEP: &str = "record nested deeper than 128 levels";
const OVERRUN: &str = "a record's subtrees overrun its node count";

/// Whether no byte of a frame's text (every name and text value of its
/// records) needs a JSON escape: then its strings are written out as they
/// are. Looking once over the whole text, eight bytes at a time, costs less
/// than looking at each of a record's thirty-odd short strings on its own,
/// which was a fifth of rendering a nginx record. A frame too short to hold its text is not plain;
/// the reader then says what is wrong with it.
pub(crate) fn plain_text(frame: &[u8]) -> bool {
    let Some(len) = frame.get(8..12).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize) else {
        return false;
    };
    frame.len().checked_sub(len).is_some_and(|at| super::scan::clean_prefix(&frame[at..]) == len)
}

/// The next record of `r`, of `size` nodes, as its JSON line (spec §11): the
/// text [`Record::to_json`] gives for the record [`record`] reads from the
/// same nodes, rendered node by node as the frame is read, so that no field
/// is built, copied or freed for a line that is only written out. `plain`
/// says that no byte of the frame's text needs a JSON escape
/// ([`plain_text`]).
pub(crate) fn json_line(r: &mut Reader<'_>, size: u32, plain: bool) -> Result<String, DecodeError> {
    // The count comes from the guest: room for a usual record, grown as needed.
    let mut line = String::with_capacity(64 + (size as usize).min(256) * 24);
    json_line_into(r, size, plain, &mut line)?;
    Ok(line)
}

/// [`json_line`], appended to `out` (left as it was on an error).
fn json_line_into(r: &mut Reader<'_>, size: u32, plain: bool, out: &mut String) -> Result<(), DecodeError> {
    let start = out.len();
    out.push('{');
    let (mut read, mut first) = (0, true);
    let mut rendered = Ok(());
    while read < size && rendered.is_ok() {
        rendered = json_tree(r, &mut read, 0, out, At::Field(&mut first), plain);
    }
    if rendered.is_ok() && read != size {
        rendered = Err(OVERRUN.into());
    }
    if rendered.is_err() {
        out.truncate(start);
    }
    rendered.map(|()| out.push('}'))
}

/// The JSON line of a one-record frame, appended to `out`: what
/// [`Record::to_json`] gives for the record [`decode_record`] reads from it,
/// without building the record.
pub(crate) fn write_json_of(frame: &[u8], out: &mut String) -> Result<(), DecodeError> {
    let (mut r, size) = one_record(frame)?;
    json_line_into(&mut r, size, plain_text(frame), out)
}

/// A one-record frame (the guest's output) as a record that keeps it and
/// reads its fields only when they are first asked for: an output that is
/// only written out as JSON, or handed on, is never taken apart into
/// fields. The frame is checked whole first, with the checks and errors of
/// [`decode_record`], so that a frame that would not read fails here, at
/// the call, and never later as a record without fields.
pub(crate) fn record_keeping_frame(frame: Box<[u8]>) -> Result<Record, DecodeError> {
    let (mut r, size) = one_record(&frame)?;
    let mut read = 0;
    while read < size {
        check_tree(&mut r, &mut read, 0)?;
    }
    if read != size {
        return Err(OVERRUN.into());
    }
    Ok(Record::from_own_frame(frame))
}

/// Reads past the next subtree of `r` as [`tree`] reads it (the same checks,
/// in the same order, so the same errors), building nothing.
fn check_tree(r: &mut Reader<'_>, read: &mut u32, depth: u32) -> Result<(), DecodeError> {
    if depth > omlet_lang::frame::MAX_DEPTH {
        return Err(TOO_DEEP.into());
    }
    if r.chars_leaf().is_some() || r.digit_leaf().is_some() {
        *read += 1;
        return Ok(());
    }
    let (_, raw) = r.node()?;
    *read += 1;
    if let Raw::Obj(n) | Raw::Array(n) = raw {
        for _ in 0..n {
            check_tree(r, read, depth + 1)?;
        }
    }
    Ok(())
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
fn json_tree(
    r: &mut Reader<'_>,
    read: &mut u32,
    depth: u32,
    out: &mut String,
    at: At<'_>,
    plain: bool,
) -> Result<(), DecodeError> {
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
fn tree(r: &mut Reader<'_>, read: &mut u32, depth: u32) -> Result<Field<'static>, DecodeError> {
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
pub(crate) fn record(r: &mut Reader<'_>, size: u32) -> Result<Record, DecodeError> {
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

/// The one record of a one-record frame (an `evaluate` output, or a
/// record's own frame).
pub(crate) fn decode_record(frame: &[u8]) -> Result<Record, DecodeError> {
    let (mut r, size) = one_record(frame)?;
    record(&mut r, size)
}

/// A reader of a frame that must hold one record, and that record's node
/// count: what [`decode_record`], [`write_json_of`] and
/// [`record_keeping_frame`] check first, alike.
fn one_record(frame: &[u8]) -> Result<(Reader<'_>, u32), DecodeError> {
    let r = Reader::new(frame)?;
    if r.records() != 1 {
        return Err(DecodeError::NotOneRecord(r.records()));
    }
    let size = r.size(0)?;
    Ok((r, size))
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

    /// A record that keeps its output frame reads as the record decoded
    /// from it (fields, JSON line, equality), and refuses exactly the frames
    /// the decoder refuses, with the same error: every one-byte change and
    /// every cut of a frame with every kind of node.
    #[test]
    fn records_keeping_their_frame_read_and_fail_as_decoded_ones() {
        let json = r#"{"a":"plain \" quote","n":-7,"f":1.5,"t":true,"z":null,"o":{"y":[1,"two",{"k":"v"}],"x":"é"}}"#;
        let mut rec = Record::from_json(json).unwrap();
        rec.insert("ip4", std::net::IpAddr::from([10, 0, 0, 1]));
        rec.insert("ip6", "2001:db8::1".parse::<std::net::IpAddr>().unwrap());
        let frame = encode_record(&rec);
        let kept = record_keeping_frame(frame.clone().into()).unwrap();
        let decoded = decode_record(&frame).unwrap();
        assert_eq!(kept.to_json(), decoded.to_json(), "rendered from the frame");
        let mut line = String::from("[");
        kept.write_json(&mut line);
        assert_eq!(line, format!("[{}", decoded.to_json()));
        assert_eq!(kept, decoded);
        assert_eq!(kept.get("o"), decoded.get("o"));
        assert_eq!(kept.to_json(), decoded.to_json(), "rendered from the fields");
        let agree = |bytes: &[u8]| {
            let by_decoder = decode_record(bytes).map(|r| r.to_json());
            let by_keeper = record_keeping_frame(bytes.into()).map(|r| r.to_json());
            assert_eq!(by_keeper, by_decoder, "{bytes:?}");
        };
        for cut in 0..frame.len() {
            agree(&frame[..cut]);
        }
        for at in 0..frame.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = frame.clone();
                bad[at] ^= flip;
                agree(&bad);
            }
        }
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
