//! Knowledge configuration: a TOML file (or defaults) naming the provider,
//! its pool, timeouts, cache and failure policy.
//!
//! ```toml
//! url = "postgres://omlet:${OMLET_DB_PASSWORD}@127.0.0.1:5432/intel"  # ${VAR} comes from the environment
//! pool_size = 8
//! connect_timeout_ms = 5000
//! query_timeout_ms = 2000
//! on_lookup_error = "absent"     # or "fail": the record fails instead
//! batch_misses = true            # under load, waiting misses of one single-key lookup: one query
//! knowdb = "knowdb.toml"         # optional: tables to load first (relative to this file)
//!
//! [cache]
//! mode = "shared"                # or "bypass": every lookup goes to the database
//! capacity = 100000              # entries
//! ttl_ms = 60000                 # optional
//! negative = true                # cache "no row" answers too
//! guest = true                   # each guest instance also keeps answers (lock-free local layer)
//!
//! [reload]                         # optional: changes in the database reach every worker's caches
//! channel = "knowledge.reload"   # PostgreSQL: every NOTIFY on it reloads
//! # poll_query = "select version from knowledge_version"  # any database: a new value reloads
//! # poll_ms = 500
//! ```
//!
//! `url` schemes: `sqlite::memory:` (the default), `sqlite://path.db`,
//! `postgres://…`, `mysql://…` (MySQL and MariaDB).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

#[cfg(feature = "mysql")]
use super::mysql::MySqlProvider;
#[cfg(feature = "postgres")]
use super::postgres::PostgresProvider;
use super::sqlite::SqliteProvider;
use super::{Knowledge, Provider};
use crate::{Error, Result};

/// What a failed lookup (a database error or a timeout) does to the
/// record: `on_lookup_error`, default `absent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnLookupError {
    /// OML semantics: the lookup's targets are absent (counted and logged).
    #[default]
    Absent,
    /// The record fails with an error naming the lookup.
    Fail,
}

/// `cache.mode`: whether answers are cached at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Answers are kept in the shared cache of [`Knowledge`] and, unless
    /// `cache.guest = false`, in each guest instance. The default.
    #[default]
    Shared,
    /// Nothing is cached, in the host or in the guests: every lookup is a
    /// database query (batching of misses still applies). Always fresh, at
    /// a round trip per lookup.
    Bypass,
}

/// The `[cache]` table: the shared lookup cache and the guests' own layer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// `shared` (the default) or `bypass`.
    #[serde(default)]
    pub mode: CacheMode,
    /// Most entries the shared cache holds (default 100 000); past it, the
    /// least useful are evicted. An entry is one answer, a row or (with
    /// `negative`) "no row", for one statement and parameter list.
    #[serde(default = "default_capacity")]
    pub capacity: u64,
    /// Time to live of shared-cache entries, in milliseconds (default: none,
    /// entries stay until evicted or [`Knowledge::reload`]). With a TTL the
    /// generation also advances every TTL period, so guest caches forget too
    /// and changes in the database show up without a reload, at the cost of
    /// one query per key and period. 0 is refused at `open` (use bypass).
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// Cache "no row" answers too (default true): a key that is not in the
    /// database costs one query, not one per lookup, but a row added later
    /// is not seen until the entry expires or a reload. Applies to the
    /// shared cache and to the guest caches alike.
    #[serde(default = "yes")]
    pub negative: bool,
    /// Let each guest instance keep answers too (its lock-free local layer;
    /// default true). A hit there costs no host call; answers stay until the
    /// generation changes (a reload, or the next TTL period), up to 4096 per
    /// instance, after which that instance's cache is emptied. Such hits do
    /// not show in [`Stats`](super::Stats). No effect in `bypass` mode.
    #[serde(default = "yes")]
    pub guest: bool,
}

impl CacheConfig {
    /// `ttl_ms` as a duration.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl_ms.map(Duration::from_millis)
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { mode: CacheMode::Shared, capacity: default_capacity(), ttl_ms: None, negative: true, guest: true }
    }
}

/// Everything about the knowledge base: the database, its pool and
/// timeouts, the cache and the failure policy. Unknown keys are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeConfig {
    /// The database (default `sqlite::memory:`, an empty in-memory SQLite):
    /// `sqlite://FILE`, `postgres://…` (or `postgresql://`), `mysql://…`
    /// (or `mariadb://`). [`read`](Self::read) fills in `${VAR}`s.
    #[serde(default = "default_url")]
    pub url: String,
    /// Most connections for PostgreSQL or MySQL lookups (default 8; 0 counts
    /// as 1); loading and preparing use up to 2 more. Not used for SQLite,
    /// which gets 4 lookup connections and 1 for loading.
    #[serde(default = "default_pool")]
    pub pool_size: u32,
    /// How long to wait for a pool connection, in milliseconds (default
    /// 5000), when connecting and later. PostgreSQL and MySQL only.
    #[serde(default = "default_connect_ms")]
    pub connect_timeout_ms: u64,
    /// Longest a lookup's database round trip (or batched query) may take,
    /// in milliseconds (default 2000), waiting for a connection included;
    /// past it the lookup fails as `on_lookup_error` says. Binding and knowdb
    /// loading are not limited by it.
    #[serde(default = "default_query_ms")]
    pub query_timeout_ms: u64,
    /// What a failed lookup does to the record (default `absent`).
    #[serde(default)]
    pub on_lookup_error: OnLookupError,
    /// Misses of a single-key lookup are batched (default true): while a
    /// quarter of the lookup connections (at least 2) run the statement,
    /// further misses wait, and all that waited go as one query (`= ANY($1)`
    /// on PostgreSQL, `IN (…)` elsewhere) when one of those returns; below
    /// that, a miss goes at once. A statement whose batch form the database
    /// refuses is not batched.
    #[serde(default = "yes")]
    pub batch_misses: bool,
    /// A `knowdb.toml` loaded into the database by [`open`](Self::open)
    /// (default: none). [`read`](Self::read) makes it relative to the config
    /// file.
    #[serde(default)]
    pub knowdb: Option<PathBuf>,
    /// The `[cache]` table.
    #[serde(default)]
    pub cache: CacheConfig,
    /// The tables lookups may read (default: the tables of `knowdb` when it
    /// is set, else any table without a schema). A lookup of another table
    /// fails the rule's load with its file:line:column. A schema-qualified
    /// name (`geo.city`) is allowed only when listed here exactly.
    #[serde(default)]
    pub tables: Option<Vec<String>>,
    /// Database functions lookups may call besides OML's helpers
    /// (`ip4_int`, `cidr4_contains`, …), by name (default: none). A lookup
    /// calling another function fails the rule's load.
    #[serde(default)]
    pub functions: Vec<String>,
    /// The `[reload]` table: how changes made in the database reach the
    /// caches ([`reload::watch`](super::reload::watch)). Default: they do not
    /// (call [`Knowledge::reload`], or set a TTL).
    #[serde(default)]
    pub reload: super::reload::ReloadConfig,
}

fn default_url() -> String {
    "sqlite::memory:".into()
}
fn default_pool() -> u32 {
    8
}
fn default_connect_ms() -> u64 {
    5000
}
fn default_query_ms() -> u64 {
    2000
}
fn default_capacity() -> u64 {
    100_000
}
fn yes() -> bool {
    true
}

impl Default for KnowledgeConfig {
    fn default() -> Self {
        toml::from_str("").unwrap_or_else(|_| unreachable!("empty config has defaults"))
    }
}

impl KnowledgeConfig {
    /// `query_timeout_ms` as a duration.
    pub fn query_timeout(&self) -> Duration {
        Duration::from_millis(self.query_timeout_ms)
    }

    /// Reads a config file; `knowdb` becomes relative to it; `${VAR}`s in
    /// `url` are filled from the environment.
    ///
    /// Fails with [`Error::Io`] if the file cannot be read, and with
    /// [`Error::Knowledge`] for bad TOML, an unknown key, or an unset or
    /// unclosed `${VAR}`.
    pub fn read(path: impl AsRef<Path>) -> Result<KnowledgeConfig> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut c: KnowledgeConfig =
            toml::from_str(&text).map_err(|e| Error::Knowledge(format!("{}: {}", path.display(), e.to_string().trim())))?;
        if let (Some(k), Some(dir)) = (&c.knowdb, path.parent()) {
            c.knowdb = Some(dir.join(k));
        }
        c.url = expand_env(&c.url)?;
        Ok(c)
    }

    /// A config for a URL, with every other setting at its default.
    pub fn for_url(url: &str) -> KnowledgeConfig {
        KnowledgeConfig { url: url.to_string(), ..KnowledgeConfig::default() }
    }

    /// Connects the provider, loads `knowdb` if given, and wraps it all.
    ///
    /// Fails if the URL is not supported, the database cannot be reached, or
    /// the knowdb does not load (see [`connect`] and [`knowdb::load`](super::knowdb::load)).
    pub async fn open(self) -> Result<Arc<Knowledge>> {
        if self.cache.ttl_ms == Some(0) && self.cache.mode == CacheMode::Shared {
            return Err(Error::Knowledge("cache.ttl_ms = 0 would cache nothing: set cache.mode = \"bypass\" instead".into()));
        }
        let provider =
            connect_with(&self.url, self.pool_size, Duration::from_millis(self.connect_timeout_ms), self.query_timeout())
                .await?
                .into_dyn();
        let mut config = self;
        if let Some(k) = &config.knowdb {
            let tables = super::knowdb::load(k, provider.as_ref()).await?;
            config.tables.get_or_insert(tables);
        }
        Ok(Arc::new(Knowledge::with_config(provider, config)))
    }
}

/// A connected provider of any kind.
pub enum AnyProvider {
    /// `sqlite::memory:` or `sqlite://FILE`.
    Sqlite(SqliteProvider),
    /// `postgres://…` or `postgresql://…` (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(PostgresProvider),
    /// `mysql://…` or `mariadb://…` (feature `mysql`).
    #[cfg(feature = "mysql")]
    MySql(MySqlProvider),
}

impl AnyProvider {
    /// The provider as the trait object [`Knowledge`] takes.
    pub fn into_dyn(self) -> Arc<dyn Provider> {
        match self {
            AnyProvider::Sqlite(p) => Arc::new(p),
            #[cfg(feature = "postgres")]
            AnyProvider::Postgres(p) => Arc::new(p),
            #[cfg(feature = "mysql")]
            AnyProvider::MySql(p) => Arc::new(p),
        }
    }
}

/// Connects to the database `url` names (the schemes of
/// [`KnowledgeConfig::url`]; `${VAR}`s are not expanded here). `pool_size`
/// and `connect_timeout` apply to PostgreSQL and MySQL only. Fails with
/// [`Error::Knowledge`] for another scheme or a failed connection.
pub async fn connect(url: &str, pool_size: u32, connect_timeout: Duration) -> Result<AnyProvider> {
    connect_with(url, pool_size, connect_timeout, Duration::from_millis(default_query_ms())).await
}

/// [`connect`], with the server-side statement timeout of lookups (for
/// PostgreSQL and MySQL; the query timeout of [`KnowledgeConfig`]).
pub async fn connect_with(
    url: &str,
    pool_size: u32,
    connect_timeout: Duration,
    statement_timeout: Duration,
) -> Result<AnyProvider> {
    // Used by the server drivers only, which this build may leave out.
    #[cfg(not(any(feature = "postgres", feature = "mysql")))]
    let _ = (pool_size, connect_timeout, statement_timeout);
    if url == "sqlite::memory:" {
        Ok(AnyProvider::Sqlite(SqliteProvider::memory().await?))
    } else if let Some(path) = url.strip_prefix("sqlite://") {
        Ok(AnyProvider::Sqlite(SqliteProvider::open(Path::new(path)).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return Ok(AnyProvider::Postgres(PostgresProvider::connect(url, pool_size, connect_timeout, statement_timeout).await?));
        #[cfg(not(feature = "postgres"))]
        return Err(without("postgres", url));
    } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        #[cfg(feature = "mysql")]
        {
            let url = url.replacen("mariadb://", "mysql://", 1);
            return Ok(AnyProvider::MySql(MySqlProvider::connect(&url, pool_size, connect_timeout, statement_timeout).await?));
        }
        #[cfg(not(feature = "mysql"))]
        return Err(without("mysql", url));
    } else {
        Err(Error::Knowledge(format!(
            "unsupported knowledge URL `{}`: use sqlite::memory:, sqlite://FILE, postgres://… or mysql://…",
            redact(url)
        )))
    }
}

/// The error for a URL whose driver this build leaves out.
#[cfg(not(all(feature = "postgres", feature = "mysql")))]
fn without(feature: &str, url: &str) -> Error {
    Error::Knowledge(format!(
        "knowledge URL `{}`: this omlet was built without the `{feature}` feature (enable it in the host's Cargo.toml)",
        redact(url)
    ))
}

/// `text` with the password of every URL in it replaced by `***`:
/// `scheme://user:secret@host` and `password=secret` query parameters.
/// Every message that may show a knowledge URL goes through it.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // `scheme://user:secret@`: the part between the first `:` after `://`
    // and the last `@` before the next `/`, `?`, `#` or blank.
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        let end = rest.find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || c == '`').unwrap_or(rest.len());
        let authority = &rest[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon + 1]);
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    // `password=secret` (and `pass=`, `pwd=`) in a query string.
    let mut result = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(i) = ["password=", "pass=", "pwd="]
        .iter()
        .filter_map(|k| rest.to_ascii_lowercase().find(k).map(|i| (i, k.len())))
        .min()
        .map(|(i, n)| (i, i + n))
    {
        let (start, value) = i;
        let preceded = start == 0 || matches!(rest.as_bytes()[start - 1], b'?' | b'&' | b';' | b' ');
        result.push_str(&rest[..value]);
        rest = &rest[value..];
        if preceded {
            let end = rest.find(|c: char| c == '&' || c == ';' || c.is_whitespace() || c == '`').unwrap_or(rest.len());
            result.push_str("***");
            rest = &rest[end..];
        }
    }
    result.push_str(rest);
    result
}

/// Replaces `${NAME}` with the environment variable NAME.
fn expand_env(s: &str) -> Result<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find('}').ok_or_else(|| Error::Knowledge(format!("unclosed ${{ in `{}`", redact(s))))?;
        let name = &rest[i + 2..i + end];
        let v = std::env::var(name).map_err(|_| Error::Knowledge(format!("environment variable {name} is not set")))?;
        out.push_str(&v);
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_from_urls_and_messages() {
        assert_eq!(redact("postgres://omlet:s3cr%40t@db:5432/intel"), "postgres://omlet:***@db:5432/intel");
        assert_eq!(redact("mysql://root@127.0.0.1/demo"), "mysql://root@127.0.0.1/demo");
        assert_eq!(
            redact("unsupported knowledge URL `oracle://scott:tiger@h/x?password=tiger&x=1`"),
            "unsupported knowledge URL `oracle://scott:***@h/x?password=***&x=1`"
        );
        assert_eq!(redact("host=h user=u password=hunter2 dbname=d"), "host=h user=u password=*** dbname=d");
        assert_eq!(redact("sqlite://./k.db"), "sqlite://./k.db");
        assert_eq!(redact("no url here: a:b@c"), "no url here: a:b@c");
    }

    #[tokio::test]
    async fn an_unsupported_url_is_reported_without_its_password() {
        let Err(e) = connect("oracle://scott:tiger@db/x", 1, Duration::from_secs(1)).await else {
            panic!("oracle is not supported")
        };
        let m = e.to_string();
        assert!(m.contains("oracle://scott:***@db/x") && !m.contains("tiger"), "{m}");
    }
}
