//! Expressions: values, objects, pipes, `match`, arithmetic, `collect`,
//! `fmt`, and the conditions of match arms.

use super::*;

impl<'a, 'h> Ctx<'a, 'h> {
    /// [`Self::expr`], with its two commonest forms (a field read or taken,
    /// a constant) evaluated in place: `expr` is large, and in wasm its
    /// prologue (the deadline's check, a big frame) is a good part of
    /// evaluating either.
    #[inline(always)]
    pub(super) fn value_of(&mut self, e: &'a Expr, target: &'a str) -> Option<Value<'a>> {
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
    pub(super) fn piped(&mut self, source: &'a Access, fns: &'a [PipeFn]) -> Option<Value<'a>> {
        let v = self.access_value(source)?;
        Some(self.pipe(v, fns))
    }

    /// Whether [`Self::peek`] finds what [`Self::access`] would: a plain
    /// `read` (no options, no default) of a name the program knows, while
    /// [`Positions`] hold and no trace is kept.
    #[inline(always)]
    pub(super) fn peekable(&self, a: &Access) -> bool {
        !a.take && a.key_sym != NO_SYM && a.options.is_empty() && a.default.is_none() && self.at.valid && self.trace.is_none()
    }

    /// The value a [`Self::peekable`] access reads, where it is.
    #[inline(always)]
    pub(super) fn peek(&self, a: &Access) -> Option<&Value<'a>> {
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
    pub(super) fn access_value(&mut self, a: &'a Access) -> Option<Value<'a>> {
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
    pub(super) fn object(&mut self, members: &'a [Member]) -> Value<'a> {
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
    pub(super) fn fail(&mut self, msg: &'a Expr, target: &'a str) -> Option<Value<'a>> {
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
    pub(super) fn pipe(&mut self, mut v: Value<'a>, fns: &'a [PipeFn]) -> Value<'a> {
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
    pub(super) fn access_direct(&mut self, src: &'a Access, dst: &'a Access, fns: &'a [PipeFn]) -> Value<'a> {
        let v = self.direction(src, dst);
        self.pipe(v, fns)
    }

    pub(super) fn direction(&mut self, src: &'a Access, dst: &'a Access) -> Value<'a> {
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
    pub(super) fn match_expr(&mut self, m: &'a Match, target: &'a str) -> Option<Value<'a>> {
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
    pub(super) fn match_default(&mut self, m: &'a Match, values: &[Value<'a>], target: &'a str) -> Option<Value<'a>> {
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
    pub(super) fn collect(&mut self, a: &'a Access) -> Option<Value<'a>> {
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
    pub(super) fn fmt(&mut self, pieces: &'a [FmtPiece], args: &'a [Access], index: &[u32]) -> Value<'a> {
        const ON_STACK: usize = 8;
        if index.len() != pieces.len() || args.len() > ON_STACK {
            return self.fmt_by_name(pieces, args);
        }
        // Plain reads (the usual `@name`s) are looked at where they are,
        // neither cloned nor dropped.
        let cap = self.budget_left();
        if args.iter().all(|a| self.peekable(a)) {
            let text = fmt_text(pieces, cap, |i, _| index.get(i).and_then(|&j| args.get(j as usize)).and_then(|a| self.peek(a)));
            return self.within_budget(text);
        }
        let mut values: [Option<Value<'a>>; ON_STACK] = Default::default();
        for (a, v) in args.iter().zip(values.iter_mut()) {
            *v = self.access(a).map(|f| f.value);
        }
        let text = fmt_text(pieces, cap, |i, _| index.get(i).and_then(|&j| values.get(j as usize)).and_then(Option::as_ref));
        self.within_budget(text)
    }

    /// `fmt`'s text, or, when it went past the budget, `""` and the record
    /// failed.
    fn within_budget(&mut self, text: Option<Value<'static>>) -> Value<'a> {
        text.unwrap_or_else(|| {
            self.built = usize::MAX;
            self.over_budget();
            Value::Chars(Cow::Borrowed(""))
        })
    }

    /// [`Self::fmt`] with each piece's argument found by the name of the
    /// field it read.
    #[inline(never)]
    pub(super) fn fmt_by_name(&mut self, pieces: &'a [FmtPiece], args: &'a [Access]) -> Value<'a> {
        let mut vars: Vec<Field<'a>> = Vec::with_capacity(args.len());
        for a in args {
            if let Some(f) = self.access(a) {
                vars.push(f);
            }
        }
        let text = fmt_text(pieces, self.budget_left(), |_, name| vars.iter().find(|f| f.name == name).map(|f| &f.value));
        self.within_budget(text)
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
    pub(super) fn float(self) -> f64 {
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
pub(super) fn to_integer(f: CalcFn, x: f64) -> Option<i64> {
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
/// format is invalid (spec §8.10). `None` when the text grows past `cap`
/// bytes (the record's value budget, when it has one).
pub(super) fn fmt_text<'v, 'a: 'v>(
    pieces: &[FmtPiece],
    cap: Option<usize>,
    var: impl Fn(usize, &str) -> Option<&'v Value<'a>>,
) -> Option<Value<'static>> {
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
                None => return Some(Value::Chars(Cow::Borrowed(""))),
            },
            FmtPiece::Invalid => return Some(Value::Chars(Cow::Borrowed(""))),
        }
        if cap.is_some_and(|c| out.len() > c) {
            return None;
        }
    }
    // Pieces of text, put together: always UTF-8.
    Some(Value::Chars(Cow::Owned(String::from_utf8(out).unwrap_or_default())))
}

/// Does a match condition hold for a value (spec §8.7.3–4)? Ranges and
/// equalities of digits and of text are decided here, inlined into the
/// match; the rest (which builds the constants as values and compares them
/// as [`Value::compare`] does) out of line.
#[inline(always)]
pub(super) fn cond_holds(c: &Cond, v: &Value<'_>) -> bool {
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
pub(super) fn cond_holds_slow(c: &Cond, v: &Value<'_>) -> bool {
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
pub(super) fn contains(hay: &str, needle: &str) -> bool {
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
pub(super) fn glob<T: Copy + PartialEq>(p: &[T], n: &[T], any_seq: T, any_one: T) -> bool {
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
