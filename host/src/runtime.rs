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
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use omlet_lang::Cell;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine as WtEngine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, UpdateDeadline};

use crate::build::{self, RuleSource};
use crate::error::Limit;
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
}

/// How to load a rule: the knowledge base its lookups read, and the limits
/// of compiling it. The default has no knowledge base (a rule with lookups
/// still loads; its lookups fail as unavailable) and the engine's build
/// limits.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct LoadOptions {
    /// The knowledge base lookups are bound to (each statement is checked and
    /// prepared at load, so a bad one fails the load).
    pub knowledge: Option<Arc<Knowledge>>,
    /// Build limits for rule sources; the engine's ([`EngineConfig::build`]) when unset.
    pub build: Option<build::BuildLimits>,
}

impl LoadOptions {
    /// The defaults: no knowledge base, the engine's build limits.
    pub fn new() -> LoadOptions {
        LoadOptions::default()
    }

    /// With lookups bound to `knowledge` (an `Arc<Knowledge>`, or an
    /// `Option` of one: `None` for no knowledge base).
    pub fn knowledge(mut self, knowledge: impl Into<Option<Arc<Knowledge>>>) -> LoadOptions {
        self.knowledge = knowledge.into();
        self
    }

    /// With these build limits instead of the engine's.
    pub fn build_limits(mut self, limits: build::BuildLimits) -> LoadOptions {
        self.build = Some(limits);
        self
    }
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions").field("knowledge", &self.knowledge.is_some()).field("build", &self.build).finish()
    }
}

/// The limits of an engine: what one rule call may take. Every field has a
/// default; see docs/deployment.md for the whole list of limits.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Most instances alive at once, across all rules (default 256). A call
    /// that needs an instance past this waits for one to come back; idle
    /// instances of other rules are dropped to make room.
    pub max_instances: u32,
    /// Most linear memory per instance, in bytes (default 64 MiB). A call
    /// that needs more fails with [`Limit::Memory`]; its instance is dropped.
    pub max_memory: usize,
    /// Most time one guest call may compute (default 5 s). Time spent waiting
    /// for lookups is not counted: lookups have their own timeout. A call
    /// past it fails with [`Limit::Deadline`]; its instance is dropped.
    pub call_deadline: Duration,
    /// Fuel per guest call (default none): a count of wasm operations, for
    /// deterministic limits in tests. Costs some speed on every call when set.
    /// A call that runs out fails with [`Limit::Fuel`].
    pub fuel: Option<u64>,
    /// Most bytes of one record as it crosses into the guest (default 16 MiB).
    /// A bigger record fails with [`Limit::RecordBytes`] without a call.
    /// It also bounds the fields of a record: each costs at least 13 bytes
    /// in the frame, so 16 MiB hold at most about 1.3 million.
    pub max_record_bytes: usize,
    /// The limits of compiling rule sources in `load_path`, `load_source`
    /// and `load_sources` (the compiler's, the rule file size, the IR size).
    pub build: build::BuildLimits,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_instances: 256,
            max_memory: 64 << 20,
            call_deadline: Duration::from_secs(5),
            fuel: None,
            max_record_bytes: 16 << 20,
            build: build::BuildLimits::default(),
        }
    }
}

/// How often the engine's epoch advances: the granularity of call deadlines.
const TICK: Duration = Duration::from_millis(10);

/// The wasmtime engine shared by all rules.
#[derive(Clone)]
pub struct Engine {
    inner: WtEngine,
    linker: Arc<Linker<StoreState>>,
    slots: Arc<Slots>,
    config: Arc<EngineConfig>,
}

/// The engine's instance budget: one permit per live instance, and the idle
/// pools of every loaded rule, so that a call short of a permit can drop an
/// idle instance of another rule instead of waiting for ever.
struct Slots {
    permits: Arc<Semaphore>,
    /// Woken whenever an instance goes back to an idle pool.
    returned: Notify,
    pools: Mutex<Vec<Weak<Pool>>>,
}

type Pool = Mutex<Vec<Instance>>;

impl Slots {
    /// A permit for one more live instance; waits while all are in use.
    async fn reserve(&self) -> OwnedSemaphorePermit {
        loop {
            if let Ok(p) = self.permits.clone().try_acquire_owned() {
                return p;
            }
            let returned = self.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            if self.drop_one_idle() {
                continue;
            }
            tokio::select! {
                p = self.permits.clone().acquire_owned() => {
                    if let Ok(p) = p { return p; }
                }
                _ = returned => {}
            }
        }
    }

    /// Drops one idle instance of any rule, freeing its permit.
    fn drop_one_idle(&self) -> bool {
        let Ok(mut pools) = self.pools.lock() else { return false };
        pools.retain(|w| w.strong_count() > 0);
        for pool in pools.iter().filter_map(Weak::upgrade) {
            let victim = pool.lock().ok().and_then(|mut v| v.pop());
            if victim.is_some() {
                return true;
            }
        }
        false
    }
}

impl Engine {
    /// An engine with the default limits ([`EngineConfig::default`]).
    pub fn new() -> Result<Engine> {
        Engine::with_config(&EngineConfig::default())
    }

    /// An engine with explicit limits.
    pub fn with_config(cfg: &EngineConfig) -> Result<Engine> {
        if cfg.max_instances == 0 || cfg.call_deadline.is_zero() {
            return Err(Error::Config("max_instances and call_deadline must be above zero".into()));
        }
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
        // Call deadlines: a ticker advances the epoch; the check in guest
        // loops and calls is a load and a compare.
        config.epoch_interruption(true);
        config.consume_fuel(cfg.fuel.is_some());
        // `OMLET_PERFMAP=1`: write /tmp/perf-PID.map so that `perf` names guest functions.
        if std::env::var_os("OMLET_PERFMAP").is_some_and(|v| v == "1") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let inner = WtEngine::new(&config).map_err(|e| Error::load("engine", e))?;
        let mut linker: Linker<StoreState> = Linker::new(&inner);
        bindings::Rule::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut linker, |s| s)
            .map_err(|e| Error::load("linker", e))?;
        start_ticker(&inner);
        let slots = Arc::new(Slots {
            permits: Arc::new(Semaphore::new(cfg.max_instances as usize)),
            returned: Notify::new(),
            pools: Mutex::new(Vec::new()),
        });
        Ok(Engine { inner, linker: Arc::new(linker), slots, config: Arc::new(cfg.clone()) })
    }

    /// The limits this engine enforces.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The underlying wasmtime engine (omlet's benches and tools).
    #[doc(hidden)]
    pub fn wasmtime(&self) -> &WtEngine {
        &self.inner
    }

    /// Loads a rule from a `.wasm` component (built by `omlet build`), an
    /// `.oml` source, or a directory of `.oml` sources (a rule set), compiled
    /// here.
    ///
    /// Fails with [`Error::Io`] for a file that cannot be read,
    /// [`Error::Compile`] for a rule that does not compile,
    /// [`Error::Limit`] ([`Limit::RuleBytes`]) for one over the build limits,
    /// [`Error::Load`] for a component wasmtime refuses, and
    /// [`Error::Statement`] for a lookup the knowledge base refuses.
    pub async fn load_path(&self, path: impl AsRef<Path>, options: &LoadOptions) -> Result<Rule> {
        let path = path.as_ref();
        let bytes = if path.extension().is_some_and(|e| e == "wasm") {
            std::fs::read(path).map_err(|e| Error::io(path, e))?
        } else {
            let limits = options.build.as_ref().unwrap_or(&self.config.build);
            build::build_component_with(&RuleSource::collect_limited(&[path.to_path_buf()], limits.max_rule_file_bytes)?, limits)?
        };
        self.load_component(&bytes, options).await
    }

    /// Compiles rule sources into one rule set and loads it.
    pub async fn load_sources(&self, sources: &[RuleSource], options: &LoadOptions) -> Result<Rule> {
        let limits = options.build.as_ref().unwrap_or(&self.config.build);
        self.load_component(&build::build_component_with(sources, limits)?, options).await
    }

    /// Compiles the rule text `text` (named `file` in its errors) and loads it.
    ///
    /// ```
    /// # omlet::block_on(async {
    /// let engine = omlet::Engine::new()?;
    /// let rule = engine.load_source("demo.oml", "name : demo\n---\nn : digit = read(n) ;\n", &Default::default()).await?;
    /// let out = rule.evaluate(&omlet::Record::from_json(r#"{"n":"42"}"#)?).await?;
    /// assert_eq!(out.to_json(), r#"{"n":42}"#);
    /// # Ok::<(), omlet::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn load_source(&self, file: &str, text: &str, options: &LoadOptions) -> Result<Rule> {
        self.load_sources(&[RuleSource { file: file.to_string(), text: text.to_string() }], options).await
    }

    /// Loads a component's bytes (from `omlet build`); binds its lookups to
    /// the options' knowledge base (each statement is checked and prepared
    /// now, so a bad one fails here).
    pub async fn load_component(&self, component: &[u8], options: &LoadOptions) -> Result<Rule> {
        let knowledge = options.knowledge.clone();
        let component = Component::from_binary(&self.inner, component).map_err(|e| Error::load("component", e))?;
        let pre = self.linker.instantiate_pre(&component).map_err(|e| Error::load("component", e))?;
        let pre = bindings::RulePre::new(pre).map_err(|e| Error::load("component", e))?;
        let shared = Arc::new(Shared { knowledge, statements: Vec::new() });
        let mut inst = Instance::new(self, &pre, shared.clone()).await?;
        inst.arm(&self.config, 0);
        let info = inst.bindings.omlet_rule_meta().call_info(&mut inst.store).await;
        let info = match info {
            Ok(Ok(info)) => RuleInfo::from(info),
            Ok(Err(message)) => return Err(Error::load("rule info", anyhow::anyhow!(message))),
            Err(e) => return Err(call_error(&inst.store, e)),
        };
        let statements = match &shared.knowledge {
            Some(k) => k.bind(&info.statements.iter().map(StatementInfo::to_lang).collect::<Vec<_>>()).await?,
            None => Vec::new(),
        };
        let shared = Arc::new(Shared { knowledge: shared.knowledge.clone(), statements });
        inst.store.data_mut().shared = shared.clone();
        let idle = Arc::new(Mutex::new(vec![inst]));
        if let Ok(mut pools) = self.slots.pools.lock() {
            pools.retain(|w| w.strong_count() > 0);
            pools.push(Arc::downgrade(&idle));
        }
        Ok(Rule { inner: Arc::new(RuleInner { engine: self.clone(), pre, shared, info, idle }) })
    }
}

/// Advances the engine's epoch every [`TICK`] until the engine is dropped.
fn start_ticker(engine: &WtEngine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new().name("omlet-epoch".into()).spawn(move || {
        loop {
            std::thread::sleep(TICK);
            match weak.upgrade() {
                Some(e) => e.increment_epoch(),
                None => return,
            }
        }
    });
    // Without the ticker no deadline fires, but calls still run: a thread
    // that cannot start is reported, not fatal.
    if let Err(e) = spawned {
        tracing::warn!("omlet: cannot start the epoch ticker, call deadlines are off: {e}");
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
    pub statements: Vec<StatementInfo>,
    /// Whether some model reads the clock (`Now::*`).
    pub uses_clock: bool,
}

/// One lookup statement of a rule set: what it reads, and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatementInfo {
    /// The SQL text with named parameters (`:name`), as the rule wrote it.
    pub sql: String,
    /// Parameter names, in binding order.
    pub params: Vec<String>,
    /// The table the statement reads.
    pub table: String,
    /// The selected columns; `*` for all.
    pub columns: Vec<String>,
    /// The rule file holding the lookup.
    pub file: String,
    /// Where the lookup stands in `file` (1-based).
    pub line: u32,
    /// The column of the lookup in `file` (1-based).
    pub column: u32,
}

impl StatementInfo {
    fn to_lang(&self) -> omlet_lang::ir::SqlStatement {
        omlet_lang::ir::SqlStatement {
            sql: self.sql.clone(),
            params: self.params.clone(),
            table: self.table.clone(),
            columns: self.columns.clone(),
            file: self.file.clone(),
            line: self.line,
            column: self.column,
        }
    }
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
            .map(|(index, s)| StatementInfo {
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
    /// Most linear memory, in bytes (the engine's `max_memory`).
    max_memory: usize,
    /// The limit that stopped the current call, if one did.
    limit: Option<Limit>,
    /// When the current call started, and how long it has waited for the host.
    call_started: Instant,
    in_host: Duration,
    call_deadline: Duration,
    /// The knowledge generation of the current call: its lookups use it.
    generation: u64,
}

impl wasmtime::ResourceLimiter for StoreState {
    fn memory_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = desired <= self.max_memory && maximum.is_none_or(|m| desired <= m);
        if !allowed {
            self.limit = Some(Limit::Memory);
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limit = Some(Limit::Memory);
        Ok(())
    }

    fn table_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(maximum.is_none_or(|m| desired <= m))
    }
}

/// The error a call deadline raises inside wasmtime; found again by downcast.
#[derive(Debug)]
struct DeadlinePassed;

impl std::fmt::Display for DeadlinePassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call deadline passed")
    }
}

impl std::error::Error for DeadlinePassed {}

struct Instance {
    store: Store<StoreState>,
    bindings: bindings::Rule,
    /// This instance's place in the engine's budget, given back on drop.
    _permit: OwnedSemaphorePermit,
}

impl Instance {
    async fn new(engine: &Engine, pre: &bindings::RulePre<StoreState>, shared: Arc<Shared>) -> Result<Instance> {
        let permit = engine.slots.reserve().await;
        let cfg = &engine.config;
        let state = StoreState {
            shared,
            max_memory: cfg.max_memory,
            limit: None,
            call_started: Instant::now(),
            in_host: Duration::ZERO,
            call_deadline: cfg.call_deadline,
            generation: 0,
        };
        let mut store = Store::new(&engine.inner, state);
        store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
        // Checked once a tick while the guest computes: time waiting for the
        // host does not count against the deadline, and a long computation
        // yields to the runtime between ticks instead of holding its thread.
        store.epoch_deadline_callback(|ctx| {
            let s = ctx.data();
            let computing = s.call_started.elapsed().saturating_sub(s.in_host);
            if computing > s.call_deadline {
                return Err(wasmtime::Error::new(DeadlinePassed));
            }
            Ok(UpdateDeadline::Yield(1))
        });
        store.set_epoch_deadline(1);
        if let Some(f) = cfg.fuel {
            store.set_fuel(f).map_err(|e| Error::load("fuel", e))?;
        }
        let bindings = pre.instantiate_async(&mut store).await.map_err(|e| Error::load("instantiate", e))?;
        Ok(Instance { store, bindings, _permit: permit })
    }

    /// Resets the per-call state before a call.
    fn arm(&mut self, cfg: &EngineConfig, generation: u64) {
        let s = self.store.data_mut();
        s.generation = generation;
        s.limit = None;
        s.call_started = Instant::now();
        s.in_host = Duration::ZERO;
        self.store.set_epoch_deadline(1);
        if let Some(f) = cfg.fuel {
            // Only fails when fuel is off, and it is on when `fuel` is set.
            let _ = self.store.set_fuel(f);
        }
    }
}

/// What a failed guest call means: a limit it reached, or a trap.
fn call_error(store: &Store<StoreState>, e: wasmtime::Error) -> Error {
    if e.downcast_ref::<DeadlinePassed>().is_some() {
        return Error::limit(Limit::Deadline, format!("the guest computed for more than {:?}", store.data().call_deadline));
    }
    let code = e.downcast_ref::<wasmtime::Trap>().copied();
    if code == Some(wasmtime::Trap::OutOfFuel) {
        return Error::limit(Limit::Fuel, "the call ran out of fuel".to_string());
    }
    if let Some(limit) = store.data().limit {
        return Error::limit(limit, format!("the guest needed more than {} bytes of memory", store.data().max_memory));
    }
    Error::Trap { code, message: format!("{e:#}") }
}

/// A loaded rule, ready to evaluate records. `Clone` is cheap (an `Arc`
/// inside): clones share the compiled component and its instances, and
/// calls from several tasks run on separate instances.
///
/// A call that traps or reaches a limit fails with [`Error::Trap`] or
/// [`Error::Limit`]; its instance is dropped (never reused) and the rule goes
/// on with fresh ones. In a batch, such a failure is retried record by
/// record, so only the records that fail on their own get the error.
#[derive(Clone)]
pub struct Rule {
    inner: Arc<RuleInner>,
}

struct RuleInner {
    engine: Engine,
    pre: bindings::RulePre<StoreState>,
    shared: Arc<Shared>,
    info: RuleInfo,
    idle: Arc<Pool>,
}

impl Rule {
    /// What the component holds, read once at load.
    pub fn info(&self) -> &RuleInfo {
        &self.inner.info
    }

    fn generation(&self) -> u64 {
        self.inner.shared.knowledge.as_ref().map(|k| k.generation()).unwrap_or(0)
    }

    /// An instance armed for one call at knowledge `generation`.
    async fn checkout(&self, generation: u64) -> Result<Instance> {
        let idle = self.inner.idle.lock().ok().and_then(|mut v| v.pop());
        let mut inst = match idle {
            Some(i) => i,
            None => Instance::new(&self.inner.engine, &self.inner.pre, self.inner.shared.clone()).await?,
        };
        inst.arm(&self.inner.engine.config, generation);
        Ok(inst)
    }

    fn checkin(&self, inst: Instance) {
        if let Ok(mut v) = self.inner.idle.lock() {
            v.push(inst);
        }
        // Only a call that found no permit waits for a returned instance; while
        // permits are left, waking anyone costs a lock per call for nothing.
        let slots = &self.inner.engine.slots;
        if slots.permits.available_permits() == 0 {
            slots.returned.notify_waiters();
        }
    }

    fn check_size(&self, frame: &[u8]) -> Result<()> {
        let max = self.inner.engine.config.max_record_bytes;
        if frame.len() > max {
            return Err(Error::limit(Limit::RecordBytes, format!("the record takes {} bytes, more than {max}", frame.len())));
        }
        Ok(())
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
        self.check_size(&input)?;
        let generation = self.generation();
        let mut inst = self.checkout(generation).await?;
        let out =
            inst.bindings.omlet_rule_evaluator().call_evaluate(&mut inst.store, generation, &wit_route(route), &input).await;
        match out {
            Ok(r) => {
                self.checkin(inst);
                let r = r.map_err(|e| record_error(0, e))?;
                wire::decode_record(&r).map_err(|m| Error::Internal(format!("the guest's output record: {m}")))
            }
            // A trapped instance is dropped, never reused.
            Err(e) => Err(call_error(&inst.store, e)),
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
    ///
    /// The outer `Err` is kept for failures that concern no record (no
    /// instance could be made); a trap or a limit in the guest becomes each
    /// affected record's own error.
    pub(crate) async fn evaluate_batch_iter<'r>(
        &self,
        route: Route<'_>,
        records: impl ExactSizeIterator<Item = &'r Record> + Clone,
    ) -> Result<Vec<Result<Record>>> {
        let n = records.len();
        if n > 1 {
            // A frame within the record limit holds no record over it.
            let frame = wire::encode_frame(records.clone());
            if frame.len() <= self.inner.engine.config.max_record_bytes {
                match self.call_batch(route, &frame, n).await? {
                    Ok(results) => return Ok(results),
                    // Retried one by one below: only the records that fail alone fail.
                    Err(e) => tracing::debug!("omlet: a batch of {n} failed ({e}); evaluating its records one by one"),
                }
            }
        }
        let mut results = Vec::with_capacity(n);
        for (index, r) in records.enumerate() {
            let one = wire::encode_record(r);
            let result = match self.check_size(&one) {
                Err(e) => Err(e),
                Ok(()) => match self.call_batch(route, &one, 1).await? {
                    Ok(mut v) => v.pop().unwrap_or_else(|| Err(Error::Internal("a batch of one gave no result".into()))),
                    Err(e) => Err(e),
                },
            };
            results.push(result.map_err(|e| e.at_index(index)));
        }
        Ok(results)
    }

    /// One `evaluate-batch` call: `Ok(Err(_))` when the guest trapped or
    /// reached a limit (the instance is then dropped).
    async fn call_batch(&self, route: Route<'_>, frame: &Vec<u8>, n: usize) -> Result<Result<Vec<Result<Record>>>> {
        let generation = self.generation();
        let mut inst = self.checkout(generation).await?;
        let out =
            inst.bindings.omlet_rule_evaluator().call_evaluate_batch(&mut inst.store, generation, &wit_route(route), frame).await;
        let out = match out {
            Ok(out) => out,
            Err(e) => return Ok(Err(call_error(&inst.store, e))),
        };
        self.checkin(inst);
        let errors = out.errors.into_iter().map(|e| (e.index as usize, record_error(e.index as usize, e.error)));
        Ok(wire::decode_batch(n, &out.records, errors))
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
        ev::ErrorKind::Lookup => Error::Lookup { index, message: e.message },
        ev::ErrorKind::Failed => Error::Internal(format!("the guest could not evaluate record {index}: {}", e.message)),
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
        // Waiting for the lookup is not the guest's computing time.
        let waited = Instant::now();
        let answer = k.query_at(self.generation, stmt, &params).await;
        self.in_host += waited.elapsed();
        Ok(match answer {
            Ok(row) => {
                // "No row" is kept in the guest only when negative caching is on.
                let cacheable = k.cacheable() && (row.is_some() || k.config().cache.negative);
                Ok(wk::Answer { row: row.map(|r| r.into_iter().map(to_wit).collect()), cacheable })
            }
            Err(e) => {
                let code = match e.kind {
                    crate::knowledge::LookupErrorKind::Timeout => wk::ErrorCode::Timeout,
                    _ => wk::ErrorCode::Failed,
                };
                let message = e.message;
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
