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
use omlet_lang::ir::Helper;
use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::{AssertSqlSafe, Row};

use super::lanes::{self};
use super::sql_provider::Query;
use super::sql_provider::Spec;
use super::{Dialect, ParamType, Placeholders, SqlProvider};
use crate::Result;

/// MySQL's and MariaDB's dialect: backquotes, `?` placeholders, values
/// bound as they come, helpers written out inline, `IN (…)` batches, tables
/// in utf8mb4 with a binary collation.
pub struct MySql;

/// A MySQL or MariaDB database. Lookups run on up to `pool_size`
/// connections of their own, one round trip each (see `lanes`); loading
/// tables and preparing statements go through a small sqlx pool.
pub type MySqlProvider = SqlProvider<MySql>;

impl SqlProvider<MySql> {
    /// Connects to `url` (`mysql://…`); lookups use up to `pool_size`
    /// connections (at least 1), and loading and preparing up to 2 more.
    /// `connect_timeout` bounds each wait for a connection, the first one
    /// included. Fails with [`Error::Knowledge`](crate::Error::Knowledge) if the database cannot be
    /// reached, or if the URL's database is a system schema (`mysql`, `sys`,
    /// `performance_schema`, `information_schema`), where every table a
    /// lookup names unqualified would be a catalog table.
    ///
    /// Every connection runs with `NO_BACKSLASH_ESCAPES` added to its
    /// `sql_mode`, so that a backslash in a rule's SQL literal is a plain
    /// character as in standard SQL (and in SQLite and PostgreSQL), never an
    /// escape that ends the compiler's quoting, and `PIPES_AS_CONCAT`, so
    /// that `||` in a `like` pattern (OML 1.25 §13.8) joins text as in
    /// standard SQL rather than meaning `or`. Lookup connections also carry
    /// a server-side statement timeout equal to `statement_timeout` (MariaDB's
    /// `max_statement_time`, or MySQL's `max_execution_time`).
    pub async fn connect(
        url: &str,
        pool_size: u32,
        connect_timeout: Duration,
        statement_timeout: Duration,
    ) -> Result<MySqlProvider> {
        let pool_setup: lanes::Setup<MySqlConnection> =
            Arc::new(|conn: &mut MySqlConnection| Box::pin(async move { no_backslash_escapes(conn).await }));
        let lane_setup: lanes::Setup<MySqlConnection> = Arc::new(move |conn: &mut MySqlConnection| {
            Box::pin(async move {
                no_backslash_escapes(conn).await?;
                statement_time(conn, statement_timeout).await;
                Ok(())
            })
        });
        let provider = SqlProvider::connect_server(url, pool_size, connect_timeout, pool_setup, lane_setup, MySql).await?;
        system_database(&provider).await?;
        Ok(provider)
    }
}

/// Refuses a connection whose default database is one of the system
/// schemas: there, every unqualified table of a lookup would be a catalog
/// table (`user` is `mysql.user`), which the guard refuses only by name
/// when qualified.
async fn system_database(provider: &MySqlProvider) -> Result<()> {
    let db: Option<String> = sqlx::query_scalar("select database()")
        .fetch_one(provider.pool())
        .await
        .map_err(|e| crate::Error::Knowledge(format!("mysql: {e}")))?;
    match db {
        Some(db) if super::guard::is_system_schema(&db) => {
            provider.pool().close().await;
            Err(crate::Error::Knowledge(format!(
                "mysql: the URL's database `{db}` is a system schema; lookups read the tables of a database of your own"
            )))
        }
        _ => Ok(()),
    }
}

/// Adds `NO_BACKSLASH_ESCAPES` and `PIPES_AS_CONCAT` to the session's
/// `sql_mode`; an error fails the connection.
async fn no_backslash_escapes(conn: &mut MySqlConnection) -> Result<(), String> {
    let sql = "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES,PIPES_AS_CONCAT')";
    sqlx::raw_sql(sql).execute(&mut *conn).await.map_err(|e| format!("cannot set the sql_mode: {e}"))?;
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
    match Helper::by_name(name) {
        Some(Helper::Ip4Int) => format!("COALESCE({}, 0)", ip4(&arg(0))),
        Some(Helper::Ip4Between) => format!("COALESCE({} BETWEEN {} AND {}, 0)", ip4(&arg(0)), ip4(&arg(1)), ip4(&arg(2))),
        Some(Helper::Cidr4Min) => cidr(&arg(0), &min),
        Some(Helper::Cidr4Max) => cidr(&arg(0), &max),
        Some(Helper::Cidr4Contains) => {
            format!("COALESCE({} BETWEEN {} AND {}, 0)", ip4(&arg(0)), cidr(&arg(1), &min), cidr(&arg(1), &max))
        }
        Some(Helper::Ip4Text) => {
            let x = arg(0);
            format!("(CASE WHEN {x} REGEXP '^[0-9]+$' AND {x} + 0 <= 4294967295 THEN INET_NTOA({x}) END)")
        }
        Some(Helper::TrimQuotes) => {
            let x = arg(0);
            format!(
                "(CASE WHEN CHAR_LENGTH({x}) >= 2 AND LEFT({x}, 1) IN ('\"', '''') AND RIGHT({x}, 1) = LEFT({x}, 1) \
                 THEN SUBSTRING({x}, 2, CHAR_LENGTH({x}) - 2) ELSE {x} END)"
            )
        }
        Some(Helper::IpKey) => {
            // INET6_ATON reads both families (4 or 16 bytes); an IPv4
            // address becomes its IPv4-mapped key, as in the guest.
            let a = format!("INET6_ATON(TRIM({}))", arg(0));
            format!(
                "(CASE WHEN LENGTH({a}) = 4 THEN CONCAT('00000000000000000000ffff', LOWER(HEX({a}))) \
                 WHEN LENGTH({a}) = 16 THEN LOWER(HEX({a})) END)"
            )
        }
        _ => format!("{name}({})", args.join(", ")),
    }
}

fn cell(row: &MySqlRow, i: usize, ty: &str) -> Result<Cell, String> {
    let e = |e: sqlx::Error| e.to_string();
    Ok(match ty {
        "BIGINT UNSIGNED" => {
            let v = row.try_get::<u64, _>(i).map_err(e)?;
            i64::try_from(v).map(Cell::Integer).unwrap_or(Cell::Real(v as f64))
        }
        t if t.contains("INT") || t == "BOOLEAN" || t == "YEAR" => Cell::Integer(row.try_get_unchecked::<i64, _>(i).map_err(e)?),
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
    })
}

impl Dialect for MySql {
    type Db = sqlx::MySql;
    const SPEC: Spec = Spec::new("mysql", '`', Placeholders::Question, ["BIGINT", "DOUBLE", "LONGBLOB", "TEXT", "VARCHAR(255)"]);
    const DEFAULT_PORT: u16 = 3306;

    /// UTF-8 text, compared byte for byte as SQLite does.
    fn table_options() -> &'static str {
        " default charset=utf8mb4 collate=utf8mb4_bin"
    }

    fn bind(q: Query<'_, sqlx::MySql>, c: Cell, _ty: ParamType) -> Query<'_, sqlx::MySql> {
        super::sql_provider::bind_as_is(q, c)
    }

    /// For snapshot tables (`[memory] snapshots`): the columns of the table
    /// in the connection's database, and all its rows. Memory answers only
    /// integer keys and ranges of them (`memory::Compare`): MySQL's usual
    /// collations compare text without case.
    fn table_queries(table: &str) -> Option<(String, String)> {
        let lit = table.replace('\'', "''");
        let describe = format!(
            "select cast(column_name as char), cast(data_type as char) from information_schema.columns \
             where table_schema = database() and table_name = '{lit}' order by ordinal_position"
        );
        Some((describe, format!("select * from {}", super::quote_ident(table, '`'))))
    }

    fn cell(row: &MySqlRow, i: usize, ty: &str) -> Result<Cell, String> {
        cell(row, i, ty)
    }

    fn rewrite_sql(&self, sql: String) -> Result<String, super::RewriteError> {
        super::rewrite_helper_calls(&sql, &helper_expression)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `ip4_int(x)` writes `x` out five times: nested twelve deep, the
    /// statement would be hundreds of megabytes. The rewrite stops at the
    /// bound instead, having held little more than it.
    #[test]
    fn nested_helpers_stop_at_the_size_bound() {
        let mut arg = "addr".to_string();
        for _ in 0..12 {
            arg = format!("ip4_int({arg})");
        }
        let sql = format!("select name from hosts where {arg} = 1");
        let started = std::time::Instant::now();
        let err = MySql.rewrite_sql(sql).unwrap_err();
        assert_eq!(err, crate::RewriteError::TooLong);
        assert!(err.to_string().contains("longer than 65536 bytes"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
        // Two deep is well within it.
        let ok = MySql.rewrite_sql("select name from hosts where ip4_int(trim_quotes(addr)) = 1".into()).unwrap();
        assert!(ok.len() < 4096 && !ok.contains("trim_quotes(") && !ok.contains("ip4_int("), "{ok}");
    }

    /// The guard reads names in any case, and so does the rewrite: an
    /// upper-case helper is written out, never left for the server's own
    /// function of that name.
    #[test]
    fn helper_names_are_read_in_any_case() {
        let sql = MySql.rewrite_sql("select name from hosts where IP4_INT(addr) = Ip4_Int(:ip)".into()).unwrap();
        assert!(!sql.to_ascii_lowercase().contains("ip4_int"), "{sql}");
        assert_eq!(sql, MySql.rewrite_sql("select name from hosts where ip4_int(addr) = ip4_int(:ip)".into()).unwrap());
    }
}
