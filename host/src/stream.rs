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

use crate::record::{self, Record};
use crate::runtime::{Route, Rule};
use crate::{Error, Result};

/// The text form of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line; blank lines are not records.
    Jsonl,
    /// Comma-separated values with a header line. Every value is `chars`
    /// (convert with typed targets in the rule); an empty cell is an empty string.
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
    pub record: std::result::Result<Record, String>,
}

/// Reads records from `reader` in `format`, lazily.
pub fn read(reader: Box<dyn BufRead + Send>, format: Format) -> Box<dyn Iterator<Item = Result<Input>> + Send> {
    match format {
        Format::Jsonl => Box::new(jsonl(reader)),
        Format::Csv => csv_records(reader),
    }
}

fn jsonl(reader: Box<dyn BufRead + Send>) -> impl Iterator<Item = Result<Input>> + Send {
    let mut number = 0u64;
    reader.lines().enumerate().filter_map(move |(i, line)| {
        let line = match line {
            Ok(l) => l,
            Err(e) => return Some(Err(Error::Input { what: format!("line {}", i + 1), message: e.to_string() })),
        };
        if line.trim().is_empty() {
            return None;
        }
        number += 1;
        let record = record::from_json_str(&line);
        Some(Ok(Input { number, line: i as u64 + 1, raw: line, record }))
    })
}

fn csv_records(reader: Box<dyn BufRead + Send>) -> Box<dyn Iterator<Item = Result<Input>> + Send> {
    let mut rdr = csv::ReaderBuilder::new().flexible(true).from_reader(reader);
    let names: Vec<String> = match rdr.headers() {
        Ok(h) => h.iter().map(str::to_string).collect(),
        Err(e) => {
            return Box::new(std::iter::once(Err(Error::Input { what: "CSV header".into(), message: e.to_string() })));
        }
    };
    let mut number = 0u64;
    Box::new(rdr.into_records().map(move |row| {
        number += 1;
        Ok(match row {
            Ok(row) => {
                let line = row.position().map(|p| p.line()).unwrap_or(0);
                let raw = row.iter().collect::<Vec<_>>().join(",");
                let record = if row.len() != names.len() {
                    Err(format!("{} values for {} columns", row.len(), names.len()))
                } else {
                    Ok(names
                        .iter()
                        .zip(row.iter())
                        .map(|(n, v)| Field::new(Cow::Owned(n.clone()), Value::Chars(Cow::Owned(v.to_string()))))
                        .collect())
                };
                Input { number, line, raw, record }
            }
            Err(e) => {
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                Input { number, line, raw: String::new(), record: Err(e.to_string()) }
            }
        })
    }))
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

/// What became of one input record.
#[derive(Debug)]
pub enum Outcome {
    /// The output record.
    Ok(Record),
    /// No model took the record (see [`Error::Unrouted`]).
    Unrouted(String),
    /// The record could not be read, or its evaluation failed.
    Failed(String),
}

/// One input record and its outcome.
pub struct Done {
    /// The record as read, with its number and raw text.
    pub input: Input,
    /// What became of it.
    pub outcome: Outcome,
}

/// Evaluates `inputs` through `rule`, `batch` records per guest call and up
/// to `concurrency` calls in flight, handing every record's outcome to `sink`
/// in input order. Stops early only on a failure of the machinery (a wasm
/// trap, unreadable input), never because of one record.
pub async fn run(
    rule: Arc<Rule>,
    inputs: impl Iterator<Item = Result<Input>>,
    route: RouteBy,
    batch: usize,
    concurrency: usize,
    mut sink: impl FnMut(Done) -> Result<()>,
) -> Result<()> {
    let route = Arc::new(route);
    let mut inflight: VecDeque<tokio::task::JoinHandle<Result<Vec<Done>>>> = VecDeque::new();
    let mut chunk = Vec::with_capacity(batch);
    let mut inputs = inputs.fuse();
    loop {
        let next = inputs.next().transpose()?;
        let end = next.is_none();
        if let Some(i) = next {
            chunk.push(i);
        }
        if chunk.len() >= batch.max(1) || (end && !chunk.is_empty()) {
            let (rule, route, work) = (rule.clone(), route.clone(), std::mem::take(&mut chunk));
            inflight.push_back(tokio::spawn(async move { evaluate_chunk(&rule, &route, work).await }));
        }
        while inflight.len() >= concurrency.max(1) || (end && !inflight.is_empty()) {
            let first = inflight.pop_front().expect("checked non-empty");
            let done = first.await.map_err(|e| Error::Wasm(format!("evaluation task failed: {e}")))??;
            for d in done {
                sink(d)?;
            }
        }
        if end {
            return Ok(());
        }
    }
}

/// Evaluates one chunk: records grouped by route, one guest call per group.
async fn evaluate_chunk(rule: &Rule, route: &RouteBy, chunk: Vec<Input>) -> Result<Vec<Done>> {
    let mut outcomes: Vec<Option<Outcome>> = (0..chunk.len()).map(|_| None).collect();
    // Route key → positions in the chunk of the records that take it.
    let mut groups: Vec<(Option<String>, Vec<usize>)> = Vec::new();
    for (pos, input) in chunk.iter().enumerate() {
        let rec = match &input.record {
            Ok(r) => r,
            Err(m) => {
                outcomes[pos] = Some(Outcome::Failed(m.clone()));
                continue;
            }
        };
        let key = match route {
            RouteBy::Field(name) => match rec.iter().find(|f| f.name == name.as_str()).map(|f| &f.value) {
                Some(Value::Chars(p)) => Some(p.to_string()),
                Some(_) => {
                    outcomes[pos] = Some(Outcome::Unrouted(format!("the rule-path field `{name}` is not text")));
                    continue;
                }
                None => {
                    outcomes[pos] = Some(Outcome::Unrouted(format!("the record has no rule-path field `{name}`")));
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
        let results = rule.evaluate_batch_iter(r, records.iter().copied()).await?;
        for (pos, result) in positions.into_iter().zip(results) {
            outcomes[pos] = Some(match result {
                Ok(rec) => Outcome::Ok(rec),
                Err(Error::Unrouted { message, .. }) => Outcome::Unrouted(message),
                Err(Error::Record { message, .. }) => Outcome::Failed(message),
                Err(e) => Outcome::Failed(e.to_string()),
            });
        }
    }
    Ok(chunk
        .into_iter()
        .zip(outcomes)
        .map(|(input, o)| Done { input, outcome: o.unwrap_or(Outcome::Failed("record was not evaluated".into())) })
        .collect())
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
        assert!(got[1].record.as_ref().unwrap_err().starts_with("invalid JSON"));
    }

    #[test]
    fn csv_rows_become_chars_records_and_bad_rows_errors() {
        let got = all("ip,status\n10.0.0.1,200\n\"10.0.0.2\",\"a,b\"\n10.0.0.3\n", Format::Csv);
        assert_eq!(got.len(), 3);
        assert_eq!(record::to_json_string(got[0].record.as_ref().unwrap()), r#"{"ip":"10.0.0.1","status":"200"}"#);
        assert_eq!(record::to_json_string(got[1].record.as_ref().unwrap()), r#"{"ip":"10.0.0.2","status":"a,b"}"#);
        assert_eq!((got[2].number, got[2].line), (3, 4));
        assert_eq!(got[2].record.as_ref().unwrap_err(), "1 values for 2 columns");
    }
}
