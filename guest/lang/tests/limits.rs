//! Hostile rule text: deep nesting, huge patterns and files, copies that
//! multiply. Each is a compile error with a position, never a crash, and the
//! deepest rule the limits allow compiles and runs on a small stack.

mod common;
use common::{errors, no_knowledge};
use omlet_lang::value::Field;
use omlet_lang::{Diagnostic, Limits, Program, Route, Source, compile, compile_with_limits, evaluate};

const LIMIT: usize = 64;

fn build(statements: &str) -> Result<Program, Vec<Diagnostic>> {
    let src = format!("name : t\n---\n{statements}\n");
    compile(&[Source { file: "t.oml", text: &src }], (0, 0)).map_err(|e| e.into_iter().flat_map(|f| f.diagnostics).collect())
}

/// Each recursive path of the parser, `d` levels deep.
fn nested(kind: &str, d: usize) -> String {
    let r = |s: &str| s.repeat(d);
    match kind {
        "object" => format!("x = {}chars(1){} ;", r("object { a = "), r(" }")),
        "match_arm" => format!("x = {}chars(1){} ;", r("match read(a) { chars(1) => "), r(" }")),
        "match_default" => format!("x = {}chars(1){} ;", r("match read(a) { chars(1) => chars(2), _ => "), r(" }")),
        "default_body" => format!("x = {}chars(1){} ;", r("read(a) { _ : "), r(" }")),
        "sql_group" => format!("x = select a from t where {}k = read(v){} ;", r("("), r(")")),
        "sql_not" => format!("x = select a from t where {}k = read(v) ;", r("not ")),
        "sql_call" => format!("x = select a from t where k = {}read(v){} ;", r("f("), r(")")),
        "sql_default" => format!("x = select a from t where k = {}chars(1){} ;", r("read(v) { _ : "), r(" }")),
        "static" => format!("static {{ s = {}chars(1){} ; }}\nx = chars(1) ;", r("object { a = "), r(" }")),
        _ => unreachable!(),
    }
}

const KINDS: &[&str] =
    &["object", "match_arm", "match_default", "default_body", "sql_group", "sql_not", "sql_call", "sql_default", "static"];

#[test]
fn nesting_past_the_limit_is_an_error_at_the_level_that_passes_it() {
    for kind in KINDS {
        for d in [2 * LIMIT, 50 * LIMIT] {
            // A later broken statement is still reported: recovery skips the
            // whole deep statement, not one level of it.
            let src = format!("{}\ny = digit(q) ;", nested(kind, d));
            let diags = build(&src).err().unwrap_or_else(|| panic!("{kind} at {d} compiled"));
            assert_eq!(diags.len(), 2, "{kind} at {d}: {diags:#?}");
            let deep = &diags[0];
            assert_eq!(deep.message, "nesting deeper than 64 levels (the parser's depth limit)", "{kind}");
            assert!(deep.hint.as_deref().is_some_and(|h| h.contains("flatten")), "{kind}");
            // The span is where the limit is passed: past 60 levels of the
            // construct, and on its line.
            let full = format!("name : t\n---\n{src}\n");
            let at = deep.span.start as usize;
            let level = nested(kind, 60).len() - nested(kind, 0).len();
            assert!(at > level / 2 && at < full.len(), "{kind}: error at {at}");
            assert!(diags[1].message.contains("digit literal does not parse"), "{kind}: {diags:#?}");
        }
    }
}

#[test]
fn the_deepest_rule_the_limit_allows_compiles_and_runs_on_a_one_mib_stack() {
    // The guest's wasm stack is 1 MiB; this is an unoptimised native build,
    // whose frames are larger. Compiling, serialising, reading back and
    // evaluating the deepest accepted rule of each kind must fit.
    let run = || {
        for kind in KINDS {
            let (d, program) = (1..=LIMIT)
                .rev()
                .find_map(|d| build(&nested(kind, d)).ok().map(|p| (d, p)))
                .unwrap_or_else(|| panic!("no depth of {kind} compiles"));
            assert!(d + 4 >= LIMIT, "{kind}: only {d} levels compile");
            let program = Program::from_bytes(&program.to_bytes()).unwrap();
            let model = program.route(Route::Only).unwrap();
            let input = vec![Field::new("a", omlet_lang::Value::Digit(1))];
            let out = evaluate(&program, model, input, &mut no_knowledge()).unwrap();
            assert!(!kind.starts_with("sql") || out.is_empty(), "{kind}: {out:?}");
            drop(program);
        }
    };
    std::thread::Builder::new().stack_size(1 << 20).spawn(run).unwrap().join().unwrap();
}

#[test]
fn the_depth_limit_is_configurable() {
    let mut limits = Limits::default();
    limits.max_depth = 4;
    let text = |d| format!("name : t\n---\n{}\n", nested("object", d));
    let with = |d: usize| compile_with_limits(&[Source { file: "t.oml", text: &text(d) }], (0, 0), limits);
    assert!(with(3).is_ok());
    let e = with(4).err().unwrap();
    assert_eq!(e[0].diagnostics[0].message, "nesting deeper than 4 levels (the parser's depth limit)");
    // The innermost `chars(1)` is the fifth level.
    let src = text(4);
    assert_eq!(e[0].diagnostics[0].span.start as usize, src.find("chars(1)").unwrap());
}

#[test]
fn copies_that_multiply_are_bounded() {
    // Two names per level double the program at each level: 2^40 members.
    let src = format!("x = {}chars(1){} ;", "object { a, b = ".repeat(40), " }".repeat(40));
    let d = build(&src).err().unwrap();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(d[0].message.contains("expands past 4194304 bytes of copies"), "{d:#?}");
    // A static value copied a million times.
    let big = "y".repeat(64 << 10);
    let src = format!("static {{ s = chars({big}) ; }}\n{}", (0..100).map(|i| format!("x{i} = s ;\n")).collect::<String>());
    assert!(build(&src).err().unwrap()[0].message.contains("expands past"));
    // A static cannot nest others (delta §14), so no chain of them can nest deep.
    let chain: String = (1..100).map(|i| format!("s{i} = object {{ a = s{} }} ;\n", i - 1)).collect();
    let d = build(&format!("static {{ s0 = chars(1) ;\n{chain}}}\nx = s99 ;")).err().unwrap();
    assert_eq!(d[0].message, "a static binding holds constants only: another static symbol is not one");
    // Real multi-name members stay far below the limit.
    let p = build("x = object { a, b, c = object { d, e = read(v) } } ;").unwrap();
    assert_eq!(p.models[0].stmts.len(), 1);
}

#[test]
fn a_rule_file_over_the_size_limit_is_an_error() {
    let statements = "x = chars(1) ;\n".repeat((1 << 20) / 15 + 1);
    let src = format!("name : t\n---\n{statements}");
    assert!(src.len() > 1 << 20);
    let d = errors(&src);
    assert_eq!(d.len(), 1);
    assert!(
        d[0].message.starts_with(&format!("the rule file is {} bytes long, more than the limit of 1048576 bytes", src.len()))
    );
    assert_eq!(d[0].span.start, 1 << 20);
    // Within a larger limit it compiles.
    let mut limits = Limits::default();
    limits.max_source_bytes = 2 << 20;
    assert!(compile_with_limits(&[Source { file: "t.oml", text: &src }], (0, 0), limits).is_ok());
}

#[test]
fn many_parameters_with_one_name_get_numbered_quickly() {
    // Each parameter's name search used to scan every earlier name for every
    // candidate suffix: cubic in the number of parameters.
    let n = 5_000;
    let cond = vec!["k = read(v)"; n].join(" or ");
    let p = build(&format!("x = select a from t where {cond} ;")).unwrap();
    let params = &p.statements[0].params;
    assert_eq!(params.len(), n);
    assert_eq!((&params[0][..], &params[1][..], &params[n - 1][..]), ("k", "k_2", "k_5000"));
    // A hint that looks like a numbered one still gets a free name.
    let p = build("x = select a from t where k = read(v) and k_2 = read(w) and k = read(u) ;").unwrap();
    assert_eq!(p.statements[0].params, ["k", "k_2", "k_3"]);
}

#[test]
fn a_regex_too_large_to_compile_is_a_compile_error() {
    // Silently never matching would hide it; a pattern that is not a regex
    // still never matches (§8.7.4), so only the size is an error.
    let err = build("x = match read(a) { regex_match('\\w{1000}\\w{1000}\\w{1000}') => chars(1), _ => chars(2) } ;").unwrap_err();
    assert!(err.iter().any(|d| d.message.contains("too large to compile")), "{err:?}");
    assert!(build("x = match read(a) { regex_match('[a-z]+') => chars(1), _ => chars(2) } ;").is_ok());
}

#[test]
fn an_error_on_a_long_line_shows_an_excerpt_not_the_line() {
    // 900 KB on one line: the rendered error must stay small.
    let filler = "chars(1), ".repeat(90_000);
    let src = format!("name : t\n---\nx = match read(a) {{ {filler} }} ;\n");
    let errs = compile(&[Source { file: "t.oml", text: &src }], (0, 0)).unwrap_err();
    let d = &errs[0].diagnostics[0];
    let shown = d.render("t.oml", &src);
    assert!(shown.len() < 1000, "{} bytes rendered", shown.len());
    assert!(shown.contains('^') && shown.contains('…'), "{shown}");
}
