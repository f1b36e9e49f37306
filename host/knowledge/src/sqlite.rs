//! SQLite through sqlx: the embedded default provider.

use std::str::FromStr;

use omlet_lang::Cell;
use sqlx::Row;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePoolOptions, SqliteRow};

use super::lanes::{self, Lanes};
use super::sql_provider::Query;
use super::sql_provider::Spec;
use super::{BoxFuture, Dialect, ParamType, Placeholders, SqlProvider};
use crate::{Error, Result};

/// SQLite's dialect: `"` quotes, `?` placeholders, values bound as they
/// come (SQLite's affinity compares `1001` with `'1001'`), `IN (…)` batches.
pub struct Sqlite;

/// An SQLite database: in memory, or a file. Lookups run on up to 4
/// connections of their own (see `lanes`: sqlx's pool would add two trips to
/// each connection's worker thread per lookup); loading tables and preparing
/// go through a sqlx pool of one connection.
pub type SqliteProvider = SqlProvider<Sqlite>;

/// Connections that look things up.
const LANES: u32 = 4;

/// The helper functions on a new lookup connection; a failure is logged, and
/// lookups that use them fail.
fn register_helpers(conn: &mut SqliteConnection) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        if let Err(e) = helpers::setup(conn).await {
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

impl SqlProvider<Sqlite> {
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
            .after_connect(|conn, _| Box::pin(helpers::setup(conn)))
            .connect_with(opts.clone())
            .await
            .map_err(knowledge_err)?;
        Ok(SqlProvider::new(pool, Lanes::new(opts, LANES, std::time::Duration::from_secs(30), Some(lookup_setup())), Sqlite))
    }

    /// The table a statement (as bound: `?` placeholders, `params` of them)
    /// reads by scanning every row, by SQLite's own query plan (`EXPLAIN
    /// QUERY PLAN`, its parameters bound as NULL); `None` when every table
    /// it reads is searched through an index. `omlet check --knowdb` warns
    /// with it: such a lookup costs a pass over the table on every miss.
    pub async fn scanned(&self, sql: &str, params: usize) -> Result<Option<String>> {
        let explain = format!("explain query plan {sql}");
        let mut q = sqlx::query(sqlx::AssertSqlSafe(explain));
        for _ in 0..params {
            q = q.bind(None::<i64>);
        }
        let rows = q.fetch_all(self.pool()).await.map_err(knowledge_err)?;
        for row in rows {
            let detail: String = row.try_get(3).map_err(knowledge_err)?;
            // "SCAN t" (SQLite 3.36 on) or "SCAN TABLE t"; a search says SEARCH.
            if let Some(rest) = detail.strip_prefix("SCAN ") {
                let rest = rest.strip_prefix("TABLE ").unwrap_or(rest);
                return Ok(Some(rest.split_whitespace().next().unwrap_or(rest).to_string()));
            }
        }
        Ok(None)
    }

    /// A database file (created if missing).
    pub async fn open(path: &std::path::Path) -> Result<SqliteProvider> {
        let opts = SqliteConnectOptions::new().filename(path).create_if_missing(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .after_connect(|conn, _| Box::pin(helpers::setup(conn)))
            .connect_with(opts.clone())
            .await
            .map_err(knowledge_err)?;
        Ok(SqlProvider::new(pool, Lanes::new(opts, LANES, std::time::Duration::from_secs(30), Some(lookup_setup())), Sqlite))
    }
}

fn knowledge_err(e: impl std::fmt::Display) -> Error {
    Error::Knowledge(e.to_string())
}

impl Dialect for Sqlite {
    type Db = sqlx::Sqlite;
    const SPEC: Spec = Spec::new("sqlite", '"', Placeholders::Question, ["INTEGER", "REAL", "BLOB", "TEXT", "TEXT"]);

    fn column_type(t: &str) -> String {
        t.to_string()
    }

    fn bind(q: Query<'_, sqlx::Sqlite>, c: Cell, _ty: ParamType) -> Query<'_, sqlx::Sqlite> {
        super::sql_provider::bind_as_is(q, c)
    }

    fn table_queries(table: &str) -> Option<(String, String)> {
        // A column with a collation other than BINARY compares otherwise
        // than `memory` does; a table without rowid has no rowid order.
        // Either is read as an empty column list, and the table stays in SQL.
        let lit = table.replace('\'', "''");
        let plain = format!(
            "(select count(*) from sqlite_schema where type = 'table' and name = '{lit}' \
             and (lower(sql) like '%collate%' or lower(sql) like '%without%rowid%')) = 0"
        );
        let describe = format!("select name, type from pragma_table_info('{lit}') where {plain} order by cid");
        let scan = format!("select * from {} order by rowid", super::quote_ident(table, '"'));
        Some((describe, scan))
    }

    fn scan_rows<'a>(
        pool: &'a sqlx::SqlitePool,
        scan: &'a str,
        data: &'a mut super::memory::TableData,
        max_bytes: u64,
        table: &'a str,
    ) -> Option<BoxFuture<'a, Result<()>>> {
        Some(Box::pin(async move {
            let mut conn = pool.acquire().await.map_err(knowledge_err)?;
            let mut handle = conn.lock_handle().await.map_err(knowledge_err)?;
            helpers::scan(handle.as_raw_handle().as_ptr(), scan, data, max_bytes, table)
        }))
    }

    fn cell(row: &SqliteRow, i: usize, ty: &str) -> Result<Cell, String> {
        let e = |e: sqlx::Error| e.to_string();
        Ok(match ty {
            "INTEGER" => Cell::Integer(row.try_get::<i64, _>(i).map_err(e)?),
            "REAL" => Cell::Real(row.try_get::<f64, _>(i).map_err(e)?),
            "BLOB" => Cell::Blob(row.try_get::<Vec<u8>, _>(i).map_err(e)?),
            _ => Cell::Text(row.try_get::<String, _>(i).map_err(e)?),
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

    /// Steps through `sql` on the raw connection `db`, appending its rows
    /// to `data` with their storage classes, as sqlx would read them but
    /// without its per-row decoding and channel: reading a 1 M-row table
    /// into memory took 3 s through sqlx (the whole load is meant to take
    /// less). It runs on the calling task, at bind, once per table.
    pub fn scan(
        db: *mut ffi::sqlite3,
        sql: &str,
        data: &mut crate::memory::TableData,
        max_bytes: u64,
        table: &str,
    ) -> crate::Result<()> {
        let err = |what: String| crate::Error::Knowledge(format!("cannot read {table} into memory: {what}"));
        // SAFETY: `db` is an open handle this thread holds the lock of.
        let message = || unsafe { std::ffi::CStr::from_ptr(ffi::sqlite3_errmsg(db)).to_string_lossy().into_owned() };
        let csql = CString::new(sql).map_err(|e| err(e.to_string()))?;
        let mut stmt: *mut ffi::sqlite3_stmt = std::ptr::null_mut();
        // SAFETY: a valid handle and a NUL-terminated statement; `stmt` is
        // finalized by `Finalize` whatever happens.
        let rc = unsafe { ffi::sqlite3_prepare_v2(db, csql.as_ptr(), -1, &mut stmt, std::ptr::null_mut()) };
        if rc != ffi::SQLITE_OK {
            return Err(err(message()));
        }
        struct Finalize(*mut ffi::sqlite3_stmt);
        impl Drop for Finalize {
            fn drop(&mut self) {
                // SAFETY: prepared above, finalized once.
                unsafe { ffi::sqlite3_finalize(self.0) };
            }
        }
        let _finalize = Finalize(stmt);
        let width = data.columns.len();
        // SAFETY: `stmt` is a prepared statement.
        if unsafe { ffi::sqlite3_column_count(stmt) } as usize != width {
            return Err(err(format!("the scan does not have the table's {width} columns")));
        }
        loop {
            // SAFETY: stepping a prepared statement on its own connection.
            match unsafe { ffi::sqlite3_step(stmt) } {
                ffi::SQLITE_DONE => return Ok(()),
                ffi::SQLITE_ROW => {}
                _ => return Err(err(message())),
            }
            let mut cells = Vec::with_capacity(width);
            for i in 0..width as c_int {
                // SAFETY: `i` is a column of the current row; the text and
                // blob pointers are valid until the next step, and are
                // copied before it (a zero-length value may be a null
                // pointer, which is never read).
                let cell = unsafe {
                    match ffi::sqlite3_column_type(stmt, i) {
                        ffi::SQLITE_INTEGER => Cell::Integer(ffi::sqlite3_column_int64(stmt, i)),
                        ffi::SQLITE_FLOAT => Cell::Real(ffi::sqlite3_column_double(stmt, i)),
                        ffi::SQLITE_TEXT => {
                            let p = ffi::sqlite3_column_text(stmt, i);
                            let n = ffi::sqlite3_column_bytes(stmt, i) as usize;
                            let bytes = if n == 0 { &[][..] } else { std::slice::from_raw_parts(p, n) };
                            Cell::Text(
                                String::from_utf8(bytes.to_vec()).map_err(|e| err(format!("a text that is not UTF-8: {e}")))?,
                            )
                        }
                        ffi::SQLITE_BLOB => {
                            let p = ffi::sqlite3_column_blob(stmt, i).cast::<u8>();
                            let n = ffi::sqlite3_column_bytes(stmt, i) as usize;
                            Cell::Blob(if n == 0 { Vec::new() } else { std::slice::from_raw_parts(p, n).to_vec() })
                        }
                        _ => Cell::Null,
                    }
                };
                cells.push(cell);
            }
            data.push(cells.into_boxed_slice(), max_bytes, table)?;
        }
    }

    /// A new connection's setup: confined ([`confine`]), then the helpers.
    pub async fn setup(conn: &mut sqlx::SqliteConnection) -> Result<(), sqlx::Error> {
        {
            let mut handle = conn.lock_handle().await?;
            // SAFETY: this connection's open handle, locked for us.
            unsafe { confine(handle.as_raw_handle().as_ptr()) };
        }
        register(conn).await
    }

    /// Confines the connection `db` to its own database, whatever SQL it
    /// runs (a knowdb's `create.sql` above all; `guard::script` says which
    /// statement, this makes sure): no database may be attached (which
    /// also stops `VACUUM INTO`), and an authorizer ([`authorize`]) refuses
    /// `ATTACH`, `DETACH`, pragmas outside `guard::script::PRAGMAS`, the
    /// functions of `guard::script::FUNCTIONS`, virtual tables of modules
    /// outside `guard::script::MODULES`, and writes to any schema but
    /// `main` and `temp`. SQLite then fails the statement as "not
    /// authorized" (or "too many attached databases").
    ///
    /// SAFETY: `db` is an open handle that the caller holds the lock of.
    pub unsafe fn confine(db: *mut ffi::sqlite3) {
        // SAFETY: the caller's promise; the authorizer takes no user data.
        unsafe {
            ffi::sqlite3_limit(db, ffi::SQLITE_LIMIT_ATTACHED, 0);
            ffi::sqlite3_set_authorizer(db, Some(authorize), std::ptr::null_mut());
        }
    }

    /// SQLite's authorizer callback for [`confine`].
    unsafe extern "C" fn authorize(
        _: *mut c_void,
        action: c_int,
        a1: *const std::ffi::c_char,
        a2: *const std::ffi::c_char,
        a3: *const std::ffi::c_char,
        _: *const std::ffi::c_char,
    ) -> c_int {
        // SAFETY: SQLite passes NUL-terminated strings or null pointers,
        // valid for the call.
        let text = |p: *const std::ffi::c_char| unsafe { (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy()) };
        let among = |p, list: &[&str]| text(p).is_some_and(|t| list.iter().any(|x| t.eq_ignore_ascii_case(x)));
        use crate::guard::script::{FUNCTIONS, MODULES, PRAGMAS};
        let denied = match action {
            ffi::SQLITE_ATTACH | ffi::SQLITE_DETACH => Some("ATTACH and DETACH"),
            ffi::SQLITE_PRAGMA if !among(a1, PRAGMAS) => Some("this PRAGMA"),
            ffi::SQLITE_FUNCTION if among(a2, FUNCTIONS) => Some("this function"),
            ffi::SQLITE_CREATE_VTABLE | ffi::SQLITE_DROP_VTABLE if !among(a2, MODULES) => Some("this virtual-table module"),
            ffi::SQLITE_INSERT
            | ffi::SQLITE_UPDATE
            | ffi::SQLITE_DELETE
            | ffi::SQLITE_CREATE_TABLE
            | ffi::SQLITE_CREATE_INDEX
            | ffi::SQLITE_CREATE_TRIGGER
            | ffi::SQLITE_CREATE_VIEW
            | ffi::SQLITE_DROP_TABLE
            | ffi::SQLITE_DROP_INDEX
            | ffi::SQLITE_DROP_TRIGGER
            | ffi::SQLITE_DROP_VIEW
            | ffi::SQLITE_ALTER_TABLE
            | ffi::SQLITE_REINDEX
            | ffi::SQLITE_ANALYZE
                if text(a3).is_some_and(|s| !s.eq_ignore_ascii_case("main") && !s.eq_ignore_ascii_case("temp")) =>
            {
                Some("a write outside the connection's own database")
            }
            _ => None,
        };
        match denied {
            Some(what) => {
                let (a1, a2) = (text(a1).unwrap_or_default(), text(a2).unwrap_or_default());
                tracing::warn!(target: "omlet::knowledge", "SQLite refused {what} ({a1} {a2}): only the database's own tables are reached");
                ffi::SQLITE_DENY
            }
            None => ffi::SQLITE_OK,
        }
    }

    pub async fn register(conn: &mut sqlx::SqliteConnection) -> Result<(), sqlx::Error> {
        let mut handle = conn.lock_handle().await?;
        let db = handle.as_raw_handle().as_ptr();
        for (i, helper) in Helper::ALL.iter().enumerate() {
            let (name, n_args) = (helper.name(), helper.arity() as c_int);
            let cname = CString::new(name).map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
            // SAFETY: `db` is this connection's open handle, locked for us; the
            // callback only reads its arguments and sets its result; the user
            // data is an index into a static table.
            let rc = unsafe {
                ffi::sqlite3_create_function_v2(
                    db,
                    cname.as_ptr(),
                    n_args,
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
        // SAFETY: the caller's promise: `v` is valid for this call, and the
        // text pointer SQLite gives stays valid for `n` bytes until `v` is
        // next touched, which is after the copy.
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
            let Some(helper) = Helper::ALL.get(index) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Provider, Tables};

    /// Trust round 3: SQL run on a SQLite connection (a knowdb's
    /// `create.sql`, whatever text the script check let by) reaches its own
    /// database only: no other file is attached, read or written, in a
    /// file database or an in-memory one.
    #[tokio::test]
    async fn a_sqlite_connection_reaches_its_own_database_only() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside.db");
        let p = SqliteProvider::open(&dir.path().join("kb.db")).await.unwrap();
        p.execute("create table t (a text); insert into t values ('x'); create index t_a on t(a)").await.unwrap();
        p.execute("pragma main.table_info(t); pragma foreign_keys = on; create virtual table f using fts5(body)").await.unwrap();
        let o = outside.display();
        for sql in [
            format!("attach '{o}' as x"),
            format!("ATTACH DATABASE 'file:{o}?mode=rwc' AS x"),
            format!("vacuum into '{o}'"),
            "pragma writable_schema = 1".into(),
            format!("pragma temp_store_directory = '{}'", dir.path().display()),
            "select load_extension('/nonexistent/evil')".into(),
            "detach main".into(),
        ] {
            let e = p.execute(&sql).await.unwrap_err().to_string();
            assert!(e.contains("authoriz") || e.contains("too many attached databases"), "{sql}: {e}");
        }
        assert!(!outside.exists(), "nothing was written outside");
        // Its own reading still works: a table read into memory.
        let data = p.read_table("t", 1 << 20).await.unwrap();
        assert_eq!(data.columns.len(), 1);
        // So does preparing a lookup, pragma functions and all.
        let prepared = p.prepare("select * from t where a in (select name from pragma_table_info('t'))").await;
        assert!(prepared.is_ok(), "{prepared:?}");
        let mem = SqliteProvider::memory().await.unwrap();
        assert!(mem.execute(&format!("attach '{o}' as x")).await.is_err());
        assert!(!outside.exists());
    }
}
