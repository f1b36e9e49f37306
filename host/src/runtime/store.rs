//! One instance's `Store` data: its limits (memory, deadline), the call's
//! state, and how a stopped call becomes an [`Error`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline};

use super::engine::Engine;
use crate::error::Limit;
use crate::knowledge::{BoundStatement, Knowledge};
use crate::{Error, Result};

use super::bindings::omlet::rule::knowledge as wk;

/// What every instance of one rule shares.
pub(crate) struct Shared {
    pub(super) knowledge: Option<Arc<Knowledge>>,
    pub(super) statements: Vec<BoundStatement>,
    /// The intranet networks (`knowledge.intranet-nets`).
    pub(super) nets: Vec<wk::Network>,
}

/// The data of one instance's `Store`.
pub(crate) struct StoreState {
    pub(super) shared: Arc<Shared>,
    /// Most linear memory, in bytes (the engine's `max_memory`).
    pub(super) max_memory: usize,
    /// The limit that stopped the current call, if one did.
    pub(super) limit: Option<Limit>,
    /// When the current call's first epoch tick came (`None` before it: a
    /// call that ends within its first tick never reads the clock), and how
    /// long it has waited for the host since.
    pub(super) call_started: Option<Instant>,
    pub(super) in_host: Duration,
    pub(super) call_deadline: Duration,
    /// The knowledge generation of the current call: its lookups use it.
    pub(super) generation: u64,
    /// Set by a lookup of a fiber-less call that the shared cache could not
    /// answer: the call's result is dropped and the call made again on the
    /// async path.
    pub(super) would_block: bool,
    /// Set during [`Rule::explain`]: each lookup's statement, the layer
    /// that answered it and its microseconds, in order.
    pub(super) layers: Option<Vec<(u32, &'static str, u64)>>,
    /// A core instance's memory, for its imports (`core_path.rs`).
    pub(super) memory: Option<wasmtime::Memory>,
    /// A core import's answer that did not fit the guest's buffer, until
    /// the guest's `take`.
    pub(super) held: Vec<u8>,
}

impl wasmtime::ResourceLimiter for StoreState {
    fn memory_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = desired <= self.max_memory && maximum.is_none_or(|m| desired <= m);
        if !allowed {
            self.limit = Some(Limit::Memory);
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limit = Some(Limit::Memory);
        Ok(())
    }

    fn table_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(maximum.is_none_or(|m| desired <= m))
    }
}

/// The error a call deadline raises inside wasmtime; found again by downcast.
#[derive(Debug)]
pub(super) struct DeadlinePassed;

/// The error that stops a fiber-less call that computed for longer than
/// [`SYNC_BUDGET`]: it is made again on the async path, which can yield.
#[derive(Debug)]
pub(super) struct MoveToAsync;

impl std::fmt::Display for MoveToAsync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call computes for long; it moves to the async path")
    }
}

impl std::error::Error for MoveToAsync {}

/// How long a fiber-less call may compute, counted from the first epoch tick
/// it sees (so up to about 40 ms in all), before it is stopped and made again
/// on the async path (which yields to the runtime every tick).
pub(super) const SYNC_BUDGET: Duration = Duration::from_millis(20);

impl std::fmt::Display for DeadlinePassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call deadline passed")
    }
}

impl std::error::Error for DeadlinePassed {}

/// A store for one instance, with the engine's limits; `sync` stores stop
/// a call that computes past [`SYNC_BUDGET`] instead of yielding.
pub(super) fn new_store(engine: &Engine, shared: Arc<Shared>, sync: bool) -> Result<Store<StoreState>> {
    let cfg = &engine.config;
    let state = StoreState {
        shared,
        max_memory: cfg.max_memory,
        limit: None,
        call_started: None,
        in_host: Duration::ZERO,
        call_deadline: cfg.call_deadline,
        generation: 0,
        would_block: false,
        layers: None,
        memory: None,
        held: Vec::new(),
    };
    let mut store = Store::new(&engine.inner, state);
    store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
    // Checked once a tick while the guest computes: time waiting for the
    // host does not count against the deadline, and a long computation
    // yields to the runtime between ticks instead of holding its thread
    // (a fiber-less call cannot yield: past its budget it is stopped, to be
    // made again on the async path).
    //
    // A call's time is counted from its first tick, not from its start: most
    // calls end within a tick, and reading the clock on every call cost ~3%
    // of a one-record call. A deadline therefore fires up to one tick late.
    store.epoch_deadline_callback(move |mut ctx| {
        let s = ctx.data_mut();
        let started = match s.call_started {
            Some(t) => t,
            // The call's first tick: its time counts from here.
            None => {
                s.in_host = Duration::ZERO;
                *s.call_started.insert(Instant::now())
            }
        };
        let computing = started.elapsed().saturating_sub(s.in_host);
        if computing > s.call_deadline {
            return Err(wasmtime::Error::new(DeadlinePassed));
        }
        if !sync {
            return Ok(UpdateDeadline::Yield(1));
        }
        if computing > SYNC_BUDGET {
            return Err(wasmtime::Error::new(MoveToAsync));
        }
        Ok(UpdateDeadline::Continue(1))
    });
    store.set_epoch_deadline(1);
    if let Some(f) = cfg.fuel {
        store.set_fuel(f).map_err(|e| Error::load("fuel", e))?;
    }
    Ok(store)
}

/// What a failed guest call means: a limit it reached, or a trap.
pub(super) fn call_error(store: &Store<StoreState>, e: wasmtime::Error) -> Error {
    if e.downcast_ref::<DeadlinePassed>().is_some() {
        return Error::limit(Limit::Deadline, format!("the guest computed for more than {:?}", store.data().call_deadline));
    }
    let code = e.downcast_ref::<wasmtime::Trap>().copied();
    if code == Some(wasmtime::Trap::OutOfFuel) {
        return Error::limit(Limit::Fuel, "the call ran out of fuel".to_string());
    }
    if let Some(limit) = store.data().limit {
        return Error::limit(limit, format!("the guest needed more than {} bytes of memory", store.data().max_memory));
    }
    Error::Trap { code, message: format!("{e:#}") }
}
