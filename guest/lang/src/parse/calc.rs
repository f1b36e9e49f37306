//! `calc( … )` arithmetic (delta §11) and `lookup_nocase(dict, key, default)`
//! (delta §12.1).

use super::*;
use crate::ir::{CalcFn, CalcOp};

impl<'s> Parser<'s> {
    /// `calc( sum )`.
    pub(super) fn calc(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("calc");
        self.expect(b'(', "`(` after `calc`")?;
        let e = self.calc_add()?;
        self.expect(b')', "`)` closing `calc` (operators are + - * / %)")?;
        self.done(SyntaxKind::Calc, start);
        Ok(Expr::Calc(Box::new(e), Span::new(start, self.pos)))
    }

    /// Terms joined by `+` and `-`, left to right. Each operator deepens
    /// the tree that later passes recurse over, so it counts as a level.
    fn calc_add(&mut self) -> PResult<CalcExpr> {
        self.nest()?;
        let levels = self.depth;
        let mut left = self.calc_mul();
        while let Ok(l) = left {
            self.ws();
            let op = match self.peek() {
                b'+' => CalcOp::Add,
                b'-' => CalcOp::Sub,
                _ => {
                    left = Ok(l);
                    break;
                }
            };
            self.bump();
            left = self.nest().and_then(|()| self.calc_mul()).map(|r| CalcExpr::Bin(op, Box::new(l), Box::new(r)));
        }
        self.depth = levels - 1;
        left
    }

    /// Factors joined by `*`, `/` and `%`, left to right.
    fn calc_mul(&mut self) -> PResult<CalcExpr> {
        let levels = self.depth;
        let mut left = self.calc_unary();
        while let Ok(l) = left {
            self.ws();
            let op = match self.peek() {
                b'*' => CalcOp::Mul,
                b'/' => CalcOp::Div,
                b'%' => CalcOp::Rem,
                _ => {
                    left = Ok(l);
                    break;
                }
            };
            self.bump();
            left = self.nest().and_then(|()| self.calc_unary()).map(|r| CalcExpr::Bin(op, Box::new(l), Box::new(r)));
        }
        self.depth = levels;
        left
    }

    fn calc_unary(&mut self) -> PResult<CalcExpr> {
        self.ws();
        if self.peek() == b'-' {
            self.bump();
            self.nest()?;
            let inner = self.calc_unary();
            self.depth -= 1;
            return Ok(CalcExpr::Neg(Box::new(inner?)));
        }
        self.calc_prim()
    }

    fn calc_prim(&mut self) -> PResult<CalcExpr> {
        self.ws();
        let start = self.pos;
        let c = self.peek();
        if c.is_ascii_digit() {
            self.take_while(|c| c.is_ascii_digit());
            if self.peek() == b'.' && self.peek_at(1).is_ascii_digit() {
                self.bump();
                self.take_while(|c| c.is_ascii_digit());
            }
            let text = &self.src[start..self.pos];
            let span = Span::new(start, self.pos);
            self.done(SyntaxKind::Literal, start);
            if text.contains('.') {
                return match text.parse::<f64>() {
                    Ok(f) => Ok(CalcExpr::Float(f)),
                    Err(_) => self.err(format!("`{text}` is not a number"), span),
                };
            }
            return match text.parse::<i64>() {
                Ok(i) => Ok(CalcExpr::Int(i)),
                Err(_) => self.err_hint(
                    format!("`{text}` does not fit in 64 bits"),
                    span,
                    "calc's integers are 64-bit; write a float (`1.0e20` is not allowed, `100000000000000000000.0` is)",
                ),
            };
        }
        if c == b'(' {
            self.bump();
            let inner = self.calc_add()?;
            self.expect(b')', "`)` closing the group")?;
            return Ok(inner);
        }
        if c == b'@' || ((self.at_word("read") || self.at_word("take")) && self.peek_after(4) == b'(') {
            return Ok(CalcExpr::Field(Box::new(self.var_access()?)));
        }
        let name = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_');
        let f = match name {
            "abs" => Some(CalcFn::Abs),
            "round" => Some(CalcFn::Round),
            "floor" => Some(CalcFn::Floor),
            "ceil" => Some(CalcFn::Ceil),
            _ => None,
        };
        if let Some(f) = f.filter(|_| self.peek_after_ws() == b'(') {
            self.ws();
            self.bump();
            let inner = self.calc_add()?;
            self.expect(b')', "`)` closing the function's argument")?;
            return Ok(CalcExpr::Fn(f, Box::new(inner)));
        }
        let span = Span::new(start, self.pos.max(start + 1));
        if !name.is_empty() {
            let name = name.to_string();
            return self.err_hint(
                format!("`{name}` is not a number, a field or a function of calc"),
                span,
                "calc reads numbers, fields (read(x), take(x), @x) and abs(…), round(…), floor(…), ceil(…)",
            );
        }
        self.pos = start;
        let found = self.found();
        let span = self.here();
        self.err(format!("expected a number, a field or `(` in calc, found {found}"), span)
    }

    /// `lookup_nocase(DICT, key, default)`.
    pub(super) fn lookup_nocase(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("lookup_nocase");
        self.expect(b'(', "`(` after `lookup_nocase`")?;
        self.ws();
        let ds = self.pos;
        let dict = self.take_while(is_simple).to_string();
        let dict_span = Span::new(ds, self.pos.max(ds + 1));
        if dict.is_empty() {
            return self.err("expected the name of a static object", dict_span);
        }
        self.expect(b',', "`,` after the dictionary")?;
        let key = self.lookup_arg()?;
        self.expect(b',', "`,` after the key")?;
        let default = self.lookup_arg()?;
        self.expect(b')', "`)` closing `lookup_nocase`")?;
        self.done(SyntaxKind::LookupNocase, start);
        Ok(Expr::LookupNocase {
            dict,
            dict_span,
            key: Box::new(key),
            default: Box::new(default),
            span: Span::new(start, self.pos),
        })
    }

    /// An argument of `lookup_nocase`: any expression, or a bare number or
    /// quoted text (SQL-style literals, as the reference reads them).
    fn lookup_arg(&mut self) -> PResult<Expr> {
        self.ws();
        let start = self.pos;
        if let Some(lit) = self.sql_literal()? {
            return Ok(Expr::Literal(lit, Span::new(start, self.pos)));
        }
        self.expr(false)
    }
}
