//! One plugin stage's sandbox: its `Store`, its live instance, its limits and grants.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Instance, InstancePre, ResourceTable};
use wasmtime::{ResourceLimiter, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::weir::plugin::{host, types};
use super::grants::{Grants, HttpAllowList, Resolved};
use super::metrics::{PluginMetrics, StageLabels, bump};
use super::{EPOCH_TICK, FAIR_SLICE, GIVE_WAY, Runtime};

/// Everything the host needs to run one plugin stage.
#[derive(Debug, Clone)]
pub(crate) struct StageSpec {
    /// `pipeline/stage`, used in every log line and error.
    pub name: String,
    pub component: PathBuf,
    /// The stage's `config` table, as JSON.
    pub config_json: String,
    pub grants: Grants,
    pub limits: Limits,
}

/// Per-call limits. Defaults are safe for untrusted code; the pipeline file may change them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Wall-clock time one call may take before it traps.
    pub call_timeout: Duration,
    /// Linear memory the instance may grow to, in bytes.
    pub max_memory: usize,
    /// Bytes one call may return (rows, keys, accumulators): a plugin cannot make the host
    /// hold more than this per call beyond what it already holds.
    pub max_output: usize,
    /// Calls an instance serves before it is replaced by a fresh one. Linear memory never
    /// shrinks, so a plugin that leaks (or just fragments its heap) would otherwise creep up to
    /// its memory cap and trap; a fresh instance starts from its initial memory again.
    pub recycle_after_calls: u64,
    /// Fuel (roughly, Wasm instructions) one call may burn: a deterministic budget, unlike
    /// the deadline. `None`: unmetered.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(10),
            max_memory: 512 << 20,
            max_output: 32 << 20,
            recycle_after_calls: 1_000,
            fuel: None,
        }
    }
}

/// Bytes of a plugin's stderr kept to explain a trap (a Rust panic message lands there). A plugin
/// that writes more has its further writes fail; stdout goes nowhere.
const STDERR_CAPTURE: usize = 16 << 10;

#[derive(Debug, thiserror::Error)]
pub(crate) enum PluginError {
    #[error("wasm engine: {0}")]
    Engine(String),
    #[error("cannot read plugin {}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot compile plugin {}: {message}", path.display())]
    Compile { path: PathBuf, message: String },
    #[error(
        "plugin {} is built for weir:plugin@{found}, but this host loads weir:plugin@{supported}; \
         rebuild it against a matching weir-guest",
        path.display()
    )]
    Version { path: PathBuf, found: String, supported: String },
    #[error("stage {stage}: plugin {} cannot be the {role}: it does not implement {interface}", path.display())]
    MissingRole { stage: String, path: PathBuf, role: &'static str, interface: &'static str },
    #[error("stage {stage}: cannot grant {what}: {message}")]
    Grant { stage: String, what: String, message: String },
    #[error("stage {stage}: cannot instantiate plugin: {message}")]
    Instantiate { stage: String, message: String },
    #[error("stage {stage}: the plugin failed: {}", say(error))]
    Failed { stage: String, error: WitError },
    #[error("stage {stage}: plugin trapped: {message}")]
    Trap { stage: String, message: String },
    #[error("stage {stage}: {message}")]
    Limit { stage: String, message: String },
    #[error("stage {stage}: stopped before the batch was done")]
    Stopped { stage: String },
    #[error("stage {stage}: {message}")]
    Contract { stage: String, message: String },
}

/// A plugin's error in plain words (the bindings' own `Display` is Rust debug output).
fn say(e: &WitError) -> String {
    match e {
        WitError::InvalidConfig(m) => format!("its config is not valid: {m}"),
        WitError::BadState(m) => format!("it cannot read its state: {m}"),
        WitError::Unsupported(m) => format!("unsupported: {m}"),
        WitError::Io(m) => format!("input/output error: {m}"),
        WitError::Internal(m) => m.clone(),
    }
}

impl PluginError {
    /// Whether the failure is in what the pipeline file names (a component that cannot be read,
    /// built for another contract, not playing its role, refusing its config, or a grant that
    /// cannot be given) rather than in running it.
    pub(crate) fn is_config(&self) -> bool {
        matches!(
            self,
            Self::Read { .. }
                | Self::Compile { .. }
                | Self::Version { .. }
                | Self::MissingRole { .. }
                | Self::Grant { .. }
                | Self::Instantiate { .. }
                | Self::Failed { error: WitError::InvalidConfig(_), .. }
        )
    }

    /// The stage the failure happened in (empty for failures before a stage exists).
    pub(crate) fn stage(&self) -> &str {
        match self {
            Self::MissingRole { stage, .. }
            | Self::Grant { stage, .. }
            | Self::Instantiate { stage, .. }
            | Self::Failed { stage, .. }
            | Self::Trap { stage, .. }
            | Self::Contract { stage, .. }
            | Self::Limit { stage, .. }
            | Self::Stopped { stage } => stage,
            Self::Engine(_) | Self::Read { .. } | Self::Compile { .. } | Self::Version { .. } => "",
        }
    }
}

pub(crate) use types::PluginError as WitError;

/// Elements a plugin's tables may grow to (function references, mostly).
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// Caps linear memory, and remembers that it refused, so the trap that follows (the guest's
/// allocator aborts) is reported as the limit it is.
struct MemoryCap {
    max: usize,
    refused: bool,
    metrics: Arc<PluginMetrics>,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        let ok = desired <= self.max;
        self.refused |= !ok;
        if ok {
            self.metrics.memory_high_water.fetch_max(desired as u64, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(ok)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    // A component is a handful of core instances, tables and memories; a store holds one
    // component. These caps stop a component that declares thousands from getting them.
    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }
}

pub(crate) struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    http_allowed: HttpAllowList,
    table: ResourceTable,
    memory: MemoryCap,
    stderr: MemoryOutputPipe,
    spec: Arc<StageSpec>,
    /// When the current call must end; waits in host calls end there too ([`super::waits`]).
    deadline: Instant,
}

impl HostState {
    pub(crate) fn waiting(&mut self) -> (Instant, &mut ResourceTable) {
        (self.deadline, &mut self.table)
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { hooks: &mut self.http_allowed, table: &mut self.table, ctx: &mut self.http }
    }
}

impl host::Host for HostState {
    fn log(&mut self, level: host::LogLevel, message: String) {
        let stage = &self.spec.name;
        match level {
            host::LogLevel::Trace => tracing::trace!(stage, "{message}"),
            host::LogLevel::Debug => tracing::debug!(stage, "{message}"),
            host::LogLevel::Info => tracing::info!(stage, "{message}"),
            host::LogLevel::Warn => tracing::warn!(stage, "{message}"),
            host::LogLevel::Error => tracing::error!(stage, "{message}"),
        }
    }

    fn config(&mut self) -> String {
        self.spec.config_json.clone()
    }
}

impl types::Host for HostState {}

/// The part of a role's bindings a sandbox needs: where its export lives, and how to load it.
pub(crate) trait Role {
    const NAME: &'static str;
    const INTERFACE: &'static str;
    type Indices;
    type Guest;
    fn indices(pre: &InstancePre<HostState>) -> wasmtime::Result<Self::Indices>;
    fn load(
        indices: &Self::Indices,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest>;
    /// Runs once on each new instance: proves the component plays the role (and opens a sink).
    fn probe(guest: &Self::Guest, store: &mut Store<HostState>) -> wasmtime::Result<Result<(), WitError>>;
}

pub(crate) struct Sandbox<R: Role> {
    spec: Arc<StageSpec>,
    pre: InstancePre<HostState>,
    indices: R::Indices,
    /// The stage's grants, looked up at start-up; applied to each new instance.
    grants: Resolved,
    live: Option<(Store<HostState>, R::Guest)>,
    /// Ticks before a call's first check: its fair slice, or its deadline if sooner.
    first_check_ticks: u64,
    pipelines: Arc<std::sync::atomic::AtomicUsize>,
    /// Calls served by the live instance.
    calls: u64,
    /// The engine meters fuel.
    fuel: bool,
    metrics: Arc<PluginMetrics>,
}

impl<R: Role> Sandbox<R> {
    pub(crate) fn new(runtime: &Runtime, spec: StageSpec) -> Result<Self, PluginError> {
        let grants = spec.grants.resolve(&spec.name)?;
        let component = runtime.load(&spec.component)?;
        let stage = spec.name.clone();
        let pre = runtime
            .linker
            .instantiate_pre(&component)
            .map_err(|e| PluginError::Instantiate { stage: stage.clone(), message: format!("{e:#}") })?;
        let indices = R::indices(&pre).map_err(|_| PluginError::MissingRole {
            stage,
            path: spec.component.clone(),
            role: R::NAME,
            interface: R::INTERFACE,
        })?;
        let first_check = spec.limits.call_timeout.min(FAIR_SLICE);
        let first_check_ticks = (first_check.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64;
        if spec.limits.fuel.is_some() && !runtime.fuel {
            return Err(PluginError::Engine(format!(
                "stage {}: limits.fuel needs a runtime created with fuel metering",
                spec.name
            )));
        }
        let metrics = runtime.metrics.register(labels(&spec));
        let mut sandbox = Self {
            spec: Arc::new(spec),
            pre,
            indices,
            grants,
            live: None,
            first_check_ticks,
            pipelines: runtime.pipelines.clone(),
            calls: 0,
            fuel: runtime.fuel,
            metrics,
        };
        // Instantiate now so a bad grant or a failing `open` shows at start-up, not mid-stream.
        sandbox.instance()?;
        Ok(sandbox)
    }

    pub(crate) fn stage(&self) -> &str {
        &self.spec.name
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.spec.limits
    }

    pub(crate) fn metrics(&self) -> &PluginMetrics {
        &self.metrics
    }

    /// Replaces the instance if it has served its calls. Only between units of work that keep
    /// no state in the instance: any call of a stateless role, a sink's batch boundary.
    pub(crate) fn recycle_if_due(&mut self) {
        if self.calls >= self.spec.limits.recycle_after_calls {
            self.live = None;
        }
    }

    fn fresh_store(&self) -> Result<Store<HostState>, PluginError> {
        let spec = &self.spec;
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone());
        self.grants.apply(&mut wasi, &spec.name)?;
        let state = HostState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            http_allowed: self.grants.http(),
            table: ResourceTable::new(),
            memory: MemoryCap { max: spec.limits.max_memory, refused: false, metrics: self.metrics.clone() },
            stderr,
            spec: spec.clone(),
            deadline: Instant::now() + spec.limits.call_timeout,
        };
        let mut store = Store::new(self.pre.engine(), state);
        store.limiter(|s| &mut s.memory);
        // Runs each tick once a call has run for its fair slice: ends it at its deadline, and
        // while other pipelines share the process, sleeps GIVE_WAY ticks for each tick it runs.
        let pipelines = self.pipelines.clone();
        store.epoch_deadline_callback(move |cx| {
            let s = cx.data();
            let now = Instant::now();
            if now >= s.deadline {
                return Err(wasmtime::Trap::Interrupt.into());
            }
            if pipelines.load(std::sync::atomic::Ordering::Relaxed) > 1 {
                std::thread::sleep((EPOCH_TICK * GIVE_WAY).min(s.deadline - now));
            }
            Ok(wasmtime::UpdateDeadline::Continue(1))
        });
        Ok(store)
    }

    fn instance(&mut self) -> Result<(&mut Store<HostState>, &R::Guest), PluginError> {
        if self.live.is_none() {
            self.calls = 0;
            let mut store = self.fresh_store()?;
            store.set_epoch_deadline(self.first_check_ticks);
            if self.fuel {
                // Start-up (instantiation, the role probe) is bounded by the deadline alone.
                store.set_fuel(u64::MAX).map_err(|e| PluginError::Engine(e.to_string()))?;
            }
            let stage = &self.spec.name;
            let instance = self
                .pre
                .instantiate(&mut store)
                .map_err(|e| PluginError::Instantiate { stage: stage.clone(), message: describe(&e, &store) })?;
            let guest = R::load(&self.indices, &mut store, &instance)
                .map_err(|e| PluginError::Instantiate { stage: stage.clone(), message: format!("{e:#}") })?;
            match R::probe(&guest, &mut store) {
                Ok(Ok(())) => {}
                Ok(Err(WitError::Unsupported(_))) => {
                    return Err(PluginError::MissingRole {
                        stage: stage.clone(),
                        path: self.spec.component.clone(),
                        role: R::NAME,
                        interface: R::INTERFACE,
                    });
                }
                Ok(Err(error)) => return Err(PluginError::Failed { stage: stage.clone(), error }),
                Err(e) => return Err(PluginError::Trap { stage: stage.clone(), message: describe(&e, &store) }),
            }
            self.live = Some((store, guest));
        }
        let Some((store, guest)) = self.live.as_mut() else { unreachable!("instance was just created") };
        Ok((store, &*guest))
    }

    /// Calls into the plugin under its deadline. A trap drops the instance; a plugin-reported
    /// error leaves it usable.
    pub(crate) fn call<T>(
        &mut self,
        f: impl FnOnce(&R::Guest, &mut Store<HostState>) -> wasmtime::Result<Result<T, WitError>>,
    ) -> Result<T, PluginError> {
        let ticks = self.first_check_ticks;
        let fuel = self.fuel.then(|| self.spec.limits.fuel.unwrap_or(u64::MAX));
        self.calls += 1;
        let m = self.metrics.clone();
        let (store, guest) = self.instance()?;
        store.set_epoch_deadline(ticks);
        store.data_mut().deadline = Instant::now() + store.data().spec.limits.call_timeout;
        if let Some(fuel) = fuel {
            store.set_fuel(fuel).map_err(|e| PluginError::Engine(e.to_string()))?;
        }
        let started = Instant::now();
        let result = f(guest, store);
        bump(&m.calls, 1);
        bump(&m.nanos, started.elapsed().as_nanos() as u64);
        if let Some(fuel) = fuel {
            bump(&m.fuel, fuel.saturating_sub(store.get_fuel().unwrap_or(0)));
        }
        if !matches!(result, Ok(Ok(_))) {
            bump(&m.errors, 1);
        }
        match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(error)) => Err(PluginError::Failed { stage: self.spec.name.clone(), error }),
            Err(e) => {
                let message = describe(&e, store);
                self.live = None;
                Err(PluginError::Trap { stage: self.spec.name.clone(), message })
            }
        }
    }
}

/// Metric labels from a stage spec: its name is `pipeline/stage (plugin file)`.
fn labels(spec: &StageSpec) -> StageLabels {
    let name = spec.name.split(" (").next().unwrap_or(&spec.name);
    let (pipeline, stage) = name.split_once('/').unwrap_or(("", name));
    StageLabels {
        pipeline: pipeline.to_string(),
        stage: stage.to_string(),
        plugin: spec.component.file_name().map_or(String::new(), |f| f.to_string_lossy().into_owned()),
    }
}

/// A trap, said as the limit it hit where it hit one, with the plugin's last stderr lines.
fn describe(e: &wasmtime::Error, store: &Store<HostState>) -> String {
    let state = store.data();
    let waited = e.downcast_ref::<super::waits::WaitPastDeadline>().is_some();
    let mut msg = match e.downcast_ref::<wasmtime::Trap>() {
        _ if waited => format!(
            "call exceeded its deadline of {:?} waiting in the host (limits.call_timeout)",
            state.spec.limits.call_timeout
        ),
        Some(wasmtime::Trap::Interrupt) => {
            format!("call exceeded its deadline of {:?} (limits.call_timeout)", state.spec.limits.call_timeout)
        }
        Some(wasmtime::Trap::OutOfFuel) => {
            format!("call used up its fuel of {} (limits.fuel)", state.spec.limits.fuel.unwrap_or(u64::MAX))
        }
        _ if state.memory.refused => {
            format!("memory limit of {} MiB reached (limits.max_memory_mb)", state.spec.limits.max_memory >> 20)
        }
        // The trap itself, without the wasm backtrace its error carries (hundreds of frames
        // for a stack overflow).
        Some(trap) => trap.to_string(),
        None => format!("{e}"),
    };
    let stderr = state.stderr.contents();
    let stderr = String::from_utf8_lossy(&stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
    if !tail.is_empty() {
        msg.push_str("; plugin stderr: ");
        msg.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join(" | "));
    }
    msg
}
