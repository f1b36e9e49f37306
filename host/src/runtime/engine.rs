//! The [`Engine`]: the wasmtime engine, its linkers, its instance budget,
//! its epoch ticker, and loading components into [`Rule`]s.

use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine as WtEngine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::config::{EngineConfig, LoadOptions};
use super::core_path::{CoreSlot, core_imports};
use super::imports::sync_imports;
use super::info::{RuleInfo, StatementInfo};
use super::invoke::{EVALUATOR, Instance, LINES, SyncPath};
use super::pool::{Idle, Pool};
use super::rule::{Rule, RuleInner};
use super::store::{Shared, StoreState, call_error};
use crate::build::{self, RuleSource};
use crate::coalesce::Coalescer;
use crate::error::Limit;
use crate::{Error, Result};

use super::bindings;

/// How often the engine's epoch advances: the granularity of call deadlines.
pub(super) const TICK: Duration = Duration::from_millis(10);

/// The wasmtime engine shared by all rules.
#[derive(Clone)]
pub struct Engine {
    pub(super) inner: WtEngine,
    pub(super) linker: Arc<Linker<StoreState>>,
    /// The same imports as plain functions, for calls made without a fiber.
    pub(super) sync_linker: Arc<Linker<StoreState>>,
    /// The core ABI's imports, for one-record calls on the core path.
    pub(super) core_linker: Arc<wasmtime::Linker<StoreState>>,
    pub(super) slots: Arc<Slots>,
    pub(super) config: Arc<EngineConfig>,
    pub(super) code: Option<crate::code_cache::CodeCache>,
}

/// The engine's instance budget: one permit per live instance, and the idle
/// pools of every loaded rule, so that a call short of a permit can drop an
/// idle instance of another rule instead of waiting for ever.
pub(super) struct Slots {
    pub(super) permits: Arc<Semaphore>,
    /// Woken whenever an instance goes back to an idle pool.
    pub(super) returned: Notify,
    pub(super) pools: Mutex<Vec<Weak<dyn Idle>>>,
}

impl Slots {
    /// A permit for one more live instance; waits while all are in use.
    pub(super) async fn reserve(&self) -> OwnedSemaphorePermit {
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
    pub(super) fn drop_one_idle(&self) -> bool {
        let Ok(mut pools) = self.pools.lock() else { return false };
        pools.retain(|w| w.strong_count() > 0);
        pools.iter().filter_map(Weak::upgrade).any(|pool| pool.drop_one())
    }

    pub(super) fn register(&self, pool: Weak<dyn Idle>) {
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
        let core_linker = core_imports(&inner).map_err(|e| Error::load("linker", e))?;
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
            core_linker: Arc::new(core_linker),
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
    /// component wasmtime refuses, and [`Error::Knowledge`] (a `Statement`) for a lookup the
    /// knowledge base refuses.
    pub async fn load_path(&self, path: impl AsRef<Path>, options: &LoadOptions) -> Result<Rule> {
        let path = path.as_ref();
        if path.extension().is_some_and(|e| e == "wasm") {
            let bytes = read_component(path, self.config.max_component_bytes)?;
            return self.load_built(&bytes, options).await;
        }
        let limits = options.build.as_ref().unwrap_or(&self.config.build);
        self.load_sources(&RuleSource::collect_limited(&[path.to_path_buf()], limits.max_rule_file_bytes)?, options).await
    }

    /// Compiles rule sources into one rule set and loads it.
    pub async fn load_sources(&self, sources: &[RuleSource], options: &LoadOptions) -> Result<Rule> {
        let limits = options.build.as_ref().unwrap_or(&self.config.build);
        let ir = build::program_bytes(&build::compile_with(sources, limits)?, limits.max_ir_bytes)?;
        self.load_ir(&ir, options).await
    }

    /// Loads a compiled program (IR bytes) into this library's guest.
    async fn load_ir(&self, ir: &[u8], options: &LoadOptions) -> Result<Rule> {
        let guest = crate::guest::core_module()?;
        let component = match &self.code {
            // Found by the guest and the program, without building the component.
            Some(cache) => cache.rule(&self.inner, &guest, ir, || build::component_of(&guest, ir))?.0,
            None => {
                Component::from_binary(&self.inner, &build::component_of(&guest, ir)?).map_err(|e| Error::load("component", e))?
            }
        };
        self.load_compiled(component, options, Some(ir)).await
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
    ///
    /// A core ABI module (`omlet build --target core`, docs/abi.md) loads
    /// too: its compiled rule is read out of it and run in this library's
    /// component guest, built from the same sources as the core ABI's. The
    /// module's own code is not run here; a rule compiled for another IR
    /// version is refused as it would be in a component.
    pub(super) async fn load_built(&self, component: &[u8], options: &LoadOptions) -> Result<Rule> {
        if build::is_core_module(component) {
            return self.load_ir(&build::ir_of(component)?, options).await;
        }
        let component = match &self.code {
            Some(cache) => cache.component(&self.inner, component)?.0,
            None => Component::from_binary(&self.inner, component).map_err(|e| Error::load("component", e))?,
        };
        self.load_compiled(component, options, None).await
    }

    /// Links and instantiates a compiled component, and binds its lookups.
    /// With the program `ir` at hand, one-record calls may later take the
    /// core path (`core_path.rs`).
    async fn load_compiled(&self, component: Component, options: &LoadOptions, ir: Option<&[u8]>) -> Result<Rule> {
        let knowledge = options.knowledge.clone();
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
        // The core path answers lookups as the sync path does: only where it is.
        let core = if sync.is_some() && self.config.core_path { CoreSlot::new(ir) } else { CoreSlot::none() };
        Ok(Rule { inner: Arc::new(RuleInner { engine: self.clone(), pre, shared, info, idle, sync, core, coalescer }) })
    }

    /// The fiber-less path of a rule, when every call can take it: a rule
    /// without lookups, or one whose knowledge base has a shared cache to
    /// answer from (a miss moves the call to the async path).
    pub(super) fn sync_path(&self, component: &Component, shared: &Shared) -> Result<Option<SyncPath>> {
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
        // Optional: components built before it was added lack it.
        let lines =
            component.get_export_index(None, LINES).and_then(|l| component.get_export_index(Some(&l), "evaluate-batch-lines"));
        Ok(Some(SyncPath { pre, evaluate, batch, lines, idle: Arc::new(Pool::new(None)), skip: AtomicU32::new(0) }))
    }
}

/// The WIT package this host speaks (`wit/omlet.wit`).
pub(super) const WIT_PACKAGE: &str = "omlet:rule@0.6.0";

/// Refuses a component built for another version of omlet's WIT package,
/// with what to do, before linking fails on its first import. 0.4.0 added
/// the `bigint` frame node, which an older guest cannot read; 0.5.0 the
/// `intranet-nets` import and the `rejected` error kind; 0.6.0 the
/// `explain` export.
pub(super) fn check_wit_version(engine: &WtEngine, component: &Component) -> Result<()> {
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
pub(super) fn component_too_big(what: &str, len: u64, max: usize) -> Error {
    Error::limit(
        Limit::ComponentBytes,
        format!("{what} takes {len} bytes, more than a component may take ({max}; EngineConfig::max_component_bytes)"),
    )
}

/// Reads a component file of at most `max` bytes: a bigger one is refused
/// by its length before anything is read, and a file that grows while it
/// is read is cut off and refused.
pub(super) fn read_component(path: &Path, max: usize) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    let what = || path.display().to_string();
    if len > max as u64 {
        return Err(component_too_big(&what(), len, max));
    }
    omlet_knowledge::files::read_bytes(path, max as u64, "component")
        .map_err(|e| Error::bounded_read(e, |_| component_too_big(&what(), max as u64 + 1, max)))
}

/// Advances the engine's epoch every [`TICK`] until the engine is dropped.
pub(super) fn start_ticker(engine: &WtEngine) {
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
