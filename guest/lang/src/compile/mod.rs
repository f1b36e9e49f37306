//! The checker: lowers a parsed rule to the IR, resolving what can be
//! resolved once (implicit keys, static symbols, declared types, SQL text and
//! parameters) and rejecting what the spec makes a compile error.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::ast::{self, CondAtom, Operand, SqlCond, SqlOperand};
use crate::diag::{Diagnostic, Span};
use crate::eval;
use crate::ir::*;
use crate::limits::Limits;
use crate::value::{NO_SYM, Type, Value};

mod sql;
pub(crate) use sql::push_sql_text;

/// One rule source to compile.
pub struct Source<'s> {
    /// The file name used in diagnostics and in the SQL allow-list.
    pub file: &'s str,
    pub text: &'s str,
}

/// Compile errors of one file.
#[derive(Debug, Clone)]
pub struct FileErrors {
    pub file: String,
    pub diagnostics: Vec<Diagnostic>,
}

/// Compiles rule files into one program, within the default [`Limits`].
/// `now` is the compile-time clock (Unix nanoseconds, UTC offset in seconds)
/// for `Now::*` in static blocks.
pub fn compile(sources: &[Source<'_>], now: (i64, i32)) -> Result<Program, Vec<FileErrors>> {
    compile_with_limits(sources, now, Limits::default())
}

/// [`compile`] within `limits`, which apply to each file (and
/// [`Limits::max_overlap_work`] to the whole set): a file past one of them
/// fails with a diagnostic where the limit is passed.
pub fn compile_with_limits(sources: &[Source<'_>], now: (i64, i32), limits: Limits) -> Result<Program, Vec<FileErrors>> {
    let mut program = Program {
        source_hash: String::new(),
        names: Vec::new(),
        models: Vec::new(),
        statements: Vec::new(),
        name_index: Default::default(),
        features: Vec::new(),
    };
    let mut errors = Vec::new();
    // Per compiled model: its source, and where its name and patterns stand.
    let mut claims = Vec::new();
    // Each distinct SQL statement's number, so that equal ones are shared.
    let mut statement_ids = BTreeMap::new();
    for (index, src) in sources.iter().enumerate() {
        let max = limits.max_source_bytes;
        let (rule, mut diags) = if src.text.len() > max {
            let d = Diagnostic::new(
                format!("the rule file is {} bytes long, more than the limit of {max} bytes", src.text.len()),
                Span::new(max, max),
            )
            .with_hint("split it into several rule files");
            (None, alloc::vec![d])
        } else {
            crate::parse::parse_with_limits(src.text, limits)
        };
        if let Some(rule) = rule {
            crate::features::collect(&rule, src.file, src.text, &mut program.features);
            let spans = (index, rule.name_span, rule.pattern_spans.clone());
            let mut c = Checker {
                file: src.file,
                text: src.text,
                program: &mut program,
                statement_ids: &mut statement_ids,
                diags: Vec::new(),
                statics: BTreeMap::new(),
                uses_clock: false,
                now,
                limits,
                copied: 0,
                over_copied: false,
            };
            let model = c.model(rule);
            diags.extend(c.diags);
            if diags.is_empty() {
                program.models.push(model);
                claims.push(spans);
            }
        }
        if !diags.is_empty() {
            for d in &mut diags {
                d.locate(src.text);
            }
            diags.sort_by_key(|d| d.span.start);
            errors.push(FileErrors { file: src.file.to_string(), diagnostics: diags });
        }
    }
    check_set(&program.models, &claims, sources, limits, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    program.link();
    Ok(program)
}

/// Rules across the models of one set: unique names, and no rule path
/// claimed by two enabled models. The error goes to the later file.
///
/// The overlap check compares every pair of patterns of two enabled models,
/// each in time proportional to the product of their lengths; the sum of
/// those products is bounded by [`Limits::max_overlap_work`]. Past it the
/// set fails, once, at the pattern that would pass it, and no further
/// overlaps are checked (names still are).
fn check_set(
    models: &[Model],
    claims: &[(usize, Span, Vec<Span>)],
    sources: &[Source<'_>],
    limits: Limits,
    errors: &mut Vec<FileErrors>,
) {
    let mut work: u64 = 0;
    let mut over_budget = false;
    for (b, (src_b, name_b, spans_b)) in claims.iter().enumerate() {
        let mut diags = Vec::new();
        let (mb, file_b) = (&models[b], sources[*src_b].file);
        for (a, ma) in models.iter().enumerate().take(b) {
            let file_a = sources[claims[a].0].file;
            if ma.name == mb.name {
                diags.push(
                    Diagnostic::new(format!("model `{}` is also defined in {file_a}", mb.name), *name_b)
                        .with_hint("a model's name selects it: give each model of a set its own name"),
                );
            }
            if over_budget || !(ma.enabled && mb.enabled) {
                continue;
            }
            for (pb, span) in mb.patterns.iter().zip(spans_b) {
                let mut found = None;
                for pa in &ma.patterns {
                    let cost = (pa.len() as u64 + 1).saturating_mul(pb.len() as u64 + 1);
                    work = work.saturating_add(cost);
                    if work > limits.max_overlap_work {
                        over_budget = true;
                        break;
                    }
                    if let Some(w) = crate::route::overlap(pa, pb) {
                        found = Some((pa, w));
                        break;
                    }
                }
                if over_budget {
                    let max = limits.max_overlap_work;
                    diags.push(
                        Diagnostic::new(
                            format!(
                                "the rule set's `rule :` patterns are too many and too long to check for overlaps \
                                 (the check passes its limit of {max} steps here, against model `{}` in {file_a}); \
                                 use fewer or shorter patterns",
                                ma.name
                            ),
                            *span,
                        )
                        .with_hint(
                            "each pattern is compared with every pattern of the other enabled models: match the \
                             varying part of rule paths with `*`, or set `enable : false` on models not in use",
                        ),
                    );
                    break;
                }
                if let Some(path) = found {
                    diags.push(
                        Diagnostic::new(
                            format!(
                                "rule path `{}` is claimed both by this model and by model `{}` in {file_a} (pattern `{}`)",
                                path.1, ma.name, path.0
                            ),
                            *span,
                        )
                        .with_hint(
                            "each record goes to one model: make the patterns disjoint, or set `enable : false` on one model",
                        ),
                    );
                }
            }
        }
        if diags.is_empty() {
            continue;
        }
        let text = sources[*src_b].text;
        for d in &mut diags {
            d.locate(text);
        }
        match errors.iter_mut().find(|e| e.file == file_b) {
            Some(fe) => fe.diagnostics.extend(diags),
            None => errors.push(FileErrors { file: file_b.to_string(), diagnostics: diags }),
        }
    }
}

struct Checker<'c> {
    file: &'c str,
    text: &'c str,
    program: &'c mut Program,
    /// `program.statements` by SQL text and parameter names.
    statement_ids: &'c mut BTreeMap<(String, Vec<String>), usize>,
    diags: Vec<Diagnostic>,
    /// Static symbols: their value, and its size for [`Checker::copy`].
    statics: BTreeMap<String, (Const, usize)>,
    uses_clock: bool,
    now: (i64, i32),
    limits: Limits,
    /// Bytes copied so far while lowering (see [`Limits::max_expansion_bytes`]).
    copied: usize,
    /// The expansion limit has been reported.
    over_copied: bool,
}

type CResult<T> = Result<T, ()>;

impl Checker<'_> {
    fn err<T>(&mut self, msg: impl Into<String>, span: Span) -> CResult<T> {
        self.diags.push(Diagnostic::new(msg, span));
        Err(())
    }

    fn err_hint<T>(&mut self, msg: impl Into<String>, span: Span, hint: &str) -> CResult<T> {
        self.diags.push(Diagnostic::new(msg, span).with_hint(hint));
        Err(())
    }

    /// Accounts for `bytes` of rule text copied while lowering; past
    /// [`Limits::max_expansion_bytes`] the file fails, reported once, at the
    /// copy that passes the limit.
    fn copy(&mut self, bytes: usize, span: Span) -> CResult<()> {
        self.copied = self.copied.saturating_add(bytes);
        if self.copied <= self.limits.max_expansion_bytes {
            return Ok(());
        }
        if !core::mem::replace(&mut self.over_copied, true) {
            let max = self.limits.max_expansion_bytes;
            self.diags.push(
                Diagnostic::new(format!("this rule expands past {max} bytes of copies when compiled (the expansion limit)"), span)
                    .with_hint("an object member with several names copies its expression per name, a static symbol its value per use; nested, copies multiply"),
            );
        }
        Err(())
    }

    fn model(&mut self, rule: ast::Rule) -> Model {
        for b in rule.statics {
            let _ = self.static_binding(b);
        }
        let mut stmts = Vec::new();
        let mut lines = Vec::new();
        for s in rule.stmts {
            let line = crate::diag::line_col(self.text, s.span.start as usize).0;
            if let Ok(s) = self.statement(s) {
                stmts.push(s);
                lines.push(line);
            }
        }
        Model {
            name: rule.name,
            patterns: rule.patterns,
            enabled: rule.enabled,
            file: self.file.to_string(),
            stmts,
            uses_clock: self.uses_clock,
            lines,
        }
    }

    fn ty(&mut self, ty: &Option<(String, Span)>) -> CResult<Type> {
        match ty {
            None => Ok(Type::Auto),
            Some((name, span)) => match Type::parse(name) {
                Some(t) => Ok(t),
                None => {
                    // The names other languages use, mapped as the docs' table maps them.
                    let like = match name.to_ascii_lowercase().as_str() {
                        "int" | "integer" | "long" | "i64" | "number" => Some("digit"),
                        "string" | "str" | "text" | "char" => Some("chars"),
                        "boolean" => Some("bool"),
                        "double" | "real" | "f64" | "decimal" => Some("float"),
                        "object" | "map" | "dict" | "json" => Some("obj"),
                        "list" | "vec" => Some("array"),
                        "datetime" | "timestamp" | "date" => Some("time"),
                        "ipaddr" | "ipv4" | "ipv6" | "addr" => Some("ip"),
                        _ => None,
                    };
                    let hint = match like {
                        Some(t) => format!(
                            "OML calls this type `{t}` (types: auto, chars, digit, float, bool, ip, time, obj, array; docs/language.md §3)"
                        ),
                        None => {
                            "types are auto, chars, digit, float, bool, ip, time, obj and array (docs/language.md §3)".to_string()
                        }
                    };
                    self.err_hint(format!("unknown type name `{name}`"), *span, &hint)
                }
            },
        }
    }

    fn static_binding(&mut self, b: ast::Binding) -> CResult<()> {
        if b.targets.len() != 1 {
            return self.err("a static binding has exactly one name", b.span);
        }
        let t = &b.targets[0];
        if t.name.contains('*') {
            return self.err("a static binding cannot be a wildcard", t.span);
        }
        if !t.name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.') {
            return self.err("a static name uses letters, digits, `_` and `.`", t.span);
        }
        if self.statics.contains_key(&t.name) {
            return self.err(format!("duplicate static binding `{}`", t.name), t.span);
        }
        let ty = self.ty(&t.ty)?;
        let name = t.name.clone();
        // Delta §14: constants only, so a static is the same value in every
        // record and at every compile.
        if let Err((what, span)) = static_safe(&b.expr) {
            return self.err_hint(
                format!("a static binding holds constants only: {what} is not one"),
                span,
                "statics are literals, and objects, arrays and calc over literals; compute the rest in a statement, into a `__temp` field",
            );
        }
        let clock_before = self.uses_clock;
        let expr = self.expr(b.expr, &name, false)?;
        self.uses_clock = clock_before;
        // Evaluate once, now, against an empty record.
        let program = Program {
            source_hash: String::new(),
            names: Vec::new(),
            models: Vec::new(),
            statements: Vec::new(),
            name_index: Default::default(),
            features: Vec::new(),
        };
        let mut host = eval::Offline::refusing(self.now, "no knowledge at compile time");
        let value = {
            let mut ctx = eval::Ctx::new(&program, Vec::new(), &mut host);
            ctx.expr(&expr, &name).map(|v| const_of(&crate::value::convert(v, &ty)))
        };
        if let Some(c) = value {
            let max = self.limits.max_depth;
            if const_depth(&c) > max as usize {
                return self.err_hint(
                    format!("static `{name}` holds a value nested deeper than {max} levels (the depth limit)"),
                    t.span,
                    "a static built from other statics nests them: flatten it",
                );
            }
            let size = const_bytes(&c);
            self.statics.insert(name, (c, size));
        }
        Ok(())
    }

    fn statement(&mut self, s: ast::Statement) -> CResult<Stmt> {
        let mut targets = Vec::new();
        for t in &s.targets {
            let ty = self.ty(&t.ty)?;
            targets.push(Target { name: t.name.clone(), ty, sym: NO_SYM });
        }
        if let Some(w) = s.targets.iter().find(|t| t.name.contains('*')) {
            if s.targets.len() != 1 {
                return self.err("a batch (wildcard) statement has a single target", w.span);
            }
            return match s.expr {
                // The accessor's arguments and default body are ignored (§8.8).
                ast::Expr::Access(_) => {
                    let t = targets.remove(0);
                    Ok(Stmt::Batch { pattern: t.name, ty: t.ty })
                }
                other => self.err_hint(
                    "a batch (wildcard) statement takes only `read(…)` or `take(…)`",
                    other.span(),
                    "write `prefix* = take() ;`",
                ),
            };
        }
        match s.expr {
            ast::Expr::Sql(q) => {
                let lookup = self.sql(*q)?;
                Ok(Stmt::Lookup { targets, lookup })
            }
            ast::Expr::At(_, span) => self.err_hint("`@name` cannot be a whole statement", span, "write `x = read(name) ;`"),
            expr => {
                let target = targets.remove(0);
                let expr = self.expr(expr, &target.name, true)?;
                Ok(Stmt::Assign { target, expr })
            }
        }
    }

    fn constant(&mut self, op: Operand) -> CResult<Const> {
        match op {
            Operand::Literal(c) => Ok(c),
            Operand::Ident(name, span) => self.static_ref(&name, span),
        }
    }

    fn static_ref(&mut self, name: &str, span: Span) -> CResult<Const> {
        match self.statics.get(name).map(|(_, size)| *size) {
            Some(size) => {
                self.copy(size, span)?;
                self.statics.get(name).map(|(c, _)| c.clone()).ok_or(())
            }
            None => self.err_hint(
                format!("`{name}` is not a static symbol"),
                span,
                "a bare name must be bound in a `static { … }` block; to read a field write `read(name)`",
            ),
        }
    }

    fn access(&mut self, a: ast::Access, key_of: &str) -> CResult<Access> {
        if a.key.is_none() {
            self.copy(key_of.len(), a.span)?;
        }
        let default = match a.default {
            Some(d) => Some(Box::new(self.expr(*d, key_of, false)?)),
            None => None,
        };
        Ok(Access {
            take: a.take,
            key: a.key.unwrap_or_else(|| key_of.to_string()),
            key_sym: NO_SYM,
            option_syms: Vec::new(),
            options: a.options,
            keys: a.keys,
            default,
            fresh: false,
        })
    }

    /// A pipe/match/collect/fmt source: `read`, `take` or `@name`, no default.
    fn var_access(&mut self, e: ast::Expr, key_of: &str) -> CResult<Access> {
        match e {
            ast::Expr::At(name, _) => Ok(Access {
                take: false,
                key: name,
                key_sym: NO_SYM,
                option_syms: Vec::new(),
                options: Vec::new(),
                keys: Vec::new(),
                default: None,
                fresh: false,
            }),
            ast::Expr::Access(a) => self.access(a, key_of),
            other => self.err("expected `read(…)`, `take(…)` or `@name`", other.span()),
        }
    }

    fn expr(&mut self, e: ast::Expr, key_of: &str, top: bool) -> CResult<Expr> {
        let _ = top;
        Ok(match e {
            ast::Expr::Literal(c, _) => Expr::Const(c),
            ast::Expr::Ident(name, span) => Expr::Const(self.static_ref(&name, span)?),
            ast::Expr::Access(a) => Expr::Access(self.access(a, key_of)?),
            ast::Expr::At(_, span) => {
                return self.err_hint(
                    "`@name` is only allowed as a source (match, pipe, collect, fmt, SQL)",
                    span,
                    "write `read(name)`",
                );
            }
            ast::Expr::Now(f, _) => {
                self.uses_clock = true;
                Expr::Now(f)
            }
            e @ (ast::Expr::Pipe { .. } | ast::Expr::AccessDirect { .. } | ast::Expr::Fail(..)) => self.pipe_like(e, key_of)?,
            ast::Expr::Match(m) => {
                let m = *m;
                let mut sources = Vec::new();
                for s in m.sources {
                    sources.push(self.var_access(s, key_of)?);
                }
                let mut arms = Vec::new();
                for arm in m.arms {
                    let mut conds = Vec::new();
                    for alts in arm.conds {
                        let mut atoms = Vec::new();
                        for atom in alts {
                            atoms.push(match atom {
                                CondAtom::Eq(o) => Cond::Eq(self.constant(o)?),
                                CondAtom::Ne(o) => Cond::Ne(self.constant(o)?),
                                CondAtom::In(lo, hi) => Cond::In(self.constant(lo)?, self.constant(hi)?),
                                CondAtom::Fn(c) => c,
                            });
                        }
                        conds.push(atoms);
                    }
                    let result = self.expr(arm.result, key_of, false)?;
                    arms.push(Arm { conds, result });
                }
                let default = match m.default {
                    Some(d) => Some(Box::new(self.expr(d, key_of, false)?)),
                    None => None,
                };
                Expr::Match(Match { sources, arms, default })
            }
            ast::Expr::Object(members, _) => {
                let mut out = Vec::new();
                for m in members {
                    let ty = self.ty(&m.ty)?;
                    // `a, b = read()` gives each name its own member, keyed by
                    // it: each name but the last lowers a copy.
                    let (copies, span) = (m.names.len(), m.expr.span());
                    let mut expr = Some(m.expr);
                    for (i, name) in m.names.into_iter().enumerate() {
                        let e = if i + 1 < copies {
                            self.copy((span.end - span.start) as usize, span)?;
                            expr.clone()
                        } else {
                            expr.take()
                        };
                        if let Some(e) = e {
                            let expr = self.expr(e, &name, false)?;
                            out.push(Member { name, ty: ty.clone(), expr, rank: crate::ir::NO_RANK });
                        }
                    }
                }
                Expr::Object(out)
            }
            ast::Expr::Array(items, _) => {
                let mut out = Vec::with_capacity(items.len());
                for e in items {
                    // Every item reads with the array's target as its key.
                    out.push(self.expr(e, key_of, false)?);
                }
                Expr::Array(out)
            }
            ast::Expr::Calc(c, _) => Expr::Calc(self.calc(*c, key_of)?),
            ast::Expr::LookupNocase { dict, dict_span, key, default, .. } => {
                let members = match self.static_ref(&dict, dict_span)? {
                    Const::Obj(m) => m,
                    _ => {
                        return self.err_hint(
                            format!("`{dict}` is not a static object"),
                            dict_span,
                            "lookup_nocase looks a key up in a static `object { … }`",
                        );
                    }
                };
                // Keys trimmed and lower-cased; of two that become equal, the
                // later in key order wins.
                let mut table = BTreeMap::new();
                for (k, v) in members {
                    table.insert(k.trim().to_lowercase(), v);
                }
                Expr::LookupNocase {
                    table: table.into_iter().collect(),
                    key: Box::new(self.expr(*key, key_of, false)?),
                    default: Box::new(self.expr(*default, key_of, false)?),
                }
            }
            ast::Expr::Collect(src, _) => Expr::Collect(self.var_access(*src, key_of)?),
            ast::Expr::Fmt { format, args, .. } => {
                let mut accs = Vec::new();
                for a in args {
                    accs.push(self.var_access(a, key_of)?);
                }
                Expr::Fmt { pieces: fmt_pieces(&format), args: accs, index: Vec::new() }
            }
            ast::Expr::Sql(q) => return self.err("a SQL lookup must be a whole statement", q.span),
        })
    }

    /// A pipe, `access_direct(src, dst)` with or without pipe functions
    /// (delta §9.3), or `fail(…)`. Apart from [`Self::expr`], which
    /// recurses, so that its frame stays small.
    #[inline(never)]
    fn pipe_like(&mut self, e: ast::Expr, key_of: &str) -> CResult<Expr> {
        let (source, fns) = match e {
            ast::Expr::Pipe { source, fns, .. } => (*source, fns),
            ast::Expr::Fail(msg, _) => return Ok(Expr::Fail(Box::new(self.expr(*msg, key_of, false)?))),
            e => (e, Vec::new()),
        };
        Ok(match source {
            ast::Expr::AccessDirect { src, dst, .. } => {
                let src = Box::new(self.var_access(*src, key_of)?);
                let dst = Box::new(self.var_access(*dst, key_of)?);
                Expr::AccessDirect { src, dst, fns }
            }
            source => Expr::Pipe { source: self.var_access(source, key_of)?, fns },
        })
    }

    fn calc(&mut self, c: ast::CalcExpr, key_of: &str) -> CResult<Calc> {
        Ok(match c {
            ast::CalcExpr::Int(i) => Calc::Int(i),
            ast::CalcExpr::Float(f) => Calc::Float(f),
            ast::CalcExpr::Field(e) => Calc::Field(self.var_access(*e, key_of)?),
            ast::CalcExpr::Neg(x) => Calc::Neg(Box::new(self.calc(*x, key_of)?)),
            ast::CalcExpr::Fn(f, x) => Calc::Fn(f, Box::new(self.calc(*x, key_of)?)),
            ast::CalcExpr::Bin(op, l, r) => Calc::Bin(op, Box::new(self.calc(*l, key_of)?), Box::new(self.calc(*r, key_of)?)),
        })
    }
}

/// Whether a static binding's value is a constant (delta §14): a literal,
/// or an object, array or `calc` built of constants only. Else what is not,
/// and where.
fn static_safe(e: &ast::Expr) -> Result<(), (&'static str, Span)> {
    fn calc(c: &ast::CalcExpr) -> Result<(), (&'static str, Span)> {
        match c {
            ast::CalcExpr::Int(_) | ast::CalcExpr::Float(_) => Ok(()),
            ast::CalcExpr::Field(e) => Err(("a field read", e.span())),
            ast::CalcExpr::Neg(x) | ast::CalcExpr::Fn(_, x) => calc(x),
            ast::CalcExpr::Bin(_, l, r) => calc(l).and(calc(r)),
        }
    }
    match e {
        ast::Expr::Literal(..) => Ok(()),
        ast::Expr::Object(members, _) => members.iter().try_for_each(|m| static_safe(&m.expr)),
        ast::Expr::Array(items, _) => items.iter().try_for_each(static_safe),
        ast::Expr::Calc(c, _) => calc(c),
        ast::Expr::Ident(_, s) => Err(("another static symbol", *s)),
        ast::Expr::Access(a) => Err(("a field read", a.span)),
        ast::Expr::At(_, s) => Err(("a field read", *s)),
        ast::Expr::Now(_, s) => Err(("the clock (`Now::…`)", *s)),
        ast::Expr::Pipe { span, .. } => Err(("a pipe", *span)),
        ast::Expr::Match(m) => Err(("a match", m.span)),
        ast::Expr::Collect(_, s) => Err(("collect", *s)),
        ast::Expr::Fmt { span, .. } => Err(("fmt", *span)),
        ast::Expr::Sql(q) => Err(("a SQL lookup", q.span)),
        ast::Expr::LookupNocase { span, .. } => Err(("lookup_nocase", *span)),
        ast::Expr::AccessDirect { span, .. } => Err(("access_direct", *span)),
        ast::Expr::Fail(_, s) => Err(("fail", *s)),
    }
}

/// Splits a `fmt` format string into text and `{name}` placeholders.
pub fn fmt_pieces(format: &str) -> Vec<FmtPiece> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut name = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    name.push(c);
                }
                let name = name.trim();
                if !closed || name.is_empty() || name.contains(':') || name.contains('{') {
                    return alloc::vec![FmtPiece::Invalid];
                }
                if !text.is_empty() {
                    pieces.push(FmtPiece::Text(core::mem::take(&mut text)));
                }
                pieces.push(FmtPiece::Var(name.to_string()));
            }
            '}' => return alloc::vec![FmtPiece::Invalid],
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(FmtPiece::Text(text));
    }
    pieces
}

/// How deeply a constant nests (a scalar is 0).
fn const_depth(c: &Const) -> usize {
    match c {
        Const::Obj(m) | Const::Array(m) => 1 + m.iter().map(|(_, c)| const_depth(c)).max().unwrap_or(0),
        _ => 0,
    }
}

/// About how many bytes of rule text a constant stands for.
fn const_bytes(c: &Const) -> usize {
    match c {
        Const::Chars(s) => 1 + s.len(),
        Const::Obj(m) | Const::Array(m) => 1 + m.iter().map(|(n, c)| n.len() + const_bytes(c)).sum::<usize>(),
        _ => 1,
    }
}

/// The constant form of a value computed at compile time.
pub fn const_of(v: &Value<'_>) -> Const {
    match v {
        Value::Chars(s) => Const::Chars(s.to_string()),
        Value::Digit(d) => Const::Digit(*d),
        Value::Float(f) => Const::Float(*f),
        Value::Bool(b) => Const::Bool(*b),
        Value::Ip(core::net::IpAddr::V4(a)) => Const::Ipv4(u32::from(*a)),
        Value::Ip(core::net::IpAddr::V6(a)) => Const::Ipv6(u128::from(*a)),
        Value::Time(t) => Const::Time(*t),
        Value::BigInt(s) => Const::BigInt(s.to_string()),
        Value::Null => Const::Null,
        Value::Ignore => Const::Ignore,
        Value::Obj(m) => Const::Obj(m.iter().map(|f| (f.name.to_string(), const_of(&f.value))).collect()),
        Value::Array(m) => Const::Array(m.iter().map(|f| (f.name.to_string(), const_of(&f.value))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Source;

    #[test]
    fn a_program_names_its_slots_and_statements() {
        let src = "name : t\n---\nzone = select zone from ip_zone where ip = read(src) ;\nb = read(a) ;\na = read(b) ;\n";
        let p = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
        // Names are sorted and unique: a name's index is its slot.
        let mut sorted = p.names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(p.names, sorted);
        assert!(p.names.iter().any(|n| n == "src"), "{:?}", p.names);
        let s = &p.statements[0];
        assert_eq!((s.table.as_str(), s.file.as_str(), s.line), ("ip_zone", "t.oml", 3));
        assert_eq!(s.columns, ["zone"]);
        assert_eq!(s.params.len(), 1);
        assert!(s.sql.contains(&alloc::format!(":{}", s.params[0])), "{}", s.sql);
    }

    #[test]
    fn errors_are_grouped_by_file() {
        let good = Source { file: "good.oml", text: "name : g\n---\na = read(a) ;\n" };
        let bad = Source { file: "bad.oml", text: "name : b\n---\na = nosuchfn(a) ;\n" };
        let errors = compile(&[good, bad], (0, 0)).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].file, "bad.oml");
        assert_eq!(errors[0].diagnostics[0].line, 3);
    }

    #[test]
    fn format_strings_split_into_text_and_names() {
        assert_eq!(fmt_pieces("{a}-{ b }"), [FmtPiece::Var("a".into()), FmtPiece::Text("-".into()), FmtPiece::Var("b".into())]);
        assert_eq!(fmt_pieces("{{x}}"), [FmtPiece::Text("{x}".into())]);
        // Unclosed, empty, or with a format spec: the whole format is invalid (§8.10).
        for bad in ["{a", "{}", "{a:>3}", "a}"] {
            assert_eq!(fmt_pieces(bad), [FmtPiece::Invalid], "{bad}");
        }
    }
}
