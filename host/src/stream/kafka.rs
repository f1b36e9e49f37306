//! Records from a Kafka topic, through a rule, to Kafka topics: one worker
//! of a consumer group (the `kafka` feature).
//!
//! Many workers, on one machine or many, share the input topic's partitions
//! through Kafka's consumer group. Each message value is one JSON record.
//!
//! **Delivery is at least once.**
//! - An input offset is committed only after the output of its record, or
//!   its error line, has been acknowledged by the brokers (`acks=all`, with
//!   the idempotent producer), and only when every earlier offset of its
//!   partition is acknowledged too.
//! - A worker that dies loses nothing: its partitions move to the others,
//!   which start again at the last committed offset. What it had produced
//!   past that offset comes out twice.
//! - A record holds one of [`KafkaOptions::max_in_flight`] places from the
//!   moment it is read until the broker has its offset's commit. That bounds
//!   both the memory of a worker and the duplicates a crash can make.
//!
//! **Order** is kept within a partition: the outputs of input partition `p`
//! go, in input order, to partition `p mod n` of the output topic (`n` its
//! partition count), each with the input's key and an `omlet-source` header
//! (`topic/partition/offset`).
//!
//! **Rebalance and shutdown.** When partitions are revoked, what was
//! acknowledged of them is committed at once; records of theirs still in
//! flight are abandoned (their outputs may still appear; the new owner
//! processes them again). When `shutdown` completes, reading stops, every
//! record read is finished and acknowledged, the offsets are committed, and
//! [`run`] returns `Ok`.
//!
//! ```no_run
//! # omlet::block_on(async {
//! use std::sync::Arc;
//! use omlet::stream::kafka::{self, KafkaOptions, KafkaStats, KafkaUrl};
//! use omlet::{Engine, LoadOptions};
//!
//! let rule = Engine::new()?.load_path("set.wasm", &LoadOptions::new()).await?;
//! let mut options = KafkaOptions::new(
//!     KafkaUrl::parse("kafka://127.0.0.1:9092/access?group=omlet")?,
//!     KafkaUrl::parse("kafka://127.0.0.1:9092/enriched")?,
//! );
//! options.errors = Some(KafkaUrl::parse("kafka://127.0.0.1:9092/omlet-errors")?);
//! let stats = Arc::new(KafkaStats::default());
//! // Runs until `stop_tx` sends (or is dropped), then finishes what it
//! // read, commits and returns.
//! let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
//! let stop = async { let _ = stop_rx.await; };
//! # std::mem::forget(stop_tx);
//! kafka::run(rule, options, stats.clone(), stop).await?;
//! println!("{}", stats.prometheus("access", None));
//! # Ok::<(), omlet::Error>(())
//! # }).unwrap();
//! ```

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::statistics::Statistics;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{Notify, Semaphore};

use super::{Done, Input, Outcome, RouteBy, evaluate_chunk};
use crate::error::Limit;
use crate::knowledge::Knowledge;
use crate::record;
use crate::runtime::Rule;
use crate::{Error, Result};

/// The header that names an output's input: `topic/partition/offset`.
pub const SOURCE_HEADER: &str = "omlet-source";

/// The header that names the worker (process id and start time) that wrote an output.
pub const WORKER_HEADER: &str = "omlet-worker";

/// A topic on a Kafka cluster: `kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?group=G&key=value…]`.
///
/// `group` is the consumer group (an input needs one). Every other query
/// parameter is a librdkafka client property, passed as it is
/// (`security.protocol=ssl`, `session.timeout.ms=10000`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaUrl {
    /// The bootstrap brokers, comma-separated.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// The consumer group (`?group=`).
    pub group: Option<String>,
    /// Further librdkafka properties.
    pub properties: Vec<(String, String)>,
}

impl KafkaUrl {
    /// Whether `text` is meant as a Kafka URL.
    pub fn is_kafka(text: &str) -> bool {
        text.starts_with("kafka://")
    }

    /// Parses `kafka://BROKERS/TOPIC?group=G&…`; fails with
    /// [`Error::Config`] saying what is missing.
    pub fn parse(text: &str) -> Result<KafkaUrl> {
        let bad = |why: &str| {
            Error::Config(format!(
                "`{}`: {why} (expected kafka://HOST:PORT/TOPIC?group=G)",
                crate::knowledge::config::redact(text)
            ))
        };
        let rest = text.strip_prefix("kafka://").ok_or_else(|| bad("not a kafka:// URL"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (brokers, topic) = path.split_once('/').ok_or_else(|| bad("no topic"))?;
        if brokers.is_empty() {
            return Err(bad("no broker"));
        }
        if topic.is_empty() || topic.contains('/') {
            return Err(bad("the topic must be one path segment"));
        }
        let mut url = KafkaUrl { brokers: brokers.to_string(), topic: topic.to_string(), group: None, properties: Vec::new() };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| bad(&format!("`{}` has no value", pair)))?;
            match k {
                "group" | "group.id" => url.group = Some(v.to_string()),
                "bootstrap.servers" => return Err(bad("give the brokers before the topic, not as bootstrap.servers")),
                _ => url.properties.push((k.to_string(), v.to_string())),
            }
        }
        Ok(url)
    }

    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }
}

impl std::fmt::Display for KafkaUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kafka://{}/{}", self.brokers, self.topic)?;
        if let Some(g) = &self.group {
            write!(f, "?group={g}")?;
        }
        Ok(())
    }
}

/// Receives the error lines of a worker that has no errors topic.
pub type ErrorLineSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Records of one evaluation in flight: (partition, offset, epoch) each, and
/// the task evaluating them.
type Chunk = (Vec<(i32, i64, u64)>, tokio::task::JoinHandle<Vec<(Meta, Done<String>)>>);

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
    lag: Mutex<Vec<(i32, i64)>>,
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

/// Offsets read, acknowledged and committed, per input partition.
#[derive(Default)]
struct Tracker {
    parts: HashMap<i32, Part>,
    epochs: u64,
}

/// One assigned partition. A new assignment is a new epoch: what is still
/// in flight from an older one no longer counts towards commits.
struct Part {
    epoch: u64,
    /// Offsets read and not yet known done, in order, with "acknowledged".
    pending: VecDeque<(i64, bool)>,
    /// The next offset to commit: every offset below it is done.
    done_to: Option<i64>,
    committed: Option<i64>,
    /// Records done since the last commit: their places are given back when
    /// it is made.
    uncommitted: usize,
}

impl Tracker {
    fn assign(&mut self, partition: i32) {
        self.epochs += 1;
        let epoch = self.epochs;
        self.parts.entry(partition).or_insert(Part {
            epoch,
            pending: VecDeque::new(),
            done_to: None,
            committed: None,
            uncommitted: 0,
        });
    }

    /// Forgets a partition: the offset to commit for it (every done record,
    /// committed before or not: an earlier commit may have failed), and the
    /// places to give back now.
    fn revoke(&mut self, partition: i32) -> (Option<i64>, usize) {
        let Some(part) = self.parts.remove(&partition) else { return (None, 0) };
        (part.done_to, part.uncommitted + part.pending.iter().filter(|p| p.1).count())
    }

    /// Notes a record read; returns its epoch, the places to give back now,
    /// and whether it is the first record of its epoch (where reading
    /// resumed: the committed offset).
    /// An offset that does not follow the last one read (the consumer's
    /// position was reset) starts a new epoch: the older records then count
    /// for nothing, as after a revoke.
    fn register(&mut self, partition: i32, offset: i64) -> (u64, usize, bool) {
        let mut release = 0;
        let behind = self
            .parts
            .get(&partition)
            .is_some_and(|p| p.pending.back().map(|b| offset <= b.0).unwrap_or(false) || p.done_to.is_some_and(|d| offset < d));
        if behind {
            release = self.revoke(partition).1;
        }
        if !self.parts.contains_key(&partition) {
            self.assign(partition);
        }
        let Some(part) = self.parts.get_mut(&partition) else { return (0, release, false) };
        let first = part.pending.is_empty() && part.done_to.is_none();
        part.pending.push_back((offset, false));
        (part.epoch, release, first)
    }

    /// Whether records of `epoch` still count for `partition`.
    fn current(&self, partition: i32, epoch: u64) -> bool {
        self.parts.get(&partition).is_some_and(|p| p.epoch == epoch)
    }

    /// Every done offset, committed before or not (for the last, synchronous commit).
    fn all_done(&self) -> Vec<(i32, i64)> {
        self.parts.iter().filter_map(|(&p, part)| part.done_to.map(|d| (p, d))).collect()
    }

    /// Marks one offset acknowledged; returns the places to give back now
    /// (1 for a record of a partition no longer held, else 0).
    fn ack(&mut self, partition: i32, epoch: u64, offset: i64) -> usize {
        let Some(part) = self.parts.get_mut(&partition).filter(|p| p.epoch == epoch) else { return 1 };
        if let Ok(i) = part.pending.binary_search_by_key(&offset, |p| p.0) {
            part.pending[i].1 = true;
        }
        while let Some(&(o, true)) = part.pending.front() {
            part.pending.pop_front();
            part.done_to = Some(o + 1);
            part.uncommitted += 1;
        }
        0
    }

    /// What to commit now: each partition's offset, the places its commit
    /// gives back once the broker has it, and the partition's epoch.
    fn take_commits(&mut self) -> Vec<Commit> {
        let mut list = Vec::new();
        for (&p, part) in self.parts.iter_mut() {
            if let Some(d) = part.done_to
                && Some(d) > part.committed
            {
                part.committed = Some(d);
                list.push(Commit { partition: p, offset: d, places: std::mem::take(&mut part.uncommitted), epoch: part.epoch });
            }
        }
        list
    }

    /// A commit that failed: it is made again with the next one, and its
    /// places wait for that. Returns the places to give back now: all of them
    /// when the partition is no longer held in the commit's epoch.
    fn give_back(&mut self, c: &Commit) -> usize {
        match self.parts.get_mut(&c.partition).filter(|part| part.epoch == c.epoch) {
            Some(part) => {
                if part.committed == Some(c.offset) {
                    part.committed = None;
                }
                part.uncommitted += c.places;
                0
            }
            None => c.places,
        }
    }

    fn pending(&self) -> usize {
        self.parts.values().map(|p| p.pending.len()).sum()
    }
}

/// The longest a revoke waits for the commit on its way.
const REVOKE_WAIT: Duration = Duration::from_secs(2);

/// One partition's share of a commit.
struct Commit {
    partition: i32,
    offset: i64,
    places: usize,
    epoch: u64,
}

/// What the worker's parts share: the consumer's callbacks, the delivery
/// tasks and the main loop.
struct Shared {
    topic: String,
    tracker: Mutex<Tracker>,
    permits: Arc<Semaphore>,
    stats: Arc<KafkaStats>,
    /// The first delivery that failed for good: the run stops on it.
    failure: Mutex<Option<Error>>,
    /// Woken when acknowledgements arrive.
    acked: Notify,
    /// Records read without a place, while the partitions were paused
    /// (fetched before the pause, or of a partition assigned since).
    overdraft: std::sync::atomic::AtomicUsize,
    /// This worker's name on its outputs (`omlet-worker`), so that its
    /// duplicate count leaves out what it wrote itself.
    worker: String,
    /// A commit is on its way to the broker (one at a time, so that they
    /// arrive in order), and whether another was asked for meanwhile.
    committing: std::sync::atomic::AtomicBool,
    commit_wanted: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives places back; records read without one (while paused) are paid first.
    fn release(&self, n: usize) {
        if n > 0 {
            let mut owed = 0;
            let _ = self.overdraft.fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
                owed = o.min(n);
                Some(o - owed)
            });
            self.permits.add_permits(n - owed);
            self.stats.in_flight.fetch_sub(n as u64, Ordering::Relaxed);
        }
    }

    fn fail(&self, e: Error) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(e);
        }
        self.acked.notify_one();
    }

    fn failed(&self) -> bool {
        self.failure.lock().map(|f| f.is_some()).unwrap_or(true)
    }
}

/// The consumer's callbacks: rebalances and statistics.
struct Callbacks(Arc<Shared>);

impl ClientContext for Callbacks {
    fn stats(&self, statistics: Statistics) {
        let Some(t) = statistics.topics.get(&self.0.topic) else { return };
        let mut lag: Vec<(i32, i64)> = t
            .partitions
            .values()
            .filter(|p| p.partition >= 0 && p.consumer_lag >= 0)
            .map(|p| (p.partition, p.consumer_lag))
            .collect();
        lag.sort();
        if let Ok(mut l) = self.0.stats.lag.lock() {
            *l = lag;
        }
    }
}

impl ConsumerContext for Callbacks {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else { return };
        self.0.stats.rebalances.fetch_add(1, Ordering::Relaxed);
        // A commit on its way with older offsets of these partitions would
        // otherwise reach the broker after this one and undo it. It needs
        // nothing from this thread to finish; the wait is bounded all the
        // same, in case librdkafka holds it back until the rebalance is over
        // (past the bound an older offset may win: more repeats, no loss).
        let waited = Instant::now();
        while self.0.committing.load(Ordering::Acquire) && waited.elapsed() < REVOKE_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (mut list, mut release) = (TopicPartitionList::new(), 0);
        {
            let mut t = self.0.lock();
            for e in tpl.elements().iter().filter(|e| e.topic() == self.0.topic) {
                let (commit, r) = t.revoke(e.partition());
                release += r;
                if let Some(o) = commit {
                    let _ = list.add_partition_offset(&self.0.topic, e.partition(), Offset::Offset(o));
                }
            }
            self.0.stats.partitions.store(t.parts.len() as u64, Ordering::Relaxed);
        }
        // What was done of the partitions is committed before another worker takes them.
        if list.count() > 0
            && let Err(e) = consumer.commit(&list, CommitMode::Sync)
        {
            tracing::warn!("commit on revoke failed (the next owner repeats those records): {e}");
        }
        self.0.release(release);
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(tpl) = rebalance else { return };
        self.0.stats.rebalances.fetch_add(1, Ordering::Relaxed);
        let parts: Vec<i32> = tpl.elements().iter().filter(|e| e.topic() == self.0.topic).map(|e| e.partition()).collect();
        {
            let mut t = self.0.lock();
            for &p in &parts {
                t.assign(p);
            }
            self.0.stats.partitions.store(t.parts.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Where a record came from, and what it carries besides its value.
struct Meta {
    partition: i32,
    offset: i64,
    epoch: u64,
    key: Option<Vec<u8>>,
    route: Option<String>,
}

/// Sets `key` unless the URL set it.
fn or_default(c: &mut ClientConfig, key: &str, value: &str) {
    if c.get(key).is_none() {
        c.set(key, value);
    }
}

fn kafka_error(what: &str, e: KafkaError) -> Error {
    Error::Config(format!("kafka: {what}: {e}"))
}

/// Runs one worker until `shutdown` completes (then drains and returns
/// `Ok`), or until a delivery fails for good or the client cannot be made
/// (an `Err`; nothing past the failure is committed).
pub async fn run(
    rule: impl Into<super::LiveRule>,
    options: KafkaOptions,
    stats: Arc<KafkaStats>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let rule: super::LiveRule = rule.into();
    let o = options;
    let Some(group) = o.from.group.clone() else {
        return Err(Error::Config(format!("{}: an input topic needs a consumer group (?group=NAME)", o.from)));
    };
    if o.max_in_flight == 0 || o.batch == 0 || o.concurrency == 0 {
        return Err(Error::Config("kafka: batch, concurrency and max_in_flight must be at least 1".into()));
    }
    let shared = Arc::new(Shared {
        topic: o.from.topic.clone(),
        tracker: Mutex::new(Tracker::default()),
        permits: Arc::new(Semaphore::new(o.max_in_flight)),
        stats: stats.clone(),
        failure: Mutex::new(None),
        acked: Notify::new(),
        overdraft: std::sync::atomic::AtomicUsize::new(0),
        committing: std::sync::atomic::AtomicBool::new(false),
        commit_wanted: std::sync::atomic::AtomicBool::new(false),
        worker: format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
        ),
    });

    let mut cc = o.from.client();
    cc.set("group.id", &group);
    or_default(&mut cc, "auto.offset.reset", "earliest");
    or_default(&mut cc, "statistics.interval.ms", "1000");
    // When a worker joins or leaves, only the partitions that move are
    // revoked: the others keep their records in flight.
    or_default(&mut cc, "partition.assignment.strategy", "cooperative-sticky");
    // Offsets are committed by this worker only, when their outputs are acknowledged.
    cc.set("enable.auto.commit", "false").set("enable.auto.offset.store", "false");
    let consumer: Arc<StreamConsumer<Callbacks>> =
        Arc::new(cc.create_with_context(Callbacks(shared.clone())).map_err(|e| kafka_error("cannot create the consumer", e))?);
    consumer.subscribe(&[&o.from.topic]).map_err(|e| kafka_error("cannot subscribe", e))?;

    let producer = make_producer(&o.to)?;
    let out_parts = partitions(&producer, &o.to.topic).await?;
    let errors = match &o.errors {
        Some(u) => {
            let p =
                if u.brokers == o.to.brokers && u.properties == o.to.properties { producer.clone() } else { make_producer(u)? };
            let n = partitions(&p, &u.topic).await?;
            Some((p, u.topic.clone(), n))
        }
        None => None,
    };
    let max_bytes =
        o.to.properties
            .iter()
            .find(|(k, _)| k == "message.max.bytes")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(1_000_000usize);
    let out = Arc::new(Outputs {
        producer,
        topic: o.to.topic.clone(),
        parts: out_parts,
        errors,
        source: o.from.topic.clone(),
        max_bytes,
        worker: shared.worker.clone(),
        on_error_line: o.on_error_line.clone(),
    });

    let mut inflight: VecDeque<Chunk> = VecDeque::new();
    let mut chunk: Vec<(Meta, Input)> = Vec::with_capacity(o.batch);
    let mut chunk_bytes = 0usize;
    let mut stopping = false;
    let mut commit_tick = tokio::time::interval(o.commit_interval.max(Duration::from_millis(1)));
    commit_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let route = Arc::new(o.route.clone());
    let route_header = o.route_header.clone();
    tokio::pin!(shutdown);
    // A chunk that is not full goes 2 ms after its first record.
    let linger = Duration::from_millis(2);
    let mut chunk_deadline: Option<tokio::time::Instant> = None;
    let (mut blocked_since, mut paused): (Option<Instant>, bool) = (None, false);

    loop {
        if shared.failed() {
            stopping = true;
        }
        if stopping && chunk.is_empty() && inflight.is_empty() {
            break;
        }
        // Waiting for room (a free call, or a place) longer than a second pauses
        // the partitions and polls on, so that the worker stays in its group
        // however long a database or sink keeps it waiting.
        let blocked = !stopping && (inflight.len() >= o.concurrency || shared.permits.available_permits() == 0);
        blocked_since = if blocked { blocked_since.or_else(|| Some(Instant::now())) } else { None };
        let want_pause = blocked_since.is_some_and(|t| t.elapsed() >= Duration::from_secs(1));
        if want_pause != paused {
            pause_all(&consumer, want_pause);
            paused = want_pause;
            if paused {
                stats.pauses.fetch_add(1, Ordering::Relaxed);
            }
        }
        let room = !blocked;
        let low = shared.permits.available_permits() < o.max_in_flight / 2;
        tokio::select! {
            biased;
            _ = &mut shutdown, if !stopping => stopping = true,
            done = front(&mut inflight) => {
                let (names, result) = done;
                let results = match result {
                    Ok(r) => r,
                    // The task's records are lost with it: each still gets an error line.
                    Err(e) => names
                        .into_iter()
                        .map(|(partition, offset, epoch)| {
                            let err = super::task_failed(&e);
                            let input = Input { number: offset as u64, line: 0, raw: String::new(), record: Err(err.duplicate()) };
                            (Meta { partition, offset, epoch, key: None, route: None }, Done { input, outcome: Outcome::Failed(err), idle: false })
                        })
                        .collect(),
                };
                out.emit(results, o.pass_unrouted, &shared).await;
            }
            _ = commit_tick.tick() => commit(&consumer, &shared),
            _ = tokio::time::sleep_until(blocked_since.map(|t| tokio::time::Instant::from_std(t) + Duration::from_secs(1)).unwrap_or_else(tokio::time::Instant::now)), if blocked && !paused => {}
            _ = shared.acked.notified(), if low || shared.commit_wanted.load(Ordering::Acquire) => commit(&consumer, &shared),
            m = next(&consumer, &shared.permits, paused), if room || paused => {
                match m {
                    Ok((msg, placeless)) => {
                        if placeless {
                            shared.overdraft.fetch_add(1, Ordering::AcqRel);
                            pause_all(&consumer, true);
                        }
                        stats.records_in.fetch_add(1, Ordering::Relaxed);
                        stats.in_flight.fetch_add(1, Ordering::Relaxed);
                        let mut resumed = Vec::new();
                        let (meta, input) = to_input(&msg, &shared, route_header.as_deref(), o.max_record_bytes, &mut resumed);
                        if !resumed.is_empty() {
                            count_duplicates(&o, &shared.worker, out.parts, resumed, &stats);
                        }
                        chunk_bytes += input.raw.len();
                        chunk.push((meta, input));
                        chunk_deadline.get_or_insert_with(|| tokio::time::Instant::now() + linger);
                        if chunk.len() >= o.batch || chunk_bytes >= super::MAX_BATCH_BYTES {
                            inflight.push_back(spawn_chunk(&rule.current(), &route, std::mem::take(&mut chunk)));
                            (chunk_bytes, chunk_deadline) = (0, None);
                        }
                    }
                    Err(e) => {
                        // Transient (a broker went away, …): librdkafka retries by itself.
                        tracing::warn!("kafka consumer: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            _ = tokio::time::sleep_until(chunk_deadline.unwrap_or_else(tokio::time::Instant::now)), if chunk_deadline.is_some() => {
                inflight.push_back(spawn_chunk(&rule.current(), &route, std::mem::take(&mut chunk)));
                (chunk_bytes, chunk_deadline) = (0, None);
            }
        }
    }

    // Every record read has been handed to the producer: wait for its acknowledgement.
    let deadline = Instant::now() + o.drain_timeout;
    while shared.lock().pending() > 0 && !shared.failed() && Instant::now() < deadline {
        commit(&consumer, &shared);
        let _ = tokio::time::timeout(Duration::from_millis(20), shared.acked.notified()).await;
    }
    commit(&consumer, &shared);
    // The last commit: every done offset, whatever earlier commits did, and it must succeed.
    // It waits for the one on its way, which would otherwise arrive after it with older offsets.
    while shared.committing.load(Ordering::Acquire) || Arc::strong_count(&consumer) > 1 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let last = shared.lock().all_done();
    if !last.is_empty() {
        let mut tpl = TopicPartitionList::new();
        for (p, o) in last {
            let _ = tpl.add_partition_offset(&shared.topic, p, Offset::Offset(o));
        }
        consumer.commit(&tpl, CommitMode::Sync).map_err(|e| kafka_error("the last offset commit failed", e))?;
    }
    if let Some(e) = shared.failure.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    let left = shared.lock().pending();
    if left > 0 {
        return Err(Error::Config(format!(
            "kafka: {left} records were not acknowledged by the brokers within {:?}; their offsets are not committed",
            o.drain_timeout
        )));
    }
    consumer.unsubscribe();
    Ok(())
}

/// The first evaluation in flight, once done; never, when there is none.
async fn front(
    q: &mut VecDeque<Chunk>,
) -> (Vec<(i32, i64, u64)>, std::result::Result<Vec<(Meta, Done<String>)>, tokio::task::JoinError>) {
    let Some((_, task)) = q.front_mut() else { return std::future::pending().await };
    let result = task.await;
    let (names, _) = q.pop_front().expect("the front is there");
    (names, result)
}

/// The next message, once a place in flight is free; the place is taken.
/// While `paused`, the consumer is polled without a place (for its
/// callbacks and its group membership): a message that still comes is
/// returned with `true`.
async fn next<'c>(
    consumer: &'c StreamConsumer<Callbacks>,
    permits: &Semaphore,
    paused: bool,
) -> std::result::Result<(rdkafka::message::BorrowedMessage<'c>, bool), KafkaError> {
    if paused {
        return consumer.recv().await.map(|m| (m, true));
    }
    let Ok(permit) = permits.acquire().await else { return std::future::pending().await };
    let msg = consumer.recv().await?;
    permit.forget();
    Ok((msg, false))
}

/// Pauses (or resumes) fetching from every assigned partition. librdkafka
/// drops what it fetched ahead for them and, on resume, fetches again from
/// the last message handed out.
fn pause_all(consumer: &StreamConsumer<Callbacks>, pause: bool) {
    match consumer.assignment() {
        Ok(a) if a.count() > 0 => {
            let r = if pause { consumer.pause(&a) } else { consumer.resume(&a) };
            if let Err(e) = r {
                tracing::warn!("kafka: cannot {} the partitions: {e}", if pause { "pause" } else { "resume" });
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("kafka: cannot read the assignment: {e}"),
    }
}

fn to_input(
    msg: &rdkafka::message::BorrowedMessage<'_>,
    shared: &Shared,
    route_header: Option<&str>,
    max: usize,
    resumed: &mut Vec<(i32, i64)>,
) -> (Meta, Input) {
    let (partition, offset) = (msg.partition(), msg.offset());
    let (epoch, release, first) = shared.lock().register(partition, offset);
    shared.release(release);
    if first {
        resumed.push((partition, offset));
    }
    let route = route_header.and_then(|h| {
        msg.headers()?.iter().find(|x| x.key == h).and_then(|x| x.value).map(|v| String::from_utf8_lossy(v).into_owned())
    });
    let what = || format!("{}/{partition}/{offset}", shared.topic);
    let bytes = msg.payload().unwrap_or_default();
    let (raw, record) = if msg.payload().is_none() {
        (String::new(), Err(Error::Input { what: what(), message: "the message has no value (a tombstone)".into() }))
    } else if bytes.len() > max {
        let head = String::from_utf8_lossy(&bytes[..256.min(bytes.len())]).into_owned();
        (head, Err(Error::limit(Limit::LineBytes, format!("{} takes {} bytes, more than {max}", what(), bytes.len()))))
    } else {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                let record = record::from_json_str(text).map_err(|m| Error::Input { what: what(), message: m });
                (text.to_string(), record)
            }
            Err(e) => (
                String::from_utf8_lossy(bytes).into_owned(),
                Err(Error::Input {
                    what: what(),
                    message: format!("not UTF-8: an invalid byte at byte {} of the value", e.valid_up_to() + 1),
                }),
            ),
        }
    };
    let meta = Meta { partition, offset, epoch, key: msg.key().map(|k| k.to_vec()), route };
    (meta, Input { number: offset as u64, line: 0, raw, record })
}

fn spawn_chunk(rule: &Rule, route: &Arc<RouteBy>, chunk: Vec<(Meta, Input)>) -> Chunk {
    let names = chunk.iter().map(|(m, _)| (m.partition, m.offset, m.epoch)).collect();
    let (rule, route) = (rule.clone(), route.clone());
    (names, tokio::spawn(async move { evaluate_routed(&rule, &route, chunk).await }))
}

/// Evaluates a chunk: records with a routing header by the rule path it
/// names, the others by `route`.
async fn evaluate_routed(rule: &Rule, route: &RouteBy, chunk: Vec<(Meta, Input)>) -> Vec<(Meta, Done<String>)> {
    // Routing header value → the records (with their positions) that carry it.
    type Group = (Option<String>, Vec<(usize, Input)>);
    let mut groups: Vec<Group> = Vec::new();
    let mut metas = Vec::with_capacity(chunk.len());
    for (i, (meta, input)) in chunk.into_iter().enumerate() {
        match groups.iter_mut().find(|g| g.0 == meta.route) {
            Some(g) => g.1.push((i, input)),
            None => groups.push((meta.route.clone(), vec![(i, input)])),
        }
        metas.push(meta);
    }
    let mut done: Vec<Option<Done<String>>> = (0..metas.len()).map(|_| None).collect();
    for (key, members) in groups {
        let (positions, inputs): (Vec<usize>, Vec<Input>) = members.into_iter().unzip();
        let by = match key {
            Some(path) => RouteBy::Path(path),
            None => route.clone(),
        };
        for (pos, d) in positions.into_iter().zip(evaluate_chunk(rule, &by, inputs).await) {
            done[pos] = Some(d);
        }
    }
    metas
        .into_iter()
        .zip(done)
        .map(|(meta, d)| {
            let d = d.unwrap_or_else(|| Done {
                input: Input {
                    number: meta.offset as u64,
                    line: 0,
                    raw: String::new(),
                    record: Err(Error::Internal("lost".into())),
                },
                outcome: Outcome::Failed(Error::Internal("the record was not evaluated".into())),
                idle: false,
            });
            (meta, d)
        })
        .collect()
}

fn make_producer(url: &KafkaUrl) -> Result<FutureProducer> {
    let mut c = url.client();
    or_default(&mut c, "linger.ms", "5");
    // At least once, in order: every output acknowledged by all in-sync replicas,
    // retried without duplicates or reordering by the broker.
    c.set("acks", "all").set("enable.idempotence", "true");
    // A missing topic is an error at start, not a topic made with the broker's defaults.
    or_default(&mut c, "allow.auto.create.topics", "false");
    c.create().map_err(|e| kafka_error(&format!("cannot create the producer for {url}"), e))
}

/// The partition count of `topic` (which must exist).
async fn partitions(producer: &FutureProducer, topic: &str) -> Result<i32> {
    let (p, t) = (producer.clone(), topic.to_string());
    let md = tokio::task::spawn_blocking(move || p.client().fetch_metadata(Some(&t), Duration::from_secs(10)))
        .await
        .map_err(|e| Error::Internal(format!("metadata task: {e}")))?
        .map_err(|e| kafka_error(&format!("cannot read the metadata of topic `{topic}`"), e))?;
    let n = md.topics().iter().find(|x| x.name() == topic).map(|x| x.partitions().len()).unwrap_or(0);
    if n == 0 {
        return Err(Error::Config(format!("kafka: the topic `{topic}` does not exist (create it first)")));
    }
    Ok(n as i32)
}

/// Where outputs and error lines go.
struct Outputs {
    producer: FutureProducer,
    topic: String,
    parts: i32,
    errors: Option<(FutureProducer, String, i32)>,
    source: String,
    /// The output producer's `message.max.bytes`.
    max_bytes: usize,
    worker: String,
    on_error_line: Option<ErrorLineSink>,
}

/// Errors of a produce request that are about the record, not the cluster.
fn refused_record(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidMessage
    )
}

impl Outputs {
    /// Hands a chunk's outputs to the producers, in order, and leaves a task
    /// waiting for their acknowledgements. Records of a partition this worker
    /// no longer holds are dropped (their new owner repeats them).
    async fn emit(self: &Arc<Self>, results: Vec<(Meta, Done<String>)>, pass_unrouted: bool, shared: &Arc<Shared>) {
        let mut waits = Vec::with_capacity(results.len());
        let stats = &shared.stats;
        for (meta, done) in results {
            if !shared.lock().current(meta.partition, meta.epoch) {
                shared.release(1);
                continue;
            }
            let (mut payload, mut to_errors) = match done.outcome {
                // Rendered where the batch was decoded (`Done<String>`, as `stream::run_json`).
                Outcome::Ok(line) => (line, false),
                Outcome::Unrouted(_) if pass_unrouted => {
                    stats.unrouted.fetch_add(1, Ordering::Relaxed);
                    (done.input.raw.clone(), false)
                }
                Outcome::Unrouted(e) => {
                    stats.unrouted.fetch_add(1, Ordering::Relaxed);
                    (self.error_line(&meta, "unrouted", &e, &done.input.raw), true)
                }
                Outcome::Failed(e) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    (self.error_line(&meta, "failed", &e, &done.input.raw), true)
                }
            };
            if !to_errors {
                if payload.len() > self.max_bytes {
                    // The producer would refuse it: the record fails instead of stopping the worker.
                    let e = Error::limit(
                        Limit::OutputBytes,
                        format!(
                            "the output takes {} bytes, more than the producer's message.max.bytes ({})",
                            payload.len(),
                            self.max_bytes
                        ),
                    );
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    payload = self.error_line(&meta, "failed", &e, &done.input.raw);
                    to_errors = true;
                } else {
                    stats.written.fetch_add(1, Ordering::Relaxed);
                }
            }
            if to_errors && self.errors.is_none() {
                if let Some(f) = &self.on_error_line {
                    f(&payload);
                }
                let release = shared.lock().ack(meta.partition, meta.epoch, meta.offset);
                shared.release(release);
                continue;
            }
            match self.send(&meta, &payload, to_errors).await {
                Ok(w) => waits.push((meta, w)),
                Err(e) => {
                    shared.fail(e);
                    return;
                }
            }
        }
        if waits.is_empty() {
            shared.acked.notify_one();
            return;
        }
        let (out, shared) = (self.clone(), shared.clone());
        tokio::spawn(async move {
            for (meta, wait) in waits {
                let result = match wait.await {
                    Ok(Ok(_)) => Ok(()),
                    // A record the brokers refuse for itself (too large, invalid): its error line instead.
                    Ok(Err((KafkaError::MessageProduction(code), _))) if refused_record(code) => {
                        shared.stats.written.fetch_sub(1, Ordering::Relaxed);
                        shared.stats.errors.fetch_add(1, Ordering::Relaxed);
                        let e = Error::Config(format!("the brokers refused the output: {code}"));
                        out.error_instead(&meta, &e).await
                    }
                    Ok(Err((e, _))) => Err(kafka_error("an output was not delivered (its offset stays uncommitted)", e)),
                    Err(_) => Err(Error::Internal("the producer dropped a delivery".into())),
                };
                match result {
                    Ok(()) => {
                        let release = shared.lock().ack(meta.partition, meta.epoch, meta.offset);
                        shared.release(release);
                    }
                    // A record of a partition given up since: the new owner repeats it.
                    Err(_) if !shared.lock().current(meta.partition, meta.epoch) => shared.release(1),
                    Err(e) => {
                        shared.fail(e);
                        return;
                    }
                }
            }
            shared.acked.notify_one();
        });
    }

    /// Hands one message to its producer, waiting while its queue is full.
    async fn send(&self, meta: &Meta, payload: &str, to_errors: bool) -> Result<rdkafka::producer::DeliveryFuture> {
        let (producer, topic, parts) = match (&self.errors, to_errors) {
            (Some((p, t, n)), true) => (p, t, *n),
            _ => (&self.producer, &self.topic, self.parts),
        };
        let source = format!("{}/{}/{}", self.source, meta.partition, meta.offset);
        let headers = OwnedHeaders::new()
            .insert(Header { key: SOURCE_HEADER, value: Some(&source) })
            .insert(Header { key: WORKER_HEADER, value: Some(&self.worker) });
        let mut record = FutureRecord::to(topic).payload(payload).partition(meta.partition % parts.max(1)).headers(headers);
        if let Some(k) = &meta.key {
            record = record.key(k);
        }
        loop {
            match producer.send_result(record) {
                Ok(w) => return Ok(w),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err((e, _)) => return Err(kafka_error(&format!("cannot produce to `{topic}`"), e)),
            }
        }
    }

    /// The error line of a record whose output the brokers refused, sent and
    /// acknowledged in its place.
    async fn error_instead(&self, meta: &Meta, e: &Error) -> Result<()> {
        let line = self.error_line(meta, "failed", e, "");
        if self.errors.is_none() {
            if let Some(f) = &self.on_error_line {
                f(&line);
            }
            return Ok(());
        }
        match self.send(meta, &line, true).await?.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((e, _))) => Err(kafka_error("an error line was not delivered (its offset stays uncommitted)", e)),
            Err(_) => Err(Error::Internal("the producer dropped a delivery".into())),
        }
    }

    fn error_line(&self, meta: &Meta, kind: &str, e: &Error, raw: &str) -> String {
        serde_json::json!({
            "source": self.source, "partition": meta.partition, "offset": meta.offset,
            "kind": kind, "error": super::error_message(e), "input": super::input_excerpt(raw),
        })
        .to_string()
    }
}

/// Commits what is done and gives its places back.
fn commit(consumer: &Arc<StreamConsumer<Callbacks>>, shared: &Arc<Shared>) {
    // A record keeps its place until the broker has its offset, not merely
    // until the commit is sent: a worker killed in between repeats those
    // records too, and the places are what bounds the repeats. So the commit
    // is a synchronous one on a blocking thread, one at a time (one asked for
    // meanwhile is made when it returns), and the places go back then.
    if shared.committing.swap(true, Ordering::AcqRel) {
        // Made when the one on its way returns (it wakes the main loop).
        shared.commit_wanted.store(true, Ordering::Release);
        return;
    }
    shared.commit_wanted.store(false, Ordering::Release);
    let list = shared.lock().take_commits();
    if list.is_empty() {
        shared.committing.store(false, Ordering::Release);
        return;
    }
    let (consumer, shared) = (consumer.clone(), shared.clone());
    tokio::task::spawn_blocking(move || {
        let mut tpl = TopicPartitionList::new();
        for c in &list {
            let _ = tpl.add_partition_offset(&shared.topic, c.partition, Offset::Offset(c.offset));
        }
        let release = match consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                shared.stats.commits.fetch_add(1, Ordering::Relaxed);
                list.iter().map(|c| c.places).sum()
            }
            // Sent again with the next commit (commits are cumulative).
            Err(e) => {
                tracing::warn!("offset commit failed: {e}");
                let mut t = shared.lock();
                list.iter().map(|c| t.give_back(c)).sum()
            }
        };
        shared.release(release);
        shared.committing.store(false, Ordering::Release);
        // The main loop may be waiting for places, or for this commit to end.
        shared.acked.notify_one();
    });
}

/// For a partition where reading resumed at `offset` (the committed one):
/// how many of its records from there on already have an output written by
/// another worker (the previous owner produced them and died, or lost the
/// partition, before committing). Found from the `omlet-source` headers of
/// the output partition's last messages; they will be processed again, and
/// are counted as duplicates. Runs on its own blocking thread, with a client
/// of its own, so that the worker goes on.
fn count_duplicates(o: &KafkaOptions, worker: &str, out_parts: i32, resumed: Vec<(i32, i64)>, stats: &Arc<KafkaStats>) {
    let (from, to, worker, stats) = (o.from.topic.clone(), o.to.clone(), worker.to_string(), stats.clone());
    let window = (o.max_in_flight * 4) as i64;
    tokio::task::spawn_blocking(move || match scan_outputs(&to, &from, &worker, out_parts, &resumed, window) {
        Ok(n) => {
            stats.duplicates.fetch_add(n, Ordering::Relaxed);
        }
        Err(e) => tracing::warn!("cannot count duplicates: {e}"),
    });
}

/// Counts distinct source offsets at or past each partition's committed
/// offset among the last `window` messages of its output partition.
fn scan_outputs(url: &KafkaUrl, source: &str, worker: &str, out_parts: i32, from: &[(i32, i64)], window: i64) -> Result<u64> {
    let reader: BaseConsumer = url
        .client()
        .set("group.id", "omlet-duplicate-scan")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| kafka_error("cannot create the scan consumer", e))?;
    let timeout = Duration::from_secs(5);
    let mut total = 0u64;
    let mut by_out: HashMap<i32, Vec<(i32, i64)>> = HashMap::new();
    for &(p, c) in from {
        by_out.entry(p % out_parts.max(1)).or_default().push((p, c));
    }
    for (out, sources) in by_out {
        let (low, high) =
            reader.fetch_watermarks(&url.topic, out, timeout).map_err(|e| kafka_error("cannot read watermarks", e))?;
        let start = (high - window).max(low);
        if start >= high {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        let _ = tpl.add_partition_offset(&url.topic, out, Offset::Offset(start));
        reader.assign(&tpl).map_err(|e| kafka_error("cannot assign the scan consumer", e))?;
        let mut seen: std::collections::HashSet<(i32, i64)> = std::collections::HashSet::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut at = start;
        while at < high && Instant::now() < deadline {
            let Some(m) = reader.poll(Duration::from_millis(200)) else { continue };
            let Ok(m) = m else { continue };
            at = m.offset() + 1;
            let Some(h) = m.headers() else { continue };
            if h.iter().any(|x| x.key == WORKER_HEADER && x.value == Some(worker.as_bytes())) {
                continue;
            }
            let Some(v) = h.iter().find(|x| x.key == SOURCE_HEADER).and_then(|x| x.value) else { continue };
            let text = String::from_utf8_lossy(v);
            let mut it = text.rsplitn(3, '/');
            let (Some(off), Some(part), Some(topic)) = (it.next(), it.next(), it.next()) else { continue };
            let (Ok(off), Ok(part)) = (off.parse::<i64>(), part.parse::<i32>()) else { continue };
            if topic == source && sources.iter().any(|&(p, c)| p == part && off >= c) {
                seen.insert((part, off));
            }
        }
        total += seen.len() as u64;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit list as (partition, offset, places).
    fn commits(list: &[Commit]) -> Vec<(i32, i64, usize)> {
        list.iter().map(|c| (c.partition, c.offset, c.places)).collect()
    }

    #[test]
    fn urls_parse_and_hide_secrets() {
        let u = KafkaUrl::parse("kafka://127.0.0.1:9092,127.0.0.1:9093/logs?group=g&session.timeout.ms=6000").unwrap();
        assert_eq!(u.brokers, "127.0.0.1:9092,127.0.0.1:9093");
        assert_eq!((u.topic.as_str(), u.group.as_deref()), ("logs", Some("g")));
        assert_eq!(u.properties, [("session.timeout.ms".to_string(), "6000".to_string())]);
        let e = KafkaUrl::parse("kafka://h:1/?sasl.password=hunter2").unwrap_err().to_string();
        assert!(e.contains("sasl.password=***") && !e.contains("hunter2"), "{e}");
        assert!(KafkaUrl::parse("kafka:///t").is_err());
        assert!(KafkaUrl::parse("kafka://h:1/t?group").is_err());
    }

    #[test]
    fn offsets_commit_only_past_a_contiguous_acknowledged_run() {
        let mut t = Tracker::default();
        t.assign(0);
        let (e, _, first) = t.register(0, 10);
        assert!(first);
        t.register(0, 11);
        t.register(0, 13);
        // 11 and 13 acknowledged, 10 not: nothing to commit.
        assert_eq!(t.ack(0, e, 11), 0);
        assert_eq!(t.ack(0, e, 13), 0);
        assert!(t.take_commits().is_empty());
        // 10 acknowledged: everything up to 13 is done.
        t.ack(0, e, 10);
        assert_eq!(commits(&t.take_commits()), [(0, 14, 3)]);
        assert_eq!(t.pending(), 0);
        assert!(t.take_commits().is_empty());
    }

    #[test]
    fn an_offset_that_goes_back_starts_a_new_epoch() {
        let mut t = Tracker::default();
        t.assign(1);
        let (e1, _, _) = t.register(1, 5);
        t.register(1, 6);
        t.ack(1, e1, 5);
        // The position was reset to 3: offset 5 was acknowledged, so its place comes back.
        let (e2, release, _) = t.register(1, 3);
        assert_ne!(e1, e2);
        assert_eq!(release, 1);
        // The old epoch's 6 counts for nothing; the new run commits from its own offsets.
        assert_eq!(t.ack(1, e1, 6), 1);
        t.ack(1, e2, 3);
        assert_eq!(commits(&t.take_commits()), [(1, 4, 1)]);
    }

    #[test]
    fn a_failed_commit_is_sent_again() {
        let mut t = Tracker::default();
        t.assign(0);
        let (e, _, _) = t.register(0, 0);
        t.ack(0, e, 0);
        let c = t.take_commits();
        assert_eq!(commits(&c), [(0, 1, 1)]);
        // The failed commit's place waits for the next commit, which carries it.
        assert_eq!(t.give_back(&c[0]), 0);
        let again = t.take_commits();
        assert_eq!(commits(&again), [(0, 1, 1)]);
        assert_eq!(t.all_done(), [(0, 1)]);
        // Revoked while that commit was on its way: the revoke gives back none
        // of its places (they are the commit's) and, when it fails, the commit
        // gives them back at once.
        assert_eq!(t.revoke(0), (Some(1), 0));
        assert_eq!(t.give_back(&again[0]), 1);
        // Revoked and assigned again: the new epoch does not take the old places.
        t.assign(0);
        let (e2, _, _) = t.register(0, 1);
        t.ack(0, e2, 1);
        let newer = t.take_commits();
        assert_eq!(commits(&newer), [(0, 2, 1)]);
        t.revoke(0);
        t.assign(0);
        assert_eq!(t.give_back(&newer[0]), 1);
    }

    #[test]
    fn a_revoked_partition_commits_what_was_done_and_ignores_late_acknowledgements() {
        let mut t = Tracker::default();
        t.assign(3);
        let (old, _, _) = t.register(3, 0);
        t.register(3, 1);
        t.register(3, 2);
        t.ack(3, old, 0);
        t.ack(3, old, 2);
        // Offset 0 is done (commit 1); 0 and 2 give their places back.
        assert_eq!(t.revoke(3), (Some(1), 2));
        t.assign(3);
        let (new, _, first) = t.register(3, 1);
        assert!(first);
        assert_ne!(old, new);
        // A late acknowledgement of the old epoch gives its place back and counts for nothing.
        assert_eq!(t.ack(3, old, 1), 1);
        assert!(t.take_commits().is_empty());
        t.ack(3, new, 1);
        assert_eq!(commits(&t.take_commits()), [(3, 2, 1)]);
    }
}
