//! The file's layout: the header (`name`, `rule`, `enable`), static blocks,
//! and statements with their targets.

use super::*;

impl<'s> Parser<'s> {
    pub(super) fn rule(&mut self) -> PResult<Rule> {
        self.ws();
        if !self.at_word("name") {
            let span = self.here();
            return self.err_hint("a rule must start with its name", span, "write `name : my/model` on the first line");
        }
        let item = self.pos;
        self.bump_str("name");
        self.expect(b':', "`:` after `name`")?;
        self.ws();
        let start = self.pos;
        let name = self.take_while(is_model_name).to_string();
        if name.is_empty() || !(self.at_end() || self.peek().is_ascii_whitespace()) {
            let span = Span::new(start, self.pos + 1);
            return self.err_hint(
                "invalid model name",
                span,
                "a model name uses letters, digits, `_` and `/`, followed by a line break",
            );
        }
        let name_span = Span::new(start, self.pos);
        self.done(SyntaxKind::NameItem, item);
        let mut patterns = Vec::new();
        let mut pattern_spans = Vec::new();
        let mut enabled = true;
        loop {
            self.ws();
            if self.eat_str("---") {
                self.done(SyntaxKind::Separator, self.pos - 3);
                break;
            }
            if self.at_end() {
                let span = Span::new(self.src.len(), self.src.len());
                return self.err_hint(
                    "missing `---` separator after the header",
                    span,
                    "the header (`name`, `rule`, `enable`) ends with a line `---`",
                );
            }
            let start = self.pos;
            if self.eat_word("rule") {
                self.expect(b':', "`:` after `rule`")?;
                patterns.clear();
                pattern_spans.clear();
                // Where a pattern starting with `/*` stands: with a later one
                // ending in `*/`, the two were meant as a block comment.
                let mut opened: Option<usize> = None;
                loop {
                    self.pattern_ws();
                    if self.rest().starts_with("---") || self.at_word("enable") || self.at_word("rule") || self.at_end() {
                        break;
                    }
                    let ps = self.pos;
                    let pat = self.take_while(is_pattern);
                    if pat.is_empty() || !(self.at_end() || self.peek().is_ascii_whitespace()) {
                        let span = Span::new(ps, self.pos + 1);
                        return self.err("invalid rule pattern: use letters, digits, `_`, `/`, `*` and `?`", span);
                    }
                    let max = self.limits.max_pattern_bytes;
                    if pat.len() > max {
                        let span = Span::new(ps, self.pos);
                        return self.err_hint(
                            format!("rule pattern is {} bytes long, more than the limit of {max}", pat.len()),
                            span,
                            "rule paths are short: match the long part with `*`",
                        );
                    }
                    if let Some(open) = opened.filter(|_| pat.ends_with("*/")) {
                        let span = Span::new(open, self.pos);
                        return self.err_hint(
                            "`/* … */` is not a comment in a `rule :` pattern list: `/*` is the catch-all pattern",
                            span,
                            "comment with `#` or `//` here",
                        );
                    }
                    if pat.starts_with("/*") {
                        opened = opened.or(Some(ps));
                    }
                    patterns.push(pat.to_string());
                    pattern_spans.push(Span::new(ps, self.pos));
                    self.done(SyntaxKind::Pattern, ps);
                }
                self.done(SyntaxKind::RuleItem, start);
            } else if self.eat_word("enable") {
                self.expect(b':', "`:` after `enable`")?;
                self.ws();
                if self.eat_word("true") {
                    enabled = true;
                } else if self.eat_word("false") {
                    enabled = false;
                } else {
                    let span = self.here();
                    return self.err("`enable` takes `true` or `false`", span);
                }
                self.done(SyntaxKind::EnableItem, start);
            } else {
                let word = self.take_while(|c| !c.is_ascii_whitespace() && c != b':');
                let span = Span::new(start, start + word.len().max(1));
                if self.peek_after_ws() == b':' {
                    return self.err_hint(
                        format!("unknown header key `{word}`"),
                        span,
                        "the header knows `name`, `rule` and `enable`",
                    );
                }
                return self.err_hint(
                    "missing `---` separator after the header",
                    span,
                    "the header (`name`, `rule`, `enable`) ends with a line `---`",
                );
            }
        }

        let mut statics = Vec::new();
        loop {
            self.ws();
            if self.at_word("static") && self.peek_after("static".len()) == b'{' {
                let start = self.pos;
                if self.static_block(&mut statics).is_err() {
                    self.recover_block();
                    self.done(SyntaxKind::Error, start);
                }
            } else {
                break;
            }
        }

        let mut stmts = Vec::new();
        loop {
            self.ws();
            if self.at_end() {
                break;
            }
            if self.rest().starts_with("---") {
                // EXTENDED: the trailing (privacy) section is ignored.
                let start = self.pos;
                self.pos = self.b.len();
                self.rec.nodes.push((SyntaxKind::Tail, start, self.pos));
                break;
            }
            if self.at_word("static") && self.peek_after("static".len()) == b'{' {
                let span = Span::new(self.pos, self.pos + 6);
                self.diags.push(
                    Diagnostic::new("static blocks must come right after `---`", span)
                        .with_hint("move this block above the first statement"),
                );
                let start = self.pos;
                self.recover_block();
                self.done(SyntaxKind::Error, start);
                continue;
            }
            if let Some(s) = self.statement_or_skip() {
                stmts.push(s);
            }
        }
        if stmts.is_empty() && self.diags.is_empty() {
            let span = Span::new(self.src.len(), self.src.len());
            return self.err_hint(
                "at least one statement is required after `---`",
                span,
                "add a statement such as `* = take() ;`",
            );
        }
        Ok(Rule { name, name_span, patterns, pattern_spans, enabled, statics, stmts })
    }

    pub(super) fn recover_block(&mut self) {
        let mut depth = 0;
        while !self.at_end() {
            match self.peek() {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth <= 0 {
                        self.bump();
                        return;
                    }
                }
                _ => {}
            }
            self.bump();
        }
    }

    pub(super) fn static_block(&mut self, out: &mut Vec<Binding>) -> PResult<()> {
        let start = self.pos;
        self.bump_str("static");
        self.expect(b'{', "`{`")?;
        while self.block_item("static block")? {
            if let Some(s) = self.statement_or_skip() {
                out.push(s);
            }
        }
        self.done(SyntaxKind::StaticBlock, start);
        Ok(())
    }

    pub(super) fn statement(&mut self) -> PResult<Statement> {
        let start = self.pos;
        let mut targets = Vec::new();
        loop {
            self.ws();
            let ts = self.pos;
            let name = self.take_while(is_target);
            if name.is_empty() {
                let found = self.found();
                let span = self.here();
                return self.err(format!("expected a target name, found {found}"), span);
            }
            let name = name.to_string();
            let tspan = Span::new(ts, self.pos);
            let ty = self.opt_type()?;
            self.done(SyntaxKind::Target, ts);
            targets.push(Target { name, ty, span: tspan });
            self.ws();
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'=') {
                break;
            }
            let found = self.found();
            let span = self.here();
            return self.err(format!("expected `=`, `,` or `:` after the target, found {found}"), span);
        }
        let expr = self.expr(true)?;
        self.ws();
        if self.peek() != b';' {
            // The caret goes where the `;` is missing: right after the
            // statement's last token, not on whatever follows it.
            let end = self.end();
            let span = Span::new(end, end);
            let found = self.found();
            return self.err_hint(
                format!("expected `;` at the end of the statement, found {found}"),
                span,
                "every statement ends with `;`",
            );
        }
        self.bump();
        self.done(SyntaxKind::Statement, start);
        Ok(Binding { targets, expr, span: Span::new(start, self.pos) })
    }

    /// `: type_name`, if present.
    pub(super) fn opt_type(&mut self) -> PResult<Option<(String, Span)>> {
        self.ws();
        if self.peek() != b':' {
            return Ok(None);
        }
        let colon = self.pos;
        self.bump();
        self.ws();
        let ts = self.pos;
        let ty = self.type_name();
        if ty.is_empty() {
            let span = self.here();
            return self.err("expected a type name after `:`", span);
        }
        self.done(SyntaxKind::Type, colon);
        Ok(Some((ty.to_string(), Span::new(ts, self.pos))))
    }

    pub(super) fn type_name(&mut self) -> &'s str {
        let start = self.pos;
        for (i, c) in self.rest().char_indices() {
            if !(c.is_alphanumeric() || c == '_' || c == '/') {
                self.pos = start + i;
                return &self.src[start..self.pos];
            }
        }
        self.pos = self.b.len();
        &self.src[start..]
    }
}
