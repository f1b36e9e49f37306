//! The knowdb loader: builds a knowledge base from a `knowdb.toml` that
//! lists tables and their CSV data.
//!
//! ```toml
//! [[tables]]
//! name = "ip_zone"            # table name
//! csv = "ip_zone.csv"         # CSV with a header row, relative to this file
//! types = ["TEXT", "TEXT"]    # optional column types; inferred from the data if absent
//! expected_rows = 4           # optional: fail the load if the count differs
//! ```

use std::path::{Path, PathBuf};

use omlet_lang::Cell;
use serde::Deserialize;

use super::Provider;
use crate::{Error, Result};

#[derive(Debug, Deserialize)]
pub struct KnowDb {
    #[serde(default)]
    pub tables: Vec<TableSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    pub name: String,
    pub csv: PathBuf,
    #[serde(default)]
    pub types: Option<Vec<String>>,
    #[serde(default)]
    pub expected_rows: Option<u64>,
}

/// Reads a `knowdb.toml`.
pub fn read(path: &Path) -> Result<KnowDb> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    toml::from_str(&text).map_err(|e| Error::Knowledge(format!("{}: {}", path.display(), e.to_string().trim())))
}

/// Reads `knowdb.toml` and loads every table into `db`.
pub async fn load(path: &Path, db: &dyn Provider) -> Result<()> {
    let spec = read(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    for t in &spec.tables {
        let csv_path = dir.join(&t.csv);
        let (columns, rows) = read_csv(&csv_path)?;
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
        db.load_table(&t.name, &columns, &types, &typed).await?;
        if let Some(n) = t.expected_rows {
            let got = db.count(&t.name).await?;
            if got as u64 != n {
                return Err(Error::Knowledge(format!(
                    "{}: table {} has {got} rows, expected {n}",
                    path.display(),
                    t.name
                )));
            }
        }
    }
    Ok(())
}

fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    let mut rd = csv::Reader::from_path(path).map_err(|e| Error::Knowledge(format!("{}: {e}", path.display())))?;
    let columns: Vec<String> = rd
        .headers()
        .map_err(|e| Error::Knowledge(format!("{}: {e}", path.display())))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    for (n, rec) in rd.records().enumerate() {
        let rec = rec.map_err(|e| Error::Input { what: format!("{} record {}", path.display(), n + 1), message: e.to_string() })?;
        rows.push(rec.iter().map(str::to_string).collect());
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
            "INTEGER" | "INT" | "BIGINT" => v.parse().map(Cell::Integer).unwrap_or(if v.is_empty() { Cell::Null } else { Cell::Text(v.clone()) }),
            "REAL" | "FLOAT" | "DOUBLE" => v.parse().map(Cell::Real).unwrap_or(if v.is_empty() { Cell::Null } else { Cell::Text(v.clone()) }),
            _ => Cell::Text(v.clone()),
        })
        .collect()
}
