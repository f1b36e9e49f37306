//! The lossless syntax tree (`omlet_lang::syntax`) over every rule the
//! repository holds: the shared corpus, omlet's own cases, the examples and
//! the fuzz findings.

mod common;
use common::{case_rules, example_rules, repo};

use omlet_lang::syntax::{SyntaxKind, SyntaxNode, syntax};

/// Every rule text in the repository, with where it comes from.
fn all_rules() -> Vec<(String, String)> {
    let mut out = case_rules("tests/conformance");
    out.extend(case_rules("tests/cases"));
    out.extend(example_rules());
    out
}

fn check(tree: &SyntaxNode, src: &str, what: &str) {
    let text: String = tree.tokens().iter().map(|t| t.text(src)).collect();
    assert_eq!(text, src, "{what}: the tokens do not give the source back");
    for n in tree.descendants() {
        let mut p = n.span.start;
        for c in &n.children {
            assert_eq!(c.span().start, p, "{what}: a gap or an overlap in {:?}", n.kind);
            p = c.span().end;
        }
        assert_eq!(p, n.span.end, "{what}: {:?} is not covered", n.kind);
    }
}

#[test]
fn every_rule_is_its_tree_and_every_statement_a_node() {
    let rules = all_rules();
    assert!(rules.len() > 180, "{}", rules.len());
    for (what, src) in &rules {
        let tree = syntax(src);
        check(&tree, src, what);
        let (ast, diags) = omlet_lang::parse::parse(src);
        let Some(ast) = ast.filter(|_| diags.is_empty()) else { continue };
        // The statements the parser read are nodes of their own, with the
        // same spans: none was dropped for crossing another node.
        let spans: Vec<(u32, u32)> =
            tree.descendants().iter().filter(|n| n.kind == SyntaxKind::Statement).map(|n| (n.span.start, n.span.end)).collect();
        for s in ast.statics.iter().chain(&ast.stmts) {
            assert!(spans.contains(&(s.span.start, s.span.end)), "{what}: statement at {:?} is not a node", s.span);
        }
        // Past the header (where `/*` may start a pattern), comments are
        // tokens of their own, never inside text.
        let body = tree.descendants().iter().find(|n| n.kind == SyntaxKind::Separator).map_or(0, |n| n.span.end);
        for t in tree.tokens() {
            if t.kind == SyntaxKind::Text && t.span.start >= body {
                let x = t.text(src);
                assert!(
                    !x.contains("/*") || x.contains('\'') || x.contains('"') || x.contains('('),
                    "{what}: comment in text {x:?}"
                );
            }
        }
    }
}

#[test]
fn fuzz_findings_are_their_tree() {
    let dir = repo().join("tests/fuzz-regressions/parse_compile");
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let bytes = std::fs::read(&p).unwrap();
        let src = String::from_utf8_lossy(&bytes);
        check(&syntax(&src), &src, &p.display().to_string());
    }
}

/// Every token boundary of an example rule with a comment put in:
/// the tree is still lossless, and the comment is a token of its own.
#[test]
fn comments_anywhere_are_tokens() {
    let rule = std::fs::read_to_string(repo().join("examples/nginx/nginx.oml")).unwrap();
    let b = rule.as_bytes();
    let mut checked = 0;
    // In the `rule :` pattern list `/*` starts a pattern, not a comment.
    let header_end = rule.find("\n---").unwrap() + 4;
    for i in 1..rule.len() {
        if !rule.is_char_boundary(i) || (b[i - 1].is_ascii_alphanumeric() && b[i].is_ascii_alphanumeric()) {
            continue;
        }
        // Spaced, so that the insert cannot join a name (`a/*c*/b` is a
        // batch target, not a comment).
        for ins in [" # c\n", " /*c*/ ", "\n// c\n"] {
            let src = format!("{}{ins}{}", &rule[..i], &rule[i..]);
            let tree = syntax(&src);
            check(&tree, &src, &format!("insert at {i}"));
            let (ast, diags) = omlet_lang::parse::parse(&src);
            if ast.is_some() && diags.is_empty() && !(ins == " /*c*/ " && i <= header_end) {
                // The inserted comment lies inside one trivia token (it may
                // have joined a comment that was there: `//` + `/*c*/`).
                let c = ins.trim();
                let at = (i + ins.find(c).unwrap()) as u32;
                // List items, literal bodies, function arguments and format
                // strings are raw
                // text (spec §2.4, §8.3.2, §8.10): a `#` there is text.
                let verbatim = [SyntaxKind::List, SyntaxKind::Literal, SyntaxKind::PipeFn, SyntaxKind::MatchFn, SyntaxKind::Fmt];
                let raw = tree.descendants().iter().any(|n| verbatim.contains(&n.kind) && n.span.start < at && at < n.span.end);
                if raw {
                    continue;
                }
                assert!(
                    tree.tokens().iter().any(|t| t.kind.is_trivia() && t.span.start <= at && at + c.len() as u32 <= t.span.end),
                    "{c:?} at {i} is not in a comment token:\n{src}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 300, "{checked}");
}
