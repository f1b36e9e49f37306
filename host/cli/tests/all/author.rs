//! The rule author's experience: no silent loss, errors that
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

/// Issue 31: `omlet inspect --knowdb` shows the path each lookup takes.
#[test]
fn inspect_shows_each_lookups_path_given_a_knowdb() {
    let root = crate::root();
    let rule = root.join("examples/nginx/nginx.oml");
    let knowdb = root.join("examples/nginx/knowdb/knowdb.toml");
    let out = omlet(&["inspect", rule.to_str().unwrap(), "--knowdb", knowdb.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("path: memory: ranges lo_int..hi_int of ip_zone"), "{}", text(&out.stdout));
    let out = omlet(&["inspect", "--json", rule.to_str().unwrap(), "--knowdb", knowdb.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let path = v["models"][0]["statements"][0]["path"].as_str().unwrap_or_default().to_string();
    assert!(path.starts_with("memory: ranges"), "{path}");
}

/// Issue 33: `omlet test` names every field whose type is wrong, not the
/// first only.
#[test]
fn test_reports_every_type_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("t.toml");
    std::fs::write(
        &cases,
        "[[case]]\nname = \"types\"\noml = \"name : t\\n---\\na = read(a) ;\\nb = read(b) ;\\n\"\n\
         input = '{\"a\":\"1\",\"b\":\"2\"}'\nexpected = '{\"a\":\"1\",\"b\":\"2\"}'\n\
         expected_types = { \"a\" = \"digit\", \"b\" = \"ip\" }\n",
    )
    .unwrap();
    let out = omlet(&["test", cases.to_str().unwrap()]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        all.contains("field a: expected type digit, got chars") && all.contains("field b: expected type ip, got chars"),
        "{all}"
    );
}

/// Issue 33: a misspelled SQL helper is named by `omlet check` even without
/// a knowledge base, with the helper it is nearest to.
#[test]
fn check_names_a_misspelled_sql_helper() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "f.oml", "name : f\n---\nz = select zone from nets where cidr4_contain(read(ip), cidr) = 1 ;\n");
    let out = omlet(&["check", &rule]);
    assert_eq!(out.status.code(), Some(0), "a warning, not an error: {}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "f.oml:3:5: warning: lookup calls `cidr4_contain`, which is not one of OML's helpers: did you mean `cidr4_contains`?"
        ),
        "{err}"
    );
    let fine =
        rule_file(&dir, "g.oml", "name : g\n---\nz = select count(ip) from nets where cidr4_contains(read(ip), cidr) = 1 ;\n");
    assert!(!text(&omlet(&["check", &fine]).stderr).contains("warning"));
}

/// `omlet check` names the release of OML a rule needs, and the forms only
/// omlet has; a v1.17 rule gets no such line.
#[test]
fn check_names_the_language_version_a_rule_needs() {
    let dir = tempfile::tempdir().unwrap();
    let new = rule_file(
        &dir,
        "new.oml",
        "name : n\n---\na = array { read(x) ; } ;\nb = pipe read(t) | Time::from_ts(0) ;\nc = pipe read(s) | lower ;\n",
    );
    let old = rule_file(&dir, "old.oml", "name : o\n---\na = read(x) ;\n");
    let out = omlet(&["check", &new, &old]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("new.oml: needs OML 1.25.4 or later (array { } 1.25.3 at 3:5, Time::from_ts 1.25.4 at 4:5); beyond the reference, omlet only: lower at 5:5"),
        "{err}"
    );
    assert!(!err.contains("old.oml: needs"), "{err}");
    let out = omlet(&["check", "--json", &new]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["language"]["needs"], "1.25.4");
    assert_eq!(v["language"]["features"][2]["since"], "omlet");
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

#[test]
fn check_with_a_knowdb_finds_a_wrong_table_and_names_the_right_one() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "t.oml", "name : z\n---\nzone = select zone from ip_zon where ip_start_int = read(ip) ;\n");
    let knowdb = crate::root().join("examples/nginx/knowdb/knowdb.toml");
    let out = omlet(&["check", &rule, "--knowdb", knowdb.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("t.oml:3:8") && err.contains("did you mean `ip_zone`?"), "{err}");
    // The snippet shows the line, as for a compile error.
    assert!(err.contains("zone = select zone from ip_zon"), "{err}");
    // run shows the same.
    let out = omlet_with_input(&["run", &rule, "--knowdb", knowdb.to_str().unwrap()], b"{\"ip\":1}\n");
    assert!(text(&out.stderr).contains("zone = select zone from ip_zon"), "{}", text(&out.stderr));
    // A misspelled column: the message lists the table's columns.
    let rule = rule_file(&dir, "c.oml", "name : z\n---\nzone = select zonex from ip_zone where lo_int = read(ip) ;\n");
    let out = omlet(&["check", "--json", &rule, "--knowdb", knowdb.to_str().unwrap()]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let message = j["diagnostics"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("zonex") && message.contains("has the columns cidr, lo_int, hi_int, zone, owner"), "{j}");
}

#[test]
fn input_types_make_run_see_what_a_test_sees() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "ts.oml", "name : t\n---\nepoch = pipe read(ts) | Time::to_ts ;\n");
    let case = "[[case]]\nname = \"epoch\"\noml_file = \"ts.oml\"\ninput = '{\"ts\":\"2024-05-01 12:00:00\"}'\n\
        input_types = { ts = \"time\" }\nexpected = '{\"epoch\":1714536000}'\n";
    let cases = rule_file(&dir, "cases.toml", case);
    let out = omlet(&["test", &cases]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = omlet_with_input(
        &["run", &rule, "--input-types", "ts=time"],
        b"{\"ts\":\"2024-05-01 12:00:00\"}\n{\"ts\":\"not a time\"}\n",
    );
    assert_eq!(text(&out.stdout), "{\"epoch\":1714536000}\n");
    let err = text(&out.stderr);
    assert!(err.contains("\"record\":2") && err.contains("not a time"), "{err}");
}

#[test]
fn help_documents_exit_codes_and_logging_and_usage_errors_exit_2() {
    let out = omlet(&["--help"]);
    let help = text(&out.stdout);
    assert!(help.contains("Exit status: 0") && help.contains("2 for a usage error") && help.contains("OMLET_LOG"), "{help}");
    assert_eq!(omlet(&["run", "--no-such-flag"]).status.code(), Some(2));
}

#[test]
fn completions_are_generated_for_the_shells() {
    let out = omlet(&["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
    let script = text(&out.stdout);
    assert!(script.contains("omlet") && script.contains("--input-types"), "{}", &script[..script.len().min(300)]);
    assert_eq!(omlet(&["completions", "zsh"]).status.code(), Some(0));
}

#[test]
fn csv_read_as_jsonl_gets_one_hint_not_an_error_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "p.oml", "name : p\n---\nv = read(a) ;\n");
    let out = omlet_with_input(&["run", &rule], b"a,b\nx,y\nz,w\n");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("looks like a CSV header") && err.contains("--format csv"), "{err}");
    // Asked for JSONL, it gets JSONL: one error line per record.
    let out = omlet_with_input(&["run", &rule, "--format", "jsonl"], b"a,b\nx,y\n");
    assert_eq!(text(&out.stderr).matches("\"kind\":\"failed\"").count(), 2);
}

#[test]
fn check_and_test_speak_json_and_junit_for_machines() {
    let dir = tempfile::tempdir().unwrap();
    let bad = rule_file(&dir, "bad.oml", "name : t\n---\na = read(a)\nb = read(b) ;\n");
    let out = omlet(&["check", "--json", &bad]);
    assert_eq!(out.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["ok"], false);
    assert_eq!((j["diagnostics"][0]["line"].as_u64(), j["diagnostics"][0]["column"].as_u64()), (Some(3), Some(12)));
    let cases = rule_file(
        &dir,
        "c.toml",
        "[[case]]\nname = \"ok\"\noml = '''\nname : t\n---\nv = read(a) ;\n'''\ninput = '{\"a\":1}'\nexpected = '{\"v\":2}'\n",
    );
    let junit = dir.path().join("report.xml");
    let out = omlet(&["test", "--json", &cases, "--junit", junit.to_str().unwrap()]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((j["passed"].as_u64(), j["failed"].as_u64()), (Some(0), Some(1)));
    assert!(j["cases"][0]["failure"].as_str().unwrap().starts_with("changed  v: expected 2, got 1"), "{j}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("tests=\"1\" failures=\"1\"") && xml.contains("<testcase classname="), "{xml}");
    assert!(xml.contains("<failure message=\"changed  v: expected 2, got 1\">"), "{xml}");
}

/// A rule of a kind the examples do not cover (sshd auth lines, CSV input,
/// a CSV knowdb, a time field), written from docs/language.md alone: every
/// record comes out enriched, and nothing is dropped without a word.
#[test]
fn a_new_kind_of_rule_runs_end_to_end_from_the_docs() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(
        &dir,
        "ssh.oml",
        "name : ssh/auth\n---\nuser = read(user) { _ : chars(unknown) } ;\nsrc : ip = read(src) ;\n\
         outcome = match read(result) {\n    chars(Accepted) => chars(success) ;\n    \
         starts_with('Failed') | contains('Invalid') => chars(failure) ;\n    _ => chars(other) ;\n} ;\n\
         team = select team from user_teams where user = read(user) ;\nepoch = pipe read(ts) | Time::to_ts_zone(0, s) ;\n",
    );
    rule_file(&dir, "user_teams.csv", "user,team\nroot,ops\nalice,dev\n");
    let knowdb = rule_file(&dir, "knowdb.toml", "[[tables]]\nname = \"user_teams\"\ncsv = \"user_teams.csv\"\n");
    let input = rule_file(
        &dir,
        "auth.csv",
        "user,src,result,ts\nroot,10.0.0.9,Failed password,2024-05-01 12:00:00\n,10.0.0.8,Invalid user,2024-05-01 12:00:02\n",
    );
    let out = omlet(&["check", &rule, "--knowdb", &knowdb]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = omlet(&["run", &rule, "--input", &input, "--knowdb", &knowdb, "--input-types", "ts=time"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "{\"user\":\"root\",\"src\":\"10.0.0.9\",\"outcome\":\"failure\",\"team\":\"ops\",\"epoch\":1714564800}\n\
         {\"user\":\"unknown\",\"src\":\"10.0.0.8\",\"outcome\":\"failure\",\"epoch\":1714564802}\n"
    );
}

/// Issue 31: `omlet check --knowdb` says which path each lookup takes (an
/// in-memory index, or SQL and why), and warns about a lookup that SQLite
/// answers by scanning a table of more than 10,000 rows; a lookup an index
/// serves passes without a warning, and a warning does not fail the check.
#[test]
fn check_with_a_knowdb_warns_about_lookups_that_scan_large_tables() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..10_001).map(|i| format!("10.{}.{}.{},c{}\n", i / 65536, (i / 256) % 256, i % 256, i % 5)).collect();
    std::fs::write(dir.path().join("bad_ip.csv"), format!("ip,category\n{rows}")).unwrap();
    let kb = dir.path().join("knowdb.toml");
    std::fs::write(&kb, "[[tables]]\nname = \"bad_ip\"\ncsv = \"bad_ip.csv\"\n").unwrap();
    let kb = kb.to_str().unwrap();
    let exact = rule_file(&dir, "exact.oml", "name : e\n---\nc = select category from bad_ip where ip = read(a) ;\n");
    let out = omlet(&["check", &exact, "--knowdb", kb]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains("warning"), "{err}");
    assert!(err.contains("exact.oml:3:5: note: lookup path: memory: hash on ip of bad_ip (10001 rows)"), "{err}");
    let either = rule_file(
        &dir,
        "either.oml",
        "name : o\n---\nc = select category from bad_ip where ip = read(a) or category = read(b) ;\n",
    );
    let out = omlet(&["check", &either, "--knowdb", kb]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("either.oml:3:5: warning: this lookup reads every row of `bad_ip` (10001 rows)"), "{err}");
    assert!(err.contains("either.oml:3:5: note: lookup path: sql: the condition is not a conjunction"), "{err}");
    // In JSON, the paths are notes, apart from the warnings.
    let out = omlet(&["check", &either, "--knowdb", kb, "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["warnings"].as_array().map(Vec::len), Some(1), "{j}");
    assert!(j["notes"][0].as_str().is_some_and(|n| n.contains("lookup path: sql")), "{j}");
}

/// Issue 33: `omlet test DIR` reads the case files of the folder and passes
/// over other TOML files found there (`examples/nginx/knowdb/knowdb.toml`
/// was read as a case file and failed the run); a file named on its own is
/// still read, and refused when it holds no cases.
#[test]
fn test_of_a_folder_passes_over_toml_files_that_hold_no_cases() {
    let out = omlet(&["test", "examples/nginx/"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{}{err}", text(&out.stdout));
    assert!(text(&out.stdout).contains(" passed, 0 failed"), "{}", text(&out.stdout));
    assert!(err.contains("passing over examples/nginx/knowdb/knowdb.toml"), "{err}");
    let out = omlet(&["test", "examples/nginx/knowdb/knowdb.toml"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("unknown top-level key `tables`"), "{}", text(&out.stderr));
}

/// Issue 33: `--stats-file` writes the summary as JSON to a file, away from
/// the error lines on standard error.
#[test]
fn stats_file_holds_the_summary_apart_from_error_lines() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let rule = rule_file(&dir, "copy.oml", "name : c\n---\nid = read(id) ;\n");
    let out = omlet_with_input(&["run", &rule, "--stats-file", stats.to_str().unwrap()], b"{\"id\":1}\nnot json\n");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(
        (summary["records"].as_u64(), summary["written"].as_u64(), summary["errors"].as_u64()),
        (Some(2), Some(1), Some(1))
    );
    assert!(text(&out.stderr).contains("\"record\":2"), "the error line stays on standard error");
}

/// Issue 33: "why is `dst_owner` absent for this record" in one command:
/// `omlet run --explain N` (text or JSON), `--explain-where`, and `omlet
/// test --trace`, on wasm and natively.
#[test]
fn run_explain_and_test_trace_say_why_a_field_is_absent() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(
        &dir,
        "fw.oml",
        "name : fw\n---\nsrc = take(src_ip) ;\nport : digit = read(dest_port) ;\n\
         dst_owner = select owner from assets where ip = read(dst_ip) ;\n",
    );
    let knowdb = rule_file(&dir, "knowdb.toml", "[[tables]]\nname = \"assets\"\ncsv = \"assets.csv\"\n");
    rule_file(&dir, "assets.csv", "ip,owner\n10.0.0.7,alice\n");
    let input = rule_file(
        &dir,
        "in.jsonl",
        "{\"src_ip\":\"10.0.0.1\",\"dst_ip\":\"10.0.0.7\",\"dst_port\":\"22\"}\n\
         {\"src_ip\":\"10.0.0.2\",\"dst_ip\":\"10.0.0.9\",\"dst_port\":\"443\"}\n",
    );
    let out = omlet(&["run", &rule, "--knowdb", &knowdb, "-i", &input, "--explain", "2"]);
    let t = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(t.starts_with("record 2 (line 2):\nmodel fw ("), "{t}");
    assert!(t.contains("  line 4: port\n    read dest_port: absent\n    port not written: the value is absent"), "{t}");
    assert!(t.contains("with ['10.0.0.9']: no row\n    dst_owner not written: the lookup found no row"), "{t}");
    assert!(t.contains("output: {\"src\":\"10.0.0.2\"}"), "{t}");
    assert!(!t.contains("record 1"), "only the record asked for: {t}");
    let out = omlet(&[
        "run",
        &rule,
        "--knowdb",
        &knowdb,
        "-i",
        &input,
        "--explain-where",
        "dst_ip=10.0.0.7",
        "--explain-format",
        "json",
    ]);
    let j: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(j["record"], 1);
    assert_eq!(j["output"]["dst_owner"], "alice");
    let lookup = j["trace"]["steps"][2]["events"][1].clone();
    assert_eq!(lookup["event"], "lookup", "{j}");
    assert_eq!(lookup["layer"], "in-memory table", "{j}");
    let out = omlet(&["run", &rule, "--knowdb", &knowdb, "-i", &input, "--explain", "9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("record 9: the input has fewer records"));
    // The same story from a test case, through wasm and natively.
    let cases = rule_file(
        &dir,
        "cases.toml",
        "[[case]]\nname = \"no_owner\"\noml_file = \"fw.oml\"\nknowdb = \"knowdb.toml\"\n\
         input = '{\"src_ip\":\"10.0.0.2\",\"dst_ip\":\"10.0.0.9\"}'\nexpected = '{\"src\":\"10.0.0.2\"}'\n",
    );
    for native in [false, true] {
        let mut args = vec!["test", cases.as_str(), "--trace"];
        if native {
            args.push("--native");
        }
        let out = omlet(&args);
        let t = text(&out.stdout);
        assert!(
            t.contains("ok ") && t.contains("no_owner") && t.contains("dst_owner not written: the lookup found no row"),
            "{t}"
        );
        assert!(t.ends_with("1 passed, 0 failed\n"), "{t}");
    }
}

/// Issue 33: `omlet check` warns, without a knowdb, about what compiles and
/// still loses a field: a read after a take into another name, a match arm
/// never taken, and (given sample records) a field no record has, with the
/// nearest name. Warnings fail only with --deny-warnings.
#[test]
fn check_warns_about_silent_loss() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(
        &dir,
        "fw.oml",
        "name : fw\n---\nsrc = object { ip = take(src_ip) ; } ;\n\
         zone = select zone from zones where ip = read(src_ip) ;\n\
         port : digit = read(dest_port) ;\n\
         svc = match read(dst_port) { digit(22) => chars(ssh) ; digit(22) => chars(sftp) ; } ;\n",
    );
    let sample = rule_file(&dir, "sample.jsonl", "{\"src_ip\":\"10.0.0.1\",\"dst_port\":22}\n");
    let out = omlet(&["check", &rule, "--sample", &sample]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "warnings do not fail the check: {err}");
    assert!(err.contains("fw.oml:4:42: warning: `read(src_ip)` finds nothing: line 3 takes `src_ip` into `src` first"), "{err}");
    assert!(
        err.contains("fw.oml:5:16: warning: `dest_port` is in no sample record") && err.contains("did you mean `dst_port`?"),
        "{err}"
    );
    assert!(err.contains("fw.oml:6:") && err.contains("this match arm is never taken: the arm at line 6"), "{err}");
    let out = omlet(&["check", &rule, "--deny-warnings"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let out = omlet(&["check", &rule, "--json", "--deny-warnings"]);
    let j: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(j["ok"], false);
    assert_eq!(j["warnings"].as_array().unwrap().len(), 2, "without a sample, two: {j}");
}

/// Times that come out wrong without a word: a `Time::` function with no
/// zone works at UTC+8, and a `: time` target keeps text as text. `check`
/// says so, with the fix; a function that names its zone is not warned of.
#[test]
fn check_warns_about_times_without_a_zone_and_time_targets_on_text() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(
        &dir,
        "t.oml",
        "name : t\n---\n\
         a = pipe read(t) | Time::to_ts ;\n\
         b = pipe read(t) | Time::to_ts(0) | Time::from_ts(-5) ;\n\
         c = pipe read(s) | Time::parse('rfc3339') ;\n\
         d = pipe read(s) | Time::parse('rfc3339', 2) | Time::to_ts_zone(8, ms) ;\n\
         hour : time = read(ts) ;\n",
    );
    let out = omlet(&["check", &rule]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "warnings do not fail the check: {err}");
    assert!(err.contains("t.oml:3:20: warning: `Time::to_ts` names no zone, so it works at UTC+8"), "{err}");
    assert!(err.contains("name the zone: `Time::to_ts(0)` for UTC"), "{err}");
    assert!(err.contains("t.oml:5:20: warning: `Time::parse('rfc3339')` names no zone"), "{err}");
    assert!(err.contains("`Time::parse('rfc3339', 0)` for UTC"), "{err}");
    assert!(err.contains("t.oml:7:8: warning: `: time` converts no text"), "{err}");
    assert!(err.contains("hour = pipe read(ts) | Time::parse('rfc3339', 0) ;"), "{err}");
    assert_eq!(err.matches("warning:").count(), 3, "lines 4 and 6 name their zones: {err}");
}

/// An IPv4-only lookup helper given a field that holds IPv6 addresses (in
/// the sample, or typed `ip` by an earlier statement) never matches their
/// records: `check` names the helper for both families.
#[test]
fn check_warns_about_ipv4_helpers_given_ipv6_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(
        &dir,
        "vpc.oml",
        "name : vpc\n---\n\
         site = select site from sites where cidr4_contains(read(src_ip), cidr) = 1 ;\n\
         dst : ip = read(dst_addr) ;\n\
         dsite = select site from sites where cidr4_contains(read(dst), cidr) = 1 ;\n\
         other = select site from sites where cidr4_contains(read(v4_only), cidr) = 1 ;\n",
    );
    let sample = rule_file(
        &dir,
        "sample.jsonl",
        "{\"src_ip\":\"10.0.0.1\",\"dst_addr\":\"10.0.0.2\",\"v4_only\":\"10.0.0.3\"}\n\
         {\"src_ip\":\"2001:db8::7\",\"dst_addr\":\"10.0.0.2\",\"v4_only\":\"10.0.0.4\"}\n",
    );
    let out = omlet(&["check", &rule, "--sample", &sample]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("vpc.oml:3:")
            && err.contains("`cidr4_contains` takes IPv4 only, and `src_ip` holds IPv6 addresses in the sample"),
        "{err}"
    );
    assert!(err.contains("`cidr_contains` takes both families"), "{err}");
    assert!(err.contains("vpc.oml:5:") && err.contains("`dst` is typed `ip`, which holds IPv6 addresses too"), "{err}");
    assert_eq!(err.matches("takes IPv4 only").count(), 2, "a field with IPv4 only is not warned of: {err}");
    // Without a sample, the typed field still is.
    let out = omlet(&["check", &rule]);
    assert_eq!(text(&out.stderr).matches("takes IPv4 only").count(), 1, "{}", text(&out.stderr));
}

/// `check` is one pass: with `--knowdb` beside `--sample`, the lints' and
/// the sample's warnings stay, beside the knowdb's warnings and notes.
#[test]
fn check_with_a_sample_and_a_knowdb_gives_both_findings() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..10_001).map(|i| format!("10.{}.{}.{},z{}\n", i / 65536, (i / 256) % 256, i % 256, i % 5)).collect();
    std::fs::write(dir.path().join("zones.csv"), format!("ip,zone\n{rows}")).unwrap();
    let kb = dir.path().join("knowdb.toml");
    std::fs::write(&kb, "[[tables]]\nname = \"zones\"\ncsv = \"zones.csv\"\n").unwrap();
    let rule = rule_file(
        &dir,
        "fw.oml",
        "name : fw\n---\nzone = select zone from zones where ip = read(src_ip) or zone = read(z) ;\n\
         port : digit = read(dest_port) ;\n",
    );
    let sample = rule_file(&dir, "sample.jsonl", "{\"src_ip\":\"10.0.0.1\",\"dst_port\":22,\"z\":\"z1\"}\n");
    let out = omlet(&["check", &rule, "--sample", &sample, "--knowdb", kb.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("fw.oml:4:16: warning: `dest_port` is in no sample record"), "{err}");
    assert!(err.contains("fw.oml:3:8: warning: this lookup reads every row of `zones` (10001 rows)"), "{err}");
    assert!(err.contains("fw.oml:3:8: note: lookup path: sql"), "{err}");
}

/// Issue 33: `omlet inspect` shows each model's own lookups, even when two
/// models share one statement, with literals as the rule wrote them.
#[test]
fn inspect_shows_each_models_lookups_with_their_literals() {
    let dir = tempfile::tempdir().unwrap();
    rule_file(&dir, "a.oml", "name : a\nrule : /a/*\n---\nz = select zone from zones where ip = read(ip) and k = 1 ;\n");
    rule_file(
        &dir,
        "b.oml",
        "name : b\nrule : /b/*\n---\nx = chars(b) ;\nz = select zone from zones where ip = read(ip) and k = 1 ;\n",
    );
    let set = dir.path().to_str().unwrap();
    let out = omlet(&["inspect", set]);
    let t = text(&out.stdout);
    assert!(t.contains("model a from") && t.contains("model b from"), "{t}");
    assert_eq!(t.matches("select zone from zones where ip = :ip and k = 1").count(), 2, "{t}");
    assert!(t.contains("  sql  line 5  select zone"), "model b's own line: {t}");
    let out = omlet(&["inspect", set, "--json"]);
    let j: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(j["models"][1]["lookups"][0]["line"], 5, "{j}");
    assert_eq!(j["models"][1]["lookups"][0]["statement"], j["models"][0]["lookups"][0]["statement"]);
}

/// Issue 33: a case file's `[defaults]` give every case its rule, knowdb
/// and input types, and a case's rule may be a rule set (a folder), routed
/// by the case's `rule_path` or `model`; on wasm and natively.
#[test]
fn case_files_have_defaults_and_rule_sets() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("set")).unwrap();
    rule_file(&dir, "set/web.oml", "name : web\nrule : /web/*\n---\nkind = chars(web) ;\nwhen = read(ts) ;\n");
    rule_file(&dir, "set/dns.oml", "name : dns\nrule : /dns/*\n---\nkind = chars(dns) ;\n");
    let cases = rule_file(
        &dir,
        "cases.toml",
        "[defaults]\noml_file = \"set\"\ninput_types = { ts = \"time\" }\n\n\
         [[case]]\nname = \"web\"\nrule_path = \"/web/access\"\ninput = '{\"ts\":\"2024-01-02 03:04:05\"}'\n\
         expected = '{\"kind\":\"web\",\"when\":\"2024-01-02 03:04:05\"}'\nexpected_types = { when = \"time\" }\n\n\
         [[case]]\nname = \"dns\"\nmodel = \"dns\"\nexpected = '{\"kind\":\"dns\"}'\n\n\
         [[case]]\nname = \"inline\"\noml = \"name : i\\n---\\nk = chars(i) ;\\n\"\nexpected = '{\"k\":\"i\"}'\n\n\
         [[case]]\nname = \"nowhere\"\nrule_path = \"/mail/x\"\nexpected_record_error = \"no enabled model\"\n",
    );
    for native in [false, true] {
        let mut args = vec!["test", cases.as_str()];
        if native {
            args.push("--native");
        }
        let out = omlet(&args);
        assert_eq!(text(&out.stdout), "4 passed, 0 failed\n", "native {native}: {}{}", text(&out.stdout), text(&out.stderr));
    }
    let bad = rule_file(&dir, "bad.toml", "[defaults]\nexpected = '{}'\n[[case]]\nname = \"x\"\noml = \"name : x\\n---\\n\"\n");
    let out = omlet(&["test", &bad]);
    assert!(text(&out.stderr).contains("[defaults]: `expected` cannot be a default"), "{}", text(&out.stderr));
}

/// Issue 33: a misspelled column gets a did-you-mean, and the caret sits on
/// the name, not on `select`.
#[test]
fn a_misspelled_column_is_named_with_the_nearest_and_a_caret_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let knowdb = rule_file(&dir, "knowdb.toml", "[[tables]]\nname = \"assets\"\ncsv = \"a.csv\"\n");
    rule_file(&dir, "a.csv", "ip,owner\n1,a\n");
    let rule = rule_file(&dir, "t.oml", "name : t\n---\n\nwho = select ownr from assets where ip = read(ip) ;\n");
    let out = omlet(&["check", &rule, "--knowdb", &knowdb]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("t.oml:4:14:") && err.contains("did you mean `owner` for `ownr`?"), "{err}");
    // A helper the guard refuses: the caret on its name too.
    let rule =
        rule_file(&dir, "h.oml", "name : t\n---\nwho = select owner from assets where cidr4_contain(ip, read(ip)) = 1 ;\n");
    let out = omlet(&["check", &rule, "--knowdb", &knowdb]);
    let err = text(&out.stderr);
    assert!(err.contains("h.oml:3:38:") && err.contains("`cidr4_contain` is not allowed"), "{err}");
}

/// Issue 33, item 6: `omlet run --watch` swaps a changed rule in between
/// batches while records keep coming; a rule that no longer compiles keeps
/// the old one running and says why.
#[test]
fn run_watch_swaps_a_changed_rule_in_without_stopping() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let rule = rule_file(&dir, "t.oml", "name : t\n---\nv = chars(one) ;\n");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_omlet"))
        .args(["run", &rule, "--watch", "--batch", "1", "--errors", "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // What the watcher says, line by line, as it says it: the test waits for
    // its words rather than for a time a loaded machine could overrun.
    let (said, hear) = std::sync::mpsc::channel();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if said.send(line).is_err() {
                break;
            }
        }
    });
    let mut heard = Vec::new();
    let mut wait_for = |words: &str| {
        while !heard.iter().any(|l: &String| l.contains(words)) {
            match hear.recv_timeout(std::time::Duration::from_secs(60)) {
                Ok(line) => heard.push(line),
                Err(e) => panic!("no `{words}` from the watcher ({e}); it said: {heard:?}"),
            }
        }
    };
    let mut send = |stdin: &mut std::process::ChildStdin| {
        stdin.write_all(b"{}\n").unwrap();
        stdin.flush().unwrap();
        lines.next().unwrap().unwrap()
    };
    assert_eq!(send(&mut stdin), r#"{"v":"one"}"#);
    std::fs::write(&rule, "name : t\n---\nv = chars(two) ;\n").unwrap();
    let mut got = String::new();
    for _ in 0..100 {
        got = send(&mut stdin);
        if got.contains("two") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(got, r#"{"v":"two"}"#);
    wait_for("loaded again and swapped in");
    std::fs::write(&rule, "name : t\n---\nv = chars(three\n").unwrap();
    wait_for("does not load, so the old one keeps running");
    assert_eq!(send(&mut stdin), r#"{"v":"two"}"#, "the old rule keeps running");
    // A rule with lookups, and no knowledge given: a start refuses it, and
    // so does a reload, instead of running it with every lookup absent.
    std::fs::write(&rule, "name : t\n---\nv = select zone from zones where ip = read(ip) ;\n").unwrap();
    wait_for("no knowledge was given");
    assert_eq!(send(&mut stdin), r#"{"v":"two"}"#, "the old rule keeps running");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
}
