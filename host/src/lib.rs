//! omlet: OML rules compiled to WebAssembly components, evaluated in
//! wasmtime, with SQL lookups answered by the host.
//!
//! ```no_run
//! # async fn demo() -> omlet::Result<()> {
//! use std::sync::Arc;
//! let db = omlet::knowledge::sqlite::SqliteProvider::memory().await?;
//! omlet::knowledge::knowdb::load("examples/nginx/knowdb/knowdb.toml".as_ref(), &db).await?;
//! let knowledge = Arc::new(omlet::Knowledge::new(Arc::new(db)));
//! let engine = omlet::Engine::new()?;
//! let rule = engine.load_path("examples/nginx/nginx.oml".as_ref(), Some(knowledge)).await?;
//! let record = omlet::record::from_json_str(r#"{"client_ip":"10.0.0.7","status":"200"}"#).map_err(|m| omlet::Error::Input { what: "input".into(), message: m })?;
//! let out = rule.evaluate(&record).await?;
//! println!("{}", omlet::record::to_json_string(&out));
//! # Ok(()) }
//! ```
//!
//! Modules, one job each:
//! - [`build`]: OML source → component bytes (`omlet build`);
//! - [`guest`]: the prebuilt guest module and its freshness stamp;
//! - [`runtime`]: engine, rules, instance pool, the host side of the imports;
//! - [`knowledge`]: providers answering lookups (SQLite; knowdb loader);
//! - [`record`]: records and their JSON form;
//! - [`stream`]: JSONL/CSV input through a rule set, routed, in order (`omlet run`);
//! - [`clock`]: the host clock for `Now::*`.

#![warn(missing_docs)]

pub mod build;
pub mod clock;
pub mod error;
pub mod guest;
pub mod knowledge;
pub mod record;
pub mod runtime;
pub mod stream;
mod wire;

pub use error::{Error, Limit, Result};
pub use knowledge::Knowledge;
pub use record::Record;
pub use runtime::{Engine, EngineConfig, ModelInfo, Route, Rule, RuleInfo};
