//! One provider for every SQL database omlet speaks: [`SqlProvider`], generic
//! over a small [`Dialect`].
//!
//! Everything the three databases do alike is written here once: preparing,
//! the one-row lookup and the batched lookup on the lookup lanes, creating
//! and filling tables, counting, dropping, running DDL. A dialect says only
//! what differs: how identifiers are quoted and placeholders written, how a
//! SQLite column type reads in its terms, how a cell is bound and a row read,
//! the batch form (`= ANY($1)` or `IN (…)`), and how statements reach the
//! helper functions. `sqlite.rs`, `postgres.rs` and `mysql.rs` hold the
//! dialects and how each connects.

use std::future::Future;

use omlet_lang::Cell;
use sqlx::pool::PoolOptions;
use sqlx::{
    AssertSqlSafe, Column, ColumnIndex, Connection, Database, Encode, Executor, IntoArguments, Pool, Row, SqlSafeStr, Statement,
    Type, TypeInfo, ValueRef,
};

use super::lanes::{self, Lanes, provider_error};
use super::{
    BatchPlan, BoundStatement, BoxFuture, ParamType, Placeholders, Prepared, Provider, ProviderError, Tables, quote_ident,
    table_sql, values_for_rows,
};
use crate::{Error, Result};

/// A sqlx query of database `DB` with its own arguments.
pub(crate) type Query<'q, DB> = sqlx::query::Query<'q, DB, <DB as Database>::Arguments>;

/// The plain facts of a dialect.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// For messages: `sqlite`, `postgres`, `mysql`.
    pub kind: &'static str,
    /// The identifier quote: `"`, or a backquote for MySQL.
    pub quote: char,
    /// How positional parameters are written.
    pub placeholders: Placeholders,
    /// The column types for SQLite's INTEGER, REAL, BLOB and TEXT, and for
    /// TEXT in a primary key (MySQL needs a bounded length there).
    pub types: [&'static str; 5],
}

impl Spec {
    /// A dialect's facts, in the order of the fields.
    pub const fn new(kind: &'static str, quote: char, placeholders: Placeholders, types: [&'static str; 5]) -> Spec {
        Spec { kind, quote, placeholders, types }
    }
}

/// Binds a cell as the value it is (SQLite and MySQL compare numbers and
/// text as SQLite's affinity does, so nothing is coerced).
pub(crate) fn bind_as_is<'q, DB: Database>(q: Query<'q, DB>, c: Cell) -> Query<'q, DB>
where
    i64: Encode<'q, DB> + Type<DB>,
    f64: Encode<'q, DB> + Type<DB>,
    String: Encode<'q, DB> + Type<DB>,
    Vec<u8>: Encode<'q, DB> + Type<DB>,
    Option<String>: Encode<'q, DB> + Type<DB>,
{
    match c {
        Cell::Null => q.bind(None::<String>),
        Cell::Integer(i) => q.bind(i),
        Cell::Real(f) => q.bind(f),
        Cell::Text(s) => q.bind(s),
        Cell::Blob(b) => q.bind(b),
    }
}

/// What one SQL database does its own way.
pub trait Dialect: Send + Sync + 'static {
    /// The sqlx driver.
    type Db: Database;
    /// Names, quoting, placeholders and column types.
    const SPEC: Spec;
    /// The port the driver connects to when a URL names none (0: no server).
    const DEFAULT_PORT: u16 = 0;

    /// A column type in SQLite's terms (INTEGER, REAL, TEXT, BLOB, maybe
    /// with PRIMARY KEY) in this database's, by `Spec::types`.
    fn column_type(sqlite_type: &str) -> String {
        let upper = sqlite_type.to_ascii_uppercase();
        let key = upper.contains("PRIMARY KEY");
        let [integer, real, blob, text, key_text] = Self::SPEC.types;
        let base = match upper.split_whitespace().next().unwrap_or("TEXT") {
            "INTEGER" | "INT" | "BIGINT" => integer,
            "REAL" | "FLOAT" | "DOUBLE" => real,
            "BLOB" => blob,
            _ if key => key_text,
            _ => text,
        };
        if key { format!("{base} PRIMARY KEY") } else { base.to_string() }
    }
    /// What follows `create table t (…)` (MySQL: its charset and collation).
    fn table_options() -> &'static str {
        ""
    }
    /// Binds one cell, as the type the database expects when it says.
    fn bind(q: Query<'_, Self::Db>, c: Cell, ty: ParamType) -> Query<'_, Self::Db>;
    /// Column `i` of `row`, not NULL, whose type the database names `ty`.
    fn cell(row: &<Self::Db as Database>::Row, i: usize, ty: &str) -> Result<Cell, String>;
    /// One result row as cells.
    fn cells(row: &<Self::Db as Database>::Row) -> Result<Vec<Cell>, String>
    where
        usize: ColumnIndex<<Self::Db as Database>::Row>,
    {
        let mut out = Vec::with_capacity(row.columns().len());
        for i in 0..row.columns().len() {
            let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
            if raw.is_null() {
                out.push(Cell::Null);
                continue;
            }
            let ty = raw.type_info().name().to_string();
            out.push(Self::cell(row, i, &ty)?);
        }
        Ok(out)
    }
    /// The parameter types a prepared statement declares (PostgreSQL), or
    /// none (the others).
    fn param_types(_stmt: &<Self::Db as Database>::Statement) -> Vec<ParamType> {
        Vec::new()
    }
    /// Adapts a statement, still with its `:name` parameters, to the dialect
    /// (how helper functions are reached), or says why it cannot (written
    /// out, it would pass [`MAX_STATEMENT_BYTES`](super::guard::MAX_STATEMENT_BYTES)).
    fn rewrite_sql(&self, sql: String) -> Result<String, super::RewriteError> {
        Ok(sql)
    }
    /// For in-memory tables ([`Tables::read_table`]): the query giving a
    /// table's column names and declared types, and the query reading its
    /// rows in order; `None` where lookups do not compare values as SQLite
    /// does (the default), so tables stay in SQL.
    fn table_queries(_table: &str) -> Option<(String, String)> {
        None
    }
    /// Reads the rows of `scan` (a [`table_queries`](Self::table_queries)
    /// scan of `width` columns) into `data` without sqlx's row decoding,
    /// where the dialect can (`None`: the generic path reads them).
    fn scan_rows<'a>(
        _pool: &'a sqlx::Pool<Self::Db>,
        _scan: &'a str,
        _data: &'a mut super::memory::TableData,
        _max_bytes: u64,
        _table: &'a str,
    ) -> Option<BoxFuture<'a, Result<()>>> {
        None
    }
    /// How many bytes column `i` of `row` takes as the database sent it,
    /// where the dialect can tell without decoding it (`None`: it is
    /// decoded, then weighed).
    fn raw_bytes(_row: &<Self::Db as Database>::Row, _i: usize) -> Option<usize> {
        None
    }
    /// The batched form of `plan` for `keys` keys: the first row of each
    /// key ([`per_key`]).
    fn batch_sql(plan: &BatchPlan, keys: usize) -> String {
        per_key(plan, &format!(" in ({})", vec!["?"; keys.max(1)].join(", ")))
    }
    /// Binds the keys of a batched query (an empty list matches nothing).
    fn bind_batch<'q>(q: Query<'q, Self::Db>, _plan: &BatchPlan, keys: &[Cell]) -> Query<'q, Self::Db> {
        if keys.is_empty() {
            return Self::bind(q, Cell::Null, ParamType::Any);
        }
        keys.iter().fold(q, |q, k| Self::bind(q, k.clone(), ParamType::Any))
    }
}

/// The most bytes of one lookup's answer (its row as cells, each counted
/// as `Cell`'s size plus its text or blob) that the host reads, and of all
/// the rows of one batched query: 64 MiB, the guest's default instance
/// memory (`EngineConfig::max_memory`), which an answer must fit in to
/// reach the rule. Past it the host stops reading, drops the connection,
/// and the lookup fails with [`Limit::AnswerBytes`](crate::Limit) (a batch
/// with [`Limit::BatchAnswer`](crate::Limit), and its keys are asked one by
/// one). [`SqlProvider::with_max_answer_bytes`] sets another bound.
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// `plan` for the keys that `keys` compares its key column with (` in (…)`,
/// ` = ANY($1)`): every key's first row in the statement's order, and no
/// other. A window numbers each key's rows in the statement's `order by`
/// (`row_number() over (partition by key order by …)`), and only the
/// first is sent, so that a key of a million rows costs one, as it does
/// alone (`limit n` of the single-key statement keeps n ≥ 1 rows of which
/// the lookup takes the first; see `batching`). The number comes first,
/// and the provider drops it.
pub(crate) fn per_key(plan: &BatchPlan, keys: &str) -> String {
    format!("select * from ({}{keys}) omlet_batch where omlet_rn = 1", plan.select)
}

/// The cells of `row` while they take at most `left` bytes (each cell
/// `Cell`'s size plus its text or blob; less is left after), weighed
/// column by column, before decoding where the dialect can tell: `Ok(None)`
/// once they would take more.
fn cells_within<D: Dialect>(row: &<D::Db as Database>::Row, left: &mut u64) -> Result<Option<Vec<Cell>>, String>
where
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    let width = row.columns().len();
    let mut out = Vec::with_capacity(width);
    for i in 0..width {
        let cell_size = std::mem::size_of::<Cell>() as u64;
        if let Some(raw) = D::raw_bytes(row, i)
            && (raw as u64).saturating_add(cell_size) > *left
        {
            return Ok(None);
        }
        let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
        let cell = if raw.is_null() {
            Cell::Null
        } else {
            let ty = raw.type_info().name().to_string();
            D::cell(row, i, &ty)?
        };
        let size = cell_size + super::memory::heap_bytes(std::slice::from_ref(&cell)) as u64;
        if size > *left {
            return Ok(None);
        }
        *left -= size;
        out.push(cell);
    }
    Ok(Some(out))
}

/// A SQL database behind `knowledge.query`: a small sqlx pool for loading
/// and preparing, and lookup lanes (one round trip per lookup; see `lanes`).
pub struct SqlProvider<D: Dialect> {
    pool: Pool<D::Db>,
    lanes: Lanes<<D::Db as Database>::Connection>,
    dialect: D,
    /// [`MAX_ANSWER_BYTES`], unless set otherwise.
    max_answer: u64,
}

fn knowledge_err(e: impl std::fmt::Display) -> Error {
    Error::Knowledge(e.to_string())
}

impl<D: Dialect> SqlProvider<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    <D::Db as Database>::Arguments: IntoArguments<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    pub(crate) fn new(pool: Pool<D::Db>, lanes: Lanes<<D::Db as Database>::Connection>, dialect: D) -> Self {
        SqlProvider { pool, lanes, dialect, max_answer: MAX_ANSWER_BYTES }
    }

    /// The provider with `bytes` as the most one lookup's answer, or one
    /// batched query's rows, may take (default [`MAX_ANSWER_BYTES`]; keep it
    /// at or below the guest's instance memory, which an answer must fit in).
    pub fn with_max_answer_bytes(mut self, bytes: u64) -> Self {
        self.max_answer = bytes;
        self
    }

    /// Connects to a database server at `url`: a loading pool of 2
    /// connections, each readied by `pool_setup`, and up to `pool_size`
    /// lookup lanes, each readied by `lane_setup`. `connect_timeout` bounds
    /// every wait for a connection, the first one included. Fails with
    /// [`Error::Knowledge`] (the URL's password redacted) if the server
    /// cannot be reached or a connection cannot be readied.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql")),
        allow(dead_code, reason = "only the server dialects connect to a server")
    )]
    pub(crate) async fn connect_server(
        url: &str,
        pool_size: u32,
        connect_timeout: std::time::Duration,
        pool_setup: lanes::Setup<<D::Db as Database>::Connection>,
        lane_setup: lanes::Setup<<D::Db as Database>::Connection>,
        dialect: D,
    ) -> Result<Self> {
        let err = |e: sqlx::Error| Error::Knowledge(format!("{}: {}", D::SPEC.kind, super::config::redact(&e.to_string())));
        let options: <<D::Db as Database>::Connection as Connection>::Options = url.parse().map_err(err)?;
        // One connection first, so that a server that cannot be reached is
        // named with its cause at once (the pool would retry until its
        // timeout and then say only that it timed out).
        let server = super::reach::server_of(url, D::DEFAULT_PORT);
        super::reach::first_connection::<<D::Db as Database>::Connection>(D::SPEC.kind, &server, &options, connect_timeout)
            .await?;
        let pool = PoolOptions::<D::Db>::new()
            .max_connections(2)
            .acquire_timeout(connect_timeout)
            .after_connect(move |conn, _| {
                let setup = pool_setup.clone();
                Box::pin(async move { setup(conn).await.map_err(|m| sqlx::Error::Configuration(m.into())) })
            })
            .connect_with(options.clone())
            .await
            .map_err(|e| Error::Knowledge(format!("{}: {server}: {}", D::SPEC.kind, super::config::redact(&e.to_string()))))?;
        Ok(SqlProvider::new(pool, Lanes::new(options, pool_size, connect_timeout, Some(lane_setup)), dialect))
    }

    /// The sqlx pool, for queries outside the [`Provider`] interface.
    pub fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    fn insert_sql(&self, table: &str, columns: &[String]) -> String {
        table_sql(table, columns, &[], D::SPEC.quote, D::column_type, placeholder(D::SPEC.placeholders)).1
    }

    /// The insert of `rows` rows in one statement.
    fn insert_many_sql(&self, table: &str, columns: &[String], rows: usize) -> String {
        let ph = placeholder(D::SPEC.placeholders);
        let width = columns.len();
        let tuples: Vec<String> =
            (0..rows).map(|r| format!("({})", (1..=width).map(|i| ph(r * width + i)).collect::<Vec<_>>().join(", "))).collect();
        format!("insert into {} values {}", quote_ident(table, D::SPEC.quote), tuples.join(", "))
    }

    /// `sql` with the cells of `rows`, row after row, bound as they are:
    /// one row's insert, or a statement written for several rows.
    fn bind_rows<'q>(sql: String, rows: &[Vec<Cell>]) -> Query<'q, D::Db> {
        rows.iter().flatten().fold(sqlx::query(AssertSqlSafe(sql)), |q, c| D::bind(q, c.clone(), ParamType::Any))
    }

    /// Runs `sql` once for each row, outside a transaction (PostgreSQL
    /// aborts one at its first error): a row the database rejects is
    /// logged with `row_err` and skipped. Returns (run, skipped).
    async fn each_row_skipping(
        &self,
        sql: &str,
        rows: &[Vec<Cell>],
        row_err: impl Fn(usize, sqlx::Error) -> Error,
    ) -> (u64, u64) {
        let (mut run, mut skipped) = (0, 0);
        for (n, row) in rows.iter().enumerate() {
            match Self::bind_rows(sql.to_string(), std::slice::from_ref(row)).execute(&self.pool).await {
                Ok(_) => run += 1,
                Err(e) => {
                    skipped += 1;
                    tracing::warn!("{}", row_err(n, e));
                }
            }
        }
        (run, skipped)
    }

    /// Runs a lookup on a lane: `make` builds the query, `fetch` runs it.
    async fn on_lane<T, F>(&self, make: impl Fn() -> Query<'static, D::Db>, fetch: F) -> Result<T, ProviderError>
    where
        F: for<'c> Fn(Query<'static, D::Db>, &'c mut <D::Db as Database>::Connection) -> BoxFuture<'c, Result<T, sqlx::Error>>,
    {
        self.lanes.run(lanes::query(|conn: &mut <D::Db as Database>::Connection| fetch(make(), conn))).await
    }
}

/// How many rows of `width` cells one statement loads. One round trip to the
/// database (or to sqlx's SQLite thread) per row made a 200,000-row knowdb
/// take seconds; a statement holds at most 30,000 values (SQLite allows
/// 32,766 parameters, PostgreSQL and MySQL 65,535).
fn rows_per_statement(width: usize) -> usize {
    (30_000 / width.max(1)).clamp(1, 1000)
}

/// Writes placeholder `i` (1-based) of a dialect.
fn placeholder(p: Placeholders) -> impl Fn(usize) -> String {
    move |i| match p {
        Placeholders::Question => "?".to_string(),
        Placeholders::Dollar => format!("${i}"),
    }
}

/// A boxed, `Send` future over a borrow (the shape the traits return).
fn boxed<'a, T>(f: impl Future<Output = T> + Send + 'a) -> BoxFuture<'a, T> {
    Box::pin(f)
}

impl<D: Dialect> Provider for SqlProvider<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    <D::Db as Database>::Arguments: IntoArguments<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    fn kind(&self) -> &'static str {
        D::SPEC.kind
    }

    fn placeholders(&self) -> Placeholders {
        D::SPEC.placeholders
    }

    fn rewrite_sql(&self, sql: String) -> Result<String, ProviderError> {
        self.dialect.rewrite_sql(sql).map_err(|e| ProviderError::TooLong(e.to_string()))
    }

    fn lookup_connections(&self) -> usize {
        self.lanes.size()
    }

    fn prepare<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<Prepared, ProviderError>> {
        boxed(async move {
            let stmt = (&self.pool).prepare(AssertSqlSafe(sql.to_string()).into_sql_str()).await.map_err(provider_error)?;
            Ok(Prepared { columns: stmt.columns().iter().map(|c| c.name().to_string()).collect(), params: D::param_types(&stmt) })
        })
    }

    fn query_first<'a>(
        &'a self,
        stmt: &'a BoundStatement,
        params: Vec<Cell>,
    ) -> BoxFuture<'a, Result<Option<Vec<Cell>>, ProviderError>> {
        boxed(async move {
            let make = || {
                let q = sqlx::query(AssertSqlSafe(stmt.sql.to_string()));
                params
                    .iter()
                    .enumerate()
                    .fold(q, |q, (i, p)| D::bind(q, p.clone(), stmt.param_types.get(i).copied().unwrap_or(ParamType::Any)))
            };
            // The first row only (the database may send more; they are
            // read past, never held), weighed as it is decoded.
            let max = self.max_answer;
            let row = self
                .on_lane(make, move |q, conn| {
                    Box::pin(async move {
                        let Some(row) = q.fetch_optional(conn).await? else { return Ok(None) };
                        match cells_within::<D>(&row, &mut max.clone()) {
                            Ok(Some(cells)) => Ok(Some(Ok(cells))),
                            Ok(None) => Err(lanes::over(
                                crate::Limit::AnswerBytes,
                                format_args!("the answer takes more than {max} bytes; the host stopped reading it"),
                            )),
                            Err(m) => Ok(Some(Err(m))),
                        }
                    })
                })
                .await?;
            row.transpose().map_err(ProviderError::Refused)
        })
    }

    fn query_many<'a>(&'a self, plan: &'a BatchPlan, keys: Vec<Cell>) -> BoxFuture<'a, Result<Vec<Vec<Cell>>, ProviderError>> {
        boxed(async move {
            let sql = D::batch_sql(plan, keys.len());
            let make = || D::bind_batch(sqlx::query(AssertSqlSafe(sql.clone())), plan, &keys);
            // One row a key; twice as many (and some) before the database's
            // collation is suspected of matching one key with several values.
            let (max, n) = (self.max_answer, keys.len());
            let max_rows = n.saturating_mul(2).saturating_add(16);
            let rows = self
                .on_lane(make, move |q, conn| {
                    Box::pin(async move {
                        use futures_util::TryStreamExt;
                        let cut = |why: String| lanes::over(crate::Limit::BatchAnswer, why);
                        let mut stream = q.fetch(conn);
                        let (mut out, mut left) = (Vec::new(), max);
                        while let Some(row) = stream.try_next().await? {
                            if out.len() >= max_rows {
                                return Err(cut(format!("more than {max_rows} rows for {n} keys")));
                            }
                            match cells_within::<D>(&row, &mut left) {
                                // The row's number in its key (always 1) goes.
                                Ok(Some(mut cells)) if !cells.is_empty() => {
                                    cells.remove(0);
                                    out.push(cells);
                                }
                                Ok(Some(_)) => return Ok(Err("a batched row without its number".to_string())),
                                Ok(None) => return Err(cut(format!("the rows take more than {max} bytes"))),
                                Err(m) => return Ok(Err(m)),
                            }
                        }
                        Ok(Ok(out))
                    })
                })
                .await?;
            rows.map_err(ProviderError::Refused)
        })
    }

    fn prepare_many<'a>(&'a self, plan: &'a BatchPlan) -> BoxFuture<'a, Result<(), ProviderError>> {
        boxed(async move {
            let sql = D::batch_sql(plan, 1);
            (&self.pool).prepare(AssertSqlSafe(sql).into_sql_str()).await.map(|_| ()).map_err(provider_error)
        })
    }

    fn close<'a>(&'a self) -> BoxFuture<'a, ()> {
        boxed(async move {
            self.lanes.close().await;
            self.pool.close().await;
        })
    }

    fn create_index<'a>(&'a self, table: &'a str, columns: &'a [String]) -> BoxFuture<'a, Result<(), ProviderError>> {
        boxed(async move {
            // Plain identifiers (the guard's), so no quoting: quoting would
            // make PostgreSQL read them case-sensitively.
            let sql = format!(
                "create index if not exists {} on {table} ({})",
                super::provider::index_name(table, columns),
                columns.join(", ")
            );
            let done = sqlx::raw_sql(AssertSqlSafe(sql.clone())).execute(&self.pool).await;
            done.map(|_| ()).map_err(|e| match provider_error(e) {
                ProviderError::Refused(m) => ProviderError::Refused(format!("`{sql}`: {m}")),
                other => other,
            })
        })
    }
}

impl<D: Dialect> Tables for SqlProvider<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    <D::Db as Database>::Arguments: IntoArguments<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    fn create_table_sql(&self, table: &str, columns: &[String], types: &[String]) -> String {
        let create = table_sql(table, columns, types, D::SPEC.quote, D::column_type, placeholder(D::SPEC.placeholders)).0;
        format!("{create}{}", D::table_options())
    }

    fn insert_rows<'a>(
        &'a self,
        table: &'a str,
        columns: &'a [String],
        rows: &'a [Vec<Cell>],
        skip_bad: bool,
    ) -> BoxFuture<'a, Result<(u64, u64)>> {
        boxed(async move {
            let insert = self.insert_sql(table, columns);
            let row_err = |n: usize, e: sqlx::Error| Error::Knowledge(format!("table {table}, row {}: {e}", n + 1));
            if skip_bad {
                return Ok(self.each_row_skipping(&insert, rows, row_err).await);
            }
            let (mut inserted, skipped) = (0, 0);
            // Many rows a statement; a chunk that fails is run again row by
            // row, to name the row at fault.
            let per_chunk = rows_per_statement(columns.len());
            let mut tx = self.pool.begin().await.map_err(knowledge_err)?;
            for (c, chunk) in rows.chunks(per_chunk).enumerate() {
                let sql = self.insert_many_sql(table, columns, chunk.len());
                if let Err(e) = Self::bind_rows(sql, chunk).execute(&mut *tx).await {
                    drop(tx);
                    let mut tx = self.pool.begin().await.map_err(knowledge_err)?;
                    for (n, row) in chunk.iter().enumerate() {
                        Self::bind_rows(insert.clone(), std::slice::from_ref(row))
                            .execute(&mut *tx)
                            .await
                            .map_err(|e| row_err(c * per_chunk + n, e))?;
                    }
                    return Err(Error::Knowledge(format!("table {table}: {e}")));
                }
                inserted += chunk.len() as u64;
            }
            tx.commit().await.map_err(knowledge_err)?;
            Ok((inserted, skipped))
        })
    }

    fn execute_rows<'a>(
        &'a self,
        sql: &'a str,
        width: usize,
        rows: &'a [Vec<Cell>],
        skip_bad: bool,
    ) -> BoxFuture<'a, Result<(u64, u64)>> {
        boxed(async move {
            let row_err = |n: usize, e: sqlx::Error| Error::Knowledge(format!("row {}: `{}`: {e}", n + 1, sql.trim()));
            let per_chunk = rows_per_statement(width);
            // Many rows a statement, when the statement allows it and no row fails.
            if values_for_rows(sql, width, 1).is_some() {
                let mut tx = self.pool.begin().await.map_err(knowledge_err)?;
                let mut failed = false;
                for chunk in rows.chunks(per_chunk) {
                    let many = values_for_rows(sql, width, chunk.len()).unwrap_or_default();
                    if Self::bind_rows(many, chunk).execute(&mut *tx).await.is_err() {
                        failed = true;
                        break;
                    }
                }
                if !failed {
                    tx.commit().await.map_err(knowledge_err)?;
                    return Ok((rows.len() as u64, 0));
                }
            }
            // One row a statement: to skip, or to name, the rows that fail.
            if skip_bad {
                return Ok(self.each_row_skipping(sql, rows, row_err).await);
            }
            let (mut run, skipped) = (0, 0);
            let mut tx = self.pool.begin().await.map_err(knowledge_err)?;
            for (n, row) in rows.iter().enumerate() {
                Self::bind_rows(sql.to_string(), std::slice::from_ref(row)).execute(&mut *tx).await.map_err(|e| row_err(n, e))?;
                run += 1;
            }
            tx.commit().await.map_err(knowledge_err)?;
            Ok((run, skipped))
        })
    }

    fn drop_table<'a>(&'a self, table: &'a str) -> BoxFuture<'a, Result<()>> {
        boxed(async move {
            let sql = format!("drop table if exists {}", quote_ident(table, D::SPEC.quote));
            sqlx::query(AssertSqlSafe(sql)).execute(&self.pool).await.map_err(knowledge_err)?;
            Ok(())
        })
    }

    fn count<'a>(&'a self, table: &'a str) -> BoxFuture<'a, Result<i64>> {
        boxed(async move {
            let sql = format!("select count(*) from {}", quote_ident(table, D::SPEC.quote));
            let row = sqlx::query(AssertSqlSafe(sql)).fetch_one(&self.pool).await.map_err(knowledge_err)?;
            match D::cells(&row).map_err(knowledge_err)?.first() {
                Some(Cell::Integer(n)) => Ok(*n),
                other => Err(Error::Knowledge(format!("count(*) of {table} gave {other:?}"))),
            }
        })
    }

    fn read_table<'a>(&'a self, table: &'a str, max_bytes: u64) -> BoxFuture<'a, Result<super::memory::TableData>> {
        boxed(async move {
            use futures_util::TryStreamExt;
            let Some((describe, scan)) = D::table_queries(table) else {
                return Err(Error::Knowledge(format!("{} tables are not held in memory ({table})", D::SPEC.kind)));
            };
            let mut data = super::memory::TableData::default();
            for row in sqlx::query(AssertSqlSafe(describe)).fetch_all(&self.pool).await.map_err(knowledge_err)? {
                let cells = D::cells(&row).map_err(knowledge_err)?;
                match &cells[..] {
                    [Cell::Text(name), ty] => {
                        data.columns.push(name.clone());
                        data.types.push(if let Cell::Text(t) = ty { t.clone() } else { String::new() });
                    }
                    _ => return Err(Error::Knowledge(format!("cannot read the columns of {table}"))),
                }
            }
            if data.columns.is_empty() {
                return Err(Error::Knowledge(format!("no table {table}")));
            }
            let fast = match D::scan_rows(&self.pool, &scan, &mut data, max_bytes, table) {
                Some(read) => {
                    read.await?;
                    true
                }
                None => false,
            };
            if fast {
                return Ok(data);
            }
            let mut rows = sqlx::query(AssertSqlSafe(scan)).fetch(&self.pool);
            while let Some(row) = rows.try_next().await.map_err(knowledge_err)? {
                let cells = D::cells(&row).map_err(knowledge_err)?.into_boxed_slice();
                if cells.len() != data.columns.len() {
                    return Err(Error::Knowledge(format!(
                        "{table}: a row of {} cells for {} columns",
                        cells.len(),
                        data.columns.len()
                    )));
                }
                data.push(cells, max_bytes, table)?;
            }
            Ok(data)
        })
    }

    fn execute<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<()>> {
        boxed(async move {
            sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
                .execute(&self.pool)
                .await
                .map_err(|e| Error::Knowledge(format!("`{sql}`: {e}")))?;
            Ok(())
        })
    }
}
