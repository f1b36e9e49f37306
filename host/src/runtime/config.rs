//! How an engine and a load are configured: [`EngineConfig`], [`LoadOptions`].

use std::sync::Arc;
use std::time::Duration;

use crate::build::{self};
use crate::knowledge::Knowledge;
use crate::{Error, Result};

use super::bindings::omlet::rule::knowledge as wk;

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
    pub(super) fn networks(&self) -> Result<Vec<wk::Network>> {
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
    /// that needs more fails with [`Limit::Memory`](crate::Limit::Memory); its instance is dropped.
    pub max_memory: usize,
    /// Most time one guest call may compute (default 5 s). Time spent waiting
    /// for lookups is not counted: lookups have their own timeout. A call
    /// past it fails with [`Limit::Deadline`](crate::Limit::Deadline); its instance is dropped. The
    /// clock is checked every 10 ms, so a call stops up to 20 ms past it.
    pub call_deadline: Duration,
    /// Fuel per guest call (default none): a count of wasm operations, for
    /// deterministic limits in tests. Costs some speed on every call when set.
    /// A call that runs out fails with [`Limit::Fuel`](crate::Limit::Fuel).
    pub fuel: Option<u64>,
    /// Most bytes of one record as it crosses into the guest (default 16 MiB).
    /// A bigger record fails with [`Limit::RecordBytes`](crate::Limit::RecordBytes) without a call.
    /// It also bounds the fields of a record: each costs at least 13 bytes
    /// in the frame, so 16 MiB hold at most about 1.3 million.
    pub max_record_bytes: usize,
    /// The limits of compiling rule sources in `load_path`, `load_source`
    /// and `load_sources` (the compiler's, the rule file size, the IR size).
    pub build: build::BuildLimits,
    /// Most bytes of a component given to [`Engine::load_component`](crate::Engine::load_component) or
    /// read by [`Engine::load_path`](crate::Engine::load_path) from a `.wasm` file (default 16 MiB). A
    /// bigger one fails with [`Limit::ComponentBytes`](crate::Limit::ComponentBytes) before wasmtime
    /// compiles it, and a file is measured before it is read. Compiling
    /// costs time and memory in proportion to the code (wasmtime has no
    /// bound of its own on it), so this is what bounds it. A set built by
    /// `omlet build` is the guest (about 1 MiB) plus its IR (at most
    /// `build.max_ir_bytes`, 4 MiB by default): raise the two together.
    /// Components compiled here from rule sources are bounded by `build`
    /// instead.
    pub max_component_bytes: usize,
    /// Coalesce one-record calls (default on): the tasks of one thread that
    /// call [`Rule::evaluate`](crate::Rule::evaluate) at about the same time have their records
    /// evaluated in one batch call, and each still gets its own record's
    /// result or error. A caller that may have company yields once before
    /// its call, so that the other tasks its thread has ready can join; a
    /// thread whose gatherings bring nobody (one caller) stops trying for
    /// up to 4096 calls. There is no timer.
    ///
    /// Only calls that need not wait for the host are coalesced (a rule
    /// without lookups, or one whose lookups the caches answer), so that
    /// lookups of concurrent callers still overlap. The blocking calls
    /// ([`Rule::evaluate_blocking`](crate::Rule::evaluate_blocking)) are never coalesced: a thread that waits
    /// for another's batch parks in the kernel. Many tasks making one-record
    /// calls gain the most, two per thread about nothing, one task nothing
    /// (BENCHMARKS.md shows both ways; docs/decisions/0016-coalescing.md
    /// says why); turn it off to rule it out. Once a rule's core path is
    /// ready (see `core_path`), its calls are not coalesced: a core call of
    /// one record costs less than a gathering.
    ///
    /// A task never joins a gathering it opened itself, and a caller whose
    /// gathering's opener is kept but not polled (an `evaluate` future polled
    /// once and then set aside) evaluates alone once its thread has run out
    /// of ready tasks twice, so that nobody waits on a future nobody polls.
    pub coalesce: bool,
    /// Let one-record calls take the core path (default on): a rule loaded
    /// from its program (rule sources, or a core module) compiles the core
    /// ABI's guest with its program after its first 1,024 one-record calls,
    /// on a thread of its own, and its one-record calls then make one plain
    /// wasm call each instead of a component call. Same outputs; about a
    /// second of one core's compiling per rule, and instances of their own
    /// within `max_instances`. Off: every call takes the component.
    pub core_path: bool,
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
            core_path: true,
            code_cache: crate::code_cache::default_dir(),
            perf_map: false,
        }
    }
}
