//! `weir record`: captures a topic's records (key, value, timestamp, partition, offset,
//! headers) as recorded-event envelopes (docs/recorded-events.md), so that `weir test --events`
//! replays production traffic against a plugin with the same engine.
//!
//! It reads with Weir's own Kafka source, so what is recorded is exactly what a pipeline's
//! parser would have been given.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use base64::Engine as _;
use serde::Serialize;

use super::exit::Usage;
use crate::kafka::KafkaError;
use crate::pipeline::{KafkaSourceConfig, StartingOffsets};
use crate::source::kafka::KafkaSource;
use crate::source::{Limit, SourceBatch};

pub(super) struct RecordArgs {
    pub brokers: String,
    pub topic: String,
    pub starting: StartingOffsets,
    /// Stop after this many records.
    pub max: Option<u64>,
    /// Keep recording new records until stopped; otherwise stop at the end of what the topic
    /// held when recording started.
    pub follow: bool,
    pub options: Vec<(String, String)>,
}

#[derive(Serialize)]
struct Envelope<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_base64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    partition: i32,
    offset: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<i64>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    headers: serde_json::Map<String, serde_json::Value>,
}

/// librdkafka options from `--kafka NAME=VALUE` flags and a `--kafka-file`. A credential on the
/// command line is refused: any user of the machine can read a process's arguments.
pub(super) fn options(flags: &[String], file: Option<&std::path::Path>) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for kv in flags {
        let (k, v) = kv.split_once('=').ok_or_else(|| Usage(format!("--kafka {kv}: write NAME=VALUE")))?;
        if secret(k) {
            return Err(Usage(format!(
                "--kafka {k}=...: a credential on the command line is visible to every user of the machine; put it \
                 in a file given with --kafka-file"
            ))
            .into());
        }
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| Usage(format!("--kafka-file {}: {e}", path.display())))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) =
                line.split_once('=').ok_or_else(|| Usage(format!("{}:{}: write NAME=VALUE", path.display(), i + 1)))?;
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    Ok(out)
}

/// Whether a librdkafka option carries a credential.
fn secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "secret", "jaas", "token", "key.pem", "certificate.pem"].iter().any(|s| name.contains(s))
}

/// Records into `out`; returns how many records were written, and the schema ids their values
/// and keys are framed with (the Confluent wire format's).
pub(super) fn record(args: &RecordArgs, out: &mut dyn Write, stop: Arc<AtomicBool>) -> Result<(u64, BTreeSet<u32>)> {
    let mut options = vec![("bootstrap.servers".to_string(), args.brokers.clone())];
    options.extend(args.options.iter().cloned());
    let cfg = KafkaSourceConfig {
        topics: vec![args.topic.clone()],
        partitions: None,
        starting: args.starting.clone(),
        options,
        group_id: "weir-record".into(),
    };
    let mut source = KafkaSource::open(&cfg, &[], stop.clone()).context("cannot read the topic")?;
    let mut written = 0u64;
    let mut ids = BTreeSet::new();
    let limit = |written: u64| Limit {
        records: args.max.map_or(10_000, |m| (m - written).min(10_000) as usize),
        bounded: !args.follow,
    };
    while args.max.is_none_or(|m| written < m) && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let batch = match source.next_batch(limit(written)) {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(KafkaError::Stopped) => break,
            Err(e) => return Err(e).context("reading the topic"),
        };
        let room = args.max.map_or(usize::MAX, |m| (m - written) as usize);
        written += write_batch(&batch, room, out, &mut ids)?;
    }
    out.flush().context("cannot write the recording")?;
    Ok((written, ids))
}

/// Saves the schemas of `ids`, and every version of `subjects`, from the registry at `url`
/// beside the recording `out`; the file and how many schemas it holds.
pub(super) fn save_schemas(
    url: &str,
    credentials_file: Option<std::path::PathBuf>,
    subjects: &[String],
    ids: BTreeSet<u32>,
    out: &std::path::Path,
) -> Result<(std::path::PathBuf, usize)> {
    let file = weir_schema::RegistryFile {
        url: Some(url.to_string()),
        schemas: None,
        credentials_file,
        ca_file: None,
        cert_file: None,
        key_file: None,
        retry_for: None,
        timeout: None,
    };
    let here = std::env::current_dir()?;
    let config = file.validate(&here).map_err(|b| Usage(format!("--registry: {}", b.message)))?;
    let registry = weir_schema::Registry::shared(&config)?;
    let saved = registry.save(ids, subjects)?;
    let path = weir_schema::saved::Saved::beside(out);
    saved.write(&path).map_err(anyhow::Error::msg)?;
    Ok((path, saved.schemas.len()))
}

/// Writes the batch's first `room` records (a batch is split over partitions, so it may hold a
/// few more than `--max` asked for).
fn write_batch(b: &SourceBatch, room: usize, out: &mut dyn Write, ids: &mut BTreeSet<u32>) -> Result<u64> {
    let r = &b.records;
    let mut headers = r.headers.iter().peekable();
    for (i, pos) in b.positions.iter().enumerate().take(room) {
        let value = crate::columns::item(&r.values, &r.value_ends, i);
        let key = crate::columns::item(&r.keys, &r.key_ends, i);
        ids.extend([value, key].into_iter().filter_map(|b| weir_schema::wire::unframe(b).ok().map(|(id, _)| id)));
        let mut hs = serde_json::Map::new();
        while let Some(h) = headers.next_if(|h| h.index as usize == i) {
            hs.insert(h.name.clone(), String::from_utf8_lossy(&h.value).into_owned().into());
        }
        let text = std::str::from_utf8(value).ok();
        let e = Envelope {
            value: text,
            value_base64: text.is_none().then(|| base64::engine::general_purpose::STANDARD.encode(value)),
            key: (!key.is_empty()).then(|| String::from_utf8_lossy(key).into_owned()),
            partition: pos.partition,
            offset: pos.offset,
            timestamp: (r.timestamps[i] >= 0).then_some(r.timestamps[i]),
            headers: hs,
        };
        serde_json::to_writer(&mut *out, &e)?;
        out.write_all(b"\n")?;
    }
    Ok(b.positions.len().min(room) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_go_in_a_file_never_in_flags() {
        let e = options(&["sasl.password=hunter2".into()], None).unwrap_err().to_string();
        assert!(e.contains("--kafka-file") && !e.contains("hunter2"), "{e}");
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), "# creds\nsasl.password = hunter2\n\nsecurity.protocol=SASL_SSL\n").unwrap();
        let got = options(&["client.id=rec".into()], Some(f.path())).unwrap();
        let want: Vec<(String, String)> =
            [("client.id", "rec"), ("sasl.password", "hunter2"), ("security.protocol", "SASL_SSL")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(got, want);
        assert!(options(&["no-equals".into()], None).is_err());
    }
}
