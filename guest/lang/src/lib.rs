//! The OML language of omlet: parser, checker, IR and evaluator.
//!
//! `no_std` + `alloc`, so the same code runs inside the wasm guest and
//! natively (in `omlet build`, `omlet test --native` and the benches).
//!
//! The pipeline: [`parse`] turns rule text into an [`ast::Rule`];
//! [`compile`] checks it and lowers it to an [`ir::Program`]; the program is
//! serialised into the component by `omlet build` ([`ir::Program::to_bytes`]);
//! [`eval::evaluate`] runs one model of it over one record, asking an
//! [`eval::Host`] for SQL lookups and the clock.
//!
//! Compiling is bounded by [`Limits`] (nesting depth, source and pattern
//! size, expansion), so that no rule text can exhaust the compiler's or the
//! guest's stack, memory or time.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod ast;
pub mod bytes;
pub mod cell;
pub mod charset;
pub mod compile;
pub mod diag;
pub mod eval;
pub mod features;
pub mod fmt;
pub mod fnv;
pub mod frame;
pub mod intranet;
pub mod ir;
pub mod limits;
pub mod lines;
pub mod lint;
pub mod parse;
pub mod pipes;
pub mod route;
pub mod syntax;
pub mod time;
pub mod timefmt;
pub mod trace;
pub mod value;

pub use compile::{FileErrors, Source, compile, compile_with_limits};
pub use diag::Diagnostic;
pub use eval::{Cell, EvalError, Host, QueryError, evaluate};
pub use ir::{IR_VERSION, IrError, Program};
pub use limits::Limits;
pub use route::{Route, RouteError};
pub use value::{Field, Kind, Value};
