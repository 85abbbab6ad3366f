//! `weir run --metrics-addr HOST:PORT`: the process's plugin metrics over HTTP, in Prometheus'
//! text format at `/metrics`. A thread of its own with a blocking listener: a scrape reads
//! atomics and never waits on a pipeline.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use anyhow::{Context, Result};
use weir::plugin::Runtime;

/// Starts serving; returns the address actually bound (port 0 picks one).
pub fn serve(addr: &str, runtime: Arc<Runtime>) -> Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(addr).with_context(|| format!("--metrics-addr {addr}: cannot listen"))?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("weir-metrics".into()).spawn(move || {
        for conn in listener.incoming().flatten() {
            if let Err(e) = answer(conn, &runtime) {
                tracing::debug!("metrics request: {e}");
            }
        }
    })?;
    Ok(bound)
}

fn answer(conn: TcpStream, runtime: &Runtime) -> std::io::Result<()> {
    conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // Skip the headers: nothing in them changes the answer.
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let path = request.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = if path == "/metrics" || path.starts_with("/metrics?") {
        ("200 OK", runtime.metrics().prometheus())
    } else {
        ("404 Not Found", "see /metrics\n".to_string())
    };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
