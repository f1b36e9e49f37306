//! `omlet fmt`: one canonical layout for OML rule files, printed from the
//! lossless syntax tree ([`crate::syntax`]).
//!
//! The parser is the only grammar: the printer walks the tree it recorded
//! and decides, per node kind, where lines break and where single spaces
//! go; every token's text is written as it stands (literal bodies, quoted
//! strings, `fmt` format strings, SQL strings and the trailing `---`
//! section verbatim; list items and function arguments trimmed and joined
//! by `, `). Comments (`//`, `#`, `/* … */`) are trivia tokens of the tree
//! and are written back in their place, in source order: a comment that
//! stood on a line of its own stays on a line of its own, a comment after
//! code stays at the end of that line, and a comment before a `;` stays
//! before it.
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
//!   right after a `{` or before a `}`.
//!
//! [`format_source`] compiles the input and the output and refuses to return
//! an output that does not compile to the same program.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::syntax::{SyntaxElement, SyntaxKind as K, SyntaxNode, SyntaxToken, syntax};
use crate::{Program, Source};

/// Why [`format_source`] gave no output.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// The input does not compile: its first compile error. Only rules that
    /// compile are formatted.
    DoesNotCompile {
        /// 1-based line of the error.
        line: u32,
        /// 1-based column (in characters) of the error.
        column: u32,
        /// What the compiler says.
        message: String,
    },
    /// A formatter bug, caught before any output: the layout left part of
    /// the syntax tree unread, or the formatted rule would not compile to
    /// the same program. What went wrong, for the report.
    Bug(String),
}

impl core::fmt::Display for FormatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FormatError::DoesNotCompile { line: 0, message, .. } => f.write_str(message),
            FormatError::DoesNotCompile { line, column, message } => write!(f, "{line}:{column}: {message}"),
            FormatError::Bug(what) => write!(f, "formatter bug: {what}; please report it"),
        }
    }
}

/// Formats one rule source: the input does not compile
/// ([`FormatError::DoesNotCompile`]), or is returned in the canonical
/// layout, which compiles to the same program (else
/// [`FormatError::Bug`]).
pub fn format_source(text: &str) -> Result<String, FormatError> {
    let before = compile(text)?;
    let out = Printer::new(text).print(&syntax(text))?;
    let after = compile(&out).map_err(|e| FormatError::Bug(format!("the formatted rule does not compile ({e})")))?;
    if fingerprint(&before) != fingerprint(&after) {
        return Err(FormatError::Bug("the formatted rule compiles to a different program".into()));
    }
    Ok(out)
}

// ----- the safety check -------------------------------------------------------

fn compile(text: &str) -> Result<Program, FormatError> {
    crate::compile(&[Source { file: "x.oml", text }], (0, 0)).map_err(|errs| {
        match errs.iter().flat_map(|fe| fe.diagnostics.first()).next() {
            Some(d) => FormatError::DoesNotCompile { line: d.line, column: d.column, message: d.message.clone() },
            None => FormatError::DoesNotCompile { line: 0, column: 0, message: "the rule does not compile".into() },
        }
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

// ----- the printer ------------------------------------------------------------

/// Walks the tree in source order: trivia runs go to [`Out::comment`],
/// significant tokens to [`Out::tok`] with the separators their node kind
/// asks for.
struct Printer<'s> {
    src: &'s str,
    out: Out,
    /// The last significant token written, and the kind of node it was in.
    prev: String,
    prev_ctx: K,
    /// What follows a trailing `---`, written verbatim at the end.
    tail: Option<&'s str>,
}

impl<'s> Printer<'s> {
    fn new(src: &'s str) -> Printer<'s> {
        Printer { src, out: Out::new(), prev: String::new(), prev_ctx: K::Root, tail: None }
    }

    fn print(mut self, root: &SyntaxNode) -> Result<String, FormatError> {
        if let Some(e) = root.descendants().into_iter().find(|n| n.kind == K::Error) {
            return Err(FormatError::Bug(format!("the tree has an unread part at byte {}", e.span.start)));
        }
        self.node(root);
        let mut text = self.out.finish();
        if let Some(rest) = self.tail {
            // Verbatim, from right after the `---`.
            text.pop();
            text.push_str(rest);
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
        Ok(text)
    }

    /// A run of whitespace and comments, as the parser skipped it.
    fn trivia(&mut self, run: &[SyntaxToken]) {
        let (mut nl, mut attached) = (0, true);
        for t in run {
            let text = t.text(self.src);
            match t.kind {
                K::Whitespace => {
                    nl += text.bytes().filter(|&b| b == b'\n').count();
                    attached = false;
                }
                K::LineComment => {
                    self.out.comment(text.trim_end(), nl, attached, true, true);
                    (nl, attached) = (0, false);
                }
                K::BlockComment => {
                    let rest = self.src[t.span.end as usize..].trim_start_matches([' ', '\t', '\r']);
                    let nl_after = rest.is_empty() || rest.starts_with('\n');
                    // An unclosed comment runs to the end of the file: drop
                    // its trailing line breaks, the writer ends with one.
                    let text = if text.ends_with("*/") { text } else { text.trim_end() };
                    self.out.comment(text, nl, attached, false, nl_after);
                    (nl, attached) = (0, false);
                }
                _ => {}
            }
        }
        if nl >= 2 {
            self.out.blank = true;
        }
    }

    /// Writes a significant token of a `ctx` node, after a space where the
    /// layout wants one.
    fn tok(&mut self, text: &str, ctx: K) {
        if self.spaced(text, ctx) {
            self.out.sp();
        }
        self.out.tok(text);
        self.prev.clear();
        self.prev.push_str(text);
        self.prev_ctx = ctx;
    }

    /// Whether a space goes between the last token and `next` (where the
    /// writer does not start a line anyway).
    fn spaced(&self, next: &str, ctx: K) -> bool {
        let prev = self.prev.as_str();
        if prev.is_empty() || matches!(prev, "(" | "[" | "!") || matches!(next, ")" | "]" | ",") {
            return false;
        }
        // `option:[…]`, `get:key`: tight inside an accessor.
        if (self.prev_ctx == K::Access && prev == ":") || (ctx == K::Access && next == ":") {
            return false;
        }
        // A call or a literal: `read(`, `chars(…)`, `fmt(`, `ip4_int(`;
        // otherwise a keyword before a group: `in (`, `match (`, `not (`.
        if next.starts_with('(') {
            return !matches!(
                ctx,
                K::Access | K::Literal | K::Fmt | K::Builtin | K::PipeFn | K::MatchFn | K::SqlCall | K::AccessDirect | K::Fail
            );
        }
        true
    }

    /// The children of `n` in order: each significant element to `each`,
    /// with the trivia before it written first.
    fn walk(&mut self, n: &SyntaxNode, mut each: impl FnMut(&mut Self, &SyntaxElement)) {
        let mut run: Vec<SyntaxToken> = Vec::new();
        for c in &n.children {
            if let SyntaxElement::Token(t) = c
                && t.kind.is_trivia()
            {
                run.push(*t);
                continue;
            }
            self.trivia(&run);
            run.clear();
            each(self, c);
        }
        self.trivia(&run);
    }

    fn node(&mut self, n: &SyntaxNode) {
        match n.kind {
            K::Root => self.root(n),
            K::RuleItem => self.rule_item(n),
            K::Statement => {
                self.inline(n);
                self.out.nl();
            }
            K::Arm | K::Member | K::Item => self.item(n),
            K::Match | K::Object | K::Array | K::StaticBlock => self.block(n),
            _ => self.inline(n),
        }
    }

    /// [`Self::walk`] where child nodes print by their own rules: `each`
    /// gets the text of every significant token of `n` itself.
    fn tokens(&mut self, n: &SyntaxNode, mut each: impl FnMut(&mut Self, &str)) {
        let src = self.src;
        self.walk(n, |p, c| match c {
            SyntaxElement::Node(m) => p.node(m),
            SyntaxElement::Token(t) => each(p, t.text(src)),
        });
    }

    /// Tokens on one line, spaced by [`Self::spaced`]; child nodes by their
    /// own rules.
    fn inline(&mut self, n: &SyntaxNode) {
        let kind = n.kind;
        self.tokens(n, |p, text| match kind {
            // The body's `;` is optional and not written.
            K::DefaultBody if text == ";" => {}
            // A lookup continues with `where` on the next line.
            K::Sql if text.eq_ignore_ascii_case("where") => {
                p.out.brk();
                p.tok(text, kind);
            }
            K::List => {
                let inner = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text);
                let items = crate::parse::list_items(inner);
                p.tok(&format!("[{}]", items.join(", ")), kind);
            }
            K::PipeFn | K::MatchFn if text.starts_with('(') => {
                let inner = text.strip_prefix('(').and_then(|t| t.strip_suffix(')')).unwrap_or(text);
                let args = crate::parse::split_args(inner);
                p.tok(&format!("({})", args.join(", ")), kind);
            }
            _ => p.tok(text, kind),
        });
    }

    /// A match arm or an object member: its separator (`,`, `;` or none)
    /// is written ` ;`, and the next one starts a new line.
    fn item(&mut self, n: &SyntaxNode) {
        let kind = n.kind;
        let mut body = matches!(kind, K::Member | K::Item);
        self.tokens(n, |p, text| {
            if text == "=>" {
                body = true;
            }
            // After `=>` (an arm's result), a `,` or `;` ends the item;
            // before it, a `,` separates tuple conditions or member names.
            if !(text == ";" || (body && kind == K::Arm && text == ",")) {
                p.tok(text, kind);
            }
        });
        self.tok(";", kind);
        self.out.nl();
    }

    /// `… {`, one item per line 4 spaces deeper, `}` under the opening line.
    fn block(&mut self, n: &SyntaxNode) {
        let kind = n.kind;
        self.tokens(n, |p, text| match text {
            "{" => {
                p.tok("{", kind);
                p.out.open();
            }
            "}" => {
                p.out.close();
                p.prev = "}".to_string();
                p.prev_ctx = kind;
            }
            text => p.tok(text, kind),
        });
    }

    /// `rule : p`, or `rule :` and one pattern per line when there are several.
    fn rule_item(&mut self, n: &SyntaxNode) {
        let many = n.nodes().filter(|m| m.kind == K::Pattern).count() > 1;
        let mut colon = false;
        self.walk(n, |p, c| match c {
            SyntaxElement::Node(m) => {
                p.out.sp();
                p.out.tok(m.text(p.src));
                if many {
                    p.out.nl();
                }
            }
            SyntaxElement::Token(t) => {
                p.tok(t.text(p.src), K::RuleItem);
                if t.text(p.src) == ":" && !colon {
                    colon = true;
                    if many {
                        p.out.indent += 1;
                        p.out.nl();
                    }
                }
            }
        });
        if many {
            self.out.indent -= 1;
        }
    }

    fn root(&mut self, n: &SyntaxNode) {
        self.walk(n, |p, c| match c {
            SyntaxElement::Node(m) if m.kind == K::Tail => {
                p.out.nl();
                p.out.tok("---");
                p.tail = Some(&p.src[m.span.start as usize + 3..]);
            }
            SyntaxElement::Node(m) => {
                p.node(m);
                if matches!(m.kind, K::NameItem | K::RuleItem | K::EnableItem | K::Separator | K::StaticBlock) {
                    p.out.nl();
                }
            }
            SyntaxElement::Token(t) => {
                p.tok(t.text(p.src), K::Root);
                p.out.nl();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::string::String;

    fn fmt_ok(src: &str) -> String {
        let out = format_source(src).unwrap_or_else(|e| panic!("{e}\n--- input:\n{src}"));
        let again = format_source(&out).unwrap_or_else(|e| panic!("second pass: {e}\n--- output:\n{out}"));
        assert_eq!(out, again, "not idempotent\n--- input:\n{src}\n--- first:\n{out}\n--- second:\n{again}");
        out
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
    fn a_comment_before_the_semicolon_stays_before_it() {
        let src = "name : c\n---\nc = read(x) /* why */ ;\nd = read(y) # why\n  ;\n";
        let want = "name : c\n---\nc = read(x) /* why */ ;\nd = read(y) # why\n    ;\n";
        assert_eq!(fmt_ok(src), want);
    }

    #[test]
    fn literals_lose_the_space_before_their_parenthesis() {
        let src =
            "name : l\n---\na = ip ( 10.0.0.1 ) ;\nb = read(x) { _ : chars (d) } ;\nc = select v from t where k = digit (2) ;\n";
        let want = "name : l\n---\na = ip( 10.0.0.1 ) ;\nb = read(x) { _ : chars(d) } ;\nc = select v from t\n    where k = digit(2) ;\n";
        assert_eq!(fmt_ok(src), want);
    }

    #[test]
    fn compile_errors_are_reported_with_position() {
        let e = format_source("name : t\n---\nx : int = read(a) ;\n").unwrap_err();
        assert!(matches!(e, FormatError::DoesNotCompile { line: 3, column: 5, .. }), "{e:?}");
        assert!(e.to_string().starts_with("3:5: "), "{e}");
        assert!(format_source("name : t\nx = 1").is_err());
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
