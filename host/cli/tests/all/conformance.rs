//! Every case of the shared conformance corpus and of omlet's own cases,
//! through the wasm component and through the native evaluator.

use std::path::PathBuf;

use std::collections::BTreeMap;

use omlet_cli::conformance::{Case, Mode, read_cases, run_case, run_file};

use crate::root;

/// The `.toml` case files of `dir` (relative to the repository), sorted.
fn case_files(dir: &str) -> Vec<PathBuf> {
    let dir = root().join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// Runs every case of `files` in `mode`; returns how many passed, failing
/// the test with every failure.
async fn run(files: Vec<PathBuf>, mode: Mode) -> usize {
    let engine = omlet::Engine::new().unwrap();
    let (mut passed, mut failures) = (0, Vec::new());
    for f in files {
        for o in run_file(&f, mode, &engine).await.unwrap() {
            match o.failure {
                None => passed += 1,
                Some(why) => failures.push(format!("{}: {}\n  {why}", f.display(), o.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{} passed, {} failed:\n{}", passed, failures.len(), failures.join("\n"));
    passed
}

/// The shared corpus, vendored in tests/conformance.
fn corpus() -> Vec<PathBuf> {
    let files = case_files("tests/conformance");
    assert!(files.len() >= 9, "conformance corpus not found");
    files
}

/// A corpus case whose output the OML 1.25 delta changes (tests/amendments.toml).
#[derive(serde::Deserialize)]
struct Amendment {
    file: String,
    case: String,
    expected: String,
    #[serde(default)]
    expected_types: BTreeMap<String, String>,
}

fn amendments() -> Vec<Amendment> {
    #[derive(serde::Deserialize)]
    struct File {
        amend: Vec<Amendment>,
    }
    let text = std::fs::read_to_string(root().join("tests/amendments.toml")).unwrap();
    toml::from_str::<File>(&text).unwrap().amend
}

/// Runs the corpus in `mode`, each amended case against its amended output,
/// after checking that its own expectation fails; returns how many passed.
async fn run_corpus(mode: Mode) -> usize {
    let engine = omlet::Engine::new().unwrap();
    let mut amended = amendments();
    let (mut passed, mut failures) = (0, Vec::new());
    for f in corpus() {
        let file = f.file_name().unwrap().to_string_lossy().into_owned();
        for mut case in read_cases(&f).unwrap() {
            if let Some(i) = amended.iter().position(|a| a.file == file && a.case == case.name) {
                let a = amended.remove(i);
                if run_case(&case, mode, &engine).await.is_ok() {
                    failures.push(format!("{file}: {}: the corpus's own output passes: drop its amendment", case.name));
                }
                // An amended output replaces whatever the corpus expected,
                // a compile error included.
                case = Case { expected: Some(a.expected), expected_types: a.expected_types, expected_error: None, ..case };
            }
            match run_case(&case, mode, &engine).await {
                Ok(()) => passed += 1,
                Err(why) => failures.push(format!("{file}: {}\n  {why}", case.name)),
            }
        }
    }
    for a in amended {
        failures.push(format!("tests/amendments.toml names {}: {}, which the corpus does not have", a.file, a.case));
    }
    assert!(failures.is_empty(), "{} passed, {} failed:\n{}", passed, failures.len(), failures.join("\n"));
    passed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_passes_through_wasm() {
    assert_eq!(run_corpus(Mode::Wasm).await, 138);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_passes_natively() {
    assert_eq!(run_corpus(Mode::Native).await, 138);
}

/// omlet's own cases (tests/cases): forms the shared corpus does not cover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_cases_pass_through_wasm() {
    assert_eq!(run(case_files("tests/cases"), Mode::Wasm).await, 135);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_cases_pass_natively() {
    assert_eq!(run(case_files("tests/cases"), Mode::Native).await, 135);
}

/// The examples' own test cases (examples/*/tests.toml), both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_tests_pass_both_ways() {
    let engine = omlet::Engine::new().unwrap();
    let root = root().join("examples");
    let mut n = 0;
    for ex in ["nginx", "sysmon", "apt"] {
        for mode in [Mode::Wasm, Mode::Native] {
            for o in run_file(&root.join(ex).join("tests.toml"), mode, &engine).await.unwrap() {
                assert!(o.failure.is_none(), "{ex} {mode:?} {}: {}", o.name, o.failure.unwrap());
                n += 1;
            }
        }
    }
    assert_eq!(n, 20);
}

/// The repository keeps its own copy of the corpus (`tests/conformance/`), so
/// that a clone on its own tests itself. Where the shared corpus stands beside
/// the repository (`../shared/conformance`), the copy must match it file for
/// file; `scripts/refresh-corpus.sh` brings it up to date.
/// The repository's copy of the language contract (docs/spec, which the
/// docs link to) is the shared one.
#[test]
fn vendored_spec_matches_the_shared_one() {
    let shared = root().join("../shared/spec");
    if !shared.is_dir() {
        eprintln!("no {} here: nothing to compare docs/spec with", shared.display());
        return;
    }
    for entry in std::fs::read_dir(&shared).unwrap() {
        let name = entry.unwrap().file_name();
        let a = std::fs::read(root().join("docs/spec").join(&name)).ok();
        let b = std::fs::read(shared.join(&name)).unwrap();
        assert!(
            a.as_ref() == Some(&b),
            "docs/spec/{} differs from the shared spec: run scripts/refresh-corpus.sh",
            name.to_string_lossy()
        );
    }
}

#[test]
fn vendored_corpus_matches_the_shared_one() {
    let ours = root().join("tests/conformance");
    let shared = root().join("../shared/conformance");
    if !shared.is_dir() {
        eprintln!("no {} here: nothing to compare the vendored corpus with", shared.display());
        return;
    }
    let names = |dir: &PathBuf| {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    };
    assert_eq!(names(&ours), names(&shared), "tests/conformance is stale: run scripts/refresh-corpus.sh");
    for name in names(&shared) {
        let a = std::fs::read(ours.join(&name)).unwrap();
        let b = std::fs::read(shared.join(&name)).unwrap();
        assert!(a == b, "tests/conformance/{name} differs from the shared corpus: run scripts/refresh-corpus.sh");
    }
}
