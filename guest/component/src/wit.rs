//! The component's door: the WIT exports of `wit/omlet.wit` (world
//! `rule-lines`) over the guest's common calls, and its imports as the
//! functions `DoorHost` calls. Translation only: no evaluation here.

use alloc::string::String;
use alloc::vec::Vec;

use omlet_lang::Route;
use omlet_lang::eval::{Cell, QueryError};
use omlet_lang::intranet::Net;
use omlet_lang::ir::IR_VERSION;

use crate::{Failure, Kind, RecordFailure};

wit_bindgen::generate!({
    path: "../../wit",
    world: "rule-lines",
});

use exports::omlet::rule::evaluator::{BatchOutput, ErrorKind, EvalError, Explained, RecordError, Route as WRoute};
use exports::omlet::rule::lines::BatchLines;
use exports::omlet::rule::meta;
use omlet::rule::knowledge;

struct Guest;

fn route(r: &WRoute) -> Route<'_> {
    match r {
        WRoute::Only => Route::Only,
        WRoute::Path(p) => Route::Path(p),
        WRoute::Model(m) => Route::Model(m),
    }
}

fn eval_error(f: Failure) -> EvalError {
    let kind = match f.kind {
        Kind::Unrouted => ErrorKind::Unrouted,
        Kind::Lookup => ErrorKind::Lookup,
        Kind::Failed => ErrorKind::Failed,
        Kind::Rejected => ErrorKind::Rejected,
    };
    EvalError { kind, message: f.message }
}

fn record_errors(errors: Vec<RecordFailure>) -> Vec<RecordError> {
    errors.into_iter().map(|e| RecordError { index: e.index, error: eval_error(e.failure) }).collect()
}

impl meta::Guest for Guest {
    fn info() -> Result<meta::RuleInfo, String> {
        let p = crate::program_now()?;
        Ok(meta::RuleInfo {
            ir_version: IR_VERSION,
            source_hash: p.source_hash.clone(),
            uses_clock: p.uses_clock(),
            models: p
                .models
                .iter()
                .map(|m| meta::Model {
                    name: m.name.clone(),
                    patterns: m.patterns.clone(),
                    enabled: m.enabled,
                    file: m.file.clone(),
                    statements: crate::model_statements(m),
                    lookups: crate::model_lookups(p, m)
                        .into_iter()
                        .map(|(statement, line, sql)| meta::Lookup { statement, line, sql })
                        .collect(),
                })
                .collect(),
            statements: p
                .statements
                .iter()
                .map(|s| meta::Statement {
                    sql: s.sql.clone(),
                    params: s.params.clone(),
                    table: s.table.clone(),
                    columns: s.columns.clone(),
                    line: s.line,
                    column: s.column,
                })
                .collect(),
        })
    }
}

impl exports::omlet::rule::evaluator::Guest for Guest {
    fn evaluate(generation: u64, r: WRoute, input: Vec<u8>) -> Result<Vec<u8>, EvalError> {
        let mut out = Vec::new();
        crate::evaluate(generation, route(&r), &input, &mut out).map_err(eval_error)?;
        Ok(out)
    }

    fn explain(generation: u64, r: WRoute, input: Vec<u8>) -> Explained {
        let (output, trace) = crate::explain(generation, route(&r), &input);
        Explained { output: output.map_err(eval_error), trace }
    }

    fn evaluate_batch(generation: u64, r: WRoute, input: Vec<u8>) -> BatchOutput {
        let mut records = Vec::new();
        let errors = crate::batch_frame(generation, route(&r), &input, &mut records);
        BatchOutput { records, errors: record_errors(errors) }
    }
}

impl exports::omlet::rule::lines::Guest for Guest {
    fn evaluate_batch_lines(generation: u64, r: WRoute, input: Vec<u8>) -> BatchLines {
        let (text, ends, errors) = crate::batch_lines(generation, route(&r), &input);
        BatchLines { text, ends, errors: record_errors(errors) }
    }
}

export!(Guest);

fn to_wit(c: &Cell) -> knowledge::Cell {
    match c {
        Cell::Null => knowledge::Cell::Null,
        Cell::Integer(i) => knowledge::Cell::Integer(*i),
        Cell::Real(f) => knowledge::Cell::Real(*f),
        Cell::Text(s) => knowledge::Cell::Text(s.clone()),
        Cell::Blob(b) => knowledge::Cell::Blob(b.clone()),
    }
}

fn from_wit(c: knowledge::Cell) -> Cell {
    match c {
        knowledge::Cell::Null => Cell::Null,
        knowledge::Cell::Integer(i) => Cell::Integer(i),
        knowledge::Cell::Real(f) => Cell::Real(f),
        knowledge::Cell::Text(s) => Cell::Text(s),
        knowledge::Cell::Blob(b) => Cell::Blob(b),
    }
}

/// `knowledge.query`: the first row, or none, and whether it may be kept.
pub(crate) fn query(statement: u32, params: &[Cell]) -> Result<(Option<Vec<Cell>>, bool), QueryError> {
    let wit: Vec<knowledge::Cell> = params.iter().map(to_wit).collect();
    match knowledge::query(statement, &wit) {
        Ok(answer) => Ok((answer.row.map(|r| r.into_iter().map(from_wit).collect()), answer.cacheable)),
        Err(e) => Err(QueryError { message: e.message, fatal: e.fatal }),
    }
}

/// `knowledge.columns`.
pub(crate) fn columns(statement: u32) -> Result<Vec<String>, QueryError> {
    knowledge::columns(statement).map_err(|e| QueryError { message: e.message, fatal: e.fatal })
}

/// `knowledge.intranet-nets`.
pub(crate) fn intranet_nets() -> Vec<Net> {
    knowledge::intranet_nets()
        .into_iter()
        .map(|n| Net::from_bits((u128::from(n.high) << 64) | u128::from(n.low), n.prefix))
        .collect()
}

/// `clock.now`: nanoseconds since the epoch and the local offset.
pub(crate) fn now() -> (i64, i32) {
    let n = omlet::rule::clock::now();
    (n.unix_nanos, n.utc_offset_seconds)
}
