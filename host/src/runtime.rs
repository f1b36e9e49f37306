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

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use omlet_lang::Cell;
use omlet_lang::trace::{Event as TraceEvent, Trace};
use thread_local::ThreadLocal;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{Component, ComponentExportIndex, HasSelf, InstancePre, Linker, TypedFunc};
use wasmtime::{Config, Engine as WtEngine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, UpdateDeadline};

use crate::build::{self, RuleSource};
use crate::coalesce::{Arrival, Coalescer, Joined, Joining, Opened, current_caller};
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
    /// The rule path in the record's field of this name (which stays in the
    /// record), as `omlet run --rule-path-field` routes: each record may go
    /// to another model. A record without such a text field is
    /// [`Error::Unrouted`].
    Field(&'a str),
}

impl<'a> Route<'a> {
    /// The route of `record`: a [`Route::Field`] becomes the path its
    /// field holds; the others stay.
    fn of(self, record: &'a Record) -> Result<Route<'a>> {
        match self {
            Route::Field(name) => match field_path(record, name) {
                Ok(path) => Ok(Route::Path(path)),
                Err(message) => Err(Error::Unrouted { index: 0, message }),
            },
            other => Ok(other),
        }
    }
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
    /// The networks `intranet_ip` and `access_direct` call LAN (OML 1.25
    /// §9). When unset: the knowledge's `[intranet_nets]`, or else the
    /// built-in private ranges.
    pub intranet_nets: Option<crate::knowledge::IntranetNets>,
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

    /// With these intranet networks rather than the knowledge's; an entry
    /// that is no network fails the load with [`Error::Config`].
    pub fn intranet_nets(mut self, nets: crate::knowledge::IntranetNets) -> LoadOptions {
        self.intranet_nets = Some(nets);
        self
    }

    /// The networks as the guest receives them.
    fn networks(&self) -> Result<Vec<wk::Network>> {
        let nets = match (&self.intranet_nets, &self.knowledge) {
            (Some(n), _) => n.strict("LoadOptions::intranet_nets").map_err(|e| Error::Config(e.to_string()))?,
            (None, Some(k)) => k.intranet_nets().to_vec(),
            (None, None) => omlet_lang::intranet::BUILTIN.to_vec(),
        };
        Ok(nets.iter().map(|n| wk::Network { high: (n.addr >> 64) as u64, low: n.addr as u64, prefix: n.prefix }).collect())
    }
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions")
            .field("knowledge", &self.knowledge.is_some())
            .field("build", &self.build)
            .field("intranet_nets", &self.intranet_nets)
            .finish()
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
    /// past it fails with [`Limit::Deadline`]; its instance is dropped. The
    /// clock is checked every 10 ms, so a call stops up to 20 ms past it.
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
    /// Most bytes of a component given to [`Engine::load_component`] or
    /// read by [`Engine::load_path`] from a `.wasm` file (default 16 MiB). A
    /// bigger one fails with [`Limit::ComponentBytes`] before wasmtime
    /// compiles it, and a file is measured before it is read. Compiling
    /// costs time and memory in proportion to the code (wasmtime has no
    /// bound of its own on it), so this is what bounds it. A set built by
    /// `omlet build` is the guest (about 1 MiB) plus its IR (at most
    /// `build.max_ir_bytes`, 4 MiB by default): raise the two together.
    /// Components compiled here from rule sources are bounded by `build`
    /// instead.
    pub max_component_bytes: usize,
    /// Coalesce one-record calls (default on): the tasks of one thread that
    /// call [`Rule::evaluate`] at about the same time have their records
    /// evaluated in one batch call, and each still gets its own record's
    /// result or error. A caller that may have company yields once before
    /// its call, so that the other tasks its thread has ready can join; a
    /// thread whose gatherings bring nobody (one caller) stops trying for
    /// up to 4096 calls. There is no timer.
    ///
    /// Only calls that need not wait for the host are coalesced (a rule
    /// without lookups, or one whose lookups the caches answer), so that
    /// lookups of concurrent callers still overlap. The blocking calls
    /// ([`Rule::evaluate_blocking`]) are never coalesced: a thread that waits
    /// for another's batch parks in the kernel, which made them 4× slower.
    /// On the 2-core machine of BENCHMARKS.md, 16 and 64 tasks making
    /// one-record calls went 1.24 to 1.78 times as fast with it as without
    /// (the cached lookup at 16: 0.98), 4 tasks (two per thread) 0.92 (the
    /// page shows both; earlier runs gave 0.96 to 3.4 in all), and one task
    /// within noise of it off; turn it off to rule it out.
    ///
    /// A task never joins a gathering it opened itself, and a caller whose
    /// gathering's opener is kept but not polled (an `evaluate` future polled
    /// once and then set aside) evaluates alone once its thread has run out
    /// of ready tasks twice, so that nobody waits on a future nobody polls.
    pub coalesce: bool,
    /// Where compiled guest code is kept between runs (default
    /// [`code_cache::default_dir`](crate::code_cache::default_dir):
    /// `~/.cache/omlet/code`; `None` compiles every load). A load whose component was compiled before by the same
    /// omlet and engine settings reads the machine code back instead of
    /// compiling it: milliseconds instead of about half a second. See
    /// [`code_cache`](crate::code_cache) for what it trusts.
    pub code_cache: Option<std::path::PathBuf>,
    /// Write `/tmp/perf-PID.map` as guest code is compiled or loaded
    /// (default off), so that `perf record` / `perf report` name the guest's
    /// functions (an unstripped guest names them best). The CLI turns it on
    /// with `OMLET_PERFMAP=1`. Costs nothing when off.
    pub perf_map: bool,
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
            max_component_bytes: 16 << 20,
            coalesce: true,
            code_cache: crate::code_cache::default_dir(),
            perf_map: false,
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
    /// The same imports as plain functions, for calls made without a fiber.
    sync_linker: Arc<Linker<StoreState>>,
    slots: Arc<Slots>,
    config: Arc<EngineConfig>,
    code: Option<crate::code_cache::CodeCache>,
}

/// The engine's instance budget: one permit per live instance, and the idle
/// pools of every loaded rule, so that a call short of a permit can drop an
/// idle instance of another rule instead of waiting for ever.
struct Slots {
    permits: Arc<Semaphore>,
    /// Woken whenever an instance goes back to an idle pool.
    returned: Notify,
    pools: Mutex<Vec<Weak<dyn Idle>>>,
}

/// The idle instances of one rule, of one kind (async or sync): the last
/// one each thread gave back, which that thread's next call takes under a
/// lock of its own (other threads only try it, when they find no instance
/// of theirs), and the rest in a list the threads share.
struct Pool<T: Send> {
    hot: ThreadLocal<Mutex<Option<T>>>,
    shared: Mutex<Vec<T>>,
}

impl<T: Send> Pool<T> {
    fn new(first: Option<T>) -> Pool<T> {
        Pool { hot: ThreadLocal::new(), shared: Mutex::new(first.into_iter().collect()) }
    }

    /// An idle instance: this thread's own, else any other, so that a new
    /// one is made only when none is idle (the pool grows to the calls in
    /// flight at once, not to the threads that ever called; a slot its owner
    /// holds at that moment is passed over, which can cost one instance
    /// more, within the engine's budget). With no own instance and none
    /// shared, this tries every thread's slot: a lock attempt per thread.
    fn take(&self) -> Option<T> {
        if let Some(inst) = self.hot.get().and_then(|slot| slot.lock().ok()?.take()) {
            return Some(inst);
        }
        self.take_elsewhere()
    }

    /// One from the shared list, else another thread's own (unless that
    /// thread is taking it right now).
    fn take_elsewhere(&self) -> Option<T> {
        if let Some(inst) = self.shared.lock().ok().and_then(|mut v| v.pop()) {
            return Some(inst);
        }
        self.hot.iter().find_map(|slot| slot.try_lock().ok()?.take())
    }

    /// Gives an instance back: as this thread's own if it has none.
    fn put(&self, inst: T) {
        let inst = match self.hot.get_or_default().lock() {
            Ok(mut slot) if slot.is_none() => {
                *slot = Some(inst);
                return;
            }
            _ => inst,
        };
        if let Ok(mut v) = self.shared.lock() {
            v.push(inst);
        }
    }
}

/// An idle pool seen from the engine's budget: something to drop an instance from.
trait Idle: Send + Sync {
    fn drop_one(&self) -> bool;
}

impl<T: Send> Idle for Pool<T> {
    fn drop_one(&self) -> bool {
        self.take_elsewhere().is_some()
    }
}

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
        pools.iter().filter_map(Weak::upgrade).any(|pool| pool.drop_one())
    }

    fn register(&self, pool: Weak<dyn Idle>) {
        if let Ok(mut pools) = self.pools.lock() {
            pools.retain(|w| w.strong_count() > 0);
            pools.push(pool);
        }
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
        if cfg.perf_map {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let inner = WtEngine::new(&config).map_err(|e| Error::load("engine", e))?;
        let mut linker: Linker<StoreState> = Linker::new(&inner);
        bindings::Rule::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut linker, |s| s)
            .map_err(|e| Error::load("linker", e))?;
        let sync_linker = sync_imports(&inner).map_err(|e| Error::load("linker", e))?;
        start_ticker(&inner);
        let slots = Arc::new(Slots {
            permits: Arc::new(Semaphore::new(cfg.max_instances as usize)),
            returned: Notify::new(),
            pools: Mutex::new(Vec::new()),
        });
        Ok(Engine {
            inner,
            linker: Arc::new(linker),
            sync_linker: Arc::new(sync_linker),
            slots,
            config: Arc::new(cfg.clone()),
            code: cfg.code_cache.clone().map(crate::code_cache::CodeCache::new),
        })
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
    /// [`Error::Limit`] ([`Limit::RuleBytes`]) for one over the build limits
    /// or ([`Limit::ComponentBytes`]) for a `.wasm` file over
    /// [`EngineConfig::max_component_bytes`], [`Error::Load`] for a
    /// component wasmtime refuses, and [`Error::Statement`] for a lookup the
    /// knowledge base refuses.
    pub async fn load_path(&self, path: impl AsRef<Path>, options: &LoadOptions) -> Result<Rule> {
        let path = path.as_ref();
        if path.extension().is_some_and(|e| e == "wasm") {
            let bytes = read_component(path, self.config.max_component_bytes)?;
            return self.load_built(&bytes, options).await;
        }
        let limits = options.build.as_ref().unwrap_or(&self.config.build);
        let bytes = build::build_component_with(
            &RuleSource::collect_limited(&[path.to_path_buf()], limits.max_rule_file_bytes)?,
            limits,
        )?;
        self.load_built(&bytes, options).await
    }

    /// Compiles rule sources into one rule set and loads it.
    pub async fn load_sources(&self, sources: &[RuleSource], options: &LoadOptions) -> Result<Rule> {
        let limits = options.build.as_ref().unwrap_or(&self.config.build);
        self.load_built(&build::build_component_with(sources, limits)?, options).await
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
    /// now, so a bad one fails here). A component over
    /// [`EngineConfig::max_component_bytes`] fails with
    /// [`Limit::ComponentBytes`] before it is compiled.
    pub async fn load_component(&self, component: &[u8], options: &LoadOptions) -> Result<Rule> {
        let max = self.config.max_component_bytes;
        if component.len() > max {
            return Err(component_too_big("the component", component.len() as u64, max));
        }
        self.load_built(component, options).await
    }

    /// [`load_component`](Self::load_component) without the size check:
    /// for components whose size is already bounded (built here under the
    /// build limits, or read from a file no bigger than the limit).
    async fn load_built(&self, component: &[u8], options: &LoadOptions) -> Result<Rule> {
        let knowledge = options.knowledge.clone();
        let component = match &self.code {
            Some(cache) => cache.component(&self.inner, component)?.0,
            None => Component::from_binary(&self.inner, component).map_err(|e| Error::load("component", e))?,
        };
        check_wit_version(&self.inner, &component)?;
        let pre = self.linker.instantiate_pre(&component).map_err(|e| Error::load("component", e))?;
        let pre = bindings::RulePre::new(pre).map_err(|e| Error::load("component", e))?;
        let shared = Arc::new(Shared { knowledge, statements: Vec::new(), nets: options.networks()? });
        let mut inst = Instance::new(self, &pre, shared.clone()).await?;
        inst.arm(&self.config, 0);
        let info = inst.calls.omlet_rule_meta().call_info(&mut inst.store).await;
        let info = match info {
            Ok(Ok(info)) => RuleInfo::from(info),
            Ok(Err(message)) => return Err(Error::load("rule info", anyhow::anyhow!(message))),
            Err(e) => return Err(call_error(&inst.store, e)),
        };
        let statements = match &shared.knowledge {
            Some(k) => k.bind(&info.statements.iter().map(StatementInfo::to_lang).collect::<Vec<_>>()).await?,
            None => Vec::new(),
        };
        let shared = Arc::new(Shared { knowledge: shared.knowledge.clone(), statements, nets: shared.nets.clone() });
        inst.store.data_mut().shared = shared.clone();
        let idle: Arc<Pool<Instance<bindings::Rule>>> = Arc::new(Pool::new(Some(inst)));
        self.slots.register(Arc::downgrade(&idle) as Weak<dyn Idle>);
        let sync = self.sync_path(&component, &shared)?;
        if let Some(path) = &sync {
            self.slots.register(Arc::downgrade(&path.idle) as Weak<dyn Idle>);
        }
        let coalescer = (self.config.coalesce && sync.is_some()).then(Coalescer::new);
        Ok(Rule { inner: Arc::new(RuleInner { engine: self.clone(), pre, shared, info, idle, sync, coalescer }) })
    }

    /// The fiber-less path of a rule, when every call can take it: a rule
    /// without lookups, or one whose knowledge base has a shared cache to
    /// answer from (a miss moves the call to the async path).
    fn sync_path(&self, component: &Component, shared: &Shared) -> Result<Option<SyncPath>> {
        let eligible = match &shared.knowledge {
            _ if shared.statements.is_empty() => true,
            Some(k) => k.has_shared_cache(),
            None => true,
        };
        if !eligible {
            return Ok(None);
        }
        let pre = self.sync_linker.instantiate_pre(component).map_err(|e| Error::load("component", e))?;
        let missing = || Error::load("component", anyhow::anyhow!("the component does not export {EVALUATOR}"));
        let evaluator = component.get_export_index(None, EVALUATOR).ok_or_else(missing)?;
        let evaluate = component.get_export_index(Some(&evaluator), "evaluate").ok_or_else(missing)?;
        let batch = component.get_export_index(Some(&evaluator), "evaluate-batch").ok_or_else(missing)?;
        Ok(Some(SyncPath { pre, evaluate, batch, idle: Arc::new(Pool::new(None)), skip: AtomicU32::new(0) }))
    }
}

/// The WIT package this host speaks (`wit/omlet.wit`).
const WIT_PACKAGE: &str = "omlet:rule@0.6.0";

/// Refuses a component built for another version of omlet's WIT package,
/// with what to do, before linking fails on its first import. 0.4.0 added
/// the `bigint` frame node, which an older guest cannot read; 0.5.0 the
/// `intranet-nets` import and the `rejected` error kind; 0.6.0 the
/// `explain` export.
fn check_wit_version(engine: &WtEngine, component: &Component) -> Result<()> {
    let ty = component.component_type();
    let names = ty.imports(engine).map(|(n, _)| n.to_string()).chain(ty.exports(engine).map(|(n, _)| n.to_string()));
    for name in names {
        let Some(rest) = name.strip_prefix("omlet:rule/") else { continue };
        let version = rest.split_once('@').map_or("", |(_, v)| v);
        if format!("omlet:rule@{version}") != WIT_PACKAGE {
            return Err(Error::load(
                "component",
                anyhow::anyhow!(
                    "the component was built for omlet:rule@{version} (`{name}`), and this omlet speaks {WIT_PACKAGE}: \
                     rebuild it with this version's `omlet build`"
                ),
            ));
        }
    }
    Ok(())
}

/// The error for a component of `len` bytes over the limit `max`.
fn component_too_big(what: &str, len: u64, max: usize) -> Error {
    Error::limit(
        Limit::ComponentBytes,
        format!("{what} takes {len} bytes, more than a component may take ({max}; EngineConfig::max_component_bytes)"),
    )
}

/// Reads a component file of at most `max` bytes: a bigger one is refused
/// by its length before anything is read, and a file that grows while it
/// is read is cut off and refused.
fn read_component(path: &Path, max: usize) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let what = || path.display().to_string();
    if len > max as u64 {
        return Err(component_too_big(&what(), len, max));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max as u64 + 1).read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    if bytes.len() > max {
        return Err(component_too_big(&what(), bytes.len() as u64, max));
    }
    Ok(bytes)
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
    /// The statement as the knowledge binds it ([`Knowledge::bind`]).
    pub fn to_lang(&self) -> omlet_lang::ir::SqlStatement {
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
    /// Its lookups, in order, as its rule writes them: (statement, line in
    /// [`file`](Self::file), the SQL with this lookup's literals in place).
    pub lookups: Vec<(u32, u32, String)>,
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
                    lookups: m.lookups.into_iter().map(|l| (l.statement, l.line, l.sql)).collect(),
                })
                .collect(),
            statements,
        }
    }
}

/// A record evaluated with a trace of how ([`Rule::explain`]).
#[derive(Debug)]
pub struct Explained {
    /// What [`Rule::evaluate`] would have given.
    pub output: Result<Record>,
    /// How: per statement of the record's model, what was read and from
    /// where, each conversion, pipe step and match arm, each lookup with
    /// the layer that answered it, and what was written or why nothing was.
    /// `trace.to_json()` gives its JSON form, `trace.to_text()` a text for
    /// people.
    pub trace: Trace,
}

/// Puts the host's account of each lookup (the layer, the time) into the
/// guest's trace, where the guest says only `host`: both list the lookups
/// that reached the host in the order they were made.
fn merge_layers(trace: &mut Trace, layers: Vec<(u32, &'static str, u64)>) {
    let mut host = layers.into_iter();
    for e in trace.steps.iter_mut().flat_map(|s| s.events.iter_mut()) {
        if let TraceEvent::Lookup { statement, layer, micros, .. } = e
            && layer == "host"
            && let Some((s, l, us)) = host.next()
            && s == *statement
        {
            *layer = l.into();
            *micros = Some(us);
        }
    }
}

/// What every instance of one rule shares.
pub(crate) struct Shared {
    knowledge: Option<Arc<Knowledge>>,
    statements: Vec<BoundStatement>,
    /// The intranet networks (`knowledge.intranet-nets`).
    nets: Vec<wk::Network>,
}

/// The data of one instance's `Store`.
pub(crate) struct StoreState {
    shared: Arc<Shared>,
    /// Most linear memory, in bytes (the engine's `max_memory`).
    max_memory: usize,
    /// The limit that stopped the current call, if one did.
    limit: Option<Limit>,
    /// When the current call's first epoch tick came (`None` before it: a
    /// call that ends within its first tick never reads the clock), and how
    /// long it has waited for the host since.
    call_started: Option<Instant>,
    in_host: Duration,
    call_deadline: Duration,
    /// The knowledge generation of the current call: its lookups use it.
    generation: u64,
    /// Set by a lookup of a fiber-less call that the shared cache could not
    /// answer: the call's result is dropped and the call made again on the
    /// async path.
    would_block: bool,
    /// Set during [`Rule::explain`]: each lookup's statement, the layer
    /// that answered it and its microseconds, in order.
    layers: Option<Vec<(u32, &'static str, u64)>>,
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

/// The error that stops a fiber-less call that computed for longer than
/// [`SYNC_BUDGET`]: it is made again on the async path, which can yield.
#[derive(Debug)]
struct MoveToAsync;

impl std::fmt::Display for MoveToAsync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call computes for long; it moves to the async path")
    }
}

impl std::error::Error for MoveToAsync {}

/// How long a fiber-less call may compute, counted from the first epoch tick
/// it sees (so up to about 40 ms in all), before it is stopped and made again
/// on the async path (which yields to the runtime every tick).
const SYNC_BUDGET: Duration = Duration::from_millis(20);

impl std::fmt::Display for DeadlinePassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call deadline passed")
    }
}

impl std::error::Error for DeadlinePassed {}

/// One instance with its store; `C` is how it is called: `bindings::Rule`
/// (async, on a fiber) or [`SyncCalls`].
struct Instance<C> {
    store: Store<StoreState>,
    calls: C,
    /// This instance's place in the engine's budget, given back on drop.
    _permit: OwnedSemaphorePermit,
}

/// The evaluator's two exports, called without a fiber. Their types are
/// checked once, when the instance is made (as owned values, which lower
/// exactly as the borrowed ones each call passes).
struct SyncCalls {
    evaluate: wasmtime::component::Func,
    batch: wasmtime::component::Func,
}

type EvaluateOwned = TypedFunc<(u64, ev::Route, Vec<u8>), (Result<Vec<u8>, ev::EvalError>,)>;
type BatchOwned = TypedFunc<(u64, ev::Route, Vec<u8>), (ev::BatchOutput,)>;

impl SyncCalls {
    fn evaluate(
        &self,
        store: &mut Store<StoreState>,
        generation: u64,
        route: &ev::Route,
        frame: &[u8],
    ) -> wasmtime::Result<Result<Vec<u8>, ev::EvalError>> {
        // SAFETY: `new_sync` checked this function's type with `EvaluateOwned`.
        unsafe { call_frame(self.evaluate, store, generation, route, frame) }
    }

    fn batch(
        &self,
        store: &mut Store<StoreState>,
        generation: u64,
        route: &ev::Route,
        frame: &[u8],
    ) -> wasmtime::Result<ev::BatchOutput> {
        // SAFETY: `new_sync` checked this function's type with `BatchOwned`.
        unsafe { call_frame(self.batch, store, generation, route, frame) }
    }
}

/// Calls an evaluator export `(generation, route, frame) -> R` without a fiber.
///
/// # Safety
/// `func`'s type must have been checked as `(u64, ev::Route, Vec<u8>) -> (R,)`:
/// those owned parameters lower exactly as the borrowed ones passed here.
unsafe fn call_frame<R>(
    func: wasmtime::component::Func,
    store: &mut Store<StoreState>,
    generation: u64,
    route: &ev::Route,
    frame: &[u8],
) -> wasmtime::Result<R>
where
    (R,): wasmtime::component::ComponentNamedList + wasmtime::component::Lift + 'static,
{
    // SAFETY: the caller's promise.
    let f = unsafe { TypedFunc::<(u64, &ev::Route, &[u8]), (R,)>::new_unchecked(func) };
    Ok(f.call(store, (generation, route, frame))?.0)
}

/// What a rule needs to make fiber-less calls: the component pre-linked
/// against the sync imports, its exports, and the idle sync instances.
struct SyncPath {
    pre: InstancePre<StoreState>,
    evaluate: ComponentExportIndex,
    batch: ComponentExportIndex,
    idle: Arc<Pool<Instance<SyncCalls>>>,
    /// Calls left to make on the async path after a lookup missed the
    /// shared cache: where misses are common, a fiber-less try that is then
    /// made again would double their cost.
    skip: AtomicU32,
}

/// How many calls skip the sync path after one of its lookups missed.
const SKIP_AFTER_MISS: u32 = 64;

/// The interface the evaluator's functions are exported under.
const EVALUATOR: &str = "omlet:rule/evaluator@0.6.0";

/// A store for one instance, with the engine's limits; `sync` stores stop
/// a call that computes past [`SYNC_BUDGET`] instead of yielding.
fn new_store(engine: &Engine, shared: Arc<Shared>, sync: bool) -> Result<Store<StoreState>> {
    let cfg = &engine.config;
    let state = StoreState {
        shared,
        max_memory: cfg.max_memory,
        limit: None,
        call_started: None,
        in_host: Duration::ZERO,
        call_deadline: cfg.call_deadline,
        generation: 0,
        would_block: false,
        layers: None,
    };
    let mut store = Store::new(&engine.inner, state);
    store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
    // Checked once a tick while the guest computes: time waiting for the
    // host does not count against the deadline, and a long computation
    // yields to the runtime between ticks instead of holding its thread
    // (a fiber-less call cannot yield: past its budget it is stopped, to be
    // made again on the async path).
    //
    // A call's time is counted from its first tick, not from its start: most
    // calls end within a tick, and reading the clock on every call cost ~3%
    // of a one-record call. A deadline therefore fires up to one tick late.
    store.epoch_deadline_callback(move |mut ctx| {
        let s = ctx.data_mut();
        let started = match s.call_started {
            Some(t) => t,
            // The call's first tick: its time counts from here.
            None => {
                s.in_host = Duration::ZERO;
                *s.call_started.insert(Instant::now())
            }
        };
        let computing = started.elapsed().saturating_sub(s.in_host);
        if computing > s.call_deadline {
            return Err(wasmtime::Error::new(DeadlinePassed));
        }
        if !sync {
            return Ok(UpdateDeadline::Yield(1));
        }
        if computing > SYNC_BUDGET {
            return Err(wasmtime::Error::new(MoveToAsync));
        }
        Ok(UpdateDeadline::Continue(1))
    });
    store.set_epoch_deadline(1);
    if let Some(f) = cfg.fuel {
        store.set_fuel(f).map_err(|e| Error::load("fuel", e))?;
    }
    Ok(store)
}

impl Instance<bindings::Rule> {
    async fn new(engine: &Engine, pre: &bindings::RulePre<StoreState>, shared: Arc<Shared>) -> Result<Self> {
        let permit = engine.slots.reserve().await;
        let mut store = new_store(engine, shared, false)?;
        let calls = pre.instantiate_async(&mut store).await.map_err(|e| Error::load("instantiate", e))?;
        Ok(Instance { store, calls, _permit: permit })
    }
}

impl Instance<SyncCalls> {
    /// A fiber-less instance, if a permit is free now (`None`: the caller
    /// takes the async path, which waits for one).
    fn new_sync(engine: &Engine, path: &SyncPath, shared: Arc<Shared>) -> Option<Result<Self>> {
        let permit = engine.slots.permits.clone().try_acquire_owned().ok()?;
        let mut store = match new_store(engine, shared, true) {
            Ok(store) => store,
            Err(e) => return Some(Err(e)),
        };
        let instance = match path.pre.instantiate(&mut store) {
            Ok(instance) => instance,
            // Instantiating ran past the sync budget (a thread preempted for
            // long, or a slow start): the async path makes the instance.
            Err(e) if e.downcast_ref::<MoveToAsync>().is_some() => return None,
            Err(e) => return Some(Err(Error::load("instantiate", e))),
        };
        Some((|| {
            let typed = |e| Error::load("instantiate", e);
            let evaluate: EvaluateOwned = instance.get_typed_func(&mut store, path.evaluate).map_err(typed)?;
            let batch: BatchOwned = instance.get_typed_func(&mut store, path.batch).map_err(typed)?;
            let calls = SyncCalls { evaluate: *evaluate.func(), batch: *batch.func() };
            Ok(Instance { store, calls, _permit: permit })
        })())
    }
}

impl<C> Instance<C> {
    /// Resets the per-call state before a call.
    fn arm(&mut self, cfg: &EngineConfig, generation: u64) {
        let s = self.store.data_mut();
        s.generation = generation;
        s.limit = None;
        s.call_started = None;
        s.in_host = Duration::ZERO;
        s.would_block = false;
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
    idle: Arc<Pool<Instance<bindings::Rule>>>,
    /// The fiber-less path, for rules that can take it (see `Engine::sync_path`).
    sync: Option<SyncPath>,
    /// Where one-record calls are gathered to be coalesced (with a sync
    /// path, and when the engine's `coalesce` is on).
    coalescer: Option<Coalescer<ev::Route>>,
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
    async fn checkout(&self, generation: u64) -> Result<Instance<bindings::Rule>> {
        let mut inst = match self.inner.idle.take() {
            Some(i) => i,
            None => Instance::new(&self.inner.engine, &self.inner.pre, self.inner.shared.clone()).await?,
        };
        inst.arm(&self.inner.engine.config, generation);
        Ok(inst)
    }

    fn checkin<C: Send>(&self, pool: &Pool<Instance<C>>, inst: Instance<C>) {
        pool.put(inst);
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

    /// A fiber-less call `f` on an instance of the sync path, at the
    /// current knowledge generation. `None` when the call must be made on the
    /// async path instead: the rule has no sync path, no instance can be
    /// made without waiting, a lookup missed the shared cache, or the call
    /// computed past [`SYNC_BUDGET`]. Nothing the call did is kept then.
    fn call_sync<R>(&self, f: impl FnOnce(&SyncCalls, &mut Store<StoreState>, u64) -> wasmtime::Result<R>) -> Option<Result<R>> {
        let path = self.inner.sync.as_ref()?;
        if path.skip.load(Ordering::Relaxed) > 0
            && path.skip.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
        {
            return None;
        }
        let generation = self.generation();
        let mut inst = match path.idle.take() {
            Some(i) => i,
            None => match Instance::new_sync(&self.inner.engine, path, self.inner.shared.clone())? {
                Ok(i) => i,
                Err(e) => return Some(Err(e)),
            },
        };
        inst.arm(&self.inner.engine.config, generation);
        let out = f(&inst.calls, &mut inst.store, generation);
        if inst.store.data().would_block {
            path.skip.store(SKIP_AFTER_MISS, Ordering::Relaxed);
            // The guest finished normally (the lookup failed as fatal), so the
            // instance is sound; only its answer is dropped.
            if out.is_ok() {
                self.checkin(&path.idle, inst);
            }
            return None;
        }
        match out {
            Ok(r) => {
                self.checkin(&path.idle, inst);
                Some(Ok(r))
            }
            // A stopped or trapped instance is dropped, never reused.
            Err(e) if e.downcast_ref::<MoveToAsync>().is_some() => None,
            Err(e) => Some(Err(call_error(&inst.store, e))),
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
        // By field: the path it holds, on a boxed call of its own, so that
        // the common call's future does not grow (see `step`).
        if let Route::Field(_) = route {
            let route = route.of(record)?;
            return Box::pin(self.evaluate_on(route, record)).await;
        }
        // Coalesce only calls that will not wait for the host: while the sync
        // path is skipped, lookups are missing the caches, and coalesced
        // records would make their lookups one after another.
        if let Some(co) = self.inner.coalescer.as_ref().filter(|_| self.sync_skipped() == 0) {
            match self.step(co, route, record) {
                Step::Alone => {}
                Step::Joined(joined) => {
                    if let Some(result) = wait_joined(joined).await {
                        return result;
                    }
                }
                Step::Open(gathered) => return gathered.await,
            }
        }
        // One await of this path only: each would take room in the future.
        self.evaluate_alone(route, record).await
    }

    /// Where a one-record call goes on its thread (see `coalesce`), as a
    /// small value: the future of `evaluate` keeps it across its awaits,
    /// so the route made for `arrive` is dropped here, and an opener's
    /// call, the larger and rarer path, is boxed.
    fn step<'a>(&'a self, co: &'a Coalescer<ev::Route>, route: Route<'a>, record: &'a Record) -> Step<'a> {
        match co.arrive(&wit_route(route), same_route, record, self.inner.engine.config.max_record_bytes, current_caller) {
            Arrival::Alone => Step::Alone,
            Arrival::Joined(joined) => Step::Joined(joined),
            Arrival::Open(opened) => Step::Open(Box::pin(self.evaluate_gathered(opened, route, record))),
        }
    }

    /// The call of a gathering this caller opened on its thread (see
    /// `coalesce::Gathering`): it yields once, so that the thread's other
    /// callers can join, then evaluates every record in one fiber-less batch
    /// call. When that call cannot be made (no sync instance, a lookup that
    /// misses the caches, a trap or a limit), each caller evaluates its
    /// record alone, so that only a record that fails alone fails. (The
    /// gathering's frame is within the record limit: a record that would
    /// take it past does not join.)
    async fn evaluate_gathered(&self, mut opened: Opened<'_, ev::Route>, route: Route<'_>, record: &Record) -> Result<Record> {
        opened.gather().await;
        let wit = wit_route(route);
        let (frame, n) = opened.close();
        if n < 2 {
            drop(opened);
            return self.evaluate_alone(route, record).await;
        }
        let out = match self.call_sync(|calls, store, generation| calls.batch(store, generation, &wit, &frame)) {
            Some(Ok(out)) => Some(out),
            Some(Err(e)) => {
                tracing::debug!("omlet: a gathered batch of {n} failed ({e}); its callers evaluate alone");
                None
            }
            None => None,
        };
        // Each caller's error names its own record, as if it had been alone.
        let results = out.and_then(|out| decode_batch_output(n, out, |_| 0).ok());
        let Some(mut results) = results else {
            // The next gatherings of this thread would likely fail the same way.
            opened.failed();
            drop(opened);
            return self.evaluate_alone(route, record).await;
        };
        let own = match results.first_mut() {
            Some(r) => std::mem::replace(r, Err(Error::Internal(String::new()))),
            None => Err(Error::Internal("a gathered batch gave no result".into())),
        };
        opened.finish(results);
        own
    }

    /// How many records were evaluated in another caller's call (coalesced).
    #[doc(hidden)]
    pub fn coalesced_records(&self) -> u64 {
        self.inner.coalescer.as_ref().map_or(0, |c| c.coalesced.load(Ordering::Relaxed))
    }

    /// How many more calls skip the sync path (0 when it is taken, or absent).
    fn sync_skipped(&self) -> u32 {
        self.inner.sync.as_ref().map_or(0, |p| p.skip.load(Ordering::Relaxed))
    }

    /// One record in its own call.
    async fn evaluate_alone(&self, route: Route<'_>, record: &Record) -> Result<Record> {
        let route = wit_route(route);
        // Matched before the await, so that the future keeps no room for it.
        let input = match self.alone_sync(&route, record) {
            Alone::Done(result) => return result,
            Alone::Async(input) => input,
        };
        // The sync path could not answer: the async one, on a fiber (boxed:
        // see `evaluate_on`).
        Box::pin(self.evaluate_async(route, input)).await
    }

    /// A one-record call on the fiber-less path, its frame written in the
    /// thread's buffer (no allocation); the frame as its own bytes when the
    /// call must be made on the async path.
    fn alone_sync(&self, route: &ev::Route, record: &Record) -> Alone {
        wire::with_record_frame(record, |input| {
            if let Err(e) = self.check_size(input) {
                return Alone::Done(Err(e));
            }
            match self.evaluate_sync(route, input) {
                Some(result) => Alone::Done(result),
                None => Alone::Async(input.to_vec()),
            }
        })
    }

    /// One encoded record on the async path, on a fiber.
    async fn evaluate_async(&self, route: ev::Route, input: Vec<u8>) -> Result<Record> {
        let generation = self.generation();
        let mut inst = self.checkout(generation).await?;
        let out = inst.calls.omlet_rule_evaluator().call_evaluate(&mut inst.store, generation, &route, &input).await;
        match out {
            Ok(r) => {
                self.checkin(&self.inner.idle, inst);
                single_output(r)
            }
            // A trapped instance is dropped, never reused.
            Err(e) => Err(call_error(&inst.store, e)),
        }
    }

    /// One encoded record on the fiber-less path; `None` when the call must
    /// be made on the async path (see [`Rule::call_sync`]).
    fn evaluate_sync(&self, route: &ev::Route, input: &[u8]) -> Option<Result<Record>> {
        let out = self.call_sync(|calls, store, generation| calls.evaluate(store, generation, route, input))?;
        Some(out.and_then(single_output))
    }

    /// Evaluates one record as [`Rule::evaluate`] does, with a trace of how
    /// (see [`Explained`]): for diagnosis (one record, on the async path,
    /// never coalesced), not for throughput.
    pub async fn explain(&self, record: &Record) -> Result<Explained> {
        self.explain_on(Route::Only, record).await
    }

    /// [`Rule::explain`] with the model `route` names. The trace comes from
    /// the component's `explain` export, so a component built by any
    /// `omlet build` of this WIT version gives one under any host; this host
    /// adds which of its layers answered each lookup, and how long it took.
    /// Fails as `evaluate` fails for what stops a call (a trap, a limit);
    /// the record's own errors (unrouted, a fatal lookup, `fail`) are in
    /// [`Explained::output`], with the trace up to them.
    pub async fn explain_on(&self, route: Route<'_>, record: &Record) -> Result<Explained> {
        let route = match route.of(record) {
            Ok(r) => wit_route(r),
            Err(e) => return Ok(Explained { output: Err(e), trace: Trace::default() }),
        };
        let input = wire::with_record_frame(record, |f| self.check_size(f).map(|()| f.to_vec()))?;
        let generation = self.generation();
        let mut inst = self.checkout(generation).await?;
        inst.store.data_mut().layers = Some(Vec::new());
        let out = inst.calls.omlet_rule_evaluator().call_explain(&mut inst.store, generation, &route, &input).await;
        let layers = inst.store.data_mut().layers.take().unwrap_or_default();
        let explained = match out {
            Ok(e) => {
                self.checkin(&self.inner.idle, inst);
                e
            }
            Err(e) => return Err(call_error(&inst.store, e)),
        };
        let mut trace: Trace = serde_json::from_str(&explained.trace)
            .map_err(|e| Error::Internal(format!("the component's trace does not read: {e}")))?;
        merge_layers(&mut trace, layers);
        Ok(Explained { output: single_output(explained.output), trace })
    }

    /// Evaluates records in one guest call with the rule's only model. Each
    /// input gets its own result, in order.
    pub async fn evaluate_batch(&self, records: &[Record]) -> Result<Vec<Result<Record>>> {
        self.evaluate_batch_on(Route::Only, records).await
    }

    /// Evaluates records in one guest call, all with the model `route` names;
    /// with [`Route::Field`], one call per rule path the records hold, each
    /// record's result in its place (a call that cannot be made at all is
    /// then the error of its group's records).
    pub async fn evaluate_batch_on(&self, route: Route<'_>, records: &[Record]) -> Result<Vec<Result<Record>>> {
        self.evaluate_batch_iter(route, records.iter()).await
    }

    /// [`Rule::evaluate_batch_on`] over borrowed records, wherever they live.
    ///
    /// The outer `Err` is kept for failures that concern no record (no
    /// instance could be made); a trap or a limit in the guest becomes each
    /// affected record's own error.
    ///
    /// Each output comes decoded as `T`: a [`Record`], or its JSON line
    /// (`String`, see [`wire::Decoded`]).
    pub(crate) async fn evaluate_batch_iter<'r, T: wire::Decoded>(
        &self,
        route: Route<'_>,
        records: impl ExactSizeIterator<Item = &'r Record> + Clone,
    ) -> Result<Vec<Result<T>>> {
        let Route::Field(name) = route else {
            return self.batch_iter(&wit_route(route), records).await;
        };
        // By field: one call per rule path, the results put back in input
        // order. A call that cannot be made at all fails its group's records.
        let records: Vec<&Record> = records.collect();
        let mut out: Vec<Option<Result<T>>> = (0..records.len()).map(|_| None).collect();
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, r) in records.iter().enumerate() {
            match field_path(r, name) {
                Ok(p) => match groups.iter_mut().find(|(q, _)| *q == p) {
                    Some((_, v)) => v.push(i),
                    None => groups.push((p, vec![i])),
                },
                Err(message) => out[i] = Some(Err(Error::Unrouted { index: i, message })),
            }
        }
        for (path, indices) in groups {
            match self.batch_iter(&ev::Route::Path(path.to_string()), indices.iter().map(|&i| records[i])).await {
                Ok(results) => {
                    for (&i, r) in indices.iter().zip(results) {
                        out[i] = Some(r.map_err(|e| e.at_index(i)));
                    }
                }
                Err(e) => {
                    for &i in &indices {
                        out[i] = Some(Err(e.duplicate()));
                    }
                }
            }
        }
        Ok(out.into_iter().map(|r| r.unwrap_or_else(|| Err(Error::Internal("a record got no result".into())))).collect())
    }

    /// [`Rule::evaluate_batch_iter`] on a WIT route.
    async fn batch_iter<'r, T: wire::Decoded>(
        &self,
        route: &ev::Route,
        records: impl ExactSizeIterator<Item = &'r Record> + Clone,
    ) -> Result<Vec<Result<T>>> {
        let n = records.len();
        if let Some(frame) = self.whole_frame(records.clone()) {
            match self.call_batch(route, &frame, n).await? {
                Ok(results) => return Ok(results),
                // Retried one by one below: only the records that fail alone fail.
                Err(e) => tracing::debug!("omlet: a batch of {n} failed ({e}); evaluating its records one by one"),
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

    /// Several records as one frame, when it is within the record limit (so
    /// that it holds no record over it); `None` for one record, or a frame
    /// too large, whose records go one by one.
    fn whole_frame<'r>(&self, records: impl ExactSizeIterator<Item = &'r Record>) -> Option<Vec<u8>> {
        if records.len() < 2 {
            return None;
        }
        let frame = wire::encode_frame(records);
        (frame.len() <= self.inner.engine.config.max_record_bytes).then_some(frame)
    }

    /// One `evaluate-batch` call: `Ok(Err(_))` when the guest trapped or
    /// reached a limit (the instance is then dropped).
    async fn call_batch<T: wire::Decoded>(&self, route: &ev::Route, frame: &Vec<u8>, n: usize) -> Result<Result<Vec<Result<T>>>> {
        let out = match self.call_sync(|calls, store, generation| calls.batch(store, generation, route, frame)) {
            Some(Ok(out)) => out,
            Some(Err(e)) => return Ok(Err(e)),
            None => {
                let generation = self.generation();
                let mut inst = self.checkout(generation).await?;
                let out = inst.calls.omlet_rule_evaluator().call_evaluate_batch(&mut inst.store, generation, route, frame).await;
                match out {
                    Ok(out) => {
                        self.checkin(&self.inner.idle, inst);
                        out
                    }
                    Err(e) => return Ok(Err(call_error(&inst.store, e))),
                }
            }
        };
        Ok(batch_results(n, out))
    }

    /// [`Rule::evaluate`] for programs without an async runtime.
    pub fn evaluate_blocking(&self, record: &Record) -> Result<Record> {
        self.evaluate_on_blocking(Route::Only, record)
    }

    /// [`Rule::evaluate_on`] for programs without an async runtime.
    pub fn evaluate_on_blocking(&self, route: Route<'_>, record: &Record) -> Result<Record> {
        // Never coalesced: a thread waiting for another's batch call parks in
        // the kernel, which costs more than the batch saves (see
        // `EngineConfig::coalesce`). A call the sync path answers needs no
        // runtime at all.
        let route = wit_route(route.of(record)?);
        match self.alone_sync(&route, record) {
            Alone::Done(result) => result,
            Alone::Async(input) => block_on(self.evaluate_async(route, input)),
        }
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

/// The `n` results of a batch call: its output records, and its errors in their places.
fn batch_results<T: wire::Decoded>(n: usize, out: ev::BatchOutput) -> Result<Vec<Result<T>>> {
    decode_batch_output(n, out, |i| i)
}

/// An `evaluate-batch` output decoded, each record's error naming the record
/// as `named(its index in the batch)`.
fn decode_batch_output<T: wire::Decoded>(n: usize, out: ev::BatchOutput, named: fn(usize) -> usize) -> Result<Vec<Result<T>>> {
    let errors = out.errors.into_iter().map(|e| (e.index as usize, record_error(named(e.index as usize), e.error)));
    wire::decode_batch(n, &out.records, errors)
}

/// The result of the gathering a caller joined, or `None` to evaluate alone.
async fn wait_joined(mut joined: Joined<ev::Route>) -> Option<Result<Record>> {
    loop {
        match (&mut joined).await {
            Joining::Got(result) => return Some(result),
            Joining::Alone => return None,
            Joining::Yield => {
                tokio::task::yield_now().await;
                joined.yielded();
            }
        }
    }
}

/// What a coalescing one-record call does (see [`Rule::step`]).
enum Step<'a> {
    Alone,
    Joined(Joined<ev::Route>),
    Open(Pin<Box<dyn Future<Output = Result<Record>> + Send + 'a>>),
}

/// Where a one-record call stands after the fiber-less path.
enum Alone {
    /// Answered (or refused: a record over the size limit).
    Done(Result<Record>),
    /// To be made on the async path, with this frame.
    Async(Vec<u8>),
}

/// The record an `evaluate` call gave, or its error.
fn single_output(out: Result<Vec<u8>, ev::EvalError>) -> Result<Record> {
    let frame = out.map_err(|e| record_error(0, e))?;
    wire::decode_record(&frame).map_err(|m| Error::Internal(format!("the guest's output record: {m}")))
}

fn same_route(a: &ev::Route, b: &ev::Route) -> bool {
    match (a, b) {
        (ev::Route::Only, ev::Route::Only) => true,
        (ev::Route::Path(a), ev::Route::Path(b)) | (ev::Route::Model(a), ev::Route::Model(b)) => a == b,
        _ => false,
    }
}

/// The WIT form of a route. A [`Route::Field`] is resolved against its
/// record before this ([`Route::of`]); one that was not names a path no
/// model claims, so its record is unrouted rather than misrouted.
fn wit_route(route: Route<'_>) -> ev::Route {
    match route {
        Route::Only => ev::Route::Only,
        Route::Path(p) => ev::Route::Path(p.to_string()),
        Route::Model(m) => ev::Route::Model(m.to_string()),
        Route::Field(f) => ev::Route::Path(format!("(the field {f}, not read)")),
    }
}

/// The rule path in `record`'s field `name` ([`Route::Field`]), or why the
/// record has none (it is then unrouted).
fn field_path<'r>(record: &'r Record, name: &str) -> std::result::Result<&'r str, String> {
    match record.fields().iter().find(|f| f.name == name).map(|f| &f.value) {
        Some(omlet_lang::value::Value::Chars(p)) => Ok(p),
        Some(_) => Err(format!("the rule-path field `{name}` is not text")),
        None => Err(format!("the record has no rule-path field `{name}`")),
    }
}

fn record_error(index: usize, e: ev::EvalError) -> Error {
    match e.kind {
        ev::ErrorKind::Unrouted => Error::Unrouted { index, message: e.message },
        ev::ErrorKind::Lookup => Error::Lookup { index, message: e.message },
        ev::ErrorKind::Rejected => Error::Rejected { index, message: e.message },
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

/// The knowledge base and the statement a `knowledge.query` names, or the
/// error the guest gets.
fn resolve(shared: &Shared, statement: u32) -> Result<(&Arc<Knowledge>, &BoundStatement), wk::QueryError> {
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
fn answer(k: &Knowledge, row: Option<Vec<Cell>>) -> wk::Answer {
    let cacheable = k.cacheable() && (row.is_some() || k.config().cache.negative);
    wk::Answer { row: row.map(|r| r.into_iter().map(to_wit).collect()), cacheable }
}

fn columns(shared: &Shared, statement: u32) -> Result<Vec<String>, wk::QueryError> {
    match shared.statements.get(statement as usize) {
        Some(s) => Ok(s.columns.clone()),
        None => Err(qerr(wk::ErrorCode::UnknownStatement, format!("no statement #{statement}"))),
    }
}

fn now() -> clock::Instant {
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
fn sync_imports(engine: &WtEngine) -> wasmtime::Result<Linker<StoreState>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread takes back the instance it gave back; a thread with none
    /// takes one from the shared list first, then another thread's, so that
    /// a new instance is made only when none is idle; the budget reaches
    /// every thread's.
    #[test]
    fn an_idle_pool_keeps_one_per_thread_and_lends_it_to_others() {
        let pool: Pool<u32> = Pool::new(Some(1));
        assert_eq!(pool.take(), Some(1), "the first instance is in the shared list");
        assert_eq!(pool.take(), None);
        pool.put(2);
        pool.put(3);
        assert_eq!(pool.take(), Some(2), "this thread's own comes first");
        pool.put(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(pool.take(), Some(3), "another thread takes the shared one first");
                assert_eq!(pool.take(), Some(2), "then the other thread's own");
                assert_eq!(pool.take(), None);
                pool.put(4);
            });
        });
        assert_eq!(pool.take(), Some(4), "the other thread's own, lent back");
        pool.put(5);
        assert!(pool.drop_one(), "the budget reaches a thread's own");
        assert!(!pool.drop_one());
        assert_eq!(pool.take(), None);
    }
}
