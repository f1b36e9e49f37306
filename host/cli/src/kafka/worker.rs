//! One worker's loop: read, evaluate in routed chunks, write in order, commit.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{Notify, Semaphore};

use omlet::stream::{Done, Input, LiveRule, Outcome, RouteBy, task_failed};
use omlet::{Error, Limit, Result, Rule};

use super::offsets::{Callbacks, Shared, Tracker, commit};
use super::options::{KafkaOptions, KafkaStats};
use super::outputs::{Outputs, count_duplicates, make_producer, partitions};

/// Records of one evaluation in flight: (partition, offset, epoch) each, and
/// the task evaluating them.
pub(super) type Chunk = (Vec<(i32, i64, u64)>, tokio::task::JoinHandle<Vec<(Meta, Done<String>)>>);

/// Where a record came from, and what it carries besides its value.
pub(super) struct Meta {
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) epoch: u64,
    pub(super) key: Option<Vec<u8>>,
    pub(super) route: Option<String>,
}

/// Sets `key` unless the URL set it.
pub(super) fn or_default(c: &mut ClientConfig, key: &str, value: &str) {
    if c.get(key).is_none() {
        c.set(key, value);
    }
}

pub(super) fn kafka_error(what: &str, e: KafkaError) -> Error {
    Error::Config(format!("kafka: {what}: {e}"))
}

/// Runs one worker until `shutdown` completes (then drains and returns
/// `Ok`), or until a delivery fails for good or the client cannot be made
/// (an `Err`; nothing past the failure is committed).
pub async fn run(
    rule: impl Into<LiveRule>,
    options: KafkaOptions,
    stats: Arc<KafkaStats>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let rule: LiveRule = rule.into();
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
        paused: std::sync::atomic::AtomicBool::new(false),
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
    let mut blocked_since: Option<Instant> = None;

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
        let paused = blocked_since.is_some_and(|t| t.elapsed() >= Duration::from_secs(1));
        // The pause is held in `shared`, where the assign callback reads it too.
        if shared.paused.swap(paused, Ordering::AcqRel) != paused {
            pause_all(&consumer, paused);
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
                            let err = task_failed(&e);
                            let input = Input { number: offset as u64, line: 0, raw: String::new(), record: Err(task_failed(&e)) };
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
                        if chunk.len() >= o.batch || chunk_bytes >= omlet::stream::MAX_BATCH_BYTES {
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
        match commit_patiently(|| consumer.commit(&tpl, CommitMode::Sync), LAST_COMMIT).await {
            Ok(LastCommit::Made) => {}
            Ok(LastCommit::Refused(e)) if o.strict_last_commit => {
                return Err(kafka_error(
                    "the last offset commit was still refused after the consumer group's rebalance (--strict-last-commit)",
                    e,
                ));
            }
            Ok(LastCommit::Refused(e)) => eprintln!(
                "omlet run: the last offset commit was refused while the consumer group rebalanced ({e}); \
                 the next owner of the partitions repeats the records done since the commit before"
            ),
            Err(e) => return Err(kafka_error("the last offset commit failed", e)),
        }
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

/// How the last commit is made again while the group is between
/// generations: every 200 ms, for 10 s.
const LAST_COMMIT: Patience = Patience { wait: Duration::from_secs(10), pause: Duration::from_millis(200) };

/// How the last commit is made again while the group refuses it.
#[derive(Clone, Copy)]
struct Patience {
    /// How long, in all, before giving up.
    wait: Duration,
    /// The pause between two tries.
    pause: Duration,
}

/// How the last commit ended, when nothing failed for good.
#[derive(Debug)]
enum LastCommit {
    /// The brokers stored it.
    Made,
    /// The group was still between generations after [`Patience::wait`]: the
    /// partitions' next owner repeats the records done since the commit
    /// before (nothing is lost). `--strict-last-commit` makes this the run's
    /// error; by default the worker says so and ends well.
    Refused(KafkaError),
}

/// The last commit, made with `commit`. A group between generations
/// (another worker left or joined a moment before: workers stopped one after
/// another, say) refuses commits until its rebalance ends, which takes the
/// brokers a moment: the commit is made again until then, for
/// `patience.wait` at most. Any other failure is returned at once.
async fn commit_patiently(
    mut commit: impl FnMut() -> std::result::Result<(), KafkaError>,
    patience: Patience,
) -> std::result::Result<LastCommit, KafkaError> {
    let deadline = Instant::now() + patience.wait;
    loop {
        match commit() {
            Ok(()) => return Ok(LastCommit::Made),
            Err(e) if group_in_flux(&e) && Instant::now() < deadline => tokio::time::sleep(patience.pause).await,
            Err(e) if group_in_flux(&e) => return Ok(LastCommit::Refused(e)),
            Err(e) => return Err(e),
        }
    }
}

/// A commit refused because the group's membership is changing, not
/// because the brokers cannot take it.
fn group_in_flux(e: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::RebalanceInProgress
                | C::IllegalGeneration
                | C::UnknownMemberId
                | C::NotCoordinator
                | C::CoordinatorLoadInProgress
                | C::CoordinatorNotAvailable
                | C::AssignmentLost
                | C::StaleMemberEpoch
        )
    )
}

/// The first evaluation in flight, once done; never, when there is none.
pub(super) async fn front(
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
pub(super) async fn next<'c>(
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
pub(super) fn pause_all(consumer: &StreamConsumer<Callbacks>, pause: bool) {
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

pub(super) fn to_input(
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
        (
            head,
            Err(Error::Limit {
                limit: Limit::LineBytes,
                message: format!("{} takes {} bytes, more than {max}", what(), bytes.len()),
            }),
        )
    } else {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                // Kept as a frame until something reads its fields: the batch takes it as bytes.
                let record =
                    omlet::record::from_json_line(text).map_err(|e| Error::Input { what: what(), message: e.to_string() });
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

pub(super) fn spawn_chunk(rule: &Rule, route: &Arc<RouteBy>, chunk: Vec<(Meta, Input)>) -> Chunk {
    let names = chunk.iter().map(|(m, _)| (m.partition, m.offset, m.epoch)).collect();
    let (rule, route) = (rule.clone(), route.clone());
    (names, tokio::spawn(async move { evaluate_routed(&rule, &route, chunk).await }))
}

/// Evaluates a chunk: records with a routing header by the rule path it
/// names, the others by `route`.
pub(super) async fn evaluate_routed(rule: &Rule, route: &RouteBy, chunk: Vec<(Meta, Input)>) -> Vec<(Meta, Done<String>)> {
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
        for (pos, d) in positions.into_iter().zip(omlet::stream::evaluate_json(rule, &by, inputs).await) {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode as C;

    use super::{LastCommit, Patience, commit_patiently};

    const QUICK: Patience = Patience { wait: Duration::from_millis(300), pause: Duration::from_millis(5) };

    /// A commit that the brokers answer with `answers`, in turn (the last one
    /// from then on), counting the tries.
    fn brokers(answers: Vec<Option<C>>, tries: &std::cell::Cell<usize>) -> impl FnMut() -> Result<(), KafkaError> + '_ {
        move || {
            let n = tries.get();
            tries.set(n + 1);
            match answers[n.min(answers.len() - 1)] {
                None => Ok(()),
                Some(code) => Err(KafkaError::ConsumerCommit(code)),
            }
        }
    }

    // The race of workers stopped one after another: the group
    // refuses the last commit while it rebalances, then takes it.
    #[tokio::test]
    async fn a_last_commit_refused_mid_rebalance_is_made_again_until_taken() {
        let tries = std::cell::Cell::new(0);
        let answers = vec![Some(C::RebalanceInProgress), Some(C::IllegalGeneration), None];
        let r = commit_patiently(brokers(answers, &tries), QUICK).await;
        assert!(matches!(r, Ok(LastCommit::Made)), "{r:?}");
        assert_eq!(tries.get(), 3);
    }

    #[tokio::test]
    async fn a_last_commit_refused_past_the_patience_is_told_apart_from_a_failure() {
        let tries = std::cell::Cell::new(0);
        let started = std::time::Instant::now();
        let r = commit_patiently(brokers(vec![Some(C::RebalanceInProgress)], &tries), QUICK).await;
        assert!(matches!(&r, Ok(LastCommit::Refused(e)) if super::group_in_flux(e)), "{r:?}");
        assert!(started.elapsed() >= QUICK.wait, "gave up after {:?}", started.elapsed());
        assert!(tries.get() > 2, "tried {} times", tries.get());
    }

    #[tokio::test]
    async fn a_last_commit_that_fails_otherwise_is_not_made_again() {
        let tries = std::cell::Cell::new(0);
        let r = commit_patiently(brokers(vec![Some(C::AllBrokersDown), None], &tries), QUICK).await;
        assert!(matches!(r, Err(KafkaError::ConsumerCommit(C::AllBrokersDown))), "{r:?}");
        assert_eq!(tries.get(), 1);
    }

    #[test]
    fn a_commit_refused_mid_rebalance_is_told_from_a_failed_one() {
        for c in [C::RebalanceInProgress, C::IllegalGeneration, C::UnknownMemberId, C::NotCoordinator] {
            assert!(super::group_in_flux(&KafkaError::ConsumerCommit(c)), "{c:?}");
        }
        for c in [C::BrokerTransportFailure, C::AllBrokersDown, C::TopicAuthorizationFailed, C::OffsetMetadataTooLarge] {
            assert!(!super::group_in_flux(&KafkaError::ConsumerCommit(c)), "{c:?}");
        }
    }
}
