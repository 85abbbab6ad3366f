//! On-disk cache of compiled components.
//!
//! Compiling a component takes tens of milliseconds per 100 KB; loading a compiled one takes
//! tens of microseconds. The key is the component's content hash plus the engine's
//! compatibility hash, because an artifact compiled under one engine configuration (fuel on or
//! off, another wasmtime) must not load into another.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::PluginError;

pub(super) struct ComponentCache {
    dir: PathBuf,
    engine_hash: u64,
}

impl ComponentCache {
    pub(super) fn new(dir: PathBuf, engine: &Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        Self { dir, engine_hash: h.finish() }
    }

    pub(super) fn load(&self, engine: &Engine, path: &Path) -> Result<Component, PluginError> {
        let bytes = std::fs::read(path).map_err(|e| PluginError::Read { path: path.to_path_buf(), source: e })?;
        let key = format!("{}-{:016x}.cwasm", blake3::hash(&bytes).to_hex(), self.engine_hash);
        let cached = self.dir.join(&key);
        if cached.exists() {
            // SAFETY: the file was written by `Component::serialize` of an engine with the same
            // compatibility hash (it is in the name), into a directory this process owns.
            if let Ok(c) = unsafe { Component::deserialize_file(engine, &cached) } {
                return Ok(c);
            }
            // A torn or foreign file: fall through and replace it.
        }
        let component = Component::new(engine, &bytes)
            .map_err(|e| PluginError::Compile { path: path.to_path_buf(), message: format!("{e:#}") })?;
        // The cache is an optimisation: failing to write it is not an error.
        if let Ok(serialized) = component.serialize() {
            // Per component and process: pipelines may compile components concurrently.
            let tmp = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
            let written = std::fs::create_dir_all(&self.dir)
                .and_then(|()| std::fs::write(&tmp, serialized))
                .and_then(|()| std::fs::rename(&tmp, &cached));
            if let Err(e) = written {
                tracing::debug!("component cache not written ({}): {e}", cached.display());
            }
        }
        Ok(component)
    }
}
