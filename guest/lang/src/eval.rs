//! The evaluator: runs one model of a compiled [`Program`] over one record.
//!
//! `src` is the input view (fields can be taken out of it), `dst` the output
//! being built (spec §1). Evaluation never fails on data: a missing field, a
//! failed conversion or a failed lookup makes a value absent. The only
//! per-record errors are a lookup error that the host marked fatal, and a
//! rule's own `fail(…)`.
//!
//! Field lookups do not scan: a name the program knows is found through a
//! per-record table of positions by slot (`Positions`). Where that table
//! does not hold (two input fields of one name, a field taken back out of
//! the output, a name the program does not know), small records (up to
//! `INDEX_FROM` fields) are scanned, larger ones get an index by name slot
//! (`Index`), so `read`, `take` and batch statements over a record of n
//! fields cost O(1) amortised per lookup and O(n log n) per batch, not
//! O(n) per lookup and O(n²) per batch.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::IpAddr;

use crate::ir::*;
use crate::time;
use crate::value::{Field, NO_SYM, Str, Type, Value, convert, obj_from};
use crate::{intranet, pipes, value};

use crate::cell::value_of_cell;
pub use crate::cell::{Cell, cell_of, push_cells_key};
pub use crate::ir::const_value;
use crate::trace::{Event, Trace, describe, describe_cell};

#[derive(Debug, Clone, PartialEq)]
pub struct QueryError {
    pub message: String,
    /// The host's policy makes this error fail the whole record.
    pub fatal: bool,
}

/// What evaluation needs from outside: knowledge and the clock.
pub trait Host {
    /// The first row of statement `statement` with `params` bound in order.
    fn query(&mut self, statement: u32, params: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError>;
    /// The column names a statement returns (needed for `select *` into `_`).
    fn columns(&mut self, statement: u32) -> Result<Vec<String>, QueryError>;
    /// Unix nanoseconds (UTC) and the local UTC offset in seconds.
    fn now(&mut self) -> (i64, i32);
    /// The networks `intranet_ip` and `access_direct` call LAN (delta §9);
    /// asked at most once per record that uses them.
    fn intranet_nets(&mut self) -> &[crate::intranet::Net] {
        &crate::intranet::BUILTIN
    }
    /// Who answered the last [`query`](Host::query), for traces: `guest
    /// cache` when a cache of the guest's own did, else `host`.
    fn last_layer(&self) -> &'static str {
        "host"
    }
}

/// A host without a knowledge base, at a fixed time: no lookup finds a row
/// (or, with [`Offline::refusing`], every lookup fails, without failing the
/// record), no statement has columns, and `now` is the time it was made
/// with. Static blocks are evaluated with it at compile time, and the
/// native tests and the benches evaluate with it. (The fuzz targets keep a
/// host of their own, which can also answer with rows.)
#[derive(Debug, Clone, Copy)]
pub struct Offline {
    now: (i64, i32),
    refusal: Option<&'static str>,
}

impl Offline {
    /// Lookups find nothing; `now` is `now` (Unix nanoseconds, UTC offset in
    /// seconds).
    pub const fn at(now: (i64, i32)) -> Offline {
        Offline { now, refusal: None }
    }

    /// Lookups fail with `message` (not fatal: the targets stay absent).
    pub const fn refusing(now: (i64, i32), message: &'static str) -> Offline {
        Offline { now, refusal: Some(message) }
    }
}

impl Host for Offline {
    fn query(&mut self, _: u32, _: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError> {
        match self.refusal {
            None => Ok(None),
            Some(message) => Err(QueryError { message: String::from(message), fatal: false }),
        }
    }
    fn columns(&mut self, _: u32) -> Result<Vec<String>, QueryError> {
        Ok(Vec::new())
    }
    fn now(&mut self) -> (i64, i32) {
        self.now
    }
}

/// Why a record could not be evaluated.
#[derive(Debug, Clone, PartialEq)]
pub enum EvalError {
    NoSuchModel(usize),
    /// A lookup failed and the host's policy says to fail the record.
    Lookup(String),
    /// The rule failed the record itself, with `fail(…)`: its message.
    Rejected(String),
}

impl core::fmt::Display for EvalError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EvalError::NoSuchModel(i) => write!(f, "no model #{i} in this rule set"),
            EvalError::Lookup(m) => write!(f, "lookup failed: {m}"),
            EvalError::Rejected(m) => write!(f, "rejected by the rule: {m}"),
        }
    }
}

/// Evaluates model `model` of `program` over `input`.
pub fn evaluate<'a>(
    program: &'a Program,
    model: usize,
    input: Vec<Field<'a>>,
    host: &mut dyn Host,
) -> Result<Vec<Field<'a>>, EvalError> {
    evaluate_with(program, model, input, host, &mut Spare::new())
}

/// The field vectors one evaluation leaves for the next, so that a caller
/// evaluating record after record (the guest) allocates them once, not once
/// per record. Between evaluations it holds only empty buffers; one that
/// grew past [`Spare::KEEP_FIELDS`] is let go, so that one huge record does
/// not hold its memory for good.
#[derive(Default)]
pub struct Spare {
    src: Vec<Option<Field<'static>>>,
    dst: Vec<Field<'static>>,
    at: Positions,
    /// The slots input names had, remembered between records.
    recent: Recent,
    /// See [`Spare::writer_hides`].
    writer_hides: bool,
    /// Tests evaluate with and without [`Positions`], to compare.
    #[cfg(test)]
    scan: bool,
}

/// The slot each input field last had, by its position in the record and
/// its name's length, so that the next record's field there is checked
/// against that one name instead of being looked up.
///
/// Why: every input field's name is looked up per record
/// ([`Program::resolve`]: a hash, a probe, a compare, in a call of its
/// own), about 1,800 of the 33,000 instructions of a nginx record
/// (valgrind). Records of one source come with the same names at the same
/// places, and the few shapes a source has seldom put two names of one
/// length at one place. What it replaces: nothing; a field whose name is
/// not the one remembered is looked up as before, and remembered. What it
/// costs: 1 KiB per evaluator, and one compare of a name with the
/// program's when the hint is right. A hint is only ever a slot whose name
/// is compared in full, so one left by another program (a reload) is
/// harmless.
struct Recent {
    slots: [u32; Recent::SIZE],
}

impl Recent {
    /// 16 positions by 16 lengths (mod 16).
    const SIZE: usize = 256;

    const fn new() -> Recent {
        Recent { slots: [NO_SYM; Recent::SIZE] }
    }

    /// The slot of `name`, the name of input field `i`.
    #[inline(always)]
    fn slot(&mut self, program: &Program, i: usize, name: &str) -> u32 {
        let k = ((i & 15) << 4) | (name.len() & 15);
        let hint = self.slots[k];
        if program.names.get(hint as usize).is_some_and(|n| crate::value::same_bytes(n.as_bytes(), name.as_bytes())) {
            return hint;
        }
        let slot = program.resolve(name);
        if slot != NO_SYM {
            self.slots[k] = slot;
        }
        slot
    }
}

impl Default for Recent {
    fn default() -> Recent {
        Recent::new()
    }
}

impl Spare {
    /// The most fields a kept buffer may have room for.
    pub const KEEP_FIELDS: usize = 4096;

    pub const fn new() -> Spare {
        Spare {
            src: Vec::new(),
            dst: Vec::new(),
            at: Positions::new(),
            recent: Recent::new(),
            writer_hides: false,
            #[cfg(test)]
            scan: false,
        }
    }

    /// For a caller that writes each output with
    /// [`crate::frame::Writer::record_hiding`]: fields whose names start
    /// with `__` keep their values in the output, and the writer writes them
    /// as ignored. (The guest's batch loop: it spares a pass over every
    /// output field.)
    pub fn writer_hides(&mut self, yes: bool) {
        self.writer_hides = yes;
    }

    /// An empty vector for the next record's input fields: the buffer the
    /// last evaluation's input left.
    pub fn fields<'a>(&mut self) -> Vec<Field<'a>> {
        recycle(core::mem::take(&mut self.src))
    }

    /// Takes back an output the caller is done with: its fields are dropped,
    /// its buffer kept for the next evaluation's output.
    pub fn give_back(&mut self, mut out: Vec<Field<'_>>) {
        clear_fields(&mut out);
        self.dst = recycle(out);
    }
}

/// Empties `v`, running the drop of only the fields that own memory.
///
/// Why: most output fields borrow their name and value (from the program,
/// the input frame) or hold a number, and own nothing; `Vec::clear` still
/// calls the field's drop for each, a call of about 65 instructions in
/// wasm, 16 a nginx record (valgrind). Forgetting a field that owns nothing
/// is its drop. An object's or array's members are let go the same way
/// before the field's drop frees their buffer (the nginx rule's `request`
/// object: three calls a record).
#[inline(always)]
fn clear_fields(v: &mut Vec<Field<'_>>) {
    for mut f in v.drain(..) {
        if owns_nothing(&f) {
            core::mem::forget(f);
        } else if let Value::Obj(members) | Value::Array(members) = &mut f.value {
            for m in members.drain(..) {
                if owns_nothing(&m) {
                    core::mem::forget(m);
                }
            }
        }
    }
}

/// Whether dropping `f` would free nothing.
#[inline(always)]
fn owns_nothing(f: &Field<'_>) -> bool {
    matches!(f.name, Cow::Borrowed(_))
        && matches!(
            f.value,
            Value::Chars(Cow::Borrowed(_))
                | Value::BigInt(Cow::Borrowed(_))
                | Value::Digit(_)
                | Value::Float(_)
                | Value::Bool(_)
                | Value::Ip(_)
                | Value::Time(_)
                | Value::Null
                | Value::Ignore
        )
}

/// `v` emptied and re-typed, keeping its buffer when `T` and `U` have the
/// same layout (as a field and an optional field have): an empty vector
/// collected in place. A buffer past [`Spare::KEEP_FIELDS`] is freed.
fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    if v.capacity() > Spare::KEEP_FIELDS {
        return Vec::new();
    }
    v.clear();
    v.into_iter().map(|_| -> U { unreachable!("the vector is empty") }).collect()
}

/// [`evaluate`], taking its field vectors from `spare` and leaving the
/// input's there when it succeeds (call [`Spare::give_back`] with the output
/// once done); a failed evaluation lets its buffers go.
pub fn evaluate_with<'a>(
    program: &'a Program,
    model: usize,
    input: Vec<Field<'a>>,
    host: &mut dyn Host,
    spare: &mut Spare,
) -> Result<Vec<Field<'a>>, EvalError> {
    let hide = !spare.writer_hides;
    run(program, model, input, host, spare, None, hide)
}

/// [`evaluate`] with a [`Trace`] of how: what each statement read, converted,
/// matched, looked up and wrote, or why it wrote nothing (bounded; see
/// [`crate::trace`]). The output is what `evaluate` gives.
pub fn explain<'a>(
    program: &'a Program,
    model: usize,
    input: Vec<Field<'a>>,
    host: &mut dyn Host,
) -> (Result<Vec<Field<'a>>, EvalError>, Trace) {
    let Some(m) = program.models.get(model) else {
        let e = EvalError::NoSuchModel(model);
        let mut trace = Trace::default();
        trace.error = Some(alloc::format!("{e}"));
        return (Err(e), trace);
    };
    let mut trace = Some(Box::new(Trace::new(&m.name, &m.file)));
    let out = run(program, model, input, host, &mut Spare::new(), Some(&mut trace), true);
    let mut trace = trace.map(|t| *t).unwrap_or_default();
    if let Err(e) = &out {
        trace.error = Some(alloc::format!("{e}"));
    }
    (out, trace)
}

/// The evaluation itself; `trace`, when given, is filled and handed back.
fn run<'a>(
    program: &'a Program,
    model: usize,
    input: Vec<Field<'a>>,
    host: &mut dyn Host,
    spare: &mut Spare,
    trace: Option<&mut Option<Box<Trace>>>,
    hide: bool,
) -> Result<Vec<Field<'a>>, EvalError> {
    let m = program.models.get(model).ok_or(EvalError::NoSuchModel(model))?;
    let mut input = input;
    let mut at = core::mem::take(&mut spare.at);
    at.start(program.names.len());
    for (i, f) in input.iter_mut().enumerate() {
        f.sym = spare.recent.slot(program, i, &f.name);
        at.note(false, f.sym, i);
    }
    #[cfg(test)]
    if spare.scan {
        at.valid = false;
    }
    let mut ctx = Ctx::new(program, input, host);
    ctx.at = at;
    ctx.dst = recycle(core::mem::take(&mut spare.dst));
    // Most statements write one field: one allocation for the output.
    ctx.dst.reserve(m.stmts.len());
    let mut trace = trace;
    ctx.trace = trace.as_mut().and_then(|t| t.take());
    let mut failed = None;
    for (i, stmt) in m.stmts.iter().enumerate() {
        if let Some(t) = ctx.trace.as_deref_mut() {
            t.begin(m.lines.get(i).copied().unwrap_or(0), targets_of(stmt));
        }
        ctx.stmt(stmt);
        if let Some(e) = ctx.fatal.take() {
            failed = Some(e);
            break;
        }
    }
    if let Some(t) = trace {
        *t = ctx.trace.take();
    }
    if let Some(e) = failed {
        return Err(e);
    }
    spare.src = recycle(core::mem::take(&mut ctx.src));
    spare.at = core::mem::take(&mut ctx.at);
    let mut out = ctx.dst;
    if hide {
        for f in &mut out {
            if f.name.starts_with("__") {
                f.value = Value::Ignore;
            }
        }
    }
    Ok(out)
}

/// Most bytes of a `fail(…)` message: a longer one is cut at a character
/// boundary and marked, so that an error line stays a line.
pub const MAX_FAIL_MESSAGE: usize = 1024;

fn bounded(text: String) -> String {
    crate::trace::cut_to(text, MAX_FAIL_MESSAGE)
}

/// Evaluation state for one record.
pub struct Ctx<'a, 'h> {
    program: &'a Program,
    src: Vec<Option<Field<'a>>>,
    dst: Vec<Field<'a>>,
    host: &'h mut dyn Host,
    now: Option<i64>,
    /// Why the record fails: the evaluation stops after the statement.
    fatal: Option<EvalError>,
    /// Built once `src` and `dst` hold more than [`INDEX_FROM`] fields.
    index: Option<Index<'a>>,
    /// A field's slot is outside the program's name table (a damaged IR or
    /// input): lookups stay scans.
    unindexable: bool,
    /// Set by [`explain`]: what happens is noted here.
    trace: Option<Box<Trace>>,
    /// How many fields of dst have no slot ([`NO_SYM`]): while none has, a
    /// batch statement moves a field without a slot without comparing its
    /// name with every output field's.
    dst_unnamed: usize,
    /// Where each name slot's field is in `src` and `dst`, while that is
    /// known (see [`Positions`]).
    at: Positions,
}

/// Per name slot, the position of its field in the input (`src`) and in
/// the output (`dst`) of the record being evaluated, so that `read` and
/// `take` of a name the program knows index instead of scanning.
///
/// Why: in wasm a scan of even ten fields for a slot (each an `Option` of
/// a 40-byte field in linear memory) was the evaluator's largest single
/// cost on the nginx rule (about 250 ns of a record's 3.4 µs in
/// `profile_nginx`, 19 reads and takes a record). What it replaces: the
/// scan in `Ctx::find`, which stays for the records this does not cover.
/// What it costs: two tables of the program's name count, kept between
/// records in [`Spare`], and a write per input field and per output field.
/// Entries carry the record's generation, so a new record clears nothing:
/// a rule set of thousands of names pays nothing per record for them.
///
/// It covers records whose input has at most one field per slot, until a
/// field is taken back out of the output (`take` of a name a statement
/// wrote), which moves the positions after it; then `valid` is false and
/// the evaluator scans, as it did before, for the rest of that record.
#[derive(Default)]
struct Positions {
    /// Per slot: the generation of the record that set it, and the position.
    src: Vec<(u32, u32)>,
    dst: Vec<(u32, u32)>,
    generation: u32,
    valid: bool,
}

impl Positions {
    const fn new() -> Positions {
        Positions { src: Vec::new(), dst: Vec::new(), generation: 0, valid: false }
    }

    /// Starts a record of a program with `slots` names.
    fn start(&mut self, slots: usize) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 || self.src.len() != slots {
            // A new table, or the generations went round: nothing old may
            // pass for this record's.
            self.src.clear();
            self.src.resize(slots, (0, 0));
            self.dst.clear();
            self.dst.resize(slots, (0, 0));
            self.generation = 1;
        }
        self.valid = true;
    }

    /// Field `i` of the input, or of the output (`out`), has slot `sym`.
    /// A second input field of one slot (or a slot outside the table) makes
    /// the table give up for the record; of output fields of one slot, the
    /// first is the one found.
    #[inline]
    fn note(&mut self, out: bool, sym: u32, i: usize) {
        if sym == NO_SYM || !self.valid {
            return;
        }
        let generation = self.generation;
        let table = if out { &mut self.dst } else { &mut self.src };
        match table.get_mut(sym as usize) {
            Some(e) if e.0 != generation => *e = (generation, i as u32),
            Some(_) if out => {}
            _ => self.valid = false,
        }
    }

    /// The position of slot `sym`'s field in `table`, or [`NONE`].
    #[inline]
    fn of(&self, table: &[(u32, u32)], sym: u32) -> u32 {
        match table.get(sym as usize) {
            Some(&(g, i)) if g == self.generation => i,
            _ => NONE,
        }
    }
}

/// Up to this many fields (input and output together), lookups scan: a scan
/// of a few dozen slots is cheaper than building an index per record.
const INDEX_FROM: usize = 64;

/// No position.
const NONE: u32 = u32::MAX;

/// Where the fields of each name slot are, so that finding one is O(1)
/// amortised instead of a scan of the whole record.
struct Index<'a> {
    /// Per slot: the first `src` position of that slot that may still hold
    /// its field. Taken positions are skipped, and the head moved past them
    /// (a taken field never comes back), so each is skipped once.
    src_head: Vec<u32>,
    /// Per `src` position: the next position of the same slot.
    src_next: Vec<u32>,
    /// Per slot: the first `dst` position of that slot (`dst` only grows).
    dst_first: Vec<u32>,
    /// The names of `dst` fields without a slot, which batch statements
    /// compare by name.
    dst_names: BTreeSet<Str<'a>>,
}

impl<'a, 'h> Ctx<'a, 'h> {
    pub fn new(program: &'a Program, input: Vec<Field<'a>>, host: &'h mut dyn Host) -> Self {
        Ctx {
            program,
            src: input.into_iter().map(Some).collect(),
            dst: Vec::new(),
            host,
            now: None,
            fatal: None,
            index: None,
            unindexable: false,
            trace: None,
            dst_unnamed: 0,
            at: Positions::new(),
        }
    }

    /// Notes `e` in the trace, when there is one.
    #[inline]
    fn note(&mut self, e: impl FnOnce() -> Event) {
        if let Some(t) = self.trace.as_deref_mut() {
            t.push(e());
        }
    }

    /// Builds the index when the record has grown past [`INDEX_FROM`]
    /// fields: O(slots + fields), once per record.
    fn ensure_index(&mut self) {
        if self.index.is_some() || self.unindexable || self.src.len() + self.dst.len() <= INDEX_FROM {
            return;
        }
        let slots = self.program.names.len();
        let in_table = |sym: u32| sym == NO_SYM || (sym as usize) < slots;
        if !(self.src.iter().flatten().all(|f| in_table(f.sym)) && self.dst.iter().all(|f| in_table(f.sym))) {
            self.unindexable = true;
            return;
        }
        let mut ix = Index {
            src_head: alloc::vec![NONE; slots],
            src_next: alloc::vec![NONE; self.src.len()],
            dst_first: alloc::vec![NONE; slots],
            dst_names: BTreeSet::new(),
        };
        for (i, f) in self.src.iter().enumerate().rev() {
            if let Some(f) = f.as_ref().filter(|f| f.sym != NO_SYM) {
                ix.src_next[i] = ix.src_head[f.sym as usize];
                ix.src_head[f.sym as usize] = i as u32;
            }
        }
        for (i, f) in self.dst.iter().enumerate() {
            ix.note_dst(f, i);
        }
        self.index = Some(ix);
    }

    /// Appends a field to the output, keeping the index.
    #[inline(always)]
    fn push_dst(&mut self, f: Field<'a>) {
        let at = self.dst.len();
        self.dst.push(f);
        self.note_pushed(at);
    }

    /// Keeps the count, the positions and the index of `dst[at]`, just
    /// appended.
    #[inline(always)]
    fn note_pushed(&mut self, at: usize) {
        let Some(f) = self.dst.get(at) else { return };
        self.dst_unnamed += usize::from(f.sym == NO_SYM);
        self.at.note(true, f.sym, at);
        if let Some(ix) = &mut self.index {
            if f.sym != NO_SYM && f.sym as usize >= ix.dst_first.len() {
                self.index = None;
                self.unindexable = true;
            } else {
                ix.note_dst(f, at);
            }
        }
    }

    /// Removes dst's field `i`, keeping the count of fields without a slot.
    fn take_dst(&mut self, i: usize) -> Field<'a> {
        let f = self.dst.remove(i);
        self.dst_unnamed -= usize::from(f.sym == NO_SYM);
        // The positions after `i` moved down.
        self.at.valid = false;
        f
    }

    fn stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Assign { target, expr } => {
                if let Expr::Access(a) = expr
                    && self.moved(target, a)
                {
                    return;
                }
                if self.trace.is_none() {
                    if let Some(v) = self.value_of(expr, &target.name) {
                        self.push_converted(Field { name: Cow::Borrowed(&target.name), value: v, sym: target.sym }, &target.ty);
                    }
                    return;
                }
                let Some(v) = self.value_of(expr, &target.name) else {
                    self.note(|| Event::NotWritten { target: target.name.clone(), why: "the value is absent".into() });
                    return;
                };
                let before = self.trace.as_ref().filter(|_| !matches!(target.ty, Type::Auto)).map(|_| describe(&v));
                let v = converted(v, &target.ty);
                if let Some(input) = before {
                    self.note(|| Event::Convert { to: type_name(&target.ty), input, output: describe(&v) });
                }
                // Delta §4: a null value stores no field.
                if matches!(v, Value::Null) {
                    self.note(|| Event::NotWritten {
                        target: target.name.clone(),
                        why: "the value is null, and a null stores no field".into(),
                    });
                    return;
                }
                if self.trace.is_some() {
                    let value = describe(&v);
                    self.note(|| Event::Write { target: target.name.clone(), value });
                }
                self.push_dst(Field { name: Cow::Borrowed(&target.name), value: v, sym: target.sym });
            }
            Stmt::Lookup { targets, lookup } => self.lookup(targets, lookup),
            Stmt::Batch { pattern, ty } => self.batch(pattern, ty),
        }
    }

    /// `target = take(key)` of a field in the input that no statement has
    /// written yet, untraced: the field is moved from the input to the
    /// output, renamed and converted where it lies, instead of passing
    /// through the copies of a value returned by [`Self::value_of`] (in
    /// wasm each is a 40-byte copy through linear memory). False, having
    /// done nothing, when that is not the case or the field is absent.
    #[inline(always)]
    fn moved(&mut self, target: &'a Target, a: &'a Access) -> bool {
        if !(a.take && a.fresh && a.key_sym != NO_SYM && self.at.valid && self.trace.is_none()) {
            return false;
        }
        let at = self.at.of(&self.at.src, a.key_sym) as usize;
        let Some(mut f) = self.src.get_mut(at).and_then(Option::take) else { return false };
        f.name = Cow::Borrowed(&target.name);
        f.sym = target.sym;
        self.push_converted(f, &target.ty);
        true
    }

    /// Appends `f` to the output converted to `ty` where it lies there
    /// ([`value::convert_in_place`]), unless it is, or converts to, null,
    /// which stores no field (delta §4).
    #[inline(always)]
    fn push_converted(&mut self, f: Field<'a>, ty: &Type) {
        let at = self.dst.len();
        self.dst.push(f);
        let Some(last) = self.dst.last_mut() else { return };
        value::convert_in_place(&mut last.value, ty);
        if matches!(last.value, Value::Null) {
            self.dst.pop();
        } else {
            self.note_pushed(at);
        }
    }

    fn local_now(&mut self) -> i64 {
        if let Some(t) = self.now {
            return t;
        }
        let (nanos, offset) = self.host.now();
        let t = time::local(nanos, offset);
        self.now = Some(t);
        t
    }

    // ----- field lookup ------------------------------------------------------

    /// Finds `a`'s key for `read` or `take`. Both look at the first field
    /// of that name in dst, then at the first one left in src. `read`
    /// returns the first it finds. `take` (delta §3) removes both, and
    /// returns dst's, or else src's. Names the program knows compare by
    /// slot. (An `option:` name goes to [`Self::find_slow`] directly.)
    ///
    /// `a.fresh` says that no field of that name can be in dst yet
    /// ([`crate::ir::Access::fresh`]): dst is not searched.
    ///
    /// It takes the access whole: simpler for its callers (measured, no
    /// faster or slower than its parts). Its read with [`Positions`] is
    /// [`Self::peek`]'s walk again, kept apart: a version where `peek`
    /// served both (and the lookup's and helpers' cells shared one layout)
    /// measured 1.5–2 % slower on the nginx rule (5 of 6 alternated pairs).
    #[inline]
    fn find(&mut self, a: &Access) -> Option<Field<'a>> {
        // The common case, small enough to inline into its callers: a name
        // the program knows in a record too small for the index. The same
        // rules as below, without the index's branches (`fresh` applied in
        // `find_slow` alone instead: 1.5 % slower on the nginx rule, in 4 of
        // 4 alternated pairs of profile_nginx).
        let (take, sym) = (a.take, a.key_sym);
        if sym != NO_SYM && self.at.valid {
            let in_dst = if a.fresh { NONE } else { self.at.of(&self.at.dst, sym) };
            let in_src = self.at.of(&self.at.src, sym);
            if !take {
                return match (self.dst.get(in_dst as usize), self.src.get(in_src as usize)) {
                    (Some(f), _) => Some(f.clone()),
                    (None, Some(f)) => f.clone(),
                    (None, None) => None,
                };
            }
            let from_src = self.src.get_mut(in_src as usize).and_then(Option::take);
            return if (in_dst as usize) < self.dst.len() { Some(self.take_dst(in_dst as usize)) } else { from_src };
        }
        if sym != NO_SYM && self.index.is_none() && self.src.len() + self.dst.len() <= INDEX_FROM {
            let in_dst = if a.fresh { None } else { self.dst.iter().position(|f| f.sym == sym) };
            if !take {
                return match in_dst {
                    Some(i) => Some(self.dst[i].clone()),
                    None => self.src.iter().flatten().find(|f| f.sym == sym).cloned(),
                };
            }
            let from_src = self.src.iter_mut().find(|f| matches!(f, Some(f) if f.sym == sym)).and_then(Option::take);
            return match in_dst {
                Some(i) => Some(self.take_dst(i)),
                None => from_src,
            };
        }
        self.find_slow(take, &a.key, sym, false)
    }

    /// [`Self::find`] in general: with the index, names without a slot, and
    /// `option:` names (`skip_empty`: an empty field is neither returned
    /// nor removed).
    #[inline(never)]
    fn find_slow(&mut self, take: bool, name: &str, sym: u32, skip_empty: bool) -> Option<Field<'a>> {
        self.ensure_index();
        let hit = |f: &Field<'_>| if sym != NO_SYM { f.sym == sym } else { f.name == name };
        // With an index, the slot's row; names without a slot are scanned.
        let slot = match &self.index {
            Some(ix) if sym != NO_SYM && (sym as usize) < ix.dst_first.len() => Some(sym as usize),
            _ => None,
        };
        let in_dst = match (slot, &self.index) {
            (Some(s), Some(ix)) => Some(ix.dst_first[s] as usize).filter(|&i| i < self.dst.len()),
            _ => self.dst.iter().position(hit),
        }
        .filter(|&i| !(skip_empty && self.dst[i].value.is_empty()));
        if !take && let Some(i) = in_dst {
            return Some(self.dst[i].clone());
        }
        let in_src = match (slot, &mut self.index) {
            (Some(s), Some(ix)) => {
                let mut i = ix.src_head[s];
                while i != NONE && self.src[i as usize].is_none() {
                    i = ix.src_next[i as usize];
                }
                ix.src_head[s] = i;
                (i != NONE).then_some(i as usize)
            }
            _ => self.src.iter().position(|f| matches!(f, Some(f) if hit(f))),
        }
        .filter(|&i| !(skip_empty && self.src[i].as_ref().is_some_and(|f| f.value.is_empty())));
        if !take {
            return self.src[in_src?].clone();
        }
        let from_src = in_src.and_then(|i| self.src[i].take());
        match in_dst {
            Some(i) => {
                // Positions after `i` move down: the index is rebuilt when
                // next needed. Taking from the output is rare (a rule moving
                // its own field), so the O(fields) rebuild is too.
                self.index = None;
                Some(self.take_dst(i))
            }
            None => from_src,
        }
    }

    /// `read(…)` / `take(…)` with options and default (spec §8.3).
    fn access(&mut self, a: &'a Access) -> Option<Field<'a>> {
        if self.trace.is_some() {
            return self.access_traced(a);
        }
        if let Some(f) = self.find(a) {
            return Some(f);
        }
        for (i, opt) in a.options.iter().enumerate() {
            let sym = a.option_syms.get(i).copied().unwrap_or(NO_SYM);
            if let Some(f) = self.find_slow(a.take, opt, sym, true) {
                return Some(f);
            }
        }
        let d = a.default.as_ref()?;
        let v = self.expr(d, &a.key)?;
        Some(Field::new(a.key.as_str(), v))
    }

    /// [`Self::access`], noting where the field came from.
    #[inline(never)]
    fn access_traced(&mut self, a: &'a Access) -> Option<Field<'a>> {
        let read = |key: &str, from: &str, value: Option<&Value<'_>>| Event::Read {
            key: key.into(),
            take: a.take,
            from: from.into(),
            value: value.map(describe),
        };
        let in_output = |ctx: &Self, key: &str| ctx.dst.iter().any(|f| f.name == key);
        let out = in_output(self, &a.key);
        if let Some(f) = self.find(a) {
            self.note(|| read(&a.key, if out { "output" } else { "input" }, Some(&f.value)));
            if a.take
                && let Some(t) = self.trace.as_deref_mut()
            {
                t.took(&a.key);
            }
            return Some(f);
        }
        for (i, opt) in a.options.iter().enumerate() {
            let sym = a.option_syms.get(i).copied().unwrap_or(NO_SYM);
            if let Some(f) = self.find_slow(a.take, opt, sym, true) {
                self.note(|| read(&a.key, &alloc::format!("option {opt}"), Some(&f.value)));
                if a.take
                    && let Some(t) = self.trace.as_deref_mut()
                {
                    t.took(opt);
                }
                return Some(f);
            }
        }
        let absent = self.trace.as_deref().map(|t| t.absent(&a.key)).unwrap_or_default();
        let Some(d) = a.default.as_ref() else {
            self.note(|| read(&a.key, &absent, None));
            return None;
        };
        let v = self.expr(d, &a.key);
        let from = if absent == "absent" { String::from("default") } else { alloc::format!("default, the field being {absent}") };
        self.note(|| read(&a.key, &from, v.as_ref()));
        Some(Field::new(a.key.as_str(), v?))
    }

    // ----- expressions -------------------------------------------------------

    /// [`Self::expr`], with its two commonest forms (a field read or taken,
    /// a constant) evaluated in place: `expr` is large, and in wasm its
    /// prologue (the deadline's check, a big frame) is a good part of
    /// evaluating either.
    #[inline(always)]
    fn value_of(&mut self, e: &'a Expr, target: &'a str) -> Option<Value<'a>> {
        match e {
            Expr::Access(a) => self.access_value(a),
            Expr::Const(Const::Chars(s)) => Some(Value::Chars(Cow::Borrowed(s))),
            Expr::Const(Const::Bool(b)) => Some(Value::Bool(*b)),
            Expr::Const(Const::Digit(d)) => Some(Value::Digit(*d)),
            Expr::Const(c) => Some(const_value(c)),
            // Straight to their own functions, past `expr`'s prologue.
            Expr::Match(m) => self.match_expr(m, target),
            Expr::Pipe { source, fns } => self.piped(source, fns),
            Expr::Fmt { pieces, args, index } => Some(self.fmt(pieces, args, index)),
            Expr::Object(members) => Some(self.object(members)),
            _ => self.expr(e, target),
        }
    }

    /// `read(…) | fns` or `take(…) | fns`.
    #[inline(never)]
    fn piped(&mut self, source: &'a Access, fns: &'a [PipeFn]) -> Option<Value<'a>> {
        let v = self.access_value(source)?;
        Some(self.pipe(v, fns))
    }

    /// Whether [`Self::peek`] finds what [`Self::access`] would: a plain
    /// `read` (no options, no default) of a name the program knows, while
    /// [`Positions`] hold and no trace is kept.
    #[inline(always)]
    fn peekable(&self, a: &Access) -> bool {
        !a.take && a.key_sym != NO_SYM && a.options.is_empty() && a.default.is_none() && self.at.valid && self.trace.is_none()
    }

    /// The value a [`Self::peekable`] access reads, where it is.
    #[inline(always)]
    fn peek(&self, a: &Access) -> Option<&Value<'a>> {
        let in_dst = if a.fresh { NONE } else { self.at.of(&self.at.dst, a.key_sym) };
        if let Some(f) = self.dst.get(in_dst as usize) {
            return Some(&f.value);
        }
        match self.src.get(self.at.of(&self.at.src, a.key_sym) as usize) {
            Some(Some(f)) => Some(&f.value),
            _ => None,
        }
    }

    /// The value of `read(…)` or `take(…)`: a plain `read` of a name the
    /// program knows, found by [`Positions`], clones the value alone, not
    /// the field around it; the rest goes through [`Self::access`].
    #[inline(always)]
    fn access_value(&mut self, a: &'a Access) -> Option<Value<'a>> {
        if self.peekable(a) {
            return self.peek(a).cloned();
        }
        self.access(a).map(|f| f.value)
    }

    /// Evaluates a single-valued expression; `None` is absent.
    pub fn expr(&mut self, e: &'a Expr, target: &'a str) -> Option<Value<'a>> {
        match e {
            Expr::Const(c) => Some(const_value(c)),
            Expr::Access(a) => self.access(a).map(|f| f.value),
            Expr::Now(f) => {
                let t = self.local_now();
                Some(match f {
                    NowFn::Time => Value::Time(t),
                    NowFn::Date => Value::Digit(time::date_digit(t)),
                    NowFn::Hour => Value::Digit(time::hour_digit(t)),
                })
            }
            Expr::Pipe { source, fns } => self.piped(source, fns),
            Expr::AccessDirect { src, dst, fns } => Some(self.access_direct(src, dst, fns)),
            Expr::Fail(msg) => self.fail(msg, target),
            Expr::Match(m) => self.match_expr(m, target),
            Expr::Object(members) => Some(self.object(members)),
            Expr::Array(items) => {
                // Delta §1.3: absent, null and ignore items are skipped; an
                // array with none left is absent.
                let mut out = Vec::with_capacity(items.len());
                for e in items {
                    match self.expr(e, target) {
                        None | Some(Value::Null | Value::Ignore) => {}
                        Some(v) => out.push(Field::new(target, v)),
                    }
                }
                if out.is_empty() { None } else { Some(Value::Array(Box::new(out))) }
            }
            // Delta §11: an error (a non-number operand, a zero divisor, an
            // overflow) stores an ignore field.
            Expr::Calc(c) => Some(match self.calc(c) {
                Some(Num::Int(i)) => Value::Digit(i),
                Some(Num::Float(f)) => Value::Float(f),
                None => Value::Ignore,
            }),
            Expr::LookupNocase { table, key, default } => {
                let hit = match self.expr(key, target) {
                    Some(Value::Chars(s)) => {
                        let k = s.trim().to_lowercase();
                        table.binary_search_by(|(name, _)| name.as_str().cmp(k.as_str())).ok()
                    }
                    _ => None,
                };
                match hit {
                    Some(i) => Some(const_value(&table[i].1)),
                    None => self.expr(default, target),
                }
            }
            Expr::Collect(a) => self.collect(a),
            Expr::Fmt { pieces, args, index } => Some(self.fmt(pieces, args, index)),
        }
    }

    /// `object { … }`.
    #[inline(never)]
    fn object(&mut self, members: &'a [Member]) -> Value<'a> {
        // Members of different names, ranked when the program was
        // prepared, are put in order as they come, by their ranks;
        // others are sorted by name afterwards.
        const RANKED: usize = 16;
        let ranked = members.len() <= RANKED && members.first().is_some_and(|m| m.rank != NO_RANK);
        let mut ranks = [0u32; RANKED];
        let mut out = Vec::with_capacity(members.len());
        for m in members {
            if let Some(v) = self.value_of(&m.expr, &m.name) {
                let f = Field::new(m.name.as_str(), converted(v, &m.ty));
                if ranked {
                    // Moved down past the members that rank after it, a swap
                    // at a time: an `insert` shifts the rest by a copy of
                    // run-time length, a call out of the guest in wasm.
                    let mut at = out.len();
                    ranks[at] = m.rank;
                    out.push(f);
                    while at > 0 && ranks[at - 1] > ranks[at] {
                        ranks.swap(at - 1, at);
                        out.swap(at - 1, at);
                        at -= 1;
                    }
                } else {
                    out.push(f);
                }
            }
        }
        Value::Obj(Box::new(if ranked { out } else { obj_from(out) }))
    }

    /// `fail(msg)`: marks the record failed (the first `fail` wins); the
    /// value is absent. Kept out of [`Self::expr`], which recurses, so that
    /// its frame stays small.
    #[inline(never)]
    fn fail(&mut self, msg: &'a Expr, target: &'a str) -> Option<Value<'a>> {
        if self.fatal.is_none() {
            let text = match self.expr(msg, target) {
                Some(v) => v.raw_text().into_owned(),
                None => String::from("fail() with an absent message"),
            };
            let message = bounded(text);
            self.note(|| Event::Failed { message: message.clone() });
            self.fatal = Some(EvalError::Rejected(message));
        }
        None
    }

    /// Runs the pipe functions over `v`. `intranet_ip` asks the host for
    /// its networks; the others are pure.
    fn pipe(&mut self, mut v: Value<'a>, fns: &'a [PipeFn]) -> Value<'a> {
        for f in fns {
            let before = self.trace.as_ref().map(|_| describe(&v));
            v = match f {
                PipeFn::IntranetIp => pipes::intranet_ip(v, self.host.intranet_nets()),
                f => pipes::apply(f, v),
            };
            if let Some(input) = before {
                self.note(|| Event::Pipe { function: crate::trace::pipe_name(f), input, output: describe(&v) });
            }
        }
        v
    }

    /// `access_direct(src, dst)` (delta §9.3): `L2W` and its kin when both
    /// sides are addresses, else ignore. Both sides are evaluated (a `take`
    /// consumes its field) whatever the first gave.
    #[inline(never)]
    fn access_direct(&mut self, src: &'a Access, dst: &'a Access, fns: &'a [PipeFn]) -> Value<'a> {
        let v = self.direction(src, dst);
        self.pipe(v, fns)
    }

    fn direction(&mut self, src: &'a Access, dst: &'a Access) -> Value<'a> {
        let side = |f: Option<Field<'a>>| match f.map(|f| f.value) {
            Some(Value::Ip(a)) => Some(a),
            Some(Value::Chars(s)) => value::parse_ip(&s),
            _ => None,
        };
        let (s, d) = (side(self.access(src)), side(self.access(dst)));
        let (Some(s), Some(d)) = (s, d) else { return Value::Ignore };
        let nets = self.host.intranet_nets();
        let (s, d) = (intranet::is_lan(nets, s), intranet::is_lan(nets, d));
        Value::Chars(Cow::Borrowed(match (s, d) {
            (true, true) => "L2L",
            (true, false) => "L2W",
            (false, true) => "W2L",
            (false, false) => "W2W",
        }))
    }

    #[inline(never)]
    fn match_expr(&mut self, m: &'a Match, target: &'a str) -> Option<Value<'a>> {
        // Most matches read one field with a plain read: its value is
        // looked at where it is, neither cloned nor dropped.
        if let [source] = m.sources.as_slice()
            && self.peekable(source)
        {
            let taken = self.peek(source).map(|v| {
                m.arms.iter().position(|arm| matches!(arm.conds.as_slice(), [alts] if alts.iter().any(|c| cond_holds(c, v))))
            });
            return match taken {
                Some(Some(i)) => self.value_of(&m.arms[i].result, target),
                // No arm, or an absent source: the default, if any.
                _ => self.value_of(m.default.as_ref()?, target),
            };
        }
        // Most matches read one field: its value needs no vector.
        let (one, mut many);
        let values: &[Value<'a>] = if let [source] = m.sources.as_slice() {
            let Some(v) = self.access_value(source) else { return self.match_default(m, &[], target) };
            one = v;
            core::slice::from_ref(&one)
        } else {
            many = Vec::with_capacity(m.sources.len());
            for s in &m.sources {
                let Some(v) = self.access_value(s) else { return self.match_default(m, &many, target) };
                many.push(v);
            }
            &many
        };
        for (i, arm) in m.arms.iter().enumerate() {
            if arm.conds.len() == values.len()
                && arm.conds.iter().zip(values).all(|(alts, v)| alts.iter().any(|c| cond_holds(c, v)))
            {
                self.note(|| Event::Match {
                    values: values.iter().map(describe).collect(),
                    arm: Some(i as u32 + 1),
                    arms: m.arms.len() as u32,
                    default: false,
                });
                return self.value_of(&arm.result, target);
            }
        }
        self.match_default(m, values, target)
    }

    /// A match that no arm took (or whose source is absent): its default
    /// body, if it has one.
    fn match_default(&mut self, m: &'a Match, values: &[Value<'a>], target: &'a str) -> Option<Value<'a>> {
        self.note(|| Event::Match {
            values: values.iter().map(describe).collect(),
            arm: None,
            arms: m.arms.len() as u32,
            default: m.default.is_some(),
        });
        self.value_of(m.default.as_ref()?, target)
    }

    /// A `calc` expression (delta §11), or `None` on any error.
    fn calc(&mut self, c: &'a Calc) -> Option<Num> {
        let n = match c {
            Calc::Int(i) => Num::Int(*i),
            Calc::Float(f) => Num::Float(*f),
            Calc::Field(a) => match self.access(a)?.value {
                Value::Digit(i) => Num::Int(i),
                Value::Float(f) => Num::Float(f),
                _ => return None,
            },
            Calc::Neg(x) => match self.calc(x)? {
                Num::Int(i) => Num::Int(i.checked_neg()?),
                Num::Float(f) => Num::Float(-f),
            },
            Calc::Fn(f, x) => match (f, self.calc(x)?) {
                (CalcFn::Abs, Num::Int(i)) => Num::Int(i.checked_abs()?),
                (CalcFn::Abs, Num::Float(x)) => Num::Float(x.abs()),
                (_, Num::Int(i)) => Num::Int(i),
                (f, Num::Float(x)) => Num::Int(to_integer(*f, x)?),
            },
            Calc::Bin(op, l, r) => {
                let (l, r) = (self.calc(l)?, self.calc(r)?);
                match (op, l, r) {
                    (CalcOp::Add, Num::Int(a), Num::Int(b)) => Num::Int(a.checked_add(b)?),
                    (CalcOp::Sub, Num::Int(a), Num::Int(b)) => Num::Int(a.checked_sub(b)?),
                    (CalcOp::Mul, Num::Int(a), Num::Int(b)) => Num::Int(a.checked_mul(b)?),
                    (CalcOp::Rem, Num::Int(a), Num::Int(b)) => Num::Int(a.checked_rem(b)?),
                    (CalcOp::Rem, ..) => return None,
                    (CalcOp::Div, _, b) if b.float() == 0.0 => return None,
                    (CalcOp::Div, a, b) => Num::Float(a.float() / b.float()),
                    (CalcOp::Add, a, b) => Num::Float(a.float() + b.float()),
                    (CalcOp::Sub, a, b) => Num::Float(a.float() - b.float()),
                    (CalcOp::Mul, a, b) => Num::Float(a.float() * b.float()),
                }
            }
        };
        match n {
            Num::Float(f) if !f.is_finite() => None,
            n => Some(n),
        }
    }

    /// `collect read/take(keys:[…])` (spec §8.9).
    fn collect(&mut self, a: &'a Access) -> Option<Value<'a>> {
        let mut items: Vec<Field<'a>> = Vec::new();
        if a.take {
            let live = self.src.iter().flatten();
            for f in live.chain(self.dst.iter()) {
                for p in &a.keys {
                    if wildcard(p, f.name.trim()) {
                        items.push(f.clone());
                    }
                }
            }
        } else {
            for p in &a.keys {
                let hit = self.dst.iter().chain(self.src.iter().flatten()).find(|f| wildcard(p, f.name.trim()));
                if let Some(f) = hit {
                    items.push(f.clone());
                }
            }
        }
        if items.is_empty() { None } else { Some(Value::Array(Box::new(items))) }
    }

    /// `fmt("…{name}…", args)` (spec §8.10); always chars. A piece writes
    /// the first argument read or taken under its name. With `index` (see
    /// [`Expr::Fmt`]) the arguments' values are kept by position, on the
    /// stack for up to eight, and each piece knows its own.
    #[inline(never)]
    fn fmt(&mut self, pieces: &'a [FmtPiece], args: &'a [Access], index: &[u32]) -> Value<'a> {
        const ON_STACK: usize = 8;
        if index.len() != pieces.len() || args.len() > ON_STACK {
            return self.fmt_by_name(pieces, args);
        }
        // Plain reads (the usual `@name`s) are looked at where they are,
        // neither cloned nor dropped.
        if args.iter().all(|a| self.peekable(a)) {
            return fmt_text(pieces, |i, _| index.get(i).and_then(|&j| args.get(j as usize)).and_then(|a| self.peek(a)));
        }
        let mut values: [Option<Value<'a>>; ON_STACK] = Default::default();
        for (a, v) in args.iter().zip(values.iter_mut()) {
            *v = self.access(a).map(|f| f.value);
        }
        fmt_text(pieces, |i, _| index.get(i).and_then(|&j| values.get(j as usize)).and_then(Option::as_ref))
    }

    /// [`Self::fmt`] with each piece's argument found by the name of the
    /// field it read.
    #[inline(never)]
    fn fmt_by_name(&mut self, pieces: &'a [FmtPiece], args: &'a [Access]) -> Value<'a> {
        let mut vars: Vec<Field<'a>> = Vec::with_capacity(args.len());
        for a in args {
            if let Some(f) = self.access(a) {
                vars.push(f);
            }
        }
        fmt_text(pieces, |_, name| vars.iter().find(|f| f.name == name).map(|f| &f.value))
    }

    // ----- statements ----------------------------------------------------------

    /// `pattern* = read()/take()` (spec §8.8): moves matching fields to dst,
    /// but not over a field of the same name already there.
    fn batch(&mut self, pattern: &str, ty: &Type) {
        self.ensure_index();
        let before = self.dst.len();
        let every = pattern == "*";
        for i in 0..self.src.len() {
            let Some(f) = &self.src[i] else { continue };
            if !every && !wildcard(pattern, f.name.trim()) {
                continue;
            }
            if let Type::Kind(k) = ty
                && f.value.kind() != *k
            {
                continue;
            }
            let in_dst = match &self.index {
                _ if f.sym != NO_SYM && self.at.valid => self.at.of(&self.at.dst, f.sym) != NONE,
                // Every slot is in the table once the index exists.
                Some(ix) if f.sym != NO_SYM => ix.dst_first[f.sym as usize] != NONE,
                Some(ix) => ix.dst_names.contains(&f.name),
                // A name without a slot matches only a name without one.
                None if f.sym == NO_SYM && self.dst_unnamed == 0 => false,
                None => self.dst.iter().any(|d| d.same_name(f)),
            };
            if in_dst {
                continue;
            }
            if let Some(f) = self.src[i].take() {
                self.push_dst(f);
            }
        }
        let moved = self.dst.len() - before;
        let fields = if moved == 1 { "field" } else { "fields" };
        self.note(|| Event::Write { target: pattern.into(), value: alloc::format!("{moved} {fields} moved") });
    }

    fn param(&mut self, p: &'a Param) -> Cell {
        match p {
            Param::Access(a) => match self.access_value(a) {
                Some(v) => cell_of(&v),
                None => Cell::Null,
            },
            Param::Now(f) => {
                let t = self.local_now();
                match f {
                    NowFn::Time => cell_of(&Value::Time(t)),
                    NowFn::Date => Cell::Integer(time::date_digit(t)),
                    NowFn::Hour => Cell::Integer(time::hour_digit(t)),
                }
            }
            Param::Const(c) => cell_of(&const_value(c)),
            // Up to three arguments (every helper's) on the stack, not in a
            // vector of their own.
            Param::Helper(h, args) if args.len() <= 3 => {
                let mut cells = [Cell::Null, Cell::Null, Cell::Null];
                for (i, a) in args.iter().enumerate() {
                    cells[i] = self.helper_arg(*h, i, a);
                }
                pipes::helper(*h, &cells[..args.len()])
            }
            Param::Helper(h, args) => {
                let args: Vec<Cell> = args.iter().enumerate().map(|(i, a)| self.helper_arg(*h, i, a)).collect();
                pipes::helper(*h, &args)
            }
        }
    }

    /// Argument `i` of helper `h`. An IPv4 field that a helper reads as an
    /// address goes as its integer, which the helper takes as it is,
    /// instead of as text that it would parse back.
    fn helper_arg(&mut self, h: Helper, i: usize, a: &'a Param) -> Cell {
        let address = matches!(h, Helper::Ip4Int | Helper::Ip4Between) || (h == Helper::Cidr4Contains && i == 0);
        match (address, a) {
            (true, Param::Access(acc)) => match self.access_value(acc) {
                Some(Value::Ip(IpAddr::V4(v4))) => Cell::Integer(i64::from(u32::from(v4))),
                Some(other) => cell_of(&other),
                None => Cell::Null,
            },
            _ => self.param(a),
        }
    }

    /// A SQL lookup statement (spec §8.11.3).
    fn lookup(&mut self, targets: &'a [Target], l: &'a Lookup) {
        // Up to four parameters on the stack, not in a vector of their own.
        const ON_STACK: usize = 4;
        let mut stack = [Cell::Null, Cell::Null, Cell::Null, Cell::Null];
        let mut heap;
        let params: &mut [Cell] = if l.params.len() <= ON_STACK {
            &mut stack[..l.params.len()]
        } else {
            heap = alloc::vec![Cell::Null; l.params.len()];
            &mut heap
        };
        for (i, p) in l.params.iter().enumerate() {
            // A parameter that repeats an earlier one is that one's value
            // (a trace notes each read, so it evaluates them all).
            let earlier = l.repeats.get(i).map(|&j| j as usize).filter(|&j| j < i && self.trace.is_none());
            params[i] = match earlier {
                Some(j) => params[j].clone(),
                None => self.param(p),
            };
        }
        let params: &[Cell] = params;
        // Delta §13.5: when every parameter read from the record is null, the
        // query is not sent. Literals and built-ins are text of the
        // statement in the reference, not parameters, so they do not count.
        let mut read = l.params.iter().zip(params).filter(|(p, _)| matches!(p, Param::Access(_) | Param::Helper(..)));
        if read.clone().next().is_some() && read.all(|(_, c)| matches!(c, Cell::Null)) {
            self.note_lookup(
                targets,
                l,
                params,
                "not sent",
                Ok(None),
                "every parameter read from the record is null, so the lookup was not sent",
            );
            return;
        }
        let answer = self.host.query(l.statement, params);
        if self.trace.is_some() {
            let layer = self.host.last_layer();
            let shown = match &answer {
                Ok(row) => Ok(row.as_deref()),
                Err(e) => Err(e.message.as_str()),
            };
            let why = match &answer {
                Ok(None) => "the lookup found no row",
                Err(e) if e.fatal => "the lookup failed, and the host's policy fails the record",
                _ => "the lookup failed",
            };
            self.note_lookup(targets, l, params, layer, shown, why);
        }
        let row = match answer {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(e) => {
                if e.fatal {
                    self.fatal = Some(EvalError::Lookup(e.message));
                }
                return;
            }
        };
        let stmt = &self.program.statements[l.statement as usize];
        let mut star_names: Option<Vec<String>> = None;
        for (i, (t, cell)) in targets.iter().zip(row).enumerate() {
            let name: Cow<'a, str> = if t.name == "_" {
                if stmt.columns.len() == 1 && stmt.columns[0] == "*" {
                    if star_names.is_none() {
                        star_names = Some(self.host.columns(l.statement).unwrap_or_default());
                    }
                    match star_names.as_ref().and_then(|n| n.get(i)) {
                        Some(n) => Cow::Owned(n.clone()),
                        None => Cow::Borrowed("_"),
                    }
                } else {
                    Cow::Borrowed(stmt.columns.get(i).map(String::as_str).unwrap_or("_"))
                }
            } else {
                Cow::Borrowed(t.name.as_str())
            };
            // Delta §4: a NULL column stores no field, typed target or not.
            let v = match cell {
                Cell::Null => {
                    self.note(|| Event::NotWritten { target: String::from(&*name), why: "the column is NULL".into() });
                    continue;
                }
                cell if self.trace.is_none() => {
                    let sym = if t.name == "_" { self.program.resolve(&name) } else { t.sym };
                    self.push_converted(Field { name, value: value_of_cell(cell), sym }, &t.ty);
                    continue;
                }
                cell => convert(value_of_cell(cell), &t.ty),
            };
            if matches!(v, Value::Null) {
                self.note(|| Event::NotWritten {
                    target: String::from(&*name),
                    why: alloc::format!("the column's value does not convert to {}", type_name(&t.ty)),
                });
                continue;
            }
            if self.trace.is_some() {
                let value = describe(&v);
                self.note(|| Event::Write { target: String::from(&*name), value });
            }
            let sym = if t.name == "_" { self.program.resolve(&name) } else { t.sym };
            self.push_dst(Field { name, value: v, sym });
        }
    }
}

impl<'a, 'h> Ctx<'a, 'h> {
    /// Notes a lookup: its parameters, who answered and what (`answer`:
    /// the row, no row, or the error), and, when it gave no row, `why` its
    /// targets got nothing.
    #[inline(never)]
    fn note_lookup(
        &mut self,
        targets: &[Target],
        l: &Lookup,
        params: &[Cell],
        layer: &str,
        answer: Result<Option<&[Cell]>, &str>,
        why: &str,
    ) {
        let Some(t) = self.trace.as_deref_mut() else { return };
        let (row, error) = match answer {
            Ok(row) => (row.map(|r| r.iter().map(describe_cell).collect()), None),
            Err(e) => (None, Some(crate::trace::cut(e.into()))),
        };
        let empty = row.is_none();
        t.push(Event::Lookup {
            statement: l.statement,
            params: params.iter().map(describe_cell).collect(),
            layer: layer.into(),
            row,
            error,
            micros: None,
        });
        if empty {
            for target in targets {
                t.push(Event::NotWritten { target: target.name.clone(), why: why.into() });
            }
        }
    }
}

/// A statement's targets as the trace names them.
fn targets_of(s: &Stmt) -> String {
    match s {
        Stmt::Assign { target, .. } => target.name.clone(),
        Stmt::Lookup { targets, .. } => {
            let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
            names.join(", ")
        }
        Stmt::Batch { pattern, .. } => pattern.clone(),
    }
}

/// A target type as OML writes it.
fn type_name(t: &Type) -> String {
    match t {
        Type::Auto => String::from("auto"),
        Type::Kind(k) => String::from(k.name()),
        Type::Other(s) => s.clone(),
    }
}

impl<'a> Index<'a> {
    /// Records that `dst[at]` is `f`.
    fn note_dst(&mut self, f: &Field<'a>, at: usize) {
        if f.sym == NO_SYM {
            self.dst_names.insert(f.name.clone());
        } else if let Some(first) = self.dst_first.get_mut(f.sym as usize)
            && *first == NONE
        {
            *first = at as u32;
        }
    }
}

/// `v` converted to `ty` (spec §7): the common case, a value already of
/// that kind or no type asked for, decided here without a call to
/// [`convert`].
#[inline(always)]
fn converted<'a>(v: Value<'a>, ty: &Type) -> Value<'a> {
    match ty {
        Type::Kind(k) if v.kind() != *k => convert(v, ty),
        _ => v,
    }
}

/// A number of `calc`: integer arithmetic stays integer (checked), any
/// float makes the operation a float one.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn float(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

/// `round` (halves away from zero), `floor` or `ceil` of `x` as an
/// integer, or `None` outside the 64-bit range. Without `std` there is no
/// `f64::floor`: the integer part comes from the cast, which truncates, and
/// is exact wherever `x` has a fraction at all (|x| < 2^52).
fn to_integer(f: CalcFn, x: f64) -> Option<i64> {
    // Exactly the floats whose integer part fits in an i64 (NaN fails too).
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&x) {
        return None;
    }
    let t = x as i64;
    let frac = x - t as f64;
    match f {
        CalcFn::Floor if frac < 0.0 => t.checked_sub(1),
        CalcFn::Ceil if frac > 0.0 => t.checked_add(1),
        CalcFn::Round if frac >= 0.5 => t.checked_add(1),
        CalcFn::Round if frac <= -0.5 => t.checked_sub(1),
        _ => Some(t),
    }
}

/// `fmt`'s text: its pieces in order, each `{name}` written from
/// `var(piece's position, name)`; `""` when a variable is absent or the
/// format is invalid (spec §8.10).
fn fmt_text<'v, 'a: 'v>(pieces: &[FmtPiece], var: impl Fn(usize, &str) -> Option<&'v Value<'a>>) -> Value<'static> {
    // Sized once for the usual case, instead of growing piece by piece; built
    // as bytes so that texts and digits are copied without a `memory.copy`
    // each in wasm (`value::append`).
    let text: usize = pieces.iter().map(|p| if let FmtPiece::Text(t) = p { t.len() } else { 16 }).sum();
    let mut out: Vec<u8> = Vec::with_capacity(text);
    for (i, p) in pieces.iter().enumerate() {
        match p {
            FmtPiece::Text(t) => value::append(&mut out, t.as_bytes()),
            FmtPiece::Var(name) => match var(i, name) {
                Some(Value::Chars(s)) => value::append(&mut out, s.as_bytes()),
                Some(Value::Digit(d)) => value::append(&mut out, itoa::Buffer::new().format(*d).as_bytes()),
                Some(v) => {
                    let mut s = String::new();
                    v.write_raw(&mut s);
                    value::append(&mut out, s.as_bytes());
                }
                None => return Value::Chars(Cow::Borrowed("")),
            },
            FmtPiece::Invalid => return Value::Chars(Cow::Borrowed("")),
        }
    }
    // Pieces of text, put together: always UTF-8.
    Value::Chars(Cow::Owned(String::from_utf8(out).unwrap_or_default()))
}

/// Does a match condition hold for a value (spec §8.7.3–4)? Ranges and
/// equalities of digits and of text are decided here, inlined into the
/// match; the rest (which builds the constants as values and compares them
/// as [`Value::compare`] does) out of line.
#[inline(always)]
fn cond_holds(c: &Cond, v: &Value<'_>) -> bool {
    match (c, v) {
        (Cond::In(Const::Digit(lo), Const::Digit(hi)), Value::Digit(x)) => lo <= x && x <= hi,
        (Cond::Eq(Const::Digit(k)), Value::Digit(x)) => k == x,
        (Cond::Eq(Const::Chars(k)), Value::Chars(x)) => value::same_bytes(k.as_bytes(), x.as_bytes()),
        (Cond::Gt(n), Value::Float(x)) => x > n,
        (Cond::Lt(n), Value::Float(x)) => x < n,
        _ => cond_holds_slow(c, v),
    }
}

#[inline(never)]
fn cond_holds_slow(c: &Cond, v: &Value<'_>) -> bool {
    let chars = || match v {
        Value::Chars(s) => Some(&**s),
        _ => None,
    };
    match c {
        Cond::Eq(k) => v.same(&const_value(k)),
        Cond::Ne(k) => {
            let k = const_value(k);
            v.kind() == k.kind() && !v.same(&k)
        }
        Cond::In(lo, hi) => {
            let (lo, hi) = (const_value(lo), const_value(hi));
            matches!(lo.compare(v), Some(o) if o.is_le()) && matches!(v.compare(&hi), Some(o) if o.is_le())
        }
        Cond::StartsWith(p) => chars().is_some_and(|s| s.starts_with(p.as_str())),
        Cond::EndsWith(p) => chars().is_some_and(|s| s.ends_with(p.as_str())),
        Cond::Contains(p) => chars().is_some_and(|s| contains(s, p)),
        Cond::IEquals(p) => chars().is_some_and(|s| s.to_lowercase() == *p),
        Cond::IEqualsAny(ps) => chars().is_some_and(|s| {
            let s = s.to_lowercase();
            ps.contains(&s)
        }),
        Cond::IsEmpty => chars().is_some_and(str::is_empty),
        Cond::Gt(n) => v.number().is_some_and(|x| x > *n),
        Cond::Lt(n) => v.number().is_some_and(|x| x < *n),
        Cond::EqNum(n) => v.number().is_some_and(|x| (x - n).abs() < 1e-10),
        Cond::InRange(a, b) => v.number().is_some_and(|x| *a <= x && x <= *b),
        Cond::Regex(re) => chars().is_some_and(|s| re.is_match(s)),
    }
}

/// Whether `needle` occurs in `hay`. A short needle in a short text (a
/// user agent, a path) by a plain scan: `str::contains` sets up a two-way
/// searcher for each call, which for such texts costs more than the scan
/// (in wasm, 8 % of the nginx rule's guest time went to its three
/// `contains` arms). The scan looks for the needle's first byte eight
/// bytes at a time: in wasm each turn of a loop also pays the deadline's
/// check, and a byte a turn made the nginx rule's three arms about 1,000
/// instructions a record. Others by `str::contains`, whose worst case is
/// linear.
fn contains(hay: &str, needle: &str) -> bool {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if n.len() > 16 || h.len() > 256 {
        return hay.contains(needle);
    }
    let Some((&first, rest)) = n.split_first() else { return true };
    if h.len() < n.len() {
        return false;
    }
    // The needle can start at 0..=last.
    let last = h.len() - n.len();
    let at = |i: usize| value::same_bytes(&h[i + 1..i + n.len()], rest);
    let mut i = 0;
    while i + 8 <= h.len() && i <= last {
        // The high bit of each byte that is `first`, exactly: each marks a
        // place where the needle may start.
        let mut zero = crate::bytes::eq_mask(u64::from_le_bytes(value::word(h, i)), first);
        while zero != 0 {
            let j = i + (zero.trailing_zeros() / 8) as usize;
            if j > last {
                return false;
            }
            if at(j) {
                return true;
            }
            zero &= zero - 1;
        }
        i += 8;
    }
    (i..=last).any(|j| h[j] == first && at(j))
}

/// Glob match: `*` any sequence (including `/`), `?` one character.
///
/// It runs for every field a batch statement looks at: `*` alone, and
/// ASCII names, are matched without allocating.
pub fn wildcard(pattern: &str, name: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if pattern.is_ascii() && name.is_ascii() {
        return glob(pattern.as_bytes(), name.as_bytes(), b'*', b'?');
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    glob(&p, &n, '*', '?')
}

/// [`wildcard`] over characters (or bytes, for ASCII), with backtracking to
/// the last `*`.
fn glob<T: Copy + PartialEq>(p: &[T], n: &[T], any_seq: T, any_one: T) -> bool {
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == any_one || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == any_seq {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == any_seq {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::NO_REPEAT;
    use crate::{Source, compile};
    use alloc::format;
    use alloc::vec;

    /// The short-text `contains` agrees with `str::contains`: needles at
    /// the start, the end, overlapping, absent, empty, longer than the
    /// text, non-ASCII, and past its length limits.
    #[test]
    fn contains_agrees_with_str_contains() {
        let long = "x".repeat(300) + "bot";
        let hays = ["", "b", "bot", "Googlebot/2.1", "Mozilla/5.0", "aab", "abab", "ébot", "botté", "spidey spider", &long];
        let needles = ["", "b", "bot", "Bot", "spider", "ab", "aab", "é", "té", "2.1", "Mozilla/5.0 (X11)", "0123456789abcdefX"];
        for h in hays {
            for n in needles {
                assert_eq!(contains(h, n), h.contains(n), "{h:?} contains {n:?}");
            }
        }
        // The word-at-a-time scan: every text length 0-40, the needle (or a
        // near miss, or its first byte alone) at every place, among bytes
        // one above and one below its first (a borrow between bytes must
        // not make a place), and bytes past 0x7f.
        for len in 0..=40 {
            for fill in [b'a', b'c', 0x80, 0xff] {
                for needle in [&b"b"[..], b"bo", b"bot", b"bxt", b"bottom-of-the-sea"] {
                    for place in 0..=len {
                        let mut h = alloc::vec![fill; len];
                        for (k, &c) in needle.iter().enumerate() {
                            if let Some(b) = h.get_mut(place + k) {
                                *b = c;
                            }
                        }
                        let (h, n) = (String::from_utf8_lossy(&h).into_owned(), core::str::from_utf8(needle).unwrap());
                        for probe in [n, "bot", "b", "ot", "bott"] {
                            assert_eq!(contains(&h, probe), h.contains(probe), "{h:?} contains {probe:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn wildcards_match_the_same_on_bytes_and_on_characters() {
        let cases = [
            ("*", "", true),
            ("*", "anything/at all", true),
            ("a*", "abc", true),
            ("a*", "ba", false),
            ("*c", "abc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("**", "x", true),
            ("", "", true),
            ("", "x", false),
            ("h?llo*", "héllo wörld", true),
            ("*ö*", "héllo wörld", true),
            ("*ö", "héllo wörld", false),
        ];
        for (p, n, want) in cases {
            assert_eq!(wildcard(p, n), want, "{p:?} against {n:?}");
            let (pc, nc): (Vec<char>, Vec<char>) = (p.chars().collect(), n.chars().collect());
            assert_eq!(glob(&pc, &nc, '*', '?'), want, "{p:?} against {n:?}, by characters");
        }
    }

    fn run<'a>(program: &'a Program, input: Vec<Field<'a>>) -> Vec<(String, Value<'a>)> {
        let out = evaluate(program, 0, input, &mut Offline::at((0, 0))).unwrap();
        out.into_iter().map(|f| (f.name.into_owned(), f.value)).collect()
    }

    #[test]
    fn only_fields_that_own_nothing_are_forgotten() {
        let plain = [
            Value::Chars(Cow::Borrowed("x")),
            Value::BigInt(Cow::Borrowed("123456789012345678901234567890")),
            Value::Digit(1),
            Value::Float(1.5),
            Value::Bool(true),
            Value::Ip(IpAddr::from([10, 0, 0, 1])),
            Value::Time(0),
            Value::Null,
            Value::Ignore,
        ];
        for v in &plain {
            assert!(owns_nothing(&Field::new("a", v.clone())), "{v:?}");
            assert!(!owns_nothing(&Field::new(String::from("a"), v.clone())), "an owned name, {v:?}");
        }
        let owning = [
            Value::Chars(Cow::Owned(String::from("x"))),
            Value::BigInt(Cow::Owned(String::from("123456789012345678901234567890"))),
            Value::Obj(Box::default()),
            Value::Array(Box::new(vec![Field::new("0", Value::Digit(1))])),
            // An object of both kinds of members (tests/give_back.rs counts
            // that what the owning ones hold is freed).
            Value::Obj(Box::new(vec![
                Field::new("a", Value::Digit(1)),
                Field::new("b", Value::Chars(Cow::Owned(String::from("y")))),
                Field::new(String::from("c"), Value::Null),
                Field::new("d", Value::Array(Box::new(vec![Field::new("0", Value::Chars(Cow::Owned(String::from("z"))))]))),
            ])),
        ];
        for v in &owning {
            assert!(!owns_nothing(&Field::new("a", v.clone())), "{v:?}");
        }
        // Emptied either way (tests/give_back.rs counts the blocks freed).
        let mut fields: Vec<Field> = plain.iter().chain(&owning).map(|v| Field::new("a", v.clone())).collect();
        clear_fields(&mut fields);
        assert!(fields.is_empty() && fields.capacity() >= plain.len() + owning.len());
    }

    /// The slots remembered between records are hints: records whose names
    /// move between places, names of one length at one place, names the
    /// program does not know, and a second program with other slots (a
    /// reload) all get the slot `resolve` gives, through one `Recent`.
    #[test]
    fn remembered_slots_are_only_hints() {
        let a = compile(&[Source { file: "a.oml", text: "name : t\n---\nv = read(ab) ;\nw = read(cd) ;\n" }], (0, 0)).unwrap();
        let b =
            compile(&[Source { file: "b.oml", text: "name : t\n---\nx = read(aa) ;\ny = read(cd) ;\nz = read(ab) ;\n" }], (0, 0))
                .unwrap();
        let shapes: [&[&str]; 5] =
            [&["ab", "cd"], &["cd", "ab"], &["zz", "ab", "cd"], &["ab", "cd", "ab"], &["aa", "cd", "ab", "q", "ab"]];
        let mut recent = Recent::new();
        for round in 0..3 {
            for program in [&a, &b] {
                for shape in shapes {
                    for (i, name) in shape.iter().enumerate() {
                        assert_eq!(recent.slot(program, i, name), program.resolve(name), "round {round}, {shape:?}, field {i}");
                    }
                }
            }
        }
        // Past 16 places and 16 bytes, keys are shared: still only hints.
        let long: Vec<String> = (0..40).map(|i| format!("{}{i}", "n".repeat(i % 20))).collect();
        let src = format!("name : t\n---\n{}", long.iter().map(|n| format!("o_{n} = read({n}) ;\n")).collect::<String>());
        let c = compile(&[Source { file: "c.oml", text: &src }], (0, 0)).unwrap();
        for _ in 0..2 {
            for (i, name) in long.iter().chain(long.iter().rev()).enumerate() {
                assert_eq!(recent.slot(&c, i, name), c.resolve(name), "{name} at {i}");
            }
        }
    }

    /// A `Spare` carries the field vectors from record to record: the same
    /// outputs as `evaluate`, with the input's and the output's buffers kept
    /// (so the next record allocates neither), and a buffer past
    /// `KEEP_FIELDS` let go.
    #[test]
    fn a_spare_keeps_the_field_vectors_between_records() {
        let src = "name : t\n---\nV = read(id) ;\nW = read(x) ;\n* = take() ;\n";
        let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
        let record =
            |i: i64| vec![Field::new("id", Value::Digit(i)), Field::new("x", Value::chars("a")), Field::new("y", Value::Null)];
        let mut spare = Spare::new();
        for i in 0..3 {
            let mut input = spare.fields();
            assert!(i == 0 || input.capacity() >= 3, "record {i}: the input's buffer was not kept");
            input.extend(record(i));
            let out = evaluate_with(&program, 0, input, &mut Offline::at((0, 0)), &mut spare).unwrap();
            assert_eq!(out, evaluate(&program, 0, record(i), &mut Offline::at((0, 0))).unwrap());
            let at = out.as_ptr() as usize;
            spare.give_back(out);
            // The output's buffer is kept, and is the next output's.
            assert!(spare.dst.capacity() >= 3, "record {i}: the output's buffer was not kept");
            let next = evaluate_with(&program, 0, record(i), &mut Offline::at((0, 0)), &mut spare).unwrap();
            assert_eq!(next.as_ptr() as usize, at, "record {i}: the next output has another buffer");
            spare.give_back(next);
        }
        let names: Vec<String> = (0..=Spare::KEEP_FIELDS).map(|i| format!("f{i}")).collect();
        let mut big = spare.fields();
        big.extend(names.iter().map(|n| Field::new(n.as_str(), Value::Digit(1))));
        let out = evaluate_with(&program, 0, big, &mut Offline::at((0, 0)), &mut spare).unwrap();
        assert_eq!(spare.src.capacity(), 0, "a huge input's buffer is let go");
        spare.give_back(out);
        assert_eq!(spare.dst.capacity(), 0, "a huge output's buffer is let go");
    }

    /// 200 000 top-level fields. Each lookup is O(1) amortised (a slot index
    /// once a record passes `INDEX_FROM` fields) and the batch statement's
    /// same-name check is a slot or a set lookup, so the whole record is
    /// O(n log n): well under a second in release. It used to scan the output
    /// for every field moved (O(n²), minutes).
    #[test]
    fn a_record_of_200_000_fields_is_linear_work() {
        let src = "name : t\n---\nfirst = read(f0) ;\nlast = take(f199999) ;\nagain = read(f199999) ;\n\
                   opt = take(option:[nope, f5]) ;\n__tmp = read(f7) ;\n* = take() ;\nafter = read(f9) ;\n";
        let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
        let n = 200_000;
        let names: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
        let mut input: Vec<Field<'_>> =
            names.iter().enumerate().map(|(i, s)| Field::new(s.as_str(), Value::Digit(i as i64))).collect();
        // Duplicates: of an unknown name (compared by name) and of a target
        // (compared by slot), which the batch statement does not move.
        input.push(Field::new("f3", Value::Digit(-3)));
        input.push(Field::new("first", Value::Digit(-1)));
        input.push(Field::new("f0", Value::Digit(-2)));
        let out = run(&program, input);
        assert_eq!(out.len(), 4 + (n - 2) + 1, "first, last, opt, __tmp, f0..f199998 but f5, after");
        assert_eq!(out[0], ("first".into(), Value::Digit(0)));
        assert_eq!(out[1], ("last".into(), Value::Digit(199_999)));
        assert_eq!(out[2], ("opt".into(), Value::Digit(5)));
        assert_eq!(out[3], ("__tmp".into(), Value::Ignore));
        // The batch moved the rest in input order, each name once.
        let moved: Vec<&str> = out[4..out.len() - 1].iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<&str> = names.iter().map(String::as_str).filter(|n| !matches!(*n, "f5" | "f199999")).collect();
        assert_eq!(moved, want);
        assert_eq!(out[4 + 3].1, Value::Digit(3));
        assert_eq!(out.last(), Some(&("after".into(), Value::Digit(9))));
    }

    /// The key and `fresh` flag of every read and take of `program`, in the
    /// order `ir::prepare` visits them; with `clear`, each flag set to false.
    /// Reads and takes found by [`Positions`] find what scanning finds:
    /// names read from the input and from the output, takes of both,
    /// typed takes whose conversion fails or meets a null, two input
    /// fields of one name (the table gives up for the record), a take of
    /// a field a statement wrote (positions move; the table gives up from
    /// there), options, defaults, `fmt` of present and absent names,
    /// objects, batch statements over names the output has, and the
    /// lookup's parameters.
    #[test]
    fn positions_find_what_scans_find() {
        let src = "name : t\n---\n\
                   a : digit = take(n) ;\nb = read(s) ;\nc = take(option:[zz, s]) ;\nd = read(s) { _ : chars(none) } ;\n\
                   e : ip = take(ip) ;\nf = take(dup) ;\ng = take(dup) ;\nh = read(a) ;\na = take(a) ;\ni = read(a) ;\n\
                   j = fmt(\"{b}/{e}/{q}\", @b, @e, @q) ;\nk = object { x = read(b) ; y = read(nul) ; z = read(w) ; } ;\n\
                   l : digit = take(nul) ;\nm = match read(n2) { in (digit(1), digit(5)) => chars(low) ; _ => chars(high) ; } ;\n\
                   o, p = select x, y from t where k = ip4_int(read(e)) ;\nw = read(w) ;\n* = take() ;\n";
        // The same without the take of a written field, so that the batch
        // statement runs with the table.
        let kept = "name : t\n---\nb = read(s) ;\nw = read(w) ;\nc = take(s) ;\nv : digit = take(n) ;\n* = take() ;\n";
        let records: Vec<Vec<Field<'static>>> = vec![
            vec![
                Field::new("n", Value::chars("42")),
                Field::new("s", Value::chars("text")),
                Field::new("ip", Value::chars("10.1.2.3")),
                Field::new("dup", Value::Digit(1)),
                Field::new("w", Value::Bool(true)),
                Field::new("n2", Value::Digit(3)),
                Field::new("nul", Value::Null),
                Field::new("other", Value::Digit(9)),
            ],
            vec![
                Field::new("n", Value::chars("not a number")),
                Field::new("dup", Value::Digit(1)),
                Field::new("dup", Value::Digit(2)),
                Field::new("ip", Value::chars("nope")),
                Field::new("n2", Value::Digit(30)),
            ],
            vec![Field::new("s", Value::chars("")), Field::new("zz", Value::chars("")), Field::new("a", Value::Digit(5))],
            vec![],
        ];
        for text in [src, kept] {
            let program = compile(&[Source { file: "t.oml", text }], (0, 0)).unwrap();
            for (i, record) in records.iter().enumerate() {
                let mut outs = Vec::new();
                for scan in [false, true] {
                    let mut spare = Spare::new();
                    spare.scan = scan;
                    let out = evaluate_with(&program, 0, record.clone(), &mut Offline::at((0, 0)), &mut spare).unwrap();
                    outs.push(out);
                }
                assert_eq!(outs[0], outs[1], "record {i} of {text}");
            }
        }
    }

    /// The guest's path (`Spare::writer_hides`, then `Writer::record_hiding`)
    /// writes the frame that `evaluate_with` and `Writer::record` write.
    #[test]
    fn hiding_while_writing_writes_what_hiding_first_writes() {
        let src = "name : t\n---\n__a = read(x) ;\nb = read(__a) ;\n__c = object { d = chars(1) ; } ;\n* = take() ;\n";
        let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
        let record =
            || vec![Field::new("x", Value::chars("v")), Field::new("__in", Value::Digit(1)), Field::new("y", Value::Digit(2))];
        let (mut first, mut writing) = (crate::frame::Writer::new(), crate::frame::Writer::new());
        let out = evaluate_with(&program, 0, record(), &mut Offline::at((0, 0)), &mut Spare::new()).unwrap();
        first.record(&out);
        let mut spare = Spare::new();
        spare.writer_hides(true);
        let out = evaluate_with(&program, 0, record(), &mut Offline::at((0, 0)), &mut spare).unwrap();
        assert!(out.iter().any(|f| f.name == "__a" && f.value == Value::chars("v")));
        writing.record_hiding(&out);
        let (first, writing) = (first.take_frame(), writing.take_frame());
        assert_eq!(first, writing);
        let mut r = crate::frame::Reader::new(&writing).unwrap();
        let fields = r.fields(r.size(0).unwrap()).unwrap();
        let ignored: Vec<&str> = fields.iter().filter(|f| f.value == Value::Ignore).map(|f| &*f.name).collect();
        assert_eq!(ignored, ["__a", "__c", "__in"]);
    }

    fn fresh_flags(program: &mut Program, clear: bool) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        for m in &mut program.models {
            crate::ir::visit_model(m, &mut |n| {
                if let crate::ir::Named::Key(a) = n {
                    out.push((a.key.clone(), a.fresh));
                    a.fresh &= !clear;
                }
            });
        }
        out
    }

    /// An access is `fresh` (the output is not searched) only where no
    /// earlier statement can have written its name, and what fresh accesses
    /// give is what searching both gives.
    #[test]
    fn fresh_accesses_are_those_no_earlier_statement_writes_and_change_nothing() {
        let src = "name : t\n---\na = read(x) ;\nx = chars(1) ;\nb = read(x) ;\nc = take(y) ;\nd = read(c) ;\n\
                   g* = take() ;\ne = read(gz) ;\nf = object { m = read(q) ; } ;\nq = read(x) ;\n";
        let mut program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
        let fresh = fresh_flags(&mut program, false);
        let want = [("x", true), ("x", false), ("y", true), ("c", false), ("gz", false), ("q", true), ("x", false)];
        assert_eq!(fresh, want.map(|(k, f)| (String::from(k), f)));
        let record = || {
            vec![
                Field::new("x", Value::Digit(7)),
                Field::new("y", Value::chars("why")),
                Field::new("c", Value::chars("in")),
                Field::new("gz", Value::Digit(1)),
                Field::new("q", Value::Digit(2)),
            ]
        };
        let mut plain = program.clone();
        fresh_flags(&mut plain, true);
        assert!(fresh_flags(&mut plain, false).iter().all(|(_, f)| !f));
        let with = run(&program, record());
        assert_eq!(with, run(&plain, record()));
        assert_eq!(with.iter().find(|(n, _)| n == "b").map(|(_, v)| v), Some(&Value::chars("1")));
    }

    /// A batch statement moves the first input field of each name that the
    /// output does not hold yet, names the program knows or not, with the
    /// index or without it.
    #[test]
    fn a_batch_moves_each_name_once_and_not_over_the_output() {
        // Narrow, with the index (padded past INDEX_FROM), and wide (many
        // input fields and many output fields) under INDEX_FROM.
        for (pad, consts) in [(0, 0), (INDEX_FROM + 1, 0), (16, 20)] {
            assert!(pad == INDEX_FROM + 1 || pad + 6 + consts + 2 <= INDEX_FROM);
            let filler: String = (0..consts).map(|i| format!("c{i} = chars(c) ;\n")).collect();
            let src = format!("name : t\n---\n{filler}a = chars(1) ;\nq = read(b) ;\n* = take() ;\n");
            let program = compile(&[Source { file: "t.oml", text: &src }], (0, 0)).unwrap();
            let mut input = vec![
                Field::new("a", Value::chars("x")),
                Field::new("b", Value::Digit(1)),
                Field::new("zz", Value::Digit(3)),
                Field::new("b", Value::Digit(2)),
                Field::new("zz", Value::Digit(4)),
                Field::new("a", Value::chars("y")),
            ];
            input.extend((0..pad).map(|_| Field::new("pad", Value::Null)));
            let out: Vec<_> = run(&program, input).into_iter().filter(|(n, _)| n != "pad" && !n.starts_with('c')).collect();
            let want = vec![
                ("a".into(), Value::chars("1")),
                ("q".into(), Value::Digit(1)),
                ("b".into(), Value::Digit(1)),
                ("zz".into(), Value::Digit(3)),
            ];
            assert_eq!(out, want, "padding {pad}, {consts} statements before");
        }
    }

    /// An object whose members all have different names is put in name
    /// order by the members' ranks, as sorting by name puts it, whichever
    /// members are absent; with a name twice it is sorted by name.
    #[test]
    fn objects_in_rank_order_are_objects_in_name_order() {
        let src = "name : t\n---\no = object { u = read(u) ; b = read(b) ; m = read(m) ; a2 = read(a) ; } ;\n\
                   p = object { z = read(u) ; z = read(b) ; a = read(m) ; } ;\n";
        let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
        let mut by_name = program.clone();
        let mut ranked = Vec::new();
        for s in &mut by_name.models[0].stmts {
            if let Stmt::Assign { target, expr: Expr::Object(members) } = s {
                ranked.push((target.name.clone(), members.iter().map(|m| m.rank).collect::<Vec<_>>()));
                members.iter_mut().for_each(|m| m.rank = crate::ir::NO_RANK);
            }
        }
        let no = crate::ir::NO_RANK;
        assert_eq!(ranked, vec![(String::from("o"), vec![3, 1, 2, 0]), (String::from("p"), vec![no, no, no])]);
        let all = ["u", "b", "m", "a"];
        for mask in 0..16u32 {
            let input: Vec<Field> = all
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & 1 << i != 0)
                .map(|(i, n)| Field::new(*n, Value::Digit(i as i64)))
                .collect();
            assert_eq!(run(&program, input.clone()), run(&by_name, input), "fields {mask:04b}");
        }
    }

    /// `fmt` with its pieces' arguments known by position writes what
    /// finding them by name writes: absent arguments, names no argument
    /// has, takes; with `option:` names or a repeated key it finds them by
    /// name.
    #[test]
    fn fmt_by_position_writes_what_fmt_by_name_writes() {
        let src = "name : t\n---\na = fmt(\"{x}-{y}\", @x, @y) ;\nb = fmt(\"{x}-{z}\", @x, @z) ;\n\
                   c = fmt(\"{x}{x}\", take(x), read(x)) ;\nd = fmt(\"{y}/{q}\", read(option:[q, y]), @q) ;\n\
                   e = fmt(\"<{w}>\", @w) ;\nf = fmt(\"{x}:{nope}\", @x) ;\n\
                   g = fmt(\"{y}+{x}\", take(y), @x) ;\nh = fmt(\"{y}\", @y) ;\n";
        let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
        let mut by_name = program.clone();
        let mut indexed = Vec::new();
        for s in &mut by_name.models[0].stmts {
            if let Stmt::Assign { target, expr: Expr::Fmt { index, .. } } = s {
                indexed.push((target.name.clone(), !index.is_empty()));
                index.clear();
            }
        }
        let want = [("a", true), ("b", true), ("c", false), ("d", false), ("e", true), ("f", true), ("g", true), ("h", true)];
        assert_eq!(indexed, want.map(|(n, i)| (String::from(n), i)));
        let records = [
            vec![Field::new("x", Value::Digit(1)), Field::new("y", Value::chars("why")), Field::new("q", Value::Bool(true))],
            vec![Field::new("x", Value::Digit(1))],
            vec![Field::new("y", Value::chars("y1")), Field::new("y", Value::chars("y2")), Field::new("w", Value::Digit(3))],
            vec![],
        ];
        for r in records {
            let got = run(&program, r.clone());
            assert_eq!(got, run(&by_name, r.clone()), "{r:?}");
            if r.len() == 3 && r[0].name == "x" {
                assert_eq!(got[0], (String::from("a"), Value::chars("1-why")));
            }
        }
    }

    /// Answers a lookup with the sum of its integer parameters, and keeps
    /// the parameters it was given.
    struct Sums(Vec<Vec<Cell>>);

    impl Host for Sums {
        fn query(&mut self, _: u32, params: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError> {
            self.0.push(params.to_vec());
            let sum = params.iter().map(|c| if let Cell::Integer(i) = c { *i } else { 0 }).sum();
            Ok(Some(vec![Cell::Integer(sum)]))
        }
        fn columns(&mut self, _: u32) -> Result<Vec<String>, QueryError> {
            Ok(vec!["s".into()])
        }
        fn now(&mut self) -> (i64, i32) {
            (0, 0)
        }
    }

    /// A parameter that reads what an earlier one read takes its value;
    /// with a take among them, each is read in turn.
    #[test]
    fn a_lookups_repeated_reads_are_read_once_and_bind_the_same() {
        let lookup = |params: &str| {
            let src = format!("name : t\n---\ns = select s from t where lo <= {params} ;\n");
            let mut program = compile(&[Source { file: "t.oml", text: &src }], (0, 0)).unwrap();
            let Stmt::Lookup { lookup, .. } = &mut program.models[0].stmts[0] else { panic!("not a lookup") };
            let repeats = lookup.repeats.clone();
            let mut host = Sums(Vec::new());
            let input = vec![Field::new("ip", Value::chars("10.0.0.1")), Field::new("ip", Value::chars("10.0.0.2"))];
            evaluate(&program, 0, input, &mut host).unwrap();
            (repeats, host.0)
        };
        let ip = |last: i64| Cell::Integer((10 << 24) + last);
        let (repeats, sent) = lookup("ip4_int(read(ip)) and hi >= ip4_int(read(ip))");
        assert_eq!(repeats, vec![NO_REPEAT, 0]);
        assert_eq!(sent, vec![vec![ip(1), ip(1)]]);
        let (repeats, sent) = lookup("ip4_int(take(ip)) and hi >= ip4_int(read(ip))");
        assert!(repeats.is_empty());
        assert_eq!(sent, vec![vec![ip(1), ip(2)]]);
    }

    /// The same rules over small records (scanned) and large ones (indexed)
    /// give the same fields.
    #[test]
    fn lookups_agree_with_and_without_the_index() {
        let src = "name : t\n---\na = read(k) ;\nb = take(k) ;\nc = take(k) ;\nd = read(option:[e, k]) ;\n\
                   e = take(option:[z, k]) ;\nk = read(a) ;\nf = read(k) ;\ng* = take() ;\nh = read(g1) ;\n";
        let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
        for pad in [0, INDEX_FROM + 1] {
            let mut input = vec![
                Field::new("k", Value::Chars("".into())),
                Field::new("k", Value::Digit(2)),
                Field::new("g1", Value::Digit(3)),
                Field::new("k", Value::Digit(4)),
                Field::new("g1", Value::Digit(5)),
                Field::new("k", Value::Digit(6)),
            ];
            input.extend((0..pad).map(|_| Field::new("pad", Value::Null)));
            let out = run(&program, input);
            let want = vec![
                ("a".into(), Value::Chars("".into())),
                ("b".into(), Value::Chars("".into())),
                ("c".into(), Value::Digit(2)),
                ("d".into(), Value::Digit(4)),
                ("e".into(), Value::Digit(4)),
                ("k".into(), Value::Chars("".into())),
                ("f".into(), Value::Chars("".into())),
                ("g1".into(), Value::Digit(3)),
                ("h".into(), Value::Digit(3)),
            ];
            assert_eq!(out, want, "padding {pad}");
        }
    }
}
