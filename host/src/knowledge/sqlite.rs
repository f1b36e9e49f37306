//! SQLite through sqlx: the embedded default provider.

use std::str::FromStr;

use omlet_lang::Cell;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions, SqliteRow};
use sqlx::{AssertSqlSafe, Column, Executor, Row, SqlSafeStr, Statement, TypeInfo, ValueRef};

use super::lanes::{self, Lanes};
use super::{BatchPlan, BoundStatement, BoxFuture, Placeholders, Prepared, Provider};
use crate::{Error, Result};

/// An SQLite database: in memory, or a file. Lookups run on up to 4
/// connections of their own (see `lanes`: sqlx's pool would add two trips to
/// each connection's worker thread per lookup); loading tables and preparing
/// go through a sqlx pool of one connection.
pub struct SqliteProvider {
    pool: SqlitePool,
    lanes: Lanes<SqliteConnection>,
}

/// Connections that look things up.
const LANES: u32 = 4;

/// The helper functions on a new lookup connection; a failure is logged, and
/// lookups that use them fail.
fn register_helpers(conn: &mut SqliteConnection) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        if let Err(e) = helpers::register(conn).await {
            tracing::warn!(error = %e, "cannot register the OML helper functions on this connection");
        }
    })
}

/// A lookup connection's setup: the helpers (SQLite runs in-process, so
/// omlet's own timeout is all a lookup needs).
fn lookup_setup() -> lanes::Setup<SqliteConnection> {
    std::sync::Arc::new(|conn: &mut SqliteConnection| {
        Box::pin(async move {
            register_helpers(conn).await;
            Ok(())
        })
    })
}

impl SqliteProvider {
    /// A fresh in-memory database, shared by the provider's connections (a
    /// named in-memory database in SQLite's shared-cache mode). It lives as
    /// long as one connection to it, so the loading pool keeps its one
    /// connection forever.
    pub async fn memory() -> Result<SqliteProvider> {
        let opts = SqliteConnectOptions::from_str("sqlite::memory:").map_err(knowledge_err)?;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .after_connect(|conn, _| Box::pin(helpers::register(conn)))
            .connect_with(opts.clone())
            .await
            .map_err(knowledge_err)?;
        Ok(SqliteProvider { pool, lanes: Lanes::new(opts, LANES, std::time::Duration::from_secs(30), Some(lookup_setup())) })
    }

    /// A database file (created if missing).
    pub async fn open(path: &std::path::Path) -> Result<SqliteProvider> {
        let opts = SqliteConnectOptions::new().filename(path).create_if_missing(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .after_connect(|conn, _| Box::pin(helpers::register(conn)))
            .connect_with(opts.clone())
            .await
            .map_err(knowledge_err)?;
        Ok(SqliteProvider { pool, lanes: Lanes::new(opts, LANES, std::time::Duration::from_secs(30), Some(lookup_setup())) })
    }

    /// Runs SQL statements (DDL, inserts), separated by `;`.
    pub async fn execute_script(&self, sql: &str) -> Result<()> {
        sqlx::raw_sql(AssertSqlSafe(sql.to_string())).execute(&self.pool).await.map_err(knowledge_err)?;
        Ok(())
    }
}

fn knowledge_err(e: impl std::fmt::Display) -> Error {
    Error::Knowledge(e.to_string())
}

type SqliteQuery<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

fn bind(q: SqliteQuery<'_>, c: Cell) -> SqliteQuery<'_> {
    match c {
        Cell::Null => q.bind(None::<i64>),
        Cell::Integer(i) => q.bind(i),
        Cell::Real(f) => q.bind(f),
        Cell::Text(s) => q.bind(s),
        Cell::Blob(b) => q.bind(b),
    }
}

fn cells(row: &SqliteRow) -> Result<Vec<Cell>, String> {
    let mut out = Vec::with_capacity(row.columns().len());
    for i in 0..row.columns().len() {
        let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
        if raw.is_null() {
            out.push(Cell::Null);
            continue;
        }
        let ty = raw.type_info().name().to_string();
        let cell = match ty.as_str() {
            "INTEGER" => Cell::Integer(row.try_get::<i64, _>(i).map_err(|e| e.to_string())?),
            "REAL" => Cell::Real(row.try_get::<f64, _>(i).map_err(|e| e.to_string())?),
            "BLOB" => Cell::Blob(row.try_get::<Vec<u8>, _>(i).map_err(|e| e.to_string())?),
            _ => Cell::Text(row.try_get::<String, _>(i).map_err(|e| e.to_string())?),
        };
        out.push(cell);
    }
    Ok(out)
}

impl Provider for SqliteProvider {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn placeholders(&self) -> Placeholders {
        Placeholders::Question
    }

    fn lookup_connections(&self) -> usize {
        self.lanes.size()
    }

    fn prepare<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<Prepared, String>> {
        Box::pin(async move {
            let stmt = (&self.pool).prepare(AssertSqlSafe(sql.to_string()).into_sql_str()).await.map_err(|e| e.to_string())?;
            Ok(Prepared { columns: stmt.columns().iter().map(|c| c.name().to_string()).collect(), params: Vec::new() })
        })
    }

    fn query_many<'a>(&'a self, plan: &'a BatchPlan, keys: Vec<Cell>) -> BoxFuture<'a, Result<Vec<Vec<Cell>>, String>> {
        Box::pin(async move {
            let sql = format!("{} in ({})", plan.select, vec!["?"; keys.len().max(1)].join(", "));
            let rows = self
                .lanes
                .run(lanes::query(|conn: &mut SqliteConnection| {
                    let mut q = sqlx::query(AssertSqlSafe(sql.clone()));
                    if keys.is_empty() {
                        q = bind(q, Cell::Null);
                    }
                    for k in &keys {
                        q = bind(q, k.clone());
                    }
                    Box::pin(q.fetch_all(conn))
                }))
                .await?;
            rows.iter().map(cells).collect()
        })
    }

    fn prepare_many<'a>(&'a self, plan: &'a BatchPlan) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let sql = format!("{} in (?)", plan.select);
            (&self.pool).prepare(AssertSqlSafe(sql).into_sql_str()).await.map(|_| ()).map_err(|e| e.to_string())
        })
    }

    fn create_table_sql(&self, table: &str, columns: &[String], types: &[String]) -> String {
        super::table_sql(table, columns, types, '"', str::to_string, |_| "?".into()).0
    }

    fn insert_rows<'a>(
        &'a self,
        table: &'a str,
        columns: &'a [String],
        rows: &'a [Vec<Cell>],
        skip_bad: bool,
    ) -> BoxFuture<'a, Result<(u64, u64)>> {
        Box::pin(async move {
            let (_, insert) = super::table_sql(table, columns, &[], '"', str::to_string, |_| "?".into());
            let row_err = |n: usize, e: sqlx::Error| Error::Knowledge(format!("table {table}, row {}: {e}", n + 1));
            let (mut inserted, mut skipped) = (0, 0);
            if skip_bad {
                for (n, row) in rows.iter().enumerate() {
                    let mut q = sqlx::query(AssertSqlSafe(insert.clone()));
                    for c in row {
                        q = bind(q, c.clone());
                    }
                    match q.execute(&self.pool).await {
                        Ok(_) => inserted += 1,
                        Err(e) => {
                            skipped += 1;
                            tracing::warn!("{}", row_err(n, e));
                        }
                    }
                }
                return Ok((inserted, skipped));
            }
            let mut tx = self.pool.begin().await.map_err(|e| Error::Knowledge(e.to_string()))?;
            for (n, row) in rows.iter().enumerate() {
                let mut q = sqlx::query(AssertSqlSafe(insert.clone()));
                for c in row {
                    q = bind(q, c.clone());
                }
                q.execute(&mut *tx).await.map_err(|e| row_err(n, e))?;
                inserted += 1;
            }
            tx.commit().await.map_err(|e| Error::Knowledge(e.to_string()))?;
            Ok((inserted, skipped))
        })
    }

    fn drop_table<'a>(&'a self, table: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let sql = format!("drop table if exists {}", super::quote_ident(table, '"'));
            sqlx::query(AssertSqlSafe(sql)).execute(&self.pool).await.map_err(knowledge_err)?;
            Ok(())
        })
    }

    fn execute<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
                .execute(&self.pool)
                .await
                .map_err(|e| Error::Knowledge(format!("`{sql}`: {e}")))?;
            Ok(())
        })
    }

    fn close<'a>(&'a self) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.lanes.close().await;
            self.pool.close().await;
        })
    }

    fn count<'a>(&'a self, table: &'a str) -> BoxFuture<'a, Result<i64>> {
        Box::pin(async move {
            let sql = format!("select count(*) from {}", super::quote_ident(table, '"'));
            let row = sqlx::query(AssertSqlSafe(sql)).fetch_one(&self.pool).await.map_err(knowledge_err)?;
            row.try_get::<i64, _>(0).map_err(knowledge_err)
        })
    }

    fn query_first<'a>(
        &'a self,
        stmt: &'a BoundStatement,
        params: Vec<Cell>,
    ) -> BoxFuture<'a, Result<Option<Vec<Cell>>, String>> {
        Box::pin(async move {
            let row = self
                .lanes
                .run(lanes::query(|conn: &mut SqliteConnection| {
                    let mut q = sqlx::query(AssertSqlSafe(stmt.sql.to_string()));
                    for p in &params {
                        q = bind(q, p.clone());
                    }
                    Box::pin(q.fetch_optional(conn))
                }))
                .await?;
            match row {
                Some(row) => cells(&row).map(Some),
                None => Ok(None),
            }
        })
    }
}

/// The OML helper functions (spec §8.11.4) as SQLite functions, for the
/// lookups that apply them to columns (`cidr4_contains(read(ip), cidr) = 1`).
/// Lookups that apply them to values only are computed in the guest instead.
/// The functions run the same code as the guest's (`omlet_lang::pipes::helper`).
mod helpers {
    use std::ffi::{CString, c_int, c_void};

    use libsqlite3_sys as ffi;
    use omlet_lang::Cell;
    use omlet_lang::ir::Helper;

    const HELPERS: &[(&str, c_int, Helper)] = &[
        ("ip4_int", 1, Helper::Ip4Int),
        ("ip4_between", 3, Helper::Ip4Between),
        ("cidr4_min", 1, Helper::Cidr4Min),
        ("cidr4_max", 1, Helper::Cidr4Max),
        ("cidr4_contains", 2, Helper::Cidr4Contains),
        ("ip4_text", 1, Helper::Ip4Text),
        ("trim_quotes", 1, Helper::TrimQuotes),
    ];

    pub async fn register(conn: &mut sqlx::SqliteConnection) -> Result<(), sqlx::Error> {
        let mut handle = conn.lock_handle().await?;
        let db = handle.as_raw_handle().as_ptr();
        for (i, (name, n_args, _)) in HELPERS.iter().enumerate() {
            let cname = CString::new(*name).map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
            // SAFETY: `db` is this connection's open handle, locked for us; the
            // callback only reads its arguments and sets its result; the user
            // data is an index into a static table.
            let rc = unsafe {
                ffi::sqlite3_create_function_v2(
                    db,
                    cname.as_ptr(),
                    *n_args,
                    ffi::SQLITE_UTF8 | ffi::SQLITE_DETERMINISTIC,
                    i as *mut c_void,
                    Some(call),
                    None,
                    None,
                    None,
                )
            };
            if rc != ffi::SQLITE_OK {
                return Err(sqlx::Error::Protocol(format!("cannot register SQL function {name} (code {rc})")));
            }
        }
        Ok(())
    }

    /// Reads an SQLite argument as a cell.
    ///
    /// SAFETY: `v` is a valid argument value for the duration of the call.
    unsafe fn cell(v: *mut ffi::sqlite3_value) -> Cell {
        unsafe {
            match ffi::sqlite3_value_type(v) {
                ffi::SQLITE_INTEGER => Cell::Integer(ffi::sqlite3_value_int64(v)),
                ffi::SQLITE_FLOAT => Cell::Real(ffi::sqlite3_value_double(v)),
                ffi::SQLITE_TEXT | ffi::SQLITE_BLOB => {
                    let p = ffi::sqlite3_value_text(v);
                    let n = ffi::sqlite3_value_bytes(v);
                    if p.is_null() || n <= 0 {
                        Cell::Text(String::new())
                    } else {
                        let bytes = std::slice::from_raw_parts(p, n as usize);
                        Cell::Text(String::from_utf8_lossy(bytes).into_owned())
                    }
                }
                _ => Cell::Null,
            }
        }
    }

    unsafe extern "C" fn call(ctx: *mut ffi::sqlite3_context, argc: c_int, argv: *mut *mut ffi::sqlite3_value) {
        // SAFETY: SQLite passes `argc` valid values in `argv` and the user data we registered.
        unsafe {
            let index = ffi::sqlite3_user_data(ctx) as usize;
            let Some((_, _, helper)) = HELPERS.get(index) else {
                ffi::sqlite3_result_null(ctx);
                return;
            };
            let args: Vec<Cell> = (0..argc.max(0) as usize).map(|i| cell(*argv.add(i))).collect();
            match omlet_lang::pipes::helper(*helper, &args) {
                Cell::Integer(i) => ffi::sqlite3_result_int64(ctx, i),
                Cell::Real(f) => ffi::sqlite3_result_double(ctx, f),
                Cell::Text(s) => ffi::sqlite3_result_text(ctx, s.as_ptr().cast(), s.len() as c_int, ffi::SQLITE_TRANSIENT()),
                Cell::Blob(b) => ffi::sqlite3_result_blob(ctx, b.as_ptr().cast(), b.len() as c_int, ffi::SQLITE_TRANSIENT()),
                Cell::Null => ffi::sqlite3_result_null(ctx),
            }
        }
    }
}
