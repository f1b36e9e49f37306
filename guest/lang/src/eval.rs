//! The evaluator: runs one model of a compiled [`Program`] over one record.
//!
//! `src` is the input view (fields can be taken out of it), `dst` the output
//! being built (spec §1). Evaluation never fails on data: a missing field, a
//! failed conversion or a failed lookup makes a value absent. The only
//! per-record error is a lookup error that the host marked fatal.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ir::*;
use crate::pipes;
use crate::time;
use crate::value::{Field, NO_SYM, Type, Value, convert, obj_insert};

/// A SQL value crossing to or from the knowledge provider.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

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
}

/// Why a record could not be evaluated.
#[derive(Debug, Clone, PartialEq)]
pub enum EvalError {
    NoSuchModel(usize),
    /// A lookup failed and the host's policy says to fail the record.
    Lookup(String),
}

impl core::fmt::Display for EvalError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EvalError::NoSuchModel(i) => write!(f, "no model #{i} in this rule set"),
            EvalError::Lookup(m) => write!(f, "lookup failed: {m}"),
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
    let m = program.models.get(model).ok_or(EvalError::NoSuchModel(model))?;
    let mut input = input;
    for f in &mut input {
        f.sym = program.resolve(&f.name);
    }
    let mut ctx = Ctx::new(program, input, host);
    // Most statements write one field: one allocation for the output.
    ctx.dst.reserve(m.stmts.len());
    for stmt in &m.stmts {
        ctx.stmt(stmt);
        if let Some(e) = ctx.fatal.take() {
            return Err(EvalError::Lookup(e));
        }
    }
    let mut out = ctx.dst;
    for f in &mut out {
        if f.name.starts_with("__") {
            f.value = Value::Ignore;
        }
    }
    Ok(out)
}

/// Evaluation state for one record.
pub struct Ctx<'a, 'h> {
    program: &'a Program,
    src: Vec<Option<Field<'a>>>,
    dst: Vec<Field<'a>>,
    host: &'h mut dyn Host,
    now: Option<i64>,
    fatal: Option<String>,
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
        }
    }

    fn stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Assign { target, expr } => {
                if let Some(v) = self.expr(expr, &target.name) {
                    let v = convert(v, &target.ty);
                    self.dst.push(Field { name: Cow::Borrowed(&target.name), value: v, sym: target.sym });
                }
            }
            Stmt::Lookup { targets, lookup } => self.lookup(targets, lookup),
            Stmt::Batch { pattern, ty } => self.batch(pattern, ty),
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

    /// Finds `name` (slot `sym`) for `read` (dst, then src) or `take`
    /// (src, removed). Names the program knows compare by slot.
    fn find(&mut self, take: bool, name: &str, sym: u32, skip_empty: bool) -> Option<Field<'a>> {
        let hit = |f: &Field<'_>| if sym != NO_SYM { f.sym == sym } else { f.name == name };
        if !take {
            if let Some(f) = self.dst.iter().find(|f| hit(f)) {
                if !(skip_empty && f.value.is_empty()) {
                    return Some(f.clone());
                }
            }
        }
        let i = self.src.iter().position(|f| matches!(f, Some(f) if hit(f)))?;
        let slot = &mut self.src[i];
        let field = slot.as_ref()?;
        if skip_empty && field.value.is_empty() {
            return None;
        }
        if take { slot.take() } else { Some(field.clone()) }
    }

    /// `read(…)` / `take(…)` with options and default (spec §8.3).
    fn access(&mut self, a: &'a Access) -> Option<Field<'a>> {
        if let Some(f) = self.find(a.take, &a.key, a.key_sym, false) {
            return Some(f);
        }
        for (i, opt) in a.options.iter().enumerate() {
            let sym = a.option_syms.get(i).copied().unwrap_or(NO_SYM);
            if let Some(f) = self.find(a.take, opt, sym, true) {
                return Some(f);
            }
        }
        let d = a.default.as_ref()?;
        let v = self.expr(d, &a.key)?;
        Some(Field::new(a.key.as_str(), v))
    }

    // ----- expressions -------------------------------------------------------

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
            Expr::Pipe { source, fns } => {
                let mut v = self.access(source)?.value;
                for f in fns {
                    v = pipes::apply(f, v);
                }
                Some(v)
            }
            Expr::Match(m) => self.match_expr(m, target),
            Expr::Object(members) => {
                let mut out = Vec::with_capacity(members.len());
                for m in members {
                    if let Some(v) = self.expr(&m.expr, &m.name) {
                        obj_insert(&mut out, Field::new(m.name.as_str(), convert(v, &m.ty)));
                    }
                }
                Some(Value::Obj(Box::new(out)))
            }
            Expr::Collect(a) => self.collect(a),
            Expr::Fmt { pieces, args } => Some(self.fmt(pieces, args)),
        }
    }

    fn match_expr(&mut self, m: &'a Match, target: &'a str) -> Option<Value<'a>> {
        let mut values = Vec::with_capacity(m.sources.len());
        for s in &m.sources {
            match self.access(s) {
                Some(f) => values.push(f.value),
                None => {
                    let d = m.default.as_ref()?;
                    return self.expr(d, target);
                }
            }
        }
        for arm in &m.arms {
            if arm.conds.len() == values.len()
                && arm.conds.iter().zip(&values).all(|(alts, v)| alts.iter().any(|c| cond_holds(c, v)))
            {
                return self.expr(&arm.result, target);
            }
        }
        let d = m.default.as_ref()?;
        self.expr(d, target)
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
                let hit = self
                    .dst
                    .iter()
                    .chain(self.src.iter().flatten())
                    .find(|f| wildcard(p, f.name.trim()));
                if let Some(f) = hit {
                    items.push(f.clone());
                }
            }
        }
        if items.is_empty() { None } else { Some(Value::Array(Box::new(items))) }
    }

    /// `fmt("…{name}…", args)` (spec §8.10); always chars.
    fn fmt(&mut self, pieces: &'a [FmtPiece], args: &'a [Access]) -> Value<'a> {
        let mut vars: Vec<Field<'a>> = Vec::with_capacity(args.len());
        for a in args {
            if let Some(f) = self.access(a) {
                vars.push(f);
            }
        }
        let mut out = String::new();
        for p in pieces {
            match p {
                FmtPiece::Text(t) => out.push_str(t),
                FmtPiece::Var(name) => match vars.iter().find(|f| f.name == name.as_str()) {
                    Some(f) => f.value.write_raw(&mut out),
                    None => return Value::Chars(Cow::Borrowed("")),
                },
                FmtPiece::Invalid => return Value::Chars(Cow::Borrowed("")),
            }
        }
        Value::Chars(Cow::Owned(out))
    }

    // ----- statements ----------------------------------------------------------

    /// `pattern* = read()/take()` (spec §8.8): moves matching fields to dst.
    fn batch(&mut self, pattern: &str, ty: &Type) {
        for i in 0..self.src.len() {
            let Some(f) = &self.src[i] else { continue };
            if !wildcard(pattern, f.name.trim()) {
                continue;
            }
            if let Type::Kind(k) = ty {
                if f.value.kind() != *k {
                    continue;
                }
            }
            if self.dst.iter().any(|d| d.same_name(f)) {
                continue;
            }
            if let Some(f) = self.src[i].take() {
                self.dst.push(f);
            }
        }
    }

    fn param(&mut self, p: &'a Param) -> Cell {
        match p {
            Param::Access(a) => match self.access(a) {
                Some(f) => cell_of(&f.value),
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
            Param::Helper(h, args) => {
                let args: Vec<Cell> = args.iter().map(|a| self.param(a)).collect();
                pipes::helper(*h, &args)
            }
        }
    }

    /// A SQL lookup statement (spec §8.11.3).
    fn lookup(&mut self, targets: &'a [Target], l: &'a Lookup) {
        let params: Vec<Cell> = l.params.iter().map(|p| self.param(p)).collect();
        let row = match self.host.query(l.statement, &params) {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(e) => {
                if e.fatal {
                    self.fatal = Some(e.message);
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
            let v = convert(value_of_cell(cell), &t.ty);
            let sym = if t.name == "_" { self.program.resolve(&name) } else { t.sym };
            self.dst.push(Field { name, value: v, sym });
        }
    }
}

/// Does a match condition hold for a value (spec §8.7.3–4)?
fn cond_holds(c: &Cond, v: &Value<'_>) -> bool {
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
        Cond::Contains(p) => chars().is_some_and(|s| s.contains(p.as_str())),
        Cond::IEquals(p) => chars().is_some_and(|s| s.to_lowercase() == *p),
        Cond::IsEmpty => chars().is_some_and(str::is_empty),
        Cond::Gt(n) => v.number().is_some_and(|x| x > *n),
        Cond::Lt(n) => v.number().is_some_and(|x| x < *n),
        Cond::EqNum(n) => v.number().is_some_and(|x| (x - n).abs() < 1e-10),
        Cond::InRange(a, b) => v.number().is_some_and(|x| *a <= x && x <= *b),
        Cond::Regex(re) => chars().is_some_and(|s| re.is_match(s)),
    }
}

/// Glob match: `*` any sequence (including `/`), `?` one character.
pub fn wildcard(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
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
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// A constant as a value, borrowing its text from the program.
pub fn const_value(c: &Const) -> Value<'_> {
    match c {
        Const::Chars(s) => Value::Chars(Cow::Borrowed(s)),
        Const::Digit(d) => Value::Digit(*d),
        Const::Float(f) => Value::Float(*f),
        Const::Bool(b) => Value::Bool(*b),
        Const::Ipv4(a) => Value::Ip(IpAddr::V4(Ipv4Addr::from(*a))),
        Const::Ipv6(a) => Value::Ip(IpAddr::V6(Ipv6Addr::from(*a))),
        Const::Time(t) => Value::Time(*t),
        Const::Null => Value::Null,
        Const::Ignore => Value::Ignore,
        Const::Obj(m) => Value::Obj(Box::new(
            m.iter().map(|(n, c)| Field::new(n.as_str(), const_value(c))).collect(),
        )),
        Const::Array(m) => Value::Array(Box::new(
            m.iter().map(|(n, c)| Field::new(n.as_str(), const_value(c))).collect(),
        )),
    }
}

/// Parameter mapping (spec §8.11.2).
pub fn cell_of(v: &Value<'_>) -> Cell {
    match v {
        Value::Digit(d) => Cell::Integer(*d),
        Value::Float(f) => Cell::Real(*f),
        Value::Bool(b) => Cell::Integer(*b as i64),
        Value::Null | Value::Ignore => Cell::Null,
        other => Cell::Text(other.raw_text().into_owned()),
    }
}

/// Appends an exact byte key for a parameter list, for lookup caches (the
/// guest's and the host's).
pub fn push_cells_key(params: &[Cell], out: &mut Vec<u8>) {
    for p in params {
        match p {
            Cell::Null => out.push(0),
            Cell::Integer(i) => {
                out.push(1);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Cell::Real(f) => {
                out.push(2);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            Cell::Text(s) => {
                out.push(3);
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Cell::Blob(b) => {
                out.push(4);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
    }
}

/// Column mapping (spec §8.11.3).
pub fn value_of_cell(c: Cell) -> Value<'static> {
    match c {
        Cell::Null => Value::Null,
        Cell::Integer(i) => Value::Digit(i),
        Cell::Real(f) => Value::Float(f),
        Cell::Text(s) => Value::Chars(Cow::Owned(s)),
        Cell::Blob(b) => Value::Chars(Cow::Owned(String::from_utf8_lossy(&b).into_owned())),
    }
}
