//! SQLite through sqlx: the embedded default provider.

use std::str::FromStr;

use omlet_lang::Cell;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteRow};
use sqlx::{AssertSqlSafe, Column, Executor, Row, SqlSafeStr, Statement, TypeInfo, ValueRef};

use super::{BatchPlan, BoundStatement, BoxFuture, Placeholders, Prepared, Provider};
use crate::{Error, Result};

/// An SQLite database: in memory, or a file.
pub struct SqliteProvider {
    pool: SqlitePool,
}

impl SqliteProvider {
    /// A fresh in-memory database. It lives as long as its one connection,
    /// so the pool keeps exactly one, forever.
    pub async fn memory() -> Result<SqliteProvider> {
        let opts = SqliteConnectOptions::from_str("sqlite::memory:").map_err(knowledge_err)?;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(opts)
            .await
            .map_err(knowledge_err)?;
        Ok(SqliteProvider { pool })
    }

    /// A database file (created if missing).
    pub async fn open(path: &std::path::Path) -> Result<SqliteProvider> {
        let opts = SqliteConnectOptions::new().filename(path).create_if_missing(true);
        let pool = SqlitePoolOptions::new().max_connections(4).connect_with(opts).await.map_err(knowledge_err)?;
        Ok(SqliteProvider { pool })
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

    fn prepare<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<Prepared, String>> {
        Box::pin(async move {
            let stmt = (&self.pool)
                .prepare(AssertSqlSafe(sql.to_string()).into_sql_str())
                .await
                .map_err(|e| e.to_string())?;
            Ok(Prepared { columns: stmt.columns().iter().map(|c| c.name().to_string()).collect(), params: Vec::new() })
        })
    }

    fn query_many<'a>(&'a self, plan: &'a BatchPlan, keys: Vec<Cell>) -> BoxFuture<'a, Result<Vec<Vec<Cell>>, String>> {
        Box::pin(async move {
            let sql = format!("{} in ({})", plan.select, vec!["?"; keys.len().max(1)].join(", "));
            let mut q = sqlx::query(AssertSqlSafe(sql));
            if keys.is_empty() {
                q = bind(q, Cell::Null);
            }
            for k in keys {
                q = bind(q, k);
            }
            let rows = q.fetch_all(&self.pool).await.map_err(|e| e.to_string())?;
            rows.iter().map(cells).collect()
        })
    }

    fn prepare_many<'a>(&'a self, plan: &'a BatchPlan) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let sql = format!("{} in (?)", plan.select);
            (&self.pool).prepare(AssertSqlSafe(sql).into_sql_str()).await.map(|_| ()).map_err(|e| e.to_string())
        })
    }

    fn load_table<'a>(&'a self, table: &'a str, columns: &'a [String], types: &'a [String], rows: &'a [Vec<Cell>]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let (create, insert) = super::table_sql(table, columns, types, '"', str::to_string, |_| "?".into());
            let mut tx = self.pool.begin().await.map_err(knowledge_err)?;
            (&mut *tx).execute(AssertSqlSafe(create)).await.map_err(knowledge_err)?;
            for (n, row) in rows.iter().enumerate() {
                let mut q = sqlx::query(AssertSqlSafe(insert.clone()));
                for c in row {
                    q = bind(q, c.clone());
                }
                q.execute(&mut *tx).await.map_err(|e| Error::Knowledge(format!("table {table}, row {}: {e}", n + 1)))?;
            }
            tx.commit().await.map_err(knowledge_err)
        })
    }

    fn insert_rows<'a>(&'a self, table: &'a str, columns: &'a [String], rows: &'a [Vec<Cell>], skip_bad: bool) -> BoxFuture<'a, Result<(u64, u64)>> {
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
            let sql = format!("drop table if exists \"{}\"", table.replace('"', "\"\""));
            sqlx::query(AssertSqlSafe(sql)).execute(&self.pool).await.map_err(knowledge_err)?;
            Ok(())
        })
    }

    fn execute<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::raw_sql(AssertSqlSafe(sql.to_string())).execute(&self.pool).await.map_err(|e| Error::Knowledge(format!("`{sql}`: {e}")))?;
            Ok(())
        })
    }

    fn close<'a>(&'a self) -> BoxFuture<'a, ()> {
        Box::pin(self.pool.close())
    }

    fn count<'a>(&'a self, table: &'a str) -> BoxFuture<'a, Result<i64>> {
        Box::pin(async move {
            let sql = format!("select count(*) from \"{}\"", table.replace('"', "\"\""));
            let row = sqlx::query(AssertSqlSafe(sql)).fetch_one(&self.pool).await.map_err(knowledge_err)?;
            row.try_get::<i64, _>(0).map_err(knowledge_err)
        })
    }

    fn query_first<'a>(&'a self, stmt: &'a BoundStatement, params: Vec<Cell>) -> BoxFuture<'a, Result<Option<Vec<Cell>>, String>> {
        Box::pin(async move {
            let mut q = sqlx::query(AssertSqlSafe(stmt.sql.to_string()));
            for p in params {
                q = bind(q, p);
            }
            match q.fetch_optional(&self.pool).await.map_err(|e| e.to_string())? {
                Some(row) => cells(&row).map(Some),
                None => Ok(None),
            }
        })
    }
}
