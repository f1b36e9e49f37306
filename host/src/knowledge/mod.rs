//! Knowledge: how the host answers `knowledge.query`.
//!
//! A [`Provider`] runs SQL against one database (SQLite, PostgreSQL,
//! MySQL/MariaDB); dialect differences stay inside it. [`Knowledge`] wraps a
//! provider with what every rule shares:
//!
//! - a **generation** number, bumped by [`Knowledge::reload`] and passed to
//!   the guest with each call, so that guest caches forget old answers;
//! - the **shared cache** (moka): bounded in entries and in bytes (each
//!   entry weighed by its estimated size; an answer over `max_entry_bytes`
//!   is not kept), TTL, negative caching of "no row", single-flight
//!   (concurrent misses on one key make one query), or `bypass`. Keys are
//!   (generation, statement, parameters), so nothing cached before a reload
//!   is served after it;
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

mod batching;
pub mod config;
pub mod guard;
mod intranet;
pub mod knowdb;
mod lanes;
pub mod memory;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
mod provider;
pub mod reload;
pub mod route;
mod sql;
mod sql_provider;
pub mod sqlite;
mod stats;
pub mod warp;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use omlet_lang::Cell;
use omlet_lang::ir::SqlStatement;

pub use batching::BatchPlan;
use batching::{Pending, batch_select};
pub use config::{CacheConfig, CacheMode, KnowledgeConfig, OnLookupError};
pub use intranet::IntranetNets;
/// `mode` of [`IntranetNets`]: `add` (default) or `replace`.
pub use omlet_lang::intranet::Mode as IntranetMode;
pub use provider::{BoxFuture, ParamType, Placeholders, Prepared, Provider, Tables, coerce};
pub(crate) use provider::{quote_ident, table_sql};
pub use route::Source;
pub use sql::{HELPER_FUNCTIONS, qualify_helpers, rewrite_helper_calls, rewrite_placeholders, values_for_rows};
pub use sql_provider::{Dialect, SqlProvider};
pub use stats::{AtomicHistogram, Histogram, StatementStats, Stats};

use crate::{Error, Limit, Result};

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
    /// The database it runs on: an index into the knowledge's sources (0,
    /// its own, unless a knowdb routes it elsewhere; see [`route`]).
    pub source: usize,
    /// Set when the statement is a single-key lookup whose misses can be batched.
    pub batch: Option<BatchPlan>,
    /// Set when an in-memory table answers it (see [`memory`]); SQL
    /// answers what that cannot.
    pub memory: Option<Arc<memory::Lookup>>,
    /// Which path its lookups take, for `omlet check`: `memory: hash on ip
    /// of bad_ip (…)`, or `sql`, with why not in memory when it was a
    /// knowdb table.
    pub path: String,
}

#[derive(Clone, Hash, PartialEq, Eq)]
struct CacheKey {
    generation: u64,
    source: usize,
    sql: Arc<str>,
    params: Vec<u8>,
}

#[derive(Debug)]
enum Miss {
    NoRow,
    Failed(LookupError),
    /// A row too big to keep (`cache.max_entry_bytes`): given to the
    /// callers waiting for it, not cached.
    Uncached(Arc<Vec<Cell>>),
}

/// Which layer answered a lookup that reached the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layer {
    /// An in-memory table's index.
    Memory,
    /// The shared cache.
    SharedCache,
    /// The database (or a query another lookup of the same key was making).
    Database,
}

impl Layer {
    /// How a trace names it.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Memory => "in-memory table",
            Layer::SharedCache => "shared cache",
            Layer::Database => "database",
        }
    }
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

/// A table held in memory, or why it is not.
type Held = Result<Arc<memory::Table>, String>;

/// A provider plus generation, shared cache, policy and counters.
pub struct Knowledge {
    /// The databases lookups go to: `[0]` is its own (where a knowdb's
    /// tables load), the others those a knowdb names (see [`route`]).
    /// Swapped whole when the knowdb is loaded again
    /// ([`reload_knowdb`](Self::reload_knowdb)), so that a lookup sees the
    /// old database or the new one, never a mix.
    sources: arc_swap::ArcSwap<Vec<Source>>,
    /// Where a lookup goes that names neither a local table nor a source.
    default_source: usize,
    config: KnowledgeConfig,
    generation: AtomicU64,
    born: Instant,
    cache: Option<moka::future::Cache<CacheKey, Row>>,
    /// How many bytes one unit of the cache's weight stands for (1 unless
    /// `cache.max_bytes` is above 4 GiB: moka weighs an entry in a `u32`).
    cache_unit: u64,
    /// Per statement: its queries in flight, and the misses waiting for one.
    pending: Mutex<std::collections::HashMap<usize, Pending>>,
    /// The indexes this knowledge made (or found made) on knowdb tables, as
    /// (table, columns): each is asked for once.
    indexed: Mutex<std::collections::HashSet<(String, Vec<String>)>>,
    /// Knowdb tables held in memory, read at the first bind that wants
    /// them, or why one is not.
    tables: tokio::sync::Mutex<std::collections::HashMap<(usize, String), Held>>,
    /// The networks `intranet_ip` and `access_direct` call LAN.
    intranet: Vec<omlet_lang::intranet::Net>,
    /// Lookups answered from memory, to swap when their tables are read
    /// again (snapshots on a reload, knowdb tables when the knowdb is).
    held_lookups: Mutex<Vec<HeldLookup>>,
    /// Held while the knowdb loads again: one load at a time.
    reloading: tokio::sync::Mutex<()>,
    stats: Stats,
}

/// A bound lookup of a table held in memory, and what planning it took.
#[derive(Clone)]
struct HeldLookup {
    /// A snapshot table (read again on every reload), or a knowdb table
    /// (read again when the knowdb is).
    snapshot: bool,
    source: usize,
    table: String,
    lookup: std::sync::Weak<memory::Lookup>,
    terms: Vec<guard::Term>,
    ordered: bool,
    params: Vec<String>,
    result: Vec<String>,
}

/// The in-memory plan of a statement over `held`, or why there is none.
/// With `order by`, the order decides among rows that share a key, so
/// memory answers only where at most one row can match.
fn plan(
    table: &Arc<memory::Table>,
    terms: &[guard::Term],
    ordered: bool,
    params: &[String],
    result: &[String],
) -> std::result::Result<memory::Lookup, String> {
    let l = table.plan(terms, params, result)?;
    match l.repeated() {
        n if ordered && n > 0 => Err(format!("{n} keys repeat, and the statement's `order by` decides which row answers")),
        _ => Ok(l),
    }
}

impl Knowledge {
    #[doc(hidden)]
    /// Knowledge with the default settings (shared cache on, errors make lookups absent).
    pub fn new(provider: Arc<dyn Provider>) -> Knowledge {
        Knowledge::with_config(provider, KnowledgeConfig::default())
    }

    #[doc(hidden)]
    /// Knowledge over a connected provider, with the cache, policy and query
    /// timeout of `config`. Its `url`, `pool_size`, `connect_timeout_ms` and
    /// `knowdb` are only kept: connecting and loading are
    /// [`KnowledgeConfig::open`]'s job.
    pub fn with_config(provider: Arc<dyn Provider>, config: KnowledgeConfig) -> Knowledge {
        // Weights are bytes (or units of `cache_unit` bytes); each entry
        // weighs at least max_bytes / capacity, so that the one bound holds
        // the cache to both `capacity` entries and `max_bytes` bytes.
        let cache_unit = config.cache.max_bytes.div_ceil(u64::from(u32::MAX)).max(1);
        let cache = match config.cache.mode {
            CacheMode::Bypass => None,
            CacheMode::Shared => {
                let max_units = config.cache.max_bytes / cache_unit;
                let least = max_units / config.cache.capacity.max(1);
                let mut b = moka::future::Cache::builder().max_capacity(max_units).weigher(move |k: &CacheKey, row: &Row| {
                    let units = entry_bytes(key_bytes(k), row.as_deref()).div_ceil(cache_unit).max(least);
                    u32::try_from(units).unwrap_or(u32::MAX)
                });
                if let Some(ttl) = config.cache.ttl() {
                    b = b.time_to_live(ttl);
                }
                Some(b.build())
            }
        };
        let intranet = match &config.intranet_nets {
            Some(n) => n.effective().0,
            None => omlet_lang::intranet::BUILTIN.to_vec(),
        };
        Knowledge {
            sources: arc_swap::ArcSwap::from_pointee(vec![Source::own(provider, config.tables.clone())]),
            default_source: 0,
            intranet,
            config,
            generation: AtomicU64::new(1),
            born: Instant::now(),
            cache,
            cache_unit,
            pending: Mutex::new(Default::default()),
            indexed: Mutex::new(Default::default()),
            tables: Default::default(),
            held_lookups: Mutex::new(Vec::new()),
            reloading: tokio::sync::Mutex::new(()),
            stats: Stats::default(),
        }
    }

    /// The knowledge with `databases` beside its own, which lookups reach
    /// by routing (see [`route`]): each named, each under its own
    /// allow-list. The default becomes the one named `default`, or the
    /// only one.
    pub fn with_databases(mut self, databases: Vec<Source>) -> Knowledge {
        let mut all = Vec::clone(&self.sources.load());
        all.extend(databases);
        self.default_source = route::default_of(&all);
        self.sources.store(Arc::new(all));
        self
    }

    /// The databases lookups may go to (see [`route`]); the first is its own.
    pub fn sources(&self) -> Arc<Vec<Source>> {
        self.sources.load_full()
    }

    /// Where a lookup of `sql` (as the rule wrote it) goes.
    pub fn route(&self, sql: &str) -> route::Routed {
        route::route(sql, &self.sources.load(), self.default_source, &self.config.knowdb_tables)
    }

    /// The database of a bound statement.
    fn provider_of(&self, stmt: &BoundStatement) -> Arc<dyn Provider> {
        self.provider_at(stmt.source)
    }

    /// The database of source `i` (its own, 0, when there is no such source).
    fn provider_at(&self, i: usize) -> Arc<dyn Provider> {
        let sources = self.sources.load();
        sources.get(i).unwrap_or(&sources[0]).provider.clone()
    }

    /// The settings it was made with.
    pub fn config(&self) -> &KnowledgeConfig {
        &self.config
    }

    /// The networks that `intranet_ip` and `access_direct` call LAN: the
    /// built-in private ranges, or what `[intranet_nets]` makes of them.
    pub fn intranet_nets(&self) -> &[omlet_lang::intranet::Net] {
        &self.intranet
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

    /// The shared cache's size in bytes as it counts them (each entry's
    /// estimated size, at least `cache.max_bytes / cache.capacity`), after
    /// pending evictions ran: never above `cache.max_bytes`.
    pub async fn cached_bytes(&self) -> u64 {
        match &self.cache {
            Some(c) => {
                c.run_pending_tasks().await;
                c.weighted_size().saturating_mul(self.cache_unit)
            }
            None => 0,
        }
    }

    #[doc(hidden)]
    /// Whether answers are kept in the shared cache (not in bypass mode).
    pub fn has_shared_cache(&self) -> bool {
        self.cache.is_some()
    }

    #[doc(hidden)]
    /// Whether guests may keep answers: not in bypass mode, and not turned
    /// off with `cache.guest = false`.
    pub fn cacheable(&self) -> bool {
        self.cache.is_some() && self.config.cache.guest
    }

    /// The knowdb tables held in memory so far (read at the first bind of
    /// a lookup that an index of theirs serves).
    pub async fn memory_tables(&self) -> Vec<Arc<memory::Table>> {
        self.tables.lock().await.values().filter_map(|t| t.as_ref().ok().cloned()).collect()
    }

    /// The counters (what `omlet run --stats` prints).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    #[doc(hidden)]
    /// The database behind it, for loading tables or running DDL outside
    /// the allow-list.
    pub fn provider(&self) -> Arc<dyn Provider> {
        self.provider_at(0)
    }

    /// Creates the index a lookup of a knowdb table wants, unless it was
    /// made already: the columns its condition compares with `=`, then the
    /// first it compares with `<`, `<=`, `>` or `>=` (a B-tree serves the
    /// equalities and then one range). Without it every lookup that misses
    /// the caches scans the table: 205 records/s against 200,000 rows with
    /// distinct keys, where an index gives tens of thousands. Only tables
    /// omlet loaded itself get indexes; a failure is logged, and the lookup
    /// runs without one.
    async fn index_for(&self, source: usize, checked: &guard::Checked) {
        if source != 0 || !self.config.knowdb_tables.contains(&checked.table) {
            return;
        }
        let mut columns = checked.keys.clone();
        if let Some(r) = checked.ranges.iter().find(|r| !columns.contains(r)) {
            columns.push(r.clone());
        }
        if columns.is_empty() {
            return;
        }
        let first = match self.indexed.lock() {
            Ok(mut made) => made.insert((checked.table.clone(), columns.clone())),
            Err(_) => false,
        };
        if first && let Err(e) = self.provider_at(0).create_index(&checked.table, &columns).await {
            tracing::warn!(target: "omlet::knowledge", "no index on {}({}): {e}", checked.table, columns.join(", "));
        }
    }

    /// The in-memory lookup of a statement of `table` whose condition is
    /// `terms`, and the path it takes (see [`BoundStatement::path`]). The
    /// table is read at the first statement that wants it; a table that
    /// cannot be held (too big, not SQLite, a collation) leaves its
    /// lookups in SQL, unless `memory.over_limit = "fail"`.
    async fn memory_for(
        &self,
        source: usize,
        table: &str,
        terms: Option<&[guard::Term]>,
        ordered: bool,
        params: &[String],
        result: &[String],
    ) -> Result<(Option<Arc<memory::Lookup>>, String)> {
        let cfg = &self.config.memory;
        let snapshot = cfg.snapshots.iter().any(|t| t == table);
        if !snapshot && (source != 0 || !self.config.knowdb_tables.iter().any(|t| t == table)) {
            return Ok((None, "sql".into()));
        }
        if !snapshot && !cfg.knowdb {
            return Ok((None, "sql: memory.knowdb is off".into()));
        }
        let Some(terms) = terms else {
            return Ok((None, "sql: the condition is not a conjunction of columns compared with parameters".into()));
        };
        let held = {
            let mut tables = self.tables.lock().await;
            match tables.get(&(source, table.to_string())) {
                Some(t) => t.clone(),
                None => {
                    let t = match self.read_table(source, table).await {
                        Ok(t) => Ok(Arc::new(t)),
                        Err(e @ Error::Limit { .. }) if cfg.over_limit == memory::OverLimit::Fail => return Err(e),
                        Err(e) => {
                            tracing::warn!(target: "omlet::knowledge", "{table} stays in SQL: {e}");
                            Err(e.to_string())
                        }
                    };
                    if let Ok(t) = &t {
                        tracing::info!(target: "omlet::knowledge", "{table}: {} rows in memory, about {} bytes, read in {:?}", t.len(), t.bytes, t.loaded_in);
                    }
                    tables.insert((source, table.to_string()), t.clone());
                    t
                }
            }
        };
        let planned = held.and_then(|t| plan(&t, terms, ordered, params, result));
        Ok(match planned {
            Ok(lookup) => {
                let path = lookup.describe();
                let lookup = Arc::new(lookup);
                if let Ok(mut all) = self.held_lookups.lock() {
                    all.push(HeldLookup {
                        snapshot,
                        source,
                        table: table.to_string(),
                        lookup: Arc::downgrade(&lookup),
                        terms: terms.to_vec(),
                        ordered,
                        params: params.to_vec(),
                        result: result.to_vec(),
                    });
                }
                (Some(lookup), path)
            }
            Err(why) => (None, format!("sql: {why}")),
        })
    }

    /// Reads `table` from the provider into memory, comparing as the
    /// provider's database does.
    async fn read_table(&self, source: usize, table: &str) -> Result<memory::Table> {
        Self::read_from(&self.provider_at(source), table, self.config.memory.max_table_mb).await
    }

    /// Reads `table` of `provider` into memory, at most `max_mb` MiB.
    async fn read_from(provider: &Arc<dyn Provider>, table: &str, max_mb: u64) -> Result<memory::Table> {
        let started = Instant::now();
        let data = provider.read_table(table, max_mb.saturating_mul(1 << 20)).await?;
        let compare = match provider.kind() {
            "sqlite" => memory::Compare::Sqlite,
            "postgres" => memory::Compare::Exact { text: true },
            _ => memory::Compare::Exact { text: false },
        };
        Ok(memory::Table::with_compare(table, data, started.elapsed(), compare))
    }

    /// Reads every snapshot table that a bound lookup answers from again,
    /// and swaps each such lookup to the new read (or to SQL, when the new
    /// rows cannot be indexed: keys now repeat, ranges now overlap). A table
    /// that cannot be read keeps its previous snapshot, and the error is
    /// returned after the others are done.
    pub async fn refresh_snapshots(&self) -> Result<()> {
        let lookups = self.held(|l| l.snapshot)?;
        let mut tables: Vec<(usize, &str)> = lookups.iter().map(|l| (l.source, l.table.as_str())).collect();
        tables.sort_unstable();
        tables.dedup();
        let mut failed = None;
        for (source, table) in tables {
            let fresh = match self.read_table(source, table).await {
                Ok(t) => Arc::new(t),
                Err(e) => {
                    tracing::warn!(target: "omlet::knowledge", "{table}: the snapshot stays as it was: {e}");
                    failed = Some(e);
                    continue;
                }
            };
            Self::replan(&lookups, source, table, Some(&fresh));
            self.tables.lock().await.insert((source, table.to_string()), Ok(fresh));
        }
        failed.map_or(Ok(()), Err)
    }

    /// The live lookups held in memory that `which` picks (and the list
    /// rid of the dead ones).
    fn held(&self, which: impl Fn(&HeldLookup) -> bool) -> Result<Vec<HeldLookup>> {
        match self.held_lookups.lock() {
            Ok(mut all) => {
                all.retain(|l| l.lookup.strong_count() > 0);
                Ok(all.iter().filter(|l| which(l)).cloned().collect())
            }
            Err(_) => Err(Error::Internal("the list of in-memory lookups is poisoned".into())),
        }
    }

    /// Swaps each of `lookups` on `table` of `source` to a plan over
    /// `fresh`, or to SQL when there is none or the new rows cannot be
    /// indexed (keys now repeat, ranges now overlap).
    fn replan(lookups: &[HeldLookup], source: usize, table: &str, fresh: Option<&Arc<memory::Table>>) {
        for l in lookups.iter().filter(|l| l.source == source && l.table == table) {
            let Some(lookup) = l.lookup.upgrade() else { continue };
            let planned = fresh.map(|t| plan(t, &l.terms, l.ordered, &l.params, &l.result));
            if let Some(Err(why)) = &planned {
                tracing::warn!(target: "omlet::knowledge", "{table}: lookups go to SQL until the next reload: {why}");
            }
            lookup.swap(planned.and_then(|p| p.ok()));
        }
    }

    /// Loads the knowdb again, into a fresh in-memory SQLite database, and
    /// swaps it in whole: its tables, their indexes, and the in-memory
    /// copies of them, then the caches drop their answers. A lookup sees the
    /// old rows or the new ones, never half a table. What the `[reload]`
    /// watcher does when `knowdb = true` and a file of the knowdb changed.
    ///
    /// Fails, and the knowledge stays as it was, when the knowdb does not
    /// load (an error naming the file, as at open), when it now declares
    /// other tables, or when a lookup bound on it no longer prepares (a
    /// column gone): the rules were bound on the old tables. Changes to its
    /// `[cache]`, `[intranet_nets]` or databases need a restart. Only a
    /// knowdb held in in-memory SQLite (`url = "sqlite::memory:"`, the
    /// default) can be loaded again.
    pub async fn reload_knowdb(&self) -> Result<()> {
        let _one = self.reloading.lock().await;
        let r = self.load_knowdb_again().await;
        let counter = if r.is_ok() { &self.stats.knowdb_loads } else { &self.stats.knowdb_load_failures };
        counter.fetch_add(1, Ordering::Relaxed);
        r
    }

    /// The knowdb that [`reload_knowdb`](Self::reload_knowdb) loads again,
    /// or why there is none to load: no knowdb, or one not held in
    /// in-memory SQLite.
    pub(crate) fn reloadable_knowdb(&self) -> Result<std::path::PathBuf> {
        let Some(path) = self.config.knowdb.clone() else {
            return Err(Error::Knowledge("no knowdb to load again (the knowledge config names none)".into()));
        };
        if self.config.url != "sqlite::memory:" {
            return Err(Error::Knowledge(format!(
                "{}: only a knowdb held in in-memory SQLite can be loaded again (url = \"sqlite::memory:\"); restart to load it",
                path.display()
            )));
        }
        Ok(path)
    }

    async fn load_knowdb_again(&self) -> Result<()> {
        let path = self.reloadable_knowdb()?;
        let stays = |what: String| Error::Knowledge(format!("{}: {what}; the knowledge stays as it was", path.display()));
        let fresh: Arc<dyn Provider> = Arc::new(sqlite::SqliteProvider::memory().await?);
        let loaded = knowdb::load_any(&path, fresh.as_ref(), &self.config.knowdb_roots).await?;
        if loaded.tables != self.config.knowdb_tables {
            return Err(stays(format!(
                "it now declares the tables {}, where the rules were bound on {}: restart to load another set",
                loaded.tables.join(", "),
                self.config.knowdb_tables.join(", ")
            )));
        }
        let made: Vec<(String, Vec<String>)> = self.indexed.lock().map(|m| m.iter().cloned().collect()).unwrap_or_default();
        for (table, columns) in made {
            if let Err(e) = fresh.create_index(&table, &columns).await {
                tracing::warn!(target: "omlet::knowledge", "no index on {table}({}): {e}", columns.join(", "));
            }
        }
        // Every lookup bound on the knowdb's database must still prepare.
        let bound: Vec<String> = match self.stats.statements.lock() {
            Ok(st) => st.iter().filter(|s| s.database.is_none()).map(|s| s.sql.clone()).collect(),
            Err(_) => return Err(Error::Internal("stats poisoned".into())),
        };
        for sql in bound {
            if let Err(e) = fresh.prepare(&sql).await {
                return Err(stays(format!("the lookup `{sql}` no longer runs on it: {e}")));
            }
        }
        let lookups = self.held(|l| !l.snapshot && l.source == 0)?;
        let mut tables: Vec<&str> = lookups.iter().map(|l| l.table.as_str()).collect();
        tables.sort_unstable();
        tables.dedup();
        let mut held = Vec::with_capacity(tables.len());
        for table in tables {
            let t = Self::read_from(&fresh, table, self.config.memory.max_table_mb).await.map(Arc::new).map_err(|e| {
                tracing::warn!(target: "omlet::knowledge", "{table} stays in SQL: {e}");
                e.to_string()
            });
            held.push((table, t));
        }
        // The swap: the database, then the in-memory copies, then the caches.
        let mut sources = Vec::clone(&self.sources.load());
        sources[0].provider = fresh;
        self.sources.store(Arc::new(sources));
        let mut cached = self.tables.lock().await;
        for (table, t) in held {
            Self::replan(&lookups, 0, table, t.as_ref().ok());
            cached.insert((0, table.to_string()), t);
        }
        drop(cached);
        self.reload();
        tracing::info!(target: "omlet::knowledge", "{}: loaded again", path.display());
        Ok(())
    }

    /// [`refresh_snapshots`](Self::refresh_snapshots), then
    /// [`reload`](Self::reload): what the `[reload]` watcher does on a
    /// change, so that the caches drop their answers only once the
    /// snapshots hold the new rows.
    pub async fn reload_all(&self) -> Result<()> {
        let r = self.refresh_snapshots().await;
        self.reload();
        r
    }

    #[doc(hidden)]
    /// Binds a rule's statements; fails with [`Error::Statement`] naming the
    /// first that the database rejects.
    pub async fn bind(&self, statements: &[SqlStatement]) -> Result<Vec<BoundStatement>> {
        let mut out = Vec::with_capacity(statements.len());
        let sources = self.sources.load_full();
        for s in statements {
            // The lookup refused, as the rule wrote it, and the name the
            // refusal is about when there is one (for a caret on it).
            let refused_at = |message, name: Option<String>| Error::Statement {
                file: s.file.clone(),
                line: s.line,
                column: s.column,
                sql: s.sql.clone(),
                message,
                name: name.map(Box::new),
            };
            let refused = |message| refused_at(message, None);
            // What the rule may reach, before anything goes to the database.
            let too_long = |message: String| {
                Error::limit(Limit::StatementBytes, format!("{}:{}:{}: lookup: {message}", s.file, s.line, s.column))
            };
            if s.sql.len() > guard::MAX_STATEMENT_BYTES {
                return Err(too_long(format!("{} bytes long; at most {} are read", s.sql.len(), guard::MAX_STATEMENT_BYTES)));
            }
            // Which database, then what it may read there.
            let routed = self.route(&s.sql);
            let source = &sources[routed.source];
            let provider = &source.provider;
            let policy = guard::Policy {
                tables: source.tables.clone(),
                functions: self.config.functions.clone(),
                database: provider.kind(),
                qualified: source.qualified,
            };
            let checked = guard::check_named(&routed.sql, &policy).map_err(|r| {
                let names: Vec<&str> = sources.iter().filter_map(|s| s.name.as_deref()).collect();
                let m = r.message;
                let message = match (&source.name, guard::first_table(&routed.sql)) {
                    (Some(name), _) if sources.len() > 1 => format!("on the database `{name}`: {m}"),
                    (None, Some(t)) if !names.is_empty() && t.contains('.') => {
                        let first = t.split('.').next().unwrap_or_default();
                        format!("{m} (`{first}` is no database of the knowdb: {})", names.join(", "))
                    }
                    _ => m,
                };
                // A refused function: the caret goes on its name.
                refused_at(message, r.function)
            })?;
            if let Some(h) = sql::helper_missing_in(&routed.sql, provider.kind()) {
                return Err(refused(format!(
                    "`{h}` is applied to a column, which {} cannot compute: keep the keys in columns of the \
                     table (made when the data is, or by a knowdb loaded on SQLite, which has every helper) \
                     and compare them with helpers of values, such as ip_key(read(ip))",
                    provider.kind()
                )));
            }
            self.index_for(routed.source, &checked).await;
            let terms = checked.terms.clone();
            let (checked_plain, order_by, limited) = (checked.plain, checked.order.clone(), checked.limited);
            // The columns the lookup names, to say which one a table lacks.
            let named: Vec<String> =
                checked.columns.iter().chain(&checked.keys).chain(&checked.ranges).filter(|c| *c != "*").cloned().collect();
            // The batch form is built from what the SQL reads, never from the
            // component's own account of its table and columns.
            let s = &SqlStatement { sql: routed.sql, table: checked.table, columns: checked.columns, ..s.clone() };
            // Dialect rewrites first, so that a parameter they repeat gets
            // a placeholder per occurrence. They are bounded in size.
            let sql = provider.rewrite_sql(s.sql.clone()).map_err(too_long)?;
            let (sql, order) = rewrite_placeholders(&sql, &s.params, provider.placeholders());
            let prepared = match provider.prepare(&sql).await {
                Ok(p) => p,
                Err(message) => {
                    // Say what the table has: a misspelled column is the
                    // usual cause. (The guard allowed the name: a plain
                    // identifier, safe to put in SQL.)
                    let all = format!("select * from {}", s.table);
                    let described = match provider.rewrite_sql(all) {
                        Ok(all) => provider.prepare(&all).await,
                        Err(e) => Err(e),
                    };
                    let (message, name) = match described {
                        Ok(t) if !t.columns.is_empty() => {
                            let has = |n: &str| t.columns.iter().any(|c| c.eq_ignore_ascii_case(n));
                            let unknown = named.iter().find(|n| !has(n)).cloned();
                            let known: Vec<&str> = t.columns.iter().map(String::as_str).collect();
                            let near = unknown
                                .as_deref()
                                .and_then(|u| {
                                    omlet_lang::parse::nearest(u, &known).map(|n| format!("; did you mean `{n}` for `{u}`?"))
                                })
                                .unwrap_or_default();
                            (
                                format!("{message} (the table `{}` has the columns {}){near}", s.table, t.columns.join(", ")),
                                unknown,
                            )
                        }
                        _ => (message, None),
                    };
                    return Err(refused_at(message, name));
                }
            };
            let stats = {
                let mut st = self.stats.statements.lock().map_err(|_| Error::Knowledge("stats poisoned".into()))?;
                let database = source.name.clone().filter(|_| sources.len() > 1);
                match st.iter().position(|x| x.sql == sql && x.database == database) {
                    Some(i) => i,
                    None => {
                        st.push(StatementStats { sql: sql.clone(), database, ..Default::default() });
                        st.len() - 1
                    }
                }
            };
            let (memory, mut path) = self
                .memory_for(routed.source, &s.table, terms.as_deref(), order_by.is_some(), &s.params, &prepared.columns)
                .await?;
            if let Some(name) = source.name.as_ref().filter(|_| sources.len() > 1 && memory.is_none()) {
                path = format!("{path} (on the database `{name}`)");
            }
            let mut bound = BoundStatement {
                sql: sql.into(),
                order,
                param_types: prepared.params,
                columns: prepared.columns,
                stats,
                source: routed.source,
                batch: None,
                memory,
                path,
            };
            if self.config.batch_misses
                && checked_plain
                && let Some(select) = batch_select(s, order_by.is_some(), limited)
            {
                let key_type = bound.param_types.first().copied().unwrap_or(ParamType::Any);
                let plan = BatchPlan { select, key_type, order: order_by.clone().unwrap_or_default() };
                // A plan the database refuses just means no batching for it.
                if provider.prepare_many(&plan).await.is_ok() {
                    bound.batch = Some(plan);
                }
            }
            out.push(bound);
        }
        Ok(out)
    }

    #[doc(hidden)]
    /// Answers a lookup: shared cache, then the database. `params` are the
    /// guest's, in the order of the rule's parameters. `Ok(None)` is "no
    /// row"; `Err` carries the database's message or the timeout.
    pub async fn query(&self, stmt: &BoundStatement, params: &[Cell]) -> Result<Option<Vec<Cell>>, LookupError> {
        self.query_at(self.generation(), stmt, params).await
    }

    #[doc(hidden)]
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
        self.query_layer(generation, stmt, params).await.0
    }

    #[doc(hidden)]
    /// [`Knowledge::query_at`], and which layer answered (for traces).
    pub async fn query_layer(
        &self,
        generation: u64,
        stmt: &BoundStatement,
        params: &[Cell],
    ) -> (Result<Option<Vec<Cell>>, LookupError>, Layer) {
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        if let Some(row) = self.memory_answer(stmt, params) {
            return (Ok(row), Layer::Memory);
        }
        let bound = bind(stmt, params);
        let Some(cache) = &self.cache else {
            return (self.miss(stmt, bound).await, Layer::Database);
        };
        let started = Instant::now();
        let key = CacheKey::new(generation, stmt, &bound);
        if let Some(row) = cache.get(&key).await {
            return (Ok(self.hit(started, row)), Layer::SharedCache);
        }
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        let negative = self.config.cache.negative;
        // A row bigger than this is answered, not kept.
        let largest = self.config.cache.max_entry_bytes.min(self.config.cache.max_bytes);
        let key_size = key_bytes(&key);
        // Concurrent misses on one key wait for this one query (single-flight).
        let got = cache
            .try_get_with(key, async {
                match self.miss(stmt, bound).await {
                    Ok(Some(row)) if entry_bytes(key_size, Some(&row)) > largest => Err(Miss::Uncached(Arc::new(row))),
                    Ok(Some(row)) => Ok(Some(Arc::new(row))),
                    Ok(None) if negative => Ok(None),
                    Ok(None) => Err(Miss::NoRow),
                    Err(e) => Err(Miss::Failed(e)),
                }
            })
            .await;
        let answer = match got {
            Ok(row) => Ok(row.map(|r| (*r).clone())),
            Err(e) => match &*e {
                Miss::NoRow => Ok(None),
                Miss::Failed(m) => Err(m.clone()),
                Miss::Uncached(row) => Ok(Some((**row).clone())),
            },
        };
        (answer, Layer::Database)
    }

    #[doc(hidden)]
    /// [`Knowledge::query_at`] answered from the shared cache alone, without
    /// waiting: `None` when the answer is not cached (a miss, or no shared
    /// cache), and the caller must take the path that may wait. A `None`
    /// counts nothing: the lookup is counted when it is made again.
    pub fn query_cached(&self, generation: u64, stmt: &BoundStatement, params: &[Cell]) -> Option<Option<Vec<Cell>>> {
        if let Some(row) = self.memory_answer(stmt, params) {
            self.stats.lookups.fetch_add(1, Ordering::Relaxed);
            return Some(row);
        }
        let cache = self.cache.as_ref()?;
        let started = Instant::now();
        let key = CacheKey::new(generation, stmt, &bind(stmt, params));
        // moka's `get` does its work when first polled; a get that would
        // wait (it never has here) is treated as a miss.
        let get = std::pin::pin!(cache.get(&key));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let std::task::Poll::Ready(Some(row)) = get.poll(&mut cx) else { return None };
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        Some(self.hit(started, row))
    }

    /// The answer of the statement's in-memory table, when it has one that
    /// is sure of it (counted).
    fn memory_answer(&self, stmt: &BoundStatement, params: &[Cell]) -> Option<Option<Vec<Cell>>> {
        let row = stmt.memory.as_ref()?.answer(params)?;
        self.stats.memory.fetch_add(1, Ordering::Relaxed);
        Some(row)
    }

    /// A shared-cache hit that began at `started`: counted, and its row.
    fn hit(&self, started: Instant, row: Row) -> Option<Vec<Cell>> {
        self.stats.hits.fetch_add(1, Ordering::Relaxed);
        self.stats.hit_latency.record(started.elapsed());
        row.map(|r| (*r).clone())
    }

    /// One database round trip, with the timeout and the counters.
    async fn fetch(&self, stmt: &BoundStatement, bound: Vec<Cell>) -> Result<Option<Vec<Cell>>, LookupError> {
        self.timed(stmt, self.provider_of(stmt).query_first(stmt, bound)).await
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

/// A lookup's parameters in the statement's binding order (missing ones null).
fn bind(stmt: &BoundStatement, params: &[Cell]) -> Vec<Cell> {
    stmt.order.iter().map(|&i| params.get(i).cloned().unwrap_or(Cell::Null)).collect()
}

impl CacheKey {
    fn new(generation: u64, stmt: &BoundStatement, bound: &[Cell]) -> CacheKey {
        CacheKey { generation, source: stmt.source, sql: stmt.sql.clone(), params: encode(bound) }
    }
}

/// The estimated bytes of a cache key, without its statement's text (which
/// the statement's keys share).
fn key_bytes(key: &CacheKey) -> u64 {
    (std::mem::size_of::<CacheKey>() + key.params.capacity()) as u64
}

/// The estimated bytes of a shared-cache entry whose key takes `key` bytes:
/// the key, the row's cells with their text and blobs, and a fixed cost for
/// moka's own record of the entry.
fn entry_bytes(key: u64, row: Option<&Vec<Cell>>) -> u64 {
    const PER_ENTRY: u64 = 128;
    let row = row.map_or(0, |cells| {
        // The Arc's two counts, the Vec, the cells, their text.
        16 + std::mem::size_of::<Vec<Cell>>() + cells.capacity() * std::mem::size_of::<Cell>() + memory::heap_bytes(cells)
    });
    PER_ENTRY + key + row as u64
}

/// A compact, exact key for a parameter list.
fn encode(params: &[Cell]) -> Vec<u8> {
    let mut k = Vec::with_capacity(params.len() * 9);
    omlet_lang::eval::push_cells_key(params, &mut k);
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        fn close<'a>(&'a self) -> BoxFuture<'a, ()> {
            Box::pin(async {})
        }
    }

    impl Tables for Gated {}

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
            )
            .unwrap(),
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
            )
            .unwrap(),
            "select a from t where <ip4_between|:ip|<cidr4_min|c>|f(x, ')')> = 1 and n = 'ip4_int(x)' and <trim_quotes|b>"
        );
        // An unclosed call is left for the database to reject.
        assert_eq!(rewrite_helper_calls("select ip4_int(a from t", &seen).unwrap(), "select ip4_int(a from t");
        // A parameter that the rewrite repeats gets a placeholder each time.
        let sql = rewrite_helper_calls("x = ip4_int(:ip)", &|_, a| format!("f({0}, {0})", a[0])).unwrap();
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
