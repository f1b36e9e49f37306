//! Helpers for the native tests of the language.
#![allow(dead_code, reason = "each test binary uses part of the helpers")]

use omlet_lang::eval::Offline;
use omlet_lang::pipes::write_json;
use omlet_lang::value::{Field, Value};
use omlet_lang::{Diagnostic, Source, compile};

/// No knowledge; a fixed clock (2024-01-15 14:30:00 UTC, UTC+8).
pub fn no_knowledge() -> Offline {
    Offline::at((1_705_329_000_000_000_000, 8 * 3600))
}

/// The diagnostics of a rule that must not compile.
pub fn errors(src: &str) -> Vec<Diagnostic> {
    match compile(&[Source { file: "t.oml", text: src }], (0, 0)) {
        Ok(_) => panic!("the rule compiled:\n{src}"),
        Err(files) => files.into_iter().flat_map(|f| f.diagnostics).collect(),
    }
}

/// Runs `statements` (after a header) over one input field `v` and renders
/// the output as JSON.
pub fn eval_with(statements: &str, input: Vec<Field<'static>>) -> String {
    let src = format!("name : t\n---\n{statements}\n");
    let program = compile(&[Source { file: "t.oml", text: &src }], (0, 0)).unwrap_or_else(|e| panic!("{:?}", e[0].diagnostics));
    let out = omlet_lang::evaluate(&program, 0, input, &mut no_knowledge()).unwrap();
    let mut s = String::from("{");
    for (i, f) in out.iter().filter(|f| !matches!(f.value, Value::Ignore)).enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!("\"{}\":", f.name));
        write_json(&f.value, &mut s, false);
    }
    s.push('}');
    s
}

/// One pipe over one value: `x = read(v) | <pipe> ;`, or `{}` when absent.
pub fn pipe(p: &str, v: Value<'static>) -> String {
    eval_with(&format!("x = read(v) | {p} ;"), vec![Field::new("v", v)])
}

pub fn chars(s: &str) -> Value<'static> {
    Value::Chars(s.to_string().into())
}

// ----- the repository's rules, for the syntax-tree and fmt tests ---------------

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files under `dir` (recursively) ending in `.ext`, in name order.
pub fn files(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    let mut out = Vec::new();
    for p in entries {
        if p.is_dir() {
            out.extend(files(&p, ext));
        } else if p.extension().is_some_and(|e| e == ext) {
            out.push(p);
        }
    }
    out
}

/// The `oml = '''…'''` rule texts of the case files under `dir` (relative to
/// the repository), each with where it comes from. No TOML reader here: the
/// corpus writes every rule as a multi-line literal string.
pub fn case_rules(dir: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for f in files(&repo().join(dir), "toml") {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, rest) in text.split("\noml = '''\n").skip(1).enumerate() {
            out.push((format!("{} case {i}", f.display()), rest[..rest.find("'''").unwrap()].to_string()));
        }
    }
    out
}

/// The example rule files (`examples/**/*.oml`), each with its path.
pub fn example_rules() -> Vec<(String, String)> {
    files(&repo().join("examples"), "oml")
        .into_iter()
        .map(|f| (f.display().to_string(), std::fs::read_to_string(&f).unwrap()))
        .collect()
}
