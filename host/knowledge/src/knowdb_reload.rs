//! Loading a knowdb again while lookups go on: into a fresh database, checked,
//! then swapped in whole.

use super::*;

impl Knowledge {
    /// Loads the knowdb again, into a fresh in-memory SQLite database, and
    /// swaps it in whole: its tables, their indexes, and the in-memory
    /// copies of them, then the caches drop their answers. A lookup sees the
    /// old rows or the new ones, never half a table. What the `[reload]`
    /// watcher does when `knowdb = true` and a file of the knowdb changed.
    ///
    /// Fails, and the knowledge stays as it was, when the knowdb does not
    /// load (an error naming the file, as at open), when it now declares
    /// other tables, when a lookup bound on it no longer prepares (a
    /// column gone): the rules were bound on the old tables, or when a table
    /// held in memory is now over `memory.max_table_mb` and
    /// `memory.over_limit` is `fail`. Changes to its
    /// `[cache]`, `[intranet_nets]` or databases need a restart. Only a
    /// knowdb held in in-memory SQLite (`url = "sqlite::memory:"`, the
    /// default) can be loaded again.
    pub async fn reload_knowdb(&self) -> Result<()> {
        let _one = self.reloading.lock().await;
        let r = self.load_knowdb_again().await;
        let counter = if r.is_ok() { &self.stats.knowdb_loads } else { &self.stats.knowdb_load_failures };
        counter.fetch_add(1, Ordering::Relaxed);
        r
    }

    /// The knowdb that [`reload_knowdb`](Self::reload_knowdb) loads again,
    /// or why there is none to load: no knowdb, or one not held in
    /// in-memory SQLite.
    pub(crate) fn reloadable_knowdb(&self) -> Result<std::path::PathBuf> {
        let Some(path) = self.config.knowdb.clone() else {
            return Err(Error::Knowledge("no knowdb to load again (the knowledge config names none)".into()));
        };
        if self.config.url != "sqlite::memory:" {
            return Err(Error::Knowledge(format!(
                "{}: only a knowdb held in in-memory SQLite can be loaded again (url = \"sqlite::memory:\"); restart to load it",
                path.display()
            )));
        }
        Ok(path)
    }

    pub(super) async fn load_knowdb_again(&self) -> Result<()> {
        let path = self.reloadable_knowdb()?;
        let stays = |what: String| Error::Knowledge(format!("{}: {what}; the knowledge stays as it was", path.display()));
        let fresh: Arc<dyn Provider> = Arc::new(sqlite::SqliteProvider::memory().await?);
        let loaded = knowdb::load_any(&path, fresh.as_ref(), &self.config.knowdb_roots).await?;
        if loaded.tables != self.config.knowdb_tables {
            return Err(stays(format!(
                "it now declares the tables {}, where the rules were bound on {}: restart to load another set",
                loaded.tables.join(", "),
                self.config.knowdb_tables.join(", ")
            )));
        }
        let made: Vec<(String, Vec<String>)> = self.indexed.lock().map(|m| m.iter().cloned().collect()).unwrap_or_default();
        for (table, columns) in made {
            if let Err(e) = fresh.create_index(&table, &columns).await {
                tracing::warn!(target: "omlet::knowledge", "no index on {table}({}): {e}", columns.join(", "));
            }
        }
        // Every lookup bound on the knowdb's database must still prepare.
        let bound: Vec<String> = match self.stats.statements.lock() {
            Ok(st) => st.iter().filter(|s| s.database.is_none()).map(|s| s.sql.clone()).collect(),
            Err(_) => return Err(Error::Internal("stats poisoned".into())),
        };
        for sql in bound {
            if let Err(e) = fresh.prepare(&sql).await {
                return Err(stays(format!("the lookup `{sql}` no longer runs on it: {e}")));
            }
        }
        let lookups = self.held(|l| !l.snapshot && l.source == 0)?;
        let mut tables: Vec<&str> = lookups.iter().map(|l| l.table.as_str()).collect();
        tables.sort_unstable();
        tables.dedup();
        let mut held = Vec::with_capacity(tables.len());
        for table in tables {
            let t = match Self::read_from(&fresh, table, self.config.memory.max_table_mb).await {
                Ok(t) => Ok(Arc::new(t)),
                // As at the start: with `fail`, a table over the limit is
                // not quietly moved to SQL, and this load is refused whole.
                Err(e @ Error::Limit { .. }) if self.config.memory.over_limit == memory::OverLimit::Fail => {
                    return Err(stays(format!("{e} (memory.over_limit = \"fail\")")));
                }
                Err(e) => {
                    tracing::warn!(target: "omlet::knowledge", "{table} stays in SQL: {e}");
                    Err(e.to_string())
                }
            };
            held.push((table, t));
        }
        // The swap: the database, then the in-memory copies, then the caches.
        let mut sources = Vec::clone(&self.sources.load());
        sources[0].provider = fresh;
        self.sources.store(Arc::new(sources));
        let mut cached = self.tables.lock().await;
        for (table, t) in held {
            Self::replan(&lookups, 0, table, t.as_ref().ok());
            cached.insert((0, table.to_string()), t);
        }
        drop(cached);
        self.reload();
        tracing::info!(target: "omlet::knowledge", "{}: loaded again", path.display());
        Ok(())
    }

    /// [`refresh_snapshots`](Self::refresh_snapshots), then
    /// [`reload`](Self::reload): what the `[reload]` watcher does on a
    /// change, so that the caches drop their answers only once the
    /// snapshots hold the new rows.
    pub async fn reload_all(&self) -> Result<()> {
        let r = self.refresh_snapshots().await;
        self.reload();
        r
    }
}
