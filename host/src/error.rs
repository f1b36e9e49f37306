//! The error type of the omlet library: every failure is a value, none a panic.

use std::path::PathBuf;

/// Errors from compiling, loading or evaluating rules.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The rule source does not compile; `rendered` shows each error with
    /// file:line:column and a caret.
    #[error("{rendered}")]
    Compile {
        /// The diagnostics, grouped by rule file.
        errors: Vec<omlet_lang::FileErrors>,
        /// All of them rendered for a terminal; also the `Display` text.
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

    /// The component could not be built, compiled or instantiated.
    #[error("wasm: {0}")]
    Wasm(String),

    /// The component refused to describe itself (for example, an IR version mismatch).
    #[error("rule: {0}")]
    Rule(String),

    /// One record failed; `index` is its position in the batch (0-based).
    #[error("record {index}: {message}")]
    Record {
        /// Position of the record in the batch (0-based).
        index: usize,
        /// Why it failed (from the guest, or from decoding its output).
        message: String,
    },

    /// No model of the rule set takes the record (its route names none, for
    /// example a rule path that no enabled model claims). The record was not
    /// evaluated; `index` is its position in the batch (0-based).
    #[error("record {index}: {message}")]
    Unrouted {
        /// Position of the record in the batch (0-based).
        index: usize,
        /// Why no model takes it.
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
    },

    /// The knowledge base could not be loaded or reached.
    #[error("knowledge: {0}")]
    Knowledge(String),

    /// Bad input data (`what` names the file and record).
    #[error("{what}: {message}")]
    Input {
        /// Where: a file, a file and record number, or a line.
        what: String,
        /// What is wrong with it.
        message: String,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn wasm(e: impl std::fmt::Display) -> Error {
        Error::Wasm(format!("{e:#}"))
    }
}

/// `std::result::Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
