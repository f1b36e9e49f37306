//! Counters and latency histograms of a knowledge base: what `--stats` and
//! `Knowledge::stats` show.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Latency histogram: counts per power-of-two bucket of microseconds.
#[derive(Debug, Default, Clone)]
pub struct Histogram {
    /// `buckets[i]` counts latencies in `[2^(i-1), 2^i)` µs (`buckets[0]`: under 1 µs).
    pub buckets: [u64; 24],
    /// Latencies recorded.
    pub count: u64,
    /// Their sum, in µs (for the mean).
    pub total_us: f64,
}

impl Histogram {
    /// Counts one latency; 2^22 µs (about 4 s) and more go to the last bucket.
    pub fn record(&mut self, d: Duration) {
        let us = d.as_secs_f64() * 1e6;
        let i = if us < 1.0 { 0 } else { (us.log2() as usize + 1).min(23) };
        self.buckets[i] += 1;
        self.count += 1;
        self.total_us += us;
    }

    /// Upper bound (µs) of the bucket holding quantile `q` (0..1);
    /// `f64::INFINITY` when nothing was recorded.
    pub fn quantile_us(&self, q: f64) -> f64 {
        let target = (self.count as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= target.max(1) {
                return (1u64 << i) as f64;
            }
        }
        f64::INFINITY
    }
}

/// A latency histogram that records without locks (for cache hits).
#[derive(Debug, Default)]
pub struct AtomicHistogram {
    buckets: [AtomicU64; 24],
    count: AtomicU64,
    total_ns: AtomicU64,
}

impl AtomicHistogram {
    /// Counts one latency, as [`Histogram::record`] does.
    pub fn record(&self, d: Duration) {
        let us = d.as_secs_f64() * 1e6;
        let i = if us < 1.0 { 0 } else { (us.log2() as usize + 1).min(23) };
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// A copy of the counts so far. Not atomic as a whole: a latency
    /// recorded meanwhile may be in some fields and not yet in others.
    pub fn snapshot(&self) -> Histogram {
        let mut h = Histogram::default();
        for (i, b) in self.buckets.iter().enumerate() {
            h.buckets[i] = b.load(Ordering::Relaxed);
        }
        h.count = self.count.load(Ordering::Relaxed);
        h.total_us = self.total_ns.load(Ordering::Relaxed) as f64 / 1e3;
        h
    }
}

/// Per-statement figures.
#[derive(Debug, Default, Clone)]
pub struct StatementStats {
    /// The statement in the provider's dialect. Rules that bind the same
    /// text share one entry.
    pub sql: String,
    /// The database it runs on, when a knowdb names it (`geo`; see
    /// [`route`](super::route)); `None` for the knowledge's own.
    pub database: Option<String>,
    /// Database round trips sent (a batched query counts once).
    pub queries: u64,
    /// Round trips that failed or timed out.
    pub errors: u64,
    /// Database round trips.
    pub latency: Histogram,
}

/// Counters shared by every rule bound to the same knowledge.
#[derive(Debug, Default)]
pub struct Stats {
    /// Lookups that reached the host (the guest cache missed).
    pub lookups: AtomicU64,
    /// Lookups answered by an in-memory table.
    pub memory: AtomicU64,
    /// Shared-cache hits.
    pub hits: AtomicU64,
    /// Shared-cache misses; concurrent misses on one key count each, though
    /// they share one query. Not counted in bypass mode.
    pub misses: AtomicU64,
    /// Queries sent to the database.
    pub queries: AtomicU64,
    /// Lookups answered by a batched query.
    pub batched: AtomicU64,
    /// How long shared-cache hits take (the cache layer's latency).
    pub hit_latency: AtomicHistogram,
    /// Queries that failed or timed out (a failed batch counts once).
    pub errors: AtomicU64,
    /// Times the knowdb was loaded again ([`Knowledge::reload_knowdb`](super::Knowledge::reload_knowdb)).
    pub knowdb_loads: AtomicU64,
    /// Times loading it again failed, leaving the previous knowledge in use.
    pub knowdb_load_failures: AtomicU64,
    /// Per-statement figures, one per bound statement of the rules loaded on it.
    pub statements: Mutex<Vec<StatementStats>>,
}

impl Stats {
    fn get(&self, a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }

    /// The counters as they stand, typed: what `omlet run --stats` prints.
    pub fn snapshot(&self) -> StatsSnapshot {
        let stmts = self.statements.lock().map(|s| s.clone()).unwrap_or_default();
        StatsSnapshot {
            lookups: self.get(&self.lookups),
            memory_lookups: self.get(&self.memory),
            cache_hits: self.get(&self.hits),
            cache_misses: self.get(&self.misses),
            queries: self.get(&self.queries),
            batched_lookups: self.get(&self.batched),
            shared_cache_hit_us: Latency::of(&self.hit_latency.snapshot()),
            errors: self.get(&self.errors),
            knowdb_loads: self.get(&self.knowdb_loads),
            knowdb_load_failures: self.get(&self.knowdb_load_failures),
            statements: stmts
                .iter()
                .map(|s| {
                    let l = Latency::of(&s.latency);
                    StatementSnapshot {
                        sql: s.sql.clone(),
                        database: s.database.clone(),
                        queries: s.queries,
                        errors: s.errors,
                        p50_us: l.p50,
                        p95_us: l.p95,
                        mean_us: l.mean,
                    }
                })
                .collect(),
        }
    }

    /// [`Stats::snapshot`] as JSON (`omlet run --stats=json`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.snapshot()).unwrap_or_default()
    }
}

/// The counters of a knowledge base at one moment ([`Stats::snapshot`]).
/// Its JSON form is `omlet run --stats=json`'s `knowledge` member.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Lookups that reached the host (the guests' own cache hits are not counted).
    pub lookups: u64,
    /// Lookups answered by a table held in memory.
    pub memory_lookups: u64,
    /// Lookups the shared cache answered.
    pub cache_hits: u64,
    /// Lookups the shared cache did not answer.
    pub cache_misses: u64,
    /// Database round trips.
    pub queries: u64,
    /// Lookups answered by a batched query.
    pub batched_lookups: u64,
    /// How long the shared cache took to answer.
    pub shared_cache_hit_us: Latency,
    /// Lookups that failed.
    pub errors: u64,
    /// Times the knowdb was loaded again.
    pub knowdb_loads: u64,
    /// Times loading the knowdb again failed (the previous one stayed).
    pub knowdb_load_failures: u64,
    /// Per bound statement.
    pub statements: Vec<StatementSnapshot>,
}

impl StatsSnapshot {
    /// The shared cache's hit rate, when it was asked at all.
    pub fn hit_rate(&self) -> Option<f64> {
        let asked = self.cache_hits + self.cache_misses;
        (asked > 0).then(|| self.cache_hits as f64 / asked as f64)
    }
}

/// A latency histogram summed up, in microseconds (a quantile is its
/// bucket's upper bound).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Latency {
    /// The median.
    pub p50: f64,
    /// The 95th percentile.
    pub p95: f64,
    /// The mean (0 with no samples).
    pub mean: f64,
}

impl Latency {
    fn of(h: &Histogram) -> Latency {
        let mean = if h.count > 0 { h.total_us / h.count as f64 } else { 0.0 };
        Latency { p50: h.quantile_us(0.5), p95: h.quantile_us(0.95), mean }
    }
}

/// One bound statement's figures in a [`StatsSnapshot`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct StatementSnapshot {
    /// The statement in the provider's dialect.
    pub sql: String,
    /// The database it runs on, when a knowdb names several.
    pub database: Option<String>,
    /// Database round trips sent.
    pub queries: u64,
    /// Round trips that failed or timed out.
    pub errors: u64,
    /// Median round trip.
    pub p50_us: f64,
    /// 95th percentile round trip.
    pub p95_us: f64,
    /// Mean round trip.
    pub mean_us: f64,
}
