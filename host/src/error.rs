//! The error type of the omlet library: every failure is a value, none a panic.

use std::path::PathBuf;

/// Errors from compiling, loading or evaluating rules.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The rule source does not compile; `rendered` shows each error with
    /// file:line:column and a caret.
    #[error("{rendered}")]
    Compile { errors: Vec<omlet_lang::FileErrors>, rendered: String },

    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    /// The component could not be built, compiled or instantiated.
    #[error("wasm: {0}")]
    Wasm(String),

    /// The component refused to describe itself (for example, an IR version mismatch).
    #[error("rule: {0}")]
    Rule(String),

    /// One record failed; `index` is its position in the batch (0-based).
    #[error("record {index}: {message}")]
    Record { index: usize, message: String },

    /// No model of the rule set takes the record (its route names none, for
    /// example a rule path that no enabled model claims). The record was not
    /// evaluated; `index` is its position in the batch (0-based).
    #[error("record {index}: {message}")]
    Unrouted { index: usize, message: String },

    /// A lookup statement was rejected by the knowledge provider at load.
    #[error("{file}:{line}:{column}: lookup `{sql}` fails on the knowledge base: {message}")]
    Statement { file: String, line: u32, column: u32, sql: String, message: String },

    /// The knowledge base could not be loaded or reached.
    #[error("knowledge: {0}")]
    Knowledge(String),

    /// Bad input data (`what` names the file and record).
    #[error("{what}: {message}")]
    Input { what: String, message: String },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn wasm(e: impl std::fmt::Display) -> Error {
        Error::Wasm(format!("{e:#}"))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
