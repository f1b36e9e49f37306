//! Which version of OML a rule needs: the forms that the
//! OML 1.25 addendum added since v1.17.4, each with the release that brought
//! it, and the forms that only omlet has. `omlet check` reports them, so
//! that an author knows before deploying whether a rule still runs on an
//! older reference engine.
//!
//! The pass reads the syntax tree once, before lowering; it allocates only
//! for the first use of each form in a file.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::ast::{self, CalcExpr, CondAtom, Expr, SqlCond, SqlOperand};
use crate::diag::Span;
use crate::ir::{Cond, Helper, PipeFn};

/// `since` of a form that only omlet has.
pub const OMLET_ONLY: &str = "omlet";

/// A form a rule uses that older OML lacks: its first use in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    /// The form, as a rule writes it (`array { }`, `Time::from_ts`).
    pub name: &'static str,
    /// The reference release that added it (`1.25.3`), or [`OMLET_ONLY`].
    pub since: &'static str,
    pub file: String,
    /// 1-based line and column of its first use.
    pub line: u32,
    pub column: u32,
}

/// The newest reference release among `features` (`None` when they are
/// all omlet's own, or there are none).
pub fn needs(features: &[Feature]) -> Option<&'static str> {
    let key = |v: &str| v.split('.').map(|p| p.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    features.iter().map(|f| f.since).filter(|s| *s != OMLET_ONLY).max_by_key(|s| key(s))
}

/// Records the forms of `rule` (from `file`, whose text is `text`) into `out`.
pub fn collect(rule: &ast::Rule, file: &str, text: &str, out: &mut Vec<Feature>) {
    let mut v = Visitor { file, text, out };
    for b in rule.statics.iter().chain(&rule.stmts) {
        v.expr(&b.expr);
    }
}

struct Visitor<'a> {
    file: &'a str,
    text: &'a str,
    out: &'a mut Vec<Feature>,
}

impl Visitor<'_> {
    fn note(&mut self, name: &'static str, since: &'static str, span: Span) {
        if self.out.iter().any(|f| f.name == name && f.file == self.file) {
            return;
        }
        let (line, column) = crate::diag::line_col(self.text, span.start as usize);
        self.out.push(Feature { name, since, file: self.file.to_string(), line, column });
    }

    fn expr(&mut self, e: &Expr) {
        match e {
            Expr::Literal(..) | Expr::At(..) | Expr::Now(..) | Expr::Ident(..) => {}
            Expr::Access(a) => {
                if let Some(d) = &a.default {
                    self.expr(d);
                }
            }
            Expr::Pipe { source, fns, span, .. } => {
                self.expr(source);
                for f in fns {
                    if let Some((name, since)) = pipe_fn(f) {
                        self.note(name, since, *span);
                    }
                }
            }
            Expr::Match(m) => {
                for s in &m.sources {
                    self.expr(s);
                }
                for arm in &m.arms {
                    if arm.conds.iter().flatten().any(|c| matches!(c, CondAtom::Fn(Cond::IEqualsAny(_)))) {
                        self.note("iequals_any", "1.20.0", arm.span);
                    }
                    self.expr(&arm.result);
                }
                if let Some(d) = &m.default {
                    self.expr(d);
                }
            }
            Expr::Object(members, _) => members.iter().for_each(|m| self.expr(&m.expr)),
            Expr::Array(items, span) => {
                self.note("array { }", "1.25.3", *span);
                items.iter().for_each(|i| self.expr(i));
            }
            Expr::Calc(c, span) => {
                self.note("calc", "1.20.0", *span);
                self.calc(c);
            }
            Expr::LookupNocase { key, default, span, .. } => {
                self.note("lookup_nocase", "1.20.0", *span);
                self.expr(key);
                self.expr(default);
            }
            Expr::Collect(src, _) => self.expr(src),
            Expr::Fmt { args, .. } => args.iter().for_each(|a| self.expr(a)),
            Expr::Sql(q) => self.sql(q),
            Expr::AccessDirect { src, dst, span } => {
                self.note("access_direct", "1.25.2", *span);
                self.expr(src);
                self.expr(dst);
            }
            Expr::Fail(msg, span) => {
                self.note("fail", OMLET_ONLY, *span);
                self.expr(msg);
            }
        }
    }

    fn calc(&mut self, c: &CalcExpr) {
        match c {
            CalcExpr::Int(_) | CalcExpr::Float(_) => {}
            CalcExpr::Field(e) => self.expr(e),
            CalcExpr::Neg(x) | CalcExpr::Fn(_, x) => self.calc(x),
            CalcExpr::Bin(_, l, r) => {
                self.calc(l);
                self.calc(r);
            }
        }
    }

    fn sql(&mut self, q: &ast::Sql) {
        if q.columns.iter().any(|c| c.contains('(')) {
            self.note("SQL aggregates", "1.22.0", q.span);
        }
        if q.from.is_some() {
            self.note("SQL sub-queries", "1.22.0", q.span);
        }
        if !q.order.is_empty() || q.limit.is_some() {
            // The reference's README names them; no release is known to run them.
            self.note("SQL `order by` / `limit`", OMLET_ONLY, q.span);
        }
        self.cond(&q.cond);
    }

    fn cond(&mut self, c: &SqlCond) {
        match c {
            SqlCond::Or(parts) | SqlCond::And(parts) => parts.iter().for_each(|p| self.cond(p)),
            SqlCond::Not(x) | SqlCond::Group(x) => self.cond(x),
            SqlCond::Cmp { left, right, span, .. } => {
                for o in [left, right] {
                    let own = match o {
                        SqlOperand::Call { helper: Some(Helper::IpKey), .. } => Some("ip_key"),
                        SqlOperand::Call { helper: Some(Helper::CidrMinKey), .. } => Some("cidr_min_key"),
                        SqlOperand::Call { helper: Some(Helper::CidrMaxKey), .. } => Some("cidr_max_key"),
                        SqlOperand::Call { helper: Some(Helper::CidrContains), .. } => Some("cidr_contains"),
                        _ => None,
                    };
                    if let Some(name) = own {
                        self.note(name, OMLET_ONLY, *span);
                    }
                    if matches!(o, SqlOperand::Value(Expr::At(..)))
                        || matches!(o, SqlOperand::Column(n, _) if n.starts_with("__"))
                    {
                        self.note("SQL `@name` and `__temp` values", "1.22.0", *span);
                    }
                }
            }
            SqlCond::In { span, .. } => self.note("SQL `in (…)` lists", "1.22.0", *span),
            SqlCond::Like { span, .. } => self.note("SQL `like`", "1.22.0", *span),
        }
    }
}

/// A pipe function newer than v1.17.4, and the release that added it (the
/// pipe catalogue's `since`).
fn pipe_fn(f: &PipeFn) -> Option<(&'static str, &'static str)> {
    let row = crate::pipes::catalogue::row_of(f)?;
    Some((row.name, row.since?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(src: &str) -> Vec<(&'static str, &'static str, u32)> {
        let (rule, diags) = crate::parse::parse(src);
        assert!(diags.is_empty(), "{diags:?}");
        let mut out = Vec::new();
        collect(&rule.unwrap(), "r.oml", src, &mut out);
        out.into_iter().map(|f| (f.name, f.since, f.line)).collect()
    }

    #[test]
    fn forms_are_named_with_their_release_once_per_file() {
        let src = "name : t\n---\na = array { read(x) ; } ;\nb = pipe read(t) | Time::from_ts | on_fail('none') ;\n\
                   c = pipe read(s) | lower ;\nd = array { read(y) ; } ;\ne = select z from t where ip in (@a) ;\n";
        let found = of(src);
        assert_eq!(
            found,
            [
                ("array { }", "1.25.3", 3),
                ("Time::from_ts", "1.25.4", 4),
                ("on_fail", "1.25.1", 4),
                ("lower", OMLET_ONLY, 5),
                ("SQL `in (…)` lists", "1.22.0", 7)
            ]
        );
        let features: Vec<Feature> =
            found.iter().map(|(n, s, l)| Feature { name: n, since: s, file: "r.oml".into(), line: *l, column: 1 }).collect();
        assert_eq!(needs(&features), Some("1.25.4"));
        assert!(of("name : t\n---\na = read(x) ;\n").is_empty(), "v1.17.4 forms need nothing");
        assert_eq!(needs(&[]), None);
    }
}
