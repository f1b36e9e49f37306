//! The `Provider` trait: what a database behind `knowledge.query` does, and
//! the small types it speaks (placeholders, parameter types, what preparing
//! tells), with the helpers every provider shares.

use std::future::Future;
use std::pin::Pin;

use omlet_lang::Cell;

use super::{BatchPlan, BoundStatement};
use crate::Result;

/// The boxed `Send` future that [`Provider`] methods return, so that the
/// trait can be used as `dyn Provider`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a provider writes positional parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholders {
    /// `?` for each occurrence (SQLite, MySQL).
    Question,
    /// `$1`, `$2`, … (PostgreSQL).
    Dollar,
}

/// The type a provider expects for a parameter, when it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// Not known (SQLite and MySQL do not say): the value is bound as it is.
    Any,
    /// PostgreSQL `INT2`; a value out of range binds NULL.
    Int16,
    /// PostgreSQL `INT4`; a value out of range binds NULL.
    Int32,
    /// PostgreSQL `INT8`.
    Int64,
    /// PostgreSQL `FLOAT4` or `FLOAT8`.
    Float,
    /// PostgreSQL text, and every type not listed here.
    Text,
    /// PostgreSQL `BOOL`, bound from an integer (non-zero is true).
    Bool,
    /// PostgreSQL `BYTEA`.
    Bytes,
}

/// What preparing a statement tells.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// Names of the result columns, in order.
    pub columns: Vec<String>,
    /// One per placeholder, if the database types parameters; else empty.
    pub params: Vec<ParamType>,
}

/// Why a [`Provider`] could not do what it was asked, with the database's
/// own message. The kind decides what omlet does next: a statement the
/// database refused fails again the same way, so a refused batch is asked
/// again key by key (only the key at fault then fails); a database that
/// cannot be reached is not asked again for each key, and the guest hears
/// `unavailable` rather than `failed` (`wit/omlet.wit`'s `error-code`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The database refused the statement or its values: it does not
    /// parse, names a table, column or function the database lacks, or a
    /// value it cannot take or give back.
    #[error("{0}")]
    Refused(String),
    /// No connection could be had in time, or the connection broke: the
    /// database is down, unreachable or saturated, and may come back.
    #[error("{0}")]
    Unavailable(String),
    /// The statement cannot be written out for this provider within
    /// [`MAX_STATEMENT_BYTES`](super::guard::MAX_STATEMENT_BYTES) (MySQL's
    /// inline helpers copy their arguments).
    #[error("{0}")]
    TooLong(String),
    /// This provider does not do it (creating an index, say).
    #[error("{0}")]
    Unsupported(String),
    /// A bound omlet keeps was crossed ([`Limit`](crate::Limit) says
    /// which): what went over it was not read further, nor held. Made by
    /// [`ProviderError::limit`], whose message names the limit.
    #[error("{message}")]
    Limit {
        /// Which bound.
        limit: crate::Limit,
        /// `limit reached (<the limit>): <what went over it>`.
        message: String,
    },
}

impl ProviderError {
    /// The message, whatever the kind.
    pub fn message(&self) -> &str {
        match self {
            ProviderError::Refused(m)
            | ProviderError::Unavailable(m)
            | ProviderError::TooLong(m)
            | ProviderError::Unsupported(m)
            | ProviderError::Limit { message: m, .. } => m,
        }
    }

    /// A crossed bound: its message says `limit reached (<limit>): <what>`,
    /// as [`Error::Limit`](crate::Error::Limit) does.
    pub fn limit(limit: crate::Limit, what: impl std::fmt::Display) -> ProviderError {
        ProviderError::Limit { limit, message: crate::Error::limit(limit, what.to_string()).to_string() }
    }
}

/// One database behind `knowledge.query`: what a lookup needs. Loading
/// tables and DDL are [`Tables`]' job, which every provider also does.
pub trait Provider: Tables + Send + Sync + 'static {
    /// For messages: `sqlite`, `postgres`, `mysql`.
    fn kind(&self) -> &'static str;
    /// How this provider's SQL writes positional parameters.
    fn placeholders(&self) -> Placeholders;
    /// Adapts a statement, still with its `:name` parameters, to this
    /// provider (for example, how the helper functions are reached; a
    /// parameter may be repeated), or says why it cannot be written out
    /// (MySQL's inline helpers copy their arguments, and the result may not
    /// pass [`MAX_STATEMENT_BYTES`](super::guard::MAX_STATEMENT_BYTES)).
    /// The default keeps it.
    fn rewrite_sql(&self, sql: String) -> Result<String, ProviderError> {
        Ok(sql)
    }
    /// How many lookups this provider runs at once (its lookup
    /// connections); batching of misses is sized from it (`batch_slots`).
    /// The default is 1.
    fn lookup_connections(&self) -> usize {
        1
    }
    /// Prepares a statement (in this provider's dialect).
    fn prepare<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<Prepared, ProviderError>>;
    /// Runs a bound statement and returns its first row.
    fn query_first<'a>(
        &'a self,
        stmt: &'a BoundStatement,
        params: Vec<Cell>,
    ) -> BoxFuture<'a, Result<Option<Vec<Cell>>, ProviderError>>;
    /// Runs a batch plan for several keys; returns every matching row, its key first.
    fn query_many<'a>(&'a self, plan: &'a BatchPlan, keys: Vec<Cell>) -> BoxFuture<'a, Result<Vec<Vec<Cell>>, ProviderError>>;
    /// Checks that a batch plan runs here (prepares it).
    fn prepare_many<'a>(&'a self, plan: &'a BatchPlan) -> BoxFuture<'a, Result<(), ProviderError>>;
    /// Closes the connections.
    fn close<'a>(&'a self) -> BoxFuture<'a, ()>;
    /// Creates an index on `columns` of `table` unless one of that name
    /// exists: omlet does so for the tables it loaded from a knowdb, on the
    /// columns their lookups compare and those the knowdb names
    /// (`index_name` names it). `table` and `columns` are plain
    /// identifiers (the guard's, or checked as such by the knowdb reader). A provider that
    /// cannot create indexes says so; the lookups then run without one.
    fn create_index<'a>(&'a self, table: &'a str, columns: &'a [String]) -> BoxFuture<'a, Result<(), ProviderError>> {
        let _ = columns;
        Box::pin(async move { Err(ProviderError::Unsupported(format!("this provider creates no index (on `{table}`)"))) })
    }
}

/// The name of omlet's index on `columns` of `table`: `omlet_TABLE_COLS`,
/// or with a hash in place of the columns past 63 bytes (PostgreSQL's and
/// MySQL's longest identifier).
pub fn index_name(table: &str, columns: &[String]) -> String {
    let plain = format!("omlet_{table}_{}", columns.join("_"));
    if plain.len() <= 63 {
        return plain;
    }
    use sha2::Digest;
    let hash = hex::encode(&sha2::Sha256::digest(plain.as_bytes())[..6]);
    let table: String = table.chars().take(40).collect();
    format!("omlet_{table}_{hash}")
}

/// Tables of a database, outside the lookup allow-list: what the knowdb
/// loader, `omlet test` and the tests use to create and fill them. Every
/// method has a default that refuses, so a provider that serves lookups
/// only (a test double) implements none.
pub trait Tables: Send + Sync {
    /// `CREATE TABLE` in this dialect, from column types in SQLite's terms
    /// (INTEGER, REAL, TEXT, BLOB, optionally PRIMARY KEY).
    fn create_table_sql(&self, table: &str, columns: &[String], types: &[String]) -> String {
        table_sql(table, columns, types, '"', str::to_string, |_| "?".into()).0
    }

    /// Creates `table` and inserts `rows` (all or nothing).
    fn load_table<'a>(
        &'a self,
        table: &'a str,
        columns: &'a [String],
        types: &'a [String],
        rows: &'a [Vec<Cell>],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.execute(&self.create_table_sql(table, columns, types)).await?;
            self.insert_rows(table, columns, rows, false).await.map(|_| ())
        })
    }
    /// Inserts `rows` into an existing table. With `skip_bad`, a row the
    /// database rejects is skipped (and counted) instead of failing the load.
    /// Returns (inserted, skipped).
    fn insert_rows<'a>(
        &'a self,
        table: &'a str,
        _columns: &'a [String],
        _rows: &'a [Vec<Cell>],
        _skip_bad: bool,
    ) -> BoxFuture<'a, Result<(u64, u64)>> {
        refuse(format!("cannot insert into {table}"))
    }
    /// Runs `sql`, a statement with numbered parameters `?1..?N` (`N` =
    /// `width`, each row's cells bound in order), once per row, in one
    /// transaction; many rows a statement when it is a plain `INSERT …
    /// VALUES (…)` ([`values_for_rows`](super::values_for_rows)). With
    /// `skip_bad`, a row the database rejects is skipped and counted.
    /// Returns (run, skipped). Warp Parse's `insert.sql` files load this way.
    fn execute_rows<'a>(
        &'a self,
        sql: &'a str,
        _width: usize,
        _rows: &'a [Vec<Cell>],
        _skip_bad: bool,
    ) -> BoxFuture<'a, Result<(u64, u64)>> {
        refuse(format!("cannot run `{sql}` for rows"))
    }
    /// Drops `table` if it exists.
    fn drop_table<'a>(&'a self, table: &'a str) -> BoxFuture<'a, Result<()>> {
        refuse(format!("cannot drop {table}"))
    }
    /// The number of rows in `table`.
    fn count<'a>(&'a self, table: &'a str) -> BoxFuture<'a, Result<i64>> {
        refuse(format!("cannot count {table}"))
    }
    /// Runs one administrative statement (DDL) outside the allow-list.
    fn execute<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<()>> {
        refuse(format!("cannot run `{sql}`"))
    }
    /// Every row of `table`, in its order, with its columns' names and
    /// declared types, for an in-memory table whose lookups compare as
    /// SQLite compares (see `memory`); reading stops with
    /// [`Limit::TableMemory`](crate::Limit) once the rows take more than
    /// `max_bytes` (estimated). Only SQLite reads tables this way; the
    /// others refuse.
    fn read_table<'a>(&'a self, table: &'a str, _max_bytes: u64) -> BoxFuture<'a, Result<super::memory::TableData>> {
        refuse(format!("cannot hold {table} in memory"))
    }
}

/// What a provider without tables answers.
fn refuse<'a, T: Send + 'a>(what: String) -> BoxFuture<'a, Result<T>> {
    Box::pin(async move { Err(crate::Error::Knowledge(format!("this provider keeps no tables: {what}"))) })
}

/// `name` as a quoted SQL identifier (`"a""b"`, or with backquotes for MySQL).
pub(crate) fn quote_ident(name: &str, quote: char) -> String {
    format!("{quote}{}{quote}", name.replace(quote, &format!("{quote}{quote}")))
}

/// `CREATE TABLE` and `INSERT` texts for a dialect: `quote` wraps
/// identifiers, `ty` maps a SQLite column type, `ph(i)` writes placeholder i.
pub(crate) fn table_sql(
    table: &str,
    columns: &[String],
    types: &[String],
    quote: char,
    ty: impl Fn(&str) -> String,
    ph: impl Fn(usize) -> String,
) -> (String, String) {
    let q = |s: &str| quote_ident(s, quote);
    let cols: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{} {}", q(c), ty(types.get(i).map(String::as_str).unwrap_or("TEXT"))))
        .collect();
    let create = format!("create table {} ({})", q(table), cols.join(", "));
    let insert = format!("insert into {} values ({})", q(table), (1..=columns.len()).map(&ph).collect::<Vec<_>>().join(", "));
    (create, insert)
}

/// Coerces a parameter to the type the database expects, the way SQLite's
/// affinity would compare it; `Null` when it cannot be (it then matches nothing).
pub fn coerce(c: Cell, ty: ParamType) -> Cell {
    match (ty, c) {
        (ParamType::Any, c) | (_, c @ Cell::Null) => c,
        (ParamType::Int16 | ParamType::Int32 | ParamType::Int64 | ParamType::Bool, c) => {
            let i =
                match c {
                    Cell::Integer(i) => Some(i),
                    Cell::Real(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Some(f as i64),
                    Cell::Text(s) => s.trim().parse::<i64>().ok().or_else(|| {
                        s.trim().parse::<f64>().ok().filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18).map(|f| f as i64)
                    }),
                    _ => None,
                };
            let fits = |i: i64| match ty {
                ParamType::Int16 => i16::try_from(i).is_ok(),
                ParamType::Int32 => i32::try_from(i).is_ok(),
                _ => true,
            };
            i.filter(|i| fits(*i)).map(Cell::Integer).unwrap_or(Cell::Null)
        }
        (ParamType::Float, Cell::Integer(i)) => Cell::Real(i as f64),
        (ParamType::Float, Cell::Text(s)) => s.trim().parse().map(Cell::Real).unwrap_or(Cell::Null),
        (ParamType::Float, c @ Cell::Real(_)) => c,
        (ParamType::Float, Cell::Blob(_)) => Cell::Null,
        (ParamType::Text, Cell::Integer(i)) => Cell::Text(i.to_string()),
        (ParamType::Text, Cell::Real(f)) => Cell::Text(f.to_string()),
        (ParamType::Text, Cell::Blob(b)) => Cell::Text(String::from_utf8_lossy(&b).into_owned()),
        (ParamType::Text, c @ Cell::Text(_)) => c,
        (ParamType::Bytes, Cell::Text(s)) => Cell::Blob(s.into_bytes()),
        (ParamType::Bytes, c @ Cell::Blob(_)) => c,
        (ParamType::Bytes, _) => Cell::Null,
    }
}
