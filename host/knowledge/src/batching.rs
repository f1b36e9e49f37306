//! Batching misses under load: while a quarter of a statement's lookup
//! connections run it, further misses of a single-key lookup wait, and all
//! that waited go in one `= ANY($1)` / `IN (…)` query when one returns. A
//! batch the database refuses is retried key by key.
//!
//! A batch answers each key as the single-key statement would: that
//! statement's lookup takes its first row (in its `order by`, if any), so
//! the batch asks for exactly that row of each key, through a window
//! (`row_number() over (partition by key order by …) = 1`, see
//! `sql_provider::per_key`), never for every row of a repeated key. A
//! statement ending in `limit 0` (no row, ever) is not batched; `limit n`
//! with n ≥ 1 leaves the first row, the one the batch keeps. The rows and
//! bytes a batch reads are bounded while it reads them (one row a key,
//! [`MAX_ANSWER_BYTES`](super::sql_provider::MAX_ANSWER_BYTES) in all):
//! past the bound it stops reading, and its keys are asked one by one,
//! each under the bound of one answer.

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use super::guard::{Checked, Term};
use super::{BoundStatement, Knowledge, LookupError, LookupErrorKind, ParamType, ProviderError, coerce};
use omlet_lang::Cell;

/// How to fetch many keys of a single-key lookup (`… where col = :p`) at once.
#[derive(Debug, Clone)]
pub struct BatchPlan {
    /// `select row_number() over (partition by col[ order by …]) as
    /// omlet_rn, col as omlet_key, <columns> from table where col`: the
    /// provider appends `= ANY($1)` or `in (?, …)` and keeps the rows
    /// numbered 1, the first of each key in the statement's order. The
    /// number comes back first, which the provider drops, then the key.
    pub select: String,
    /// The type of the single parameter (from the single-key statement).
    pub key_type: ParamType,
}

/// The batch form of a statement the guard read (`c`), if it is
/// `select C from T where K = :p` with `p` its only parameter (then maybe
/// ` order by …`, which orders each key's rows, and ` limit n`, which the
/// first row of each key honours for n ≥ 1; see [`keeps_first_row`]).
/// Built from what the guard read, not from the text again.
pub(super) fn batch_select(c: &Checked, params: &[String]) -> Option<String> {
    let [param] = params else { return None };
    // The condition is one comparison of a column with the parameter.
    let [Term { column, op, param: p }] = c.terms.as_deref()? else { return None };
    if !c.plain || op != "=" || p != param || !column.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let cols = if c.columns.len() == 1 && c.columns[0] == "*" { format!("{}.*", c.table) } else { c.columns.join(",") };
    let order = c.order.as_deref().unwrap_or("");
    Some(format!(
        "select row_number() over (partition by {column}{order}) as omlet_rn, {column} as omlet_key, {cols} from {} where {column}",
        c.table
    ))
}

/// Whether the first row of each key is what `sql` (a bound statement
/// with a batch form) answers: yes unless it ends in `limit n` with n not
/// at least 1 (`limit 0` answers no row). The guard lets `limit` only end
/// a statement, followed by a number. Checked once, when the statement is
/// bound: a statement it refuses gets no batch plan.
pub(super) fn keeps_first_row(sql: &str) -> bool {
    let mut words = sql.split_ascii_whitespace().rev();
    match (words.next(), words.next()) {
        (Some(n), Some(limit)) if limit.eq_ignore_ascii_case("limit") => n.parse::<u64>().is_ok_and(|n| n >= 1),
        _ => true,
    }
}

/// How many queries of one batchable statement may be in flight before
/// further misses wait to be batched: a quarter of the provider's lookup
/// connections, at least 2 (but no more than there are connections). A
/// larger share keeps more single-key queries in flight at high load, where
/// fewer, larger batches answer more lookups per round trip; on this
/// project's 2-core machine a quarter did better than all of them at c=16
/// and c=64 and no worse at c=4 (BENCHMARKS.md).
pub(super) fn batch_slots(connections: usize) -> usize {
    (connections / 4).max(2).min(connections.max(1))
}

/// One batchable statement's misses: how many of its queries are in flight,
/// and the misses that arrived while all of them were.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) in_flight: usize,
    pub(super) queue: Vec<(Cell, Waiter)>,
}

/// Holds one of a statement's query slots; giving it back hands queued
/// misses to the next query first. If the lookup that holds it is dropped
/// mid-way (its caller gave up), the slot is freed and the misses queued
/// behind it are told, rather than left waiting for a query that may never
/// come.
struct Slot<'k> {
    pending: &'k Mutex<std::collections::HashMap<usize, Pending>>,
    stmt: usize,
    done: bool,
}

impl Slot<'_> {
    /// The misses that queued while this slot's query ran (keeping the
    /// slot), or `None` after freeing it when there are none.
    fn next(&mut self) -> Option<Vec<(Cell, Waiter)>> {
        let mut pending = self.pending.lock().ok()?;
        let p = pending.entry(self.stmt).or_default();
        if p.queue.is_empty() {
            p.in_flight = p.in_flight.saturating_sub(1);
            self.done = true;
            None
        } else {
            Some(std::mem::take(&mut p.queue))
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let queued = match self.pending.lock() {
            Ok(mut pending) => {
                let p = pending.entry(self.stmt).or_default();
                p.in_flight = p.in_flight.saturating_sub(1);
                std::mem::take(&mut p.queue)
            }
            Err(_) => Vec::new(),
        };
        for (_, tx) in queued {
            let _ = tx.send(Err(LookupError::failed("the lookup that was to run this one was cancelled")));
        }
    }
}

type Waiter = tokio::sync::oneshot::Sender<Result<Option<Vec<Cell>>, LookupError>>;

/// Whether a key the database returned is the key a lookup asked for.
fn same_key(returned: &Cell, asked: &Cell) -> bool {
    match (returned, asked) {
        (Cell::Integer(a), Cell::Integer(b)) => a == b,
        (Cell::Real(a), Cell::Real(b)) => a == b,
        (Cell::Integer(a), Cell::Real(b)) | (Cell::Real(b), Cell::Integer(a)) => *a as f64 == *b,
        (Cell::Text(a), Cell::Text(b)) => a == b,
        (Cell::Blob(a), Cell::Blob(b)) => a == b,
        (Cell::Integer(a), Cell::Text(b)) | (Cell::Text(b), Cell::Integer(a)) => b.trim().parse::<i64>() == Ok(*a),
        (Cell::Real(a), Cell::Text(b)) | (Cell::Text(b), Cell::Real(a)) => b.trim().parse::<f64>() == Ok(*a),
        _ => false,
    }
}

impl Knowledge {
    /// A lookup the caches could not answer. When the statement allows
    /// batching, it runs at once if fewer of the statement's queries are in
    /// flight than [`batch_slots`]; otherwise it waits, and every miss that
    /// waited goes in one query as soon as one of those finishes. So a light
    /// load pays no wait for batching, and a heavy one sends fewer, larger
    /// queries.
    pub(super) async fn miss(&self, stmt: &BoundStatement, bound: Vec<Cell>) -> Result<Option<Vec<Cell>>, LookupError> {
        let Some(plan) = &stmt.batch else {
            return self.fetch(stmt, bound).await;
        };
        let key = bound.into_iter().next().unwrap_or(Cell::Null);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let runs_now = {
            let mut pending = self.pending.lock().map_err(|_| LookupError::failed("lookup queue poisoned"))?;
            let p = pending.entry(stmt.stats).or_default();
            if p.in_flight < batch_slots(self.provider_of(stmt).lookup_connections()) {
                p.in_flight += 1;
                Some((key, tx))
            } else {
                p.queue.push((key, tx));
                None
            }
        };
        if let Some(first) = runs_now {
            let mut slot = Slot { pending: &self.pending, stmt: stmt.stats, done: false };
            let mut batch = vec![first];
            loop {
                self.flush(stmt, plan, batch).await;
                match slot.next() {
                    Some(queued) => batch = queued,
                    None => break,
                }
            }
        }
        rx.await.unwrap_or_else(|_| Err(LookupError::failed("the batched lookup was dropped")))
    }

    async fn flush(&self, stmt: &BoundStatement, plan: &BatchPlan, batch: Vec<(Cell, Waiter)>) {
        if batch.len() == 1 {
            let (key, tx) = batch.into_iter().next().unwrap_or_else(|| unreachable!());
            let _ = tx.send(self.fetch(stmt, vec![key]).await);
            return;
        }
        self.stats.batched.fetch_add(batch.len() as u64, Ordering::Relaxed);
        let keys: Vec<Cell> = batch.iter().map(|(k, _)| coerce(k.clone(), plan.key_type)).collect();
        let mut distinct: Vec<Cell> = Vec::with_capacity(keys.len());
        for k in &keys {
            if !matches!(k, Cell::Null) && !distinct.contains(k) {
                distinct.push(k.clone());
            }
        }
        let provider = self.provider_of(stmt);
        // A batch cut at its bound is no failure: its keys go one by one.
        let many = Box::pin(async move {
            match provider.query_many(plan, distinct).await {
                Ok(rows) => Ok(Some(rows)),
                Err(ProviderError::Limit { message, .. }) => {
                    tracing::debug!(statement = %stmt.sql, "{message}; asking its keys one by one");
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        });
        let rows = match self.timed(stmt, many).await {
            Ok(Some(rows)) => rows,
            Ok(None) => {
                for (key, tx) in batch {
                    let _ = tx.send(self.fetch(stmt, vec![key]).await);
                }
                return;
            }
            // One key the database refuses (text with a NUL byte on
            // PostgreSQL, say) fails the whole query: ask again key by key,
            // so that only that key's lookup fails. A timeout is not retried
            // (the keys would wait out the timeout once each), nor a database
            // that cannot be reached (each key would fail the same way).
            Err(e) if e.kind == LookupErrorKind::Failed => {
                tracing::debug!(statement = %stmt.sql, error = %e, "batched lookup failed; retrying its keys one by one");
                for (key, tx) in batch {
                    let _ = tx.send(self.fetch(stmt, vec![key]).await);
                }
                return;
            }
            Err(e) => {
                for (_, tx) in batch {
                    let _ = tx.send(Err(e.clone()));
                }
                return;
            }
        };
        for ((_, tx), key) in batch.into_iter().zip(keys) {
            let answer = rows.iter().find(|r| r.first().is_some_and(|k| same_key(k, &key))).map(|r| r[1..].to_vec());
            let _ = tx.send(Ok(answer));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batched(sql: &str, params: &[&str]) -> Option<String> {
        let checked = super::super::guard::check(sql, &Default::default()).unwrap();
        batch_select(&checked, &params.iter().map(|p| p.to_string()).collect::<Vec<_>>())
    }

    /// The batch form numbers each key's rows in the statement's order and
    /// drops `limit` (the first row of each key honours it; see
    /// `keeps_first_row`).
    #[test]
    fn a_batch_numbers_each_keys_rows_in_the_statements_order() {
        let form = |order: &str, cols: &str| {
            Some(format!(
                "select row_number() over (partition by zone{order}) as omlet_rn, zone as omlet_key, {cols} from r where zone"
            ))
        };
        assert_eq!(batched("select lo from r where zone = :z order by lo desc limit 1", &["z"]), form(" order by lo desc", "lo"));
        assert_eq!(batched("select lo from r where zone = :z", &["z"]), form("", "lo"));
        assert_eq!(batched("select lo from r where :z = zone", &["z"]), form("", "lo"), "the column on either side");
        assert_eq!(batched("select * from r where zone = :z", &["z"]), form("", "r.*"));
    }

    #[test]
    fn limit_zero_is_not_batched() {
        assert!(keeps_first_row("select lo from r where zone = $1 order by lo limit 1"));
        assert!(keeps_first_row("select lo from r where zone = $1 LIMIT 20"));
        assert!(keeps_first_row("select lo from r where zone = ?"));
        assert!(!keeps_first_row("select lo from r where zone = ? limit 0"));
        assert!(!keeps_first_row("select lo from r where zone = ? limit 1.5"), "not a count: not batched");
    }

    #[test]
    fn only_one_key_compared_with_its_parameter_batches() {
        for (sql, params) in [
            ("select lo from r where zone = :z and x = ' order by ' order by lo", &["z"][..]),
            ("select lo from r where zone = :z and x = :y", &["z", "y"]),
            ("select lo from r where (zone = :z)", &["z"]),
            ("select lo from r where zone <= :z", &["z"]),
            ("select lo from r where zone = :z or zone = :z", &["z"]),
            ("select count(*) from r where zone = :z", &["z"]),
            ("select lo from r where zone = 'a'", &[]),
        ] {
            assert_eq!(batched(sql, params), None, "{sql}");
        }
    }
}
