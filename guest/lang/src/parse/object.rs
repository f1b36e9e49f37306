//! Constructors: `object { … }`, `array { … }` and `fmt("…", …)`.

use super::*;

impl<'s> Parser<'s> {
    pub(super) fn object(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("object");
        self.expect(b'{', "`{`")?;
        let mut members = Vec::new();
        while self.block_item("object")? {
            let ms = self.pos;
            let mut names = Vec::new();
            loop {
                self.ws();
                let n = self.take_while(is_simple);
                if n.is_empty() {
                    let found = self.found();
                    let span = self.here();
                    return self.err(format!("expected a member name, found {found}"), span);
                }
                names.push(n.to_string());
                if !self.eat(b',') {
                    break;
                }
            }
            let ty = self.opt_type()?;
            self.expect(b'=', "`=` after the member name")?;
            let expr = self.expr(false)?;
            self.eat(b';');
            self.done(SyntaxKind::Member, ms);
            members.push(Member { names, ty, expr, span: Span::new(ms, self.pos) });
        }
        self.done(SyntaxKind::Object, start);
        Ok(Expr::Object(members, Span::new(start, self.pos)))
    }

    /// `array { item [;] … }` (delta §1.1): items follow each other, `;`
    /// after each optional; an empty array is allowed (and always absent).
    pub(super) fn array(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("array");
        self.expect(b'{', "`{`")?;
        let mut items = Vec::new();
        while self.block_item("array")? {
            let is = self.pos;
            items.push(self.expr(false)?);
            self.eat(b';');
            self.done(SyntaxKind::Item, is);
        }
        self.done(SyntaxKind::Array, start);
        Ok(Expr::Array(items, Span::new(start, self.pos)))
    }

    pub(super) fn fmt(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("fmt");
        self.expect(b'(', "`(`")?;
        self.ws();
        if self.peek() != b'"' {
            let span = self.here();
            return self.err("`fmt` starts with a double-quoted format string", span);
        }
        self.bump();
        let fs = self.pos;
        while !self.at_end() && self.peek() != b'"' {
            self.bump();
        }
        if self.at_end() {
            let span = Span::new(fs - 1, fs);
            return self.err("unclosed format string", span);
        }
        let format = self.src[fs..self.pos].to_string();
        self.bump();
        let mut args = Vec::new();
        while self.eat(b',') {
            args.push(self.var_access()?);
        }
        if args.is_empty() {
            let span = self.here();
            return self.err("`fmt` needs at least one argument after the format string", span);
        }
        self.expect(b')', "`)` closing `fmt`")?;
        self.done(SyntaxKind::Fmt, start);
        Ok(Expr::Fmt { format, args, span: Span::new(start, self.pos) })
    }
}
