//! The error type of the knowledge crate. The `omlet` library carries it
//! whole as `omlet::Error::Knowledge` (with the same text), so a host sees
//! one error type whichever crate failed, and matches on this one inside it.

use std::path::PathBuf;

/// Errors from configuring, opening, loading and binding knowledge.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
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

    /// A lookup statement was rejected by the knowledge provider at load.
    #[error("{file}:{line}:{column}: lookup `{sql}` fails on the knowledge base: {message}")]
    Statement {
        /// The rule file holding the lookup.
        file: String,
        /// Line of the lookup in `file` (1-based).
        line: u32,
        /// Column of the lookup in `file` (1-based).
        column: u32,
        /// The lookup as compiled from the rule, with `:name` parameters and
        /// before any dialect rewrite.
        sql: String,
        /// The database's own error message.
        message: String,
        /// The name in the lookup that the error is about, when omlet can
        /// tell (a column the table does not have): where a caret goes.
        name: Option<Box<String>>,
    },

    /// The knowledge base could not be loaded or reached.
    #[error("knowledge: {0}")]
    Knowledge(String),

    /// Bad input data: a knowdb data file's record (`what` names the file
    /// and record).
    #[error("{what}: {message}")]
    Input {
        /// Where: a file and record number.
        what: String,
        /// What is wrong with it.
        message: String,
    },

    /// A failure of omlet itself (a bug): reported, never a panic.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The limits whose crossing is an [`Error::Limit`] here. Their defaults
/// and settings are listed in docs/deployment.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// A lookup statement is longer than
    /// [`MAX_STATEMENT_BYTES`](crate::guard::MAX_STATEMENT_BYTES), as the
    /// rule wrote it or as written out for the database (MySQL's inline
    /// helpers copy their arguments). The rule fails to load.
    StatementBytes,
    /// A knowdb table to be held in memory is bigger than
    /// `memory.max_table_mb` of the knowledge config, and its
    /// `memory.over_limit` is `fail` (with `sql`, its lookups go to SQL).
    TableMemory,
    /// A file read whole (a config, `knowdb.toml`, `create.sql`, a case or
    /// rule file) holds more than its bound ([`crate::files`]).
    FileBytes,
    /// A lookup's answer (its row, as cells) takes more than
    /// `MAX_ANSWER_BYTES` (64 MiB, the guest's default instance memory,
    /// which an answer must fit in). The host stops reading it there, and
    /// the lookup fails (per `on_lookup_error`); the record goes on.
    AnswerBytes,
    /// One batched query of many keys' misses brought more rows or bytes
    /// than its bound (one row a key; `MAX_ANSWER_BYTES` in all). The host
    /// stops reading it there, and asks for those keys one by one.
    BatchAnswer,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Limit::StatementBytes => "lookup statement bytes",
            Limit::TableMemory => "in-memory table size",
            Limit::FileBytes => "file bytes",
            Limit::AnswerBytes => "lookup answer bytes",
            Limit::BatchAnswer => "batched lookup rows and bytes",
        })
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn limit(limit: Limit, message: String) -> Error {
        Error::Limit { limit, message }
    }
}

/// `std::result::Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
