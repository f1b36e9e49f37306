//! Streams of records through a rule: reading JSONL or CSV input, routing
//! each record to its model, evaluating batches with several in flight, and
//! giving back exactly one outcome per input record, in input order.
//!
//! This is what `omlet run` is made of; a host that reads files can use it
//! as it is.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{BufRead, Read};

use std::sync::Arc;

use omlet_lang::value::{Field, Value};

use crate::error::Limit;
use crate::record::{self, Record};
use crate::runtime::{Route, Rule};
use crate::wire::Decoded;
use crate::{Error, Result};

mod live;
pub use live::{LiveRule, Watching};

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

/// One input record as read: where it stands and what it says.
#[derive(Debug)]
pub struct Input {
    /// 1-based position among the input's records.
    pub number: u64,
    /// 1-based line where the record starts.
    pub line: u64,
    /// The record as written (a JSONL line; a CSV row, re-joined).
    pub raw: String,
    /// The record, or why it could not be read.
    /// An unreadable record is an [`Error::Input`] naming its line, or an
    /// [`Error::Limit`] for a line over [`ReadLimits::max_line_bytes`].
    pub record: std::result::Result<Record, Error>,
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
    /// starts again at the line after its first (docs/decisions.md).
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

/// Most bytes of input in one guest call, whatever the batch size: a batch
/// closes at `batch` records or at this many bytes of raw input.
pub const MAX_BATCH_BYTES: usize = 4 << 20;

/// How much of a rejected line is kept to name it in its error.
const RAW_PREFIX: usize = 256;

/// Reads records from `reader` in `format`, lazily, with the default
/// [`ReadLimits`].
pub fn read(reader: Box<dyn BufRead + Send>, format: Format) -> Box<dyn Iterator<Item = Result<Input>> + Send> {
    read_with(reader, format, &ReadLimits::default())
}

/// Reads records from `reader` in `format`, lazily. Every line is accounted
/// for: a line that is too long, or not UTF-8, or not a record becomes an
/// [`Input`] whose `record` is the error, and reading goes on. Only a failure
/// to read at all (an I/O error) is an `Err` item.
pub fn read_with(
    reader: Box<dyn BufRead + Send>,
    format: Format,
    limits: &ReadLimits,
) -> Box<dyn Iterator<Item = Result<Input>> + Send> {
    let lines = Lines { reader, max: limits.max_line_bytes, number: 0, failed: false };
    match format {
        Format::Jsonl => Box::new(jsonl(lines)),
        Format::Csv => Box::new(Csv {
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
        }),
    }
}

/// One physical line of input.
enum Line {
    Text(String),
    /// Longer than the limit: its length and first bytes.
    TooLong(usize, String),
    /// Not UTF-8: where the first bad byte is, and the line made readable.
    NotUtf8(usize, String),
}

impl Line {
    fn raw(&self) -> &str {
        match self {
            Line::Text(t) | Line::TooLong(_, t) | Line::NotUtf8(_, t) => t,
        }
    }
}

/// Lines of bytes, each bounded: never more than `max` bytes held for one.
struct Lines {
    reader: Box<dyn BufRead + Send>,
    max: usize,
    number: u64,
    failed: bool,
}

impl Iterator for Lines {
    type Item = std::io::Result<(u64, Line)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let (mut buf, mut total, mut any) = (Vec::new(), 0usize, false);
        loop {
            let avail = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            };
            if avail.is_empty() {
                if !any {
                    return None;
                }
                break;
            }
            any = true;
            let (len, end) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (avail.len(), false),
            };
            // Past the limit only the first bytes are kept, to name the line.
            let keep = if total + len <= self.max { len } else { RAW_PREFIX.saturating_sub(buf.len()).min(len) };
            buf.extend_from_slice(&avail[..keep]);
            total += len;
            self.reader.consume(len + end as usize);
            if end {
                break;
            }
        }
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
        Some(Ok((
            self.number,
            match String::from_utf8(buf) {
                Ok(t) => Line::Text(t),
                Err(e) => Line::NotUtf8(e.utf8_error().valid_up_to(), String::from_utf8_lossy(e.as_bytes()).into_owned()),
            },
        )))
    }
}

/// Why a line that is not text is no record.
fn line_error(line: &Line, at: u64, max: usize) -> Option<Error> {
    match line {
        Line::Text(_) => None,
        Line::TooLong(n, _) => Some(Error::limit(Limit::LineBytes, format!("line {at} takes {n} bytes, more than {max}"))),
        Line::NotUtf8(b, _) => Some(bad_line(at, format!("not UTF-8: an invalid byte at byte {} of the line", b + 1))),
    }
}

/// The error of an input line that holds no record.
fn bad_line(at: u64, message: String) -> Error {
    Error::Input { what: format!("line {at}"), message }
}

fn jsonl(lines: Lines) -> impl Iterator<Item = Result<Input>> + Send {
    let max = lines.max;
    let mut number = 0u64;
    lines.filter_map(move |line| {
        let (at, line) = match line {
            Ok(l) => l,
            Err(e) => return Some(Err(Error::io("input", e))),
        };
        if let Line::Text(t) = &line
            && blank(t)
        {
            return None;
        }
        number += 1;
        let record = match line_error(&line, at, max) {
            Some(e) => Err(e),
            None => record::from_json_str(line.raw()).map_err(|m| bad_line(at, m)),
        };
        let raw = match line {
            Line::Text(t) | Line::TooLong(_, t) | Line::NotUtf8(_, t) => t,
        };
        Some(Ok(Input { number, line: at, raw, record }))
    })
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
struct Csv {
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
struct Header {
    names: Vec<String>,
    /// For each column, the index in `names` of its field.
    slots: Vec<usize>,
}

/// One record of a CSV text: its fields, and the text they came from.
type Parsed = (Vec<String>, String);

/// A CSV text's records, or why its lines are no record and its first line.
type Texts = std::result::Result<Vec<Parsed>, (Error, String)>;

/// One CSV record, or why its lines are no record and its first line.
type OneRecord = std::result::Result<Parsed, (Error, String)>;

/// What [`CsvScan::scan`] found in a text.
enum Scan {
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
struct CsvScan {
    out: Vec<u8>,
    ends: Vec<usize>,
    input: Vec<u8>,
}

impl CsvScan {
    /// Reads `text` as CSV the way the `csv` crate does: its records, or
    /// that a quoted field is still open at its end.
    fn scan(&mut self, text: &str) -> Scan {
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
fn blank(text: &str) -> bool {
    text.bytes().all(|b| b == b' ' || b == b'\t')
}

impl Csv {
    fn next_line(&mut self) -> Option<std::io::Result<(u64, Line)>> {
        match self.pending.pop_front() {
            Some(l) => Some(Ok(l)),
            None => self.lines.next(),
        }
    }

    /// The next text's records (lines joined while a quoted field is open),
    /// or a line that is no record.
    fn next_text(&mut self) -> Option<std::io::Result<(u64, Texts)>> {
        loop {
            let (at, first) = match self.next_line()? {
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
                let next = if taken.len() + 1 < self.max_lines && text.len() <= self.max_bytes { self.next_line() } else { None };
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
    fn next_record(&mut self) -> Option<std::io::Result<(u64, OneRecord)>> {
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
    fn read_header(&mut self) -> Option<Result<()>> {
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

    fn record(&self, header: &Header, values: Vec<String>) -> Record {
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

impl Iterator for Csv {
    type Item = Result<Input>;

    fn next(&mut self) -> Option<Result<Input>> {
        if self.ended {
            return None;
        }
        if self.header.is_none() {
            // A header that cannot be read ends the run with one error: every
            // row would fail the same way (an error line per row).
            if let Err(e) = self.read_header()? {
                self.ended = true;
                return Some(Err(match e {
                    Error::Input { what, message } => {
                        Error::Input { what, message: format!("the CSV header cannot be read: {message}") }
                    }
                    Error::Limit { limit, message } => {
                        Error::Limit { limit, message: format!("the CSV header cannot be read: {message}") }
                    }
                    e => e,
                }));
            }
        }
        let (at, parsed) = match self.next_record()? {
            Ok(r) => r,
            Err(e) => return Some(Err(Error::io("input", e))),
        };
        let (raw, record) = match parsed {
            Err((e, raw)) => (raw, Err(e)),
            Ok((values, text)) => {
                let Some(header) = self.header.as_ref() else {
                    return Some(Err(Error::Internal("the CSV header was not read".into())));
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

/// How records find their model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteBy {
    /// The rule's only model.
    Only,
    /// Every record to the model of this rule path.
    Path(String),
    /// Every record to this model.
    Model(String),
    /// Each record by the rule path in this field (which stays in the record).
    Field(String),
}

impl RouteBy {
    /// The library's route for it.
    pub fn route(&self) -> Route<'_> {
        match self {
            RouteBy::Only => Route::Only,
            RouteBy::Path(p) => Route::Path(p),
            RouteBy::Model(m) => Route::Model(m),
            RouteBy::Field(f) => Route::Field(f),
        }
    }
}

/// What became of one input record: `T` is its output, a [`Record`] from
/// [`run`] or its JSON line from [`run_json`].
#[derive(Debug)]
pub enum Outcome<T = Record> {
    /// The output: the record ([`run`]), or its JSON line ([`run_json`]).
    Ok(T),
    /// No model took the record: an [`Error::Unrouted`].
    Unrouted(Error),
    /// The record could not be read (the error of [`Input::record`]), or its
    /// evaluation failed (a lookup, a limit, a trap, …).
    Failed(Error),
}

/// One input record and its outcome.
pub struct Done<T = Record> {
    /// The record as read, with its number and raw text.
    pub input: Input,
    /// What became of it.
    pub outcome: Outcome<T>,
    /// No other outcome is ready after this one for now (the input is idle,
    /// or slower than the evaluation): a sink that buffers its writes
    /// flushes them here, so that a trickle of records is not held back.
    pub idle: bool,
}

/// Evaluates `inputs` through `rule`, `batch` records (and at most
/// [`MAX_BATCH_BYTES`] of input) per guest call and up to `concurrency` calls
/// in flight, handing every record's outcome to `sink` in input order.
///
/// Reading (and so parsing) runs on a thread of its own, `omlet-read`, a few
/// chunks ahead of the evaluation (at most `concurrency` chunks wait for it,
/// besides the one it is filling), so that it overlaps with the evaluating
/// tasks and with `sink`, which runs on the caller's task.
///
/// Every record read gets exactly one outcome, whatever happens to its call:
/// a trap, a limit, even a failed task, is that record's `Failed` outcome. The
/// run stops early only when the input cannot be read, the reading thread
/// fails (an [`Error::Internal`]), or `sink` fails:
/// - when the input cannot be read, `sink` first gets the outcome of every
///   record read before that, and the run returns the read error;
/// - when `sink` fails, the run returns its error at once: the records read
///   ahead get no outcome, and the reading thread stops when it next hands
///   over a chunk (so an input that blocks, such as standard input, may keep
///   it until the process ends). Dropping the run's future does the same.
pub async fn run(
    rule: impl Into<LiveRule>,
    inputs: impl Iterator<Item = Result<Input>> + Send + 'static,
    route: RouteBy,
    batch: usize,
    concurrency: usize,
    sink: impl FnMut(Done) -> Result<()>,
) -> Result<()> {
    run_as(rule, inputs, route, batch, concurrency, sink).await
}

/// [`run`], handing over each output as its JSON line (without the line
/// end): the text [`Record::to_json`] gives for the record [`run`] would hand
/// over, rendered straight from the guest's output, so that no [`Record`] is
/// built and freed for a record that is only written out. `omlet run` writes
/// its output this way.
pub async fn run_json(
    rule: impl Into<LiveRule>,
    inputs: impl Iterator<Item = Result<Input>> + Send + 'static,
    route: RouteBy,
    batch: usize,
    concurrency: usize,
    sink: impl FnMut(Done<String>) -> Result<()>,
) -> Result<()> {
    run_as(rule, inputs, route, batch, concurrency, sink).await
}

/// [`run`] with outputs decoded as `T`.
async fn run_as<T: Decoded>(
    rule: impl Into<LiveRule>,
    inputs: impl Iterator<Item = Result<Input>> + Send + 'static,
    route: RouteBy,
    batch: usize,
    concurrency: usize,
    mut sink: impl FnMut(Done<T>) -> Result<()>,
) -> Result<()> {
    type Task<T> = (Vec<(u64, u64)>, tokio::task::JoinHandle<Vec<Done<T>>>);
    let concurrency = concurrency.max(1);
    let route = Arc::new(route);
    let rule: LiveRule = rule.into();
    let mut chunks = read_ahead(inputs, batch.max(1), concurrency)?;
    let mut inflight: VecDeque<Task<T>> = VecDeque::new();
    let (mut ended, mut failure) = (false, None);
    // What the loop waits for next.
    enum Next<T> {
        Chunk(Option<Chunk>),
        Done(std::result::Result<Vec<Done<T>>, tokio::task::JoinError>),
    }
    loop {
        // A chunk is taken as soon as it is handed over while there is room,
        // and the first task's outcomes as soon as they are ready: waiting
        // for the one would hold back the other (a partial chunk handed over
        // when the input went idle must not wait for more chunks).
        let room = !ended && inflight.len() < concurrency;
        let next = match (room, inflight.front_mut()) {
            (true, None) => Next::Chunk(chunks.recv().await),
            (true, Some((_, front))) => tokio::select! {
                biased;
                c = chunks.recv() => Next::Chunk(c),
                r = front => Next::Done(r),
            },
            (false, Some((_, front))) => Next::Done(front.await),
            (false, None) => {
                return match failure {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
            }
        };
        match next {
            Next::Done(r) => {
                let names = inflight.pop_front().map(|t| t.0).unwrap_or_default();
                let idle = inflight.is_empty();
                hand_over(names, r, idle, &mut sink)?;
            }
            Next::Chunk(Some(Chunk::Records(work))) => {
                // The rule current as the batch starts: a swap waits for no one.
                let (rule, route) = (rule.current(), route.clone());
                let names = work.iter().map(|i| (i.number, i.line)).collect();
                inflight.push_back((names, tokio::spawn(async move { evaluate_chunk(&rule, &route, work).await })));
            }
            Next::Chunk(Some(Chunk::Failed(e))) => {
                failure = Some(e);
                ended = true;
            }
            Next::Chunk(Some(Chunk::End)) => ended = true,
            // The thread is gone without saying the input ended: it
            // panicked, and the records it held are lost with it.
            Next::Chunk(None) => {
                failure = Some(Error::Internal("the input's reading thread failed before the end of the input".into()));
                ended = true;
            }
        }
    }
}

/// Gives a finished task's outcomes to `sink`; the last is marked `idle`
/// when no other task is in flight.
fn hand_over<T>(
    names: Vec<(u64, u64)>,
    result: std::result::Result<Vec<Done<T>>, tokio::task::JoinError>,
    idle: bool,
    sink: &mut impl FnMut(Done<T>) -> Result<()>,
) -> Result<()> {
    let mut done = match result {
        Ok(done) => done,
        // The task's records are gone with it: each still gets its line.
        Err(e) => names
            .into_iter()
            .map(|(number, line)| Done {
                input: Input { number, line, raw: String::new(), record: Err(task_failed(&e)) },
                outcome: Outcome::Failed(task_failed(&e)),
                idle: false,
            })
            .collect(),
    };
    if let Some(last) = done.last_mut() {
        last.idle = idle;
    }
    for d in done {
        sink(d)?;
    }
    Ok(())
}

/// What the reading thread hands over.
enum Chunk {
    /// The next records, in order.
    Records(Vec<Input>),
    /// The input could not be read; nothing follows.
    Failed(Error),
    /// The input ended; nothing follows.
    End,
}

/// Chunks of `inputs` (`batch` records, or [`MAX_BATCH_BYTES`] of input), read
/// on a thread of their own, at most `ahead` of them waiting. The last item
/// is [`Chunk::End`] or [`Chunk::Failed`]; a channel that closes without one
/// means the thread failed. The thread ends there, or at its next chunk once
/// the receiver is gone.
///
/// A [`Pipe`] read on this thread that waits [`Pipe`]'s idle time for bytes
/// hands over the records read so far (`idle_hand_over`), so that a producer
/// that stalls does not hold a partial chunk back.
fn read_ahead(
    inputs: impl Iterator<Item = Result<Input>> + Send + 'static,
    batch: usize,
    ahead: usize,
) -> Result<tokio::sync::mpsc::Receiver<Chunk>> {
    // Room for a chunk's records as they come; a huge `batch` reserves no more.
    let room = batch.min(4096);
    let (tx, rx) = tokio::sync::mpsc::channel(ahead);
    std::thread::Builder::new()
        .name("omlet-read".into())
        .spawn(move || {
            let pending = std::rc::Rc::new(std::cell::RefCell::new(Pending { chunk: Vec::with_capacity(room), bytes: 0 }));
            let hook = {
                let (pending, tx) = (pending.clone(), tx.clone());
                move || {
                    if let Ok(mut p) = pending.try_borrow_mut()
                        && !p.chunk.is_empty()
                    {
                        p.bytes = 0;
                        let part = std::mem::replace(&mut p.chunk, Vec::with_capacity(room));
                        // A closed channel: the run is over, and the loop
                        // below finds it so at its next chunk.
                        let _ = tx.blocking_send(Chunk::Records(part));
                    }
                }
            };
            IDLE_HAND_OVER.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
            let mut last = Chunk::End;
            for item in inputs {
                let input = match item {
                    Ok(input) => input,
                    Err(e) => {
                        last = Chunk::Failed(e);
                        break;
                    }
                };
                let full = {
                    let mut p = pending.borrow_mut();
                    p.bytes += input.raw.len();
                    p.chunk.push(input);
                    if p.chunk.len() >= batch || p.bytes >= MAX_BATCH_BYTES {
                        p.bytes = 0;
                        Some(std::mem::replace(&mut p.chunk, Vec::with_capacity(room)))
                    } else {
                        None
                    }
                };
                if let Some(full) = full
                    && tx.blocking_send(Chunk::Records(full)).is_err()
                {
                    return;
                }
            }
            IDLE_HAND_OVER.with(|h| h.borrow_mut().take());
            // The records read since the last full chunk, then how the input ended.
            let rest = std::mem::take(&mut pending.borrow_mut().chunk);
            if !rest.is_empty() && tx.blocking_send(Chunk::Records(rest)).is_err() {
                return;
            }
            let _ = tx.blocking_send(last);
        })
        .map_err(|e| Error::io("the input's reading thread", e))?;
    Ok(rx)
}

/// The chunk the reading thread is filling.
struct Pending {
    chunk: Vec<Input>,
    bytes: usize,
}

thread_local! {
    /// On a reading thread of [`run`], hands over the records read so far.
    static IDLE_HAND_OVER: std::cell::RefCell<Option<Box<dyn FnMut()>>> = const { std::cell::RefCell::new(None) };
}

/// Hands over the records the current thread has read so far, when it is a
/// reading thread of [`run`]; does nothing elsewhere.
fn idle_hand_over() {
    IDLE_HAND_OVER.with(|h| {
        if let Ok(mut h) = h.try_borrow_mut()
            && let Some(f) = h.as_mut()
        {
            f();
        }
    });
}

/// Asks the readers of a run to stop: a [`Pipe`] that sees it ends its
/// input once it has given out the bytes it already read, so that the run
/// finishes the records it read, hands every outcome to its sink and
/// returns. `omlet run` stops this way on SIGTERM and SIGINT.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<std::sync::atomic::AtomicBool>);

impl Stop {
    /// A stop not yet asked for.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Asks for the stop; every clone sees it.
    pub fn stop(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the stop was asked for.
    pub fn is_stopped(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// How long a [`Pipe`] waits for bytes before the records read so far are
/// handed over for evaluation (default of [`Pipe::spawn`]'s `idle`).
pub const DEFAULT_IDLE: std::time::Duration = std::time::Duration::from_millis(100);

/// How often a waiting [`Pipe`] looks at its [`Stop`].
const STOP_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Bytes read from a source on a thread of their own (`omlet-pipe`), so that
/// the reader of a run never blocks for long on a source that stalls (a pipe
/// from `tail -F`, a socket, a terminal):
/// - after `idle` without bytes, the records read so far are handed over for
///   evaluation (when the pipe is read on a [`run`]'s reading thread), so a
///   producer that pauses does not hold a partial chunk back;
/// - once its [`Stop`] is asked for, the pipe gives out the bytes its thread
///   has already read and then ends, as a source at its end does. A line cut
///   there is read as it stands (and is an error line when it is no record).
///
/// At most 4 buffers of 64 KiB wait between the two threads. A source stuck
/// in a read keeps its thread until the process ends.
pub struct Pipe {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    buf: Vec<u8>,
    at: usize,
    stop: Stop,
    idle: std::time::Duration,
}

impl Pipe {
    /// Starts reading `source` on a thread of its own.
    pub fn spawn(mut source: impl Read + Send + 'static, stop: Stop, idle: std::time::Duration) -> Result<Pipe> {
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        std::thread::Builder::new()
            .name("omlet-pipe".into())
            .spawn(move || {
                loop {
                    let mut buf = vec![0u8; 64 << 10];
                    match source.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => {
                            buf.truncate(n);
                            if tx.send(Ok(buf)).is_err() {
                                return;
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
            })
            .map_err(|e| Error::io("the input's pipe thread", e))?;
        Ok(Pipe { rx, buf: Vec::new(), at: 0, stop, idle })
    }
}

impl Read for Pipe {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
        let slice = STOP_POLL.min(self.idle).max(std::time::Duration::from_millis(1));
        let mut waited = std::time::Duration::ZERO;
        let mut handed = false;
        while self.at >= self.buf.len() {
            if self.stop.is_stopped() {
                // What the thread already read is given out; then the end.
                match self.rx.try_recv() {
                    Ok(Ok(b)) => (self.buf, self.at) = (b, 0),
                    Ok(Err(e)) => return Err(e),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => return Ok(0),
                }
                continue;
            }
            match self.rx.recv_timeout(slice) {
                Ok(Ok(b)) => (self.buf, self.at) = (b, 0),
                Ok(Err(e)) => return Err(e),
                Err(RecvTimeoutError::Disconnected) => return Ok(0),
                Err(RecvTimeoutError::Timeout) => {
                    waited += slice;
                    if !handed && waited >= self.idle {
                        handed = true;
                        idle_hand_over();
                    }
                }
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// How much of a failed record's input its error line repeats.
pub const MAX_ERROR_INPUT_CHARS: usize = 4096;

/// An error line's text for a record's error: an input error's own message
/// (the line names the record already), else the error.
pub fn error_message(e: &Error) -> String {
    match e {
        Error::Input { message, .. } => message.clone(),
        e => e.to_string(),
    }
}

/// A record's input as its error line repeats it: the first
/// [`MAX_ERROR_INPUT_CHARS`] characters, then `…`, so that a huge record is
/// named without being copied whole.
pub fn input_excerpt(raw: &str) -> String {
    match raw.char_indices().nth(MAX_ERROR_INPUT_CHARS) {
        Some((at, _)) => format!("{}…", &raw[..at]),
        None => raw.to_string(),
    }
}

/// What a record of a failed evaluation task gets.
fn task_failed(e: &tokio::task::JoinError) -> Error {
    Error::Internal(format!("the evaluation task failed: {e}"))
}

/// Evaluates a chunk of inputs that a host read itself (from a queue, say),
/// as [`run_json`] evaluates each of its chunks: the records in one call (or
/// one per rule path, when `route` is by field), and one outcome per input,
/// in order. An input that holds no record gets its own error back as a
/// `Failed` outcome; an output is its JSON line. The CLI's Kafka worker is
/// built on it.
pub async fn evaluate_json(rule: &Rule, route: &RouteBy, chunk: Vec<Input>) -> Vec<Done<String>> {
    evaluate_chunk(rule, route, chunk).await
}

/// Evaluates one chunk: the records that were read, in one call (or one per
/// rule path, by field: see [`Rule::evaluate_batch_on`]).
async fn evaluate_chunk<T: Decoded>(rule: &Rule, route: &RouteBy, chunk: Vec<Input>) -> Vec<Done<T>> {
    let mut outcomes: Vec<Option<Outcome<T>>> = (0..chunk.len()).map(|_| None).collect();
    let mut positions = Vec::with_capacity(chunk.len());
    for (pos, input) in chunk.iter().enumerate() {
        match &input.record {
            Ok(_) => positions.push(pos),
            Err(e) => outcomes[pos] = Some(Outcome::Failed(e.duplicate())),
        }
    }
    let records: Vec<&Record> = positions.iter().filter_map(|&p| chunk[p].record.as_ref().ok()).collect();
    match rule.evaluate_batch_iter(route.route(), records.iter().copied()).await {
        Ok(results) => {
            for (&pos, result) in positions.iter().zip(results) {
                outcomes[pos] = Some(match result {
                    Ok(rec) => Outcome::Ok(rec),
                    Err(e @ Error::Unrouted { .. }) => Outcome::Unrouted(e),
                    Err(e) => Outcome::Failed(e),
                });
            }
        }
        // No call could be made (no instance): every record says so.
        Err(e) => {
            for &pos in &positions {
                outcomes[pos] = Some(Outcome::Failed(e.duplicate()));
            }
        }
    }
    chunk
        .into_iter()
        .zip(outcomes)
        .map(|(input, o)| Done {
            input,
            outcome: o.unwrap_or_else(|| Outcome::Failed(Error::Internal("the record was not evaluated".into()))),
            idle: false,
        })
        .collect()
}

/// A reader that counts the bytes read through it (for progress).
pub struct Counting<R> {
    inner: R,
    count: Arc<std::sync::atomic::AtomicU64>,
}

impl<R> Counting<R> {
    /// Wraps `inner`; the counter grows with every byte read.
    pub fn new(inner: R) -> (Counting<R>, Arc<std::sync::atomic::AtomicU64>) {
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        (Counting { inner, count: count.clone() }, count)
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str, format: Format) -> Vec<Input> {
        let reader: Box<dyn BufRead + Send> = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        read(reader, format).map(|i| i.unwrap()).collect()
    }

    #[test]
    fn jsonl_numbers_records_and_skips_blank_lines() {
        let got = all("{\"a\":1}\n\n  \nnot json\n{\"b\":\"x\"}\n", Format::Jsonl);
        let seen: Vec<(u64, u64, bool)> = got.iter().map(|i| (i.number, i.line, i.record.is_ok())).collect();
        assert_eq!(seen, [(1, 1, true), (2, 4, false), (3, 5, true)]);
        assert_eq!(got[1].raw, "not json");
        assert!(got[1].record.as_ref().unwrap_err().to_string().starts_with("line 4: invalid JSON"));
    }

    #[test]
    fn csv_rows_become_chars_records_and_bad_rows_errors() {
        let got = all("ip,status\n10.0.0.1,200\n\"10.0.0.2\",\"a,b\"\n10.0.0.3\n", Format::Csv);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].record.as_ref().unwrap().to_json(), r#"{"ip":"10.0.0.1","status":"200"}"#);
        assert_eq!(got[1].record.as_ref().unwrap().to_json(), r#"{"ip":"10.0.0.2","status":"a,b"}"#);
        assert_eq!((got[2].number, got[2].line), (3, 4));
        assert_eq!(got[2].record.as_ref().unwrap_err().to_string(), "line 4: 1 values for 2 columns");
    }

    #[test]
    fn empty_csv_cells_are_absent_unless_asked_for_as_text() {
        let text = "a,b,c\nx,,z\n";
        let got = all(text, Format::Csv);
        assert_eq!(got[0].record.as_ref().unwrap().to_json(), r#"{"a":"x","c":"z"}"#);
        let limits = ReadLimits { csv_empty_cell: EmptyCell::Text, ..Default::default() };
        let got: Vec<Input> = read_with(Box::new(std::io::Cursor::new(text.as_bytes().to_vec())), Format::Csv, &limits)
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got[0].record.as_ref().unwrap().to_json(), r#"{"a":"x","b":"","c":"z"}"#);
    }

    fn csv(text: &str) -> Vec<Input> {
        all(text, Format::Csv)
    }

    fn json_of(i: &Input) -> String {
        match &i.record {
            Ok(r) => r.to_json(),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn a_quote_inside_an_unquoted_csv_field_is_a_character() {
        // Two stray quotes used to join the rows between them into one text,
        // of which only the first record was kept.
        let got = csv("id,name\n1,5\" screen\n2,keyboard\n3,mouse\n4,10\" panel\n5,cable\n");
        let seen: Vec<String> = got.iter().map(json_of).collect();
        assert_eq!(
            seen,
            [
                r#"{"id":"1","name":"5\" screen"}"#,
                r#"{"id":"2","name":"keyboard"}"#,
                r#"{"id":"3","name":"mouse"}"#,
                r#"{"id":"4","name":"10\" panel"}"#,
                r#"{"id":"5","name":"cable"}"#,
            ]
        );
        assert_eq!(got.iter().map(|i| i.line).collect::<Vec<_>>(), [2, 3, 4, 5, 6]);
    }

    #[test]
    fn a_quoted_csv_field_may_span_lines_and_hold_quotes_and_crs() {
        let got = csv("id,note\n1,\"two\nlines\"\n2,\"say \"\"hi\"\"\"\n3,\"a\rb\"\n");
        let seen: Vec<String> = got.iter().map(json_of).collect();
        assert_eq!(
            seen,
            [r#"{"id":"1","note":"two\nlines"}"#, r#"{"id":"2","note":"say \"hi\""}"#, r#"{"id":"3","note":"a\rb"}"#]
        );
        assert_eq!(got.iter().map(|i| (i.number, i.line)).collect::<Vec<_>>(), [(1, 2), (2, 4), (3, 5)]);
    }

    #[test]
    fn a_bare_cr_ends_a_csv_record() {
        // Old Mac line ends: the whole file is one line.
        let got = csv("id,name\r1,a\r2,b\r");
        assert_eq!(got.iter().map(json_of).collect::<Vec<_>>(), [r#"{"id":"1","name":"a"}"#, r#"{"id":"2","name":"b"}"#]);
        // A bare CR inside a line: two records, none lost.
        let got = csv("id,name\n1,a\r2,b\n3,c\n");
        assert_eq!(
            got.iter().map(json_of).collect::<Vec<_>>(),
            [r#"{"id":"1","name":"a"}"#, r#"{"id":"2","name":"b"}"#, r#"{"id":"3","name":"c"}"#]
        );
        assert_eq!(got.iter().map(|i| i.number).collect::<Vec<_>>(), [1, 2, 3]);
    }

    #[test]
    fn an_open_quote_is_one_error_and_the_rows_after_it_are_read() {
        let got = csv("id,name\n1,\"open\n2,b\n3,c\n");
        assert_eq!(got.len(), 3);
        assert!(json_of(&got[0]).contains("unbalanced quote"), "{}", json_of(&got[0]));
        assert_eq!(json_of(&got[1]), r#"{"id":"2","name":"b"}"#);
        assert_eq!(json_of(&got[2]), r#"{"id":"3","name":"c"}"#);
    }

    #[test]
    fn a_repeated_csv_column_keeps_its_first_place_and_last_value_as_json_does() {
        let got = csv("a,b,a\n1,2,3\n");
        assert_eq!(json_of(&got[0]), r#"{"a":"3","b":"2"}"#);
        let json = all("{\"a\":\"1\",\"b\":\"2\",\"a\":\"3\"}\n", Format::Jsonl);
        assert_eq!(json_of(&json[0]), json_of(&got[0]));
    }

    #[test]
    fn a_csv_header_that_cannot_be_read_ends_the_input_with_one_error() {
        let reader: Box<dyn BufRead + Send> = Box::new(std::io::Cursor::new(b"id,\"name\n1,a\n2,b\n".to_vec()));
        let items: Vec<Result<Input>> = read(reader, Format::Csv).collect();
        assert_eq!(items.len(), 1, "one error, not one per row");
        let e = items[0].as_ref().unwrap_err().to_string();
        assert!(e.contains("the CSV header cannot be read"), "{e}");
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_record() {
        let got = all("\u{feff}{\"a\":1}\n", Format::Jsonl);
        assert_eq!(json_of(&got[0]), r#"{"a":1}"#);
        let got = csv("\u{feff}id,name\n1,a\n");
        assert_eq!(json_of(&got[0]), r#"{"id":"1","name":"a"}"#);
    }

    #[test]
    fn lines_of_other_white_space_are_records_not_blank_lines() {
        let got = all("{\"a\":1}\n\u{a0}\n\u{c}\n \t\n", Format::Jsonl);
        assert_eq!(got.len(), 3, "NBSP and form-feed lines get error lines; spaces and tabs are blank");
        assert!(got[1].record.is_err() && got[2].record.is_err());
        let got = csv("id,name\n\u{a0}\n1,a\n");
        assert_eq!(got.len(), 2);
        assert!(got[0].record.is_err());
    }

    /// A source that gives its bytes, then stalls until told to go on.
    struct Stalling {
        first: Option<Vec<u8>>,
        go: std::sync::mpsc::Receiver<Vec<u8>>,
    }

    impl Read for Stalling {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let bytes = match self.first.take() {
                Some(b) => b,
                None => match self.go.recv() {
                    Ok(b) => b,
                    Err(_) => return Ok(0),
                },
            };
            out[..bytes.len()].copy_from_slice(&bytes);
            Ok(bytes.len())
        }
    }

    #[test]
    fn a_stop_ends_a_stalled_pipe_after_the_bytes_it_read() {
        let (tx, go) = std::sync::mpsc::channel();
        let stop = Stop::new();
        let pipe =
            Pipe::spawn(Stalling { first: Some(b"{\"a\":1}\n{\"a\":2}\n".to_vec()), go }, stop.clone(), DEFAULT_IDLE).unwrap();
        let mut inputs = read(Box::new(std::io::BufReader::new(pipe)), Format::Jsonl);
        assert_eq!(json_of(&inputs.next().unwrap().unwrap()), r#"{"a":1}"#);
        assert_eq!(json_of(&inputs.next().unwrap().unwrap()), r#"{"a":2}"#);
        // The source now stalls: a stop ends the input although it never ends.
        stop.stop();
        assert!(inputs.next().is_none());
        drop(tx);
    }

    #[test]
    fn a_stalled_pipe_hands_over_the_records_read_so_far() {
        let (tx, go) = std::sync::mpsc::channel();
        let stop = Stop::new();
        let pipe =
            Pipe::spawn(Stalling { first: Some(b"{\"a\":1}\n{\"a\":2}\n".to_vec()), go }, stop.clone(), DEFAULT_IDLE).unwrap();
        let inputs = read(Box::new(std::io::BufReader::new(pipe)), Format::Jsonl);
        let mut chunks = read_ahead(inputs, 256, 2).unwrap();
        // Two records of a chunk of 256 arrive although the source stalls.
        let first = chunks.blocking_recv();
        match first {
            Some(Chunk::Records(r)) => assert_eq!(r.len(), 2),
            _ => panic!("expected the two records read"),
        }
        tx.send(b"{\"a\":3}\n".to_vec()).unwrap();
        stop.stop();
        let mut rest = 0;
        loop {
            match chunks.blocking_recv() {
                Some(Chunk::Records(r)) => rest += r.len(),
                Some(Chunk::End) => break,
                _ => panic!("the input ends without failing"),
            }
        }
        assert!(rest <= 1);
        drop(tx);
    }
}
