//! `omlet fmt` (`omlet_lang::fmt`) over every rule the repository holds:
//! each formats to the same program, and formatting again changes nothing.

mod common;
use common::{case_rules, example_rules};

use omlet_lang::fmt::format_source;

fn formats_stably(what: &str, src: &str) {
    let out = format_source(src).unwrap_or_else(|e| panic!("{what}: {e}\n{src}"));
    let again = format_source(&out).unwrap_or_else(|e| panic!("{what}: second pass: {e}\n{out}"));
    assert_eq!(out, again, "{what}: not idempotent");
}

#[test]
fn corpus_rules_format_to_the_same_program() {
    let mut formatted = 0;
    for dir in ["tests/conformance", "tests/cases"] {
        for (what, src) in case_rules(dir) {
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
    let examples = example_rules();
    assert!(examples.len() >= 3, "{}", examples.len());
    for (what, src) in examples {
        formats_stably(&what, &src);
    }
}
