//! The OML parser: source text to [`ast::Rule`], with recovery.
//!
//! A hand-written recursive-descent parser over bytes. OML has no single
//! token set (names, patterns, literal bodies and list items each accept
//! different characters, spec §2.3), so the parser reads characters in the
//! class its position expects. When a statement fails to parse, the parser
//! records the error, skips to the statement's `;` and carries on, so one run
//! reports every broken statement.
//!
//! Comments: line-leading `//` (CORE), and, as spec §2.2 recommends, `//`,
//! `#` and `/* … */` anywhere whitespace may stand, except in the pattern
//! list of `rule :`, where `/` starts a pattern: `rule : /*` is the catch-all
//! pattern (§3.1), not a comment.
//!
//! Nesting is bounded ([`Limits::max_depth`]): every recursive path of the
//! parser (expressions in objects, match arms and default bodies; SQL
//! groups, `not` and calls) goes through `Parser::nest`, so no input can
//! overflow the stack, and the tree it builds is as shallow for the checker,
//! the IR and the evaluator that recurse over it.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::ast::*;
use crate::diag::{Diagnostic, Span};
use crate::ir::{Cond, Const, Helper, NowFn, PathPart, PipeFn, UrlPart};
use crate::limits::Limits;
use crate::syntax::{Recording, SyntaxKind};
use crate::time::{self, TsUnit};
use crate::value;

type PResult<T> = Result<T, ()>;

pub struct Parser<'s> {
    src: &'s str,
    b: &'s [u8],
    pos: usize,
    pub diags: Vec<Diagnostic>,
    limits: Limits,
    /// How many recursive constructs enclose the cursor.
    depth: u32,
    /// The last error was the depth limit: recovery restarts from the
    /// statement's start, since the cursor is deep inside brackets.
    too_deep: bool,
    /// Node and trivia spans for the lossless tree ([`crate::syntax`]).
    rec: Recording,
    /// Inside a lookahead: nothing is recorded.
    quiet: u32,
}

// The character classes of the name kinds (spec §2.3).

/// Letters, digits, `_` and `.`: object members, pipe arguments.
pub(crate) fn is_simple(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'.'
}
/// A model name: letters, digits, `_` and `/`.
pub(crate) fn is_model_name(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'/'
}
/// A `rule :` pattern: a model name's characters and the wildcards.
pub(crate) fn is_pattern(c: u8) -> bool {
    is_model_name(c) || c == b'*' || c == b'?'
}
/// A statement target (with wildcards for batch targets).
pub(crate) fn is_target(c: u8) -> bool {
    is_simple(c) || matches!(c, b'/' | b'[' | b']' | b'*')
}
/// A field key in `read(…)`/`take(…)`.
pub(crate) fn is_field_key(c: u8) -> bool {
    is_simple(c) || matches!(c, b'/' | b'[' | b']')
}

/// The type names of literals (§8.2).
pub(crate) const LITERAL_TYPES: &[&str] = &["chars", "digit", "float", "bool", "ip", "time", "symbol"];

/// The match functions (§8.7.4), which look like calls inside match arms.
pub(crate) const MATCH_FNS: &[&str] =
    &["starts_with", "ends_with", "contains", "iequals", "iequals_any", "is_empty", "regex_match", "gt", "lt", "eq", "in_range"];

/// Parses one rule file, with the default [`Limits`].
pub fn parse(src: &str) -> (Option<Rule>, Vec<Diagnostic>) {
    parse_with_limits(src, Limits::default())
}

/// Parses one rule file; nesting deeper than `limits.max_depth` or a `rule :`
/// pattern longer than `limits.max_pattern_bytes` is an error.
pub fn parse_with_limits(src: &str, limits: Limits) -> (Option<Rule>, Vec<Diagnostic>) {
    let mut p = Parser::new(src, limits);
    let rule = p.rule().ok();
    let mut diags = p.diags;
    for d in &mut diags {
        d.locate(src);
    }
    // A rule with recovered statement errors is still returned, so the
    // checker can report its own errors on the statements that parsed.
    (rule, diags)
}

/// Parses `src` for its lossless tree: what [`crate::syntax::syntax`] builds from.
pub(crate) fn record(src: &str) -> Recording {
    let mut p = Parser::new(src, Limits::default());
    let start = p.pos;
    if p.rule().is_err() {
        // Where the parse stopped, the rest of the file is one error node.
        p.ws();
        let at = p.pos.max(start);
        p.rec.nodes.push((SyntaxKind::Error, at, src.len()));
    }
    p.rec
}

impl<'s> Parser<'s> {
    fn new(src: &'s str, limits: Limits) -> Parser<'s> {
        Parser {
            src,
            b: src.as_bytes(),
            pos: 0,
            diags: Vec::new(),
            limits,
            depth: 0,
            too_deep: false,
            rec: Recording::default(),
            quiet: 0,
        }
    }

    // ----- the record for the lossless tree ----------------------------------

    /// Whitespace or a comment from `start` to the cursor.
    fn trivia(&mut self, kind: SyntaxKind, start: usize) {
        if self.quiet == 0 && self.pos > start {
            self.rec.trivia.push((kind, start, self.pos));
        }
    }

    /// A token boundary at the cursor: the parser skips whitespace between
    /// any two tokens, so where it found none, one token still ends here.
    fn cut(&mut self) {
        if self.quiet == 0 && self.rec.cuts.last() != Some(&self.pos) {
            self.rec.cuts.push(self.pos);
        }
    }

    /// The end of what was read: the cursor, less the trivia skipped just
    /// before it (a node ends with its last significant byte).
    fn end(&self) -> usize {
        let mut e = self.pos;
        for t in self.rec.trivia.iter().rev().take(16) {
            if t.2 == e && t.1 < e {
                e = t.1;
            } else if t.2 < e {
                break;
            }
        }
        e
    }

    /// A `kind` construct read from `start` to [`Self::end`].
    fn done(&mut self, kind: SyntaxKind, start: usize) {
        if self.quiet == 0 {
            let end = self.end().max(start);
            self.rec.nodes.push((kind, start, end));
        }
    }

    // ----- low level -------------------------------------------------------

    fn peek(&self) -> u8 {
        self.b.get(self.pos).copied().unwrap_or(0)
    }
    fn peek_at(&self, n: usize) -> u8 {
        self.b.get(self.pos + n).copied().unwrap_or(0)
    }
    fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }
    fn rest(&self) -> &'s str {
        &self.src[self.pos..]
    }

    /// Skips whitespace and comments.
    fn ws(&mut self) {
        self.cut();
        loop {
            self.pattern_ws();
            if self.peek() == b'/' && self.peek_at(1) == b'*' {
                let start = self.pos;
                match self.rest()[2..].find("*/") {
                    Some(i) => self.pos += i + 4,
                    None => self.pos = self.b.len(),
                }
                self.trivia(SyntaxKind::BlockComment, start);
            } else {
                break;
            }
        }
        self.cut();
    }

    /// Skips whitespace, `#` and `//` comments, but not `/* … */`: in the
    /// pattern list of `rule :` a `/` starts a pattern (`/*`, `/*/access`).
    fn pattern_ws(&mut self) {
        self.cut();
        loop {
            let c = self.peek();
            let start = self.pos;
            if c.is_ascii_whitespace() {
                while self.peek().is_ascii_whitespace() {
                    self.pos += 1;
                }
                self.trivia(SyntaxKind::Whitespace, start);
            } else if c == b'#' || (c == b'/' && self.peek_at(1) == b'/') {
                while !self.at_end() && self.peek() != b'\n' {
                    self.pos += 1;
                }
                self.trivia(SyntaxKind::LineComment, start);
            } else {
                break;
            }
        }
        self.cut();
    }

    /// Enters one level of nesting, or reports that the limit is passed
    /// here. Every recursive path of the parser calls it (paired with
    /// `self.depth -= 1` on the way out).
    fn nest(&mut self) -> PResult<()> {
        if self.depth >= self.limits.max_depth {
            self.too_deep = true;
            self.ws();
            let span = self.here();
            let max = self.limits.max_depth;
            return self.err_hint(
                format!("nesting deeper than {max} levels (the parser's depth limit)"),
                span,
                "flatten the rule: compute inner parts in earlier statements, into temporary `__name` fields",
            );
        }
        self.depth += 1;
        Ok(())
    }

    /// A statement, or `None` after reporting its error and skipping it.
    fn statement_or_skip(&mut self) -> Option<Statement> {
        let start = self.pos;
        self.depth = 0;
        match self.statement() {
            Ok(s) => Some(s),
            Err(()) => {
                if core::mem::take(&mut self.too_deep) {
                    // The cursor is inside the nesting: skip the whole
                    // statement from its start, brackets balanced.
                    self.pos = start;
                }
                // Braces the statement opened before the error: an error in
                // a match arm skips the whole match, not just the arm.
                let open = open_braces(&self.src[start..self.pos.max(start)]);
                self.recover_at(open);
                self.done(SyntaxKind::Error, start);
                None
            }
        }
    }

    fn err<T>(&mut self, msg: impl Into<String>, span: Span) -> PResult<T> {
        self.diags.push(Diagnostic::new(msg, span));
        Err(())
    }

    fn err_hint<T>(&mut self, msg: impl Into<String>, span: Span, hint: &str) -> PResult<T> {
        self.diags.push(Diagnostic::new(msg, span).with_hint(hint));
        Err(())
    }

    fn here(&self) -> Span {
        let end = self.pos + self.src[self.pos..].chars().next().map(|c| c.len_utf8()).unwrap_or(0);
        Span::new(self.pos, end)
    }

    /// What stands at the cursor, for messages.
    fn found(&self) -> String {
        if self.at_end() {
            return "end of file".to_string();
        }
        let word: String = self.rest().chars().take_while(|c| !c.is_whitespace()).take(12).collect();
        format!("`{word}`")
    }

    fn expect(&mut self, c: u8, what: &str) -> PResult<()> {
        self.ws();
        if self.peek() == c {
            self.pos += 1;
            Ok(())
        } else {
            let found = self.found();
            let span = self.here();
            self.err(format!("expected {what}, found {found}"), span)
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.peek() == c {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// A keyword at the cursor, followed by a non-name character.
    fn at_word(&self, w: &str) -> bool {
        self.rest().starts_with(w) && !is_target(self.peek_at(w.len()))
    }

    fn at_word_ci(&self, w: &str) -> bool {
        let r = self.rest().as_bytes();
        r.len() >= w.len() && r[..w.len()].eq_ignore_ascii_case(w.as_bytes()) && !is_target(self.peek_at(w.len()))
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'s str {
        let start = self.pos;
        while !self.at_end() && f(self.peek()) {
            self.pos += 1;
        }
        &self.src[start..self.pos]
    }

    /// The next char after whitespace, without consuming anything.
    fn peek_after_ws(&mut self) -> u8 {
        let save = self.pos;
        self.quiet += 1;
        self.ws();
        self.quiet -= 1;
        let c = self.peek();
        self.pos = save;
        c
    }

    /// Skips to just after the `;` that ends the current statement, from
    /// inside `open` blocks of it (`{` of a match, an object, a default
    /// body), whose own `;` do not end it.
    fn recover_at(&mut self, open: i32) {
        let mut depth = open;
        while !self.at_end() {
            match self.peek() {
                b'(' | b'{' | b'[' => depth += 1,
                b')' | b'}' | b']' => depth -= 1,
                b'\'' | b'"' => {
                    let q = self.peek();
                    self.pos += 1;
                    while !self.at_end() && self.peek() != q && self.peek() != b'\n' {
                        let step = if self.peek() == b'\\' { 2 } else { 1 };
                        self.pos = (self.pos + step).min(self.b.len());
                    }
                }
                b';' if depth <= 0 => {
                    self.pos += 1;
                    return;
                }
                b'\n' if depth < 0 => depth = 0,
                _ => {}
            }
            // An unclosed quote may have run to the end: never step past it.
            self.pos = (self.pos + 1).min(self.b.len());
        }
    }

    // ----- file layout -----------------------------------------------------

    fn rule(&mut self) -> PResult<Rule> {
        self.ws();
        if !self.at_word("name") {
            let span = self.here();
            return self.err_hint("a rule must start with its name", span, "write `name : my/model` on the first line");
        }
        let item = self.pos;
        self.pos += 4;
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
            if self.rest().starts_with("---") {
                self.pos += 3;
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
            if self.at_word("rule") {
                self.pos += 4;
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
            } else if self.at_word("enable") {
                self.pos += 6;
                self.expect(b':', "`:` after `enable`")?;
                self.ws();
                if self.at_word("true") {
                    self.pos += 4;
                    enabled = true;
                } else if self.at_word("false") {
                    self.pos += 5;
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
            if self.at_word("static") && self.peek_after_static() == b'{' {
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
            if self.at_word("static") && self.peek_after_static() == b'{' {
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

    fn peek_after_static(&mut self) -> u8 {
        let save = self.pos;
        self.pos += 6;
        self.quiet += 1;
        self.ws();
        self.quiet -= 1;
        let c = self.peek();
        self.pos = save;
        c
    }

    fn recover_block(&mut self) {
        let mut depth = 0;
        while !self.at_end() {
            match self.peek() {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth <= 0 {
                        self.pos += 1;
                        return;
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
    }

    fn static_block(&mut self, out: &mut Vec<Binding>) -> PResult<()> {
        let start = self.pos;
        self.pos += 6;
        self.expect(b'{', "`{`")?;
        loop {
            self.ws();
            if self.eat(b'}') {
                self.done(SyntaxKind::StaticBlock, start);
                return Ok(());
            }
            if self.at_end() {
                let span = self.here();
                return self.err("unclosed static block: expected `}`", span);
            }
            if let Some(s) = self.statement_or_skip() {
                out.push(s);
            }
        }
    }

    fn statement(&mut self) -> PResult<Statement> {
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
        self.pos += 1;
        self.done(SyntaxKind::Statement, start);
        Ok(Binding { targets, expr, span: Span::new(start, self.pos) })
    }

    /// `: type_name`, if present.
    fn opt_type(&mut self) -> PResult<Option<(String, Span)>> {
        self.ws();
        if self.peek() != b':' {
            return Ok(None);
        }
        let colon = self.pos;
        self.pos += 1;
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

    fn type_name(&mut self) -> &'s str {
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

    // ----- expressions -----------------------------------------------------

    /// Any expression. `top` allows SQL lookups.
    fn expr(&mut self, top: bool) -> PResult<Expr> {
        self.nest()?;
        let e = self.expr_at(top);
        self.depth -= 1;
        e
    }

    fn expr_at(&mut self, top: bool) -> PResult<Expr> {
        self.ws();
        let start = self.pos;
        if self.at_word("match") {
            return self.match_expr();
        }
        if self.at_word("object") && self.peek_after(6) == b'{' {
            return self.object();
        }
        if self.at_word("collect") {
            self.pos += 7;
            let src = self.var_access()?;
            self.done(SyntaxKind::Collect, start);
            return Ok(Expr::Collect(Box::new(src), Span::new(start, self.pos)));
        }
        if self.at_word("fmt") && self.peek_after(3) == b'(' {
            return self.fmt();
        }
        if self.at_word("pipe") && self.peek_after(4) != b'(' {
            self.pos += 4;
            let src = self.var_access()?;
            return self.pipe_tail(src, start);
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

    fn peek_after(&mut self, n: usize) -> u8 {
        let save = self.pos;
        self.pos += n;
        self.quiet += 1;
        self.ws();
        self.quiet -= 1;
        let c = self.peek();
        self.pos = save;
        c
    }

    fn builtin(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.pos += 5;
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
    fn literal(&mut self) -> PResult<(Const, Span)> {
        self.ws();
        let start = self.pos;
        let ty = self.type_name().to_string();
        // Spec §2.1: whitespace may separate the type name from `(`.
        self.ws();
        if self.peek() != b'(' {
            let span = Span::new(start, self.pos);
            return self.err(format!("expected a literal like `{ty}(…)`"), span);
        }
        self.pos += 1;
        let body_start = self.pos;
        self.pos = closing_paren(self.src, self.pos, false).unwrap_or(self.src.len());
        if self.at_end() {
            let span = Span::new(start, body_start);
            return self.err("unclosed literal: missing `)`", span);
        }
        let raw = &self.src[body_start..self.pos];
        self.pos += 1;
        let span = Span::new(start, self.pos);
        let body = literal_body(raw);
        match literal_value(&ty, &body) {
            Ok(c) => {
                self.done(SyntaxKind::Literal, start);
                Ok((c, span))
            }
            Err(msg) => {
                self.diags.push(Diagnostic::new(msg, span));
                Err(())
            }
        }
    }

    fn at_name(&mut self) -> PResult<Expr> {
        self.ws();
        let start = self.pos;
        self.pos += 1;
        let name = self.take_while(is_simple);
        if name.is_empty() {
            let span = Span::new(start, self.pos + 1);
            return self.err("expected a field name after `@`", span);
        }
        self.done(SyntaxKind::At, start);
        Ok(Expr::At(name.to_string(), Span::new(start, self.pos)))
    }

    /// `read(…)`, `take(…)` or `@name`, without a default body.
    fn var_access(&mut self) -> PResult<Expr> {
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

    fn accessor(&mut self, allow_default: bool) -> PResult<Access> {
        self.ws();
        let start = self.pos;
        let take = self.rest().starts_with("take");
        self.pos += 4;
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
                self.pos += 1;
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
            self.eat(b',');
        }
        if allow_default && self.peek_after_ws() == b'{' {
            self.ws();
            let body = self.pos;
            self.pos += 1;
            self.ws();
            if self.peek() != b'_' || is_target(self.peek_at(1)) {
                let span = self.here();
                return self.err_hint("expected `_ :` in the default body", span, "write `{ _ : chars(value) }`");
            }
            self.pos += 1;
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

    fn set_key(&mut self, acc: &mut Access, key: String, span: Span) -> PResult<()> {
        if acc.key.is_some() {
            return self.err_hint("read/take takes one field name", span, "use `option:[a, b]` to try several names");
        }
        acc.key = Some(key);
        Ok(())
    }

    /// `[item, item]`: items are any text but `,` and `]`, brackets balanced.
    fn list(&mut self) -> PResult<Vec<String>> {
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

    fn pipe_tail(&mut self, source: Expr, start: usize) -> PResult<Expr> {
        let mut fns = Vec::new();
        while self.eat(b'|') {
            fns.push(self.pipe_fn()?);
        }
        if fns.is_empty() {
            let span = self.here();
            return self.err("expected `|` and a pipe function", span);
        }
        self.done(SyntaxKind::Pipe, start);
        Ok(Expr::Pipe { source: Box::new(source), fns, span: Span::new(start, self.pos) })
    }

    /// Reads `name` and, if present, the raw text of `(args)`.
    fn call_head(&mut self) -> (String, Option<(String, Span)>, Span) {
        self.ws();
        let start = self.pos;
        let name = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':').to_string();
        let mut args = None;
        if self.peek_after_ws() == b'(' {
            self.ws();
            self.pos += 1;
            let a_start = self.pos;
            self.pos = closing_paren(self.src, self.pos, true).unwrap_or(self.src.len());
            let text = self.src[a_start..self.pos.min(self.src.len())].to_string();
            let span = Span::new(a_start, self.pos);
            if !self.at_end() {
                self.pos += 1;
            }
            args = Some((text, span));
        }
        (name, args, Span::new(start, self.pos))
    }

    fn pipe_fn(&mut self) -> PResult<PipeFn> {
        let (name, args, span) = self.call_head();
        match pipe_fn(&name, args.as_ref().map(|(a, _)| a.as_str())) {
            Ok(f) => {
                self.done(SyntaxKind::PipeFn, span.start as usize);
                Ok(f)
            }
            Err((msg, hint)) => {
                let mut d = Diagnostic::new(msg, span);
                if let Some(h) = hint {
                    d = d.with_hint(h);
                }
                self.diags.push(d);
                Err(())
            }
        }
    }

    fn object(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.pos += 6;
        self.expect(b'{', "`{`")?;
        let mut members = Vec::new();
        loop {
            self.ws();
            if self.eat(b'}') {
                break;
            }
            if self.at_end() {
                let span = self.here();
                return self.err("unclosed object: expected `}`", span);
            }
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

    fn fmt(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.pos += 3;
        self.expect(b'(', "`(`")?;
        self.ws();
        if self.peek() != b'"' {
            let span = self.here();
            return self.err("`fmt` starts with a double-quoted format string", span);
        }
        self.pos += 1;
        let fs = self.pos;
        while !self.at_end() && self.peek() != b'"' {
            self.pos += 1;
        }
        if self.at_end() {
            let span = Span::new(fs - 1, fs);
            return self.err("unclosed format string", span);
        }
        let format = self.src[fs..self.pos].to_string();
        self.pos += 1;
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

    fn match_expr(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.pos += 5;
        self.ws();
        let mut sources = Vec::new();
        let tuple = self.peek() == b'(';
        if tuple {
            self.pos += 1;
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
        loop {
            self.ws();
            if self.eat(b'}') {
                break;
            }
            if self.at_end() {
                let span = self.here();
                return self.err("unclosed match: expected `}`", span);
            }
            let arm_start = self.pos;
            if default.is_some() {
                let span = self.here();
                return self.err_hint("the default arm `_ => …` must be the last arm", span, "move `_ => …` to the end");
            }
            if self.peek() == b'_' && !is_target(self.peek_at(1)) && self.peek() != b'(' {
                self.pos += 1;
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
                self.pos += 1;
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

    fn arrow(&mut self) -> PResult<()> {
        self.ws();
        if self.rest().starts_with("=>") {
            self.pos += 2;
            Ok(())
        } else {
            let found = self.found();
            let span = self.here();
            self.err(format!("expected `=>`, found {found}"), span)
        }
    }

    fn arm_sep(&mut self) {
        self.eat(b',');
        self.eat(b';');
    }

    /// `atom { "|" atom }`
    fn cond(&mut self) -> PResult<Vec<CondAtom>> {
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

    fn cond_atom(&mut self) -> PResult<CondAtom> {
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
            self.pos += 1;
            return Ok(CondAtom::Ne(self.operand()?));
        }
        let save = self.pos;
        let name = self.type_name().to_string();
        let next = self.peek_after_ws();
        if name == "in" && next == b'(' {
            self.ws();
            self.pos += 1;
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
    fn operand(&mut self) -> PResult<Operand> {
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

    // ----- SQL ---------------------------------------------------------------

    fn sql(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.pos += 6;
        let mut columns = Vec::new();
        loop {
            self.ws();
            let cs = self.pos;
            if self.peek() == b'*' {
                self.pos += 1;
                columns.push("*".to_string());
            } else {
                let c = self.take_while(is_simple);
                if c.is_empty() || self.peek() == b'(' {
                    let span = Span::new(cs, self.pos.max(cs + 1));
                    return self.err_hint(
                        "strict SQL: columns must be plain identifiers",
                        span,
                        "select `*` or column names; expressions, aliases and functions are not allowed",
                    );
                }
                columns.push(c.to_string());
            }
            self.ws();
            if self.eat(b',') {
                continue;
            }
            if self.at_word_ci("from") {
                self.pos += 4;
                break;
            }
            let span = self.here();
            return self.err_hint("strict SQL: columns must be plain identifiers", span, "expected `,` or `from` after a column");
        }
        if columns.len() > 1 && columns.iter().any(|c| c == "*") {
            let span = Span::new(start, self.pos);
            return self.err("strict SQL: `*` cannot be mixed with column names", span);
        }
        self.ws();
        let ts = self.pos;
        let table = self.take_while(is_simple).to_string();
        let c = self.peek();
        if table.is_empty() || !(c.is_ascii_whitespace() || c == 0) {
            let end = self.pos + self.rest().find(|c: char| c.is_whitespace()).unwrap_or(self.rest().len());
            let span = Span::new(ts, end);
            return self.err_hint(
                "strict SQL: invalid table identifier",
                span,
                "a table name uses letters, digits, `_` and `.`; one table, no joins or aliases",
            );
        }
        self.ws();
        if !self.at_word_ci("where") {
            let span = self.here();
            return self.err_hint("SQL lookup needs `where`", span, "write `select col from table where key = read(field)`");
        }
        self.pos += 5;
        let cond = self.sql_or()?;
        self.done(SyntaxKind::Sql, start);
        Ok(Expr::Sql(Box::new(Sql { columns, table, cond, span: Span::new(start, self.pos) })))
    }

    fn sql_or(&mut self) -> PResult<SqlCond> {
        self.ws();
        let start = self.pos;
        let mut parts = vec_of(self.sql_and()?);
        loop {
            self.ws();
            if self.at_word_ci("or") {
                self.pos += 2;
                parts.push(self.sql_and()?);
            } else {
                break;
            }
        }
        if parts.len() > 1 {
            self.done(SyntaxKind::SqlOr, start);
        }
        Ok(if parts.len() == 1 { parts.pop().unwrap_or(SqlCond::Or(Vec::new())) } else { SqlCond::Or(parts) })
    }

    fn sql_and(&mut self) -> PResult<SqlCond> {
        self.ws();
        let start = self.pos;
        let mut parts = vec_of(self.sql_unary()?);
        loop {
            self.ws();
            if self.at_word_ci("and") {
                self.pos += 3;
                parts.push(self.sql_unary()?);
            } else {
                break;
            }
        }
        if parts.len() > 1 {
            self.done(SyntaxKind::SqlAnd, start);
        }
        Ok(if parts.len() == 1 { parts.pop().unwrap_or(SqlCond::And(Vec::new())) } else { SqlCond::And(parts) })
    }

    fn sql_unary(&mut self) -> PResult<SqlCond> {
        self.nest()?;
        let c = self.sql_unary_at();
        self.depth -= 1;
        c
    }

    fn sql_unary_at(&mut self) -> PResult<SqlCond> {
        self.ws();
        if self.at_word_ci("not") {
            let start = self.pos;
            self.pos += 3;
            let inner = self.sql_unary()?;
            self.done(SyntaxKind::SqlNot, start);
            return Ok(SqlCond::Not(Box::new(inner)));
        }
        if self.peek() == b'(' {
            // A group, unless it is the start of a comparison (no such form).
            let start = self.pos;
            self.pos += 1;
            let inner = self.sql_or()?;
            self.expect(b')', "`)` closing the group")?;
            self.done(SyntaxKind::SqlGroup, start);
            return Ok(SqlCond::Group(Box::new(inner)));
        }
        let start = self.pos;
        let left = self.sql_operand()?;
        self.ws();
        let op = ["!=", "<>", "<=", ">=", "=", "<", ">"].into_iter().find(|op| self.rest().starts_with(op));
        let Some(op) = op else {
            let found = self.found();
            let span = self.here();
            return self.err(format!("expected a comparison operator (`=`, `!=`, `<`, …), found {found}"), span);
        };
        self.pos += op.len();
        let op = if op == "<>" { "!=" } else { op };
        let right = self.sql_operand()?;
        self.done(SyntaxKind::SqlCmp, start);
        Ok(SqlCond::Cmp { left, op, right, span: Span::new(start, self.pos) })
    }

    fn sql_operand(&mut self) -> PResult<SqlOperand> {
        self.nest()?;
        let o = self.sql_operand_at();
        self.depth -= 1;
        o
    }

    fn sql_operand_at(&mut self) -> PResult<SqlOperand> {
        self.ws();
        let start = self.pos;
        let c = self.peek();
        if c == b'\'' || c == b'"' {
            self.pos += 1;
            let s = self.pos;
            while !self.at_end() && self.peek() != c {
                self.pos += 1;
            }
            if self.at_end() {
                let span = Span::new(start, self.pos);
                return self.err("unclosed SQL string", span);
            }
            let text = self.src[s..self.pos].to_string();
            self.pos += 1;
            self.done(SyntaxKind::SqlLiteral, start);
            return Ok(SqlOperand::Literal(Const::Chars(text)));
        }
        if c.is_ascii_digit() || ((c == b'-' || c == b'+') && self.peek_at(1).is_ascii_digit()) {
            let s = self.pos;
            self.pos += 1;
            self.take_while(|c| c.is_ascii_digit() || c == b'.');
            let text = &self.src[s..self.pos];
            let span = Span::new(s, self.pos);
            if let Some(d) = value::parse_digit(text) {
                self.done(SyntaxKind::SqlLiteral, start);
                return Ok(SqlOperand::Literal(Const::Digit(d)));
            }
            return match value::parse_float(text) {
                Some(f) => {
                    self.done(SyntaxKind::SqlLiteral, start);
                    Ok(SqlOperand::Literal(Const::Float(f)))
                }
                None => self.err("invalid number", span),
            };
        }
        if c == b'@' {
            return Ok(SqlOperand::Value(self.at_name()?));
        }
        if (self.at_word("read") || self.at_word("take")) && self.peek_after(4) == b'(' {
            return Ok(SqlOperand::Value(Expr::Access(self.accessor(true)?)));
        }
        if self.rest().starts_with("Now::") {
            return Ok(SqlOperand::Value(self.builtin()?));
        }
        let name = self.take_while(is_simple).to_string();
        if name.is_empty() {
            let found = self.found();
            let span = self.here();
            return self.err(format!("expected a column, a value or a function, found {found}"), span);
        }
        if self.peek_after_ws() == b'(' {
            if let Some(c) = self.sql_typed_literal(start, &name)? {
                return Ok(SqlOperand::Literal(c));
            }
            self.ws();
            self.pos += 1;
            let mut args = Vec::new();
            if !self.eat(b')') {
                loop {
                    args.push(self.sql_operand()?);
                    if self.eat(b')') {
                        break;
                    }
                    self.expect(b',', "`,` or `)`")?;
                }
            }
            let helper = Helper::by_name(&name);
            self.done(SyntaxKind::SqlCall, start);
            return Ok(SqlOperand::Call { name, helper, args, span: Span::new(start, self.pos) });
        }
        self.done(SyntaxKind::SqlColumn, start);
        Ok(SqlOperand::Column(name, Span::new(start, self.pos)))
    }

    /// A typed literal (`digit(1)`, `chars (a)`) where a SQL value may stand:
    /// it is bound as a parameter like any literal. `time(…)` whose body is
    /// not a time literal stays a SQL function call (SQLite has `time()`).
    fn sql_typed_literal(&mut self, start: usize, name: &str) -> PResult<Option<Const>> {
        if !LITERAL_TYPES.contains(&name) {
            return Ok(None);
        }
        let after_name = self.pos;
        let diags = self.diags.len();
        self.pos = start;
        match self.literal() {
            Ok((c, _)) => Ok(Some(c)),
            Err(()) if name == "time" => {
                self.diags.truncate(diags);
                self.pos = after_name;
                Ok(None)
            }
            Err(()) => Err(()),
        }
    }
}

/// How many `{` of `text` are still open at its end (quoted text skipped).
fn open_braces(text: &str) -> i32 {
    let (mut depth, mut quote) = (0i32, None);
    for c in text.bytes() {
        match quote {
            Some(q) if c == q || c == b'\n' => quote = None,
            Some(_) => {}
            None => match c {
                b'\'' | b'"' => quote = Some(c),
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => {}
            },
        }
    }
    depth.max(0)
}

/// Where the `]` that closes a list opened just before `from` stands:
/// brackets inside items nest.
fn list_end(src: &str, from: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in src.bytes().enumerate().skip(from) {
        match c {
            b'[' => depth += 1,
            b']' if depth == 0 => return Some(i),
            b']' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The items of a list's inside (between `[` and `]`): any text between
/// commas, trimmed, empty ones left out. The parser and the printer both
/// read lists with it.
pub(crate) fn list_items(inner: &str) -> Vec<&str> {
    inner.split(',').map(str::trim).filter(|i| !i.is_empty()).collect()
}

fn vec_of<T>(t: T) -> Vec<T> {
    let mut v = Vec::with_capacity(2);
    v.push(t);
    v
}

/// Trims a literal body and removes one pair of quotes, decoding escapes (§2.4).
fn literal_body(raw: &str) -> String {
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

/// The value of `ty(body)`, or why it is not one.
pub fn literal_value(ty: &str, body: &str) -> Result<Const, String> {
    Ok(match ty {
        "chars" | "symbol" => Const::Chars(body.to_string()),
        "digit" => Const::Digit(value::parse_digit(body).ok_or_else(|| format!("digit literal does not parse: `{body}`"))?),
        "float" => Const::Float(value::parse_float(body).ok_or_else(|| format!("float literal does not parse: `{body}`"))?),
        "bool" => match body {
            "true" => Const::Bool(true),
            "false" => Const::Bool(false),
            _ => return Err(format!("bool literal must be `true` or `false`, not `{body}`")),
        },
        "ip" => match body.parse::<core::net::IpAddr>() {
            Ok(core::net::IpAddr::V4(v4)) => Const::Ipv4(u32::from(v4)),
            Ok(core::net::IpAddr::V6(v6)) => Const::Ipv6(u128::from(v6)),
            Err(_) => return Err(format!("ip literal does not parse: `{body}`")),
        },
        "time" => Const::Time(time::parse_time(body).ok_or_else(|| format!("time literal does not parse: `{body}`"))?),
        other => {
            let mut known = LITERAL_TYPES.to_vec();
            known.extend_from_slice(&["read", "take", "fmt"]);
            return Err(match nearest(other, &known) {
                Some(near) => format!("`{other}(…)` is neither a literal nor a function: did you mean `{near}(…)`?"),
                None => format!("`{other}(…)` is not a literal: literals are chars, digit, float, bool, ip, time and symbol"),
            });
        }
    })
}

/// A pipe function's error: the message and, when known, how to fix it.
type FnError = (String, Option<Cow<'static, str>>);

fn plain(msg: String) -> FnError {
    (msg, None)
}

fn pipe_fn(name: &str, args: Option<&str>) -> Result<PipeFn, FnError> {
    let arg = args.map(str::trim);
    let no_args = |f: PipeFn| -> Result<PipeFn, FnError> {
        match arg {
            None => Ok(f),
            Some(_) => Err(plain(format!("`{name}` takes no arguments; write it without parentheses"))),
        }
    };
    Ok(match name {
        "base64_encode" => no_args(PipeFn::Base64Encode)?,
        "base64_decode" => match arg {
            None | Some("") | Some("Utf8") => PipeFn::Base64Decode,
            Some(enc) => match crate::charset::Charset::by_name(enc) {
                Some(c) => PipeFn::Base64DecodeAs(c),
                None => {
                    return Err(plain(format!(
                        "unknown base64_decode encoding `{enc}`: the encodings are {}",
                        crate::charset::Charset::NAMES
                    )));
                }
            },
        },
        "html_escape" => no_args(PipeFn::HtmlEscape)?,
        "html_unescape" => no_args(PipeFn::HtmlUnescape)?,
        "json_escape" => no_args(PipeFn::JsonEscape)?,
        "json_unescape" => no_args(PipeFn::JsonUnescape)?,
        "str_escape" => no_args(PipeFn::StrEscape)?,
        "Time::to_ts" => no_args(PipeFn::ToTs { zone_hours: 8, unit: TsUnit::Seconds })?,
        "Time::to_ts_ms" => no_args(PipeFn::ToTs { zone_hours: 8, unit: TsUnit::Millis })?,
        "Time::to_ts_us" => no_args(PipeFn::ToTs { zone_hours: 8, unit: TsUnit::Micros })?,
        "Time::to_ts_zone" => {
            let a = arg.unwrap_or("");
            let mut parts = a.split(',').map(str::trim);
            let (z, u) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let digits = z.strip_prefix('-').unwrap_or(z);
            if parts.next().is_some() || digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return Err((
                    format!("bad arguments for Time::to_ts_zone: `{a}`"),
                    Some(Cow::Borrowed("write Time::to_ts_zone(8, s): an hour offset (no `+`) and s, ms or us")),
                ));
            }
            let unit = match u {
                "s" | "ss" => TsUnit::Seconds,
                "ms" => TsUnit::Millis,
                "us" => TsUnit::Micros,
                _ => return Err((format!("unknown time unit `{u}`"), Some(Cow::Borrowed("units are s, ms and us")))),
            };
            match z.parse::<i64>() {
                Ok(h) if h.abs() < 24 => PipeFn::ToTs { zone_hours: h, unit },
                _ => PipeFn::ToTsNoop,
            }
        }
        "nth" => {
            let a = arg.unwrap_or("");
            if a.is_empty() || !a.bytes().all(|c| c.is_ascii_digit()) {
                return Err((format!("bad index for nth: `{a}`"), Some(Cow::Borrowed("nth takes a non-negative index: nth(0)"))));
            }
            PipeFn::Nth(a.parse().unwrap_or(u64::MAX))
        }
        "get" => {
            let a = arg.unwrap_or("");
            if a.is_empty() || !a.chars().all(|c| c.is_alphanumeric() || "_/-.".contains(c)) {
                return Err(plain(format!("bad path for get: `{a}`")));
            }
            PipeFn::Get(a.split('/').filter(|s| !s.is_empty()).map(String::from).collect())
        }
        "path" => PipeFn::Path(match arg {
            None | Some("") => None,
            Some("name") => Some(PathPart::Name),
            Some("path") => Some(PathPart::Path),
            Some(o) => return Err((format!("unknown path part `{o}`"), Some(Cow::Borrowed("path(name) or path(path)")))),
        }),
        "url" => PipeFn::Url(match arg {
            None | Some("") => None,
            Some("domain") => Some(UrlPart::Domain),
            Some("host") => Some(UrlPart::Host),
            Some("uri") => Some(UrlPart::Uri),
            Some("path") => Some(UrlPart::Path),
            Some("params") => Some(UrlPart::Params),
            Some(o) => {
                return Err((
                    format!("unknown url part `{o}`"),
                    Some(Cow::Borrowed("url parts are domain, host, uri, path and params")),
                ));
            }
        }),
        "ip4_to_int" => no_args(PipeFn::Ip4ToInt)?,
        "ip_to_biguint" => no_args(PipeFn::IpToBigUint)?,
        "to_json" => no_args(PipeFn::ToJson)?,
        "to_str" => no_args(PipeFn::ToStr)?,
        "skip_empty" => no_args(PipeFn::SkipEmpty)?,
        "starts_with" => PipeFn::StartsWith(quoted(arg.unwrap_or("")).ok_or_else(|| {
            (String::from("starts_with needs a quoted string"), Some(Cow::Borrowed("write starts_with('prefix')")))
        })?),
        "map_to" => {
            let a = arg.unwrap_or("");
            let c = if let Some(s) = quoted(a) {
                Const::Chars(s)
            } else if a == "true" || a == "false" {
                Const::Bool(a == "true")
            } else if let Some(d) = value::parse_digit(a) {
                Const::Digit(d)
            } else if let Some(f) = value::parse_float(a).filter(|_| a.bytes().any(|c| c.is_ascii_digit())) {
                Const::Float(f)
            } else {
                return Err((
                    format!("map_to needs a quoted string, number or boolean, not `{a}`"),
                    Some(Cow::Borrowed("write map_to('text'), map_to(1), map_to(2.5) or map_to(true)")),
                ));
            };
            PipeFn::MapTo(c)
        }
        "extract_main_word" | "extract_subject_object" => {
            return Err((
                format!("`{name}` is not supported: an EXTENDED NLP pipe that the spec leaves unspecified"),
                Some(Cow::Borrowed(
                    "omlet has no NLP pipes; extract the words in the pipeline before the rule, or with match and regex_match",
                )),
            ));
        }
        "str_unescape" | "sxf_get" | "digit_range" | "regex_match" | "ends_with" => {
            return Err(plain(format!("`{name}` is not a pipe function")));
        }
        _ => {
            let catalogue = Some(Cow::Owned(pipe_catalogue()));
            return Err(match nearest(name, PIPE_FNS) {
                Some(near) => (format!("unknown pipe function `{name}`: did you mean `{near}`?"), catalogue),
                None => (format!("unknown pipe function `{name}`"), catalogue),
            });
        }
    })
}

/// The pipe functions (spec §9), for suggestions.
const PIPE_FNS: &[&str] = &[
    "base64_encode",
    "base64_decode",
    "html_escape",
    "html_unescape",
    "json_escape",
    "json_unescape",
    "str_escape",
    "Time::to_ts",
    "Time::to_ts_ms",
    "Time::to_ts_us",
    "Time::to_ts_zone",
    "nth",
    "get",
    "path",
    "url",
    "ip4_to_int",
    "ip_to_biguint",
    "to_json",
    "to_str",
    "skip_empty",
    "starts_with",
    "map_to",
];

/// The hint of an unknown pipe function: every name of [`PIPE_FNS`].
fn pipe_catalogue() -> String {
    let (last, rest) = PIPE_FNS.split_last().unwrap_or((&"", &[]));
    format!("the pipe functions are {} and {last} (docs/language.md §7)", rest.join(", "))
}
/// The known name closest to `name`, if it is close enough to be a typo:
/// at most one edit for short names, two for longer ones, or a prefix.
pub fn nearest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let limit = if name.chars().count() <= 4 { 1 } else { 2 };
    known
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|&(d, k)| d <= limit || (name.len() >= 3 && k.starts_with(name)))
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over chars (names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb { prev } else { 1 + prev.min(cur).min(row[j]) };
            prev = cur;
        }
    }
    row[b.len()]
}

/// The verbatim content of a quoted argument (§2.5), or `None`.
fn quoted(a: &str) -> Option<String> {
    let a = a.trim();
    let b = a.as_bytes();
    if b.len() >= 2 && (b[0] == b'\'' || b[0] == b'"') && b[b.len() - 1] == b[0] {
        Some(a[1..a.len() - 1].to_string())
    } else {
        None
    }
}

pub(crate) fn split_args(args: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut esc = false;
    for c in args.chars() {
        if let Some(q) = quote {
            cur.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == q {
                quote = None;
            }
        } else if c == '\'' || c == '"' {
            quote = Some(c);
            cur.push(c);
        } else if c == ',' {
            out.push(core::mem::take(&mut cur).trim().to_string());
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() || !out.is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// A match function's condition (§8.7.4).
fn match_fn(name: &str, args: &str) -> Result<Cond, String> {
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
            crate::ir::RegexCond::too_large(&pattern)?;
            Cond::Regex(crate::ir::RegexCond::new(pattern))
        }
        _ => return Err(format!("unknown match function `{name}`")),
    })
}

/// Where the `)` closing a parenthesis opened just before `from` stands:
/// nested parentheses are counted and, with `quotes`, `'…'` and `"…"` (with
/// backslash escapes) are skipped. `None` when it never closes. The parser
/// and `omlet fmt` read literal bodies and argument lists with it.
pub(crate) fn closing_paren(src: &str, from: usize, quotes: bool) -> Option<usize> {
    let b = src.as_bytes();
    let (mut depth, mut quote, mut i) = (1u32, 0u8, from);
    while i < b.len() {
        let c = b[i];
        if quote != 0 {
            if c == b'\\' {
                i += 1;
            } else if c == quote {
                quote = 0;
            }
        } else if quotes && (c == b'\'' || c == b'"') {
            quote = c;
        } else if c == b'(' {
            depth += 1;
        } else if c == b')' {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_header_and_statements_parse() {
        let (rule, diags) =
            parse("name : web\nrule : /nginx/* /apache/*\nenable : false\n---\nip = read(client_ip) ;\nn : digit = read(n) ;\n");
        assert!(diags.is_empty(), "{diags:?}");
        let rule = rule.expect("a rule");
        assert_eq!(rule.name, "web");
        assert_eq!(rule.patterns, ["/nginx/*", "/apache/*"]);
        assert!(!rule.enabled);
        assert_eq!(rule.stmts.len(), 2);
    }

    #[test]
    fn a_missing_semicolon_is_reported_where_the_statement_ends() {
        let (_, diags) = parse("name : t\n---\na = read(a)\nb = read(b) ;\n");
        let d = diags.first().expect("a diagnostic");
        // Right after `read(a)`, on the line that lacks the `;`.
        assert_eq!((d.line, d.column), (3, 12), "{d:?}");
    }

    #[test]
    fn literals_parse_by_type_and_bad_ones_say_why() {
        assert_eq!(literal_value("digit", "42").unwrap(), Const::Digit(42));
        assert_eq!(literal_value("bool", "true").unwrap(), Const::Bool(true));
        assert_eq!(literal_value("chars", "x y").unwrap(), Const::Chars("x y".to_string()));
        assert!(literal_value("bool", "yes").unwrap_err().contains("`true` or `false`"));
        assert!(literal_value("digit", "4x").unwrap_err().contains("does not parse"));
    }

    #[test]
    fn closing_parens_skip_nesting_and_quoted_text() {
        let src = "f(a, (b), ')') tail";
        assert_eq!(closing_paren(src, 2, true), Some(13));
        // Without quote handling, the quoted `)` closes it.
        assert_eq!(closing_paren(src, 2, false), Some(11));
        assert_eq!(closing_paren("f(a, (b)", 2, true), None);
    }
}
