//! A lookup against an in-memory table: its plan (the index that answers it,
//! which parameter goes to which key or bound, the columns it returns), and
//! running it per call.

use super::*;
use omlet_lang::Cell;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

/// A statement answered from a [`Table`] through one of its indexes, or by
/// SQL while it has no plan. The plan is swapped whole when a snapshot
/// table is read again ([`Lookup::swap`]): a lookup sees the old table or
/// the new one, never a mix, and never waits for the swap.
///
/// A snapshot table that a reload finds over `memory.max_table_mb`, with
/// `memory.over_limit = "fail"`, leaves its lookups refused
/// ([`Lookup::refuse`]): they fail with the refusal, naming the table and
/// the limit, rather than answer from the old snapshot or from SQL, until a
/// reload reads the table within the limit again.
pub struct Lookup {
    pub(super) plan: arc_swap::ArcSwapOption<Plan>,
    /// Set while its table may not answer (see above); only read when
    /// there is no plan.
    refused: arc_swap::ArcSwapOption<crate::ProviderError>,
}

impl Lookup {
    pub(super) fn new(plan: Plan) -> Lookup {
        Lookup { plan: arc_swap::ArcSwapOption::from_pointee(plan), refused: arc_swap::ArcSwapOption::empty() }
    }

    /// Why its lookups fail, while they are refused ([`Lookup::refuse`]).
    pub fn refusal(&self) -> Option<crate::ProviderError> {
        self.refused.load().as_deref().cloned()
    }

    /// Drops its plan and makes its lookups fail with `why` (a
    /// [`ProviderError::Limit`](crate::ProviderError::Limit) naming the
    /// table and the limit), until the next [`swap`](Lookup::swap).
    pub fn refuse(&self, why: crate::ProviderError) {
        self.refused.store(Some(Arc::new(why)));
        self.plan.store(None);
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
        match (self.plan.load().as_ref(), self.refusal()) {
            (Some(p), _) => p.describe(),
            (None, Some(why)) => format!("refused: {}", why.message()),
            (None, None) => "sql: the snapshot's last read could not be indexed, or went over memory.max_table_mb".to_string(),
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
        self.refused.store(None);
    }
}

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

pub(super) struct Plan {
    pub(super) table: Arc<Table>,
    pub(super) index: Arc<Index>,
    /// For each key column (hash), or for the lower and upper bound
    /// (ranges): the index of the guest parameter it compares with.
    pub(super) args: Vec<usize>,
    /// Whether the lower and the upper comparison are strict (`<`, `>`).
    pub(super) strict: (bool, bool),
    /// The table's column for each result column.
    pub(super) project: Vec<usize>,
}

impl Plan {
    pub(super) fn describe(&self) -> String {
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
    pub(super) fn comparable(&self, params: &[Cell]) -> bool {
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

    pub(super) fn answer(&self, params: &[Cell]) -> Option<Option<Vec<Cell>>> {
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
