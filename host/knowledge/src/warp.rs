//! Warp Parse's own knowdb layout (`version = 2`), read as it is, so that a
//! Warp Parse project's `models/knowledge/knowdb.toml` loads without
//! rewriting.
//!
//! ```toml
//! version = 2
//! base_dir = "."                 # table folders are relative to it (default: the file's folder)
//!
//! [default]                      # how rows load
//! transaction = true
//! batch_size = 2000
//! on_error = "fail"              # or "skip"
//!
//! [csv]                          # how data files read
//! has_header = true
//! delimiter = ","
//! encoding = "utf-8"             # the only one
//! trim = true
//!
//! [[tables]]
//! name = "zone"
//! dir = "zone"                   # default: the name; holds create.sql, insert.sql, data.csv, clean.sql
//! data_file = "zones.csv"        # default: data.csv, relative to the table's folder
//! columns.by_header = ["lo", "hi", "zone"]   # the CSV columns bound to ?1, ?2, …
//! # columns.by_index = [0, 1, 2]           # without a header
//! expected_rows = { min = 1, max = 100000 } # fewer fails the load, more is a warning
//! enabled = true
//!
//! [cache]                        # the lookup cache: enabled, capacity, ttl_ms
//! [provider.sqldb]               # an external database (or [[provider.sqldb]] with names): see `route`
//! [provider.redis]               # and [fun.*]: no OML syntax uses them; ignored with a warning
//! [intranet_nets]                # OML 1.25 §9: intranet_ip and access_direct
//! ```
//!
//! A table loads as Warp Parse loads it: `create.sql` (which must exist;
//! `{table}` stands for the name, and it may hold several statements, its
//! `CREATE INDEX`es among them), then `clean.sql` or `DELETE FROM {table}`,
//! then each CSV record's mapped cells, as text, bound to `?1..?N` of
//! `insert.sql` (which must exist), whose SQL may call the OML helpers
//! (`ip4_int`, `trim_quotes`, …). A plain `INSERT … VALUES (…)` runs for
//! many rows at once. Files must lie inside the knowdb's folder or the
//! knowledge config's `knowdb_roots`, as in omlet's own layout.

use std::path::{Path, PathBuf};

use omlet_lang::Cell;
use serde::Deserialize;
use toml::Spanned;

use super::Provider;
use crate::{Error, Result};

/// The file as written. Unknown keys are refused, everywhere but in the
/// sections omlet ignores.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    version: Spanned<i64>,
    #[serde(default)]
    base_dir: Option<String>,
    #[serde(default)]
    default: Defaults,
    #[serde(default)]
    csv: CsvOptions,
    #[serde(default)]
    cache: Option<CacheSection>,
    #[serde(default)]
    tables: Vec<RawTable>,
    #[serde(default)]
    fun: Option<toml::Table>,
    #[serde(default)]
    provider: Option<ProviderSection>,
    #[serde(default)]
    intranet_nets: Option<super::IntranetNets>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    #[serde(default = "yes")]
    transaction: bool,
    #[serde(default = "batch")]
    batch_size: usize,
    #[serde(default)]
    on_error: super::knowdb::OnError,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults { transaction: true, batch_size: batch(), on_error: Default::default() }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CsvOptions {
    #[serde(default = "yes")]
    has_header: bool,
    #[serde(default = "comma")]
    delimiter: String,
    #[serde(default = "utf8")]
    encoding: String,
    #[serde(default = "yes")]
    trim: bool,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions { has_header: true, delimiter: comma(), encoding: utf8(), trim: true }
    }
}

/// `[cache]`: Warp Parse's lookup cache, mapped onto omlet's shared cache.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CacheSection {
    /// `false`: every lookup goes to the database (omlet's `bypass`).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Most entries (default 1024).
    #[serde(default = "capacity")]
    pub capacity: u64,
    /// Time to live in milliseconds (default 30000).
    #[serde(default = "ttl")]
    pub ttl_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    name: Spanned<String>,
    #[serde(default)]
    dir: Option<String>,
    #[serde(default)]
    data_file: Option<String>,
    #[serde(default)]
    columns: Columns,
    #[serde(default)]
    expected_rows: Option<Rows>,
    #[serde(default = "yes")]
    enabled: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Columns {
    #[serde(default)]
    by_header: Vec<String>,
    #[serde(default)]
    by_index: Vec<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rows {
    #[serde(default)]
    min: Option<u64>,
    #[serde(default)]
    max: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderSection {
    #[serde(default)]
    sqldb: Option<OneOrMany>,
    #[serde(default)]
    redis: Option<toml::Table>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(SqlDb),
    Many(Vec<SqlDb>),
}

/// One `[provider.sqldb]`: an external database lookups may go to.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SqlDb {
    /// Its name (`[A-Za-z0-9_]`), the first segment of the tables routed to
    /// it; `default` when not given.
    #[serde(default)]
    pub name: Option<String>,
    /// `postgres` or `mysql`.
    pub kind: String,
    /// The database URL; `${VAR}`s are filled as in a knowledge config.
    pub connection_uri: String,
    /// Most connections (default 8).
    #[serde(default)]
    pub pool_size: Option<u32>,
    /// Kept for the reference's sake; omlet's pool opens lookup lanes as needed.
    #[serde(default)]
    pub min_connections: Option<u32>,
    /// How long to wait for a connection, in milliseconds.
    #[serde(default)]
    pub acquire_timeout_ms: Option<u64>,
    /// Accepted, not used: omlet keeps its lookup lanes open.
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
    /// Accepted, not used.
    #[serde(default)]
    pub max_lifetime_ms: Option<u64>,
    /// PostgreSQL session settings; they do not change answers, and omlet
    /// does not send them.
    #[serde(default)]
    pub postgres_session: Option<toml::Table>,
    /// omlet's own: the tables lookups may read on this database, as it
    /// names them (`public.ip_geo_city`); default any outside the catalog.
    #[serde(default)]
    pub tables: Option<Vec<String>>,
}

impl SqlDb {
    /// Whether this is the database that lookups without a prefix reach:
    /// the unnamed one (or the one named `default`).
    pub fn is_default(&self) -> bool {
        self.name() == "default"
    }
}

impl SqlDb {
    /// Its name, `default` when unnamed.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("default")
    }
}

fn yes() -> bool {
    true
}
fn batch() -> usize {
    2000
}
fn comma() -> String {
    ",".into()
}
fn utf8() -> String {
    "utf-8".into()
}
fn capacity() -> u64 {
    1024
}
fn ttl() -> u64 {
    30_000
}

/// What a Warp Parse knowdb holds besides its local tables.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The local tables loaded, in order (the disabled ones left out).
    pub tables: Vec<String>,
    /// Its `[cache]`, if any.
    pub cache: Option<CacheSection>,
    /// Its external databases (`[provider.sqldb]`), if any.
    pub sqldb: Vec<SqlDb>,
    /// Its `[intranet_nets]`, without the entries that are no network.
    pub intranet_nets: Option<super::IntranetNets>,
}

/// The external databases a Warp Parse knowdb at `path` names (none for
/// omlet's layout), and whether it loads local tables beside them. Lookups
/// are routed among them and the local tables (see
/// [`route`](super::route)).
pub fn external(path: &Path) -> Result<(Vec<SqlDb>, bool)> {
    let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "knowdb.toml")?;
    if !is_warp(&text) {
        return Ok((Vec::new(), false));
    }
    let raw = parse(path, &text)?;
    let local = raw.tables.iter().any(|t| t.enabled);
    Ok((databases(path, raw.provider)?, local))
}

/// The file's text as written, or an error naming the file and line.
fn parse(path: &Path, text: &str) -> Result<Raw> {
    toml::from_str(text).map_err(|e| Error::Knowledge(format!("{}: {}", path.display(), e.to_string().trim())))
}

/// The `[provider.sqldb]` databases (one, or `[[provider.sqldb]]`), each
/// checked (a name of its own, of `[A-Za-z0-9_]`; kind `postgres` or
/// `mysql`) and its `connection_uri`'s `${VAR}`s filled in.
fn databases(path: &Path, provider: Option<ProviderSection>) -> Result<Vec<SqlDb>> {
    let mut sqldb = match provider.and_then(|p| p.sqldb) {
        Some(OneOrMany::One(one)) => vec![one],
        Some(OneOrMany::Many(many)) => many,
        None => Vec::new(),
    };
    let mut names = std::collections::HashSet::new();
    for s in &mut sqldb {
        let name = s.name().to_string();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') || !names.insert(name.clone()) {
            return Err(Error::Knowledge(format!(
                "{}: [provider.sqldb] name `{name}`: each database needs a name of its own, of A-Z a-z 0-9 _",
                path.display()
            )));
        }
        if !matches!(s.kind.as_str(), "postgres" | "mysql") {
            return Err(Error::Knowledge(format!(
                "{}: [provider.sqldb] {name}: kind `{}` (postgres or mysql)",
                path.display(),
                s.kind
            )));
        }
        s.connection_uri = super::config::expand_env(&s.connection_uri, &[])
            .map_err(|e| Error::Knowledge(format!("{}: [provider.sqldb] {name}: connection_uri: {e}", path.display())))?;
    }
    Ok(sqldb)
}

/// Whether `text` (a knowdb.toml) is in Warp Parse's layout: it has a
/// top-level `version`.
pub fn is_warp(text: &str) -> bool {
    text.parse::<toml::Table>().is_ok_and(|t| t.contains_key("version"))
}

/// Loads a Warp Parse knowdb (`text`, read from `path`) into `db`: each
/// enabled table, in order; see the module's documentation. Files must lie
/// inside one of `allowed` (canonical folders). Fails with
/// [`Error::Knowledge`] naming the file (and the line, for the TOML) on
/// an unknown key, a missing file, a CSV column that is not there, a row
/// or statement the database rejects, or fewer rows than
/// `expected_rows.min`.
pub async fn load(path: &Path, text: &str, db: &dyn Provider, allowed: &[PathBuf]) -> Result<Loaded> {
    let raw = parse(path, text)?;
    let line = |offset: usize| text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1;
    if *raw.version.get_ref() != 2 {
        return Err(Error::Knowledge(format!(
            "{}:{}: knowdb version {} is not one omlet reads (Warp Parse's is 2; omlet's own layout has no version)",
            path.display(),
            line(raw.version.span().start),
            raw.version.get_ref()
        )));
    }
    let warn = |what: &str| tracing::warn!(target: "omlet::knowledge", "{}: {what}", path.display());
    if raw.fun.is_some() || raw.provider.as_ref().is_some_and(|p| p.redis.is_some()) {
        warn("[provider.redis] and [fun.*] are ignored: no OML syntax reaches Redis");
    }
    // The reference ignores entries that are no network: so does omlet
    // here, with a warning, so that a project loads as it is.
    let intranet_nets = raw.intranet_nets.map(|mut n| {
        let (_, bad) = n.effective();
        if !bad.is_empty() {
            warn(&format!("[intranet_nets] nets: {} is no network and is ignored", bad.join(", ")));
            n.nets.retain(|x| !bad.contains(x));
        }
        n
    });
    if raw.csv.encoding.to_ascii_lowercase().replace('_', "-") != "utf-8" {
        return Err(Error::Knowledge(format!("{}: [csv] encoding `{}`: only utf-8 is read", path.display(), raw.csv.encoding)));
    }
    let delimiter = match raw.csv.delimiter.as_bytes() {
        [d] => *d,
        _ => {
            return Err(Error::Knowledge(format!(
                "{}: [csv] delimiter `{}`: one byte, such as \",\" or \"\\t\"",
                path.display(),
                raw.csv.delimiter.escape_debug()
            )));
        }
    };
    let _ = (raw.default.transaction, raw.default.batch_size);
    let skip = raw.default.on_error == super::knowdb::OnError::Skip;
    let dir = crate::files::folder(path);
    let base = dir.join(raw.base_dir.as_deref().unwrap_or("."));
    let sqldb = databases(path, raw.provider)?;
    let mut out = Loaded { tables: Vec::new(), cache: raw.cache, sqldb, intranet_nets };
    for t in raw.tables {
        let at_line = line(t.name.span().start);
        let name = t.name.into_inner();
        let fail = |message: String| Error::Knowledge(format!("{}:{at_line}: table {name}: {message}", path.display()));
        if !super::knowdb::is_table_name(&name) {
            return Err(fail("a knowdb table name must be a lower-case identifier ([a-z_][a-z0-9_]*)".into()));
        }
        if !t.enabled {
            continue;
        }
        let table_dir = base.join(t.dir.as_deref().unwrap_or(&name));
        let inside = |p: &Path| -> Result<PathBuf> {
            let real = p.canonicalize().map_err(|e| fail(format!("{}: {e}", p.display())))?;
            if allowed.iter().any(|a| real.starts_with(a)) {
                Ok(real)
            } else {
                Err(fail(format!(
                    "{} is outside the knowdb's folder {}: a knowdb may only read files inside it (or inside the \
                     knowledge config's `knowdb_roots`)",
                    real.display(),
                    allowed[0].display()
                )))
            }
        };
        let sql = |file: &str| -> Result<String> {
            let p = inside(&table_dir.join(file))?;
            let text = crate::files::read_text(&p, crate::files::MAX_CONFIG_BYTES, "knowdb SQL file")?;
            let text = text.replace("{table}", &name);
            super::guard::script::check_script(&text).map_err(|r| fail(format!("{}: {r}", p.display())))?;
            Ok(text)
        };
        let create = sql("create.sql")?;
        let insert = sql("insert.sql")?;
        let clean = match table_dir.join("clean.sql").exists() {
            true => sql("clean.sql")?,
            false => format!("delete from {name}"),
        };
        let data = inside(&match &t.data_file {
            Some(f) => table_dir.join(f),
            None => table_dir.join("data.csv"),
        })?;
        db.execute(&create).await.map_err(|e| fail(format!("create.sql: {e}")))?;
        db.execute(&clean).await.map_err(|e| fail(format!("clean.sql: {e}")))?;
        let rows = read_rows(&data, &raw.csv, delimiter, &t.columns, skip).map_err(fail)?;
        let width = rows.first().map_or(t.columns.by_header.len().max(t.columns.by_index.len()), Vec::len);
        let (loaded, skipped) =
            db.execute_rows(&insert, width, &rows, skip).await.map_err(|e| fail(format!("insert.sql: {e}")))?;
        if skipped > 0 {
            tracing::warn!(target: "omlet::knowledge", "table {name}: {skipped} rows skipped (on_error = \"skip\")");
        }
        if let Some(expect) = &t.expected_rows {
            let n = db.count(&name).await? as u64;
            if let Some(min) = expect.min
                && n < min
            {
                return Err(fail(format!("{n} rows loaded, fewer than expected_rows.min = {min}")));
            }
            if let Some(max) = expect.max
                && n > max
            {
                tracing::warn!(target: "omlet::knowledge", "table {name}: {n} rows, more than expected_rows.max = {max}");
            }
        }
        tracing::debug!(target: "omlet::knowledge", "table {name}: {loaded} rows from {}", data.display());
        out.tables.push(name);
    }
    Ok(out)
}

/// The mapped cells of each record of a data file, as text.
fn read_rows(
    path: &Path,
    o: &CsvOptions,
    delimiter: u8,
    columns: &Columns,
    skip: bool,
) -> std::result::Result<Vec<Vec<Cell>>, String> {
    let file = path.display();
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(o.has_header)
        .delimiter(delimiter)
        .trim(if o.trim { csv::Trim::All } else { csv::Trim::None })
        .flexible(true)
        .from_reader(crate::files::open_lines(path).map_err(|e| e.to_string())?);
    let indices: Vec<usize> = if !columns.by_header.is_empty() {
        if !o.has_header {
            return Err(format!("{file}: columns.by_header needs a header row ([csv] has_header = false): use columns.by_index"));
        }
        let header = rd.headers().map_err(|e| format!("{file}: {e}"))?.clone();
        columns
            .by_header
            .iter()
            .map(|c| {
                header.iter().position(|h| h == c).ok_or_else(|| {
                    format!("{file}: no column `{c}` in its header ({})", header.iter().collect::<Vec<_>>().join(", "))
                })
            })
            .collect::<std::result::Result<_, _>>()?
    } else if !columns.by_index.is_empty() {
        columns.by_index.clone()
    } else {
        return Err("columns.by_header (or, without a header, columns.by_index) says which CSV columns go to insert.sql".into());
    };
    let mut rows = Vec::new();
    for (n, rec) in rd.records().enumerate() {
        let record = n + 1;
        let rec = match rec {
            Ok(r) => r,
            Err(e) if skip => {
                tracing::warn!(target: "omlet::knowledge", "{file} record {record}: {e}; skipped");
                continue;
            }
            Err(e) => return Err(format!("{file} record {record}: {e}")),
        };
        match indices.iter().map(|&i| rec.get(i).map(|v| Cell::Text(v.to_string()))).collect::<Option<Vec<_>>>() {
            Some(row) => rows.push(row),
            None if skip => tracing::warn!(target: "omlet::knowledge", "{file} record {record}: too few columns; skipped"),
            None => {
                return Err(format!(
                    "{file} record {record}: {} columns, and the mapping reads column {}",
                    rec.len(),
                    indices.iter().max().map_or(0, |m| m + 1)
                ));
            }
        }
    }
    Ok(rows)
}
