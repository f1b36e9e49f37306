//! omlet's integration tests, as one test binary (as wasmtime does): each
//! module was its own binary, and every one of them linked wasmtime and sqlx.
//! Run one module with `cargo test -p omlet --test all MODULE::`.

mod cache;
mod coalesce;
mod component;
mod databases;
mod e2e;
mod fuzz_regressions;
mod knowdb;
mod portable;
mod rule_sets;
mod sandbox;
mod trust;

// The host's frame decoder is private to the library; `fuzz_regressions`
// replays findings through it, so its source is compiled in here, with the
// names it takes from its crate root.
#[allow(unused_imports, reason = "the names wire.rs takes from its crate root, whichever it uses")]
use omlet::{Error, Result};

mod record {
    pub use omlet::record::{Record, chunk, scan};
}

#[path = "../../src/wire.rs"]
#[allow(dead_code, reason = "the fuzz replays use part of wire.rs")]
mod wire;
