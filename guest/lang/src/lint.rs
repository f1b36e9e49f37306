//! Warnings that catch silent loss: rules that compile
//! and run, and still lose a field without a word.
//!
//! - a `read` of a field that an earlier statement `take`s into another
//!   name: the read finds nothing;
//! - a match arm whose conditions an earlier arm already has: it is never
//!   taken;
//! - given the field names of sample records, a read of a field that no
//!   sample record has and no earlier statement writes (a misspelled name
//!   such as `dest_port` for `dst_port`), with the nearest name;
//! - a `Time::` function written without its zone, which then works at
//!   UTC+8 (the reference's default), wrong by hours elsewhere;
//! - a `: time` target of a plain `read` or `take`, which converts no text:
//!   a timestamp that arrives as text stays text;
//! - a lookup helper that takes IPv4 only (`cidr4_contains`, `ip4_int`, …)
//!   given a field that holds IPv6 addresses in the sample, or that an
//!   earlier statement types `ip`: those records never match.
//!
//! They read the syntax tree, so they need neither a knowledge base nor a
//! component. `omlet check` prints them; they never fail a build unless
//! asked (`--deny-warnings`).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::ast::{self, Expr, LikePattern, LikePiece, SqlCond, SqlOperand};
use crate::diag::{Span, line_col};
use crate::ir::{Helper, PipeFn};

/// One warning, with its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lint {
    /// 1-based line and column of what it is about.
    pub line: u32,
    pub column: u32,
    pub message: String,
}

/// What sample records say: the fields they have, and those that hold an
/// IPv6 address (as an address, or as text that reads as one) in some record.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub fields: BTreeSet<String>,
    pub ipv6: BTreeSet<String>,
}

/// A field access found in a statement: its key (the implicit one
/// resolved), whether it takes, whether it has options or a default, where.
struct Use {
    key: String,
    take: bool,
    fallback: bool,
    span: Span,
}

/// The warnings of one rule file's text. `sample`, when given, says what
/// input records hold. A text that does not parse gives
/// none (its errors say more).
pub fn lints(text: &str, sample: Option<&Sample>) -> Vec<Lint> {
    let (Some(rule), diags) = crate::parse::parse(text) else { return Vec::new() };
    if !diags.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let at = |span: Span, message: String| {
        let (line, column) = line_col(text, span.start as usize);
        Lint { line, column, message }
    };
    // Fields taken into another name, by key: the line of the statement
    // that took it and where it went.
    let mut taken: BTreeMap<String, (u32, String)> = BTreeMap::new();
    let mut written: BTreeSet<String> = BTreeSet::new();
    // Fields an earlier statement typed `ip` (either family).
    let mut typed_ip: BTreeSet<String> = BTreeSet::new();
    for s in &rule.stmts {
        let line = line_col(text, s.span.start as usize).0;
        let target = s.targets.first().map(|t| t.name.clone()).unwrap_or_default();
        if target.contains('*') {
            // A batch statement moves whatever matches: the fields it takes
            // are not known here.
            continue;
        }
        let mut uses = Vec::new();
        let mut found = Found::default();
        walk(&s.expr, &target, &mut uses, &mut found);
        for u in &uses {
            if !u.take
                && !written.contains(&u.key)
                && let Some((took, into)) = taken.get(&u.key)
            {
                out.push(at(
                    u.span,
                    format!(
                        "`read({k})` finds nothing: line {took} takes `{k}` into `{into}` first (read `{into}`, or read `{k}` at line {took})",
                        k = u.key
                    ),
                ));
            }
            if let Some(sample) = sample
                && !u.fallback
                && !sample.fields.contains(&u.key)
                && !written.contains(&u.key)
                && !taken.contains_key(&u.key)
            {
                let known: Vec<&str> =
                    sample.fields.iter().map(String::as_str).chain(written.iter().map(String::as_str)).collect();
                let near = crate::parse::nearest(&u.key, &known).map(|n| format!("; did you mean `{n}`?")).unwrap_or_default();
                out.push(at(
                    u.span,
                    format!("`{}` is in no sample record and no earlier statement writes it: it is always absent{near}", u.key),
                ));
            }
        }
        for (f, span) in &found.pipes {
            if let Some(message) = zone_left_out(f, &text[span.start as usize..span.end as usize]) {
                out.push(at(*span, message));
            }
        }
        if let Expr::Access(a) = &s.expr
            && a.keys.is_empty()
        {
            for t in s.targets.iter().filter(|t| t.ty.as_ref().is_some_and(|(ty, _)| ty == "time")) {
                let key = a.key.as_deref().unwrap_or(&t.name);
                out.push(at(
                    t.ty.as_ref().map_or(t.span, |(_, span)| *span),
                    format!(
                        "`: time` converts no text: a timestamp that arrives as text stays text, as in the reference; \
                         parse it (`{name} = pipe read({key}) | Time::parse('rfc3339', 0) ;`), or type `{key}` before \
                         the rule sees it (`omlet run --input-types {key}=time`)",
                        name = t.name
                    ),
                ));
            }
        }
        for (helper, args, span) in &found.helpers {
            let Some(neutral) = family_neutral(*helper) else { continue };
            for arg in *args {
                let SqlOperand::Value(Expr::Access(a)) = arg else { continue };
                if !a.keys.is_empty() {
                    continue;
                }
                let key = a.key.as_deref().unwrap_or(&target);
                let why = if sample.is_some_and(|s| s.ipv6.contains(key)) {
                    format!("`{key}` holds IPv6 addresses in the sample")
                } else if typed_ip.contains(key) {
                    format!("`{key}` is typed `ip`, which holds IPv6 addresses too")
                } else {
                    continue;
                };
                out.push(at(
                    *span,
                    format!(
                        "`{}` takes IPv4 only, and {why}: their records never match; {neutral} takes both families",
                        helper.name()
                    ),
                ));
            }
        }
        for m in found.matches {
            let shown: Vec<String> = m.arms.iter().map(|a| format!("{:?}", a.conds)).collect();
            for (j, arm) in m.arms.iter().enumerate() {
                if let Some(i) = shown[..j].iter().position(|c| *c == shown[j]) {
                    let first = line_col(text, m.arms[i].span.start as usize).0;
                    out.push(at(
                        arm.span,
                        format!("this match arm is never taken: the arm at line {first} has the same conditions"),
                    ));
                }
            }
        }
        for u in &uses {
            if u.take && u.key != target && !written.contains(&u.key) {
                taken.entry(u.key.clone()).or_insert((line, target.clone()));
            }
        }
        for t in &s.targets {
            if t.ty.as_ref().is_some_and(|(ty, _)| ty == "ip") {
                typed_ip.insert(t.name.clone());
            } else {
                typed_ip.remove(&t.name);
            }
            written.insert(t.name.clone());
            taken.remove(&t.name);
        }
    }
    out
}

/// What [`walk`] finds besides field accesses: matches, and each pipe
/// function with where it is written.
#[derive(Default)]
struct Found<'e> {
    matches: Vec<&'e ast::Match>,
    pipes: Vec<(&'e PipeFn, Span)>,
    /// Lookup helper calls: the helper, its arguments, where.
    helpers: Vec<(Helper, &'e [SqlOperand], Span)>,
}

/// The helper that does the work of an IPv4-only one for both families.
fn family_neutral(h: Helper) -> Option<&'static str> {
    match h {
        Helper::Cidr4Contains => Some("`cidr_contains`"),
        Helper::Ip4Int => Some("`ip_key`"),
        Helper::Cidr4Min => Some("`cidr_min_key`"),
        Helper::Cidr4Max => Some("`cidr_max_key`"),
        Helper::Ip4Between => Some("`ip_key` between `cidr_min_key` and `cidr_max_key`"),
        _ => None,
    }
}

/// The warning for a `Time::` function written without its zone: it then
/// works at UTC+8, the reference's default, which is wrong by hours for
/// anybody elsewhere. `written` is the function as the rule writes it.
fn zone_left_out(f: &PipeFn, written: &str) -> Option<String> {
    let (name, args) = match written.split_once('(') {
        Some((name, rest)) => (name.trim(), rest.rsplit_once(')').map_or(rest, |(a, _)| a)),
        None => (written.trim(), ""),
    };
    let given = crate::parse::split_args(args).iter().filter(|a| !a.trim().is_empty()).count();
    let example = match f {
        PipeFn::ToTs { .. } | PipeFn::FromTs { .. } if given == 0 && !name.ends_with("_zone") => format!("{name}(0)"),
        PipeFn::TimeParse { .. } if given == 1 => format!("{name}({}, 0)", args.trim()),
        _ => return None,
    };
    Some(format!(
        "`{}` names no zone, so it works at UTC+8 (the reference's default for every `Time::` function); \
         name the zone: `{example}` for UTC, or your offset in hours",
        written.trim()
    ))
}

/// The accesses and matches of `e`, in order; `implicit` is the key of an
/// access that names none (the statement's target, or the member's name).
fn walk<'e>(e: &'e Expr, implicit: &str, uses: &mut Vec<Use>, found: &mut Found<'e>) {
    match e {
        Expr::Access(a) => access(a, implicit, uses, found),
        Expr::At(name, span) => uses.push(Use { key: name.clone(), take: false, fallback: false, span: *span }),
        Expr::Pipe { source, fns, fn_spans, .. } => {
            walk(source, implicit, uses, found);
            found.pipes.extend(fns.iter().zip(fn_spans.iter().copied()));
        }
        Expr::Match(m) => {
            for s in &m.sources {
                walk(s, implicit, uses, found);
            }
            found.matches.push(m);
            for a in &m.arms {
                walk(&a.result, implicit, uses, found);
            }
            if let Some(d) = &m.default {
                walk(d, implicit, uses, found);
            }
        }
        Expr::Object(members, _) => {
            for m in members {
                let name = m.names.first().map(String::as_str).unwrap_or(implicit);
                walk(&m.expr, name, uses, found);
            }
        }
        Expr::Array(items, _) => {
            for i in items {
                walk(i, implicit, uses, found);
            }
        }
        Expr::Calc(c, _) => calc(c, implicit, uses, found),
        Expr::LookupNocase { key, default, .. } => {
            walk(key, implicit, uses, found);
            walk(default, implicit, uses, found);
        }
        // `collect` takes patterns, not fields: nothing to say of it here.
        Expr::Collect(..) => {}
        Expr::Fmt { args, .. } => {
            for a in args {
                walk(a, implicit, uses, found);
            }
        }
        Expr::Sql(q) => sql_cond(&q.cond, implicit, uses, found),
        Expr::AccessDirect { src, dst, .. } => {
            walk(src, implicit, uses, found);
            walk(dst, implicit, uses, found);
        }
        Expr::Fail(m, _) => walk(m, implicit, uses, found),
        Expr::Literal(..) | Expr::Now(..) | Expr::Ident(..) => {}
    }
}

fn access<'e>(a: &'e ast::Access, implicit: &str, uses: &mut Vec<Use>, found: &mut Found<'e>) {
    if !a.keys.is_empty() {
        return;
    }
    let key = a.key.clone().unwrap_or_else(|| implicit.into());
    uses.push(Use { key, take: a.take, fallback: a.default.is_some() || !a.options.is_empty(), span: a.span });
    if let Some(d) = &a.default {
        walk(d, implicit, uses, found);
    }
}

fn calc<'e>(c: &'e ast::CalcExpr, implicit: &str, uses: &mut Vec<Use>, found: &mut Found<'e>) {
    match c {
        ast::CalcExpr::Field(e) => walk(e, implicit, uses, found),
        ast::CalcExpr::Neg(x) | ast::CalcExpr::Fn(_, x) => calc(x, implicit, uses, found),
        ast::CalcExpr::Bin(_, l, r) => {
            calc(l, implicit, uses, found);
            calc(r, implicit, uses, found);
        }
        ast::CalcExpr::Int(_) | ast::CalcExpr::Float(_) => {}
    }
}

fn sql_cond<'e>(c: &'e SqlCond, implicit: &str, uses: &mut Vec<Use>, found: &mut Found<'e>) {
    match c {
        SqlCond::Or(v) | SqlCond::And(v) => {
            for c in v {
                sql_cond(c, implicit, uses, found);
            }
        }
        SqlCond::Not(c) | SqlCond::Group(c) => sql_cond(c, implicit, uses, found),
        SqlCond::Cmp { left, right, .. } => {
            sql_operand(left, implicit, uses, found);
            sql_operand(right, implicit, uses, found);
        }
        SqlCond::In { left, items, .. } => {
            sql_operand(left, implicit, uses, found);
            for i in items {
                sql_operand(i, implicit, uses, found);
            }
        }
        SqlCond::Like { left, pattern, span } => {
            sql_operand(left, implicit, uses, found);
            match pattern {
                LikePattern::Value(v) => sql_operand(v, implicit, uses, found),
                LikePattern::Pieces(pieces) => {
                    for p in pieces {
                        if let LikePiece::Field { take, name } = p {
                            uses.push(Use { key: name.clone(), take: *take, fallback: false, span: *span });
                        }
                    }
                }
                LikePattern::Literal(_) => {}
            }
        }
    }
}

fn sql_operand<'e>(o: &'e SqlOperand, implicit: &str, uses: &mut Vec<Use>, found: &mut Found<'e>) {
    match o {
        SqlOperand::Value(e) => walk(e, implicit, uses, found),
        SqlOperand::Call { args, helper, span, .. } => {
            if let Some(h) = helper {
                found.helpers.push((*h, args, *span));
            }
            for a in args {
                sql_operand(a, implicit, uses, found);
            }
        }
        SqlOperand::Column(..) | SqlOperand::Literal(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(stmts: &str, sample: Option<&[&str]>) -> Vec<String> {
        let text = format!("name : t\n---\n{stmts}");
        let sample: Option<Sample> =
            sample.map(|s| Sample { fields: s.iter().map(|x| String::from(*x)).collect(), ..Sample::default() });
        lints(&text, sample.as_ref()).into_iter().map(|l| format!("{}:{}: {}", l.line, l.column, l.message)).collect()
    }

    #[test]
    fn a_read_after_a_take_into_another_name() {
        let m = messages("a = take(ip) ;\nb = read(ip) ;\n", None);
        assert_eq!(m, ["4:5: `read(ip)` finds nothing: line 3 takes `ip` into `a` first (read `a`, or read `ip` at line 3)"]);
        // Taken into its own name: the read finds the output.
        assert!(messages("ip = take(ip) ;\nb = read(ip) ;\n", None).is_empty());
        // Taken inside an object, read by a lookup.
        let m = messages("o = object { src = take(src_ip) ; } ;\nz = select zone from zones where ip = read(src_ip) ;\n", None);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains("takes `src_ip` into `o`"), "{m:?}");
    }

    #[test]
    fn a_match_arm_that_repeats_an_earlier_one() {
        let m =
            messages("k = match read(p) { digit(80) => chars(a) ; digit(443) => chars(b) ; digit(80) => chars(c) ; } ;\n", None);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains("never taken: the arm at line 3"), "{m:?}");
    }

    #[test]
    fn a_field_no_sample_has() {
        let sample = ["dst_port", "src_ip"];
        let m = messages(
            "p = read(dest_port) ;\nq = read(src_ip) ;\nr = read(p) ;\ns = read(x) { _ : chars(none) } ;\n",
            Some(&sample),
        );
        assert_eq!(
            m,
            [
                "3:5: `dest_port` is in no sample record and no earlier statement writes it: it is always absent; did you mean `dst_port`?"
            ]
        );
    }
}
