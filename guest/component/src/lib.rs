//! The guest's entry points over `omlet-lang`, behind one of two doors:
//! the WIT exports of `wit/omlet.wit` (`wit.rs`, the component, built by
//! default), or the core ABI of docs/abi.md (`core_abi.rs`, with the feature
//! `core-abi`: a plain module for hosts without the component model). The
//! doors only translate: the state, the lookup cache, routing and the
//! evaluating calls below are one code for both, so that the two artifacts
//! give the same bytes for the same record.
//!
//! The compiled rule (IR bytes) is not part of this crate. `omlet build`
//! appends it to the prebuilt core module as a data segment and patches the
//! descriptor [`IR_SLOT`] to point at it (see ARCHITECTURE.md). The guest
//! decodes it once, on the first call.
//!
//! The guest keeps a lookup cache: answers the host marks cacheable are kept
//! until the host passes a different generation number.
#![no_std]

extern crate alloc;
#[cfg(not(target_arch = "wasm32"))]
extern crate std;

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use omlet_lang::eval::{self, Cell, QueryError};
use omlet_lang::fnv::FnvBuild;
use omlet_lang::frame::{Reader, Writer};
use omlet_lang::intranet::Net;
use omlet_lang::ir::Program;
use omlet_lang::lines::LineWriter;
use omlet_lang::{Route, RouteError};

#[cfg(feature = "by-hand-nginx")]
mod by_hand;
#[cfg(feature = "core-abi")]
mod core_abi;
#[cfg(feature = "core-abi")]
use core_abi as door;
#[cfg(not(feature = "core-abi"))]
mod wit;
#[cfg(not(feature = "core-abi"))]
use wit as door;
#[cfg(target_arch = "wasm32")]
mod mem;
#[cfg(any(target_arch = "wasm32", test))]
mod pool;

#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOC: pool::global::Pooled = pool::global::Pooled;

#[cfg(target_arch = "wasm32")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// Where the IR is: a magic tag that `omlet build` searches for in the data
/// segments, then the address and length it writes after it.
#[repr(C)]
pub struct IrSlot {
    pub magic: [u8; 16],
    pub ptr: u32,
    pub len: u32,
}

/// The tag `omlet build` looks for.
pub const IR_SLOT_MAGIC: [u8; 16] = *b"OMLET-IR-SLOT-01";

static mut IR_SLOT: IrSlot = IrSlot { magic: IR_SLOT_MAGIC, ptr: 0, len: 0 };

/// Most entries the guest cache holds before it starts over.
const CACHE_CAPACITY: usize = 4096;

/// Most bytes (keys and rows, roughly as held) the guest cache holds before
/// it starts over: a bound in bytes as well as entries, since a few large
/// rows would otherwise fill the instance's memory (64 MiB by default), and
/// fail records that pass alone.
const CACHE_BYTES: usize = 8 << 20;

/// A row larger than this is never kept in the guest cache (the host's
/// shared cache may still hold it).
const CACHE_ENTRY_BYTES: usize = 256 << 10;

/// A fill of the cache that answered fewer lookups than this many per
/// entry kept (1 in 16) shows keys that do not repeat within the cache's
/// reach: distinct keys.
const CACHE_USEFUL_HITS: usize = CACHE_CAPACITY / 16;

/// How many answers are not kept after such a fill, before the cache tries
/// again: four fills' worth.
const CACHE_REST: u32 = 4 * CACHE_CAPACITY as u32;

/// The guest's lookup cache: a lookup's key (`cache_key`) → its row, or
/// none, and the bytes it holds.
///
/// **Admission.** Keeping an answer costs a copy of its key and row, and
/// starting over frees them all. With keys that repeat (hot sets) that buys
/// hits; with distinct keys (one client address per record, against a
/// table held in the host's memory) it buys nothing, and was a measurable
/// share of such a run. So a fill that brought fewer than
/// [`CACHE_USEFUL_HITS`] hits is followed by [`CACHE_REST`] answers that are
/// not kept; then the cache tries again, so a hot set that comes back is
/// cached again within one rest.
struct Cache {
    map: hashbrown::HashMap<Vec<u8>, Option<Vec<Cell>>, FnvBuild>,
    bytes: usize,
    /// Hits since the cache last started over.
    hits: usize,
    /// Answers still to be let through without keeping them.
    rest: u32,
}

impl Cache {
    const fn new() -> Cache {
        Cache { map: hashbrown::HashMap::with_hasher(FnvBuild), bytes: 0, hits: 0, rest: 0 }
    }

    fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
        self.hits = 0;
        self.rest = 0;
    }

    fn get(&mut self, key: &[u8]) -> Option<&Option<Vec<Cell>>> {
        let hit = self.map.get(key);
        self.hits += usize::from(hit.is_some());
        hit
    }

    /// Keeps `row` under `key`, unless it is too large or the cache is
    /// resting; starts over when the cache is full in entries or bytes.
    fn keep(&mut self, key: &[u8], row: &Option<Vec<Cell>>) {
        if self.rest > 0 {
            self.rest -= 1;
            return;
        }
        let size = entry_bytes(key, row);
        if size > CACHE_ENTRY_BYTES {
            return;
        }
        if self.map.len() >= CACHE_CAPACITY && self.hits < CACHE_USEFUL_HITS {
            self.clear();
            self.rest = CACHE_REST;
            return;
        }
        if self.map.len() >= CACHE_CAPACITY || self.bytes + size > CACHE_BYTES {
            self.clear();
        }
        if self.map.insert(key.to_vec(), row.clone()).is_none() {
            self.bytes += size;
        }
    }
}

/// About what one cache entry holds in memory.
fn entry_bytes(key: &[u8], row: &Option<Vec<Cell>>) -> usize {
    let cells = row.as_ref().map_or(0, |r| {
        r.iter()
            .map(|c| {
                core::mem::size_of::<Cell>()
                    + match c {
                        Cell::Text(t) => t.len(),
                        Cell::Blob(b) => b.len(),
                        _ => 0,
                    }
            })
            .sum()
    });
    key.len() + cells + 64
}

/// Most rule paths the guest remembers the model of.
const ROUTE_CAPACITY: usize = 1024;

struct State {
    program: Option<Result<Program, String>>,
    generation: u64,
    cache: Cache,
    columns: BTreeMap<u32, Vec<String>>,
    /// The host's intranet networks, asked for at the first use in a generation.
    nets: Option<Vec<Net>>,
    /// Rule path → model index, or why there is none.
    routes: BTreeMap<String, Result<usize, RouteError>>,
    key: Vec<u8>,
    /// The output frame's buffers, reused from call to call
    /// (`Writer::take_frame`, which lets a huge output's buffers go).
    writer: Writer,
    /// The records' field vectors, reused from record to record.
    spare: eval::Spare,
    /// How long the last batch's JSON lines were (at most `MAX_LINES_HINT`).
    lines_bytes: usize,
}

static mut STATE: State = State {
    program: None,
    generation: 0,
    cache: Cache::new(),
    columns: BTreeMap::new(),
    nets: None,
    routes: BTreeMap::new(),
    key: Vec::new(),
    writer: Writer::new(),
    spare: eval::Spare::new(),
    lines_bytes: 0,
};

/// The guest is single-threaded and calls do not nest: one `&mut` at a time.
fn state() -> &'static mut State {
    // SAFETY: wasm32 components run one call at a time on one thread.
    // (`&mut STATE` itself is refused for statics in edition 2024; the raw
    // pointer is the way through, which clippy reads as a needless `*&`.)
    #[allow(clippy::deref_addrof, reason = "the raw pointer is the way to a static in edition 2024")]
    unsafe {
        &mut *(&raw mut STATE)
    }
}

fn load_program() -> Result<Program, String> {
    // SAFETY: a plain read of a static the build step may have patched.
    let slot = unsafe { core::ptr::read_volatile(&raw const IR_SLOT) };
    if slot.len == 0 {
        return Err("this component carries no compiled rule: build it with `omlet build`".to_string());
    }
    // SAFETY: `omlet build` placed `len` bytes at `ptr`, in pages below the heap.
    let bytes = unsafe { core::slice::from_raw_parts(slot.ptr as usize as *const u8, slot.len as usize) };
    Program::from_bytes(bytes).map_err(|e| e.to_string())
}

fn program(st: &mut State) -> Result<&Program, String> {
    st.program.get_or_insert_with(load_program).as_ref().map_err(Clone::clone)
}

/// Why a record, or a whole call, gave no output: the four kinds both
/// doors report (`evaluator.error-kind`, the core ABI's statuses 1 to 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The route names no model.
    Unrouted,
    /// A lookup failed and the host's policy fails the record.
    Lookup,
    /// A damaged frame or a rule the guest cannot run.
    Failed,
    /// The rule failed the record with `fail(…)`.
    Rejected,
}

/// A [`Kind`] and its message.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub kind: Kind,
    pub message: String,
}

/// A record of a batch that gave no output: its place in the input frame.
#[derive(Debug, Clone)]
pub(crate) struct RecordFailure {
    pub index: u32,
    pub failure: Failure,
}

/// A model's lookups, with the index of their statement in the model.
fn lookups_of(m: &omlet_lang::ir::Model) -> impl Iterator<Item = (usize, &omlet_lang::ir::Lookup)> {
    m.stmts.iter().enumerate().filter_map(|(i, s)| match s {
        omlet_lang::ir::Stmt::Lookup { lookup, .. } => Some((i, lookup)),
        _ => None,
    })
}

/// The statements a model may run (indices into the program's), sorted.
pub(crate) fn model_statements(m: &omlet_lang::ir::Model) -> Vec<u32> {
    let mut s: Vec<u32> = lookups_of(m).map(|(_, l)| l.statement).collect();
    s.sort_unstable();
    s.dedup();
    s
}

/// A model's lookups in order: (statement, line, the SQL with its literals).
pub(crate) fn model_lookups(p: &Program, m: &omlet_lang::ir::Model) -> Vec<(u32, u32, String)> {
    lookups_of(m)
        .map(|(i, l)| {
            let line = m.lines.get(i).copied().unwrap_or(0);
            let sql = p.statements.get(l.statement as usize).map(|s| l.shown(s)).unwrap_or_default();
            (l.statement, line, sql)
        })
        .collect()
}

/// The compiled rule, decoded at the first call; why not, when it cannot be.
pub(crate) fn program_now() -> Result<&'static Program, String> {
    program(state())
}

fn failed(message: String) -> Failure {
    Failure { kind: Kind::Failed, message }
}

/// A failed evaluation as the host sees it: a fatal lookup error is a kind of its own.
fn eval_failure(e: eval::EvalError) -> Failure {
    match e {
        eval::EvalError::Lookup(message) => Failure { kind: Kind::Lookup, message },
        eval::EvalError::Rejected(message) => Failure { kind: Kind::Rejected, message },
        other => failed(other.to_string()),
    }
}

/// Evaluates the one record of the frame `input` on `route`, writing its
/// output frame into `out` (cleared first; its buffer is reused).
pub(crate) fn evaluate(generation: u64, route: Route<'_>, input: &[u8], out: &mut Vec<u8>) -> Result<(), Failure> {
    let st = state();
    refresh(st, generation);
    // Borrowed, not taken: moving the writer and the spare vectors out and
    // back copied a kilobyte and a half a call.
    let Split { prog, model, mut host, writer, spare } = split(st, route)?;
    // Outputs are written with `record_hiding`, which hides `__` fields.
    spare.writer_hides(true);
    let mut reader = Reader::new(input).map_err(|e| failed(e.to_string()))?;
    if reader.records() != 1 {
        return Err(failed("`evaluate` takes a frame of exactly one record".to_string()));
    }
    let fields = reader.size(0).and_then(|n| reader.fields_in(n, spare.fields())).map_err(|e| failed(e.to_string()))?;
    let output = eval::evaluate_with(prog, model, fields, &mut host, spare).map_err(eval_failure)?;
    writer.record_hiding(&output);
    spare.give_back(output);
    writer.take_frame_into(out);
    Ok(())
}

/// Evaluates the one record of `input` as [`evaluate`] does, and traces it:
/// the output frame (or why none) and the trace as JSON.
pub(crate) fn explain(generation: u64, route: Route<'_>, input: &[u8]) -> (Result<Vec<u8>, Failure>, String) {
    let st = state();
    refresh(st, generation);
    let mut trace = omlet_lang::trace::Trace::default();
    let output = (|| {
        let Split { prog, model, mut host, .. } = split(st, route)?;
        let mut reader = Reader::new(input).map_err(|e| failed(e.to_string()))?;
        if reader.records() != 1 {
            return Err(failed("`explain` takes a frame of exactly one record".to_string()));
        }
        let fields = reader.size(0).and_then(|n| reader.fields_in(n, Vec::new())).map_err(|e| failed(e.to_string()))?;
        let (out, t) = eval::explain(prog, model, fields, &mut host);
        trace = t;
        let out = out.map_err(eval_failure)?;
        let mut w = Writer::new();
        w.record(&out);
        Ok(w.finish())
    })();
    if let Err(e) = &output
        && trace.error.is_none()
    {
        trace.error = Some(e.message.clone());
    }
    (output, trace.to_json())
}

/// Evaluates every record of `input` on `route`: the output frame of those
/// that succeeded, in `out` (cleared first), and one failure per other.
pub(crate) fn batch_frame(generation: u64, route: Route<'_>, input: &[u8], out: &mut Vec<u8>) -> Vec<RecordFailure> {
    let errors = run_batch(generation, route, input, |w, output| {
        w.record_hiding(output);
        Ok(())
    });
    state().writer.take_frame_into(out);
    errors
}

/// [`batch_frame`] with the outputs as JSON lines: the text, where each
/// line ends, and the failures.
pub(crate) fn batch_lines(generation: u64, route: Route<'_>, input: &[u8]) -> (Vec<u8>, Vec<u32>, Vec<RecordFailure>) {
    let st = state();
    // The text goes to the host and is freed after the call: start it
    // at the size of the previous batch's, so that it seldom grows.
    let mut w = LineWriter::with_capacity(st.lines_bytes);
    let errors = run_batch(generation, route, input, |_, output| w.line_hiding(output).map_err(|m| failed(m.to_string())));
    state().lines_bytes = w.len().min(MAX_LINES_HINT);
    let (text, ends) = w.take();
    (text, ends, errors)
}

/// The most that [`State::lines_bytes`] asks for up front.
const MAX_LINES_HINT: usize = 4 << 20;

/// Evaluates every record of the frame `input` on `route`, giving each
/// output to `put` with the state's frame writer (which `put` may write it
/// to, or refuse it): the failures, one per record that gave no output.
/// [`batch_frame`] and [`batch_lines`] differ only in `put`.
fn run_batch(
    generation: u64,
    route: Route<'_>,
    input: &[u8],
    mut put: impl FnMut(&mut Writer, &[omlet_lang::value::Field<'_>]) -> Result<(), Failure>,
) -> Vec<RecordFailure> {
    let st = state();
    refresh(st, generation);
    let mut reader = match Reader::new(input) {
        Ok(r) => r,
        // Without a readable header the records cannot even be counted.
        Err(e) => return alloc::vec![RecordFailure { index: 0, failure: failed(e.to_string()) }],
    };
    let n = reader.records();
    let Split { prog, model, mut host, writer, spare } = match split(st, route) {
        Ok(x) => x,
        Err(failure) => return (0..n as u32).map(|index| RecordFailure { index, failure: failure.clone() }).collect(),
    };
    // Outputs are written hiding `__` fields (`record_hiding`, `line_hiding`).
    spare.writer_hides(true);
    let mut errors = Vec::new();
    for index in 0..n {
        let fields = match reader.size(index).and_then(|size| reader.fields_in(size, spare.fields())) {
            Ok(f) => f,
            // Nodes have no fixed size: past a damaged record, none can be found.
            Err(e) => {
                for i in index..n {
                    errors.push(RecordFailure { index: i as u32, failure: failed(alloc::format!("damaged frame: {e}")) });
                }
                break;
            }
        };
        #[cfg(not(feature = "by-hand-nginx"))]
        let result = eval::evaluate_with(prog, model, fields, &mut host, spare);
        #[cfg(feature = "by-hand-nginx")]
        let result = {
            let _ = (prog, model);
            let mut out = spare.fields();
            by_hand::nginx(fields, &mut host, &mut out);
            Ok(out)
        };
        match result {
            Ok(out) => {
                if let Err(failure) = put(writer, &out) {
                    errors.push(RecordFailure { index: index as u32, failure });
                }
                spare.give_back(out);
            }
            Err(e) => errors.push(RecordFailure { index: index as u32, failure: eval_failure(e) }),
        }
    }
    errors
}

/// Drops cached knowledge when the host's generation moved.
fn refresh(st: &mut State, generation: u64) {
    if st.generation != generation {
        st.generation = generation;
        st.cache.clear();
        st.columns.clear();
        st.nets = None;
    }
}

/// The state, split for one call: the program, the model its route names,
/// the host for evaluating on it, and the buffers reused from call to call.
struct Split<'s> {
    prog: &'s Program,
    model: usize,
    host: DoorHost<'s>,
    writer: &'s mut Writer,
    spare: &'s mut eval::Spare,
}

/// The state split for a call on `route`.
fn split<'s>(st: &'s mut State, route: Route<'_>) -> Result<Split<'s>, Failure> {
    let State { program, cache, columns, routes, key, nets, writer, spare, .. } = st;
    let prog = program.get_or_insert_with(load_program).as_ref().map_err(|e| failed(e.clone()))?;
    let model = match route {
        // Paths repeat: remember where each went (a bounded map, like the cache).
        Route::Path(path) => match routes.get(path) {
            Some(r) => r.clone(),
            None => {
                let r = prog.route(Route::Path(path));
                if routes.len() >= ROUTE_CAPACITY {
                    routes.clear();
                }
                routes.insert(path.to_string(), r.clone());
                r
            }
        },
        other => prog.route(other),
    };
    let model = model.map_err(|e| Failure { kind: Kind::Unrouted, message: e.to_string() })?;
    Ok(Split { prog, model, host: DoorHost { cache, key, columns, nets, layer: "host" }, writer, spare })
}

/// `eval::Host` over the door's imports, with the guest-side cache.
struct DoorHost<'s> {
    cache: &'s mut Cache,
    /// The key of the current lookup: one buffer, so a hit allocates none.
    key: &'s mut Vec<u8>,
    columns: &'s mut BTreeMap<u32, Vec<String>>,
    nets: &'s mut Option<Vec<Net>>,
    /// Who answered the last lookup (for traces).
    layer: &'static str,
}

/// Writes the cache key of a lookup into `k` (reused between lookups).
fn cache_key(statement: u32, params: &[Cell], k: &mut Vec<u8>) {
    k.clear();
    k.extend_from_slice(&statement.to_le_bytes());
    eval::push_cells_key(params, k);
}

impl eval::Host for DoorHost<'_> {
    fn query(&mut self, statement: u32, params: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError> {
        cache_key(statement, params, self.key);
        if let Some(hit) = self.cache.get(self.key.as_slice()) {
            self.layer = "guest cache";
            return Ok(hit.clone());
        }
        self.layer = "host";
        let (row, cacheable) = door::query(statement, params)?;
        if cacheable {
            self.cache.keep(self.key, &row);
        }
        Ok(row)
    }

    fn columns(&mut self, statement: u32) -> Result<Vec<String>, QueryError> {
        if let Some(c) = self.columns.get(&statement) {
            return Ok(c.clone());
        }
        let c = door::columns(statement)?;
        self.columns.insert(statement, c.clone());
        Ok(c)
    }

    fn last_layer(&self) -> &'static str {
        self.layer
    }

    fn now(&mut self) -> (i64, i32) {
        door::now()
    }

    fn intranet_nets(&mut self) -> &[Net] {
        self.nets.get_or_insert_with(door::intranet_nets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: usize) -> Option<Vec<Cell>> {
        Some(alloc::vec![Cell::Text(alloc::format!("zone-{i}"))])
    }

    /// Distinct keys make the cache rest after a useless fill; a hot set
    /// keeps it filled and hitting; a rest ends and the cache fills again.
    #[test]
    fn a_useless_fill_makes_the_cache_rest_and_a_hot_set_keeps_it() {
        let mut c = Cache::new();
        for i in 0..CACHE_CAPACITY {
            assert!(c.get(&i.to_le_bytes()).is_none());
            c.keep(&i.to_le_bytes(), &row(i));
        }
        assert_eq!(c.map.len(), CACHE_CAPACITY);
        // One more distinct key: the fill had no hit, so the cache rests.
        c.keep(&usize::MAX.to_le_bytes(), &row(0));
        assert_eq!((c.map.len(), c.rest), (0, CACHE_REST));
        for i in 0..CACHE_REST as usize {
            c.keep(&(i + 10_000_000).to_le_bytes(), &row(i));
        }
        assert_eq!((c.map.len(), c.rest), (0, 0), "nothing kept while resting");
        // After the rest, a hot set is kept and hits.
        for round in 0..3 {
            for i in 0..CACHE_CAPACITY / 2 {
                if c.get(&i.to_le_bytes()).is_none() {
                    assert_eq!(round, 0);
                    c.keep(&i.to_le_bytes(), &row(i));
                }
            }
        }
        assert_eq!(c.map.len(), CACHE_CAPACITY / 2);
        assert!(c.hits >= CACHE_CAPACITY);
        // Full with useful hits: it starts over as before, without resting.
        for i in CACHE_CAPACITY / 2..CACHE_CAPACITY + 1 {
            c.keep(&i.to_le_bytes(), &row(i));
        }
        assert_eq!((c.map.len(), c.rest), (1, 0));
    }
}
