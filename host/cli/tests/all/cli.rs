//! The `omlet` command line on real files: build, inspect and run.

use std::process::{Command, Output, Stdio};

use crate::root;

pub(crate) fn omlet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_omlet")).args(args).current_dir(root()).stdin(Stdio::null()).output().unwrap()
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const KNOWDBS: [&str; 4] = ["--knowdb", "examples/nginx/knowdb/knowdb.toml", "--knowdb", "examples/apt/knowdb/knowdb.toml"];

#[test]
fn build_and_inspect_a_rule_set() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("set.wasm");
    let out = omlet(&["build", "examples", "-o", set.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("(3 models,"), "{}", text(&out.stderr));

    let out = omlet(&["inspect", "--json", set.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["ir_version"], omlet_lang::IR_VERSION);
    assert_eq!(info["source_hash"].as_str().unwrap().len(), 64);
    let models = info["models"].as_array().unwrap();
    let summary: Vec<(String, String, usize)> = models
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().into(),
                m["patterns"][0].as_str().unwrap().into(),
                m["statements"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("ids/apt_alert".into(), "/ids/apt/*".into(), 1),
            ("nginx/access".into(), "/nginx/access_log".into(), 1),
            ("windows/sysmon".into(), "/windows/sysmon/*".into(), 0)
        ]
    );
    assert!(models[1]["statements"][0]["sql"].as_str().unwrap().starts_with("select zone,owner from ip_zone"));

    let out = omlet(&["inspect", set.to_str().unwrap()]);
    assert!(text(&out.stdout).contains("model nginx/access from examples/nginx/nginx.oml\n  rule /nginx/access_log\n  sql  "));
}

#[test]
fn run_routes_by_field_and_accounts_for_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let (out_file, err_file) = (dir.path().join("out.jsonl"), dir.path().join("errors.jsonl"));
    let mut args = vec!["run", "examples", "-i", "examples/ruleset/records.jsonl", "--rule-path-field", "rule_path"];
    args.extend(KNOWDBS);
    args.extend(["-o", out_file.to_str().unwrap(), "--errors", err_file.to_str().unwrap(), "--stats=json"]);
    let out = omlet(&args);
    // One record is unclaimed: the run says so with its exit status.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(&out_file).unwrap();
    let errors = std::fs::read_to_string(&err_file).unwrap();
    let input_lines = std::fs::read_to_string(root().join("examples/ruleset/records.jsonl")).unwrap().lines().count();
    assert_eq!(written.lines().count() + errors.lines().count(), input_lines, "one line per record");
    let err: serde_json::Value = serde_json::from_str(errors.lines().next().unwrap()).unwrap();
    assert_eq!(err["record"], 11);
    assert_eq!(err["kind"], "unrouted");
    assert!(err["input"].as_str().unwrap().contains("/firewall/deny"));
    // The summary, machine-readable, is the last line of standard error.
    let stderr = text(&out.stderr);
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
    assert_eq!(
        (summary["records"].as_u64(), summary["written"].as_u64(), summary["unrouted"].as_u64()),
        (Some(11), Some(10), Some(1))
    );
    assert!(summary["records_per_second"].as_f64().unwrap() > 0.0);
    assert!(summary["lookups"].as_u64().unwrap() > 0);
    // Piped, there is no progress bar: standard error is the summary alone.
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // The outputs are those of each example's own rule, in input order.
    let first: serde_json::Value = serde_json::from_str(written.lines().next().unwrap()).unwrap();
    assert_eq!(first["zone"], "dmz");
    let second: serde_json::Value = serde_json::from_str(written.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["event_type"], "process_create");

    // With `--unrouted pass`, the unclaimed record is written out unchanged.
    let mut args =
        vec!["run", "examples", "-i", "examples/ruleset/records.jsonl", "--rule-path-field", "rule_path", "--unrouted", "pass"];
    args.extend(KNOWDBS);
    let out = omlet(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let last = text(&out.stdout).lines().last().unwrap().to_string();
    assert_eq!(last, r#"{"rule_path":"/firewall/deny","src":"10.9.9.9"}"#);
}

#[test]
fn run_reads_csv_and_numbers_bad_records() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("access.csv");
    std::fs::write(
        &csv,
        "client_ip,status,method,request_uri\n10.0.0.7,200,GET,/a.js\n10.0.1.9,oops\n10.0.1.20,404,GET,/x.html\n",
    )
    .unwrap();
    let mut args =
        vec!["run", "examples/nginx/nginx.oml", "-i", csv.to_str().unwrap(), "--knowdb", "examples/nginx/knowdb/knowdb.toml"];
    args.extend(["--rule-path", "/nginx/access_log"]);
    let out = omlet(&args);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!((lines[0]["status"].as_i64(), lines[0]["zone"].as_str()), (Some(200), Some("dmz")));
    assert_eq!((lines[1]["status"].as_i64(), lines[1]["zone"].as_str()), (Some(404), Some("office")));
    let stderr = text(&out.stderr);
    let err: serde_json::Value = serde_json::from_str(stderr.lines().next().unwrap()).unwrap();
    assert_eq!((err["record"].as_u64(), err["line"].as_u64()), (Some(2), Some(3)));
    assert_eq!(err["error"], "2 values for 4 columns");
    assert!(stderr.contains("3 records in"), "{stderr}");
}

#[test]
fn concurrent_runs_keep_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let rule = dir.path().join("r.oml");
    std::fs::write(&rule, "name : t\n---\nn : digit = take(n) ;\nsq = pipe read(n) | to_str ;\n").unwrap();
    let mut text_in = String::new();
    for n in 0..20_000 {
        text_in.push_str(&format!("{{\"n\":{n}}}\n"));
    }
    std::fs::write(&input, text_in).unwrap();
    let out = omlet(&["run", rule.to_str().unwrap(), "-i", input.to_str().unwrap(), "--concurrency", "8", "--batch", "64"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ns: Vec<i64> =
        text(&out.stdout).lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["n"].as_i64().unwrap()).collect();
    assert_eq!(ns, (0..20_000).collect::<Vec<_>>());
}

#[test]
fn check_reports_a_set_level_error_with_file_line_and_caret() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.oml"), "name : dup\nrule : /a\n---\nx = chars(1) ;\n").unwrap();
    std::fs::write(dir.path().join("b.oml"), "name : dup\nrule : /b\n---\nx = chars(1) ;\n").unwrap();
    let out = omlet(&["check", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("b.oml:1:8: model `dup` is also defined in"), "{stderr}");
}

#[test]
fn every_rule_in_the_repository_is_formatted_and_fmt_fixes_layout() {
    // The repository's own rules are in the canonical layout.
    let out = omlet(&["fmt", "--check", "."]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));

    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("messy.oml");
    std::fs::write(&f, "name : m\n---\n// kept\nx   :digit=take( a ) ;   # also kept\n").unwrap();
    let out = omlet(&["fmt", "--check", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).starts_with(&format!("would reformat {}", f.display())), "{}", text(&out.stdout));
    // A true diff: the comment lines fmt keeps are context, not deletions.
    let diff = text(&out.stdout);
    assert!(diff.contains("-x   :digit=take( a ) ;   # also kept\n+x : digit = take(a) ; # also kept\n"), "{diff}");
    assert!(diff.contains("\n // kept\n") && !diff.contains("-// kept"), "{diff}");
    let out = omlet(&["fmt", f.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "name : m\n---\n// kept\nx : digit = take(a) ; # also kept\n");
    assert!(omlet(&["fmt", "--check", f.to_str().unwrap()]).status.success());
}

/// Every `omlet …` command line in the examples' READMEs works as
/// written (from the repository root), with the exit status it promises.
#[test]
fn example_readme_commands_work() {
    let mut ran = 0;
    for ex in ["nginx", "sysmon", "apt", "ruleset"] {
        let readme = std::fs::read_to_string(root().join("examples").join(ex).join("README.md")).unwrap();
        for line in readme.lines().filter(|l| l.starts_with("omlet ")) {
            let (command, comment) = line.split_once("  # ").unwrap_or((line, ""));
            let expect = if comment.starts_with("exits 1") { 1 } else { 0 };
            let args: Vec<&str> = command["omlet ".len()..].split_whitespace().collect();
            let out = omlet(&args);
            assert_eq!(out.status.code(), Some(expect), "examples/{ex}/README.md: {line}\n{}", text(&out.stderr));
            ran += 1;
        }
    }
    assert_eq!(ran, 12);
}

#[test]
fn run_reads_csv_from_standard_input() {
    let out = omlet_with_input(
        &["run", "examples/sysmon/sysmon.oml", "--format", "csv", "--model", "windows/sysmon"],
        b"EventID,Image\n3,C:\\x\\curl.exe\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rec: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    // CSV values are chars; the rule's typed target makes the digit.
    assert_eq!((rec["event_id"].as_i64(), rec["event_type"].as_str()), (Some(3), Some("network_connect")));
    assert_eq!(rec["process_name"], "curl.exe");
}

// ----- the sandbox, from the command line ------------------------------------------

/// `omlet ARGS` started with its three streams piped.
pub(crate) fn spawn_piped(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_omlet"))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub(crate) fn omlet_with_input(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = spawn_piped(args);
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// Thousands of errors on one very long line: the first 50 are printed, as
/// excerpts, and nothing panics (miette used to, past column 65,535).
#[test]
fn a_flood_of_errors_on_one_long_line_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("flood.oml");
    let line: Vec<String> = (0..8000).map(|i| format!("field_{i:05} = ;")).collect();
    std::fs::write(&rule, format!("name : t\n---\n{}\n", line.join(" "))).unwrap();
    let out = omlet(&["check", rule.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", &err[..err.len().min(2000)]);
    assert!(err.len() < 100_000, "{} bytes of errors", err.len());
    assert!(err.contains("more errors"), "{}", &err[err.len().saturating_sub(500)..]);
    assert!(err.contains(":3:"), "the errors name their line");
}

#[test]
fn a_rule_nested_thousands_deep_is_a_compile_error() {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("deep.oml");
    std::fs::write(&rule, format!("name : t\n---\nv = {}chars(x){} ;\n", "object { a = ".repeat(3000), " ; }".repeat(3000)))
        .unwrap();
    for cmd in ["check", "fmt"] {
        let out = omlet(&[cmd, rule.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("nesting deeper than"), "{cmd}: {}", text(&out.stderr));
    }
}

#[test]
fn concurrency_past_the_instance_limit_is_refused() {
    let out = omlet(&["run", "examples/nginx/nginx.oml", "-i", "examples/nginx/access.jsonl", "--concurrency", "300"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("1..=256"), "{}", text(&out.stderr));
}

#[test]
fn a_line_that_is_not_utf8_costs_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("t.oml");
    std::fs::write(&rule, "name : t\n---\na = read(a) ;\n").unwrap();
    let out = omlet_with_input(&["run", rule.to_str().unwrap(), "-q"], b"{\"a\":1}\n{\"a\":\"\xff\"}\n{\"a\":2}\n");
    assert_eq!(text(&out.stdout), "{\"a\":1}\n{\"a\":2}\n");
    let errors: Vec<serde_json::Value> =
        text(&out.stderr).lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["record"], 2);
    assert!(errors[0]["error"].as_str().unwrap().contains("not UTF-8"));
    assert_eq!(out.status.code(), Some(1));
}

/// The library reads no environment variable; the CLI reads the code
/// cache's from its own: `OMLET_CODE_CACHE` names the folder (and `off`
/// turns it off), before `XDG_CACHE_HOME`.
#[test]
fn the_cli_takes_its_code_cache_folder_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("one.jsonl");
    std::fs::write(&input, r#"{"client_ip":"10.0.0.7","status":"200","request_uri":"/a"}"#).unwrap();
    let run = |vars: &[(&str, std::path::PathBuf)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_omlet"));
        c.args(["run", "examples/nginx/nginx.oml", "--knowdb", "examples/nginx/knowdb/knowdb.toml", "-o", "-"])
            .arg("-i")
            .arg(&input)
            .current_dir(root())
            .env_remove("OMLET_CODE_CACHE")
            .env("XDG_CACHE_HOME", dir.path().join("xdg"));
        for (k, v) in vars {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains(r#""status_class":"success""#), "{}", text(&out.stdout));
    };
    let entries = |p: &std::path::Path| std::fs::read_dir(p).map(|d| d.count()).unwrap_or(0);

    run(&[("OMLET_CODE_CACHE", dir.path().join("named"))]);
    assert_eq!(entries(&dir.path().join("named")), 1, "OMLET_CODE_CACHE names the folder");
    assert_eq!(entries(&dir.path().join("xdg/omlet/code")), 0);

    run(&[("OMLET_CODE_CACHE", "off".into())]);
    assert_eq!(entries(&dir.path().join("xdg/omlet/code")), 0, "off keeps no code");

    run(&[]);
    assert_eq!(entries(&dir.path().join("xdg/omlet/code")), 1, "else XDG_CACHE_HOME/omlet/code");
}
