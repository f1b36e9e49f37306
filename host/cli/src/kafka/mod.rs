//! `omlet run --from kafka://…`: records from a Kafka topic, through a rule,
//! to Kafka topics, as one worker of a consumer group (the CLI's `kafka`
//! feature), with its Prometheus endpoint, draining on SIGTERM or Ctrl-C.
//!
//! It lives in the CLI, not in the `omlet` library: it is built on the
//! library's public stream API (`omlet::stream::evaluate_json`, `Input`,
//! `Done`, `LiveRule`), as a host's own source would be.
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

mod offsets;
mod options;
mod outputs;
mod url;
mod worker;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use omlet::{Error, Knowledge, Rule};
use options::{KafkaOptions, KafkaStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use url::KafkaUrl;

use crate::run::RunOptions;

fn url(flag: &str, p: &Path) -> omlet::Result<KafkaUrl> {
    let text = p.to_string_lossy();
    if !KafkaUrl::is_kafka(&text) {
        return Err(Error::Config(format!("{flag} `{text}`: with a Kafka input, give a kafka://BROKERS/TOPIC here")));
    }
    KafkaUrl::parse(&text)
}

pub(crate) async fn run(
    rule: Rule,
    watch: Option<(omlet::Engine, std::path::PathBuf, omlet::LoadOptions, crate::run::Vet)>,
    knowledge: Option<Arc<Knowledge>>,
    o: RunOptions,
) -> omlet::Result<ExitCode> {
    let from = KafkaUrl::parse(&o.input)?;
    let Some(to) = &o.output else {
        return Err(Error::Config("a Kafka input needs --to kafka://BROKERS/TOPIC".into()));
    };
    let mut options = KafkaOptions::new(from, url("--to", to)?);
    options.errors = o.errors.as_deref().map(|p| url("--errors", p)).transpose()?;
    options.route = o.route.clone();
    options.route_header = o.route_header.clone();
    options.pass_unrouted = o.pass_unrouted;
    options.batch = o.batch;
    options.concurrency = o.concurrency;
    options.max_in_flight = o.max_in_flight;
    options.commit_interval = std::time::Duration::from_millis(o.commit_interval_ms);
    options.strict_last_commit = o.strict_last_commit;
    options.on_error_line = Some(Arc::new(|line: &str| eprintln!("{line}")));
    let topic = options.from.topic.clone();
    let stats = Arc::new(KafkaStats::default());
    let _metrics = match &o.metrics {
        Some(addr) => Some(serve_metrics(addr, stats.clone(), knowledge.clone(), topic).await?),
        None => None,
    };
    // The handlers are in place before the clients start: a SIGTERM during start-up drains too.
    let stop = shutdown()?;
    let started = Instant::now();
    let live = omlet::stream::LiveRule::new(rule);
    let _watching = match watch {
        Some((engine, path, load, vet)) => {
            let counted = stats.clone();
            Some(live.watch(
                engine,
                path,
                load,
                crate::run::WATCH_EVERY,
                move |r| vet(r),
                move |r| match r {
                    Ok(()) => {
                        counted.rule_reloads.fetch_add(1, Ordering::Relaxed);
                        eprintln!("omlet run: the rule set changed; loaded again and swapped in");
                    }
                    Err(e) => {
                        counted.rule_reload_failures.fetch_add(1, Ordering::Relaxed);
                        eprintln!("omlet run: the rule set changed but does not load, so the old one keeps running: {e}");
                    }
                },
            )?)
        }
        None => None,
    };
    let result = worker::run(live, options, stats.clone(), stop).await;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    let (records, written, errors) = (get(&stats.records_in), get(&stats.written), get(&stats.errors));
    let (unrouted, duplicates) = (get(&stats.unrouted), get(&stats.duplicates));
    if o.stats == Some(crate::run::Shape::Json) {
        let summary = serde_json::json!({
            "records": records,
            "written": written,
            "errors": errors,
            "unrouted": unrouted,
            "duplicates": duplicates,
            "commits": get(&stats.commits),
            "rebalances": get(&stats.rebalances),
            "seconds": secs,
            "knowledge": knowledge.as_ref().map(|k| k.stats().snapshot()),
        });
        eprintln!("{summary}");
    } else {
        eprintln!(
            "{records} records in {secs:.2} s: {written} written, {errors} errors, {unrouted} unrouted, \
             {duplicates} duplicates after rebalances"
        );
    }
    // A worker drained by SIGTERM exits 0: its failed records have their error lines.
    result.map(|()| ExitCode::SUCCESS)
}

/// A future that completes on SIGTERM or SIGINT (Ctrl-C); both handlers are
/// installed when this returns.
fn shutdown() -> omlet::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let handler = |kind| signal(kind).map_err(|e| Error::Config(format!("cannot handle signals: {e}")));
    let (mut term, mut int) = (handler(SignalKind::terminate())?, handler(SignalKind::interrupt())?);
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Answers every HTTP request on `addr` with the worker's counters in
/// Prometheus' text format. One route and a fixed answer: a few lines of
/// tokio, where an HTTP server crate would bring far more than it serves.
async fn serve_metrics(
    addr: &str,
    stats: Arc<KafkaStats>,
    knowledge: Option<Arc<Knowledge>>,
    topic: String,
) -> omlet::Result<tokio::task::JoinHandle<()>> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| Error::Config(format!("--metrics {addr}: cannot listen: {e}")))?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                // Out of descriptors, say: wait rather than spin.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            };
            let (stats, knowledge, topic) = (stats.clone(), knowledge.clone(), topic.clone());
            tokio::spawn(async move {
                // Read the request head (bounded in size and time), then answer.
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                let read = async {
                    while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                };
                let _ = tokio::time::timeout(std::time::Duration::from_secs(2), read).await;
                let body = stats.prometheus(&topic, knowledge.as_deref());
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let write = async {
                    let _ = sock.write_all(reply.as_bytes()).await;
                    let _ = sock.shutdown().await;
                };
                let _ = tokio::time::timeout(std::time::Duration::from_secs(2), write).await;
            });
        }
    }))
}
