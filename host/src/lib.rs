//! omlet: OML rules compiled to WebAssembly components, evaluated in
//! wasmtime, with SQL lookups answered by the host.
//!
//! An [`Engine`] loads a [`Rule`] from an `.oml` file, a directory of them (a
//! rule set) or a component built by `omlet build`; the rule evaluates
//! [`Record`]s. Lookups go to a [`Knowledge`] base (SQLite, PostgreSQL or
//! MySQL/MariaDB, behind a cache), opened from a [`KnowledgeConfig`]:
//!
//! ```
//! # omlet::block_on(async {
//! use omlet::{Engine, KnowledgeConfig, LoadOptions, Record};
//!
//! // An in-memory SQLite loaded with the nginx example's tables.
//! let mut config = KnowledgeConfig::for_url("sqlite::memory:");
//! config.knowdb = Some("../examples/nginx/knowdb/knowdb.toml".into());
//! let knowledge = config.open().await?;
//!
//! let engine = Engine::new()?;
//! let rule = engine.load_path("../examples/nginx/nginx.oml", &LoadOptions::new().knowledge(knowledge)).await?;
//! let record = Record::from_json(r#"{"client_ip":"10.0.0.7","status":"200"}"#)?;
//! let out = rule.evaluate(&record).await?;
//! assert!(out.contains("client_ip"));
//! println!("{out}");
//! # Ok::<(), omlet::Error>(())
//! # }).unwrap();
//! ```
//!
//! Every failure is an [`Error`] a host can match on: a rule that does not
//! compile ([`Error::Compile`], with its [`Diagnostic`]s), a component that
//! does not load, bad input, a record no model takes, a failed lookup, a
//! [`Limit`] reached (time, fuel, memory, sizes), a guest trap. A trap or a
//! limit costs only the call's own records; the rule goes on.
//!
//! [`stream`] runs JSONL or CSV input through a rule, in order, with one
//! outcome per record: what `omlet run` is made of. A host with a source of
//! its own (a queue, say) hands its inputs to [`stream::evaluate_json`] in
//! chunks, as the CLI's Kafka worker does.
//!
//! Beyond the names above, the modules say more:
//! - [`knowledge`]: knowledge bases in full: providers (one per database,
//!   and the [`knowledge::Provider`] trait for a host's own), knowdb
//!   loading, the SQL guard, in-memory tables, the reload watcher;
//! - [`build`]: OML sources into components, as `omlet build` does;
//! - [`record`]: [`Record`]s and their JSON form;
//! - [`stream`]: inputs, runs and outcomes;
//! - [`guest`]: the guest module embedded in this library, and its stamp;
//! - [`code_cache`]: compiled guest code kept between runs;
//! - [`clock`]: the clock `Now::*` reads.
//!
//! The `omlet` command, the benches and the tests use these same modules;
//! no module is hidden from these pages (a few methods that only omlet's
//! own tools call are, and carry no promise).

#![warn(missing_docs)]

pub mod build;
pub mod clock;
mod coalesce;
pub mod code_cache;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod guest;
/// Knowledge bases: the `omlet-knowledge` crate (see its own page).
pub use omlet_knowledge as knowledge;
pub mod record;
mod runtime;
pub mod stream;

pub use build::{BuildLimits, RuleSource};
pub use error::{Diagnostic, Error, Limit, Result};
pub use knowledge::{
    AtomicHistogram, CacheConfig, CacheMode, Histogram, Knowledge, KnowledgeConfig, OnLookupError, StatementStats, Stats,
    StatsSnapshot,
};
pub use omlet_lang::Limits as CompileLimits;
/// Evaluation traces ([`Rule::explain`]): the types, and their JSON and text forms.
pub use omlet_lang::trace;
pub use record::{Record, Value};
pub use runtime::{Engine, EngineConfig, Explained, LoadOptions, ModelInfo, Route, Rule, RuleInfo, StatementInfo, block_on};
