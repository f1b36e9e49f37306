//! Streams of records through a rule: reading JSONL or CSV input, routing
//! each record to its model, evaluating batches with several in flight, and
//! giving back exactly one outcome per input record, in input order.
//!
//! This is what `omlet run` is made of; a host that reads files can use it
//! as it is.

use crate::Error;
use crate::record::Record;
use crate::runtime::Route;

mod live;
mod pipe;
mod read;
mod run;
#[cfg(test)]
mod tests;

pub use live::{LiveRule, Watching};
pub use pipe::{CUT_LINE, Counting, DEFAULT_IDLE, Pipe, STOP_GRACE, Stop, Stoppable};
pub use read::{EmptyCell, Format, Inputs, InputsIter, ReadLimits, read, read_with};
pub use run::{evaluate_json, run, run_json, task_failed};

/// How a [`run`] goes: where its records go, how many go in one guest call,
/// and how many calls are in flight at once.
///
/// ```
/// let options = omlet::stream::RunOptions { batch: 64, ..Default::default() };
/// assert_eq!(options.route, omlet::stream::RouteBy::Only);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// How records find their model (default [`RouteBy::Only`]).
    pub route: RouteBy,
    /// Most records in one guest call (default 256; 0 counts as 1). A call
    /// also closes at [`MAX_BATCH_BYTES`] of input.
    pub batch: usize,
    /// Most guest calls in flight at once, each on its own instance (default
    /// [`default_concurrency`]; 0 counts as 1).
    pub concurrency: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { route: RouteBy::Only, batch: 256, concurrency: default_concurrency() }
    }
}

/// Calls in flight when not told: one per core, and one more. The caller's
/// task writes each call's outputs in order; with one call per core, a core
/// would wait while it does (on 2 cores, 3 calls gave about 15 % more
/// records/s than 2).
/// An unknown core count counts as one core; at most 256.
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_add(1).min(256)
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

/// Most bytes of input in one guest call, whatever the batch size: a batch
/// closes at `batch` records or at this many bytes of raw input.
pub const MAX_BATCH_BYTES: usize = 4 << 20;

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
