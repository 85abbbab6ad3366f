//! `weir serve`: one long-running process hosting many tenants' pipelines behind an HTTP/JSON
//! API (docs/serve.md, docs/api.md). The parts, in the order a request meets them:
//!
//! - `api.rs`: routes, bearer tokens (`tokens.rs`), body limits, errors (`error.rs`);
//! - `service/`: each operation, checked against ownership and quotas and audited;
//! - `confine.rs`: a tenant's pipeline file made safe to run (its plugins, paths, addresses);
//! - `store.rs`: uploaded plugins, content-addressed; `registry.rs`: the durable registry;
//! - `supervisor.rs`: the running pipelines, on the engine `weir run` uses; `logs.rs`: their
//!   plugins' log lines;
//! - `console.rs`: the web console's static files; `tls.rs`: HTTPS.
//!
//! Every bound is a constant in `limits.rs`. After a restart or a `kill -9`, the registry is the
//! last acknowledged one and every pipeline that was running resumes from its checkpoint.

mod api;
mod confine;
mod console;
mod error;
mod limits;
mod logs;
mod registry;
mod service;
mod store;
mod supervisor;
mod tls;
mod tokens;

// The layers below, under the names this crate's modules use.
use weir_config as pipeline;
use weir_engine::{driver, progress};
use weir_sandbox as plugin;
use weir_types::own_files;

use std::path::PathBuf;

use crate::plugin::Runtime;

/// Worker threads for HTTP: requests are short, and the work they start runs on blocking
/// threads and pipeline threads of its own.
const WORKERS: usize = 2;

/// How long a stop waits for open requests to finish before it stops the pipelines anyway: a
/// client following a pipeline's events (`weir status --watch`) never finishes on its own.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Setup(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
}

pub use logs::layer as plugin_log_layer;

/// What `weir serve` is given.
pub struct Options {
    pub data: PathBuf,
    pub listen: String,
    pub admin_token_file: PathBuf,
    pub allow_network: Vec<String>,
    /// HTTPS with this certificate chain and private key (PEM files); plain HTTP without.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// Runs the service until SIGTERM or Ctrl-C, then stops every pipeline after its current batch
/// (open requests get [`SHUTDOWN_GRACE`] to finish first).
pub fn serve(opts: Options) -> Result<(), ServeError> {
    let setup = |e: String| ServeError::Setup(e);
    let admin = tokens::read_admin(&opts.admin_token_file).map_err(setup)?;
    let tls = opts.tls.as_ref().map(|(cert, key)| tls::acceptor(cert, key)).transpose().map_err(setup)?;
    std::fs::create_dir_all(&opts.data).map_err(|e| setup(format!("cannot create {}: {e}", opts.data.display())))?;
    let runtime = Runtime::new(Some(opts.data.join("cache")), false).map_err(|e| setup(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_name("weir-serve")
        .enable_all()
        .build()
        .map_err(|e| setup(format!("cannot start the HTTP runtime: {e}")))?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(&opts.listen))
        .map_err(|e| ServeError::Listen { addr: opts.listen.clone(), source: e })?;
    let bound = listener.local_addr().map_err(|e| ServeError::Listen { addr: opts.listen.clone(), source: e })?;
    let settings = service::Settings { data: opts.data, admin, allow_network: opts.allow_network };
    let service = service::Service::open(settings, runtime).map_err(|e| setup(e.error))?;
    let app = api::router(service.clone());
    // Scripts wait for this line to know the port (with `--listen 127.0.0.1:0`).
    eprintln!("weir serve: listening on {}://{bound}", if tls.is_some() { "https" } else { "http" });
    let served = rt.block_on(async move {
        let (stopping, stop) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(async move {
            let mut stop = stop;
            match tls {
                Some(acceptor) => {
                    tls::serve(listener, acceptor, app, stop).await;
                    Ok(())
                }
                None => {
                    axum::serve(listener, app).with_graceful_shutdown(async move { drop(stop.changed().await) }).await
                }
            }
        });
        shutdown_signal().await;
        stopping.send_replace(true);
        match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
            Ok(Ok(served)) => served,
            // Requests still open past the grace, or the server task ended abnormally: the
            // pipelines are stopped regardless.
            _ => Ok(()),
        }
    });
    service.shutdown();
    rt.shutdown_timeout(SHUTDOWN_GRACE);
    served.map_err(|e| ServeError::Listen { addr: bound.to_string(), source: e })
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
