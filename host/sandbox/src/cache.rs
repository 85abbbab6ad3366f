//! On-disk cache of compiled components.
//!
//! Compiling a component takes tens of milliseconds per 100 KB; loading a compiled one takes
//! tens of microseconds. The key is the component's content hash plus the engine's
//! compatibility hash, because an artifact compiled under one engine configuration (fuel on or
//! off, another wasmtime) must not load into another.
//!
//! Loading an artifact is running native code in the host, so the cache loads only what this
//! user's Weir wrote:
//! - the directory is private: created `0700`, tightened to it if this user owns it, and not used
//!   at all (a warning; components are compiled every time) if another user does;
//! - every artifact carries a keyed digest of its name and bytes (blake3, keyed with 32 random
//!   bytes kept in `key`, `0600`, in the same directory); one that does not verify is never
//!   loaded, but compiled again and replaced;
//! - a plugin may not be granted a directory that reaches the cache (start-up refuses it,
//!   `grants.rs`).
//!
//! The default directory is the user's cache directory (`directories`); without a home there is
//! none, and a private directory made for the process (deleted with it) takes its place.
//!
//! The cache is bounded: every build of a plugin leaves a new artifact (a Python plugin's is
//! tens of megabytes), so one that never let go would fill the disk of a machine that builds
//! often. A load marks its artifact used (its modification time); a write past
//! [`MAX_CACHE_BYTES`] deletes the least recently used.

use std::fs::OpenOptions;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::PluginError;

/// Bytes of the key, and of the digest in front of every artifact.
const DIGEST: usize = 32;

/// The bytes of compiled artifacts a cache directory keeps. A write that takes it past this
/// deletes the least recently used artifacts down to [`PRUNED_TO_PERCENT`] of it, so that a full
/// cache is not pruned at every write. A gibibyte holds every plugin of this repository several
/// builds over; what it lets go of is compiled again when next used.
const MAX_CACHE_BYTES: u64 = 1 << 30;

/// What a prune leaves, in percent of [`MAX_CACHE_BYTES`].
const PRUNED_TO_PERCENT: u64 = 75;

/// A temporary file this old is a writer's that was killed mid-write (a write takes
/// milliseconds): the next prune deletes it.
const STALE_WRITE: Duration = Duration::from_secs(60 * 60);

pub(super) struct ComponentCache {
    /// `None`: no directory could be made for this process; nothing is cached.
    dir: Option<PathBuf>,
    engine_hash: u64,
    /// `None`: the directory is not this user's own; nothing is read from or written to it.
    key: Option<[u8; DIGEST]>,
    /// A directory made for this process when there is no cache directory to use.
    _scratch: Option<tempfile::TempDir>,
}

/// The default cache directory: `$WEIR_CACHE_DIR`, else this user's cache directory
/// (`$XDG_CACHE_HOME/weir/components` or `~/.cache/weir/components` on Linux).
pub(super) fn default_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("WEIR_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    directories::ProjectDirs::from("", "", "weir").map(|d| d.cache_dir().join("components"))
}

impl ComponentCache {
    pub(super) fn new(dir: Option<PathBuf>, engine: &Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let engine_hash = h.finish();
        let (dir, scratch) = match dir {
            Some(d) => (Some(d), None),
            // A directory of this process's own, never a fixed name another user could take.
            None => match tempfile::Builder::new().prefix("weir-components-").tempdir() {
                Ok(t) => (Some(t.path().to_path_buf()), Some(t)),
                Err(e) => {
                    tracing::warn!("no directory for a component cache ({e}); components are compiled every time");
                    (None, None)
                }
            },
        };
        let key = dir.as_deref().and_then(|d| match private(d).and_then(|()| key(d)) {
            Ok(key) => Some(key),
            Err(e) => {
                tracing::warn!("component cache {} not used ({e}); components are compiled every time", d.display());
                None
            }
        });
        Self { dir, engine_hash, key, _scratch: scratch }
    }

    pub(super) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    pub(super) fn load(&self, engine: &Engine, path: &Path) -> Result<Component, PluginError> {
        let bytes = std::fs::read(path).map_err(|e| PluginError::Read { path: path.to_path_buf(), source: e })?;
        let name = format!("{}-{:016x}.cwasm", blake3::hash(&bytes).to_hex(), self.engine_hash);
        let cached = self.dir.as_deref().map(|d| d.join(&name));
        if let (Some(key), Some(cached)) = (&self.key, &cached)
            && let Some(artifact) = read_verified(cached, &name, key)
        {
            // SAFETY: the bytes are what `Component::serialize` of an engine with the same
            // compatibility hash (it is in the name) produced in this user's private directory,
            // as their keyed digest proves; nothing else is ever deserialized.
            if let Ok(c) = unsafe { Component::deserialize(engine, &artifact) } {
                mark_used(cached);
                return Ok(c);
            }
        }
        let component = Component::new(engine, &bytes)
            .map_err(|e| PluginError::Compile { path: path.to_path_buf(), message: format!("{e:#}") })?;
        // The cache is an optimisation: failing to write it is not an error.
        if let (Some(key), Some(dir), Some(cached)) = (&self.key, &self.dir, &cached)
            && let Ok(serialized) = component.serialize()
        {
            match write_signed(dir, cached, &name, key, &serialized) {
                Ok(()) => {
                    if let Err(e) = prune(dir, MAX_CACHE_BYTES, cached) {
                        tracing::debug!("component cache {} not pruned: {e}", dir.display());
                    }
                }
                Err(e) => tracing::debug!("component cache not written ({}): {e}", cached.display()),
            }
        }
        Ok(component)
    }
}

/// Makes `dir` (and its missing parents) `0700`; refuses a directory another user owns.
fn private(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != me {
        return Err(std::io::Error::other("it is not a directory of this user's"));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The cache's key: read from `dir/key`, or made (random, `0600`) by the first process to need it.
fn key(dir: &Path) -> std::io::Result<[u8; DIGEST]> {
    let path = dir.join("key");
    let fresh = crate::own_files::open(&path, OpenOptions::new().write(true).create_new(true).mode(0o600));
    match fresh {
        Ok(mut f) => {
            let mut key = [0u8; DIGEST];
            getrandom::fill(&mut key).map_err(std::io::Error::other)?;
            f.write_all(&key)?;
            f.sync_all()?;
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut f = crate::own_files::open(&path, OpenOptions::new().read(true))?;
            let mut key = [0u8; DIGEST];
            f.read_exact(&mut key)?;
            Ok(key)
        }
        Err(e) => Err(e),
    }
}

fn digest(key: &[u8; DIGEST], name: &str, artifact: &[u8]) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(name.as_bytes()).update(&[0]).update(artifact);
    h.finalize()
}

/// The artifact in `path` if its digest proves this cache wrote it under `name`.
fn read_verified(path: &Path, name: &str, key: &[u8; DIGEST]) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    crate::own_files::open(path, OpenOptions::new().read(true)).ok()?.read_to_end(&mut bytes).ok()?;
    let tag: [u8; DIGEST] = bytes.get(..DIGEST)?.try_into().ok()?;
    // `Hash`'s equality is constant-time.
    if digest(key, name, &bytes[DIGEST..]) != blake3::Hash::from_bytes(tag) {
        tracing::warn!("{}: its digest does not match; compiling the component again", path.display());
        return None;
    }
    bytes.drain(..DIGEST);
    Some(bytes)
}

/// Writes `artifact` with its digest to `path`, through a temporary file and a rename.
fn write_signed(dir: &Path, path: &Path, name: &str, key: &[u8; DIGEST], artifact: &[u8]) -> std::io::Result<()> {
    // Per component and process: pipelines may compile components concurrently.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = crate::own_files::open(&tmp, OpenOptions::new().write(true).create(true).truncate(true).mode(0o600))?;
    f.write_all(digest(key, name, artifact).as_bytes())?;
    f.write_all(artifact)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// Marks the artifact at `path` used now, for [`prune`] to keep it over those used longer ago.
/// Best effort: at worst an artifact in use is compiled again after a prune.
fn mark_used(path: &Path) {
    if let Ok(f) = crate::own_files::open(path, OpenOptions::new().read(true)) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// When `dir`'s artifacts take more than `max` bytes, deletes the least recently used (never
/// `keep`, the one just written) until they take [`PRUNED_TO_PERCENT`] of it; and deletes
/// temporary files older than [`STALE_WRITE`]. Returns how many files went.
///
/// Another process may prune at the same time (a file already gone counts as gone), or be
/// loading an artifact deleted here: it has read the bytes, or compiles the component again.
fn prune(dir: &Path, max: u64, keep: &Path) -> std::io::Result<usize> {
    let now = SystemTime::now();
    let mut artifacts = Vec::new();
    let mut total = 0;
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        // The entry's own metadata: a link is not followed, and is neither kind of file here.
        let Ok(meta) = entry.metadata() else { continue };
        let path = entry.path();
        let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let extension = path.extension().and_then(|e| e.to_str());
        if !meta.is_file() {
            continue;
        } else if extension == Some("cwasm") {
            total += meta.len();
            artifacts.push((used, meta.len(), path));
        } else if extension == Some("tmp") && now.duration_since(used).is_ok_and(|age| age > STALE_WRITE) {
            removed += usize::from(std::fs::remove_file(&path).is_ok());
        }
    }
    let target = max.saturating_mul(PRUNED_TO_PERCENT) / 100;
    if total > max {
        artifacts.sort();
        for (_, len, path) in artifacts {
            if total <= target {
                break;
            }
            if path != keep {
                removed += usize::from(std::fs::remove_file(&path).is_ok());
                total -= len;
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_artifacts_signed_with_the_cache_s_key_under_their_name_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("c");
        private(&cache).unwrap();
        assert_eq!(std::fs::metadata(&cache).unwrap().mode() & 0o777, 0o700);
        let k = key(&cache).unwrap();
        assert_eq!(key(&cache).unwrap(), k, "the key is made once");
        let a = cache.join("a.cwasm");
        write_signed(&cache, &a, "a.cwasm", &k, b"native code").unwrap();
        assert_eq!(read_verified(&a, "a.cwasm", &k).as_deref(), Some(&b"native code"[..]));
        assert_eq!(read_verified(&a, "b.cwasm", &k), None, "moved under another name");
        let mut bytes = std::fs::read(&a).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        std::fs::write(&a, bytes).unwrap();
        assert_eq!(read_verified(&a, "a.cwasm", &k), None, "changed");
        assert_eq!(read_verified(&a, "a.cwasm", &[0; DIGEST]), None);
    }

    #[test]
    fn a_permissive_directory_of_ours_is_tightened() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        private(dir.path()).unwrap();
        assert_eq!(std::fs::metadata(dir.path()).unwrap().mode() & 0o777, 0o700);
    }

    /// Sets `path`'s modification time to `secs_ago` seconds ago.
    fn age(path: &Path, secs_ago: u64) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago)).unwrap();
    }

    #[test]
    fn a_full_cache_lets_go_of_the_least_recently_used_artifacts_and_of_killed_writes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let file = |name: &str, len: usize, secs_ago: u64| {
            let path = d.join(name);
            std::fs::write(&path, vec![0u8; len]).unwrap();
            age(&path, secs_ago);
            path
        };
        let oldest = file("a.cwasm", 100, 300);
        let older = file("b.cwasm", 100, 200);
        let newest = file("c.cwasm", 100, 100);
        let key = file("key", 32, 400);
        let killed = file(".d.cwasm.7.tmp", 100, 2 * 60 * 60);
        let writing = file(".e.cwasm.8.tmp", 100, 0);

        assert_eq!(prune(d, 300, &newest).unwrap(), 1, "within the limit: only the killed write goes");
        assert!(!killed.exists() && writing.exists());
        assert!(oldest.exists() && older.exists() && newest.exists());

        // 300 bytes against 250: down to 75% of it, the least recently used first.
        assert_eq!(prune(d, 250, &newest).unwrap(), 2);
        assert!(!oldest.exists() && !older.exists());
        assert!(newest.exists() && key.exists() && writing.exists());

        // The artifact just written stays, even alone past the limit.
        assert_eq!(prune(d, 50, &newest).unwrap(), 0);
        assert!(newest.exists());
    }

    #[test]
    fn a_load_marks_its_artifact_used() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (used, unused) = (d.join("a.cwasm"), d.join("b.cwasm"));
        for path in [&used, &unused] {
            std::fs::write(path, [0u8; 100]).unwrap();
        }
        age(&used, 200);
        age(&unused, 100);
        mark_used(&used);
        assert_eq!(prune(d, 150, &d.join("c.cwasm")).unwrap(), 1);
        assert!(used.exists() && !unused.exists(), "the artifact loaded last is kept");
    }
}
