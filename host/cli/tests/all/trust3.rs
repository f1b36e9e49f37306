//! `omlet test` on case files from anybody (a pull request's CI run): the
//! files it reads are bounded, the files a case names stay inside its
//! folder, nothing of a case reaches SQL unchecked, `--knowledge sqlite://`
//! creates no file, and `--native` has bounds and a bounded report.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use omlet_cli::conformance::{Case, Mode, run_case};

use crate::cli::text;

/// `omlet ARGS` with a watchdog: killed after 60 s (a read that blocks
/// would otherwise hang the test), which fails it.
fn omlet_bounded(args: &[&str]) -> Output {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_omlet"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both streams drained as they come, so that a long report cannot block.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            r.read_to_end(&mut b).unwrap();
            b
        })
    };
    let (out, err) = (drain(Box::new(child.stdout.take().unwrap())), drain(Box::new(child.stderr.take().unwrap())));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("omlet {args:?} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

fn all(out: &Output) -> String {
    text(&out.stdout) + &text(&out.stderr)
}

/// The first 2,000 bytes of `s` or so, for a failure message.
fn head(s: &str) -> &str {
    let mut end = s.len().min(2000);
    while !s.is_char_boundary(end) {
        end += 1;
    }
    &s[..end]
}

/// The last 2,000 bytes of `s` or so.
fn tail(s: &str) -> &str {
    let mut start = s.len().saturating_sub(2000);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

fn case_file(dir: &Path, body: &str) -> String {
    let p = dir.join("cases.toml");
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

const RULE: &str = "name : t\n---\nid = read(id) ;\n";

#[test]
fn every_file_omlet_test_reads_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    // A case file past 1 MiB (a comment makes it valid TOML).
    let big = dir.path().join("big.toml");
    let mut body = format!("[[case]]\nname = \"c\"\noml = '''{RULE}'''\nexpected = '{{}}'\n#");
    body.push_str(&"x".repeat(1 << 20));
    std::fs::write(&big, body).unwrap();
    let out = omlet_bounded(&["test", "--native", big.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(all(&out).contains("more than 1048576 bytes, the most a case file may take"), "{}", all(&out));

    // A rule file past 1 MiB, and a FIFO, named by `oml_file`.
    std::fs::write(dir.path().join("huge.oml"), format!("{RULE}#{}\n", "x".repeat(1 << 20))).unwrap();
    let cases = case_file(dir.path(), "[[case]]\nname = \"c\"\noml_file = \"huge.oml\"\nexpected = '{}'\n");
    let out = omlet_bounded(&["test", "--native", &cases]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(all(&out).contains("more than a rule file may take (1048576)"), "{}", all(&out));

    let fifo = dir.path().join("fifo.oml");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let cases = case_file(dir.path(), "[[case]]\nname = \"c\"\noml_file = \"fifo.oml\"\nexpected = '{}'\n");
    let out = omlet_bounded(&["test", "--native", &cases]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(all(&out).contains("not a regular file"), "{}", all(&out));
}

#[test]
fn files_a_case_names_must_lie_inside_its_folder() {
    let top = tempfile::tempdir().unwrap();
    let (tests, rules, outside) = (top.path().join("tests"), top.path().join("rules"), top.path().join("outside"));
    for d in [&tests, &rules, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(outside.join("secret.oml"), "SECRET-LINE = ;\n").unwrap();
    std::fs::write(outside.join("knowdb.toml"), "SECRET-LINE\n").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.oml"), tests.join("link.oml")).unwrap();
    for (key, named) in [
        ("oml_file", "/etc/passwd"),
        ("oml_file", "../outside/secret.oml"),
        ("oml_file", "link.oml"),
        ("oml_file", "/dev/zero"),
        ("knowdb", "../outside/knowdb.toml"),
    ] {
        let rule = if key == "knowdb" { format!("oml = '''{RULE}'''") } else { String::new() };
        let cases = case_file(&tests, &format!("[[case]]\nname = \"c\"\n{rule}\n{key} = \"{named}\"\nexpected = '{{}}'\n"));
        let out = omlet_bounded(&["test", "--native", &cases]);
        let said = all(&out);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(said.contains(&format!("case c: `{key}` names {named}")) && said.contains("outside"), "{said}");
        assert!(!said.contains("SECRET") && !said.contains("root:"), "{said}");
    }

    // A rule beside the tests' folder: refused for the case file alone,
    // taken when `omlet test` is given a folder that holds both.
    std::fs::write(rules.join("r.oml"), RULE).unwrap();
    std::fs::remove_file(tests.join("link.oml")).unwrap();
    let cases = case_file(
        &tests,
        "[[case]]\nname = \"c\"\noml_file = \"../rules/r.oml\"\ninput = '{\"id\":1}'\nexpected = '{\"id\":1}'\n",
    );
    let out = omlet_bounded(&["test", "--native", &cases]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(all(&out).contains("outside"), "{}", all(&out));
    std::fs::remove_dir_all(&outside).unwrap();
    let out = omlet_bounded(&["test", "--native", top.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(text(&out.stdout).contains("1 passed, 0 failed"), "{}", all(&out));
}

#[test]
fn inline_tables_reach_sql_only_through_the_allow_list() {
    let dir = tempfile::tempdir().unwrap();
    let table = |name: &str, column: &str, ty: &str| {
        let knowledge = serde_json::json!({"tables": {name: {"columns": [column], "types": [ty], "rows": [["x"]]}}});
        format!("[[case]]\nname = \"c\"\noml = '''{RULE}'''\nknowledge = '{knowledge}'\nexpected = '{{}}'\n")
    };
    for (name, column, ty, refusal) in [
        ("t", "a", "TEXT); CREATE TABLE injected (x", "column type `TEXT); CREATE TABLE injected (x` is not one omlet knows"),
        ("t", "a\" TEXT); CREATE TABLE injected (x", "TEXT", "column name"),
        ("t\" (a TEXT); CREATE TABLE injected (x", "a", "TEXT", "table name"),
    ] {
        let cases = case_file(dir.path(), &table(name, column, ty));
        let out = omlet_bounded(&["test", "--native", &cases]);
        assert_eq!(out.status.code(), Some(1), "{}", all(&out));
        assert!(all(&out).contains(refusal), "{}", all(&out));
    }
}

#[test]
fn a_sqlite_knowledge_url_must_name_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let knowledge = r#"{"tables": {"t": {"columns": ["a"], "rows": [["x"]]}}}"#;
    let cases = case_file(
        dir.path(),
        &format!(
            "[[case]]\nname = \"c\"\noml = '''{RULE}'''\nknowledge = '{knowledge}'\ninput = '{{\"id\":1}}'\nexpected = '{{\"id\":1}}'\n"
        ),
    );
    let db = dir.path().join("new.db");
    let url = format!("sqlite://{}", db.display());
    let out = omlet_bounded(&["test", "--native", "--knowledge", &url, &cases]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(all(&out).contains("never creates one"), "{}", all(&out));
    assert!(!db.exists(), "the run created {}", db.display());
    // An existing file (empty is a valid database) takes the tables.
    std::fs::write(&db, "").unwrap();
    let out = omlet_bounded(&["test", "--native", "--knowledge", &url, &cases]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
}

#[test]
fn native_outputs_past_their_bound_fail_the_case_and_the_report_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    // 45 copies of a 400 KB field: 18 MB of output, past the 16 MiB bound.
    let copies: String = (0..45).map(|i| format!("x{i} = read(s) ;\n")).collect();
    let s = "v".repeat(400_000);
    let body = format!(
        "[[case]]\nname = \"huge\"\noml = '''name : t\n---\n{copies}'''\ninput = '{{\"s\":\"{s}\"}}'\nexpected = '{{}}'\n\
         [[case]]\nname = \"wide\"\noml = '''name : t\n---\nx = read(s) ;\n'''\ninput = '{{\"s\":\"{s}\"}}'\nexpected = '{{\"x\":\"y\"}}'\n"
    );
    let cases = case_file(dir.path(), &body);
    for mode in [&["--native"][..], &[][..]] {
        let out = omlet_bounded(&[&["test"][..], mode, &[&cases]].concat());
        let said = all(&out);
        assert_eq!(out.status.code(), Some(1), "{}", head(&said));
        assert!(said.len() < 64 * 1024, "{} bytes of report", said.len());
        assert!(said.contains("0 passed, 2 failed"), "{}", tail(&said));
        assert!(said.contains("bytes more)"), "{}", head(&said));
        if mode == ["--native"] {
            assert!(said.contains("output bytes: the output record takes 18000"), "{}", head(&said));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_case_past_the_call_deadline_fails_with_a_deadline_error() {
    let config = omlet::EngineConfig { call_deadline: Duration::from_micros(1), code_cache: None, ..Default::default() };
    let engine = omlet::Engine::with_config(&config).unwrap();
    let copies: String = (0..30).map(|i| format!("x{i} = read(s) ;\n")).collect();
    let case: Case = toml::from_str(&format!(
        "name = 'slow'\noml = '''name : t\n---\n{copies}'''\ninput = '{{\"s\":\"{}\"}}'\nexpected = '{{}}'",
        "v".repeat(300_000)
    ))
    .unwrap();
    let e = run_case(&case, Mode::Native, &engine).await.unwrap_err();
    assert!(e.contains("call deadline: the native evaluation computed for more than"), "{e}");
}

/// Small cases sharing a rule whose output is long: each failure is
/// clipped, and past 1 MiB a file's failures are counted without their text.
#[test]
fn the_report_of_a_case_file_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut body = format!("[defaults]\noml = '''name : t\n---\nx = chars({}) ;\n'''\n", "v".repeat(6000));
    body.extend((0..300).map(|i| format!("[[case]]\nname = \"c{i}\"\nexpected = '{{}}'\n")));
    let cases = case_file(dir.path(), &body);
    let out = omlet_bounded(&["test", "--native", &cases]);
    let said = all(&out);
    assert_eq!(out.status.code(), Some(1), "{}", head(&said));
    assert!(said.contains("0 passed, 300 failed"), "{}", tail(&said));
    assert!(said.len() < (1 << 20) + 64 * 1024, "{} bytes of report", said.len());
    assert!(said.contains("this file's report passed 1048576 bytes"), "{}", tail(&said));
}

/// A rule that doubles a text in each statement stops at the native
/// evaluator's value budget (the engine's `max_memory`, as the guest's
/// memory stops it in wasm), with a limit error for its case, instead of
/// building 256 MiB of values before the output bound sees any.
#[test]
fn a_native_case_that_doubles_its_values_stops_at_the_value_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut rule = String::from("name : t\n---\na0 = fmt(\"{s}{s}\", @s) ;\n");
    for i in 1..18 {
        rule.push_str(&format!("a{i} = fmt(\"{{a{p}}}{{a{p}}}\", @a{p}) ;\n", p = i - 1));
    }
    let s = "v".repeat(1024);
    let body = format!("[[case]]\nname = \"doubling\"\noml = '''{rule}'''\ninput = '{{\"s\":\"{s}\"}}'\nexpected = '{{}}'\n");
    let cases = case_file(dir.path(), &body);
    let out = omlet_bounded(&["test", "--native", &cases]);
    let said = all(&out);
    assert_eq!(out.status.code(), Some(1), "{}", head(&said));
    assert!(said.contains("limit reached (value bytes)"), "{}", head(&said));
}
