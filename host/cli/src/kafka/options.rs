//! What a worker is asked to do ([`KafkaOptions`]) and what it counts
//! ([`KafkaStats`], with their Prometheus text).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use omlet::Knowledge;
use omlet::stream::RouteBy;

use super::url::KafkaUrl;

/// Receives the error lines of a worker that has no errors topic.
pub type ErrorLineSink = Arc<dyn Fn(&str) + Send + Sync>;

/// What a Kafka worker does.
#[derive(Clone)]
pub struct KafkaOptions {
    /// The input topic and its consumer group.
    pub from: KafkaUrl,
    /// The output topic.
    pub to: KafkaUrl,
    /// The topic for error lines (one JSON object per failed record). When
    /// `None`, each error line goes to [`on_error_line`](Self::on_error_line)
    /// and its offset is committed like any other.
    pub errors: Option<KafkaUrl>,
    /// How records find their model when they have no routing header.
    pub route: RouteBy,
    /// A message header whose value is the record's rule path (default
    /// none). A record without it is routed by [`route`](Self::route).
    pub route_header: Option<String>,
    /// Write a record no model takes to the output unchanged, instead of an
    /// error line.
    pub pass_unrouted: bool,
    /// Records per guest call (default 256).
    pub batch: usize,
    /// Guest calls in flight (default 2).
    pub concurrency: usize,
    /// Records read but not yet committed, at most (default 10 000). Reading
    /// waits while this many are in flight.
    pub max_in_flight: usize,
    /// Most bytes of one message value (default 16 MiB); a larger one is an
    /// error line with [`Limit::LineBytes`].
    pub max_record_bytes: usize,
    /// How often done offsets are committed (default 100 ms; sooner when half
    /// of `max_in_flight` waits for a commit). Longer means fewer commits and
    /// more duplicates after a crash.
    pub commit_interval: Duration,
    /// Longest wait for the last records' acknowledgements at shutdown
    /// (default 60 s).
    pub drain_timeout: Duration,
    /// Where error lines go when there is no errors topic (default: dropped
    /// after counting).
    pub on_error_line: Option<ErrorLineSink>,
    /// Fail the run when the consumer group still refuses the last offset
    /// commit after 10 s of rebalancing (default false: the worker says so
    /// and ends well, and the partitions' next owner repeats the records done
    /// since the commit before).
    pub strict_last_commit: bool,
}

impl KafkaOptions {
    /// Options with every default, from `from` to `to`.
    pub fn new(from: KafkaUrl, to: KafkaUrl) -> KafkaOptions {
        KafkaOptions {
            from,
            to,
            errors: None,
            route: RouteBy::Only,
            route_header: None,
            pass_unrouted: false,
            batch: 256,
            concurrency: 2,
            max_in_flight: 10_000,
            max_record_bytes: 16 << 20,
            commit_interval: Duration::from_millis(100),
            drain_timeout: Duration::from_secs(60),
            on_error_line: None,
            strict_last_commit: false,
        }
    }
}

/// A worker's counters, for its metrics endpoint and its summary.
#[derive(Debug, Default)]
pub struct KafkaStats {
    /// Records read from the input topic.
    pub records_in: AtomicU64,
    /// Records written to the output topic.
    pub written: AtomicU64,
    /// Records that failed (an error line each).
    pub errors: AtomicU64,
    /// Records no model took (an error line each, or passed unchanged).
    pub unrouted: AtomicU64,
    /// Records processed again after a restart or rebalance whose output was
    /// already in the output topic (found by the `omlet-source` header of
    /// the output's last messages when a partition is assigned).
    pub duplicates: AtomicU64,
    /// Offset commits made.
    pub commits: AtomicU64,
    /// Rebalances this worker saw (assignments and revocations).
    pub rebalances: AtomicU64,
    /// Input partitions assigned to this worker now.
    pub partitions: AtomicU64,
    /// Times the worker paused its partitions, having waited a second for room.
    pub pauses: AtomicU64,
    /// Records read and not yet committed.
    pub in_flight: AtomicU64,
    /// Rule sets loaded again and swapped in (`omlet run --watch`).
    pub rule_reloads: AtomicU64,
    /// Rule sets that failed to load again; the old one kept running.
    pub rule_reload_failures: AtomicU64,
    /// Consumer lag per assigned input partition, from librdkafka's
    /// statistics (every second).
    pub(super) lag: Mutex<Vec<(i32, i64)>>,
}

impl KafkaStats {
    /// The consumer lag of each assigned partition: (partition, messages).
    pub fn lag(&self) -> Vec<(i32, i64)> {
        self.lag.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The counters in Prometheus' text format, with the knowledge base's
    /// lookup counters when given.
    pub fn prometheus(&self, topic: &str, knowledge: Option<&Knowledge>) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        metric("omlet_records_in_total", "counter", "Records read from the input topic.", get(&self.records_in));
        metric("omlet_records_written_total", "counter", "Records written to the output topic.", get(&self.written));
        metric("omlet_records_failed_total", "counter", "Records that failed (one error line each).", get(&self.errors));
        metric("omlet_records_unrouted_total", "counter", "Records no model took.", get(&self.unrouted));
        metric(
            "omlet_duplicates_total",
            "counter",
            "Records processed again whose output was already in the output topic.",
            get(&self.duplicates),
        );
        metric("omlet_commits_total", "counter", "Offset commits.", get(&self.commits));
        metric("omlet_rebalances_total", "counter", "Partition assignments and revocations.", get(&self.rebalances));
        metric("omlet_assigned_partitions", "gauge", "Input partitions assigned to this worker.", get(&self.partitions));
        metric("omlet_pauses_total", "counter", "Times the partitions were paused, waiting for room.", get(&self.pauses));
        metric("omlet_in_flight", "gauge", "Records read and not yet committed.", get(&self.in_flight));
        if let Some(k) = knowledge {
            let s = k.stats();
            metric("omlet_lookups_total", "counter", "Lookups that reached the host.", get(&s.lookups));
            metric("omlet_lookup_cache_hits_total", "counter", "Lookups answered by the shared cache.", get(&s.hits));
            metric("omlet_lookup_queries_total", "counter", "Database queries made for lookups.", get(&s.queries));
            metric("omlet_lookup_errors_total", "counter", "Lookups that failed.", get(&s.errors));
            metric("omlet_knowledge_generation", "gauge", "The knowledge generation (bumped by reloads).", k.generation());
        }
        let _ = writeln!(
            out,
            "# HELP omlet_rule_reloads_total Rule sets loaded again on a change (--watch), by result.\n\
             # TYPE omlet_rule_reloads_total counter\n\
             omlet_rule_reloads_total{{result=\"ok\"}} {}\nomlet_rule_reloads_total{{result=\"error\"}} {}",
            get(&self.rule_reloads),
            get(&self.rule_reload_failures)
        );
        let _ = writeln!(out, "# HELP omlet_consumer_lag Messages behind the partition's end.\n# TYPE omlet_consumer_lag gauge");
        for (p, lag) in self.lag() {
            let _ = writeln!(out, "omlet_consumer_lag{{topic=\"{topic}\",partition=\"{p}\"}} {lag}");
        }
        out
    }
}
