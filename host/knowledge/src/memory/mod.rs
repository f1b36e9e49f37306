//! In-memory tables: lookups of knowdb tables answered from the host's
//! memory, through a hash index or an interval index, without a query.
//!
//! **Why.** Real enrichment looks up distinct keys (client addresses, hashes)
//! in tables of 10^5 to 10^7 rows, so the caches rarely answer, and each
//! miss was an SQLite query: 205 records/s against 200,000 rows without an
//! index, about 17,000 with one (a query costs tens of microseconds through
//! sqlx's connection thread). A lookup here is a hash probe or a binary
//! search in the calling thread: well under a microsecond, and it never
//! waits, so it also serves the fiber-less call path.
//!
//! **What it replaces.** Nothing is taken away: the table stays in SQLite,
//! and SQLite answers every statement that an index here cannot (another
//! shape, a parameter of an unexpected type, overlapping ranges). The
//! answers are SQLite's: the rows are read back from SQLite with their
//! storage classes, and a parameter is converted by the column's affinity
//! exactly where SQLite would convert it; where this module is not sure
//! that it would give SQLite's answer, it does not answer ([`Lookup::answer`]
//! returns `None`) and the query goes to SQLite.
//!
//! **Which statements.** A condition that is nothing but a conjunction of
//! column-to-parameter comparisons ([`guard::Checked::terms`]):
//! - `a = :x [and b = :y …]`: a hash index on (a, b, …). Where keys repeat,
//!   the first row in the table's order (rowid) answers, which is what
//!   SQLite gives through omlet's index on those columns.
//! - `lo <= :x and hi >= :x` (either side strict, the parameter written
//!   once or twice): an interval index, the rows sorted by `lo`, answered by
//!   binary search, when no two ranges overlap and both columns hold
//!   integers. A table whose ranges overlap has several answers, and which
//!   one SQLite gives depends on its plan, so such a lookup stays in SQL.
//!
//! **What it costs.** The table is held once however many statements read
//! it (about the size of its cells, plus 24 bytes a row, and `Cell`'s 32
//! bytes a value), and each index adds 5-9 bytes a row (hash) or 24
//! (intervals). Tables over `memory.max_table_mb` stay in SQL, or fail the
//! load (`memory.over_limit`). Loading reads the table once at bind,
//! outside the lookup path. Only knowdb tables in SQLite are held: they do
//! not change after the load, so nothing here needs reloading.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hashbrown::HashTable;
use omlet_lang::Cell;
use serde::Deserialize;

use super::guard;

mod cells;
mod index;
mod lookup;

pub use cells::Affinity;
use cells::{Probe, hash_cell, probe, real_int, same};
use index::ip_key;
pub use index::{Compare, Index, Spans};
pub use lookup::Lookup;
use lookup::Plan;

/// The `[memory]` table of a knowledge config.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Hold knowdb tables in the host's memory and answer the lookups an
    /// index serves from there (default true).
    #[serde(default = "yes")]
    pub knowdb: bool,
    /// Most memory one table may take, in MiB, as estimated while it is
    /// read (default 1024; `max_memory_mb` is read as the same key).
    #[serde(default = "default_max_table_mb", alias = "max_memory_mb")]
    pub max_table_mb: u64,
    /// What a table over `max_table_mb` does (default `sql`).
    #[serde(default)]
    pub over_limit: OverLimit,
    /// Tables of the database itself (PostgreSQL, MySQL/MariaDB, or an
    /// SQLite file) held in memory too, as snapshots (default none). Each
    /// is read again when the knowledge reloads (`[reload]`: a NOTIFY, a
    /// changed poll value, or [`Knowledge::reload_all`](super::Knowledge::reload_all)),
    /// and swapped whole, so that no lookup sees half a table.
    #[serde(default)]
    pub snapshots: Vec<String>,
}

fn yes() -> bool {
    true
}

fn default_max_table_mb() -> u64 {
    1024
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig { knowdb: true, max_table_mb: default_max_table_mb(), over_limit: OverLimit::Sql, snapshots: Vec::new() }
    }
}

/// `memory.over_limit`: what a table too big for memory does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OverLimit {
    /// Its lookups are answered by SQL, as without `[memory]` (logged). A
    /// snapshot that a reload finds over the limit goes to SQL too, until a
    /// reload reads it within the limit.
    #[default]
    Sql,
    /// The rule's load fails with [`Limit::TableMemory`](crate::Limit). A
    /// snapshot that a reload finds over the limit has its lookups fail
    /// with that limit, naming the table ([`Lookup::refuse`]), until a
    /// reload reads it within the limit; never the old snapshot.
    Fail,
}

/// A table as read from its database: what [`Table::new`] holds.
#[derive(Debug, Default)]
pub struct TableData {
    /// The column names, in order.
    pub columns: Vec<String>,
    /// Each column's declared type (SQLite's `pragma table_info`).
    pub types: Vec<String>,
    /// The rows, in the table's order (rowid).
    pub rows: Vec<Box<[Cell]>>,
    /// Estimated bytes of `rows`.
    pub bytes: u64,
}

impl TableData {
    /// Adds a row read from `table`, or fails with [`Limit::TableMemory`]
    /// once the rows take more than `max_bytes`.
    ///
    /// [`Limit::TableMemory`]: crate::Limit::TableMemory
    pub fn push(&mut self, cells: Box<[Cell]>, max_bytes: u64, table: &str) -> crate::Result<()> {
        self.bytes += row_bytes(&cells);
        if self.bytes > max_bytes {
            return Err(crate::Error::limit(
                crate::Limit::TableMemory,
                format!("the table {table} takes more than {} MiB in memory by row {}", max_bytes >> 20, self.rows.len() + 1),
            ));
        }
        self.rows.push(cells);
        Ok(())
    }
}

/// The estimated bytes of one row held in memory.
pub fn row_bytes(cells: &[Cell]) -> u64 {
    (std::mem::size_of::<Box<[Cell]>>() + std::mem::size_of_val(cells) + heap_bytes(cells)) as u64
}

/// The bytes that cells' text and blobs hold on the heap.
pub(crate) fn heap_bytes(cells: &[Cell]) -> usize {
    cells
        .iter()
        .map(|c| match c {
            Cell::Text(t) => t.capacity(),
            Cell::Blob(b) => b.capacity(),
            _ => 0,
        })
        .sum()
}

/// A table held in memory, with the indexes its lookups asked for.
pub struct Table {
    /// Its name.
    pub name: String,
    /// Column names.
    pub columns: Vec<String>,
    affinity: Vec<Affinity>,
    compare: Compare,
    rows: Vec<Box<[Cell]>>,
    /// Estimated bytes of its rows.
    pub bytes: u64,
    /// How long reading it took.
    pub loaded_in: Duration,
    /// Indexes built so far, by their description; a refusal is kept too.
    indexes: Mutex<HashMap<String, Result<Arc<Index>, Unplanned>>>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.name).field("rows", &self.rows.len()).field("bytes", &self.bytes).finish()
    }
}

impl Table {
    /// A table of `data` (from SQLite), read in `loaded_in`.
    pub fn new(name: &str, data: TableData, loaded_in: Duration) -> Table {
        Table::with_compare(name, data, loaded_in, Compare::Sqlite)
    }

    /// A table of `data` from a database that compares as `compare` says.
    pub fn with_compare(name: &str, data: TableData, loaded_in: Duration, compare: Compare) -> Table {
        Table {
            name: name.to_string(),
            compare,
            affinity: data.types.iter().map(|t| Affinity::of(t)).collect(),
            columns: data.columns,
            rows: data.rows,
            bytes: data.bytes,
            loaded_in,
            indexes: Mutex::new(HashMap::new()),
        }
    }

    /// How many rows it holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether it holds no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The estimated bytes of the indexes built on it so far.
    pub fn index_bytes(&self) -> u64 {
        self.indexes.lock().map(|all| all.values().flatten().map(|i| i.bytes()).sum()).unwrap_or(0)
    }

    fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.eq_ignore_ascii_case(name))
    }

    /// The index `make` builds, under `name`, built once.
    fn index(&self, name: String, make: impl FnOnce() -> Result<Index, Unplanned>) -> Result<Arc<Index>, Unplanned> {
        let mut all = self.indexes.lock().map_err(|_| Unplanned::Poisoned)?;
        all.entry(name).or_insert_with(|| make().map(Arc::new)).clone()
    }

    fn hash_index(&self, cols: &[usize]) -> Index {
        let hasher = hashbrown::DefaultHashBuilder::default();
        let mut rows: HashTable<u32> = HashTable::with_capacity(self.rows.len());
        let mut repeated = 0;
        let key_hash = |row: &[Cell]| {
            let mut h = hasher.build_hasher();
            for &c in cols {
                hash_cell(&row[c], &mut h);
            }
            h.finish()
        };
        for (n, row) in self.rows.iter().enumerate() {
            // A NULL in the key matches nothing.
            if cols.iter().any(|&c| row[c] == Cell::Null) {
                continue;
            }
            let hash = key_hash(row);
            let found = rows.find(hash, |&other| cols.iter().all(|&c| same(&self.rows[other as usize][c], &row[c]))).is_some();
            if found {
                repeated += 1;
            } else {
                rows.insert_unique(hash, n as u32, |&r| key_hash(&self.rows[r as usize]));
            }
        }
        Index::Hash { cols: cols.to_vec(), rows, hasher, repeated }
    }

    fn range_index(&self, lo: usize, hi: usize) -> Result<Index, Unplanned> {
        if self.affinity[lo] == Affinity::Text && self.affinity[hi] == Affinity::Text {
            return self.key_range_index(lo, hi);
        }
        for c in [lo, hi] {
            if !self.affinity[c].numeric() {
                return Err(Unplanned::NotNumeric(self.columns[c].clone()));
            }
        }
        let spans = self.sorted_spans(|row| {
            let bound = |c: usize| match &row[c] {
                Cell::Integer(i) => Ok(Some(*i)),
                Cell::Real(f) => real_int(*f).map(Some).ok_or(()),
                Cell::Null => Ok(None),
                _ => Err(()),
            };
            match (bound(lo), bound(hi)) {
                (Ok(Some(l)), Ok(Some(h))) => Ok(Some((l, h))),
                (Ok(_), Ok(_)) => Ok(None),
                _ => Err("holds a bound that is not an integer"),
            }
        })?;
        Ok(Index::Ranges { lo, hi, spans: Spans::new(&spans) })
    }

    /// The rows as ranges `(lo, hi, row)` sorted by `lo`, from `bounds` of
    /// each row (`None`: the row matches nothing, as does an empty range;
    /// an error: no index can be made), refused when two overlap, since SQL
    /// then decides which row answers.
    fn sorted_spans<K: Copy + Ord>(
        &self,
        mut bounds: impl FnMut(&[Cell]) -> Result<Option<(K, K)>, &'static str>,
    ) -> Result<Vec<(K, K, u32)>, Unplanned> {
        let mut spans = Vec::with_capacity(self.rows.len());
        for (n, row) in self.rows.iter().enumerate() {
            match bounds(row).map_err(|what| Unplanned::BadBound { row: n + 1, table: self.name.clone(), what })? {
                Some((l, h)) if l <= h => spans.push((l, h, n as u32)),
                _ => {}
            }
        }
        spans.sort_by_key(|&(l, _, n)| (l, n));
        if let Some(w) = spans.windows(2).find(|w| w[0].1 >= w[1].0) {
            return Err(Unplanned::Overlap(w[0].2 + 1, w[1].2 + 1));
        }
        Ok(spans)
    }

    /// The networks of column `c` as ranges of addresses, computed as the
    /// `cidr4_contains` helper reads them; none may overlap (nested
    /// networks have several answers, and SQL's scan order decides).
    fn cidr4_index(&self, c: usize) -> Result<Index, Unplanned> {
        let spans = self.sorted_spans(|row| {
            let lo = omlet_lang::pipes::helper(omlet_lang::ir::Helper::Cidr4Min, std::slice::from_ref(&row[c]));
            let hi = omlet_lang::pipes::helper(omlet_lang::ir::Helper::Cidr4Max, std::slice::from_ref(&row[c]));
            Ok(match (lo, hi) {
                (Cell::Integer(l), Cell::Integer(h)) => Some((l, h)),
                _ => None,
            })
        })?;
        Ok(Index::Cidr4 { col: c, spans: Spans::new(&spans) })
    }

    /// Ranges whose bounds are `ip_key` texts: every bound one (or NULL),
    /// and no two ranges overlapping.
    fn key_range_index(&self, lo: usize, hi: usize) -> Result<Index, Unplanned> {
        let spans = self.sorted_spans(|row| {
            let bound = |c: usize| match &row[c] {
                Cell::Text(t) => ip_key(t).map(Some).ok_or(()),
                Cell::Null => Ok(None),
                _ => Err(()),
            };
            match (bound(lo), bound(hi)) {
                (Ok(Some(l)), Ok(Some(h))) => Ok(Some((l, h))),
                (Ok(_), Ok(_)) => Ok(None),
                _ => Err("holds a text bound that is not an ip_key (32 lower-case hex digits)"),
            }
        })?;
        Ok(Index::KeyRanges { lo, hi, spans: Spans::new(&spans) })
    }

    /// The lookup that answers a statement from this table, or why there is
    /// none. `params` are the statement's parameter names, in the guest's
    /// order; `result` its result columns.
    pub fn plan(self: &Arc<Self>, terms: &[guard::Term], params: &[String], result: &[String]) -> Result<Lookup, Unplanned> {
        let col = |name: &str| self.column(name).ok_or_else(|| Unplanned::NoColumn(name.to_string()));
        let param = |name: &str| params.iter().position(|p| p == name).ok_or_else(|| Unplanned::NoParameter(name.to_string()));
        let project = result.iter().map(|c| col(c)).collect::<Result<Vec<_>, _>>()?;
        if terms.is_empty() {
            return Err(Unplanned::NoCondition);
        }
        if terms.iter().all(|t| t.op == "=") {
            let mut cols = Vec::new();
            let mut args = Vec::new();
            for t in terms {
                let c = col(&t.column)?;
                if cols.contains(&c) {
                    return Err(Unplanned::ComparedTwice(t.column.clone()));
                }
                cols.push(c);
                args.push(param(&t.param)?);
            }
            let name = format!("hash {}", cols.iter().map(|c| self.columns[*c].as_str()).collect::<Vec<_>>().join(", "));
            let index = self.index(name, || Ok(self.hash_index(&cols)))?;
            if self.compare != Compare::Sqlite && repeated(&index) > 0 {
                return Err(Unplanned::KeysRepeat { repeated: repeated(&index), table: self.name.clone() });
            }
            return Ok(Lookup::new(Plan { table: self.clone(), index, args, strict: (false, false), project }));
        }
        if let [t] = terms
            && t.op == "cidr4"
        {
            if self.compare != Compare::Sqlite {
                return Err(Unplanned::Cidr4InSql);
            }
            let c = col(&t.column)?;
            let args = vec![param(&t.param)?];
            let name = format!("cidr4 {}", self.columns[c]);
            let index = self.index(name, || self.cidr4_index(c))?;
            return Ok(Lookup::new(Plan { table: self.clone(), index, args, strict: (false, false), project }));
        }
        if let [a, b] = terms {
            let (low, high) = match (a.op.as_str(), b.op.as_str()) {
                ("<=" | "<", ">=" | ">") => (a, b),
                (">=" | ">", "<=" | "<") => (b, a),
                _ => return Err(Unplanned::NotListOrRange),
            };
            let (lo, hi) = (col(&low.column)?, col(&high.column)?);
            if lo == hi {
                return Err(Unplanned::OneColumnBounds);
            }
            let args = vec![param(&low.param)?, param(&high.param)?];
            let name = format!("ranges {}, {}", self.columns[lo], self.columns[hi]);
            let index = self.index(name, || self.range_index(lo, hi))?;
            return Ok(Lookup::new(Plan { table: self.clone(), index, args, strict: (low.op == "<", high.op == ">"), project }));
        }
        Err(Unplanned::NotListOrRange)
    }
}

/// Why a table held in memory cannot answer a statement: its lookups then
/// go to SQL, and `omlet inspect` says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unplanned {
    /// The statement names a column the table does not have.
    #[error("no column `{0}`")]
    NoColumn(String),
    /// A condition compares with a parameter the statement does not pass.
    #[error("no parameter `{0}`")]
    NoParameter(String),
    /// The statement has no condition.
    #[error("no condition")]
    NoCondition,
    /// One column is compared twice in an `=` list.
    #[error("`{0}` is compared twice")]
    ComparedTwice(String),
    /// Keys repeat and the table's database gives no order among them.
    #[error("{repeated} keys repeat, and {table} gives no order among them without `order by`")]
    KeysRepeat {
        /// How many keys repeat.
        repeated: u64,
        /// The table.
        table: String,
    },
    /// `cidr4_contains` over a database that computes it itself.
    #[error("cidr4_contains is computed in SQL here")]
    Cidr4InSql,
    /// The condition is neither an `=` list nor one range.
    #[error("not one `=` list nor one range")]
    NotListOrRange,
    /// A range's two bounds are the same column.
    #[error("both bounds are one column")]
    OneColumnBounds,
    /// A range's bound column is not numeric.
    #[error("the column `{0}` is not numeric")]
    NotNumeric(String),
    /// A row's bound cannot be read as the range needs it.
    #[error("row {row} of `{table}` {what}")]
    BadBound {
        /// The row, 1-based.
        row: usize,
        /// The table.
        table: String,
        /// What is wrong with its bound.
        what: &'static str,
    },
    /// Two ranges overlap (these rows, 1-based), so SQL's order would decide.
    #[error("its ranges overlap (rows {0} and {1}), and without `order by` SQL decides which row answers")]
    Overlap(u32, u32),
    /// A thread panicked while it built an index of the table.
    #[error("index lock poisoned")]
    Poisoned,
}

/// Rows of a hash index that repeat an earlier row's key.
fn repeated(index: &Index) -> u64 {
    match index {
        Index::Hash { repeated, .. } => *repeated,
        Index::Ranges { .. } | Index::KeyRanges { .. } | Index::Cidr4 { .. } => 0,
    }
}

#[cfg(test)]
mod tests;
