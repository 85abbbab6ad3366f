//! `weir run --metrics-addr HOST:PORT`: the process's plugin metrics (and, in a group, its
//! tasks') for Prometheus at `/metrics`, in the OpenMetrics text format (prometheus-client encodes it). Served by axum on a
//! small Tokio runtime of its own, so connections are handled concurrently and an idle or slow
//! client never holds up a scrape; a scrape reads atomics and never waits on a pipeline.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use super::exit::Usage;
use crate::plugin::Runtime;
use crate::scale::Rollup;

/// Threads serving metrics: scrapes are rare and cheap.
const WORKERS: usize = 1;

/// The content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Starts serving the plugins' metrics and, for each pipeline run in a group, its tasks'
/// (`tasks`); returns the address actually bound (port 0 picks one).
pub(super) fn serve(addr: &str, runtime: Arc<Runtime>, tasks: Vec<Arc<Rollup>>) -> Result<SocketAddr> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_name("weir-metrics")
        .enable_io()
        .build()
        .context("cannot start the metrics server")?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| Usage(format!("--metrics-addr {addr}: cannot listen ({e})")))?;
    let bound = listener.local_addr()?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(runtime.metrics_collector()));
    for t in tasks {
        registry.register_collector(Box::new(t));
    }
    let registry = Arc::new(registry);
    let app = Router::new().route("/metrics", get(move || scrape(registry.clone())));
    std::thread::Builder::new().name("weir-metrics".into()).spawn(move || {
        if let Err(e) = rt.block_on(async { axum::serve(listener, app).await }) {
            tracing::warn!("metrics server stopped: {e}");
        }
    })?;
    Ok(bound)
}

async fn scrape(registry: Arc<Registry>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => (StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], body),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], e.to_string()),
    }
}
