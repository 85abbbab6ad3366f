//! The host side of a plugin's store: what a plugin can call (`host` in `wit/plugin.wit`, the
//! WASI and HTTP contexts its grants allow) and what the host keeps about the call in progress.
//!
//! `host.log` is bounded: [`LOG_BYTES_PER_CALL`] per call and [`LOG_BYTES_PER_MINUTE`] per
//! stage; past either, messages are dropped and counted (`weir_plugin_log_dropped_total`, and
//! one warning per minute). Control characters in a message are escaped, so a plugin cannot
//! forge a host log line with a newline.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// The target of the events that are plugins' own `host.log` lines (this module's path, which
/// `tracing` gives them): what `weir serve` keeps per pipeline for its tenant to read.
pub const LOG_TARGET: &str = module_path!();

use super::bindings::weir::plugin::{host, types};
use super::grants::HttpAllowList;
use super::limiter::MemoryCap;
use super::metrics::{PluginMetrics, bump};
use super::spec::{LOG_BYTES_PER_CALL, LOG_BYTES_PER_MINUTE, StageSpec};

/// A store's data.
pub struct HostState {
    pub(super) wasi: WasiCtx,
    pub(super) http: WasiHttpCtx,
    pub(super) http_allowed: HttpAllowList,
    pub(super) table: ResourceTable,
    pub(super) memory: MemoryCap,
    pub(super) stderr: MemoryOutputPipe,
    pub(super) spec: Arc<StageSpec>,
    /// When the current call must end; waits in host calls end there too (`waits.rs`).
    pub(super) deadline: Instant,
    pub(super) log: LogBudget,
    pub(super) metrics: Arc<PluginMetrics>,
    /// One bucket per writable grant (`disk.rs`).
    pub(super) disk: Vec<Arc<super::disk::Bucket>>,
    /// The granted schema registry (`registry.rs`).
    pub(super) registry: Option<Arc<weir_schema::Registry>>,
}

impl HostState {
    /// The current call's deadline, its `limits.call_timeout`, and the resource table: what a
    /// wait in the host needs to end in time (`waits.rs`).
    pub fn waiting(&mut self) -> (Instant, Duration, &mut ResourceTable) {
        (self.deadline, self.spec.limits.call_timeout, &mut self.table)
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

/// What a stage may still log: this call's bytes, and this minute's, shared by every instance
/// the stage has (recycling an instance does not refill the minute).
pub struct LogBudget {
    call: usize,
    minute: Arc<Mutex<Minute>>,
}

pub struct Minute {
    started: Instant,
    used: usize,
    dropped: u64,
}

impl LogBudget {
    pub fn new(minute: Arc<Mutex<Minute>>) -> Self {
        Self { call: 0, minute }
    }

    /// A fresh minute, for a new stage.
    pub fn minute() -> Arc<Mutex<Minute>> {
        Arc::new(Mutex::new(Minute { started: Instant::now(), used: 0, dropped: 0 }))
    }

    /// A new call starts with its whole per-call budget.
    pub fn begin_call(&mut self) {
        self.call = 0;
    }

    /// Takes `bytes` from both budgets; `false` if either is spent. The first message dropped
    /// in a minute is reported once, with how many the minute before dropped.
    fn take(&mut self, bytes: usize, stage: &str) -> bool {
        let Ok(mut m) = self.minute.lock() else { return false };
        if m.started.elapsed() >= Duration::from_secs(60) {
            if m.dropped > 0 {
                tracing::warn!(stage, "host.log: {} messages dropped in the last minute (over budget)", m.dropped);
            }
            *m = Minute { started: Instant::now(), used: 0, dropped: 0 };
        }
        if self.call + bytes > LOG_BYTES_PER_CALL || m.used + bytes > LOG_BYTES_PER_MINUTE {
            if m.dropped == 0 {
                tracing::warn!(
                    stage,
                    "host.log: over its budget ({LOG_BYTES_PER_CALL} bytes a call, {LOG_BYTES_PER_MINUTE} a minute); \
                     dropping messages"
                );
            }
            m.dropped += 1;
            return false;
        }
        self.call += bytes;
        m.used += bytes;
        true
    }
}

/// `message` with control characters escaped (`\n` as `\\n`, others as `\u{..}`).
fn escape_controls(message: &str) -> std::borrow::Cow<'_, str> {
    if !message.chars().any(char::is_control) {
        return message.into();
    }
    let mut out = String::with_capacity(message.len() + 8);
    for c in message.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    out.into()
}

impl host::Host for HostState {
    fn log(&mut self, level: host::LogLevel, message: String) {
        let stage = &self.spec.name;
        if !self.log.take(message.len(), stage) {
            bump(&self.metrics.log_dropped, 1);
            return;
        }
        let message = escape_controls(&message);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_controls("plain"), "plain");
        assert_eq!(escape_controls("a\nINFO forged\r\u{1b}[31m"), "a\\nINFO forged\\r\\u{1b}[31m");
    }

    #[test]
    fn a_call_and_a_minute_have_budgets() {
        let minute = LogBudget::minute();
        let mut a = LogBudget::new(minute.clone());
        assert!(a.take(LOG_BYTES_PER_CALL, "s"));
        assert!(!a.take(1, "s"), "the call's budget is spent");
        a.begin_call();
        assert!(a.take(10, "s"));
        let mut b = LogBudget::new(minute.clone());
        let rest = LOG_BYTES_PER_MINUTE - LOG_BYTES_PER_CALL - 10;
        let mut left = rest;
        while left > 0 {
            b.begin_call();
            let n = left.min(LOG_BYTES_PER_CALL);
            assert!(b.take(n, "s"));
            left -= n;
        }
        b.begin_call();
        assert!(!b.take(1, "s"), "the minute's budget is shared by every instance of the stage");
        assert_eq!(minute.lock().unwrap().dropped, 2);
    }
}
