//! The Confluent-compatible schema registry the tests start (Apicurio Registry): its Quarkus
//! distribution, unpacked with Maven once into `~/.cache/weir-tools/apicurio-VERSION`.
//! `xtask/schema-registry/pom.xml` pins the version; this file reads it from there, so it is
//! written once.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::{run, tools_dir};

/// The registry's artifact in the pom; its `<version>` is the one pinned.
const REGISTRY_ARTIFACT: &str = "<artifactId>apicurio-registry-app</artifactId>";

/// The pinned registry version, from the pom.
fn pinned(pom: &Path) -> Result<String> {
    let text = std::fs::read_to_string(pom).with_context(|| format!("cannot read {}", pom.display()))?;
    let after =
        text.split_once(REGISTRY_ARTIFACT).map(|(_, rest)| rest).context("the pom names no apicurio-registry-app")?;
    let version = after.split_once("<version>").and_then(|(_, v)| v.split_once("</version>")).map(|(v, _)| v.trim());
    version.map(str::to_string).context("apicurio-registry-app has no <version> in the pom")
}

/// The registry's distribution (the directory holding `quarkus-run.jar`), fetched if it is not
/// there yet.
pub fn registry(root: &Path) -> Result<PathBuf> {
    let pom = root.join("xtask").join("schema-registry").join("pom.xml");
    let version = pinned(&pom)?;
    let home = tools_dir()?.join(format!("apicurio-{version}"));
    if !home.join("quarkus-run.jar").exists() {
        eprintln!("fetching Apicurio Registry {version} with Maven into {} (once)", home.display());
        // Into a directory of its own, renamed when complete: a fetch cut short is fetched again.
        let partial = home.with_file_name(format!("apicurio-{version}.partial"));
        let _ = std::fs::remove_dir_all(&partial);
        // Plugin 3.8.1, not Maven's default (2.8, which leaves a stray `PaxHeaders.X` directory).
        run(Command::new("mvn")
            .args(["-q", "-B", "-f"])
            .arg(&pom)
            .arg("org.apache.maven.plugins:maven-dependency-plugin:3.8.1:unpack-dependencies")
            .arg(format!("-DoutputDirectory={}", partial.display())))?;
        let _ = std::fs::remove_dir_all(&home);
        std::fs::rename(&partial, &home)
            .with_context(|| format!("cannot move the registry into {}", home.display()))?;
    }
    Ok(home)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pom pins a 3.x registry (the tests' harness starts its Quarkus fast-jar layout, which
    /// 2.x does not have), and the research notes name the same one.
    #[test]
    fn the_pinned_version_is_read_from_the_pom() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let version = pinned(&root.join("schema-registry").join("pom.xml")).unwrap();
        assert!(version.starts_with("3."), "{version}");
        let notes = root.join("..").join("docs").join("internals").join("schema-registry-research.md");
        let notes = std::fs::read_to_string(notes).unwrap();
        assert!(
            notes.contains(&format!("**Apicurio Registry {version}**")),
            "the research notes name another registry"
        );
    }
}
