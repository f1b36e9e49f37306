//! MySQL and MariaDB through a sqlx pool (tested on MariaDB 10.11).
//!
//! MySQL converts between numbers and text in comparisons as SQLite does
//! (`int_col = '1001'` matches), so parameters are bound as they come.
//!
//! Helper functions applied to columns are written out inline as MySQL
//! expressions (see [`helper_expression`]): MySQL has no per-connection
//! temporary functions, and creating stored ones would need DDL rights.

use std::sync::Arc;
use std::time::Duration;

use omlet_lang::Cell;
use sqlx::mysql::{MySqlArguments, MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::{AssertSqlSafe, Column, Executor, Row, SqlSafeStr, Statement, TypeInfo, ValueRef};

use super::lanes::{self, Lanes};
use super::{BatchPlan, BoxFuture, Placeholders, Prepared, Provider};
use crate::{Error, Result};

/// A MySQL or MariaDB database. Lookups run on up to `pool_size`
/// connections of their own, one round trip each (see `lanes`); loading
/// tables and preparing statements go through a small sqlx pool.
pub struct MySqlProvider {
    pool: MySqlPool,
    lanes: Lanes<MySqlConnection>,
}

impl MySqlProvider {
    /// Connects to `url` (`mysql://…`); lookups use up to `pool_size`
    /// connections (at least 1), and loading and preparing up to 2 more.
    /// `connect_timeout` bounds each wait for a connection, the first one
    /// included. Fails with [`Error::Knowledge`] if the database cannot be
    /// reached.
    ///
    /// Every connection runs with `NO_BACKSLASH_ESCAPES` added to its
    /// `sql_mode`, so that a backslash in a rule's SQL literal is a plain
    /// character as in standard SQL (and in SQLite and PostgreSQL), never an
    /// escape that ends the compiler's quoting. Lookup connections also carry
    /// a server-side statement timeout equal to `statement_timeout` (MariaDB's
    /// `max_statement_time`, or MySQL's `max_execution_time`).
    pub async fn connect(
        url: &str,
        pool_size: u32,
        connect_timeout: Duration,
        statement_timeout: Duration,
    ) -> Result<MySqlProvider> {
        let err = |e: sqlx::Error| Error::Knowledge(format!("mysql: {}", super::config::redact(&e.to_string())));
        let options: MySqlConnectOptions = url.parse().map_err(err)?;
        let pool = MySqlPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(connect_timeout)
            .after_connect(|conn, _| {
                Box::pin(async move { no_backslash_escapes(conn).await.map_err(|m| sqlx::Error::Configuration(m.into())) })
            })
            .connect_with(options.clone())
            .await
            .map_err(err)?;
        let setup: lanes::Setup<MySqlConnection> = Arc::new(move |conn: &mut MySqlConnection| {
            Box::pin(async move {
                no_backslash_escapes(conn).await?;
                statement_time(conn, statement_timeout).await;
                Ok(())
            })
        });
        Ok(MySqlProvider { pool, lanes: Lanes::new(options, pool_size, connect_timeout, Some(setup)) })
    }

    /// The sqlx pool, for queries outside the [`Provider`] interface.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }
}

/// Adds `NO_BACKSLASH_ESCAPES` to the session's `sql_mode`; an error fails
/// the connection.
async fn no_backslash_escapes(conn: &mut MySqlConnection) -> Result<(), String> {
    let sql = "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')";
    sqlx::raw_sql(sql).execute(&mut *conn).await.map_err(|e| format!("cannot set NO_BACKSLASH_ESCAPES: {e}"))?;
    Ok(())
}

/// The server-side statement timeout: MariaDB's `max_statement_time`
/// (seconds), else MySQL's `max_execution_time` (milliseconds, SELECT only).
/// A server with neither is logged; omlet's own timeout still applies.
async fn statement_time(conn: &mut MySqlConnection, timeout: Duration) {
    let mariadb = format!("SET SESSION max_statement_time = {:.3}", timeout.as_secs_f64().max(0.001));
    if sqlx::raw_sql(AssertSqlSafe(mariadb)).execute(&mut *conn).await.is_ok() {
        return;
    }
    let mysql = format!("SET SESSION max_execution_time = {}", timeout.as_millis().max(1));
    if let Err(e) = sqlx::raw_sql(AssertSqlSafe(mysql)).execute(&mut *conn).await {
        tracing::warn!(error = %e, "cannot set a server-side statement timeout on this connection");
    }
}

/// A helper call as an inline MySQL expression with the guest's results
/// (`omlet_lang::pipes::helper`): 0 for a bad address, NULL for a bad CIDR.
/// Arguments may be repeated, so they must be free of side effects (columns,
/// parameters, literals). One difference remains: MySQL cannot tell the text
/// `'123'` from the number 123, so digits-only text counts as a numeric address.
pub fn helper_expression(name: &str, args: &[String]) -> String {
    let arg = |i: usize| format!("({})", args.get(i).map(String::as_str).unwrap_or("NULL"));
    // The address as a number, or NULL: dotted quads and integers in range.
    let ip4 = |x: &str| {
        format!(
            "(CASE WHEN {x} REGEXP '^[[:space:]]*[0-9]{{1,3}}([.][0-9]{{1,3}}){{3}}[[:space:]]*$' THEN INET_ATON(TRIM({x})) \
             WHEN {x} REGEXP '^[0-9]+$' AND {x} + 0 <= 4294967295 THEN {x} + 0 END)"
        )
    };
    // A CIDR's network address and prefix length, when it is well-formed.
    let cidr = |x: &str, f: &dyn Fn(&str, &str) -> String| {
        let net = format!("INET_ATON(SUBSTRING_INDEX(TRIM({x}), '/', 1))");
        let bits = format!("CAST(SUBSTRING_INDEX(TRIM({x}), '/', -1) AS UNSIGNED)");
        format!(
            "(CASE WHEN {x} REGEXP '^[[:space:]]*[0-9]{{1,3}}([.][0-9]{{1,3}}){{3}}/[0-9]{{1,2}}[[:space:]]*$' \
             AND {bits} <= 32 AND {net} IS NOT NULL THEN {} END)",
            f(&net, &bits)
        )
    };
    let min = |net: &str, bits: &str| format!("{net} & (4294967295 ^ (4294967295 >> {bits}))");
    let max = |net: &str, bits: &str| format!("{net} | (4294967295 >> {bits})");
    match name {
        "ip4_int" => format!("COALESCE({}, 0)", ip4(&arg(0))),
        "ip4_between" => format!("COALESCE({} BETWEEN {} AND {}, 0)", ip4(&arg(0)), ip4(&arg(1)), ip4(&arg(2))),
        "cidr4_min" => cidr(&arg(0), &min),
        "cidr4_max" => cidr(&arg(0), &max),
        "cidr4_contains" => {
            format!("COALESCE({} BETWEEN {} AND {}, 0)", ip4(&arg(0)), cidr(&arg(1), &min), cidr(&arg(1), &max))
        }
        "ip4_text" => {
            let x = arg(0);
            format!("(CASE WHEN {x} REGEXP '^[0-9]+$' AND {x} + 0 <= 4294967295 THEN INET_NTOA({x}) END)")
        }
        "trim_quotes" => {
            let x = arg(0);
            format!(
                "(CASE WHEN CHAR_LENGTH({x}) >= 2 AND LEFT({x}, 1) IN ('\"', '''') AND RIGHT({x}, 1) = LEFT({x}, 1) \
                 THEN SUBSTRING({x}, 2, CHAR_LENGTH({x}) - 2) ELSE {x} END)"
            )
        }
        _ => format!("{name}({})", args.join(", ")),
    }
}

type MyQuery<'q> = sqlx::query::Query<'q, sqlx::MySql, MySqlArguments>;

fn bind(q: MyQuery<'_>, c: Cell) -> MyQuery<'_> {
    match c {
        Cell::Null => q.bind(None::<String>),
        Cell::Integer(i) => q.bind(i),
        Cell::Real(f) => q.bind(f),
        Cell::Text(s) => q.bind(s),
        Cell::Blob(b) => q.bind(b),
    }
}

fn cells(row: &MySqlRow) -> Result<Vec<Cell>, String> {
    let mut out = Vec::with_capacity(row.columns().len());
    for i in 0..row.columns().len() {
        let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
        if raw.is_null() {
            out.push(Cell::Null);
            continue;
        }
        let ty = raw.type_info().name().to_string();
        let e = |e: sqlx::Error| e.to_string();
        out.push(match ty.as_str() {
            "BIGINT UNSIGNED" => {
                let v = row.try_get::<u64, _>(i).map_err(e)?;
                i64::try_from(v).map(Cell::Integer).unwrap_or(Cell::Real(v as f64))
            }
            t if t.contains("INT") || t == "BOOLEAN" || t == "YEAR" => {
                Cell::Integer(row.try_get_unchecked::<i64, _>(i).map_err(e)?)
            }
            "FLOAT" => Cell::Real(row.try_get::<f32, _>(i).map_err(e)? as f64),
            "DOUBLE" => Cell::Real(row.try_get::<f64, _>(i).map_err(e)?),
            // Text with a binary (`_bin`) collation arrives flagged as binary:
            // UTF-8 bytes are taken as text (OML reads BLOBs as text anyway).
            "BINARY" | "VARBINARY" | "TINYBLOB" | "BLOB" | "MEDIUMBLOB" | "LONGBLOB" => {
                let bytes = row.try_get::<Vec<u8>, _>(i).map_err(e)?;
                match String::from_utf8(bytes) {
                    Ok(s) => Cell::Text(s),
                    Err(b) => Cell::Blob(b.into_bytes()),
                }
            }
            _ => Cell::Text(row.try_get_unchecked::<String, _>(i).map_err(|_| format!("column {i}: unsupported type {ty}"))?),
        });
    }
    Ok(out)
}

impl Provider for MySqlProvider {
    fn kind(&self) -> &'static str {
        "mysql"
    }

    fn placeholders(&self) -> Placeholders {
        Placeholders::Question
    }

    fn rewrite_sql(&self, sql: String) -> String {
        super::rewrite_helper_calls(&sql, &helper_expression)
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

    fn query_first<'a>(
        &'a self,
        stmt: &'a super::BoundStatement,
        params: Vec<Cell>,
    ) -> BoxFuture<'a, Result<Option<Vec<Cell>>, String>> {
        Box::pin(async move {
            let row = self
                .lanes
                .run(lanes::query(|conn: &mut MySqlConnection| {
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

    fn query_many<'a>(&'a self, plan: &'a BatchPlan, keys: Vec<Cell>) -> BoxFuture<'a, Result<Vec<Vec<Cell>>, String>> {
        Box::pin(async move {
            let sql = format!("{} in ({})", plan.select, vec!["?"; keys.len().max(1)].join(", "));
            let rows = self
                .lanes
                .run(lanes::query(|conn: &mut MySqlConnection| {
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
        let (create, _) = super::table_sql(table, columns, types, '`', column_type, |_| "?".into());
        // UTF-8 text, compared byte for byte as SQLite does.
        format!("{create} default charset=utf8mb4 collate=utf8mb4_bin")
    }

    fn insert_rows<'a>(
        &'a self,
        table: &'a str,
        columns: &'a [String],
        rows: &'a [Vec<Cell>],
        skip_bad: bool,
    ) -> BoxFuture<'a, Result<(u64, u64)>> {
        Box::pin(async move {
            let (_, insert) = super::table_sql(table, columns, &[], '`', column_type, |_| "?".into());
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
            let sql = format!("drop table if exists {}", super::quote_ident(table, '`'));
            sqlx::query(AssertSqlSafe(sql)).execute(&self.pool).await.map_err(|e| Error::Knowledge(e.to_string()))?;
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
            let sql = format!("select count(*) from {}", super::quote_ident(table, '`'));
            let row = sqlx::query(AssertSqlSafe(sql)).fetch_one(&self.pool).await.map_err(|e| Error::Knowledge(e.to_string()))?;
            row.try_get::<i64, _>(0).map_err(|e| Error::Knowledge(e.to_string()))
        })
    }
}

/// A SQLite column type in MySQL's terms.
fn column_type(t: &str) -> String {
    let upper = t.to_ascii_uppercase();
    let pk = upper.contains("PRIMARY KEY");
    let base = match upper.split_whitespace().next().unwrap_or("TEXT") {
        "INTEGER" | "INT" | "BIGINT" => "BIGINT",
        "REAL" | "FLOAT" | "DOUBLE" => "DOUBLE",
        "BLOB" => "LONGBLOB",
        // A key needs a bounded length in MySQL.
        _ if pk => "VARCHAR(255)",
        _ => "TEXT",
    };
    if pk { format!("{base} PRIMARY KEY") } else { base.to_string() }
}
