//! The host side of the guest's imports (`knowledge`, `clock`, `types`), as
//! async functions for fibers and as plain functions for fiber-less calls.

use std::sync::Arc;
use std::time::Instant;

use omlet_lang::Cell;
use wasmtime::Engine as WtEngine;
use wasmtime::component::Linker;

use super::store::{Shared, StoreState};
use crate::Result;
use crate::knowledge::{BoundStatement, Knowledge};

use super::bindings::omlet::rule::{clock, knowledge as wk, types};

// ----- host side of the imports ------------------------------------------------

pub(super) fn to_lang(c: wk::Cell) -> Cell {
    match c {
        wk::Cell::Null => Cell::Null,
        wk::Cell::Integer(i) => Cell::Integer(i),
        wk::Cell::Real(f) => Cell::Real(f),
        wk::Cell::Text(s) => Cell::Text(s),
        wk::Cell::Blob(b) => Cell::Blob(b),
    }
}

pub(super) fn to_wit(c: Cell) -> wk::Cell {
    match c {
        Cell::Null => wk::Cell::Null,
        Cell::Integer(i) => wk::Cell::Integer(i),
        Cell::Real(f) => wk::Cell::Real(f),
        Cell::Text(s) => wk::Cell::Text(s),
        Cell::Blob(b) => wk::Cell::Blob(b),
    }
}

pub(super) fn qerr(code: wk::ErrorCode, message: String) -> wk::QueryError {
    wk::QueryError { code, message, fatal: false }
}

/// The knowledge base and the statement a `knowledge.query` names, or the
/// error the guest gets.
pub(super) fn resolve(shared: &Shared, statement: u32) -> Result<(&Arc<Knowledge>, &BoundStatement), wk::QueryError> {
    let Some(k) = &shared.knowledge else {
        return Err(qerr(wk::ErrorCode::Unavailable, "no knowledge base is configured".into()));
    };
    match shared.statements.get(statement as usize) {
        Some(stmt) => Ok((k, stmt)),
        None => Err(qerr(wk::ErrorCode::UnknownStatement, format!("no statement #{statement}"))),
    }
}

/// A row as the guest gets it; "no row" is kept in the guest only when
/// negative caching is on.
pub(super) fn answer(k: &Knowledge, row: Option<Vec<Cell>>) -> wk::Answer {
    let cacheable = guest_may_keep(k, &row);
    wk::Answer { row: row.map(|r| r.into_iter().map(to_wit).collect()), cacheable }
}

/// Whether the guest may keep `row` until the generation changes: when the
/// knowledge base lets guests cache, and for "no row" only with negative
/// caching on. Both paths' `query` answer by it.
pub(super) fn guest_may_keep(k: &Knowledge, row: &Option<Vec<Cell>>) -> bool {
    k.cacheable() && (row.is_some() || k.config().cache.negative)
}

pub(super) fn columns(shared: &Shared, statement: u32) -> Result<Vec<String>, wk::QueryError> {
    match shared.statements.get(statement as usize) {
        Some(s) => Ok(s.columns.clone()),
        None => Err(qerr(wk::ErrorCode::UnknownStatement, format!("no statement #{statement}"))),
    }
}

pub(super) fn now() -> clock::Instant {
    let (unix_nanos, utc_offset_seconds) = crate::clock::now();
    clock::Instant { unix_nanos, utc_offset_seconds }
}

impl wk::Host for StoreState {
    async fn query(&mut self, statement: u32, params: Vec<wk::Cell>) -> wasmtime::Result<Result<wk::Answer, wk::QueryError>> {
        let shared = self.shared.clone();
        let (k, stmt) = match resolve(&shared, statement) {
            Ok(found) => found,
            Err(e) => return Ok(Err(e)),
        };
        let params: Vec<Cell> = params.into_iter().map(to_lang).collect();
        // Waiting for the lookup is not the guest's computing time.
        let waited = Instant::now();
        let (row, layer) = k.query_layer(self.generation, stmt, &params).await;
        self.in_host += waited.elapsed();
        if let Some(layers) = &mut self.layers {
            layers.push((statement, layer.name(), waited.elapsed().as_micros() as u64));
        }
        Ok(match row {
            Ok(row) => Ok(answer(k, row)),
            Err(e) => {
                let code = match e.kind {
                    crate::knowledge::LookupErrorKind::Timeout => wk::ErrorCode::Timeout,
                    crate::knowledge::LookupErrorKind::Unavailable => wk::ErrorCode::Unavailable,
                    _ => wk::ErrorCode::Failed,
                };
                let message = e.message;
                let fatal = k.config().on_lookup_error == crate::knowledge::OnLookupError::Fail;
                Err(wk::QueryError { code, message: format!("`{}`: {message}", stmt.sql), fatal })
            }
        })
    }

    async fn columns(&mut self, statement: u32) -> wasmtime::Result<Result<Vec<String>, wk::QueryError>> {
        Ok(columns(&self.shared, statement))
    }

    async fn intranet_nets(&mut self) -> wasmtime::Result<Vec<wk::Network>> {
        Ok(self.shared.nets.clone())
    }
}

impl clock::Host for StoreState {
    async fn now(&mut self) -> wasmtime::Result<clock::Instant> {
        Ok(now())
    }
}

/// The imports as plain functions, for fiber-less calls. A lookup is
/// answered from the shared cache; one it cannot answer without waiting
/// marks the call `would_block` and fails as fatal, so that the guest stops
/// early and the call is made again on the async path.
pub(super) fn sync_imports(engine: &WtEngine) -> wasmtime::Result<Linker<StoreState>> {
    let mut linker: Linker<StoreState> = Linker::new(engine);
    let mut knowledge = linker.instance("omlet:rule/knowledge@0.6.0")?;
    knowledge.func_wrap("query", |mut store, (statement, params): (u32, Vec<wk::Cell>)| {
        let s = store.data_mut();
        let shared = s.shared.clone();
        let (k, stmt) = match resolve(&shared, statement) {
            Ok(found) => found,
            Err(e) => return Ok((Err(e),)),
        };
        let params: Vec<Cell> = params.into_iter().map(to_lang).collect();
        Ok((match k.query_cached(s.generation, stmt, &params) {
            Some(row) => Ok(answer(k, row)),
            None => {
                s.would_block = true;
                Err(wk::QueryError { code: wk::ErrorCode::Unavailable, message: "not cached".into(), fatal: true })
            }
        },))
    })?;
    knowledge.func_wrap("columns", |store, (statement,): (u32,)| Ok((columns(&store.data().shared, statement),)))?;
    knowledge.func_wrap("intranet-nets", |store, (): ()| Ok((store.data().shared.nets.clone(),)))?;
    let mut clock = linker.instance("omlet:rule/clock@0.6.0")?;
    clock.func_wrap("now", |_, (): ()| Ok((now(),)))?;
    Ok(linker)
}

impl types::Host for StoreState {}
