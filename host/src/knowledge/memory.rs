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
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hashbrown::HashTable;
use omlet_lang::Cell;
use serde::Deserialize;

use super::guard;

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
    /// Its lookups are answered by SQL, as without `[memory]` (logged).
    #[default]
    Sql,
    /// The rule's load fails with [`Limit::TableMemory`](crate::Limit).
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

/// SQLite's column affinity (its manual, "Determination Of Column Affinity").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// Declared with `INT` in the type.
    Integer,
    /// `CHAR`, `CLOB` or `TEXT`.
    Text,
    /// `BLOB`, or no type: values are compared as they are.
    Blob,
    /// `REAL`, `FLOA` or `DOUB`.
    Real,
    /// Anything else.
    Numeric,
}

impl Affinity {
    /// The affinity of a declared type, by SQLite's rules in their order.
    pub fn of(declared: &str) -> Affinity {
        let t = declared.to_ascii_uppercase();
        if t.contains("INT") {
            Affinity::Integer
        } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
            Affinity::Text
        } else if t.contains("BLOB") || t.trim().is_empty() {
            Affinity::Blob
        } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
            Affinity::Real
        } else {
            Affinity::Numeric
        }
    }

    fn numeric(self) -> bool {
        matches!(self, Affinity::Integer | Affinity::Real | Affinity::Numeric)
    }
}

/// A parameter as SQLite compares it with a column of some affinity.
enum Probe {
    /// The value, converted as SQLite converts it.
    Value(Cell),
    /// NULL: it matches no row.
    Null,
    /// A conversion this module does not reproduce (a real or a blob
    /// against a text column): SQL answers.
    Unsure,
}

/// How SQLite converts a parameter (which has no affinity) before comparing
/// it with a column of affinity `a`.
fn probe(c: &Cell, a: Affinity) -> Probe {
    match (c, a) {
        (Cell::Null, _) => Probe::Null,
        (c, Affinity::Blob) => Probe::Value(c.clone()),
        (Cell::Text(s), a) if a.numeric() => Probe::Value(sqlite_number(s).unwrap_or_else(|| c.clone())),
        // Numeric affinity leaves numbers and blobs as they are.
        (Cell::Integer(_) | Cell::Real(_) | Cell::Blob(_), a) if a.numeric() => Probe::Value(c.clone()),
        (Cell::Text(_), Affinity::Text) => Probe::Value(c.clone()),
        (Cell::Integer(i), Affinity::Text) => Probe::Value(Cell::Text(i.to_string())),
        _ => Probe::Unsure,
    }
}

/// Text that SQLite's numeric affinity turns into a number: a well-formed
/// integer or real literal, spaces around it allowed; an integer past
/// 64 bits becomes a real.
fn sqlite_number(s: &str) -> Option<Cell> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let b = t.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let mut n = digits(&mut i);
    let mut integer = true;
    if b.get(i) == Some(&b'.') {
        i += 1;
        n += digits(&mut i);
        integer = false;
    }
    if n == 0 {
        return None;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return None;
        }
        integer = false;
    }
    if i != b.len() {
        return None;
    }
    if integer && let Ok(v) = t.parse::<i64>() {
        return Some(Cell::Integer(v));
    }
    t.parse::<f64>().ok().filter(|f| f.is_finite()).map(Cell::Real)
}

/// A real that equals an integer, as that integer.
fn real_int(f: f64) -> Option<i64> {
    // 2^63 is exact in f64; every integral f64 in [-2^63, 2^63) is an i64.
    (f.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f)).then_some(f as i64)
}

/// Equality as SQLite's `=` decides it between values of storage classes
/// (integers and reals compare as numbers; text and blobs bytewise, with
/// the default BINARY collation).
fn same(a: &Cell, b: &Cell) -> bool {
    match (a, b) {
        (Cell::Integer(x), Cell::Integer(y)) => x == y,
        (Cell::Integer(i), Cell::Real(f)) | (Cell::Real(f), Cell::Integer(i)) => real_int(*f) == Some(*i),
        (Cell::Real(x), Cell::Real(y)) => x == y,
        (Cell::Text(x), Cell::Text(y)) => x == y,
        (Cell::Blob(x), Cell::Blob(y)) => x == y,
        _ => false,
    }
}

/// A hash that agrees with [`same`].
fn hash_cell(c: &Cell, h: &mut impl Hasher) {
    match c {
        Cell::Integer(i) => (0u8, *i).hash(h),
        Cell::Real(f) => match real_int(*f) {
            Some(i) => (0u8, i).hash(h),
            None => (1u8, f.to_bits()).hash(h),
        },
        Cell::Text(t) => (2u8, t.as_bytes()).hash(h),
        Cell::Blob(b) => (3u8, b.as_slice()).hash(h),
        Cell::Null => 4u8.hash(h),
    }
}

/// One index over a table.
pub enum Index {
    /// Equality on `cols`: row numbers, found by the hash of their key.
    Hash {
        /// The key columns.
        cols: Vec<usize>,
        /// Row numbers; a repeated key keeps its first row only.
        rows: HashTable<u32>,
        /// The hasher.
        hasher: hashbrown::DefaultHashBuilder,
        /// Rows whose key was already taken by an earlier row.
        repeated: u64,
    },
    /// Ranges `[lo, hi]` of integers, sorted by `lo`, none overlapping.
    Ranges {
        /// The lower bound's column.
        lo: usize,
        /// The upper bound's column.
        hi: usize,
        /// The ranges, searched in two steps.
        spans: Spans,
    },
    /// IPv4 networks of one column (`cidr4_contains(:ip, col) = 1`), as
    /// ranges of addresses, none overlapping; rows whose text is no network
    /// are left out, as the helper never matches them.
    Cidr4 {
        /// The column of networks.
        col: usize,
        /// The networks' first and last addresses.
        spans: Spans,
    },
    /// Ranges `[lo, hi]` of `ip_key` texts (32 lower-case hex digits, as
    /// IPv6 and mixed-family tables hold them), none overlapping.
    KeyRanges {
        /// The lower bound's column.
        lo: usize,
        /// The upper bound's column.
        hi: usize,
        /// The ranges, as the keys' numbers.
        spans: Spans<u128>,
    },
}

/// The number of an `ip_key` text: exactly 32 lower-case hex digits, whose
/// byte order (SQLite's for text) is the numbers' order; `None` for any
/// other text.
fn ip_key(s: &str) -> Option<u128> {
    if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
        return None;
    }
    u128::from_str_radix(s, 16).ok()
}

/// How many lower bounds one entry of [`Spans::top`] stands for.
const BLOCK: usize = 64;

/// Ranges that do not overlap, sorted by their lower bound, searched in two
/// steps: a plain binary search over a million 24-byte ranges touches about
/// 20 cache lines spread over 24 MB, and at distinct keys each one is a miss
/// (run/ranges/distinct ran at 0.56x the hot-key run with one). Here a
/// binary search over every 64th lower bound (8 bytes each: 128 KiB for a
/// million ranges, which the cache keeps) picks a block, and a search of
/// that block's 64 lower bounds (512 bytes) finds the range: a few misses
/// a lookup.
///
/// The bounds are integers (`i64`), or the 128-bit numbers of `ip_key`
/// texts (`u128`), whose order is the texts' order.
pub struct Spans<K = i64> {
    /// The lower bounds, sorted.
    los: Vec<K>,
    /// The upper bound and the row of each, in the same order.
    ends: Vec<(K, u32)>,
    /// `los[k * BLOCK]` for each k.
    top: Vec<K>,
}

impl<K: Copy + Ord> Spans<K> {
    /// Spans of `sorted` (lo, hi, row), sorted by lo, none overlapping.
    fn new(sorted: &[(K, K, u32)]) -> Spans<K> {
        let los: Vec<K> = sorted.iter().map(|s| s.0).collect();
        let top = los.iter().step_by(BLOCK).copied().collect();
        Spans { los, ends: sorted.iter().map(|s| (s.1, s.2)).collect(), top }
    }

    /// How many ranges.
    pub fn len(&self) -> usize {
        self.los.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.los.is_empty()
    }

    fn bytes(&self) -> u64 {
        let k = std::mem::size_of::<K>();
        (self.los.capacity() * k + self.ends.capacity() * std::mem::size_of::<(K, u32)>() + self.top.capacity() * k) as u64
    }

    /// The upper bound and row of the last range whose lower bound admits
    /// `x` (`lo <= x`, or `lo < x` when `strict`); since none overlap, no
    /// other range can hold `x`.
    /// The row of the range that holds `x` (`strict` says whether the lower
    /// and the upper bound exclude it), if one does: the last range whose
    /// lower bound admits `x` is the only one that can, since none overlap.
    fn holding(&self, x: K, (strict_lo, strict_hi): (bool, bool)) -> Option<u32> {
        let (h, row) = self.last_admitting(x, strict_lo)?;
        (if strict_hi { h > x } else { h >= x }).then_some(row)
    }

    fn last_admitting(&self, x: K, strict: bool) -> Option<(K, u32)> {
        let admits = |l: &K| if strict { *l < x } else { *l <= x };
        let block = self.top.partition_point(admits).checked_sub(1)?;
        let start = block * BLOCK;
        let within = &self.los[start..(start + BLOCK).min(self.los.len())];
        // At least the block's first bound admits x (it is `top[block]`).
        let at = start + within.partition_point(admits) - 1;
        self.ends.get(at).copied()
    }
}

impl Index {
    /// Its estimated size in bytes.
    pub fn bytes(&self) -> u64 {
        match self {
            Index::Hash { rows, .. } => (rows.capacity() * (std::mem::size_of::<u32>() + 1)) as u64,
            Index::Ranges { spans, .. } => spans.bytes(),
            Index::KeyRanges { spans, .. } => spans.bytes(),
            Index::Cidr4 { spans, .. } => spans.bytes(),
        }
    }
}

/// How the database the rows come from compares a parameter with a
/// column, which an answer from memory must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// SQLite's: by column affinity, converting numeric text (`probe`).
    Sqlite,
    /// Another database's (a snapshot of PostgreSQL or MySQL): memory
    /// answers only an integer against an integer column, and text against
    /// a text column when `text` is true (PostgreSQL, whose default
    /// collations are deterministic; not MySQL, whose usual collations
    /// ignore case). Anything else goes to SQL, which converts as it does.
    Exact { text: bool },
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
    indexes: Mutex<HashMap<String, Result<Arc<Index>, String>>>,
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
    fn index(&self, name: String, make: impl FnOnce() -> Result<Index, String>) -> Result<Arc<Index>, String> {
        let mut all = self.indexes.lock().map_err(|_| "index lock poisoned".to_string())?;
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

    fn range_index(&self, lo: usize, hi: usize) -> Result<Index, String> {
        if self.affinity[lo] == Affinity::Text && self.affinity[hi] == Affinity::Text {
            return self.key_range_index(lo, hi);
        }
        for c in [lo, hi] {
            if !self.affinity[c].numeric() {
                return Err(format!("the column `{}` is not numeric", self.columns[c]));
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
                _ => Err("holds a bound that is not an integer".into()),
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
        mut bounds: impl FnMut(&[Cell]) -> Result<Option<(K, K)>, String>,
    ) -> Result<Vec<(K, K, u32)>, String> {
        let mut spans = Vec::with_capacity(self.rows.len());
        for (n, row) in self.rows.iter().enumerate() {
            match bounds(row).map_err(|e| format!("row {} of `{}` {e}", n + 1, self.name))? {
                Some((l, h)) if l <= h => spans.push((l, h, n as u32)),
                _ => {}
            }
        }
        spans.sort_by_key(|&(l, _, n)| (l, n));
        if let Some(w) = spans.windows(2).find(|w| w[0].1 >= w[1].0) {
            return Err(format!(
                "its ranges overlap (rows {} and {}), and without `order by` SQL decides which row answers",
                w[0].2 + 1,
                w[1].2 + 1
            ));
        }
        Ok(spans)
    }

    /// The networks of column `c` as ranges of addresses, computed as the
    /// `cidr4_contains` helper reads them; none may overlap (nested
    /// networks have several answers, and SQL's scan order decides).
    fn cidr4_index(&self, c: usize) -> Result<Index, String> {
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
    fn key_range_index(&self, lo: usize, hi: usize) -> Result<Index, String> {
        let spans = self.sorted_spans(|row| {
            let bound = |c: usize| match &row[c] {
                Cell::Text(t) => ip_key(t).map(Some).ok_or(()),
                Cell::Null => Ok(None),
                _ => Err(()),
            };
            match (bound(lo), bound(hi)) {
                (Ok(Some(l)), Ok(Some(h))) => Ok(Some((l, h))),
                (Ok(_), Ok(_)) => Ok(None),
                _ => Err("holds a text bound that is not an ip_key (32 lower-case hex digits)".into()),
            }
        })?;
        Ok(Index::KeyRanges { lo, hi, spans: Spans::new(&spans) })
    }

    /// The lookup that answers a statement from this table, or why there is
    /// none. `params` are the statement's parameter names, in the guest's
    /// order; `result` its result columns.
    pub fn plan(self: &Arc<Self>, terms: &[guard::Term], params: &[String], result: &[String]) -> Result<Lookup, String> {
        let col = |name: &str| self.column(name).ok_or_else(|| format!("no column `{name}`"));
        let param = |name: &str| params.iter().position(|p| p == name).ok_or_else(|| format!("no parameter `{name}`"));
        let project = result.iter().map(|c| col(c)).collect::<Result<Vec<_>, _>>()?;
        if terms.is_empty() {
            return Err("no condition".into());
        }
        if terms.iter().all(|t| t.op == "=") {
            let mut cols = Vec::new();
            let mut args = Vec::new();
            for t in terms {
                let c = col(&t.column)?;
                if cols.contains(&c) {
                    return Err(format!("`{}` is compared twice", t.column));
                }
                cols.push(c);
                args.push(param(&t.param)?);
            }
            let name = format!("hash {}", cols.iter().map(|c| self.columns[*c].as_str()).collect::<Vec<_>>().join(", "));
            let index = self.index(name, || Ok(self.hash_index(&cols)))?;
            if self.compare != Compare::Sqlite && repeated(&index) > 0 {
                return Err(format!(
                    "{} keys repeat, and {} gives no order among them without `order by`",
                    repeated(&index),
                    self.name
                ));
            }
            return Ok(Lookup::new(Plan { table: self.clone(), index, args, strict: (false, false), project }));
        }
        if let [t] = terms
            && t.op == "cidr4"
        {
            if self.compare != Compare::Sqlite {
                return Err("cidr4_contains is computed in SQL here".into());
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
                _ => return Err("not one `=` list nor one range".into()),
            };
            let (lo, hi) = (col(&low.column)?, col(&high.column)?);
            if lo == hi {
                return Err("both bounds are one column".into());
            }
            let args = vec![param(&low.param)?, param(&high.param)?];
            let name = format!("ranges {}, {}", self.columns[lo], self.columns[hi]);
            let index = self.index(name, || self.range_index(lo, hi))?;
            return Ok(Lookup::new(Plan { table: self.clone(), index, args, strict: (low.op == "<", high.op == ">"), project }));
        }
        Err("not one `=` list nor one range".into())
    }
}

/// Rows of a hash index that repeat an earlier row's key.
fn repeated(index: &Index) -> u64 {
    match index {
        Index::Hash { repeated, .. } => *repeated,
        Index::Ranges { .. } | Index::KeyRanges { .. } | Index::Cidr4 { .. } => 0,
    }
}

/// A statement answered from a [`Table`] through one of its indexes, or by
/// SQL while it has no plan. The plan is swapped whole when a snapshot
/// table is read again ([`Lookup::swap`]): a lookup sees the old table or
/// the new one, never a mix, and never waits for the swap.
pub struct Lookup {
    plan: arc_swap::ArcSwapOption<Plan>,
}

impl Lookup {
    fn new(plan: Plan) -> Lookup {
        Lookup { plan: arc_swap::ArcSwapOption::from_pointee(plan) }
    }

    /// The answer SQLite (or the snapshot's database) would give for the
    /// guest's `params`: `Some(row)` or `Some(None)` for "no row"; `None`
    /// when this lookup cannot be sure of it, and SQL must answer.
    pub fn answer(&self, params: &[Cell]) -> Option<Option<Vec<Cell>>> {
        self.plan.load().as_ref()?.answer(params)
    }

    /// What `omlet check` prints for its path: `memory: hash on ip of
    /// bad_ip (200000 rows)`.
    pub fn describe(&self) -> String {
        match self.plan.load().as_ref() {
            Some(p) => p.describe(),
            None => "sql: the snapshot's last read could not be indexed".to_string(),
        }
    }

    /// How many rows of its table repeat a key that an earlier row holds
    /// (0 for ranges, which never overlap here).
    pub fn repeated(&self) -> u64 {
        self.plan.load().as_ref().map_or(0, |p| repeated(&p.index))
    }

    /// The table it reads, while it has a plan.
    pub fn table(&self) -> Option<Arc<Table>> {
        self.plan.load().as_ref().map(|p| p.table.clone())
    }

    /// Takes `other`'s plan (a new read of the same table), or none: SQL
    /// answers until the next swap.
    pub fn swap(&self, other: Option<Lookup>) {
        self.plan.store(other.and_then(|o| o.plan.swap(None)));
    }
}

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

struct Plan {
    table: Arc<Table>,
    index: Arc<Index>,
    /// For each key column (hash), or for the lower and upper bound
    /// (ranges): the index of the guest parameter it compares with.
    args: Vec<usize>,
    /// Whether the lower and the upper comparison are strict (`<`, `>`).
    strict: (bool, bool),
    /// The table's column for each result column.
    project: Vec<usize>,
}

impl Plan {
    fn describe(&self) -> String {
        let t = &self.table;
        match &*self.index {
            Index::Hash { cols, repeated, .. } => {
                let cols: Vec<&str> = cols.iter().map(|c| t.columns[*c].as_str()).collect();
                let repeated =
                    if *repeated > 0 { format!(", {repeated} repeated keys: the first row answers") } else { String::new() };
                format!("memory: hash on {} of {} ({} rows{repeated})", cols.join(", "), t.name, t.len())
            }
            Index::Ranges { lo, hi, spans } => format!(
                "memory: ranges {}..{} of {} ({} rows, {} ranges)",
                t.columns[*lo],
                t.columns[*hi],
                t.name,
                t.len(),
                spans.len()
            ),
            Index::Cidr4 { col, spans } => {
                format!("memory: cidr4 networks of {}.{} ({} rows, {} networks)", t.name, t.columns[*col], t.len(), spans.len())
            }
            Index::KeyRanges { lo, hi, spans } => format!(
                "memory: ip_key ranges {}..{} of {} ({} rows, {} ranges)",
                t.columns[*lo],
                t.columns[*hi],
                t.name,
                t.len(),
                spans.len()
            ),
        }
    }

    /// Whether the database would compare `params` with the key columns
    /// as memory does (always, for SQLite's own `probe`).
    fn comparable(&self, params: &[Cell]) -> bool {
        let t = &*self.table;
        let Compare::Exact { text } = t.compare else { return true };
        let cols: &[usize] = match &*self.index {
            Index::Hash { cols, .. } => cols,
            Index::Ranges { lo, .. } | Index::KeyRanges { lo, .. } => std::slice::from_ref(lo),
            // omlet's helper, only in SQLite (whose tables compare as `Sqlite`).
            Index::Cidr4 { .. } => return false,
        };
        cols.iter().zip(&self.args).all(|(&c, &p)| match (params.get(p), t.affinity[c]) {
            (Some(Cell::Null), _) | (Some(Cell::Integer(_)), Affinity::Integer) => true,
            (Some(Cell::Text(_)), Affinity::Text) => text,
            _ => false,
        })
    }

    fn answer(&self, params: &[Cell]) -> Option<Option<Vec<Cell>>> {
        if !self.comparable(params) {
            return None;
        }
        let t = &*self.table;
        let row = match &*self.index {
            Index::Hash { cols, rows, hasher, .. } => {
                let mut probes = Vec::with_capacity(cols.len());
                for (&c, &p) in cols.iter().zip(&self.args) {
                    match probe(params.get(p)?, t.affinity[c]) {
                        Probe::Value(v) => probes.push(v),
                        Probe::Null => return Some(None),
                        Probe::Unsure => return None,
                    }
                }
                let mut h = hasher.build_hasher();
                probes.iter().for_each(|v| hash_cell(v, &mut h));
                let found = rows.find(h.finish(), |&r| cols.iter().zip(&probes).all(|(&c, v)| same(&t.rows[r as usize][c], v)));
                match found {
                    Some(&r) => r,
                    None => return Some(None),
                }
            }
            Index::Ranges { lo, spans, .. } => {
                let (a, b) = (params.get(self.args[0])?, params.get(self.args[1])?);
                if a != b {
                    return None;
                }
                let x = match probe(a, t.affinity[*lo]) {
                    Probe::Value(Cell::Integer(i)) => i,
                    Probe::Value(Cell::Real(f)) => real_int(f)?,
                    // Text and blobs sort after every number in SQLite, so
                    // `hi >= x` holds for no row of integers.
                    Probe::Value(Cell::Text(_) | Cell::Blob(_)) | Probe::Null => return Some(None),
                    Probe::Value(Cell::Null) | Probe::Unsure => return None,
                };
                match spans.holding(x, self.strict) {
                    Some(row) => row,
                    None => return Some(None),
                }
            }
            Index::Cidr4 { spans, .. } => {
                // As the helper reads the address; anything else is in no network.
                let Some(x) = omlet_lang::pipes::cell_ipv4(params.get(self.args[0])?) else { return Some(None) };
                match spans.holding(i64::from(x), self.strict) {
                    Some(row) => row,
                    None => return Some(None),
                }
            }
            Index::KeyRanges { spans, .. } => {
                let (a, b) = (params.get(self.args[0])?, params.get(self.args[1])?);
                if a != b {
                    return None;
                }
                // Other text compares with the keys byte by byte in SQLite,
                // which their numbers do not model: SQL answers it.
                let x = match a {
                    Cell::Text(t) => ip_key(t)?,
                    Cell::Null => return Some(None),
                    _ => return None,
                };
                match spans.holding(x, self.strict) {
                    Some(row) => row,
                    None => return Some(None),
                }
            }
        };
        let row = &t.rows[row as usize];
        Some(Some(self.project.iter().map(|&c| row[c].clone()).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(column: &str, op: &str, param: &str) -> guard::Term {
        guard::Term { column: column.into(), op: op.into(), param: param.into() }
    }

    fn table(types: &[&str], rows: Vec<Vec<Cell>>) -> Arc<Table> {
        let columns = (0..types.len()).map(|i| format!("c{i}")).collect();
        let rows: Vec<Box<[Cell]>> = rows.into_iter().map(Vec::into_boxed_slice).collect();
        let bytes = rows.iter().map(|r| row_bytes(r)).sum();
        let data = TableData { columns, types: types.iter().map(|t| t.to_string()).collect(), rows, bytes };
        Arc::new(Table::new("t", data, Duration::ZERO))
    }

    #[test]
    fn affinity_follows_sqlites_rules_in_order() {
        assert_eq!(Affinity::of("BIGINT"), Affinity::Integer);
        assert_eq!(Affinity::of("varchar(20)"), Affinity::Text);
        assert_eq!(Affinity::of(""), Affinity::Blob);
        assert_eq!(Affinity::of("DOUBLE PRECISION"), Affinity::Real);
        assert_eq!(Affinity::of("DECIMAL(10,2)"), Affinity::Numeric);
        // "FLOATING POINT" holds INT: SQLite's own example.
        assert_eq!(Affinity::of("FLOATING POINT"), Affinity::Integer);
    }

    #[test]
    fn numeric_text_is_read_as_sqlite_reads_it() {
        assert_eq!(sqlite_number(" 42 "), Some(Cell::Integer(42)));
        assert_eq!(sqlite_number("-4.5e1"), Some(Cell::Real(-45.0)));
        assert_eq!(sqlite_number(".5"), Some(Cell::Real(0.5)));
        assert_eq!(sqlite_number("5."), Some(Cell::Real(5.0)));
        assert_eq!(sqlite_number("99999999999999999999"), Some(Cell::Real(1e20)));
        for no in ["", "+", "1e", "0x10", "inf", "nan", "1 2", "abc", "."] {
            assert_eq!(sqlite_number(no), None, "{no:?}");
        }
    }

    #[test]
    fn a_hash_lookup_converts_by_affinity_and_keeps_the_first_repeated_row() {
        let t = table(
            &["INTEGER", "TEXT", "TEXT"],
            vec![
                vec![Cell::Integer(10), Cell::Text("a".into()), Cell::Text("first".into())],
                vec![Cell::Integer(10), Cell::Text("b".into()), Cell::Text("second".into())],
                vec![Cell::Integer(11), Cell::Text("7".into()), Cell::Text("seven".into())],
                vec![Cell::Null, Cell::Text("n".into()), Cell::Text("null key".into())],
            ],
        );
        let by_int = t.plan(&[term("c0", "=", "k")], &["k".into()], &["c2".into()]).unwrap();
        let ask = |l: &Lookup, c: Cell| l.answer(&[c]);
        assert_eq!(ask(&by_int, Cell::Integer(10)), Some(Some(vec![Cell::Text("first".into())])));
        assert_eq!(ask(&by_int, Cell::Text(" 10 ".into())), Some(Some(vec![Cell::Text("first".into())])));
        assert_eq!(ask(&by_int, Cell::Real(11.0)), Some(Some(vec![Cell::Text("seven".into())])));
        assert_eq!(ask(&by_int, Cell::Text("ten".into())), Some(None));
        assert_eq!(ask(&by_int, Cell::Null), Some(None));
        assert_eq!(ask(&by_int, Cell::Blob(vec![1])), Some(None), "a blob is compared as it is against a number");
        assert!(by_int.describe().contains("1 repeated"), "{}", by_int.describe());
        let by_text = t.plan(&[term("c1", "=", "k")], &["k".into()], &["c2".into()]).unwrap();
        assert_eq!(ask(&by_text, Cell::Integer(7)), Some(Some(vec![Cell::Text("seven".into())])));
        assert_eq!(ask(&by_text, Cell::Real(7.0)), None, "a real against text: SQL decides");
        let both = t.plan(&[term("c0", "=", "a"), term("c1", "=", "b")], &["a".into(), "b".into()], &["c2".into()]).unwrap();
        assert_eq!(both.answer(&[Cell::Integer(10), Cell::Text("b".into())]), Some(Some(vec![Cell::Text("second".into())])));
    }

    #[test]
    fn a_range_lookup_finds_the_one_range_that_holds_the_value() {
        let rows = [(1, 5, "a"), (10, 20, "b"), (6, 9, "c"), (30, 29, "empty")];
        let t = table(
            &["INTEGER", "INTEGER", "TEXT"],
            rows.iter().map(|&(l, h, z)| vec![Cell::Integer(l), Cell::Integer(h), Cell::Text(z.into())]).collect(),
        );
        let l = t.plan(&[term("c0", "<=", "x"), term("c1", ">=", "x_2")], &["x".into(), "x_2".into()], &["c2".into()]).unwrap();
        let at = |x: Cell| l.answer(&[x.clone(), x]);
        let zone = |z: &str| Some(Some(vec![Cell::Text(z.into())]));
        assert_eq!(at(Cell::Integer(1)), zone("a"));
        assert_eq!(at(Cell::Integer(5)), zone("a"));
        assert_eq!(at(Cell::Integer(7)), zone("c"));
        assert_eq!(at(Cell::Text("20".into())), zone("b"));
        assert_eq!(at(Cell::Integer(0)), Some(None));
        assert_eq!(at(Cell::Integer(25)), Some(None));
        assert_eq!(at(Cell::Integer(29)), Some(None));
        assert_eq!(at(Cell::Text("x".into())), Some(None));
        assert_eq!(at(Cell::Real(7.5)), None, "a fraction: SQL answers");
        assert_eq!(l.answer(&[Cell::Integer(7), Cell::Integer(8)]), None, "two values: SQL answers");
        let strict = t.plan(&[term("c0", "<", "x"), term("c1", ">", "x")], &["x".into()], &["c2".into()]).unwrap();
        assert_eq!(strict.answer(&[Cell::Integer(5)]), Some(None));
        assert_eq!(strict.answer(&[Cell::Integer(4)]), zone("a"));
    }

    #[test]
    fn ip_key_ranges_answer_ipv6_and_mapped_ipv4_lookups() {
        let k = |s: &str| Cell::Text(s.into());
        let rows = vec![
            vec![k("20010db8000000000000000000000000"), k("20010db8ffffffffffffffffffffffff"), k("XX")],
            vec![k("00000000000000000000ffff0a000000"), k("00000000000000000000ffff0affffff"), k("LAN")],
            vec![Cell::Null, k("00000000000000000000ffff0bffffff"), k("half")],
        ];
        let t = table(&["TEXT", "TEXT", "TEXT"], rows);
        let l = t.plan(&[term("c0", "<=", "x"), term("c1", ">=", "x")], &["x".into()], &["c2".into()]).unwrap();
        assert!(l.describe().starts_with("memory: ip_key ranges c0..c1"), "{}", l.describe());
        let zone = |z: &str| Some(Some(vec![Cell::Text(z.into())]));
        assert_eq!(l.answer(&[k("20010db8000000000000000000000007")]), zone("XX"));
        assert_eq!(l.answer(&[k("00000000000000000000ffff0a090807")]), zone("LAN"));
        assert_eq!(l.answer(&[k("00000000000000000000ffff0b000001")]), Some(None), "a NULL bound matches nothing");
        assert_eq!(l.answer(&[k("ffffffffffffffffffffffffffffffff")]), Some(None));
        assert_eq!(l.answer(&[Cell::Null]), Some(None));
        assert_eq!(l.answer(&[k("2001")]), None, "text that is no key: SQL answers");
        assert_eq!(l.answer(&[k("20010DB8000000000000000000000007")]), None, "upper case sorts otherwise: SQL answers");
        let bad = table(&["TEXT", "TEXT", "TEXT"], vec![vec![k("a"), k("b"), k("c")]]);
        let e = bad.plan(&[term("c0", "<=", "x"), term("c1", ">=", "x")], &["x".into()], &["c2".into()]).unwrap_err();
        assert!(e.contains("not an ip_key"), "{e}");
    }

    #[test]
    fn the_two_step_search_finds_what_a_plain_search_finds() {
        // Ranges of 3 with gaps of 2, over several blocks, and values in
        // the ranges, the gaps, before and after them.
        let sorted: Vec<(i64, i64, u32)> = (0..1000).map(|i| (i * 5, i * 5 + 2, i as u32)).collect();
        let spans = Spans::new(&sorted);
        for x in -3..5010 {
            for strict in [false, true] {
                let n = sorted.partition_point(|s| if strict { s.0 < x } else { s.0 <= x });
                let plain = n.checked_sub(1).map(|i| (sorted[i].1, sorted[i].2));
                assert_eq!(spans.last_admitting(x, strict), plain, "{x} {strict}");
            }
        }
    }

    #[test]
    fn overlapping_ranges_and_other_shapes_stay_in_sql() {
        let t = table(
            &["INTEGER", "INTEGER", "TEXT"],
            vec![
                vec![Cell::Integer(1), Cell::Integer(10), Cell::Text("a".into())],
                vec![Cell::Integer(5), Cell::Integer(6), Cell::Text("b".into())],
            ],
        );
        let e = t.plan(&[term("c0", "<=", "x"), term("c1", ">=", "x")], &["x".into()], &["c2".into()]).unwrap_err();
        assert!(e.contains("overlap"), "{e}");
        assert!(t.plan(&[term("c0", "!=", "x")], &["x".into()], &["c2".into()]).is_err());
        assert!(t.plan(&[term("c0", "=", "x"), term("c1", ">=", "y")], &["x".into(), "y".into()], &["c2".into()]).is_err());
    }
}
