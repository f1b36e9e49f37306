//! Expressions: the dispatch on what starts one, accessors (`read`/`take`
//! with their arguments and default body), `@name`, built-ins and literals.

use super::*;

impl<'s> Parser<'s> {
    /// Any expression. `top` allows SQL lookups.
    pub(super) fn expr(&mut self, top: bool) -> PResult<Expr> {
        self.nest()?;
        let e = self.expr_at(top);
        self.depth -= 1;
        e
    }

    pub(super) fn expr_at(&mut self, top: bool) -> PResult<Expr> {
        self.ws();
        let start = self.pos;
        if self.at_word("match") {
            return self.match_expr();
        }
        if self.at_word("object") && self.peek_after(6) == b'{' {
            return self.object();
        }
        if self.at_word("array") && self.peek_after(5) == b'{' {
            return self.array();
        }
        if self.at_word("calc") && self.peek_after(4) == b'(' {
            return self.calc();
        }
        if self.at_word("lookup_nocase") && self.peek_after(13) == b'(' {
            return self.lookup_nocase();
        }
        if self.eat_word("collect") {
            let src = self.var_access()?;
            self.done(SyntaxKind::Collect, start);
            return Ok(Expr::Collect(Box::new(src), Span::new(start, self.pos)));
        }
        if self.at_word("fmt") && self.peek_after(3) == b'(' {
            return self.fmt();
        }
        if (self.at_word("pipe") && self.peek_after(4) != b'(')
            || self.at_access_direct()
            || (self.at_word("fail") && self.peek_after(4) == b'(')
        {
            return self.pipe_like(start);
        }
        if self.at_word_ci("select") {
            if !top {
                let span = Span::new(start, start + 6);
                return self.err("a SQL lookup must be a whole statement", span);
            }
            return self.sql();
        }
        if (self.at_word("read") || self.at_word("take")) && self.peek_after(4) == b'(' {
            let acc = self.accessor(true)?;
            if self.peek_after_ws() == b'|' {
                if acc.default.is_some() {
                    let span = acc.span;
                    return self.err("a pipe source cannot have a default body", span);
                }
                return self.pipe_tail(Expr::Access(acc), start);
            }
            return Ok(Expr::Access(acc));
        }
        if self.peek() == b'@' {
            let at = self.at_name()?;
            if self.peek_after_ws() == b'|' {
                let span = at.span();
                return self.err_hint("a pipe from `@name` needs the `pipe` keyword", span, "write `pipe @name | …`");
            }
            return Ok(at);
        }
        if self.rest().starts_with("Now::") {
            return self.builtin();
        }
        let name_start = self.pos;
        let name = self.type_name();
        if name.is_empty() {
            let found = self.found();
            let span = self.here();
            return self.err(format!("expected an expression, found {found}"), span);
        }
        if self.peek_after_ws() == b'(' {
            self.pos = name_start;
            let (c, span) = self.literal()?;
            return Ok(Expr::Literal(c, span));
        }
        self.pos = name_start;
        let ident = self.take_while(is_simple);
        let span = Span::new(name_start, self.pos.max(name_start + 1));
        if ident.is_empty() || is_target(self.peek()) {
            return self.err("expected an expression", span);
        }
        self.done(SyntaxKind::Ident, name_start);
        Ok(Expr::Ident(ident.to_string(), span))
    }

    /// `pipe src | …`, `access_direct(…) [| …]` or `fail(…)`: apart from
    /// [`Self::expr_at`], which recurses, so that its frame stays small.
    #[inline(never)]
    fn pipe_like(&mut self, start: usize) -> PResult<Expr> {
        if self.at_word("fail") {
            return self.fail();
        }
        if self.eat_word("pipe") {
            self.ws();
            let src = if self.at_access_direct() { self.access_direct()? } else { self.var_access()? };
            return self.pipe_tail(src, start);
        }
        let call = self.access_direct()?;
        if self.peek_after_ws() == b'|' {
            return self.pipe_tail(call, start);
        }
        Ok(call)
    }

    fn at_access_direct(&mut self) -> bool {
        self.at_word("access_direct") && self.peek_after(13) == b'('
    }

    /// `access_direct(src, dst)` (delta §9.3): exactly two operands, each
    /// `read(…)`, `take(…)` or `@name` without a default body.
    fn access_direct(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("access_direct");
        self.expect(b'(', "`(`")?;
        let src = self.var_access()?;
        self.expect(b',', "`,` and the destination operand: access_direct(src, dst)")?;
        let dst = self.var_access()?;
        self.expect(b')', "`)` closing access_direct: it takes exactly two operands")?;
        self.done(SyntaxKind::AccessDirect, start);
        Ok(Expr::AccessDirect { src: Box::new(src), dst: Box::new(dst), span: Span::new(start, self.pos) })
    }

    /// `fail('message')` or `fail(expr)`: the record fails with the message.
    fn fail(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("fail");
        self.expect(b'(', "`(`")?;
        self.ws();
        let msg = if matches!(self.peek(), b'\'' | b'"') {
            let (q, m) = (self.peek(), self.pos);
            self.bump();
            while !self.at_end() && self.peek() != q && self.peek() != b'\n' {
                self.bump();
            }
            if self.peek() != q {
                return self.err("unclosed message: a quoted message ends on its line", Span::new(m, m + 1));
            }
            let text = self.src[m + 1..self.pos].to_string();
            self.bump();
            Expr::Literal(Const::Chars(text), Span::new(m, self.pos))
        } else {
            self.expr(false)?
        };
        self.expect(b')', "`)` closing fail: it takes one message")?;
        self.done(SyntaxKind::Fail, start);
        Ok(Expr::Fail(Box::new(msg), Span::new(start, self.pos)))
    }

    pub(super) fn peek_after(&mut self, n: usize) -> u8 {
        let save = self.pos;
        self.pos += n;
        self.quiet += 1;
        self.ws();
        self.quiet -= 1;
        let c = self.peek();
        self.pos = save;
        c
    }

    pub(super) fn builtin(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("Now::");
        let f = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_');
        let span = Span::new(start, self.pos);
        let f = match f {
            "time" => NowFn::Time,
            "date" => NowFn::Date,
            "hour" => NowFn::Hour,
            other => {
                let other = other.to_string();
                return self.err_hint(
                    format!("unknown built-in function `Now::{other}`"),
                    span,
                    "the built-ins are Now::time(), Now::date() and Now::hour()",
                );
            }
        };
        self.expect(b'(', "`(`")?;
        if !self.eat(b')') {
            let span = self.here();
            return self.err("built-in functions take no arguments", span);
        }
        self.done(SyntaxKind::Builtin, start);
        Ok(Expr::Now(f, Span::new(start, self.pos)))
    }

    /// `type(body)`.
    pub(super) fn literal(&mut self) -> PResult<(Const, Span)> {
        self.ws();
        let start = self.pos;
        let ty = self.type_name().to_string();
        // Spec §2.1: whitespace may separate the type name from `(`.
        self.ws();
        if self.peek() != b'(' {
            let span = Span::new(start, self.pos);
            return self.err(format!("expected a literal like `{ty}(…)`"), span);
        }
        self.bump();
        let body_start = self.pos;
        self.pos = closing_paren(self.src, self.pos, false).unwrap_or(self.src.len());
        if self.at_end() {
            let span = Span::new(start, body_start);
            return self.err("unclosed literal: missing `)`", span);
        }
        let raw = &self.src[body_start..self.pos];
        self.bump();
        let span = Span::new(start, self.pos);
        let body = literal_body(raw);
        match literal_value(&ty, &body) {
            Ok(c) => {
                self.done(SyntaxKind::Literal, start);
                Ok((c, span))
            }
            Err(e) => {
                self.diags.push(Diagnostic::new(e.to_string(), span));
                Err(())
            }
        }
    }

    pub(super) fn at_name(&mut self) -> PResult<Expr> {
        self.ws();
        let start = self.pos;
        self.bump();
        let name = self.take_while(is_simple);
        if name.is_empty() {
            let span = Span::new(start, self.pos + 1);
            return self.err("expected a field name after `@`", span);
        }
        self.done(SyntaxKind::At, start);
        Ok(Expr::At(name.to_string(), Span::new(start, self.pos)))
    }

    /// `read(…)`, `take(…)` or `@name`, without a default body.
    pub(super) fn var_access(&mut self) -> PResult<Expr> {
        self.ws();
        if self.peek() == b'@' {
            return self.at_name();
        }
        if (self.at_word("read") || self.at_word("take")) && self.peek_after(4) == b'(' {
            let acc = self.accessor(false)?;
            return Ok(Expr::Access(acc));
        }
        let found = self.found();
        let span = self.here();
        self.err(format!("expected `read(…)`, `take(…)` or `@name`, found {found}"), span)
    }

    pub(super) fn accessor(&mut self, allow_default: bool) -> PResult<Access> {
        self.ws();
        let start = self.pos;
        let take = self.rest().starts_with("take");
        self.bump_str(if take { "take" } else { "read" });
        self.expect(b'(', "`(`")?;
        let mut acc = Access { take, key: None, options: Vec::new(), keys: Vec::new(), default: None, span: Span::default() };
        loop {
            self.ws();
            if self.eat(b')') {
                break;
            }
            let arg_start = self.pos;
            let word = self.take_while(is_field_key);
            let after = self.peek_after_ws();
            if !word.is_empty() && after == b':' {
                let word = word.to_string();
                self.ws();
                self.bump();
                match word.as_str() {
                    "option" | "keys" | "in" => {
                        let items = self.list()?;
                        if word == "option" {
                            acc.options = items;
                        } else {
                            acc.keys = items;
                        }
                    }
                    "get" => {
                        self.ws();
                        let ks = self.pos;
                        let k = self.take_while(is_field_key);
                        if k.is_empty() {
                            let span = self.here();
                            return self.err("expected a field name after `get:`", span);
                        }
                        let k = k.to_string();
                        self.set_key(&mut acc, k, Span::new(ks, self.pos))?;
                    }
                    _ => {
                        let span = Span::new(arg_start, arg_start + word.len());
                        return self.err_hint(
                            format!("unknown read/take argument key `{word}:`"),
                            span,
                            "read/take accept a field name, `option:[…]`, `keys:[…]` and `get:`",
                        );
                    }
                }
            } else if !word.is_empty() {
                let c = self.peek();
                if !(c.is_ascii_whitespace() || c == b',' || c == b')') {
                    // The offending character whole, even when it is not ASCII.
                    let end = self.pos + self.src[self.pos..].chars().next().map_or(0, char::len_utf8);
                    let span = Span::new(arg_start, end);
                    return self.err_hint(
                        format!("invalid character in field name `{}`", &self.src[arg_start..end]),
                        span,
                        "a field key uses letters, digits, `_`, `.`, `/`, `[` and `]`; use `option:[…]` for other names",
                    );
                }
                let word = word.to_string();
                self.set_key(&mut acc, word, Span::new(arg_start, self.pos))?;
            } else {
                let found = self.found();
                let span = self.here();
                return self.err(format!("expected a field name or `)`, found {found}"), span);
            }
            // Delta §2: arguments are separated by commas, and nothing else
            // may stand between them (a trailing comma is fine).
            if !self.eat(b',') && self.peek_after_ws() != b')' {
                self.ws();
                let found = self.found();
                let span = self.here();
                return self.err_hint(
                    format!("expected `,` or `)` after a read/take argument, found {found}"),
                    span,
                    "separate arguments with commas: read(option:[a, b], keys:[c])",
                );
            }
        }
        if allow_default && self.peek_after_ws() == b'{' {
            self.ws();
            let body = self.pos;
            self.bump();
            self.ws();
            if self.peek() != b'_' || is_target(self.peek_at(1)) {
                let span = self.here();
                return self.err_hint("expected `_ :` in the default body", span, "write `{ _ : chars(value) }`");
            }
            self.bump();
            self.expect(b':', "`:` after `_`")?;
            let value = self.expr(false)?;
            self.eat(b';');
            self.expect(b'}', "`}` closing the default body")?;
            self.done(SyntaxKind::DefaultBody, body);
            acc.default = Some(Box::new(value));
        }
        acc.span = Span::new(start, self.pos);
        self.done(SyntaxKind::Access, start);
        Ok(acc)
    }

    pub(super) fn set_key(&mut self, acc: &mut Access, key: String, span: Span) -> PResult<()> {
        if acc.key.is_some() {
            return self.err_hint("read/take takes one field name", span, "use `option:[a, b]` to try several names");
        }
        acc.key = Some(key);
        Ok(())
    }

    /// `[item, item]`: items are any text but `,` and `]`, brackets balanced.
    pub(super) fn list(&mut self) -> PResult<Vec<String>> {
        self.ws();
        if self.rest().starts_with("\\[") {
            // The reference reads `read(option:\[x\])` as the field `option`.
            let span = Span::new(self.pos, self.pos + 2);
            return self.err_hint(
                "`\\[` is not an option list: the brackets of a list are not escaped",
                span,
                "write `option:[x]` (or `keys:[x]`); the reference reads `option:\\[x\\]` as a field named `option`",
            );
        }
        self.expect(b'[', "`[`")?;
        let list_start = self.pos - 1;
        let Some(end) = list_end(self.src, self.pos) else {
            self.pos = self.src.len();
            let span = self.here();
            return self.err("unclosed list: expected `]`", span);
        };
        let items = list_items(&self.src[self.pos..end]).into_iter().map(str::to_string).collect();
        self.pos = end + 1;
        self.done(SyntaxKind::List, list_start);
        Ok(items)
    }
}

/// Trims a literal body and removes one pair of quotes, decoding escapes (§2.4).
pub(super) fn literal_body(raw: &str) -> String {
    let t = raw.trim();
    let b = t.as_bytes();
    if b.len() >= 2 && (b[0] == b'\'' || b[0] == b'"') && b[b.len() - 1] == b[0] {
        let inner = &t[1..t.len() - 1];
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('r') => out.push('\r'),
                    Some('t') => out.push('\t'),
                    Some(c @ ('\\' | '\'' | '"')) => out.push(c),
                    Some(c) => {
                        out.push('\\');
                        out.push(c);
                    }
                    None => out.push('\\'),
                }
            } else {
                out.push(c);
            }
        }
        out
    } else {
        t.to_string()
    }
}

/// Why `ty(body)` is no literal ([`literal_value`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LiteralError {
    /// The body is not a value of the type (`digit(4x)`).
    DoesNotParse {
        /// The literal's type.
        ty: &'static str,
        /// The body, as written.
        body: String,
    },
    /// A `bool` literal other than `true` or `false`.
    NotBool(String),
    /// The name is no literal type, with the nearest name when one is near.
    NotALiteral {
        /// The name, as written.
        name: String,
        /// The literal type or function it is nearest to.
        near: Option<&'static str>,
    },
}

impl core::fmt::Display for LiteralError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LiteralError::DoesNotParse { ty, body } => write!(f, "{ty} literal does not parse: `{body}`"),
            LiteralError::NotBool(body) => write!(f, "bool literal must be `true` or `false`, not `{body}`"),
            LiteralError::NotALiteral { name, near: Some(near) } => {
                write!(f, "`{name}(…)` is neither a literal nor a function: did you mean `{near}(…)`?")
            }
            LiteralError::NotALiteral { name, near: None } => {
                write!(f, "`{name}(…)` is not a literal: literals are chars, digit, float, bool, ip, time and symbol")
            }
        }
    }
}

impl core::error::Error for LiteralError {}

/// The value of `ty(body)`, or why it is not one.
pub fn literal_value(ty: &str, body: &str) -> Result<Const, LiteralError> {
    let bad = |ty: &'static str| LiteralError::DoesNotParse { ty, body: body.to_string() };
    Ok(match ty {
        "chars" | "symbol" => Const::Chars(body.to_string()),
        "digit" => Const::Digit(value::parse_digit(body).ok_or_else(|| bad("digit"))?),
        "float" => Const::Float(value::parse_float(body).ok_or_else(|| bad("float"))?),
        "bool" => match body {
            "true" => Const::Bool(true),
            "false" => Const::Bool(false),
            _ => return Err(LiteralError::NotBool(body.to_string())),
        },
        "ip" => match body.parse::<core::net::IpAddr>() {
            Ok(core::net::IpAddr::V4(v4)) => Const::Ipv4(u32::from(v4)),
            Ok(core::net::IpAddr::V6(v6)) => Const::Ipv6(u128::from(v6)),
            Err(_) => return Err(bad("ip")),
        },
        "time" => Const::Time(time::parse_time(body).ok_or_else(|| bad("time"))?),
        other => {
            let mut known = LITERAL_TYPES.to_vec();
            known.extend_from_slice(&["read", "take", "fmt"]);
            return Err(LiteralError::NotALiteral { name: other.to_string(), near: nearest(other, &known) });
        }
    })
}
