//! `rule :` patterns: the catch-all `/*` is a pattern, not a comment, and
//! patterns are bounded so that the overlap check stays cheap.

use omlet_lang::{Limits, Route, Source, compile, compile_with_limits};

fn one(src: &str) -> Result<omlet_lang::Program, Vec<omlet_lang::FileErrors>> {
    compile(&[Source { file: "t.oml", text: src }], (0, 0))
}

#[test]
fn the_catch_all_pattern_claims_every_path() {
    let p = one("name : all\nrule : /*\n---\nx = chars(1) ;\n").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(p.models[0].patterns, ["/*"]);
    for path in ["/nginx/access_log", "/", "/a/b/c/d", "/é"] {
        assert_eq!(p.route(Route::Path(path)), Ok(0), "{path}");
    }
    // At the end of the file's header, on its own line, and before others.
    let p = one("name : all\nrule :\n    /*\n    /x\nenable : true\n---\nx = chars(1) ;\n").unwrap();
    assert_eq!(p.models[0].patterns, ["/*", "/x"]);
    let p = one("name : t\nrule : /*/access_log\n---\nx = chars(1) ;\n").unwrap();
    assert_eq!(p.route(Route::Path("/nginx/access_log")), Ok(0));
    // Next to another model, it claims that model's paths too.
    let other = "name : n\nrule : /nginx/*\n---\nx = chars(1) ;\n";
    let all = "name : all\nrule : /*\n---\nx = chars(1) ;\n";
    let e = compile(&[Source { file: "a.oml", text: other }, Source { file: "b.oml", text: all }], (0, 0)).unwrap_err();
    assert!(e[0].diagnostics[0].message.contains("is claimed both by this model and by model `n`"), "{e:?}");
}

#[test]
fn block_comments_still_work_elsewhere() {
    let src = "/* a model\n   for everything */\nname : all /* the name */\n/* before the rule */\nrule : /* /a # a comment\n  // a comment line\n  /b // trailing\nenable : true /* on */\n---\n/* a block */ x = /* inline */ chars(1) ; /* after */\ny = read(/* in args */ x) ;\n/* unclosed";
    let p = one(src).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(p.models[0].patterns, ["/*", "/a", "/b"]);
    assert_eq!(p.models[0].stmts.len(), 2);
}

#[test]
fn a_block_comment_in_a_pattern_list_is_an_error_not_a_catch_all() {
    let src = "name : t\nrule : /a /* old: /b */\n---\nx = chars(1) ;\n";
    let e = one(src).unwrap_err();
    assert!(e[0].diagnostics[0].message.starts_with("invalid rule pattern"), "{e:?}");
    let src = "name : t\nrule : /a /* old /b */\n---\nx = chars(1) ;\n";
    let d = &one(src).unwrap_err()[0].diagnostics[0];
    assert_eq!(d.message, "`/* … */` is not a comment in a `rule :` pattern list: `/*` is the catch-all pattern");
    assert_eq!((d.line, d.column, d.span.end - d.span.start), (2, 11, "/* old /b */".len() as u32));
    // One token that opens and closes is a pattern (`/*/` ends with `/`).
    assert_eq!(one("name : t\nrule : /*/\n---\nx = chars(1) ;\n").unwrap().models[0].patterns, ["/*/"]);
}

#[test]
fn long_patterns_with_many_stars_are_checked_quickly() {
    // Patterns at the limit, made to make the overlap search branch at every
    // step; two models overlap (the check finds the shared path), two do not.
    let a: String = "*a".repeat(512);
    let b: String = "a*".repeat(512);
    let c: String = "*b".repeat(511) + "?c";
    assert_eq!((a.len(), b.len(), c.len()), (1024, 1024, 1024));
    let model = |name: &str, pat: &str| format!("name : {name}\nrule : {pat}\n---\nx = chars(1) ;\n");
    let (ma, mb, mc) = (model("a", &a), model("b", &b), model("c", &c));
    let e = compile(&[Source { file: "a.oml", text: &ma }, Source { file: "b.oml", text: &mb }], (0, 0)).unwrap_err();
    assert!(e[0].diagnostics[0].message.contains("is claimed both"));
    let w = omlet_lang::route::overlap(&a, &b).unwrap();
    assert!(omlet_lang::route::matches(&a, &w) && omlet_lang::route::matches(&b, &w));
    assert!(compile(&[Source { file: "a.oml", text: &ma }, Source { file: "c.oml", text: &mc }], (0, 0)).is_ok());
}

#[test]
fn a_pattern_over_the_limit_is_an_error_at_the_pattern() {
    let long = format!("/{}", "*x".repeat(30 << 10));
    let src = format!("name : t\nrule : /a {long}\n---\nx = chars(1) ;\n");
    let e = one(&src).unwrap_err();
    let d = &e[0].diagnostics[0];
    assert_eq!(d.message, format!("rule pattern is {} bytes long, more than the limit of 1024", long.len()));
    assert_eq!((d.line, d.column), (2, 11));
    assert_eq!(d.span.end as usize - d.span.start as usize, long.len());
    let mut limits = Limits::default();
    limits.max_pattern_bytes = 64 << 10;
    assert!(compile_with_limits(&[Source { file: "t.oml", text: &src }], (0, 0), limits).is_ok());
}
