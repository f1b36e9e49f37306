//! Answering a bound lookup: the in-memory table, the shared cache (with
//! single-flight and batched misses), the database, under the timeout and
//! the failure policy.

use super::*;

impl Knowledge {
    #[doc(hidden)]
    /// Answers a lookup: shared cache, then the database. `params` are the
    /// guest's, in the order of the rule's parameters. `Ok(None)` is "no
    /// row"; `Err` carries the database's message or the timeout.
    pub async fn query(&self, stmt: &BoundStatement, params: &[Cell]) -> Result<Option<Vec<Cell>>, LookupError> {
        self.query_at(self.generation(), stmt, params).await
    }

    #[doc(hidden)]
    /// [`Knowledge::query`] within one generation: the shared cache is read
    /// and written under `generation`, the one its call started with, so
    /// that every lookup of one record uses one generation even when
    /// [`Knowledge::reload`] runs in the middle of the call.
    pub async fn query_at(
        &self,
        generation: u64,
        stmt: &BoundStatement,
        params: &[Cell],
    ) -> Result<Option<Vec<Cell>>, LookupError> {
        self.query_layer(generation, stmt, params).await.0
    }

    #[doc(hidden)]
    /// [`Knowledge::query_at`], and which layer answered (for traces).
    pub async fn query_layer(
        &self,
        generation: u64,
        stmt: &BoundStatement,
        params: &[Cell],
    ) -> (Result<Option<Vec<Cell>>, LookupError>, Layer) {
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        if let Some(row) = self.memory_answer(stmt, params) {
            return (row, Layer::Memory);
        }
        let bound = bind(stmt, params);
        let Some(cache) = &self.cache else {
            return (self.miss(stmt, bound).await, Layer::Database);
        };
        let started = Instant::now();
        let key = CacheKey::new(generation, stmt, &bound);
        if let Some(row) = cache.get(&key).await {
            return (Ok(self.hit(started, row)), Layer::SharedCache);
        }
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        let negative = self.config.cache.negative;
        // A row bigger than this is answered, not kept.
        let largest = self.config.cache.max_entry_bytes.min(self.config.cache.max_bytes);
        let key_size = key_bytes(&key);
        // Concurrent misses on one key wait for this one query (single-flight).
        let got = cache
            .try_get_with(key, async {
                match self.miss(stmt, bound).await {
                    Ok(Some(row)) if entry_bytes(key_size, Some(&row)) > largest => Err(Miss::Uncached(Arc::new(row))),
                    Ok(Some(row)) => Ok(Some(Arc::new(row))),
                    Ok(None) if negative => Ok(None),
                    Ok(None) => Err(Miss::NoRow),
                    Err(e) => Err(Miss::Failed(e)),
                }
            })
            .await;
        let answer = match got {
            Ok(row) => Ok(row.map(|r| (*r).clone())),
            Err(e) => match &*e {
                Miss::NoRow => Ok(None),
                Miss::Failed(m) => Err(m.clone()),
                Miss::Uncached(row) => Ok(Some((**row).clone())),
            },
        };
        (answer, Layer::Database)
    }

    #[doc(hidden)]
    /// [`Knowledge::query_at`] answered from the shared cache alone, without
    /// waiting: `None` when the answer is not cached (a miss, or no shared
    /// cache), and the caller must take the path that may wait. A `None`
    /// counts nothing: the lookup is counted when it is made again.
    pub fn query_cached(&self, generation: u64, stmt: &BoundStatement, params: &[Cell]) -> Option<Option<Vec<Cell>>> {
        // A refused table's lookup fails on the path that may wait, and is
        // counted there.
        if let Some(row) = self.memory_answer(stmt, params) {
            let row = row.ok()?;
            self.stats.lookups.fetch_add(1, Ordering::Relaxed);
            return Some(row);
        }
        let cache = self.cache.as_ref()?;
        let started = Instant::now();
        let key = CacheKey::new(generation, stmt, &bind(stmt, params));
        // moka's `get` does its work when first polled; a get that would
        // wait (it never has here) is treated as a miss.
        let get = std::pin::pin!(cache.get(&key));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let std::task::Poll::Ready(Some(row)) = get.poll(&mut cx) else { return None };
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        Some(self.hit(started, row))
    }

    /// The answer of the statement's in-memory table, when it has one that
    /// is sure of it (counted), or the refusal of a snapshot table a reload
    /// found over its limit with `memory.over_limit = "fail"` (see
    /// [`memory::Lookup::refuse`]): never an old snapshot, nor SQL.
    pub(super) fn memory_answer(&self, stmt: &BoundStatement, params: &[Cell]) -> Option<Result<Option<Vec<Cell>>, LookupError>> {
        let memory = stmt.memory.as_ref()?;
        let Some(row) = memory.answer(params) else {
            return memory.refusal().map(|why| Err(self.refused(stmt, why)));
        };
        self.stats.memory.fetch_add(1, Ordering::Relaxed);
        Some(Ok(row))
    }

    /// A lookup of a refused table: counted and logged as a failed lookup.
    fn refused(&self, stmt: &BoundStatement, why: ProviderError) -> LookupError {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut st) = self.stats.statements.lock()
            && let Some(s) = st.get_mut(stmt.stats)
        {
            s.errors += 1;
        }
        let e = LookupError::from(why);
        tracing::warn!(statement = %stmt.sql, error = %e, "lookup failed");
        e
    }

    /// A shared-cache hit that began at `started`: counted, and its row.
    pub(super) fn hit(&self, started: Instant, row: Row) -> Option<Vec<Cell>> {
        self.stats.hits.fetch_add(1, Ordering::Relaxed);
        self.stats.hit_latency.record(started.elapsed());
        row.map(|r| (*r).clone())
    }

    /// One database round trip, with the timeout and the counters.
    pub(super) async fn fetch(&self, stmt: &BoundStatement, bound: Vec<Cell>) -> Result<Option<Vec<Cell>>, LookupError> {
        self.timed(stmt, self.provider_of(stmt).query_first(stmt, bound)).await
    }

    pub(super) async fn timed<T>(
        &self,
        stmt: &BoundStatement,
        query: BoxFuture<'_, Result<T, ProviderError>>,
    ) -> Result<T, LookupError> {
        self.stats.queries.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let r = match tokio::time::timeout(self.config.query_timeout(), query).await {
            Ok(r) => r.map_err(LookupError::from),
            Err(_) => Err(LookupError {
                kind: LookupErrorKind::Timeout,
                message: format!("query timed out after {:?}", self.config.query_timeout()),
            }),
        };
        if let Ok(mut st) = self.stats.statements.lock()
            && let Some(s) = st.get_mut(stmt.stats)
        {
            s.queries += 1;
            s.latency.record(started.elapsed());
            if r.is_err() {
                s.errors += 1;
            }
        }
        if let Err(e) = &r {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(statement = %stmt.sql, error = %e, "lookup failed");
        }
        r
    }
}

/// A lookup's parameters in the statement's binding order (missing ones null).
pub(super) fn bind(stmt: &BoundStatement, params: &[Cell]) -> Vec<Cell> {
    stmt.order.iter().map(|&i| params.get(i).cloned().unwrap_or(Cell::Null)).collect()
}

impl CacheKey {
    fn new(generation: u64, stmt: &BoundStatement, bound: &[Cell]) -> CacheKey {
        CacheKey { generation, source: stmt.source, sql: stmt.sql.clone(), params: encode(bound) }
    }
}

/// The estimated bytes of a cache key, without its statement's text (which
/// the statement's keys share).
pub(super) fn key_bytes(key: &CacheKey) -> u64 {
    (std::mem::size_of::<CacheKey>() + key.params.capacity()) as u64
}

/// The estimated bytes of a shared-cache entry whose key takes `key` bytes:
/// the key, the row's cells with their text and blobs, and a fixed cost for
/// moka's own record of the entry.
pub(super) fn entry_bytes(key: u64, row: Option<&Vec<Cell>>) -> u64 {
    const PER_ENTRY: u64 = 128;
    let row = row.map_or(0, |cells| {
        // The Arc's two counts, the Vec, the cells, their text.
        16 + std::mem::size_of::<Vec<Cell>>() + cells.capacity() * std::mem::size_of::<Cell>() + memory::heap_bytes(cells)
    });
    PER_ENTRY + key + row as u64
}

/// A compact, exact key for a parameter list.
pub(super) fn encode(params: &[Cell]) -> Vec<u8> {
    let mut k = Vec::with_capacity(params.len() * 9);
    omlet_lang::eval::push_cells_key(params, &mut k);
    k
}
