//! Issue 30 ("trust, round two") from the command line: records are not lost
//! to ordinary CSV, a full disk or a SIGTERM.

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cli::{omlet, omlet_with_input, spawn_piped, text};

/// A rule that copies `id` and `name`.
fn copy_rule(dir: &std::path::Path) -> String {
    let rule = dir.join("copy.oml");
    std::fs::write(&rule, "name : t\n---\nid = read(id) ;\nname = read(name) ;\n").unwrap();
    rule.to_str().unwrap().to_string()
}

#[test]
fn stray_quotes_and_bare_crs_in_csv_lose_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let rule = copy_rule(dir.path());
    let quotes = b"id,name\n1,5\" screen\n2,keyboard\n3,mouse\n4,10\" panel\n5,cable\n";
    let out = omlet_with_input(&["run", &rule, "--format", "csv"], quotes);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 5, "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("5 records in"), "{}", text(&out.stderr));
    let crs = b"id,name\r1,a\r2,b\r3,c\r";
    let out = omlet_with_input(&["run", &rule, "--format", "csv"], crs);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 3, "{}", text(&out.stdout));
}

/// `/dev/full` fails every write with ENOSPC: the records all fit in the
/// output's buffer, so only the final flush fails, which used to be ignored.
#[test]
fn a_full_disk_at_the_final_flush_fails_the_run_and_names_the_lines() {
    let dir = tempfile::tempdir().unwrap();
    let rule = copy_rule(dir.path());
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, (1..=20).map(|i| format!("{{\"id\":{i}}}\n")).collect::<String>()).unwrap();
    let out = omlet(&["run", &rule, "-i", input.to_str().unwrap(), "-o", "/dev/full"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left") && err.contains("the lines of 20 records, from record 1 on, may be missing"), "{err}");
    assert!(!err.contains("records in"), "no summary when lines are missing: {err}");

    // Error lines go through the same checks.
    std::fs::write(&input, (1..=20).map(|i| format!("not json {i}\n")).collect::<String>()).unwrap();
    let out = omlet(&["run", &rule, "-i", input.to_str().unwrap(), "--errors", "/dev/full", "-o", "/dev/null"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the lines of 20 records, from record 1 on, may be missing"), "{err}");
}

/// A producer that stalls (a pipe from `tail -F`): the records it sent are
/// evaluated and written without waiting for a full chunk or the end of the
/// input; then SIGTERM stops the run cleanly, with its summary and status 0.
#[test]
fn a_stalled_producer_gets_its_lines_and_sigterm_finishes_the_run() {
    for (flag, name) in [("-TERM", "SIGTERM"), ("-INT", "SIGINT")] {
        stalled_then_signalled(flag, name);
    }
}

fn stalled_then_signalled(flag: &str, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let rule = copy_rule(dir.path());
    let mut child = spawn_piped(&["run", &rule]);
    let mut stdin = child.stdin.take().unwrap();
    let records: String = (0..1000).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    stdin.write_all(records.as_bytes()).unwrap();
    stdin.flush().unwrap();
    // The output, read on a thread so that a silent child cannot hang the test.
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 1 << 16];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    // 1,000 records are three full chunks of 256 and a partial one of 232.
    let (start, mut early) = (Instant::now(), Vec::new());
    while early.iter().filter(|&&b| b == b'\n').count() < 1000 && start.elapsed() < Duration::from_secs(60) {
        if let Ok(bytes) = rx.recv_timeout(Duration::from_millis(100)) {
            early.extend(bytes);
        }
    }
    assert_eq!(text(&early).lines().count(), 1000, "every record's line comes while the input stays open");

    let kill = Command::new("kill").args([flag, &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    reader.join().unwrap();
    let rest: Vec<u8> = rx.try_iter().flatten().collect();
    drop(stdin);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(rest.is_empty(), "{}", text(&rest));
    assert!(err.contains(&format!("stopped by {name}")), "{err}");
    assert!(err.contains("1000 records in") && err.contains("1000 written"), "{err}");
}

/// `omlet run` and `omlet test` print compile errors from the library's
/// rendering, which used to repeat the whole source line for each of them:
/// 45 MB of stderr for a 900 KB rule.
#[test]
fn compile_errors_on_a_huge_line_print_excerpts_in_run_and_test() {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("wide.oml");
    let line: Vec<String> = (0..10_000).map(|i| format!("f{i:05} = ;")).collect();
    std::fs::write(&rule, format!("name : t\n---\n{}\n", line.join(" "))).unwrap();
    let out = omlet_with_input(&["run", rule.to_str().unwrap()], b"{}\n");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.len() < 100_000, "{} bytes of errors", err.len());
    assert!(err.contains("wide.oml:3:"), "{}", &err[..err.len().min(500)]);

    let cases = dir.path().join("cases.toml");
    std::fs::write(
        &cases,
        format!("[[case]]\nname = \"wide\"\noml_file = \"{}\"\ninput = '{{}}'\nexpected = '{{}}'\n", rule.display()),
    )
    .unwrap();
    let out = omlet(&["test", cases.to_str().unwrap()]);
    let all = text(&out.stdout) + &text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", &all[..all.len().min(500)]);
    assert!(all.len() < 100_000, "{} bytes of output", all.len());
}
