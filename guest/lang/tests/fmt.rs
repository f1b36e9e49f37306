//! `omlet fmt` (`omlet_lang::fmt`) over every rule the repository holds:
//! each formats to the same program, and formatting again changes nothing.

use std::path::{Path, PathBuf};

use omlet_lang::fmt::format_source;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `oml = '''…'''` rule texts of the case files under `dir` (the corpus
/// writes every rule as a multi-line literal string).
fn case_rules(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for f in files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "toml")) {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, rest) in text.split("\noml = '''\n").skip(1).enumerate() {
            out.push((format!("{} case {i}", f.display()), rest[..rest.find("'''").unwrap()].to_string()));
        }
    }
    out
}

fn formats_stably(what: &str, src: &str) {
    let out = format_source(src).unwrap_or_else(|e| panic!("{what}: {e}\n{src}"));
    let again = format_source(&out).unwrap_or_else(|e| panic!("{what}: second pass: {e}\n{out}"));
    assert_eq!(out, again, "{what}: not idempotent");
}

#[test]
fn corpus_rules_format_to_the_same_program() {
    let mut formatted = 0;
    for dir in ["tests/conformance", "tests/cases"] {
        for (what, src) in case_rules(&repo().join(dir)) {
            // Rules that must not compile are not formatted.
            if omlet_lang::compile(&[omlet_lang::Source { file: "x.oml", text: &src }], (0, 0)).is_err() {
                continue;
            }
            formats_stably(&what, &src);
            formatted += 1;
        }
    }
    assert!(formatted >= 150, "only {formatted} rules formatted");
}

#[test]
fn examples_format_to_the_same_program() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "oml") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo().join("examples"), &mut files);
    assert!(files.len() >= 3, "{}", files.len());
    for f in files {
        formats_stably(&f.display().to_string(), &std::fs::read_to_string(&f).unwrap());
    }
}
