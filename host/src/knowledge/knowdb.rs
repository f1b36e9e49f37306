//! The knowdb loader: builds a knowledge base from a `knowdb.toml` that
//! lists tables, each from CSV data and/or SQL files.
//!
//! ```toml
//! [[tables]]
//! name = "ip_zone"            # table name
//! csv = "ip_zone.csv"         # CSV with a header row, relative to this file
//! types = ["TEXT", "TEXT"]    # optional column types; inferred from the data if absent
//! create = "ip_zone.sql"      # optional: SQL that creates the table (instead of inferring it)
//! insert = "more_rows.sql"    # optional: SQL run after the CSV rows
//! expected_rows = 4           # optional: fail the load if the count differs
//! on_error = "fail"           # or "skip": a bad row is skipped and counted, not fatal
//! ```

use std::path::{Path, PathBuf};

use omlet_lang::Cell;
use serde::Deserialize;

use super::Provider;
use crate::{Error, Result};

/// A parsed `knowdb.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowDb {
    /// The `[[tables]]`, loaded in this order.
    #[serde(default)]
    pub tables: Vec<TableSpec>,
}

/// One `[[tables]]` entry; it needs `csv`, `create`, or both. Unknown keys
/// are refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    /// The table's name in the database.
    pub name: String,
    /// CSV data with a header row naming the columns, relative to the
    /// `knowdb.toml`. Without `create`, the table is created from the header
    /// and `types`, and it must not exist yet.
    #[serde(default)]
    pub csv: Option<PathBuf>,
    /// The CSV columns' types in SQLite's terms (`INTEGER`, `REAL`, `TEXT`,
    /// `BLOB`, optionally `PRIMARY KEY`), one per column. Default: inferred,
    /// per column, as `INTEGER` if every non-empty value is an integer,
    /// `REAL` if every one is a number, else `TEXT`. Other providers map
    /// them to their own types.
    #[serde(default)]
    pub types: Option<Vec<String>>,
    /// An SQL file, relative to the `knowdb.toml`, run first to create the
    /// table (in the database's own dialect); the CSV rows then go into it.
    #[serde(default)]
    pub create: Option<PathBuf>,
    /// An SQL file, relative to the `knowdb.toml`, run after the CSV rows.
    #[serde(default)]
    pub insert: Option<PathBuf>,
    /// If set, the load fails unless the table then has this many rows.
    #[serde(default)]
    pub expected_rows: Option<u64>,
    /// What a bad row does (default `fail`).
    #[serde(default)]
    pub on_error: OnError,
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

/// Reads a `knowdb.toml` without loading anything. Fails with
/// [`Error::Io`], or [`Error::Knowledge`] for bad TOML or an unknown key in a
/// table.
pub fn read(path: &Path) -> Result<KnowDb> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    toml::from_str(&text).map_err(|e| Error::Knowledge(format!("{}: {}", path.display(), e.to_string().trim())))
}

/// Reads `knowdb.toml` and loads every table into `db`, in order. Fails
/// on the first table that does not load (an unreadable file, bad CSV, a
/// `types` list of the wrong length, a row or statement the database
/// rejects, a wrong `expected_rows`); tables loaded before it stay. Returns
/// the names of the tables it declares (the default `tables` allow-list).
pub async fn load(path: &Path, db: &dyn Provider) -> Result<Vec<String>> {
    let spec = read(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    for t in &spec.tables {
        let skip = t.on_error == OnError::Skip;
        let sql_file = |p: &PathBuf| -> Result<String> {
            let p = dir.join(p);
            std::fs::read_to_string(&p).map_err(|e| Error::io(&p, e))
        };
        if let Some(c) = &t.create {
            db.execute(&sql_file(c)?).await?;
        }
        if let Some(csv) = &t.csv {
            let csv_path = dir.join(csv);
            let (columns, rows) = read_csv(&csv_path, skip)?;
            let types = match &t.types {
                Some(ty) if ty.len() == columns.len() => ty.clone(),
                Some(ty) => {
                    return Err(Error::Knowledge(format!(
                        "{}: table {} has {} columns but {} types",
                        path.display(),
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
            return Err(Error::Knowledge(format!("{}: table {} needs `csv` or `create`", path.display(), t.name)));
        }
        if let Some(i) = &t.insert {
            match db.execute(&sql_file(i)?).await {
                Err(e) if skip => tracing::warn!(table = %t.name, error = %e, "insert file failed; skipped"),
                other => other?,
            }
        }
        if let Some(n) = t.expected_rows {
            let got = db.count(&t.name).await?;
            if got as u64 != n {
                return Err(Error::Knowledge(format!("{}: table {} has {got} rows, expected {n}", path.display(), t.name)));
            }
        }
    }
    Ok(spec.tables.iter().map(|t| t.name.clone()).collect())
}

fn read_csv(path: &Path, skip_bad: bool) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    let mut rd = csv::Reader::from_path(path).map_err(|e| Error::Knowledge(format!("{}: {e}", path.display())))?;
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
        .map(|(v, t)| match t.to_ascii_uppercase().as_str() {
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
