//! Knowledge configuration: a TOML file (or defaults) naming the provider,
//! its pool, timeouts, cache and failure policy.
//!
//! ```toml
//! url = "postgres://omlet:${OMLET_DB_PASSWORD}@127.0.0.1:5432/intel"  # ${VAR} comes from the environment
//! env = ["PGPASSWORD"]           # variables besides OMLET_* that ${VAR} may name
//! pool_size = 8
//! connect_timeout_ms = 5000
//! query_timeout_ms = 2000
//! on_lookup_error = "absent"     # or "fail": the record fails instead
//! batch_misses = true            # under load, waiting misses of one single-key lookup: one query
//! knowdb = "knowdb.toml"         # optional: tables to load first (relative to this file)
//! knowdb_roots = ["/srv/data"]   # folders besides the knowdb's own whose files it may read
//!
//! [cache]
//! mode = "shared"                # or "bypass": every lookup goes to the database
//! capacity = 100000              # entries
//! max_bytes = 67108864           # bytes (64 MiB), as estimated; whichever bound comes first
//! max_entry_bytes = 1048576      # an answer bigger than this (1 MiB) is not cached
//! ttl_ms = 60000                 # optional
//! negative = true                # cache "no row" answers too
//! guest = true                   # each guest instance also keeps answers (lock-free local layer)
//!
//! [memory]                       # knowdb tables held in the host's memory (knowledge::memory)
//! knowdb = true                  # answer the lookups an index serves from memory (default)
//! max_table_mb = 1024            # most memory one table may take
//! over_limit = "sql"             # or "fail": what a bigger table does
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
use super::{Knowledge, Provider, Source};
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
    /// Most bytes the shared cache holds (default 64 MiB), as estimated
    /// from each entry's key and row (its cells, text and blobs, plus a
    /// fixed cost per entry); past it, the least useful entries are evicted.
    /// It and `capacity` bound the cache together: each entry counts as at
    /// least `max_bytes / capacity` bytes, so neither bound is ever passed.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// An answer bigger than this (default 1 MiB, estimated as for
    /// `max_bytes`) is not kept in the shared cache: every lookup of it goes
    /// to the database. (The guest cache may still keep it.)
    #[serde(default = "default_max_entry_bytes")]
    pub max_entry_bytes: u64,
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
    /// A Warp Parse knowdb's `[cache]` in these terms: `enabled = false`
    /// is `bypass`; its capacity and TTL are the shared cache's.
    pub fn apply_warp(&mut self, c: &super::warp::CacheSection) {
        if !c.enabled {
            self.mode = CacheMode::Bypass;
            return;
        }
        self.capacity = c.capacity.max(1);
        self.ttl_ms = (c.ttl_ms > 0).then_some(c.ttl_ms);
    }

    /// `ttl_ms` as a duration.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl_ms.map(Duration::from_millis)
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            mode: CacheMode::Shared,
            capacity: default_capacity(),
            max_bytes: default_max_bytes(),
            max_entry_bytes: default_max_entry_bytes(),
            ttl_ms: None,
            negative: true,
            guest: true,
        }
    }
}

/// Everything about the knowledge base: the database, its pool and
/// timeouts, the cache and the failure policy. Unknown keys are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeConfig {
    /// The database (default `sqlite::memory:`, an empty in-memory SQLite):
    /// `sqlite://FILE`, `postgres://…` (or `postgresql://`), `mysql://…`
    /// (or `mariadb://`). [`read`](Self::read) fills in `${VAR}`s: those
    /// whose names begin with `OMLET_`, and those listed in `env`.
    #[serde(default = "default_url")]
    pub url: String,
    /// Environment variables that a `${VAR}` in `url` may name besides
    /// those beginning with `OMLET_` (default none), for example
    /// `["PGPASSWORD"]`. A `${VAR}` naming any other variable is an error:
    /// otherwise a config could copy any variable of the host's environment
    /// into a URL, a file name or a message.
    #[serde(default)]
    pub env: Vec<String>,
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
    /// Folders whose files the `knowdb` may name (`csv`, `create`,
    /// `insert`) besides its own folder (default none: only files inside
    /// the knowdb's folder, after `..` and symbolic links are resolved).
    /// [`read`](Self::read) makes them relative to the config file.
    #[serde(default)]
    pub knowdb_roots: Vec<PathBuf>,
    /// The `[cache]` table.
    #[serde(default)]
    pub cache: CacheConfig,
    /// The tables lookups may read (default: the tables of `knowdb` when it
    /// is set, else any table without a schema). A lookup of another table
    /// fails the rule's load with its file:line:column. A schema-qualified
    /// name (`geo.city`) is allowed only when listed here exactly.
    #[serde(default)]
    pub tables: Option<Vec<String>>,
    /// The tables omlet loaded from a knowdb (`knowdb` here, or the CLI's
    /// `--knowdb`): binding a lookup of one creates an index on the columns
    /// it compares, unless the table has it (not read from the file).
    #[serde(skip)]
    pub knowdb_tables: Vec<String>,
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
    /// The `[memory]` table: knowdb tables held in the host's memory, and
    /// the lookups answered there ([`memory`](super::memory)).
    #[serde(default)]
    pub memory: super::memory::MemoryConfig,
    /// The `[intranet_nets]` table (OML 1.25 §9): the networks
    /// `intranet_ip` and `access_direct` call LAN. Default: the built-in
    /// private ranges. A Warp Parse knowdb's own section is used when this
    /// config has none.
    #[serde(default)]
    pub intranet_nets: Option<super::intranet::IntranetNets>,
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
fn default_max_bytes() -> u64 {
    64 << 20
}
fn default_max_entry_bytes() -> u64 {
    1 << 20
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

    /// Reads a config file; `knowdb` and `knowdb_roots` become relative to
    /// it; `${VAR}`s in `url` are filled from the environment (only
    /// variables named `OMLET_…` or listed in `env`).
    ///
    /// Fails with [`Error::Io`] if the file cannot be read, and with
    /// [`Error::Knowledge`] (naming the file) for bad TOML, an unknown key,
    /// or an unset, unclosed or unlisted `${VAR}`.
    pub fn read(path: impl AsRef<Path>) -> Result<KnowledgeConfig> {
        let path = path.as_ref();
        let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "knowledge config")?;
        let mut c: KnowledgeConfig =
            toml::from_str(&text).map_err(|e| Error::Knowledge(format!("{}: {}", path.display(), e.to_string().trim())))?;
        if let Some(dir) = path.parent() {
            if let Some(k) = &c.knowdb {
                c.knowdb = Some(dir.join(k));
            }
            for r in &mut c.knowdb_roots {
                *r = dir.join(&*r);
            }
        }
        c.url = expand_env(&c.url, &c.env).map_err(|e| Error::Knowledge(format!("{}: url: {e}", path.display())))?;
        if let Some(n) = &c.intranet_nets {
            n.strict(&path.display().to_string())?;
        }
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
        if self.url.starts_with("postgres://") || self.url.starts_with("postgresql://") {
            // PostgreSQL folds unquoted names to lower case, and lookups name
            // tables unquoted: a listed `SECRETS` would let a rule read `secrets`.
            if let Some(t) = self.tables.iter().flatten().find(|t| t.bytes().any(|b| b.is_ascii_uppercase())) {
                return Err(Error::Knowledge(format!(
                    "tables: `{t}` has upper-case letters, but PostgreSQL folds the unquoted names of lookups to \
                     lower case (a lookup of `{t}` reads `{}`): list it in lower case",
                    t.to_ascii_lowercase()
                )));
            }
        }
        let config = self;
        // A Warp Parse knowdb may name databases of its own
        // ([provider.sqldb]), which lookups reach by routing.
        let (databases, local) = match &config.knowdb {
            Some(k) => super::warp::external(k)?,
            None => (Vec::new(), false),
        };
        if let (Some(k), Some(db)) = (&config.knowdb, databases.iter().find(|d| d.is_default() || databases.len() == 1))
            && !local
            && config.url != default_url()
        {
            return Err(Error::Knowledge(format!(
                "{} names a database ([provider.sqldb] {}) and the knowledge config names another (`url`): keep one",
                k.display(),
                db.name()
            )));
        }
        let provider =
            connect_with(&config.url, config.pool_size, Duration::from_millis(config.connect_timeout_ms), config.query_timeout())
                .await?
                .into_dyn();
        config.open_on(provider, databases).await
    }

    #[doc(hidden)]
    /// [`open`](Self::open) on a database already connected (in place of
    /// `url`), for a caller that keeps its own handle on it (`omlet check`
    /// reads SQLite's query plans).
    pub async fn open_with(self, provider: Arc<dyn Provider>) -> Result<Arc<Knowledge>> {
        let databases = match &self.knowdb {
            Some(k) => super::warp::external(k)?.0,
            None => Vec::new(),
        };
        self.open_on(provider, databases).await
    }

    /// Loads the knowdb into `provider`, connects the knowdb's `databases`,
    /// and wraps it all.
    async fn open_on(self, provider: Arc<dyn Provider>, databases: Vec<super::warp::SqlDb>) -> Result<Arc<Knowledge>> {
        let mut config = self;
        if let Some(k) = &config.knowdb {
            let loaded = super::knowdb::load_any(k, provider.as_ref(), &config.knowdb_roots).await?;
            if let Some(c) = loaded.cache {
                config.cache.apply_warp(&c);
            }
            if let Some(n) = loaded.intranet_nets {
                if config.intranet_nets.is_some() {
                    return Err(Error::Knowledge(format!(
                        "{} has an [intranet_nets] section and the knowledge config has another: keep one",
                        k.display()
                    )));
                }
                config.intranet_nets = Some(n);
            }
            if !loaded.tables.is_empty() {
                config.knowdb_tables = loaded.tables.clone();
                config.tables.get_or_insert(loaded.tables);
            }
        }
        let mut sources = Vec::with_capacity(databases.len());
        for db in databases {
            let at = |e: Error| {
                let file = config.knowdb.as_deref().unwrap_or(Path::new("knowdb.toml")).display().to_string();
                Error::Knowledge(format!("{file}: [provider.sqldb] {}: {}", db.name(), redact(&e.to_string())))
            };
            let timeout = db.acquire_timeout_ms.unwrap_or(config.connect_timeout_ms);
            let p = connect_with(
                &db.connection_uri,
                db.pool_size.unwrap_or(config.pool_size),
                Duration::from_millis(timeout),
                config.query_timeout(),
            )
            .await
            .map_err(at)?
            .into_dyn();
            if p.kind() != db.kind {
                return Err(at(Error::Knowledge(format!("kind `{}`, but connection_uri is a {} database", db.kind, p.kind()))));
            }
            sources.push(Source { name: Some(db.name().to_string()), provider: p, tables: db.tables.clone(), qualified: true });
        }
        Ok(Arc::new(Knowledge::with_config(provider, config).with_databases(sources)))
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

/// `text` with every password in it replaced by `***`: that of a URL
/// (`scheme://user:secret@host`), and the value of every parameter whose
/// name holds `password`, `passwd` or `secret`, or is `pass` or `pwd`
/// (`?password=secret&…`, `sslpassword=…`, `password='a b'`,
/// `sasl.password=…`). Every message that may show a knowledge URL goes
/// through it.
///
/// A password may hold any character unencoded (`/`, `#`, `?`, `@`, blanks,
/// backquotes), so it is taken to run from the first `:` after `://` to the
/// last `@` of the text. Where that is wrong, the text loses more than the
/// password (an `@` later in the message), never less.
pub fn redact(text: &str) -> String {
    redact_parameters(&redact_userinfo(text))
}

/// The `user:secret@` part of every `scheme://` in `text`, with the secret
/// replaced.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        // The user name ends at the first `:`; a `/`, `?`, `#`, blank or
        // backquote first means there is no password (an `@` may be part of
        // the name: `user@tenant:secret@host`).
        let user = rest.find(|c: char| matches!(c, ':' | '/' | '?' | '#' | '`') || c.is_whitespace());
        let Some(colon) = user.filter(|&u| rest.as_bytes()[u] == b':') else { continue };
        // No `@` after it: `host:port`, no password.
        let Some(at) = rest.rfind('@').filter(|&at| at > colon) else { continue };
        out.push_str(&rest[..colon + 1]);
        out.push_str("***");
        rest = &rest[at..];
    }
    out.push_str(rest);
    out
}

/// Whether a parameter of this (lower-case) name holds a secret.
fn is_secret_key(key: &str) -> bool {
    ["password", "passwd", "secret"].iter().any(|k| key.contains(k)) || matches!(key, "pass" | "pwd")
}

/// `text` with the value of every secret `key=value` replaced.
fn redact_parameters(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut from) = (0, 0);
    while let Some(off) = text[from..].find('=') {
        let eq = from + off;
        from = eq + 1;
        // The name: the letters, digits, `_`, `.` and `-` before the `=`.
        let mut start = eq;
        while start > 0 && (b[start - 1].is_ascii_alphanumeric() || matches!(b[start - 1], b'_' | b'.' | b'-')) {
            start -= 1;
        }
        if start == eq || !is_secret_key(&text[start..eq].to_ascii_lowercase()) {
            continue;
        }
        // The value: quoted (`'a b'`), or up to `&`, `;`, a blank or a backquote.
        let value = eq + 1;
        let end = match b.get(value) {
            Some(&q @ (b'\'' | b'"')) => text[value + 1..].find(q as char).map_or(text.len(), |p| value + 1 + p + 1),
            _ => {
                text[value..].find(|c: char| matches!(c, '&' | ';' | '`') || c.is_whitespace()).map_or(text.len(), |p| value + p)
            }
        };
        out.push_str(&text[copied..value]);
        out.push_str("***");
        (copied, from) = (end, end);
    }
    out.push_str(&text[copied..]);
    out
}

/// Replaces `${NAME}` with the environment variable NAME, for the names
/// that begin with `OMLET_` and those in `allowed`; the error says what is
/// wrong, without the text's passwords.
pub(crate) fn expand_env(s: &str, allowed: &[String]) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find('}').ok_or_else(|| format!("unclosed ${{ in `{}`", redact(s)))?;
        let name = &rest[i + 2..i + end];
        if !(name.starts_with("OMLET_") || allowed.iter().any(|a| a == name)) {
            return Err(format!(
                "`${{{name}}}` is not filled in: only environment variables named OMLET_… and those listed in \
                 `env = [...]` are"
            ));
        }
        let v = std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))?;
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
        assert_eq!(redact("mysql://root@127.0.0.1:3306/demo"), "mysql://root@127.0.0.1:3306/demo");
        assert_eq!(redact("postgres://db:5432/intel"), "postgres://db:5432/intel");
        assert_eq!(
            redact("unsupported knowledge URL `oracle://scott:tiger@h/x?password=tiger&x=1`"),
            "unsupported knowledge URL `oracle://scott:***@h/x?password=***&x=1`"
        );
        assert_eq!(redact("host=h user=u password=hunter2 dbname=d"), "host=h user=u password=*** dbname=d");
        assert_eq!(redact("sqlite://./k.db"), "sqlite://./k.db");
        assert_eq!(redact("no url here: a:b@c"), "no url here: a:b@c");
    }

    #[test]
    fn passwords_with_any_character_unencoded_are_redacted() {
        for secret in ["se/cret", "se#cret", "se?cret", "se cret", "se`cret", "se@cret", "s@/#? `x", "a:b", "p@ss w/rd#1?`"] {
            for text in [
                format!("postgres://omlet:{secret}@db:5432/intel"),
                format!("unsupported knowledge URL `oracle://scott:{secret}@h/x`: no driver"),
                format!("mysql://user@tenant:{secret}@db/x"),
            ] {
                let r = redact(&text);
                assert!(!r.contains(secret), "{text} -> {r}");
                assert!(r.contains(":***@"), "{text} -> {r}");
                assert!(r.contains("@db") || r.contains("@h/x"), "the host is kept: {text} -> {r}");
            }
        }
    }

    #[test]
    fn secret_parameters_are_redacted() {
        for (text, want) in [
            ("postgres://db/x?sslpassword=k3y&sslmode=require", "postgres://db/x?sslpassword=***&sslmode=require"),
            ("postgres://db/x?PassWord=a#b", "postgres://db/x?PassWord=***"),
            ("host=h password='a b c' dbname=d", "host=h password=*** dbname=d"),
            ("host=h password=\"a b\"", "host=h password=***"),
            ("kafka://b:9092/t?sasl.password=p&sasl.username=u", "kafka://b:9092/t?sasl.password=***&sasl.username=u"),
            ("x?client_secret=s;pwd=p;pass=q", "x?client_secret=***;pwd=***;pass=***"),
            ("bypass=1 compass=2 password=", "bypass=1 compass=2 password=***"),
            ("é=1 password=ü", "é=1 password=***"),
        ] {
            assert_eq!(redact(text), want, "{text}");
        }
    }

    #[test]
    fn only_omlet_and_listed_variables_are_expanded() {
        let e = expand_env("sqlite://${HOME}/k.db", &[]).unwrap_err();
        assert!(e.contains("`${HOME}` is not filled in"), "{e}");
        let e = expand_env("postgres://u:${AWS_SECRET_ACCESS_KEY}@h/x", &[]).unwrap_err();
        assert!(e.contains("AWS_SECRET_ACCESS_KEY"), "{e}");
        let e = expand_env("postgres://u:${OMLET_SURELY_UNSET_7F3A}@h/x", &[]).unwrap_err();
        assert!(e.contains("OMLET_SURELY_UNSET_7F3A is not set"), "{e}");
        let path = std::env::var("PATH").unwrap();
        assert_eq!(expand_env("sqlite://${PATH}", &["PATH".into()]).unwrap(), format!("sqlite://{path}"));
        assert!(expand_env("sqlite://${PATH", &["PATH".into()]).unwrap_err().contains("unclosed"));
    }

    #[test]
    fn read_refuses_an_unlisted_variable_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("knowledge.toml");
        std::fs::write(&p, "url = \"sqlite://${HOME}/x.db\"\n").unwrap();
        let e = KnowledgeConfig::read(&p).unwrap_err().to_string();
        assert!(e.contains("knowledge.toml: url: `${HOME}` is not filled in"), "{e}");
        std::fs::write(&p, "env = [\"PATH\"]\nurl = \"sqlite://${PATH}\"\n").unwrap();
        assert!(KnowledgeConfig::read(&p).unwrap().url.ends_with(&std::env::var("PATH").unwrap()));
    }

    #[tokio::test]
    async fn upper_case_tables_are_refused_on_postgres() {
        let mut c = KnowledgeConfig::for_url("postgres://u@127.0.0.1:1/x");
        c.tables = Some(vec!["ip_zone".into(), "SECRETS".into()]);
        let Err(e) = c.open().await else { panic!("SECRETS must be refused") };
        let m = e.to_string();
        assert!(m.contains("`SECRETS` has upper-case letters") && m.contains("`secrets`"), "{m}");
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
