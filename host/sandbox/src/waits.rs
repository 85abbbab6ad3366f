//! Waits inside host calls end at the plugin call's deadline.
//!
//! Epoch interruption stops a plugin only while it runs Wasm code. A plugin that waits inside
//! the host instead (`std::thread::sleep`, which needs no grant; a read from a granted socket
//! or HTTP response that never comes) would hold its pipeline for as long as it likes. Every
//! such wait in WASI 0.2 goes through `wasi:io/poll` or a `blocking-*` stream method, so these
//! are shadowed in the linker by the same functions run under a timeout: when the call's
//! deadline passes, the wait ends in a trap that is reported as the deadline it is.

use std::future::Future;
use std::time::{Duration, Instant};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi_io::bindings::wasi::io::{poll, streams};
use wasmtime_wasi_io::poll::DynPollable;
use wasmtime_wasi_io::streams::{DynInputStream, DynOutputStream, StreamResult};

use super::host::HostState;
use super::limiter::LimitExceeded;

/// The version `wasmtime_wasi` registers `wasi:io` under; plugins built against any older
/// 0.2.x resolve to it.
const WASI_IO: &str = "0.2.12";

/// Replaces the waiting functions `wasmtime_wasi` added to `linker` with deadline-bound ones.
pub fn bound_waits(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut p = linker.instance(&format!("wasi:io/poll@{WASI_IO}"))?;
    p.func_wrap("poll", |mut cx: StoreContextMut<'_, HostState>, (list,): (Vec<Resource<DynPollable>>,)| {
        let (deadline, timeout, table) = cx.data_mut().waiting();
        Ok((until(deadline, timeout, poll::Host::poll(table, list))??,))
    })?;
    p.func_wrap(
        "[method]pollable.block",
        |mut cx: StoreContextMut<'_, HostState>, (it,): (Resource<DynPollable>,)| {
            let (deadline, timeout, table) = cx.data_mut().waiting();
            until(deadline, timeout, poll::HostPollable::block(table, it))?
        },
    )?;

    let mut s = linker.instance(&format!("wasi:io/streams@{WASI_IO}"))?;
    // Each stream method: the same arguments, the same call, under the deadline.
    macro_rules! bounded {
        ($name:literal, $method:path, $($arg:ident: $ty:ty),+) => {
            s.func_wrap($name, |mut cx: StoreContextMut<'_, HostState>, ($($arg,)+): ($($ty,)+)| {
                let (deadline, timeout, table) = cx.data_mut().waiting();
                let r = until(deadline, timeout, $method(table, $($arg),+))?;
                Ok((stream_result(table, r)?,))
            })?;
        };
    }
    use streams::{HostInputStream as In, HostOutputStream as Out};
    bounded!("[method]input-stream.blocking-read", In::blocking_read, it: Resource<DynInputStream>, len: u64);
    bounded!("[method]input-stream.blocking-skip", In::blocking_skip, it: Resource<DynInputStream>, len: u64);
    bounded!(
        "[method]output-stream.blocking-write-and-flush",
        Out::blocking_write_and_flush,
        it: Resource<DynOutputStream>,
        bytes: Vec<u8>
    );
    bounded!(
        "[method]output-stream.blocking-write-zeroes-and-flush",
        Out::blocking_write_zeroes_and_flush,
        it: Resource<DynOutputStream>,
        len: u64
    );
    bounded!("[method]output-stream.blocking-flush", Out::blocking_flush, it: Resource<DynOutputStream>);
    bounded!(
        "[method]output-stream.blocking-splice",
        Out::blocking_splice,
        it: Resource<DynOutputStream>,
        from: Resource<DynInputStream>,
        len: u64
    );
    linker.allow_shadowing(false);
    Ok(())
}

/// Runs `wait` as `wasmtime_wasi` would (on its Tokio runtime), ending it at `deadline` with a
/// trap that carries the limit (`timeout`, the call's `limits.call_timeout`).
fn until<T>(deadline: Instant, timeout: Duration, wait: impl Future<Output = T>) -> wasmtime::Result<T> {
    let left = deadline.saturating_duration_since(Instant::now());
    wasmtime_wasi::runtime::in_tokio(async { tokio::time::timeout(left, wait).await })
        .map_err(|_| wasmtime::Error::new(LimitExceeded::DeadlineWaiting(timeout)))
}

/// A stream operation's result in the shape the guest receives: its error as a WIT
/// `stream-error`, or a trap.
fn stream_result<T>(
    table: &mut ResourceTable,
    r: StreamResult<T>,
) -> wasmtime::Result<Result<T, streams::StreamError>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(streams::Host::convert_stream_error(table, e)?)),
    }
}
