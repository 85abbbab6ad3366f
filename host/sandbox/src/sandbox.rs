//! One plugin stage's sandbox: its component, its live instance and store, and the lifecycle
//! of a call. A call gets the stage's deadline, fuel and copy budget; a trap (or a limit it
//! hits) drops the instance, which is never entered again; a fresh one comes from the
//! `InstancePre` at the next call. Healthy instances are replaced every `recycle_after_calls`
//! calls. What the limits are is `spec.rs`; how each is enforced, `limiter.rs`; what the store
//! offers the plugin, `host.rs`; its capabilities, `grants.rs`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre, ResourceTable};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi_http::WasiHttpCtx;

use super::disk::Bucket;
use super::error::{PluginError, WitError};
use super::grants::Resolved;
use super::host::{HostState, LogBudget, Minute};
use super::limiter::{LimitExceeded, MemoryCap};
use super::metrics::{PluginMetrics, StageLabels, bump};
use super::spec::{Limits, STDERR_CAPTURE, StageSpec};
use super::{EPOCH_TICK, FAIR_SLICE, GIVE_WAY, Runtime};

/// wasmtime charges what it copies out of a guest per item at its host-side size (24 bytes a
/// `Vec`, 8 an `i64`), so the copy budget is this many times `limits.max_output`; the role
/// handles then check the exact bytes against `limits.max_output` itself.
const COPY_BUDGET_FACTOR: usize = 2;

/// The part of a role's bindings a sandbox needs: where its export lives, and how to load it.
pub trait Role {
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

pub struct Sandbox<R: Role> {
    spec: Arc<StageSpec>,
    pre: InstancePre<HostState>,
    indices: R::Indices,
    /// The stage's grants, looked up at start-up; applied to each new instance.
    grants: Resolved,
    /// This minute's `host.log` budget, shared by the stage's instances.
    log_minute: Arc<Mutex<Minute>>,
    /// What each writable grant holds, against `limits.max_disk_mb`; shared by the instances.
    disk: Vec<Arc<Bucket>>,
    live: Option<(Store<HostState>, R::Guest)>,
    /// Ticks before a call's first check: its fair slice, or its deadline if sooner.
    first_check_ticks: u64,
    /// The last call ran into its deadline: the stage is a suspected runaway, and its calls give
    /// way from their first tick instead of after a fair slice, until one returns in time.
    overran: bool,
    pipelines: Arc<std::sync::atomic::AtomicUsize>,
    /// Calls served by the live instance.
    calls: u64,
    /// The engine meters fuel.
    fuel: bool,
    metrics: Arc<PluginMetrics>,
}

impl<R: Role> Sandbox<R> {
    pub fn new(runtime: &Runtime, spec: StageSpec) -> Result<Self, PluginError> {
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
        let writable = spec.grants.dirs.iter().filter(|d| d.writable);
        let disk = writable.map(|d| Arc::new(Bucket::new(&d.host, spec.limits.max_disk))).collect();
        let mut sandbox = Self {
            spec: Arc::new(spec),
            pre,
            indices,
            grants,
            log_minute: LogBudget::minute(),
            disk,
            live: None,
            first_check_ticks,
            overran: false,
            pipelines: runtime.pipelines.clone(),
            calls: 0,
            fuel: runtime.fuel,
            metrics,
        };
        // Instantiate now so a bad grant or a failing `open` shows at start-up, not mid-stream.
        sandbox.instance()?;
        Ok(sandbox)
    }

    pub fn stage(&self) -> &str {
        &self.spec.name
    }

    /// The stage's granted schema registry.
    pub fn registry(&self) -> Option<&weir_schema::Registry> {
        self.grants.registry.as_deref()
    }

    pub fn limits(&self) -> &Limits {
        &self.spec.limits
    }

    pub fn metrics(&self) -> &PluginMetrics {
        &self.metrics
    }

    /// Replaces the instance if it has served its calls. Only between units of work that keep
    /// no state in the instance: any call of a stateless role, a sink's batch boundary.
    pub fn recycle_if_due(&mut self) {
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
            memory: MemoryCap { max: spec.limits.max_memory, metrics: self.metrics.clone() },
            stderr,
            spec: spec.clone(),
            deadline: Instant::now() + spec.limits.call_timeout,
            log: LogBudget::new(self.log_minute.clone()),
            metrics: self.metrics.clone(),
            disk: self.disk.clone(),
            registry: self.grants.registry.clone(),
        };
        let mut store = Store::new(self.pre.engine(), state);
        store.limiter(|s| &mut s.memory);
        // Runs each tick once a call has run for its fair slice: ends it at its deadline, and
        // while other pipelines share the process, sleeps GIVE_WAY ticks for each tick it runs,
        // divided by the stage's weight.
        let pipelines = self.pipelines.clone();
        let give_way = EPOCH_TICK * GIVE_WAY / spec.limits.cpu_weight.max(1);
        store.epoch_deadline_callback(move |cx| {
            let s = cx.data();
            let now = Instant::now();
            if now >= s.deadline {
                return Err(LimitExceeded::Deadline(s.spec.limits.call_timeout).into());
            }
            if pipelines.load(std::sync::atomic::Ordering::Relaxed) > 1 {
                std::thread::sleep(give_way.min(s.deadline - now));
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
                Err(e) => return Err(failure(stage, &e, &store)),
            }
            self.live = Some((store, guest));
        }
        let Some((store, guest)) = self.live.as_mut() else { unreachable!("instance was just created") };
        Ok((store, &*guest))
    }

    /// Calls into the plugin under its deadline. A trap drops the instance; a plugin-reported
    /// error leaves it usable.
    pub fn call<T>(
        &mut self,
        f: impl FnOnce(&R::Guest, &mut Store<HostState>) -> wasmtime::Result<Result<T, WitError>>,
    ) -> Result<T, PluginError> {
        let ticks = if self.overran { 1 } else { self.first_check_ticks };
        let fuel = self.fuel.then(|| self.spec.limits.fuel.unwrap_or(u64::MAX));
        self.calls += 1;
        let m = self.metrics.clone();
        let (store, guest) = self.instance()?;
        store.set_epoch_deadline(ticks);
        let limits = store.data().spec.limits;
        store.set_hostcall_fuel(limits.max_output.saturating_mul(COPY_BUDGET_FACTOR));
        store.data_mut().deadline = Instant::now() + limits.call_timeout;
        store.data_mut().log.begin_call();
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
            Ok(Ok(v)) => {
                self.overran = false;
                Ok(v)
            }
            Ok(Err(error)) => {
                self.overran = false;
                Err(PluginError::Failed { stage: self.spec.name.clone(), error })
            }
            Err(e) => {
                let stage = store.data().spec.name.clone();
                let failure = failure(&stage, &e, store);
                self.overran = matches!(failure, PluginError::Limit { limit: LimitExceeded::Deadline(_), .. });
                self.live = None;
                Err(failure)
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

/// What a failed call is: the limit it hit, or the trap with the plugin's last stderr lines.
fn failure(stage: &str, e: &wasmtime::Error, store: &Store<HostState>) -> PluginError {
    let limits = store.data().spec.limits;
    let limit = e.downcast_ref::<LimitExceeded>().cloned().or_else(|| match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => Some(LimitExceeded::Fuel(limits.fuel.unwrap_or(u64::MAX))),
        // wasmtime's error for a copy past the store's hostcall fuel is a private type: its
        // message is all there is to know it by.
        _ if format!("{e}").contains("fuel allocated for hostcalls has been exhausted") => {
            Some(LimitExceeded::Copy(limits.max_output))
        }
        _ => None,
    });
    match limit {
        Some(limit) => PluginError::Limit { stage: stage.to_string(), limit },
        None => PluginError::Trap { stage: stage.to_string(), message: describe(e, store) },
    }
}

/// A trap, with the plugin's last stderr lines (a Rust panic message lands there).
fn describe(e: &wasmtime::Error, store: &Store<HostState>) -> String {
    // The trap itself, without the wasm backtrace its error carries (hundreds of frames for a
    // stack overflow).
    let mut msg = match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{e}"),
    };
    let stderr = store.data().stderr.contents();
    let stderr = String::from_utf8_lossy(&stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
    if !tail.is_empty() {
        msg.push_str("; plugin stderr: ");
        msg.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join(" | "));
    }
    msg
}
