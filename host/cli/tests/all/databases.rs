//! The SQL conformance cases and the examples' test cases on real databases:
//! throwaway PostgreSQL 15 and MariaDB servers on loopback, through the
//! test-case runner of `omlet test --knowledge`.

use std::path::PathBuf;

use omlet::Engine;
use omlet_cli::conformance::{Mode, TestDb, read_cases, run_case_on, run_file_on};
use omlet_testdb::{MariaDb, Postgres};

use crate::root;

/// Every conformance case with knowledge tables, through the wasm component.
async fn sql_cases_pass(url: &str) {
    let engine = Engine::new().unwrap();
    let db = TestDb::create(url).await.unwrap();
    let dir = root().join("tests/conformance");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let (mut passed, mut failures) = (0, Vec::new());
    for f in files.iter().filter(|p| p.extension().is_some_and(|e| e == "toml")) {
        for case in read_cases(f).unwrap().into_iter().filter(|c| c.knowledge.is_some()) {
            match run_case_on(&case, Mode::Wasm, &engine, Some(&db)).await {
                Ok(()) => passed += 1,
                Err(e) => failures.push(format!("{}: {e}", case.name)),
            }
        }
    }
    for ex in ["nginx", "apt"] {
        for o in run_file_on(&root().join("examples").join(ex).join("tests.toml"), Mode::Wasm, &engine, Some(&db)).await.unwrap()
        {
            match o.failure {
                None => passed += 1,
                Some(e) => failures.push(format!("{ex} {}: {e}", o.name)),
            }
        }
    }
    db.finish().await.unwrap();
    assert!(failures.is_empty(), "{url}: {} passed, failed:\n{}", passed, failures.join("\n"));
    assert_eq!(passed, 13 + 7, "SQL conformance cases + example cases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_cases_pass_on_postgres() {
    let pg = Postgres::start();
    sql_cases_pass(&pg.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_cases_pass_on_mariadb() {
    let m = MariaDb::start();
    sql_cases_pass(&m.url()).await;
}
