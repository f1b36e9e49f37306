//! The CLI crate's tests, as one test binary: the `omlet` command on real
//! files, the conformance corpus (wasm and native), the differential test and
//! the SQL cases on real databases, all of which use the test-case runner.
//! Run one module with `cargo test -p omlet-cli --test all MODULE::`.

mod author;
mod cli;
mod conformance;
mod databases;
mod differential;
mod docs;
#[cfg(feature = "kafka")]
mod kafka;
mod trust;
mod trust3;

/// The repository's root.
pub fn root() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().and_then(|p| p.parent()).unwrap()
}
