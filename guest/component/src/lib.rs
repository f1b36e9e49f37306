//! The wasm component entry point: the WIT exports of `wit/omlet.wit`
//! implemented over `omlet-lang`.
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

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use omlet_lang::eval::{self, Cell, QueryError};
use omlet_lang::ir::{Program, IR_VERSION};
use omlet_lang::{Route, RouteError};
use omlet_lang::value::{Field, Value};

#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

#[cfg(target_arch = "wasm32")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

wit_bindgen::generate!({
    path: "../../wit",
    world: "rule",
});

use exports::omlet::rule::evaluator::{BatchOutput, ErrorKind, EvalError, RecordError, Route as WRoute};
use exports::omlet::rule::meta;
use omlet::rule::knowledge;
use omlet::rule::types::{Frame, Node, Record, Span, Value as WValue};

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

/// Most rule paths the guest remembers the model of.
const ROUTE_CAPACITY: usize = 1024;

struct State {
    program: Option<Result<Program, String>>,
    generation: u64,
    cache: BTreeMap<Vec<u8>, Option<Vec<Cell>>>,
    columns: BTreeMap<u32, Vec<String>>,
    /// Rule path → model index, or why there is none.
    routes: BTreeMap<String, Result<usize, RouteError>>,
    key: Vec<u8>,
}

static mut STATE: State = State {
    program: None,
    generation: 0,
    cache: BTreeMap::new(),
    columns: BTreeMap::new(),
    routes: BTreeMap::new(),
    key: Vec::new(),
};

/// The guest is single-threaded and calls do not nest: one `&mut` at a time.
fn state() -> &'static mut State {
    // SAFETY: wasm32 components run one call at a time on one thread.
    unsafe { &mut *(&raw mut STATE) }
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

struct Guest;

impl meta::Guest for Guest {
    fn info() -> Result<meta::RuleInfo, String> {
        let st = state();
        let p = program(st)?;
        Ok(meta::RuleInfo {
            ir_version: IR_VERSION,
            source_hash: p.source_hash.clone(),
            uses_clock: p.uses_clock(),
            models: p
                .models
                .iter()
                .map(|m| meta::Model {
                    name: m.name.clone(),
                    patterns: m.patterns.clone(),
                    enabled: m.enabled,
                    file: m.file.clone(),
                    statements: (0..p.statements.len() as u32)
                        .filter(|&i| p.statements[i as usize].file == m.file)
                        .collect(),
                })
                .collect(),
            statements: p
                .statements
                .iter()
                .map(|s| meta::Statement {
                    sql: s.sql.clone(),
                    params: s.params.clone(),
                    table: s.table.clone(),
                    columns: s.columns.clone(),
                    line: s.line,
                    column: s.column,
                })
                .collect(),
        })
    }
}

impl exports::omlet::rule::evaluator::Guest for Guest {
    fn evaluate(generation: u64, route: WRoute, input: Record) -> Result<Record, EvalError> {
        let st = state();
        refresh(st, generation);
        let (prog, model, mut host) = split(st, &route)?;
        let fields = decode_record(&input.text, &input.nodes).map_err(failed)?;
        let out = eval::evaluate(prog, model, fields, &mut host).map_err(|e| failed(e.to_string()))?;
        let mut enc = Encoder::default();
        enc.record(&out);
        Ok(Record { text: enc.text, nodes: enc.nodes })
    }

    fn evaluate_batch(generation: u64, route: WRoute, input: Frame) -> BatchOutput {
        let st = state();
        refresh(st, generation);
        let mut enc = Encoder::default();
        let mut sizes = Vec::with_capacity(input.sizes.len());
        let mut errors = Vec::new();
        let (prog, model, mut host) = match split(st, &route) {
            Ok(x) => x,
            Err(error) => {
                let errors = (0..input.sizes.len() as u32)
                    .map(|index| RecordError { index, error: error.clone() })
                    .collect();
                return BatchOutput { records: Frame { text: Vec::new(), nodes: Vec::new(), sizes }, errors };
            }
        };
        let mut at = 0usize;
        for (index, &size) in input.sizes.iter().enumerate() {
            let end = at.saturating_add(size as usize);
            let result = match input.nodes.get(at..end) {
                Some(nodes) => decode_record(&input.text, nodes)
                    .and_then(|fields| eval::evaluate(prog, model, fields, &mut host).map_err(|e| e.to_string())),
                None => Err("frame sizes exceed its node list".to_string()),
            };
            at = end;
            match result {
                Ok(out) => {
                    let before = enc.nodes.len();
                    enc.record(&out);
                    sizes.push((enc.nodes.len() - before) as u32);
                }
                Err(message) => errors.push(RecordError { index: index as u32, error: failed(message) }),
            }
        }
        BatchOutput { records: Frame { text: enc.text, nodes: enc.nodes, sizes }, errors }
    }
}

fn failed(message: String) -> EvalError {
    EvalError { kind: ErrorKind::Failed, message }
}

export!(Guest);

/// Drops cached knowledge when the host's generation moved.
fn refresh(st: &mut State, generation: u64) {
    if st.generation != generation {
        st.generation = generation;
        st.cache.clear();
        st.columns.clear();
    }
}

/// The program, the model `route` names, and the host for evaluating on it.
fn split<'s>(st: &'s mut State, route: &WRoute) -> Result<(&'s Program, usize, WitHost<'s>), EvalError> {
    let State { program, cache, columns, routes, key, .. } = st;
    let prog = program.get_or_insert_with(load_program).as_ref().map_err(|e| failed(e.clone()))?;
    let model = match route {
        // Paths repeat: remember where each went (a bounded map, like the cache).
        WRoute::Path(path) => match routes.get(path.as_str()) {
            Some(r) => r.clone(),
            None => {
                let r = prog.route(Route::Path(path));
                if routes.len() >= ROUTE_CAPACITY {
                    routes.clear();
                }
                routes.insert(path.clone(), r.clone());
                r
            }
        },
        WRoute::Model(name) => prog.route(Route::Model(name)),
        WRoute::Only => prog.route(Route::Only),
    };
    let model = model.map_err(|e| EvalError { kind: ErrorKind::Unrouted, message: e.to_string() })?;
    Ok((prog, model, WitHost { cache, key, columns }))
}

/// `eval::Host` over the WIT imports, with the guest-side cache.
struct WitHost<'s> {
    cache: &'s mut BTreeMap<Vec<u8>, Option<Vec<Cell>>>,
    /// The key of the current lookup: one buffer, so a hit allocates none.
    key: &'s mut Vec<u8>,
    columns: &'s mut BTreeMap<u32, Vec<String>>,
}

/// Writes the cache key of a lookup into `k` (reused between lookups).
fn cache_key(statement: u32, params: &[Cell], k: &mut Vec<u8>) {
    k.clear();
    k.extend_from_slice(&statement.to_le_bytes());
    eval::push_cells_key(params, k);
}

fn to_wit(c: &Cell) -> knowledge::Cell {
    match c {
        Cell::Null => knowledge::Cell::Null,
        Cell::Integer(i) => knowledge::Cell::Integer(*i),
        Cell::Real(f) => knowledge::Cell::Real(*f),
        Cell::Text(s) => knowledge::Cell::Text(s.clone()),
        Cell::Blob(b) => knowledge::Cell::Blob(b.clone()),
    }
}

fn from_wit(c: knowledge::Cell) -> Cell {
    match c {
        knowledge::Cell::Null => Cell::Null,
        knowledge::Cell::Integer(i) => Cell::Integer(i),
        knowledge::Cell::Real(f) => Cell::Real(f),
        knowledge::Cell::Text(s) => Cell::Text(s),
        knowledge::Cell::Blob(b) => Cell::Blob(b),
    }
}

impl eval::Host for WitHost<'_> {
    fn query(&mut self, statement: u32, params: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError> {
        cache_key(statement, params, self.key);
        if let Some(hit) = self.cache.get(self.key.as_slice()) {
            return Ok(hit.clone());
        }
        let wit: Vec<knowledge::Cell> = params.iter().map(to_wit).collect();
        match knowledge::query(statement, &wit) {
            Ok(answer) => {
                let row = answer.row.map(|r| r.into_iter().map(from_wit).collect::<Vec<_>>());
                if answer.cacheable {
                    if self.cache.len() >= CACHE_CAPACITY {
                        self.cache.clear();
                    }
                    self.cache.insert(self.key.clone(), row.clone());
                }
                Ok(row)
            }
            Err(e) => Err(QueryError { message: e.message, fatal: e.fatal }),
        }
    }

    fn columns(&mut self, statement: u32) -> Result<Vec<String>, QueryError> {
        if let Some(c) = self.columns.get(&statement) {
            return Ok(c.clone());
        }
        match knowledge::columns(statement) {
            Ok(c) => {
                self.columns.insert(statement, c.clone());
                Ok(c)
            }
            Err(e) => Err(QueryError { message: e.message, fatal: e.fatal }),
        }
    }

    fn now(&mut self) -> (i64, i32) {
        let n = omlet::rule::clock::now();
        (n.unix_nanos, n.utc_offset_seconds)
    }
}

// ----- frames <-> values ---------------------------------------------------------

fn text_of<'a>(text: &'a [u8], s: Span) -> Result<Cow<'a, str>, String> {
    let start = s.start as usize;
    let bytes = text
        .get(start..start.saturating_add(s.len as usize))
        .ok_or_else(|| "a span points outside the frame's text".to_string())?;
    Ok(match core::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(String::from_utf8_lossy(bytes).into_owned()),
    })
}

/// Decodes the top-level fields of one record's nodes.
fn decode_record<'a>(text: &'a [u8], nodes: &[Node]) -> Result<Vec<Field<'a>>, String> {
    let mut out = Vec::with_capacity(nodes.len());
    let mut i = 0;
    while i < nodes.len() {
        out.push(decode_node(text, nodes, &mut i, 0)?);
    }
    Ok(out)
}

fn decode_node<'a>(text: &'a [u8], nodes: &[Node], i: &mut usize, depth: u32) -> Result<Field<'a>, String> {
    if depth > 128 {
        return Err("record nested deeper than 128 levels".to_string());
    }
    let n = nodes.get(*i).ok_or_else(|| "a container counts more children than the frame has".to_string())?;
    *i += 1;
    let name = text_of(text, n.name)?;
    let value = match n.value {
        WValue::Chars(s) => Value::Chars(text_of(text, s)?),
        WValue::Digit(d) => Value::Digit(d),
        WValue::Float(f) => Value::Float(f),
        WValue::Boolean(b) => Value::Bool(b),
        WValue::Ipv4(a) => Value::Ip(IpAddr::V4(Ipv4Addr::from(a))),
        WValue::Ipv6((hi, lo)) => Value::Ip(IpAddr::V6(Ipv6Addr::from((hi as u128) << 64 | lo as u128))),
        WValue::Time(t) => Value::Time(t),
        WValue::Null => Value::Null,
        WValue::Ignore => Value::Ignore,
        WValue::Obj(count) | WValue::Array(count) => {
            let mut children = Vec::with_capacity((count as usize).min(nodes.len()));
            for _ in 0..count {
                children.push(decode_node(text, nodes, i, depth + 1)?);
            }
            if matches!(n.value, WValue::Obj(_)) {
                let mut sorted = Vec::with_capacity(children.len());
                for c in children {
                    omlet_lang::value::obj_insert(&mut sorted, c);
                }
                Value::Obj(alloc::boxed::Box::new(sorted))
            } else {
                Value::Array(alloc::boxed::Box::new(children))
            }
        }
    };
    Ok(Field::new(name, value))
}

#[derive(Default)]
struct Encoder {
    text: Vec<u8>,
    nodes: Vec<Node>,
}

impl Encoder {
    fn span(&mut self, s: &str) -> Span {
        let start = self.text.len() as u32;
        self.text.extend_from_slice(s.as_bytes());
        Span { start, len: s.len() as u32 }
    }

    fn record(&mut self, fields: &[Field<'_>]) {
        for f in fields {
            self.field(f);
        }
    }

    fn field(&mut self, f: &Field<'_>) {
        let name = self.span(&f.name);
        let value = match &f.value {
            Value::Chars(s) => WValue::Chars(self.span(s)),
            Value::Digit(d) => WValue::Digit(*d),
            Value::Float(x) => WValue::Float(*x),
            Value::Bool(b) => WValue::Boolean(*b),
            Value::Ip(IpAddr::V4(a)) => WValue::Ipv4(u32::from(*a)),
            Value::Ip(IpAddr::V6(a)) => {
                let n = u128::from(*a);
                WValue::Ipv6(((n >> 64) as u64, n as u64))
            }
            Value::Time(t) => WValue::Time(*t),
            Value::Null => WValue::Null,
            Value::Ignore => WValue::Ignore,
            Value::Obj(m) | Value::Array(m) => {
                let count = m.len() as u32;
                let v = if matches!(f.value, Value::Obj(_)) { WValue::Obj(count) } else { WValue::Array(count) };
                self.nodes.push(Node { name, value: v });
                for c in m.iter() {
                    self.field(c);
                }
                return;
            }
        };
        self.nodes.push(Node { name, value });
    }
}
