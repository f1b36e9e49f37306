//! Loading and running compiled rules in wasmtime.
//!
//! One [`Engine`] per process (Cranelift, pooling allocator). A [`Rule`] is
//! one component: compiled once, pre-instantiated once (`RulePre`), then
//! instantiated on demand into a small pool of idle instances, each with its
//! own `Store`. A call takes an instance from the pool, evaluates, and gives
//! it back, so the guest's decoded IR and lookup cache survive across calls.
//!
//! The guest's `knowledge.query` and `clock.now` imports are async host
//! functions served on tokio.

use std::path::Path;
use std::sync::{Arc, Mutex};

use omlet_lang::Cell;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine as WtEngine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};

use crate::build::{self, RuleSource};
use crate::knowledge::{BoundStatement, Knowledge};
use crate::record::Record;
use crate::wire;
use crate::{Error, Result};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "rule",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

use bindings::exports::omlet::rule::evaluator as ev;
use bindings::omlet::rule::{clock, knowledge as wk, types};
pub use omlet_lang::Route;

/// Limits of the pooling allocator (per engine).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Most instances alive at once, across all rules.
    pub max_instances: u32,
    /// Most linear memory per instance, in bytes.
    pub max_memory: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { max_instances: 256, max_memory: 64 << 20 }
    }
}

/// The wasmtime engine shared by all rules.
#[derive(Clone)]
pub struct Engine {
    inner: WtEngine,
    linker: Arc<Linker<StoreState>>,
}

impl Engine {
    /// An engine with the default limits ([`EngineConfig::default`]).
    pub fn new() -> Result<Engine> {
        Engine::with_config(&EngineConfig::default())
    }

    /// An engine with explicit pooling-allocator limits.
    pub fn with_config(cfg: &EngineConfig) -> Result<Engine> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(cfg.max_instances)
            .total_core_instances(cfg.max_instances * 4)
            .total_memories(cfg.max_instances)
            .total_tables(cfg.max_instances * 2)
            .total_stacks(cfg.max_instances)
            .max_memory_size(cfg.max_memory)
            .max_memories_per_component(2)
            .max_core_instances_per_component(8)
            .max_tables_per_component(4);
        let mut config = Config::new();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        // A 4 GiB reservation (plus guard) lets Cranelift drop bounds checks on
        // every guest memory access; it is address space, not memory.
        config.memory_reservation(1 << 32);
        // `OMLET_PERFMAP=1`: write /tmp/perf-PID.map so that `perf` names guest functions.
        if std::env::var_os("OMLET_PERFMAP").is_some_and(|v| v == "1") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let inner = WtEngine::new(&config).map_err(Error::wasm)?;
        let mut linker: Linker<StoreState> = Linker::new(&inner);
        bindings::Rule::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut linker, |s| s).map_err(Error::wasm)?;
        Ok(Engine { inner, linker: Arc::new(linker) })
    }

    /// The underlying wasmtime engine (for hosts that add their own components).
    pub fn wasmtime(&self) -> &WtEngine {
        &self.inner
    }

    /// Loads a rule from a `.wasm` component, an `.oml` source, or a
    /// directory of `.oml` sources (a rule set; compiled here).
    pub async fn load_path(&self, path: &Path, knowledge: Option<Arc<Knowledge>>) -> Result<Rule> {
        let bytes = if path.extension().is_some_and(|e| e == "wasm") {
            std::fs::read(path).map_err(|e| Error::io(path, e))?
        } else {
            build::build_component(&RuleSource::collect(&[path.to_path_buf()])?)?
        };
        self.load(&bytes, knowledge).await
    }

    /// Compiles rule sources into one rule set and loads it.
    pub async fn load_sources(&self, sources: &[RuleSource], knowledge: Option<Arc<Knowledge>>) -> Result<Rule> {
        self.load(&build::build_component(sources)?, knowledge).await
    }

    /// Compiles rule source text and loads it.
    pub async fn load_source(&self, file: &str, text: &str, knowledge: Option<Arc<Knowledge>>) -> Result<Rule> {
        let bytes = build::build_component(&[RuleSource { file: file.to_string(), text: text.to_string() }])?;
        self.load(&bytes, knowledge).await
    }

    /// Loads a component; binds its lookups to `knowledge` (each statement is
    /// prepared now, so a bad one fails here).
    pub async fn load(&self, component: &[u8], knowledge: Option<Arc<Knowledge>>) -> Result<Rule> {
        let component = Component::from_binary(&self.inner, component).map_err(Error::wasm)?;
        let pre = self.linker.instantiate_pre(&component).map_err(Error::wasm)?;
        let pre = bindings::RulePre::new(pre).map_err(Error::wasm)?;
        let shared = Arc::new(Shared { knowledge, statements: Vec::new() });
        let mut inst = Instance::new(&self.inner, &pre, shared.clone()).await?;
        let info = inst
            .bindings
            .omlet_rule_meta()
            .call_info(&mut inst.store)
            .await
            .map_err(Error::wasm)?
            .map_err(Error::Rule)?;
        let info = RuleInfo::from(info);
        let statements = match &shared.knowledge {
            Some(k) => k.bind(&info.statements).await?,
            None => Vec::new(),
        };
        let shared = Arc::new(Shared { knowledge: shared.knowledge.clone(), statements });
        inst.store.data_mut().shared = shared.clone();
        Ok(Rule {
            engine: self.inner.clone(),
            pre,
            shared,
            info,
            idle: Mutex::new(vec![inst]),
        })
    }
}

/// What a rule says about itself (from the guest's `meta.info`).
#[derive(Debug, Clone)]
pub struct RuleInfo {
    /// The IR format version the guest reads.
    pub ir_version: u32,
    /// Hex SHA-256 of the rule sources (file names and texts) the set was built from.
    pub source_hash: String,
    /// The models, in build order (files sorted by path).
    pub models: Vec<ModelInfo>,
    /// Every SQL statement of the set: the allow-list of what `knowledge.query` may run.
    pub statements: Vec<omlet_lang::ir::SqlStatement>,
    /// Whether some model reads the clock (`Now::*`).
    pub uses_clock: bool,
}

/// One model of a rule set.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// The `name :` of the model; [`Route::Model`] selects by it.
    pub name: String,
    /// Its `rule :` patterns: the rule paths it claims (when enabled).
    pub patterns: Vec<String>,
    /// `enable : false` models are reached by name only, never by path.
    pub enabled: bool,
    /// The rule file it was compiled from.
    pub file: String,
    /// The statements it may run: indices into [`RuleInfo::statements`].
    pub statements: Vec<u32>,
}

impl From<bindings::exports::omlet::rule::meta::RuleInfo> for RuleInfo {
    fn from(i: bindings::exports::omlet::rule::meta::RuleInfo) -> Self {
        // A statement belongs to the model that may run it.
        let file_of = |index: usize| {
            let owner = i.models.iter().find(|m| m.statements.contains(&(index as u32)));
            owner.map(|m| m.file.clone()).unwrap_or_default()
        };
        let statements = i
            .statements
            .into_iter()
            .enumerate()
            .map(|(index, s)| omlet_lang::ir::SqlStatement {
                sql: s.sql,
                params: s.params,
                table: s.table,
                columns: s.columns,
                file: file_of(index),
                line: s.line,
                column: s.column,
            })
            .collect();
        RuleInfo {
            ir_version: i.ir_version,
            source_hash: i.source_hash,
            uses_clock: i.uses_clock,
            models: i
                .models
                .into_iter()
                .map(|m| ModelInfo {
                    name: m.name,
                    patterns: m.patterns,
                    enabled: m.enabled,
                    file: m.file,
                    statements: m.statements,
                })
                .collect(),
            statements,
        }
    }
}

/// What every instance of one rule shares.
pub(crate) struct Shared {
    knowledge: Option<Arc<Knowledge>>,
    statements: Vec<BoundStatement>,
}

/// The data of one instance's `Store`.
pub(crate) struct StoreState {
    shared: Arc<Shared>,
}

struct Instance {
    store: Store<StoreState>,
    bindings: bindings::Rule,
}

impl Instance {
    async fn new(engine: &WtEngine, pre: &bindings::RulePre<StoreState>, shared: Arc<Shared>) -> Result<Instance> {
        let mut store = Store::new(engine, StoreState { shared });
        let bindings = pre.instantiate_async(&mut store).await.map_err(Error::wasm)?;
        Ok(Instance { store, bindings })
    }
}

/// A loaded rule, ready to evaluate records. Cheap to share (`Arc<Rule>`);
/// calls from several tasks run on separate instances.
pub struct Rule {
    engine: WtEngine,
    pre: bindings::RulePre<StoreState>,
    shared: Arc<Shared>,
    info: RuleInfo,
    idle: Mutex<Vec<Instance>>,
}

impl Rule {
    /// What the component holds, read once at load.
    pub fn info(&self) -> &RuleInfo {
        &self.info
    }

    fn generation(&self) -> u64 {
        self.shared.knowledge.as_ref().map(|k| k.generation()).unwrap_or(0)
    }

    async fn checkout(&self) -> Result<Instance> {
        let idle = self.idle.lock().ok().and_then(|mut v| v.pop());
        match idle {
            Some(i) => Ok(i),
            None => Instance::new(&self.engine, &self.pre, self.shared.clone()).await,
        }
    }

    fn checkin(&self, inst: Instance) {
        if let Ok(mut v) = self.idle.lock() {
            v.push(inst);
        }
    }

    /// Evaluates one record with the rule's only model (see
    /// [`Rule::evaluate_on`] for rule sets).
    pub async fn evaluate(&self, record: &Record) -> Result<Record> {
        self.evaluate_on(Route::Only, record).await
    }

    /// Evaluates one record with the model `route` names. A route that names
    /// no model gives [`Error::Unrouted`].
    pub async fn evaluate_on(&self, route: Route<'_>, record: &Record) -> Result<Record> {
        let input = wire::encode_record(record);
        let mut inst = self.checkout().await?;
        let out = inst
            .bindings
            .omlet_rule_evaluator()
            .call_evaluate(&mut inst.store, self.generation(), &wit_route(route), &input)
            .await;
        match out {
            Ok(r) => {
                self.checkin(inst);
                let r = r.map_err(|e| record_error(0, e))?;
                wire::decode_record(&r).map_err(|message| Error::Record { index: 0, message })
            }
            // A trapped instance is dropped, never reused.
            Err(e) => Err(Error::wasm(e)),
        }
    }

    /// Evaluates records in one guest call with the rule's only model. Each
    /// input gets its own result, in order.
    pub async fn evaluate_batch(&self, records: &[Record]) -> Result<Vec<Result<Record>>> {
        self.evaluate_batch_on(Route::Only, records).await
    }

    /// Evaluates records in one guest call, all with the model `route` names.
    /// To route records by their own rule paths, group them by path first.
    pub async fn evaluate_batch_on(&self, route: Route<'_>, records: &[Record]) -> Result<Vec<Result<Record>>> {
        self.evaluate_batch_iter(route, records.iter()).await
    }

    /// [`Rule::evaluate_batch_on`] over borrowed records, wherever they live.
    pub(crate) async fn evaluate_batch_iter<'r>(
        &self,
        route: Route<'_>,
        records: impl ExactSizeIterator<Item = &'r Record>,
    ) -> Result<Vec<Result<Record>>> {
        let n = records.len();
        let frame = wire::encode_frame(records);
        let mut inst = self.checkout().await?;
        let out = inst
            .bindings
            .omlet_rule_evaluator()
            .call_evaluate_batch(&mut inst.store, self.generation(), &wit_route(route), &frame)
            .await
            .map_err(Error::wasm)?;
        self.checkin(inst);
        let errors = out.errors.into_iter().map(|e| (e.index as usize, record_error(e.index as usize, e.error)));
        wire::decode_batch(n, &out.records, errors)
    }

    /// [`Rule::evaluate`] for programs without an async runtime.
    pub fn evaluate_blocking(&self, record: &Record) -> Result<Record> {
        block_on(self.evaluate(record))
    }

    /// [`Rule::evaluate_on`] for programs without an async runtime.
    pub fn evaluate_on_blocking(&self, route: Route<'_>, record: &Record) -> Result<Record> {
        block_on(self.evaluate_on(route, record))
    }

    /// [`Rule::evaluate_batch`] for programs without an async runtime.
    pub fn evaluate_batch_blocking(&self, records: &[Record]) -> Result<Vec<Result<Record>>> {
        block_on(self.evaluate_batch(records))
    }

    /// [`Rule::evaluate_batch_on`] for programs without an async runtime.
    pub fn evaluate_batch_on_blocking(&self, route: Route<'_>, records: &[Record]) -> Result<Vec<Result<Record>>> {
        block_on(self.evaluate_batch_on(route, records))
    }
}

fn wit_route(route: Route<'_>) -> ev::Route {
    match route {
        Route::Only => ev::Route::Only,
        Route::Path(p) => ev::Route::Path(p.to_string()),
        Route::Model(m) => ev::Route::Model(m.to_string()),
    }
}

fn record_error(index: usize, e: ev::EvalError) -> Error {
    match e.kind {
        ev::ErrorKind::Unrouted => Error::Unrouted { index, message: e.message },
        ev::ErrorKind::Failed => Error::Record { index, message: e.message },
    }
}

/// Runs a future to completion on a private current-thread runtime (one per
/// thread): the blocking facade for programs without a runtime of their own.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("cannot start a tokio runtime");
    }
    RT.with(|rt| rt.block_on(f))
}

// ----- host side of the imports ------------------------------------------------

fn to_lang(c: wk::Cell) -> Cell {
    match c {
        wk::Cell::Null => Cell::Null,
        wk::Cell::Integer(i) => Cell::Integer(i),
        wk::Cell::Real(f) => Cell::Real(f),
        wk::Cell::Text(s) => Cell::Text(s),
        wk::Cell::Blob(b) => Cell::Blob(b),
    }
}

fn to_wit(c: Cell) -> wk::Cell {
    match c {
        Cell::Null => wk::Cell::Null,
        Cell::Integer(i) => wk::Cell::Integer(i),
        Cell::Real(f) => wk::Cell::Real(f),
        Cell::Text(s) => wk::Cell::Text(s),
        Cell::Blob(b) => wk::Cell::Blob(b),
    }
}

fn qerr(code: wk::ErrorCode, message: String) -> wk::QueryError {
    wk::QueryError { code, message, fatal: false }
}

impl wk::Host for StoreState {
    async fn query(&mut self, statement: u32, params: Vec<wk::Cell>) -> wasmtime::Result<Result<wk::Answer, wk::QueryError>> {
        let shared = self.shared.clone();
        let Some(k) = &shared.knowledge else {
            return Ok(Err(qerr(wk::ErrorCode::Unavailable, "no knowledge base is configured".into())));
        };
        let Some(stmt) = shared.statements.get(statement as usize) else {
            return Ok(Err(qerr(wk::ErrorCode::UnknownStatement, format!("no statement #{statement}"))));
        };
        let params: Vec<Cell> = params.into_iter().map(to_lang).collect();
        Ok(match k.query(stmt, &params).await {
            Ok(row) => {
                // "No row" is kept in the guest only when negative caching is on.
                let cacheable = k.cacheable() && (row.is_some() || k.config().cache.negative);
                Ok(wk::Answer { row: row.map(|r| r.into_iter().map(to_wit).collect()), cacheable })
            }
            Err(message) => {
                let code = if message.contains("timed out") { wk::ErrorCode::Timeout } else { wk::ErrorCode::Failed };
                let fatal = k.config().on_lookup_error == crate::knowledge::OnLookupError::Fail;
                Err(wk::QueryError { code, message: format!("`{}`: {message}", stmt.sql), fatal })
            }
        })
    }

    async fn columns(&mut self, statement: u32) -> wasmtime::Result<Result<Vec<String>, wk::QueryError>> {
        Ok(match self.shared.statements.get(statement as usize) {
            Some(s) => Ok(s.columns.clone()),
            None => Err(qerr(wk::ErrorCode::UnknownStatement, format!("no statement #{statement}"))),
        })
    }
}

impl clock::Host for StoreState {
    async fn now(&mut self) -> wasmtime::Result<clock::Instant> {
        let (unix_nanos, utc_offset_seconds) = crate::clock::now();
        Ok(clock::Instant { unix_nanos, utc_offset_seconds })
    }
}

impl types::Host for StoreState {}
