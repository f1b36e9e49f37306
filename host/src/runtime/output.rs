//! A guest call's outputs back into per-record results: the records of an
//! output frame, or the JSON lines of `evaluate-batch-lines`, put back in
//! their inputs' places between the records the guest refused.

use omlet_lang::frame::Reader;

use super::bindings::exports::omlet::rule::evaluator as ev;
use super::invoke::{BatchOut, record_error};
use crate::record::Record;
use crate::record::frame::{self, DecodeError};
use crate::{Error, Result};

/// What the records of a guest's output frame are decoded into: owned
/// [`Record`]s for the API, or JSON lines for a stream that only writes
/// them out ([`crate::stream::run_json`]).
pub(crate) trait Decoded: Sized + Send + 'static {
    /// Whether [`Decoded::decode`] uses `plain`: the frame's text is looked
    /// at for it only then.
    const USES_PLAIN: bool;
    /// The next record of `r`, of `size` nodes; `plain` says that no byte
    /// of the frame's text needs a JSON escape ([`frame::plain_text`]).
    fn decode(r: &mut Reader<'_>, size: u32, plain: bool) -> Result<Self, DecodeError>;
    /// Whether outputs are better asked for as JSON lines
    /// (`evaluate-batch-lines`), read with [`Decoded::from_line`].
    const LINES: bool;
    /// An output from its JSON line (without the line feed).
    fn from_line(line: &str) -> Result<Self, DecodeError>;
}

impl Decoded for Record {
    const USES_PLAIN: bool = false;
    fn decode(r: &mut Reader<'_>, size: u32, _: bool) -> Result<Record, DecodeError> {
        frame::record(r, size)
    }
    const LINES: bool = false;
    /// Never asked for (`LINES` is false): a line has lost the kinds that
    /// JSON has no type for (an address, a time), so a record read back
    /// from it would not be the output.
    fn from_line(_: &str) -> Result<Record, DecodeError> {
        Err(DecodeError::Malformed("an output record cannot be read back from its JSON line"))
    }
}

/// Each output as its JSON line ([`frame::json_line`]).
impl Decoded for String {
    const USES_PLAIN: bool = true;
    fn decode(r: &mut Reader<'_>, size: u32, plain: bool) -> Result<String, DecodeError> {
        frame::json_line(r, size, plain)
    }
    const LINES: bool = true;
    fn from_line(line: &str) -> Result<String, DecodeError> {
        Ok(line.to_string())
    }
}

/// order) and its error list.
pub(crate) fn decode_batch<T: Decoded>(
    n: usize,
    bytes: &[u8],
    errors: impl Iterator<Item = (usize, Error)>,
) -> Result<Vec<Result<T>>> {
    let errs = by_index(n, errors);
    let bad = |m: &str| Error::Internal(format!("batch output: {m}"));
    let mut r = Reader::new(bytes).map_err(bad)?;
    let plain = T::USES_PLAIN && frame::plain_text(bytes);
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

/// A batch call's output decoded as `T`, from a frame or from JSON lines,
/// each record's error naming the record as `named(its index in the batch)`.
pub(super) fn decode_output<T: Decoded>(n: usize, out: BatchOut, named: fn(usize) -> usize) -> Result<Vec<Result<T>>> {
    match out {
        BatchOut::Frame(out) => decode_batch_output(n, out, named),
        BatchOut::Lines(out) => {
            // The guest's text is checked, not trusted.
            let text = crate::record::scan::utf8(&out.text).map_err(|e| Error::Internal(format!("batch lines: {e}")))?;
            decode_lines(n, text, &out.ends, record_errors(out.errors, named))
        }
    }
}

/// An `evaluate-batch` output decoded, each record's error naming the record
/// as `named(its index in the batch)`.
pub(super) fn decode_batch_output<T: Decoded>(
    n: usize,
    out: ev::BatchOutput,
    named: fn(usize) -> usize,
) -> Result<Vec<Result<T>>> {
    decode_batch(n, &out.records, record_errors(out.errors, named))
}

/// A batch's record errors by their index in the batch, each naming its
/// record as `named(that index)`.
fn record_errors(errors: Vec<ev::RecordError>, named: fn(usize) -> usize) -> impl Iterator<Item = (usize, Error)> {
    errors.into_iter().map(move |e| (e.index as usize, record_error(named(e.index as usize), e.error)))
}

/// The record of a one-record output frame, which it keeps: its fields are
/// read from the frame when first asked for, and its JSON line is rendered
/// straight from it (see [`frame::record_keeping_frame`], which checks the
/// frame whole first). The copy of the frame's bytes costs less than
/// building the fields, which an output that is only written out, or
/// handed on, never needs.
pub(super) fn decode_record(frame: &[u8]) -> Result<Record> {
    output_record(frame.into())
}

/// [`decode_record`] of an output frame the host already owns.
pub(super) fn output_record(frame: Box<[u8]>) -> Result<Record> {
    frame::record_keeping_frame(frame).map_err(|m| Error::Internal(format!("the guest's output record: {m}")))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let frame = frame::encode_record(&rec);
            assert_eq!(frame::plain_text(&frame), plain, "{text}");
            let lines = decode_batch::<String>(1, &frame, std::iter::empty()).unwrap();
            assert_eq!(lines[0].as_ref().unwrap(), &rec.to_json(), "{text}");
        }
        // A frame cut short is not plain (the reader refuses it).
        assert!(!frame::plain_text(&[1, 0, 0, 0, 0, 0, 0, 0, 200, 0, 0, 0]));
        assert!(!frame::plain_text(&[1, 0]));
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
}
