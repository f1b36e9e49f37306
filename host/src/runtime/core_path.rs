//! One-record calls through the core ABI (docs/abi.md): the shorter path.
//!
//! Why: a component call lowers and lifts its arguments through the
//! canonical ABI (`cabi_realloc` for the frame in, a lift of the result
//! out, a post-return): about 0.17 µs of the pure rule's 0.69 µs call,
//! before any evaluation. Through the core ABI the host writes the frame
//! straight into a guest buffer whose address it keeps, makes one core call,
//! and reads the answer where the return area points: the whole call, the
//! guest's evaluation included, measured 0.31 µs against the component echo
//! call's 0.27 µs alone (`baseline/core_abi_pure_call`, BENCHMARKS.md).
//!
//! What it replaces: the fiber-less component call (`invoke.rs`,
//! `SyncCalls::evaluate`) for one-record calls of rules loaded from their
//! program (sources, or a core module); batches, explains and the async
//! path stay on the component.
//!
//! Cost: a second module of the same guest and program, compiled on a
//! thread of its own once the rule has made [`CORE_AFTER_CALLS`] one-record
//! calls (a rule given batches, or a few records, never compiles it; until
//! it is ready, calls take the component), and its own idle instances,
//! within the engine's instance budget. The module's imports are the sync path's: a lookup the shared
//! cache cannot answer at once moves the call to the async path, as there.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use omlet_lang::Cell;
use omlet_lang::cell::{push_cell, read_cell};
use wasmtime::{Caller, InstancePre, Linker, Memory, Module, Store, TypedFunc};

use super::bindings::exports::omlet::rule::evaluator as ev;
use super::engine::Engine;
use super::imports::resolve;
use super::invoke::Instance;
use super::pool::{Idle, Pool};
use super::rule::Rule;
use super::store::{MoveToAsync, Shared, StoreState, new_store};
use crate::{Error, Result};

/// The import module of the core ABI.
const IMPORTS: &str = "omlet:core@1";

/// One-record calls a rule makes on the component before its core path is
/// compiled: a compilation costs about a second of one core, which a rule
/// that evaluates a handful of records (a test, `omlet test`'s cases) would
/// never win back.
pub const CORE_AFTER_CALLS: u32 = 1024;

/// A rule's core path: not yet asked for, being compiled, ready, or not to
/// be had (no program to build it from, or it failed to build).
pub(super) struct CoreSlot {
    /// The compiled program; `None` when the rule was loaded from a
    /// component's bytes (its program is not at hand).
    ir: Option<Arc<[u8]>>,
    /// One-record calls made so far, up to [`CORE_AFTER_CALLS`].
    calls: AtomicU32,
    started: AtomicBool,
    path: OnceLock<Option<CorePath>>,
}

impl CoreSlot {
    pub(super) fn new(ir: Option<&[u8]>) -> CoreSlot {
        CoreSlot { ir: ir.map(Arc::from), calls: AtomicU32::new(0), started: AtomicBool::new(false), path: OnceLock::new() }
    }

    /// A slot that never has a path (rules that cannot take the fiber-less path).
    pub(super) fn none() -> CoreSlot {
        CoreSlot::new(None)
    }
}

/// Where a one-record call stands after the core path.
pub(super) enum Core<T> {
    /// The rule has no core path yet (or none at all): take the component's
    /// fiber-less path.
    NotReady,
    /// Answered: the output (as the caller read it from the output frame)
    /// or the record's error, or the call's own failure (a trap, a limit).
    Done(Result<std::result::Result<T, ev::EvalError>>),
    /// To be made on the async path: a lookup missed the shared cache, no
    /// instance could be made without waiting, or the call ran long.
    Elsewhere,
}

/// What a rule needs to make core calls: the module pre-linked against the
/// core imports, and its idle instances.
pub(super) struct CorePath {
    pre: InstancePre<StoreState>,
    /// The calls are boxed so that an instance moves in and out of the pool
    /// as three words: moved whole, it was two `memcpy` calls a call (~3 %).
    idle: Arc<Pool<Instance<Box<CoreCalls>>>>,
    /// Calls left to make on the async path after a lookup missed the
    /// shared cache (as `SyncPath::skip`).
    skip: AtomicU32,
    /// Calls this path answered (for tests and diagnosis).
    answered: std::sync::atomic::AtomicU64,
}

/// One core instance's exports, the input buffer it gave, and its return area.
pub(super) struct CoreCalls {
    memory: Memory,
    evaluate: TypedFunc<(u64, u32, u32, u32), ()>,
    input: TypedFunc<u32, u32>,
    /// The input buffer's address and the bytes the guest promised there.
    buffer: (u32, u32),
    ret: u32,
}

/// The core imports as plain functions: the sync path's answers, in the
/// core ABI's bytes.
pub(super) fn core_imports(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<StoreState>> {
    let mut linker: Linker<StoreState> = Linker::new(engine);
    linker.func_wrap(
        IMPORTS,
        "query",
        |mut c: Caller<'_, StoreState>, statement: u32, params: u32, len: u32, buf: u32, cap: u32| {
            let memory = memory_of(&c)?;
            let params = decode_cells(guest_bytes(memory.data(&c), params, len)?)
                .ok_or_else(|| wasmtime::format_err!("the guest's lookup parameters do not read"))?;
            let answer = query(c.data_mut(), statement, &params);
            deliver(&mut c, memory, answer, buf, cap)
        },
    )?;
    linker.func_wrap(IMPORTS, "columns", |mut c: Caller<'_, StoreState>, statement: u32, buf: u32, cap: u32| {
        let memory = memory_of(&c)?;
        let answer = match super::imports::columns(&c.data().shared, statement) {
            Ok(names) => {
                let mut a = vec![0u8];
                a.extend_from_slice(&(names.len() as u32).to_le_bytes());
                for n in &names {
                    a.extend_from_slice(&(n.len() as u32).to_le_bytes());
                    a.extend_from_slice(n.as_bytes());
                }
                a
            }
            Err(e) => error_answer(&e.message, false),
        };
        deliver(&mut c, memory, answer, buf, cap)
    })?;
    linker.func_wrap(IMPORTS, "intranet_nets", |mut c: Caller<'_, StoreState>, buf: u32, cap: u32| {
        let memory = memory_of(&c)?;
        let nets = &c.data().shared.nets;
        let mut a = (nets.len() as u32).to_le_bytes().to_vec();
        for n in nets {
            a.extend_from_slice(&n.high.to_le_bytes());
            a.extend_from_slice(&n.low.to_le_bytes());
            a.push(n.prefix);
        }
        deliver(&mut c, memory, a, buf, cap)
    })?;
    linker.func_wrap(IMPORTS, "take", |mut c: Caller<'_, StoreState>, buf: u32, len: u32| {
        let memory = memory_of(&c)?;
        let held = std::mem::take(&mut c.data_mut().held);
        if held.len() != len as usize {
            return Err(wasmtime::format_err!("`take` asked for {len} bytes of an answer of {}", held.len()));
        }
        guest_bytes_mut(memory.data_mut(&mut c), buf, len)?.copy_from_slice(&held);
        Ok(())
    })?;
    linker.func_wrap(IMPORTS, "now", |mut c: Caller<'_, StoreState>, out: u32| {
        let memory = memory_of(&c)?;
        let (nanos, offset) = crate::clock::now();
        let mut b = [0u8; 12];
        b[..8].copy_from_slice(&nanos.to_le_bytes());
        b[8..].copy_from_slice(&offset.to_le_bytes());
        guest_bytes_mut(memory.data_mut(&mut c), out, 12)?.copy_from_slice(&b);
        Ok(())
    })?;
    // The guest's yield point: wasmtime's epochs stop a call here, so tick
    // only answers the largest budget (this guest has no yield points at
    // its loops; it calls tick once a batch call).
    linker.func_wrap(IMPORTS, "tick", |_: Caller<'_, StoreState>| i32::MAX as u32)?;
    Ok(linker)
}

fn memory_of(c: &Caller<'_, StoreState>) -> wasmtime::Result<Memory> {
    c.data().memory.ok_or_else(|| wasmtime::format_err!("an import was called before the instance was ready"))
}

/// `len` bytes of guest memory at `at`, or a trap when they are not all in it.
fn guest_bytes(mem: &[u8], at: u32, len: u32) -> wasmtime::Result<&[u8]> {
    mem.get(at as usize..at as usize + len as usize)
        .ok_or_else(|| wasmtime::format_err!("{len} bytes at {at} lie outside the guest's memory"))
}

fn guest_bytes_mut(mem: &mut [u8], at: u32, len: u32) -> wasmtime::Result<&mut [u8]> {
    mem.get_mut(at as usize..at as usize + len as usize)
        .ok_or_else(|| wasmtime::format_err!("{len} bytes at {at} lie outside the guest's memory"))
}

/// Writes `answer` at `buf` when it fits in `cap` bytes, else holds it for
/// `take`: its length.
fn deliver(c: &mut Caller<'_, StoreState>, memory: Memory, answer: Vec<u8>, buf: u32, cap: u32) -> wasmtime::Result<u32> {
    let n = answer.len() as u32;
    if n <= cap {
        guest_bytes_mut(memory.data_mut(&mut *c), buf, n)?.copy_from_slice(&answer);
    } else {
        c.data_mut().held = answer;
    }
    Ok(n)
}

/// A lookup on the sync path, as the core ABI's answer bytes: from the
/// shared cache, or marked `would_block` (a fatal error, so that the guest
/// stops early; the call is made again on the async path).
fn query(s: &mut StoreState, statement: u32, params: &[Cell]) -> Vec<u8> {
    let shared = s.shared.clone();
    let (k, stmt) = match resolve(&shared, statement) {
        Ok(found) => found,
        Err(e) => return error_answer(&e.message, false),
    };
    match k.query_cached(s.generation, stmt, params) {
        Some(row) => {
            let cacheable = super::imports::guest_may_keep(k, &row);
            match row {
                Some(cells) => {
                    let mut a = vec![0u8, u8::from(cacheable)];
                    a.extend_from_slice(&(cells.len() as u32).to_le_bytes());
                    for c in &cells {
                        push_cell(&mut a, c);
                    }
                    a
                }
                None => vec![1u8, u8::from(cacheable)],
            }
        }
        None => {
            s.would_block = true;
            error_answer("not cached", true)
        }
    }
}

/// An error answer (code 3, failed; or 1, unavailable, for a would-block).
fn error_answer(message: &str, fatal: bool) -> Vec<u8> {
    let mut a = vec![2u8, if fatal { 1 } else { 3 }, u8::from(fatal)];
    a.extend_from_slice(&(message.len() as u32).to_le_bytes());
    a.extend_from_slice(message.as_bytes());
    a
}

/// The guest's parameter cells (`u32 count | cells`), or `None` when they
/// do not read.
fn decode_cells(b: &[u8]) -> Option<Vec<Cell>> {
    let (count, mut b) = b.split_at_checked(4)?;
    let n = u32::from_le_bytes(count.try_into().ok()?) as usize;
    // At most one cell per byte left: a bound on what a bad count reserves.
    let mut cells = Vec::with_capacity(n.min(b.len()));
    for _ in 0..n {
        cells.push(read_cell(&mut b)?);
    }
    b.is_empty().then_some(cells)
}

impl CoreCalls {
    /// Evaluates the one record of `frame` on `route` (one `omlet_evaluate`
    /// call): its output frame, read by `output` where it lies in the
    /// guest's memory (no copy of it is made), or the record's error as the
    /// guest gave it.
    fn evaluate<T>(
        &mut self,
        store: &mut Store<StoreState>,
        generation: u64,
        route: &ev::Route,
        frame: &[u8],
        output: impl FnOnce(&[u8]) -> T,
    ) -> wasmtime::Result<std::result::Result<T, ev::EvalError>> {
        let (kind, text) = match route {
            ev::Route::Only => (0, ""),
            ev::Route::Path(p) => (1, p.as_str()),
            ev::Route::Model(m) => (2, m.as_str()),
        };
        let n = (text.len() + frame.len()) as u32;
        if n > self.buffer.1 {
            let at = self.input.call(&mut *store, n)?;
            if at == 0 {
                return Err(wasmtime::format_err!("the guest could not make room for a frame of {n} bytes"));
            }
            self.buffer = (at, n);
        }
        let input = guest_bytes_mut(self.memory.data_mut(&mut *store), self.buffer.0, n)?;
        input[..text.len()].copy_from_slice(text.as_bytes());
        input[text.len()..].copy_from_slice(frame);
        self.evaluate.call(&mut *store, (generation, kind, text.len() as u32, frame.len() as u32))?;
        let data = self.memory.data(&*store);
        let ret = guest_bytes(data, self.ret, 12)?;
        let word = |i: usize| u32::from_le_bytes([ret[i], ret[i + 1], ret[i + 2], ret[i + 3]]);
        let (status, ptr, len) = (word(0), word(4), word(8));
        let bytes = guest_bytes(data, ptr, len)?;
        let kind = match status {
            0 => return Ok(Ok(output(bytes))),
            1 => ev::ErrorKind::Unrouted,
            2 => ev::ErrorKind::Lookup,
            3 => ev::ErrorKind::Failed,
            4 => ev::ErrorKind::Rejected,
            other => return Err(wasmtime::format_err!("the guest answered with status {other}")),
        };
        Ok(Err(ev::EvalError { kind, message: String::from_utf8_lossy(bytes).into_owned() }))
    }
}

impl Instance<Box<CoreCalls>> {
    /// A core instance, if a permit is free now (`None`: the caller takes
    /// another path).
    fn new_core(engine: &Engine, path: &CorePath, shared: Arc<Shared>) -> Option<Result<Self>> {
        let permit = engine.slots.permits.clone().try_acquire_owned().ok()?;
        let mut store = match new_store(engine, shared, true) {
            Ok(store) => store,
            Err(e) => return Some(Err(e)),
        };
        let instance = match path.pre.instantiate(&mut store) {
            Ok(instance) => instance,
            Err(e) if e.downcast_ref::<MoveToAsync>().is_some() => return None,
            Err(e) => return Some(Err(Error::load("instantiate", e))),
        };
        Some((|| {
            let typed = |e| Error::load("instantiate", e);
            let memory = instance
                .get_memory(&mut store, "memory")
                .ok_or_else(|| Error::load("instantiate", anyhow::anyhow!("the core module exports no memory")))?;
            store.data_mut().memory = Some(memory);
            let evaluate = instance.get_typed_func(&mut store, "omlet_evaluate").map_err(typed)?;
            let input = instance.get_typed_func(&mut store, "omlet_input").map_err(typed)?;
            let ret = instance
                .get_typed_func::<(), u32>(&mut store, "omlet_return_area")
                .and_then(|f| f.call(&mut store, ()))
                .map_err(typed)?;
            Ok(Instance { store, calls: Box::new(CoreCalls { memory, evaluate, input, buffer: (0, 0), ret }), _permit: permit })
        })())
    }
}

impl Engine {
    /// Compiles the core ABI guest with `ir` in it and links it: the core
    /// path of a rule whose instances share `shared`.
    fn core_path(&self, ir: &[u8]) -> Result<CorePath> {
        let module_bytes = crate::build::splice_ir(&crate::guest::core_abi_module()?, ir)?;
        let module = Module::new(&self.inner, &module_bytes).map_err(|e| Error::load("core module", e))?;
        let pre = self.core_linker.instantiate_pre(&module).map_err(|e| Error::load("core module", e))?;
        Ok(CorePath { pre, idle: Arc::new(Pool::new(None)), skip: AtomicU32::new(0), answered: Default::default() })
    }
}

impl Rule {
    /// The rule's core path when it is ready; the call that brings the
    /// rule's one-record calls to [`CORE_AFTER_CALLS`] asks for it to be
    /// compiled, on a thread of its own.
    fn core(&self) -> Option<&CorePath> {
        if let Some(path) = self.inner.core.path.get() {
            return path.as_ref();
        }
        self.count_toward_core();
        None
    }

    /// Whether the rule's one-record calls take the core path now (without
    /// counting a call, see [`Rule::count_toward_core`]).
    pub(super) fn core_ready(&self) -> bool {
        matches!(self.inner.core.path.get(), Some(Some(_)))
    }

    /// Counts one one-record call toward [`CORE_AFTER_CALLS`], and asks for
    /// the core path once they are made: calls that are coalesced count as
    /// well as calls made alone.
    pub(super) fn count_toward_core(&self) {
        let slot = &self.inner.core;
        if slot.ir.is_none() || slot.path.get().is_some() {
            return;
        }
        if slot.calls.load(Ordering::Relaxed) < CORE_AFTER_CALLS {
            slot.calls.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.start_core();
    }

    /// Starts compiling the core path, once.
    fn start_core(&self) {
        let slot = &self.inner.core;
        let Some(ir) = slot.ir.clone() else { return };
        if !slot.started.swap(true, Ordering::AcqRel) {
            let rule = self.clone();
            let spawned = std::thread::Builder::new().name("omlet-core-compile".into()).spawn(move || {
                let path = match rule.inner.engine.core_path(&ir) {
                    Ok(path) => {
                        rule.inner.engine.slots.register(Arc::downgrade(&path.idle) as std::sync::Weak<dyn Idle>);
                        Some(path)
                    }
                    Err(e) => {
                        tracing::debug!(target: "omlet::runtime", "no core path: {e}");
                        None
                    }
                };
                let _ = rule.inner.core.path.set(path);
            });
            if spawned.is_err() {
                let _ = slot.path.set(None);
            }
        }
    }

    /// Waits until the core path is ready or known to be absent, asking for
    /// it first: for benches and tests that measure it. Whether it is there.
    #[doc(hidden)]
    pub fn wait_core_path(&self) -> bool {
        self.start_core();
        if self.inner.core.ir.is_none() {
            return false;
        }
        loop {
            if let Some(path) = self.inner.core.path.get() {
                return path.is_some();
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// How many one-record calls the core path answered.
    #[doc(hidden)]
    pub fn core_path_calls(&self) -> u64 {
        self.inner.core.path.get().and_then(Option::as_ref).map_or(0, |p| p.answered.load(Ordering::Relaxed))
    }

    /// A one-record call on the core path (see [`Core`]).
    pub(super) fn evaluate_core<T>(&self, route: &ev::Route, input: &[u8], output: impl FnOnce(&[u8]) -> T) -> Core<T> {
        let Some(path) = self.core() else { return Core::NotReady };
        let make = || Instance::new_core(&self.inner.engine, path, self.inner.shared.clone());
        let call = |calls: &mut Box<CoreCalls>, store: &mut Store<StoreState>, generation| {
            calls.evaluate(store, generation, route, input, output)
        };
        match self.call_fiberless(&path.idle, &path.skip, make, call) {
            Some(out) => {
                path.answered.fetch_add(1, Ordering::Relaxed);
                Core::Done(out)
            }
            None => Core::Elsewhere,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_read_back_as_written_and_damaged_ones_do_not() {
        let cells = vec![Cell::Null, Cell::Integer(-7), Cell::Real(1.5), Cell::Text("zone".into()), Cell::Blob(vec![0, 255])];
        let mut b = (cells.len() as u32).to_le_bytes().to_vec();
        for c in &cells {
            push_cell(&mut b, c);
        }
        assert_eq!(decode_cells(&b), Some(cells));
        assert_eq!(decode_cells(&b[..b.len() - 1]), None, "cut short");
        let mut extra = b.clone();
        extra.push(0);
        assert_eq!(decode_cells(&extra), None, "bytes past the cells");
        assert_eq!(decode_cells(&[1, 0, 0, 0, 9]), None, "an unknown tag");
    }
}
