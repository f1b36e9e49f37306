//! The overlap check of a rule set is bounded in total, not only per pair
//! of patterns: a set with too many long patterns fails quickly with a clear
//! error, at the pattern where the budget runs out, and ordinary sets pass.

use std::time::{Duration, Instant};

use omlet_lang::{Diagnostic, FileErrors, Limits, Program, Source, compile, compile_with_limits};

/// A model named `name` claiming `patterns`, one per line.
fn model(name: &str, patterns: &[String]) -> String {
    format!("name : {name}\nrule :\n    {}\n---\nx = take() ;\n", patterns.join("\n    "))
}

/// `n` disjoint patterns of about `len` bytes, all starting with `/{tag}/`:
/// those of two tags never overlap, so every pair is compared in full.
fn patterns(tag: &str, n: usize, len: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let head = format!("/{tag}/{i}/");
            format!("{head}{}", "x".repeat(len.saturating_sub(head.len())))
        })
        .collect()
}

fn build(files: &[(&str, String)], limits: Limits) -> (Result<Program, Vec<FileErrors>>, Duration) {
    let sources: Vec<Source<'_>> = files.iter().map(|(f, t)| Source { file: f, text: t }).collect();
    let t = Instant::now();
    let r = compile_with_limits(&sources, (0, 0), limits);
    (r, t.elapsed())
}

fn diagnostics(r: Result<Program, Vec<FileErrors>>) -> Vec<(String, Diagnostic)> {
    match r {
        Ok(_) => panic!("the set compiled"),
        Err(files) => files.into_iter().flat_map(|f| f.diagnostics.into_iter().map(move |d| (f.file.clone(), d))).collect(),
    }
}

const MESSAGE: &str = "the rule set's `rule :` patterns are too many and too long to check for overlaps";

#[test]
fn two_files_of_long_patterns_fail_quickly_at_the_budget() {
    // Two files near the source limit, each ~1000 patterns of 1 KiB: about
    // 10^12 steps unbounded.
    let a = model("a", &patterns("a", 1000, 1024));
    let b = model("b", &patterns("b", 1000, 1024));
    assert!(a.len() > 1_000_000 && a.len() <= Limits::default().max_source_bytes);
    let (r, took) = build(&[("a.oml", a), ("b.oml", b.clone())], Limits::default());
    let diags = diagnostics(r);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let (file, d) = &diags[0];
    assert_eq!(file, "b.oml");
    assert!(d.message.starts_with(MESSAGE), "{}", d.message);
    assert!(d.message.ends_with("use fewer or shorter patterns"), "{}", d.message);
    assert!(d.message.contains("model `a` in a.oml"), "{}", d.message);
    // At a pattern of b.oml: the budget (2^26) is passed comparing its
    // first pattern with about the 64th of a.oml.
    let at = d.span.start as usize;
    assert!(b[at..].starts_with("/b/0/"), "error at {at}: {:?}", &b[at..at + 20]);
    assert_eq!((d.line, d.column), (3, 5));
    assert!(took < Duration::from_secs(30), "took {took:?}");
    eprintln!("over the budget: failed in {took:?}");
}

#[test]
fn the_budget_counts_pairs_across_the_whole_set() {
    // Many small files, each within any per-file limit: the pairs between
    // them are what adds up.
    let files: Vec<(String, String)> =
        (0..40).map(|i| (format!("m{i}.oml"), model(&format!("m{i}"), &patterns(&format!("m{i}"), 4, 1000)))).collect();
    let files: Vec<(&str, String)> = files.iter().map(|(f, t)| (f.as_str(), t.clone())).collect();
    // 40 models, 4 patterns each: 780 model pairs · 16 pattern pairs ·
    // ~10^6 steps ≈ 1.25·10^10. With a budget of 2^24, that of about 16
    // pattern pairs (all of m1 against m0), the check stops in the third
    // file, at its first pattern, against m0.
    let mut limits = Limits::default();
    limits.max_overlap_work = 1 << 24;
    let (r, took) = build(&files, limits);
    let diags = diagnostics(r);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].0, "m2.oml", "{diags:#?}");
    assert!(diags[0].1.message.starts_with(MESSAGE), "{:?}", diags[0]);
    assert!(diags[0].1.message.contains("model `m0` in m0.oml"), "{:?}", diags[0]);
    assert_eq!(diags[0].1.line, 3);
    eprintln!("40 files over a budget of 2^24: failed in {took:?}");

    // With the budget raised past the total, the same set compiles (with a
    // smaller pattern length, to keep the test fast).
    let small: Vec<(String, String)> =
        (0..40).map(|i| (format!("m{i}.oml"), model(&format!("m{i}"), &patterns(&format!("m{i}"), 4, 60)))).collect();
    let small: Vec<(&str, String)> = small.iter().map(|(f, t)| (f.as_str(), t.clone())).collect();
    let mut tight = Limits::default();
    tight.max_overlap_work = 780 * 16 * 61 * 61 + 1;
    assert!(build(&small, tight).0.is_ok());
    tight.max_overlap_work = 1000;
    let diags = diagnostics(build(&small, tight).0);
    assert_eq!(diags.len(), 1, "reported once: {diags:#?}");
    assert!(diags[0].1.message.contains("limit of 1000 steps"), "{:?}", diags[0]);
}

#[test]
fn disabled_models_and_name_clashes_still_work_past_the_budget() {
    let mut limits = Limits::default();
    limits.max_overlap_work = 10;
    // A disabled model costs nothing: no pairs are compared.
    let a = model("a", &patterns("a", 3, 20));
    let off = model("off", &patterns("o", 3, 20)).replace("---", "enable : false\n---");
    assert!(build(&[("a.oml", a.clone()), ("off.oml", off)], limits).0.is_ok());
    // Past the budget, duplicate names are still reported.
    let dup = model("a", &patterns("b", 3, 20));
    let diags = diagnostics(build(&[("a.oml", a.clone()), ("dup.oml", dup)], limits).0);
    assert_eq!(diags.len(), 2, "{diags:#?}");
    assert!(diags.iter().any(|(_, d)| d.message == "model `a` is also defined in a.oml"), "{diags:#?}");
    assert!(diags.iter().any(|(_, d)| d.message.starts_with(MESSAGE)), "{diags:#?}");
}

#[test]
fn ordinary_sets_pass_within_the_default_budget() {
    // Three dozen models of a few realistic patterns each, plus a catch-all
    // of a disabled model and long-ish patterns: well within the budget.
    let mut files = Vec::new();
    for i in 0..36 {
        let pats = vec![
            format!("/dev{i}/access_log"),
            format!("/dev{i}/error/*"),
            format!("/dev{i}/audit/????/{}", "seg/".repeat(10)),
            format!("/dev{i}/*/x{i}"),
        ];
        files.push((format!("m{i}.oml"), model(&format!("m{i}"), &pats)));
    }
    files.push(("all.oml".into(), model("all", &["/*".to_string()]).replace("---", "enable : false\n---")));
    let sources: Vec<Source<'_>> = files.iter().map(|(f, t)| Source { file: f, text: t }).collect();
    let t = Instant::now();
    let program = compile(&sources, (0, 0)).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(program.models.len(), 37);
    eprintln!("37 models, 145 patterns: compiled in {:?}", t.elapsed());
}
