//! Invariants of the source tree that ARCHITECTURE.md states, checked over
//! the sources themselves.

use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The sources of the three library crates: the language, the host library
/// and its knowledge crate.
fn library_files() -> Vec<PathBuf> {
    ["guest/lang/src", "host/src", "host/knowledge/src"].iter().flat_map(|d| rust_files(&root().join(d))).collect()
}

/// A newcomer reads a file whole: none of the library crates' files is
/// longer than 1,000 lines.
#[test]
fn no_library_file_is_over_1000_lines() {
    let files = library_files();
    assert!(files.len() > 50, "the library's sources were not found");
    let long: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let lines = std::fs::read_to_string(p).expect("a source file").lines().count();
            (lines > 1000).then(|| format!("{} ({lines} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these by job: {long:?}");
}

/// The library takes its settings from its host, never from the process's
/// environment: the only reads are the `${NAME}` a knowledge config asks for
/// (`expand_env`, for the names the config allows) and the test-only
/// `OMLET_GUEST` (behind the `test-guest` feature).
#[test]
fn the_library_reads_no_environment_variable_of_its_own() {
    let mut found = Vec::new();
    for path in rust_files(&root().join("host/src")).into_iter().chain(rust_files(&root().join("host/knowledge/src"))) {
        let text = std::fs::read_to_string(&path).expect("a source file");
        let lines: Vec<&str> = text.lines().collect();
        let tests_from = lines.iter().position(|l| l.trim() == "#[cfg(test)]").unwrap_or(lines.len());
        for (i, line) in lines.iter().enumerate() {
            if !(line.contains("env::var") || line.contains("env::vars")) || i >= tests_from {
                continue;
            }
            let function =
                lines[..i].iter().rev().find(|l| l.trim_start().starts_with("pub") || l.trim_start().starts_with("fn "));
            let allowed = function.is_some_and(|f| f.contains("fn expand_env("))
                || (path.ends_with("guest.rs") && lines[..i].last().is_some_and(|l| l.contains("feature = \"test-guest\"")));
            if !allowed {
                found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "the library reads the environment: {found:?}");
}

/// A host that embeds the library compiles none of the CLI's crates.
#[test]
fn the_library_depends_on_no_cli_crate() {
    let manifest = std::fs::read_to_string(root().join("host/Cargo.toml")).expect("host/Cargo.toml");
    let deps = manifest.split("[dependencies]").nth(1).and_then(|s| s.split("\n[").next()).expect("a [dependencies] table");
    for cli in ["clap", "indicatif", "miette", "tracing-subscriber", "rdkafka", "mimalloc"] {
        assert!(!deps.lines().any(|l| l.starts_with(&format!("{cli} ")) || l.starts_with(&format!("{cli}="))), "{cli}");
    }
}
