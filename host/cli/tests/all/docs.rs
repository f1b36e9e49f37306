//! The examples of docs/language.md are tests: each `oml` block runs with
//! its `# input:` (and `# knowledge:`, `# input_types:`) through the wasm component and the
//! native evaluator, and must give its `# output:`, fail to compile with
//! an error containing its `# error:` text, or fail the record with an
//! error containing its `# record error:` text.

use omlet_cli::conformance::{Mode, run_file};

use crate::root;

struct Example {
    line: usize,
    oml: String,
    input: String,
    knowledge: Option<String>,
    input_types: Option<String>,
    output: Option<String>,
    error: Option<String>,
    record_error: Option<String>,
}

fn examples(markdown: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut lines = markdown.lines().enumerate();
    while let Some((n, l)) = lines.next() {
        if l.trim() != "```oml" {
            continue;
        }
        let mut body = Vec::new();
        for (_, l) in lines.by_ref() {
            if l.trim() == "```" {
                break;
            }
            body.push(l);
        }
        let directive = |key: &str| body.iter().find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()));
        let text = body.join("\n") + "\n";
        let oml = if body.iter().any(|l| l.starts_with("name :")) { text } else { format!("name : example\n---\n{text}") };
        out.push(Example {
            line: n + 1,
            oml,
            input: directive("# input:").unwrap_or_else(|| "{}".into()),
            knowledge: directive("# knowledge:"),
            input_types: directive("# input_types:"),
            output: directive("# output:"),
            error: directive("# error:"),
            record_error: directive("# record error:"),
        });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_of_the_language_reference_runs() {
    let md = std::fs::read_to_string(root().join("docs/language.md")).unwrap();
    let all = examples(&md);
    assert!(all.len() >= 25, "only {} examples", all.len());
    let mut cases = Vec::new();
    for e in &all {
        assert!(
            [e.output.is_some(), e.error.is_some(), e.record_error.is_some()].iter().filter(|x| **x).count() == 1,
            "docs/language.md:{}: an example needs one of `# output:`, `# error:` and `# record error:`",
            e.line
        );
        if let Some(want) = &e.error {
            let errors = omlet_lang::compile(&[omlet_lang::Source { file: "example.oml", text: &e.oml }], (0, 0))
                .expect_err(&format!("docs/language.md:{}: the example compiles", e.line));
            let first = &errors[0].diagnostics[0].message;
            assert!(first.contains(want.as_str()), "docs/language.md:{}: the error is `{first}`, not `{want}`", e.line);
            continue;
        }
        let mut case = toml::Table::new();
        case.insert("name".into(), format!("docs/language.md:{}", e.line).into());
        case.insert("oml".into(), e.oml.clone().into());
        case.insert("input".into(), e.input.clone().into());
        if let Some(k) = &e.knowledge {
            case.insert("knowledge".into(), k.clone().into());
        }
        if let Some(t) = &e.input_types {
            // `a=time, b=ip`, as `omlet run --input-types` takes them.
            let types: toml::Table = t
                .split(',')
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim().to_string(), toml::Value::from(v.trim())))
                .collect();
            case.insert("input_types".into(), types.into());
        }
        match &e.record_error {
            Some(want) => case.insert("expected_record_error".into(), want.clone().into()),
            None => case.insert("expected".into(), e.output.clone().unwrap_or_default().into()),
        };
        cases.push(toml::Value::Table(case));
    }
    let mut file = toml::Table::new();
    file.insert("case".into(), toml::Value::Array(cases));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("language.toml");
    std::fs::write(&path, toml::to_string(&file).unwrap()).unwrap();
    let engine = omlet::Engine::new().unwrap();
    passes_both_ways(&path, &engine).await;
}

/// Runs a case file through the component and natively: it must hold cases,
/// and every one must pass both ways.
async fn passes_both_ways(path: &std::path::Path, engine: &omlet::Engine) {
    for mode in [Mode::Wasm, Mode::Native] {
        let outcomes = run_file(path, mode, engine).await.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!outcomes.is_empty(), "{} has no case", path.display());
        let failures: Vec<String> =
            outcomes.into_iter().filter_map(|o| o.failure.map(|f| format!("{} ({mode:?}): {f}", o.name))).collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

/// docs/testing.md documents every key a case may have, in its key table
/// or in `[defaults]`, and each of its case files that needs no other file
/// passes, through the component and natively; those files show the keys
/// a case rarely needs (`expected_record_error`, `rule_path`, `model`,
/// `intranet_nets`, `[defaults]`) at work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_testing_guide_documents_every_case_key_and_its_cases_pass() {
    let md = std::fs::read_to_string(root().join("docs/testing.md")).unwrap();
    let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    for key in omlet_cli::conformance::CASE_KEYS {
        assert!(table.iter().any(|row| row.contains(&format!("`{key}`"))), "docs/testing.md: the key `{key}` is in no table row");
    }
    let blocks: Vec<&str> = md.split("```toml\n").skip(1).filter_map(|b| b.split("```").next()).collect();
    let runnable: Vec<&str> = blocks.iter().copied().filter(|b| !b.contains("oml_file") && !b.contains("knowdb")).collect();
    let shown = runnable.concat();
    for key in ["expected_record_error", "expected_error", "rule_path", "model", "intranet_nets", "[defaults]"] {
        assert!(shown.contains(key), "docs/testing.md: no runnable case file shows `{key}`");
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = omlet::Engine::new().unwrap();
    for (i, block) in runnable.iter().enumerate() {
        let path = dir.path().join(format!("guide{i}.toml"));
        std::fs::write(&path, block).unwrap();
        passes_both_ways(&path, &engine).await;
    }
}
