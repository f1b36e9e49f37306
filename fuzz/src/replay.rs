//! Replaying findings in the regression tests (`guest/lang/tests/` and
//! `host/tests/all/` include this file): the saved inputs of a target, and a
//! runner that names the input that panicked.

use std::path::Path;

/// The saved findings of one fuzz target under `dir` (the repository's
/// `tests/fuzz-regressions/`), by file name.
pub fn findings(dir: &Path, target: &str) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir.join(target)) else { return Vec::new() };
    let mut out: Vec<(String, Vec<u8>)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).expect("read a finding")))
        .collect();
    out.sort();
    out
}

/// Runs `body` on `input`, naming the input if it panics.
pub fn survives(what: &str, input: &[u8], body: fn(&[u8])) {
    if std::panic::catch_unwind(|| body(input)).is_err() {
        panic!("{what} panicked on {} bytes: {:?}", input.len(), String::from_utf8_lossy(&input[..input.len().min(300)]));
    }
}
