//! The fuzz targets' bodies, shared with the regression tests that replay
//! their findings (`guest/lang/tests/fuzz_regressions.rs` includes
//! [`lang`], `host/tests/all/fuzz_regressions.rs` includes `host`), so that a
//! test checks exactly what the target did.
//!
//! Each function takes one fuzz input and must not panic on any input; an
//! `assert!` in it states an invariant whose breach is a finding too.

pub mod lang;
pub mod replay;

#[cfg(feature = "host")]
pub mod host;
