//! Knowdb tables held in memory: which lookups they answer (planned at bind),
//! reading them, and reading them again (snapshots on a reload).

use super::*;

/// A bound lookup of a table held in memory, and what planning it took.
#[derive(Clone)]
pub(super) struct HeldLookup {
    /// A snapshot table (read again on every reload), or a knowdb table
    /// (read again when the knowdb is).
    pub(super) snapshot: bool,
    pub(super) source: usize,
    pub(super) table: String,
    pub(super) lookup: std::sync::Weak<memory::Lookup>,
    pub(super) terms: Vec<guard::Term>,
    pub(super) ordered: bool,
    pub(super) params: Vec<String>,
    pub(super) result: Vec<String>,
}

/// The in-memory plan of a statement over `held`, or why there is none.
/// With `order by`, the order decides among rows that share a key, so
/// memory answers only where at most one row can match.
pub(super) fn plan(
    table: &Arc<memory::Table>,
    terms: &[guard::Term],
    ordered: bool,
    params: &[String],
    result: &[String],
) -> std::result::Result<memory::Lookup, String> {
    let l = table.plan(terms, params, result).map_err(|e| e.to_string())?;
    match l.repeated() {
        n if ordered && n > 0 => Err(format!("{n} keys repeat, and the statement's `order by` decides which row answers")),
        _ => Ok(l),
    }
}

impl Knowledge {
    /// Creates the index a lookup of a knowdb table wants, unless it was
    /// made already: the columns its condition compares with `=`, then the
    /// first it compares with `<`, `<=`, `>` or `>=` (a B-tree serves the
    /// equalities and then one range). Without it every lookup that misses
    /// the caches scans the table: 205 records/s against 200,000 rows with
    /// distinct keys, where an index gives tens of thousands. Only tables
    /// omlet loaded itself get indexes; a failure is logged, and the lookup
    /// runs without one.
    pub(super) async fn index_for(&self, source: usize, checked: &guard::Checked) {
        if source != 0 || !self.config.knowdb_tables.contains(&checked.table) {
            return;
        }
        let mut columns = checked.keys.clone();
        if let Some(r) = checked.ranges.iter().find(|r| !columns.contains(r)) {
            columns.push(r.clone());
        }
        if columns.is_empty() {
            return;
        }
        let first = match self.indexed.lock() {
            Ok(mut made) => made.insert((checked.table.clone(), columns.clone())),
            Err(_) => false,
        };
        if first && let Err(e) = self.provider_at(0).create_index(&checked.table, &columns).await {
            tracing::warn!(target: "omlet::knowledge", "no index on {}({}): {e}", checked.table, columns.join(", "));
        }
    }

    /// The in-memory lookup of a statement of `table` whose condition is
    /// `terms`, and the path it takes (see [`BoundStatement::path`]). The
    /// table is read at the first statement that wants it; a table that
    /// cannot be held (too big, not SQLite, a collation) leaves its
    /// lookups in SQL, unless `memory.over_limit = "fail"`.
    pub(super) async fn memory_for(
        &self,
        source: usize,
        table: &str,
        terms: Option<&[guard::Term]>,
        ordered: bool,
        params: &[String],
        result: &[String],
    ) -> Result<(Option<Arc<memory::Lookup>>, String)> {
        let cfg = &self.config.memory;
        let snapshot = cfg.snapshots.iter().any(|t| t == table);
        if !snapshot && (source != 0 || !self.config.knowdb_tables.iter().any(|t| t == table)) {
            return Ok((None, "sql".into()));
        }
        if !snapshot && !cfg.knowdb {
            return Ok((None, "sql: memory.knowdb is off".into()));
        }
        let Some(terms) = terms else {
            return Ok((None, "sql: the condition is not a conjunction of columns compared with parameters".into()));
        };
        let held = {
            let mut tables = self.tables.lock().await;
            match tables.get(&(source, table.to_string())) {
                Some(t) => t.clone(),
                None => {
                    let t = match self.read_table(source, table).await {
                        Ok(t) => Ok(Arc::new(t)),
                        Err(e @ Error::Limit { .. }) if cfg.over_limit == memory::OverLimit::Fail => return Err(e),
                        Err(e) => {
                            tracing::warn!(target: "omlet::knowledge", "{table} stays in SQL: {e}");
                            Err(e.to_string())
                        }
                    };
                    if let Ok(t) = &t {
                        tracing::info!(target: "omlet::knowledge", "{table}: {} rows in memory, about {} bytes, read in {:?}", t.len(), t.bytes, t.loaded_in);
                    }
                    tables.insert((source, table.to_string()), t.clone());
                    t
                }
            }
        };
        let planned = held.and_then(|t| plan(&t, terms, ordered, params, result));
        Ok(match planned {
            Ok(lookup) => {
                let path = lookup.describe();
                let lookup = Arc::new(lookup);
                if let Ok(mut all) = self.held_lookups.lock() {
                    all.push(HeldLookup {
                        snapshot,
                        source,
                        table: table.to_string(),
                        lookup: Arc::downgrade(&lookup),
                        terms: terms.to_vec(),
                        ordered,
                        params: params.to_vec(),
                        result: result.to_vec(),
                    });
                }
                (Some(lookup), path)
            }
            Err(why) => (None, format!("sql: {why}")),
        })
    }

    /// Reads `table` from the provider into memory, comparing as the
    /// provider's database does.
    pub(super) async fn read_table(&self, source: usize, table: &str) -> Result<memory::Table> {
        Self::read_from(&self.provider_at(source), table, self.config.memory.max_table_mb).await
    }

    /// Reads `table` of `provider` into memory, at most `max_mb` MiB.
    pub(super) async fn read_from(provider: &Arc<dyn Provider>, table: &str, max_mb: u64) -> Result<memory::Table> {
        let started = Instant::now();
        let data = provider.read_table(table, max_mb.saturating_mul(1 << 20)).await?;
        let compare = match provider.kind() {
            "sqlite" => memory::Compare::Sqlite,
            "postgres" => memory::Compare::Exact { text: true },
            _ => memory::Compare::Exact { text: false },
        };
        Ok(memory::Table::with_compare(table, data, started.elapsed(), compare))
    }

    /// Reads every snapshot table that a bound lookup answers from again,
    /// and swaps each such lookup to the new read (or to SQL, when the new
    /// rows cannot be indexed: keys now repeat, ranges now overlap). A table
    /// now over `memory.max_table_mb` follows `memory.over_limit`: with
    /// `sql` its lookups go to the database (a warning), with `fail` they
    /// fail with [`Limit::TableMemory`] naming the table and the limit (an
    /// error, and the error returned); either way until a reload reads it
    /// within the limit, and never from the old snapshot. A table that
    /// cannot be read for another reason keeps its previous snapshot. The
    /// error is returned after the others are done.
    pub async fn refresh_snapshots(&self) -> Result<()> {
        let lookups = self.held(|l| l.snapshot)?;
        let mut tables: Vec<(usize, &str)> = lookups.iter().map(|l| (l.source, l.table.as_str())).collect();
        tables.sort_unstable();
        tables.dedup();
        let mut failed = None;
        for (source, table) in tables {
            let fresh = match self.read_table(source, table).await {
                Ok(t) => Arc::new(t),
                Err(Error::Limit { limit: Limit::TableMemory, message }) => {
                    if let Some(e) = self.over_limit(&lookups, source, table, &message).await {
                        failed = Some(e);
                    }
                    continue;
                }
                Err(e) => {
                    tracing::warn!(target: "omlet::knowledge", "{table}: the snapshot stays as it was: {e}");
                    failed = Some(e);
                    continue;
                }
            };
            Self::replan(&lookups, source, table, Some(&fresh));
            self.tables.lock().await.insert((source, table.to_string()), Ok(fresh));
        }
        failed.map_or(Ok(()), Err)
    }

    /// A snapshot table that a reload found over `memory.max_table_mb`
    /// (`message` says by how much): its lookups go to SQL, or are refused
    /// (`memory.over_limit`); the error to return for `fail`.
    async fn over_limit(&self, lookups: &[HeldLookup], source: usize, table: &str, message: &str) -> Option<Error> {
        let max = self.config.memory.max_table_mb;
        let mut tables = self.tables.lock().await;
        match self.config.memory.over_limit {
            memory::OverLimit::Sql => {
                // Later binds of it go to SQL too, as at a first read.
                tables.insert((source, table.to_string()), Err(message.to_string()));
                tracing::warn!(
                    target: "omlet::knowledge",
                    "{message}: its lookups go to the database until a reload reads it within memory.max_table_mb = {max} (memory.over_limit = \"sql\")"
                );
                Self::replan(lookups, source, table, None);
                None
            }
            memory::OverLimit::Fail => {
                // A later bind reads it again, and fails its load if it is
                // still too big, as at a first read.
                tables.remove(&(source, table.to_string()));
                let what = format!(
                    "{message}; memory.max_table_mb = {max} and memory.over_limit = \"fail\": lookups on {table} fail until a reload reads it within the limit"
                );
                tracing::error!(target: "omlet::knowledge", "{}", Error::limit(Limit::TableMemory, what.clone()));
                let why = ProviderError::limit(Limit::TableMemory, &what);
                for l in lookups.iter().filter(|l| l.source == source && l.table == table) {
                    if let Some(lookup) = l.lookup.upgrade() {
                        lookup.refuse(why.clone());
                    }
                }
                Some(Error::limit(Limit::TableMemory, what))
            }
        }
    }

    /// The live lookups held in memory that `which` picks (and the list
    /// rid of the dead ones).
    pub(super) fn held(&self, which: impl Fn(&HeldLookup) -> bool) -> Result<Vec<HeldLookup>> {
        match self.held_lookups.lock() {
            Ok(mut all) => {
                all.retain(|l| l.lookup.strong_count() > 0);
                Ok(all.iter().filter(|l| which(l)).cloned().collect())
            }
            Err(_) => Err(Error::Internal("the list of in-memory lookups is poisoned".into())),
        }
    }

    /// Swaps each of `lookups` on `table` of `source` to a plan over
    /// `fresh`, or to SQL when there is none or the new rows cannot be
    /// indexed (keys now repeat, ranges now overlap).
    pub(super) fn replan(lookups: &[HeldLookup], source: usize, table: &str, fresh: Option<&Arc<memory::Table>>) {
        for l in lookups.iter().filter(|l| l.source == source && l.table == table) {
            let Some(lookup) = l.lookup.upgrade() else { continue };
            let planned = fresh.map(|t| plan(t, &l.terms, l.ordered, &l.params, &l.result));
            if let Some(Err(why)) = &planned {
                tracing::warn!(target: "omlet::knowledge", "{table}: lookups go to SQL until the next reload: {why}");
            }
            lookup.swap(planned.and_then(|p| p.ok()));
        }
    }
}
