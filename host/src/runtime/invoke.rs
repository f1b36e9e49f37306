//! (route, frame) → output frame: every call of the guest, and the policy
//! of the fast path (fiber-less first, the async path when a lookup must
//! wait or the call runs long, errors mapped and instances dropped).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use wasmtime::Store;
use wasmtime::component::{ComponentExportIndex, InstancePre, TypedFunc};

use super::config::EngineConfig;
use super::engine::Engine;
use super::pool::Pool;
use super::rule::Rule;
use super::store::{MoveToAsync, Shared, StoreState, call_error, new_store};
use crate::error::Limit;
use crate::{Error, Result};

use super::bindings;
use super::bindings::exports::omlet::rule::evaluator as ev;

/// One instance with its store; `C` is how it is called: `bindings::Rule`
/// (async, on a fiber) or [`SyncCalls`].
pub(super) struct Instance<C> {
    pub(super) store: Store<StoreState>,
    pub(super) calls: C,
    /// This instance's place in the engine's budget, given back on drop.
    pub(super) _permit: OwnedSemaphorePermit,
}

/// The evaluator's two exports, and `evaluate-batch-lines` when the
/// component has it, called without a fiber. Their types are checked once,
/// when the instance is made (as owned values, which lower exactly as the
/// borrowed ones each call passes).
pub(super) struct SyncCalls {
    pub(super) evaluate: wasmtime::component::Func,
    pub(super) batch: wasmtime::component::Func,
    pub(super) lines: Option<wasmtime::component::Func>,
}

pub(super) type EvaluateOwned = TypedFunc<(u64, ev::Route, Vec<u8>), (Result<Vec<u8>, ev::EvalError>,)>;
pub(super) type BatchOwned = TypedFunc<(u64, ev::Route, Vec<u8>), (ev::BatchOutput,)>;
pub(super) type LinesOwned = TypedFunc<(u64, ev::Route, Vec<u8>), (BatchLines,)>;

/// What `lines.evaluate-batch-lines` gives (`wit/omlet.wit`). The host's
/// bindings are made from the `rule` world, which leaves that optional
/// export out (components built before it still load), so its result type
/// is declared here; wasmtime checks it against the component's when the
/// instance is made.
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lift)]
#[component(record)]
pub(super) struct BatchLines {
    /// The successful outputs' JSON lines, each ended by a line feed (UTF-8,
    /// checked as it is read).
    pub(super) text: Vec<u8>,
    /// Where each line ends in `text` (past its line feed).
    pub(super) ends: Vec<u32>,
    pub(super) errors: Vec<ev::RecordError>,
}

/// One batch call's outputs: as a frame, or as JSON lines.
pub(super) enum BatchOut {
    Frame(ev::BatchOutput),
    Lines(BatchLines),
}

impl SyncCalls {
    pub(super) fn evaluate(
        &self,
        store: &mut Store<StoreState>,
        generation: u64,
        route: &ev::Route,
        frame: &[u8],
    ) -> wasmtime::Result<Result<Vec<u8>, ev::EvalError>> {
        // SAFETY: `new_sync` checked this function's type with `EvaluateOwned`.
        unsafe { call_frame(self.evaluate, store, generation, route, frame) }
    }

    pub(super) fn batch(
        &self,
        store: &mut Store<StoreState>,
        generation: u64,
        route: &ev::Route,
        frame: &[u8],
    ) -> wasmtime::Result<ev::BatchOutput> {
        // SAFETY: `new_sync` checked this function's type with `BatchOwned`.
        unsafe { call_frame(self.batch, store, generation, route, frame) }
    }

    /// `evaluate-batch-lines` when the component has it, else `evaluate-batch`.
    pub(super) fn batch_lines(
        &self,
        store: &mut Store<StoreState>,
        generation: u64,
        route: &ev::Route,
        frame: &[u8],
    ) -> wasmtime::Result<BatchOut> {
        match self.lines {
            // SAFETY: `new_sync` checked this function's type with `LinesOwned`.
            Some(lines) => Ok(BatchOut::Lines(unsafe { call_frame(lines, store, generation, route, frame) }?)),
            None => Ok(BatchOut::Frame(self.batch(store, generation, route, frame)?)),
        }
    }
}

/// Calls an evaluator export `(generation, route, frame) -> R` without a fiber.
///
/// # Safety
/// `func`'s type must have been checked as `(u64, ev::Route, Vec<u8>) -> (R,)`:
/// those owned parameters lower exactly as the borrowed ones passed here.
pub(super) unsafe fn call_frame<R>(
    func: wasmtime::component::Func,
    store: &mut Store<StoreState>,
    generation: u64,
    route: &ev::Route,
    frame: &[u8],
) -> wasmtime::Result<R>
where
    (R,): wasmtime::component::ComponentNamedList + wasmtime::component::Lift + 'static,
{
    // SAFETY: the caller's promise.
    let f = unsafe { TypedFunc::<(u64, &ev::Route, &[u8]), (R,)>::new_unchecked(func) };
    Ok(f.call(store, (generation, route, frame))?.0)
}

/// What a rule needs to make fiber-less calls: the component pre-linked
/// against the sync imports, its exports, and the idle sync instances.
pub(super) struct SyncPath {
    pub(super) pre: InstancePre<StoreState>,
    pub(super) evaluate: ComponentExportIndex,
    pub(super) batch: ComponentExportIndex,
    /// `lines.evaluate-batch-lines`, which components built before it lack.
    pub(super) lines: Option<ComponentExportIndex>,
    pub(super) idle: Arc<Pool<Instance<SyncCalls>>>,
    /// Calls left to make on the async path after a lookup missed the
    /// shared cache: where misses are common, a fiber-less try that is then
    /// made again would double their cost.
    pub(super) skip: AtomicU32,
}

/// How many calls skip the sync path after one of its lookups missed.
pub(super) const SKIP_AFTER_MISS: u32 = 64;

/// The interface the evaluator's functions are exported under.
pub(super) const EVALUATOR: &str = "omlet:rule/evaluator@0.6.0";

/// The interface of the optional `evaluate-batch-lines`.
pub(super) const LINES: &str = "omlet:rule/lines@0.6.0";

impl Instance<bindings::Rule> {
    pub(super) async fn new(engine: &Engine, pre: &bindings::RulePre<StoreState>, shared: Arc<Shared>) -> Result<Self> {
        let permit = engine.slots.reserve().await;
        let mut store = new_store(engine, shared, false)?;
        let calls = pre.instantiate_async(&mut store).await.map_err(|e| Error::load("instantiate", e))?;
        Ok(Instance { store, calls, _permit: permit })
    }
}

impl Instance<SyncCalls> {
    /// A fiber-less instance, if a permit is free now (`None`: the caller
    /// takes the async path, which waits for one).
    pub(super) fn new_sync(engine: &Engine, path: &SyncPath, shared: Arc<Shared>) -> Option<Result<Self>> {
        let permit = engine.slots.permits.clone().try_acquire_owned().ok()?;
        let mut store = match new_store(engine, shared, true) {
            Ok(store) => store,
            Err(e) => return Some(Err(e)),
        };
        let instance = match path.pre.instantiate(&mut store) {
            Ok(instance) => instance,
            // Instantiating ran past the sync budget (a thread preempted for
            // long, or a slow start): the async path makes the instance.
            Err(e) if e.downcast_ref::<MoveToAsync>().is_some() => return None,
            Err(e) => return Some(Err(Error::load("instantiate", e))),
        };
        Some((|| {
            let typed = |e| Error::load("instantiate", e);
            let evaluate: EvaluateOwned = instance.get_typed_func(&mut store, path.evaluate).map_err(typed)?;
            let batch: BatchOwned = instance.get_typed_func(&mut store, path.batch).map_err(typed)?;
            let lines = match path.lines {
                Some(index) => {
                    let lines: LinesOwned = instance.get_typed_func(&mut store, index).map_err(typed)?;
                    Some(*lines.func())
                }
                None => None,
            };
            let calls = SyncCalls { evaluate: *evaluate.func(), batch: *batch.func(), lines };
            Ok(Instance { store, calls, _permit: permit })
        })())
    }
}

impl<C> Instance<C> {
    /// Resets the per-call state before a call.
    pub(super) fn arm(&mut self, cfg: &EngineConfig, generation: u64) {
        let s = self.store.data_mut();
        s.generation = generation;
        s.limit = None;
        s.call_started = None;
        s.in_host = Duration::ZERO;
        s.would_block = false;
        self.store.set_epoch_deadline(1);
        if let Some(f) = cfg.fuel {
            // Only fails when fuel is off, and it is on when `fuel` is set.
            let _ = self.store.set_fuel(f);
        }
    }
}

impl Rule {
    pub(super) fn generation(&self) -> u64 {
        self.inner.shared.knowledge.as_ref().map(|k| k.generation()).unwrap_or(0)
    }

    /// An instance armed for one call at knowledge `generation`.
    pub(super) async fn checkout(&self, generation: u64) -> Result<Instance<bindings::Rule>> {
        let mut inst = match self.inner.idle.take() {
            Some(i) => i,
            None => Instance::new(&self.inner.engine, &self.inner.pre, self.inner.shared.clone()).await?,
        };
        inst.arm(&self.inner.engine.config, generation);
        Ok(inst)
    }

    pub(super) fn checkin<C: Send>(&self, pool: &Pool<Instance<C>>, inst: Instance<C>) {
        pool.put(inst);
        // Only a call that found no permit waits for a returned instance; while
        // permits are left, waking anyone costs a lock per call for nothing.
        let slots = &self.inner.engine.slots;
        if slots.permits.available_permits() == 0 {
            slots.returned.notify_waiters();
        }
    }

    pub(super) fn check_size(&self, frame: &[u8]) -> Result<()> {
        let max = self.inner.engine.config.max_record_bytes;
        if frame.len() > max {
            return Err(Error::limit(Limit::RecordBytes, format!("the record takes {} bytes, more than {max}", frame.len())));
        }
        Ok(())
    }

    /// A fiber-less call `f` on an instance of the sync path, at the
    /// current knowledge generation. `None` when the call must be made on the
    /// async path instead: the rule has no sync path, no instance can be
    /// made without waiting, a lookup missed the shared cache, or the call
    /// computed past [`SYNC_BUDGET`]. Nothing the call did is kept then.
    pub(super) fn call_sync<R>(
        &self,
        f: impl FnOnce(&SyncCalls, &mut Store<StoreState>, u64) -> wasmtime::Result<R>,
    ) -> Option<Result<R>> {
        let path = self.inner.sync.as_ref()?;
        let make = || Instance::new_sync(&self.inner.engine, path, self.inner.shared.clone());
        self.call_fiberless(&path.idle, &path.skip, make, |calls, store, generation| f(calls, store, generation))
    }

    /// A fiber-less call `f` on an idle instance of `idle`, or a new one
    /// that `make` gives (`None` from it: none can be made without waiting),
    /// at the current knowledge generation; `skip` counts the calls still
    /// to send to the async path after a miss. `None` when the call must be
    /// made on the async path: skipped, no instance, a lookup missed the
    /// shared cache, or the call computed past [`SYNC_BUDGET`]. Nothing the
    /// call did is kept then. Both fiber-less paths (the component's sync
    /// calls and `core_path.rs`) are this, with their own instances.
    pub(super) fn call_fiberless<C: Send, R>(
        &self,
        idle: &Pool<Instance<C>>,
        skip: &AtomicU32,
        make: impl FnOnce() -> Option<Result<Instance<C>>>,
        f: impl FnOnce(&mut C, &mut Store<StoreState>, u64) -> wasmtime::Result<R>,
    ) -> Option<Result<R>> {
        if skip.load(Ordering::Relaxed) > 0
            && skip.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
        {
            return None;
        }
        let generation = self.generation();
        let mut inst = match idle.take() {
            Some(i) => i,
            None => match make()? {
                Ok(i) => i,
                Err(e) => return Some(Err(e)),
            },
        };
        inst.arm(&self.inner.engine.config, generation);
        let out = f(&mut inst.calls, &mut inst.store, generation);
        if inst.store.data().would_block {
            skip.store(SKIP_AFTER_MISS, Ordering::Relaxed);
            // The guest finished normally (the lookup failed as fatal), so the
            // instance is sound; only its answer is dropped.
            if out.is_ok() {
                self.checkin(idle, inst);
            }
            return None;
        }
        match out {
            Ok(r) => {
                self.checkin(idle, inst);
                Some(Ok(r))
            }
            // A stopped or trapped instance is dropped, never reused.
            Err(e) if e.downcast_ref::<MoveToAsync>().is_some() => None,
            Err(e) => Some(Err(call_error(&inst.store, e))),
        }
    }

    /// Whether outputs that are only written out (`stream::run_json`,
    /// `stream::evaluate_json`) come from the guest as JSON lines on the
    /// fiber-less path: the rule has that path, and its component exports
    /// `evaluate-batch-lines`. For tests and diagnosis.
    #[doc(hidden)]
    pub fn guest_renders_lines(&self) -> bool {
        self.inner.sync.as_ref().is_some_and(|p| p.lines.is_some())
    }

    /// How many more calls skip the sync path (0 when it is taken, or absent).
    pub(super) fn sync_skipped(&self) -> u32 {
        self.inner.sync.as_ref().map_or(0, |p| p.skip.load(Ordering::Relaxed))
    }

    /// One encoded record on the async path, on a fiber: its output frame.
    pub(super) async fn evaluate_async(&self, route: ev::Route, input: Vec<u8>) -> Result<Vec<u8>> {
        let generation = self.generation();
        let mut inst = self.checkout(generation).await?;
        let out = inst.calls.omlet_rule_evaluator().call_evaluate(&mut inst.store, generation, &route, &input).await;
        match out {
            Ok(r) => {
                self.checkin(&self.inner.idle, inst);
                own_output(r)
            }
            // A trapped instance is dropped, never reused.
            Err(e) => Err(call_error(&inst.store, e)),
        }
    }

    /// One encoded record on the fiber-less path: its output record; `None`
    /// when the call must be made on the async path (see [`Rule::call_sync`]).
    /// On the core path the output is decoded where the guest wrote it.
    pub(super) fn evaluate_sync(&self, route: &ev::Route, input: &[u8]) -> Option<Result<crate::Record>> {
        // The core path when the rule has it ready; what it cannot answer
        // goes to the async path, as a miss of the sync path's would.
        match self.evaluate_core(route, input, super::output::decode_record) {
            super::core_path::Core::Done(out) => return Some(out.and_then(|o| o.map_err(|e| record_error(0, e))?)),
            super::core_path::Core::Elsewhere => return None,
            super::core_path::Core::NotReady => {}
        }
        let out = self.call_sync(|calls, store, generation| calls.evaluate(store, generation, route, input))?;
        Some(out.and_then(own_output).and_then(|o| super::output::output_record(o.into_boxed_slice())))
    }

    /// One batch call on a frame, for outputs decoded as `T`: the records'
    /// outputs and errors, as the guest gave them. `Ok(Err(_))` when the
    /// guest trapped or reached a limit (the instance is then dropped). When
    /// `T` wants JSON lines they come from the guest where they can: on the
    /// fiber-less path, from a component that has `evaluate-batch-lines`.
    /// Elsewhere the output is `evaluate-batch`'s frame (the async path waits
    /// on lookups, which cost far more than rendering on the host).
    pub(super) async fn call_batch_as<T: crate::runtime::output::Decoded>(
        &self,
        route: &ev::Route,
        frame: &[u8],
    ) -> Result<Result<BatchOut>> {
        let sync = self.call_sync(|calls, store, generation| {
            if T::LINES {
                calls.batch_lines(store, generation, route, frame)
            } else {
                calls.batch(store, generation, route, frame).map(BatchOut::Frame)
            }
        });
        match sync {
            Some(out) => Ok(out),
            None => Ok(self.batch_async(route, frame).await?.map(BatchOut::Frame)),
        }
    }

    /// `evaluate-batch` on the async path, on a fiber.
    async fn batch_async(&self, route: &ev::Route, frame: &[u8]) -> Result<Result<ev::BatchOutput>> {
        let generation = self.generation();
        let mut inst = self.checkout(generation).await?;
        // The bindings take the frame as a `Vec` (a copy, on this path only:
        // the fiber-less one takes a slice).
        let frame = frame.to_vec();
        let out = inst.calls.omlet_rule_evaluator().call_evaluate_batch(&mut inst.store, generation, route, &frame).await;
        match out {
            Ok(out) => {
                self.checkin(&self.inner.idle, inst);
                Ok(Ok(out))
            }
            Err(e) => Ok(Err(call_error(&inst.store, e))),
        }
    }

    /// One `explain` call on the async path: the output frame (or the
    /// record's error), the component's trace as JSON, and which of the
    /// host's layers answered each lookup.
    pub(super) async fn call_explain(&self, route: &ev::Route, input: &Vec<u8>) -> Result<ExplainOut> {
        let generation = self.generation();
        let mut inst = self.checkout(generation).await?;
        inst.store.data_mut().layers = Some(Vec::new());
        let out = inst.calls.omlet_rule_evaluator().call_explain(&mut inst.store, generation, route, input).await;
        let layers = inst.store.data_mut().layers.take().unwrap_or_default();
        match out {
            Ok(e) => {
                self.checkin(&self.inner.idle, inst);
                Ok(ExplainOut { output: own_output(e.output), trace: e.trace, layers })
            }
            Err(e) => Err(call_error(&inst.store, e)),
        }
    }
}

/// What an `explain` call gave (see [`Rule::call_explain`]).
pub(super) struct ExplainOut {
    pub(super) output: Result<Vec<u8>>,
    pub(super) trace: String,
    /// Per lookup: its number in the trace, the layer, the time in µs.
    pub(super) layers: Vec<(u32, &'static str, u64)>,
}

/// The output frame of a one-record call, or its record's error.
fn own_output(out: Result<Vec<u8>, ev::EvalError>) -> Result<Vec<u8>> {
    out.map_err(|e| record_error(0, e))
}

pub(super) fn record_error(index: usize, e: ev::EvalError) -> Error {
    match e.kind {
        ev::ErrorKind::Unrouted => Error::Unrouted { index, message: e.message },
        ev::ErrorKind::Lookup => Error::Lookup { index, message: e.message },
        ev::ErrorKind::Rejected => Error::Rejected { index, message: e.message },
        ev::ErrorKind::Failed => Error::Internal(format!("the guest could not evaluate record {index}: {}", e.message)),
    }
}
