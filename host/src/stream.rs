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

#[cfg(feature = "kafka")]
pub mod kafka;

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
            names: None,
            number: 0,
            max_lines: limits.csv_max_record_lines.max(1),
            max_bytes: limits.max_line_bytes,
            empty: limits.csv_empty_cell,
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
            && t.trim().is_empty()
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
struct Csv {
    lines: Lines,
    /// Lines read ahead and given back after an unbalanced quote.
    pending: VecDeque<(u64, Line)>,
    /// The header's names once read, or why it could not be read.
    names: Option<std::result::Result<Vec<String>, Error>>,
    number: u64,
    max_lines: usize,
    max_bytes: usize,
    empty: EmptyCell,
}

/// A CSV record's text, or why its lines are no record and its first line.
type RecordText = std::result::Result<String, (Error, String)>;

impl Csv {
    fn next_line(&mut self) -> Option<std::io::Result<(u64, Line)>> {
        match self.pending.pop_front() {
            Some(l) => Some(Ok(l)),
            None => self.lines.next(),
        }
    }

    /// The next record's text (lines joined), or a line that is no record.
    fn next_text(&mut self) -> Option<std::io::Result<(u64, RecordText)>> {
        loop {
            let (at, first) = match self.next_line()? {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            if let Some(e) = line_error(&first, at, self.lines.max) {
                return Some(Ok((at, Err((e, first.raw().to_string())))));
            }
            let Line::Text(mut text) = first else { unreachable!("line_error covers the other kinds") };
            if text.trim().is_empty() {
                continue;
            }
            let mut taken: Vec<(u64, Line)> = Vec::new();
            while quote_open(&text) {
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
                        for l in taken.into_iter().rev() {
                            self.pending.push_front(l);
                        }
                        let first = text.split('\n').next().unwrap_or("").to_string();
                        let message = format!(
                            "unbalanced quote: a quoted field is still open after {} lines (the limit is {})",
                            self.max_lines, self.max_lines
                        );
                        return Some(Ok((at, Err((bad_line(at, message), first)))));
                    }
                }
            }
            return Some(Ok((at, Ok(text))));
        }
    }
}

/// Whether a quoted field is still open at the end of `text` (every `"`
/// toggles; a doubled `""` inside a field toggles twice).
fn quote_open(text: &str) -> bool {
    text.bytes().filter(|&b| b == b'"').count() % 2 == 1
}

/// One CSV record's fields, parsed by the `csv` crate.
fn csv_fields(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    match rdr.records().next() {
        Some(Ok(row)) => Ok(row.iter().map(str::to_string).collect()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("an empty record".to_string()),
    }
}

impl Iterator for Csv {
    type Item = Result<Input>;

    fn next(&mut self) -> Option<Result<Input>> {
        if self.names.is_none() {
            let names = match self.next_text()? {
                Err(e) => return Some(Err(Error::io("input", e))),
                Ok((_, Err((e, _)))) => Err(e),
                Ok((at, Ok(text))) => csv_fields(&text).map_err(|m| bad_line(at, m)),
            };
            self.names = Some(names);
        }
        let (at, text) = match self.next_text()? {
            Ok(t) => t,
            Err(e) => return Some(Err(Error::io("input", e))),
        };
        self.number += 1;
        let (raw, record) = match text {
            Err((e, raw)) => (raw, Err(e)),
            Ok(text) => {
                let record = match (self.names.as_ref(), csv_fields(&text)) {
                    (Some(Err(e)), _) => Err(bad_line(at, format!("the CSV header cannot be read: {e}"))),
                    (_, Err(e)) => Err(bad_line(at, e)),
                    (Some(Ok(names)), Ok(values)) if values.len() != names.len() => {
                        Err(bad_line(at, format!("{} values for {} columns", values.len(), names.len())))
                    }
                    (Some(Ok(names)), Ok(values)) => Ok(Record::from_fields(
                        names
                            .iter()
                            .zip(values)
                            .filter(|(_, v)| !(v.is_empty() && self.empty == EmptyCell::Absent))
                            .map(|(n, v)| Field::new(Cow::Owned(n.clone()), Value::Chars(Cow::Owned(v))))
                            .collect(),
                    )),
                    (None, _) => Err(bad_line(at, "no CSV header".to_string())),
                };
                let raw = if record.is_ok() { text } else { text.chars().take(4096).collect() };
                (raw, record)
            }
        };
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
    rule: Rule,
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
    rule: Rule,
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
    rule: Rule,
    inputs: impl Iterator<Item = Result<Input>> + Send + 'static,
    route: RouteBy,
    batch: usize,
    concurrency: usize,
    mut sink: impl FnMut(Done<T>) -> Result<()>,
) -> Result<()> {
    type Task<T> = (Vec<(u64, u64)>, tokio::task::JoinHandle<Vec<Done<T>>>);
    let concurrency = concurrency.max(1);
    let route = Arc::new(route);
    let mut chunks = read_ahead(inputs, batch.max(1), concurrency)?;
    let mut inflight: VecDeque<Task<T>> = VecDeque::new();
    let (mut ended, mut failure) = (false, None);
    loop {
        while !ended && inflight.len() < concurrency {
            match chunks.recv().await {
                Some(Chunk::Records(work)) => {
                    let (rule, route) = (rule.clone(), route.clone());
                    let names = work.iter().map(|i| (i.number, i.line)).collect();
                    inflight.push_back((names, tokio::spawn(async move { evaluate_chunk(&rule, &route, work).await })));
                }
                Some(Chunk::Failed(e)) => {
                    failure = Some(e);
                    ended = true;
                }
                Some(Chunk::End) => ended = true,
                // The thread is gone without saying the input ended: it
                // panicked, and the records it held are lost with it.
                None => {
                    failure = Some(Error::Internal("the input's reading thread failed before the end of the input".into()));
                    ended = true;
                }
            }
        }
        let Some((names, task)) = inflight.pop_front() else {
            return match failure {
                Some(e) => Err(e),
                None => Ok(()),
            };
        };
        let done = match task.await {
            Ok(done) => done,
            // The task's records are gone with it: each still gets its line.
            Err(e) => names
                .into_iter()
                .map(|(number, line)| Done {
                    input: Input { number, line, raw: String::new(), record: Err(task_failed(&e)) },
                    outcome: Outcome::Failed(task_failed(&e)),
                })
                .collect(),
        };
        for d in done {
            sink(d)?;
        }
    }
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
            let (mut chunk, mut bytes, mut last) = (Vec::with_capacity(room), 0usize, Chunk::End);
            for item in inputs {
                let input = match item {
                    Ok(input) => input,
                    Err(e) => {
                        last = Chunk::Failed(e);
                        break;
                    }
                };
                bytes += input.raw.len();
                chunk.push(input);
                if chunk.len() >= batch || bytes >= MAX_BATCH_BYTES {
                    bytes = 0;
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(room));
                    if tx.blocking_send(Chunk::Records(full)).is_err() {
                        return;
                    }
                }
            }
            // The records read since the last full chunk, then how the input ended.
            if !chunk.is_empty() && tx.blocking_send(Chunk::Records(chunk)).is_err() {
                return;
            }
            let _ = tx.blocking_send(last);
        })
        .map_err(|e| Error::io("the input's reading thread", e))?;
    Ok(rx)
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

fn unrouted(message: String) -> Error {
    Error::Unrouted { index: 0, message }
}

/// Evaluates one chunk: records grouped by route, one guest call per group.
async fn evaluate_chunk<T: Decoded>(rule: &Rule, route: &RouteBy, chunk: Vec<Input>) -> Vec<Done<T>> {
    let mut outcomes: Vec<Option<Outcome<T>>> = (0..chunk.len()).map(|_| None).collect();
    // Route key → positions in the chunk of the records that take it.
    let mut groups: Vec<(Option<String>, Vec<usize>)> = Vec::new();
    for (pos, input) in chunk.iter().enumerate() {
        let rec = match &input.record {
            Ok(r) => r,
            Err(e) => {
                outcomes[pos] = Some(Outcome::Failed(e.duplicate()));
                continue;
            }
        };
        let key = match route {
            RouteBy::Field(name) => match rec.fields().iter().find(|f| f.name == name.as_str()).map(|f| &f.value) {
                Some(Value::Chars(p)) => Some(p.to_string()),
                Some(_) => {
                    outcomes[pos] = Some(Outcome::Unrouted(unrouted(format!("the rule-path field `{name}` is not text"))));
                    continue;
                }
                None => {
                    outcomes[pos] = Some(Outcome::Unrouted(unrouted(format!("the record has no rule-path field `{name}`"))));
                    continue;
                }
            },
            _ => None,
        };
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(pos),
            None => groups.push((key, vec![pos])),
        }
    }
    for (key, positions) in groups {
        let r = match (route, &key) {
            (RouteBy::Only, _) => Route::Only,
            (RouteBy::Path(p), _) => Route::Path(p),
            (RouteBy::Model(m), _) => Route::Model(m),
            (RouteBy::Field(_), k) => Route::Path(k.as_deref().unwrap_or("")),
        };
        // Only records that were read make it into a group.
        let records: Vec<&Record> = positions.iter().filter_map(|&p| chunk[p].record.as_ref().ok()).collect();
        match rule.evaluate_batch_iter(r, records.iter().copied()).await {
            Ok(results) => {
                for (&pos, result) in positions.iter().zip(results) {
                    outcomes[pos] = Some(match result {
                        Ok(rec) => Outcome::Ok(rec),
                        Err(e @ Error::Unrouted { .. }) => Outcome::Unrouted(e),
                        Err(e) => Outcome::Failed(e),
                    });
                }
            }
            // No call could be made (no instance): every record of the group says so.
            Err(e) => {
                for &pos in &positions {
                    outcomes[pos] = Some(Outcome::Failed(e.duplicate()));
                }
            }
        }
    }
    chunk
        .into_iter()
        .zip(outcomes)
        .map(|(input, o)| Done {
            input,
            outcome: o.unwrap_or_else(|| Outcome::Failed(Error::Internal("the record was not evaluated".into()))),
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
}
