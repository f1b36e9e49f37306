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
    /// The values the record's statements built went past the budget the
    /// caller set ([`Spare::with_value_budget`]): what, and the budget.
    Limit(String),
}

impl core::fmt::Display for EvalError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EvalError::NoSuchModel(i) => write!(f, "no model #{i} in this rule set"),
            EvalError::Lookup(m) => write!(f, "lookup failed: {m}"),
            EvalError::Rejected(m) => write!(f, "rejected by the rule: {m}"),
            EvalError::Limit(m) => write!(f, "limit reached (value bytes): {m}"),
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
    /// See [`Spare::with_value_budget`].
    value_budget: Option<usize>,
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
/// own), about 5 % of the work on a nginx record. Records of one source come with the same names at the same
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

    /// Bounds the values each record's statements build at `bytes` (texts
    /// and members counted by their bytes, other values as 16): past it
    /// the record fails with [`EvalError::Limit`]. The sum is checked after
    /// each statement, and by `fmt` while it builds its text, so a record
    /// holds at most about twice the budget. A host whose memory is bounded
    /// otherwise (the guest, in its instance's memory) needs none; the
    /// native evaluator of `omlet test --native` sets one.
    pub const fn with_value_budget(mut self, bytes: usize) -> Spare {
        self.value_budget = Some(bytes);
        self
    }

    pub const fn new() -> Spare {
        Spare {
            src: Vec::new(),
            dst: Vec::new(),
            at: Positions::new(),
            recent: Recent::new(),
            writer_hides: false,
            value_budget: None,
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
/// calls the field's drop for each, a call of its own in wasm for each of a
/// nginx record's sixteen fields. Forgetting a field that owns nothing
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
    explain_with(program, model, input, host, &mut Spare::new())
}

/// [`explain`], with the value budget of `spare` ([`Spare::with_value_budget`]).
pub fn explain_with<'a>(
    program: &'a Program,
    model: usize,
    input: Vec<Field<'a>>,
    host: &mut dyn Host,
    spare: &mut Spare,
) -> (Result<Vec<Field<'a>>, EvalError>, Trace) {
    let Some(m) = program.models.get(model) else {
        let e = EvalError::NoSuchModel(model);
        let mut trace = Trace::default();
        trace.error = Some(alloc::format!("{e}"));
        return (Err(e), trace);
    };
    let mut trace = Some(Box::new(Trace::new(&m.name, &m.file)));
    let out = run(program, model, input, host, spare, Some(&mut trace), true);
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
    ctx.budget = spare.value_budget;
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
        let before = ctx.dst.len();
        ctx.stmt(stmt);
        if ctx.budget.is_some() {
            ctx.charge(before);
        }
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

/// About how many bytes `v` takes: texts by their bytes, objects and
/// arrays by their members', anything else 16.
fn value_bytes(v: &Value<'_>) -> usize {
    match v {
        Value::Chars(t) | Value::BigInt(t) => t.len(),
        Value::Obj(m) | Value::Array(m) => m.iter().map(|f| 16 + f.name.len() + value_bytes(&f.value)).sum(),
        _ => 16,
    }
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
    /// The caller's bound on the bytes of values built ([`Spare::with_value_budget`]).
    budget: Option<usize>,
    /// Bytes of the values written to `dst` so far, while there is a budget.
    built: usize,
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
            budget: None,
            built: 0,
            dst_unnamed: 0,
            at: Positions::new(),
        }
    }

    /// Adds the fields a statement appended from `dst[before]` on to the
    /// bytes built, and fails the record past the budget.
    fn charge(&mut self, before: usize) {
        let added: usize = self.dst.get(before..).unwrap_or(&[]).iter().map(|f| f.name.len() + value_bytes(&f.value)).sum();
        self.built = self.built.saturating_add(added);
        self.over_budget();
    }

    /// Bytes a statement may still build, while there is a budget.
    fn budget_left(&self) -> Option<usize> {
        self.budget.map(|max| max.saturating_sub(self.built))
    }

    /// Fails the record when the values built are past the budget (or
    /// `fmt` found its text would be).
    fn over_budget(&mut self) {
        if let Some(max) = self.budget
            && self.built > max
            && self.fatal.is_none()
        {
            self.fatal = Some(EvalError::Limit(alloc::format!("the record's statements built more than {max} bytes of values")));
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

mod expr;
pub use expr::wildcard;
mod fields;
mod lookup;
#[cfg(test)]
mod tests;
