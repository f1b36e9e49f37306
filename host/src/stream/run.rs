//! Running inputs through a rule: chunks read ahead on a thread of their
//! own, calls in flight, outcomes handed over in input order.

use std::collections::VecDeque;

use std::sync::Arc;

use super::read::Event;
use super::{Done, Input, Inputs, LiveRule, MAX_BATCH_BYTES, Outcome, RouteBy, RunOptions};
use crate::record::Record;
use crate::runtime::Rule;
use crate::runtime::output::Decoded;
use crate::{Error, Result};

/// Evaluates `inputs` through `rule`, routed by `options.route`,
/// `options.batch` records (and at most [`MAX_BATCH_BYTES`] of input) per
/// guest call and up to `options.concurrency` calls in flight, handing every
/// record's outcome to `sink` in input order.
///
/// Reading (and so parsing) runs on a thread of its own, `omlet-read`, a few
/// chunks ahead of the evaluation (at most `concurrency` chunks wait for it,
/// besides the one it is filling), so that it overlaps with the evaluating
/// tasks and with `sink`, which runs on the caller's task.
///
/// ```no_run
/// # async fn f(rule: omlet::Rule) -> omlet::Result<()> {
/// use omlet::stream::{Format, Outcome, RunOptions, read};
/// let input = Box::new(std::io::BufReader::new(std::fs::File::open("access.jsonl").unwrap()));
/// omlet::stream::run(rule, read(input, Format::Jsonl), &RunOptions::default(), |done| {
///     if let Outcome::Ok(record) = done.outcome {
///         println!("{record}");
///     }
///     Ok(())
/// })
/// .await
/// # }
/// ```
///
/// Every record read gets exactly one outcome, whatever happens to its call:
/// a trap, a limit, even a failed task, is that record's `Failed` outcome. The
/// run stops early only when the input cannot be read, the reading thread
/// fails (an [`Error::Internal`]), or `sink` fails:
/// - when the input cannot be read, `sink` first gets the outcome of every
///   record read before that, and the run returns the read error;
/// - when `sink` fails, the run returns its error at once: the records read
///   ahead get no outcome, and the reading thread stops when it next hands
///   over a chunk (so an input that blocks, such as standard input, may keep
///   it until the process ends). Dropping the run's future does the same.
pub async fn run(
    rule: impl Into<LiveRule>,
    inputs: impl Into<Inputs>,
    options: &RunOptions,
    sink: impl FnMut(Done) -> Result<()>,
) -> Result<()> {
    run_as(rule, inputs, options, sink).await
}

/// [`run`], handing over each output as its JSON line (without the line
/// end): the text [`Record::to_json`] gives for the record [`run`] would hand
/// over, rendered straight from the guest's output, so that no [`Record`] is
/// built and freed for a record that is only written out. `omlet run` writes
/// its output this way.
pub async fn run_json(
    rule: impl Into<LiveRule>,
    inputs: impl Into<Inputs>,
    options: &RunOptions,
    sink: impl FnMut(Done<String>) -> Result<()>,
) -> Result<()> {
    run_as(rule, inputs, options, sink).await
}

/// [`run`] with outputs decoded as `T`.
pub(super) async fn run_as<T: Decoded>(
    rule: impl Into<LiveRule>,
    inputs: impl Into<Inputs>,
    options: &RunOptions,
    mut sink: impl FnMut(Done<T>) -> Result<()>,
) -> Result<()> {
    type Task<T> = (Vec<(u64, u64)>, tokio::task::JoinHandle<Vec<Done<T>>>);
    let concurrency = options.concurrency.max(1);
    let route = Arc::new(options.route.clone());
    let rule: LiveRule = rule.into();
    let mut chunks = read_ahead(inputs.into(), options.batch.max(1), concurrency)?;
    let mut inflight: VecDeque<Task<T>> = VecDeque::new();
    let (mut ended, mut failure) = (false, None);
    // What the loop waits for next.
    enum Next<T> {
        Chunk(Option<Chunk>),
        Done(std::result::Result<Vec<Done<T>>, tokio::task::JoinError>),
    }
    loop {
        // A chunk is taken as soon as it is handed over while there is room,
        // and the first task's outcomes as soon as they are ready: waiting
        // for the one would hold back the other (a partial chunk handed over
        // when the input went idle must not wait for more chunks).
        let room = !ended && inflight.len() < concurrency;
        let next = match (room, inflight.front_mut()) {
            (true, None) => Next::Chunk(chunks.recv().await),
            (true, Some((_, front))) => tokio::select! {
                biased;
                c = chunks.recv() => Next::Chunk(c),
                r = front => Next::Done(r),
            },
            (false, Some((_, front))) => Next::Done(front.await),
            (false, None) => {
                return match failure {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
            }
        };
        match next {
            Next::Done(r) => {
                let names = inflight.pop_front().map(|t| t.0).unwrap_or_default();
                let idle = inflight.is_empty();
                hand_over(names, r, idle, &mut sink)?;
            }
            Next::Chunk(Some(Chunk::Records(work))) => {
                // The rule current as the batch starts: a swap waits for no one.
                let (rule, route) = (rule.current(), route.clone());
                let names = work.iter().map(|i| (i.number, i.line)).collect();
                inflight.push_back((names, tokio::spawn(async move { evaluate_chunk(&rule, &route, work).await })));
            }
            Next::Chunk(Some(Chunk::Failed(e))) => {
                failure = Some(e);
                ended = true;
            }
            Next::Chunk(Some(Chunk::End)) => ended = true,
            // The thread is gone without saying the input ended: it
            // panicked, and the records it held are lost with it.
            Next::Chunk(None) => {
                failure = Some(Error::Internal("the input's reading thread failed before the end of the input".into()));
                ended = true;
            }
        }
    }
}

/// Gives a finished task's outcomes to `sink`; the last is marked `idle`
/// when no other task is in flight.
pub(super) fn hand_over<T>(
    names: Vec<(u64, u64)>,
    result: std::result::Result<Vec<Done<T>>, tokio::task::JoinError>,
    idle: bool,
    sink: &mut impl FnMut(Done<T>) -> Result<()>,
) -> Result<()> {
    let mut done = match result {
        Ok(done) => done,
        // The task's records are gone with it: each still gets its line.
        Err(e) => names
            .into_iter()
            .map(|(number, line)| Done {
                input: Input { number, line, raw: String::new(), record: Err(task_failed(&e)) },
                outcome: Outcome::Failed(task_failed(&e)),
                idle: false,
            })
            .collect(),
    };
    if let Some(last) = done.last_mut() {
        last.idle = idle;
    }
    for d in done {
        sink(d)?;
    }
    Ok(())
}

/// What the reading thread hands over.
pub(super) enum Chunk {
    /// The next records, in order.
    Records(Vec<Input>),
    /// The input could not be read; nothing follows.
    Failed(Error),
    /// The input ended; nothing follows.
    End,
}

/// Chunks of `inputs` (`batch` records, or [`MAX_BATCH_BYTES`] of input), read
/// on a thread of their own, at most `ahead` of them waiting. The last item
/// is [`Chunk::End`] or [`Chunk::Failed`]; a channel that closes without one
/// means the thread failed. The thread ends there, or at its next chunk once
/// the receiver is gone.
///
/// JSONL records are written into one frame per chunk (`record::chunk`),
/// each chunk ended as it is handed over. When the source goes idle
/// ([`Pipe`](super::Pipe)'s idle time without bytes), the records read so
/// far are handed over, so that a producer that stalls does not hold a
/// partial chunk back.
pub(super) fn read_ahead(mut inputs: Inputs, batch: usize, ahead: usize) -> Result<tokio::sync::mpsc::Receiver<Chunk>> {
    // Room for a chunk's records as they come; a huge `batch` reserves no more.
    let room = batch.min(4096);
    let (tx, rx) = tokio::sync::mpsc::channel(ahead);
    std::thread::Builder::new()
        .name("omlet-read".into())
        .spawn(move || {
            inputs.chunk_frames();
            let (mut chunk, mut bytes) = (Vec::with_capacity(room), 0usize);
            let last = loop {
                let full = match inputs.next_event() {
                    None => break Chunk::End,
                    Some(Event::Input(Err(e))) => break Chunk::Failed(e),
                    Some(Event::Input(Ok(input))) => {
                        bytes += input.raw.len();
                        chunk.push(input);
                        chunk.len() >= batch || bytes >= MAX_BATCH_BYTES
                    }
                    Some(Event::Idle) => !chunk.is_empty(),
                };
                if full {
                    inputs.end_chunk();
                    bytes = 0;
                    let records = std::mem::replace(&mut chunk, Vec::with_capacity(room));
                    // A closed channel: the run is over.
                    if tx.blocking_send(Chunk::Records(records)).is_err() {
                        return;
                    }
                }
            };
            // The records read since the last full chunk, then how the input ended.
            inputs.end_chunk();
            if !chunk.is_empty() && tx.blocking_send(Chunk::Records(chunk)).is_err() {
                return;
            }
            let _ = tx.blocking_send(last);
        })
        .map_err(|e| Error::io("the input's reading thread", e))?;
    Ok(rx)
}

/// What a record of a failed evaluation task gets (an
/// [`Error::Internal`]): for a host that spawns [`evaluate_json`] on tasks
/// of its own, as [`run`] and the CLI's Kafka worker do.
pub fn task_failed(e: &tokio::task::JoinError) -> Error {
    Error::Internal(format!("the evaluation task failed: {e}"))
}

/// Evaluates a chunk of inputs that a host read itself (from a queue, say),
/// as [`run_json`] evaluates each of its chunks: the records in one call (or
/// one per rule path, when `route` is by field), and one outcome per input,
/// in order. An input that holds no record gets its own error back as a
/// `Failed` outcome; an output is its JSON line. The CLI's Kafka worker is
/// built on it.
pub async fn evaluate_json(rule: &Rule, route: &RouteBy, chunk: Vec<Input>) -> Vec<Done<String>> {
    evaluate_chunk(rule, route, chunk).await
}

/// Evaluates one chunk: the records that were read, in one call (or one per
/// rule path, by field: see [`Rule::evaluate_batch_on`]).
pub(super) async fn evaluate_chunk<T: Decoded>(rule: &Rule, route: &RouteBy, chunk: Vec<Input>) -> Vec<Done<T>> {
    let mut outcomes: Vec<Option<Outcome<T>>> = (0..chunk.len()).map(|_| None).collect();
    let mut positions = Vec::with_capacity(chunk.len());
    for (pos, input) in chunk.iter().enumerate() {
        match &input.record {
            Ok(_) => positions.push(pos),
            Err(e) => outcomes[pos] = Some(Outcome::Failed(e.duplicate())),
        }
    }
    let records: Vec<&Record> = positions.iter().filter_map(|&p| chunk[p].record.as_ref().ok()).collect();
    match rule.evaluate_batch_iter(route.route(), records.iter().copied()).await {
        Ok(results) => {
            for (&pos, result) in positions.iter().zip(results) {
                outcomes[pos] = Some(match result {
                    Ok(rec) => Outcome::Ok(rec),
                    Err(e @ Error::Unrouted { .. }) => Outcome::Unrouted(e),
                    Err(e) => Outcome::Failed(e),
                });
            }
        }
        // No call could be made (no instance): every record says so.
        Err(e) => {
            for &pos in &positions {
                outcomes[pos] = Some(Outcome::Failed(e.duplicate()));
            }
        }
    }
    chunk
        .into_iter()
        .zip(outcomes)
        .map(|(input, o)| Done {
            input,
            outcome: o.unwrap_or_else(|| Outcome::Failed(Error::Internal("the record was not evaluated".into()))),
            idle: false,
        })
        .collect()
}
