//! The parts of the `omlet` command that are more than argument handling:
//! the test-case runner of `omlet test` (the formatter of `omlet fmt` is
//! `omlet_lang::fmt`, beside the parser whose tree it prints).
//! The embedding library is the `omlet` crate; this crate is for the CLI
//! (and the project's own tests and benches).

#![warn(missing_docs)]

pub mod conformance;
