//! The plugin store: uploaded components, content-addressed by the SHA-256 of their bytes
//! (`plugins/HEX.wasm` in the data directory). A component is written whole under a temporary
//! name, synced and renamed, so a digest names complete bytes or nothing; it is compiled and its
//! roles read before any registry entry points at it. One copy serves every tenant that uploads
//! the same bytes, but a tenant reaches a digest only through a plugin entry of its own.

use std::path::{Path, PathBuf};

use sha2::Digest;

use crate::plugin::Runtime;

/// Where the components live, under the data directory.
const DIR: &str = "plugins";

/// `sha256:HEX`, as digests are written in pipeline files and the API.
pub const DIGEST_PREFIX: &str = "sha256:";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot store the plugin in {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// Not a component wasmtime can compile, or one built against another contract.
    #[error("{0}")]
    Refused(String),
    #[error("the component exports no Weir plugin role (parser, transformer, aggregator, processor or sink)")]
    NoRole,
}

/// A stored component.
pub struct Stored {
    pub digest: String,
    pub roles: Vec<String>,
}

pub fn path(data: &Path, digest: &str) -> Option<PathBuf> {
    let hex = digest.strip_prefix(DIGEST_PREFIX)?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
        .then(|| data.join(DIR).join(format!("{hex}.wasm")))
}

/// Stores `bytes`, compiles them and reads their roles. A component that does not compile or
/// plays no role is removed again (unless the same bytes were there already, for a plugin that
/// must keep working).
pub fn put(data: &Path, runtime: &Runtime, bytes: &[u8]) -> Result<Stored, StoreError> {
    let digest = format!("{DIGEST_PREFIX}{:x}", sha2::Sha256::digest(bytes));
    let Some(path) = path(data, &digest) else { unreachable!("a SHA-256 is 64 lowercase hex digits") };
    let dir = data.join(DIR);
    std::fs::create_dir_all(&dir).map_err(|e| StoreError::Io { path: dir.clone(), source: e })?;
    let existed = path.exists();
    if !existed {
        crate::own_files::replace(&path, bytes, true).map_err(|e| StoreError::Io { path: path.clone(), source: e })?;
    }
    let refuse = |e: StoreError| {
        if !existed {
            let _ = std::fs::remove_file(&path);
        }
        e
    };
    let roles = runtime.roles(&path).map_err(|e| refuse(StoreError::Refused(e.to_string())))?;
    if roles.is_empty() {
        return Err(refuse(StoreError::NoRole));
    }
    Ok(Stored { digest, roles: roles.into_iter().map(String::from).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_digests_name_a_path() {
        let hex = "a".repeat(64);
        assert!(path(Path::new("/d"), &format!("sha256:{hex}")).is_some());
        for bad in [hex.clone(), format!("sha256:{}", "A".repeat(64)), format!("sha256:{hex}0"), "sha256:../x".into()] {
            assert!(path(Path::new("/d"), &bad).is_none(), "{bad}");
        }
    }
}
