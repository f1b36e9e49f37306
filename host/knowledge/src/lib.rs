//! Knowledge: how the host answers `knowledge.query` (the `omlet-knowledge`
//! crate, which the `omlet` library re-exports as `omlet::knowledge`).
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

#![warn(missing_docs)]

mod batching;
mod bind;
mod error;
mod held;
mod knowdb_reload;
mod query;
use held::HeldLookup;
use query::{entry_bytes, key_bytes};
pub mod config;
pub mod files;
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
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(dead_code, reason = "only the server dialects connect to a server")
)]
mod reach;
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
use batching::{Pending, batch_select, keeps_first_row};
pub use config::{CacheConfig, CacheMode, KnowledgeConfig, OnLookupError};
pub use intranet::IntranetNets;
/// `mode` of [`IntranetNets`]: `add` (default) or `replace`.
pub use omlet_lang::intranet::Mode as IntranetMode;
pub use provider::{BoxFuture, ParamType, Placeholders, Prepared, Provider, ProviderError, Tables, coerce};
pub(crate) use provider::{quote_ident, table_sql};
pub use route::Source;
pub use sql::{HELPER_FUNCTIONS, RewriteError, qualify_helpers, rewrite_helper_calls, rewrite_placeholders, values_for_rows};
pub use sql_provider::{Dialect, SqlProvider};
pub use stats::{AtomicHistogram, Histogram, Latency, StatementSnapshot, StatementStats, Stats, StatsSnapshot};

pub use error::{Error, Limit, Result};

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
    /// The database refused the query or its values.
    Failed,
    /// The database could not be reached, or no connection was free in
    /// time ([`ProviderError::Unavailable`]).
    Unavailable,
}

impl LookupError {
    fn failed(message: impl Into<String>) -> LookupError {
        LookupError { kind: LookupErrorKind::Failed, message: message.into() }
    }
}

impl From<ProviderError> for LookupError {
    fn from(e: ProviderError) -> LookupError {
        let kind = match e {
            ProviderError::Unavailable(_) => LookupErrorKind::Unavailable,
            _ => LookupErrorKind::Failed,
        };
        LookupError { kind, message: e.message().to_owned() }
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

impl Knowledge {
    /// Knowledge over a provider of the host's own (or one of omlet's,
    /// connected by the host), with the default settings (shared cache on,
    /// errors make lookups absent).
    pub fn new(provider: Arc<dyn Provider>) -> Knowledge {
        Knowledge::with_config(provider, KnowledgeConfig::default())
    }

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
}

#[cfg(test)]
mod tests;
