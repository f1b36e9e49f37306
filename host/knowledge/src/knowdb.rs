//! The knowdb loader: builds a knowledge base from a `knowdb.toml` that
//! lists tables, each from CSV data and/or SQL files.
//!
//! ```toml
//! [[tables]]
//! name = "ip_zone"            # table name: a lower-case identifier, [a-z_][a-z0-9_]*
//! csv = "ip_zone.csv"         # CSV with a header row, relative to this file
//! types = ["TEXT", "TEXT"]    # optional column types; inferred from the data if absent
//! create = "ip_zone.sql"      # optional: SQL that creates the table (instead of inferring it)
//! insert = "more_rows.sql"    # optional: SQL run after the CSV rows
//! expected_rows = 4           # optional: fail the load if the count differs
//! index = ["ip", "lo, hi"]    # optional: indexes to create, one per entry (a composite one: "a, b")
//! on_error = "fail"           # or "skip": a bad row is skipped and counted, not fatal
//! ```
//!
//! The files a knowdb names (`csv`, `create`, `insert`) must lie inside the
//! knowdb's folder, after `..` and symbolic links are resolved, or inside
//! one of the folders the loader is given ([`load_with`]; the knowledge
//! config's `knowdb_roots`). A knowdb cannot widen that itself: a key in the
//! file being checked would let it lift its own check.

use std::path::{Path, PathBuf};

use omlet_lang::Cell;
use serde::Deserialize;
use toml::Spanned;

use super::Provider;
use crate::{Error, Result};

/// A parsed and checked `knowdb.toml`.
#[derive(Debug)]
pub struct KnowDb {
    /// The `[[tables]]`, loaded in this order.
    pub tables: Vec<TableSpec>,
}

/// One `[[tables]]` entry; it needs `csv`, `create`, or both. Unknown keys
/// are refused.
#[derive(Debug)]
pub struct TableSpec {
    /// The table's name in the database: a lower-case identifier
    /// (`[a-z_][a-z0-9_]*`, at most 63 bytes). Lookups name tables unquoted,
    /// and databases read unquoted names their own way (PostgreSQL folds
    /// them to lower case, MySQL on Linux does not), so only a name that
    /// every database reads as written may be declared.
    pub name: String,
    /// CSV data with a header row naming the columns, relative to the
    /// `knowdb.toml`. Without `create`, the table is created from the header
    /// and `types`, and it must not exist yet.
    pub csv: Option<PathBuf>,
    /// The CSV columns' types, one per column, as SQLite names them:
    /// `INTEGER`, `REAL`, `NUMERIC`, `TEXT` or `BLOB`, optionally followed
    /// by `PRIMARY KEY`. The file may also say `INT`, `BIGINT`, `SMALLINT`,
    /// `BOOLEAN`/`BOOL` (all `INTEGER`), `FLOAT`, `DOUBLE`, `DOUBLE
    /// PRECISION` (`REAL`), `DECIMAL`, `NUMERIC(p,s)` (`NUMERIC`),
    /// `VARCHAR`, `VARCHAR(n)`, `CHAR(n)` (`TEXT`), `BYTEA` (`BLOB`), in any
    /// case; [`read`] gives the SQLite name. Anything else is refused.
    /// Default: inferred, per column, as `INTEGER` if every non-empty value
    /// is an integer, `REAL` if every one is a number, else `TEXT`. Other
    /// providers map them to their own types.
    pub types: Option<Vec<String>>,
    /// An SQL file, relative to the `knowdb.toml`, run first to create the
    /// table (in the database's own dialect); the CSV rows then go into it.
    pub create: Option<PathBuf>,
    /// An SQL file, relative to the `knowdb.toml`, run after the CSV rows.
    pub insert: Option<PathBuf>,
    /// If set, the load fails unless the table then has this many rows.
    pub expected_rows: Option<u64>,
    /// What a bad row does (default `fail`).
    pub on_error: OnError,
    /// Indexes to create once the table is loaded, each as its columns
    /// (written `"ip"`, or `"lo, hi"` for one index on both), plain
    /// identifiers. Lookups of knowdb tables also get indexes on what they
    /// compare when a rule is loaded (`Knowledge::bind`); these are for
    /// what those do not cover.
    pub index: Vec<Vec<String>>,
    /// The line of the table's `name` in the `knowdb.toml` (1-based), for
    /// messages.
    pub line: usize,
}

/// What a bad row does to the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// The load fails, naming the row; the CSV rows go in all or nothing.
    #[default]
    Fail,
    /// A CSV record that does not parse is skipped with a warning, and so is
    /// a failing `insert` file. With `create`, so is a row the database
    /// rejects.
    Skip,
}

/// The file as written, with the positions of what [`read`] checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDb {
    #[serde(default)]
    tables: Vec<RawTable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    name: Spanned<String>,
    #[serde(default)]
    csv: Option<PathBuf>,
    #[serde(default)]
    types: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    create: Option<PathBuf>,
    #[serde(default)]
    insert: Option<PathBuf>,
    #[serde(default)]
    expected_rows: Option<u64>,
    #[serde(default)]
    on_error: OnError,
    #[serde(default)]
    index: Vec<Spanned<String>>,
}

/// The longest table name: PostgreSQL cuts longer identifiers to 63 bytes,
/// so two names alike in their first 63 bytes would be one table there.
const MAX_NAME_BYTES: usize = 63;

/// Reads a `knowdb.toml` and checks it, without loading anything or
/// touching the files it names. Fails with [`Error::Io`], or
/// [`Error::Knowledge`] naming the file and line for bad TOML, an unknown
/// key in a table, a table name that is not a lower-case identifier, or a
/// column type not in the list of [`TableSpec::types`].
pub fn read(path: &Path) -> Result<KnowDb> {
    let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "knowdb.toml")?;
    parse(path, &text)
}

/// [`read`] of a file's `text`, already read from `path`.
fn parse(path: &Path, text: &str) -> Result<KnowDb> {
    let raw: RawDb =
        toml::from_str(text).map_err(|e| Error::Knowledge(format!("{}: {}", path.display(), e.to_string().trim())))?;
    let at = |offset: usize| format!("{}:{}", path.display(), line_of(text, offset));
    let mut tables = Vec::with_capacity(raw.tables.len());
    for t in raw.tables {
        let line = line_of(text, t.name.span().start);
        let name = t.name.into_inner();
        if !is_table_name(&name) {
            return Err(Error::Knowledge(format!(
                "{}:{line}: table name `{}` is refused: a knowdb table name must be a lower-case identifier \
                 ([a-z_][a-z0-9_]*, at most {MAX_NAME_BYTES} bytes), which every database reads as written",
                path.display(),
                name.escape_debug()
            )));
        }
        let types = match t.types {
            None => None,
            Some(types) => Some(
                types
                    .into_iter()
                    .map(|ty| {
                        column_type(ty.get_ref()).ok_or_else(|| {
                            Error::Knowledge(format!(
                                "{}: table {name}: column type `{}` is not one omlet knows (TEXT, INTEGER, REAL, \
                                 NUMERIC, BLOB, or INT, BIGINT, SMALLINT, BOOLEAN, FLOAT, DOUBLE, DECIMAL, VARCHAR, \
                                 CHAR, BYTEA; optionally followed by PRIMARY KEY)",
                                at(ty.span().start),
                                ty.get_ref().escape_debug()
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        let mut index = Vec::with_capacity(t.index.len());
        for entry in &t.index {
            let columns: Vec<String> = entry.get_ref().split(',').map(|c| c.trim().to_string()).collect();
            if !columns.iter().all(|c| is_column_name(c)) {
                return Err(Error::Knowledge(format!(
                    "{}: table {name}: index `{}` is refused: write its columns as identifiers, several separated by commas",
                    at(entry.span().start),
                    entry.get_ref().escape_debug()
                )));
            }
            index.push(columns);
        }
        tables.push(TableSpec {
            name,
            csv: t.csv,
            types,
            create: t.create,
            insert: t.insert,
            expected_rows: t.expected_rows,
            on_error: t.on_error,
            index,
            line,
        });
    }
    Ok(KnowDb { tables })
}

/// Whether `c` is a plain column name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_column_name(c: &str) -> bool {
    c.chars().next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Whether `name` is a table name a knowdb may declare: `[a-z_][a-z0-9_]*`,
/// at most `MAX_NAME_BYTES`.
pub fn is_table_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && name.len() <= MAX_NAME_BYTES
}

/// A knowdb column type as SQLite names it (`INTEGER`, `REAL`, `NUMERIC`,
/// `TEXT`, `BLOB`, maybe with ` PRIMARY KEY`), or `None` for a type not in
/// the list (see [`TableSpec::types`]). The result is built from fixed
/// words only: nothing of the file's text reaches the DDL.
pub fn column_type(written: &str) -> Option<String> {
    let upper = written.to_ascii_uppercase();
    let mut words = upper.split_ascii_whitespace().peekable();
    let first = words.next()?;
    // `VARCHAR(255)`, `NUMERIC(10,2)`: a size in digits is allowed, and dropped.
    let (base, size) = match first.split_once('(') {
        Some((base, rest)) => (base, Some(rest)),
        None => (first, None),
    };
    if let Some(size) = size {
        let digits = size.strip_suffix(')')?;
        let ok = !digits.is_empty() && digits.split(',').all(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
        if !ok || !matches!(base, "VARCHAR" | "CHAR" | "NUMERIC" | "DECIMAL") {
            return None;
        }
    }
    let sqlite = match base {
        "TEXT" | "VARCHAR" | "CHAR" => "TEXT",
        "INTEGER" | "INT" | "BIGINT" | "SMALLINT" | "BOOLEAN" | "BOOL" => "INTEGER",
        "REAL" | "FLOAT" => "REAL",
        "DOUBLE" => {
            if words.peek() == Some(&"PRECISION") {
                words.next();
            }
            "REAL"
        }
        "NUMERIC" | "DECIMAL" => "NUMERIC",
        "BLOB" | "BYTEA" => "BLOB",
        _ => return None,
    };
    match (words.next(), words.next(), words.next()) {
        (None, ..) => Some(sqlite.to_string()),
        (Some("PRIMARY"), Some("KEY"), None) => Some(format!("{sqlite} PRIMARY KEY")),
        _ => None,
    }
}

/// Reads `knowdb.toml` and loads every table into `db`, in order; the files
/// it names must lie inside its folder. Fails on the first table that does
/// not load (an unreadable file, a file outside the folder, bad CSV, a
/// `types` list of the wrong length, a row or statement the database
/// rejects, a wrong `expected_rows`); tables loaded before it stay. Returns
/// the names of the tables it declares (the default `tables` allow-list).
pub async fn load(path: &Path, db: &dyn Provider) -> Result<Vec<String>> {
    load_with(path, db, &[]).await
}

/// [`load`], where the files a knowdb names may also lie inside any of
/// `roots` (folders; the knowledge config's `knowdb_roots`).
pub async fn load_with(path: &Path, db: &dyn Provider, roots: &[PathBuf]) -> Result<Vec<String>> {
    let loaded = load_any(path, db, roots).await?;
    if let Some(s) = loaded.sqldb.first() {
        return Err(Error::Knowledge(format!(
            "{}: [provider.sqldb] {}: an external database in a knowdb is reached through a knowledge config \
             (omlet's `url`), not loaded as a table",
            path.display(),
            s.name()
        )));
    }
    Ok(loaded.tables)
}

/// [`load_with`] for either layout: omlet's own, or Warp Parse's (`version
/// = 2`, see [`warp`](super::warp)), whose `[cache]` and
/// `[provider.sqldb]` come back beside the tables.
pub async fn load_any(path: &Path, db: &dyn Provider, roots: &[PathBuf]) -> Result<super::warp::Loaded> {
    let dir = crate::files::folder(path);
    let mut allowed = vec![dir.canonicalize().map_err(|e| Error::io(dir, e))?];
    for r in roots {
        allowed.push(r.canonicalize().map_err(|e| Error::io(r, e))?);
    }
    let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "knowdb.toml")?;
    if super::warp::is_warp(&text) {
        return super::warp::load(path, &text, db, &allowed).await;
    }
    let spec = parse(path, &text)?;
    for t in &spec.tables {
        let skip = t.on_error == OnError::Skip;
        // A file the table names, resolved and checked to lie inside `allowed`.
        let file = |key: &str, p: &Path| -> Result<PathBuf> {
            let joined = dir.join(p);
            let real = joined.canonicalize().map_err(|e| Error::io(&joined, e))?;
            if allowed.iter().any(|a| real.starts_with(a)) {
                return Ok(real);
            }
            Err(Error::Knowledge(format!(
                "{}:{}: table {}: {key} `{}` is {}, outside the knowdb's folder {}{}: a knowdb may only read files \
                 inside it (or inside the knowledge config's `knowdb_roots`)",
                path.display(),
                t.line,
                t.name,
                p.display(),
                real.display(),
                allowed[0].display(),
                if roots.is_empty() { String::new() } else { " and its knowdb_roots".to_string() },
            )))
        };
        // A SQL file the table names, read and checked (`guard::script`);
        // an error running it names it.
        let sql_file = |key: &str, p: &PathBuf| -> Result<(String, String)> {
            let p = file(key, p)?;
            let sql = crate::files::read_text(&p, crate::files::MAX_CONFIG_BYTES, "knowdb SQL file")?;
            super::guard::script::check_script(&sql).map_err(|r| Error::Knowledge(format!("{}: {r}", p.display())))?;
            Ok((sql, p.display().to_string()))
        };
        let ran = |file: &str, e: Error| Error::Knowledge(format!("{file}: {e}"));
        if let Some(c) = &t.create {
            let (sql, name) = sql_file("create", c)?;
            db.execute(&sql).await.map_err(|e| ran(&name, e))?;
        }
        if let Some(csv) = &t.csv {
            let csv_path = file("csv", csv)?;
            let (columns, rows) = read_csv(&csv_path, skip)?;
            let types = match &t.types {
                Some(ty) if ty.len() == columns.len() => ty.clone(),
                Some(ty) => {
                    return Err(Error::Knowledge(format!(
                        "{}:{}: table {} has {} columns but {} types",
                        path.display(),
                        t.line,
                        t.name,
                        columns.len(),
                        ty.len()
                    )));
                }
                None => infer_types(columns.len(), &rows),
            };
            let typed: Vec<Vec<Cell>> = rows.iter().map(|r| typed_row(r, &types)).collect();
            if t.create.is_some() {
                let (_, skipped) = db.insert_rows(&t.name, &columns, &typed, skip).await?;
                if skipped > 0 {
                    tracing::warn!(table = %t.name, skipped, "rows skipped");
                }
            } else {
                db.load_table(&t.name, &columns, &types, &typed).await?;
            }
        } else if t.create.is_none() {
            return Err(Error::Knowledge(format!("{}:{}: table {} needs `csv` or `create`", path.display(), t.line, t.name)));
        }
        if let Some(i) = &t.insert {
            let (sql, name) = sql_file("insert", i)?;
            match db.execute(&sql).await {
                Err(e) if skip => tracing::warn!(table = %t.name, error = %e, "insert file failed; skipped"),
                other => other.map_err(|e| ran(&name, e))?,
            }
        }
        for columns in &t.index {
            db.create_index(&t.name, columns)
                .await
                .map_err(|e| Error::Knowledge(format!("{}:{}: table {}: {e}", path.display(), t.line, t.name)))?;
        }
        if let Some(n) = t.expected_rows {
            let got = db.count(&t.name).await?;
            if got as u64 != n {
                return Err(Error::Knowledge(format!(
                    "{}:{}: table {} has {got} rows, expected {n}",
                    path.display(),
                    t.line,
                    t.name
                )));
            }
        }
    }
    Ok(super::warp::Loaded { tables: spec.tables.iter().map(|t| t.name.clone()).collect(), ..Default::default() })
}

fn read_csv(path: &Path, skip_bad: bool) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    let mut rd = csv::Reader::from_reader(crate::files::open_lines(path)?);
    let columns: Vec<String> = rd
        .headers()
        .map_err(|e| Error::Knowledge(format!("{}: {e}", path.display())))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    for (n, rec) in rd.records().enumerate() {
        match rec {
            Ok(rec) => rows.push(rec.iter().map(str::to_string).collect()),
            Err(e) if skip_bad => tracing::warn!("{} record {}: {e}; skipped", path.display(), n + 1),
            Err(e) => return Err(Error::Input { what: format!("{} record {}", path.display(), n + 1), message: e.to_string() }),
        }
    }
    Ok((columns, rows))
}

fn infer_types(n: usize, rows: &[Vec<String>]) -> Vec<String> {
    (0..n)
        .map(|i| {
            let vals = rows.iter().filter_map(|r| r.get(i)).filter(|v| !v.is_empty());
            let (mut int, mut real, mut any) = (true, true, false);
            for v in vals {
                any = true;
                int &= v.parse::<i64>().is_ok();
                real &= v.parse::<f64>().is_ok();
            }
            match (any, int, real) {
                (true, true, _) => "INTEGER",
                (true, false, true) => "REAL",
                _ => "TEXT",
            }
            .to_string()
        })
        .collect()
}

fn typed_row(row: &[String], types: &[String]) -> Vec<Cell> {
    row.iter()
        .zip(types)
        // The type's first word: `INTEGER PRIMARY KEY` holds integers too.
        .map(|(v, t)| match t.split_ascii_whitespace().next().unwrap_or("").to_ascii_uppercase().as_str() {
            "INTEGER" | "INT" | "BIGINT" => {
                v.parse().map(Cell::Integer).unwrap_or(if v.is_empty() { Cell::Null } else { Cell::Text(v.clone()) })
            }
            "REAL" | "FLOAT" | "DOUBLE" => {
                v.parse().map(Cell::Real).unwrap_or(if v.is_empty() { Cell::Null } else { Cell::Text(v.clone()) })
            }
            _ => Cell::Text(v.clone()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_come_from_a_fixed_list() {
        for (written, sqlite) in [
            ("TEXT", "TEXT"),
            ("text", "TEXT"),
            ("varchar(255)", "TEXT"),
            ("Char(2)", "TEXT"),
            ("INT", "INTEGER"),
            ("bigint", "INTEGER"),
            ("Boolean", "INTEGER"),
            ("INTEGER PRIMARY KEY", "INTEGER PRIMARY KEY"),
            (" integer  primary   key ", "INTEGER PRIMARY KEY"),
            ("double precision", "REAL"),
            ("FLOAT", "REAL"),
            ("numeric(10,2)", "NUMERIC"),
            ("DECIMAL", "NUMERIC"),
            ("bytea", "BLOB"),
        ] {
            assert_eq!(column_type(written).as_deref(), Some(sqlite), "{written}");
        }
        for bad in [
            "TEXT); DROP TABLE x; --",
            "TEXT, evil TEXT",
            "TEXT DEFAULT (load_extension('x'))",
            "TEXT PRIMARY KEY PRIMARY KEY",
            "TEXT PRIMARY",
            "TEXT NOT NULL",
            "VARCHAR(2",
            "VARCHAR()",
            "TEXT(5)",
            "INTEGER(1);",
            "",
            "   ",
            "DATE",
        ] {
            assert_eq!(column_type(bad), None, "{bad}");
        }
    }

    #[test]
    fn table_names_are_lower_case_identifiers() {
        for good in ["ip_zone", "_t", "t2", &"a".repeat(63)] {
            assert!(is_table_name(good), "{good}");
        }
        for bad in ["SECRETS", "Secrets", "2t", "", "a-b", "a.b", "a b", "t\"", "é", &"a".repeat(64)] {
            assert!(!is_table_name(bad), "{bad}");
        }
    }

    #[test]
    fn lines_are_counted_from_one() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
    }
}
