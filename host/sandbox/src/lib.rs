//! The Wasm plugin runtime: one wasmtime `Engine` per process, components compiled once and
//! cached on disk, and a sandbox per plugin stage.
//!
//! Contract each sandbox keeps (the limits are set per stage in the pipeline file):
//! - a call that runs past its wall-clock deadline traps (epoch interruption), and so does one
//!   that grows linear memory past its cap (a `ResourceLimiter`), burns its fuel (when metered)
//!   or returns more than its output cap;
//! - a trapped instance is never entered again: the next call gets a fresh instance from the
//!   `InstancePre` (tens of microseconds), so one bad batch costs one batch; healthy instances
//!   are replaced every `recycle_after_calls` calls, so leaks cannot accumulate;
//! - the plugin sees only what its stage grants: its `config` table, a logger, and the
//!   directories, environment variables, clocks, randomness and network addresses listed under
//!   `grants`. Clocks are frozen and randomness is seeded otherwise; no inherited stdio.
//!
//! `docs/security.md` is the user-facing version of this contract.

mod cache;
mod disk;
mod error;
mod grants;
mod host;
mod limiter;
pub mod metrics;
mod processor;
mod registry;
mod roles;
mod sandbox;
mod spec;
mod waits;

// The layer below, under the names this crate's modules use.
use weir_types::{columns, json, own_files};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

pub use bindings::weir::plugin::types::{BatchOutput, EventBatch, Header, RawBatch, RecordError, RecordErrorKind};
pub use disk::du;
pub use error::{PluginError, WitError};
pub use grants::{DirGrant, Grants, Own};
pub use host::LOG_TARGET;
pub use limiter::LimitExceeded;
pub use processor::{Clock, KeyResult, Keyed, ProcessFns, Processor, TimeDomain, Timer};
pub use roles::{AggregateFns, Aggregator, ParseFns, Parser, RowBatch, Sink, TransformFns, Transformer};
pub use spec::{DEFAULT_CPU_WEIGHT, LimitsFile, MAX_CPU_WEIGHT, StageBudget, StageSpec};

mod bindings {
    // The world by name alone: its package version is `wit/plugin.wit`'s, wherever it is said.
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "plugin",
        // Timers are compared and ordered (the keyed processor sorts and dedupes them).
        additional_derives: [PartialEq, Eq, PartialOrd, Ord],
    });
}

// Empty batches, for the host's own builders. bindgen can only add a derive to every generated
// type, and its enums and variants have no default, hence the hand-written impls.
#[allow(clippy::derivable_impls)]
impl Default for bindings::weir::plugin::types::RawBatch {
    fn default() -> Self {
        Self {
            values: vec![],
            value_ends: vec![],
            keys: vec![],
            key_ends: vec![],
            timestamps: vec![],
            partitions: vec![],
            offsets: vec![],
            headers: vec![],
        }
    }
}

#[allow(clippy::derivable_impls)]
impl Default for bindings::weir::plugin::types::EventBatch {
    fn default() -> Self {
        Self { times: vec![], keys: vec![], key_ends: vec![], rows: vec![], row_ends: vec![], origins: vec![] }
    }
}

#[allow(clippy::derivable_impls)]
impl Default for RowBatch {
    fn default() -> Self {
        Self { rows: vec![], row_ends: vec![] }
    }
}

/// The WIT package version this host implements, as `wit/plugin.wit` declares it (read by
/// `build.rs`); components must match its major.minor.
pub const WIT_VERSION: &str = env!("WEIR_WIT_VERSION");

/// How often the epoch ticks: how often a long call's deadline and fair share are checked.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How long a call runs flat out before, when other pipelines share the process, it starts
/// giving way: past it, each tick of running is followed by three of sleep. A batch call of a
/// healthy plugin takes a few milliseconds and never gets there; a runaway one (a loop waiting
/// for its deadline) gets a quarter of a core, and the other tenants keep the rest.
const FAIR_SLICE: Duration = Duration::from_millis(20);

/// Ticks a call past its fair slice sleeps for each tick it runs, when other pipelines share the
/// process: such a call gets a quarter of a core.
const GIVE_WAY: u32 = 3;

/// The process-wide Wasm runtime. Cheap to share (`Arc`); stops its epoch thread on drop.
pub struct Runtime {
    engine: Engine,
    linker: Linker<host::HostState>,
    cache: cache::ComponentCache,
    ticker: Arc<AtomicBool>,
    /// Fuel metering is on: every store gets fuel before each call.
    fuel: bool,
    metrics: Arc<metrics::Registry>,
    /// Pipelines running in this process.
    pipelines: Arc<AtomicUsize>,
}

/// A pipeline running on a [`Runtime`], until dropped.
pub struct PipelineGuard(Arc<AtomicUsize>);

impl Drop for PipelineGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Runtime {
    /// Creates the engine. Compiled components are cached under `cache_dir` (`None`: in a
    /// private directory of this process's). `fuel` turns on
    /// fuel metering for every plugin in the process (code compiled with it runs slower, so it
    /// is on only when some stage sets `limits.fuel`).
    pub fn new(cache_dir: Option<PathBuf>, fuel: bool) -> Result<Arc<Self>, PluginError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.consume_fuel(fuel);
        // Component-model async adds a cost to every call; no plugin interface is async.
        config.concurrency_support(false);
        #[cfg(feature = "profiling")]
        match std::env::var("WEIR_PROFILE").as_deref() {
            Ok("perfmap") => {
                config.profiler(wasmtime::ProfilingStrategy::PerfMap);
            }
            // With the code itself, for `perf inject --jit` and instruction-level annotation.
            Ok("jitdump") => {
                config.profiler(wasmtime::ProfilingStrategy::JitDump);
            }
            _ => {}
        }
        let engine = Engine::new(&config).map_err(|e| PluginError::Engine(e.to_string()))?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| PluginError::Engine(e.to_string()))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)
            .map_err(|e| PluginError::Engine(e.to_string()))?;
        bindings::Plugin::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| PluginError::Engine(e.to_string()))?;
        waits::bound_waits(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        disk::bound_writes(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;

        let ticker = Arc::new(AtomicBool::new(true));
        let (e, alive) = (engine.clone(), ticker.clone());
        std::thread::Builder::new()
            .name("weir-epoch".into())
            .spawn(move || {
                while alive.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    e.increment_epoch();
                }
            })
            .map_err(|e| PluginError::Engine(format!("cannot start the epoch thread: {e}")))?;

        let cache = cache::ComponentCache::new(cache_dir, &engine);
        Ok(Arc::new(Self { engine, linker, cache, ticker, fuel, metrics: Arc::default(), pipelines: Arc::default() }))
    }

    /// Every plugin stage's metrics in this process.
    pub fn metrics(&self) -> &metrics::Registry {
        &self.metrics
    }

    /// The same metrics, for a Prometheus registry to collect at each scrape.
    pub fn metrics_collector(&self) -> Arc<metrics::Registry> {
        self.metrics.clone()
    }

    /// Counts a pipeline as running until the guard drops. With more than one, calls past
    /// their fair slice give way to the others.
    pub fn enter_pipeline(&self) -> PipelineGuard {
        self.pipelines.fetch_add(1, Ordering::Relaxed);
        PipelineGuard(self.pipelines.clone())
    }

    /// The default cache directory: `$WEIR_CACHE_DIR`, else this user's cache directory
    /// (`cache.rs`); `None` without a home.
    pub fn default_cache_dir() -> Option<PathBuf> {
        cache::default_dir()
    }

    /// Where compiled components are kept.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache.dir()
    }

    /// Compiles the component at `path` (into the cache) and names the roles it exports, for a
    /// check before any pipeline uses it (`weir serve`'s uploads). Empty: it is a component,
    /// but not a Weir plugin.
    pub fn roles(&self, path: &Path) -> Result<Vec<&'static str>, PluginError> {
        let component = self.load(path)?;
        let ty = component.component_type();
        let mut roles: Vec<&'static str> = ty
            .exports(&self.engine)
            .filter_map(|(name, _)| {
                let role = name.strip_prefix("weir:plugin/")?.split('@').next()?;
                ["parser", "transformer", "aggregator", "processor", "sink"].into_iter().find(|r| *r == role)
            })
            .collect();
        roles.sort_unstable();
        roles.dedup();
        Ok(roles)
    }

    fn load(&self, path: &Path) -> Result<Component, PluginError> {
        let component = self.cache.load(&self.engine, path)?;
        check_wit_version(&self.engine, &component, path)?;
        Ok(component)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker.store(false, Ordering::Relaxed);
    }
}

/// Refuses a component built against another `weir:plugin` major.minor with a message naming
/// both versions, instead of wasmtime's "no export named ..." at instantiation.
fn check_wit_version(engine: &Engine, component: &Component, path: &Path) -> Result<(), PluginError> {
    let want = WIT_VERSION.rsplit_once('.').map_or(WIT_VERSION, |(mm, _)| mm);
    let ty = component.component_type();
    let names = ty.exports(engine).map(|(n, _)| n.to_string()).chain(ty.imports(engine).map(|(n, _)| n.to_string()));
    for name in names {
        let Some(rest) = name.strip_prefix("weir:plugin/") else { continue };
        let version = rest.split_once('@').map_or("", |(_, v)| v);
        let major_minor = version.rsplit_once('.').map_or(version, |(mm, _)| mm);
        if major_minor != want {
            return Err(PluginError::Version {
                path: path.to_path_buf(),
                found: if version.is_empty() { "unversioned".into() } else { version.to_string() },
                supported: format!("{want}.x"),
            });
        }
    }
    Ok(())
}
