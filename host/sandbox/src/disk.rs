//! `limits.max_disk_mb`: the bytes a plugin may have in each directory it may write.
//!
//! wasmtime-wasi has no hook for this, so the functions through which a plugin writes files are
//! shadowed in the linker (as `waits.rs` does for waits) by ones that charge the write to the
//! directory's [`Bucket`] first: `write` and `set-size` (bytes past the file's current end), and
//! the output streams `write-via-stream` and `append-via-stream` hand out (each write past the
//! end the stream knows). `unlink-file-at` gives a file's bytes back when it removes the last link. A bucket starts at what the
//! directory held when the stage started and is shared by the stage's instances. Which bucket a
//! descriptor writes to is found from the file's own path (`/proc/self/fd`), so no descriptor has
//! to be followed from its preopen.
//!
//! A write past the limit traps the call with [`LimitExceeded::Disk`]: the plugin cannot ignore
//! it, and the failure says which limit it hit.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{ErrorCode, Host as _, HostDescriptor};
use wasmtime_wasi_io::bytes::Bytes;
use wasmtime_wasi_io::streams::{DynOutputStream, OutputStream, StreamError, StreamResult};

use super::host::HostState;
use super::limiter::LimitExceeded;

/// The version `wasmtime_wasi` registers `wasi:filesystem` under (see `waits.rs`).
const WASI_FILESYSTEM: &str = "0.2.12";

/// What one writable directory holds, against its limit.
#[derive(Debug)]
pub struct Bucket {
    /// Canonical host path.
    dir: PathBuf,
    used: AtomicU64,
    max: u64,
}

impl Bucket {
    /// A bucket for `dir`, starting at what it holds now.
    pub fn new(dir: &Path, max: u64) -> Self {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let used = AtomicU64::new(du(&dir));
        Self { dir, used, max }
    }

    /// Takes `bytes`, or refuses (and takes nothing) past the limit.
    fn charge(&self, bytes: u64) -> Result<(), LimitExceeded> {
        let refuse = || LimitExceeded::Disk { dir: self.dir.display().to_string(), max: self.max };
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.max)
            })
            .map(drop)
            .map_err(|_| refuse())
    }

    fn release(&self, bytes: u64) {
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| Some(used.saturating_sub(bytes)));
    }
}

/// Bytes of the files under `dir` (links not followed).
pub fn du(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => du(&e.path()),
            Ok(m) if m.is_file() => m.len(),
            _ => 0,
        })
        .sum()
}

/// The host path of an open file or directory.
fn path_of(fd: &impl AsRawFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

/// The bucket a descriptor writes into, if any, with the file's current length.
fn target(state: &mut HostState, fd: &Resource<Descriptor>) -> Option<(Arc<Bucket>, u64)> {
    let Ok(Descriptor::File(f)) = state.table.get(fd) else { return None };
    let path = path_of(&*f.file)?;
    let len = f.file.metadata().map_or(0, |m| m.len());
    let bucket = state.disk.iter().find(|b| path.starts_with(&b.dir))?.clone();
    Some((bucket, len))
}

/// Traps the call when a write would pass the limit.
fn charge(b: &Bucket, bytes: u64) -> wasmtime::Result<()> {
    b.charge(bytes).map_err(wasmtime::Error::new)
}

/// An output stream that charges what it writes past the file's end to a bucket.
struct Quota {
    inner: DynOutputStream,
    bucket: Arc<Bucket>,
    /// Where the next write lands, and the file's end as this stream knows it.
    pos: u64,
    end: u64,
}

#[wasmtime_wasi_io::async_trait]
impl OutputStream for Quota {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let after = self.pos.saturating_add(bytes.len() as u64);
        self.bucket.charge(after.saturating_sub(self.end)).map_err(|e| StreamError::Trap(wasmtime::Error::new(e)))?;
        self.inner.write(bytes)?;
        (self.pos, self.end) = (after, self.end.max(after));
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }
}

#[wasmtime_wasi_io::async_trait]
impl wasmtime_wasi_io::poll::Pollable for Quota {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

/// Replaces the writing functions `wasmtime_wasi` added to `linker` with ones that charge first.
pub fn bound_writes(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut fs = linker.instance(&format!("wasi:filesystem/types@{WASI_FILESYSTEM}"))?;
    type Cx<'a> = StoreContextMut<'a, HostState>;
    fs.func_wrap(
        "[method]descriptor.write",
        |mut cx: Cx<'_>, (fd, buf, offset): (Resource<Descriptor>, Vec<u8>, u64)| {
            if let Some((b, len)) = target(cx.data_mut(), &fd) {
                charge(&b, offset.saturating_add(buf.len() as u64).saturating_sub(len))?;
            }
            let mut v = cx.data_mut().filesystem();
            Ok((match HostDescriptor::write(&mut v, fd, buf, offset) {
                Ok(n) => Ok(n),
                Err(e) => Err(v.convert_error_code(e)?),
            },))
        },
    )?;
    fs.func_wrap("[method]descriptor.set-size", |mut cx: Cx<'_>, (fd, size): (Resource<Descriptor>, u64)| {
        if let Some((b, len)) = target(cx.data_mut(), &fd) {
            charge(&b, size.saturating_sub(len))?;
        }
        let mut v = cx.data_mut().filesystem();
        Ok((match HostDescriptor::set_size(&mut v, fd, size) {
            Ok(()) => Ok(()),
            Err(e) => Err::<(), ErrorCode>(v.convert_error_code(e)?),
        },))
    })?;
    fs.func_wrap(
        "[method]descriptor.write-via-stream",
        |mut cx: Cx<'_>, (fd, offset): (Resource<Descriptor>, u64)| {
            let target = target(cx.data_mut(), &fd);
            let mut v = cx.data_mut().filesystem();
            let stream = match HostDescriptor::write_via_stream(&mut v, fd, offset) {
                Ok(s) => s,
                Err(e) => return Ok((Err(v.convert_error_code(e)?),)),
            };
            Ok((Ok(wrap(cx.data_mut(), stream, target, |_| offset)?),))
        },
    )?;
    fs.func_wrap("[method]descriptor.append-via-stream", |mut cx: Cx<'_>, (fd,): (Resource<Descriptor>,)| {
        let target = target(cx.data_mut(), &fd);
        let mut v = cx.data_mut().filesystem();
        let stream = match HostDescriptor::append_via_stream(&mut v, fd) {
            Ok(s) => s,
            Err(e) => return Ok((Err(v.convert_error_code(e)?),)),
        };
        Ok((Ok(wrap(cx.data_mut(), stream, target, |len| len)?),))
    })?;
    fs.func_wrap("[method]descriptor.unlink-file-at", |mut cx: Cx<'_>, (fd, path): (Resource<Descriptor>, String)| {
        // The file's bytes come back once it is gone; a link's or a missing file's are none, and
        // so are those of a file another hard link still holds (`link-at`, then unlink: the
        // data stays on disk, so it stays charged).
        let freed = match cx.data().table.get(&fd) {
            Ok(Descriptor::Dir(d)) => path_of(&*d.dir).and_then(|dir| {
                let file = dir.join(&path);
                let m = std::fs::symlink_metadata(&file).ok().filter(|m| m.is_file() && m.nlink() == 1)?;
                let bucket = cx.data().disk.iter().find(|b| file.starts_with(&b.dir))?.clone();
                Some((bucket, m.len()))
            }),
            _ => None,
        };
        let mut v = cx.data_mut().filesystem();
        Ok((match HostDescriptor::unlink_file_at(&mut v, fd, path) {
            Ok(()) => {
                if let Some((b, n)) = freed {
                    b.release(n);
                }
                Ok(())
            }
            Err(e) => Err::<(), ErrorCode>(v.convert_error_code(e)?),
        },))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Puts a charging stream in place of `stream` when its file is in a bucket. `start` gives the
/// first write's position from the file's length.
fn wrap(
    state: &mut HostState,
    stream: Resource<DynOutputStream>,
    target: Option<(Arc<Bucket>, u64)>,
    start: impl Fn(u64) -> u64,
) -> wasmtime::Result<Resource<DynOutputStream>> {
    let Some((bucket, len)) = target else { return Ok(stream) };
    let inner = state.table.delete(stream)?;
    let quota: DynOutputStream = Box::new(Quota { inner, bucket, pos: start(len), end: len });
    Ok(state.table.push(quota)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_starts_with_what_is_there_and_refuses_past_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a"), [0u8; 100]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let b = Bucket::new(dir.path(), 150);
        assert_eq!(b.used.load(Ordering::Relaxed), 100, "files counted, links not followed");
        b.charge(50).unwrap();
        let e = b.charge(1).unwrap_err().to_string();
        assert!(e.contains("limits.max_disk_mb"), "{e}");
        b.release(30);
        b.charge(30).unwrap();
        assert!(b.charge(1).is_err());
    }
}
