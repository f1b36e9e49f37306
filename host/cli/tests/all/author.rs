//! The rule author's experience (issue 17): no silent loss, errors that
//! point at the fix, and a command line that behaves like jq's and opa's.

use crate::cli::{omlet, omlet_with_input, text};

fn rule_file(dir: &tempfile::TempDir, name: &str, body: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

const LOOKUP: &str = "name : z\n---\nzone = select zone from ip_zone where ip = read(ip) ;\n";

#[test]
fn a_rule_set_with_lookups_and_no_knowledge_is_refused_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "z.oml", LOOKUP);
    let out = omlet_with_input(&["run", &rule], b"{\"ip\":\"1.2.3.4\"}\n");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert!(err.contains("z.oml:3:8") && err.contains("ip_zone") && err.contains("--knowdb"), "{err}");
    let out = omlet_with_input(&["run", &rule, "--no-knowledge"], b"{\"ip\":\"1.2.3.4\"}\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "{}\n");
}

#[test]
fn empty_csv_cells_are_absent_so_defaults_apply_or_text_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "d.oml", "name : t\n---\nb = read(b) { _ : chars(none) } ;\n");
    let csv = rule_file(&dir, "in.csv", "a,b\nx,\nx,y\n");
    let out = omlet(&["run", &rule, "--input", &csv]);
    assert_eq!(text(&out.stdout), "{\"b\":\"none\"}\n{\"b\":\"y\"}\n", "{}", text(&out.stderr));
    let out = omlet(&["run", &rule, "--input", &csv, "--csv-empty", "text"]);
    assert_eq!(text(&out.stdout), "{\"b\":\"\"}\n{\"b\":\"y\"}\n", "{}", text(&out.stderr));
}

#[test]
fn a_dash_means_standard_input_or_output() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "p.oml", "name : p\n---\nv = read(id) ;\n");
    // run --output -
    let out = omlet_with_input(&["run", &rule, "--output", "-"], b"{\"id\":1}\n");
    assert_eq!(text(&out.stdout), "{\"v\":1}\n");
    assert!(!std::path::Path::new("-").exists() && !crate::root().join("-").exists());
    // build -o - writes the component itself
    let out = omlet(&["build", &rule, "-o", "-"]);
    assert!(out.stdout.starts_with(b"\0asm"), "{}", text(&out.stderr));
    // fmt - and check -
    let out = omlet_with_input(&["fmt", "-"], b"name:t\n---\na=read(x);\n");
    assert_eq!(text(&out.stdout), "name : t\n---\na = read(x) ;\n");
    let out = omlet_with_input(&["check", "-"], b"name : t\n---\na = read(x)\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("<stdin>:3:12"), "{}", text(&out.stderr));
}

#[test]
fn stats_takes_its_value_with_equals_and_models_are_checked_first() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "p.oml", "name : p\n---\nv = read(id) ;\n");
    // `--stats` before the rule does not swallow it.
    let out = omlet_with_input(&["run", "--stats", &rule], b"{\"id\":1}\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = omlet_with_input(&["run", "--stats=json", &rule], b"{\"id\":1}\n");
    assert!(text(&out.stderr).contains("\"records\":1"), "{}", text(&out.stderr));
    // An unknown model is refused before any record is read.
    let out = omlet_with_input(&["run", &rule, "--model", "nope"], b"{\"id\":1}\n{\"id\":2}\n");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("--model nope") && err.contains("its models: p"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn inspect_builds_rule_files_and_refuses_other_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "z.oml", LOOKUP);
    let out = omlet(&["inspect", &rule]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("select zone from ip_zone"), "{}", text(&out.stdout));
    let junk = rule_file(&dir, "junk.wasm", "not wasm at all");
    let out = omlet(&["inspect", &junk]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not a WebAssembly component"), "{}", text(&out.stderr));
}

#[test]
fn test_runs_a_directory_filters_cases_and_names_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let case = |name: &str, out: &str| {
        format!(
            "[[case]]\nname = \"{name}\"\noml = '''\nname : t\n---\nv = read(a) ;\n'''\ninput = '{{\"a\":1}}'\nexpected = '{out}'\n"
        )
    };
    rule_file(&dir, "a.toml", &format!("{}{}", case("first_ok", "{\"v\":1}"), case("second_bad", "{\"v\":2}")));
    std::fs::create_dir(dir.path().join("more")).unwrap();
    rule_file(&dir, "more/b.toml", &case("third_ok", "{\"v\":1}"));
    let d = dir.path().to_str().unwrap();
    let out = omlet(&["test", d]);
    assert!(text(&out.stdout).ends_with("2 passed, 1 failed\n"), "{}", text(&out.stdout));
    let out = omlet(&["test", d, "--filter", "_ok"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).ends_with("2 passed, 0 failed\n"), "{}", text(&out.stdout));
    let bad = rule_file(&dir, "typo.toml", "[[case]]\nname = \"t\"\noml = 'x'\nexpect = '{}'\n");
    let out = omlet(&["test", &bad]);
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("unknown key `expect` (did you mean `expected`?)"), "{}", text(&out.stderr));
}
