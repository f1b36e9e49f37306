//! Knowledge: how the host answers `knowledge.query`.
//!
//! A [`Provider`] runs SQL against one database. [`Knowledge`] wraps a
//! provider with what every rule shares: a generation number (bumped by
//! [`Knowledge::reload`], passed to the guest with each call so that its
//! cache forgets old answers) and counters.
//!
//! A rule's statements are bound to a provider at load ([`Knowledge::bind`]):
//! each is rewritten to the provider's placeholders and prepared, so a
//! missing table or column fails the load with the rule's file and line, and
//! only those statements can ever run for that rule.

pub mod knowdb;
pub mod sqlite;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use omlet_lang::Cell;
use omlet_lang::ir::SqlStatement;

use crate::{Error, Result};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a provider writes positional parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholders {
    /// `?` for each occurrence (SQLite, MySQL).
    Question,
    /// `$1`, `$2`, … (PostgreSQL).
    Dollar,
}

/// One database behind `knowledge.query`.
pub trait Provider: Send + Sync + 'static {
    /// For messages: `sqlite`, `postgres`, …
    fn kind(&self) -> &'static str;
    fn placeholders(&self) -> Placeholders;
    /// Prepares a statement (in this provider's dialect) and returns its column names.
    fn prepare<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<Vec<String>, String>>;
    /// Runs a prepared statement and returns its first row.
    fn query_first<'a>(&'a self, sql: &'a str, params: Vec<Cell>) -> BoxFuture<'a, Result<Option<Vec<Cell>>, String>>;
}

/// Counters, shared by every rule bound to the same knowledge.
#[derive(Debug, Default)]
pub struct Stats {
    pub lookups: AtomicU64,
    pub errors: AtomicU64,
}

/// A provider plus generation and counters.
pub struct Knowledge {
    provider: Arc<dyn Provider>,
    generation: AtomicU64,
    stats: Stats,
}

/// A statement bound to a provider: rewritten, prepared, described.
#[derive(Debug, Clone)]
pub struct BoundStatement {
    /// SQL in the provider's dialect.
    pub sql: String,
    /// For each placeholder in `sql`, the index of the guest parameter it takes.
    pub order: Vec<usize>,
    pub columns: Vec<String>,
}

impl Knowledge {
    pub fn new(provider: Arc<dyn Provider>) -> Knowledge {
        Knowledge { provider, generation: AtomicU64::new(1), stats: Stats::default() }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Marks all cached answers stale: the next call of every rule passes a
    /// new generation to its guest.
    pub fn reload(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// Binds a rule's statements; fails naming the first that the database rejects.
    pub async fn bind(&self, statements: &[SqlStatement]) -> Result<Vec<BoundStatement>> {
        let mut out = Vec::with_capacity(statements.len());
        for s in statements {
            let (sql, order) = rewrite_placeholders(&s.sql, &s.params, self.provider.placeholders());
            let columns = self.provider.prepare(&sql).await.map_err(|message| Error::Statement {
                file: s.file.clone(),
                line: s.line,
                column: s.column,
                sql: s.sql.clone(),
                message,
            })?;
            out.push(BoundStatement { sql, order, columns });
        }
        Ok(out)
    }

    /// Runs a bound statement with the guest's parameters.
    pub async fn query(&self, stmt: &BoundStatement, params: &[Cell]) -> Result<Option<Vec<Cell>>, String> {
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        let bound: Vec<Cell> = stmt.order.iter().map(|&i| params.get(i).cloned().unwrap_or(Cell::Null)).collect();
        let r = self.provider.query_first(&stmt.sql, bound).await;
        if r.is_err() {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

/// Rewrites `:name` parameters to positional placeholders. Returns the new
/// SQL and, per placeholder, the index of the parameter in `params`. Quoted
/// strings are left alone.
pub fn rewrite_placeholders(sql: &str, params: &[String], style: Placeholders) -> (String, Vec<usize>) {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\'' || c == b'"' {
            let end = sql[i + 1..].find(c as char).map(|e| i + 1 + e + 1).unwrap_or(b.len());
            out.push_str(&sql[i..end]);
            i = end;
        } else if c == b':' && i + 1 < b.len() && (b[i + 1].is_ascii_alphanumeric() || b[i + 1] == b'_') {
            let start = i + 1;
            let mut end = start;
            while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                end += 1;
            }
            let name = &sql[start..end];
            match params.iter().position(|p| p == name) {
                Some(idx) => {
                    order.push(idx);
                    match style {
                        Placeholders::Question => out.push('?'),
                        Placeholders::Dollar => out.push_str(&format!("${}", order.len())),
                    }
                }
                None => out.push_str(&sql[i..end]),
            }
            i = end;
        } else {
            let ch = sql[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    (out, order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_follow_occurrences() {
        let params = vec!["ip".to_string(), "name".to_string()];
        let (sql, order) = rewrite_placeholders(
            "select a from t where (lo <= :ip and hi >= :ip) or n = ':ip' or m = :name",
            &params,
            Placeholders::Dollar,
        );
        assert_eq!(sql, "select a from t where (lo <= $1 and hi >= $2) or n = ':ip' or m = $3");
        assert_eq!(order, vec![0, 0, 1]);
        let (sql, _) = rewrite_placeholders("x = :name", &params, Placeholders::Question);
        assert_eq!(sql, "x = ?");
    }
}
