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
//! The grammar is split by construct, one file each: [`rule`] (header,
//! static blocks, statements), [`calc`] (`calc`, `lookup_nocase`), [`expr`] (what starts an expression,
//! accessors, literals), [`pipe`], [`object`] (`object`, `array`, `fmt`),
//! [`matching`] and [`sql`]. This file holds the cursor: every step goes
//! through `bump`, `eat`, `eat_word`, `eat_str` or `expect`, never through
//! arithmetic on the position (docs/decisions/0045-parser-split-by-construct.md
//! says why the cursor reads characters rather than a token stream).
//!
//! Nesting is bounded ([`Limits::max_depth`]): every recursive path of the
//! parser (expressions in objects, match arms and default bodies; SQL
//! groups, `not` and calls) goes through `Parser::nest`, so no input can
//! overflow the stack, and the tree it builds is as shallow for the checker,
//! the IR and the evaluator that recurse over it.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::ast::*;
use crate::diag::{Diagnostic, Span};
use crate::ir::{Cond, Const, Helper, NowFn, PipeFn};
use crate::limits::Limits;
use crate::syntax::{Recording, SyntaxKind};
use crate::time;
use crate::value;

mod calc;
mod expr;
mod matching;
mod object;
mod pipe;
mod rule;
mod sql;

pub use expr::{LiteralError, literal_value};

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
                    self.bump();
                }
                self.trivia(SyntaxKind::Whitespace, start);
            } else if c == b'#' || (c == b'/' && self.peek_at(1) == b'/') {
                while !self.at_end() && self.peek() != b'\n' {
                    self.bump();
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
            self.bump();
            Ok(())
        } else {
            let found = self.found();
            let span = self.here();
            self.err(format!("expected {what}, found {found}"), span)
        }
    }

    /// Steps over the byte at the cursor, which the caller has looked at.
    fn bump(&mut self) {
        self.pos = (self.pos + 1).min(self.b.len());
    }

    /// Steps over `s` (any case), which the caller has seen at the cursor.
    fn bump_str(&mut self, s: &str) {
        debug_assert!(self.rest().len() >= s.len() && self.rest().as_bytes()[..s.len()].eq_ignore_ascii_case(s.as_bytes()));
        self.pos = (self.pos + s.len()).min(self.b.len());
    }

    /// Consumes the keyword `w` when [`Self::at_word`] sees it.
    fn eat_word(&mut self, w: &str) -> bool {
        let at = self.at_word(w);
        if at {
            self.bump_str(w);
        }
        at
    }

    /// Consumes the keyword `w`, in any case, when [`Self::at_word_ci`] sees it.
    fn eat_word_ci(&mut self, w: &str) -> bool {
        let at = self.at_word_ci(w);
        if at {
            self.bump_str(w);
        }
        at
    }

    /// Consumes `s` if the text at the cursor starts with it.
    fn eat_str(&mut self, s: &str) -> bool {
        let at = self.rest().starts_with(s);
        if at {
            self.bump_str(s);
        }
        at
    }

    /// Inside a `{ … }` block (an object, an array, a match, a static
    /// block): whether another item follows. Consumes the closing `}` and
    /// says no; at the end of the file, the block is unclosed.
    fn block_item(&mut self, what: &str) -> PResult<bool> {
        if self.eat(b'}') {
            return Ok(false);
        }
        if self.at_end() {
            let span = self.here();
            return self.err(format!("unclosed {what}: expected `}}`"), span);
        }
        Ok(true)
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.peek() == c {
            self.bump();
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
            self.bump();
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
                    self.bump();
                    while !self.at_end() && self.peek() != q && self.peek() != b'\n' {
                        let step = if self.peek() == b'\\' { 2 } else { 1 };
                        self.pos = (self.pos + step).min(self.b.len());
                    }
                }
                b';' if depth <= 0 => {
                    self.bump();
                    return;
                }
                b'\n' if depth < 0 => depth = 0,
                _ => {}
            }
            // An unclosed quote may have run to the end: never step past it.
            self.pos = (self.pos + 1).min(self.b.len());
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
pub(crate) fn quoted(a: &str) -> Option<String> {
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
        assert_eq!(literal_value("bool", "yes").unwrap_err(), LiteralError::NotBool("yes".into()));
        assert!(literal_value("bool", "yes").unwrap_err().to_string().contains("`true` or `false`"));
        assert_eq!(literal_value("digit", "4x").unwrap_err(), LiteralError::DoesNotParse { ty: "digit", body: "4x".into() });
        assert!(literal_value("digit", "4x").unwrap_err().to_string().contains("does not parse"));
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
