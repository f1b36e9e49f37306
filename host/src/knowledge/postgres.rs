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
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Column, Either, Executor, Row, SqlSafeStr, Statement, TypeInfo, ValueRef};

use super::lanes::{self, Lanes};
use super::{BatchPlan, BoxFuture, ParamType, Placeholders, Prepared, Provider, coerce};
use crate::{Error, Result};

/// A PostgreSQL database. Lookups run on up to `pool_size` connections of
/// their own, one round trip each (see `lanes`); loading tables and
/// preparing statements go through a small sqlx pool. Every connection gets
/// the helper functions as temporary functions.
pub struct PostgresProvider {
    pool: PgPool,
    lanes: Lanes<PgConnection>,
}

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

/// A lookup connection's setup: the helpers, and a server-side statement
/// timeout equal to the query timeout, so that a lookup omlet gave up on
/// does not go on running in the server.
fn lookup_setup(statement_timeout: Duration) -> lanes::Setup<PgConnection> {
    let ms = statement_timeout.as_millis().max(1);
    Arc::new(move |conn: &mut PgConnection| {
        Box::pin(async move {
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

impl PostgresProvider {
    /// Connects to `url` (`postgres://…`); lookups use up to `pool_size`
    /// connections (at least 1), and loading and preparing up to 2 more.
    /// `connect_timeout` bounds each wait for a connection, the first one
    /// included. Fails with [`Error::Knowledge`] if the database cannot be
    /// reached.
    ///
    /// Lookup connections carry `statement_timeout` (the query timeout): a
    /// lookup cut by omlet's timeout is cancelled by the server too.
    pub async fn connect(
        url: &str,
        pool_size: u32,
        connect_timeout: Duration,
        statement_timeout: Duration,
    ) -> Result<PostgresProvider> {
        let err = |e: sqlx::Error| Error::Knowledge(format!("postgres: {}", super::config::redact(&e.to_string())));
        let options: PgConnectOptions = url.parse().map_err(err)?;
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(connect_timeout)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    create_helpers(conn).await;
                    Ok(())
                })
            })
            .connect_with(options.clone())
            .await
            .map_err(err)?;
        let setup = lookup_setup(statement_timeout);
        Ok(PostgresProvider { pool, lanes: Lanes::new(options, pool_size, connect_timeout, Some(setup)) })
    }

    /// The sqlx pool, for queries outside the [`Provider`] interface.
    pub fn pool(&self) -> &PgPool {
        &self.pool
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

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, PgArguments>;

fn bind(q: PgQuery<'_>, c: Cell, ty: ParamType) -> PgQuery<'_> {
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

fn cells(row: &PgRow) -> Result<Vec<Cell>, String> {
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
            "INT2" => Cell::Integer(row.try_get::<i16, _>(i).map_err(e)? as i64),
            "INT4" => Cell::Integer(row.try_get::<i32, _>(i).map_err(e)? as i64),
            "INT8" => Cell::Integer(row.try_get::<i64, _>(i).map_err(e)?),
            "FLOAT4" => Cell::Real(row.try_get::<f32, _>(i).map_err(e)? as f64),
            "FLOAT8" => Cell::Real(row.try_get::<f64, _>(i).map_err(e)?),
            "BOOL" => Cell::Integer(row.try_get::<bool, _>(i).map_err(e)? as i64),
            "BYTEA" => Cell::Blob(row.try_get::<Vec<u8>, _>(i).map_err(e)?),
            _ => Cell::Text(row.try_get_unchecked::<String, _>(i).map_err(|_| format!("column {i}: unsupported type {ty}"))?),
        });
    }
    Ok(out)
}

/// The batched query for one statement's misses: its keys as one array,
/// typed as the key column.
fn any_query(sql: String, plan: &BatchPlan, keys: &[Cell]) -> PgQuery<'static> {
    let q = sqlx::query(AssertSqlSafe(sql));
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

impl Provider for PostgresProvider {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn rewrite_sql(&self, sql: String) -> String {
        super::qualify_helpers(&sql, "pg_temp")
    }

    fn placeholders(&self) -> Placeholders {
        Placeholders::Dollar
    }

    fn lookup_connections(&self) -> usize {
        self.lanes.size()
    }

    fn prepare<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<Prepared, String>> {
        Box::pin(async move {
            let stmt = (&self.pool).prepare(AssertSqlSafe(sql.to_string()).into_sql_str()).await.map_err(|e| e.to_string())?;
            let params = match stmt.parameters() {
                Some(Either::Left(types)) => types.iter().map(|t| param_type(t.name())).collect(),
                _ => Vec::new(),
            };
            Ok(Prepared { columns: stmt.columns().iter().map(|c| c.name().to_string()).collect(), params })
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
                .run(lanes::query(|conn: &mut PgConnection| {
                    let mut q = sqlx::query(AssertSqlSafe(stmt.sql.to_string()));
                    for (i, p) in params.iter().enumerate() {
                        q = bind(q, p.clone(), stmt.param_types.get(i).copied().unwrap_or(ParamType::Any));
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
            let sql = format!("{} = ANY($1)", plan.select);
            let rows = self
                .lanes
                .run(lanes::query(|conn: &mut PgConnection| Box::pin(any_query(sql.clone(), plan, &keys).fetch_all(conn))))
                .await?;
            rows.iter().map(cells).collect()
        })
    }

    fn prepare_many<'a>(&'a self, plan: &'a BatchPlan) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let sql = format!("{} = ANY($1)", plan.select);
            (&self.pool).prepare(AssertSqlSafe(sql).into_sql_str()).await.map(|_| ()).map_err(|e| e.to_string())
        })
    }

    fn create_table_sql(&self, table: &str, columns: &[String], types: &[String]) -> String {
        super::table_sql(table, columns, types, '"', column_type, |i| format!("${i}")).0
    }

    fn insert_rows<'a>(
        &'a self,
        table: &'a str,
        columns: &'a [String],
        rows: &'a [Vec<Cell>],
        skip_bad: bool,
    ) -> BoxFuture<'a, Result<(u64, u64)>> {
        Box::pin(async move {
            let (_, insert) = super::table_sql(table, columns, &[], '"', column_type, |i| format!("${i}"));
            let row_err = |n: usize, e: sqlx::Error| Error::Knowledge(format!("table {table}, row {}: {e}", n + 1));
            let (mut inserted, mut skipped) = (0, 0);
            if skip_bad {
                for (n, row) in rows.iter().enumerate() {
                    let mut q = sqlx::query(AssertSqlSafe(insert.clone()));
                    for c in row {
                        q = bind(q, c.clone(), ParamType::Any);
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
                    q = bind(q, c.clone(), ParamType::Any);
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
            let sql = format!("select count(*) from {}", super::quote_ident(table, '"'));
            let row = sqlx::query(AssertSqlSafe(sql)).fetch_one(&self.pool).await.map_err(|e| Error::Knowledge(e.to_string()))?;
            row.try_get::<i64, _>(0).map_err(|e| Error::Knowledge(e.to_string()))
        })
    }
}

/// A SQLite column type in PostgreSQL's terms.
fn column_type(t: &str) -> String {
    let upper = t.to_ascii_uppercase();
    let pk = if upper.contains("PRIMARY KEY") { " PRIMARY KEY" } else { "" };
    let base = match upper.split_whitespace().next().unwrap_or("TEXT") {
        "INTEGER" | "INT" | "BIGINT" => "BIGINT",
        "REAL" | "FLOAT" | "DOUBLE" => "DOUBLE PRECISION",
        "BLOB" => "BYTEA",
        _ => "TEXT",
    };
    format!("{base}{pk}")
}
