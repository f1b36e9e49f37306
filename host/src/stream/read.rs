//! Reading input: JSONL and CSV text into numbered [`Input`]s, each line
//! bounded, a bad line an error of its own.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::BufRead;

use omlet_lang::value::{Field, Value};

use super::Input;
use crate::error::Limit;
use crate::record::chunk::ChunkWriter;
use crate::record::{self, Record};
use crate::{Error, Result};

/// The text form of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line; blank lines are not records.
    Jsonl,
    /// Comma-separated values with a header line. Every value is `chars`
    /// (convert with typed targets in the rule); an empty cell is an absent
    /// field, unless [`ReadLimits::csv_empty_cell`] says otherwise.
    Csv,
}

impl Format {
    /// `.csv` files are CSV; everything else is JSONL.
    pub fn of_path(path: &str) -> Format {
        if path.to_ascii_lowercase().ends_with(".csv") { Format::Csv } else { Format::Jsonl }
    }
}

/// Bounds of the readers: what one input line or record may take.
#[derive(Debug, Clone)]
pub struct ReadLimits {
    /// Most bytes of one input line (default 16 MiB). A longer line is one
    /// error record (its first bytes kept to name it); reading goes on at the
    /// next line.
    pub max_line_bytes: usize,
    /// Most lines one CSV record may span inside a quoted field (default 64).
    /// A record whose quote is still open past that is one error, and reading
    /// starts again at the line after its first
    /// (docs/decisions/0006-reading-input.md).
    pub csv_max_record_lines: usize,
    /// Not a bound: what an empty CSV cell becomes (default
    /// [`EmptyCell::Absent`], so that a rule's default body applies to it).
    pub csv_empty_cell: EmptyCell,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits { max_line_bytes: 16 << 20, csv_max_record_lines: 64, csv_empty_cell: EmptyCell::Absent }
    }
}

/// What an empty CSV cell (`a,,c`, or `a,"",c`) becomes in its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmptyCell {
    /// No field: `read(b) { _ : chars(none) }` takes its default. A log
    /// exporter writes an empty cell for a value it does not have.
    Absent,
    /// A field holding the empty string `""`.
    Text,
}

/// How much of a rejected line is kept to name it in its error.
pub(super) const RAW_PREFIX: usize = 256;

/// Reads records from `reader` in `format`, lazily, with the default
/// [`ReadLimits`].
pub fn read(reader: Box<dyn BufRead + Send>, format: Format) -> Inputs {
    read_with(reader, format, &ReadLimits::default())
}

/// Reads records from `reader` in `format`, lazily. Every line is accounted
/// for: a line that is too long, or not UTF-8, or not a record becomes an
/// [`Input`] whose `record` is the error, and reading goes on. Only a failure
/// to read at all (an I/O error) is an `Err` item.
///
/// A read of `reader` that fails with [`std::io::ErrorKind::WouldBlock`] is
/// no failure: it says the source is idle ([`Pipe`](super::Pipe) says so
/// after its idle time), and a [`run`](super::run()) hands over the records
/// read so far; a line read in part is kept and read on.
pub fn read_with(reader: Box<dyn BufRead + Send>, format: Format, limits: &ReadLimits) -> Inputs {
    let lines = Lines { reader, max: limits.max_line_bytes, number: 0, failed: false, partial: Partial::default() };
    Inputs::of(match format {
        Format::Jsonl => Source::Jsonl(Jsonl { lines, number: 0, chunk: None }),
        Format::Csv => Source::Csv(Box::new(Csv {
            lines,
            pending: VecDeque::new(),
            split: VecDeque::new(),
            header: None,
            ended: false,
            number: 0,
            max_lines: limits.csv_max_record_lines.max(1),
            max_bytes: limits.max_line_bytes,
            empty: limits.csv_empty_cell,
            scan: CsvScan::default(),
        })),
    })
}

/// A run's input: records as they are read, numbered, and the moments their
/// source went idle. [`read`] and [`read_with`] give one; any iterator of
/// inputs becomes one with `into()` (a host's own source, say).
///
/// It owns what reading needs from one record to the next: for JSONL read
/// by a [`run`](super::run()), the frame that the records of each chunk are
/// written into (`record::chunk`). Iterate it (`for input in inputs`) to
/// read it outside a run.
pub struct Inputs {
    source: Source,
    /// Applied to every input, in order ([`Inputs::map`]).
    maps: Vec<InputMap>,
}

/// A function of [`Inputs::map`].
type InputMap = Box<dyn FnMut(Result<Input>) -> Result<Input> + Send>;

/// Where an [`Inputs`] reads from.
enum Source {
    Jsonl(Jsonl),
    Csv(Box<Csv>),
    /// Inputs a host made itself.
    Other(Box<dyn Iterator<Item = Result<Input>> + Send>),
}

/// What reading an [`Inputs`] gives next.
pub(super) enum Event {
    /// The next input.
    Input(Result<Input>),
    /// The source is idle: the records read so far may be handed over.
    Idle,
}

impl Inputs {
    fn of(source: Source) -> Inputs {
        Inputs { source, maps: Vec::new() }
    }

    /// These inputs with `f` applied to each, as they are read (to retype
    /// records, say). Unlike `Iterator::map`, the result is still
    /// [`Inputs`], which a [`run`](super::run()) reads at full speed.
    pub fn map(mut self, f: impl FnMut(Result<Input>) -> Result<Input> + Send + 'static) -> Inputs {
        self.maps.push(Box::new(f));
        self
    }

    /// The next input, or word that the source is idle.
    pub(super) fn next_event(&mut self) -> Option<Event> {
        let event = match &mut self.source {
            Source::Jsonl(j) => j.next_event(),
            Source::Csv(c) => c.next_event(),
            Source::Other(i) => i.next().map(Event::Input),
        }?;
        Some(match event {
            Event::Input(mut input) => {
                for f in &mut self.maps {
                    input = f(input);
                }
                Event::Input(input)
            }
            Event::Idle => Event::Idle,
        })
    }

    /// From now on, JSONL records are written into one frame per chunk, a
    /// chunk ending at each [`Inputs::end_chunk`] (`record::chunk`).
    pub(super) fn chunk_frames(&mut self) {
        if let Source::Jsonl(j) = &mut self.source {
            j.chunk.get_or_insert_with(ChunkWriter::new);
        }
    }

    /// Ends the chunk being filled, before its records are handed over.
    pub(super) fn end_chunk(&mut self) {
        if let Source::Jsonl(Jsonl { chunk: Some(chunk), .. }) = &mut self.source {
            chunk.seal();
        }
    }
}

impl<I: Iterator<Item = Result<Input>> + Send + 'static> From<I> for Inputs {
    fn from(inputs: I) -> Inputs {
        Inputs::of(Source::Other(Box::new(inputs)))
    }
}

impl IntoIterator for Inputs {
    type Item = Result<Input>;
    type IntoIter = InputsIter;

    fn into_iter(self) -> InputsIter {
        InputsIter(self)
    }
}

/// The inputs of an [`Inputs`], one after the other (idle moments skipped).
pub struct InputsIter(Inputs);

impl Iterator for InputsIter {
    type Item = Result<Input>;

    fn next(&mut self) -> Option<Result<Input>> {
        loop {
            if let Event::Input(input) = self.0.next_event()? {
                return Some(input);
            }
        }
    }
}

/// One physical line of input.
pub(super) enum Line {
    Text(String),
    /// Longer than the limit: its length and first bytes.
    TooLong(usize, String),
    /// Not UTF-8: where the first bad byte is, and the line made readable.
    NotUtf8(usize, String),
}

impl Line {
    pub(super) fn raw(&self) -> &str {
        match self {
            Line::Text(t) | Line::TooLong(_, t) | Line::NotUtf8(_, t) => t,
        }
    }
}

/// Lines of bytes, each bounded: never more than `max` bytes held for one.
pub(super) struct Lines {
    reader: Box<dyn BufRead + Send>,
    max: usize,
    number: u64,
    failed: bool,
    /// The line being read, kept across an idle source's `WouldBlock`.
    partial: Partial,
}

/// A line read in part: its bytes kept (at most `max`, then its first
/// bytes), how long it is so far, and whether any byte came.
#[derive(Default)]
pub(super) struct Partial {
    buf: Vec<u8>,
    total: usize,
    any: bool,
}

/// Whether a read error only says that the source is idle (see [`read_with`]).
pub(super) fn is_idle(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock
}

impl Iterator for Lines {
    /// A line, or a read error: one that [`is_idle`] keeps the line read so
    /// far and can be followed by more lines; any other ends the lines.
    type Item = std::io::Result<(u64, Line)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let avail = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if is_idle(&e) => return Some(Err(e)),
                // A stop left this line unfinished: it is no record.
                Err(e) if super::pipe::is_cut(&e) => {
                    self.failed = true;
                    self.partial = Partial::default();
                    return None;
                }
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            };
            let p = &mut self.partial;
            if avail.is_empty() {
                if !p.any {
                    return None;
                }
                break;
            }
            p.any = true;
            let (len, end) = match memchr::memchr(b'\n', avail) {
                Some(i) => (i, true),
                None => (avail.len(), false),
            };
            // Past the limit only the first bytes are kept, to name the line.
            let keep = if p.total + len <= self.max { len } else { RAW_PREFIX.saturating_sub(p.buf.len()).min(len) };
            p.buf.extend_from_slice(&avail[..keep]);
            p.total += len;
            self.reader.consume(len + end as usize);
            if end {
                break;
            }
        }
        let Partial { mut buf, total, .. } = std::mem::take(&mut self.partial);
        self.number += 1;
        if self.number == 1 && buf.starts_with(b"\xEF\xBB\xBF") {
            // A byte-order mark opens some files written on Windows: it is
            // not part of the first record.
            buf.drain(..3);
        }
        if total > self.max {
            return Some(Ok((self.number, Line::TooLong(total, String::from_utf8_lossy(&buf).into_owned()))));
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        Some(Ok((self.number, text_of(buf))))
    }
}

/// A line's bytes as text ([`crate::record::scan::utf8`]: checked once),
/// or where they stop being UTF-8.
fn text_of(buf: Vec<u8>) -> Line {
    match crate::record::scan::utf8(&buf) {
        // SAFETY: `utf8` has just found `buf` to be UTF-8.
        Ok(_) => Line::Text(unsafe { String::from_utf8_unchecked(buf) }),
        Err(e) => Line::NotUtf8(e.valid_up_to(), String::from_utf8_lossy(&buf).into_owned()),
    }
}

/// Why a line that is not text is no record.
pub(super) fn line_error(line: &Line, at: u64, max: usize) -> Option<Error> {
    match line {
        Line::Text(_) => None,
        Line::TooLong(n, _) => Some(Error::limit(Limit::LineBytes, format!("line {at} takes {n} bytes, more than {max}"))),
        Line::NotUtf8(b, _) => Some(bad_line(at, format!("not UTF-8: an invalid byte at byte {} of the line", b + 1))),
    }
}

/// The error of an input line that holds no record.
pub(super) fn bad_line(at: u64, message: String) -> Error {
    Error::Input { what: format!("line {at}"), message }
}

/// JSONL records over bounded lines: a blank line is none, any other line
/// one record or one error.
pub(super) struct Jsonl {
    lines: Lines,
    number: u64,
    /// Where records go when a run reads them (`Inputs::chunk_frames`);
    /// else each into a frame of its own.
    chunk: Option<ChunkWriter>,
}

impl Jsonl {
    fn next_event(&mut self) -> Option<Event> {
        loop {
            let (at, line) = match self.lines.next()? {
                Ok(l) => l,
                Err(e) if is_idle(&e) => return Some(Event::Idle),
                Err(e) => return Some(Event::Input(Err(Error::io("input", e)))),
            };
            if let Line::Text(t) = &line
                && blank(t)
            {
                continue;
            }
            self.number += 1;
            let record = match line_error(&line, at, self.lines.max) {
                Some(e) => Err(e),
                None => match &mut self.chunk {
                    Some(chunk) => chunk.read_line(line.raw()),
                    None => record::from_json_line(line.raw()),
                }
                .map_err(|e| bad_line(at, e.to_string())),
            };
            let raw = match line {
                Line::Text(t) | Line::TooLong(_, t) | Line::NotUtf8(_, t) => t,
            };
            return Some(Event::Input(Ok(Input { number: self.number, line: at, raw, record })));
        }
    }
}

/// CSV records over bounded lines. A record may span lines inside a quoted
/// field, up to `max_lines` lines and `max_bytes` bytes; a quote still open
/// past that (or at the end of input) makes the record's first line one
/// error, and the lines after it are read again as records of their own.
///
/// Quotes are read as the `csv` crate reads them (through `csv-core`, the
/// crate's own state machine): a `"` opens a quoted field only at the start
/// of a field, so `1,5" screen` is one record with a quote in its value. A
/// bare CR ends a record, as it does for the crate: a line holding one is
/// several records, each handed over (numbered by the line they are on).
pub(super) struct Csv {
    lines: Lines,
    /// Lines read ahead and given back after an unbalanced quote.
    pending: VecDeque<(u64, Line)>,
    /// Records of one text after its first (the text held a bare CR).
    split: VecDeque<(u64, Parsed)>,
    /// The header once read: each column's slot among the record's fields
    /// (a repeated name shares its first column's slot), and the names.
    header: Option<Header>,
    /// The header could not be read: the run has ended with that error.
    ended: bool,
    number: u64,
    max_lines: usize,
    max_bytes: usize,
    empty: EmptyCell,
    scan: CsvScan,
}

/// The columns of a CSV header.
pub(super) struct Header {
    names: Vec<String>,
    /// For each column, the index in `names` of its field.
    slots: Vec<usize>,
}

/// One record of a CSV text: its fields, and the text they came from.
pub(super) type Parsed = (Vec<String>, String);

/// A CSV text's records, or why its lines are no record and its first line.
pub(super) type Texts = std::result::Result<Vec<Parsed>, (Error, String)>;

/// One CSV record, or why its lines are no record and its first line.
pub(super) type OneRecord = std::result::Result<Parsed, (Error, String)>;

/// What [`CsvScan::scan`] found in a text.
pub(super) enum Scan {
    /// Whole records, each with its fields and raw text.
    Records(Vec<Parsed>),
    /// A quoted field is still open at the end of the text.
    Open,
    /// The record's bytes are not text (cannot happen for text input, kept
    /// as an error rather than a panic).
    NotText,
}

/// `csv-core`'s reader, and buffers kept from one record to the next.
#[derive(Default)]
pub(super) struct CsvScan {
    out: Vec<u8>,
    ends: Vec<usize>,
    input: Vec<u8>,
}

impl CsvScan {
    /// Reads `text` as CSV the way the `csv` crate does: its records, or
    /// that a quoted field is still open at its end.
    pub(super) fn scan(&mut self, text: &str) -> Scan {
        // A line end after the text closes its last record, unless a quoted
        // field is still open, which then holds it.
        self.input.clear();
        self.input.extend_from_slice(text.as_bytes());
        self.input.push(b'\n');
        self.out.clear();
        self.out.resize(self.input.len(), 0);
        self.ends.clear();
        self.ends.resize(self.input.len() + 1, 0);
        let mut reader = csv_core::Reader::new();
        let (mut at, mut records) = (0usize, Vec::new());
        loop {
            let (result, nin, _, nend) = reader.read_record(&self.input[at..], &mut self.out, &mut self.ends);
            let start = at;
            at += nin;
            match result {
                csv_core::ReadRecordResult::Record => {
                    let mut fields = Vec::with_capacity(nend);
                    let mut from = 0;
                    for &end in &self.ends[..nend] {
                        match std::str::from_utf8(&self.out[from..end]) {
                            Ok(f) => fields.push(f.to_string()),
                            Err(_) => return Scan::NotText,
                        }
                        from = end;
                    }
                    let raw = text.get(start.min(text.len())..(at - 1).min(text.len())).unwrap_or("");
                    records.push((fields, raw.trim_start_matches(['\r', '\n']).to_string()));
                }
                csv_core::ReadRecordResult::InputEmpty => {
                    // All taken. A record still in progress can only be a
                    // quoted field holding the final line end.
                    let (last, _, _, _) = reader.read_record(&[], &mut self.out, &mut self.ends);
                    return match last {
                        csv_core::ReadRecordResult::Record => Scan::Open,
                        _ => Scan::Records(records),
                    };
                }
                csv_core::ReadRecordResult::End => return Scan::Records(records),
                // The buffers hold the whole text: they cannot fill.
                csv_core::ReadRecordResult::OutputFull | csv_core::ReadRecordResult::OutputEndsFull => {
                    return Scan::NotText;
                }
            }
        }
    }
}

/// Whether a line holds nothing to read: empty, or spaces and tabs only
/// (a line of other white space, such as NBSP or a form feed, is a record,
/// and an error when it is no record).
pub(super) fn blank(text: &str) -> bool {
    text.bytes().all(|b| b == b' ' || b == b'\t')
}

impl Csv {
    /// The next line. An idle source is said (an error that [`is_idle`])
    /// only at a `boundary` between records, and waited out inside one.
    pub(super) fn next_line(&mut self, boundary: bool) -> Option<std::io::Result<(u64, Line)>> {
        if let Some(l) = self.pending.pop_front() {
            return Some(Ok(l));
        }
        loop {
            match self.lines.next() {
                Some(Err(e)) if is_idle(&e) && !boundary => continue,
                other => return other,
            }
        }
    }

    /// The next text's records (lines joined while a quoted field is open),
    /// or a line that is no record.
    pub(super) fn next_text(&mut self) -> Option<std::io::Result<(u64, Texts)>> {
        loop {
            let (at, first) = match self.next_line(self.header.is_some())? {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            if let Some(e) = line_error(&first, at, self.lines.max) {
                return Some(Ok((at, Err((e, first.raw().to_string())))));
            }
            let Line::Text(mut text) = first else { unreachable!("line_error covers the other kinds") };
            if blank(&text) {
                continue;
            }
            let mut taken: Vec<(u64, Line)> = Vec::new();
            loop {
                match self.scan.scan(&text) {
                    Scan::Records(records) if records.is_empty() => break,
                    Scan::Records(records) => return Some(Ok((at, Ok(records)))),
                    Scan::NotText => {
                        let first = text.split('\n').next().unwrap_or("").to_string();
                        return Some(Ok((at, Err((bad_line(at, "a CSV record that is not text".into()), first)))));
                    }
                    Scan::Open => {}
                }
                let next =
                    if taken.len() + 1 < self.max_lines && text.len() <= self.max_bytes { self.next_line(false) } else { None };
                match next {
                    Some(Ok((n, Line::Text(t)))) => {
                        text.push('\n');
                        text.push_str(&t);
                        taken.push((n, Line::Text(t)));
                    }
                    Some(Err(e)) => return Some(Err(e)),
                    other => {
                        // The quote never closes within bounds: the first line
                        // is the error; the lines after it are read again.
                        if let Some(Ok(l)) = other {
                            taken.push(l);
                        }
                        let last = taken.last().map_or(at, |l| l.0);
                        for l in taken.into_iter().rev() {
                            self.pending.push_front(l);
                        }
                        let first = text.split('\n').next().unwrap_or("").to_string();
                        let message = format!(
                            "unbalanced quote: a quoted field opened on line {at} is still open at line {last} (a record \
                             may span at most {} lines); the lines after line {at} are read again as records",
                            self.max_lines
                        );
                        return Some(Ok((at, Err((bad_line(at, message), first)))));
                    }
                }
            }
        }
    }

    /// The next record (one of a text's records, the others kept for the
    /// calls after), or lines that are no record.
    pub(super) fn next_record(&mut self) -> Option<std::io::Result<(u64, OneRecord)>> {
        if let Some((at, r)) = self.split.pop_front() {
            return Some(Ok((at, Ok(r))));
        }
        let (at, texts) = match self.next_text()? {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok((
            at,
            texts.map(|records| {
                let mut records = records.into_iter();
                let first = records.next().unwrap_or_default();
                self.split.extend(records.map(|r| (at, r)));
                first
            }),
        )))
    }

    /// Reads the header: its names, each repeated name sharing the slot of
    /// its first column (its last cell gives the value, as a repeated JSON
    /// key's last value does).
    pub(super) fn read_header(&mut self) -> Option<Result<()>> {
        let names = match self.next_record()? {
            Ok((_, Ok((names, _)))) => names,
            Ok((_, Err((e, _)))) => return Some(Err(e)),
            Err(e) => return Some(Err(Error::io("input", e))),
        };
        let (mut unique, mut slots) = (Vec::<String>::new(), Vec::with_capacity(names.len()));
        for name in names {
            match unique.iter().position(|n| *n == name) {
                Some(slot) => slots.push(slot),
                None => {
                    slots.push(unique.len());
                    unique.push(name);
                }
            }
        }
        self.header = Some(Header { names: unique, slots });
        Some(Ok(()))
    }

    pub(super) fn record(&self, header: &Header, values: Vec<String>) -> Record {
        let mut cells: Vec<Option<String>> = vec![None; header.names.len()];
        for (&slot, v) in header.slots.iter().zip(values) {
            cells[slot] = if v.is_empty() && self.empty == EmptyCell::Absent { None } else { Some(v) };
        }
        Record::from_fields(
            header
                .names
                .iter()
                .zip(cells)
                .filter_map(|(n, v)| Some(Field::new(Cow::Owned(n.clone()), Value::Chars(Cow::Owned(v?)))))
                .collect(),
        )
    }
}

impl Csv {
    fn next_event(&mut self) -> Option<Event> {
        self.next_input().map(|r| match r {
            Err(Some(e)) => Event::Input(Err(e)),
            Err(None) => Event::Idle,
            Ok(input) => Event::Input(Ok(input)),
        })
    }

    /// The next input, an error, or `Err(None)` when the source is idle.
    fn next_input(&mut self) -> Option<std::result::Result<Input, Option<Error>>> {
        if self.ended {
            return None;
        }
        if self.header.is_none() {
            // A header that cannot be read ends the run with one error: every
            // row would fail the same way (an error line per row).
            if let Err(e) = self.read_header()? {
                self.ended = true;
                return Some(Err(Some(match e {
                    Error::Input { what, message } => {
                        Error::Input { what, message: format!("the CSV header cannot be read: {message}") }
                    }
                    Error::Limit { limit, message } => {
                        Error::Limit { limit, message: format!("the CSV header cannot be read: {message}") }
                    }
                    e => e,
                })));
            }
        }
        let (at, parsed) = match self.next_record()? {
            Ok(r) => r,
            Err(e) if is_idle(&e) => return Some(Err(None)),
            Err(e) => return Some(Err(Some(Error::io("input", e)))),
        };
        let (raw, record) = match parsed {
            Err((e, raw)) => (raw, Err(e)),
            Ok((values, text)) => {
                let Some(header) = self.header.as_ref() else {
                    return Some(Err(Some(Error::Internal("the CSV header was not read".into()))));
                };
                let record = if values.len() != header.slots.len() {
                    Err(bad_line(at, format!("{} values for {} columns", values.len(), header.slots.len())))
                } else {
                    Ok(self.record(header, values))
                };
                let raw = if record.is_ok() { text } else { text.chars().take(4096).collect() };
                (raw, record)
            }
        };
        self.number += 1;
        Some(Ok(Input { number: self.number, line: at, raw, record }))
    }
}
