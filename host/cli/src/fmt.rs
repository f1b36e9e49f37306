//! `omlet fmt`: one canonical layout for OML rule files.
//!
//! The formatter walks the rule the way the parser (`omlet_lang::parse`)
//! reads it — OML has no single token set, so only the parser's grammar
//! positions tell where a name, a literal body or a list item ends — and
//! re-emits every token through a small layout writer (`Out`). Comments
//! (`//`, `#`, `/* … */`) are picked up wherever the parser skips
//! whitespace, and are written back in their place: a comment that stood on a
//! line of its own stays on a line of its own, a comment after code stays at
//! the end of that line. As in the parser, the pattern list of `rule :` has
//! only `//` and `#` comments: there `/*` starts a pattern (`rule : /*`).
//!
//! Layout:
//! - header: `name : x`, then `rule : p` (one pattern) or `rule :` with one
//!   pattern per line indented by 4 spaces (several), then `enable : …` if
//!   present, in source order, then `---`;
//! - one statement per line, single spaces: `a, b : chars = expr ;`;
//! - `static { }`, `match … { }` and `object { }` are blocks: one binding,
//!   arm or member per line, 4 spaces deeper than the line that opens the
//!   block, each ending in ` ;`; the closing `}` lines up with that line;
//! - default bodies stay inline: `read(x) { _ : chars(v) }`;
//! - a SQL lookup puts `where …` on a continuation line (4 spaces deeper);
//! - a comment that forces a line break inside a statement continues the
//!   statement on the next line, 4 spaces deeper;
//! - blank lines between items are kept (several collapse to one), none
//!   right after a `{` or before a `}`;
//! - literal bodies, quoted strings, `fmt` format strings, SQL strings and
//!   the trailing `---` section are kept verbatim; list items
//!   (`option:[a, b]`) and function arguments are trimmed and joined by `, `.
//!
//! [`format_source`] compiles the input and the output and refuses to return
//! an output that does not compile to the same program. The walker follows
//! `guest/lang/src/parse.rs` position by position; a change to the parser's
//! token rules needs the same change here (the check turns a missed one into
//! an error, never into a changed rule).

use std::fmt::Write as _;

use omlet_lang::parse::{MATCH_FNS, closing_paren, is_field_key, is_model_name, is_pattern, is_simple, is_target};
use omlet_lang::{Program, Source};

/// Formats one rule source.
///
/// Errors: the input does not compile (the first compile error, as
/// `line:column: message`), or — a formatter bug — the output would not
/// compile to the same program.
pub fn format_source(text: &str) -> Result<String, String> {
    let before = compile(text)?;
    let out = Walker::new(text).rule()?;
    let after =
        compile(&out).map_err(|e| format!("formatter bug: the formatted rule does not compile ({e}); please report it"))?;
    if fingerprint(&before) != fingerprint(&after) {
        return Err("formatter bug: the formatted rule compiles to a different program; please report it".into());
    }
    Ok(out)
}

/// A short report of where `old` and `new` first differ: the line number,
/// then up to `context` lines of each side, prefixed `-` and `+`.
pub fn first_difference(old: &str, new: &str, context: usize) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    let mut s = format!("@@ line {} @@\n", first + 1);
    for l in a.iter().skip(first).take(context) {
        let _ = writeln!(s, "-{l}");
    }
    for l in b.iter().skip(first).take(context) {
        let _ = writeln!(s, "+{l}");
    }
    if a.len() == b.len() && first == a.len() {
        s.push_str("(line ends or trailing whitespace differ)\n");
    }
    s
}

// ----- the safety check -------------------------------------------------------

fn compile(text: &str) -> Result<Program, String> {
    omlet_lang::compile(&[Source { file: "x.oml", text }], (0, 0)).map_err(|errs| {
        errs.iter()
            .flat_map(|fe| fe.diagnostics.first())
            .next()
            .map(|d| format!("{}:{}: {}", d.line, d.column, d.message))
            .unwrap_or_else(|| "the rule does not compile".into())
    })
}

/// What the program does, without positions (SQL statements record the
/// line and column of their lookup, which formatting may move).
fn fingerprint(p: &Program) -> String {
    let mut s = format!("{:?}\n", p.names);
    for m in &p.models {
        let _ = writeln!(s, "{:?} {:?} {:?} {:?} {:?}", m.name, m.patterns, m.enabled, m.uses_clock, m.stmts);
    }
    for st in &p.statements {
        let _ = writeln!(s, "{:?} {:?} {:?} {:?}", st.sql, st.params, st.table, st.columns);
    }
    s
}

// ----- the layout writer ------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sep {
    None,
    Space,
    Newline,
}

/// Collects tokens into indented lines. Separators are requested, not
/// written: `sp` and `nl` only take effect when the next token comes, so that
/// a trailing comment found after a statement's `;` can still join its line.
struct Out {
    done: String,
    line: String,
    line_indent: usize,
    /// The indentation of a new item (statement, arm, member) at this level.
    indent: usize,
    sep: Sep,
    /// The current line belongs to an unfinished item: a line break forced
    /// by a comment continues it one level deeper.
    in_item: bool,
    /// The source had a blank line before the next token.
    blank: bool,
    /// No blank line may come here (right after a `{`).
    no_blank: bool,
    /// For each open block: the indentation to restore, and that of the
    /// line that opened it (where the `}` goes).
    blocks: Vec<(usize, usize)>,
}

impl Out {
    fn new() -> Out {
        Out {
            done: String::new(),
            line: String::new(),
            line_indent: 0,
            indent: 0,
            sep: Sep::None,
            in_item: false,
            blank: false,
            no_blank: true,
            blocks: Vec::new(),
        }
    }

    fn sp(&mut self) {
        if self.sep == Sep::None {
            self.sep = Sep::Space;
        }
    }

    /// The current item is complete: the next token starts a new line.
    fn nl(&mut self) {
        self.sep = Sep::Newline;
        self.in_item = false;
    }

    /// A line break inside the current item.
    fn brk(&mut self) {
        self.sep = Sep::Newline;
    }

    fn end_line(&mut self) {
        for _ in 0..self.line_indent {
            self.done.push_str("    ");
        }
        self.done.push_str(&self.line);
        self.done.push('\n');
        self.line.clear();
    }

    fn flush(&mut self) {
        match self.sep {
            Sep::None => {}
            Sep::Space => {
                if !self.line.is_empty() && !self.line.ends_with(' ') {
                    self.line.push(' ');
                }
            }
            Sep::Newline => {
                if !self.line.is_empty() {
                    self.end_line();
                    if self.blank && !self.in_item && !self.no_blank {
                        self.done.push('\n');
                    }
                }
                self.line_indent = if self.in_item { self.indent + 1 } else { self.indent };
            }
        }
        self.sep = Sep::None;
        self.blank = false;
    }

    fn tok(&mut self, s: &str) {
        self.flush();
        self.line.push_str(s);
        self.in_item = true;
        self.no_blank = false;
    }

    /// `nl_before`: line breaks between the previous token and the comment;
    /// `attached`: no whitespace at all between them; `nl_after`: the
    /// comment is the last thing on its line.
    fn comment(&mut self, text: &str, nl_before: usize, attached: bool, line_comment: bool, nl_after: bool) {
        let breaks = line_comment || nl_after;
        if nl_before > 0 || self.line.is_empty() {
            // On a line of its own.
            self.sep = Sep::Newline;
            self.blank = nl_before >= 2;
            self.flush();
            self.line.push_str(text);
            self.no_blank = false;
            self.sep = Sep::Newline;
        } else {
            // After code on the same line. A `//` or `/*` right after a
            // word stays attached: the parser's keyword tests look at the
            // character after a word, and `/` is a name character there
            // (`read/*c*/(x)` is not `read(x)`).
            let keep_attached = attached && text.starts_with('/');
            let after_open = self.line.ends_with('(') || self.line.ends_with('[');
            if !keep_attached && (breaks || !after_open) {
                self.line.push(' ');
            }
            self.line.push_str(text);
            if breaks {
                self.sep = Sep::Newline;
            }
        }
    }

    /// After a `{`: the block's items go one level deeper than this line.
    fn open(&mut self) {
        self.blocks.push((self.indent, self.line_indent));
        self.indent = self.line_indent + 1;
        self.nl();
        self.no_blank = true;
    }

    /// The `}` on a line of its own, under the line that opened the block.
    fn close(&mut self) {
        let (saved, opener) = self.blocks.pop().unwrap_or((0, 0));
        self.indent = opener;
        self.nl();
        self.blank = false;
        self.tok("}");
        self.indent = saved;
    }

    fn finish(mut self) -> String {
        if !self.line.is_empty() {
            self.end_line();
        }
        self.done
    }
}

// ----- the walker -------------------------------------------------------------

type R<T> = Result<T, String>;

struct Walker<'s> {
    src: &'s str,
    b: &'s [u8],
    pos: usize,
    out: Out,
}

impl<'s> Walker<'s> {
    fn new(src: &'s str) -> Walker<'s> {
        Walker { src, b: src.as_bytes(), pos: 0, out: Out::new() }
    }

    // ----- low level ---------------------------------------------------------

    fn byte(&self, p: usize) -> u8 {
        self.b.get(p).copied().unwrap_or(0)
    }
    fn peek(&self) -> u8 {
        self.byte(self.pos)
    }
    fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }
    fn rest(&self) -> &'s str {
        self.src.get(self.pos..).unwrap_or("")
    }
    fn at_word_at(&self, p: usize, w: &str) -> bool {
        self.src.get(p..).is_some_and(|r| r.starts_with(w)) && !is_target(self.byte(p + w.len()))
    }
    fn at_word(&self, w: &str) -> bool {
        self.at_word_at(self.pos, w)
    }
    fn at_word_ci_at(&self, p: usize, w: &str) -> bool {
        let r = self.b.get(p..).unwrap_or(&[]);
        r.len() >= w.len() && r[..w.len()].eq_ignore_ascii_case(w.as_bytes()) && !is_target(self.byte(p + w.len()))
    }
    fn at_word_ci(&self, w: &str) -> bool {
        self.at_word_ci_at(self.pos, w)
    }
    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'s str {
        let start = self.pos;
        while !self.at_end() && f(self.peek()) {
            self.pos += 1;
        }
        &self.src[start..self.pos]
    }
    /// Unicode alphanumerics, `_` and `/` (type names, literal constructors).
    fn type_name(&mut self) -> &'s str {
        let start = self.pos;
        let len = self.rest().find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '/')).unwrap_or(self.rest().len());
        self.pos += len;
        &self.src[start..self.pos]
    }

    /// Where the next token starts, skipping whitespace and comments like the
    /// parser does, without consuming anything.
    fn skip_silent(&self, p: usize) -> usize {
        self.skip_silent_in(p, true)
    }

    /// [`Self::skip_silent`]; `block_comments: false` is the parser's
    /// `pattern_ws` (the pattern list of `rule :`, where `/*` starts a
    /// pattern).
    fn skip_silent_in(&self, mut p: usize, block_comments: bool) -> usize {
        loop {
            let c = self.byte(p);
            if c.is_ascii_whitespace() {
                p += 1;
            } else if c == b'#' || (c == b'/' && self.byte(p + 1) == b'/') {
                while p < self.b.len() && self.b[p] != b'\n' {
                    p += 1;
                }
            } else if block_comments && c == b'/' && self.byte(p + 1) == b'*' {
                p = match self.src[p + 2..].find("*/") {
                    Some(i) => p + 2 + i + 2,
                    None => self.b.len(),
                };
            } else {
                return p;
            }
        }
    }
    fn ahead(&self) -> usize {
        self.skip_silent(self.pos)
    }
    fn peek_after(&self, n: usize) -> u8 {
        self.byte(self.skip_silent((self.pos + n).min(self.b.len())))
    }
    fn peek_after_ws(&self) -> u8 {
        self.byte(self.ahead())
    }

    /// Skips whitespace and comments, handing the comments to the writer.
    fn ws(&mut self) {
        self.ws_in(true);
    }

    /// [`Self::ws`]; `block_comments: false` in the pattern list of `rule :`
    /// (the parser's `pattern_ws`): there `/*` is a pattern, not a comment.
    fn ws_in(&mut self, block_comments: bool) {
        let mut nl = 0;
        let mut attached = true;
        loop {
            let c = self.peek();
            if c == b'\n' {
                nl += 1;
                attached = false;
                self.pos += 1;
            } else if c.is_ascii_whitespace() {
                attached = false;
                self.pos += 1;
            } else if c == b'#' || (c == b'/' && self.byte(self.pos + 1) == b'/') {
                let start = self.pos;
                while !self.at_end() && self.peek() != b'\n' {
                    self.pos += 1;
                }
                let text = self.src[start..self.pos].trim_end();
                self.out.comment(text, nl, attached, true, true);
                nl = 0;
                attached = false;
            } else if block_comments && c == b'/' && self.byte(self.pos + 1) == b'*' {
                let start = self.pos;
                self.pos = match self.src[self.pos + 2..].find("*/") {
                    Some(i) => self.pos + 2 + i + 2,
                    None => self.b.len(),
                };
                let mut p = self.pos;
                while matches!(self.byte(p), b' ' | b'\t' | b'\r') {
                    p += 1;
                }
                let nl_after = p >= self.b.len() || self.byte(p) == b'\n';
                // An unclosed comment runs to the end of the file: drop its
                // trailing line breaks, the writer ends the file with one.
                let mut text = &self.src[start..self.pos];
                if !text.ends_with("*/") {
                    text = text.trim_end();
                }
                self.out.comment(text, nl, attached, false, nl_after);
                nl = 0;
                attached = false;
            } else {
                break;
            }
        }
        if nl >= 2 {
            self.out.blank = true;
        }
    }

    fn bug<T>(&self, what: &str) -> R<T> {
        let (line, col) = omlet_lang::diag::line_col(self.src, self.pos);
        Err(format!("formatter bug: lost track of the rule at {line}:{col} ({what}); please report it"))
    }

    /// A required character, after whitespace.
    fn expect(&mut self, c: u8) -> R<()> {
        self.ws();
        if self.peek() == c {
            self.pos += 1;
            Ok(())
        } else {
            self.bug(&format!("expected `{}`", c as char))
        }
    }

    /// An optional character: whitespace and comments are consumed only if
    /// it is there.
    fn eat(&mut self, c: u8) -> bool {
        if self.peek_after_ws() == c {
            self.ws();
            self.pos += 1;
            true
        } else {
            false
        }
    }

    // ----- file layout -------------------------------------------------------

    fn rule(mut self) -> R<String> {
        self.ws();
        if !self.at_word("name") {
            return self.bug("expected `name`");
        }
        self.pos += 4;
        self.out.tok("name");
        self.expect(b':')?;
        self.out.sp();
        self.out.tok(":");
        self.ws();
        let name = self.take_while(is_model_name);
        if name.is_empty() {
            return self.bug("expected the model name");
        }
        self.out.sp();
        self.out.tok(name);
        self.out.nl();
        loop {
            self.ws();
            if self.rest().starts_with("---") {
                self.pos += 3;
                self.out.tok("---");
                self.out.nl();
                break;
            }
            if self.at_word("rule") {
                self.pos += 4;
                self.out.tok("rule");
                self.expect(b':')?;
                self.out.sp();
                self.out.tok(":");
                let many = self.count_patterns() > 1;
                if many {
                    self.out.indent += 1;
                    self.out.nl();
                }
                // The pattern list: `#` and `//` are comments, `/*` starts
                // a pattern (`rule : /*`), as in the parser.
                while !self.patterns_end(self.skip_silent_in(self.pos, false)) {
                    self.ws_in(false);
                    let pat = self.take_while(is_pattern);
                    if pat.is_empty() {
                        return self.bug("expected a rule pattern");
                    }
                    self.out.sp();
                    self.out.tok(pat);
                    if many {
                        self.out.nl();
                    }
                }
                if many {
                    self.out.indent -= 1;
                }
                self.out.nl();
            } else if self.at_word("enable") {
                self.pos += 6;
                self.out.tok("enable");
                self.expect(b':')?;
                self.out.sp();
                self.out.tok(":");
                self.ws();
                let v = if self.at_word("true") {
                    "true"
                } else if self.at_word("false") {
                    "false"
                } else {
                    return self.bug("expected `true` or `false`");
                };
                self.pos += v.len();
                self.out.sp();
                self.out.tok(v);
                self.out.nl();
            } else {
                return self.bug("expected a header line");
            }
        }

        loop {
            let p = self.ahead();
            if !(self.at_word_at(p, "static") && self.byte(self.skip_silent(p + 6)) == b'{') {
                break;
            }
            self.ws();
            self.static_block()?;
            self.out.nl();
        }

        let mut trailing = None;
        loop {
            self.ws();
            if self.at_end() {
                break;
            }
            if self.rest().starts_with("---") {
                self.out.nl();
                self.out.tok("---");
                trailing = Some(&self.src[self.pos + 3..]);
                break;
            }
            self.statement()?;
            self.out.nl();
        }
        let mut text = self.out.finish();
        if let Some(rest) = trailing {
            // Verbatim, from right after the `---`.
            text.pop();
            text.push_str(rest);
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
        Ok(text)
    }

    fn patterns_end(&self, p: usize) -> bool {
        p >= self.b.len() || self.src[p..].starts_with("---") || self.at_word_at(p, "enable") || self.at_word_at(p, "rule")
    }

    fn count_patterns(&self) -> usize {
        let mut p = self.pos;
        let mut n = 0;
        loop {
            p = self.skip_silent_in(p, false);
            if self.patterns_end(p) {
                return n;
            }
            let start = p;
            while p < self.b.len() && is_pattern(self.b[p]) {
                p += 1;
            }
            if p == start {
                return n;
            }
            n += 1;
        }
    }

    fn static_block(&mut self) -> R<()> {
        self.pos += 6;
        self.out.tok("static");
        self.block("static block", |w| {
            w.statement()?;
            w.out.nl();
            Ok(())
        })
    }

    /// ` {`, then one item per line, 4 spaces deeper, until `}`.
    fn block(&mut self, what: &str, mut item: impl FnMut(&mut Self) -> R<()>) -> R<()> {
        self.expect(b'{')?;
        self.out.sp();
        self.out.tok("{");
        self.out.open();
        loop {
            self.ws();
            if self.peek() == b'}' {
                self.pos += 1;
                self.out.close();
                return Ok(());
            }
            if self.at_end() {
                return self.bug(&format!("unclosed {what}"));
            }
            item(self)?;
        }
    }

    /// `each` once, then again after every `,`, written `a, b`.
    fn comma_list(&mut self, mut each: impl FnMut(&mut Self) -> R<()>) -> R<()> {
        loop {
            each(self)?;
            if !self.eat(b',') {
                return Ok(());
            }
            self.out.tok(",");
            self.out.sp();
        }
    }

    fn statement(&mut self) -> R<()> {
        self.comma_list(|w| {
            w.ws();
            let name = w.take_while(is_target);
            if name.is_empty() {
                return w.bug("expected a target");
            }
            w.out.tok(name);
            w.opt_type()
        })?;
        self.expect(b'=')?;
        self.out.sp();
        self.out.tok("=");
        self.out.sp();
        self.expr(true)?;
        // The `;` is written before the comments in front of it are read,
        // so they end up after it, on its line or below.
        self.out.sp();
        self.out.tok(";");
        self.out.nl();
        self.expect(b';')
    }

    fn opt_type(&mut self) -> R<()> {
        if self.peek_after_ws() != b':' {
            return Ok(());
        }
        self.ws();
        self.pos += 1;
        self.out.sp();
        self.out.tok(":");
        self.ws();
        let ty = self.type_name();
        if ty.is_empty() {
            return self.bug("expected a type name");
        }
        self.out.sp();
        self.out.tok(ty);
        Ok(())
    }

    // ----- expressions -------------------------------------------------------

    fn expr(&mut self, top: bool) -> R<()> {
        self.ws();
        if self.at_word("match") {
            return self.match_expr();
        }
        if self.at_word("object") && self.peek_after(6) == b'{' {
            return self.object();
        }
        if self.at_word("collect") {
            self.pos += 7;
            self.out.tok("collect");
            self.out.sp();
            return self.var_access();
        }
        if self.at_word("fmt") && self.peek_after(3) == b'(' {
            return self.fmt();
        }
        if self.at_word("pipe") && self.peek_after(4) != b'(' {
            self.pos += 4;
            self.out.tok("pipe");
            self.out.sp();
            self.var_access()?;
            return self.pipe_tail();
        }
        if self.at_word_ci("select") {
            if !top {
                return self.bug("SQL inside an expression");
            }
            return self.sql();
        }
        if (self.at_word("read") || self.at_word("take")) && self.peek_after(4) == b'(' {
            self.accessor(true)?;
            if self.peek_after_ws() == b'|' {
                return self.pipe_tail();
            }
            return Ok(());
        }
        if self.peek() == b'@' {
            return self.at_name();
        }
        if self.rest().starts_with("Now::") {
            return self.builtin();
        }
        let start = self.pos;
        let name = self.type_name();
        if name.is_empty() {
            return self.bug("expected an expression");
        }
        if self.peek_after_ws() == b'(' {
            self.pos = start;
            return self.literal();
        }
        self.pos = start;
        let ident = self.take_while(is_simple);
        if ident.is_empty() {
            return self.bug("expected an expression");
        }
        self.out.tok(ident);
        Ok(())
    }

    /// `type(body)`, the body verbatim.
    fn literal(&mut self) -> R<()> {
        self.ws();
        let ty = self.type_name();
        self.out.tok(ty);
        // Whitespace may stand before `(`: the output has none, but keeps a
        // comment that stands there.
        self.ws();
        if self.peek() != b'(' {
            return self.bug("expected a literal");
        }
        self.pos += 1;
        let body_start = self.pos;
        self.pos = closing_paren(self.src, self.pos, false).unwrap_or(self.src.len());
        if self.at_end() {
            return self.bug("unclosed literal");
        }
        let body = &self.src[body_start..self.pos];
        self.pos += 1;
        self.out.tok(&format!("({body})"));
        Ok(())
    }

    fn at_name(&mut self) -> R<()> {
        self.ws();
        self.pos += 1;
        let name = self.take_while(is_simple);
        if name.is_empty() {
            return self.bug("expected a name after `@`");
        }
        self.out.tok(&format!("@{name}"));
        Ok(())
    }

    fn builtin(&mut self) -> R<()> {
        self.pos += 5;
        let f = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_');
        self.out.tok(&format!("Now::{f}"));
        self.expect(b'(')?;
        self.out.tok("(");
        self.expect(b')')?;
        self.out.tok(")");
        Ok(())
    }

    fn var_access(&mut self) -> R<()> {
        self.ws();
        if self.peek() == b'@' {
            return self.at_name();
        }
        if (self.at_word("read") || self.at_word("take")) && self.peek_after(4) == b'(' {
            return self.accessor(false);
        }
        self.bug("expected `read(…)`, `take(…)` or `@name`")
    }

    fn accessor(&mut self, allow_default: bool) -> R<()> {
        self.ws();
        let kw = &self.src[self.pos..self.pos + 4];
        self.pos += 4;
        self.out.tok(kw);
        self.expect(b'(')?;
        self.out.tok("(");
        let mut first = true;
        loop {
            self.ws();
            if self.peek() == b')' {
                self.pos += 1;
                self.out.tok(")");
                break;
            }
            if !first {
                self.out.tok(",");
                self.out.sp();
            }
            first = false;
            let word = self.take_while(is_field_key);
            if word.is_empty() {
                return self.bug("expected a read/take argument");
            }
            self.out.tok(word);
            if self.peek_after_ws() == b':' {
                self.ws();
                self.pos += 1;
                self.out.tok(":");
                match word {
                    "option" | "keys" | "in" => self.list()?,
                    "get" => {
                        self.ws();
                        let k = self.take_while(is_field_key);
                        if k.is_empty() {
                            return self.bug("expected a key after `get:`");
                        }
                        self.out.tok(k);
                    }
                    _ => return self.bug("unknown read/take argument"),
                }
            }
            self.eat(b',');
        }
        if allow_default && self.peek_after_ws() == b'{' {
            self.ws();
            self.pos += 1;
            self.out.sp();
            self.out.tok("{");
            self.ws();
            if self.peek() != b'_' || is_target(self.byte(self.pos + 1)) {
                return self.bug("expected `_` in a default body");
            }
            self.pos += 1;
            self.out.sp();
            self.out.tok("_");
            self.expect(b':')?;
            self.out.sp();
            self.out.tok(":");
            self.out.sp();
            self.expr(false)?;
            self.eat(b';');
            self.expect(b'}')?;
            self.out.sp();
            self.out.tok("}");
        }
        Ok(())
    }

    /// `[item, item]`: items are raw text, trimmed, joined by `, `.
    fn list(&mut self) -> R<()> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        let mut item_start = self.pos;
        let mut depth = 0;
        loop {
            if self.at_end() {
                return self.bug("unclosed list");
            }
            match self.peek() {
                b'[' => depth += 1,
                b']' if depth > 0 => depth -= 1,
                b']' | b',' => {
                    let item = self.src[item_start..self.pos].trim();
                    if !item.is_empty() {
                        items.push(item);
                    }
                    if self.peek() == b']' {
                        self.pos += 1;
                        break;
                    }
                    item_start = self.pos + 1;
                }
                _ => {}
            }
            self.pos += 1;
        }
        self.out.tok(&format!("[{}]", items.join(", ")));
        Ok(())
    }

    fn pipe_tail(&mut self) -> R<()> {
        while self.eat(b'|') {
            self.out.sp();
            self.out.tok("|");
            self.out.sp();
            self.call()?;
        }
        Ok(())
    }

    /// A pipe or match function: `name` or `name(args)`, the arguments split
    /// like the parser splits them, trimmed and joined by `, `.
    fn call(&mut self) -> R<()> {
        self.ws();
        let name = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':');
        if name.is_empty() {
            return self.bug("expected a function name");
        }
        self.out.tok(name);
        if self.peek_after_ws() != b'(' {
            return Ok(());
        }
        self.ws();
        self.pos += 1;
        let start = self.pos;
        self.pos = closing_paren(self.src, self.pos, true).unwrap_or(self.src.len());
        if self.at_end() {
            return self.bug("unclosed argument list");
        }
        let raw = &self.src[start..self.pos];
        self.pos += 1;
        self.out.tok(&format!("({})", split_args(raw).join(", ")));
        Ok(())
    }

    fn fmt(&mut self) -> R<()> {
        self.pos += 3;
        self.out.tok("fmt");
        self.expect(b'(')?;
        self.out.tok("(");
        self.ws();
        if self.peek() != b'"' {
            return self.bug("expected the format string");
        }
        let start = self.pos;
        self.pos += 1;
        while !self.at_end() && self.peek() != b'"' {
            self.pos += 1;
        }
        if self.at_end() {
            return self.bug("unclosed format string");
        }
        self.pos += 1;
        self.out.tok(&self.src[start..self.pos]);
        if self.eat(b',') {
            self.out.tok(",");
            self.out.sp();
            self.comma_list(Self::var_access)?;
        }
        self.expect(b')')?;
        self.out.tok(")");
        Ok(())
    }

    fn match_expr(&mut self) -> R<()> {
        self.pos += 5;
        self.out.tok("match");
        self.ws();
        self.out.sp();
        if self.peek() == b'(' {
            self.pos += 1;
            self.out.tok("(");
            self.comma_list(Self::var_access)?;
            self.expect(b')')?;
            self.out.tok(")");
        } else {
            self.var_access()?;
        }
        self.block("match", |w| {
            if w.peek() == b'_' && !is_target(w.byte(w.pos + 1)) {
                w.pos += 1;
                w.out.tok("_");
            } else if w.peek() == b'(' {
                w.pos += 1;
                w.out.tok("(");
                w.comma_list(Self::cond)?;
                w.expect(b')')?;
                w.out.tok(")");
            } else {
                w.cond()?;
            }
            w.ws();
            if !w.rest().starts_with("=>") {
                return w.bug("expected `=>`");
            }
            w.pos += 2;
            w.out.sp();
            w.out.tok("=>");
            w.out.sp();
            w.expr(false)?;
            w.out.sp();
            w.out.tok(";");
            w.out.nl();
            w.eat(b',');
            w.eat(b';');
            Ok(())
        })
    }

    fn cond(&mut self) -> R<()> {
        loop {
            self.cond_atom()?;
            if !self.eat(b'|') {
                return Ok(());
            }
            self.out.sp();
            self.out.tok("|");
            self.out.sp();
        }
    }

    fn cond_atom(&mut self) -> R<()> {
        self.ws();
        if self.peek() == b'!' {
            self.pos += 1;
            self.out.tok("!");
            return self.operand();
        }
        let save = self.pos;
        let name = self.type_name();
        let next = self.peek_after_ws();
        if name == "in" && next == b'(' {
            self.out.tok("in");
            self.ws();
            self.pos += 1;
            self.out.sp();
            self.out.tok("(");
            self.operand()?;
            self.expect(b',')?;
            self.out.tok(",");
            self.out.sp();
            self.operand()?;
            self.expect(b')')?;
            self.out.tok(")");
            return Ok(());
        }
        self.pos = save;
        if MATCH_FNS.contains(&name) && next == b'(' {
            return self.call();
        }
        self.operand()
    }

    /// A literal or a static symbol.
    fn operand(&mut self) -> R<()> {
        self.ws();
        let start = self.pos;
        let name = self.type_name();
        if !name.is_empty() && self.peek_after_ws() == b'(' {
            self.pos = start;
            return self.literal();
        }
        self.pos = start;
        let ident = self.take_while(is_simple);
        if ident.is_empty() {
            return self.bug("expected a literal or a static symbol");
        }
        self.out.tok(ident);
        Ok(())
    }

    fn object(&mut self) -> R<()> {
        self.pos += 6;
        self.out.tok("object");
        self.block("object", |w| {
            w.comma_list(|w| {
                w.ws();
                let n = w.take_while(is_simple);
                if n.is_empty() {
                    return w.bug("expected a member name");
                }
                w.out.tok(n);
                Ok(())
            })?;
            w.opt_type()?;
            w.expect(b'=')?;
            w.out.sp();
            w.out.tok("=");
            w.out.sp();
            w.expr(false)?;
            w.out.sp();
            w.out.tok(";");
            w.out.nl();
            w.eat(b';');
            Ok(())
        })
    }

    // ----- SQL -----------------------------------------------------------------

    /// Writes the keyword at the cursor as it is spelled.
    fn keyword(&mut self, len: usize) {
        let kw = &self.src[self.pos..self.pos + len];
        self.pos += len;
        self.out.tok(kw);
    }

    fn sql(&mut self) -> R<()> {
        self.keyword(6);
        loop {
            self.ws();
            self.out.sp();
            if self.peek() == b'*' {
                self.pos += 1;
                self.out.tok("*");
            } else {
                let c = self.take_while(is_simple);
                if c.is_empty() {
                    return self.bug("expected a column");
                }
                self.out.tok(c);
            }
            if self.eat(b',') {
                self.out.tok(",");
                continue;
            }
            self.ws();
            if !self.at_word_ci("from") {
                return self.bug("expected `from`");
            }
            self.out.sp();
            self.keyword(4);
            break;
        }
        self.ws();
        let table = self.take_while(is_simple);
        if table.is_empty() {
            return self.bug("expected a table");
        }
        self.out.sp();
        self.out.tok(table);
        self.ws();
        if !self.at_word_ci("where") {
            return self.bug("expected `where`");
        }
        self.out.brk();
        self.keyword(5);
        self.out.sp();
        self.sql_or()
    }

    fn sql_or(&mut self) -> R<()> {
        self.sql_and()?;
        while self.at_word_ci_at(self.ahead(), "or") {
            self.ws();
            self.out.sp();
            self.keyword(2);
            self.out.sp();
            self.sql_and()?;
        }
        Ok(())
    }

    fn sql_and(&mut self) -> R<()> {
        self.sql_unary()?;
        while self.at_word_ci_at(self.ahead(), "and") {
            self.ws();
            self.out.sp();
            self.keyword(3);
            self.out.sp();
            self.sql_unary()?;
        }
        Ok(())
    }

    fn sql_unary(&mut self) -> R<()> {
        self.ws();
        if self.at_word_ci("not") {
            self.keyword(3);
            self.out.sp();
            return self.sql_unary();
        }
        if self.peek() == b'(' {
            self.pos += 1;
            self.out.tok("(");
            self.sql_or()?;
            self.expect(b')')?;
            self.out.tok(")");
            return Ok(());
        }
        self.sql_operand()?;
        self.ws();
        let Some(op) = ["!=", "<>", "<=", ">=", "=", "<", ">"].into_iter().find(|op| self.rest().starts_with(op)) else {
            return self.bug("expected a comparison operator");
        };
        self.pos += op.len();
        self.out.sp();
        self.out.tok(op);
        self.out.sp();
        self.sql_operand()
    }

    fn sql_operand(&mut self) -> R<()> {
        self.ws();
        let c = self.peek();
        if c == b'\'' || c == b'"' {
            let start = self.pos;
            self.pos += 1;
            while !self.at_end() && self.peek() != c {
                self.pos += 1;
            }
            if self.at_end() {
                return self.bug("unclosed SQL string");
            }
            self.pos += 1;
            self.out.tok(&self.src[start..self.pos]);
            return Ok(());
        }
        if c.is_ascii_digit() || ((c == b'-' || c == b'+') && self.byte(self.pos + 1).is_ascii_digit()) {
            let start = self.pos;
            self.pos += 1;
            self.take_while(|c| c.is_ascii_digit() || c == b'.');
            self.out.tok(&self.src[start..self.pos]);
            return Ok(());
        }
        if c == b'@' {
            return self.at_name();
        }
        if (self.at_word("read") || self.at_word("take")) && self.peek_after(4) == b'(' {
            return self.accessor(true);
        }
        if self.rest().starts_with("Now::") {
            return self.builtin();
        }
        let name = self.take_while(is_simple);
        if name.is_empty() {
            return self.bug("expected a SQL operand");
        }
        self.out.tok(name);
        if self.peek_after_ws() != b'(' {
            return Ok(());
        }
        self.ws();
        self.pos += 1;
        self.out.tok("(");
        if self.eat(b')') {
            self.out.tok(")");
            return Ok(());
        }
        loop {
            self.sql_operand()?;
            if self.eat(b')') {
                self.out.tok(")");
                return Ok(());
            }
            self.expect(b',')?;
            self.out.tok(",");
            self.out.sp();
        }
    }
}

/// Splits function arguments at commas outside quotes (a backslash inside
/// quotes protects the next character), trimming each — the way the parser
/// splits them, so joining the parts with `, ` keeps the same arguments.
fn split_args(args: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quote = None;
    let mut escaped = false;
    for (i, c) in args.char_indices() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == ',' => {
                out.push(args[start..i].trim());
                start = i + 1;
            }
            None => {}
        }
    }
    let last = args[start..].trim();
    if !last.is_empty() || !out.is_empty() {
        out.push(last);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fmt_ok(src: &str) -> String {
        let out = format_source(src).unwrap_or_else(|e| panic!("{e}\n--- input:\n{src}"));
        let again = format_source(&out).unwrap_or_else(|e| panic!("second pass: {e}\n--- output:\n{out}"));
        assert_eq!(out, again, "not idempotent\n--- input:\n{src}\n--- first:\n{out}\n--- second:\n{again}");
        out
    }

    #[test]
    fn conformance_rules_format_to_the_same_program() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        let (mut formatted, mut skipped) = (0, 0);
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            let doc: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            for case in doc.get("case").and_then(|c| c.as_array()).into_iter().flatten() {
                let name = case.get("name").and_then(|v| v.as_str()).unwrap_or("?");
                let Some(oml) = case.get("oml").and_then(|v| v.as_str()) else { continue };
                if case.get("expected_error").is_some() || compile(oml).is_err() {
                    skipped += 1;
                    continue;
                }
                let out = format_source(oml).unwrap_or_else(|e| panic!("{} {name}: {e}\n{oml}", f.display()));
                let again = format_source(&out).unwrap_or_else(|e| panic!("{} {name}: second pass: {e}\n{out}", f.display()));
                assert_eq!(out, again, "{} {name}: not idempotent", f.display());
                formatted += 1;
            }
        }
        assert!(formatted >= 100, "only {formatted} conformance rules formatted ({skipped} skipped)");
    }

    #[test]
    fn examples_format_to_the_same_program() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let files = omlet::build::oml_files(&[dir]).unwrap();
        assert!(!files.is_empty());
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let out = format_source(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            assert_eq!(format_source(&out).unwrap(), out, "{}: not idempotent", f.display());
        }
    }

    #[test]
    fn messy_spacing_is_normalised() {
        let src = "name:demo\nrule:/a/*\n---\n\
            a:chars=read( x );b ,c :digit=take(option:[ p ,q,  r ])  { _:digit(0);} ;\n\
            d   =   pipe @t|Time::to_ts_zone( 0,ms )|to_json;\n\
            e=match read(s){chars(x)|chars(y)=>chars(xy),in(digit(1),digit(9))=>chars(n);!chars(z)=>read(w)\n_=>chars(o)};\n\
            f = object { g , h : chars = read(g) i = chars(v) ; };\n\
            j=fmt(\"{a}-{b}\",@a,read(b));\n\
            k = match (read(a),read(b)) { (starts_with( 'x' ),chars(y)) => chars(1) ; } ;\n\
            l , m = select   c1,c2  from   t where  k1 =  read(a) and(k2 > 3 or not k3='x y') ;\n\
            * = take() ;\n";
        let want = "name : demo\nrule : /a/*\n---\n\
            a : chars = read(x) ;\n\
            b, c : digit = take(option:[p, q, r]) { _ : digit(0) } ;\n\
            d = pipe @t | Time::to_ts_zone(0, ms) | to_json ;\n\
            e = match read(s) {\n    chars(x) | chars(y) => chars(xy) ;\n    in (digit(1), digit(9)) => chars(n) ;\n    !chars(z) => read(w) ;\n    _ => chars(o) ;\n} ;\n\
            f = object {\n    g, h : chars = read(g) ;\n    i = chars(v) ;\n} ;\n\
            j = fmt(\"{a}-{b}\", @a, read(b)) ;\n\
            k = match (read(a), read(b)) {\n    (starts_with('x'), chars(y)) => chars(1) ;\n} ;\n\
            l, m = select c1, c2 from t\n    where k1 = read(a) and (k2 > 3 or not k3 = 'x y') ;\n\
            * = take() ;\n";
        assert_eq!(fmt_ok(src), want);
    }

    #[test]
    fn header_with_several_patterns_and_enable() {
        let src = "name : fw/basic\nrule :   /firewall/deny   /firewall/allow\nenable:false\n---\nx = take() ;";
        let want = "name : fw/basic\nrule :\n    /firewall/deny\n    /firewall/allow\nenable : false\n---\nx = take() ;\n";
        assert_eq!(fmt_ok(src), want);
    }

    #[test]
    fn comments_stay_in_place() {
        let src = "// leading comment\n\
            name : c # the name\n\
            rule : /a\n\
            ---\n\
            // own line before a statement\n\
            x = read(x) ;   // trailing after a statement\n\
            \n\
            \n\
            # after two blank lines\n\
            y = match read(s) { # on the opening line\n\
            \x20 // before an arm\n\
            \x20 chars(a) => chars(b) , # after an arm\n\
            \x20 _ => chars(c)\n\
            \x20 // before the closing brace\n\
            } ;\n\
            /* a block\n   comment */\n\
            z = /* inline */ read(z) ;\n\
            w = read(a) # inside a statement\n\
            \x20   | to_json ;\n";
        let want = "// leading comment\n\
            name : c # the name\n\
            rule : /a\n\
            ---\n\
            // own line before a statement\n\
            x = read(x) ; // trailing after a statement\n\
            \n\
            # after two blank lines\n\
            y = match read(s) { # on the opening line\n\
            \x20   // before an arm\n\
            \x20   chars(a) => chars(b) ; # after an arm\n\
            \x20   _ => chars(c) ;\n\
            \x20   // before the closing brace\n\
            } ;\n\
            /* a block\n   comment */\n\
            z = /* inline */ read(z) ;\n\
            w = read(a) # inside a statement\n\
            \x20   | to_json ;\n";
        assert_eq!(fmt_ok(src), want);
    }

    #[test]
    fn verbatim_parts_are_kept() {
        let src = "name : v\n---\n\
            a = chars( spaced  (nested) body ) ;\n\
            b = time(2020-10-01 12:30:30) ;\n\
            c = read(u) | starts_with('a, b \\' c') | map_to(\"x y\") ;\n\
            d = match read(s) { regex_match('^\\[E\\]  x') => chars(#not a comment) ; } ;\n\
            e = read(option:[src-ip, # not a comment either]) ;\n\
            ---\nsrc_ip : privacy_ip\n  anything   goes";
        let want = "name : v\n---\n\
            a = chars( spaced  (nested) body ) ;\n\
            b = time(2020-10-01 12:30:30) ;\n\
            c = read(u) | starts_with('a, b \\' c') | map_to(\"x y\") ;\n\
            d = match read(s) {\n    regex_match('^\\[E\\]  x') => chars(#not a comment) ;\n} ;\n\
            e = read(option:[src-ip, # not a comment either]) ;\n\
            ---\nsrc_ip : privacy_ip\n  anything   goes\n";
        assert_eq!(fmt_ok(src), want);
    }

    #[test]
    fn static_blocks_and_nested_blocks() {
        let src = "name : s\n---\nstatic { A = object { code = chars(D7) ; text = chars('x') } ; LO = digit(1) ; }\n\
            e = match read(l) { contains('d') => A ; _ => A } ;\n\
            o = object { inner = read(x) { _ : LO } } ;\n";
        let want = "name : s\n---\nstatic {\n    A = object {\n        code = chars(D7) ;\n        text = chars('x') ;\n    } ;\n    LO = digit(1) ;\n}\n\
            e = match read(l) {\n    contains('d') => A ;\n    _ => A ;\n} ;\n\
            o = object {\n    inner = read(x) { _ : LO } ;\n} ;\n";
        assert_eq!(fmt_ok(src), want);
    }

    #[test]
    fn compile_errors_are_reported_with_position() {
        let e = format_source("name : t\n---\nx : int = read(a) ;\n").unwrap_err();
        assert!(e.starts_with("3:5: "), "{e}");
        assert!(format_source("name : t\nx = 1").is_err());
    }

    #[test]
    fn first_difference_shows_the_lines() {
        let d = first_difference("a\nb\nc\n", "a\nB\nc\n", 2);
        assert_eq!(d, "@@ line 2 @@\n-b\n-c\n+B\n+c\n");
    }

    #[test]
    fn comments_after_words_stay_attached() {
        // In SQL, `read/*c*/(x)` is a call of a SQL function `read`, not an
        // accessor: a space after `read` would change the program.
        let src = "name : a\n---\nx = select a from t where k = read/*c*/(py) ;\n";
        let want = "name : a\n---\nx = select a from t\n    where k = read/*c*/(py) ;\n";
        assert_eq!(fmt_ok(src), want);
    }

    #[test]
    fn unclosed_block_comment_and_blank_lines() {
        let src = "\n\n# top\n\n\nname : a\n---\n\n\nx = read(a) ;\n\n\n/* open to the end\n\n";
        let want = "# top\n\nname : a\n---\n\nx = read(a) ;\n\n/* open to the end\n";
        assert_eq!(fmt_ok(src), want);
    }

    #[test]
    fn catch_all_patterns_are_not_comments() {
        // `/*` after `rule :` is the catch-all pattern; `/* … */` elsewhere
        // is still a comment, kept in place.
        let src = "/* leading */\nname : all\nrule : /*\n---\nx = /* inline */ read(x) ;\n/* own line */\n";
        let want = "/* leading */\nname : all\nrule : /*\n---\nx = /* inline */ read(x) ;\n/* own line */\n";
        assert_eq!(fmt_ok(src), want);
        assert_eq!(compile(want).unwrap().models[0].patterns, ["/*"]);

        let src = "name : two /* after the name */\nrule :/a/*   /b/* # why\n// between\nenable:true\n---\n/* c */\ny = take() ;";
        let want = "name : two /* after the name */\nrule :\n    /a/*\n    /b/* # why\n// between\nenable : true\n---\n/* c */\ny = take() ;\n";
        assert_eq!(fmt_ok(src), want);
        assert_eq!(compile(want).unwrap().models[0].patterns, ["/a/*", "/b/*"]);

        // A `/*` pattern on the next line of the list, after a comment.
        let src = "name : n\nrule : /a # first\n  /*\n---\nz = take() ;\n";
        let want = "name : n\nrule :\n    /a # first\n    /*\n---\nz = take() ;\n";
        assert_eq!(fmt_ok(src), want);
    }

    /// Comments and line breaks inserted at every token boundary of an
    /// example rule: whenever the result compiles, it formats to the same
    /// program, idempotently (`format_source` checks the program).
    #[test]
    fn comments_anywhere_in_an_example() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/nginx/nginx.oml");
        let rule = std::fs::read_to_string(path).unwrap();
        let bytes = rule.as_bytes();
        let mut checked = 0;
        for i in 1..rule.len() {
            let (a, b) = (bytes[i - 1], bytes[i]);
            if !rule.is_char_boundary(i) || (a.is_ascii_alphanumeric() && b.is_ascii_alphanumeric()) {
                continue;
            }
            for ins in [" # c\n", "/*c*/", "\n// c\n", "\n\n"] {
                let m = format!("{}{ins}{}", &rule[..i], &rule[i..]);
                if compile(&m).is_ok() {
                    fmt_ok(&m);
                    checked += 1;
                }
            }
        }
        assert!(checked > 500, "{checked}");
    }
}
