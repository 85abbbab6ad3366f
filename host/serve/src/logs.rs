//! Each hosted pipeline's plugin log lines, for `GET /v1/pipelines/NAME/logs`. A plugin's
//! `host.log` calls become `tracing` events carrying the stage's name (`host/sandbox/src/host.rs`, which
//! also bounds and escapes them); under `weir serve`, a layer of the log subscriber keeps the
//! last [`limits::RECENT_LOG_LINES`] of them per pipeline, found by the run name that opens the
//! stage's name (`TENANT--NAME/stage (file)`).
//!
//! Invariant: a line is kept under the pipeline whose stage wrote it, and only there.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;

use super::limits;

/// The module whose events are plugins' log lines.
const PLUGIN_LOG_TARGET: &str = crate::plugin::LOG_TARGET;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Line {
    pub ms: i64,
    pub level: &'static str,
    pub stage: String,
    pub message: String,
}

static LINES: OnceLock<Mutex<HashMap<String, VecDeque<Line>>>> = OnceLock::new();

fn lines() -> &'static Mutex<HashMap<String, VecDeque<Line>>> {
    LINES.get_or_init(Mutex::default)
}

/// The layer `weir serve` adds to its log subscriber: plugins' lines at `info` and above.
pub fn layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    Capture.with_filter(tracing_subscriber::filter::filter_fn(|m| {
        m.target() == PLUGIN_LOG_TARGET && *m.level() <= tracing::Level::INFO
    }))
}

/// The last `n` lines of the pipeline that runs as `run_name`, oldest first.
pub fn recent(run_name: &str, n: usize) -> Vec<Line> {
    let all = lines().lock().unwrap_or_else(|e| e.into_inner());
    all.get(run_name).map_or(Vec::new(), |l| l.iter().skip(l.len().saturating_sub(n)).cloned().collect())
}

/// Forgets a deleted pipeline's lines.
pub fn forget(run_name: &str) {
    lines().lock().unwrap_or_else(|e| e.into_inner()).remove(run_name);
}

struct Capture;

#[derive(Default)]
struct Fields {
    stage: Option<String>,
    message: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "stage" {
            self.stage = Some(value.to_string());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = Some(format!("{value:?}")),
            "stage" if self.stage.is_none() => self.stage = Some(format!("{value:?}").trim_matches('"').to_string()),
            _ => {}
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let (Some(stage), Some(message)) = (f.stage, f.message) else { return };
        let Some((run_name, _)) = stage.split_once('/') else { return };
        let line = Line {
            ms: super::registry::now_ms(),
            level: event.metadata().level().as_str(),
            stage: stage.clone(),
            message,
        };
        let mut all = lines().lock().unwrap_or_else(|e| e.into_inner());
        let kept = all.entry(run_name.to_string()).or_default();
        if kept.len() == limits::RECENT_LOG_LINES {
            kept.pop_front();
        }
        kept.push_back(line);
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::prelude::*;

    use super::*;

    #[test]
    fn a_plugin_s_lines_are_kept_under_its_pipeline_only_and_only_the_last_ones() {
        let subscriber = tracing_subscriber::registry().with(layer());
        tracing::subscriber::with_default(subscriber, || {
            // As `host/sandbox/src/host.rs` logs them, from its module.
            for i in 0..limits::RECENT_LOG_LINES + 5 {
                tracing::info!(target: PLUGIN_LOG_TARGET, stage = "acme--orders/parse (p.wasm)", "line {i}");
            }
            tracing::warn!(target: PLUGIN_LOG_TARGET, stage = "rival--orders/parse (p.wasm)", "theirs");
            tracing::debug!(target: PLUGIN_LOG_TARGET, stage = "acme--orders/parse (p.wasm)", "too fine");
            tracing::info!(stage = "acme--orders/parse (p.wasm)", "not a plugin's");
        });
        let mine = recent("acme--orders", usize::MAX);
        assert_eq!(mine.len(), limits::RECENT_LOG_LINES);
        assert_eq!(
            mine.last().map(|l| l.message.as_str()),
            Some(format!("line {}", limits::RECENT_LOG_LINES + 4).as_str())
        );
        assert!(mine.iter().all(|l| l.stage.starts_with("acme--orders/") && l.level == "INFO"));
        assert_eq!(recent("rival--orders", 10).len(), 1);
        forget("acme--orders");
        assert!(recent("acme--orders", 10).is_empty());
    }
}
