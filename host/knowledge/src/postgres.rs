//! PostgreSQL through a sqlx pool.
//!
//! PostgreSQL types every parameter when it prepares a statement, and it does
//! not compare an integer column with text. So each parameter is coerced to
//! the type PostgreSQL inferred for it (`'1001'` becomes `1001` against a
//! BIGINT column), as SQLite's affinity would; a value that cannot be
//! coerced binds NULL, which matches nothing.

use std::sync::Arc;
use std::time::Duration;

use omlet_lang::Cell;
use sqlx::postgres::{PgConnection, PgRow, PgStatement};
use sqlx::{AssertSqlSafe, Either, Row, Statement, TypeInfo};

use super::lanes::{self};
use super::sql_provider::Query;
use super::sql_provider::Spec;
use super::{BatchPlan, BoxFuture, Dialect, ParamType, Placeholders, SqlProvider, coerce};
use crate::Result;

/// PostgreSQL's dialect: `$n` placeholders, parameters coerced to the types
/// PostgreSQL infers, helpers as temporary functions (`pg_temp.`),
/// `= ANY($1)` batches (each key's first row).
pub struct Postgres;

/// A PostgreSQL database. Lookups run on up to `pool_size` connections of
/// their own, one round trip each (see `lanes`); loading tables and
/// preparing statements go through a small sqlx pool. Every connection gets
/// the helper functions as temporary functions.
pub type PostgresProvider = SqlProvider<Postgres>;

/// The helper functions on a new connection. If they cannot be created,
/// that is logged, and lookups that use them fail at load.
fn create_helpers(conn: &mut PgConnection) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        // Temporary functions need no rights on the user's schemas.
        if let Err(e) = sqlx::raw_sql(HELPERS_SQL).execute(&mut *conn).await {
            tracing::warn!(error = %e, "cannot create the OML helper functions on this connection");
        }
    })
}

/// Makes the session read literals the standard way, whatever the server,
/// the database or the role set: `standard_conforming_strings = on` (a
/// backslash in `'…'` is a character, as the guard and the compiler read
/// it) and `backslash_quote = off` (`\'` is never a quote). Without it, a
/// rule's `'\'` would end its literal elsewhere than the guard saw. An
/// error fails the connection. (A `SET` rather than startup options:
/// poolers such as PgBouncer refuse unknown startup parameters.)
async fn standard_strings(conn: &mut PgConnection) -> Result<(), String> {
    let sql = "SET standard_conforming_strings = on; SET backslash_quote = off";
    sqlx::raw_sql(sql).execute(&mut *conn).await.map_err(|e| format!("cannot set standard_conforming_strings: {e}"))?;
    Ok(())
}

/// A lookup connection's setup: standard strings, the helpers, and a
/// server-side statement timeout equal to the query timeout, so that a
/// lookup omlet gave up on does not go on running in the server.
fn lookup_setup(statement_timeout: Duration) -> lanes::Setup<PgConnection> {
    let ms = statement_timeout.as_millis().max(1);
    Arc::new(move |conn: &mut PgConnection| {
        Box::pin(async move {
            standard_strings(conn).await?;
            create_helpers(conn).await;
            let sql = format!("SET statement_timeout = {ms}");
            sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(&mut *conn)
                .await
                .map_err(|e| format!("cannot set statement_timeout: {e}"))?;
            Ok(())
        })
    })
}

impl SqlProvider<Postgres> {
    /// Connects to `url` (`postgres://…`); lookups use up to `pool_size`
    /// connections (at least 1), and loading and preparing up to 2 more.
    /// `connect_timeout` bounds each wait for a connection, the first one
    /// included. Fails with [`Error::Knowledge`](crate::Error::Knowledge) if the database cannot be
    /// reached.
    ///
    /// Every connection runs with `standard_conforming_strings = on` and
    /// `backslash_quote = off`, so that a backslash in a rule's SQL literal
    /// is a plain character, as the guard reads it, even where the server,
    /// database or role turns standard strings off. Lookup connections
    /// carry `statement_timeout` (the query timeout): a lookup cut by
    /// omlet's timeout is cancelled by the server too.
    pub async fn connect(
        url: &str,
        pool_size: u32,
        connect_timeout: Duration,
        statement_timeout: Duration,
    ) -> Result<PostgresProvider> {
        let pool_setup: lanes::Setup<PgConnection> = Arc::new(|conn: &mut PgConnection| {
            Box::pin(async move {
                standard_strings(conn).await?;
                create_helpers(conn).await;
                Ok(())
            })
        });
        SqlProvider::connect_server(url, pool_size, connect_timeout, pool_setup, lookup_setup(statement_timeout), Postgres).await
    }
}

fn param_type(name: &str) -> ParamType {
    match name {
        "INT2" => ParamType::Int16,
        "INT4" => ParamType::Int32,
        "INT8" => ParamType::Int64,
        "FLOAT4" | "FLOAT8" => ParamType::Float,
        "BOOL" => ParamType::Bool,
        "BYTEA" => ParamType::Bytes,
        _ => ParamType::Text,
    }
}

fn bind(q: Query<'_, sqlx::Postgres>, c: Cell, ty: ParamType) -> Query<'_, sqlx::Postgres> {
    match (coerce(c, ty), ty) {
        (Cell::Null, ParamType::Int16) => q.bind(None::<i16>),
        (Cell::Null, ParamType::Int32) => q.bind(None::<i32>),
        (Cell::Null, ParamType::Int64) => q.bind(None::<i64>),
        (Cell::Null, ParamType::Float) => q.bind(None::<f64>),
        (Cell::Null, ParamType::Bool) => q.bind(None::<bool>),
        (Cell::Null, ParamType::Bytes) => q.bind(None::<Vec<u8>>),
        (Cell::Null, _) => q.bind(None::<String>),
        (Cell::Integer(i), ParamType::Int16) => q.bind(i as i16),
        (Cell::Integer(i), ParamType::Int32) => q.bind(i as i32),
        (Cell::Integer(i), ParamType::Bool) => q.bind(i != 0),
        (Cell::Integer(i), _) => q.bind(i),
        (Cell::Real(f), _) => q.bind(f),
        (Cell::Text(s), _) => q.bind(s),
        (Cell::Blob(b), _) => q.bind(b),
    }
}

fn cell(row: &PgRow, i: usize, ty: &str) -> Result<Cell, String> {
    let e = |e: sqlx::Error| e.to_string();
    Ok(match ty {
        "INT2" => Cell::Integer(row.try_get::<i16, _>(i).map_err(e)? as i64),
        "INT4" => Cell::Integer(row.try_get::<i32, _>(i).map_err(e)? as i64),
        "INT8" => Cell::Integer(row.try_get::<i64, _>(i).map_err(e)?),
        "FLOAT4" => Cell::Real(row.try_get::<f32, _>(i).map_err(e)? as f64),
        "FLOAT8" => Cell::Real(row.try_get::<f64, _>(i).map_err(e)?),
        "BOOL" => Cell::Integer(row.try_get::<bool, _>(i).map_err(e)? as i64),
        "BYTEA" => Cell::Blob(row.try_get::<Vec<u8>, _>(i).map_err(e)?),
        _ => Cell::Text(row.try_get_unchecked::<String, _>(i).map_err(|_| format!("column {i}: unsupported type {ty}"))?),
    })
}

/// The batched query for one statement's misses: its keys as one array,
/// typed as the key column.
fn bind_any<'q>(q: Query<'q, sqlx::Postgres>, plan: &BatchPlan, keys: &[Cell]) -> Query<'q, sqlx::Postgres> {
    let ints = || keys.iter().filter_map(|k| if let Cell::Integer(i) = k { Some(*i) } else { None });
    match plan.key_type {
        ParamType::Int16 => q.bind(ints().map(|i| i as i16).collect::<Vec<_>>()),
        ParamType::Int32 => q.bind(ints().map(|i| i as i32).collect::<Vec<_>>()),
        ParamType::Int64 => q.bind(ints().collect::<Vec<_>>()),
        ParamType::Bool => q.bind(ints().map(|i| i != 0).collect::<Vec<_>>()),
        ParamType::Float => {
            q.bind(keys.iter().filter_map(|k| if let Cell::Real(f) = k { Some(*f) } else { None }).collect::<Vec<_>>())
        }
        ParamType::Bytes => {
            q.bind(keys.iter().filter_map(|k| if let Cell::Blob(b) = k { Some(b.clone()) } else { None }).collect::<Vec<_>>())
        }
        ParamType::Text | ParamType::Any => q.bind(
            keys.iter()
                .filter_map(|k| match coerce(k.clone(), ParamType::Text) {
                    Cell::Text(s) => Some(s),
                    _ => None,
                })
                .collect::<Vec<_>>(),
        ),
    }
}

/// The helper functions as temporary functions of each connection.
const HELPERS_SQL: &str = include_str!("pg_helpers.sql");

impl Dialect for Postgres {
    type Db = sqlx::Postgres;
    const SPEC: Spec = Spec::new("postgres", '"', Placeholders::Dollar, ["BIGINT", "DOUBLE PRECISION", "BYTEA", "TEXT", "TEXT"]);
    const DEFAULT_PORT: u16 = 5432;

    fn bind(q: Query<'_, sqlx::Postgres>, c: Cell, ty: ParamType) -> Query<'_, sqlx::Postgres> {
        bind(q, c, ty)
    }

    fn cell(row: &PgRow, i: usize, ty: &str) -> Result<Cell, String> {
        cell(row, i, ty)
    }

    /// For snapshot tables (`[memory] snapshots`): the columns of the table
    /// in the connection's schema, and all its rows. Memory answers them
    /// only where PostgreSQL compares as memory does (`memory::Compare`).
    fn table_queries(table: &str) -> Option<(String, String)> {
        let lit = table.replace('\'', "''");
        let describe = format!(
            "select column_name::text, data_type::text from information_schema.columns \
             where table_schema = current_schema() and table_name = '{lit}' order by ordinal_position"
        );
        Some((describe, format!("select * from {}", super::quote_ident(table, '"'))))
    }

    fn param_types(stmt: &PgStatement) -> Vec<ParamType> {
        match stmt.parameters() {
            Some(Either::Left(types)) => types.iter().map(|t| param_type(t.name())).collect(),
            _ => Vec::new(),
        }
    }

    fn rewrite_sql(&self, sql: String) -> Result<String, super::RewriteError> {
        super::qualify_helpers(&sql, "pg_temp")
    }

    fn raw_bytes(row: &PgRow, i: usize) -> Option<usize> {
        row.try_get_raw(i).ok()?.as_bytes().ok().map(<[u8]>::len)
    }

    fn batch_sql(plan: &BatchPlan, _keys: usize) -> String {
        super::sql_provider::per_key(plan, " = ANY($1)")
    }

    fn bind_batch<'q>(q: Query<'q, sqlx::Postgres>, plan: &BatchPlan, keys: &[Cell]) -> Query<'q, sqlx::Postgres> {
        bind_any(q, plan, keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A helper written in upper case reaches omlet's temporary function,
    /// not a function of that name in the user's schemas.
    #[test]
    fn helper_names_are_read_in_any_case() {
        let sql = Postgres.rewrite_sql("select a from t where IP4_INT(c) = Cidr4_Min(:n) and x = 'IP4_INT(c)'".into()).unwrap();
        assert_eq!(sql, "select a from t where pg_temp.ip4_int(c) = pg_temp.cidr4_min(:n) and x = 'IP4_INT(c)'");
    }
}
