//! The public [`Rule`]: records in, records out.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use omlet_lang::trace::Trace;

use super::engine::Engine;
use super::gather::{Step, wait_joined};
use super::info::{Explained, RuleInfo, merge_layers};
use super::invoke::{Instance, SyncPath};
use super::output::{Decoded, decode_output, output_record};
use super::pool::Pool;
use super::store::{Shared, StoreState};
use super::{Route, block_on, field_path, wit_route};
use crate::coalesce::Coalescer;
use crate::record::Record;
use crate::record::frame;
use crate::{Error, Result};

use super::bindings;
use super::bindings::exports::omlet::rule::evaluator as ev;

/// A loaded rule, ready to evaluate records. `Clone` is cheap (an `Arc`
/// inside): clones share the compiled component and its instances, and
/// calls from several tasks run on separate instances.
///
/// A call that traps or reaches a limit fails with [`Error::Trap`] or
/// [`Error::Limit`]; its instance is dropped (never reused) and the rule goes
/// on with fresh ones. In a batch, such a failure is retried record by
/// record, so only the records that fail on their own get the error.
#[derive(Clone)]
pub struct Rule {
    pub(super) inner: Arc<RuleInner>,
}

pub(super) struct RuleInner {
    pub(super) engine: Engine,
    pub(super) pre: bindings::RulePre<StoreState>,
    pub(super) shared: Arc<Shared>,
    pub(super) info: RuleInfo,
    pub(super) idle: Arc<Pool<Instance<bindings::Rule>>>,
    /// The fiber-less path, for rules that can take it (see `Engine::sync_path`).
    pub(super) sync: Option<SyncPath>,
    /// The core path of one-record calls, once compiled (`core_path.rs`).
    pub(super) core: super::core_path::CoreSlot,
    /// Where one-record calls are gathered to be coalesced (with a sync
    /// path, and when the engine's `coalesce` is on).
    pub(super) coalescer: Option<Coalescer<ev::Route>>,
}

impl Rule {
    /// What the component holds, read once at load.
    pub fn info(&self) -> &RuleInfo {
        &self.inner.info
    }

    /// Evaluates one record with the rule's only model (see
    /// [`Rule::evaluate_on`] for rule sets).
    pub async fn evaluate(&self, record: &Record) -> Result<Record> {
        self.evaluate_on(Route::Only, record).await
    }

    /// Evaluates one record with the model `route` names. A route that names
    /// no model gives [`Error::Unrouted`].
    pub async fn evaluate_on(&self, route: Route<'_>, record: &Record) -> Result<Record> {
        // By field: the path it holds, on a boxed call of its own, so that
        // the common call's future does not grow (see `step`).
        if let Route::Field(_) = route {
            let route = route.of(record)?;
            return Box::pin(self.evaluate_on(route, record)).await;
        }
        // Coalesce only calls that will not wait for the host: while the sync
        // path is skipped, lookups are missing the caches, and coalesced
        // records would make their lookups one after another. Nor once the
        // rule's core path is ready: a core call of one record costs less
        // than gathering it into a batch (pure rule at c = 4 to 64: 2.2-3.5 M
        // calls/s alone, 1.6-2.4 M coalesced, docs/decisions/0016-coalescing.md).
        if !self.core_ready()
            && let Some(co) = self.inner.coalescer.as_ref().filter(|_| self.sync_skipped() == 0)
        {
            match self.step(co, route, record) {
                Step::Alone => {}
                Step::Joined(joined) => {
                    self.count_toward_core();
                    if let Some(result) = wait_joined(joined).await {
                        return result;
                    }
                }
                Step::Open(gathered) => {
                    self.count_toward_core();
                    return gathered.await;
                }
            }
        }
        // One await of this path only: each would take room in the future.
        self.evaluate_alone(wit_route(route), record).await
    }

    /// How many records were evaluated in another caller's call (coalesced).
    #[doc(hidden)]
    pub fn coalesced_records(&self) -> u64 {
        self.inner.coalescer.as_ref().map_or(0, |c| c.coalesced.load(Ordering::Relaxed))
    }

    /// Evaluates one record as [`Rule::evaluate`] does, with a trace of how
    /// (see [`Explained`]): for diagnosis (one record, on the async path,
    /// never coalesced), not for throughput.
    pub async fn explain(&self, record: &Record) -> Result<Explained> {
        self.explain_on(Route::Only, record).await
    }

    /// [`Rule::explain`] with the model `route` names. The trace comes from
    /// the component's `explain` export, so a component built by any
    /// `omlet build` of this WIT version gives one under any host; this host
    /// adds which of its layers answered each lookup, and how long it took.
    /// Fails as `evaluate` fails for what stops a call (a trap, a limit);
    /// the record's own errors (unrouted, a fatal lookup, `fail`) are in
    /// [`Explained::output`], with the trace up to them.
    pub async fn explain_on(&self, route: Route<'_>, record: &Record) -> Result<Explained> {
        let route = match route.of(record) {
            Ok(r) => wit_route(r),
            Err(e) => return Ok(Explained { output: Err(e), trace: Trace::default() }),
        };
        let input = frame::with_record_frame(record, |f| self.check_size(f).map(|()| f.to_vec()))?;
        let out = self.call_explain(&route, &input).await?;
        let mut trace: Trace =
            serde_json::from_str(&out.trace).map_err(|e| Error::Internal(format!("the component's trace does not read: {e}")))?;
        merge_layers(&mut trace, out.layers);
        Ok(Explained { output: out.output.and_then(|frame| output_record(frame.into_boxed_slice())), trace })
    }

    /// Evaluates records in one guest call with the rule's only model. Each
    /// input gets its own result, in order.
    pub async fn evaluate_batch(&self, records: &[Record]) -> Result<Vec<Result<Record>>> {
        self.evaluate_batch_on(Route::Only, records).await
    }

    /// Evaluates records in one guest call, all with the model `route` names;
    /// with [`Route::Field`], one call per rule path the records hold, each
    /// record's result in its place (a call that cannot be made at all is
    /// then the error of its group's records).
    pub async fn evaluate_batch_on(&self, route: Route<'_>, records: &[Record]) -> Result<Vec<Result<Record>>> {
        self.evaluate_batch_iter(route, records.iter()).await
    }

    /// [`Rule::evaluate_batch_on`] over borrowed records, wherever they live.
    ///
    /// The outer `Err` is kept for failures that concern no record (no
    /// instance could be made); a trap or a limit in the guest becomes each
    /// affected record's own error.
    ///
    /// Each output comes decoded as `T`: a [`Record`], or its JSON line
    /// (`String`, see [`Decoded`]).
    pub(crate) async fn evaluate_batch_iter<'r, T: Decoded>(
        &self,
        route: Route<'_>,
        records: impl ExactSizeIterator<Item = &'r Record> + Clone,
    ) -> Result<Vec<Result<T>>> {
        let Route::Field(name) = route else {
            return self.batch_iter(&wit_route(route), records).await;
        };
        // By field: one call per rule path, the results put back in input
        // order. A call that cannot be made at all fails its group's records.
        let records: Vec<&Record> = records.collect();
        let mut out: Vec<Option<Result<T>>> = (0..records.len()).map(|_| None).collect();
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, r) in records.iter().enumerate() {
            match field_path(r, name) {
                Ok(p) => match groups.iter_mut().find(|(q, _)| *q == p) {
                    Some((_, v)) => v.push(i),
                    None => groups.push((p, vec![i])),
                },
                Err(message) => out[i] = Some(Err(Error::Unrouted { index: i, message })),
            }
        }
        for (path, indices) in groups {
            match self.batch_iter(&ev::Route::Path(path.to_string()), indices.iter().map(|&i| records[i])).await {
                Ok(results) => {
                    for (&i, r) in indices.iter().zip(results) {
                        out[i] = Some(r.map_err(|e| e.at_index(i)));
                    }
                }
                Err(e) => {
                    for &i in &indices {
                        out[i] = Some(Err(e.duplicate()));
                    }
                }
            }
        }
        Ok(out.into_iter().map(|r| r.unwrap_or_else(|| Err(Error::Internal("a record got no result".into())))).collect())
    }

    /// [`Rule::evaluate_batch_iter`] on a WIT route.
    pub(super) async fn batch_iter<'r, T: Decoded>(
        &self,
        route: &ev::Route,
        records: impl ExactSizeIterator<Item = &'r Record> + Clone,
    ) -> Result<Vec<Result<T>>> {
        let n = records.len();
        if let Some(frame) = self.whole_frame(records.clone()) {
            match self.call_batch_as::<T>(route, frame.bytes()).await?.and_then(|out| decode_output(n, out, |i| i)) {
                Ok(results) => return Ok(results),
                // Retried one by one below: only the records that fail alone fail.
                Err(e) => tracing::debug!("omlet: a batch of {n} failed ({e}); evaluating its records one by one"),
            }
        }
        let mut results = Vec::with_capacity(n);
        for (index, r) in records.enumerate() {
            let one = frame::encode_record(r);
            let result = match self.check_size(&one) {
                Err(e) => Err(e),
                Ok(()) => match self.call_batch_as::<T>(route, &one).await?.and_then(|out| decode_output(1, out, |i| i)) {
                    Ok(mut v) => v.pop().unwrap_or_else(|| Err(Error::Internal("a batch of one gave no result".into()))),
                    Err(e) => Err(e),
                },
            };
            results.push(result.map_err(|e| e.at_index(index)));
        }
        Ok(results)
    }

    /// [`Rule::evaluate`] for programs without an async runtime.
    pub fn evaluate_blocking(&self, record: &Record) -> Result<Record> {
        self.evaluate_on_blocking(Route::Only, record)
    }

    /// [`Rule::evaluate_on`] for programs without an async runtime.
    pub fn evaluate_on_blocking(&self, route: Route<'_>, record: &Record) -> Result<Record> {
        // Never coalesced: a thread waiting for another's batch call parks in
        // the kernel, which costs more than the batch saves (see
        // `EngineConfig::coalesce`). A call the sync path answers needs no
        // runtime at all.
        let route = wit_route(route.of(record)?);
        match self.alone_sync(&route, record) {
            Alone::Done(result) => result,
            Alone::Async(input) => block_on(self.evaluate_async_record(route, input)),
        }
    }

    /// [`Rule::evaluate_batch`] for programs without an async runtime.
    pub fn evaluate_batch_blocking(&self, records: &[Record]) -> Result<Vec<Result<Record>>> {
        block_on(self.evaluate_batch(records))
    }

    /// [`Rule::evaluate_batch_on`] for programs without an async runtime.
    pub fn evaluate_batch_on_blocking(&self, route: Route<'_>, records: &[Record]) -> Result<Vec<Result<Record>>> {
        block_on(self.evaluate_batch_on(route, records))
    }

    /// One record in its own call.
    pub(super) async fn evaluate_alone(&self, route: ev::Route, record: &Record) -> Result<Record> {
        // Matched before the await, so that the future keeps no room for it.
        let input = match self.alone_sync(&route, record) {
            Alone::Done(result) => return result,
            Alone::Async(input) => input,
        };
        // The sync path could not answer: the async one, on a fiber (boxed:
        // see `evaluate_on`).
        Box::pin(self.evaluate_async_record(route, input)).await
    }

    /// One encoded record on the async path, decoded.
    pub(super) async fn evaluate_async_record(&self, route: ev::Route, input: Vec<u8>) -> Result<Record> {
        output_record(self.evaluate_async(route, input).await?.into_boxed_slice())
    }

    /// A one-record call on the fiber-less path, its frame written in the
    /// thread's buffer (no allocation); the frame as its own bytes when the
    /// call must be made on the async path.
    pub(super) fn alone_sync(&self, route: &ev::Route, record: &Record) -> Alone {
        frame::with_record_frame(record, |input| {
            if let Err(e) = self.check_size(input) {
                return Alone::Done(Err(e));
            }
            match self.evaluate_sync(route, input) {
                Some(out) => Alone::Done(out),
                None => Alone::Async(input.to_vec()),
            }
        })
    }

    /// Several records as one frame, when it is within the record limit (so
    /// that it holds no record over it); `None` for one record, or a frame
    /// too large, whose records go one by one.
    pub(super) fn whole_frame<'r>(
        &self,
        records: impl ExactSizeIterator<Item = &'r Record> + Clone,
    ) -> Option<frame::BatchFrame> {
        if records.len() < 2 {
            return None;
        }
        let frame = frame::encode_frame(records);
        (frame.bytes().len() <= self.inner.engine.config.max_record_bytes).then_some(frame)
    }
}

/// Where a one-record call stands after the fiber-less path.
pub(super) enum Alone {
    /// Answered (or refused: a record over the size limit).
    Done(Result<Record>),
    /// To be made on the async path, with this frame.
    Async(Vec<u8>),
}
