//! omlet's integration tests, as one test binary (as wasmtime does): each
//! module was its own binary, and every one of them linked wasmtime and sqlx.
//! Run one module with `cargo test -p omlet --test all MODULE::`.

mod cache;
mod coalesce;
mod component;
mod core_abi;
mod databases;
mod e2e;
mod fuzz_regressions;
mod invariants;
mod knowdb;
mod portable;
mod rule_sets;
mod sandbox;
mod trust;
mod trust3_lookups;
mod trust3_reach;
