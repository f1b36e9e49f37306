//! The error type of the omlet library: every failure is a value, none a panic.

use std::path::PathBuf;

/// Errors from compiling, loading or evaluating rules.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The rule source does not compile; `rendered` shows each error with
    /// file:line:column and a caret.
    #[error("{rendered}")]
    Compile {
        /// Every diagnostic, in file order.
        diagnostics: Vec<Diagnostic>,
        /// The first of them rendered for a terminal; also the `Display` text.
        rendered: String,
    },

    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },

    /// The component could not be built, compiled or instantiated (`what`
    /// says which step); the source is wasmtime's error.
    #[error("cannot load the rule ({what}): {source:#}")]
    Load {
        /// The step that failed.
        what: &'static str,
        /// wasmtime's or the encoder's error.
        source: anyhow::Error,
    },

    /// The guest trapped. The call's instance was dropped; the rule goes on
    /// with fresh ones. `code` is wasmtime's trap code when it gave one.
    #[error("the rule trapped: {message}")]
    Trap {
        /// The trap code (for example `UnreachableCodeReached` when the guest
        /// gave up, or `StackOverflow`).
        code: Option<wasmtime::Trap>,
        /// wasmtime's description, with the guest backtrace when known.
        message: String,
    },

    /// A limit was reached ([`Limit`] says which). Nothing else is wrong:
    /// the same input may pass with a higher limit.
    #[error("limit reached ({limit}): {message}")]
    Limit {
        /// Which limit.
        limit: Limit,
        /// What went over it, and by how much when known.
        message: String,
    },

    /// A setting is out of its range.
    #[error("configuration: {0}")]
    Config(String),

    /// A failure of omlet itself (a bug): reported, never a panic.
    #[error("internal error: {0}")]
    Internal(String),

    /// A lookup failed and the knowledge policy (`on_lookup_error =
    /// "fail"`) makes that fail the record. `index` is the record's position
    /// in its batch (0-based); `message` names the statement and the
    /// database's error.
    #[error("lookup failed: {message}")]
    Lookup {
        /// Position of the record in the batch (0-based).
        index: usize,
        /// The statement and what went wrong with it.
        message: String,
    },

    /// The rule failed the record itself with `fail(…)`; `message` is the
    /// rule's. `index` is the record's position in its batch (0-based).
    #[error("rejected by the rule: {message}")]
    Rejected {
        /// Position of the record in the batch (0-based).
        index: usize,
        /// The rule's message (at most 1 KiB).
        message: String,
    },

    /// No model of the rule set takes the record (its route names none, for
    /// example a rule path that no enabled model claims). The record was not
    /// evaluated; `index` is its position in the batch (0-based).
    #[error("{message}")]
    Unrouted {
        /// Position of the record in the batch (0-based).
        index: usize,
        /// Why no model takes it.
        message: String,
    },

    /// The knowledge base failed: it could not be configured, opened,
    /// loaded or reached, a lookup statement was rejected at load
    /// ([`knowledge::Error::Statement`](omlet_knowledge::Error::Statement),
    /// with the place in the rule file), or one of its own limits was reached
    /// (a statement's bytes, an in-memory table's size). The knowledge
    /// crate's error, kept whole: its text is this error's text.
    #[error(transparent)]
    Knowledge(#[from] omlet_knowledge::Error),

    /// Bad input data (`what` names the file and record).
    #[error("{what}: {message}")]
    Input {
        /// Where: a file, a file and record number, or a line.
        what: String,
        /// What is wrong with it.
        message: String,
    },
}

/// The limits whose crossing is an [`Error::Limit`]. Their defaults and
/// settings are listed in docs/deployment.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// The guest computed for longer than `EngineConfig::call_deadline`.
    Deadline,
    /// The guest used all of `EngineConfig::fuel`.
    Fuel,
    /// The guest needed more linear memory than `EngineConfig::max_memory`.
    Memory,
    /// A record is bigger than `EngineConfig::max_record_bytes`.
    RecordBytes,
    /// An input line is longer than the reader's `max_line_bytes`.
    LineBytes,
    /// A rule is bigger than the build's limit (source or compiled).
    RuleBytes,
    /// An output is bigger than the Kafka producer's `message.max.bytes`.
    OutputBytes,
    /// A component given to load is bigger than
    /// `EngineConfig::max_component_bytes`; it is refused before wasmtime
    /// compiles it (and, from a file, before it is read).
    ComponentBytes,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Limit::Deadline => "call deadline",
            Limit::Fuel => "fuel",
            Limit::Memory => "instance memory",
            Limit::RecordBytes => "record bytes",
            Limit::LineBytes => "line bytes",
            Limit::RuleBytes => "rule bytes",
            Limit::OutputBytes => "output bytes",
            Limit::ComponentBytes => "component bytes",
        })
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn load(what: &'static str, source: impl Into<anyhow::Error>) -> Error {
        Error::Load { what, source: source.into() }
    }

    pub(crate) fn limit(limit: Limit, message: String) -> Error {
        Error::Limit { limit, message }
    }

    /// The error of a read through [`omlet_knowledge::files`]: past its
    /// bound, what `over` makes of the message (the caller's own limit);
    /// an I/O error stays [`Error::Io`].
    pub(crate) fn bounded_read(e: omlet_knowledge::Error, over: impl FnOnce(String) -> Error) -> Error {
        match e {
            omlet_knowledge::Error::Limit { message, .. } => over(message),
            omlet_knowledge::Error::Io { path, source } => Error::Io { path, source },
            e => Error::Knowledge(e),
        }
    }

    /// A copy of the error, for a second place that reports it. Variants
    /// whose sources cannot be copied become [`Error::Internal`] with their text.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Input { what, message } => Error::Input { what: what.clone(), message: message.clone() },
            Error::Limit { limit, message } => Error::Limit { limit: *limit, message: message.clone() },
            Error::Unrouted { index, message } => Error::Unrouted { index: *index, message: message.clone() },
            Error::Lookup { index, message } => Error::Lookup { index: *index, message: message.clone() },
            Error::Rejected { index, message } => Error::Rejected { index: *index, message: message.clone() },
            Error::Trap { code, message } => Error::Trap { code: *code, message: message.clone() },
            Error::Config(m) => Error::Config(m.clone()),
            Error::Knowledge(k) => match duplicate_knowledge(k) {
                Some(k) => Error::Knowledge(k),
                None => Error::Internal(k.to_string()),
            },
            Error::Internal(m) => Error::Internal(m.clone()),
            e => Error::Internal(e.to_string()),
        }
    }

    /// The same error, for the record at `index` of its batch where the
    /// variant carries a position.
    pub(crate) fn at_index(self, index: usize) -> Error {
        match self {
            Error::Lookup { message, .. } => Error::Lookup { index, message },
            Error::Rejected { message, .. } => Error::Rejected { index, message },
            Error::Unrouted { message, .. } => Error::Unrouted { index, message },
            e => e,
        }
    }
}

/// A copy of a knowledge error, where its variant can be copied (not one
/// that holds an I/O error).
fn duplicate_knowledge(e: &omlet_knowledge::Error) -> Option<omlet_knowledge::Error> {
    use omlet_knowledge::Error as K;
    Some(match e {
        K::Limit { limit, message } => K::Limit { limit: *limit, message: message.clone() },
        K::Statement { file, line, column, sql, message, name } => K::Statement {
            file: file.clone(),
            line: *line,
            column: *column,
            sql: sql.clone(),
            message: message.clone(),
            name: name.clone(),
        },
        K::Knowledge(m) => K::Knowledge(m.clone()),
        K::Input { what, message } => K::Input { what: what.clone(), message: message.clone() },
        K::Internal(m) => K::Internal(m.clone()),
        _ => return None,
    })
}

/// One compile error: where it is and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnostic {
    /// The rule file, as it was named to the compiler.
    pub file: String,
    /// 1-based line of the error's start.
    pub line: u32,
    /// 1-based column (in characters) of the error's start.
    pub column: u32,
    /// Byte offsets of the offending text in the file.
    pub span: std::ops::Range<usize>,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when the compiler knows.
    pub hint: Option<String>,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.column, self.message)
    }
}

/// `std::result::Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
