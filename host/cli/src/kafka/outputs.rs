//! The output and error topics: producing in order, per partition, and
//! counting the duplicates a restart makes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use omlet::stream::{Done, Outcome};
use omlet::{Error, Limit, Result};

use super::offsets::Shared;
use super::options::{ErrorLineSink, KafkaOptions, KafkaStats};
use super::url::{KafkaUrl, SOURCE_HEADER, WORKER_HEADER};
use super::worker::{Meta, kafka_error, or_default};

pub(super) fn make_producer(url: &KafkaUrl) -> Result<FutureProducer> {
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
pub(super) async fn partitions(producer: &FutureProducer, topic: &str) -> Result<i32> {
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
pub(super) struct Outputs {
    pub(super) producer: FutureProducer,
    pub(super) topic: String,
    pub(super) parts: i32,
    pub(super) errors: Option<(FutureProducer, String, i32)>,
    pub(super) source: String,
    /// The output producer's `message.max.bytes`.
    pub(super) max_bytes: usize,
    pub(super) worker: String,
    pub(super) on_error_line: Option<ErrorLineSink>,
}

/// Errors of a produce request that are about the record, not the cluster.
pub(super) fn refused_record(code: RDKafkaErrorCode) -> bool {
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
    pub(super) async fn emit(self: &Arc<Self>, results: Vec<(Meta, Done<String>)>, pass_unrouted: bool, shared: &Arc<Shared>) {
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
                    let e = Error::Limit {
                        limit: Limit::OutputBytes,
                        message: format!(
                            "the output takes {} bytes, more than the producer's message.max.bytes ({})",
                            payload.len(),
                            self.max_bytes
                        ),
                    };
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
    pub(super) async fn send(&self, meta: &Meta, payload: &str, to_errors: bool) -> Result<rdkafka::producer::DeliveryFuture> {
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
    pub(super) async fn error_instead(&self, meta: &Meta, e: &Error) -> Result<()> {
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

    pub(super) fn error_line(&self, meta: &Meta, kind: &str, e: &Error, raw: &str) -> String {
        serde_json::json!({
            "source": self.source, "partition": meta.partition, "offset": meta.offset,
            "kind": kind, "error": omlet::stream::error_message(e), "input": omlet::stream::input_excerpt(raw),
        })
        .to_string()
    }
}

/// For a partition where reading resumed at `offset` (the committed one):
/// how many of its records from there on already have an output written by
/// another worker (the previous owner produced them and died, or lost the
/// partition, before committing). Found from the `omlet-source` headers of
/// the output partition's last messages; they will be processed again, and
/// are counted as duplicates. Runs on its own blocking thread, with a client
/// of its own, so that the worker goes on.
pub(super) fn count_duplicates(
    o: &KafkaOptions,
    worker: &str,
    out_parts: i32,
    resumed: Vec<(i32, i64)>,
    stats: &Arc<KafkaStats>,
) {
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
pub(super) fn scan_outputs(
    url: &KafkaUrl,
    source: &str,
    worker: &str,
    out_parts: i32,
    from: &[(i32, i64)],
    window: i64,
) -> Result<u64> {
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
