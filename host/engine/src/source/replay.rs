//! The replay source reads recorded events (docs/recorded-events.md): one record per line,
//! either the raw value or an envelope object `{"value", "key", "partition", "offset",
//! "timestamp", "headers"}`. Its position is a byte offset into the file, so resuming is a seek.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{BadRecord, Limit, MAX_BATCH_BYTES, MAX_RECORD_BYTES, Offsets, Position, Source, SourceBatch, SourceError};
use crate::pipeline::ReplayFormat;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read {}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

pub struct ReplaySource {
    path: PathBuf,
    reader: BufReader<File>,
    format: ReplayFormat,
    /// Byte offset of the next unread line.
    pos: u64,
    /// Lines consumed so far (for 1-based line numbers).
    line: u64,
    buf: Vec<u8>,
    /// A batch the pipeline gave back, to read the next one into ([`Source::recycle`]).
    spare: Option<SourceBatch>,
}

/// Where a replay stands: saved in every checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct ReplayPosition {
    pub byte: u64,
    pub line: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    value: Option<serde_json::Value>,
    /// A value that is not UTF-8 (written by `weir record`).
    value_base64: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    partition: Option<i32>,
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    timestamp: Option<i64>,
    #[serde(default)]
    headers: Option<serde_json::Map<String, serde_json::Value>>,
}

const ENVELOPE_KEYS: [&str; 7] = ["value", "value_base64", "key", "partition", "offset", "timestamp", "headers"];

impl ReplaySource {
    pub fn open(path: &Path, format: ReplayFormat, at: ReplayPosition) -> Result<Self, ReplayError> {
        let io = |e| ReplayError::Io { path: path.to_path_buf(), source: e };
        let mut file = File::open(path).map_err(io)?;
        let format = match format {
            ReplayFormat::Auto => detect(&mut BufReader::new(&mut file)).map_err(io)?,
            f => f,
        };
        file.seek(SeekFrom::Start(at.byte)).map_err(io)?;
        Ok(Self {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 20, file),
            format,
            pos: at.byte,
            line: at.line,
            buf: Vec::with_capacity(256),
            spare: None,
        })
    }

    pub fn position(&self) -> ReplayPosition {
        ReplayPosition { byte: self.pos, line: self.line }
    }

    /// Reads up to `max` records; an empty batch means the end of the file. A last line without
    /// its newline is read only when `to_the_end` (a bounded run, which must not lose it);
    /// otherwise it may still be being written, and waits for its newline.
    pub fn read_lines(&mut self, max: usize, to_the_end: bool) -> Result<SourceBatch, ReplayError> {
        self.read(max, u64::MAX, to_the_end, MAX_BATCH_BYTES)
    }

    /// Reads up to `max` records, up to byte `end`, stopping once the batch holds `cap` bytes.
    fn read(&mut self, max: usize, end: u64, to_the_end: bool, cap: usize) -> Result<SourceBatch, ReplayError> {
        let io = |path: &Path, e| ReplayError::Io { path: path.to_path_buf(), source: e };
        let mut batch = SourceBatch::with_capacity(max.min(1 << 16), &mut self.spare);
        while batch.len() + batch.bad.len() < max && self.pos < end && batch.bytes() < cap {
            // Lines are taken straight from the reader's buffer; one that straddles the end of
            // the buffer (or the file's last, unfinished line) is collected in `buf`.
            let available = self.reader.fill_buf().map_err(|e| io(&self.path, e))?;
            // The line, the bytes it takes in the file, and whether it is still in the buffer.
            let (line, n, buffered) = match memchr::memchr(b'\n', available) {
                Some(i) => (&available[..i], i + 1, true),
                None => {
                    let (n, truncated) =
                        read_line_capped(&mut self.reader, &mut self.buf).map_err(|e| io(&self.path, e))?;
                    if n == 0 {
                        break;
                    }
                    if truncated {
                        self.pos += n as u64;
                        self.line += 1;
                        let position =
                            Position { stream: 0, partition: 0, offset: self.line as i64 - 1, line: self.line };
                        let error = format!("a line of {n} bytes; records are at most {} MiB", MAX_RECORD_BYTES >> 20);
                        self.buf.truncate(1 << 10);
                        batch.bad.push(BadRecord { position, error, raw: std::mem::take(&mut self.buf) });
                        continue;
                    }
                    if self.buf.last() == Some(&b'\n') {
                        (&self.buf[..n - 1], n, false)
                    } else if to_the_end {
                        // The file's last line, without its newline: the end of bounded input.
                        let upto = n.min(usize::try_from(end - self.pos).unwrap_or(usize::MAX));
                        if upto < n {
                            // A batch's recorded end inside the line (the file changed since).
                            let at = self.pos + upto as u64;
                            self.reader.seek(SeekFrom::Start(at)).map_err(|e| io(&self.path, e))?;
                        }
                        (&self.buf[..upto], upto, false)
                    } else {
                        // It may still be being written: leave it for its newline.
                        self.reader.seek(SeekFrom::Start(self.pos)).map_err(|e| io(&self.path, e))?;
                        break;
                    }
                }
            };
            self.pos += n as u64;
            self.line += 1;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.iter().all(u8::is_ascii_whitespace) {
                let default_pos = Position { stream: 0, partition: 0, offset: self.line as i64 - 1, line: self.line };
                match self.format {
                    ReplayFormat::Envelope => match decode_envelope(line, default_pos) {
                        Ok((value, key, ts, pos, headers)) => batch.push(&value, key.as_bytes(), ts, pos, headers),
                        Err(error) => batch.bad.push(BadRecord { position: default_pos, error, raw: line.to_vec() }),
                    },
                    _ => batch.push(line, b"", -1, default_pos, []),
                }
            }
            if buffered {
                self.reader.consume(n);
            }
        }
        Ok(batch)
    }
}

impl Source for ReplaySource {
    fn offsets(&self) -> Offsets {
        Offsets::Replay(self.position())
    }

    fn next_batch(&mut self, limit: Limit) -> Result<Option<SourceBatch>, SourceError> {
        let b = self.read_lines(limit.records, limit.bounded)?;
        Ok((!b.is_empty()).then_some(b))
    }

    /// Reads every line before byte `end.byte`: a recorded batch, again (the byte cap it met the
    /// first time is where `end` is).
    fn read_until(&mut self, end: &Offsets) -> Result<SourceBatch, SourceError> {
        match end {
            Offsets::Replay(end) => Ok(self.read(usize::MAX, end.byte, true, usize::MAX)?),
            found => Err(found.mismatch("replay")),
        }
    }

    fn description(&self) -> String {
        format!("replay {}", self.path.display())
    }

    fn stream_names(&self) -> Vec<String> {
        vec![self.path.display().to_string()]
    }

    fn read_available(&mut self, to_the_end: bool) -> Result<SourceBatch, SourceError> {
        Ok(self.read_lines(usize::MAX, to_the_end)?)
    }

    fn recycle(&mut self, batch: SourceBatch) {
        self.spare = Some(batch);
    }
}

/// Reads one line into `buf` (cleared first), keeping at most [`MAX_RECORD_BYTES`] of it and
/// reading past the rest; returns the bytes it took from the file and whether it cut the line.
fn read_line_capped(r: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
    buf.clear();
    let (mut n, mut cut) = (0, false);
    loop {
        let available = r.fill_buf()?;
        if available.is_empty() {
            return Ok((n, cut));
        }
        let (take, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        let room = (MAX_RECORD_BYTES + 1).saturating_sub(buf.len());
        buf.extend_from_slice(&available[..take.min(room)]);
        cut |= take > room;
        r.consume(take);
        n += take;
        if done {
            return Ok((n, cut));
        }
    }
}

type Decoded = (Vec<u8>, String, i64, Position, Vec<(String, Vec<u8>)>);

fn decode_envelope(line: &[u8], default: Position) -> Result<Decoded, String> {
    let e: Envelope = serde_json::from_slice(line).map_err(|e| format!("not a recorded-event envelope: {e}"))?;
    let value = match (e.value, e.value_base64) {
        (Some(serde_json::Value::String(s)), None) => s.into_bytes(),
        (Some(other), None) => other.to_string().into_bytes(),
        (None, Some(b64)) => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| format!("value_base64 is not base64: {e}"))?
        }
        (Some(_), Some(_)) => return Err("an envelope has `value` or `value_base64`, not both".into()),
        (None, None) => return Err("not a recorded-event envelope: missing field `value`".into()),
    };
    let headers = e
        .headers
        .unwrap_or_default()
        .into_iter()
        .map(|(name, v)| {
            let value = match v {
                serde_json::Value::String(s) => s.into_bytes(),
                other => other.to_string().into_bytes(),
            };
            (name, value)
        })
        .collect();
    let pos = Position {
        stream: 0,
        partition: e.partition.unwrap_or(default.partition),
        offset: e.offset.unwrap_or(default.offset),
        line: default.line,
    };
    Ok((value, e.key.unwrap_or_default(), e.timestamp.unwrap_or(-1), pos, headers))
}

/// An envelope file's first record is an object with `value` and nothing but envelope keys.
fn detect(r: &mut impl BufRead) -> std::io::Result<ReplayFormat> {
    let mut line = Vec::new();
    while r.read_until(b'\n', &mut line)? > 0 {
        if line.iter().all(u8::is_ascii_whitespace) {
            line.clear();
            continue;
        }
        let envelope = match serde_json::from_slice::<serde_json::Value>(&line) {
            Ok(serde_json::Value::Object(m)) => {
                (m.contains_key("value") || m.contains_key("value_base64"))
                    && m.keys().all(|k| ENVELOPE_KEYS.contains(&k.as_str()))
            }
            _ => false,
        };
        return Ok(if envelope { ReplayFormat::Envelope } else { ReplayFormat::Lines });
    }
    Ok(ReplayFormat::Lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn lines_are_cut_into_batches_and_resume_where_they_stopped() {
        let f = file("{\"a\":1}\n\n{\"a\":2}\r\n{\"a\":3}\n{\"a\":4");
        let mut s = ReplaySource::open(f.path(), ReplayFormat::Auto, ReplayPosition::default()).unwrap();
        let b = s.read_lines(2, false).unwrap();
        assert_eq!(b.records.values, b"{\"a\":1}{\"a\":2}");
        assert_eq!(b.positions.iter().map(|p| p.line).collect::<Vec<_>>(), vec![1, 3]);
        let at = s.position();
        let mut s = ReplaySource::open(f.path(), ReplayFormat::Auto, at).unwrap();
        let b = s.read_lines(10, false).unwrap();
        assert_eq!(b.records.values, b"{\"a\":3}");
        assert_eq!(b.positions[0], Position { stream: 0, partition: 0, offset: 3, line: 4 });
        // The unterminated last line is not read until it is complete.
        assert_eq!(s.read_lines(10, false).unwrap().len(), 0);
    }

    /// Lines are taken from the reader's 1 MiB buffer; the ones that straddle its end, and a last
    /// line finished only after a first read, come out whole and in place.
    #[test]
    fn lines_across_the_read_buffer_and_a_line_finished_later_come_out_whole() {
        let lines: Vec<String> =
            (0..40_000).map(|i| format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i % 50))).collect();
        let mut f = file(&(lines.join("\n") + "\n{\"n\":\"la"));
        let mut s = ReplaySource::open(f.path(), ReplayFormat::Auto, ReplayPosition::default()).unwrap();
        let mut got = Vec::new();
        loop {
            let b = s.read_lines(7_000, false).unwrap();
            if b.is_empty() {
                break;
            }
            got.extend(
                crate::columns::items(&b.records.values, &b.records.value_ends)
                    .map(|v| String::from_utf8(v.to_vec()).unwrap()),
            );
        }
        assert_eq!(got, lines);
        f.write_all(b"st\"}\n").unwrap();
        let b = s.read_lines(10, false).unwrap();
        assert_eq!((b.records.values.as_slice(), b.positions[0].line), (&b"{\"n\":\"last\"}"[..], 40_001));
        let size = std::fs::metadata(f.path()).unwrap().len();
        assert_eq!(s.position(), ReplayPosition { byte: size, line: 40_001 });
    }

    #[test]
    fn envelopes_carry_key_partition_offset_timestamp_and_headers() {
        let f = file(concat!(
            "{\"value\":\"v1\",\"key\":\"k\",\"partition\":2,\"offset\":40,\"timestamp\":7,\"headers\":{\"h\":\"x\"}}\n",
            "{\"value\":{\"a\":1}}\n",
            "{\"valu\":1}\n",
        ));
        let mut s = ReplaySource::open(f.path(), ReplayFormat::Auto, ReplayPosition::default()).unwrap();
        let b = s.read_lines(10, false).unwrap();
        assert_eq!(b.records.values, b"v1{\"a\":1}");
        assert_eq!(b.records.keys, b"k");
        assert_eq!(b.records.timestamps, vec![7, -1]);
        assert_eq!(b.positions[0], Position { stream: 0, partition: 2, offset: 40, line: 1 });
        assert_eq!(b.records.headers.len(), 1);
        assert_eq!(b.bad.len(), 1);
        assert_eq!(b.bad[0].position.line, 3);
        assert!(b.bad[0].error.contains("envelope"), "{}", b.bad[0].error);
    }

    /// At the end of bounded input the last line is read even without its newline: a recorded
    /// file written without a final newline loses nothing. A re-run reads it again the same way.
    #[test]
    fn a_bounded_read_takes_the_last_line_without_its_newline() {
        let f = file("{\"a\":1}\n{\"a\":2}");
        let mut s = ReplaySource::open(f.path(), ReplayFormat::Auto, ReplayPosition::default()).unwrap();
        let b = s.read_lines(10, true).unwrap();
        assert_eq!((b.records.values.as_slice(), b.len()), (&b"{\"a\":1}{\"a\":2}"[..], 2));
        assert_eq!(s.position(), ReplayPosition { byte: 15, line: 2 });
        assert_eq!(s.read_lines(10, true).unwrap().len(), 0);
        let mut again = ReplaySource::open(f.path(), ReplayFormat::Auto, ReplayPosition { byte: 8, line: 1 }).unwrap();
        let b = again.read_until(&Offsets::Replay(ReplayPosition { byte: 15, line: 2 })).unwrap();
        assert_eq!((b.records.values.as_slice(), b.positions[0].line), (&b"{\"a\":2}"[..], 2));
    }

    proptest::proptest! {
        /// Any bytes, read in batches of any size, either way a line may end: every non-blank
        /// line is one record or one bad record, in order, at its own line; nothing panics.
        #[test]
        fn any_file_reads_as_records_and_bad_records_line_by_line(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
                    proptest::prelude::Just(br#"{"value":"v","partition":1,"offset":-5,"headers":{"h":1}}"#.to_vec()),
                    proptest::prelude::Just(br#"{"value_base64":"!!","key":"k"}"#.to_vec()),
                ],
                0..30,
            ),
            batch in 1usize..8,
            envelope in proptest::prelude::any::<bool>(),
        ) {
            let lines: Vec<Vec<u8>> = lines.into_iter().map(|l| l.into_iter().filter(|&b| b != b'\n').collect()).collect();
            let mut text = lines.join(&b'\n');
            text.push(b'\n');
            let f = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(f.path(), &text).unwrap();
            let format = if envelope { ReplayFormat::Envelope } else { ReplayFormat::Auto };
            let mut s = ReplaySource::open(f.path(), format, ReplayPosition::default()).unwrap();
            let mut seen = Vec::new();
            loop {
                let b = s.read_lines(batch, true).unwrap();
                if b.is_empty() {
                    break;
                }
                seen.extend(b.positions.iter().map(|p| p.line));
                seen.extend(b.bad.iter().map(|p| p.position.line));
            }
            seen.sort_unstable();
            let want: Vec<u64> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.strip_suffix(b"\r").unwrap_or(l).iter().all(u8::is_ascii_whitespace))
                .map(|(i, _)| i as u64 + 1)
                .collect();
            proptest::prop_assert_eq!(seen, want);
        }
    }

    #[test]
    fn a_batch_stops_at_its_byte_cap_and_a_re_read_reads_the_same() {
        let f = file(&"{\"a\":1}\n".repeat(100));
        let mut s = ReplaySource::open(f.path(), ReplayFormat::Auto, ReplayPosition::default()).unwrap();
        let b = s.read(usize::MAX, u64::MAX, true, 50).unwrap();
        assert_eq!(b.len(), 8, "the eighth record of 7 bytes reaches 50");
        let end = s.position();
        let mut again = ReplaySource::open(f.path(), ReplayFormat::Auto, ReplayPosition::default()).unwrap();
        assert_eq!(again.read_until(&Offsets::Replay(end)).unwrap().len(), 8);
    }

    #[test]
    fn a_line_over_the_record_limit_is_a_bad_record_and_the_next_line_is_read() {
        let mut text = vec![b'x'; MAX_RECORD_BYTES + 10];
        text.extend_from_slice(b"\n{\"a\":1}\n");
        let f = file("");
        std::fs::write(f.path(), &text).unwrap();
        let mut s = ReplaySource::open(f.path(), ReplayFormat::Lines, ReplayPosition::default()).unwrap();
        let b = s.read_lines(10, true).unwrap();
        assert_eq!((b.bad.len(), b.bad[0].raw.len(), b.len()), (1, 1 << 10, 1));
        assert!(b.bad[0].error.contains("at most 64 MiB"), "{}", b.bad[0].error);
        assert_eq!(b.positions[0].line, 2);
    }
}
