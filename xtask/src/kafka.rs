//! The Apache Kafka broker the tests start: its jars, fetched with Maven once into
//! `~/.cache/weir-tools/kafka-VERSION/libs`. `xtask/kafka/pom.xml` pins the version; this file
//! reads it from there, so it is written once.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::{run, tools_dir};

/// The broker's artifact in the pom; its `<version>` is the one pinned.
const BROKER_ARTIFACT: &str = "<artifactId>kafka_2.13</artifactId>";

/// The pinned broker version, from the pom.
fn pinned(pom: &Path) -> Result<String> {
    let text = std::fs::read_to_string(pom).with_context(|| format!("cannot read {}", pom.display()))?;
    let after = text.split_once(BROKER_ARTIFACT).map(|(_, rest)| rest).context("the pom names no kafka_2.13")?;
    let version = after.split_once("<version>").and_then(|(_, v)| v.split_once("</version>")).map(|(v, _)| v.trim());
    version.map(str::to_string).context("kafka_2.13 has no <version> in the pom")
}

/// The broker's jars, fetched if they are not there yet; their directory.
pub fn kafka(root: &Path) -> Result<PathBuf> {
    let pom = root.join("xtask").join("kafka").join("pom.xml");
    let version = pinned(&pom)?;
    let home = tools_dir()?.join(format!("kafka-{version}"));
    let libs = home.join("libs");
    if !libs.join(format!("kafka_2.13-{version}.jar")).exists() {
        eprintln!("fetching the Apache Kafka {version} broker with Maven into {} (once)", libs.display());
        // Into a directory of its own, renamed when complete: a fetch cut short is fetched again.
        let partial = home.join("libs.partial");
        let _ = std::fs::remove_dir_all(&partial);
        run(Command::new("mvn")
            .args(["-q", "-B", "-f"])
            .arg(&pom)
            .args(["dependency:copy-dependencies", "-DincludeScope=runtime"])
            .arg(format!("-DoutputDirectory={}", partial.display())))?;
        let _ = std::fs::remove_dir_all(&libs);
        std::fs::rename(&partial, &libs).with_context(|| format!("cannot move the jars into {}", libs.display()))?;
    }
    Ok(libs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The docs name the broker the tests run on: the one the pom pins.
    #[test]
    fn the_pinned_version_is_read_from_the_pom_and_is_the_one_the_docs_name() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let version = pinned(&root.join("kafka").join("pom.xml")).unwrap();
        assert!(version.starts_with("4."), "{version}");
        let docs = std::fs::read_to_string(root.join("..").join("docs").join("kafka.md")).unwrap();
        assert!(docs.contains(&format!("**Apache Kafka {version}**")), "docs/kafka.md names another broker");
    }
}
