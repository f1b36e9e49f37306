//! The lossless syntax tree of a rule file: every byte of the source is in
//! exactly one token, and tokens nest in nodes that follow the grammar.
//!
//! The parser ([`crate::parse`]) is the only grammar. While it builds the
//! AST it records where each construct begins and ends and which bytes it
//! skipped as whitespace or comments; [`syntax`] turns that record into the
//! tree. Trivia (whitespace, `#`/`//` line comments, `/* … */` blocks) are
//! tokens of their own; the bytes between them that no child node covers are
//! [`SyntaxKind::Text`] tokens (a keyword, a name, punctuation, a literal
//! body or a quoted string, exactly as written). Concatenating the tokens in
//! order gives the source back, byte for byte, for any input, including
//! rules that do not parse: what the parser could not place is in an
//! [`SyntaxKind::Error`] node, or in the root's text.
//!
//! `omlet fmt` ([`crate::fmt`]) prints from this tree.

use alloc::vec::Vec;

use crate::diag::Span;

/// What a node or token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SyntaxKind {
    // ----- nodes -----
    /// The whole file.
    Root,
    /// `name : model`
    NameItem,
    /// `rule : pattern …`
    RuleItem,
    Pattern,
    /// `enable : true|false`
    EnableItem,
    /// The `---` that ends the header.
    Separator,
    /// `static { … }`
    StaticBlock,
    /// `targets = expr ;`, at the top level or in a static block.
    Statement,
    /// A target with its optional type.
    Target,
    /// `: type`
    Type,
    /// `type(body)`
    Literal,
    /// `read(…)` / `take(…)`, with its default body if any.
    Access,
    /// `[a, b]` after `option:` or `keys:`.
    List,
    /// `{ _ : expr }` after an accessor.
    DefaultBody,
    /// `@name`
    At,
    /// `Now::time()` and its kin.
    Builtin,
    /// A bare name (a static symbol).
    Ident,
    /// `collect read(…)`
    Collect,
    /// A source and its `| fn` chain, with or without the `pipe` keyword.
    Pipe,
    /// One pipe function with its arguments.
    PipeFn,
    /// `fmt("…", args)`
    Fmt,
    /// `match … { arms }`
    Match,
    /// One arm, default arms included.
    Arm,
    /// The condition of an arm, or one element of a tuple arm.
    Cond,
    /// A match function (`starts_with('x')`) in a condition.
    MatchFn,
    /// `in (lo, hi)` in a condition.
    Range,
    /// `object { members }`
    Object,
    Member,
    /// `array { items }`
    Array,
    /// One item of an array.
    Item,
    /// `calc( … )`
    Calc,
    /// `lookup_nocase( … )`
    LookupNocase,
    /// `access_direct(src, dst)`
    AccessDirect,
    /// `fail( … )`
    Fail,
    /// `select … from … where …`
    Sql,
    /// `a or b`, `a and b`, `not a`, `( a )`
    SqlOr,
    SqlAnd,
    SqlNot,
    SqlGroup,
    /// `left op right`
    SqlCmp,
    /// `column in (items)`
    SqlIn,
    SqlColumn,
    /// A quoted or numeric literal in SQL.
    SqlLiteral,
    /// A SQL function call.
    SqlCall,
    /// The section after a second `---` (kept as written).
    Tail,
    /// A statement or block the parser could not read (skipped to recover).
    Error,
    // ----- tokens -----
    Whitespace,
    /// `# …` or `// …`, without the line end.
    LineComment,
    /// `/* … */` (to the end of the file when unclosed).
    BlockComment,
    /// Significant text.
    Text,
}

impl SyntaxKind {
    /// Whitespace and comments.
    pub fn is_trivia(self) -> bool {
        matches!(self, SyntaxKind::Whitespace | SyntaxKind::LineComment | SyntaxKind::BlockComment)
    }
}

/// A leaf: a span of the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntaxToken {
    pub kind: SyntaxKind,
    pub span: Span,
}

impl SyntaxToken {
    pub fn text<'s>(&self, src: &'s str) -> &'s str {
        &src[self.span.start as usize..self.span.end as usize]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyntaxElement {
    Node(SyntaxNode),
    Token(SyntaxToken),
}

impl SyntaxElement {
    pub fn span(&self) -> Span {
        match self {
            SyntaxElement::Node(n) => n.span,
            SyntaxElement::Token(t) => t.span,
        }
    }
}

/// An inner node: its children cover its span exactly, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxNode {
    pub kind: SyntaxKind,
    pub span: Span,
    pub children: Vec<SyntaxElement>,
}

impl SyntaxNode {
    pub fn text<'s>(&self, src: &'s str) -> &'s str {
        &src[self.span.start as usize..self.span.end as usize]
    }

    /// The child nodes.
    pub fn nodes(&self) -> impl Iterator<Item = &SyntaxNode> {
        self.children.iter().filter_map(|c| match c {
            SyntaxElement::Node(n) => Some(n),
            SyntaxElement::Token(_) => None,
        })
    }

    /// Every token under this node, in source order.
    pub fn tokens(&self) -> Vec<SyntaxToken> {
        let mut out = Vec::new();
        self.collect_tokens(&mut out);
        out
    }

    fn collect_tokens(&self, out: &mut Vec<SyntaxToken>) {
        for c in &self.children {
            match c {
                SyntaxElement::Node(n) => n.collect_tokens(out),
                SyntaxElement::Token(t) => out.push(*t),
            }
        }
    }

    /// The tree as indented text, one node or token per line (for tests
    /// and debugging): `Kind@start..end` and each token's text.
    pub fn dump(&self, src: &str) -> alloc::string::String {
        use core::fmt::Write;
        fn go(n: &SyntaxNode, src: &str, depth: usize, out: &mut alloc::string::String) {
            let _ = writeln!(out, "{:w$}{:?}@{}..{}", "", n.kind, n.span.start, n.span.end, w = depth * 2);
            for c in &n.children {
                match c {
                    SyntaxElement::Node(m) => go(m, src, depth + 1, out),
                    SyntaxElement::Token(t) => {
                        let _ = writeln!(out, "{:w$}{:?} {:?}", "", t.kind, t.text(src), w = depth * 2 + 2);
                    }
                }
            }
        }
        let mut out = alloc::string::String::new();
        go(self, src, 0, &mut out);
        out
    }

    /// This node and every node under it, depth first.
    pub fn descendants(&self) -> Vec<&SyntaxNode> {
        let mut out = alloc::vec![self];
        let mut i = 0;
        while i < out.len() {
            let n = out[i];
            out.extend(n.nodes());
            i += 1;
        }
        out
    }
}

/// The lossless syntax tree of `src` (a tree is made for any input).
pub fn syntax(src: &str) -> SyntaxNode {
    let rec = crate::parse::record(src);
    build(src.len(), rec.nodes, rec.trivia, rec.cuts)
}

/// What the parser records for the tree: node spans as each construct
/// completes, trivia spans as whitespace and comments are skipped.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    pub nodes: Vec<(SyntaxKind, usize, usize)>,
    pub trivia: Vec<(SyntaxKind, usize, usize)>,
    /// Token boundaries inside text (where the parser looked for whitespace).
    pub cuts: Vec<usize>,
}

/// Nests the recorded node spans (outer first when two are equal: the
/// later recorded), drops any that would cross another, and fills every
/// node's gaps with trivia and text tokens.
fn build(
    len: usize,
    nodes: Vec<(SyntaxKind, usize, usize)>,
    mut trivia: Vec<(SyntaxKind, usize, usize)>,
    mut cuts: Vec<usize>,
) -> SyntaxNode {
    cuts.sort_unstable();
    cuts.dedup();
    // Trivia: sorted, each byte once (lookahead may record a run twice).
    trivia.sort_by_key(|t| (t.1, core::cmp::Reverse(t.2)));
    let mut clean: Vec<(SyntaxKind, usize, usize)> = Vec::with_capacity(trivia.len());
    for t in trivia {
        let from = clean.last().map_or(0, |l| l.2);
        if t.2 <= from || t.1 >= len {
            continue;
        }
        clean.push((t.0, t.1.max(from), t.2.min(len)));
    }

    let mut order: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].1 < nodes[i].2 && nodes[i].2 <= len).collect();
    order.sort_by_key(|&i| (nodes[i].1, core::cmp::Reverse(nodes[i].2), core::cmp::Reverse(i)));

    // children[k]: the nodes directly inside node k (k = nodes.len() is the root).
    let root = nodes.len();
    let mut children: Vec<Vec<usize>> = alloc::vec![Vec::new(); nodes.len() + 1];
    let span = |k: usize| if k == root { (0, len) } else { (nodes[k].1, nodes[k].2) };
    let mut stack: Vec<usize> = alloc::vec![root];
    for i in order {
        let (s, e) = (nodes[i].1, nodes[i].2);
        while let Some(&top) = stack.last() {
            if top != root && span(top).1 <= s {
                stack.pop();
            } else {
                break;
            }
        }
        let parent = *stack.last().unwrap_or(&root);
        let (_, pe) = span(parent);
        // A node that crosses the end of the one around it: leave it out.
        if e > pe {
            continue;
        }
        // Nor may it cross a sibling that ends after its start.
        if let Some(&prev) = children[parent].last()
            && span(prev).1 > s
        {
            continue;
        }
        children[parent].push(i);
        stack.push(i);
    }

    /// Text tokens for `[from, to)`, split at the cuts inside it.
    fn text(from: usize, to: usize, cuts: &[usize], out: &mut Vec<SyntaxElement>) {
        let mut q = from;
        let first = cuts.partition_point(|&c| c <= from);
        for &c in &cuts[first..] {
            if c >= to {
                break;
            }
            out.push(SyntaxElement::Token(SyntaxToken { kind: SyntaxKind::Text, span: Span::new(q, c) }));
            q = c;
        }
        out.push(SyntaxElement::Token(SyntaxToken { kind: SyntaxKind::Text, span: Span::new(q, to) }));
    }

    fn make(
        k: usize,
        kind: SyntaxKind,
        (s, e): (usize, usize),
        nodes: &[(SyntaxKind, usize, usize)],
        children: &[Vec<usize>],
        trivia: &[(SyntaxKind, usize, usize)],
        cuts: &[usize],
    ) -> SyntaxNode {
        let mut out = Vec::new();
        let mut p = s;
        let gap = |from: usize, to: usize, out: &mut Vec<SyntaxElement>| {
            let mut q = from;
            let first = trivia.partition_point(|t| t.2 <= from);
            for t in &trivia[first..] {
                if t.1 >= to {
                    break;
                }
                let (ts, te) = (t.1.max(q), t.2.min(to));
                if ts > q {
                    text(q, ts, cuts, out);
                }
                if te > ts {
                    out.push(SyntaxElement::Token(SyntaxToken { kind: t.0, span: Span::new(ts, te) }));
                }
                q = te.max(q);
            }
            if to > q {
                text(q, to, cuts, out);
            }
        };
        for &c in &children[k] {
            let (cs, ce) = (nodes[c].1, nodes[c].2);
            gap(p, cs, &mut out);
            out.push(SyntaxElement::Node(make(c, nodes[c].0, (cs, ce), nodes, children, trivia, cuts)));
            p = ce;
        }
        gap(p, e, &mut out);
        SyntaxNode { kind, span: Span::new(s, e), children: out }
    }
    make(root, SyntaxKind::Root, (0, len), &nodes, &children, &clean, &cuts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    /// The tokens give the source back, and every node's children cover it.
    fn check_lossless(src: &str) -> SyntaxNode {
        let tree = syntax(src);
        // No recorded node was left out for crossing another.
        let rec = crate::parse::record(src);
        let recorded = rec.nodes.iter().filter(|n| n.1 < n.2).count();
        assert_eq!(tree.descendants().len() - 1, recorded, "{src}");
        let text: String = tree.tokens().iter().map(|t| t.text(src)).collect();
        assert_eq!(text, src);
        for n in tree.descendants() {
            let mut p = n.span.start;
            for c in &n.children {
                assert_eq!(c.span().start, p, "{:?} in {:?}", c, n.kind);
                assert!(c.span().end > p, "an empty element: {c:?}");
                p = c.span().end;
            }
            assert_eq!(p, n.span.end);
        }
        tree
    }

    fn kinds(tree: &SyntaxNode) -> Vec<SyntaxKind> {
        tree.descendants().iter().map(|n| n.kind).collect()
    }

    #[test]
    fn a_rule_is_its_tokens() {
        let src = "name : t   // the model\nrule : /a/* /b\n---\n# first\nx : chars = read(a) { _ : chars (d) } ; /* after */\ny = pipe @x | base64_decode(Utf8) | to_str ;\n\n---\nanything here";
        let tree = check_lossless(src);
        let k = kinds(&tree);
        for want in [
            SyntaxKind::NameItem,
            SyntaxKind::RuleItem,
            SyntaxKind::Pattern,
            SyntaxKind::Separator,
            SyntaxKind::Statement,
            SyntaxKind::Target,
            SyntaxKind::Type,
            SyntaxKind::Access,
            SyntaxKind::DefaultBody,
            SyntaxKind::Literal,
            SyntaxKind::Pipe,
            SyntaxKind::PipeFn,
            SyntaxKind::At,
            SyntaxKind::Tail,
        ] {
            assert!(k.contains(&want), "{want:?} missing in {k:?}");
        }
        let comments: Vec<&str> = tree
            .tokens()
            .iter()
            .filter(|t| t.kind != SyntaxKind::Whitespace && t.kind.is_trivia())
            .map(|t| t.text(src))
            .collect();
        assert_eq!(comments, ["// the model", "# first", "/* after */"]);
        // `/*` in a pattern list is a pattern, not a comment.
        let patterns: Vec<&str> =
            tree.descendants().iter().filter(|n| n.kind == SyntaxKind::Pattern).map(|n| n.text(src)).collect();
        assert_eq!(patterns, ["/a/*", "/b"]);
    }

    #[test]
    fn blocks_and_lookups_nest() {
        let src = "name : t\n---\nstatic {\n  s = chars(x) ;\n}\nm = match (read(a), read(b)) {\n  (starts_with('x'), in (digit(1), digit(3))) => object { k = @a ; } ;\n  _ => fmt(\"{a}\", @a) ;\n} ;\nz = select v from t where k = read(k) and not (v = 'a' or ip4_int(read(i)) > 3) ;\n";
        let tree = check_lossless(src);
        let k = kinds(&tree);
        for want in [
            SyntaxKind::StaticBlock,
            SyntaxKind::Match,
            SyntaxKind::Arm,
            SyntaxKind::Cond,
            SyntaxKind::MatchFn,
            SyntaxKind::Range,
            SyntaxKind::Object,
            SyntaxKind::Member,
            SyntaxKind::Fmt,
            SyntaxKind::Sql,
            SyntaxKind::SqlAnd,
            SyntaxKind::SqlNot,
            SyntaxKind::SqlGroup,
            SyntaxKind::SqlOr,
            SyntaxKind::SqlCmp,
            SyntaxKind::SqlColumn,
            SyntaxKind::SqlLiteral,
            SyntaxKind::SqlCall,
        ] {
            assert!(k.contains(&want), "{want:?} missing in {k:?}");
        }
        // The statement's last token is its `;`, the comment-free end.
        let stmts: Vec<&SyntaxNode> = tree.nodes().filter(|n| n.kind == SyntaxKind::Statement).collect();
        assert_eq!(stmts.len(), 2);
        assert!(stmts.iter().all(|s| s.text(src).ends_with(';')));
    }

    #[test]
    fn tokens_are_split_where_no_whitespace_separates_them() {
        let src = "name:t\n---\na:chars=read(option:[x,y]){_:digit(0)};";
        let tree = check_lossless(src);
        let texts: Vec<&str> = tree.tokens().iter().filter(|t| t.kind == SyntaxKind::Text).map(|t| t.text(src)).collect();
        assert_eq!(
            texts,
            [
                "name", ":", "t", "---", "a", ":", "chars", "=", "read", "(", "option", ":", "[x,y]", ")", "{", "_", ":",
                "digit", "(0)", "}", ";"
            ],
            "{}",
            tree.dump(src)
        );
    }

    #[test]
    fn broken_input_is_still_every_byte() {
        for src in [
            "",
            "name",
            "name : t\n---\nx = read(a ;\ny = chars(ok) ;\n",
            "name : t\n---\nx = match read(a) { ",
            "\u{fffd}/* unclosed",
            "name : t\n---\nx = object { a = ((( ;",
        ] {
            check_lossless(src);
        }
        let src = "name : t\n---\nx = read(a ;\ny = chars(ok) ;\n";
        let tree = syntax(src);
        assert!(kinds(&tree).contains(&SyntaxKind::Error));
    }
}
