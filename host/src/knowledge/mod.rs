//! Knowledge: how the host answers `knowledge.query`.
//!
//! A [`Provider`] runs SQL against one database (SQLite, PostgreSQL,
//! MySQL/MariaDB); dialect differences stay inside it. [`Knowledge`] wraps a
//! provider with what every rule shares:
//!
//! - a **generation** number, bumped by [`Knowledge::reload`] and passed to
//!   the guest with each call, so that guest caches forget old answers;
//! - the **shared cache** (moka): capacity, TTL, negative caching of "no
//!   row", single-flight (concurrent misses on one key make one query), or
//!   `bypass`. Keys are (generation, statement, parameters), so nothing
//!   cached before a reload is served after it;
//! - the **failure policy** (`absent` or `fail`) and the query timeout;
//! - **counters** and per-statement latency histograms.
//!
//! Each guest instance also keeps its own cache (no locks: an instance runs
//! one call at a time); it is the per-worker local layer, and it holds an
//! answer until the generation changes. With a TTL the generation also
//! advances every TTL period, so no guest entry outlives it by more than one
//! period.
//!
//! A rule's statements are bound to a provider at load ([`Knowledge::bind`]):
//! each is rewritten to the provider's placeholders and prepared, so a
//! missing table or column fails the load with the rule's file and line, and
//! only those statements can ever run for that rule (the allow-list).

pub mod config;
pub mod guard;
pub mod knowdb;
mod lanes;
pub mod mysql;
pub mod postgres;
pub mod sqlite;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omlet_lang::Cell;
use omlet_lang::ir::SqlStatement;

pub use config::{CacheMode, KnowledgeConfig, OnLookupError};

use crate::{Error, Result};

/// The boxed `Send` future that [`Provider`] methods return, so that the
/// trait can be used as `dyn Provider`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a provider writes positional parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholders {
    /// `?` for each occurrence (SQLite, MySQL).
    Question,
    /// `$1`, `$2`, … (PostgreSQL).
    Dollar,
}

/// The type a provider expects for a parameter, when it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// Not known (SQLite and MySQL do not say): the value is bound as it is.
    Any,
    /// PostgreSQL `INT2`; a value out of range binds NULL.
    Int16,
    /// PostgreSQL `INT4`; a value out of range binds NULL.
    Int32,
    /// PostgreSQL `INT8`.
    Int64,
    /// PostgreSQL `FLOAT4` or `FLOAT8`.
    Float,
    /// PostgreSQL text, and every type not listed here.
    Text,
    /// PostgreSQL `BOOL`, bound from an integer (non-zero is true).
    Bool,
    /// PostgreSQL `BYTEA`.
    Bytes,
}

/// What preparing a statement tells.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// Names of the result columns, in order.
    pub columns: Vec<String>,
    /// One per placeholder, if the database types parameters; else empty.
    pub params: Vec<ParamType>,
}

/// One database behind `knowledge.query`.
pub trait Provider: Send + Sync + 'static {
    /// For messages: `sqlite`, `postgres`, `mysql`.
    fn kind(&self) -> &'static str;
    /// How this provider's SQL writes positional parameters.
    fn placeholders(&self) -> Placeholders;
    /// Adapts a statement, still with its `:name` parameters, to this
    /// provider (for example, how the helper functions are reached; a
    /// parameter may be repeated). The default keeps it.
    fn rewrite_sql(&self, sql: String) -> String {
        sql
    }
    /// How many lookups this provider runs at once (its lookup
    /// connections); batching of misses is sized from it (`batch_slots`).
    /// The default is 1.
    fn lookup_connections(&self) -> usize {
        1
    }
    /// Prepares a statement (in this provider's dialect).
    fn prepare<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<Prepared, String>>;
    /// Runs a bound statement and returns its first row.
    fn query_first<'a>(&'a self, stmt: &'a BoundStatement, params: Vec<Cell>)
    -> BoxFuture<'a, Result<Option<Vec<Cell>>, String>>;
    /// Runs a batch plan for several keys; returns every matching row, its key first.
    fn query_many<'a>(&'a self, plan: &'a BatchPlan, keys: Vec<Cell>) -> BoxFuture<'a, Result<Vec<Vec<Cell>>, String>>;
    /// Checks that a batch plan runs here (prepares it).
    fn prepare_many<'a>(&'a self, plan: &'a BatchPlan) -> BoxFuture<'a, Result<(), String>>;

    /// `CREATE TABLE` in this dialect, from column types in SQLite's terms
    /// (INTEGER, REAL, TEXT, BLOB, optionally PRIMARY KEY).
    fn create_table_sql(&self, table: &str, columns: &[String], types: &[String]) -> String;

    /// Creates `table` and inserts `rows` (all or nothing). Used by the
    /// knowdb loader and `omlet test`.
    fn load_table<'a>(
        &'a self,
        table: &'a str,
        columns: &'a [String],
        types: &'a [String],
        rows: &'a [Vec<Cell>],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.execute(&self.create_table_sql(table, columns, types)).await?;
            self.insert_rows(table, columns, rows, false).await.map(|_| ())
        })
    }
    /// Inserts `rows` into an existing table. With `skip_bad`, a row the
    /// database rejects is skipped (and counted) instead of failing the load.
    /// Returns (inserted, skipped).
    fn insert_rows<'a>(
        &'a self,
        table: &'a str,
        columns: &'a [String],
        rows: &'a [Vec<Cell>],
        skip_bad: bool,
    ) -> BoxFuture<'a, Result<(u64, u64)>>;
    /// Drops `table` if it exists.
    fn drop_table<'a>(&'a self, table: &'a str) -> BoxFuture<'a, Result<()>>;
    /// The number of rows in `table`.
    fn count<'a>(&'a self, table: &'a str) -> BoxFuture<'a, Result<i64>>;
    /// Runs one administrative statement (DDL) outside the allow-list.
    fn execute<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<()>>;
    /// Closes the pool.
    fn close<'a>(&'a self) -> BoxFuture<'a, ()>;
}

/// `CREATE TABLE` and `INSERT` texts for a dialect: `quote` wraps
/// identifiers, `ty` maps a SQLite column type, `ph(i)` writes placeholder i.
/// `name` as a quoted SQL identifier (`"a""b"`, or with backquotes for MySQL).
pub(crate) fn quote_ident(name: &str, quote: char) -> String {
    format!("{quote}{}{quote}", name.replace(quote, &format!("{quote}{quote}")))
}

pub(crate) fn table_sql(
    table: &str,
    columns: &[String],
    types: &[String],
    quote: char,
    ty: impl Fn(&str) -> String,
    ph: impl Fn(usize) -> String,
) -> (String, String) {
    let q = |s: &str| quote_ident(s, quote);
    let cols: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{} {}", q(c), ty(types.get(i).map(String::as_str).unwrap_or("TEXT"))))
        .collect();
    let create = format!("create table {} ({})", q(table), cols.join(", "));
    let insert = format!("insert into {} values ({})", q(table), (1..=columns.len()).map(&ph).collect::<Vec<_>>().join(", "));
    (create, insert)
}

/// Coerces a parameter to the type the database expects, the way SQLite's
/// affinity would compare it; `Null` when it cannot be (it then matches nothing).
pub fn coerce(c: Cell, ty: ParamType) -> Cell {
    match (ty, c) {
        (ParamType::Any, c) | (_, c @ Cell::Null) => c,
        (ParamType::Int16 | ParamType::Int32 | ParamType::Int64 | ParamType::Bool, c) => {
            let i =
                match c {
                    Cell::Integer(i) => Some(i),
                    Cell::Real(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Some(f as i64),
                    Cell::Text(s) => s.trim().parse::<i64>().ok().or_else(|| {
                        s.trim().parse::<f64>().ok().filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18).map(|f| f as i64)
                    }),
                    _ => None,
                };
            let fits = |i: i64| match ty {
                ParamType::Int16 => i16::try_from(i).is_ok(),
                ParamType::Int32 => i32::try_from(i).is_ok(),
                _ => true,
            };
            i.filter(|i| fits(*i)).map(Cell::Integer).unwrap_or(Cell::Null)
        }
        (ParamType::Float, Cell::Integer(i)) => Cell::Real(i as f64),
        (ParamType::Float, Cell::Text(s)) => s.trim().parse().map(Cell::Real).unwrap_or(Cell::Null),
        (ParamType::Float, c @ Cell::Real(_)) => c,
        (ParamType::Float, Cell::Blob(_)) => Cell::Null,
        (ParamType::Text, Cell::Integer(i)) => Cell::Text(i.to_string()),
        (ParamType::Text, Cell::Real(f)) => Cell::Text(f.to_string()),
        (ParamType::Text, Cell::Blob(b)) => Cell::Text(String::from_utf8_lossy(&b).into_owned()),
        (ParamType::Text, c @ Cell::Text(_)) => c,
        (ParamType::Bytes, Cell::Text(s)) => Cell::Blob(s.into_bytes()),
        (ParamType::Bytes, c @ Cell::Blob(_)) => c,
        (ParamType::Bytes, _) => Cell::Null,
    }
}

/// A statement bound to a provider: rewritten, prepared, described.
#[derive(Debug, Clone)]
pub struct BoundStatement {
    /// SQL in the provider's dialect.
    pub sql: Arc<str>,
    /// For each placeholder in `sql`, the index of the guest parameter it takes.
    pub order: Vec<usize>,
    /// For each placeholder, the type the database expects (may be empty).
    pub param_types: Vec<ParamType>,
    /// Names of the result columns, in order (what the guest's `columns`
    /// call returns).
    pub columns: Vec<String>,
    /// Index into [`Stats::statements`].
    pub stats: usize,
    /// Set when the statement is a single-key lookup whose misses can be batched.
    pub batch: Option<BatchPlan>,
}

/// How to fetch many keys of a single-key lookup (`… where col = :p`) at once.
#[derive(Debug, Clone)]
pub struct BatchPlan {
    /// `select col, <columns> from table where col`: the provider appends
    /// `= ANY($1)` or `in (?, …)`. The key comes back as the first column.
    pub select: String,
    /// The type of the single parameter (from the single-key statement).
    pub key_type: ParamType,
}

/// The batch form of a statement, if it is `select C from T where K = :p`.
fn batch_select(s: &SqlStatement) -> Option<String> {
    let [param] = s.params.as_slice() else { return None };
    let where_at = s.sql.find(" where ")?;
    let cond = &s.sql[where_at + 7..];
    let (col, rhs) = cond.split_once(" = ")?;
    if rhs != format!(":{param}") || !col.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
        return None;
    }
    let cols = if s.columns.len() == 1 && s.columns[0] == "*" { format!("{}.*", s.table) } else { s.columns.join(",") };
    Some(format!("select {col}, {cols} from {} where {col}", s.table))
}

/// Latency histogram: counts per power-of-two bucket of microseconds.
#[derive(Debug, Default, Clone)]
pub struct Histogram {
    /// `buckets[i]` counts latencies in `[2^(i-1), 2^i)` µs (`buckets[0]`: under 1 µs).
    pub buckets: [u64; 24],
    /// Latencies recorded.
    pub count: u64,
    /// Their sum, in µs (for the mean).
    pub total_us: f64,
}

impl Histogram {
    /// Counts one latency; 2^22 µs (about 4 s) and more go to the last bucket.
    pub fn record(&mut self, d: Duration) {
        let us = d.as_secs_f64() * 1e6;
        let i = if us < 1.0 { 0 } else { (us.log2() as usize + 1).min(23) };
        self.buckets[i] += 1;
        self.count += 1;
        self.total_us += us;
    }

    /// Upper bound (µs) of the bucket holding quantile `q` (0..1);
    /// `f64::INFINITY` when nothing was recorded.
    pub fn quantile_us(&self, q: f64) -> f64 {
        let target = (self.count as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= target.max(1) {
                return (1u64 << i) as f64;
            }
        }
        f64::INFINITY
    }
}

/// A latency histogram that records without locks (for cache hits).
#[derive(Debug, Default)]
pub struct AtomicHistogram {
    buckets: [AtomicU64; 24],
    count: AtomicU64,
    total_ns: AtomicU64,
}

impl AtomicHistogram {
    /// Counts one latency, as [`Histogram::record`] does.
    pub fn record(&self, d: Duration) {
        let us = d.as_secs_f64() * 1e6;
        let i = if us < 1.0 { 0 } else { (us.log2() as usize + 1).min(23) };
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// A copy of the counts so far. Not atomic as a whole: a latency
    /// recorded meanwhile may be in some fields and not yet in others.
    pub fn snapshot(&self) -> Histogram {
        let mut h = Histogram::default();
        for (i, b) in self.buckets.iter().enumerate() {
            h.buckets[i] = b.load(Ordering::Relaxed);
        }
        h.count = self.count.load(Ordering::Relaxed);
        h.total_us = self.total_ns.load(Ordering::Relaxed) as f64 / 1e3;
        h
    }
}

/// Per-statement figures.
#[derive(Debug, Default, Clone)]
pub struct StatementStats {
    /// The statement in the provider's dialect. Rules that bind the same
    /// text share one entry.
    pub sql: String,
    /// Database round trips sent (a batched query counts once).
    pub queries: u64,
    /// Round trips that failed or timed out.
    pub errors: u64,
    /// Database round trips.
    pub latency: Histogram,
}

/// Counters shared by every rule bound to the same knowledge.
#[derive(Debug, Default)]
pub struct Stats {
    /// Lookups that reached the host (the guest cache missed).
    pub lookups: AtomicU64,
    /// Shared-cache hits.
    pub hits: AtomicU64,
    /// Shared-cache misses; concurrent misses on one key count each, though
    /// they share one query. Not counted in bypass mode.
    pub misses: AtomicU64,
    /// Queries sent to the database.
    pub queries: AtomicU64,
    /// Lookups answered by a batched query.
    pub batched: AtomicU64,
    /// How long shared-cache hits take (the cache layer's latency).
    pub hit_latency: AtomicHistogram,
    /// Queries that failed or timed out (a failed batch counts once).
    pub errors: AtomicU64,
    /// Per-statement figures, indexed by [`BoundStatement::stats`].
    pub statements: Mutex<Vec<StatementStats>>,
}

impl Stats {
    fn get(&self, a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }

    /// A JSON summary (for `omlet run --stats json`).
    pub fn to_json(&self) -> serde_json::Value {
        let stmts = self.statements.lock().map(|s| s.clone()).unwrap_or_default();
        let h = self.hit_latency.snapshot();
        let hit = serde_json::json!({
            "p50": h.quantile_us(0.5),
            "p95": h.quantile_us(0.95),
            "mean": if h.count > 0 { h.total_us / h.count as f64 } else { 0.0 },
        });
        serde_json::json!({
            "lookups": self.get(&self.lookups),
            "cache_hits": self.get(&self.hits),
            "cache_misses": self.get(&self.misses),
            "queries": self.get(&self.queries),
            "batched_lookups": self.get(&self.batched),
            "shared_cache_hit_us": hit,
            "errors": self.get(&self.errors),
            "statements": stmts.iter().map(|s| serde_json::json!({
                "sql": s.sql, "queries": s.queries, "errors": s.errors,
                "p50_us": s.latency.quantile_us(0.5), "p95_us": s.latency.quantile_us(0.95),
                "mean_us": if s.latency.count > 0 { s.latency.total_us / s.latency.count as f64 } else { 0.0 },
            })).collect::<Vec<_>>(),
        })
    }
}

#[derive(Clone, Hash, PartialEq, Eq)]
struct CacheKey {
    generation: u64,
    sql: Arc<str>,
    params: Vec<u8>,
}

#[derive(Debug)]
enum Miss {
    NoRow,
    Failed(LookupError),
}

/// Why a lookup got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupError {
    /// What kind of failure.
    pub kind: LookupErrorKind,
    /// The database's message, or what omlet saw.
    pub message: String,
}

/// The kinds of [`LookupError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LookupErrorKind {
    /// The query took longer than the query timeout (and was cancelled).
    Timeout,
    /// The database refused the query or could not be reached.
    Failed,
}

impl LookupError {
    fn failed(message: impl Into<String>) -> LookupError {
        LookupError { kind: LookupErrorKind::Failed, message: message.into() }
    }
}

impl std::fmt::Display for LookupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LookupError {}

type Row = Option<Arc<Vec<Cell>>>;

/// How many queries of one batchable statement may be in flight before
/// further misses wait to be batched: a quarter of the provider's lookup
/// connections, at least 2 (but no more than there are connections). A
/// larger share keeps more single-key queries in flight at high load, where
/// fewer, larger batches answer more lookups per round trip; on this
/// project's 2-core machine a quarter did better than all of them at c=16
/// and c=64 and no worse at c=4 (BENCHMARKS.md).
fn batch_slots(connections: usize) -> usize {
    (connections / 4).max(2).min(connections.max(1))
}

/// One batchable statement's misses: how many of its queries are in flight,
/// and the misses that arrived while all of them were.
#[derive(Default)]
struct Pending {
    in_flight: usize,
    queue: Vec<(Cell, Waiter)>,
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

/// A provider plus generation, shared cache, policy and counters.
pub struct Knowledge {
    provider: Arc<dyn Provider>,
    config: KnowledgeConfig,
    generation: AtomicU64,
    born: Instant,
    cache: Option<moka::future::Cache<CacheKey, Row>>,
    /// Per statement: its queries in flight, and the misses waiting for one.
    pending: Mutex<std::collections::HashMap<usize, Pending>>,
    stats: Stats,
}

impl Knowledge {
    /// Knowledge with the default settings (shared cache on, errors make lookups absent).
    pub fn new(provider: Arc<dyn Provider>) -> Knowledge {
        Knowledge::with_config(provider, KnowledgeConfig::default())
    }

    /// Knowledge over a connected provider, with the cache, policy and query
    /// timeout of `config`. Its `url`, `pool_size`, `connect_timeout_ms` and
    /// `knowdb` are only kept: connecting and loading are
    /// [`KnowledgeConfig::open`]'s job.
    pub fn with_config(provider: Arc<dyn Provider>, config: KnowledgeConfig) -> Knowledge {
        let cache = match config.cache.mode {
            CacheMode::Bypass => None,
            CacheMode::Shared => {
                let mut b = moka::future::Cache::builder().max_capacity(config.cache.capacity);
                if let Some(ttl) = config.cache.ttl() {
                    b = b.time_to_live(ttl);
                }
                Some(b.build())
            }
        };
        Knowledge {
            provider,
            config,
            generation: AtomicU64::new(1),
            born: Instant::now(),
            cache,
            pending: Mutex::new(Default::default()),
            stats: Stats::default(),
        }
    }

    /// The settings it was made with.
    pub fn config(&self) -> &KnowledgeConfig {
        &self.config
    }

    /// The generation the guest sees: bumped by [`reload`](Self::reload),
    /// and advanced every TTL period when a TTL is set.
    pub fn generation(&self) -> u64 {
        let base = self.generation.load(Ordering::Acquire);
        match self.config.cache.ttl() {
            Some(ttl) if !ttl.is_zero() => {
                let epoch = (self.born.elapsed().as_nanos() / ttl.as_nanos()) as u64;
                (base << 32) | (epoch & 0xFFFF_FFFF)
            }
            _ => base,
        }
    }

    /// Marks everything cached stale. When it returns, no call of any rule
    /// will be answered from an older entry (guests get the new generation
    /// on their next call; shared-cache keys carry it). Calls already
    /// running finish on the state they started with.
    pub fn reload(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(c) = &self.cache {
            c.invalidate_all();
        }
    }

    /// Entries in the shared cache, after pending evictions ran.
    pub async fn cached_entries(&self) -> u64 {
        match &self.cache {
            Some(c) => {
                c.run_pending_tasks().await;
                c.entry_count()
            }
            None => 0,
        }
    }

    /// Whether guests may keep answers: not in bypass mode, and not turned
    /// off with `cache.guest = false`.
    pub fn cacheable(&self) -> bool {
        self.cache.is_some() && self.config.cache.guest
    }

    /// The counters (what `omlet run --stats` prints).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The database behind it, for loading tables or running DDL outside
    /// the allow-list.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// Binds a rule's statements; fails with [`Error::Statement`] naming the
    /// first that the database rejects.
    pub async fn bind(&self, statements: &[SqlStatement]) -> Result<Vec<BoundStatement>> {
        let mut out = Vec::with_capacity(statements.len());
        let policy = guard::Policy { tables: self.config.tables.clone(), functions: self.config.functions.clone() };
        for s in statements {
            let refused =
                |message| Error::Statement { file: s.file.clone(), line: s.line, column: s.column, sql: s.sql.clone(), message };
            // What the rule may reach, before anything goes to the database.
            let checked = guard::check(&s.sql, &policy).map_err(refused)?;
            // The batch form is built from what the SQL reads, never from the
            // component's own account of its table and columns.
            let s = &SqlStatement { table: checked.table, columns: checked.columns, ..s.clone() };
            // Dialect rewrites first, so that a parameter they repeat gets
            // a placeholder per occurrence.
            let sql = self.provider.rewrite_sql(s.sql.clone());
            let (sql, order) = rewrite_placeholders(&sql, &s.params, self.provider.placeholders());
            let prepared = self.provider.prepare(&sql).await.map_err(refused)?;
            let stats = {
                let mut st = self.stats.statements.lock().map_err(|_| Error::Knowledge("stats poisoned".into()))?;
                match st.iter().position(|x| x.sql == sql) {
                    Some(i) => i,
                    None => {
                        st.push(StatementStats { sql: sql.clone(), ..Default::default() });
                        st.len() - 1
                    }
                }
            };
            let mut bound = BoundStatement {
                sql: sql.into(),
                order,
                param_types: prepared.params,
                columns: prepared.columns,
                stats,
                batch: None,
            };
            if self.config.batch_misses
                && let Some(select) = batch_select(s)
            {
                let key_type = bound.param_types.first().copied().unwrap_or(ParamType::Any);
                let plan = BatchPlan { select, key_type };
                // A plan the database refuses just means no batching for it.
                if self.provider.prepare_many(&plan).await.is_ok() {
                    bound.batch = Some(plan);
                }
            }
            out.push(bound);
        }
        Ok(out)
    }

    /// Answers a lookup: shared cache, then the database. `params` are the
    /// guest's, in the order of the rule's parameters. `Ok(None)` is "no
    /// row"; `Err` carries the database's message or the timeout.
    pub async fn query(&self, stmt: &BoundStatement, params: &[Cell]) -> Result<Option<Vec<Cell>>, LookupError> {
        self.query_at(self.generation(), stmt, params).await
    }

    /// [`Knowledge::query`] within one generation: the shared cache is read
    /// and written under `generation`, the one its call started with, so
    /// that every lookup of one record uses one generation even when
    /// [`Knowledge::reload`] runs in the middle of the call.
    pub async fn query_at(
        &self,
        generation: u64,
        stmt: &BoundStatement,
        params: &[Cell],
    ) -> Result<Option<Vec<Cell>>, LookupError> {
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        let bound: Vec<Cell> = stmt.order.iter().map(|&i| params.get(i).cloned().unwrap_or(Cell::Null)).collect();
        let Some(cache) = &self.cache else {
            return self.miss(stmt, bound).await;
        };
        let started = Instant::now();
        let key = CacheKey { generation, sql: stmt.sql.clone(), params: encode(&bound) };
        if let Some(row) = cache.get(&key).await {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            self.stats.hit_latency.record(started.elapsed());
            return Ok(row.map(|r| (*r).clone()));
        }
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        let negative = self.config.cache.negative;
        // Concurrent misses on one key wait for this one query (single-flight).
        let got = cache
            .try_get_with(key, async {
                match self.miss(stmt, bound).await {
                    Ok(Some(row)) => Ok(Some(Arc::new(row))),
                    Ok(None) if negative => Ok(None),
                    Ok(None) => Err(Miss::NoRow),
                    Err(e) => Err(Miss::Failed(e)),
                }
            })
            .await;
        match got {
            Ok(row) => Ok(row.map(|r| (*r).clone())),
            Err(e) => match &*e {
                Miss::NoRow => Ok(None),
                Miss::Failed(m) => Err(m.clone()),
            },
        }
    }

    /// A lookup the caches could not answer. When the statement allows
    /// batching, it runs at once if fewer of the statement's queries are in
    /// flight than [`batch_slots`]; otherwise it waits, and every miss that
    /// waited goes in one query as soon as one of those finishes. So a light
    /// load pays no wait for batching, and a heavy one sends fewer, larger
    /// queries.
    async fn miss(&self, stmt: &BoundStatement, bound: Vec<Cell>) -> Result<Option<Vec<Cell>>, LookupError> {
        let Some(plan) = &stmt.batch else {
            return self.fetch(stmt, bound).await;
        };
        let key = bound.into_iter().next().unwrap_or(Cell::Null);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let runs_now = {
            let mut pending = self.pending.lock().map_err(|_| LookupError::failed("lookup queue poisoned"))?;
            let p = pending.entry(stmt.stats).or_default();
            if p.in_flight < batch_slots(self.provider.lookup_connections()) {
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
        let rows = self.timed(stmt, self.provider.query_many(plan, distinct)).await;
        let rows = match rows {
            Ok(rows) => rows,
            // One key the database refuses (text with a NUL byte on
            // PostgreSQL, say) fails the whole query: ask again key by key,
            // so that only that key's lookup fails. A timeout is not retried:
            // the keys would wait out the timeout once each.
            Err(e) if e.kind != LookupErrorKind::Timeout => {
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

    /// One database round trip, with the timeout and the counters.
    async fn fetch(&self, stmt: &BoundStatement, bound: Vec<Cell>) -> Result<Option<Vec<Cell>>, LookupError> {
        self.timed(stmt, self.provider.query_first(stmt, bound)).await
    }

    async fn timed<T>(&self, stmt: &BoundStatement, query: BoxFuture<'_, Result<T, String>>) -> Result<T, LookupError> {
        self.stats.queries.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let r = match tokio::time::timeout(self.config.query_timeout(), query).await {
            Ok(r) => r.map_err(LookupError::failed),
            Err(_) => Err(LookupError {
                kind: LookupErrorKind::Timeout,
                message: format!("query timed out after {:?}", self.config.query_timeout()),
            }),
        };
        if let Ok(mut st) = self.stats.statements.lock()
            && let Some(s) = st.get_mut(stmt.stats)
        {
            s.queries += 1;
            s.latency.record(started.elapsed());
            if r.is_err() {
                s.errors += 1;
            }
        }
        if let Err(e) = &r {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(statement = %stmt.sql, error = %e, "lookup failed");
        }
        r
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

/// A compact, exact key for a parameter list.
fn encode(params: &[Cell]) -> Vec<u8> {
    let mut k = Vec::with_capacity(params.len() * 9);
    omlet_lang::eval::push_cells_key(params, &mut k);
    k
}

/// The SQL helper functions of spec §8.11.4.
pub const HELPER_FUNCTIONS: &[&str] =
    &["ip4_int", "ip4_between", "cidr4_min", "cidr4_max", "cidr4_contains", "ip4_text", "trim_quotes"];

/// Copies `sql`, passing quoted strings through untouched; everywhere else
/// `at(sql, i, out)` may write a replacement for what starts at byte `i` and
/// return where to go on, or `None` to copy the character as it is.
fn rewrite_outside_quotes(sql: &str, mut at: impl FnMut(&str, usize, &mut String) -> Option<usize>) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 16);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\'' || c == b'"' {
            let end = sql[i + 1..].find(c as char).map(|e| i + 1 + e + 1).unwrap_or(b.len());
            out.push_str(&sql[i..end]);
            i = end;
        } else if let Some(next) = at(sql, i, &mut out) {
            i = next;
        } else {
            let ch = sql[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Rewrites every call of a helper function (outside quotes) to
/// `write(name, args)`, where each argument has had its own calls rewritten
/// first. A call whose parentheses do not close is left as it is, for the
/// database to reject with its own message.
pub fn rewrite_helper_calls(sql: &str, write: &dyn Fn(&str, &[String]) -> String) -> String {
    rewrite_outside_quotes(sql, |sql, i, out| {
        let b = sql.as_bytes();
        if i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b'.') {
            return None;
        }
        let name =
            HELPER_FUNCTIONS.iter().find(|n| sql[i..].starts_with(**n) && sql[i + n.len()..].trim_start().starts_with('('))?;
        let open = i + name.len() + (sql[i + name.len()..].len() - sql[i + name.len()..].trim_start().len());
        let (args, end) = call_arguments(sql, open + 1)?;
        let args: Vec<String> = args.iter().map(|a| rewrite_helper_calls(a, write)).collect();
        out.push_str(&write(name, &args));
        Some(end)
    })
}

/// Splits the arguments of a call whose `(` ends just before `start`, at
/// top-level commas; returns them trimmed and the index after the `)`.
fn call_arguments(sql: &str, start: usize) -> Option<(Vec<&str>, usize)> {
    let b = sql.as_bytes();
    let (mut depth, mut from, mut i) = (0usize, start, start);
    let mut args = Vec::new();
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => i += sql[i + 1..].find(q as char)? + 1,
            b'(' => depth += 1,
            b')' if depth > 0 => depth -= 1,
            b')' => {
                let last = sql[from..i].trim();
                if !last.is_empty() || !args.is_empty() {
                    args.push(last);
                }
                return Some((args, i + 1));
            }
            b',' if depth == 0 => {
                args.push(sql[from..i].trim());
                from = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Prefixes calls of the helper functions with `schema.` (outside quotes).
pub fn qualify_helpers(sql: &str, schema: &str) -> String {
    rewrite_helper_calls(sql, &|name, args| format!("{schema}.{name}({})", args.join(", ")))
}

/// Rewrites `:name` parameters to positional placeholders. Returns the new
/// SQL and, per placeholder, the index of the parameter in `params`. Quoted
/// strings are left alone.
pub fn rewrite_placeholders(sql: &str, params: &[String], style: Placeholders) -> (String, Vec<usize>) {
    let mut order = Vec::new();
    let out = rewrite_outside_quotes(sql, |sql, i, out| {
        let b = sql.as_bytes();
        if b[i] != b':' || !b.get(i + 1).copied().is_some_and(is_ident) {
            return None;
        }
        let end = i + 1 + b[i + 1..].iter().take_while(|c| is_ident(**c)).count();
        match params.iter().position(|p| *p == sql[i + 1..end]) {
            Some(idx) => {
                order.push(idx);
                match style {
                    Placeholders::Question => out.push('?'),
                    Placeholders::Dollar => out.push_str(&format!("${}", order.len())),
                }
            }
            None => out.push_str(&sql[i..end]),
        }
        Some(end)
    });
    (out, order)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key the stand-in database refuses.
    const POISON: i64 = 13;

    /// A provider whose queries wait at a gate, counting what reaches it.
    /// (A stand-in for a database, to hold queries in flight on purpose.)
    struct Gated {
        slots: usize,
        gate: tokio::sync::Semaphore,
        first: AtomicU64,
        many: Mutex<Vec<usize>>,
    }

    impl Gated {
        fn new(slots: usize) -> Arc<Gated> {
            Arc::new(Gated {
                slots,
                gate: tokio::sync::Semaphore::new(0),
                first: AtomicU64::new(0),
                many: Mutex::new(Vec::new()),
            })
        }
        async fn pass(&self) {
            self.gate.acquire().await.unwrap().forget();
        }
    }

    impl Provider for Gated {
        fn kind(&self) -> &'static str {
            "gated"
        }
        fn placeholders(&self) -> Placeholders {
            Placeholders::Question
        }
        fn lookup_connections(&self) -> usize {
            self.slots
        }
        fn prepare<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Prepared, String>> {
            Box::pin(async { Ok(Prepared { columns: vec!["value".into()], params: Vec::new() }) })
        }
        fn query_first<'a>(
            &'a self,
            _: &'a BoundStatement,
            params: Vec<Cell>,
        ) -> BoxFuture<'a, Result<Option<Vec<Cell>>, String>> {
            Box::pin(async move {
                self.first.fetch_add(1, Ordering::SeqCst);
                self.pass().await;
                if params[0] == Cell::Integer(POISON) {
                    return Err("the database refuses this key".into());
                }
                Ok(Some(vec![Cell::Text(format!("v{:?}", params[0]))]))
            })
        }
        fn query_many<'a>(&'a self, _: &'a BatchPlan, keys: Vec<Cell>) -> BoxFuture<'a, Result<Vec<Vec<Cell>>, String>> {
            Box::pin(async move {
                self.many.lock().unwrap().push(keys.len());
                self.pass().await;
                // Like PostgreSQL's `= ANY($1)`: one bad key fails the whole query.
                if keys.contains(&Cell::Integer(POISON)) {
                    return Err("the database refuses a key of this batch".into());
                }
                Ok(keys.into_iter().map(|k| vec![k.clone(), Cell::Text(format!("v{k:?}"))]).collect())
            })
        }
        fn prepare_many<'a>(&'a self, _: &'a BatchPlan) -> BoxFuture<'a, Result<(), String>> {
            Box::pin(async { Ok(()) })
        }
        fn create_table_sql(&self, _: &str, _: &[String], _: &[String]) -> String {
            String::new()
        }
        fn insert_rows<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: &'a [Vec<Cell>],
            _: bool,
        ) -> BoxFuture<'a, Result<(u64, u64)>> {
            Box::pin(async { Ok((0, 0)) })
        }
        fn drop_table<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<()>> {
            Box::pin(async { Ok(()) })
        }
        fn count<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<i64>> {
            Box::pin(async { Ok(0) })
        }
        fn execute<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<()>> {
            Box::pin(async { Ok(()) })
        }
        fn close<'a>(&'a self) -> BoxFuture<'a, ()> {
            Box::pin(async {})
        }
    }

    async fn gated(slots: usize) -> (Arc<Gated>, Arc<Knowledge>, Arc<BoundStatement>) {
        let p = Gated::new(slots);
        let mut config = KnowledgeConfig::default();
        config.cache.mode = CacheMode::Bypass;
        let k = Arc::new(Knowledge::with_config(p.clone(), config));
        let stmt = SqlStatement {
            sql: "select value from perf where id = :id".into(),
            params: vec!["id".into()],
            table: "perf".into(),
            columns: vec!["value".into()],
            file: "t.oml".into(),
            line: 1,
            column: 1,
        };
        let bound = k.bind(&[stmt]).await.unwrap().remove(0);
        assert!(bound.batch.is_some());
        (p, k, Arc::new(bound))
    }

    async fn until(what: impl Fn() -> bool) {
        for _ in 0..2000 {
            if what() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("timed out waiting");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn misses_run_at_once_up_to_the_connections_then_queue_into_one_batch() {
        let (p, k, stmt) = gated(2).await;
        let lookups: Vec<_> = (1..=10i64)
            .map(|i| {
                let (k, stmt) = (k.clone(), stmt.clone());
                tokio::spawn(async move { (i, k.query(&stmt, &[Cell::Integer(i)]).await) })
            })
            .collect();
        // Two go to the database at once, alone; the other eight wait for a slot.
        until(|| {
            p.first.load(Ordering::SeqCst) == 2 && k.pending.lock().unwrap().values().map(|q| q.queue.len()).sum::<usize>() == 8
        })
        .await;
        assert!(p.many.lock().unwrap().is_empty());
        p.gate.add_permits(100);
        for l in lookups {
            let (i, row) = l.await.unwrap();
            assert_eq!(row, Ok(Some(vec![Cell::Text(format!("v{:?}", Cell::Integer(i)))])), "key {i}");
        }
        // The first slot to free takes all eight waiting misses in one query.
        assert_eq!(*p.many.lock().unwrap(), vec![8]);
        assert_eq!(p.first.load(Ordering::SeqCst), 2);
        assert_eq!(k.stats().batched.load(Ordering::SeqCst), 8);
        assert_eq!(k.pending.lock().unwrap().values().map(|q| q.in_flight).sum::<usize>(), 0, "every slot is given back");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_refused_for_one_key_fails_only_that_key() {
        let (p, k, stmt) = gated(2).await;
        let spawn = |i: i64| {
            let (k, stmt) = (k.clone(), stmt.clone());
            tokio::spawn(async move { (i, k.query(&stmt, &[Cell::Integer(i)]).await) })
        };
        // Two innocent keys hold both slots; the other nine, the refused key
        // among them, queue and go in one batch.
        let mut lookups = vec![spawn(10), spawn(11)];
        until(|| p.first.load(Ordering::SeqCst) == 2).await;
        lookups.extend((12..=20).map(spawn));
        until(|| k.pending.lock().unwrap().values().map(|q| q.queue.len()).sum::<usize>() == 9).await;
        p.gate.add_permits(1000);
        for l in lookups {
            let (i, row) = l.await.unwrap();
            if i == POISON {
                assert!(row.is_err(), "the refused key fails");
            } else {
                assert_eq!(row, Ok(Some(vec![Cell::Text(format!("v{:?}", Cell::Integer(i)))])), "key {i} is innocent");
            }
        }
        assert_eq!(*p.many.lock().unwrap(), vec![9], "one batch was tried");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_lookup_frees_its_slot_and_tells_those_queued_behind_it() {
        let (p, k, stmt) = gated(1).await;
        let spawn = |i: i64| {
            let (k, stmt) = (k.clone(), stmt.clone());
            tokio::spawn(async move { k.query(&stmt, &[Cell::Integer(i)]).await })
        };
        let running = spawn(1);
        until(|| p.first.load(Ordering::SeqCst) == 1).await;
        let queued = spawn(2);
        until(|| k.pending.lock().unwrap().values().any(|q| q.queue.len() == 1)).await;
        running.abort();
        let told = queued.await.unwrap();
        assert!(told.as_ref().is_err_and(|e| e.message.contains("cancelled")), "{told:?}");
        // The slot is free again: the next miss runs at once.
        p.gate.add_permits(10);
        assert_eq!(spawn(3).await.unwrap(), Ok(Some(vec![Cell::Text(format!("v{:?}", Cell::Integer(3)))])));
    }

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

    #[test]
    fn helpers_are_qualified_outside_quotes_only() {
        assert_eq!(
            qualify_helpers(
                "select a from t where cidr4_contains($1, c) = $2 and n = 'ip4_int(x)' and my_ip4_int(c) = 1",
                "pg_temp"
            ),
            "select a from t where pg_temp.cidr4_contains($1, c) = $2 and n = 'ip4_int(x)' and my_ip4_int(c) = 1"
        );
    }

    #[test]
    fn helper_calls_are_rewritten_inside_out_with_their_arguments() {
        let seen = |name: &str, args: &[String]| format!("<{name}|{}>", args.join("|"));
        assert_eq!(
            rewrite_helper_calls(
                "select a from t where ip4_between(:ip, cidr4_min(c), f(x, ')')) = 1 and n = 'ip4_int(x)' and trim_quotes ( b )",
                &seen
            ),
            "select a from t where <ip4_between|:ip|<cidr4_min|c>|f(x, ')')> = 1 and n = 'ip4_int(x)' and <trim_quotes|b>"
        );
        // An unclosed call is left for the database to reject.
        assert_eq!(rewrite_helper_calls("select ip4_int(a from t", &seen), "select ip4_int(a from t");
        // A parameter that the rewrite repeats gets a placeholder each time.
        let sql = rewrite_helper_calls("x = ip4_int(:ip)", &|_, a| format!("f({0}, {0})", a[0]));
        let (sql, order) = rewrite_placeholders(&sql, &["ip".to_string()], Placeholders::Dollar);
        assert_eq!((sql.as_str(), order), ("x = f($1, $2)", vec![0, 0]));
    }

    #[test]
    fn coercion_follows_sqlite_affinity() {
        assert_eq!(coerce(Cell::Text("1001".into()), ParamType::Int64), Cell::Integer(1001));
        assert_eq!(coerce(Cell::Text(" 7.0 ".into()), ParamType::Int32), Cell::Integer(7));
        assert_eq!(coerce(Cell::Text("abc".into()), ParamType::Int64), Cell::Null);
        assert_eq!(coerce(Cell::Integer(70_000), ParamType::Int16), Cell::Null);
        assert_eq!(coerce(Cell::Integer(5), ParamType::Text), Cell::Text("5".into()));
        assert_eq!(coerce(Cell::Integer(5), ParamType::Float), Cell::Real(5.0));
        assert_eq!(coerce(Cell::Real(2.5), ParamType::Int64), Cell::Null);
        assert_eq!(coerce(Cell::Text("x".into()), ParamType::Any), Cell::Text("x".into()));
    }

    #[test]
    fn histogram_quantiles() {
        let mut h = Histogram::default();
        for us in [3u64, 3, 3, 100] {
            h.record(Duration::from_micros(us));
        }
        assert_eq!(h.quantile_us(0.5), 4.0);
        assert_eq!(h.quantile_us(0.99), 128.0);
    }
}
