//! `match` expressions: sources, arms, conditions and the match functions.

use super::*;

impl<'s> Parser<'s> {
    pub(super) fn match_expr(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("match");
        self.ws();
        let mut sources = Vec::new();
        let tuple = self.peek() == b'(';
        if tuple {
            self.bump();
            loop {
                sources.push(self.var_access()?);
                if !self.eat(b',') {
                    break;
                }
            }
            self.expect(b')', "`)` after the match sources")?;
        } else {
            sources.push(self.var_access()?);
        }
        self.expect(b'{', "`{` opening the match arms")?;
        let mut arms = Vec::new();
        let mut default: Option<Expr> = None;
        while self.block_item("match")? {
            let arm_start = self.pos;
            if default.is_some() {
                let span = self.here();
                return self.err_hint("the default arm `_ => …` must be the last arm", span, "move `_ => …` to the end");
            }
            if self.peek() == b'_' && !is_target(self.peek_at(1)) && self.peek() != b'(' {
                self.bump();
                self.arrow()?;
                let r = self.expr(false)?;
                self.arm_sep();
                self.done(SyntaxKind::Arm, arm_start);
                default = Some(r);
                continue;
            }
            let conds = if self.peek() == b'(' {
                if !tuple {
                    let span = self.here();
                    return self.err_hint(
                        "single-source match arms cannot be tuples",
                        span,
                        "match several sources with `match (read(a), read(b)) { … }`",
                    );
                }
                self.bump();
                let mut conds = Vec::new();
                loop {
                    conds.push(self.cond()?);
                    if !self.eat(b',') {
                        break;
                    }
                }
                self.expect(b')', "`)` closing the tuple")?;
                conds
            } else {
                if tuple {
                    let span = self.here();
                    return self.err_hint("a multi-source match needs tuple arms", span, "write `(cond1, cond2) => …`");
                }
                alloc::vec![self.cond()?]
            };
            self.arrow()?;
            let result = self.expr(false)?;
            self.arm_sep();
            self.done(SyntaxKind::Arm, arm_start);
            arms.push(Arm { conds, result, span: Span::new(arm_start, self.pos) });
        }
        if arms.is_empty() {
            let span = Span::new(start, start + 5);
            return self.err("match needs at least one non-default arm", span);
        }
        self.done(SyntaxKind::Match, start);
        Ok(Expr::Match(Box::new(Match { sources, tuple, arms, default, span: Span::new(start, self.pos) })))
    }

    pub(super) fn arrow(&mut self) -> PResult<()> {
        self.ws();
        if self.eat_str("=>") {
            Ok(())
        } else {
            let found = self.found();
            let span = self.here();
            self.err(format!("expected `=>`, found {found}"), span)
        }
    }

    pub(super) fn arm_sep(&mut self) {
        self.eat(b',');
        self.eat(b';');
    }

    /// `atom { "|" atom }`
    pub(super) fn cond(&mut self) -> PResult<Vec<CondAtom>> {
        self.ws();
        let start = self.pos;
        let mut atoms = Vec::new();
        loop {
            atoms.push(self.cond_atom()?);
            if !self.eat(b'|') {
                break;
            }
        }
        self.done(SyntaxKind::Cond, start);
        Ok(atoms)
    }

    pub(super) fn cond_atom(&mut self) -> PResult<CondAtom> {
        self.ws();
        if self.peek() == b'_' && !is_target(self.peek_at(1)) {
            let span = Span::new(self.pos, self.pos + 1);
            // Past the tuple's `)`, so that recovery skips the whole match.
            if let Some(close) = closing_paren(self.src, self.pos, true) {
                self.pos = close + 1;
            }
            return self.err_hint(
                "`_` cannot stand for one element of a tuple arm: OML match arms have no per-element wildcard",
                span,
                "give every element a condition, match fewer sources, or let the default arm `_ => …` take the rest",
            );
        }
        if self.peek() == b'!' {
            self.bump();
            return Ok(CondAtom::Ne(self.operand()?));
        }
        let save = self.pos;
        let name = self.type_name().to_string();
        let next = self.peek_after_ws();
        if name == "in" && next == b'(' {
            self.ws();
            self.bump();
            let lo = self.operand()?;
            self.expect(b',', "`,` between the range bounds")?;
            let hi = self.operand()?;
            self.expect(b')', "`)` closing the range")?;
            self.done(SyntaxKind::Range, save);
            return Ok(CondAtom::In(lo, hi));
        }
        if next == b'(' && !MATCH_FNS.contains(&name.as_str()) && !LITERAL_TYPES.contains(&name.as_str()) {
            // Neither a match function nor a literal: one error, with the
            // nearest name, and the call skipped (no follow-on errors).
            let span = Span::new(save, save + name.len().max(1));
            let mut known: Vec<&str> = MATCH_FNS.to_vec();
            known.extend_from_slice(LITERAL_TYPES);
            let msg = match nearest(&name, &known) {
                Some(near) => format!("unknown match function `{name}`: did you mean `{near}`?"),
                None => format!("unknown match function `{name}`"),
            };
            return self.err_hint(
                msg,
                span,
                "a condition is a literal (`chars(x)`), `in (lo, hi)`, `!x`, a static symbol or a match function: \
                 starts_with, ends_with, contains, iequals, is_empty, regex_match, gt, lt, eq, in_range \
                 (docs/language.md §8)",
            );
        }
        if MATCH_FNS.contains(&name.as_str()) && next == b'(' {
            self.pos = save;
            let (name, args, span) = self.call_head();
            let args = args.map(|(a, _)| a).unwrap_or_default();
            return match match_fn(&name, &args) {
                Ok(c) => {
                    self.done(SyntaxKind::MatchFn, span.start as usize);
                    Ok(CondAtom::Fn(c))
                }
                Err(msg) => self.err(msg, span),
            };
        }
        self.pos = save;
        Ok(CondAtom::Eq(self.operand()?))
    }

    /// A literal or a static symbol.
    pub(super) fn operand(&mut self) -> PResult<Operand> {
        self.ws();
        let start = self.pos;
        let name = self.type_name();
        if !name.is_empty() && self.peek_after_ws() == b'(' {
            self.pos = start;
            return Ok(Operand::Literal(self.literal()?.0));
        }
        self.pos = start;
        let ident = self.take_while(is_simple);
        if ident.is_empty() {
            let found = self.found();
            let span = self.here();
            return self.err(format!("expected a literal or a static symbol, found {found}"), span);
        }
        self.done(SyntaxKind::Ident, start);
        Ok(Operand::Ident(ident.to_string(), Span::new(start, self.pos)))
    }
}

/// A match function's condition (§8.7.4).
pub(super) fn match_fn(name: &str, args: &str) -> Result<Cond, String> {
    let args = split_args(args);
    let text = |i: usize| -> Result<String, String> {
        let a = args.get(i).ok_or_else(|| format!("`{name}` needs an argument"))?;
        Ok(quoted(a).unwrap_or_else(|| a.clone()))
    };
    let num = |i: usize| -> Result<f64, String> {
        let t = text(i)?;
        value::parse_float(&t).ok_or_else(|| format!("`{name}` needs a number, not `{t}`"))
    };
    let arity = |n: usize| -> Result<(), String> {
        if args.len() == n { Ok(()) } else { Err(format!("`{name}` takes {n} argument(s), found {}", args.len())) }
    };
    Ok(match name {
        "starts_with" => {
            arity(1)?;
            Cond::StartsWith(text(0)?)
        }
        "ends_with" => {
            arity(1)?;
            Cond::EndsWith(text(0)?)
        }
        "contains" => {
            arity(1)?;
            Cond::Contains(text(0)?)
        }
        "iequals" => {
            arity(1)?;
            Cond::IEquals(text(0)?.to_lowercase())
        }
        "iequals_any" => Cond::IEqualsAny((0..args.len()).map(|i| text(i).map(|t| t.to_lowercase())).collect::<Result<_, _>>()?),
        "is_empty" => {
            arity(0)?;
            Cond::IsEmpty
        }
        "gt" => {
            arity(1)?;
            Cond::Gt(num(0)?)
        }
        "lt" => {
            arity(1)?;
            Cond::Lt(num(0)?)
        }
        "eq" => {
            arity(1)?;
            Cond::EqNum(num(0)?)
        }
        "in_range" => {
            arity(2)?;
            Cond::InRange(num(0)?, num(1)?)
        }
        "regex_match" => {
            arity(1)?;
            let pattern = text(0)?;
            pattern_fits(&pattern).map_err(|e| e.to_string())?;
            Cond::Regex(crate::ir::RegexCond::new(pattern))
        }
        _ => return Err(format!("unknown match function `{name}`")),
    })
}

/// A `regex_match` pattern whose automaton is over the regex engine's size
/// limit ([`pattern_fits`]): a compile error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternTooLarge {
    /// The pattern's first 60 characters (and `…` when it is longer).
    pub shown: String,
    /// The engine's limit, in bytes.
    pub limit: usize,
}

impl core::fmt::Display for PatternTooLarge {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "the pattern `{}` is too large to compile: its automaton would take more than {} bytes", self.shown, self.limit)
    }
}

impl core::error::Error for PatternTooLarge {}

/// A compile error for a pattern whose automaton is over the regex engine's
/// size limit: it would otherwise never match, without a word. (A pattern
/// that is not a regex still never matches, as §8.7.4 says.)
pub(super) fn pattern_fits(pattern: &str) -> Result<(), PatternTooLarge> {
    match regex_automata::meta::Regex::new(pattern) {
        Err(e) if e.size_limit().is_some() => {
            let mut shown: String = pattern.chars().take(60).collect();
            if pattern.chars().count() > 60 {
                shown.push('…');
            }
            Err(PatternTooLarge { shown, limit: e.size_limit().unwrap_or(0) })
        }
        _ => Ok(()),
    }
}
