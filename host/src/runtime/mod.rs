//! Loading and running compiled rules in wasmtime.
//!
//! One [`Engine`] per process (Cranelift, pooling allocator). A [`Rule`] is
//! one component: compiled once, pre-instantiated once, then instantiated on
//! demand into pools of idle instances, each with its own `Store`. A call
//! takes an instance, evaluates, and gives it back, so the guest's decoded
//! IR and lookup cache survive across calls.
//!
//! A record's way through, by file:
//! - `rule.rs`: the public [`Rule`]. Records in, records out: a route by
//!   field is resolved here, against the record; records are written into
//!   frames, and output frames read back, here and in `gather.rs`.
//! - `gather.rs`: coalescing, a layer in front of the call: a one-record
//!   call that may have company joins a gathering on its thread, and the
//!   opener evaluates all its records in one batch call (`crate::coalesce`
//!   holds the gathering itself). A call's route is made into its WIT form
//!   once.
//! - `invoke.rs`: (route, frame) → output frame, knowing no [`Record`]: the
//!   calls of the guest and the fast-path policy. A call is first made
//!   without a fiber, on an instance linked against plain imports; it moves
//!   to the async path (a fiber, async imports served on tokio) when a
//!   lookup would wait for a database or the call computes past its budget.
//!   Errors become [`Error`]s there, and an instance that trapped or hit a
//!   limit is dropped.
//! - `store.rs`: what each instance's `Store` holds (limits, deadline,
//!   the call's knowledge generation); `pool.rs`: the idle instances, per
//!   thread; `imports.rs`: the host side of `knowledge`, `clock`, `types`.
//! - `engine.rs`: the [`Engine`], its instance budget and epoch ticker, and
//!   loading; `config.rs`: [`EngineConfig`] and [`LoadOptions`];
//!   `info.rs`: what a rule says about itself, and [`Explained`].

use crate::record::Record;
use crate::{Error, Result};

mod config;
mod core_path;
mod engine;
mod gather;
mod imports;
mod info;
mod invoke;
pub(crate) mod output;
mod pool;
mod rule;
mod store;

pub use config::{EngineConfig, LoadOptions};
pub use engine::Engine;
pub use info::{Explained, ModelInfo, RuleInfo, StatementInfo};
pub use rule::Rule;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "rule",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

use bindings::exports::omlet::rule::evaluator as ev;

/// Which model of a rule evaluates a record (spec §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// The rule's only model; [`Error::Unrouted`] when it has several.
    Only,
    /// A rule path such as `/nginx/access_log`: the enabled model whose
    /// `rule :` pattern claims it.
    Path(&'a str),
    /// A model by its `name :`, enabled or not.
    Model(&'a str),
    /// The rule path in the record's field of this name (which stays in the
    /// record), as `omlet run --rule-path-field` routes: each record may go
    /// to another model. A record without such a text field is
    /// [`Error::Unrouted`].
    Field(&'a str),
}

impl<'a> Route<'a> {
    /// The route of `record`: a [`Route::Field`] becomes the path its
    /// field holds; the others stay.
    pub(super) fn of(self, record: &'a Record) -> Result<Route<'a>> {
        match self {
            Route::Field(name) => match field_path(record, name) {
                Ok(path) => Ok(Route::Path(path)),
                Err(message) => Err(Error::Unrouted { index: 0, message }),
            },
            other => Ok(other),
        }
    }
}

/// Whether a gathering's route `a` is the caller's `b`, without making
/// the WIT form of `b` (a [`Route::Field`], resolved before, never is).
pub(super) fn same_route(a: &ev::Route, b: &Route<'_>) -> bool {
    match (a, b) {
        (ev::Route::Only, Route::Only) => true,
        (ev::Route::Path(a), Route::Path(b)) | (ev::Route::Model(a), Route::Model(b)) => a == b,
        _ => false,
    }
}

/// The WIT form of a route. A [`Route::Field`] is resolved against its
/// record before this ([`Route::of`]); one that was not names a path no
/// model claims, so its record is unrouted rather than misrouted.
pub(super) fn wit_route(route: Route<'_>) -> ev::Route {
    match route {
        Route::Only => ev::Route::Only,
        Route::Path(p) => ev::Route::Path(p.to_string()),
        Route::Model(m) => ev::Route::Model(m.to_string()),
        Route::Field(f) => ev::Route::Path(format!("(the field {f}, not read)")),
    }
}

/// The rule path in `record`'s field `name` ([`Route::Field`]), or why the
/// record has none (it is then unrouted).
pub(super) fn field_path<'r>(record: &'r Record, name: &str) -> std::result::Result<&'r str, String> {
    match record.fields().iter().find(|f| f.name == name).map(|f| &f.value) {
        Some(omlet_lang::value::Value::Chars(p)) => Ok(p),
        Some(_) => Err(format!("the rule-path field `{name}` is not text")),
        None => Err(format!("the record has no rule-path field `{name}`")),
    }
}

/// Runs a future to completion on a private current-thread runtime (one per
/// thread): the blocking facade for programs without a runtime of their own
/// (the `*_blocking` methods use it). Do not call it from inside an async
/// runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("cannot start a tokio runtime");
    }
    RT.with(|rt| rt.block_on(f))
}
