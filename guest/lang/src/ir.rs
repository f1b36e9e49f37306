//! The compiled form of a rule set: what `omlet build` writes into a
//! component and what the evaluator runs.
//!
//! The IR has no source text and no spans. Everything the checker could
//! decide is decided: keys are resolved (an implicit key is the target name),
//! statics are inlined as constants, pipe and match-function arguments are
//! parsed, SQL lookups are numbered statements with their parameter
//! expressions. It is serialised with postcard behind a versioned header.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::time::TsUnit;
use crate::value::{Field, Type, Value};

/// Bumped on every change to these types' serialised form.
pub const IR_VERSION: u32 = 3;

const MAGIC: &[u8; 6] = b"OMLIR\0";

/// A set of compiled models and the SQL statements they may run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Program {
    /// Hex SHA-256 of the sources, filled in by the host's build step.
    pub source_hash: String,
    /// Every name the program looks up by exact name (keys, options,
    /// targets), sorted and unique: a name's index is its slot (`sym`).
    pub names: Vec<String>,
    pub models: Vec<Model>,
    pub statements: Vec<SqlStatement>,
    /// `names` hashed, so that [`Program::resolve`] costs one hash and one
    /// comparison instead of a binary search (it runs for every field of
    /// every record). Derived: built by `from_bytes` and `link`, never
    /// serialised.
    #[serde(skip)]
    pub name_index: NameIndex,
    /// The forms newer than OML v1.17.4 that the sources use (what `omlet
    /// check` reports); filled by the compiler, never serialised.
    #[serde(skip)]
    pub features: Vec<crate::features::Feature>,
}

/// An open-addressing table of slots into [`Program::names`].
#[derive(Debug, Clone, Default)]
pub struct NameIndex {
    /// A power of two in length, at least twice the names; `EMPTY` where free.
    slots: Vec<u32>,
    /// How many names the table was built for: a stale table is not used.
    names: usize,
}

impl NameIndex {
    const EMPTY: u32 = u32::MAX;

    fn build(names: &[String]) -> NameIndex {
        let size = (names.len() * 2).next_power_of_two().max(8);
        let mut slots = alloc::vec![Self::EMPTY; size];
        for (i, n) in names.iter().enumerate() {
            let mut h = name_hash(n) & (size - 1);
            while slots[h] != Self::EMPTY {
                h = (h + 1) & (size - 1);
            }
            slots[h] = i as u32;
        }
        NameIndex { slots, names: names.len() }
    }

    /// The slot of `name` in `names`; `None` when the table was not built
    /// for these names (the caller searches instead).
    fn find(&self, names: &[String], name: &str) -> Option<u32> {
        if self.slots.is_empty() || self.names != names.len() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut h = name_hash(name) & mask;
        loop {
            let s = self.slots[h];
            if s == Self::EMPTY {
                return Some(crate::value::NO_SYM);
            }
            if names.get(s as usize).is_some_and(|n| crate::value::same_bytes(n.as_bytes(), name.as_bytes())) {
                return Some(s);
            }
            h = (h + 1) & mask;
        }
    }
}

/// The index's hash of a name: its length and its first and last eight
/// bytes, mixed so that every one of those bits reaches the low bits the
/// table uses (two multiply-xorshift rounds). Every input field's name is
/// looked up per record, and hashing each byte (FNV) was most of that; names
/// that share those bytes only share a probe sequence, and are told apart by
/// a compare.
fn name_hash(name: &str) -> usize {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let b = name.as_bytes();
    let n = b.len();
    let word =
        |at: usize| u64::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5], b[at + 6], b[at + 7]]);
    let (head, tail) =
        if n >= 8 { (word(0), word(n - 8)) } else { (b.iter().rev().fold(0u64, |acc, &c| acc << 8 | c as u64), 0) };
    let mut h = (head ^ tail.rotate_left(29)).wrapping_add(n as u64).wrapping_mul(K);
    h ^= h >> 32;
    h = h.wrapping_mul(K);
    (h ^ h >> 29) as usize
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Model {
    pub name: String,
    pub patterns: Vec<String>,
    pub enabled: bool,
    pub file: String,
    pub stmts: Vec<Stmt>,
    pub uses_clock: bool,
    /// The line of each of `stmts` in `file` (1-based), for traces.
    pub lines: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Stmt {
    /// A single-valued expression: only the first target receives it (§5.2).
    Assign { target: Target, expr: Expr },
    /// A SQL lookup: target *i* receives column *i* (§8.11.3).
    Lookup { targets: Vec<Target>, lookup: Lookup },
    /// `pattern* = read()/take()` (§8.8).
    Batch { pattern: String, ty: Type },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    pub ty: Type,
    pub sym: u32,
}

/// A constant value: a literal, or an inlined static binding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Const {
    Chars(String),
    Digit(i64),
    Float(f64),
    Bool(bool),
    Ipv4(u32),
    Ipv6(u128),
    Time(i64),
    Null,
    Ignore,
    Obj(Vec<(String, Const)>),
    Array(Vec<(String, Const)>),
    /// Kept last: programs serialize constants by their position.
    BigInt(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NowFn {
    Time,
    Date,
    Hour,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Expr {
    Const(Const),
    Access(Access),
    Now(NowFn),
    Pipe {
        source: Access,
        fns: Vec<PipeFn>,
    },
    Match(Match),
    Object(Vec<Member>),
    Collect(Access),
    Fmt {
        pieces: Vec<FmtPiece>,
        args: Vec<Access>,
        /// For each piece, the argument that a `{name}` piece writes (the
        /// one whose key is the name), [`NO_ARG`] for a name no argument
        /// has. Worked out when the program is linked or decoded
        /// ([`prepare`]), not stored. Empty, so that pieces find their
        /// argument by the name of the field it read, when an argument has
        /// `option:` names (that name is known only once it is read) or two
        /// have the same key (the first present one is written).
        #[serde(skip)]
        index: Vec<u32>,
    },
    /// `array { … }` (delta §1); last, so that older IR still reads.
    Array(Vec<Expr>),
    /// `calc( … )` (delta §11).
    Calc(Calc),
    /// `lookup_nocase` (delta §12.1): `table` holds the static object's
    /// members keyed by their trimmed, lower-case names, sorted.
    LookupNocase {
        table: Vec<(String, Const)>,
        key: Box<Expr>,
        default: Box<Expr>,
    },
    /// `access_direct(src, dst) | fns` (delta §9.3): `L2W` and its kin, or
    /// ignore; then the pipe functions.
    AccessDirect {
        src: Box<Access>,
        dst: Box<Access>,
        fns: Vec<PipeFn>,
    },
    /// `fail(message)`: the record fails with the message's text (or with
    /// a generic one when it is absent).
    Fail(Box<Expr>),
}

/// A `calc` expression, compiled (delta §11).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Calc {
    Int(i64),
    Float(f64),
    Field(Access),
    Neg(Box<Calc>),
    Bin(CalcOp, Box<Calc>, Box<Calc>),
    Fn(CalcFn, Box<Calc>),
}

/// A binary operator of `calc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CalcOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// A function of `calc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CalcFn {
    Abs,
    Round,
    Floor,
    Ceil,
}

/// `read(...)` / `take(...)`, `@name`, with an optional default.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Access {
    pub take: bool,
    /// The primary key: explicit, or the target's name.
    pub key: String,
    pub key_sym: u32,
    /// `option:[…]` alternatives, in order, and their slots.
    pub options: Vec<String>,
    pub option_syms: Vec<u32>,
    /// `keys:[…]` patterns (for `collect`).
    pub keys: Vec<String>,
    pub default: Option<alloc::boxed::Box<Expr>>,
    /// No earlier statement of the model can have written a field named
    /// `key` to the output when this access runs, so the evaluator looks for
    /// it in the input only. Worked out when the program is linked or
    /// decoded ([`prepare`]), not stored; `false` (look in both) is
    /// always correct.
    #[serde(skip)]
    pub fresh: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    pub ty: Type,
    pub expr: Expr,
    /// The member's place among its object's members in name order, when
    /// their names are all different ([`NO_RANK`] otherwise): the object is
    /// then put in order by these numbers, not by comparing names. Worked
    /// out when the program is linked or decoded ([`prepare`]), not stored.
    #[serde(skip)]
    pub rank: u32,
}

/// The members of the object do not all have different names.
pub const NO_RANK: u32 = u32::MAX;

/// Sets the rank of each member of `members` (see [`Member::rank`]).
fn rank_members(members: &mut [Member]) {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| members[a].name.as_bytes().cmp(members[b].name.as_bytes()));
    let unique = order.windows(2).all(|w| members[w[0]].name != members[w[1]].name);
    for (rank, &i) in order.iter().enumerate() {
        members[i].rank = if unique { rank as u32 } else { NO_RANK };
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Match {
    pub sources: Vec<Access>,
    pub arms: Vec<Arm>,
    pub default: Option<alloc::boxed::Box<Expr>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Arm {
    /// One condition per source; each is a disjunction of atoms.
    pub conds: Vec<Vec<Cond>>,
    pub result: Expr,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Cond {
    Eq(Const),
    Ne(Const),
    In(Const, Const),
    StartsWith(String),
    EndsWith(String),
    Contains(String),
    /// The argument, already lower-cased.
    IEquals(String),
    IsEmpty,
    Gt(f64),
    Lt(f64),
    EqNum(f64),
    InRange(f64, f64),
    Regex(RegexCond),
    /// `iequals_any(…)` (OML 1.25 delta §12.2): the arguments, already
    /// lower-cased; none never matches. Last, so that IR written before it
    /// still reads.
    IEqualsAny(Vec<String>),
}

/// `regex_match('re')`: the pattern, and its compiled form built on first use.
/// An invalid pattern never matches (spec §8.7.4).
#[derive(Serialize, Deserialize)]
pub struct RegexCond {
    pub pattern: String,
    #[serde(skip)]
    compiled: once_cell::race::OnceBox<Option<regex_automata::meta::Regex>>,
}

impl RegexCond {
    pub fn new(pattern: String) -> RegexCond {
        RegexCond { pattern, compiled: once_cell::race::OnceBox::new() }
    }

    pub fn is_match(&self, text: &str) -> bool {
        let re = self.compiled.get_or_init(|| alloc::boxed::Box::new(regex_automata::meta::Regex::new(&self.pattern).ok()));
        re.as_ref().is_some_and(|re| re.is_match(text))
    }
}

impl Clone for RegexCond {
    fn clone(&self) -> Self {
        RegexCond::new(self.pattern.clone())
    }
}

impl core::fmt::Debug for RegexCond {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "regex_match({:?})", self.pattern)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FmtPiece {
    Text(String),
    Var(String),
    /// The format string is malformed or positional: the result is `""` (§8.10).
    Invalid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PathPart {
    Name,
    Path,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UrlPart {
    Domain,
    Host,
    Uri,
    Path,
    Params,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PipeFn {
    Base64Encode,
    Base64Decode,
    HtmlEscape,
    HtmlUnescape,
    JsonEscape,
    JsonUnescape,
    StrEscape,
    ToTs {
        zone_hours: i64,
        unit: TsUnit,
    },
    /// `|z| >= 24`: the value passes unchanged. No longer produced: such a
    /// zone is a compile error (delta §6); kept so that older IR reads.
    ToTsNoop,
    Nth(u64),
    Get(Vec<String>),
    Path(Option<PathPart>),
    Url(Option<UrlPart>),
    Ip4ToInt,
    ToJson,
    ToStr,
    SkipEmpty,
    StartsWith(String),
    MapTo(Const),
    /// `base64_decode(Enc)` for an encoding other than UTF-8 (last, so that
    /// IR written before it still reads).
    Base64DecodeAs(crate::charset::Charset),
    /// `ip_to_biguint` (OML 1.25 delta §8), after the others for the same
    /// reason.
    IpToBigUint,
    /// `Time::from_ts*(zone)` (delta §6): epoch digits to a naive time.
    FromTs {
        zone_hours: i64,
        unit: TsUnit,
    },
    /// `on_fail('text')` (delta §5): ignore or null becomes `text`.
    OnFail(String),
    /// `intranet_ip` (delta §9.2): an address to `LAN` or `WAN`, by the
    /// host's intranet networks.
    IntranetIp,
    /// `lower` / `upper`: chars in Unicode lower or upper case.
    Lower,
    Upper,
    /// `split('sep')`: chars to an array of the pieces between `sep`s.
    Split(String),
    /// `substr(start[, len])`: characters from `start` (from the end when
    /// negative), at most `len` of them.
    Substr {
        start: i64,
        len: Option<u64>,
    },
    /// `Time::parse(format[, zone])`: text to a time (see [`crate::timefmt`]).
    TimeParse {
        format: crate::timefmt::TimeFormat,
        zone_hours: i64,
    },
}

/// A SQL lookup site: which statement, and how to compute its parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lookup {
    pub statement: u32,
    pub params: Vec<Param>,
    /// For each parameter, an earlier one that reads the same fields
    /// through the same helpers (`ip4_int(read(ip))` twice), whose value it
    /// takes instead of reading again, or [`NO_REPEAT`]. Worked out when the
    /// program is linked or decoded ([`prepare`]), not stored; empty for
    /// none, and always empty when a parameter takes a field.
    #[serde(skip)]
    pub repeats: Vec<u32>,
}

/// No argument of a `fmt` has the piece's name.
pub const NO_ARG: u32 = u32::MAX;

/// [`prepare`] of the expressions under `e`: the `index` of every `fmt`, the
/// ranks of every object's members.
fn prepare_expr(e: &mut Expr) {
    match e {
        Expr::Fmt { pieces, args, index } => {
            index.clear();
            let unique = args.iter().enumerate().all(|(i, a)| args[..i].iter().all(|b| b.key != a.key));
            if unique && args.iter().all(|a| a.options.is_empty()) {
                index.extend(pieces.iter().map(|p| match p {
                    FmtPiece::Var(name) => args.iter().position(|a| a.key == *name).map_or(NO_ARG, |i| i as u32),
                    _ => NO_ARG,
                }));
            }
        }
        Expr::Match(m) => {
            m.arms.iter_mut().for_each(|a| prepare_expr(&mut a.result));
            if let Some(d) = &mut m.default {
                prepare_expr(d);
            }
        }
        Expr::Object(members) => {
            rank_members(members);
            members.iter_mut().for_each(|m| prepare_expr(&mut m.expr));
        }
        Expr::Array(items) => items.iter_mut().for_each(prepare_expr),
        Expr::LookupNocase { key, default, .. } => {
            prepare_expr(key);
            prepare_expr(default);
        }
        Expr::Fail(msg) => prepare_expr(msg),
        Expr::Access(a) | Expr::Collect(a) | Expr::Pipe { source: a, .. } => {
            if let Some(d) = &mut a.default {
                prepare_expr(d);
            }
        }
        Expr::Const(_) | Expr::Now(_) | Expr::Calc(_) | Expr::AccessDirect { .. } => {}
    }
}

/// No earlier parameter of the lookup is the same.
pub const NO_REPEAT: u32 = u32::MAX;

/// Whether two parameters surely give the same value: the same helpers over
/// reads (no take, no default) of the same names.
fn same_reads(a: &Param, b: &Param) -> bool {
    match (a, b) {
        (Param::Access(x), Param::Access(y)) => {
            !x.take && !y.take && x.default.is_none() && y.default.is_none() && x.key == y.key && x.options == y.options
        }
        (Param::Helper(h, xs), Param::Helper(k, ys)) => {
            h == k && xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same_reads(x, y))
        }
        _ => false,
    }
}

/// Whether computing `p` takes a field (and so may change what a read finds).
fn takes(p: &Param) -> bool {
    match p {
        Param::Access(a) => a.take || a.default.is_some(),
        Param::Helper(_, args) => args.iter().any(takes),
        Param::Now(_) | Param::Const(_) => false,
    }
}

impl Lookup {
    /// Sets [`Lookup::repeats`].
    fn mark_repeats(&mut self) {
        self.repeats.clear();
        if self.params.iter().any(takes) {
            return;
        }
        let repeats: Vec<u32> = (0..self.params.len())
            .map(|i| (0..i).find(|&j| same_reads(&self.params[j], &self.params[i])).map_or(NO_REPEAT, |j| j as u32))
            .collect();
        if repeats.iter().any(|&r| r != NO_REPEAT) {
            self.repeats = repeats;
        }
    }
}

impl Lookup {
    /// `stmt`'s SQL as this lookup's rule wrote it: each parameter that is a
    /// literal here written as one (`k = 1`, `name = 'x'`), the others left
    /// as `:name`.
    pub fn shown(&self, stmt: &SqlStatement) -> String {
        let mut sql = stmt.sql.clone();
        for (name, p) in stmt.params.iter().zip(&self.params) {
            let Param::Const(c) = p else { continue };
            let literal = match c {
                Const::Digit(d) => alloc::format!("{d}"),
                Const::Chars(t) => alloc::format!("'{}'", t.replace('\'', "''")),
                other => alloc::format!("{other:?}"),
            };
            sql = replace_param(&sql, name, &literal);
        }
        sql
    }
}

/// `sql` with the parameter `:name` (a whole name, outside quotes) replaced by `with`.
fn replace_param(sql: &str, name: &str, with: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let b = sql.as_bytes();
    let (mut i, mut quoted) = (0, false);
    while i < b.len() {
        if b[i] == b'\'' {
            quoted = !quoted;
        }
        let end = i + 1 + name.len();
        if !quoted
            && b[i] == b':'
            && sql.get(i + 1..end) == Some(name)
            && !b.get(end).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            out.push_str(with);
            i = end;
            continue;
        }
        let ch = sql[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// A bound parameter's value, computed by the guest before the query.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Param {
    Access(Access),
    Now(NowFn),
    Const(Const),
    /// A helper function over parameters only, folded into the parameter
    /// (`ip4_int(read(ip))` binds the integer).
    Helper(Helper, Vec<Param>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Helper {
    Ip4Int,
    Ip4Between,
    Cidr4Min,
    Cidr4Max,
    Cidr4Contains,
    Ip4Text,
    TrimQuotes,
    /// `ip_key(ip)`: an address of either family as 32 hex digits (IPv4
    /// mapped into IPv6), whose text order is the addresses' order.
    IpKey,
    /// `cidr_min_key(cidr)`, `cidr_max_key(cidr)`: the first and last
    /// address of a network of either family, as [`Helper::IpKey`]s.
    CidrMinKey,
    CidrMaxKey,
    /// `cidr_contains(ip, cidr)`: 1 when the address lies in the network
    /// (either family), else 0.
    CidrContains,
}

impl Helper {
    /// Every helper, in the order of spec §8.11.4 (and of `HELPER_FUNCTIONS`
    /// on the host).
    pub const ALL: [Helper; 11] = [
        Helper::Ip4Int,
        Helper::Ip4Between,
        Helper::Cidr4Min,
        Helper::Cidr4Max,
        Helper::Cidr4Contains,
        Helper::Ip4Text,
        Helper::TrimQuotes,
        Helper::IpKey,
        Helper::CidrMinKey,
        Helper::CidrMaxKey,
        Helper::CidrContains,
    ];

    /// Its name in SQL: the one place a helper is named. The checker, the
    /// host's guard and helper list, and the functions registered on each
    /// database all read it from here.
    pub const fn name(self) -> &'static str {
        match self {
            Helper::Ip4Int => "ip4_int",
            Helper::Ip4Between => "ip4_between",
            Helper::Cidr4Min => "cidr4_min",
            Helper::Cidr4Max => "cidr4_max",
            Helper::Cidr4Contains => "cidr4_contains",
            Helper::Ip4Text => "ip4_text",
            Helper::TrimQuotes => "trim_quotes",
            Helper::IpKey => "ip_key",
            Helper::CidrMinKey => "cidr_min_key",
            Helper::CidrMaxKey => "cidr_max_key",
            Helper::CidrContains => "cidr_contains",
        }
    }

    /// How many arguments it takes.
    pub const fn arity(self) -> usize {
        match self {
            Helper::Ip4Between => 3,
            Helper::Cidr4Contains | Helper::CidrContains => 2,
            _ => 1,
        }
    }

    /// The helper of this name (case as written in spec §8.11.4).
    pub fn by_name(name: &str) -> Option<Helper> {
        Helper::ALL.into_iter().find(|h| h.name() == name)
    }
}

/// One SQL statement a rule may run: the allow-list the host checks at load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlStatement {
    /// `select c1,c2 from t where …` with `:name` parameters.
    pub sql: String,
    /// Parameter names in binding order; each occurs once in `sql`.
    pub params: Vec<String>,
    pub table: String,
    /// The selected columns; `["*"]` for all.
    pub columns: Vec<String>,
    pub file: String,
    pub line: u32,
    pub column: u32,
}

/// A name-bearing item, as `Program::link` visits it.
pub(crate) enum Named<'p> {
    Target(&'p mut Target),
    Key(&'p mut Access),
    Option(&'p mut Access, usize),
}

impl Named<'_> {
    fn name(&self) -> &String {
        match self {
            Named::Target(t) => &t.name,
            Named::Key(a) => &a.key,
            Named::Option(a, i) => &a.options[*i],
        }
    }
}

pub(crate) fn visit_model(m: &mut Model, f: &mut dyn FnMut(&mut Named<'_>)) {
    for s in &mut m.stmts {
        visit_stmt(s, f);
    }
}

/// What the evaluator works out once per model instead of once per record,
/// when the program is linked or decoded: [`Lookup::repeats`], the `index`
/// of each [`Expr::Fmt`], each object's [`Member::rank`]s, and
/// [`Access::fresh`] on every read and take whose name no earlier statement
/// can have put in the output (a statement's targets are written after it
/// has run, a batch statement moves names that match its pattern, and a
/// lookup's `_` targets take names known only when it runs: after one, no
/// access is fresh).
pub fn prepare(m: &mut Model) {
    let mut written = alloc::collections::BTreeSet::new();
    let mut patterns: Vec<String> = Vec::new();
    let mut unknown = false;
    for s in &mut m.stmts {
        visit_stmt(s, &mut |n: &mut Named<'_>| {
            if let Named::Key(a) = n {
                a.fresh = !unknown
                    && !written.contains(a.key.as_str())
                    && !patterns.iter().any(|p| crate::eval::wildcard(p, a.key.trim()));
            }
        });
        match s {
            Stmt::Assign { target, expr } => {
                prepare_expr(expr);
                written.insert(target.name.clone());
            }
            Stmt::Lookup { targets, lookup } => {
                lookup.mark_repeats();
                for t in targets.iter() {
                    unknown |= t.name == "_";
                    written.insert(t.name.clone());
                }
            }
            Stmt::Batch { pattern, .. } => patterns.push(pattern.clone()),
        }
    }
}

fn visit_stmt(s: &mut Stmt, f: &mut dyn FnMut(&mut Named<'_>)) {
    match s {
        Stmt::Assign { target, expr } => {
            f(&mut Named::Target(target));
            visit_expr(expr, f);
        }
        Stmt::Lookup { targets, lookup } => {
            for t in targets {
                f(&mut Named::Target(t));
            }
            for p in &mut lookup.params {
                visit_param(p, f);
            }
        }
        Stmt::Batch { .. } => {}
    }
}

fn visit_param(p: &mut Param, f: &mut dyn FnMut(&mut Named<'_>)) {
    match p {
        Param::Access(a) => visit_access(a, f),
        Param::Helper(_, args) => args.iter_mut().for_each(|a| visit_param(a, f)),
        Param::Now(_) | Param::Const(_) => {}
    }
}

fn visit_access(a: &mut Access, f: &mut dyn FnMut(&mut Named<'_>)) {
    a.option_syms.resize(a.options.len(), crate::value::NO_SYM);
    f(&mut Named::Key(a));
    for i in 0..a.options.len() {
        f(&mut Named::Option(a, i));
    }
    if let Some(d) = &mut a.default {
        visit_expr(d, f);
    }
}

fn visit_expr(e: &mut Expr, f: &mut dyn FnMut(&mut Named<'_>)) {
    match e {
        Expr::Const(_) | Expr::Now(_) => {}
        Expr::Access(a) | Expr::Collect(a) | Expr::Pipe { source: a, .. } => visit_access(a, f),
        Expr::Match(m) => {
            m.sources.iter_mut().for_each(|a| visit_access(a, f));
            for arm in &mut m.arms {
                visit_expr(&mut arm.result, f);
            }
            if let Some(d) = &mut m.default {
                visit_expr(d, f);
            }
        }
        Expr::Object(members) => members.iter_mut().for_each(|m| visit_expr(&mut m.expr, f)),
        Expr::Array(items) => items.iter_mut().for_each(|e| visit_expr(e, f)),
        Expr::Calc(c) => visit_calc(c, f),
        Expr::LookupNocase { key, default, .. } => {
            visit_expr(key, f);
            visit_expr(default, f);
        }
        Expr::Fmt { args, .. } => args.iter_mut().for_each(|a| visit_access(a, f)),
        Expr::AccessDirect { src, dst, .. } => {
            visit_access(src, f);
            visit_access(dst, f);
        }
        Expr::Fail(msg) => visit_expr(msg, f),
    }
}

fn visit_calc(c: &mut Calc, f: &mut dyn FnMut(&mut Named<'_>)) {
    match c {
        Calc::Int(_) | Calc::Float(_) => {}
        Calc::Field(a) => visit_access(a, f),
        Calc::Neg(x) | Calc::Fn(_, x) => visit_calc(x, f),
        Calc::Bin(_, l, r) => {
            visit_calc(l, f);
            visit_calc(r, f);
        }
    }
}

/// Why IR bytes could not be read.
#[derive(Debug, Clone, PartialEq)]
pub enum IrError {
    NotIr,
    Version { found: u32 },
    Corrupt(String),
}

impl core::fmt::Display for IrError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            IrError::NotIr => f.write_str("no compiled OML rule (missing IR header)"),
            IrError::Version { found } => write!(
                f,
                "the rule was compiled for IR version {found}, but this guest reads version {IR_VERSION}: rebuild it with a matching `omlet build`"
            ),
            IrError::Corrupt(e) => write!(f, "the compiled rule is corrupt: {e}"),
        }
    }
}

impl Program {
    /// Serialises with the versioned header.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&IR_VERSION.to_le_bytes());
        // Serialising plain data into a Vec cannot fail.
        let body = postcard::to_allocvec(self).unwrap_or_default();
        out.extend_from_slice(&body);
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Program, IrError> {
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            return Err(IrError::NotIr);
        }
        let found = u32::from_le_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]);
        if found != IR_VERSION {
            return Err(IrError::Version { found });
        }
        let mut program: Program = postcard::from_bytes(&bytes[10..]).map_err(|e| IrError::Corrupt(alloc::format!("{e}")))?;
        program.name_index = NameIndex::build(&program.names);
        program.models.iter_mut().for_each(prepare);
        Ok(program)
    }

    /// The slot of a name, or [`crate::value::NO_SYM`].
    pub fn resolve(&self, name: &str) -> u32 {
        if let Some(slot) = self.name_index.find(&self.names, name) {
            return slot;
        }
        match self.names.binary_search_by(|n| n.as_str().cmp(name)) {
            Ok(i) => i as u32,
            Err(_) => crate::value::NO_SYM,
        }
    }

    /// Builds the name table and gives every access and target its slot, so
    /// evaluation compares numbers, not strings. Run once, after compiling.
    pub fn link(&mut self) {
        let mut names = alloc::collections::BTreeSet::new();
        for m in &mut self.models {
            visit_model(m, &mut |n: &mut Named<'_>| {
                names.insert(n.name().clone());
            });
        }
        self.names = names.into_iter().collect();
        let table = core::mem::take(&mut self.names);
        let slot = |s: &str| table.binary_search_by(|n| n.as_str().cmp(s)).map(|i| i as u32).unwrap_or(crate::value::NO_SYM);
        for m in &mut self.models {
            visit_model(m, &mut |n: &mut Named<'_>| match n {
                Named::Target(t) => t.sym = slot(&t.name),
                Named::Key(a) => a.key_sym = slot(&a.key),
                Named::Option(a, i) => {
                    let s = slot(&a.options[*i]);
                    a.option_syms[*i] = s;
                }
            });
        }
        self.name_index = NameIndex::build(&table);
        self.names = table;
        self.models.iter_mut().for_each(prepare);
    }

    pub fn uses_clock(&self) -> bool {
        self.models.iter().any(|m| m.uses_clock)
    }
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
        Const::BigInt(s) => Value::BigInt(Cow::Borrowed(s)),
        Const::Null => Value::Null,
        Const::Ignore => Value::Ignore,
        Const::Obj(m) => Value::Obj(Box::new(m.iter().map(|(n, c)| Field::new(n.as_str(), const_value(c))).collect())),
        Const::Array(m) => Value::Array(Box::new(m.iter().map(|(n, c)| Field::new(n.as_str(), const_value(c))).collect())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ir_round_trips_with_a_regex() {
        let src = "name : t\n---\nx = match read(a) { regex_match('^a+$') => chars(y), _ => chars(n), } ;\n";
        let p = crate::compile(&[crate::Source { file: "t", text: src }], (0, 0)).unwrap();
        let q = Program::from_bytes(&p.to_bytes()).unwrap();
        assert_eq!(q.models.len(), 1);
    }

    #[test]
    fn the_name_index_finds_what_the_sorted_table_holds() {
        let src = "name : t\n---\na = read(a) ;\nbb = take(option:[c, dd]) ;\nx_y = read(zzz) ;\n* = take() ;\n";
        let p = crate::compile(&[crate::Source { file: "t", text: src }], (0, 0)).unwrap();
        let q = Program::from_bytes(&p.to_bytes()).unwrap();
        for prog in [&p, &q] {
            assert!(prog.names.len() >= 6, "{:?}", prog.names);
            for (i, n) in prog.names.iter().enumerate() {
                assert_eq!(prog.resolve(n), i as u32, "{n}");
            }
            for unknown in ["", "aa", "b", "zz", "x_", "A"] {
                assert_eq!(prog.resolve(unknown), crate::value::NO_SYM, "{unknown}");
            }
        }
        // A table changed after the index was built is searched instead.
        let mut r = q.clone();
        r.names.push("zzzz".into());
        assert_eq!(r.resolve("zzzz"), (r.names.len() - 1) as u32);
    }

    #[test]
    fn names_of_one_hash_are_told_apart() {
        // Same length, same first and last eight bytes: the same hash.
        let names: Vec<String> = (0..40).map(|i| alloc::format!("request_{i:02}_headers")).collect();
        assert_eq!(name_hash(&names[0]), name_hash(&names[1]));
        // Names that differ in their length or in any of their first eight
        // bytes do not share a slot of a small table.
        for (a, b) in [("method", "methods"), ("status", "status_"), ("abcdefgh", "abcdefgX"), ("aXcdefgh", "abcdefgh")] {
            assert_ne!(name_hash(a) & 1023, name_hash(b) & 1023, "{a} {b}");
        }
        let ix = NameIndex::build(&names);
        for (i, n) in names.iter().enumerate() {
            assert_eq!(ix.find(&names, n), Some(i as u32), "{n}");
        }
        for unknown in ["request_xx_headers", "request_", "r", "", "request_00_header"] {
            assert_eq!(ix.find(&names, unknown), Some(crate::value::NO_SYM), "{unknown}");
        }
    }
}
