//! The host's own files (checkpoint files, the lock, the side outputs) are opened without
//! following a symbolic link at their last component. A plugin that may write a directory where
//! one of them lies could otherwise plant `dead-letters.jsonl -> ../victim.txt` and have the
//! host truncate and write a file outside every grant. (Start-up also refuses a grant that covers
//! the host's files: `host/sandbox/src/grants.rs`; this is the second lock on the door.)

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` with `options`, refusing a symbolic link with an error that says so.
pub fn open(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    options.custom_flags(libc::O_NOFOLLOW).open(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            io::Error::other(format!(
                "{} is a symbolic link; Weir does not follow links for its own files (did a plugin plant it?)",
                path.display()
            ))
        } else {
            e
        }
    })
}

/// Replaces `path` with `bytes`, all or nothing: written to a temporary name beside it and
/// renamed over it, so a reader (or a restart after `kill -9`) sees the old file or the new one,
/// never a torn one. `durable`: the file and its directory are synced first, so the new file
/// also survives a machine crash.
pub fn replace(path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = open(&tmp, OpenOptions::new().create(true).write(true).truncate(true))?;
    f.write_all(bytes)?;
    if durable {
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|_| durable) {
        File::open(if dir.as_os_str().is_empty() { Path::new(".") } else { dir })?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_in_place_of_an_own_file_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("dead-letters.jsonl");
        std::os::unix::fs::symlink("victim.txt", &link).unwrap();
        let e = open(&link, OpenOptions::new().create(true).write(true).truncate(true)).unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let plain = dir.path().join("plain");
        open(&plain, OpenOptions::new().create(true).write(true)).unwrap();
        assert!(plain.exists());
    }
}
